//! End-to-end tests of the `dms2iceberg` binary.
//!
//! Each test generates a DMS output tree with `tests/support/dmsgen.py` (which also writes the
//! expected table state, computed by its own model, and a config.toml), runs
//! `dms2iceberg ingest`, compares `dms2iceberg scan --format json` with the expected rows, and
//! has PyIceberg and DuckDB read the same table (`tests/support/check_readers.py`).
//!
//! Run through `scripts/test` (it provides DMS2ICEBERG_PYTHON).

use crate::common::*;
use serde_json::Value;
use std::path::PathBuf;

/// Generate one table, ingest the whole tree, check scan + readers.
fn roundtrip(name: &str, scenario: &str, args: &[&str], table: &str) -> Work {
    let w = Work::new(name);
    w.generate(scenario, args);
    w.ingest().assert_success();
    w.assert_table(table);
    w
}

const SMALL: &[&str] = &["--rows", "200", "--cdc-files", "4", "--cdc-rows", "120"];

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more.iter()).copied().collect()
}

// ---------------------------------------------------------------------------------------------
// The product example

#[test]
fn product_csv() {
    let w = roundtrip("product_csv", "product", &[], "sales.product");
    // The worked example of the format notes, spelled out.
    let rows = w.scan("sales.product", &[]);
    let ids: Vec<i64> = rows
        .iter()
        .map(|r| r["product_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![100, 101, 102, 104, 105, 106]);
    assert_eq!(rows[2]["quantity_available"], 11);
    let t = w.tables().assert_success();
    assert!(
        t.stdout.contains("sales.product"),
        "`tables` does not list sales.product:\n{}",
        t.describe()
    );
}

#[test]
fn product_parquet() {
    roundtrip(
        "product_parquet",
        "product",
        &["--format", "parquet"],
        "sales.product",
    );
}

#[test]
fn product_upper_case_names_bucket_folder() {
    // DMS schema/table folders in upper case under a BucketFolder; the table name is lower-cased.
    roundtrip(
        "product_upper",
        "product",
        &[
            "--schema",
            "SALES",
            "--table",
            "PRODUCT",
            "--bucket-folder",
            "dms-out",
        ],
        "sales.product",
    );
}

fn rfc3339_millis(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn sql_millis(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

#[test]
fn product_time_travel_file_by_file() {
    let w = Work::new("product_tt");
    w.generate("product", &[]);
    let table = "sales.product";
    let meta = w.meta(table);
    let steps = w.asof(table);
    assert_eq!(steps.len(), 3);
    for s in &steps {
        w.ingest_paths(&[w.dms().join(&s.after_file)])
            .assert_success();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let hist = w.history(table);
    assert_eq!(
        hist.len(),
        steps.len(),
        "one snapshot per ingested file expected, history: {hist:?}"
    );
    let mut last_ms = i64::MIN;
    for (i, (snap, step)) in hist.iter().zip(&steps).enumerate() {
        let (j, _) = step_of_snapshot(snap, &steps);
        assert_eq!(
            i, j,
            "snapshot #{i} should be for {}: {snap}",
            step.after_file
        );
        let id = snap["snapshot_id"]
            .as_i64()
            .expect("snapshot_id is a number");
        let ms = snap["timestamp_ms"]
            .as_i64()
            .expect("timestamp_ms is a number");
        assert!(
            ms > last_ms,
            "history not oldest first / timestamps not increasing: {hist:?}"
        );
        last_ms = ms;
        assert!(
            snap["operation"].as_str().is_some_and(|o| !o.is_empty()),
            "operation missing: {snap}"
        );
        let id_s = id.to_string();
        let got = w.scan(table, &["--snapshot", &id_s]);
        assert_rows(
            &format!("--snapshot {id} (after {})", step.after_file),
            &meta,
            &step.rows,
            &got,
        );
        for as_of in [ms.to_string(), rfc3339_millis(ms), sql_millis(ms)] {
            let got = w.scan(table, &["--as-of", &as_of]);
            assert_rows(
                &format!("--as-of {as_of} (after {})", step.after_file),
                &meta,
                &step.rows,
                &got,
            );
        }
        let p = w.write_jsonl(&format!("step{i}.jsonl"), &step.rows);
        w.check_readers(table, &p, Some(id));
    }
    // Before the first snapshot there is no table state: an error, not an empty result.
    let before = (hist[0]["timestamp_ms"].as_i64().unwrap() - 1).to_string();
    let r = w.scan_run(table, &["--as-of", &before]);
    assert!(
        !r.status.success(),
        "--as-of before the first snapshot should fail:\n{}",
        r.describe()
    );
    // Between two snapshots: the older state.
    let ms1 = hist[1]["timestamp_ms"].as_i64().unwrap();
    let got = w.scan(table, &["--as-of", &(ms1 - 1).to_string()]);
    assert_rows(
        "--as-of just before the 2nd snapshot",
        &meta,
        &steps[0].rows,
        &got,
    );
    // --limit
    let got = w.scan(table, &["--limit", "2"]);
    assert_eq!(got.len(), 2, "--limit 2 gave {got:?}");
    // current state
    w.assert_table(table);
}

#[test]
fn product_history_whole_tree() {
    // One ingest of the whole tree: however the files are grouped into snapshots, every file is
    // recorded exactly once and each snapshot shows the state after its last file.
    let w = roundtrip("product_hist", "product", &[], "sales.product");
    let table = "sales.product";
    let meta = w.meta(table);
    let steps = w.asof(table);
    let hist = w.history(table);
    assert!(!hist.is_empty());
    let mut seen = Vec::new();
    for snap in &hist {
        for f in snap["source_files"].as_array().unwrap() {
            seen.push(f.as_str().unwrap().to_string());
        }
        let (_, step) = step_of_snapshot(snap, &steps);
        let id = snap["snapshot_id"].as_i64().unwrap().to_string();
        let got = w.scan(table, &["--snapshot", &id]);
        assert_rows(&format!("--snapshot {id}"), &meta, &step.rows, &got);
    }
    for s in &steps {
        let n = seen.iter().filter(|f| f.ends_with(&s.after_file)).count();
        assert_eq!(
            n, 1,
            "{} recorded {n} times in history: {hist:?}",
            s.after_file
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Synthetic tables, one DMS endpoint setting at a time

#[test]
fn synthetic_csv_header() {
    roundtrip("syn_header", "synthetic", SMALL, "shop.orders");
}

#[test]
fn synthetic_load_split_over_hex_named_files() {
    roundtrip(
        "syn_hexload",
        "synthetic",
        &with(SMALL, &["--load-files", "12", "--seed", "21"]),
        "shop.orders",
    );
}

#[test]
fn synthetic_headerless() {
    roundtrip(
        "syn_headerless",
        "synthetic",
        &with(SMALL, &["--no-header", "--seed", "22"]),
        "shop.orders",
    );
}

#[test]
fn synthetic_headerless_everything() {
    roundtrip(
        "syn_headerless_all",
        "synthetic",
        &with(
            SMALL,
            &[
                "--no-header",
                "--timestamp-column",
                "dms_ts",
                "--change-seq-column",
                "AR_H_CHANGE_SEQ",
                "--before-image",
                "--pk-update-ratio",
                "0.1",
                "--seed",
                "23",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn synthetic_no_op_in_load() {
    roundtrip(
        "syn_noop",
        "synthetic",
        &with(SMALL, &["--no-op-in-load", "--seed", "24"]),
        "shop.orders",
    );
}

#[test]
fn synthetic_headerless_no_op_in_load() {
    roundtrip(
        "syn_headerless_noop",
        "synthetic",
        &with(SMALL, &["--no-header", "--no-op-in-load", "--seed", "25"]),
        "shop.orders",
    );
}

#[test]
fn synthetic_gzip() {
    roundtrip(
        "syn_gzip",
        "synthetic",
        &with(SMALL, &["--gzip", "--seed", "26"]),
        "shop.orders",
    );
}

#[test]
fn synthetic_date_folders() {
    // Change files every 10 minutes from 23:30: the folders span two days.
    let w = roundtrip(
        "syn_dates",
        "synthetic",
        &with(SMALL, &["--date-folders", "--seed", "27"]),
        "shop.orders",
    );
    assert!(w.dms().join("shop/orders/2022/03/03").is_dir());
}

#[test]
fn timestamp_column_ordering() {
    // Rows inside each change file are out of commit order; only the commit timestamp column
    // (ties keep file order) gives the source order.
    roundtrip(
        "ts_order",
        "synthetic",
        &with(
            SMALL,
            &[
                "--timestamp-column",
                "dms_commit_ts",
                "--shuffle-rows",
                "--seed",
                "28",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn change_seq_ordering() {
    roundtrip(
        "seq_order",
        "synthetic",
        &with(
            SMALL,
            &[
                "--change-seq-column",
                "AR_H_CHANGE_SEQ",
                "--timestamp-column",
                "dms_ts",
                "--shuffle-rows",
                "--seed",
                "29",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn null_token_backslash_n() {
    // With CsvNullValue set, an empty field is an empty string and \N is NULL.
    roundtrip(
        "null_bsn",
        "synthetic",
        &with(
            SMALL,
            &[
                "--null-value",
                "\\N",
                "--nasty-ratio",
                "0.8",
                "--seed",
                "30",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn null_token_null_with_semicolons() {
    roundtrip(
        "null_null",
        "synthetic",
        &with(
            SMALL,
            &[
                "--null-value",
                "NULL",
                "--delimiter",
                ";",
                "--nasty-ratio",
                "0.8",
                "--seed",
                "31",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn quoting_edge_cases() {
    // Every note is an edge case: commas, quotes, LF and CRLF inside quotes, non-ASCII,
    // leading/trailing spaces, the text NULL, a lone delimiter, a pair of quotes.
    roundtrip(
        "quoting",
        "synthetic",
        &with(SMALL, &["--nasty-ratio", "1", "--seed", "32"]),
        "shop.orders",
    );
}

#[test]
fn quoting_multichar_delimiter() {
    // CsvDelimiter is "any string" in the DMS endpoint settings.
    roundtrip(
        "quoting_multi",
        "synthetic",
        &with(
            SMALL,
            &["--nasty-ratio", "1", "--delimiter", "||", "--seed", "33"],
        ),
        "shop.orders",
    );
}

#[test]
fn quoting_tab_delimiter() {
    roundtrip(
        "quoting_tab",
        "synthetic",
        &with(
            SMALL,
            &["--nasty-ratio", "1", "--delimiter", "\t", "--seed", "34"],
        ),
        "shop.orders",
    );
}

#[test]
fn parquet_dms_types() {
    // int8-64, uint8/16/32/64 (uint64 -> decimal(20,0)), decimal, date, time, timestamp(us),
    // float, double, binary, bool; Parquet format 1.0 as DMS writes by default.
    roundtrip(
        "parquet_types",
        "synthetic",
        &with(SMALL, &["--format", "parquet", "--seed", "35"]),
        "shop.orders",
    );
}

#[test]
fn parquet_ms_gzip_v2_small_row_groups() {
    roundtrip(
        "parquet_ms",
        "synthetic",
        &with(
            SMALL,
            &[
                "--format",
                "parquet",
                "--timestamp-unit",
                "ms",
                "--gzip",
                "--parquet-version",
                "2.6",
                "--row-group-size",
                "37",
                "--timestamp-column",
                "dms_ts",
                "--change-seq-column",
                "AR_H_CHANGE_SEQ",
                "--shuffle-rows",
                "--seed",
                "36",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn before_image_key_change() {
    roundtrip(
        "bi_csv",
        "synthetic",
        &with(
            SMALL,
            &[
                "--before-image",
                "--pk-update-ratio",
                "0.25",
                "--seed",
                "37",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn before_image_key_change_parquet() {
    roundtrip(
        "bi_parquet",
        "synthetic",
        &with(
            SMALL,
            &[
                "--format",
                "parquet",
                "--before-image",
                "--pk-update-ratio",
                "0.25",
                "--seed",
                "38",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn partition_move() {
    // Table partitioned by status; updates move rows between partitions.
    roundtrip(
        "partition_move",
        "synthetic",
        &with(SMALL, &["--partition-move", "--seed", "39"]),
        "shop.orders",
    );
}

#[test]
fn partition_bucket_and_day() {
    roundtrip(
        "partition_transforms",
        "synthetic",
        &with(
            SMALL,
            &[
                "--partition-by",
                "bucket(4, order_id)",
                "--partition-by",
                "day(updated_at)",
                "--seed",
                "40",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn partition_by_decimal() {
    // A decimal partition value: manifests written by iceberg-rust's writer, not by
    // commit/encode.rs (which writes the other partition types).
    roundtrip(
        "partition_decimal",
        "synthetic",
        &with(
            SMALL,
            &["--partition-by", "truncate(100000, amount)", "--seed", "44"],
        ),
        "shop.orders",
    );
}

#[test]
fn new_column_and_reordered_columns() {
    roundtrip(
        "new_column",
        "synthetic",
        &with(SMALL, &["--add-column-at-file", "2", "--seed", "41"]),
        "shop.orders",
    );
}

#[test]
fn new_column_and_reordered_columns_parquet() {
    roundtrip(
        "new_column_parquet",
        "synthetic",
        &with(
            SMALL,
            &[
                "--format",
                "parquet",
                "--add-column-at-file",
                "3",
                "--seed",
                "42",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn new_column_arrives_in_a_later_run() {
    // The schema change arrives in a second ingest run, against an existing table.
    let w = Work::new("new_column_later");
    w.generate(
        "synthetic",
        &with(
            SMALL,
            &[
                "--add-column-at-file",
                "3",
                "--pending-from-file",
                "3",
                "--seed",
                "43",
            ],
        ),
    );
    w.ingest().assert_success();
    w.assert_table_rows("shop.orders", &w.expected_initial("shop.orders"), "initial");
    w.promote_pending();
    w.ingest().assert_success();
    w.assert_table("shop.orders");
}

#[test]
fn two_tables_in_one_tree() {
    let w = Work::new("two_tables");
    w.generate("product", &[]);
    w.generate("synthetic", &with(SMALL, &["--seed", "44"]));
    w.ingest().assert_success();
    w.assert_table("sales.product");
    w.assert_table("shop.orders");
}

#[test]
fn larger_table() {
    roundtrip(
        "larger",
        "synthetic",
        &[
            "--rows",
            "20000",
            "--cdc-files",
            "4",
            "--cdc-rows",
            "3000",
            "--change-seq-column",
            "AR_H_CHANGE_SEQ",
            "--before-image",
            "--pk-update-ratio",
            "0.05",
            "--seed",
            "45",
        ],
        "shop.orders",
    );
}

// ---------------------------------------------------------------------------------------------
// Idempotency

#[test]
fn repeated_ingest_is_a_noop() {
    let w = roundtrip(
        "repeat",
        "synthetic",
        &with(
            SMALL,
            &["--change-seq-column", "AR_H_CHANGE_SEQ", "--seed", "46"],
        ),
        "shop.orders",
    );
    let table = "shop.orders";
    let hist = w.history(table);
    let scan = w.scan_run(table, &[]).assert_success().stdout;
    let again = w.ingest().assert_success();
    assert!(
        again.output().to_lowercase().contains("skip"),
        "second ingest should report the files as skipped:\n{}",
        again.describe()
    );
    assert_eq!(w.history(table), hist, "second ingest changed history");
    assert_eq!(
        w.scan_run(table, &[]).assert_success().stdout,
        scan,
        "second ingest changed the table"
    );
    // Re-delivering a single old file (an S3 event repeated) is also a no-op.
    let meta = w.meta(table);
    let one = w.dms().join(&meta.files[1]);
    w.ingest_paths(&[one]).assert_success();
    assert_eq!(
        w.history(table),
        hist,
        "re-ingesting one file changed history"
    );
    // The same DMS objects seen under another root (a re-synced copy) are still the same files.
    let copy = w.dir.join("copy-of-dms");
    copy_tree(&w.dms(), &copy);
    w.ingest_paths(&[copy]).assert_success();
    assert_eq!(
        w.history(table),
        hist,
        "ingesting a copy of the same tree changed history"
    );
    w.assert_table(table);
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Delivery order: S3 events are at-least-once and unordered, so a change file can arrive after
// a later one. The table must still equal applying every change in source order exactly once
// (architecture.md, section 1); silently skipping the late file loses its changes.

#[test]
fn late_change_file_is_not_lost() {
    let w = Work::new("late_file");
    w.generate("product", &[]);
    let table = "sales.product";
    let meta = w.meta(table);
    // LOAD, then the 2nd change file, then the 1st one.
    for f in [&meta.files[0], &meta.files[2], &meta.files[1]] {
        w.ingest_paths(&[w.dms().join(f)]).assert_success();
    }
    w.assert_table(table);
}

#[test]
fn change_files_delivered_in_reverse_order() {
    let w = Work::new("reverse_delivery");
    w.generate(
        "synthetic",
        &with(
            SMALL,
            &["--change-seq-column", "AR_H_CHANGE_SEQ", "--seed", "47"],
        ),
    );
    let table = "shop.orders";
    let meta = w.meta(table);
    w.ingest_paths(&[w.dms().join(&meta.files[0])])
        .assert_success();
    for f in meta.files[1..].iter().rev() {
        w.ingest_paths(&[w.dms().join(f)]).assert_success();
    }
    w.assert_table(table);
}

// ---------------------------------------------------------------------------------------------
// Bad input: ingest fails, names the file (and line / column), leaves the table untouched,
// and still applies the other, good table of the same run.

fn bad_input(name: &str, orders_args: &[&str]) {
    let w = Work::new(name);
    // A good table whose 2nd change file arrives with the bad one.
    w.generate("product", &["--pending-from-file", "2"]);
    w.generate("synthetic", orders_args);
    let bad = w.corrupt("shop.orders");
    let orders = "shop.orders";
    let product = "sales.product";

    w.ingest().assert_success();
    w.assert_table(orders);
    w.assert_table_rows(product, &w.expected_initial(product), "initial");
    let scan_before = w.scan_run(orders, &[]).assert_success().stdout;
    let hist_before = w.history(orders);

    w.promote_pending();
    let r = w.ingest();
    assert_eq!(
        r.status.code(),
        Some(1),
        "ingest with a bad {} file must exit 1:\n{}",
        bad.kind,
        r.describe()
    );
    let out = r.output();
    let file = bad.file.as_ref().expect("corrupt file");
    let base = PathBuf::from(file)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        out.contains(&base),
        "error does not name the file {base}:\n{}",
        r.describe()
    );
    if let (Some(line), Some(record)) = (bad.line, bad.record) {
        assert!(
            mentions_number(&out, line) || mentions_number(&out, record),
            "error does not name line {line} (record {record}) of {base}:\n{}",
            r.describe()
        );
    }
    if let Some(col) = bad.column.as_ref().filter(|c| *c != "Op") {
        assert!(
            out.contains(col.as_str()),
            "error does not name column {col}:\n{}",
            r.describe()
        );
    }
    assert_eq!(
        w.scan_run(orders, &[]).assert_success().stdout,
        scan_before,
        "bad input changed {orders}"
    );
    assert_eq!(
        w.history(orders),
        hist_before,
        "bad input added to the history of {orders}"
    );
    w.assert_table(orders);
    // The good table of the same run was applied.
    w.assert_table(product);
}

#[test]
fn bad_input_wrong_column_count() {
    bad_input(
        "bad_colcount",
        &with(SMALL, &["--corrupt", "column-count", "--seed", "50"]),
    );
}

#[test]
fn bad_input_unknown_op() {
    bad_input(
        "bad_op",
        &with(SMALL, &["--corrupt", "unknown-op", "--seed", "51"]),
    );
}

#[test]
fn bad_input_unparsable_number() {
    bad_input(
        "bad_number",
        &with(SMALL, &["--corrupt", "bad-number", "--seed", "52"]),
    );
}

#[test]
fn bad_input_parquet_long_becomes_string() {
    bad_input(
        "bad_parquet_type",
        &with(
            SMALL,
            &[
                "--format",
                "parquet",
                "--corrupt",
                "long-to-string",
                "--seed",
                "53",
            ],
        ),
    );
}

#[test]
fn bad_input_no_primary_key_configured() {
    let w = Work::new("bad_nopk");
    w.generate("product", &[]);
    w.generate(
        "synthetic",
        &with(SMALL, &["--corrupt", "no-pk", "--seed", "54"]),
    );
    let r = w.ingest();
    assert_eq!(
        r.status.code(),
        Some(1),
        "ingest of a table without primary key must exit 1:\n{}",
        r.describe()
    );
    let out = r.output();
    assert!(
        out.contains("shop.orders") || out.contains("shop/orders"),
        "error does not name the table:\n{}",
        r.describe()
    );
    assert!(
        out.to_lowercase().contains("primary"),
        "error does not say the primary key is missing:\n{}",
        r.describe()
    );
    // Nothing was created for it, the other table was applied.
    assert!(
        !w.scan_run("shop.orders", &[]).status.success(),
        "shop.orders should not exist"
    );
    let t = w.tables().assert_success();
    assert!(!t.stdout.contains("shop.orders"), "{}", t.describe());
    w.assert_table("sales.product");
}

// ---------------------------------------------------------------------------------------------
// Large inputs: with `large_input_bytes = 0` every commit takes the path of a large file: it
// streams (sorted runs of half of `large_input_bytes` spilled, here one per batch, then merged,
// looked up and written a chunk at a time), except a late file re-merged with later ones, which
// is deduplicated on its key columns and read a second time.

/// A commit of a large input took the large-input path.
fn assert_large_path(c: &Value) {
    if c["late"] == true {
        assert_eq!(c["read_twice"], true, "late commit not read twice: {c}");
    } else {
        assert_eq!(c["streamed"], true, "commit not streamed: {c}");
    }
}

fn read_twice(name: &str, args: &[&str], table: &str) -> Work {
    let w = Work::new(name);
    w.generate("synthetic", args);
    w.set_default("large_input_bytes = 0");
    let commits = w.ingest_json(&[w.dms()]);
    let applied: Vec<&Value> = commits
        .iter()
        .filter(|c| c["status"] == "applied")
        .collect();
    assert!(!applied.is_empty(), "nothing applied: {commits:?}");
    for c in &applied {
        assert_large_path(c);
    }
    w.assert_table(table);
    w
}

#[test]
fn read_twice_before_image_change_seq_partition_move() {
    read_twice(
        "read_twice_bi",
        &[
            "--rows",
            "3000",
            "--cdc-files",
            "4",
            "--cdc-rows",
            "1500",
            "--change-seq-column",
            "AR_H_CHANGE_SEQ",
            "--before-image",
            "--pk-update-ratio",
            "0.05",
            "--partition-move",
            "--seed",
            "61",
        ],
        "shop.orders",
    );
}

#[test]
fn read_twice_parquet_new_column() {
    read_twice(
        "read_twice_parquet",
        &with(
            SMALL,
            &[
                "--format",
                "parquet",
                "--add-column-at-file",
                "3",
                "--seed",
                "62",
            ],
        ),
        "shop.orders",
    );
}

#[test]
fn read_twice_late_file() {
    // A late file re-merged with the files applied after it, all read twice.
    let w = Work::new("read_twice_late");
    w.generate(
        "synthetic",
        &with(SMALL, &["--timestamp-column", "ts", "--seed", "63"]),
    );
    w.set_default("large_input_bytes = 0");
    let table = "shop.orders";
    let meta = w.meta(table);
    let mut order: Vec<&String> = vec![&meta.files[0]];
    order.extend(meta.files[2..].iter());
    order.push(&meta.files[1]);
    let mut late = false;
    for f in order {
        for c in w.ingest_json(&[w.dms().join(f)]) {
            if c["status"] == "applied" {
                assert_large_path(&c);
                late |= c["late"] == true;
            }
        }
    }
    assert!(
        late,
        "the second change file was not re-merged as a late file"
    );
    w.assert_table(table);
}
