//! `verify` and `repair` through the CLI on a local warehouse (issue 48).
//!
//! The defect: a writer deleted the files of a commit whose swap had in fact taken effect, so
//! the catalog named metadata (or a manifest, a data file) that no longer existed and every
//! reader and writer failed on the table. Each test damages a table exactly so, by deleting
//! files of its newest commits from the warehouse, then checks that `verify` says what is
//! missing, that `repair` points the catalog back at the newest metadata that reads whole
//! (and a dry run changes nothing), and that the next `ingest` of the same DMS folder applies
//! the files the lost commits had applied: the table ends equal to the generator's state (each
//! DMS file applied once), through our scan, PyIceberg and DuckDB.
//!
//! Which metadata the catalog names is read from `catalog.db` directly, and which files each
//! commit wrote from the table folder (before and after it), not from `verify` or `repair`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;
use crate::stress_support::{check_history, dms_name, file_kind, inspect};

const TABLE: &str = "shop.orders";
const REPAIRED: &str = "dms2iceberg.repaired";

/// A full load and six change files of `shop.orders` (with the state after each file).
fn generate(w: &Work, seed: &str) {
    w.generate(
        "synthetic",
        &[
            "--rows",
            "300",
            "--cdc-files",
            "6",
            "--cdc-rows",
            "80",
            "--asof",
            "--seed",
            seed,
        ],
    );
}

/// The metadata location `catalog.db` names for `TABLE` (read with Python's sqlite3).
fn pointer(w: &Work) -> String {
    let (ns, name) = TABLE.rsplit_once('.').unwrap();
    let r = run(
        &python(),
        [
            "-c",
            "import sqlite3, sys\n\
             r = sqlite3.connect(sys.argv[1]).execute(\n\
                 'select metadata_location from iceberg_tables '\n\
                 'where table_namespace = ? and table_name = ?', (sys.argv[2], sys.argv[3])\n\
             ).fetchone()\n\
             print(r[0] if r else '')",
            &w.wh().join("catalog.db").display().to_string(),
            ns,
            name,
        ],
    )
    .assert_success();
    let p = r.stdout.trim().to_string();
    assert!(!p.is_empty(), "catalog.db has no {TABLE}");
    p
}

/// A `file://` location as a local path.
fn local(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file://").unwrap_or(location))
}

/// The metadata version of a `NNNNN-<uuid>.metadata.json` location.
fn version(location: &str) -> u64 {
    dms_name(location)
        .split('-')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{location} is not a versioned metadata file"))
}

/// Every file in the table's folder (local paths).
fn table_files(w: &Work) -> BTreeSet<PathBuf> {
    fn walk(d: &Path, out: &mut BTreeSet<PathBuf>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.insert(p);
            }
        }
    }
    let (ns, name) = TABLE.rsplit_once('.').unwrap();
    let mut out = BTreeSet::new();
    walk(&w.wh().join(format!("{ns}.db")).join(name), &mut out);
    out
}

/// Ingests the files of `meta.files[..upto]` one `ingest` run each (one commit each): the
/// metadata location after each, and the files each commit added to the table folder.
struct Ingested {
    pointers: Vec<String>,
    added: Vec<BTreeSet<PathBuf>>,
}

fn ingest_one_by_one(w: &Work, upto: usize) -> Ingested {
    let meta = w.meta(TABLE);
    let mut out = Ingested {
        pointers: Vec::new(),
        added: Vec::new(),
    };
    let mut before = BTreeSet::new();
    for f in &meta.files[..upto] {
        let reports = w.ingest_json(&[w.dms().join(f)]);
        let applied: Vec<&Value> = reports
            .iter()
            .filter(|r| r["status"] == "applied")
            .collect();
        assert_eq!(applied.len(), 1, "{f}: one commit: {reports:?}");
        out.pointers.push(pointer(w));
        let now = table_files(w);
        out.added.push(now.difference(&before).cloned().collect());
        before = now;
    }
    out
}

/// The generator's table state after the first `n` DMS files.
fn rows_after(w: &Work, n: usize) -> Vec<Value> {
    let last = &w.meta(TABLE).files[n - 1];
    w.asof(TABLE)
        .into_iter()
        .find(|s| s.after_file == *last)
        .unwrap_or_else(|| panic!("no as-of step after {last}"))
        .rows
}

fn json_of(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{}", r.describe()))
}

fn repair(w: &Work, extra: &[&str]) -> Run {
    let wh = w.wh().display().to_string();
    let mut a = vec!["repair", TABLE, "--warehouse", &wh];
    a.extend_from_slice(extra);
    w.cli(&a)
}

/// `repair --format json` (with `--dry-run` if asked): the report; the command must succeed.
fn repair_json(w: &Work, dry_run: bool) -> Value {
    let mut extra = vec!["--format", "json"];
    if dry_run {
        extra.push("--dry-run");
    }
    json_of(&repair(w, &extra).assert_success())
}

/// The DMS names each snapshot of the history applied, oldest first.
fn history_files(w: &Work) -> Vec<Vec<String>> {
    w.history(TABLE)
        .iter()
        .map(|s| {
            s["source_files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| dms_name(f.as_str().unwrap()))
                .collect()
        })
        .collect()
}

/// Asserts that a failed command names the damaged table, the missing metadata and the repair.
#[track_caller]
fn assert_names_damage(r: &Run, missing: &str) {
    assert!(!r.status.success(), "should fail:\n{}", r.describe());
    let out = r.output();
    for needle in [
        format!("table {TABLE} is damaged"),
        missing.to_string(),
        format!("dms2iceberg repair {TABLE}"),
    ] {
        assert!(
            out.contains(&needle),
            "the error should name `{needle}`:\n{}",
            r.describe()
        );
    }
}

/// After a repair that restored the table to its state after `restored` DMS files: it
/// verifies whole, its history holds exactly those files, and it reads as the generator's
/// state after them (our scan, PyIceberg, DuckDB). Then `ingest` of the whole DMS folder
/// applies every later file once (`lost` of them were applied before the damage), and the
/// table ends exact; a second ingest applies nothing.
fn restored_then_reingested(w: &Work, restored: usize, lost: usize) {
    let meta = w.meta(TABLE);
    let report = json_of(
        &w.verify_run(TABLE, &["--read", "--format", "json"])
            .assert_success(),
    );
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
    assert_eq!(report["snapshots"], restored, "{report}");
    assert_eq!(report["snapshots_read"], restored, "{report}");
    let want: Vec<Vec<String>> = meta.files[..restored]
        .iter()
        .map(|f| vec![dms_name(f)])
        .collect();
    assert_eq!(history_files(w), want, "history of the restored table");
    w.assert_table_rows(TABLE, &rows_after(w, restored), "restored");

    let reports = w.ingest_json(&[w.dms()]);
    let applied: Vec<String> = reports
        .iter()
        .filter(|r| r["status"] == "applied")
        .flat_map(|r| r["files"].as_array().cloned().unwrap_or_default())
        .map(|f| dms_name(f.as_str().unwrap_or_default()))
        .collect();
    let again: Vec<String> = meta.files[restored..].iter().map(|f| dms_name(f)).collect();
    assert!(
        again.len() > lost,
        "the test needs files after the lost commits too"
    );
    assert_eq!(
        applied, again,
        "the next ingest applies the {lost} lost file(s) and every later one, in order: \
         {reports:?}"
    );
    check_history(w, TABLE, &meta);
    w.assert_table(TABLE);
    let reports = w.ingest_json(&[w.dms()]);
    assert!(
        reports.iter().all(|r| r["status"] != "applied"),
        "a second ingest applies nothing: {reports:?}"
    );
    w.verify_tables();
}

/// The `dms2iceberg.repaired` property of the metadata `location`: parsed JSON.
fn repaired_note(location: &str) -> Value {
    let md = read_json(&local(location));
    let note = md["properties"][REPAIRED].as_str().unwrap_or_else(|| {
        panic!(
            "{location} has no {REPAIRED} property: {}",
            md["properties"]
        )
    });
    serde_json::from_str(note).unwrap_or_else(|e| panic!("{REPAIRED} is not JSON ({e}): {note}"))
}

/// The incident as it happened, on a table of the format version `format_version` (`None`:
/// the suite's, `DMS2ICEBERG_FORMAT_VERSION` or 2): the current metadata file deleted.
fn incident(name: &str, seed: &str, format_version: Option<u8>) {
    let w = Work::new(name);
    generate(&w, seed);
    if let Some(v) = format_version {
        w.set_default(&format!("format_version = {v}"));
    }
    let meta = w.meta(TABLE);
    let n = meta.files.len() - 2;
    let ing = ingest_one_by_one(&w, n);
    let current = ing.pointers[n - 1].clone();
    let previous = ing.pointers[n - 2].clone();
    if let Some(v) = format_version {
        assert_eq!(read_json(&local(&current))["format-version"], v);
    }
    assert_eq!(version(&current), version(&previous) + 1);

    // The damage: the metadata file the catalog names is gone.
    std::fs::remove_file(local(&current)).unwrap();
    let files_damaged = table_files(&w);

    // Readers and writers fail, naming the table, the missing file and the repair; the
    // invariant every test ends on says the same.
    assert_names_damage(&w.scan_run(TABLE, &[]), &current);
    let r = w.ingest();
    assert_names_damage(&r, &current);
    let e = w
        .check_tables()
        .expect_err("the end-of-test check must fail on a damaged table");
    assert!(e.contains(&current), "{e}");
    let r = w.verify_run(TABLE, &["--read"]);
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert!(r.output().contains(&current), "{}", r.describe());
    assert_eq!(pointer(&w), current, "a failed ingest changed the catalog");
    assert_eq!(
        table_files(&w),
        files_damaged,
        "a failed ingest wrote files"
    );

    // A dry run says what it would restore and changes nothing.
    let dry = repair_json(&w, true);
    assert_eq!(dry["table"], TABLE, "{dry}");
    assert_eq!(dry["damaged"], current.as_str(), "{dry}");
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["restored_from"], previous.as_str(), "{dry}");
    assert!(dry["metadata_location"].is_null(), "{dry}");
    let problems = dry["problems"].as_array().unwrap();
    assert!(
        !problems.is_empty() && problems[0].as_str().unwrap().contains(&current),
        "{dry}"
    );
    assert_eq!(
        dry["applied_through"].as_str().map(dms_name),
        Some(dms_name(&meta.files[n - 2])),
        "{dry}"
    );
    let text = repair(&w, &["--dry-run"]).assert_success();
    assert!(
        text.stdout.contains("would restore from") && text.stdout.contains(&previous),
        "{}",
        text.describe()
    );
    assert_eq!(pointer(&w), current, "a dry run changed the catalog");
    assert_eq!(table_files(&w), files_damaged, "a dry run wrote files");

    // The repair.
    let done = repair_json(&w, false);
    assert_eq!(done["restored_from"], previous.as_str(), "{done}");
    assert_eq!(done["dry_run"], false, "{done}");
    let new = done["metadata_location"]
        .as_str()
        .unwrap_or_else(|| panic!("no new metadata: {done}"))
        .to_string();
    assert_eq!(pointer(&w), new, "the catalog names the repaired metadata");
    assert!(
        version(&new) > version(&current),
        "{new} is newer than {current}"
    );
    let prev_md = read_json(&local(&previous));
    let new_md = read_json(&local(&new));
    assert_eq!(
        new_md["current-snapshot-id"], prev_md["current-snapshot-id"],
        "the repaired table's current snapshot is the restored one"
    );
    assert_eq!(
        done["snapshot_id"], prev_md["current-snapshot-id"],
        "{done}"
    );
    assert_eq!(new_md["table-uuid"], prev_md["table-uuid"]);
    assert_eq!(new_md["format-version"], prev_md["format-version"]);
    let note = repaired_note(&new);
    assert_eq!(note["damaged"], current.as_str(), "{note}");
    assert_eq!(note["restored"], previous.as_str(), "{note}");
    assert!(note["at"].as_i64().is_some_and(|t| t > 0), "{note}");
    assert!(
        note["problem"]
            .as_str()
            .is_some_and(|p| p.contains(&current)),
        "{note}"
    );
    // A second repair finds nothing to do.
    let again = repair_json(&w, false);
    assert_eq!(again["problems"], serde_json::json!([]), "{again}");
    assert_eq!(pointer(&w), new);

    restored_then_reingested(&w, n - 1, 1);
}

/// 1. The incident: the current metadata file deleted; the table restored to the metadata
///    before it, then the lost file and the later ones applied by the next ingest.
#[test]
fn a_missing_current_metadata_file_is_repaired_and_the_lost_commit_applied_again() {
    incident("repair_incident", "4801", None);
}

/// 6. The same on a format version 3 table (deletion vectors, row lineage), whatever the
///    suite's default.
#[test]
fn a_missing_current_metadata_file_of_a_v3_table_is_repaired() {
    incident("repair_incident_v3", "4806", Some(3));
}

/// 2. Damage below the metadata: a file the newest commit added (its manifest, or a data file)
///    deleted while its metadata remains. `verify` names the file; the repair passes over the
///    metadata the catalog names and restores the one before.
fn newest_commit_loses(name: &str, seed: &str, kind: &str) {
    let w = Work::new(name);
    generate(&w, seed);
    let meta = w.meta(TABLE);
    let n = meta.files.len() - 2;
    let ing = ingest_one_by_one(&w, n);
    let current = ing.pointers[n - 1].clone();
    let previous = ing.pointers[n - 2].clone();
    let victim = ing.added[n - 1]
        .iter()
        .find(|p| file_kind(&p.display().to_string()) == kind)
        .unwrap_or_else(|| panic!("the newest commit added no {kind}: {:?}", ing.added[n - 1]))
        .clone();
    std::fs::remove_file(&victim).unwrap();
    let victim_name = dms_name(&victim.display().to_string());

    let r = w.verify_run(TABLE, &["--format", "json"]);
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    let v = json_of(&r);
    let newest = read_json(&local(&current))["current-snapshot-id"].clone();
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["what"]
            .as_str()
            .is_some_and(|s| s.contains(&victim_name) && s.contains("missing"))
            && p["snapshots"] == serde_json::json!([newest])),
        "verify names the missing {kind} and the newest snapshot ({newest}) alone: {v}"
    );
    assert!(w.check_tables().is_err(), "the end-of-test check fails");

    let done = repair_json(&w, false);
    assert_eq!(done["damaged"], current.as_str(), "{done}");
    assert!(
        done["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().is_some_and(|s| s.contains(&victim_name))),
        "{done}"
    );
    assert_eq!(done["restored_from"], previous.as_str(), "{done}");
    let new = done["metadata_location"].as_str().unwrap().to_string();
    assert_eq!(pointer(&w), new);
    assert_eq!(repaired_note(&new)["restored"], previous.as_str());
    restored_then_reingested(&w, n - 1, 1);
}

#[test]
fn a_missing_manifest_of_the_newest_commit_is_repaired() {
    newest_commit_loses("repair_manifest", "4802", "manifest");
}

#[test]
fn a_missing_data_file_of_the_newest_commit_is_repaired() {
    newest_commit_loses("repair_data_file", "4803", "data");
}

/// 3. Two lost commits in a row: both newest metadata files deleted (`both_metadata`), or the
///    newest deleted and the one before left naming a manifest list that is gone. The table is
///    restored two versions back; the next ingest applies both lost files and the later ones.
fn two_commits_lost(name: &str, seed: &str, both_metadata: bool) {
    let w = Work::new(name);
    generate(&w, seed);
    let meta = w.meta(TABLE);
    let n = meta.files.len() - 2;
    let ing = ingest_one_by_one(&w, n);
    let (current, previous, restore) = (
        ing.pointers[n - 1].clone(),
        ing.pointers[n - 2].clone(),
        ing.pointers[n - 3].clone(),
    );
    std::fs::remove_file(local(&current)).unwrap();
    let broken_list = if both_metadata {
        std::fs::remove_file(local(&previous)).unwrap();
        None
    } else {
        let list = ing.added[n - 2]
            .iter()
            .find(|p| file_kind(&p.display().to_string()) == "manifest-list")
            .expect("the commit before the newest wrote a manifest list")
            .clone();
        std::fs::remove_file(&list).unwrap();
        Some(dms_name(&list.display().to_string()))
    };
    assert_names_damage(&w.scan_run(TABLE, &[]), &current);

    let done = repair_json(&w, false);
    assert_eq!(done["damaged"], current.as_str(), "{done}");
    assert_eq!(done["restored_from"], restore.as_str(), "{done}");
    let passed: Vec<(String, String)> = done["passed_over"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_string(),
                p[1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    match &broken_list {
        None => assert!(passed.is_empty(), "nothing to pass over: {done}"),
        Some(list) => assert!(
            passed.len() == 1 && passed[0].0 == previous && passed[0].1.contains(list.as_str()),
            "the metadata naming the missing manifest list {list} is passed over, and why: \
             {done}"
        ),
    }
    assert_eq!(
        done["applied_through"].as_str().map(dms_name),
        Some(dms_name(&meta.files[n - 3])),
        "{done}"
    );
    restored_then_reingested(&w, n - 2, 2);
}

#[test]
fn two_lost_commits_restore_two_versions_back() {
    two_commits_lost("repair_two_lost", "4804", true);
}

#[test]
fn a_broken_metadata_file_before_the_damaged_one_is_passed_over() {
    two_commits_lost("repair_two_lost_broken", "4805", false);
}

/// 4. A losing attempt left metadata of the damaged version (same number, another name) that
///    reads whole: it never became current, so the repair passes over it.
#[test]
fn orphan_metadata_at_the_damaged_version_is_not_chosen() {
    let w = Work::new("repair_orphan_attempt");
    generate(&w, "4807");
    let meta = w.meta(TABLE);
    let n = meta.files.len() - 2;
    let ing = ingest_one_by_one(&w, n);
    let current = ing.pointers[n - 1].clone();
    let previous = ing.pointers[n - 2].clone();
    // The attempt's metadata: the current file's content (everything it names is there) under
    // the same version and another uuid, written after it.
    let name = dms_name(&current);
    let (v, _) = name.split_once('-').unwrap();
    let orphan_name = format!("{v}-00000000-0000-4000-8000-0000000000aa.metadata.json");
    let orphan = current.replace(&name, &orphan_name);
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::copy(local(&current), local(&orphan)).unwrap();
    std::fs::remove_file(local(&current)).unwrap();
    assert_eq!(version(&orphan), version(&current));

    let dry = repair_json(&w, true);
    assert_eq!(dry["restored_from"], previous.as_str(), "{dry}");
    let done = repair_json(&w, false);
    assert_eq!(done["restored_from"], previous.as_str(), "{done}");
    let passed = done["passed_over"].as_array().unwrap();
    assert!(
        passed
            .iter()
            .any(|p| p[0] == orphan.as_str() && p[1].as_str().unwrap().contains("never became")),
        "the attempt's metadata is passed over as never current: {done}"
    );
    let new = done["metadata_location"].as_str().unwrap().to_string();
    assert!(version(&new) > version(&orphan), "{new} after {orphan}");
    assert!(
        local(&orphan).exists(),
        "the repair deleted the attempt's file"
    );
    restored_then_reingested(&w, n - 1, 1);
}

/// 5. A healthy table: `repair` says there is nothing to do and changes nothing.
#[test]
fn a_healthy_table_is_left_alone() {
    let w = Work::new("repair_healthy");
    generate(&w, "4808");
    w.ingest().assert_success();
    w.assert_table(TABLE);
    let before = pointer(&w);
    let files = table_files(&w);
    let verified = w.verify_tables();
    assert_eq!(verified.len(), 1, "{verified:?}");
    assert_eq!(verified[0]["metadata_location"], before.as_str());
    assert_eq!(verified[0]["snapshots"], w.meta(TABLE).files.len());

    let dry = repair_json(&w, true);
    let done = repair_json(&w, false);
    for r in [&dry, &done] {
        assert_eq!(r["problems"], serde_json::json!([]), "{r}");
        assert_eq!(r["damaged"], before.as_str(), "{r}");
        assert!(r["restored_from"].is_null(), "{r}");
        assert!(r["metadata_location"].is_null(), "{r}");
    }
    let text = repair(&w, &[]).assert_success();
    assert!(
        text.stdout.contains("not damaged") && text.stdout.contains("nothing to do"),
        "{}",
        text.describe()
    );
    assert_eq!(pointer(&w), before, "the catalog names the same metadata");
    assert_eq!(table_files(&w), files, "no file written or deleted");
    let i = inspect(&w, TABLE);
    assert!(
        i.missing.is_empty() && i.orphans.is_empty(),
        "{:?} {:?}",
        i.missing,
        i.orphans
    );
    w.assert_table(TABLE);
}

/// The end-of-test invariant fails a test that leaves a damaged table behind (the work dir's
/// drop panics, naming the table and the missing file), and `skip_verify` is the only way out.
#[test]
fn a_test_that_leaves_a_damaged_table_fails_unless_it_says_why() {
    let damaged = |name: &str| -> (Work, String) {
        let w = Work::new(name);
        generate(&w, "4809");
        let meta = w.meta(TABLE);
        ingest_one_by_one(&w, 2);
        assert!(meta.files.len() > 2);
        let current = pointer(&w);
        std::fs::remove_file(local(&current)).unwrap();
        (w, current)
    };
    let (w, missing) = damaged("repair_invariant_fails");
    let dir = w.dir.clone();
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(w)));
    let message = match dropped {
        Ok(()) => panic!("a work dir with a damaged table dropped without failing the test"),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| format!("{p:?}")),
    };
    assert!(
        message.contains(TABLE) && message.contains(&missing) && message.contains("skip_verify"),
        "{message}"
    );
    assert!(dir.exists(), "the failing work dir is kept");
    std::fs::remove_dir_all(&dir).unwrap();

    let (w, _) = damaged("repair_invariant_skipped");
    w.skip_verify("this test damages the table on purpose (the check itself is under test)");
}

/// The end-of-test check through a REST catalog (rustberg) fails on a table a data file of
/// whose newest commit is gone, naming the file; `repair` refuses there (the server writes and
/// keeps the metadata), so this test opts out of the check, saying why.
#[test]
fn a_rest_table_missing_a_data_file_fails_the_end_of_test_check() {
    use crate::common::rest::Rustberg;
    fn parquet(dir: &Path, out: &mut BTreeSet<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                parquet(&p, out);
            } else if file_kind(&p.display().to_string()) == "data" {
                out.insert(p);
            }
        }
    }
    let w = Work::new("repair_rest");
    generate(&w, "4810");
    let server = Rustberg::start(&w);
    let meta = w.meta(TABLE);
    let mut before = BTreeSet::new();
    for f in &meta.files[..2] {
        before.clear();
        parquet(&server.warehouse, &mut before);
        server.ingest(&w, &[w.dms().join(f)]).assert_success();
    }
    assert_eq!(server.verify_tables().len(), 1);
    let mut after = BTreeSet::new();
    parquet(&server.warehouse, &mut after);
    let victim = after
        .difference(&before)
        .next()
        .unwrap_or_else(|| panic!("the second commit wrote no data file under {after:?}"))
        .clone();
    std::fs::remove_file(&victim).unwrap();
    let e = server
        .check_tables()
        .expect_err("the end-of-test check must fail on a table missing a data file");
    let name = dms_name(&victim.display().to_string());
    assert!(e.contains(TABLE) && e.contains(&name), "{e}");
    let r = server.cli(&["repair", TABLE]);
    assert!(!r.status.success(), "{}", r.describe());
    assert!(r.output().contains("REST catalog"), "{}", r.describe());
    server.skip_verify(&format!(
        "{TABLE} misses {name} on purpose, and a REST catalog's table is repaired with the \
         catalog's own tools"
    ));
}

/// A file lost only from snapshots the table has moved past (a change file's data file that
/// compaction rewrote): the table reads, so `repair` leaves it where it is and reports the
/// older snapshots (moving the table back past them would drop commits that read); `expire`
/// drops them, and the table verifies whole again.
#[test]
fn a_file_lost_from_older_snapshots_only_is_not_rolled_back() {
    let w = Work::new("repair_older_only");
    generate(&w, "4811");
    let meta = w.meta(TABLE);
    let ing = ingest_one_by_one(&w, meta.files.len());
    let wh = w.wh().display().to_string();
    w.cli(&[
        "compact",
        TABLE,
        "--warehouse",
        &wh,
        "--target-file-size",
        "1048576",
    ])
    .assert_success();
    // A data file of the second commit: rewritten by the compaction, named by older
    // snapshots only.
    let victim = ing.added[1]
        .iter()
        .find(|p| file_kind(&p.display().to_string()) == "data")
        .unwrap_or_else(|| panic!("the second commit added no data file: {:?}", ing.added[1]))
        .clone();
    std::fs::remove_file(&victim).unwrap();
    let before = pointer(&w);
    let r = w.verify_run(TABLE, &["--format", "json"]);
    assert_eq!(
        r.status.code(),
        Some(1),
        "verify names the lost file: {}",
        r.describe()
    );
    let done = repair_json(&w, false);
    assert_eq!(done["problems"], serde_json::json!([]), "{done}");
    assert!(done["metadata_location"].is_null(), "{done}");
    assert!(
        !done["older_snapshots_broken"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the older snapshots' problem is reported: {done}"
    );
    assert_eq!(pointer(&w), before, "not rolled back");
    w.assert_table(TABLE);
    // Expiring the snapshots that name the lost file leaves a table that verifies whole.
    w.cli(&[
        "expire",
        TABLE,
        "--warehouse",
        &wh,
        "--older-than-hours",
        "0",
        "--retain-last",
        "1",
    ])
    .assert_success();
    w.verify_run(TABLE, &["--read"]).assert_success();
    w.assert_table(TABLE);
}

/// A current metadata file that is there but is not table metadata (cut to nothing): reading
/// the table names the damage and the repair, and `repair` restores the metadata before it.
#[test]
fn an_unreadable_current_metadata_file_is_repaired() {
    let w = Work::new("repair_unreadable");
    generate(&w, "4812");
    let meta = w.meta(TABLE);
    let n = meta.files.len() - 2;
    let ing = ingest_one_by_one(&w, n);
    let current = ing.pointers[n - 1].clone();
    std::fs::write(local(&current), b"").unwrap();
    let wh = w.wh().display().to_string();
    let r = w.cli(&["scan", TABLE, "--warehouse", &wh]);
    assert!(
        !r.status.success()
            && r.stderr.contains("is damaged")
            && r.stderr.contains("does not read as table metadata")
            && r.stderr.contains("repair"),
        "{}",
        r.describe()
    );
    let v = json_of(&w.verify_run(TABLE, &["--format", "json"]));
    assert!(
        v["problems"][0]["what"]
            .as_str()
            .is_some_and(|s| s.contains("does not read")),
        "verify reports it as JSON: {v}"
    );
    let done = repair_json(&w, false);
    assert_eq!(
        done["restored_from"],
        ing.pointers[n - 2].as_str(),
        "{done}"
    );
    restored_then_reingested(&w, n - 1, 1);
}
