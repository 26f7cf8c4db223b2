//! Wiring the README promises: build metadata naming real binaries, environment, the SQS
//! event source with partial batch responses, the dead-letter queue, schedules, parameter
//! defaults, outputs; and samconfig.toml.

use super::*;

pub(super) fn param_default(t: &Value, name: &str) -> Value {
    let p = &t["Parameters"][name];
    assert!(p.is_object(), "parameter {name} missing");
    p["Default"].clone()
}

pub(super) fn as_i64(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Environment variable names a function gets: Globals plus its own.
pub(super) fn declared_env(raw: &Value, function: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for vars in [
        &raw["Globals"]["Function"]["Environment"]["Variables"],
        &raw["Resources"][function]["Properties"]["Environment"]["Variables"],
    ] {
        if let Some(m) = vars.as_object() {
            names.extend(m.keys().cloned());
        }
    }
    names
}

pub(super) const COMMON_ENV: [&str; 14] = [
    "DMS2ICEBERG_CATALOG",
    "DMS2ICEBERG_WAREHOUSE",
    "DMS2ICEBERG_TABLE_BUCKET_ARN",
    "DMS2ICEBERG_REST_URI",
    "DMS2ICEBERG_REST_WAREHOUSE",
    "DMS2ICEBERG_REST_SIGV4",
    "DMS2ICEBERG_REST_TOKEN_SECRET",
    "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
    "DMS2ICEBERG_REST_OAUTH2_URI",
    "DMS2ICEBERG_REST_SCOPE",
    "DMS2ICEBERG_REST_VENDED_CREDENTIALS",
    "DMS2ICEBERG_GLUE_DATABASE",
    "DMS2ICEBERG_TABLE_METRICS",
    "RUST_LOG",
];
/// The ingest function's own: its config, dead-letter queue and batching (the compact function
/// reads none of them, and may read neither the config nor a queue).
pub(super) const INGEST_ENV: [&str; 6] = [
    "DMS2ICEBERG_CONFIG",
    "DMS2ICEBERG_DEAD_LETTER_QUEUE_URL",
    "DMS2ICEBERG_MAX_FILES_PER_COMMIT",
    "DMS2ICEBERG_MAX_FILES_PER_INVOCATION",
    "DMS2ICEBERG_PARALLEL_LOADS",
    "DMS2ICEBERG_FORMAT_VERSION",
];
pub(super) const COMPACT_ENV: [&str; 5] = [
    "DMS2ICEBERG_COMPACTION",
    "DMS2ICEBERG_COMPACT_MAX_BYTES",
    "DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS",
    "DMS2ICEBERG_SNAPSHOT_RETAIN_MAX",
    "DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS",
];

#[test]
fn functions_are_wired_as_documented() {
    let l = loaded();
    let raw = &l.raw;
    let t = &l.transformed;

    // Contract defaults.
    for (name, want) in [
        ("Architecture", json!("arm64")),
        ("IngestMemorySize", json!(1769)),
        ("CompactMemorySize", json!(3008)),
        ("IngestTimeout", json!(300)),
        ("CompactTimeout", json!(240)),
        ("LandingBucketName", json!("")),
        ("DmsPrefix", json!("dms/")),
        ("WarehouseBucketName", json!("")),
        ("WarehousePrefix", json!("warehouse/")),
        ("MaxFilesPerCommit", json!(1)),
        ("MaxFilesPerInvocation", json!(100)),
        ("LogLevel", json!("info")),
        ("CompactSchedule", json!("rate(5 minutes)")),
        ("MaintenanceSchedule", json!("rate(1 hour)")),
        ("SnapshotRetainMax", json!(200)),
        ("CompactMaxBytes", json!(1073741824)),
        ("SnapshotRetentionHours", json!(168)),
        ("OrphanMinAgeHours", json!(72)),
        ("QueueMaxReceiveCount", json!(5)),
        ("Catalog", json!("glue")),
        ("TableBucketArn", json!("")),
        ("Compaction", json!("auto")),
        ("RestAuthentication", json!("none")),
        ("RestUri", json!("")),
        ("RestWarehouse", json!("")),
        ("RestSecretArn", json!("")),
        ("RestVendedCredentials", json!("false")),
        ("GlueDatabaseName", json!("")),
        ("CreateGlueDatabase", json!("true")),
        ("ConfigS3Uri", json!("")),
        ("TableMetrics", json!("off")),
        ("LagAlarmMinutes", json!(30)),
        ("AlarmEmail", json!("")),
        ("AlarmTopicArn", json!("")),
        ("WarehouseKmsKeyArn", json!("")),
        ("LandingBucketKmsKeyArn", json!("")),
        ("QueueVisibilityTimeout", json!(1800)),
    ] {
        assert_eq!(param_default(raw, name), want, "default of {name}");
    }
    assert_eq!(
        strings(&raw["Parameters"]["TableMetrics"]["AllowedValues"]),
        ["off", "on"]
    );
    let arch = strings(&raw["Parameters"]["Architecture"]["AllowedValues"]);
    assert_eq!(arch, ["arm64", "x86_64"]);
    assert_eq!(
        strings(&raw["Parameters"]["Catalog"]["AllowedValues"]),
        ["glue", "s3tables", "rest"]
    );
    assert_eq!(
        strings(&raw["Parameters"]["RestAuthentication"]["AllowedValues"]),
        ["none", "glue", "s3tables", "token", "credential"]
    );
    // Every parameter is in a group of the console's form, every REST one labelled.
    let interface = &raw["Metadata"]["AWS::CloudFormation::Interface"];
    let grouped: BTreeSet<String> = interface["ParameterGroups"]
        .as_array()
        .expect("parameter groups")
        .iter()
        .flat_map(|g| strings(&g["Parameters"]))
        .collect();
    for p in raw["Parameters"].as_object().expect("parameters").keys() {
        assert!(grouped.contains(p), "parameter {p} in no ParameterGroup");
        if p.starts_with("Rest") {
            assert!(
                interface["ParameterLabels"][p]["default"].is_string(),
                "parameter {p} has no label"
            );
        }
    }
    // Every variable the template sets is one the functions read (a misspelt name would be
    // ignored silently).
    let source = rust_sources(&root().join("shared/src"));
    for function in ["IngestFunction", "CompactFunction"] {
        for name in declared_env(raw, function) {
            if name.starts_with("DMS2ICEBERG_") {
                assert!(
                    source.contains(&format!("\"{name}\"")),
                    "{function}: {name} is read nowhere in shared/src"
                );
            }
        }
    }
    // AWS: visibility timeout at least six times the function timeout.
    assert!(
        as_i64(&param_default(raw, "QueueVisibilityTimeout"))
            >= 6 * as_i64(&param_default(raw, "IngestTimeout")),
        "QueueVisibilityTimeout default < 6 x IngestTimeout default"
    );

    // Build metadata: cargo-lambda, a binary each, CodeUri the workspace member defining it.
    for (function, binary, memory, timeout) in [
        (
            "IngestFunction",
            "dms2iceberg-ingest",
            "IngestMemorySize",
            "IngestTimeout",
        ),
        (
            "CompactFunction",
            "dms2iceberg-compact",
            "CompactMemorySize",
            "CompactTimeout",
        ),
    ] {
        let f = &raw["Resources"][function];
        assert_eq!(f["Type"], "AWS::Serverless::Function");
        assert_eq!(
            f["Metadata"]["BuildMethod"], "rust-cargolambda",
            "{function}"
        );
        assert_eq!(
            f["Metadata"]["BuildProperties"]["Binary"], binary,
            "{function}"
        );
        let code_uri = f["Properties"]["CodeUri"].as_str().expect("local CodeUri");
        let manifest = root().join(code_uri).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| {
            panic!("{function}: CodeUri {code_uri} has no Cargo.toml ({e}); sam build needs the package")
        });
        assert!(
            text.contains(&format!("name = \"{binary}\"")),
            "{}: no bin/package named {binary}",
            manifest.display()
        );
        let workspace = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
        assert!(
            workspace.contains(&format!("\"{code_uri}\"")),
            "{code_uri} is not a member of the workspace in Cargo.toml"
        );
        let lf = &t["Resources"][function]["Properties"];
        assert_eq!(lf["Runtime"], "provided.al2023", "{function}");
        assert_eq!(lf["Handler"], "bootstrap", "{function}");
        assert_eq!(
            render(&lf["Architectures"]),
            ["${Architecture}"],
            "{function}"
        );
        assert_eq!(
            render(&lf["MemorySize"]),
            [format!("${{{memory}}}")],
            "{function}"
        );
        assert_eq!(
            render(&lf["Timeout"]),
            [format!("${{{timeout}}}")],
            "{function}"
        );
        let env = declared_env(raw, function);
        for name in COMMON_ENV {
            assert!(env.contains(name), "{function}: {name} not set");
        }
        // Its own log group, with a retention.
        let lg = render(&lf["LoggingConfig"]["LogGroup"]);
        assert_eq!(lg.len(), 1, "{function}: LoggingConfig.LogGroup");
        let lg_id = lg[0].trim_start_matches("${").trim_end_matches('}');
        let group = &t["Resources"][lg_id];
        assert_eq!(group["Type"], "AWS::Logs::LogGroup", "{function}: {lg_id}");
        assert_eq!(
            render(&group["Properties"]["RetentionInDays"]),
            ["${LogRetentionDays}"]
        );
    }
    let compact_env = declared_env(raw, "CompactFunction");
    for name in COMPACT_ENV {
        assert!(
            compact_env.contains(name),
            "CompactFunction: {name} not set"
        );
    }
    let ingest_env = declared_env(raw, "IngestFunction");
    for name in INGEST_ENV {
        assert!(ingest_env.contains(name), "IngestFunction: {name} not set");
        assert!(
            !compact_env.contains(name),
            "CompactFunction: {name} set (the ingest function's alone)"
        );
    }

    // Ingest: SQS event source with partial batch responses; queue -> DLQ after N receives.
    let esm: Vec<&Value> = t["Resources"]
        .as_object()
        .expect("resources")
        .values()
        .filter(|r| {
            r["Type"] == "AWS::Lambda::EventSourceMapping"
                && render(&r["Properties"]["FunctionName"]) == ["${IngestFunction}"]
        })
        .collect();
    assert_eq!(esm.len(), 1, "one event source for IngestFunction");
    let esm = &esm[0]["Properties"];
    assert_eq!(render(&esm["EventSourceArn"]), ["${IngestQueue.Arn}"]);
    assert_eq!(
        strings(&esm["FunctionResponseTypes"]),
        ["ReportBatchItemFailures"]
    );
    let q = &t["Resources"]["IngestQueue"]["Properties"];
    assert_eq!(
        render(&q["VisibilityTimeout"]),
        ["${QueueVisibilityTimeout}"]
    );
    assert_eq!(
        render(&q["RedrivePolicy"]["deadLetterTargetArn"]),
        ["${IngestDeadLetterQueue.Arn}"]
    );
    assert_eq!(
        render(&q["RedrivePolicy"]["maxReceiveCount"]),
        ["${QueueMaxReceiveCount}"]
    );
    let dlq = &t["Resources"]["IngestDeadLetterQueue"]["Properties"];
    assert!(
        as_i64(&dlq["MessageRetentionPeriod"]) > as_i64(&q["MessageRetentionPeriod"]),
        "the DLQ must retain longer than the queue (moved messages keep their enqueue time)"
    );

    // S3 Object Created and Object Deleted (a source truncate) -> EventBridge rule -> queue,
    // for DMS files under the prefix only.
    let rule = &t["Resources"]["DmsObjectCreatedRule"]["Properties"];
    assert_eq!(strings(&rule["EventPattern"]["source"]), ["aws.s3"]);
    assert_eq!(
        strings(&rule["EventPattern"]["detail-type"]),
        ["Object Created", "Object Deleted"]
    );
    let keys: Vec<String> = rule["EventPattern"]["detail"]["object"]["key"]
        .as_array()
        .expect("key patterns")
        .iter()
        .flat_map(|k| render(&k["wildcard"]))
        .collect();
    assert_eq!(
        keys,
        [
            "${DmsPrefix}*.csv",
            "${DmsPrefix}*.csv.gz",
            "${DmsPrefix}*.parquet"
        ]
    );
    let target = &rule["Targets"][0];
    assert_eq!(render(&target["Arn"]), ["${IngestQueue.Arn}"]);
    assert_eq!(
        render(&target["DeadLetterConfig"]["Arn"]),
        ["${IngestDeadLetterQueue.Arn}"]
    );
    let landing = &t["Resources"]["LandingBucket"]["Properties"];
    assert_eq!(
        landing["NotificationConfiguration"]["EventBridgeConfiguration"]["EventBridgeEnabled"],
        json!(true),
        "a created landing bucket must send events to EventBridge"
    );

    // Compact: on the schedule parameter (the default catalog: every maintenance task; the
    // catalogs' differences are checked in `each_catalog_is_granted_only_what_it_uses`).
    let t = &deployed(t, &[]);
    let schedules: Vec<&Value> = t["Resources"]
        .as_object()
        .expect("resources")
        .values()
        .filter(|r| {
            r["Type"] == "AWS::Events::Rule"
                && r["Properties"]["Targets"][0]["Arn"]
                    == json!({"Fn::GetAtt": ["CompactFunction", "Arn"]})
        })
        .collect();
    // Two schedules: compaction by read cost often, expiry and orphans less often; each
    // names its tasks (the function's event contract, `CompactEvent::tasks`).
    assert_eq!(schedules.len(), 2, "two schedules for CompactFunction");
    let mut wired: Vec<(Vec<String>, Value)> = schedules
        .iter()
        .map(|r| {
            let input: Value = serde_json::from_str(
                r["Properties"]["Targets"][0]["Input"]
                    .as_str()
                    .unwrap_or("{}"),
            )
            .expect("schedule input is JSON");
            (
                render(&r["Properties"]["ScheduleExpression"]),
                input["tasks"].clone(),
            )
        })
        .collect();
    wired.sort_by_key(|w| w.0.clone());
    assert_eq!(
        wired,
        [
            (vec!["${CompactSchedule}".to_string()], json!(["compact"])),
            (
                vec!["${MaintenanceSchedule}".to_string()],
                json!(["expire", "orphans"])
            ),
        ]
    );

    // Outputs operators need.
    for o in [
        "LandingBucket",
        "DmsPrefix",
        "WarehouseLocation",
        "GlueDatabase",
        "TableBucketArn",
        "RestCatalogUri",
        "IngestQueueUrl",
        "DeadLetterQueueUrl",
        "IngestFunctionName",
        "IngestFunctionArn",
        "CompactFunctionName",
        "CompactFunctionArn",
        "ConfigParameterName",
        "AlarmTopicArnCreated",
        "DashboardName",
    ] {
        assert!(raw["Outputs"][o].is_object(), "output {o} missing");
    }

    // No Resource "*" hides in a parameterless corner: no AWS::Serverless policy templates.
    for f in ["IngestFunction", "CompactFunction"] {
        assert!(
            raw["Resources"][f]["Properties"].get("Policies").is_none(),
            "{f}: use Role, not Policies"
        );
    }
}

/// The text of every `.rs` file under `dir`.
pub(super) fn rust_sources(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.expect("entry").path();
        if path.is_dir() {
            out.push_str(&rust_sources(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&path).expect("source"));
        }
    }
    out
}

#[test]
fn samconfig_is_sane() {
    let l = loaded();
    let c = &l.samconfig["default"];
    assert_eq!(c["deploy"]["parameters"]["capabilities"], "CAPABILITY_IAM");
    assert_eq!(c["deploy"]["parameters"]["resolve_s3"], json!(true));
    assert_eq!(
        c["build"]["parameters"]["cached"],
        json!(false),
        "cached builds would hash only CodeUri, not shared/"
    );
    assert_eq!(
        c["local_invoke"]["parameters"]["env_vars"],
        "infra/env.json"
    );
    // `sam deploy` reads the parameters most deployments set from infra/parameters.yaml, as
    // shipped the template's defaults; every other parameter has a default, so a deployment
    // asks nothing.
    assert_eq!(
        c["deploy"]["parameters"]["parameter_overrides"],
        "file://infra/parameters.yaml"
    );
    let overrides = l.overrides.as_object().expect("overrides");
    for needed in ["TablesConfig", "AlarmEmail", "GlueDatabaseName"] {
        assert!(
            overrides.contains_key(needed),
            "infra/parameters.yaml lacks {needed}"
        );
    }
    assert!(
        overrides.len() <= 8,
        "few parameters to set: {:?}",
        overrides.keys()
    );
    for (name, p) in l.raw["Parameters"].as_object().expect("parameters") {
        assert!(
            p.get("Default").is_some(),
            "parameter {name} has no default"
        );
    }
    for (k, v) in overrides {
        assert!(
            l.raw["Parameters"][k].is_object(),
            "samconfig overrides unknown parameter {k}"
        );
        let default = param_default(&l.raw, k);
        let default = default
            .as_str()
            .map(str::to_string)
            .unwrap_or(default.to_string());
        assert_eq!(
            v.as_str(),
            Some(default.as_str()),
            "samconfig {k} differs from the template default"
        );
    }
}
