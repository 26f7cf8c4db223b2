//! Widened columns (issue 48, part 2), through the CLI: a source column that becomes wider
//! (INT → BIGINT, REAL → DOUBLE, DECIMAL(9,2) → DECIMAL(12,2)) widens the Iceberg column, as
//! Iceberg allows, and the table goes on: more change files, `rewrite-manifests`, compaction,
//! and every snapshot, before and after the widening, read back by our `scan --snapshot`,
//! PyIceberg and DuckDB against the model's state (the scenario: `tests/common/widen.rs`).
//!
//! Each case runs in one ingest call or in a fresh process per file, with manifest merging on
//! (every commit rewrites the older manifests with its own) or off (older manifests stay as
//! they were written until `rewrite-manifests`). Cases widen the primary key too (lookup
//! pruning and conflict checks compare key bounds of both widths), and one partitions by a
//! widened column (partition values widen with it).

use crate::common::*;
use crate::widen_support::*;

fn run_case(case: &Case) {
    let w = Work::new(&format!("widen_{}", case.name));
    let snapshots = build(&w, case, &mut |rows, label| {
        w.assert_table_rows(TABLE, rows, label)
    });
    let meta = w.meta(TABLE);
    for (i, s) in snapshots.iter().enumerate() {
        let id = s.id.to_string();
        let got = w.scan(TABLE, &["--snapshot", &id]);
        assert_rows(
            &format!("scan --snapshot {id} (#{i})"),
            &meta,
            &s.rows,
            &got,
        );
        let p = w.write_jsonl(&format!("snapshot{i}.jsonl"), &s.rows);
        w.check_readers(TABLE, &p, Some(s.id));
    }
}

#[test]
fn parquet_widens_in_one_call_key_too() {
    run_case(&Case {
        name: "parquet_one",
        format: Format::Parquet,
        calls: Calls::One,
        key_widens: true,
        merge: true,
        partition_by: None,
    });
}

#[test]
fn parquet_widens_in_separate_calls_manifests_unmerged_key_too() {
    run_case(&Case {
        name: "parquet_separate",
        format: Format::Parquet,
        calls: Calls::Separate,
        key_widens: true,
        merge: false,
        partition_by: None,
    });
}

#[test]
fn csv_widens_by_pins_in_one_call_manifests_unmerged() {
    run_case(&Case {
        name: "csv_one",
        format: Format::Csv,
        calls: Calls::One,
        key_widens: false,
        merge: false,
        partition_by: None,
    });
}

#[test]
fn csv_widens_by_pins_in_separate_calls_key_too() {
    run_case(&Case {
        name: "csv_separate",
        format: Format::Csv,
        calls: Calls::Separate,
        key_widens: true,
        merge: true,
        partition_by: None,
    });
}

/// Partitioned by a widened column (`truncate` keeps its source's type, so the partition values
/// widen with it): manifests from before the widening hold int partition values, those after
/// long ones, and a delete file must still meet its data file in every reader.
#[test]
fn parquet_widens_a_partition_source_manifests_unmerged() {
    run_case(&Case {
        name: "parquet_partition",
        format: Format::Parquet,
        calls: Calls::Separate,
        key_widens: false,
        merge: false,
        partition_by: Some("truncate(1000000, customer_id)"),
    });
}
