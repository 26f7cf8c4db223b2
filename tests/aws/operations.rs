//! What running the ingest function unattended needs, through the real binary:
//! - its invocation's deadline: given a backlog it cannot finish in the time Lambda gives it,
//!   it stops starting files while there is still time to answer, says how many it left, and
//!   fails only their records (as a backlog, for SQS to deliver again) instead of timing out
//!   and failing every record of the batch;
//! - its config in Parameter Store (`ssm:<name>`), changed without a redeploy;
//! - a bad file, or a table without a primary key, reaching the dead-letter queue within the
//!   invocation (with why, which table and file), its table's later files waiting as
//!   `Blocked`, and the operator's way past it (`skip_files` in the config, a re-drive).

use std::time::Duration;

use serde_json::Value;

use serde_json::json;

use crate::common::python;
use crate::lambda_support::{Function, Lab, Outcome, http, sqs_event, sqs_record, tail};

/// Invokes `f` with `event`, its function timeout `deadline_s` seconds (the Runtime API's
/// `Lambda-Runtime-Deadline-Ms`).
fn invoke_with_deadline(f: &Function, event: &Value, deadline_s: u64) -> Outcome {
    let r = http(
        f.runtime.port,
        "POST",
        &format!("/_emulator/invoke?timeout_s=120&deadline_s={deadline_s}"),
        &[("Content-Type", "application/json")],
        event.to_string().as_bytes(),
        Duration::from_secs(130),
    )
    .unwrap();
    let v = r.json();
    Outcome {
        request_id: v["request_id"].as_str().unwrap_or("").to_string(),
        outcome: v["outcome"].as_str().unwrap_or("?").to_string(),
        body: v["body"].clone(),
        served_at_ms: v["served_at_ms"].as_i64().unwrap_or(0),
        finished_at_ms: v["finished_at_ms"].as_i64().unwrap_or(0),
        duration_ms: v["duration_ms"].as_i64().unwrap_or(0),
    }
}

#[test]
fn a_backlog_beyond_the_deadline_is_left_for_the_retry_not_timed_out() {
    python();
    let lab = Lab::new("deadline");
    lab.generate(
        "synthetic",
        &"--schema shop --table orders --rows 100 --cdc-files 40 --cdc-rows 10 --seed 3"
            .split_whitespace()
            .collect::<Vec<_>>(),
    );
    lab.upload_config(&[]);
    let table = "shop.orders";
    let files = lab.work.meta(table).files.clone();
    let mut records = Vec::new();
    for k in &files {
        lab.upload(k);
        records.push(sqs_record(&lab.s3_event(k).to_string()));
    }
    let f = Function::start(&lab, "ingest", &[]);
    // 6 s to answer a batch of 41 files: the function keeps 3 s for its answer and at least
    // a second (or twice its slowest file) in hand before starting the next file.
    let event = sqs_event(&records.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>());
    let o = invoke_with_deadline(&f, &event, 6);
    assert!(
        o.is_response(),
        "the invocation should answer before its deadline, not time out: {o:?}\n{}",
        tail(&f.log(), 4000)
    );
    assert!(
        o.duration_ms < 6_000,
        "answered after the deadline ({} ms)",
        o.duration_ms
    );
    let failed = o.batch_item_failures();
    assert!(
        !failed.is_empty() && failed.len() < records.len(),
        "some files applied, the rest left: {} of {} failed\n{}",
        failed.len(),
        records.len(),
        tail(&f.log(), 4000)
    );
    let log = f.log();
    assert!(
        log.contains("the invocation's deadline is near")
            && log.contains("not started: the invocation's deadline was near"),
        "{}",
        tail(&log, 4000)
    );
    assert!(
        log.contains("\"FilesLeftAtDeadline\""),
        "{}",
        tail(&log, 2000)
    );
    // SQS delivers the failed records again, each time with the same short deadline, until
    // the backlog is applied.
    let mut left: Vec<Value> = records
        .iter()
        .filter(|(id, _)| failed.contains(id))
        .map(|(_, r)| r.clone())
        .collect();
    let mut rounds = 0;
    while !left.is_empty() {
        rounds += 1;
        assert!(rounds <= 20, "the backlog does not shrink");
        let o = invoke_with_deadline(&f, &sqs_event(&left), 6);
        assert!(o.is_response(), "{o:?}");
        let failed = o.batch_item_failures();
        left.retain(|r| failed.iter().any(|id| r["messageId"] == *id.as_str()));
    }
    eprintln!(
        "lambda-measure: deadline: 41 files under a 6 s deadline applied in {} invocations",
        rounds + 1
    );
    lab.assert_table(table);
}

/// A fake SigV4 header naming `service` (moto routes by it and checks no signature).
fn auth(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, \
         SignedHeaders=host, Signature=0000"
    )
}

/// A JSON-protocol call to the emulator (`target`: `AmazonSSM.PutParameter`, ...).
fn call(lab: &Lab, service: &str, target: &str, content_type: &str, body: &Value) -> Value {
    let a = auth(service);
    let r = http(
        lab.moto.port,
        "POST",
        "/",
        &[
            ("Authorization", a.as_str()),
            ("X-Amz-Target", target),
            ("Content-Type", content_type),
        ],
        body.to_string().as_bytes(),
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{target}: {}", r.text());
    if r.body.is_empty() {
        json!({})
    } else {
        r.json()
    }
}

fn put_parameter(lab: &Lab, name: &str, value: &str) {
    call(
        lab,
        "ssm",
        "AmazonSSM.PutParameter",
        "application/x-amz-json-1.1",
        &json!({"Name": name, "Value": value, "Type": "String", "Overwrite": true}),
    );
}

fn create_queue(lab: &Lab, name: &str) -> String {
    call(
        lab,
        "sqs",
        "AmazonSQS.CreateQueue",
        "application/x-amz-json-1.0",
        &json!({"QueueName": name}),
    )["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every message in the queue now (body, attributes by name).
fn receive_all(lab: &Lab, url: &str) -> Vec<(String, Value)> {
    let r = call(
        lab,
        "sqs",
        "AmazonSQS.ReceiveMessage",
        "application/x-amz-json-1.0",
        &json!({"QueueUrl": url, "MaxNumberOfMessages": 10, "MessageAttributeNames": ["All"]}),
    );
    r["Messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m["Body"].as_str().unwrap_or("").to_string(),
                m["MessageAttributes"].clone(),
            )
        })
        .collect()
}

/// The EMF metric lines of a function's log, summed per metric name.
fn metric_sums(log: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for v in log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("_aws").is_some())
    {
        for m in v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let name = m["Name"].as_str().unwrap().to_string();
            *out.entry(name.clone()).or_insert(0.0) += v[&name].as_f64().unwrap_or(0.0);
        }
    }
    out
}

/// The function's config in Parameter Store; a bad file (an unknown `Op`) moved to the
/// dead-letter queue by the invocation that met it, naming its table and file; the table's
/// later file waiting as `Blocked`; the operator skips the bad file in the parameter (no
/// redeploy) and the waiting file applies; re-driven, the bad file's message is taken as
/// skipped.
#[test]
fn a_bad_file_reaches_the_dead_letter_queue_at_once_and_the_config_lives_in_parameter_store() {
    python();
    let lab = Lab::new("dead-letters");
    lab.generate("product", &["--corrupt", "unknown-op"]);
    let param = "/dms2iceberg/test/config";
    put_parameter(&lab, param, &lab.config_text(&[]));
    let dlq = create_queue(&lab, "ingest-dlq");
    let table = "sales.product";
    let keys = lab.work.meta(table).files.clone();
    let corrupt = lab.work.corrupt(table);
    let bad_key = corrupt
        .file
        .clone()
        .unwrap()
        .strip_prefix("dms/")
        .unwrap()
        .to_string();
    let later_key = "dms/sales/product/20220302-1140010000.csv".to_string();
    let later = "Op,product_id,category,product_name,quantity_available,last_update_time\n\
                 I,107,Phone,Pixel 7,9,2022-03-02 11:40:01.000000\n";
    for k in &keys {
        lab.upload(k);
    }
    lab.upload(&bad_key);
    lab.moto
        .put(crate::lambda_support::LANDING, &later_key, later.as_bytes());
    let config = format!("ssm:{param}");
    let mut f = Function::start(
        &lab,
        "ingest",
        &[
            ("DMS2ICEBERG_CONFIG", config.as_str()),
            ("DMS2ICEBERG_DEAD_LETTER_QUEUE_URL", dlq.as_str()),
        ],
    );
    let mut recs: Vec<(String, Value)> = keys
        .iter()
        .map(|k| sqs_record(&lab.s3_event(k).to_string()))
        .collect();
    let bad = sqs_record(&lab.s3_event(&bad_key).to_string());
    let later_event = {
        let mut e = lab.s3_event(&keys[0]);
        e["Records"][0]["s3"]["object"]["key"] = json!(later_key);
        e
    };
    let later_rec = sqs_record(&later_event.to_string());
    recs.push(bad.clone());
    recs.push(later_rec.clone());
    let o = f.invoke_ok(&sqs_event(
        &recs.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
    ));
    // The bad file's record is handled (moved); the later file's waits.
    assert_eq!(
        o.batch_item_failures(),
        vec![later_rec.0.clone()],
        "{}",
        o.body
    );
    let moved = receive_all(&lab, &dlq);
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(
        moved[0].0,
        bad.1["body"].as_str().unwrap(),
        "the record as received"
    );
    let attrs = &moved[0].1;
    assert_eq!(attrs["errorType"]["StringValue"], "InputError", "{attrs}");
    assert!(
        attrs["file"]["StringValue"]
            .as_str()
            .unwrap()
            .ends_with(&bad_key)
            && attrs["table"]["StringValue"] == "sales.product"
            && attrs["reason"]["StringValue"]
                .as_str()
                .unwrap()
                .contains("Op"),
        "{attrs}"
    );
    let log = f.log();
    assert!(
        log.contains("record moved to the dead-letter queue")
            && log.contains("\"kind\":\"Blocked\"")
            && log.contains("waiting behind"),
        "{}",
        tail(&log, 4000)
    );
    let sums = metric_sums(&log);
    assert_eq!(sums.get("FilesDeadLettered"), Some(&1.0), "{sums:?}");
    assert!(sums.get("TablesBlocked") >= Some(&1.0), "{sums:?}");
    assert!(sums.get("BacklogAgeSeconds") > Some(&0.0), "{sums:?}");

    // The operator skips the bad file in the parameter; the warm function reads it again.
    let skip = format!("skip_files = [\"{bad_key}\"]");
    put_parameter(&lab, param, &lab.config_text(&[(table, skip.as_str())]));
    let o = f.invoke_ok(&sqs_event(std::slice::from_ref(&later_rec.1)));
    assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    // Re-driven, the bad file's message is done: its file is skipped.
    let o = f.invoke_ok(&sqs_event(std::slice::from_ref(&bad.1)));
    assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    let name = lab.glue_name(&lab.work.meta(table));
    let rows = lab.scan(&name);
    assert!(
        rows.iter().any(|r| r["product_id"] == 107),
        "the later file applied: {rows:?}"
    );
    let mut expected = lab.work.expected(table);
    expected.push(
        rows.iter()
            .find(|r| r["product_id"] == 107)
            .unwrap()
            .clone(),
    );
    crate::common::assert_rows("scan", &lab.work.meta(table), &expected, &rows);
}

/// A table without a primary key in the config: its files' records go to the dead-letter
/// queue at once (`ConfigError`), with a log line naming the table and the setting.
#[test]
fn a_table_without_a_key_fails_loudly_at_once() {
    python();
    let lab = Lab::new("no-key");
    lab.generate(
        "synthetic",
        &"--schema shop --table orders --rows 20 --cdc-files 1 --cdc-rows 5 --seed 4"
            .split_whitespace()
            .collect::<Vec<_>>(),
    );
    // The config without the table's section: no key for it.
    lab.moto.put(
        crate::lambda_support::LANDING,
        crate::lambda_support::CONFIG_KEY,
        b"[source]\nbucket_folder = \"dms\"\n",
    );
    let dlq = create_queue(&lab, "no-key-dlq");
    let mut f = Function::start(
        &lab,
        "ingest",
        &[("DMS2ICEBERG_DEAD_LETTER_QUEUE_URL", dlq.as_str())],
    );
    let keys = lab.work.meta("shop.orders").files.clone();
    let recs: Vec<Value> = keys
        .iter()
        .map(|k| {
            lab.upload(k);
            sqs_record(&lab.s3_event(k).to_string()).1
        })
        .collect();
    let o = f.invoke_ok(&sqs_event(&recs));
    assert!(o.batch_item_failures().is_empty(), "all moved: {}", o.body);
    let moved = receive_all(&lab, &dlq);
    assert_eq!(moved.len(), keys.len(), "{moved:?}");
    assert!(
        moved
            .iter()
            .all(|(_, a)| a["errorType"]["StringValue"] == "ConfigError")
    );
    let log = f.log();
    assert!(
        log.contains("primary")
            && log.contains("shop.orders")
            && log.contains("\"level\":\"ERROR\""),
        "{}",
        tail(&log, 3000)
    );
    let sums = metric_sums(&log);
    assert_eq!(
        sums.get("FilesDeadLettered"),
        Some(&(keys.len() as f64)),
        "{sums:?}"
    );
}

/// The metrics' `Function` dimension is the deployed function's name (what the template's
/// alarms name), not a fixed role: two stacks in one account keep their metrics and alarms
/// apart. Every EMF line of both binaries, under the names the Runtime API gives them.
#[test]
fn metrics_name_the_deployed_function() {
    python();
    let lab = Lab::new("metric-names");
    lab.generate(
        "synthetic",
        &"--schema shop --table orders --rows 20 --cdc-files 1 --cdc-rows 5 --seed 2"
            .split_whitespace()
            .collect::<Vec<_>>(),
    );
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "stack-a-IngestFunction-1X2Y", &[]);
    for k in lab.work.meta("shop.orders").files.clone() {
        lab.upload(&k);
        f.invoke_ok(&lab.s3_event(&k));
    }
    let mut c = Function::start_compact(&lab, "stack-a-CompactFunction-3Z4W", &[]);
    c.invoke_ok(&crate::lambda_support::scheduled_event());
    for (fun, name) in [
        (&f, "stack-a-IngestFunction-1X2Y"),
        (&c, "stack-a-CompactFunction-3Z4W"),
    ] {
        let lines: Vec<Value> = fun
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("_aws").is_some())
            .collect();
        assert!(
            !lines.is_empty(),
            "{name}: no metrics\n{}",
            tail(&fun.log(), 2000)
        );
        for v in &lines {
            assert_eq!(v["Function"], name, "{v}");
            assert_eq!(
                v["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
                json!([["Function"]]),
                "per-table metrics are off by default: {v}"
            );
        }
    }
}
