//! Table reloads (issue 11): DMS reuses full-load file names when an operator reloads a table
//! (or a full-load-and-CDC task restarts, or a full-load-only task reruns), so a file's name is
//! not its identity. Each test writes DMS output as a DMS task would — files with increasing
//! modification times, the table folder emptied on a reload — feeds it to the binary in
//! various delivery orders, and compares the whole table (our scan, PyIceberg, DuckDB) with the
//! state an independent model computes by applying the source's changes in order.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::common::Work;
use serde_json::{Value, json};

/// The source table: id → (v, n).
type State = BTreeMap<i64, (String, i64)>;

/// Writes DMS files for `s.t` with modification times that advance like a DMS task's.
struct Dms<'a> {
    w: &'a Work,
    clock: SystemTime,
}

impl<'a> Dms<'a> {
    fn new(w: &'a Work) -> Self {
        std::fs::create_dir_all(w.dms().join("s/t")).unwrap();
        std::fs::write(
            w.config(),
            "[defaults]\n[tables.\"s.t\"]\nprimary_key = [\"id\"]\n",
        )
        .unwrap();
        std::fs::create_dir_all(w.dir.join("expected")).unwrap();
        std::fs::write(
            w.meta_path("s.t"),
            json!({"table": "s.t", "dms_table": "s.t", "primary_key": ["id"],
                   "columns": {"id": "long", "v": "string", "n": "long"},
                   "files": [], "pending_files": []})
            .to_string(),
        )
        .unwrap();
        Dms {
            w,
            clock: SystemTime::now() - Duration::from_secs(3_600),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.w.dms().join("s/t").join(name)
    }

    /// Writes `name` with `text`, modified one minute after the previous file.
    fn write(&mut self, name: &str, text: &str) -> PathBuf {
        self.clock += Duration::from_secs(60);
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(self.clock)
            .unwrap();
        p
    }

    /// A full-load file holding `rows` of the state (no Op column, as DMS writes by default).
    fn load(&mut self, name: &str, rows: &[(i64, &(String, i64))]) -> PathBuf {
        let mut text = String::from("id,v,n\n");
        for (id, (v, n)) in rows {
            text.push_str(&format!("{id},{v},{n}\n"));
        }
        self.write(name, &text)
    }

    /// A change file applying `ops` to `state`.
    fn changes(
        &mut self,
        name: &str,
        state: &mut State,
        ops: &[(char, i64, &str, i64)],
    ) -> PathBuf {
        let mut text = String::from("Op,id,v,n\n");
        for (op, id, v, n) in ops {
            text.push_str(&format!("{op},{id},{v},{n}\n"));
            match op {
                'D' => {
                    state.remove(id);
                }
                _ => {
                    state.insert(*id, (v.to_string(), *n));
                }
            }
        }
        self.write(name, &text)
    }

    /// DMS empties the table's folder before a reload.
    fn empty_folder(&self) {
        for e in std::fs::read_dir(self.w.dms().join("s/t")).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
    }
}

fn rows(state: &State) -> Vec<Value> {
    state
        .iter()
        .map(|(id, (v, n))| json!({"id": id, "v": v, "n": n}))
        .collect()
}

fn ingest_json(w: &Work, paths: &[PathBuf]) -> Vec<Value> {
    w.ingest_json(paths)
}

fn history_ops(w: &Work) -> Vec<String> {
    w.history("s.t")
        .iter()
        .map(|h| h["operation"].as_str().unwrap().to_string())
        .collect()
}

/// The source before the reload: 20 rows, then two change files.
fn before_reload(d: &mut Dms) -> (State, Vec<PathBuf>) {
    let mut state: State = (1..=20).map(|i| (i, (format!("a{i}"), i * 10))).collect();
    let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
    let load = d.load("LOAD00000001.csv", &all);
    let c1 = d.changes(
        "20220302-1100000000.csv",
        &mut state,
        &[
            ('U', 2, "b2", 21),
            ('D', 3, "a3", 30),
            ('I', 21, "new", 210),
        ],
    );
    let c2 = d.changes(
        "20220302-1110000000.csv",
        &mut state,
        &[('U', 4, "b4", 41), ('U', 2, "c2", 22)],
    );
    (state, vec![load, c1, c2])
}

/// Changes at the source while no CDC reached S3 (the reload window), then the new load.
fn source_during_reload(state: &mut State) {
    state.remove(&5);
    state.remove(&21);
    state.insert(6, ("changed".into(), 66));
    state.insert(30, ("during".into(), 300));
}

#[test]
fn a_reload_replaces_the_table_and_changes_apply_on_top() {
    let w = Work::new("reload_single");
    let mut d = Dms::new(&w);
    let (mut state, _) = before_reload(&mut d);
    w.ingest().assert_success();
    w.assert_table_rows("s.t", &rows(&state), "before");
    let before = w.history("s.t");

    // The operator reloads the table: DMS empties the folder and writes a new full load.
    d.empty_folder();
    source_during_reload(&mut state);
    let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
    d.load("LOAD00000001.csv", &all);
    let reports = ingest_json(&w, &[w.dms()]);
    assert!(
        reports
            .iter()
            .any(|r| r["reload"] == true && r["status"] == "applied"),
        "the new full load must be applied as a reload: {reports:?}"
    );
    w.assert_table_rows("s.t", &rows(&state), "after_reload");

    // CDC goes on.
    d.changes(
        "20220302-1200000000.csv",
        &mut state,
        &[('U', 30, "x", 301), ('D', 1, "a1", 10)],
    );
    w.ingest().assert_success();
    w.assert_table_rows("s.t", &rows(&state), "after");
    assert_eq!(
        history_ops(&w),
        ["append", "overwrite", "overwrite", "overwrite", "overwrite"],
        "load, 2 changes, the reload (an overwrite of everything), a change"
    );
    // Time travel to before the reload still works.
    let last_before = before.last().unwrap()["snapshot_id"].as_i64().unwrap();
    let old = w.scan("s.t", &["--snapshot", &last_before.to_string()]);
    assert_eq!(old.len(), 20, "the table before the reload: {old:?}");
    // Running it all again changes nothing.
    let again = ingest_json(&w, &[w.dms()]);
    assert!(again.iter().all(|r| r["status"] != "applied"), "{again:?}");
}

#[test]
fn a_late_change_file_from_before_the_reload_is_superseded() {
    let w = Work::new("reload_late_change");
    let mut d = Dms::new(&w);
    let (mut state, files) = before_reload(&mut d);
    // The second change file is delivered late: only the load and the first one are applied.
    w.ingest_paths(&files[..2]).assert_success();
    let late = std::fs::read(&files[2]).unwrap();
    let late_mtime = std::fs::metadata(&files[2]).unwrap().modified().unwrap();
    d.empty_folder();
    source_during_reload(&mut state);
    let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
    d.load("LOAD00000001.csv", &all);
    d.changes(
        "20220302-1200000000.csv",
        &mut state,
        &[('U', 7, "after", 77)],
    );
    w.ingest().assert_success();
    w.assert_table_rows("s.t", &rows(&state), "after_reload");
    // Now the pre-reload file arrives (S3 event delayed, object kept elsewhere): its changes
    // (2 -> c2, 4 -> b4) are older than the reload and must not come back.
    let p = w.dir.join("late/s/t/20220302-1110000000.csv");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, late).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(late_mtime)
        .unwrap();
    let reports = ingest_json(&w, &[p]);
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0]["status"], "superseded", "{reports:?}");
    w.assert_table_rows("s.t", &rows(&state), "after_late");
}

#[test]
fn a_multi_file_reload_delivered_in_any_order_equals_the_in_order_one() {
    let w = Work::new("reload_multi");
    let mut d = Dms::new(&w);
    let (mut state, _) = before_reload(&mut d);
    w.ingest().assert_success();
    d.empty_folder();
    source_during_reload(&mut state);
    let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
    let (a, b) = all.split_at(all.len() / 2);
    let l1 = d.load("LOAD00000001.csv", a);
    let l2 = d.load("LOAD00000002.csv", b);
    let c = d.changes(
        "20220302-1200000000.csv",
        &mut state,
        &[('U', 30, "y", 302)],
    );
    // One file per run, the second load file first (S3 events are unordered). Before the new
    // load's first file it cannot apply (the files it would merge with are gone): it fails,
    // changes nothing, and applies when delivered again (a retry) after the first one.
    let before = w.scan("s.t", &[]);
    let r = w.ingest_paths(std::slice::from_ref(&l2));
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert!(r.output().contains("LOAD00000001"), "{}", r.describe());
    assert_eq!(w.scan("s.t", &[]), before, "a failed file changes nothing");
    for f in [&l1, &l2, &c] {
        w.ingest_paths(std::slice::from_ref(f)).assert_success();
    }
    w.assert_table_rows("s.t", &rows(&state), "shuffled");
    // The same delivered as a folder (what the Lambda and a folder ingest see): in one go.
    let w2 = Work::new("reload_multi_folder");
    let mut d2 = Dms::new(&w2);
    let (mut state2, _) = before_reload(&mut d2);
    w2.ingest().assert_success();
    d2.empty_folder();
    source_during_reload(&mut state2);
    let all2: Vec<(i64, &(String, i64))> = state2.iter().map(|(k, v)| (*k, v)).collect();
    let (a2, b2) = all2.split_at(all2.len() / 2);
    d2.load("LOAD00000001.csv", a2);
    d2.load("LOAD00000002.csv", b2);
    d2.changes(
        "20220302-1200000000.csv",
        &mut state2,
        &[('U', 30, "y", 302)],
    );
    w2.ingest().assert_success();
    w2.assert_table_rows("s.t", &rows(&state2), "folder");
    // Delivered again, all of it: nothing changes.
    let again = ingest_json(&w, &[l1, l2, c]);
    assert!(again.iter().all(|r| r["status"] != "applied"), "{again:?}");
    w.assert_table_rows("s.t", &rows(&state), "redelivered");
}

#[test]
fn a_segmented_parallel_load_reloads_as_one() {
    // Parallel load without segment names: SEGMENTn_LOAD… files, several per segment.
    let w = Work::new("reload_segments");
    let mut d = Dms::new(&w);
    let mut state: State = (1..=12).map(|i| (i, (format!("s{i}"), i))).collect();
    let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
    d.load("SEGMENT1_LOAD00000001.csv", &all[..6]);
    d.load("SEGMENT2_LOAD00000001.csv", &all[6..]);
    d.changes("20220302-1100000000.csv", &mut state, &[('D', 1, "", 0)]);
    w.ingest().assert_success();
    w.assert_table_rows("s.t", &rows(&state), "first");
    d.empty_folder();
    state = (5..=15).map(|i| (i, (format!("r{i}"), i))).collect();
    let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
    let s2 = d.load("SEGMENT2_LOAD00000001.csv", &all[5..]);
    let s1 = d.load("SEGMENT1_LOAD00000001.csv", &all[..5]);
    w.ingest_paths(&[s2]).assert_success();
    w.ingest_paths(&[s1]).assert_success();
    w.assert_table_rows("s.t", &rows(&state), "reloaded");
}

#[test]
fn a_full_load_only_task_that_reruns_daily_replaces_the_table_each_day() {
    let w = Work::new("reload_daily");
    let mut d = Dms::new(&w);
    let mut last_day2 = None;
    let mut state = State::new();
    for day in 1..=3i64 {
        d.empty_folder();
        state = (day..day + 10)
            .map(|i| (i, (format!("d{day}"), i * day)))
            .collect();
        let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
        d.load("LOAD00000001.csv", &all[..5]);
        let l2 = d.load("LOAD00000002.csv", &all[5..]);
        if day == 2 {
            let keep = w.dir.join("day2/s/t/LOAD00000002.csv");
            std::fs::create_dir_all(keep.parent().unwrap()).unwrap();
            std::fs::copy(&l2, &keep).unwrap();
            let m = std::fs::metadata(&l2).unwrap().modified().unwrap();
            std::fs::File::options()
                .write(true)
                .open(&keep)
                .unwrap()
                .set_modified(m)
                .unwrap();
            last_day2 = Some(keep);
        }
        w.ingest().assert_success();
        w.assert_table_rows("s.t", &rows(&state), &format!("day{day}"));
    }
    // Day 2's second file, delivered again after day 3: an old load's file, not applied.
    let reports = ingest_json(&w, &[last_day2.unwrap()]);
    assert_eq!(reports[0]["status"], "superseded", "{reports:?}");
    w.assert_table_rows("s.t", &rows(&state), "after_redelivery");
}

#[test]
fn a_table_with_data_but_no_record_is_refused_until_declared() {
    let w = Work::new("no_record");
    let mut d = Dms::new(&w);
    // The other engine here is PyIceberg, which writes format version 2 only.
    w.set_default("format_version = 2");
    let (state, files) = before_reload(&mut d);
    w.ingest().assert_success();
    // Another engine rewrote the table's properties (or it came from a tool without a record).
    let py = format!(
        "from pyiceberg.catalog.sql import SqlCatalog\n\
         c = SqlCatalog('default', uri='sqlite:///{wh}/catalog.db', warehouse='file://{wh}')\n\
         t = c.load_table('s.t')\n\
         with t.transaction() as tx:\n    tx.remove_properties('dms2iceberg.applied')\n",
        wh = w.wh().display()
    );
    common::run(&common::python(), ["-c", &py]).assert_success();
    // Without the record (and our snapshot summaries gone too after expiry) the history
    // would be re-applied; here the summaries still say what is applied, so the record is
    // rebuilt from them.
    let r = ingest_json(&w, &[w.dms()]);
    assert!(r.iter().all(|c| c["status"] != "applied"), "{r:?}");
    w.assert_table_rows("s.t", &rows(&state), "rebuilt_from_summaries");

    // Another engine changes a row and expires every snapshot but its own, and the record is
    // gone too: nothing says any more which DMS files the table holds.
    let py = format!(
        "import pyarrow as pa\n\
         from pyiceberg.catalog.sql import SqlCatalog\n\
         from pyiceberg.expressions import EqualTo\n\
         c = SqlCatalog('default', uri='sqlite:///{wh}/catalog.db', warehouse='file://{wh}')\n\
         t = c.load_table('s.t')\n\
         t.delete(EqualTo('id', 10))\n\
         t = c.load_table('s.t')\n\
         t.append(pa.table({{'id': pa.array([10], pa.int64()), 'v': ['other'], 'n': pa.array([1], pa.int64())}}, schema=t.schema().as_arrow()))\n\
         t = c.load_table('s.t')\n\
         if 'dms2iceberg.applied' in t.properties:\n    t.transaction().remove_properties('dms2iceberg.applied').commit_transaction()\n\
         t = c.load_table('s.t')\n\
         cur = t.metadata.current_snapshot_id\n\
         old = [s.snapshot_id for s in t.metadata.snapshots if s.snapshot_id != cur]\n\
         t.maintenance.expire_snapshots().by_ids(old).commit()\n",
        wh = w.wh().display()
    );
    common::run(&common::python(), ["-c", &py]).assert_success();
    let mut state = state;
    state.insert(10, ("other".into(), 1));
    let r = w.ingest();
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert!(
        r.output().contains("mark-applied"),
        "the refusal names the way out:\n{}",
        r.describe()
    );
    w.assert_table_rows("s.t", &rows(&state), "refused");
    // The operator declares what the table holds; the next file applies, nothing else.
    let wh = w.wh().display().to_string();
    let last = files[2].file_name().unwrap().to_string_lossy().to_string();
    let r = w
        .cli(&[
            "mark-applied",
            "s.t",
            "--warehouse",
            &wh,
            "--through",
            &last,
        ])
        .assert_success();
    // The answer names the file as the user wrote it, not the internal order key.
    assert_eq!(
        r.stdout.trim(),
        format!("s.t: {last} and every DMS file before it now count as applied"),
        "{}",
        r.describe()
    );
    d.changes(
        "20220302-1200000000.csv",
        &mut state,
        &[('U', 9, "next", 99)],
    );
    let r = ingest_json(&w, &[w.dms()]);
    let applied: Vec<&Value> = r.iter().filter(|c| c["status"] == "applied").collect();
    assert_eq!(applied.len(), 1, "{r:?}");
    w.assert_table_rows("s.t", &rows(&state), "declared");
}

#[test]
fn a_table_filled_elsewhere_before_any_dms_file_is_declared_with_none() {
    let w = Work::new("declared_none");
    let mut d = Dms::new(&w);
    std::fs::create_dir_all(w.wh()).unwrap();
    // Another engine created and filled the table (an archive, a copy of the source) before
    // DMS wrote anything for it.
    let py = format!(
        "import pyarrow as pa\n\
         from pyiceberg.catalog.sql import SqlCatalog\n\
         from pyiceberg.schema import Schema\n\
         from pyiceberg.types import NestedField, LongType, StringType\n\
         c = SqlCatalog('default', uri='sqlite:///{wh}/catalog.db', warehouse='file://{wh}')\n\
         c.create_namespace('s')\n\
         schema = Schema(NestedField(1, 'id', LongType(), required=True), NestedField(2, 'v', StringType()), NestedField(3, 'n', LongType()), identifier_field_ids=[1])\n\
         t = c.create_table('s.t', schema)\n\
         t.append(pa.table({{'id': pa.array([1, 2, 3, 4, 5, 50], pa.int64()), 'v': ['f1', 'f2', 'f3', 'f4', 'f5', 'archive'], 'n': pa.array([1, 2, 3, 4, 5, 500], pa.int64())}}, schema=t.schema().as_arrow()))\n",
        wh = w.wh().display()
    );
    common::run(&common::python(), ["-c", &py]).assert_success();
    let mut state: State = [
        (1, "f1", 1),
        (2, "f2", 2),
        (3, "f3", 3),
        (4, "f4", 4),
        (5, "f5", 5),
    ]
    .into_iter()
    .chain([(50, "archive", 500)])
    .map(|(k, v, n)| (k, (v.to_string(), n)))
    .collect();
    let foreign = state.clone();
    // Then the DMS task: a full load of what the source holds now, and changes.
    let loaded: State = (1..=5).map(|i| (i, (format!("src{i}"), i * 10))).collect();
    let all: Vec<(i64, &(String, i64))> = loaded.iter().map(|(k, v)| (*k, v)).collect();
    d.load("LOAD00000001.csv", &all);
    state.extend(loaded.clone());
    d.changes(
        "20220302-1100000000.csv",
        &mut state,
        &[('U', 4, "c4", 44), ('D', 5, "f5", 5), ('I', 60, "new", 600)],
    );
    // Refused, and the refusal says what to pass when the table holds no DMS file.
    let r = w.ingest();
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert!(r.output().contains("--none"), "{}", r.describe());
    w.assert_table_rows("s.t", &rows(&foreign), "refused");
    let wh = w.wh().display().to_string();
    let r = w
        .cli(&["mark-applied", "s.t", "--warehouse", &wh, "--none"])
        .assert_success();
    assert!(r.stdout.contains("holds no DMS file"), "{}", r.describe());
    // Every DMS file applies on top of the table's rows, by key: the load's rows replace those
    // with their keys, the foreign rows it lacks stay.
    let r = ingest_json(&w, &[w.dms()]);
    let applied = r.iter().filter(|c| c["status"] == "applied").count();
    assert_eq!(applied, 2, "{r:?}");
    w.assert_table_rows("s.t", &rows(&state), "declared_none");
    // A second declaration would throw the record away: refused without --force.
    let r = w.cli(&["mark-applied", "s.t", "--warehouse", &wh, "--none"]);
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert!(r.output().contains("--force"), "{}", r.describe());
    // `--through` and `--none` together make no sense.
    let r = w.cli(&[
        "mark-applied",
        "s.t",
        "--warehouse",
        &wh,
        "--none",
        "--through",
        "20220302-1100000000.csv",
    ]);
    assert_eq!(r.status.code(), Some(2), "{}", r.describe());
}

#[test]
fn the_record_survives_snapshot_expiry_by_another_engine() {
    let w = Work::new("record_survives");
    let mut d = Dms::new(&w);
    // The other engine here is PyIceberg, which writes format version 2 only.
    w.set_default("format_version = 2");
    let (mut state, _) = before_reload(&mut d);
    w.ingest().assert_success();
    // A foreign writer changes a row, then expires all history (Glue retention after Spark).
    let py = format!(
        "import pyarrow as pa\n\
         from pyiceberg.catalog.sql import SqlCatalog\n\
         from pyiceberg.expressions import EqualTo\n\
         c = SqlCatalog('default', uri='sqlite:///{wh}/catalog.db', warehouse='file://{wh}')\n\
         t = c.load_table('s.t')\n\
         t.delete(EqualTo('id', 10))\n\
         t = c.load_table('s.t')\n\
         t.append(pa.table({{'id': pa.array([10], pa.int64()), 'v': ['spark'], 'n': pa.array([1000], pa.int64())}}, schema=t.schema().as_arrow()))\n\
         t = c.load_table('s.t')\n\
         cur = t.metadata.current_snapshot_id\n\
         old = [s.snapshot_id for s in t.metadata.snapshots if s.snapshot_id != cur]\n\
         t.maintenance.expire_snapshots().by_ids(old).commit()\n",
        wh = w.wh().display()
    );
    common::run(&common::python(), ["-c", &py]).assert_success();
    state.insert(10, ("spark".into(), 1000));
    // None of our snapshots is left, and `tables` still shows what the table holds.
    let tables = w.cli(&[
        "tables",
        "--warehouse",
        &w.wh().display().to_string(),
        "--format",
        "json",
    ]);
    let line: Value =
        serde_json::from_str(tables.assert_success().stdout.trim()).expect("tables JSON");
    assert_eq!(line["applied"]["in_property"], true, "{line}");
    let last = line["applied"]["last_file"].as_str().unwrap_or_default();
    assert!(last.ends_with(".csv") && !last.contains("LOAD"), "{line}");
    // Our next run applies only the new file: the foreign change stays.
    d.changes(
        "20220302-1200000000.csv",
        &mut state,
        &[('U', 11, "next", 111)],
    );
    let r = ingest_json(&w, &[w.dms()]);
    let applied: Vec<&Value> = r.iter().filter(|c| c["status"] == "applied").collect();
    assert_eq!(applied.len(), 1, "only the new file: {r:?}");
    w.assert_table_rows("s.t", &rows(&state), "after_foreign");
}

#[test]
fn files_older_than_the_record_are_quiet_when_old_and_loud_when_new() {
    let w = Work::new("beyond_record");
    let mut d = Dms::new(&w);
    std::fs::write(
        w.config(),
        "[defaults]\n[tables.\"s.t\"]\nprimary_key = [\"id\"]\napplied_record_files = 2\n",
    )
    .unwrap();
    let mut state: State = (1..=5).map(|i| (i, (format!("a{i}"), i))).collect();
    let all: Vec<(i64, &(String, i64))> = state.iter().map(|(k, v)| (*k, v)).collect();
    d.load("LOAD00000001.csv", &all);
    let mut change_files = Vec::new();
    for (i, name) in ["1100", "1110", "1120", "1130"].iter().enumerate() {
        let id = i as i64 + 1;
        change_files.push(d.changes(
            &format!("20220302-{name}000000.csv"),
            &mut state,
            &[('U', id, "c", id * 100)],
        ));
    }
    w.ingest().assert_success();
    w.assert_table_rows("s.t", &rows(&state), "applied");
    // `expire` keeps nothing of the history but the record: a re-run is still a no-op, and
    // files that fell out of the two-file window are taken as applied, quietly.
    let wh = w.wh().display().to_string();
    w.cli(&[
        "expire",
        "s.t",
        "--warehouse",
        &wh,
        "--older-than-hours",
        "0",
        "--retain-last",
        "1",
    ])
    .assert_success();
    let r = w.ingest().assert_success();
    assert!(
        r.stdout
            .contains("older than the table's applied-file record"),
        "{}",
        r.describe()
    );
    w.assert_table_rows("s.t", &rows(&state), "rerun");
    // A change file that was never applied, older than the window, arrives now: it cannot be
    // merged in order, so the run fails loudly and the table is unchanged.
    let late = d.path("20220302-1105000000.csv");
    std::fs::write(&late, "Op,id,v,n\nU,5,late,5\n").unwrap();
    let r = w.ingest_paths(std::slice::from_ref(&late));
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert!(
        r.output()
            .contains("older than the files the table's applied-file record lists"),
        "{}",
        r.describe()
    );
    w.assert_table_rows("s.t", &rows(&state), "unchanged");
    // Late but inside the window: re-merged in order.
    let inside = d.path("20220302-1125000000.csv");
    std::fs::write(&inside, "Op,id,v,n\nU,3,inside,3\nU,4,inside,4\n").unwrap();
    state.insert(3, ("inside".into(), 3));
    // 4 was changed again by the 11:30 file, which comes after: it keeps that change.
    w.ingest_paths(&[inside]).assert_success();
    w.assert_table_rows("s.t", &rows(&state), "re_merged");
}

/// `dms2iceberg truncate`: the table is emptied by one snapshot (time travel before it stays),
/// everything delivered before counts as superseded (copies delivered again included), and
/// later change files apply on the empty table.
#[test]
fn an_operator_truncate_empties_the_table_and_later_files_apply() {
    let w = Work::new("truncate_cli");
    w.generate("product", &[]);
    w.ingest().assert_success();
    let table = "sales.product";
    let wh = w.wh().display().to_string();
    let r = w
        .cli(&["truncate", table, "--warehouse", &wh, "--format", "json"])
        .assert_success();
    let report: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(report["truncated"], true, "{report}");
    w.assert_table_rows(table, &[], "truncated");
    let history = w.cli(&["history", table, "--warehouse", &wh, "--format", "json"]);
    let history = common::parse_json_lines(&history.assert_success().stdout, "history");
    assert_eq!(history.last().unwrap()["truncate"], true);
    let before = history[history.len() - 2]["snapshot_id"].to_string();
    let old = w.scan(table, &["--snapshot", &before]);
    common::assert_rows(
        "before the truncate",
        &w.meta(table),
        &w.expected(table),
        &old,
    );

    // The same files delivered again (copies, newer modification times): superseded.
    for e in std::fs::read_dir(w.dms().join("sales/product")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read(&p).unwrap();
        std::fs::write(&p, text).unwrap();
    }
    let reports = w.ingest_json(&[w.dms()]);
    assert!(
        reports.iter().all(|r| r["status"] != "applied"),
        "{reports:?}"
    );
    w.assert_table_rows(table, &[], "truncated");

    w.write_file(
        "dms/sales/product/20991231-0000000000.csv",
        "Op,product_id,category,product_name,quantity_available,last_update_time\n\
         I,900,Tablet,after,5,2022-03-03 10:00:00\nI,901,Tablet,after two,6,2022-03-03 10:00:00\n\
         D,901,Tablet,after two,6,2022-03-03 10:00:00\n",
    );
    w.ingest().assert_success();
    let expected = vec![serde_json::json!({"product_id": 900, "category": "Tablet",
        "product_name": "after", "quantity_available": 5,
        "last_update_time": "2022-03-03 10:00:00.000000"})];
    w.assert_table_rows(table, &expected, "after");
}
