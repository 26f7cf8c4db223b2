//! Least privilege, on the template as written and as SAM transforms it: what each role may
//! do, and a checker that is shown to catch each kind of violation.

use super::*;

/// A policy document and where it comes from.
pub(super) struct Doc {
    pub(super) owner: String,
    pub(super) doc: Value,
    /// A resource policy (queue, bucket, topic) rather than an identity policy.
    pub(super) resource_policy: bool,
    /// Identity policy of a role Lambda assumes.
    pub(super) lambda_role: bool,
    /// Identity policy of a role DMS assumes.
    pub(super) dms_role: bool,
}

pub(super) fn trusts(role: &Value, service: &str) -> bool {
    statements(&role["Properties"]["AssumeRolePolicyDocument"])
        .iter()
        .any(|s| {
            strings(&s["Principal"]["Service"])
                .iter()
                .any(|p| p == service)
        })
}

pub(super) fn policy_docs(template: &Value) -> Vec<Doc> {
    let mut docs = Vec::new();
    let empty = serde_json::Map::new();
    let resources = template["Resources"].as_object().unwrap_or(&empty);
    for (id, r) in resources {
        let props = &r["Properties"];
        match r["Type"].as_str().unwrap_or("") {
            "AWS::IAM::Role" => {
                let lambda_role = trusts(r, "lambda.amazonaws.com");
                let dms_role = trusts(r, "dms.amazonaws.com");
                for p in props["Policies"].as_array().into_iter().flatten() {
                    docs.push(Doc {
                        owner: id.clone(),
                        doc: p["PolicyDocument"].clone(),
                        resource_policy: false,
                        lambda_role,
                        dms_role,
                    });
                }
            }
            "AWS::IAM::Policy" | "AWS::IAM::ManagedPolicy" => {
                let lambda_role = strings(&props["Roles"]).iter().any(|role| {
                    let name = role.trim_start_matches("${").trim_end_matches('}');
                    resources
                        .get(name)
                        .is_some_and(|res| trusts(res, "lambda.amazonaws.com"))
                });
                docs.push(Doc {
                    owner: id.clone(),
                    doc: props["PolicyDocument"].clone(),
                    resource_policy: false,
                    lambda_role,
                    dms_role: false,
                });
            }
            "AWS::SQS::QueuePolicy" | "AWS::S3::BucketPolicy" | "AWS::SNS::TopicPolicy" => {
                docs.push(Doc {
                    owner: id.clone(),
                    doc: props["PolicyDocument"].clone(),
                    resource_policy: true,
                    lambda_role: false,
                    dms_role: false,
                });
            }
            _ => {}
        }
    }
    docs
}

pub(super) const DMS_OBJECTS: &str = "arn:${AWS::Partition}:s3:::${Bucket}/${DmsPrefix}*";
/// The config parameter (Parameter Store) the ingest function reads.
pub(super) const CONFIG_PARAMETER: &str =
    "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${ConfigParameter}";
pub(super) const INGEST_QUEUE: &str = "${IngestQueue.Arn}";
pub(super) const DEAD_LETTER_QUEUE: &str = "${IngestDeadLetterQueue.Arn}";
pub(super) const WAREHOUSE_OBJECTS: &str =
    "arn:${AWS::Partition}:s3:::${Bucket}/${WarehousePrefix}*";
pub(super) const CONFIG_OBJECT: &str = "arn:${AWS::Partition}:s3:::${Path}";
pub(super) const BUCKET: &str = "arn:${AWS::Partition}:s3:::${Bucket}";
pub(super) const GLUE: [&str; 3] = [
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:catalog",
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:database/${DatabaseName.Value}",
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${DatabaseName.Value}/*",
];
/// Every resource with a wildcard that a policy of the stack may name (an object prefix, the
/// database's tables, the table bucket's tables), and `*` for `lakeformation:GetDataAccess`
/// alone: nothing else.
pub(super) const WILDCARD_RESOURCES: [&str; 5] =
    [DMS_OBJECTS, WAREHOUSE_OBJECTS, GLUE[2], TABLES, "*"];
/// A table bucket, created by the stack or given as a parameter, and the tables in it (a table's
/// ARN is `<bucket ARN>/table/<table id>`: namespaces are not part of it).
pub(super) const TABLE_BUCKETS: [&str; 2] = ["${TableBucket.TableBucketARN}", "${TableBucketArn}"];
pub(super) const TABLES: &str = "${Bucket}/table/*";
/// What the functions do on a table bucket: create namespaces and tables, list them (compact);
/// read the bucket (the REST endpoint's `GET /v1/config`).
pub(super) const S3TABLES_BUCKET_ACTIONS: [&str; 4] = [
    "s3tables:CreateNamespace",
    "s3tables:CreateTable",
    "s3tables:ListTables",
    "s3tables:GetTableBucket",
];
/// The REST catalog's secret, and the keys a function may use: the landing bucket's (decrypt DMS
/// files), the secret's (decrypt, through Secrets Manager) and the warehouse's (data keys and
/// decrypt, through S3 on a warehouse bucket).
pub(super) const REST_SECRET: &str = "${RestSecretArn}";
pub(super) const LANDING_KEY: &str = "${LandingBucketKmsKeyArn}";
pub(super) const SECRET_KEY: &str = "${RestSecretKmsKeyArn}";
pub(super) const WAREHOUSE_KEY: &str = "${WarehouseKmsKeyArn}";
/// What the DMS role may do with the landing bucket's key (an SSE-KMS S3 target).
pub(super) const DMS_KMS_ACTIONS: [&str; 4] = [
    "kms:GenerateDataKey",
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:DescribeKey",
];
/// The Glue actions of Glue's Data Catalog API and of its Iceberg REST endpoint.
pub(super) const GLUE_ACTIONS: [&str; 7] = [
    "glue:GetCatalog",
    "glue:GetDatabase",
    "glue:CreateDatabase",
    "glue:GetTable",
    "glue:GetTables",
    "glue:CreateTable",
    "glue:UpdateTable",
];
/// What they do on a table: read and swap its pointer, read and write its files.
pub(super) const S3TABLES_TABLE_ACTIONS: [&str; 4] = [
    "s3tables:GetTableMetadataLocation",
    "s3tables:UpdateTableMetadataLocation",
    "s3tables:GetTableData",
    "s3tables:PutTableData",
];
pub(super) const S3_WRITES: [&str; 4] = [
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:PutObjectTagging",
];

/// Every least-privilege violation of a template (empty = fine).
pub(super) fn least_privilege_violations(template: &Value) -> Vec<String> {
    let mut v = Vec::new();
    let empty = serde_json::Map::new();
    let resources = template["Resources"].as_object().unwrap_or(&empty);
    let log_groups: BTreeSet<String> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Logs::LogGroup")
        .map(|(id, _)| format!("${{{id}.Arn}}"))
        .collect();

    for (id, r) in resources {
        if r["Type"] == "AWS::IAM::Role"
            && !strings(&r["Properties"]["ManagedPolicyArns"]).is_empty()
        {
            v.push(format!(
                "{id}: managed policies {:?} (AWSLambdaBasicExecutionRole & co. use Resource \"*\")",
                strings(&r["Properties"]["ManagedPolicyArns"])
            ));
        }
    }

    for d in policy_docs(template) {
        let sts = statements(&d.doc);
        for s in &sts {
            let sid = s["Sid"].as_str().unwrap_or("(no Sid)");
            let at = format!("{} / {sid}", d.owner);
            if s["Effect"] != "Allow" {
                continue;
            }
            if s.get("NotAction").is_some() || s.get("NotResource").is_some() {
                v.push(format!("{at}: NotAction/NotResource"));
            }
            let actions = strings(&s["Action"]);
            let res = strings(&s["Resource"]);
            for a in &actions {
                if a.contains('*') {
                    v.push(format!("{at}: wildcard action {a}"));
                }
            }
            if res.is_empty() {
                v.push(format!("{at}: no Resource"));
            }
            // lakeformation:GetDataAccess has no resource type: "*" is the only resource IAM
            // accepts for it (Lake Formation's own grants decide what it vends), alone in its
            // statement.
            let resourceless = actions == ["lakeformation:GetDataAccess"];
            for r in &res {
                if r == "*" && !resourceless {
                    v.push(format!("{at}: Resource \"*\""));
                }
                if r.contains('*') && !WILDCARD_RESOURCES.contains(&r.as_str()) {
                    v.push(format!(
                        "{at}: a wildcard resource not in WILDCARD_RESOURCES: {r}"
                    ));
                }
            }
            if d.resource_policy
                && !s["Principal"]["Service"].is_null()
                && !s["Condition"].to_string().contains("aws:SourceArn")
            {
                v.push(format!(
                    "{at}: service principal without an aws:SourceArn condition"
                ));
            }
            // S3 object ARNs in any Allow: only under the two prefixes (or the config object).
            for r in &res {
                if r.contains(":s3:::") && r.contains('/') {
                    let ok = r == DMS_OBJECTS || r == WAREHOUSE_OBJECTS || r == CONFIG_OBJECT;
                    if !ok {
                        v.push(format!("{at}: S3 object ARN outside the prefixes: {r}"));
                    }
                }
            }
            // ---- The DMS role: KMS only with the landing bucket's key, for writing objects.
            if d.dms_role {
                for a in actions.iter().filter(|a| a.starts_with("kms:")) {
                    if !DMS_KMS_ACTIONS.contains(&a.as_str()) {
                        v.push(format!("{at}: unexpected KMS action {a} for DMS"));
                    }
                    if res.iter().any(|r| r != LANDING_KEY) {
                        v.push(format!(
                            "{at}: {a} on {res:?}, not the landing bucket's key"
                        ));
                    }
                }
            }
            if !d.lambda_role {
                continue;
            }
            // ---- Lambda roles: S3
            let s3: Vec<&String> = actions.iter().filter(|a| a.starts_with("s3:")).collect();
            for a in &s3 {
                match a.as_str() {
                    "s3:ListBucket" => {
                        if res.iter().any(|r| r != BUCKET) {
                            v.push(format!("{at}: s3:ListBucket on {res:?}"));
                        }
                        let prefixes = strings(&s["Condition"]["StringLike"]["s3:prefix"]);
                        if prefixes.is_empty()
                            || prefixes
                                .iter()
                                .any(|p| p != "${DmsPrefix}*" && p != "${WarehousePrefix}*")
                        {
                            v.push(format!(
                                "{at}: s3:ListBucket without an s3:prefix condition on a prefix ({prefixes:?})"
                            ));
                        }
                    }
                    "s3:GetObject" => {}
                    w if S3_WRITES.contains(&w) => {
                        if res.iter().any(|r| r != WAREHOUSE_OBJECTS) {
                            v.push(format!("{at}: {w} outside the warehouse prefix ({res:?})"));
                        }
                    }
                    other => v.push(format!("{at}: unexpected S3 action {other}")),
                }
            }
            // ---- Glue
            for a in actions.iter().filter(|a| a.starts_with("glue:")) {
                if !GLUE_ACTIONS.contains(&a.as_str()) {
                    v.push(format!("{at}: unexpected Glue action {a}"));
                }
            }
            if actions.iter().any(|a| a.starts_with("glue:")) {
                for r in &res {
                    if !GLUE.contains(&r.as_str()) {
                        v.push(format!("{at}: Glue resource outside the database: {r}"));
                    }
                }
            }
            // ---- S3 Tables: the one table bucket; pointer and data actions only on its tables
            for a in actions.iter().filter(|a| a.starts_with("s3tables:")) {
                let allowed: &[&str] = if S3TABLES_BUCKET_ACTIONS.contains(&a.as_str()) {
                    &TABLE_BUCKETS
                } else if S3TABLES_TABLE_ACTIONS.contains(&a.as_str()) {
                    &[TABLES]
                } else {
                    v.push(format!("{at}: unexpected S3 Tables action {a}"));
                    continue;
                };
                for r in &res {
                    if !allowed.contains(&r.as_str()) {
                        v.push(format!("{at}: {a} on {r}"));
                    }
                }
            }
            // ---- Logs: only its own log groups
            if actions.iter().any(|a| a.starts_with("logs:")) {
                for a in &actions {
                    if a != "logs:CreateLogStream" && a != "logs:PutLogEvents" {
                        v.push(format!("{at}: unexpected logs action {a}"));
                    }
                }
                for r in &res {
                    if !log_groups.contains(r) {
                        v.push(format!("{at}: logs on {r}, not a log group of this stack"));
                    }
                }
            }
            // ---- SQS: consume the ingest queue; send to its dead-letter queue only
            for a in actions.iter().filter(|a| a.starts_with("sqs:")) {
                let consume = [
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:ChangeMessageVisibility",
                    "sqs:GetQueueAttributes",
                ];
                let queue = if consume.contains(&a.as_str()) {
                    INGEST_QUEUE
                } else if a == "sqs:SendMessage" {
                    DEAD_LETTER_QUEUE
                } else {
                    v.push(format!("{at}: unexpected SQS action {a}"));
                    continue;
                };
                if res.iter().any(|r| r != queue) {
                    v.push(format!("{at}: {a} on {res:?}, not {queue}"));
                }
            }
            // ---- Parameter Store: read the config parameter, nothing else
            for a in actions.iter().filter(|a| a.starts_with("ssm:")) {
                if a != "ssm:GetParameter" {
                    v.push(format!("{at}: unexpected Parameter Store action {a}"));
                }
                if res.iter().any(|r| r != CONFIG_PARAMETER) {
                    v.push(format!("{at}: {a} on {res:?}, not the config parameter"));
                }
            }
            // ---- Secrets Manager: the REST catalog's secret, read
            for a in actions.iter().filter(|a| a.starts_with("secretsmanager:")) {
                if a != "secretsmanager:GetSecretValue" {
                    v.push(format!("{at}: unexpected Secrets Manager action {a}"));
                }
                for r in &res {
                    if r != REST_SECRET {
                        v.push(format!("{at}: {a} on {r}"));
                    }
                }
            }
            // ---- Lake Formation: vended credentials only
            for a in actions.iter().filter(|a| a.starts_with("lakeformation:")) {
                if a != "lakeformation:GetDataAccess" {
                    v.push(format!("{at}: unexpected Lake Formation action {a}"));
                }
            }
            // ---- KMS: decrypt DMS files and the secret (through Secrets Manager); data keys and
            // decrypt with the warehouse's key (through S3, but on a table bucket's tables)
            let via = strings(&s["Condition"]["StringEquals"]["kms:ViaService"]);
            for a in actions.iter().filter(|a| a.starts_with("kms:")) {
                for r in &res {
                    let allowed: &[&str] = match r.as_str() {
                        LANDING_KEY | SECRET_KEY => &["kms:Decrypt"],
                        WAREHOUSE_KEY => &["kms:GenerateDataKey", "kms:Decrypt"],
                        _ => {
                            v.push(format!("{at}: {a} on {r}, not a key the parameters name"));
                            continue;
                        }
                    };
                    if !allowed.contains(&a.as_str()) {
                        v.push(format!("{at}: {a} on {r}"));
                    }
                    if r == SECRET_KEY && via.iter().all(|x| !x.starts_with("secretsmanager.")) {
                        v.push(format!(
                            "{at}: {a} on the secret's key without kms:ViaService"
                        ));
                    }
                    if r == WAREHOUSE_KEY
                        && !via.is_empty()
                        && via.iter().any(|x| !x.starts_with("s3."))
                    {
                        v.push(format!("{at}: {a} on the warehouse key via {via:?}"));
                    }
                }
            }
            for a in &actions {
                let service = a.split(':').next().unwrap_or("");
                if ![
                    "s3",
                    "s3tables",
                    "glue",
                    "logs",
                    "sqs",
                    "kms",
                    "secretsmanager",
                    "lakeformation",
                    "ssm",
                ]
                .contains(&service)
                {
                    v.push(format!("{at}: unexpected action {a}"));
                }
            }
        }
    }
    v
}

/// The identity statements of the role a function runs with, rendered.
pub(super) fn role_of(template: &Value, function: &str) -> (String, Vec<Value>) {
    let role = render(&template["Resources"][function]["Properties"]["Role"]);
    assert_eq!(role.len(), 1, "{function}: Role {role:?}");
    let role_id = role[0]
        .trim_start_matches("${")
        .trim_end_matches('}')
        .trim_end_matches(".Arn")
        .to_string();
    let docs = policy_docs(template);
    let sts = docs
        .iter()
        .filter(|d| d.owner == role_id)
        .flat_map(|d| statements(&d.doc))
        .collect();
    (role_id, sts)
}

#[test]
fn iam_is_least_privilege() {
    let l = loaded();
    for (name, t) in [
        ("template.yaml", &l.raw),
        ("SAM-transformed template", &l.transformed),
    ] {
        let v = least_privilege_violations(t);
        assert!(
            v.is_empty(),
            "{name}: least-privilege violations:\n  {}",
            v.join("\n  ")
        );
    }

    let t = &l.transformed;
    // Ingest: reads the DMS prefix, reads and writes the warehouse, consumes its queue.
    let (ingest_role, ingest) = role_of(t, "IngestFunction");
    let has = |sts: &[Value], action: &str, resource: &str| {
        sts.iter().any(|s| {
            strings(&s["Action"]).iter().any(|a| a == action)
                && strings(&s["Resource"]).iter().any(|r| r == resource)
        })
    };
    assert!(
        has(&ingest, "s3:GetObject", DMS_OBJECTS),
        "{ingest_role}: cannot read DMS files"
    );
    assert!(
        has(&ingest, "s3:PutObject", WAREHOUSE_OBJECTS),
        "{ingest_role}: cannot write the warehouse"
    );
    assert!(
        has(&ingest, "s3:DeleteObject", WAREHOUSE_OBJECTS),
        "{ingest_role}: cannot delete its own lost files"
    );
    assert!(
        has(&ingest, "s3:ListBucket", BUCKET),
        "{ingest_role}: cannot list"
    );
    for a in [
        "glue:GetDatabase",
        "glue:CreateDatabase",
        "glue:GetTable",
        "glue:GetTables",
        "glue:CreateTable",
        "glue:UpdateTable",
    ] {
        for r in GLUE {
            assert!(has(&ingest, a, r), "{ingest_role}: {a} on {r} missing");
        }
    }
    assert!(
        has(&ingest, "sqs:ReceiveMessage", INGEST_QUEUE),
        "{ingest_role}: cannot poll its queue"
    );
    assert!(
        has(&ingest, "sqs:SendMessage", DEAD_LETTER_QUEUE),
        "{ingest_role}: cannot send a record no retry can help to the dead-letter queue"
    );
    assert!(
        has(&ingest, "ssm:GetParameter", CONFIG_PARAMETER),
        "{ingest_role}: cannot read the config parameter"
    );
    assert!(
        has(&ingest, "logs:PutLogEvents", "${IngestLogGroup.Arn}"),
        "{ingest_role}: cannot log"
    );

    // Compact: warehouse and Glue read + UpdateTable only; never the landing bucket or a queue.
    let (compact_role, compact) = role_of(t, "CompactFunction");
    assert_ne!(
        ingest_role, compact_role,
        "the functions must not share a role"
    );
    assert!(
        has(&compact, "s3:DeleteObject", WAREHOUSE_OBJECTS),
        "{compact_role}: cannot remove orphans"
    );
    assert!(
        has(&compact, "glue:UpdateTable", GLUE[2]),
        "{compact_role}: cannot commit"
    );
    assert!(
        has(&compact, "logs:PutLogEvents", "${CompactLogGroup.Arn}"),
        "{compact_role}: cannot log"
    );
    let compact_text = serde_json::to_string(&compact).expect("json");
    for forbidden in [
        "LandingBucket",
        "DmsPrefix",
        "sqs:",
        "ssm:",
        "ConfigS3Uri",
        "ConfigParameter",
        "glue:Create",
        "s3tables:Create",
    ] {
        assert!(
            !compact_text.contains(forbidden),
            "{compact_role} mentions {forbidden}: {compact_text}"
        );
    }
}

/// The checker itself catches what it is meant to catch.
#[test]
fn least_privilege_checker_catches_violations() {
    let role = |statement: Value| {
        json!({"Resources": {
            "R": {"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": {"Statement": [{"Effect": "Allow",
                    "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]},
                "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [statement]}}]}}}})
    };
    let cases = [
        json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "s3:*", "Resource": {"Fn::Sub": DMS_OBJECTS}}),
        json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${Bucket}/*"}}),
        json!({"Effect": "Allow", "Action": "s3:PutObject", "Resource": {"Fn::Sub": DMS_OBJECTS}}),
        json!({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": {"Fn::Sub": BUCKET}}),
        json!({"Effect": "Allow", "Action": "glue:GetTable", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/*"}}),
        json!({"Effect": "Allow", "Action": "logs:PutLogEvents", "Resource": "arn:aws:logs:us-east-1:123456789012:log-group:x:*"}),
        json!({"Effect": "Allow", "Action": ["glue:GetTable", "glue:DeleteTable"], "Resource": {"Fn::Sub": GLUE[2]}}),
        json!({"Fn::If": ["C", {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "arn:aws:iam::1:role/x"}, {"Ref": "AWS::NoValue"}]}),
        json!({"Effect": "Allow", "Action": "s3tables:DeleteTable", "Resource": {"Fn::Sub": TABLES}}),
        json!({"Effect": "Allow", "Action": "s3tables:GetTableData", "Resource": {"Ref": "TableBucketArn"}}),
        json!({"Effect": "Allow", "Action": "s3tables:CreateTable", "Resource": "arn:aws:s3tables:us-east-1:123456789012:bucket/*"}),
        json!({"Effect": "Allow", "Action": ["lakeformation:GetDataAccess", "glue:GetTable"], "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "lakeformation:GrantPermissions", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "arn:aws:secretsmanager:us-east-1:123456789012:secret:other-AbCdEf"}),
        json!({"Effect": "Allow", "Action": "secretsmanager:ListSecrets", "Resource": {"Ref": "RestSecretArn"}}),
        json!({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "arn:aws:kms:us-east-1:123456789012:key/other"}),
        json!({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": {"Ref": "RestSecretKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": {"Ref": "LandingBucketKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:Encrypt", "Resource": {"Ref": "WarehouseKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": {"Ref": "WarehouseKmsKeyArn"},
            "Condition": {"StringEquals": {"kms:ViaService": "sqs.us-east-1.amazonaws.com"}}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/*"}}),
        json!({"Effect": "Allow", "Action": "ssm:PutParameter", "Resource": {"Fn::Sub": CONFIG_PARAMETER}}),
        json!({"Effect": "Allow", "Action": "ssm:GetParametersByPath", "Resource": {"Fn::Sub": CONFIG_PARAMETER}}),
        json!({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["IngestQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": "sqs:ReceiveMessage", "Resource": {"Fn::GetAtt": ["IngestDeadLetterQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": "sqs:PurgeQueue", "Resource": {"Fn::GetAtt": ["IngestDeadLetterQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${Bucket}/config/*"}}),
    ];
    for c in cases {
        let v = least_privilege_violations(&role(c.clone()));
        assert!(!v.is_empty(), "not caught: {c}");
    }
    let fine = json!({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": {"Fn::Sub": BUCKET},
        "Condition": {"StringLike": {"s3:prefix": {"Fn::Sub": "${DmsPrefix}*"}}}});
    let v = least_privilege_violations(&role(fine));
    assert!(v.is_empty(), "false positive: {v:?}");
    for fine in [
        json!({"Effect": "Allow", "Action": "lakeformation:GetDataAccess", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": {"Fn::Sub": CONFIG_PARAMETER}}),
        json!({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["IngestDeadLetterQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Resource": {"Ref": "WarehouseKmsKeyArn"},
            "Condition": {"StringEquals": {"kms:ViaService": {"Fn::Sub": "s3.${AWS::Region}.${AWS::URLSuffix}"}}}}),
        json!({"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": "RestSecretArn"}}),
        json!({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": {"Ref": "RestSecretKmsKeyArn"},
            "Condition": {"StringEquals": {"kms:ViaService": {"Fn::Sub": "secretsmanager.${AWS::Region}.${AWS::URLSuffix}"}}}}),
    ] {
        let v = least_privilege_violations(&role(fine.clone()));
        assert!(v.is_empty(), "false positive {fine}: {v:?}");
    }
    let managed = json!({"Resources": {"R": {"Type": "AWS::IAM::Role", "Properties": {
        "ManagedPolicyArns": ["arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]}}}});
    assert!(!least_privilege_violations(&managed).is_empty());

    // The DMS role: what an SSE-KMS target needs, with the landing bucket's key alone.
    let dms = |statement: Value| {
        json!({"Resources": {
            "D": {"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": {"Statement": [{"Effect": "Allow",
                    "Principal": {"Service": "dms.amazonaws.com"}, "Action": "sts:AssumeRole"}]},
                "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [statement]}}]}}}})
    };
    for c in [
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": {"Ref": "WarehouseKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:ReEncryptFrom", "Resource": {"Ref": "LandingBucketKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": "*"}),
    ] {
        assert!(
            !least_privilege_violations(&dms(c.clone())).is_empty(),
            "not caught: {c}"
        );
    }
    let fine = json!({"Effect": "Allow", "Action": DMS_KMS_ACTIONS, "Resource": {"Ref": "LandingBucketKmsKeyArn"}});
    let v = least_privilege_violations(&dms(fine));
    assert!(v.is_empty(), "false positive: {v:?}");
}
