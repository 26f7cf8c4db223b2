//! Order guarantees across files, checked through the CLI binary on hand-written DMS files
//! whose final state is obvious by construction.
//!
//! With an ordering column, a change older than the row the table holds never overwrites it,
//! even when the file carrying it comes later in DMS order. Without one, DMS order decides.

use crate::common::{Work, read_json};

/// A work dir for a hand-written tree of the table `s.t` (no generator).
fn work(name: &str) -> Work {
    Work::plain(&format!("ordering-{name}"))
}

/// Writes one DMS file of `s.t`.
fn write(w: &Work, file: &str, text: &str) {
    w.write_file(&format!("dms/s/t/{file}"), text);
}

const SEQ_5: &str = "00000000000000000000000000000000005";
const SEQ_1: &str = "00000000000000000000000000000000001";
const SEQ_3: &str = "00000000000000000000000000000000003";
const SEQ_4: &str = "00000000000000000000000000000000004";

fn tree(w: &Work) {
    write(
        w,
        "LOAD00000001.csv",
        "Op,id,v,seq\nI,1,a,\nI,2,b,\nI,3,c,\n",
    );
    write(
        w,
        "20220302-1134010000.csv",
        &format!("Op,id,v,seq\nU,1,new,{SEQ_5}\nU,2,x,{SEQ_1}\n"),
    );
    // Later in DMS order, but its change to 1 is older than the one applied.
    write(
        w,
        "20220302-1135010000.csv",
        &format!("Op,id,v,seq\nU,1,old,{SEQ_3}\nD,2,,{SEQ_4}\nU,3,c2,{SEQ_3}\n"),
    );
}

#[test]
fn an_older_change_never_overwrites_a_newer_row() {
    let w = work("seq");
    tree(&w);
    std::fs::write(
        w.config(),
        "[tables.\"s.t\"]\nprimary_key = [\"id\"]\nchange_sequence_column = \"seq\"\n",
    )
    .unwrap();
    let reports = w.ingest_json(&[w.dms()]);
    let last = reports.last().expect("a report per commit");
    assert_eq!(last["stale_changes"], 1, "{reports:?}");
    assert_eq!(last["deleted"], 1, "{reports:?}");
    assert_eq!(
        w.scan_csv("s.t"),
        format!("id,v,seq\n1,new,{SEQ_5}\n3,c2,{SEQ_3}\n"),
        "1 keeps its newer value, 2 is deleted (newer delete), 3 takes its only change"
    );
}

#[test]
fn without_an_ordering_column_dms_order_decides() {
    let w = work("noseq");
    tree(&w);
    std::fs::write(w.config(), "[tables.\"s.t\"]\nprimary_key = [\"id\"]\n").unwrap();
    w.ingest().assert_success();
    assert_eq!(
        w.scan_csv("s.t"),
        format!("id,v,seq\n1,old,{SEQ_3}\n3,c2,{SEQ_3}\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Generated trees (tests/support/dmsgen.py): whole table against the generator's model, which
// applies every change in source order; the files carry some changes late.

/// Ingests `w`'s tree with `--files-per-commit n`; returns the per-commit reports.
fn ingest_reports(w: &Work, n: usize) -> Vec<serde_json::Value> {
    w.ingest_json_with(&[w.dms()], &["--files-per-commit", &n.to_string()])
}

fn stale(reports: &[serde_json::Value]) -> u64 {
    reports
        .iter()
        .map(|r| r["stale_changes"].as_u64().unwrap_or(0))
        .sum()
}

/// `ordering_column` on a timestamp column: updates delivered one or two files late (their
/// `updated_at` older than what the table holds by then) never overwrite the newer row.
#[test]
fn ordering_column_timestamp_across_files() {
    let w = Work::new("ordering_ts");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "150",
            "--cdc-files",
            "5",
            "--cdc-rows",
            "80",
            "--ordering-column",
            "updated_at",
            "--delay-changes",
            "0.3",
        ],
    );
    let delayed = read_json(&w.meta_path("shop.orders"))["delayed_changes"]
        .as_u64()
        .unwrap();
    assert!(delayed > 5, "the generator moved only {delayed} changes");
    let reports = ingest_reports(&w, 1);
    assert!(
        stale(&reports) > 0,
        "no change was found stale: {reports:?}"
    );
    w.assert_table("shop.orders");
}

/// The same on an integer column (`version`), several files per commit: within a commit and
/// across commits alike.
#[test]
fn ordering_column_integer_batched() {
    let w = Work::new("ordering_int");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "150",
            "--cdc-files",
            "6",
            "--cdc-rows",
            "80",
            "--ordering-column",
            "version",
            "--delay-changes",
            "0.3",
            "--seed",
            "7",
        ],
    );
    let reports = ingest_reports(&w, 2);
    assert!(stale(&reports) > 0, "{reports:?}");
    w.assert_table("shop.orders");
}

/// A generated tree whose first change file holds changes DMS cached during the full load:
/// commit timestamps (`dms_ts`) older than the full-load rows'.
fn cached_changes(name: &str) -> Work {
    let w = Work::new(name);
    w.generate(
        "synthetic",
        &[
            "--rows",
            "120",
            "--cdc-files",
            "3",
            "--cdc-rows",
            "60",
            "--timestamp-column",
            "dms_ts",
            "--cached-changes",
        ],
    );
    w
}

/// Changes DMS cached during the full load carry commit timestamps older than the full-load
/// rows (stamped with the transfer time). Full-load rows still come first: the changes apply,
/// whether the full load and the changes share a commit or not.
#[test]
fn full_load_rows_come_before_changes_in_any_batching() {
    for (n, name) in [(1, "cached_1"), (100, "cached_all")] {
        let w = cached_changes(name);
        let reports = ingest_reports(&w, n);
        assert_eq!(stale(&reports), 0, "--files-per-commit {n}: {reports:?}");
        w.assert_table("shop.orders");
    }
}

/// The changes cached during the load delivered late, after later change files and a
/// compaction: compaction kept the full-load rows in a file of their own (the table records its
/// ordering column), so they still come before the cached changes, which apply.
#[test]
fn full_load_rows_come_before_cached_changes_after_a_compaction() {
    let w = cached_changes("cached_compacted");
    let dir = w.dms().join("shop/orders");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .expect("generated tree")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let (load, changes): (Vec<_>, Vec<_>) = files.into_iter().partition(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("LOAD"))
    });
    let (cached, later) = changes.split_first().expect("three change files");
    let mut first = load.clone();
    first.extend(later.iter().cloned());
    let reports = w.ingest_json(&first);
    assert_eq!(stale(&reports), 0, "{reports:?}");
    let wh = w.wh();
    w.cli(&[
        "compact".as_ref(),
        "shop.orders".as_ref(),
        "--warehouse".as_ref(),
        wh.as_os_str(),
    ])
    .assert_success();
    let reports = w.ingest_json(std::slice::from_ref(cached));
    assert_eq!(stale(&reports), 0, "{reports:?}");
    w.assert_table("shop.orders");
}

/// An ISO-8601 string, a decimal and a date order changes too (compared as their type).
#[test]
fn ordering_column_of_other_types() {
    for (col, older, newer) in [
        ("iso", "2024-01-02T10:00:00Z", "2024-01-02T11:00:00Z"),
        ("amount", "10.50", "10.75"),
        ("day", "2024-01-02", "2024-01-03"),
    ] {
        let w = work(&format!("type-{col}"));
        write(
            &w,
            "LOAD00000001.csv",
            &format!("Op,id,v,{col}\nI,1,a,{older}\nI,2,b,{older}\n"),
        );
        write(
            &w,
            "20220302-1134010000.csv",
            &format!("Op,id,v,{col}\nU,1,new,{newer}\n"),
        );
        // Later in DMS order, older by the column: only 2 takes it.
        write(
            &w,
            "20220302-1135010000.csv",
            &format!("Op,id,v,{col}\nU,1,old,{older}\nU,2,b2,{newer}\n"),
        );
        std::fs::write(
            w.config(),
            format!("[tables.\"s.t\"]\nprimary_key = [\"id\"]\nordering_column = \"{col}\"\n"),
        )
        .unwrap();
        let out = w.ingest().assert_success().stdout;
        assert!(
            out.contains("1 stale (older than the row the table holds"),
            "the summary shows stale changes: {out}"
        );
        assert_eq!(
            w.scan_csv("s.t"),
            format!("id,v,{col}\n1,new,{newer}\n2,b2,{newer}\n"),
            "ordering by {col}"
        );
    }
}
