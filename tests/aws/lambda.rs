//! End-to-end tests of the Lambda functions (`dms2iceberg-ingest`, `dms2iceberg-compact`) against
//! a local S3 + Glue.
//!
//! The real binary runs its real `lambda_runtime` loop against a Lambda Runtime API emulator
//! (`tests/support/lambda_runtime_api.py`), with S3 and Glue from moto in server mode
//! (`tests/support/moto_server.py`, whose Glue refuses a stale `UpdateTable` `VersionId` as AWS
//! does). DMS trees come from `tests/support/dmsgen.py`, uploaded under `dms/<schema>/<table>/`
//! of a landing bucket; events are S3 notifications (as dmsgen writes them, keys URL-encoded),
//! SQS batches wrapping S3 notifications or EventBridge events, and EventBridge events. After each
//! scenario the whole table is read back through Glue by our CLI (`scan --catalog glue`) and by
//! PyIceberg's GlueCatalog, and compared with the state dmsgen computed independently.
//!
//! Run through `scripts/test` (it provides DMS2ICEBERG_PYTHON with moto and PyIceberg). Figures
//! (cold start, warm per-file latency) are printed with `--nocapture`:
//! `DMS2ICEBERG_PYTHON=$PWD/.venv/bin/python cargo test --features e2e --test aws lambda:: --
//! --nocapture`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use crate::common::python;
use crate::lambda_support::*;
use serde_json::{Value, json};

/// dmsgen arguments from one string (no argument contains a space).
fn args(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// Fails loudly, with instructions, when the Python test environment is not set up.
fn require_python() {
    let _ = python();
}

fn keys_of(lab: &Lab, table: &str) -> Vec<String> {
    lab.files(table)
}

/// Every recorded source file appears once, and exactly `files` are recorded.
fn assert_each_file_once(lab: &Lab, glue_table: &str, files: &[String]) {
    let applied = lab.applied_files(glue_table);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for f in &applied {
        *counts.entry(f.clone()).or_default() += 1;
    }
    let dup: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        dup.is_empty(),
        "{glue_table}: files applied more than once: {dup:?}"
    );
    for f in files {
        assert!(
            applied.iter().any(|a| a.ends_with(f.as_str())),
            "{glue_table}: {f} is not recorded as applied; recorded: {applied:?}"
        );
    }
    assert_eq!(
        applied.len(),
        files.len(),
        "{glue_table}: recorded {applied:?}, expected exactly {files:?}"
    );
}

/// The EMF metric lines the function printed, summed per metric.
fn emf_totals(log: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        if v.get("_aws").is_none() {
            continue;
        }
        for (k, x) in v.as_object().unwrap() {
            if let Some(n) = x.as_f64() {
                *out.entry(k.clone()).or_insert(0.0) += n;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------

#[test]
fn glue_update_table_refuses_a_stale_version_id() {
    require_python();
    let lab = Lab::new("glue_version");
    lab.skip_verify(
        "vdb.t is a bare Glue entry for the emulator's VersionId check, not an Iceberg table: \
         its metadata_location is `b1`",
    );
    let m = &lab.moto;
    m.glue("CreateDatabase", &json!({"DatabaseInput": {"Name": "vdb"}}))
        .unwrap();
    let input = |loc: &str| {
        json!({"Name": "t", "TableType": "EXTERNAL_TABLE",
               "Parameters": {"table_type": "ICEBERG", "metadata_location": loc}})
    };
    m.glue(
        "CreateTable",
        &json!({"DatabaseName": "vdb", "TableInput": input("m0")}),
    )
    .unwrap();
    // Two writers read the same version ...
    let base = m.glue_table("vdb", "t")["VersionId"]
        .as_str()
        .expect("GetTable returns a VersionId")
        .to_string();
    // ... the first update from it succeeds ...
    m.glue(
        "UpdateTable",
        &json!({"DatabaseName": "vdb", "TableInput": input("a1"), "VersionId": base}),
    )
    .expect("the first update from the current version is accepted");
    // ... the second from the same base is refused, as AWS Glue does.
    let err = m
        .glue(
            "UpdateTable",
            &json!({"DatabaseName": "vdb", "TableInput": input("b1"), "VersionId": base}),
        )
        .expect_err("a second update from the same base must be refused");
    assert_eq!(err.0, "ConcurrentModificationException", "{err:?}");
    let t = m.glue_table("vdb", "t");
    assert_eq!(t["Parameters"]["metadata_location"], "a1", "{t}");
    let v1 = t["VersionId"].as_str().unwrap().to_string();
    assert_ne!(v1, base, "a successful update bumps the version");
    // The loser retries from what it now reads: accepted.
    m.glue(
        "UpdateTable",
        &json!({"DatabaseName": "vdb", "TableInput": input("b1"), "VersionId": v1}),
    )
    .unwrap();
    assert_eq!(
        m.glue_table("vdb", "t")["Parameters"]["metadata_location"],
        "b1"
    );
    let s = m.stats();
    assert_eq!(s["update_table"]["refused"], 1, "{s}");
    assert_eq!(s["update_table"]["applied"], 2, "{s}");
}

/// The end-of-test check on Glue (what every `Lab` runs when it drops) fails on a table whose
/// current metadata object is gone (the defect of issue 48), naming it; `dms2iceberg repair
/// --catalog glue` points the table back at the metadata before, which reads as the source after
/// the earlier files; the next ingest applies the lost file again and the check passes.
#[test]
fn a_damaged_glue_table_fails_the_end_of_test_check_until_repaired() {
    require_python();
    let lab = Lab::new("glue_damaged");
    lab.generate(
        "synthetic",
        &args("--rows 60 --cdc-files 3 --cdc-rows 20 --asof --seed 48"),
    );
    let table = "shop.orders";
    let meta = lab.work.meta(table);
    let config = lab.work.config().display().to_string();
    let glue = ["--catalog", "glue", "--warehouse", WAREHOUSE];
    let with_glue = |a: &[&str]| -> common::Run {
        let mut all = a.to_vec();
        all.extend(glue);
        lab.cli(&all)
    };
    let scan = || -> Vec<Value> {
        let r = with_glue(&["scan", table, "--format", "json"]).assert_success();
        common::parse_json_lines(&r.stdout, "scan")
    };
    let dms = lab.work.dms().display().to_string();
    with_glue(&["ingest", &dms, "--config", &config]).assert_success();
    let verified = lab.verify_tables();
    assert_eq!(verified.len(), 1, "{verified:?}");
    assert_eq!(verified[0]["snapshots"], meta.files.len(), "{verified:?}");
    let current = verified[0]["metadata_location"]
        .as_str()
        .unwrap()
        .to_string();

    lab.moto.delete(
        WAREHOUSE_BUCKET,
        current
            .strip_prefix(&format!("s3://{WAREHOUSE_BUCKET}/"))
            .unwrap(),
    );
    let e = lab
        .moto
        .check_catalogs(&lab.work.dir)
        .expect_err("the end-of-test check must fail on a damaged Glue table");
    assert!(e.contains(&current), "{e}");

    let r = with_glue(&["repair", table, "--format", "json"]).assert_success();
    let report: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(report["damaged"], current.as_str(), "{report}");
    assert!(report["metadata_location"].is_string(), "{report}");
    assert_eq!(lab.verify_tables().len(), 1);
    let n = meta.files.len() - 1;
    let restored = lab
        .work
        .asof(table)
        .into_iter()
        .find(|s| s.after_file == meta.files[n - 1])
        .expect("as-of state before the lost file")
        .rows;
    common::assert_rows("scan after repair", &meta, &restored, &scan());

    with_glue(&["ingest", &dms, "--config", &config]).assert_success();
    common::assert_rows("scan at the end", &meta, &lab.work.expected(table), &scan());
}

#[test]
fn s3_notifications_apply_each_file_as_it_lands() {
    require_python();
    let lab = Lab::new("s3");
    // CSV product example; a CSV table whose folder name is URL-encoded in events (`$` -> `%24`)
    // and that gains a column at its 3rd change file; a Parquet table that gains one at its 2nd.
    lab.generate("product", &[]);
    lab.generate("synthetic", &args("--schema shop --table order$items --target shop.order_items --rows 150 --cdc-files 6 --cdc-rows 8 --add-column-at-file 3 --seed 7"));
    lab.generate("synthetic", &args("--format parquet --schema pq --table orders --rows 150 --cdc-files 3 --cdc-rows 40 --add-column-at-file 2 --seed 11"));
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "ingest", &[]);
    let cold_start_ms = f.cold_start_ms;
    let mut warm = Vec::new();
    let mut requests: BTreeMap<String, i64> = BTreeMap::new();
    for table in ["sales.product", "shop.order_items", "pq.orders"] {
        let steps = lab.work.asof(table);
        let meta = lab.work.meta(table);
        let name = lab.glue_name(&meta);
        for (i, key) in keys_of(&lab, table).iter().enumerate() {
            lab.upload(key);
            let ev = lab.s3_event(key);
            if table == "shop.order_items" {
                let k = ev["Records"][0]["s3"]["object"]["key"].as_str().unwrap();
                assert!(k.contains("order%24items"), "dmsgen encodes the key: {k}");
            }
            let before = lab.moto.stats()["requests"].clone();
            let o = f.invoke_ok(&ev);
            assert_eq!(
                o.body["tables"].as_array().map(Vec::len),
                Some(1),
                "{}",
                o.body
            );
            if !key.contains("LOAD") && table != "pq.orders" {
                warm.push(o.duration_ms);
                let after = lab.moto.stats()["requests"].clone();
                for (k, n) in after.as_object().unwrap() {
                    let d = n.as_i64().unwrap() - before[k].as_i64().unwrap_or(0);
                    *requests.entry(k.clone()).or_insert(0) += d;
                }
            }
            // After each file the table is exactly the state after that file.
            let got = lab.scan(&name);
            common::assert_rows(&format!("{name} after {key}"), &meta, &steps[i].rows, &got);
        }
        lab.assert_table(table);
        assert_each_file_once(&lab, &name, &meta.files);
    }
    for (table, col) in [("shop.order_items", "channel"), ("pq.orders", "channel")] {
        let t = lab.assert_glue_entry(table);
        let cols: Vec<&str> = t["StorageDescriptor"]["Columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["Name"].as_str().unwrap())
            .collect();
        assert!(
            cols.contains(&col),
            "{table}: the column a later file added is not in Glue: {cols:?}"
        );
    }
    eprintln!(
        "lambda-measure: cold start {cold_start_ms} ms (spawn -> first /next), init_ms {:?}; \
         warm per-file latency (one small change file per S3 event) median {} ms, min {} ms, \
         max {} ms over {} invocations",
        f.init_ms(),
        median(&warm),
        warm.iter().min().unwrap(),
        warm.iter().max().unwrap(),
        warm.len()
    );
    // Step timings reach CloudWatch as EMF metrics, and they account for the work done.
    let emf = emf_totals(&f.log());
    let steps: Vec<f64> = [
        "ReadMilliseconds",
        "LookupMilliseconds",
        "WriteMilliseconds",
        "CommitMilliseconds",
    ]
    .iter()
    .map(|m| {
        *emf.get(*m)
            .unwrap_or_else(|| panic!("no {m} metric: {emf:?}"))
    })
    .collect();
    assert!(
        steps.iter().all(|ms| *ms > 0.0),
        "a step took no time: {steps:?}"
    );
    eprintln!(
        "lambda-measure: summed over every file: read {:.0} ms, lookup {:.0} ms, write {:.0} ms, \
         commit {:.0} ms (EMF)",
        steps[0], steps[1], steps[2], steps[3]
    );
    let per_file: Vec<String> = requests
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {:.1}", *n as f64 / warm.len() as f64))
        .collect();
    eprintln!(
        "lambda-measure: emulator requests per warm change file: {}",
        per_file.join(", ")
    );
}

#[test]
fn sqs_batches_report_partial_failures() {
    require_python();
    let lab = Lab::new("sqs");
    lab.generate("synthetic", &args("--schema shop --table orders --rows 120 --cdc-files 4 --cdc-rows 30 --before-image --pk-update-ratio 0.1 --seed 3"));
    lab.generate("product", &["--format", "parquet"]);
    lab.upload_config(&[]);
    let mut files = Vec::new();
    for t in ["sales.product", "shop.orders"] {
        for k in keys_of(&lab, t) {
            let size = lab.upload(&k);
            files.push((t, k, size));
        }
    }
    // At most 3 files per table per invocation: the rest of a backlog is retried via SQS.
    let mut f = Function::start(
        &lab,
        "ingest",
        &[("DMS2ICEBERG_MAX_FILES_PER_INVOCATION", "3")],
    );
    // One message per object, alternating S3-notification and EventBridge bodies (S3 can
    // notify SQS directly, or through EventBridge), plus a malformed message and S3's TestEvent.
    let mut records = Vec::new();
    let mut id_of: BTreeMap<String, String> = BTreeMap::new();
    for (i, (_, key, size)) in files.iter().enumerate() {
        let body = if i % 2 == 0 {
            lab.s3_event(key)
        } else {
            eventbridge_event(LANDING, key, *size)
        };
        let (id, rec) = sqs_record(&body.to_string());
        id_of.insert(key.clone(), id);
        records.push(rec);
    }
    let (bad_id, bad) = sqs_record("this is not JSON");
    let (_, test) = sqs_record(
        &json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-30T12:00:00Z",
                "Bucket": LANDING, "RequestId": "R", "HostId": "H"})
        .to_string(),
    );
    records.push(bad);
    records.push(test);
    Rng::new(5).shuffle(&mut records);
    assert_eq!(records.len(), 10);
    let o = f.invoke_ok(&sqs_event(&records));
    // Failed: the malformed message, and orders' 4th and 5th files (beyond the cap of 3).
    let orders = keys_of(&lab, "shop.orders");
    let mut expected: Vec<String> = vec![
        bad_id.clone(),
        id_of[&orders[3]].clone(),
        id_of[&orders[4]].clone(),
    ];
    expected.sort();
    assert_eq!(o.batch_item_failures(), expected, "response: {}", o.body);
    lab.assert_table("sales.product");
    let steps = lab.work.asof("shop.orders");
    lab.assert_table_rows("shop.orders", &steps[2].rows, "after-cap");

    // SQS redelivers the failed messages: the backlog completes, the malformed one fails again.
    let retry: Vec<Value> = records
        .iter()
        .filter(|r| expected.contains(&r["messageId"].as_str().unwrap().to_string()))
        .cloned()
        .collect();
    let o = f.invoke_ok(&sqs_event(&retry));
    assert_eq!(
        o.batch_item_failures(),
        vec![bad_id],
        "response: {}",
        o.body
    );
    lab.assert_table("shop.orders");
    for t in ["sales.product", "shop.orders"] {
        let meta = lab.work.meta(t);
        assert_each_file_once(&lab, &lab.glue_name(&meta), &meta.files);
    }
}

#[test]
fn eventbridge_object_created_events() {
    require_python();
    // `$` in the table folder: AWS does not say whether EventBridge keys are URL-encoded, and
    // the function decodes them either way (safe for DMS keys). Each object's event comes as
    // stored (`line$items`), and once more URL-encoded (`line%24items`) as a duplicate.
    let lab = Lab::new("eventbridge");
    lab.generate("synthetic", &args("--format parquet --schema shop --table line$items --target shop.line_items --date-folders --rows 100 --cdc-files 3 --cdc-rows 30 --seed 5"));
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "ingest", &[]);
    let keys = keys_of(&lab, "shop.line_items");
    assert!(
        keys[0].contains("/2022/") && keys[0].contains("line$items"),
        "date folders expected: {keys:?}"
    );
    let steps = lab.work.asof("shop.line_items");
    let meta = lab.work.meta("shop.line_items");
    for (i, key) in keys.iter().enumerate() {
        let size = lab.upload(key);
        f.invoke_ok(&eventbridge_event(LANDING, key, size));
        let encoded = lab.s3_event(key)["Records"][0]["s3"]["object"]["key"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(encoded.contains("line%24items"), "{encoded}");
        f.invoke_ok(&eventbridge_event(LANDING, &encoded, size));
        let got = lab.scan(&lab.glue_name(&meta));
        common::assert_rows(&format!("after {key}"), &meta, &steps[i].rows, &got);
    }
    // Events that name no DMS data file are accepted and change nothing.
    f.invoke_ok(&eventbridge_event(LANDING, CONFIG_KEY, 10));
    let mut deleted = eventbridge_event(LANDING, &keys[1], 10);
    deleted["detail-type"] = json!("Object Deleted");
    f.invoke_ok(&deleted);
    lab.assert_table("shop.line_items");
    assert_each_file_once(&lab, &lab.glue_name(&meta), &meta.files);
}

#[test]
fn duplicated_shuffled_and_late_events() {
    require_python();
    let lab = Lab::new("shuffled");
    lab.generate("synthetic", &args("--schema shop --table orders --rows 100 --cdc-files 6 --cdc-rows 25 --before-image --pk-update-ratio 0.1 --seed 21"));
    lab.generate("product", &[]);
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "ingest", &[]);

    // 1. Objects land in DMS order; their events come late, shuffled and duplicated, as direct
    //    S3 events or in SQS batches. Whatever arrives, every object already uploaded is applied.
    let table = "shop.orders";
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let steps = lab.work.asof(table);
    let files = meta.files.clone();
    let mut rng = Rng::new(42);
    let mut pool: Vec<String> = Vec::new();
    for (i, key) in files.iter().enumerate() {
        lab.upload(key);
        pool.push(key.clone());
        let k = rng.below(4);
        if k == 0 {
            continue; // this object's event is still "in flight"
        }
        let picks: Vec<String> = (0..k)
            .map(|_| pool[rng.below(pool.len())].clone())
            .collect();
        if rng.below(2) == 0 {
            for p in &picks {
                f.invoke_ok(&lab.s3_event(p));
            }
        } else {
            let recs: Vec<Value> = picks
                .iter()
                .map(|p| sqs_record(&lab.s3_event(p).to_string()).1)
                .collect();
            let o = f.invoke_ok(&sqs_event(&recs));
            assert!(o.batch_item_failures().is_empty(), "{}", o.body);
        }
        let got = lab.scan(&name);
        common::assert_rows(
            &format!(
                "{name} after events {picks:?} with {} object(s) uploaded",
                i + 1
            ),
            &meta,
            &steps[i].rows,
            &got,
        );
    }
    // Every event once more, twice each, shuffled, in batches of 10.
    let mut all: Vec<String> = files.iter().chain(files.iter()).cloned().collect();
    rng.shuffle(&mut all);
    for chunk in all.chunks(10) {
        let recs: Vec<Value> = chunk
            .iter()
            .map(|p| sqs_record(&lab.s3_event(p).to_string()).1)
            .collect();
        let o = f.invoke_ok(&sqs_event(&recs));
        assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    }
    lab.assert_table(table);
    assert_each_file_once(&lab, &name, &files);

    // 2. A later change file lands (and is applied) before an earlier one: the earlier one is a
    //    late file, re-merged so the table ends as if both had been applied in DMS order.
    let table = "sales.product";
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let [load, first, second] = <[String; 3]>::try_from(meta.files.clone()).unwrap();
    lab.upload(&load);
    f.invoke_ok(&lab.s3_event(&load));
    lab.upload(&second);
    f.invoke_ok(&lab.s3_event(&second));
    let got = lab.scan(&name);
    let ids: Vec<i64> = got
        .iter()
        .map(|r| r["product_id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![100, 101, 102, 104, 105],
        "after {second} only: {got:?}"
    );
    assert_eq!(got[2]["quantity_available"], 11, "{got:?}");
    lab.upload(&first);
    let (_, a) = sqs_record(&lab.s3_event(&first).to_string());
    let (_, b) = sqs_record(&lab.s3_event(&first).to_string());
    let o = f.invoke_ok(&sqs_event(&[a, b]));
    assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    // 102 keeps the later file's 11 (not the late file's 16); 106 from the late file is there.
    lab.assert_table(table);
    assert_each_file_once(&lab, &name, &meta.files);
}

/// A bad file (unknown Op on line 37) in the middle of sales.product, applied in one SQS batch
/// with a later valid file of the same table and files of another table.
struct BadFile {
    lab: Lab,
    bad_id: String,
    /// The warm function that met the bad file.
    f: Option<Function>,
    bad_key: String,
    later_key: String,
    bad_rec: Value,
    later_rec: Value,
    product_name: String,
}

/// The `reason` of the function's `record failed` log line for an SQS message.
fn failure_reason(f: &Function, message_id: &str) -> String {
    let log = f.log();
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            v["fields"]["message"] == "record failed"
                && v["fields"]["record"]
                    .as_str()
                    .is_some_and(|r| r.contains(message_id))
        })
        .and_then(|v| v["fields"]["reason"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no `record failed` log line for message {message_id}:\n{log}"))
}

fn blocked_by_bad_file(name: &str) -> BadFile {
    require_python();
    let lab = Lab::new(name);
    // sales.product gets a 4th change file with an unknown Op on line 37 (held back by dmsgen).
    lab.generate("product", &["--corrupt", "unknown-op"]);
    lab.generate(
        "synthetic",
        &args("--schema shop --table orders --rows 80 --cdc-files 3 --cdc-rows 20 --seed 9"),
    );
    lab.upload_config(&[]);
    let corrupt = lab.work.corrupt("sales.product");
    let bad_key = corrupt
        .file
        .clone()
        .unwrap()
        .strip_prefix("dms/")
        .unwrap()
        .to_string();
    assert!(bad_key.ends_with("20220302-1136010000.csv"), "{bad_key}");
    // A valid change file after the bad one.
    let later_key = "dms/sales/product/20220302-1140010000.csv".to_string();
    let later = "Op,product_id,category,product_name,quantity_available,last_update_time\n\
                 I,107,Phone,Pixel 7,9,2022-03-02 11:40:01.000000\n\
                 D,100,Smartphone,Apple iPhone 12,30,2022-03-02 11:30:01.000000\n";
    let product = keys_of(&lab, "sales.product");
    let orders = keys_of(&lab, "shop.orders");
    for k in product.iter().chain(&orders[..2]) {
        lab.upload(k);
    }
    let mut f = Function::start(&lab, "ingest", &[]);
    let recs: Vec<Value> = product
        .iter()
        .chain(&orders[..2])
        .map(|k| sqs_record(&lab.s3_event(k).to_string()).1)
        .collect();
    let o = f.invoke_ok(&sqs_event(&recs));
    assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    let product_name = lab.glue_name(&lab.work.meta("sales.product"));
    let snapshots_before = lab.history(&product_name).len();
    let pointer_before =
        lab.moto.glue_table(DB, "product")["Parameters"]["metadata_location"].clone();

    // The bad file, a later file of the same table and the rest of orders, in one batch.
    lab.upload(&bad_key);
    lab.moto.put(LANDING, &later_key, later.as_bytes());
    for k in &orders[2..] {
        lab.upload(k);
    }
    let (bad_id, bad_rec) = sqs_record(&lab.s3_event(&bad_key).to_string());
    let later_event = {
        let mut e = lab.s3_event(&product[2]);
        e["Records"][0]["s3"]["object"]["key"] = json!(later_key);
        e
    };
    let (later_id, later_rec) = sqs_record(&later_event.to_string());
    let mut recs = vec![bad_rec.clone(), later_rec.clone()];
    recs.extend(
        orders[2..]
            .iter()
            .map(|k| sqs_record(&lab.s3_event(k).to_string()).1),
    );
    Rng::new(3).shuffle(&mut recs);
    let o = f.invoke_ok(&sqs_event(&recs));
    let mut expected = vec![bad_id.clone(), later_id.clone()];
    expected.sort();
    assert_eq!(o.batch_item_failures(), expected, "{}", o.body);
    // The reason (logged) names the bad file and the line.
    let reason = failure_reason(&f, &bad_id);
    assert!(
        reason.contains(&bad_key) && common::mentions_number(&reason, corrupt.line.unwrap()),
        "the reason should name {bad_key} and line {}: {reason}",
        corrupt.line.unwrap()
    );
    // Nothing of the bad file and nothing after it; the other table went on.
    lab.assert_table_rows(
        "sales.product",
        &lab.work.expected("sales.product"),
        "blocked",
    );
    assert_eq!(lab.history(&product_name).len(), snapshots_before);
    assert_eq!(
        lab.moto.glue_table(DB, "product")["Parameters"]["metadata_location"],
        pointer_before
    );
    lab.assert_table("shop.orders");
    BadFile {
        lab,
        bad_id,
        f: Some(f),
        bad_key,
        later_key,
        bad_rec,
        later_rec,
        product_name,
    }
}

impl BadFile {
    /// The operator lists the bad file under `skip_files` and re-uploads the config.
    fn skip_bad_file(&self) {
        let line = format!("skip_files = [\"{}\"]", self.bad_key);
        self.lab.upload_config(&[("sales.product", &line)]);
    }

    /// SQS redelivers the two failed messages to `f`: both succeed, the later file is applied,
    /// the bad one never.
    fn redeliver_and_check(&self, f: &mut Function) {
        let o = f.invoke_ok(&sqs_event(&[self.bad_rec.clone(), self.later_rec.clone()]));
        assert!(
            o.batch_item_failures().is_empty(),
            "after skip_files: {}",
            o.body
        );
        let mut rows: Vec<Value> = self
            .lab
            .work
            .expected("sales.product")
            .into_iter()
            .filter(|r| r["product_id"] != 100)
            .collect();
        rows.push(
            json!({"product_id": 107, "category": "Phone", "product_name": "Pixel 7",
                         "quantity_available": 9,
                         "last_update_time": "2022-03-02 11:40:01.000000"}),
        );
        self.lab
            .assert_table_rows("sales.product", &rows, "skipped");
        let applied = self.lab.applied_files(&self.product_name);
        assert!(
            !applied.iter().any(|a| a.ends_with(&self.bad_key)),
            "the skipped file is recorded as applied: {applied:?}"
        );
        assert!(
            applied.iter().any(|a| a.ends_with(&self.later_key)),
            "{applied:?}"
        );
    }
}

#[test]
fn bad_file_blocks_its_table_until_skipped() {
    let b = blocked_by_bad_file("badfile");
    // The function reads its config at initialisation: the change reaches new execution
    // environments (here: a new process; on AWS, e.g. after a configuration update).
    let mut b = b;
    b.skip_bad_file();
    drop(b.f.take());
    let mut f2 = Function::start(&b.lab, "ingest-2", &[]);
    b.redeliver_and_check(&mut f2);
}

/// A warm execution environment re-reads an `s3://` config on every invocation, so an
/// operator's `skip_files` (re-uploaded config.toml) reaches it without a cold start.
#[test]
fn skip_files_reaches_a_warm_function() {
    let mut b = blocked_by_bad_file("badfile_warm");
    b.skip_bad_file();
    let mut f = b.f.take().unwrap();
    b.redeliver_and_check(&mut f);
}

#[test]
fn racing_functions_end_exact() {
    racing_functions("race", None);
}

/// The same race on a format version 3 table (`DMS2ICEBERG_FORMAT_VERSION=3`, the template's
/// `FormatVersion`): deletion vectors and row ids under concurrent functions, read by PyIceberg
/// and DuckDB.
#[test]
fn racing_functions_on_a_v3_table_end_exact() {
    racing_functions("race_v3", Some("3"));
}

fn racing_functions(name: &str, format_version: Option<&str>) {
    require_python();
    let lab = Lab::new(name);
    lab.generate("synthetic", &args("--schema shop --table orders --rows 150 --cdc-files 6 --cdc-rows 30 --before-image --pk-update-ratio 0.1 --seed 13"));
    lab.upload_config(&[]);
    let meta = lab.work.meta("shop.orders");
    let name = lab.glue_name(&meta);
    let files = meta.files.clone();
    let env: Vec<(&str, &str)> = format_version
        .map(|v| ("DMS2ICEBERG_FORMAT_VERSION", v))
        .into_iter()
        .collect();
    let mut a = Function::start(&lab, "ingest-a", &env);
    let mut b = Function::start(&lab, "ingest-b", &env);

    // 1. Both create the table from the full load at the same time (CreateTable races).
    lab.upload(&files[0]);
    let ev = lab.s3_event(&files[0]);
    let (oa, ob) = race(&mut a, &mut b, ev.clone(), ev);
    assert_both_answered(&oa, &ob, &a, &b);
    lab.assert_table_rows("shop.orders", &lab.work.asof("shop.orders")[0].rows, "load");

    // 2. Six change files, both functions apply the backlog at once. Every UpdateTable waits
    //    300 ms before its atomic check, so both pass the pointer check from the same base and
    //    Glue's VersionId decides.
    for k in &files[1..] {
        lab.upload(k);
    }
    lab.moto.set_update_table_delay_ms(300);
    let refused_before = lab.moto.stats()["update_table"]["refused"]
        .as_i64()
        .unwrap();
    let last = lab.s3_event(files.last().unwrap());
    let batch = lab.sqs_batch(&files[1..]);
    let (oa, ob) = race(&mut a, &mut b, last, batch);
    lab.moto.set_update_table_delay_ms(0);
    assert_both_answered(&oa, &ob, &a, &b);
    assert!(ob.batch_item_failures().is_empty(), "{}", ob.body);
    let stats = lab.moto.stats();
    let refused = stats["update_table"]["refused"].as_i64().unwrap() - refused_before;
    assert!(
        refused >= 1,
        "no UpdateTable was refused for a stale VersionId: the race did not reach Glue's \
         compare-and-swap ({stats})"
    );
    lab.assert_table("shop.orders");
    assert_each_file_once(&lab, &name, &files);
    let table = name.rsplit('.').next().unwrap();
    let location = lab.moto.glue_table(DB, table)["Parameters"]["metadata_location"]
        .as_str()
        .unwrap()
        .to_string();
    let (bucket, key) = location
        .trim_start_matches("s3://")
        .split_once('/')
        .unwrap();
    let md: Value = serde_json::from_slice(&lab.moto.get(bucket, key).unwrap()).unwrap();
    assert_eq!(
        md["format-version"].as_i64(),
        Some(format_version.map_or(2, |v| v.parse().unwrap())),
        "{location}"
    );
    if format_version == Some("3") {
        assert!(md["next-row-id"].as_i64().unwrap() >= 150, "{location}");
    }
    let (ta, tb) = (emf_totals(&a.log()), emf_totals(&b.log()));
    let applied = ta.get("FilesApplied").unwrap_or(&0.0) + tb.get("FilesApplied").unwrap_or(&0.0);
    assert_eq!(
        applied as usize,
        files.len(),
        "each file applied by exactly one function (a: {ta:?}, b: {tb:?})"
    );
    eprintln!(
        "lambda-measure: race: {refused} UpdateTable refused (stale VersionId); conflicts a {:?} b {:?}; \
         files applied a {:?} b {:?}",
        ta.get("CommitConflicts"),
        tb.get("CommitConflicts"),
        ta.get("FilesApplied"),
        tb.get("FilesApplied")
    );
}

/// A full load of six files whose events reach three functions at once (each event an S3
/// notification, some duplicated), with duplicate keys across the files: the files of the load
/// commit side by side, a change file's event during the load waits (its SQS record fails and
/// is retried), and after the change files the table equals the source.
#[test]
fn full_load_files_apply_in_concurrent_functions() {
    require_python();
    let lab = Lab::new("parallel_load");
    lab.generate("synthetic", &args("--schema shop --table orders --rows 600 --load-files 6 --load-order shuffled --load-duplicates 0.05 --cdc-files 3 --cdc-rows 40 --seed 24"));
    lab.upload_config(&[]);
    let meta = lab.work.meta("shop.orders");
    let name = lab.glue_name(&meta);
    let files = meta.files.clone();
    let (loads, changes): (Vec<String>, Vec<String>) =
        files.iter().cloned().partition(|f| f.contains("LOAD"));
    assert_eq!(loads.len(), 6);
    for k in &files {
        lab.upload(k);
    }
    let mut fs: Vec<Function> = (0..3)
        .map(|i| Function::start(&lab, &format!("ingest-{i}"), &[]))
        .collect();
    // Each function gets two of the load's files (and one event twice), all at once.
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = fs
            .iter_mut()
            .enumerate()
            .map(|(i, f)| {
                let mine = [&loads[i], &loads[i + 3], &loads[i]];
                let events: Vec<Value> = mine.iter().map(|k| lab.s3_event(k)).collect();
                s.spawn(move || events.iter().map(|e| f.invoke(e)).collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    for o in &outcomes {
        assert!(o.is_response(), "{o:?}");
    }
    // The load is complete: change files apply now (in one SQS batch, shuffled, duplicated).
    let mut recs: Vec<Value> = changes
        .iter()
        .chain(changes.iter())
        .map(|k| sqs_record(&lab.s3_event(k).to_string()).1)
        .collect();
    recs.reverse();
    let o = fs[0].invoke_ok(&sqs_event(&recs));
    assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    lab.assert_table("shop.orders");
    assert_each_file_once(&lab, &name, &files);
    let applied: f64 = fs
        .iter()
        .map(|f| {
            emf_totals(&f.log())
                .get("FilesApplied")
                .copied()
                .unwrap_or(0.0)
        })
        .sum();
    assert_eq!(
        applied as usize,
        files.len(),
        "each file applied by one function"
    );
}

/// While files of a table's full load are pending, an event for a change file applies nothing:
/// its SQS record fails (and is retried once the load is in); the load's own events apply it.
#[test]
fn a_change_file_waits_for_the_full_load() {
    require_python();
    let lab = Lab::new("wait_for_load");
    lab.generate("synthetic", &args("--schema shop --table orders --rows 300 --load-files 3 --cdc-files 2 --cdc-rows 30 --seed 25"));
    lab.upload_config(&[]);
    let meta = lab.work.meta("shop.orders");
    let files = meta.files.clone();
    let (loads, changes): (Vec<String>, Vec<String>) =
        files.iter().cloned().partition(|f| f.contains("LOAD"));
    for k in &files {
        lab.upload(k);
    }
    let mut f = Function::start(&lab, "ingest", &[]);
    // One file of the load and a change file in one batch: the load's file is applied, the
    // change file waits (two other files of the load are pending, their events elsewhere).
    let (id_load, r_load) = sqs_record(&lab.s3_event(&loads[1]).to_string());
    let (id_change, r_change) = sqs_record(&lab.s3_event(&changes[0]).to_string());
    let o = f.invoke_ok(&sqs_event(&[r_load, r_change]));
    let failed = o.batch_item_failures();
    assert_eq!(failed, vec![id_change.clone()], "{}", o.body);
    assert!(!failed.contains(&id_load));
    for k in [&loads[0], &loads[2]] {
        f.invoke_ok(&lab.s3_event(k));
    }
    // The retried record (and the rest) apply on top of the whole load.
    let recs: Vec<Value> = changes
        .iter()
        .map(|k| sqs_record(&lab.s3_event(k).to_string()).1)
        .collect();
    let o = f.invoke_ok(&sqs_event(&recs));
    assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    lab.assert_table("shop.orders");
}

/// README promises that logs carry "file, line, column and the kind of problem, never row
/// values": the logged reason names the column (`Op`), only values are redacted.
#[test]
fn failure_reason_names_the_column() {
    let b = blocked_by_bad_file("badfile_column");
    let reason = failure_reason(b.f.as_ref().unwrap(), &b.bad_id);
    assert!(
        reason.contains("column `Op`"),
        "the logged reason should name the column Op: {reason}"
    );
}

/// BUG (silent data corruption): with `DMS2ICEBERG_GLUE_DATABASE` (the template sets it) every DMS
/// schema lands in one Glue database, so `a.orders` and `b.orders` both resolve to
/// `dms.orders`. Nothing refuses that: b's `LOAD00000001.csv` is taken as already applied
/// (applied files are recognised by their DMS order, and a's LOAD00000001 has the same), b's
/// change file is applied on top of a's rows, and every invocation succeeds. Expected: the
/// second source is refused loudly (e.g. the table records the source `schema.table` it was
/// created for, and a different source resolving to it fails naming both and `target`), and
/// the table holds exactly a's rows.
#[test]
fn two_schemas_one_table_name_are_not_mixed() {
    require_python();
    let lab = Lab::new("collision");
    lab.generate(
        "synthetic",
        &args("--schema a --table orders --rows 50 --cdc-files 1 --cdc-rows 10 --seed 1"),
    );
    lab.generate(
        "synthetic",
        &args("--schema b --table orders --rows 50 --cdc-files 1 --cdc-rows 10 --seed 2"),
    );
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "ingest", &[]);
    for k in keys_of(&lab, "a.orders") {
        lab.upload(&k);
        f.invoke_ok(&lab.s3_event(&k));
    }
    let mut b_outcomes = Vec::new();
    for k in keys_of(&lab, "b.orders") {
        lab.upload(&k);
        b_outcomes.push(f.invoke(&lab.s3_event(&k)));
    }
    assert!(
        b_outcomes.iter().all(|o| !o.is_response()),
        "b.orders also resolves to dms.orders, yet its events succeeded: {:?}",
        b_outcomes.iter().map(|o| &o.body).collect::<Vec<_>>()
    );
    let meta = lab.work.meta("a.orders");
    let got = lab.scan("dms.orders");
    common::assert_rows(
        "dms.orders (fed by a.orders only)",
        &meta,
        &lab.work.expected("a.orders"),
        &got,
    );
}

/// The Runtime API emulator's batch mode (events from files, outcomes to a file, exit when done)
/// with the real binary: a response, a function error, and the binary exiting once the Runtime
/// API is gone. Then a misconfigured function: it fails at initialisation, loudly.
#[test]
fn runtime_api_batch_mode_errors_and_init_failure() {
    require_python();
    let work = common::Work::new("lambda-runtime-batch");
    let dir = &work.dir;
    let events = dir.join("events");
    std::fs::create_dir_all(&events).unwrap();
    std::fs::write(
        events.join("1-test-event.json"),
        json!({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": LANDING}).to_string(),
    )
    .unwrap();
    std::fs::write(events.join("2-unknown.json"), r#"{"hello": "world"}"#).unwrap();
    let port_file = dir.join("rt.port");
    let results = dir.join("results.jsonl");
    let mut emu = std::process::Command::new(python());
    emu.arg(common::support("lambda_runtime_api.py"))
        .arg("--event")
        .arg(&events)
        .arg("--results")
        .arg(&results)
        .arg("--port-file")
        .arg(&port_file)
        .arg("--exit-when-done");
    let mut emu = Proc::spawn("lambda_runtime_api.py", emu, dir.join("rt.log"));
    let port = emu.wait_port(&port_file, std::time::Duration::from_secs(30));
    // No AWS call is needed for these events (no config, nothing to list): nothing listens on
    // the endpoint.
    let lambda_env = |cmd: &mut std::process::Command, api: &str| {
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("AWS_LAMBDA_RUNTIME_API", api)
            .env("AWS_LAMBDA_FUNCTION_NAME", "batch")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "s")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "g")
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true");
    };
    let mut cmd = std::process::Command::new(ingest_bin());
    lambda_env(&mut cmd, &format!("127.0.0.1:{port}"));
    cmd.env("DMS2ICEBERG_WAREHOUSE", WAREHOUSE)
        .env("DMS2ICEBERG_GLUE_DATABASE", DB);
    let mut f = Proc::spawn("dms2iceberg-ingest", cmd, dir.join("fn.log"));
    let wait = |p: &mut Proc, what: &str| {
        let t = std::time::Instant::now();
        loop {
            if let Some(s) = p.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(60),
                "{what} did not exit:\n{}",
                p.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let emu_status = wait(&mut emu, "the emulator (--exit-when-done)");
    assert_eq!(emu_status.code(), Some(1), "one event failed: exit 1");
    let outcomes = common::read_jsonl(&results);
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    assert_eq!(outcomes[0]["outcome"], "response", "{outcomes:?}");
    assert_eq!(outcomes[0]["body"], json!({"tables": []}), "{outcomes:?}");
    assert_eq!(outcomes[1]["outcome"], "error", "{outcomes:?}");
    let msg = outcomes[1]["body"]["errorMessage"].as_str().unwrap_or("");
    assert!(msg.contains("unrecognised event"), "{outcomes:?}");
    // The error's kind, for alarms and triage (not a Rust type name).
    assert_eq!(
        outcomes[1]["body"]["errorType"], "InputError",
        "{outcomes:?}"
    );
    // (The `Lambda-Runtime-Function-Error-Type` header is lambda_runtime's own, `unhandled`.)
    for o in &outcomes {
        assert!(
            o["request_id"].as_str().is_some_and(|r| r.len() == 36),
            "{o}"
        );
        assert!(o["duration_ms"].as_i64().is_some(), "{o}");
    }
    // The Runtime API is gone: the function's next poll fails and it exits.
    let st = wait(&mut f, "the function, once the Runtime API was gone");
    assert!(!st.success(), "{}", f.log_text());

    // Misconfigured: no DMS2ICEBERG_WAREHOUSE. Initialisation fails before the first poll,
    // naming the variable.
    let emu2 = RuntimeApi::start(dir, "init-fail");
    let mut cmd = std::process::Command::new(ingest_bin());
    lambda_env(&mut cmd, &format!("127.0.0.1:{}", emu2.port));
    let mut f = Proc::spawn("dms2iceberg-ingest", cmd, dir.join("fn-init.log"));
    let st = wait(&mut f, "a function without DMS2ICEBERG_WAREHOUSE");
    assert!(!st.success());
    assert!(
        f.log_text().contains("DMS2ICEBERG_WAREHOUSE"),
        "{}",
        f.log_text()
    );
    let s = emu2.status();
    assert!(s["first_next_ms"].is_null(), "{s}");
    // ... and tells the Runtime API why (Lambda shows it to the caller).
    assert_eq!(s["init_error"]["error_type"], "ConfigError", "{s}");
    assert_eq!(s["init_error"]["body"]["errorType"], "ConfigError", "{s}");
    let msg = s["init_error"]["body"]["errorMessage"]
        .as_str()
        .unwrap_or("");
    assert!(msg.contains("DMS2ICEBERG_WAREHOUSE"), "{s}");

    // No CA certificates (an image without a CA bundle; here SSL_CERT_FILE/SSL_CERT_DIR name
    // empty ones, which replace the system store): initialisation fails with a clear error,
    // posted to /init/error, instead of a panic when the first HTTPS client is built.
    let certs = dir.join("no-certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::write(certs.join("empty.pem"), "").unwrap();
    for (name, bin) in [("ingest", ingest_bin()), ("compact", compact_bin())] {
        let emu3 = RuntimeApi::start(dir, &format!("no-ca-{name}"));
        let mut cmd = std::process::Command::new(bin);
        lambda_env(&mut cmd, &format!("127.0.0.1:{}", emu3.port));
        cmd.env("DMS2ICEBERG_WAREHOUSE", WAREHOUSE)
            .env("DMS2ICEBERG_GLUE_DATABASE", DB)
            .env("SSL_CERT_FILE", certs.join("empty.pem"))
            .env("SSL_CERT_DIR", &certs);
        let mut f = Proc::spawn(name, cmd, dir.join(format!("fn-no-ca-{name}.log")));
        let st = wait(&mut f, "a function without CA certificates");
        assert!(!st.success(), "{}", f.log_text());
        assert!(!f.log_text().contains("panicked"), "{}", f.log_text());
        let s = emu3.status();
        assert!(s["first_next_ms"].is_null(), "{s}");
        assert_eq!(s["init_error"]["error_type"], "ConfigError", "{name}: {s}");
        let msg = s["init_error"]["body"]["errorMessage"]
            .as_str()
            .unwrap_or("");
        assert!(
            msg.contains("no CA certificates found") && msg.contains("SSL_CERT_FILE"),
            "{name}: {s}"
        );
    }
}

/// The compaction function (`dms2iceberg-compact`) on an EventBridge schedule, against a table the
/// ingest function built from many small change files (one snapshot each, position deletes for
/// every update and delete). The first run rewrites the small files into fewer, applies and drops
/// every delete file, expires old snapshots and removes orphans; the table reads the same through
/// our reader and PyIceberg. The second run finds nothing to compact and changes nothing. Then
/// the warm ingest function keeps going on the compacted, expired table: a redelivered event of
/// a file whose snapshot was expired applies nothing, and the held-back last change file lands
/// exactly.
#[test]
fn compaction_function_on_a_schedule_event() {
    require_python();
    let lab = Lab::new("compact");
    lab.generate(
        "synthetic",
        &args("--rows 300 --cdc-files 10 --cdc-rows 30 --seed 21 --asof"),
    );
    lab.upload_config(&[]);
    let table = "shop.orders";
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let keys = keys_of(&lab, table);
    assert_eq!(keys.len(), 11, "LOAD + 10 change files: {keys:?}");
    let steps = lab.work.asof(table);
    let (last, applied_first) = keys.split_last().unwrap();

    // 1. The ingest function applies every file but the last, one S3 event per file.
    let mut ingest = Function::start(&lab, "ingest", &[]);
    for key in applied_first {
        lab.upload(key);
        ingest.invoke_ok(&lab.s3_event(key));
    }
    let held = applied_first.len() - 1;
    lab.assert_table_rows(table, &steps[held].rows, "before-compaction");
    lab.assert_glue_entry(table);
    assert_each_file_once(&lab, &name, applied_first);

    // 2. Many small data files and position-delete files (PyIceberg reads the manifests).
    let before = lab.snapshot_files(&name);
    assert!(
        before.data_files >= 8 && before.position_delete_files >= 1,
        "the ingested table should have many data files and some delete files: {before:?}"
    );
    assert_eq!(
        before.snapshots,
        applied_first.len(),
        "one snapshot per file: {before:?}"
    );
    assert_eq!(
        (
            before.summary_total_data_files,
            before.summary_total_delete_files
        ),
        (Some(before.data_files), Some(before.delete_files())),
        "the snapshot summary's totals disagree with the manifests: {before:?}"
    );

    // 3. A scheduled run compacts, expires (all but the 2 newest snapshots) and removes orphans.
    let mut compact = Function::start_compact(
        &lab,
        "compact",
        &[
            ("DMS2ICEBERG_COMPACT_MIN_DATA_FILES", "4"),
            ("DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS", "0"),
            ("DMS2ICEBERG_SNAPSHOT_RETAIN_LAST", "2"),
            ("DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS", "0"),
        ],
    );
    let compact_cold_ms = compact.cold_start_ms;
    let first = compact.invoke_ok(&scheduled_event());
    let reports = first
        .body
        .as_array()
        .unwrap_or_else(|| panic!("the response should list the tables: {}", first.body));
    assert_eq!(
        reports.len(),
        1,
        "one table in the database: {}",
        first.body
    );
    let r = &reports[0];
    assert!(
        r["table"].as_str().is_some_and(|t| t.ends_with("orders")),
        "{r}"
    );
    assert!(r["error"].is_null(), "maintenance failed: {r}");
    let c = &r["compaction"];
    let num = |v: &Value, k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("no {k} in the report: {r}"))
    };
    assert!(
        num(c, "data_files_rewritten") > 0 && num(c, "commits") > 0,
        "the table was not compacted: {r}"
    );
    assert_eq!(num(c, "data_files_before"), before.data_files, "{r}");
    assert_eq!(num(c, "delete_files_before"), before.delete_files(), "{r}");
    assert_eq!(num(c, "delete_files_after"), 0, "{r}");
    assert_eq!(num(c, "groups_left"), 0, "everything fits one run: {r}");
    assert!(
        num(r, "snapshots_expired") > 0,
        "retention 0 h, 2 kept: older snapshots should expire: {r}"
    );

    lab.assert_table_rows(table, &steps[held].rows, "after-compaction");
    lab.assert_glue_entry(table);
    let after = lab.snapshot_files(&name);
    assert!(
        after.data_files < before.data_files,
        "no fewer data files: before {before:?}, after {after:?}"
    );
    assert_eq!(after.delete_files(), 0, "delete files left: {after:?}");
    assert_eq!(after.data_files, num(c, "data_files_after"), "{r}");
    assert_eq!(
        after.data_records,
        steps[held].rows.len() as u64,
        "the compacted files hold exactly the live rows: {after:?}"
    );
    assert_eq!(
        (
            after.summary_total_data_files,
            after.summary_total_delete_files
        ),
        (Some(after.data_files), Some(0)),
        "{after:?}"
    );
    assert_eq!(after.snapshots, 2, "retain_last = 2: {after:?}");
    let emf1 = emf_totals(&compact.log());
    let metric = |emf: &std::collections::BTreeMap<String, f64>, m: &str| {
        *emf.get(m)
            .unwrap_or_else(|| panic!("no {m} metric: {emf:?}"))
    };
    assert!(metric(&emf1, "FilesRewritten") > 0.0, "{emf1:?}");
    assert_eq!(
        metric(&emf1, "FilesRewritten") as u64,
        num(c, "data_files_rewritten"),
        "{emf1:?}"
    );
    assert_eq!(
        metric(&emf1, "DeleteFilesRemoved") as u64,
        num(c, "delete_files_removed"),
        "{emf1:?}"
    );
    assert!(metric(&emf1, "BytesRewritten") > 0.0, "{emf1:?}");
    assert_eq!(
        metric(&emf1, "SnapshotsExpired") as u64,
        num(r, "snapshots_expired"),
        "{emf1:?}"
    );

    // 4. The next scheduled run: nothing to compact, nothing to expire, the table untouched.
    let second = compact.invoke_ok(&scheduled_event());
    let r2 = &second.body[0];
    assert!(r2["error"].is_null(), "{}", second.body);
    assert!(
        r2["compaction"].is_null() || r2["compaction"]["data_files_rewritten"] == 0,
        "a compacted table was compacted again: {r2}"
    );
    assert_eq!(r2["snapshots_expired"], 0, "{r2}");
    assert_eq!(r2["orphans_deleted"], 0, "{r2}");
    let again = lab.snapshot_files(&name);
    assert_eq!(again, after, "the second run changed the table");
    lab.assert_table_rows(table, &steps[held].rows, "after-second-run");
    let emf2 = emf_totals(&compact.log());
    assert_eq!(
        metric(&emf2, "FilesRewritten"),
        metric(&emf1, "FilesRewritten"),
        "the second run rewrote files: {emf2:?}"
    );

    // 5. Ingest goes on (warm function, cached manifests and key columns from before the
    //    compaction): a late duplicate event of a file whose snapshot was expired applies nothing,
    //    the held-back last change file lands exactly.
    ingest.invoke_ok(&lab.s3_event(&applied_first[1]));
    assert_eq!(
        lab.snapshot_files(&name),
        after,
        "a redelivered event of an expired snapshot's file changed the table"
    );
    lab.upload(last);
    ingest.invoke_ok(&lab.s3_event(last));
    lab.assert_table(table);
    let applied = lab.applied_files(&name);
    assert_eq!(
        applied
            .iter()
            .filter(|a| a.ends_with(last.as_str()))
            .count(),
        1,
        "{applied:?}"
    );
    let end = lab.snapshot_files(&name);
    assert_eq!(end.snapshots, 3, "{end:?}");

    eprintln!(
        "lambda-measure: compaction: data files {} -> {}, position-delete files {} -> {} \
         ({} data files rewritten, {:.0} bytes, {} delete files removed, {} snapshots expired, \
         {} orphans deleted); first run {} ms (compaction {} ms), second run {} ms (nothing to \
         do); cold start {compact_cold_ms} ms",
        before.data_files,
        after.data_files,
        before.position_delete_files,
        after.position_delete_files,
        num(c, "data_files_rewritten"),
        metric(&emf1, "BytesRewritten"),
        num(c, "delete_files_removed"),
        num(r, "snapshots_expired"),
        num(r, "orphans_deleted"),
        first.duration_ms,
        num(c, "elapsed_ms"),
        second.duration_ms,
    );
}

/// The compaction function before its Glue database exists (`CreateGlueDatabase=false`, no
/// ingest yet): nothing to do, a response with no tables, not an error every hour.
#[test]
fn compaction_before_the_glue_database_exists() {
    require_python();
    let lab = Lab::new("compact-no-db");
    let mut compact = Function::start_compact(
        &lab,
        "compact-no-db",
        &[("DMS2ICEBERG_GLUE_DATABASE", "not_created_yet")],
    );
    let o = compact.invoke_ok(&scheduled_event());
    assert_eq!(o.body, json!([]), "{}", compact.log());
    // Any other payload (an on-demand `aws lambda invoke` with `{}`) runs a pass too.
    let o = compact.invoke_ok(&json!({}));
    assert_eq!(o.body, json!([]), "{}", compact.log());
}

/// Not a scenario: checks the test tooling's own pieces that the scenarios rely on.
#[test]
fn tooling_event_keys_and_work_dirs() {
    assert_eq!(
        decode_event_key("dms/shop/order+items/a%2Bb%20c.csv"),
        "dms/shop/order items/a+b c.csv"
    );
    assert_eq!(
        encode_key("dms/shop/line+items/x y.csv"),
        "dms/shop/line%2Bitems/x%20y.csv"
    );
    let mut r = Rng::new(1);
    let mut v: Vec<u32> = (0..10).collect();
    r.shuffle(&mut v);
    assert_eq!(v.iter().copied().collect::<BTreeSet<_>>().len(), 10);
    assert_eq!(median(&[5, 1, 3]), 3);
}

/// A table reload as DMS does it on S3: the table folder emptied, a new full load under the
/// same names, then new change files; the events arrive shuffled, with late ones for objects
/// the reload deleted. The function applies the reload as one snapshot and the changes on top.
#[test]
fn a_reload_with_shuffled_events_equals_the_source() {
    require_python();
    let lab = Lab::new("reload");
    lab.generate("product", &[]);
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "ingest", &[]);
    let table = "sales.product";
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    for key in &meta.files {
        lab.upload(key);
    }
    f.invoke_ok(&lab.s3_event(&meta.files[0]));
    lab.assert_table(table);

    // The reload: 101, 104 and 105 were deleted at the source, 102 changed, 107 is new.
    for key in &meta.files {
        lab.moto.delete(LANDING, key);
    }
    let dir = format!("{}/sales/product", lab.folder);
    let header = "Op,product_id,category,product_name,quantity_available,last_update_time\n";
    let load = format!(
        "{header}I,100,Smartphone,Apple iPhone 12,30,2022-03-02 11:30:01.000000\n\
         I,102,Laptop,Dell XPS 13,9,2022-03-02 12:00:00.000000\n\
         I,106,Tablet,Apple iPad Air,40,2022-03-02 11:34:01.000000\n\
         I,107,Phone,Pixel 9,5,2022-03-02 12:00:00.000000\n"
    );
    let change = format!(
        "{header}U,107,Phone,Pixel 9,6,2022-03-02 12:10:00.000000\n\
         D,100,Smartphone,Apple iPhone 12,30,2022-03-02 11:30:01.000000\n"
    );
    let load_key = format!("{dir}/LOAD00000001.csv");
    let change_key = format!("{dir}/20220302-1210000000.csv");
    lab.moto.put(LANDING, &load_key, load.as_bytes());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    lab.moto.put(LANDING, &change_key, change.as_bytes());
    // The change file's event first, then a late one for a deleted pre-reload file, then the
    // load's, each delivered twice.
    let late = meta.files[1].clone();
    let events = [
        eventbridge_event(LANDING, &change_key, change.len()),
        lab.s3_event(&late),
        eventbridge_event(LANDING, &load_key, load.len()),
    ];
    for e in events.iter().chain(events.iter()) {
        f.invoke_ok(e);
    }
    let row = |id: i64, cat: &str, prod: &str, q: i64, t: &str| {
        json!({"product_id": id, "category": cat, "product_name": prod,
               "quantity_available": q, "last_update_time": t})
    };
    let expected = vec![
        row(
            102,
            "Laptop",
            "Dell XPS 13",
            9,
            "2022-03-02 12:00:00.000000",
        ),
        row(
            106,
            "Tablet",
            "Apple iPad Air",
            40,
            "2022-03-02 11:34:01.000000",
        ),
        row(107, "Phone", "Pixel 9", 6, "2022-03-02 12:10:00.000000"),
    ];
    lab.assert_table_rows(table, &expected, "reloaded");
    let ops: Vec<Value> = lab
        .history(&name)
        .iter()
        .map(|h| h["operation"].clone())
        .collect();
    assert_eq!(
        ops,
        ["append", "overwrite", "overwrite", "overwrite", "overwrite"],
        "load, 2 changes, the reload, the change after it"
    );
}

/// An EventBridge "Object Deleted" event for `key`, deleted now for `reason`.
fn deleted_event(key: &str, reason: &str) -> Value {
    let mut e = eventbridge_event(LANDING, key, 0);
    e["detail-type"] = json!("Object Deleted");
    e["time"] = json!(chrono_now_rfc3339());
    e["detail"]["reason"] = json!(reason);
    e["detail"]["deletion-type"] = json!("Permanently Deleted");
    e
}

fn chrono_now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A source `TRUNCATE` with the task's DDL handling on: DMS deletes every object of the table
/// and new changes follow. The function empties the table once (an `overwrite` snapshot; time
/// travel before it stays), and later files apply on top: one written after the truncate but
/// applied before its deletion events arrived is applied again on the emptied table. Deletion
/// events that leave files behind, duplicates, and lifecycle expirations change nothing.
#[test]
fn a_source_truncate_empties_the_table_once_and_later_files_apply() {
    require_python();
    let lab = Lab::new("truncate");
    lab.generate("product", &[]);
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "ingest", &[]);
    let table = "sales.product";
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let keys = keys_of(&lab, table);
    for key in &keys {
        lab.upload(key);
        f.invoke_ok(&lab.s3_event(key));
    }
    lab.assert_table(table);
    let before = lab.history(&name);

    // A deletion while the table's other files are still there is no truncate (an operator
    // removing one file, or DMS half way through).
    lab.moto.delete(LANDING, &keys[0]);
    f.invoke_ok(&deleted_event(&keys[0], "DeleteObject"));
    assert_eq!(lab.history(&name).len(), before.len(), "no truncate yet");
    lab.assert_table(table);

    // DMS deletes the rest; a file DMS writes after the truncate lands and is applied before
    // the deletion events arrive.
    for key in &keys[1..] {
        lab.moto.delete(LANDING, key);
    }
    let truncated_at = deleted_event(&keys[1], "DeleteObject");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let folder = keys[0].rsplit_once('/').unwrap().0;
    let header = "Op,product_id,category,product_name,quantity_available,last_update_time";
    let after1 = format!("{folder}/20220303-1000000000000.csv");
    lab.moto.put(
        LANDING,
        &after1,
        format!("{header}\nI,900,Tablet,after one,5,2022-03-03 10:00:00\nI,901,Tablet,after two,6,2022-03-03 10:00:00\n").as_bytes(),
    );
    f.invoke_ok(&eventbridge_event(LANDING, &after1, 10));
    // Then the deletion events: the table is emptied and the later file applied again.
    f.invoke_ok(&truncated_at);
    let rows = lab.scan(&name);
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r["product_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![900, 901], "{rows:?}");
    let history = lab.history(&name);
    let truncate = history
        .iter()
        .find(|s| s["truncate"] == true)
        .unwrap_or_else(|| panic!("no truncate snapshot: {history:?}"));
    assert_eq!(truncate["live_rows"], 0, "{truncate}");
    // Time travel to before the truncate still reads the old rows.
    let old = lab.cli(&[
        "scan",
        &name,
        "--catalog",
        "glue",
        "--warehouse",
        WAREHOUSE,
        "--format",
        "json",
        "--snapshot",
        &before.last().unwrap()["snapshot_id"].to_string(),
    ]);
    let old = common::parse_json_lines(&old.assert_success().stdout, "scan --snapshot");
    common::assert_rows(
        "before the truncate",
        &meta,
        &lab.work.expected(table),
        &old,
    );

    // Duplicates of the deletion events: nothing more.
    let snapshots = lab.history(&name).len();
    for key in &keys {
        f.invoke_ok(&deleted_event(key, "DeleteObject"));
    }
    assert_eq!(
        lab.history(&name).len(),
        snapshots,
        "a truncate happens once"
    );

    // A later change applies on top.
    let after2 = format!("{folder}/20220303-1100000000000.csv");
    lab.moto.put(
        LANDING,
        &after2,
        format!("{header}\nU,900,Tablet,after one,4,2022-03-03 11:00:00\n").as_bytes(),
    );
    f.invoke_ok(&lab_event_for(&after2));
    // A lifecycle rule expiring every file of the table never changes it (EventBridge and S3
    // notification shapes).
    lab.moto.delete(LANDING, &after1);
    lab.moto.delete(LANDING, &after2);
    f.invoke_ok(&deleted_event(&after1, "Lifecycle Expiration"));
    let mut n = eventbridge_event(LANDING, &after2, 0);
    n = json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
        "eventTime": chrono_now_rfc3339(), "eventName": "LifecycleExpiration:Delete",
        "userIdentity": {"principalId": "s3.amazonaws.com"}, "requestParameters": {"sourceIPAddress": "s3.amazonaws.com"},
        "responseElements": {}, "s3": {"bucket": {"name": LANDING}, "object": {"key": after2}}}], "_": n});
    f.invoke_ok(&n);
    let rows = lab.scan(&name);
    let got: Vec<(i64, i64)> = rows
        .iter()
        .map(|r| {
            (
                r["product_id"].as_i64().unwrap(),
                r["quantity_available"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, vec![(900, 4), (901, 6)], "{rows:?}");
    assert_eq!(lab.history(&name).len(), snapshots + 1);
    let expected = vec![
        json!({"product_id": 900, "category": "Tablet", "product_name": "after one", "quantity_available": 4, "last_update_time": "2022-03-03 11:00:00.000000"}),
        json!({"product_id": 901, "category": "Tablet", "product_name": "after two", "quantity_available": 6, "last_update_time": "2022-03-03 10:00:00.000000"}),
    ];
    lab.assert_table_rows(table, &expected, "after-truncate");
}

/// An S3 "Object Created" event for a key uploaded by hand.
fn lab_event_for(key: &str) -> Value {
    eventbridge_event(LANDING, key, 10)
}

/// `PreserveTransactions=true` with `CdcPath`: the ingest function on events for shared
/// `CDC_TXN` files (one event names two tables), delivered late, shuffled and twice: each
/// table applies its rows of every file once, in file order (a table named by a later file
/// first applies the earlier files it has rows in).
#[test]
fn transaction_files_apply_to_every_table_they_name() {
    require_python();
    let lab = Lab::new("cdc_txn");
    for (table, seed) in [("orders", "41"), ("items", "42")] {
        lab.generate(
            "synthetic",
            &args(&format!(
                "--cdc-path cdc --schema shop --table {table} --rows 80 --cdc-files 4 --cdc-rows 30 --seed {seed}"
            )),
        );
    }
    lab.upload_config(&[]);
    let mut f = Function::start(&lab, "ingest", &[]);
    let orders = lab.work.meta("shop.orders");
    let items = lab.work.meta("shop.items");
    // The full loads, each by its own event.
    for meta in [&orders, &items] {
        lab.upload(&meta.files[0]);
        f.invoke_ok(&lab.s3_event(&meta.files[0]));
    }
    // The CDC_TXN files (the same keys for both tables): all uploaded, then their events in
    // the order 3, 1, 3, 4, 2.
    let txn: Vec<String> = orders.files[1..].to_vec();
    assert_eq!(txn, items.files[1..].to_vec(), "shared files");
    let mut sizes = Vec::new();
    for k in &txn {
        sizes.push(lab.upload(k));
    }
    for i in [2, 0, 2, 3, 1] {
        f.invoke_ok(&eventbridge_event(LANDING, &txn[i], sizes[i]));
        if i == 2 {
            // After the third file's event, both tables hold the first three files.
            for (name, meta) in [("shop.orders", &orders), ("shop.items", &items)] {
                let got = lab.scan(&lab.glue_name(meta));
                common::assert_rows(
                    &format!("{name} after the third file"),
                    meta,
                    &lab.work.asof(name)[3].rows,
                    &got,
                );
            }
        }
    }
    lab.assert_table("shop.orders");
    lab.assert_table("shop.items");
    assert_each_file_once(&lab, &lab.glue_name(&orders), &orders.files);
    assert_each_file_once(&lab, &lab.glue_name(&items), &items.files);
}
