//! Compaction and maintenance through the CLI (`compact`, `expire`, `orphans`): the table reads
//! the same through our `scan`, PyIceberg and DuckDB with fewer files, retained snapshots still
//! time-travel, ingest running at the same time loses nothing, a crash mid-compaction leaves the
//! table exact, and only unreferenced files old enough are ever deleted.
//!
//! Run through `scripts/test`; `-- --nocapture` prints the figures (`compact-measure:`).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::stress_support::*;
use serde_json::Value;

const TABLE: &str = "shop.orders";

/// `compact|expire|orphans TABLE --warehouse W --json [extra…]` with `env`; its JSON report.
fn maintain(w: &Work, cmd: &str, extra: &[&str], env: &[(&str, &str)]) -> (Run, Option<Value>) {
    maintain_env(w, TABLE, cmd, extra, env)
}

/// `compact|expire|orphans` on any table.
fn maintain_env(
    w: &Work,
    table: &str,
    cmd: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Run, Option<Value>) {
    let mut a: Vec<OsString> = vec![cmd.into(), table.into(), "--warehouse".into()];
    a.push(w.wh().into_os_string());
    a.push("--json".into());
    a.extend(extra.iter().map(OsString::from));
    let r = run_env(&bin(), &a, env);
    let report = r
        .stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok());
    (r, report)
}

fn compact(w: &Work, extra: &[&str]) -> Value {
    let (r, rep) = maintain(w, "compact", extra, &[]);
    let r = r.assert_success();
    rep.unwrap_or_else(|| panic!("compact printed no report:\n{}", r.describe()))
}

fn num(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("report has no number `{k}`: {v}"))
}

/// Every DMS file of the tree recorded by exactly one ingest snapshot, compactions recording
/// none, and one unbroken parent chain.
fn check_files_once(w: &Work, meta: &Meta) -> Vec<Value> {
    let hist = w.history(TABLE);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, s) in hist.iter().enumerate() {
        if i > 0 {
            assert_eq!(
                s["parent_id"],
                hist[i - 1]["snapshot_id"],
                "snapshot #{i} does not follow the previous one: {hist:?}"
            );
        }
        let files = s["source_files"].as_array().unwrap();
        if s["operation"] == "replace" {
            assert!(files.is_empty(), "a compaction recorded DMS files: {s}");
        }
        for f in files {
            *seen.entry(dms_name(f.as_str().unwrap())).or_default() += 1;
        }
    }
    let expected: BTreeSet<String> = meta.files.iter().map(|f| dms_name(f)).collect();
    let got: BTreeSet<String> = seen.keys().cloned().collect();
    assert_eq!(got, expected, "files recorded vs files of the tree");
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "files recorded more than once: {twice:?}");
    hist
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median wall seconds of `scan TABLE --format json` (whole table).
fn scan_secs(w: &Work, n: usize) -> f64 {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                w.scan_run(TABLE, &[]).assert_success();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

#[test]
fn compaction_reads_the_same_with_fewer_files() {
    // Partitioned by status with rows moving between partitions, many small change files,
    // one snapshot each: many small data files and one delete file per change file.
    let w = Work::new("compact_reads");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "4000",
            "--cdc-files",
            "12",
            "--cdc-rows",
            "600",
            "--partition-move",
            "--asof",
            "--seed",
            "71",
        ],
    );
    let meta = w.meta(TABLE);
    let steps = w.asof(TABLE);
    w.ingest().assert_success();
    w.assert_table(TABLE);
    let before_hist = w.history(TABLE);
    let scan_before = scan_secs(&w, 3);
    let readers_before = w.reader_times(TABLE, 3);

    let started = Instant::now();
    let rep = compact(&w, &[]);
    let compact_s = started.elapsed().as_secs_f64();
    let (df0, df1) = (
        num(&rep, "data_files_before"),
        num(&rep, "data_files_after"),
    );
    let (dl0, dl1) = (
        num(&rep, "delete_files_before"),
        num(&rep, "delete_files_after"),
    );
    assert!(dl0 >= 12, "expected a delete file per change file: {rep}");
    assert!(df1 < df0, "no fewer data files: {rep}");
    assert_eq!(
        dl1, 0,
        "delete files left after compacting everything: {rep}"
    );
    assert!(
        num(&rep, "bytes_rewritten") > 0 && num(&rep, "commits") > 0,
        "{rep}"
    );
    assert_eq!(num(&rep, "groups_left"), 0, "{rep}");

    // Same rows through all three readers, every file still recorded once.
    w.assert_table(TABLE);
    let hist = check_files_once(&w, &meta);
    assert!(
        hist.len() > before_hist.len()
            && hist[before_hist.len()..]
                .iter()
                .all(|s| s["operation"] == "replace"),
        "compaction did not commit replace snapshots: {hist:?}"
    );
    // Time travel to the snapshots before compaction still shows each file's state.
    for snap in &before_hist {
        let (_, step) = step_of_snapshot(snap, &steps);
        let id = snap["snapshot_id"].as_i64().unwrap().to_string();
        let got = w.scan(TABLE, &["--snapshot", &id]);
        assert_rows(
            &format!("--snapshot {id} after compaction"),
            &meta,
            &step.rows,
            &got,
        );
    }
    let last = before_hist.last().unwrap()["snapshot_id"].as_i64().unwrap();
    let p = w.write_jsonl("before_compaction.jsonl", &steps.last().unwrap().rows);
    w.check_readers(TABLE, &p, Some(last));

    let scan_after = scan_secs(&w, 3);
    let readers_after = w.reader_times(TABLE, 3);
    // Compacting again finds nothing to do.
    let again = compact(&w, &[]);
    assert_eq!(
        num(&again, "commits"),
        0,
        "a second compaction rewrote: {again}"
    );
    w.assert_table(TABLE);

    let mb = num(&rep, "bytes_rewritten") as f64 / 1e6;
    let readers: Vec<String> = readers_before
        .iter()
        .zip(&readers_after)
        .map(|((n, b), (_, a))| format!("{n} {b:.3} -> {a:.3} s ({:.2}x)", a / b))
        .collect();
    eprintln!(
        "compact-measure: {} rows; data files {df0} -> {df1}, delete files {dl0} -> {dl1}; rewrote \
         {} files, {mb:.2} MB, {} records, {} commits in {compact_s:.2} s ({:.1} s/GB); whole-table \
         read: our scan {scan_before:.3} -> {scan_after:.3} s ({:.2}x), {}",
        w.expected(TABLE).len(),
        num(&rep, "data_files_rewritten"),
        num(&rep, "records_written"),
        num(&rep, "commits"),
        compact_s / (mb / 1000.0),
        scan_after / scan_before,
        readers.join(", ")
    );
}

#[test]
fn expire_then_orphans_delete_only_what_nothing_needs() {
    let w = Work::new("compact_expire");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "500",
            "--cdc-files",
            "6",
            "--cdc-rows",
            "80",
            "--asof",
            "--seed",
            "72",
        ],
    );
    let meta = w.meta(TABLE);
    w.ingest().assert_success();
    compact(&w, &[]);
    let hist = check_files_once(&w, &meta);
    let n = hist.len();

    // Dry run: lists, deletes nothing.
    let (r, dry) = maintain(
        &w,
        "expire",
        &["--older-than-hours", "0", "--retain-last", "2", "--dry-run"],
        &[],
    );
    let dry = dry.unwrap_or_else(|| panic!("no report:\n{}", r.describe()));
    let listed = dry["files_deleted"].as_array().unwrap().len();
    assert_eq!(
        dry["snapshots_expired"].as_array().unwrap().len(),
        n - 2,
        "{dry}"
    );
    assert!(listed > 0, "nothing to delete listed: {dry}");
    assert_eq!(w.history(TABLE).len(), n, "a dry run expired snapshots");
    let i0 = inspect(&w, TABLE);
    assert!(i0.missing.is_empty(), "{:?}", i0.missing);

    // For real: the two newest snapshots stay, the files only the others referenced go.
    let (r, rep) = maintain(
        &w,
        "expire",
        &["--older-than-hours", "0", "--retain-last", "2"],
        &[],
    );
    let rep = rep.unwrap_or_else(|| panic!("no report:\n{}", r.describe()));
    assert_eq!(num(&rep, "snapshots_kept"), 2, "{rep}");
    let deleted: Vec<String> = rep["files_deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(deleted.len(), listed, "dry run and real run disagree");
    for f in &deleted {
        let p = f.strip_prefix("file://").unwrap_or(f);
        assert!(
            !std::path::Path::new(p).exists(),
            "{f} was listed as deleted but exists"
        );
    }
    let kept = w.history(TABLE);
    assert_eq!(kept.len(), 2);
    w.assert_table(TABLE);
    // The kept snapshots still read; an expired one is gone.
    let first_kept = kept[0]["snapshot_id"].as_i64().unwrap().to_string();
    w.scan(TABLE, &["--snapshot", &first_kept]);
    let gone = hist[0]["snapshot_id"].as_i64().unwrap().to_string();
    assert!(!w.scan_run(TABLE, &["--snapshot", &gone]).status.success());
    // Every file the kept snapshots need is there: the independent readers read both.
    // (Metadata files from before the expiry still name the expired snapshots' manifest
    // lists, which are gone: as in Iceberg's own expiry, only live metadata stays readable.)
    for s in &kept {
        let id = s["snapshot_id"].as_i64().unwrap();
        let rows = w.scan(TABLE, &["--snapshot", &id.to_string()]);
        let p = w.write_jsonl(&format!("kept-{id}.jsonl"), &rows);
        w.check_readers(TABLE, &p, Some(id));
    }
    // Still exactly once: re-ingesting the tree applies nothing (the expired snapshots'
    // files count as applied through the watermark).
    let again = w.ingest_json(&[w.dms()]);
    assert!(
        again.iter().all(|c| c["status"] == "skipped"),
        "files re-applied after expiry: {again:?}"
    );
    w.assert_table(TABLE);

    // Orphans: a fresh stray file is too young to touch; aged past the limit it goes, and
    // nothing referenced does.
    let data_dir = w.wh().join("shop.db").join("orders").join("data");
    let stray = data_dir.join("stray-00000.parquet");
    std::fs::write(&stray, b"not referenced").unwrap();
    let (r, young) = maintain(&w, "orphans", &["--min-age-hours", "1", "--delete"], &[]);
    let young = young.unwrap_or_else(|| panic!("no report:\n{}", r.describe()));
    assert!(stray.exists(), "a young orphan was deleted: {young}");
    assert!(num(&young, "too_young") >= 1, "{young}");
    let (r, old) = maintain(&w, "orphans", &["--min-age-hours", "0", "--delete"], &[]);
    let old = old.unwrap_or_else(|| panic!("no report:\n{}", r.describe()));
    assert!(!stray.exists(), "the orphan was not deleted: {old}");
    // Nothing a kept snapshot needs went with it.
    let i2 = inspect(&w, TABLE);
    assert!(i2.orphans.is_empty(), "orphans left: {:?}", i2.orphans);
    for s in &kept {
        let id = s["snapshot_id"].as_i64().unwrap();
        w.check_readers(TABLE, &w.dir.join(format!("kept-{id}.jsonl")), Some(id));
    }
    w.assert_table(TABLE);
    eprintln!(
        "compact-measure: expire: {} of {n} snapshots expired, {} files deleted; orphans: {} deleted",
        n - 2,
        deleted.len(),
        num(&old, "deleted")
    );
}

/// What each compaction run of the continuous-ingest test does: nothing special, hold its plan
/// open so ingest commits land before it commits, or crash at a step of its commit.
const COMPACTION_RUNS: [Option<&str>; 9] = [
    None,
    Some("after-rewrite:sleep=400"),
    Some("after-rewrite:kill"),
    Some("after-rewrite:sleep=400"),
    Some("after-manifest-list:kill"),
    Some("after-rewrite:sleep=400"),
    Some("after-metadata:kill"),
    Some("after-metadata"),
    Some("after-swap"),
];

#[test]
fn compaction_never_loses_to_continuous_ingest() {
    // Change files arrive in a feed one every 120 ms; three writers ingest the feed in loops
    // (as several Lambdas would); compaction runs over and over meanwhile, some runs holding
    // their plan open so ingest deletes rows of the files they replace before they commit,
    // some crashing at a step of their commit. Every run that does not crash commits without
    // planning again (ingest's deletes are carried over), and the table ends exact.
    let w = Work::new("compact_concurrent");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "3000",
            "--cdc-files",
            "24",
            "--cdc-rows",
            "120",
            "--update-ratio",
            "0.7",
            "--seed",
            "73",
        ],
    );
    let meta = w.meta(TABLE);
    let feed = w.dir.join("feed");
    make_feed(&w, &feed, &meta.files[..1]);
    w.ingest_paths(std::slice::from_ref(&feed)).assert_success();
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let fed = Arc::new(AtomicBool::new(false));
    let runs_done = Arc::new(AtomicUsize::new(0));
    let feeder = {
        let (fed, runs_done, files, dms, feed) = (
            fed.clone(),
            runs_done.clone(),
            meta.files[1..].to_vec(),
            w.dms(),
            feed.clone(),
        );
        std::thread::spawn(move || {
            let m = files.len();
            let started = Instant::now();
            for (k, f) in files.into_iter().enumerate() {
                // Paced so that compaction goes through all its kinds of runs while files
                // still arrive (bounded, should compaction stall).
                while runs_done.load(SeqCst) * m < k * COMPACTION_RUNS.len()
                    && started.elapsed() < Duration::from_secs(120)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let to = feed.join(&f);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                // Complete files only: the copy is renamed into place.
                let tmp = feed.with_extension("incoming");
                std::fs::copy(dms.join(&f), &tmp).unwrap();
                std::fs::rename(&tmp, &to).unwrap();
                std::thread::sleep(Duration::from_millis(120));
            }
            fed.store(true, SeqCst);
        })
    };
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let (fed, feed, wh, cfg) = (fed.clone(), feed.clone(), w.wh(), w.config());
            std::thread::spawn(move || {
                let mut errors = Vec::new();
                loop {
                    let last = fed.load(SeqCst);
                    let a: Vec<OsString> = vec![
                        "ingest".into(),
                        feed.clone().into_os_string(),
                        "--warehouse".into(),
                        wh.clone().into_os_string(),
                        "--config".into(),
                        cfg.clone().into_os_string(),
                    ];
                    let r = run_env(&bin(), &a, &[]);
                    // Writers contend with each other: a documented give-up is retried.
                    if !r.status.success() && !is_give_up(&r.stderr) {
                        errors.push(r.describe());
                    }
                    if last && r.status.success() {
                        return errors;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    let (mut runs, mut commits, mut carried) = (0usize, 0, 0);
    // The kind of the next run: a crash that did not fire (the run found nothing to compact)
    // is tried again rather than skipped, so that every crash point is reached.
    let mut slot = 0usize;
    let mut crashes: BTreeSet<&str> = BTreeSet::new();
    while !writers.iter().all(|h| h.is_finished()) {
        let fault = COMPACTION_RUNS[slot % COMPACTION_RUNS.len()];
        runs += 1;
        slot += 1;
        let env: Vec<(&str, &str)> = fault
            .map(|f| ("DMS2ICEBERG_FAILPOINT", f))
            .into_iter()
            .collect();
        // One group per run (the first group is always taken), so runs are short and many.
        let (r, rep) = maintain(&w, "compact", &["--max-bytes", "1"], &env);
        if let Some(f) = fault.filter(|f| !f.contains(":sleep")) {
            // A crash: it fired (a run with nothing to compact never reaches it).
            let point = f.split(':').next().unwrap();
            if !r.status.success() {
                assert!(
                    r.stderr.contains(&format!("failpoint {point}")),
                    "compaction failed elsewhere than at {f}:\n{}",
                    r.describe()
                );
                crashes.insert(f);
            } else {
                slot -= 1;
            }
            runs_done.store(runs, SeqCst);
            continue;
        }
        let r = r.assert_success();
        let rep = rep.unwrap_or_else(|| panic!("no report:\n{}", r.describe()));
        assert_eq!(
            num(&rep, "replans"),
            0,
            "compaction planned again under ingest: {rep}"
        );
        commits += num(&rep, "commits");
        carried += num(&rep, "deletes_carried");
        runs_done.store(runs, SeqCst);
    }
    feeder.join().unwrap();
    for h in writers {
        let errors = h.join().unwrap();
        assert!(errors.is_empty(), "ingest failed: {errors:?}");
    }
    // The rerun after the last crash, then everything must read exact.
    w.ingest_paths(std::slice::from_ref(&feed)).assert_success();
    let rep = compact(&w, &[]);
    assert_eq!(num(&rep, "replans"), 0, "{rep}");
    w.assert_table(TABLE);
    check_files_once(&w, &meta);
    let hist = w.history(TABLE);
    check_totals(TABLE, &hist, w.expected(TABLE).len());
    let i = inspect(&w, TABLE);
    assert!(
        i.missing.is_empty(),
        "referenced files missing: {:?}",
        i.missing
    );
    let points: BTreeSet<&str> = COMPACTION_RUNS
        .iter()
        .flatten()
        .copied()
        .filter(|f| !f.contains(":sleep"))
        .collect();
    assert!(
        commits >= 2 && carried > 0 && crashes == points,
        "the test did not test: {runs} runs, {commits} commits, {carried} deletes carried, \
         crashed at {crashes:?} of {points:?}"
    );
    eprintln!(
        "compact-measure: continuous ingest: {} change files by 3 writers while {runs} \
         compactions ran: {commits} commits, 0 replans, 0 gave up, {carried} concurrent deletes \
         carried over, {} crashed at a commit step and were rerun; table exact",
        meta.files.len() - 1,
        crashes.len()
    );
}

#[test]
fn crash_mid_compaction_leaves_the_table_exact() {
    for (point, kill) in [
        ("after-manifest-list", true),
        ("after-metadata", true),
        ("after-metadata", false),
        ("after-swap", false),
    ] {
        let name = format!(
            "compact_crash_{}_{}",
            point,
            if kill { "kill" } else { "error" }
        );
        let w = Work::new(&name);
        w.generate(
            "synthetic",
            &[
                "--rows",
                "400",
                "--cdc-files",
                "5",
                "--cdc-rows",
                "60",
                "--seed",
                "74",
            ],
        );
        let meta = w.meta(TABLE);
        w.ingest().assert_success();
        let spec = if kill {
            format!("{point}:kill")
        } else {
            point.to_string()
        };
        let (r, _) = maintain(
            &w,
            "compact",
            &[],
            &[("DMS2ICEBERG_FAILPOINT", spec.as_str())],
        );
        assert!(
            !r.status.success(),
            "{name}: the failpoint did not fire:\n{}",
            r.describe()
        );
        // Readable and exact whatever happened; the next run finishes the job.
        w.assert_table(TABLE);
        let rep = compact(&w, &[]);
        w.assert_table(TABLE);
        check_files_once(&w, &meta);
        assert_eq!(num(&rep, "groups_left"), 0, "{rep}");
        let i = inspect(&w, TABLE);
        assert!(
            i.missing.is_empty(),
            "{name}: referenced files missing: {:?}",
            i.missing
        );
        // Leftovers of the crashed attempt are orphans, and `orphans` removes them.
        let (r, o) = maintain(&w, "orphans", &["--min-age-hours", "0", "--delete"], &[]);
        let o = o.unwrap_or_else(|| panic!("no report:\n{}", r.describe()));
        let i = inspect(&w, TABLE);
        assert!(
            i.orphans.is_empty() && i.missing.is_empty(),
            "{name}: {i:?}"
        );
        w.assert_table(TABLE);
        eprintln!(
            "compact-measure: crash {name}: exact after the crash and after the rerun; {} orphan(s) removed",
            num(&o, "deleted")
        );
    }
}

/// Writes `dms/shop/blobs/`: a full load without a `payload` column, then a change file that
/// adds it as Parquet BINARY (schema evolution), plus the expected table and its meta.json.
const BLOBS_PY: &str = r#"
import json, sys
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
out = Path(sys.argv[1])
d = out / "dms" / "shop" / "blobs"
d.mkdir(parents=True, exist_ok=True)
load = pa.table({"Op": ["I"] * 6, "id": pa.array(range(1, 7), pa.int64()),
                 "name": [f"n{i}" for i in range(1, 7)]})
pq.write_table(load, d / "LOAD00000001.parquet")
change = pa.table({"Op": ["U", "I", "U", "D"], "id": pa.array([2, 7, 3, 5], pa.int64()),
                   "name": ["n2b", "n7", "n3b", "n5"],
                   "payload": pa.array([b"\x00\xff", b"", None, b"\x01"], pa.binary())})
pq.write_table(change, d / "20220302-1134010000.parquet")
rows = {i: {"id": i, "name": f"n{i}", "payload": None} for i in range(1, 7)}
rows[2] = {"id": 2, "name": "n2b", "payload": "00ff"}
rows[7] = {"id": 7, "name": "n7", "payload": ""}
rows[3] = {"id": 3, "name": "n3b", "payload": None}
del rows[5]
exp = out / "expected"
exp.mkdir(exist_ok=True)
(exp / "shop.blobs.jsonl").write_text("".join(json.dumps(rows[k]) + "\n" for k in sorted(rows)))
(exp / "shop.blobs.meta.json").write_text(json.dumps({
    "table": "shop.blobs", "dms_table": "shop.blobs", "primary_key": ["id"],
    "columns": {"id": "long", "name": "string", "payload": "binary"},
    "files": ["shop/blobs/LOAD00000001.parquet", "shop/blobs/20220302-1134010000.parquet"],
    "pending_files": []}))
(out / "config.toml").write_text('[defaults]\n\n[tables."shop.blobs"]\nprimary_key = ["id"]\n')
"#;

#[test]
fn binary_column_added_by_evolution_scans_and_compacts() {
    // iceberg-rust cannot fill a LargeBinary column for files written before it existed:
    // our scan and compaction must read such files with the column NULL.
    let w = Work::new("compact_binary_evolution");
    run(
        &python(),
        [
            "-c".to_string(),
            BLOBS_PY.to_string(),
            w.dir.display().to_string(),
        ],
    )
    .assert_success();
    w.ingest().assert_success();
    w.assert_table("shop.blobs");
    let wh = w.wh().display().to_string();
    let table = w
        .cli(&["scan", "shop.blobs", "--warehouse", &wh])
        .assert_success()
        .stdout;
    assert!(
        table.contains("00ff") && table.contains("(6 rows)"),
        "{table}"
    );
    let (r, rep) = maintain_env(&w, "shop.blobs", "compact", &[], &[]);
    let rep = rep.unwrap_or_else(|| panic!("no report:\n{}", r.assert_success().describe()));
    // At least the full load, written before the column existed (full-load files are
    // compacted apart from change files).
    assert!(num(&rep, "data_files_rewritten") >= 1, "{rep}");
    w.assert_table("shop.blobs");
}

/// Sets the catalog pointer of `table` to `location` (as another writer's catalog would).
fn set_pointer(w: &Work, table: &str, location: &str) {
    let (ns, name) = table.split_once('.').unwrap();
    let db = w.wh().join("catalog.db");
    let script = "import sqlite3, sys\n\
        c = sqlite3.connect(sys.argv[1])\n\
        n = c.execute('UPDATE iceberg_tables SET metadata_location = ? WHERE table_namespace = ? AND table_name = ?', sys.argv[2:5]).rowcount\n\
        c.commit()\n\
        assert n == 1, n\n";
    run(
        &python(),
        ["-c", script, &db.display().to_string(), location, ns, name],
    )
    .assert_success();
}

fn pointer(w: &Work, table: &str) -> String {
    let (ns, name) = table.split_once('.').unwrap();
    let db = w.wh().join("catalog.db");
    let script = "import sqlite3, sys\n\
        print(sqlite3.connect(sys.argv[1]).execute('SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?', sys.argv[2:4]).fetchone()[0])\n";
    run(
        &python(),
        ["-c", script, &db.display().to_string(), ns, name],
    )
    .assert_success()
    .stdout
    .trim()
    .to_string()
}

#[test]
fn orphans_keep_what_other_writers_reference() {
    // Iceberg Java spells local locations `file:/x` where we write `file:///x`; it writes a
    // `.<name>.crc` beside each file; a concurrent commit's metadata.json is newer than the
    // current one and referenced by nothing yet. None of them is an orphan.
    let w = Work::new("orphans_foreign");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "200",
            "--cdc-files",
            "2",
            "--cdc-rows",
            "30",
            "--seed",
            "75",
        ],
    );
    w.ingest().assert_success();
    let current = pointer(&w, TABLE);
    let path = current.strip_prefix("file://").unwrap().to_string();
    set_pointer(&w, TABLE, &format!("file:{path}"));
    let md_dir = std::path::Path::new(&path).parent().unwrap().to_path_buf();
    let version: u64 = std::path::Path::new(&path)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()[..5]
        .parse()
        .unwrap();
    let newer = md_dir.join(format!(
        "{:05}-7e0c7d2a-0000-4000-8000-000000000001.metadata.json",
        version + 1
    ));
    std::fs::copy(&path, &newer).unwrap();
    let data_dir = w.wh().join("shop.db").join("orders").join("data");
    let data_file = std::fs::read_dir(&data_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.ends_with(".parquet"))
        .unwrap();
    let crc = data_dir.join(format!(".{data_file}.crc"));
    std::fs::write(&crc, b"crc").unwrap();
    let stray = data_dir.join("stray-00000.parquet");
    std::fs::write(&stray, b"not referenced").unwrap();
    let stray_crc = data_dir.join(".stray-00000.parquet.crc");
    std::fs::write(&stray_crc, b"crc").unwrap();

    let (r, rep) = maintain(&w, "orphans", &["--min-age-hours", "0", "--delete"], &[]);
    let rep = rep.unwrap_or_else(|| panic!("no report:\n{}", r.describe()));
    let r = r.assert_success();
    assert!(
        std::path::Path::new(&path).exists(),
        "the current metadata.json was deleted: {rep}\n{}",
        r.describe()
    );
    assert!(newer.exists(), "a newer metadata.json was deleted: {rep}");
    assert!(crc.exists(), "a live file's checksum was deleted: {rep}");
    assert!(
        !stray.exists() && !stray_crc.exists(),
        "orphans left: {rep}"
    );
    assert_eq!(num(&rep, "deleted"), 2, "{rep}");
    w.assert_table(TABLE);
    // With the newer file gone (its commit lost), expiry and orphans go on as usual.
    std::fs::remove_file(&newer).unwrap();
    maintain(
        &w,
        "expire",
        &["--older-than-hours", "0", "--retain-last", "1"],
        &[],
    )
    .0
    .assert_success();
    w.assert_table(TABLE);
}
