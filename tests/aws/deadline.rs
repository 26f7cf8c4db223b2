//! The ingest function against its invocation's deadline: given a backlog it cannot finish in
//! the time Lambda gives it, it stops starting files while there is still time to answer, says
//! how many it left, and fails only their records (as a backlog, for SQS to deliver again)
//! instead of timing out and failing every record of the batch.

use std::time::Duration;

use serde_json::Value;

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
