//! Full loads at scale (issue 24): a full-load file is streamed in bounded memory whatever its
//! size and key order, duplicate keys in a full load keep the last row in DMS order, the files
//! of one load commit in parallel (one process with `--parallel`, or several processes at
//! once), and a bad value deep in a large file fails it naming file, line and column with
//! nothing committed. Every table is compared whole with an independently computed state
//! (our scan, PyIceberg, DuckDB).

use std::path::PathBuf;

use crate::common::{Work, mentions_number};
use serde_json::Value;

const TABLE: &str = "shop.orders";

fn load_commits(reports: &[Value]) -> Vec<&Value> {
    reports
        .iter()
        .filter(|c| {
            c["status"] == "applied"
                && c["files"].as_array().is_some_and(|f| {
                    f.iter()
                        .all(|f| f.as_str().is_some_and(|f| f.contains("LOAD")))
                })
        })
        .collect()
}

#[test]
fn a_shuffled_load_larger_than_its_sort_budget_is_spilled_and_exact() {
    let w = Work::new("fullload_spill");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "3000",
            "--load-order",
            "shuffled",
            "--cdc-files",
            "2",
            "--cdc-rows",
            "200",
            "--seed",
            "241",
        ],
    );
    // Sort runs of 16 KB: the load (about 400 KB of rows) is sorted in many spilled runs.
    w.set_default("large_input_bytes = 32768");
    let reports = w.ingest_json(&[w.dms()]);
    let loads = load_commits(&reports);
    assert_eq!(loads.len(), 1, "{reports:?}");
    let c = loads[0];
    assert_eq!(c["streamed"], true, "{c}");
    assert_eq!(
        c["read_twice"], true,
        "out of key order: sorted on a second read: {c}"
    );
    assert!(
        c["spilled_bytes"].as_u64().unwrap_or(0) > 0,
        "nothing spilled: {c}"
    );
    assert_eq!(c["inserted"], 3000, "{c}");
    // Two key ranges (below and from the first run's median key) merged and written apart,
    // each into a file of its own.
    assert_eq!(c["data_files"], 2, "{c}");
    w.assert_table(TABLE);
}

/// The two key ranges of a spilled load are merged at once; when one fails, the other stops at
/// its next batch instead of finishing its half first, and nothing is committed or left behind.
/// Both directions: the lower range is held back at its first batch while the upper one fails,
/// then the other way round.
#[test]
fn a_key_range_that_fails_stops_the_other_and_commits_nothing() {
    let w = Work::new("fullload_range_fails");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "20000",
            "--load-order",
            "shuffled",
            "--cdc-files",
            "1",
            "--cdc-rows",
            "100",
            "--seed",
            "7",
        ],
    );
    w.set_default("large_input_bytes = 262144");
    let load = w.dms().join("shop/orders/LOAD00000001.csv");
    for (failpoints, stops) in [
        (
            "lower-key-range:sleep=300,upper-key-range",
            "the upper key range failed: the lower one stops",
        ),
        (
            "upper-key-range:sleep=300,lower-key-range",
            "the lower key range failed: the upper one stops",
        ),
    ] {
        let (r, reports) = crate::stress_support::ingest_json(
            &w,
            std::slice::from_ref(&load),
            &["-v"],
            &[("DMS2ICEBERG_FAILPOINT", failpoints)],
        );
        assert!(!r.status.success(), "{}", r.describe());
        assert!(
            reports.iter().all(|c| c["status"] != "applied"),
            "{reports:?}"
        );
        let out = r.output();
        assert!(out.contains(stops), "{failpoints}: {}", r.describe());
        assert!(
            !w.scan_run(TABLE, &[]).status.success(),
            "the table must not exist"
        );
        let data = w.wh().join("shop.db/orders/data");
        let left = std::fs::read_dir(&data).map(|d| d.count()).unwrap_or(0);
        assert_eq!(left, 0, "files left in {}", data.display());
    }
    let reports = w.ingest_json(&[w.dms()]);
    let loads = load_commits(&reports);
    assert_eq!(loads.len(), 1, "{reports:?}");
    assert_eq!(loads[0]["data_files"], 2, "two key ranges: {}", loads[0]);
    w.assert_table(TABLE);
}

#[test]
fn a_sorted_load_goes_straight_through() {
    let w = Work::new("fullload_sorted");
    w.generate(
        "synthetic",
        &["--rows", "3000", "--cdc-files", "2", "--seed", "242"],
    );
    w.set_default("large_input_bytes = 32768");
    let reports = w.ingest_json(&[w.dms()]);
    let c = load_commits(&reports)[0];
    assert_eq!(c["read_twice"], false, "{c}");
    assert_eq!(c["spilled_bytes"], 0, "{c}");
    w.assert_table(TABLE);
}

/// Duplicate keys within and across the files of one load, in and out of key order,
/// applied file by file and in parallel: the last row in DMS order is the row.
#[test]
fn duplicate_keys_in_a_full_load_keep_the_last_row() {
    for (name, order, parallel) in [
        ("fullload_dup_sorted", "sorted", "1"),
        ("fullload_dup_shuffled", "shuffled", "1"),
        ("fullload_dup_parallel", "shuffled", "3"),
    ] {
        let w = Work::new(name);
        w.generate(
            "synthetic",
            &[
                "--rows",
                "2000",
                "--load-files",
                "3",
                "--load-order",
                order,
                "--load-duplicates",
                "0.1",
                "--cdc-files",
                "2",
                "--seed",
                "243",
            ],
        );
        w.set_default("large_input_bytes = 65536");
        let reports = w.ingest_json_with(&[w.dms()], &["--parallel", parallel]);
        let loads = load_commits(&reports);
        assert_eq!(loads.len(), 3, "{name}: {reports:?}");
        // 200 extra rows repeat keys: those within one file are counted as replaced there;
        // across files the later file's row replaces the earlier one's (an update).
        let within: u64 = loads
            .iter()
            .map(|c| c["duplicate_keys"].as_u64().unwrap_or(0))
            .sum();
        let across: u64 = loads
            .iter()
            .map(|c| c["updated"].as_u64().unwrap_or(0))
            .sum();
        let stale: u64 = loads
            .iter()
            .map(|c| c["stale_changes"].as_u64().unwrap_or(0))
            .sum();
        assert!(within > 0, "{name}: no duplicate within a file: {loads:?}");
        assert_eq!(within + across + stale, 200, "{name}: {loads:?}");
        w.assert_table(TABLE);
    }
}

/// Files of one load applied in reverse DMS order (as invocations for each file may finish):
/// a row of a later file, applied first, is kept over the same key's row of an earlier file.
#[test]
fn a_later_load_file_applied_first_keeps_its_rows() {
    let w = Work::new("fullload_dup_reversed");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "2000",
            "--load-files",
            "3",
            "--load-order",
            "shuffled",
            "--load-duplicates",
            "0.1",
            "--cdc-files",
            "2",
            "--seed",
            "246",
        ],
    );
    let meta = w.meta(TABLE);
    let mut stale = 0;
    for f in meta.files.iter().filter(|f| f.contains("LOAD")).rev() {
        for c in w.ingest_json(&[w.dms().join(f)]) {
            assert_eq!(c["status"], "applied", "{c}");
            stale += c["stale_changes"].as_u64().unwrap_or(0);
        }
    }
    assert!(stale > 0, "no earlier file's row met a later file's");
    w.ingest_json(&[w.dms()]);
    w.assert_table(TABLE);
}

/// `--parallel`: the files of one load commit at once, the first creating the table; a lost
/// swap to another file of the load is retried without planning again (their key ranges are
/// apart); change files apply after the whole load.
#[test]
fn load_files_commit_in_parallel_without_replanning() {
    let w = Work::new("fullload_parallel");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "4000",
            "--load-files",
            "8",
            "--cdc-files",
            "3",
            "--cdc-rows",
            "150",
            "--seed",
            "244",
        ],
    );
    let reports = w.ingest_json_with(&[w.dms()], &["--parallel", "4"]);
    let loads = load_commits(&reports);
    assert_eq!(loads.len(), 8, "{reports:?}");
    for c in &loads {
        assert_eq!(c["replans"], 0, "a file of the load planned again: {c}");
    }
    let changes: Vec<&Value> = reports
        .iter()
        .filter(|c| c["status"] == "applied" && !loads.contains(c))
        .collect();
    assert_eq!(changes.len(), 3, "{reports:?}");
    w.assert_table(TABLE);
}

/// Separate processes, one per full-load file, started at once on a table that does not exist
/// yet (as concurrent Lambda invocations): every file lands once, the table is created once,
/// and the change files apply on top.
#[test]
fn processes_applying_files_of_one_load_at_once() {
    let w = Work::new("fullload_processes");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "3000",
            "--load-files",
            "6",
            "--cdc-files",
            "2",
            "--seed",
            "245",
        ],
    );
    let meta = w.meta(TABLE);
    let loads: Vec<PathBuf> = meta
        .files
        .iter()
        .filter(|f| f.contains("LOAD"))
        .map(|f| w.dms().join(f))
        .collect();
    assert_eq!(loads.len(), 6);
    let reports: Vec<Vec<Value>> = std::thread::scope(|s| {
        let handles: Vec<_> = loads
            .iter()
            .map(|f| s.spawn(|| w.ingest_json_with(std::slice::from_ref(f), &[])))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("ingest"))
            .collect()
    });
    let applied: usize = reports
        .iter()
        .flatten()
        .filter(|c| c["status"] == "applied")
        .count();
    assert_eq!(applied, 6, "{reports:?}");
    let rest = w.ingest_json(&[w.dms()]);
    let changes = rest.iter().filter(|c| c["status"] == "applied").count();
    assert_eq!(changes, 2, "{rest:?}");
    w.assert_table(TABLE);
}

/// A table `s.t` of `id, v, n` with one full-load file of `rows` rows, `n` of row `bad_at`
/// being `12x4`.
fn load_with_a_bad_value(w: &Work, rows: u64, bad_at: u64, pin: bool) -> PathBuf {
    let dir = w.dms().join("s/t");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut text = String::from("Op,id,v,n\n");
    for i in 1..=rows {
        let n = if i == bad_at {
            "12x4".to_string()
        } else {
            (i * 7).to_string()
        };
        text.push_str(&format!("I,{i},value {i},{n}\n"));
    }
    let path = dir.join("LOAD00000001.csv");
    std::fs::write(&path, text).expect("write");
    let columns = if pin {
        "columns = [{ name = \"n\", type = \"long\" }]\n"
    } else {
        ""
    };
    std::fs::write(
        w.config(),
        format!("[defaults]\n[tables.\"s.t\"]\nprimary_key = [\"id\"]\n{columns}"),
    )
    .expect("config");
    path
}

/// A bad value far into a large full load (past the records its types are guessed from, past
/// many spilled runs) fails the file with file, line and column; nothing is committed.
#[test]
fn a_bad_value_deep_in_a_large_load_fails_it_and_commits_nothing() {
    let w = Work::new("fullload_bad_value");
    let path = load_with_a_bad_value(&w, 150_000, 140_000, true);
    let r = w.ingest_paths(&[w.dms()]);
    assert!(!r.status.success(), "{}", r.describe());
    let out = r.output();
    assert!(out.contains("LOAD00000001.csv"), "{}", r.describe());
    assert!(
        mentions_number(&out, 140_001),
        "the line is named: {}",
        r.describe()
    );
    assert!(out.contains("`n`"), "the column is named: {}", r.describe());
    assert!(
        !w.scan_run("s.t", &[]).status.success(),
        "the table must not exist"
    );
    // Nothing is left in the warehouse but the catalog.
    let data = w.wh().join("s.db/t/data");
    let left = std::fs::read_dir(&data).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "files left in {}", data.display());
    drop(path);
}

/// Unpinned, the same file is a text column: its type is guessed from the first records, the
/// value that does not fit makes the file be read again with the type all its values give
/// (what inferring from the whole file gives), and every row is kept.
#[test]
fn a_late_value_that_does_not_fit_the_guessed_type_widens_it() {
    let w = Work::new("fullload_retype");
    load_with_a_bad_value(&w, 150_000, 140_000, false);
    let reports = w.ingest_json(&[w.dms()]);
    let c = &reports[0];
    assert_eq!(c["status"], "applied", "{c}");
    assert_eq!(c["read_twice"], true, "{c}");
    assert_eq!(c["inserted"], 150_000, "{c}");
    let rows = w.scan("s.t", &["--limit", "1000000"]);
    let bad = rows
        .iter()
        .find(|r| r["id"] == 140_000)
        .expect("row 140000");
    assert_eq!(bad["n"], "12x4", "{bad}");
    assert_eq!(rows.len(), 150_000);
}

/// A full load of `s.t` (`id, v, n`, `n` pinned to long) written as `rows` in file order, with
/// the meta the readers' check needs; the table it must give (the last row of each id).
fn load_of(w: &Work, rows: &[(u64, String, String)]) -> Vec<Value> {
    let dir = w.dms().join("s/t");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut text = String::from("Op,id,v,n\n");
    let mut last: std::collections::BTreeMap<u64, (String, String)> = Default::default();
    for (id, v, n) in rows {
        text.push_str(&format!("I,{id},{v},{n}\n"));
        last.insert(*id, (v.clone(), n.clone()));
    }
    std::fs::write(dir.join("LOAD00000001.csv"), text).expect("write");
    std::fs::write(
        w.config(),
        "[defaults]\nlarge_input_bytes = 65536\n[tables.\"s.t\"]\nprimary_key = [\"id\"]\n\
         columns = [{ name = \"n\", type = \"long\" }]\n",
    )
    .expect("config");
    std::fs::create_dir_all(w.dir.join("expected")).expect("mkdir");
    std::fs::write(
        w.meta_path("s.t"),
        serde_json::json!({"table": "s.t", "dms_table": "s.t", "primary_key": ["id"],
               "columns": {"id": "long", "v": "string", "n": "long"},
               "files": [], "pending_files": []})
        .to_string(),
    )
    .expect("meta");
    last.into_iter()
        .map(|(id, (v, n))| {
            serde_json::json!({"id": id, "v": v, "n": n.parse::<i64>().unwrap_or(i64::MIN)})
        })
        .collect()
}

/// Ids 1..=`n` in key order but for every 20th, each moved to a pseudo-random place (earlier or
/// later than its own): a long-lived table's heap.
fn nearly_sorted(n: u64) -> Vec<(u64, String, String)> {
    let row = |id: u64| (id, format!("value {id}"), (id * 7).to_string());
    let mut rows: Vec<(u64, String, String)> = (1..=n).filter(|i| i % 20 != 0).map(row).collect();
    for id in (20..=n).step_by(20) {
        let at = ((id * 2_654_435_761) % (rows.len() as u64)) as usize;
        rows.insert(at, row(id));
    }
    rows
}

fn the_load(reports: &[Value]) -> &Value {
    let loads = load_commits(reports);
    assert_eq!(loads.len(), 1, "{reports:?}");
    loads[0]
}

/// Issue 38: a load nearly in key order goes through once: the rows out of order (moved ahead
/// of their place or behind it) are set aside, sorted apart and written as a data file of their
/// own; repeated keys among them keep the last row. The table is exact in our scan, PyIceberg
/// and DuckDB.
#[test]
fn a_nearly_sorted_load_sets_its_moved_rows_aside() {
    let w = Work::new("fullload_nearly");
    let mut rows = nearly_sorted(20_000);
    // Two ids again near the end, out of order, twice each: the last of each wins.
    for (id, v) in [
        (1_000, "again a"),
        (77, "again b"),
        (1_000, "again c"),
        (77, "again d"),
    ] {
        rows.insert(rows.len() - 3, (id, v.to_string(), "5".to_string()));
    }
    // Their first rows go, so that only rows set aside hold the two ids (a key on both sides
    // of the disorder is the next test's).
    rows.retain(|(id, v, _)| !((*id == 1_000 || *id == 77) && v.starts_with("value")));
    let expected = load_of(&w, &rows);
    let reports = w.ingest_json(&[w.dms()]);
    let c = the_load(&reports);
    assert_eq!(c["read_twice"], false, "went through once: {c}");
    let aside = c["rows_set_aside"].as_u64().unwrap_or(0);
    assert!(
        (900..=1_100).contains(&aside),
        "about the 1,000 moved rows and the 4 repeated ones set aside: {c}"
    );
    assert_eq!(c["duplicate_keys"], 2, "{c}");
    assert_eq!(c["inserted"], expected.len(), "{c}");
    w.assert_table_rows("s.t", &expected, "nearly-sorted");
}

/// A key both in the part that goes straight through and among the rows set aside: the input
/// starts over through the sorter (read twice), and the last row of the key wins.
#[test]
fn a_key_on_both_sides_of_the_disorder_sorts_the_load_whole() {
    let w = Work::new("fullload_nearly_both");
    let mut rows = nearly_sorted(20_000);
    let at = rows.len() - 2;
    rows.insert(at, (5, "again".to_string(), "1".to_string()));
    let expected = load_of(&w, &rows);
    let reports = w.ingest_json(&[w.dms()]);
    let c = the_load(&reports);
    assert_eq!(c["read_twice"], true, "{c}");
    assert_eq!(c["duplicate_keys"], 1, "{c}");
    w.assert_table_rows("s.t", &expected, "key-on-both-sides");
}

/// A bad value in a row set aside fails the file with file, line and column; nothing is
/// committed and nothing is left behind.
#[test]
fn a_bad_value_among_the_moved_rows_fails_the_load() {
    let w = Work::new("fullload_nearly_bad");
    let mut rows = nearly_sorted(20_000);
    let at = rows.len() - 10;
    rows.insert(at, (40_001, "bad".to_string(), "12x4".to_string()));
    rows.insert(at + 1, (3, "moved back".to_string(), "3".to_string()));
    let _ = load_of(&w, &rows);
    let r = w.ingest_paths(&[w.dms()]);
    assert!(!r.status.success(), "{}", r.describe());
    let out = r.output();
    assert!(out.contains("LOAD00000001.csv"), "{}", r.describe());
    // Line: the header, then the row's place in the file (1-based).
    assert!(
        mentions_number(&out, at as u64 + 2),
        "the line is named: {}",
        r.describe()
    );
    assert!(out.contains("`n`"), "the column is named: {}", r.describe());
    assert!(!w.scan_run("s.t", &[]).status.success(), "no table");
    let data = w.wh().join("s.db/t/data");
    let left = std::fs::read_dir(&data).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "files left in {}", data.display());
}
