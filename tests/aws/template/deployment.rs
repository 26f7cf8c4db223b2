//! One deployment: the template with its conditions decided for a set of parameters; what
//! each catalog (Glue, S3 Tables, REST) is granted and told, and the Rules that refuse
//! inconsistent parameters.

use super::*;

/// A condition's value for these parameters (the rest at their defaults).
pub(super) fn condition(t: &Value, c: &Value, params: &[(&str, &str)]) -> bool {
    let value = |v: &Value| -> String {
        match v.get("Ref").and_then(Value::as_str) {
            Some(p) => param_value(t, p, params),
            None => v.as_str().map_or_else(|| v.to_string(), str::to_string),
        }
    };
    let (k, a) = c
        .as_object()
        .and_then(|m| m.iter().next())
        .unwrap_or_else(|| panic!("not a condition: {c}"));
    let all = || a.as_array().expect("a list of conditions").iter();
    match k.as_str() {
        "Fn::Equals" => value(&a[0]) == value(&a[1]),
        "Fn::And" => all().all(|x| condition(t, x, params)),
        "Fn::Or" => all().any(|x| condition(t, x, params)),
        "Fn::Not" => !condition(t, &a[0], params),
        "Condition" => {
            let name = a.as_str().expect("a condition name");
            condition(t, &t["Conditions"][name], params)
        }
        other => panic!("condition function {other} not understood"),
    }
}

/// A deployment's stack, unless the parameters name other pseudo parameters (`AWS::AccountId`
/// `123456789012` is the account `sam local` evaluates templates with).
pub(super) const PSEUDO: [(&str, &str); 5] = [
    ("AWS::AccountId", "111122223333"),
    ("AWS::Region", "eu-west-1"),
    ("AWS::Partition", "aws"),
    ("AWS::StackName", "dms2iceberg"),
    (
        "AWS::StackId",
        "arn:aws:cloudformation:eu-west-1:111122223333:stack/dms2iceberg/4f9b2c1e-5a3d-11ef-9c2b-0a1b2c3d4e5f",
    ),
];

/// A parameter's (or pseudo parameter's) value for these parameters (the rest at their
/// defaults).
pub(super) fn param_value(t: &Value, name: &str, params: &[(&str, &str)]) -> String {
    if let Some((_, v)) = params.iter().find(|(k, _)| *k == name) {
        return v.to_string();
    }
    if name.starts_with("AWS::") {
        return PSEUDO
            .iter()
            .find(|(k, _)| *k == name)
            .unwrap_or_else(|| panic!("pseudo parameter {name} not modelled"))
            .1
            .to_string();
    }
    match param_default(t, name) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// `v` with every `Fn::If` replaced by the branch these parameters take (`AWS::NoValue`
/// branches dropped from lists and maps).
pub(super) fn decide(t: &Value, v: &Value, params: &[(&str, &str)]) -> Option<Value> {
    match v {
        Value::Object(m) if m.len() == 1 && m.contains_key("Fn::If") => {
            let a = &m["Fn::If"];
            let name = a[0].as_str().expect("Fn::If names a condition");
            let taken = condition(t, &json!({ "Condition": name }), params);
            decide(t, &a[if taken { 1 } else { 2 }], params)
        }
        Value::Object(m) if m.get("Ref") == Some(&json!("AWS::NoValue")) => None,
        Value::Object(m) => Some(Value::Object(
            m.iter()
                .filter_map(|(k, x)| decide(t, x, params).map(|x| (k.clone(), x)))
                .collect(),
        )),
        Value::Array(a) => Some(Value::Array(
            a.iter().filter_map(|x| decide(t, x, params)).collect(),
        )),
        other => Some(other.clone()),
    }
}

/// The template as CloudFormation deploys it with these parameters: resources whose condition
/// is false removed, every `Fn::If` decided.
pub(super) fn deployed(t: &Value, params: &[(&str, &str)]) -> Value {
    let mut out = decide(t, t, params).expect("a template");
    if let Some(resources) = out["Resources"].as_object_mut() {
        resources.retain(|_, r| match r["Condition"].as_str() {
            Some(c) => condition(t, &json!({ "Condition": c }), params),
            None => true,
        });
    }
    out
}

/// Actions a function's role allows, each with the resources it is allowed on.
pub(super) fn allowed(t: &Value, function: &str) -> Vec<(String, Vec<String>)> {
    role_of(t, function)
        .1
        .iter()
        .flat_map(|s| {
            let res = strings(&s["Resource"]);
            strings(&s["Action"])
                .into_iter()
                .map(move |a| (a, res.clone()))
        })
        .collect()
}

/// The template's Rules these parameters break (rule name and description); empty = none.
pub(super) fn broken_rules(t: &Value, params: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let empty = serde_json::Map::new();
    for (name, rule) in t["Rules"].as_object().unwrap_or(&empty) {
        let applies = rule
            .get("RuleCondition")
            .is_none_or(|c| condition(t, c, params));
        if !applies {
            continue;
        }
        for a in rule["Assertions"].as_array().into_iter().flatten() {
            if !condition(t, &a["Assert"], params) {
                out.push(format!("{name}: {}", a["AssertDescription"]));
            }
        }
    }
    out
}

/// Which Glue API a deployment uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum GlueUse {
    None,
    /// The Data Catalog API (`Catalog=glue`).
    Api,
    /// Its Iceberg REST endpoint (`Catalog=rest`, SigV4 `glue`).
    Rest,
}

/// One deployment and what its functions must be granted and told; everything else they must
/// not be granted.
pub(super) struct CatalogCase {
    pub(super) name: &'static str,
    pub(super) params: &'static [(&'static str, &'static str)],
    pub(super) glue: GlueUse,
    /// The table bucket the functions work in.
    pub(super) table_bucket: Option<&'static str>,
    /// Through S3 Tables' Iceberg REST endpoint (`s3tables:GetTableBucket` for its config).
    pub(super) s3tables_rest: bool,
    /// Read/write under the warehouse prefix (the functions' own S3 grants).
    pub(super) warehouse: bool,
    /// `lakeformation:GetDataAccess` (Glue's endpoint vending credentials).
    pub(super) lake_formation: bool,
    /// `secretsmanager:GetSecretValue` on `RestSecretArn`, and `kms:Decrypt` of its key.
    pub(super) secret: bool,
    pub(super) secret_key: bool,
    /// Both functions' catalog variables, rendered (`None`: absent).
    pub(super) env: &'static [(&'static str, Option<&'static str>)],
    /// The maintenance schedule: its tasks and state.
    pub(super) maintenance: (&'static str, &'static str),
    /// The compact function's `DMS2ICEBERG_COMPACTION`, rendered.
    pub(super) compaction: &'static str,
}

pub(super) const SECRET_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:dms2iceberg/rest-AbCdEf";
pub(super) const GLUE_REST_URI: &str = "https://glue.${AWS::Region}.${AWS::URLSuffix}/iceberg";
pub(super) const S3TABLES_REST_URI: &str =
    "https://s3tables.${AWS::Region}.${AWS::URLSuffix}/iceberg";
/// The REST variables, absent unless the case says otherwise.
pub(super) const REST_ENV: [&str; 8] = [
    "DMS2ICEBERG_REST_URI",
    "DMS2ICEBERG_REST_WAREHOUSE",
    "DMS2ICEBERG_REST_SIGV4",
    "DMS2ICEBERG_REST_TOKEN_SECRET",
    "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
    "DMS2ICEBERG_REST_OAUTH2_URI",
    "DMS2ICEBERG_REST_SCOPE",
    "DMS2ICEBERG_REST_VENDED_CREDENTIALS",
];
pub(super) const ALL_TASKS: &str = r#"["expire","orphans"]"#;

pub(super) fn catalog_cases() -> Vec<CatalogCase> {
    vec![
        CatalogCase {
            name: "glue (the default)",
            params: &[],
            glue: GlueUse::Api,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: true,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_CATALOG", Some("${Catalog}")),
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some("")),
            ],
            maintenance: (ALL_TASKS, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "s3tables, a table bucket the stack creates",
            params: &[("Catalog", "s3tables")],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[0]),
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some(TABLE_BUCKETS[0])),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (ALL_TASKS, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "s3tables, an existing table bucket",
            params: &[
                ("Catalog", "s3tables"),
                (
                    "TableBucketArn",
                    "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
                ),
            ],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[1]),
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some(TABLE_BUCKETS[1])),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (ALL_TASKS, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest on Glue's Iceberg REST endpoint",
            params: &[("Catalog", "rest"), ("RestAuthentication", "glue")],
            glue: GlueUse::Rest,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: true,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_CATALOG", Some("${Catalog}")),
                ("DMS2ICEBERG_REST_URI", Some(GLUE_REST_URI)),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some("${AWS::AccountId}")),
                ("DMS2ICEBERG_REST_SIGV4", Some("glue")),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some("")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest on Glue's endpoint, Lake Formation vending the credentials",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "glue"),
                ("RestVendedCredentials", "true"),
            ],
            glue: GlueUse::Rest,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: false,
            lake_formation: true,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some(GLUE_REST_URI)),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some("${AWS::AccountId}")),
                ("DMS2ICEBERG_REST_SIGV4", Some("glue")),
                ("DMS2ICEBERG_REST_VENDED_CREDENTIALS", Some("true")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest on S3 Tables' endpoint, a table bucket the stack creates",
            params: &[("Catalog", "rest"), ("RestAuthentication", "s3tables")],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[0]),
            s3tables_rest: true,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some(S3TABLES_REST_URI)),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some(TABLE_BUCKETS[0])),
                ("DMS2ICEBERG_REST_SIGV4", Some("s3tables")),
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some("")),
            ],
            // The service maintains the tables.
            maintenance: (r#"["expire"]"#, "DISABLED"),
            compaction: "off",
        },
        CatalogCase {
            name: "rest on S3 Tables' endpoint, an existing bucket, another URI, compaction on",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "s3tables"),
                (
                    "TableBucketArn",
                    "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
                ),
                (
                    "RestUri",
                    "https://s3tables.eu-west-1.amazonaws.com/iceberg",
                ),
                ("Compaction", "on"),
            ],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[1]),
            s3tables_rest: true,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some(TABLE_BUCKETS[1])),
                ("DMS2ICEBERG_REST_SIGV4", Some("s3tables")),
            ],
            maintenance: (r#"["expire"]"#, "DISABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest elsewhere, a bearer token from Secrets Manager, vended credentials",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "token"),
                ("RestUri", "https://polaris.example.com/api/catalog"),
                ("RestWarehouse", "lake"),
                ("RestSecretArn", SECRET_ARN),
                ("RestVendedCredentials", "true"),
            ],
            glue: GlueUse::None,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: true,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some("${RestWarehouse}")),
                ("DMS2ICEBERG_REST_TOKEN_SECRET", Some("${RestSecretArn}")),
                ("DMS2ICEBERG_REST_VENDED_CREDENTIALS", Some("true")),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest elsewhere, OAuth2 credentials from a KMS-encrypted secret, a named warehouse bucket",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "credential"),
                ("RestUri", "https://lakekeeper.example.com/catalog"),
                ("RestSecretArn", SECRET_ARN),
                (
                    "RestSecretKmsKeyArn",
                    "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
                ),
                ("RestOAuth2Uri", "https://idp.example.com/oauth2/token"),
                ("RestScope", "lakekeeper"),
                ("WarehouseBucketName", "lake-tables"),
            ],
            glue: GlueUse::None,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: true,
            lake_formation: false,
            secret: true,
            secret_key: true,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                (
                    "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
                    Some("${RestSecretArn}"),
                ),
                ("DMS2ICEBERG_REST_OAUTH2_URI", Some("${RestOAuth2Uri}")),
                ("DMS2ICEBERG_REST_SCOPE", Some("${RestScope}")),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest elsewhere, unauthenticated, vended credentials",
            params: &[
                ("Catalog", "rest"),
                ("RestUri", "http://catalog.internal:8181"),
                ("RestVendedCredentials", "true"),
            ],
            glue: GlueUse::None,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                ("DMS2ICEBERG_REST_VENDED_CREDENTIALS", Some("true")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
    ]
}

/// Each catalog gets the permissions it uses and none of the others': S3 Tables no Glue and no
/// warehouse bucket, Glue no table bucket, Glue's and S3 Tables' REST endpoints what their REST
/// operations map to, a REST catalog elsewhere nothing but its secret (and the warehouse bucket
/// it names); the functions are told which catalog they use, and nothing else (the REST
/// variables are absent unless used); the compaction function runs what the catalog leaves to
/// it; and the template's Rules accept each case.
#[test]
fn each_catalog_is_granted_only_what_it_uses() {
    let raw = &loaded().raw;
    for case in catalog_cases() {
        let name = case.name;
        let params = case.params;
        let broken = broken_rules(raw, params);
        assert!(broken.is_empty(), "{name}: rules refuse it: {broken:?}");
        let t = deployed(raw, params);
        let v = least_privilege_violations(&t);
        assert!(v.is_empty(), "{name}: violations:\n  {}", v.join("\n  "));
        let has_resource = |id: &str| t["Resources"].get(id).is_some();

        // The environment: what the case lists, the REST variables absent otherwise.
        let env = &t["Globals"]["Function"]["Environment"]["Variables"];
        for (var, want) in case.env {
            match want {
                Some(w) => assert_eq!(render(&env[*var]), [*w], "{name}: {var}"),
                None => assert!(env.get(*var).is_none(), "{name}: {var} set"),
            }
        }
        for var in REST_ENV {
            if !case.env.iter().any(|(k, _)| *k == var) {
                assert!(env.get(var).is_none(), "{name}: {var} set: {}", env[var]);
            }
        }
        let compact = &t["Resources"]["CompactFunction"]["Properties"];
        assert_eq!(
            render(&compact["Environment"]["Variables"]["DMS2ICEBERG_COMPACTION"]),
            [case.compaction],
            "{name}"
        );
        let maintenance = &compact["Events"]["Maintenance"]["Properties"];
        let input: Value =
            serde_json::from_str(maintenance["Input"].as_str().expect("Input decided"))
                .expect("JSON input");
        assert_eq!(
            input["tasks"],
            serde_json::from_str::<Value>(case.maintenance.0).expect("tasks"),
            "{name}"
        );
        assert_eq!(maintenance["State"], case.maintenance.1, "{name}");

        // Resources the catalog needs, and none other.
        let named_warehouse = params.iter().any(|(k, _)| *k == "WarehouseBucketName");
        assert_eq!(
            has_resource("WarehouseBucket"),
            case.glue != GlueUse::None && !named_warehouse,
            "{name}: WarehouseBucket"
        );
        assert_eq!(
            has_resource("GlueDatabase"),
            case.glue != GlueUse::None,
            "{name}: GlueDatabase"
        );
        assert_eq!(
            has_resource("TableBucket"),
            case.table_bucket == Some(TABLE_BUCKETS[0]),
            "{name}: TableBucket"
        );

        // Grants.
        let ingest = allowed(&t, "IngestFunction");
        let compact = allowed(&t, "CompactFunction");
        let can = |grants: &[(String, Vec<String>)], a: &str, r: &str| {
            grants
                .iter()
                .any(|(x, rs)| x == a && rs.iter().any(|y| y == r))
        };
        let any = |grants: &[(String, Vec<String>)], pred: &dyn Fn(&str, &str) -> bool| {
            grants.iter().any(|(a, rs)| rs.iter().any(|r| pred(a, r)))
        };
        let both = [("ingest", &ingest), ("compact", &compact)];
        assert!(
            can(&ingest, "s3:GetObject", DMS_OBJECTS),
            "{name}: ingest cannot read DMS files"
        );
        for (who, grants) in both {
            assert_eq!(
                any(grants, &|_, r| r == WAREHOUSE_OBJECTS),
                case.warehouse,
                "{name}: {who}: the warehouse prefix"
            );
            if case.warehouse {
                assert!(
                    can(grants, "s3:PutObject", WAREHOUSE_OBJECTS),
                    "{name}: {who}"
                );
                assert!(can(grants, "s3:ListBucket", BUCKET), "{name}: {who}");
            }
            assert_eq!(
                any(grants, &|a, _| a == "lakeformation:GetDataAccess"),
                case.lake_formation,
                "{name}: {who}: Lake Formation"
            );
            assert_eq!(
                can(grants, "secretsmanager:GetSecretValue", REST_SECRET),
                case.secret,
                "{name}: {who}: the secret"
            );
            assert_eq!(
                any(grants, &|a, _| a.starts_with("secretsmanager:")),
                case.secret,
                "{name}: {who}: Secrets Manager"
            );
            assert_eq!(
                can(grants, "kms:Decrypt", SECRET_KEY),
                case.secret_key,
                "{name}: {who}: the secret's key"
            );
            if case.glue == GlueUse::None {
                assert!(
                    !any(grants, &|a, _| a.starts_with("glue:")),
                    "{name}: {who} has Glue"
                );
            }
            match case.table_bucket {
                None => assert!(
                    !any(grants, &|a, _| a.starts_with("s3tables:")),
                    "{name}: {who} has S3 Tables"
                ),
                Some(bucket) => {
                    for a in S3TABLES_TABLE_ACTIONS {
                        assert!(can(grants, a, TABLES), "{name}: {who} lacks {a}");
                    }
                    assert_eq!(
                        can(grants, "s3tables:GetTableBucket", bucket),
                        case.s3tables_rest,
                        "{name}: {who}: GetTableBucket"
                    );
                }
            }
        }
        if let Some(bucket) = case.table_bucket {
            for a in ["s3tables:CreateNamespace", "s3tables:CreateTable"] {
                assert!(can(&ingest, a, bucket), "{name}: ingest lacks {a}");
                assert!(!can(&compact, a, bucket), "{name}: compact has {a}");
            }
            assert!(
                can(&compact, "s3tables:ListTables", bucket),
                "{name}: compact cannot list"
            );
        }
        let (ingest_glue, compact_glue): (&[&str], &[&str]) = match case.glue {
            GlueUse::None => (&[], &[]),
            GlueUse::Api => (
                &[
                    "glue:GetDatabase",
                    "glue:CreateDatabase",
                    "glue:GetTable",
                    "glue:GetTables",
                    "glue:CreateTable",
                    "glue:UpdateTable",
                ],
                &[
                    "glue:GetDatabase",
                    "glue:GetTable",
                    "glue:GetTables",
                    "glue:UpdateTable",
                ],
            ),
            // GetConfig = GetCatalog, CreateNamespace = CreateDatabase, LoadTable = GetTable,
            // CreateTable, UpdateTable; ListTables = GetTables (compact).
            GlueUse::Rest => (
                &[
                    "glue:GetCatalog",
                    "glue:GetDatabase",
                    "glue:CreateDatabase",
                    "glue:GetTable",
                    "glue:CreateTable",
                    "glue:UpdateTable",
                ],
                &[
                    "glue:GetCatalog",
                    "glue:GetDatabase",
                    "glue:GetTable",
                    "glue:GetTables",
                    "glue:UpdateTable",
                ],
            ),
        };
        for (who, grants, want) in [
            ("ingest", &ingest, ingest_glue),
            ("compact", &compact, compact_glue),
        ] {
            let got: BTreeSet<&str> = grants
                .iter()
                .filter(|(a, _)| a.starts_with("glue:"))
                .map(|(a, _)| a.as_str())
                .collect();
            assert_eq!(
                got,
                want.iter().copied().collect::<BTreeSet<_>>(),
                "{name}: {who}'s Glue actions"
            );
            for a in want {
                for r in GLUE {
                    assert!(can(grants, a, r), "{name}: {who}: {a} on {r}");
                }
            }
        }
    }
}

/// The Rules refuse parameters that do not fit together, each with its reason.
#[test]
fn inconsistent_catalog_parameters_are_refused() {
    let raw = &loaded().raw;
    let cases: [&[(&str, &str)]; 11] = [
        &[("RestUri", "https://polaris.example.com/api/catalog")],
        &[("RestAuthentication", "glue")],
        &[("Catalog", "s3tables"), ("RestVendedCredentials", "true")],
        &[("Catalog", "rest")],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "token"),
            ("RestUri", "https://polaris.example.com/api/catalog"),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "glue"),
            ("RestSecretArn", SECRET_ARN),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "glue"),
            ("RestWarehouse", "123456789012"),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "token"),
            ("RestUri", "https://polaris.example.com/api/catalog"),
            ("RestSecretArn", SECRET_ARN),
            ("RestScope", "PRINCIPAL_ROLE:ALL"),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "glue"),
            (
                "TableBucketArn",
                "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
            ),
        ],
        &[
            ("Catalog", "rest"),
            ("RestUri", "http://catalog.internal:8181"),
            (
                "RestSecretKmsKeyArn",
                "arn:aws:kms:eu-west-1:123456789012:key/1234abcd",
            ),
        ],
        &[
            ("Catalog", "glue"),
            (
                "TableBucketArn",
                "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
            ),
        ],
    ];
    for params in cases {
        assert!(
            !broken_rules(raw, params).is_empty(),
            "accepted: {params:?}"
        );
    }
    assert!(
        broken_rules(raw, &[]).is_empty(),
        "the defaults are refused"
    );
}
