//! Deployment defaults: the config in Parameter Store, a Glue database per stack, KMS keys only
//! when named, no endpoint overrides, compaction runs that do not overlap, an EventBridge rule
//! that never matches the warehouse's writes, and cost.md's count of metrics.

use super::*;

/// A template value as CloudFormation would compute it for these parameters: `Ref` of
/// parameters and pseudo parameters, `Fn::If`, `Fn::Join`, `Fn::Select`, `Fn::Split`, and
/// `Fn::Sub` of parameters; other references come out as `${Name}`.
pub(super) fn eval(t: &Value, v: &Value, params: &[(&str, &str)]) -> Value {
    let s = |x: &Value| -> String {
        match eval(t, x, params) {
            Value::String(s) => s,
            other => panic!("not a string: {other}"),
        }
    };
    match v {
        Value::Object(m) if m.len() == 1 => {
            let (k, a) = m.iter().next().expect("one key");
            match k.as_str() {
                "Ref" => {
                    let name = a.as_str().expect("Ref name");
                    if t["Parameters"].get(name).is_some() || name.starts_with("AWS::") {
                        Value::String(param_value(t, name, params))
                    } else {
                        Value::String(format!("${{{name}}}"))
                    }
                }
                "Fn::If" => {
                    let name = a[0].as_str().expect("condition");
                    let taken = condition(t, &json!({ "Condition": name }), params);
                    eval(t, &a[if taken { 1 } else { 2 }], params)
                }
                "Fn::Join" => Value::String(
                    a[1].as_array()
                        .expect("Join list")
                        .iter()
                        .map(s)
                        .collect::<Vec<_>>()
                        .join(a[0].as_str().expect("separator")),
                ),
                "Fn::Split" => Value::Array(
                    s(&a[1])
                        .split(a[0].as_str().expect("literal delimiter"))
                        .map(|x| Value::String(x.into()))
                        .collect(),
                ),
                "Fn::Select" => {
                    let i = as_i64(&a[0]) as usize;
                    match eval(t, &a[1], params) {
                        Value::Array(items) => items[i].clone(),
                        other => panic!("Select from {other}"),
                    }
                }
                "Fn::Sub" => {
                    let mut text = a.as_str().expect("plain Sub").to_string();
                    for p in t["Parameters"].as_object().expect("parameters").keys() {
                        text = text.replace(&format!("${{{p}}}"), &param_value(t, p, params));
                    }
                    for (p, _) in PSEUDO {
                        text = text.replace(&format!("${{{p}}}"), &param_value(t, p, params));
                    }
                    Value::String(text)
                }
                _ => Value::String(render(v).join("")),
            }
        }
        other => other.clone(),
    }
}

#[test]
fn the_config_goes_to_parameter_store_from_tables_config() {
    let raw = &loaded().raw;
    let p = &raw["Parameters"]["TablesConfig"];
    let text = p["Default"].as_str().expect("a default config");
    assert_eq!(
        as_i64(&p["MaxLength"]),
        4096,
        "CloudFormation's parameter value limit"
    );
    assert!(text.len() <= 4096, "the default is {} bytes", text.len());

    // The default parses, and its [defaults] name the columns the recommended endpoint settings
    // produce: the commit timestamp column and the AR_H_CHANGE_SEQ column.
    let settings = read_json("infra/dms-endpoint-settings.json");
    let mappings = read_json("infra/dms-table-mappings.json");
    let change_seq = mappings["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["rule-action"] == "add-column" && r["expression"] == "$AR_H_CHANGE_SEQ")
        .and_then(|r| r["value"].as_str())
        .expect("the table mappings add an AR_H_CHANGE_SEQ column");
    let config = dms2iceberg::config::Config::from_toml(text)
        .unwrap_or_else(|e| panic!("TablesConfig's default does not parse: {e}\n{text}"));
    let any = config.table("sales", "orders").expect("a table's settings");
    assert_eq!(any.change_sequence_column.as_deref(), Some(change_seq));
    assert_eq!(
        any.commit_timestamp_column.as_deref(),
        settings["TimestampColumnName"].as_str()
    );
    assert_eq!(any.primary_key, None, "no table is configured by default");
    // Its commented example is a valid entry once uncommented.
    let example: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(x) if x.starts_with("[tables.") || x.starts_with("primary_key") => x,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(example, text, "the default has a commented table example");
    let config = dms2iceberg::config::Config::from_toml(&example).expect("the example parses");
    assert_eq!(
        config
            .table("sales", "orders")
            .expect("settings")
            .primary_key,
        Some(vec!["order_id".to_string()])
    );

    // Default: the stack writes it into the config parameter, which the ingest function reads
    // (ssm:<name>) and may read, alone.
    let t = deployed(raw, &[]);
    let param = &t["Resources"]["ConfigParameter"];
    assert_eq!(param["Type"], "AWS::SSM::Parameter");
    assert_eq!(param["Properties"]["Type"], "String");
    assert_eq!(param["Properties"]["Value"], json!({"Ref": "TablesConfig"}));
    assert_eq!(
        eval(raw, &param["Properties"]["Name"], &[]),
        "/dms2iceberg/dms2iceberg/config"
    );
    let ingest_env = &t["Resources"]["IngestFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        render(&ingest_env["DMS2ICEBERG_CONFIG"]),
        ["ssm:${ConfigParameter}"]
    );
    let ingest = allowed(&t, "IngestFunction");
    let compact = allowed(&t, "CompactFunction");
    let can = |grants: &[(String, Vec<String>)], a: &str, r: &str| {
        grants
            .iter()
            .any(|(x, rs)| x == a && rs.iter().any(|y| y == r))
    };
    assert!(can(&ingest, "ssm:GetParameter", CONFIG_PARAMETER));
    assert!(
        !ingest
            .iter()
            .any(|(_, rs)| rs.iter().any(|r| r == CONFIG_OBJECT))
    );
    assert!(t["Outputs"]["ConfigParameterName"].is_object());
    // ConfigS3Uri instead: no parameter, the object alone.
    let uri = [("ConfigS3Uri", "s3://my-bucket/config/dms2iceberg.toml")];
    let t = deployed(raw, &uri);
    assert!(t["Resources"].get("ConfigParameter").is_none());
    let ingest_env = &t["Resources"]["IngestFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        render(&ingest_env["DMS2ICEBERG_CONFIG"]),
        ["${ConfigS3Uri}"]
    );
    let ingest_s3 = allowed(&t, "IngestFunction");
    assert!(can(&ingest_s3, "s3:GetObject", CONFIG_OBJECT));
    assert!(!ingest_s3.iter().any(|(a, _)| a.starts_with("ssm:")));
    // The compact function reads no config either way.
    for grants in [compact, allowed(&t, "CompactFunction")] {
        assert!(
            !grants
                .iter()
                .any(|(a, rs)| a.starts_with("ssm:") || rs.iter().any(|r| r == CONFIG_OBJECT))
        );
    }
}

#[test]
fn records_no_retry_can_help_go_to_the_dead_letter_queue_at_once() {
    let raw = &loaded().raw;
    let t = deployed(raw, &[]);
    let env = &t["Resources"]["IngestFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        render(&env["DMS2ICEBERG_DEAD_LETTER_QUEUE_URL"]),
        ["${IngestDeadLetterQueue}"],
        "the queue's URL (Ref)"
    );
    let ingest = allowed(&t, "IngestFunction");
    let sends: Vec<&Vec<String>> = ingest
        .iter()
        .filter(|(a, _)| a == "sqs:SendMessage")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(sends, [&vec![DEAD_LETTER_QUEUE.to_string()]]);
    // An SQS-managed key: sending needs no KMS grant.
    let dlq = &t["Resources"]["IngestDeadLetterQueue"]["Properties"];
    assert_eq!(dlq["SqsManagedSseEnabled"], true);
    assert!(dlq.get("KmsMasterKeyId").is_none());
    assert!(
        !allowed(&t, "CompactFunction")
            .iter()
            .any(|(a, _)| a.starts_with("sqs:"))
    );
}

#[test]
fn the_glue_database_is_unique_per_stack() {
    let raw = &loaded().raw;
    let db = &raw["Resources"]["DatabaseName"]["Properties"];
    assert_eq!(db["AllowedPattern"], "^[a-z0-9_]{1,255}$");
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 255
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !s.starts_with('_')
            && !s.ends_with('_')
    };
    let a = eval(raw, &db["Value"], &[]);
    assert_eq!(a, "dms2iceberg_4f9b2c1e", "from the stack id");
    let b = eval(
        raw,
        &db["Value"],
        &[(
            "AWS::StackId",
            "arn:aws:cloudformation:eu-west-1:111122223333:stack/dms2iceberg/9a0c77d2-5a3d-11ef-9c2b-0a1b2c3d4e5f",
        )],
    );
    assert_ne!(
        a, b,
        "the same stack name created again gets another database"
    );
    for v in [&a, &b] {
        assert!(
            valid(v.as_str().expect("a name")),
            "{v}: not a Glue, Athena and S3 Tables name"
        );
    }
    assert_eq!(
        eval(raw, &db["Value"], &[("GlueDatabaseName", "sales")]),
        "sales"
    );
    // Everything names the database through that one value.
    let t = deployed(raw, &[]);
    assert_eq!(
        render(&t["Globals"]["Function"]["Environment"]["Variables"]["DMS2ICEBERG_GLUE_DATABASE"]),
        ["${DatabaseName.Value}"]
    );
    assert_eq!(
        render(&t["Resources"]["GlueDatabase"]["Properties"]["DatabaseInput"]["Name"]),
        ["${DatabaseName.Value}"]
    );
    assert_eq!(t["Resources"]["GlueDatabase"]["DeletionPolicy"], "Retain");
    assert_eq!(
        render(&t["Outputs"]["GlueDatabase"]["Value"]),
        ["${DatabaseName.Value}"]
    );
    let text = serde_json::to_string(&raw["Resources"]).expect("json");
    assert_eq!(
        text.matches("\"Ref\":\"GlueDatabaseName\"").count()
            + text.matches("${GlueDatabaseName}").count(),
        1,
        "GlueDatabaseName is read through DatabaseName alone"
    );
}

#[test]
fn kms_keys_are_granted_only_when_named() {
    let raw = &loaded().raw;
    const KEY: &str = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let kms_of = |t: &Value, f: &str| -> Vec<(String, Vec<String>)> {
        allowed(t, f)
            .into_iter()
            .filter(|(a, _)| a.starts_with("kms:"))
            .collect()
    };
    let statements_on = |t: &Value, f: &str, key: &str| -> Vec<Value> {
        role_of(t, f)
            .1
            .into_iter()
            .filter(|s| strings(&s["Resource"]).iter().any(|r| r == key))
            .collect()
    };
    let encryption = |t: &Value, bucket: &str| {
        t["Resources"][bucket]["Properties"]["BucketEncryption"]
            ["ServerSideEncryptionConfiguration"][0]
            .clone()
    };
    let dms_kms = |t: &Value| -> Vec<String> {
        policy_docs(t)
            .iter()
            .filter(|d| d.dms_role)
            .flat_map(|d| statements(&d.doc))
            .flat_map(|s| strings(&s["Action"]))
            .filter(|a| a.starts_with("kms:"))
            .collect()
    };

    // No key named: no KMS anywhere, SSE-S3 buckets.
    let t = deployed(raw, &[]);
    for f in ["IngestFunction", "CompactFunction"] {
        assert!(kms_of(&t, f).is_empty(), "{f}: {:?}", kms_of(&t, f));
    }
    assert!(dms_kms(&t).is_empty());
    for b in ["LandingBucket", "WarehouseBucket"] {
        assert_eq!(
            encryption(&t, b),
            json!({"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}),
            "{b}"
        );
    }

    // The warehouse's key on Glue: both functions, data keys and decrypt, through S3 only; the
    // bucket the stack creates encrypts with it, a bucket key on.
    let t = deployed(raw, &[("WarehouseKmsKeyArn", KEY)]);
    for f in ["IngestFunction", "CompactFunction"] {
        let on_key = statements_on(&t, f, WAREHOUSE_KEY);
        assert_eq!(on_key.len(), 1, "{f}: {on_key:?}");
        let mut actions = strings(&on_key[0]["Action"]);
        actions.sort();
        assert_eq!(actions, ["kms:Decrypt", "kms:GenerateDataKey"], "{f}");
        assert_eq!(
            render(&on_key[0]["Condition"]["StringEquals"]["kms:ViaService"]),
            ["s3.${AWS::Region}.${AWS::URLSuffix}"],
            "{f}: the warehouse key through S3 only"
        );
    }
    assert_eq!(
        encryption(&t, "WarehouseBucket"),
        json!({"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms",
            "KMSMasterKeyID": {"Ref": "WarehouseKmsKeyArn"}}, "BucketKeyEnabled": true})
    );
    assert!(dms_kms(&t).is_empty(), "DMS never writes the warehouse");

    // On S3 Tables: the table bucket the stack creates encrypts with it; both functions may use
    // it on its tables.
    let t = deployed(raw, &[("WarehouseKmsKeyArn", KEY), ("Catalog", "s3tables")]);
    assert_eq!(
        t["Resources"]["TableBucket"]["Properties"]["EncryptionConfiguration"],
        json!({"SSEAlgorithm": "aws:kms", "KMSKeyArn": {"Ref": "WarehouseKmsKeyArn"}})
    );
    for f in ["IngestFunction", "CompactFunction"] {
        let on_key = statements_on(&t, f, WAREHOUSE_KEY);
        assert_eq!(on_key.len(), 1, "{f}");
        let mut actions = strings(&on_key[0]["Action"]);
        actions.sort();
        assert_eq!(actions, ["kms:Decrypt", "kms:GenerateDataKey"], "{f}");
    }
    assert!(
        deployed(raw, &[("Catalog", "s3tables")])["Resources"]["TableBucket"]["Properties"]
            .get("EncryptionConfiguration")
            .is_none()
    );
    // A REST catalog that vends credentials for storage the stack does not name: no grant.
    let t = deployed(
        raw,
        &[
            ("WarehouseKmsKeyArn", KEY),
            ("Catalog", "rest"),
            ("RestUri", "http://catalog.internal:8181"),
            ("RestVendedCredentials", "true"),
        ],
    );
    for f in ["IngestFunction", "CompactFunction"] {
        assert!(kms_of(&t, f).is_empty(), "{f}");
    }

    // The landing bucket's key: the ingest function decrypts DMS files, DMS writes them (what
    // an SSE-KMS S3 target needs), the compact function nothing; a landing bucket the stack
    // creates encrypts with it.
    let t = deployed(raw, &[("LandingBucketKmsKeyArn", KEY)]);
    assert_eq!(
        kms_of(&t, "IngestFunction"),
        [("kms:Decrypt".to_string(), vec![LANDING_KEY.to_string()])]
    );
    assert!(kms_of(&t, "CompactFunction").is_empty());
    let mut dms = dms_kms(&t);
    dms.sort();
    let mut want = DMS_KMS_ACTIONS.to_vec();
    want.sort();
    assert_eq!(dms, want);
    assert_eq!(
        encryption(&t, "LandingBucket"),
        json!({"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms",
            "KMSMasterKeyID": {"Ref": "LandingBucketKmsKeyArn"}}, "BucketKeyEnabled": true})
    );
    let v = least_privilege_violations(&t);
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn no_deployment_overrides_the_aws_endpoints() {
    let raw = &loaded().raw;
    let declared_anywhere = |t: &Value| {
        let mut found = Vec::new();
        for vars in std::iter::once(&t["Globals"]["Function"]["Environment"]["Variables"]).chain(
            ["IngestFunction", "CompactFunction"]
                .iter()
                .map(|f| &t["Resources"][*f]["Properties"]["Environment"]["Variables"]),
        ) {
            for (k, _) in vars.as_object().into_iter().flatten() {
                if k.starts_with("AWS_ENDPOINT_URL") {
                    found.push(k.clone());
                }
            }
        }
        found
    };
    let mut cases: Vec<&[(&str, &str)]> = vec![&[]];
    let catalogs = catalog_cases();
    cases.extend(catalogs.iter().map(|c| c.params));
    for params in cases {
        let t = deployed(raw, params);
        assert!(
            declared_anywhere(&t).is_empty(),
            "{params:?}: {:?} in a deployment",
            declared_anywhere(&t)
        );
    }
    // `sam local` (its pseudo account) sees it declared, so env.json can point it at an emulator.
    let local = deployed(raw, &[("AWS::AccountId", "123456789012")]);
    assert_eq!(declared_anywhere(&local), ["AWS_ENDPOINT_URL"]);
}

/// Seconds of an EventBridge `rate(...)` expression.
pub(super) fn rate_seconds(expr: &str) -> i64 {
    let inner = expr
        .strip_prefix("rate(")
        .and_then(|x| x.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a rate(): {expr}"));
    let (n, unit) = inner.split_once(' ').expect("rate(N unit)");
    let n: i64 = n.parse().expect("N");
    n * match unit.trim_end_matches('s') {
        "minute" => 60,
        "hour" => 3600,
        "day" => 86400,
        other => panic!("unit {other}"),
    }
}

#[test]
fn compaction_runs_do_not_overlap() {
    let raw = &loaded().raw;
    let timeout = as_i64(&param_default(raw, "CompactTimeout"));
    for schedule in ["CompactSchedule", "MaintenanceSchedule"] {
        let every = rate_seconds(param_default(raw, schedule).as_str().expect("a rate"));
        // A minute of slack: EventBridge fires a schedule within its minute, and a run the
        // service could not start within 60 s is dropped (below).
        assert!(
            timeout + 60 <= every,
            "CompactTimeout {timeout} s and {schedule} every {every} s: a run can still be \
             going when the next starts"
        );
    }
    let f = &raw["Resources"]["CompactFunction"]["Properties"];
    assert_eq!(render(&f["Timeout"]), ["${CompactTimeout}"]);
    assert_eq!(f["EventInvokeConfig"]["MaximumRetryAttempts"], 0);
    assert!(
        as_i64(&f["EventInvokeConfig"]["MaximumEventAgeInSeconds"]) <= 60,
        "a run delayed by throttling would start late and overlap the next"
    );
    assert_eq!(rate_seconds("rate(5 minutes)"), 300);
    assert_eq!(rate_seconds("rate(1 hour)"), 3600);
}

/// Whether the deployed rule matches an object event of `bucket`/`key`.
pub(super) fn deployed_rule_matches(
    t: &Value,
    params: &[(&str, &str)],
    bucket: &str,
    key: &str,
) -> bool {
    let p = &t["Resources"]["DmsObjectCreatedRule"]["Properties"]["EventPattern"];
    let prefix = param_value(t, "DmsPrefix", params);
    let buckets: Vec<String> = p["detail"]["bucket"]["name"]
        .as_array()
        .expect("bucket names")
        .iter()
        .flat_map(render)
        .map(|b| match b.as_str() {
            "${LandingBucket}" => "created-landing-bucket".to_string(),
            "${LandingBucketName}" => param_value(t, "LandingBucketName", params),
            other => panic!("bucket {other}"),
        })
        .collect();
    let keys: Vec<String> = p["detail"]["object"]["key"]
        .as_array()
        .expect("key patterns")
        .iter()
        .flat_map(|k| render(&k["wildcard"]))
        .map(|k| k.replace("${DmsPrefix}", &prefix))
        .collect();
    buckets.iter().any(|b| b == bucket) && keys.iter().any(|k| wildcard(k, key))
}

#[test]
fn the_rule_never_matches_the_warehouses_writes() {
    let raw = &loaded().raw;
    let accepted: [&[(&str, &str)]; 4] = [
        &[],
        &[("DmsPrefix", "")],
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
        ],
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
            ("DmsPrefix", "cdc/dms/"),
            ("WarehousePrefix", "iceberg/"),
        ],
    ];
    for params in accepted {
        assert!(broken_rules(raw, params).is_empty(), "{params:?} refused");
        let t = deployed(raw, params);
        let landing = match param_value(raw, "LandingBucketName", params) {
            b if b.is_empty() => "created-landing-bucket".to_string(),
            b => b,
        };
        let warehouse = match param_value(raw, "WarehouseBucketName", params) {
            b if b.is_empty() => "created-warehouse-bucket".to_string(),
            b => b,
        };
        let wp = param_value(raw, "WarehousePrefix", params);
        let dp = param_value(raw, "DmsPrefix", params);
        for key in [
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/data/00000-0-4c1f.parquet"),
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/data/00000-0-4c1f-deletes.parquet"),
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/metadata/00012-9a1e.metadata.json"),
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/metadata/snap-77-1-9a1e.avro"),
        ] {
            assert!(
                !deployed_rule_matches(&t, params, &warehouse, &key),
                "{params:?}: the rule matches the warehouse's {warehouse}/{key}"
            );
        }
        for key in [
            format!("{dp}sales/orders/LOAD00000001.parquet"),
            format!("{dp}sales/orders/20220302-1134010000.csv"),
            format!("{dp}sales/orders/2022/03/02/20220302-1134010000.csv.gz"),
        ] {
            assert!(
                deployed_rule_matches(&t, params, &landing, &key),
                "{params:?}: the rule misses DMS's {landing}/{key}"
            );
        }
    }
    // One bucket with a prefix left empty: refused before anything is created.
    for params in [
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
            ("DmsPrefix", ""),
        ][..],
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
            ("WarehousePrefix", ""),
        ],
        &[("DmsPrefix", "data/"), ("WarehousePrefix", "data/")],
    ] {
        assert!(
            !broken_rules(raw, params).is_empty(),
            "accepted: {params:?}"
        );
    }
}

#[test]
fn cost_md_counts_the_metrics_the_functions_emit() {
    let cost = std::fs::read_to_string(root().join("docs/cost.md")).expect("docs/cost.md");
    let n = emitted_metric_names().len();
    assert!(
        cost.contains(&format!("**{n} metric names**")),
        "docs/cost.md does not state the {n} metric names the functions emit \
         (`**{n} metric names**`): {:?}",
        emitted_metric_names()
    );
}
