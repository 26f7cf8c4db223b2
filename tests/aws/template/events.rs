//! Sample events and env.json: `infra/events/*.json` match the EventBridge rule, env.json sets
//! only declared variables; the metrics the functions emit and the dashboard that shows them.

use super::*;

/// EventBridge `wildcard`: `*` matches any run of characters (including `/`).
pub(super) fn wildcard(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// S3 notification keys are form-URL-encoded (`+` = space, `%XX`).
pub(super) fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("ascii");
                out.push(u8::from_str_radix(hex, 16).expect("hex escape"));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).expect("utf-8 key")
}

pub(super) fn rule_matches(raw: &Value, bucket: &str, key: &str) -> bool {
    let prefix = param_default(raw, "DmsPrefix");
    let prefix = prefix.as_str().expect("DmsPrefix");
    let keys =
        raw["Resources"]["DmsObjectCreatedRule"]["Properties"]["EventPattern"]["detail"]["object"]
            ["key"]
            .as_array()
            .expect("key patterns")
            .iter()
            .flat_map(|k| render(&k["wildcard"]))
            .map(|p| p.replace("${DmsPrefix}", prefix))
            .collect::<Vec<_>>();
    !bucket.is_empty() && keys.iter().any(|p| wildcard(p, key))
}

#[test]
fn sample_events_are_realistic_and_match_the_rule() {
    let raw = &loaded().raw;

    let s3 = read_json("infra/events/s3-put.json");
    let recs = s3["Records"].as_array().expect("Records");
    assert_eq!(recs.len(), 2);
    for r in recs {
        assert_eq!(r["eventSource"], "aws:s3");
        assert_eq!(r["eventName"], "ObjectCreated:Put");
        let key = r["s3"]["object"]["key"].as_str().expect("key");
        let bucket = r["s3"]["bucket"]["name"].as_str().expect("bucket");
        assert!(rule_matches(raw, bucket, key), "rule would not match {key}");
    }
    assert_eq!(
        recs[0]["s3"]["object"]["key"],
        "dms/sales/product/20220302-1134010000.csv"
    );
    let encoded = recs[1]["s3"]["object"]["key"].as_str().expect("key");
    let decoded = url_decode(encoded);
    assert_ne!(
        decoded, encoded,
        "the second record shows a URL-encoded key"
    );
    assert_eq!(
        decoded,
        "dms/sales/order line$items/20220302-1134010000.csv"
    );

    let eb = read_json("infra/events/eventbridge.json");
    assert_eq!(eb["source"], "aws.s3");
    assert_eq!(eb["detail-type"], "Object Created");
    let key = eb["detail"]["object"]["key"].as_str().expect("key");
    assert!(rule_matches(
        raw,
        eb["detail"]["bucket"]["name"].as_str().unwrap_or(""),
        key
    ));

    let sqs = read_json("infra/events/sqs.json");
    let bodies: Vec<Value> = sqs["Records"]
        .as_array()
        .expect("Records")
        .iter()
        .map(|r| {
            assert_eq!(r["eventSource"], "aws:sqs");
            serde_json::from_str(r["body"].as_str().expect("body")).expect("body is JSON")
        })
        .collect();
    assert!(
        bodies
            .iter()
            .any(|b| b["Records"][0]["eventSource"] == "aws:s3"),
        "an S3 notification body"
    );
    assert!(
        bodies.iter().any(|b| b["detail-type"] == "Object Created"),
        "an EventBridge body (the deployed wiring)"
    );

    let sched = read_json("infra/events/schedule.json");
    assert_eq!(sched["source"], "aws.events");
    assert_eq!(sched["detail-type"], "Scheduled Event");
}

#[test]
fn env_json_only_sets_declared_variables() {
    let raw = &loaded().raw;
    let env = read_json("infra/env.json");
    let functions = env.as_object().expect("env.json is an object");
    assert!(!functions.is_empty());
    for (function, vars) in functions {
        assert!(
            raw["Resources"][function].is_object(),
            "env.json names unknown function {function}"
        );
        let declared = declared_env(raw, function);
        for name in vars.as_object().expect("variables").keys() {
            assert!(
                declared.contains(name),
                "env.json sets {name} for {function}, which the template does not declare: \
                 `sam local invoke` would silently drop it"
            );
        }
        for name in ["AWS_ENDPOINT_URL", "DMS2ICEBERG_S3_PATH_STYLE"] {
            assert!(
                vars.get(name).is_some(),
                "env.json: {function} lacks {name}"
            );
        }
    }
}

#[test]
fn helpers_behave() {
    assert!(wildcard("dms/*.csv", "dms/sales/product/LOAD00000001.csv"));
    assert!(!wildcard(
        "dms/*.csv",
        "dms/sales/product/LOAD00000001.csv.gz"
    ));
    assert!(wildcard("dms/*.csv.gz", "dms/a/b/LOAD00000001.csv.gz"));
    assert!(!wildcard("dms/*.parquet", "other/a/b/x.parquet"));
    assert_eq!(url_decode("a+b%24c%2Fd"), "a b$c/d");
    assert_eq!(
        render(&json!({"Fn::If": ["C", {"Ref": "A"}, {"Ref": "AWS::NoValue"}]})),
        ["${A}"]
    );
    assert!(Path::new(&root()).join("template.yaml").exists());
}

/// Every metric the functions emit in their EMF lines, from their source, with the function's
/// file that emits it (`ingest.rs`, `compact.rs`; a function's folder, `ingest/`, counts as its
/// file): the `("Name", "Unit", value)` tuples in shared/src/lambda/ (whitespace and line breaks
/// allowed), but for metrics.rs (the line's format, and its unit test's sample metric) and
/// tests.rs.
pub(super) fn emitted_metrics() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut names = std::collections::BTreeMap::<String, BTreeSet<String>>::new();
    let dir = root().join("shared/src/lambda");
    // (the function's file, a source file of it)
    let mut sources: Vec<(String, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(&dir).expect("shared/src/lambda") {
        let path = e.expect("entry").path();
        let name = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            for f in std::fs::read_dir(&path).expect("a function's folder") {
                sources.push((format!("{name}.rs"), f.expect("entry").path()));
            }
        } else {
            sources.push((name, path));
        }
    }
    for (file, path) in sources {
        if path.extension().is_none_or(|x| x != "rs")
            || path.ends_with("tests.rs")
            || path.ends_with("metrics.rs")
        {
            continue;
        }
        let text: String = std::fs::read_to_string(&path)
            .expect("source")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for unit in ["Count", "Seconds", "Milliseconds", "Bytes"] {
            let tail = format!("\", \"{unit}\",");
            let mut rest = text.as_str();
            while let Some(i) = rest.find(&tail) {
                let before = &rest[..i];
                if let Some(quote) = before.rfind('"') {
                    let name = &before[quote + 1..];
                    let opens_tuple = before[..quote].trim_end().ends_with('(');
                    if opens_tuple
                        && !name.is_empty()
                        && name.chars().all(|c| c.is_ascii_alphanumeric())
                    {
                        names
                            .entry(name.to_string())
                            .or_default()
                            .insert(file.clone());
                    }
                }
                rest = &rest[i + tail.len()..];
            }
        }
    }
    names
}

pub(super) fn emitted_metric_names() -> BTreeSet<String> {
    emitted_metrics().into_keys().collect()
}

/// The function resource whose source emits metric `name` (each metric is one function's).
pub(super) fn emitting_function(name: &str) -> &'static str {
    let metrics = emitted_metrics();
    let files = metrics
        .get(name)
        .unwrap_or_else(|| panic!("metric {name} is emitted nowhere in shared/src/lambda"));
    match files.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ingest.rs"] => "IngestFunction",
        ["compact.rs"] => "CompactFunction",
        ref other => panic!("metric {name} is emitted by {other:?}, not one function"),
    }
}

/// The dashboard body of this deployment: its `Fn::Sub` variables decided (the per-table
/// widgets), every `${...}` that names a resource or pseudo parameter replaced by `x` (each
/// checked to exist), parsed.
pub(super) fn dashboard(raw: &Value, params: &[(&str, &str)]) -> Value {
    let t = deployed(raw, params);
    let sub = &t["Resources"]["OperationsDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"];
    let (body, vars) = match sub {
        Value::Array(a) => (a[0].as_str().expect("body").to_string(), a[1].clone()),
        Value::String(s) => (s.clone(), json!({})),
        other => panic!("DashboardBody: {other}"),
    };
    let mut body = body;
    if let Some(vars) = vars.as_object() {
        for (k, v) in vars {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Object(m) => m["Fn::Sub"].as_str().expect("a Sub").to_string(),
                other => panic!("{k}: {other}"),
            };
            body = body.replace(&format!("${{{k}}}"), &v);
        }
    }
    let mut text = String::new();
    let mut rest = body.as_str();
    while let Some(i) = rest.find("${") {
        text.push_str(&rest[..i]);
        let end = rest[i..].find('}').expect("closed ${") + i;
        let name = &rest[i + 2..end];
        let resource = name.split('.').next().unwrap_or_default();
        assert!(
            name.starts_with("AWS::") || raw["Resources"].get(resource).is_some(),
            "${{{name}}} names no resource"
        );
        text.push('x');
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the dashboard body is not JSON ({e}):\n{text}"))
}

/// Metric names the dashboard shows: `dms2iceberg` rows (namespace, name, `Function`, function)
/// and SEARCH expressions; AWS namespaces apart. Checks that every `dms2iceberg` row names the
/// function that emits it, and every SEARCH stays within our namespace, its per-table
/// dimensions and one of this stack's functions.
pub(super) fn dashboard_metrics(body: &Value) -> (BTreeSet<String>, BTreeSet<String>, usize) {
    let mut shown = BTreeSet::new();
    let mut aws = BTreeSet::new();
    let mut searches = 0;
    for w in body["widgets"].as_array().expect("widgets") {
        for m in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let items = m.as_array().expect("a metric row");
            match items.first() {
                Some(Value::String(ns)) if ns == "dms2iceberg" => {
                    let name = items[1].as_str().expect("metric name");
                    assert_eq!(items[2], "Function", "{name}: dimension");
                    assert!(
                        items[3] == "x" && items.len() == 5,
                        "{name}: one dimension, the function: {m}"
                    );
                    shown.insert(name.to_string());
                }
                Some(Value::String(ns)) => {
                    aws.insert(format!("{ns} {}", items[1].as_str().unwrap_or_default()));
                }
                _ => {
                    for e in items {
                        let expr = e["expression"].as_str().unwrap_or_default();
                        if expr.contains("SEARCH(") {
                            searches += 1;
                            assert!(
                                expr.contains("{dms2iceberg,Function,Table} Function=\"x\""),
                                "a search outside our namespace, its per-table dimensions or \
                                 this stack's functions: {expr}"
                            );
                        }
                        for part in expr.split("MetricName=\"").skip(1) {
                            shown.insert(part.split('"').next().unwrap_or_default().to_string());
                        }
                    }
                }
            }
        }
    }
    (shown, aws, searches)
}

#[test]
fn the_dashboard_shows_only_metrics_the_functions_emit() {
    let raw = &loaded().raw;
    assert_eq!(
        raw["Parameters"]["Dashboard"]["Default"], "true",
        "on by default"
    );
    let dash = &raw["Resources"]["OperationsDashboard"];
    assert_eq!(dash["Type"], "AWS::CloudWatch::Dashboard");
    assert_eq!(dash["Condition"], "CreateDashboard");
    assert!(
        condition(raw, &json!({"Condition": "CreateDashboard"}), &[]),
        "created with the defaults"
    );
    assert!(
        !condition(
            raw,
            &json!({"Condition": "CreateDashboard"}),
            &[("Dashboard", "false")]
        ),
        "Dashboard=false turns it off"
    );
    // Each `dms2iceberg` row names the function that emits the metric.
    let sub = serde_json::to_string(&dash["Properties"]["DashboardBody"]).expect("json");
    let mut rest = sub.as_str();
    let row = "[\\\"dms2iceberg\\\", \\\"";
    while let Some(i) = rest.find(row) {
        let after = &rest[i + row.len()..];
        let name = &after[..after.find("\\\"").expect("name")];
        let function = format!("\\\"Function\\\", \\\"${{{}}}\\\"", emitting_function(name));
        assert!(
            after.starts_with(&format!("{name}\\\", {function}")),
            "dashboard row of {name} does not name {function}: {}",
            &after[..80.min(after.len())]
        );
        rest = after;
    }

    let emitted = emitted_metric_names();
    for must in ["FilesApplied", "LagSeconds", "CommitConflicts", "Manifests"] {
        assert!(
            emitted.contains(must),
            "the scan of the source found {emitted:?}"
        );
    }
    // TableMetrics=off (the default): the totals, no search (nothing per table is published).
    let off = dashboard(raw, &[]);
    let (shown, aws, searches) = dashboard_metrics(&off);
    assert_eq!(searches, 0, "per-table widgets with TableMetrics=off");
    let unknown: Vec<&String> = shown.difference(&emitted).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard names metrics nobody emits: {unknown:?}"
    );
    for needed in [
        "LagSeconds",
        "BacklogAgeSeconds",
        "FilesApplied",
        "RowsInserted",
        "FilesFailed",
        "FilesDeadLettered",
        "TablesBlocked",
        "FilesLeftAtDeadline",
        "CommitConflicts",
        "CommitAttempts",
        "ReadMilliseconds",
        "CommitMilliseconds",
        "FilesRewritten",
        "DeleteFilesPerDataFile",
        "Manifests",
        "TablesFailed",
        "TablesRepaired",
    ] {
        assert!(shown.contains(needed), "{needed} not on the dashboard");
    }
    for needed in [
        "AWS/SQS ApproximateNumberOfMessagesVisible",
        "AWS/SQS ApproximateAgeOfOldestMessage",
        "AWS/Lambda Errors",
        "AWS/Lambda Throttles",
    ] {
        assert!(
            aws.contains(needed),
            "{needed} not on the dashboard: {aws:?}"
        );
    }
    // TableMetrics=on: the same, and per-table widgets below them.
    let on = dashboard(raw, &[("TableMetrics", "on")]);
    let (shown_on, _, searches) = dashboard_metrics(&on);
    assert!(
        searches >= 5,
        "per-table widgets with TableMetrics=on: {searches}"
    );
    let unknown: Vec<&String> = shown_on.difference(&emitted).collect();
    assert!(unknown.is_empty(), "per-table widgets name {unknown:?}");
    assert!(
        on["widgets"].as_array().expect("widgets").len()
            > off["widgets"].as_array().expect("widgets").len()
    );
    // Widgets do not overlap (the per-table ones come below the totals).
    let mut cells = BTreeSet::new();
    for w in on["widgets"].as_array().expect("widgets") {
        let (x, y, wd, h) = (
            as_i64(&w["x"]),
            as_i64(&w["y"]),
            as_i64(&w["width"]),
            as_i64(&w["height"]),
        );
        for i in x..x + wd {
            for j in y..y + h {
                assert!(cells.insert((i, j)), "widgets overlap at ({i}, {j}): {w}");
            }
        }
    }
}
