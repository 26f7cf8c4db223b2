//! Amazon S3 Tables as the catalog (issue 25): the ingest function (the real binary through the
//! Runtime API emulator) against moto's s3tables API, whose `UpdateTableMetadataLocation`
//! refuses a stale version token atomically (`tests/support/moto_server.py`). Two functions race
//! to create the table and then over the change files; the table is then read back by our CLI
//! (`--catalog s3tables`), by PyIceberg as a static table and by DuckDB on the metadata location
//! the s3tables API returns, and compared whole with the state dmsgen computed independently.

use crate::lambda_support::*;
use serde_json::Value;

fn args(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

#[test]
fn functions_racing_on_s3_tables_end_exact_and_leave_maintenance_to_the_service() {
    let _ = crate::common::python();
    let lab = Lab::new("s3tables");
    let arn = lab.moto.create_table_bucket("dms-tables");
    lab.generate("synthetic", &args("--schema shop --table orders --rows 150 --cdc-files 6 --cdc-rows 30 --before-image --pk-update-ratio 0.1 --seed 17"));
    lab.upload_config(&[]);
    let meta = lab.work.meta("shop.orders");
    let name = lab.glue_name(&meta);
    let files = meta.files.clone();
    let env = [
        ("DMS2ICEBERG_CATALOG", "s3tables"),
        ("DMS2ICEBERG_TABLE_BUCKET_ARN", arn.as_str()),
    ];
    let mut a = Function::start(&lab, "ingest-a", &env);
    let mut b = Function::start(&lab, "ingest-b", &env);

    // 1. Both create the table from the full load at once: one CreateTable, one first metadata.
    lab.upload(&files[0]);
    let ev = lab.s3_event(&files[0]);
    let (oa, ob) = race(&mut a, &mut b, ev.clone(), ev);
    assert_both_answered(&oa, &ob, &a, &b);
    let load = &lab.work.asof("shop.orders")[0].rows;
    lab.assert_s3tables_rows(&arn, "shop.orders", load, "load");

    // 2. The change files, both functions at once; every UpdateTableMetadataLocation waits
    //    300 ms before its atomic check, so both swap from the same version token.
    for k in &files[1..] {
        lab.upload(k);
    }
    lab.moto.set_update_table_delay_ms(300);
    let refused_before = lab.moto.stats()["s3tables_update"]["refused"]
        .as_i64()
        .unwrap();
    let last = lab.s3_event(files.last().unwrap());
    let batch = lab.sqs_batch(&files[1..]);
    let (oa, ob) = race(&mut a, &mut b, last, batch);
    lab.moto.set_update_table_delay_ms(0);
    assert_both_answered(&oa, &ob, &a, &b);
    assert!(ob.batch_item_failures().is_empty(), "{}", ob.body);
    let refused = lab.moto.stats()["s3tables_update"]["refused"]
        .as_i64()
        .unwrap()
        - refused_before;
    assert!(
        refused >= 1,
        "no swap was refused for a stale version token: the race did not reach the service"
    );
    // The loser's files stay for the service to remove: no delete is sent (table buckets
    // refuse them), and the log says so once per abandoned attempt instead of a WARN per file.
    let logs = format!("{}\n{}", a.log(), b.log());
    assert!(
        !logs.contains("could not delete") && !logs.contains("MethodNotAllowed"),
        "{}",
        tail(&logs, 4000)
    );
    assert!(
        logs.contains("abandoned files left to S3 Tables"),
        "{}",
        tail(&logs, 4000)
    );
    let rows = lab.work.expected("shop.orders");
    lab.assert_s3tables_rows(&arn, "shop.orders", &rows, "final");
    // Each DMS file in exactly one snapshot.
    let applied: Vec<String> = lab
        .s3tables_json(&arn, "history", &name)
        .iter()
        .flat_map(|s| s["source_files"].as_array().cloned().unwrap_or_default())
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(applied.len(), files.len(), "{applied:?}");
    for f in &files {
        assert!(
            applied.iter().any(|x| x.ends_with(f.as_str())),
            "{f}: {applied:?}"
        );
    }

    // 3. The service expires snapshots and removes orphans: `expire` says so and changes
    //    nothing; the compaction function skips both (and, by default, compaction too).
    let r = lab.cli(&[
        "expire",
        &name,
        "--catalog",
        "s3tables",
        "--warehouse",
        &arn,
    ]);
    assert!(
        !r.status.success() && r.stderr.contains("S3 Tables expires snapshots"),
        "{}",
        r.describe()
    );
    let mut c = Function::start_compact(&lab, "compact", &env);
    let o = c.invoke_ok(&scheduled_event());
    let t = &o.body.as_array().unwrap()[0];
    assert_eq!(t["error"], Value::Null, "{}", o.body);
    assert_eq!(t["snapshots_expired"], 0, "{}", o.body);
    assert_eq!(t["compaction"], Value::Null, "{}", o.body);
    // Asked to, it compacts; the table reads the same.
    let mut c = Function::start_compact(
        &lab,
        "compact-on",
        &[env[0], env[1], ("DMS2ICEBERG_COMPACTION", "on")],
    );
    let o = c.invoke_ok(&scheduled_event());
    let t = &o.body.as_array().unwrap()[0];
    assert_eq!(t["error"], Value::Null, "{}", o.body);
    let compaction = &t["compaction"];
    assert!(
        compaction["data_files_after"].as_u64() < compaction["data_files_before"].as_u64(),
        "{}",
        o.body
    );
    lab.assert_s3tables_rows(&arn, "shop.orders", &rows, "compacted");
}
