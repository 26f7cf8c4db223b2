//! Crash at every step of a commit, then run again: the table must end exactly as if nothing had
//! happened, each DMS file applied exactly once, and whatever the crashed attempt left behind
//! must stay garbage (never referenced by any metadata).
//!
//! Fault injection: `DMS2ICEBERG_FAILPOINT=<point>` (the process fails with an error there) or
//! `<point>:kill` (the process aborts there), set only for the run that should crash. Points in
//! commit order: after-lookup, after-data-files, after-delete-files, after-manifests,
//! after-manifest-list, after-metadata (metadata.json written, pointer not swapped), after-swap
//! (pointer swapped, the caller never heard back: outcome unknown to it).
//!
//! Orphans are computed independently (PyIceberg's Avro readers over the metadata log, every
//! snapshot's manifest list and every manifest entry): files under the table folder that nothing
//! references. Run with `-- --nocapture` to see how many each crash point leaves.

mod common;
#[path = "common/stress.rs"]
mod stress;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;

use common::*;
use serde_json::Value;
use stress::*;

const TABLE: &str = "shop.orders";

const POINTS: [&str; 7] = [
    "after-lookup",
    "after-data-files",
    "after-delete-files",
    "after-manifests",
    "after-manifest-list",
    "after-metadata",
    "after-swap",
];

fn generate(w: &Work, seed: &str) {
    w.generate(
        "synthetic",
        &[
            "--rows",
            "400",
            "--cdc-files",
            "5",
            "--cdc-rows",
            "120",
            "--asof",
            "--seed",
            seed,
        ],
    );
}

/// Checks that the crashed run really crashed the way it was asked to.
#[track_caller]
fn assert_crashed(r: &Run, point: &str, kill: bool) {
    if kill {
        assert_eq!(
            r.status.signal(),
            Some(6),
            "{point}:kill should abort the process (SIGABRT):\n{}",
            r.describe()
        );
        assert!(
            r.stderr.contains(&format!("failpoint {point}")),
            "the failpoint did not fire:\n{}",
            r.describe()
        );
    } else {
        assert_eq!(
            r.status.code(),
            Some(1),
            "{point} (error) should fail the ingest with exit code 1:\n{}",
            r.describe()
        );
        let expected = if point == "after-swap" {
            "may or may not have landed".to_string()
        } else {
            format!("failpoint {point}")
        };
        assert!(
            r.output().contains(&expected),
            "the error should say `{expected}`:\n{}",
            r.describe()
        );
    }
}

/// The state the table had after `n` files (from the generator's as-of steps).
fn rows_after(w: &Work, n: usize) -> Vec<Value> {
    let steps = w.asof(TABLE);
    let meta = w.meta(TABLE);
    let last = &meta.files[n - 1];
    steps
        .iter()
        .find(|s| s.after_file == *last)
        .unwrap_or_else(|| panic!("no as-of step after {last}"))
        .rows
        .clone()
}

/// Ingests `prior` files cleanly, then the whole tree with the failpoint (so the next file,
/// the `prior`-th change file, crashes), then the whole tree again without it.
fn crash_case(point: &str, kill: bool, prior: usize, seed: &str) -> String {
    let mode = if kill { "kill" } else { "error" };
    let w = Work::new(&format!("crash_{point}_{mode}_{prior}"));
    generate(&w, seed);
    let meta = w.meta(TABLE);
    let victim = dms_name(&meta.files[prior]);
    let spec = if kill {
        format!("{point}:kill")
    } else {
        point.to_string()
    };

    // 1. The files before the victim, without faults.
    let before_crash: BTreeSet<String>;
    if prior > 0 {
        let first: Vec<PathBuf> = meta.files[..prior]
            .iter()
            .map(|f| w.dms().join(f))
            .collect();
        let (r, reps) = ingest_json(&w, &first, &[], &[]);
        r.ok();
        assert_eq!(Figures::of(&reps).applied_files, prior);
        let i0 = inspect(&w, TABLE);
        assert!(
            i0.orphans.is_empty(),
            "orphans before any crash: {:?}",
            i0.orphans
        );
        before_crash = i0.files;
    } else {
        before_crash = BTreeSet::new();
    }

    // 2. The whole tree with the failpoint: the victim crashes.
    let (r, reps) = ingest_json(
        &w,
        &[w.dms()],
        &[],
        &[("DMS2ICEBERG_FAILPOINT", spec.as_str())],
    );
    assert_crashed(&r, point, kill);
    assert!(
        reps.iter().all(|c| c["status"] == "skipped"),
        "the crashed run reported a commit as applied: {reps:?}"
    );
    let landed = point == "after-swap";
    let i1 = inspect(&w, TABLE);
    let applied_now = prior + usize::from(landed);
    if applied_now == 0 {
        assert!(
            i1.pointer.is_none(),
            "{spec}: the table exists although its creation crashed before the swap"
        );
    } else {
        // The table is exactly as before the crash (or, after-swap, with the victim applied).
        let hist = w.history(TABLE);
        assert_eq!(
            hist.len(),
            applied_now,
            "{spec}: snapshots after the crash: {hist:?}"
        );
        if landed {
            let last = hist.last().unwrap();
            let files: Vec<String> = last["source_files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| dms_name(f.as_str().unwrap()))
                .collect();
            assert_eq!(
                files,
                vec![victim.clone()],
                "{spec}: the landed snapshot should hold the victim"
            );
        }
        check_inspection(TABLE, &hist, &i1);
        let got = w.scan(TABLE, &[]);
        assert_rows(
            &format!("{spec}: right after the crash"),
            &meta,
            &rows_after(&w, applied_now),
            &got,
        );
    }
    let left_by_crash: BTreeSet<String> = i1.orphans.clone();
    let crash_kinds = i1.orphan_kinds();
    // Everything the crashed attempt wrote is either committed or garbage, never half-referenced.
    let new_files: BTreeSet<&String> = i1.files.difference(&before_crash).collect();
    assert!(
        new_files
            .iter()
            .all(|f| i1.orphans.contains(*f) || i1.referenced.contains(*f)),
        "files neither referenced nor orphaned?"
    );
    let landed_snapshot = if landed {
        w.history(TABLE).last().map(|s| s["snapshot_id"].clone())
    } else {
        None
    };

    // 3. Run again, without the failpoint.
    let (r, reps) = ingest_json(&w, &[w.dms()], &[], &[]);
    let r = r.ok();
    let victim_reports: Vec<&Value> = reps
        .iter()
        .filter(|c| {
            c["files"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| dms_name(f.as_str().unwrap()) == victim)
        })
        .collect();
    assert_eq!(
        victim_reports.len(),
        1,
        "{spec}: the retry should report the victim once: {reps:?}\n{}",
        r.describe()
    );
    let want = if landed { "skipped" } else { "applied" };
    assert_eq!(
        victim_reports[0]["status"], want,
        "{spec}: the retry should find the victim {want}: {}",
        victim_reports[0]
    );
    let f = Figures::of(&reps);
    assert_eq!(
        f.applied_files,
        meta.files.len() - applied_now,
        "{spec}: the retry applied {} files, expected every file not yet applied ({})",
        f.applied_files,
        meta.files.len() - applied_now
    );

    // 4. Exactly the expected table, each file once, the crash's leftovers still unreferenced.
    let hist = check_history(&w, TABLE, &meta);
    assert_eq!(hist.len(), meta.files.len());
    if let Some(id) = &landed_snapshot {
        let holder: Vec<&Value> = hist
            .iter()
            .filter(|s| {
                s["source_files"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| dms_name(f.as_str().unwrap()) == victim)
            })
            .collect();
        assert_eq!(
            holder.len(),
            1,
            "{spec}: the victim is in {} snapshots",
            holder.len()
        );
        assert_eq!(
            &holder[0]["snapshot_id"], id,
            "{spec}: the victim should stay in the snapshot that landed during the crash"
        );
    }
    let i2 = inspect(&w, TABLE);
    check_inspection(TABLE, &hist, &i2);
    check_totals(TABLE, &hist, w.expected(TABLE).len());
    let adopted: Vec<&String> = left_by_crash.intersection(&i2.referenced).collect();
    assert!(
        adopted.is_empty(),
        "{spec}: files left by the crash became referenced: {adopted:?}"
    );
    let new_orphans: Vec<&String> = i2.orphans.difference(&left_by_crash).collect();
    assert!(
        new_orphans.is_empty(),
        "{spec}: the clean retry left orphans of its own: {new_orphans:?}"
    );
    w.assert_table(TABLE);

    // What each mode may leave. An error exit abandons its prepared files (data, deletes,
    // manifests are deleted); a commit that landed leaves nothing unreferenced.
    if !kill {
        let prepared: usize = ["data", "deletes", "manifest"]
            .iter()
            .map(|k| crash_kinds.get(k).copied().unwrap_or(0))
            .sum();
        assert_eq!(
            prepared, 0,
            "{spec}: an error exit should delete its prepared files, left: {:?}",
            left_by_crash
        );
    }
    if landed {
        assert!(
            left_by_crash.is_empty(),
            "{spec}: the attempt landed, yet it left unreferenced files: {left_by_crash:?}"
        );
    }
    let line = format!(
        "crash {spec:<26} on {} ({}): {} orphan file(s) left ({}), never referenced; retry {} it; table exact, {} files once each",
        if prior == 0 {
            "table creation".to_string()
        } else {
            format!("change file {prior}")
        },
        victim,
        left_by_crash.len(),
        kinds_text(&crash_kinds),
        if landed {
            "found the committed snapshot and skipped"
        } else {
            "applied"
        },
        meta.files.len()
    );
    eprintln!("{line}");
    line
}

macro_rules! crash_tests {
    ($($name:ident: $point:expr, $kill:expr, $prior:expr, $seed:expr;)*) => {
        $(
            #[test]
            fn $name() {
                crash_case($point, $kill, $prior, $seed);
            }
        )*
    };
}

// Error mode crashes on the 2nd change file, kill mode on the 3rd.
crash_tests! {
    error_after_lookup: "after-lookup", false, 2, "301";
    error_after_data_files: "after-data-files", false, 2, "302";
    error_after_delete_files: "after-delete-files", false, 2, "303";
    error_after_manifests: "after-manifests", false, 2, "304";
    error_after_manifest_list: "after-manifest-list", false, 2, "305";
    error_after_metadata: "after-metadata", false, 2, "306";
    error_after_swap: "after-swap", false, 2, "307";
    kill_after_lookup: "after-lookup", true, 3, "311";
    kill_after_data_files: "after-data-files", true, 3, "312";
    kill_after_delete_files: "after-delete-files", true, 3, "313";
    kill_after_manifests: "after-manifests", true, 3, "314";
    kill_after_manifest_list: "after-manifest-list", true, 3, "315";
    kill_after_metadata: "after-metadata", true, 3, "316";
    kill_after_swap: "after-swap", true, 3, "317";
}

/// The first commit creates the table: a crash there (kill, at every point) must leave no table
/// (or, after the swap, the table with the full load), and the retry must create it once.
#[test]
fn kill_at_every_point_while_creating_the_table() {
    let mut lines = Vec::new();
    for (i, p) in POINTS.iter().enumerate() {
        lines.push(crash_case(p, true, 0, &(320 + i).to_string()));
    }
    eprintln!("{}", lines.join("\n"));
}

/// Every point in both modes, in one place (the individual tests above run the same cases).
#[test]
fn every_point_is_covered() {
    // Guards the table above against a failpoint added to the protocol but not tested here.
    let src = std::fs::read_to_string(repo_root().join("shared/src/commit/mod.rs")).unwrap()
        + &std::fs::read_to_string(repo_root().join("shared/src/ops/ingest.rs")).unwrap();
    let mut found = BTreeSet::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find("failpoint(\"") {
        rest = &rest[i + "failpoint(\"".len()..];
        let end = rest.find('"').unwrap();
        found.insert(rest[..end].to_string());
    }
    let ours: BTreeSet<String> = POINTS.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        found, ours,
        "failpoints in the code differ from the ones these tests crash at"
    );
}
