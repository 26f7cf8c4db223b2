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

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;

use crate::common::*;
use crate::stress_support::*;
use serde_json::Value;

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

/// Ingests `prior` files cleanly (with `late`, also the file after the victim, so the victim
/// arrives late and is re-merged), then the whole tree with the failpoint (the victim, file
/// `prior`, is the first to commit, so it crashes), then the whole tree again without it.
fn crash_case(point: &str, kill: bool, prior: usize, late: bool, seed: &str) -> String {
    let mode = if kill { "kill" } else { "error" };
    let w = Work::new(&format!(
        "crash_{point}_{mode}_{prior}{}",
        if late { "_late" } else { "" }
    ));
    generate(&w, seed);
    let meta = w.meta(TABLE);
    let victim = dms_name(&meta.files[prior]);
    let spec = if kill {
        format!("{point}:kill")
    } else {
        point.to_string()
    };

    // 1. The files before the victim (and, if late, the one after it), without faults.
    let mut first: Vec<PathBuf> = meta.files[..prior]
        .iter()
        .map(|f| w.dms().join(f))
        .collect();
    if late {
        first.push(w.dms().join(&meta.files[prior + 1]));
    }
    let applied_before = first.len();
    let (i0, scan0) = if first.is_empty() {
        (None, None)
    } else {
        let (r, reps) = ingest_json(&w, &first, &[], &[]);
        r.assert_success();
        assert_eq!(Figures::of(&reps).applied_files, applied_before);
        let i0 = inspect(&w, TABLE);
        assert!(
            i0.orphans.is_empty(),
            "orphans before any crash: {:?}",
            i0.orphans
        );
        (
            Some(i0),
            Some(w.scan_run(TABLE, &[]).assert_success().stdout),
        )
    };

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
    let applied_now = applied_before + usize::from(landed);
    let before_files = i0.as_ref().map(|i| i.files.clone()).unwrap_or_default();
    let before_refs = i0
        .as_ref()
        .map(|i| i.referenced.clone())
        .unwrap_or_default();
    let new_files: BTreeSet<String> = i1.files.difference(&before_files).cloned().collect();
    if applied_now == 0 {
        assert!(
            i1.pointer.is_none(),
            "{spec}: the table exists although its creation crashed before the swap"
        );
    } else {
        let hist = w.history(TABLE);
        assert_eq!(
            hist.len(),
            applied_now,
            "{spec}: snapshots after the crash: {hist:?}"
        );
        check_inspection(TABLE, &hist, &i1);
        if landed {
            // The victim's snapshot is the current one, and everything the attempt wrote is
            // referenced by it.
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
            assert!(
                new_files.iter().all(|f| i1.referenced.contains(f)),
                "{spec}: the attempt landed but some of its files are unreferenced"
            );
        } else {
            // Nothing readers see changed: same references, same rows.
            assert_eq!(
                i1.referenced, before_refs,
                "{spec}: a crash before the swap changed what the table references"
            );
            assert_eq!(
                w.scan_run(TABLE, &[]).assert_success().stdout,
                scan0.clone().unwrap(),
                "{spec}: a crash before the swap changed the table"
            );
        }
        if !late {
            let got = w.scan(TABLE, &[]);
            assert_rows(
                &format!("{spec}: right after the crash"),
                &meta,
                &rows_after(&w, applied_now),
                &got,
            );
        }
    }
    let left_by_crash: BTreeSet<String> = i1.orphans.clone();
    let crash_kinds = i1.orphan_kinds();
    assert!(
        left_by_crash.iter().all(|f| new_files.contains(f)),
        "{spec}: orphans that the crashed run did not write?"
    );
    let landed_snapshot = if landed {
        w.history(TABLE).last().map(|s| s["snapshot_id"].clone())
    } else {
        None
    };

    // 3. Run again, without the failpoint.
    let (r, reps) = ingest_json(&w, &[w.dms()], &[], &[]);
    let r = r.assert_success();
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
    if late && !landed {
        assert_eq!(
            victim_reports[0]["late"], true,
            "{spec}: the victim should be re-merged as a late file: {}",
            victim_reports[0]
        );
    }
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
    if late || prior == 0 {
        // (the 14 main cases also have PyIceberg and DuckDB read the table; the loops compare
        // our scan only, to keep the run short)
        assert_rows(
            &format!("{spec}: after the retry"),
            &meta,
            &w.expected(TABLE),
            &w.scan(TABLE, &[]),
        );
    } else {
        w.assert_table(TABLE);
    }

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
        } else if late {
            format!("late change file {prior}")
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
                crash_case($point, $kill, $prior, false, $seed);
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
    let cases: Vec<(&str, bool, usize, bool, String)> = POINTS
        .iter()
        .enumerate()
        .map(|(i, p)| (*p, true, 0, false, (320 + i).to_string()))
        .collect();
    run_cases(&cases);
}

/// Runs crash cases four at a time (each has its own work dir and warehouse).
fn run_cases(cases: &[(&str, bool, usize, bool, String)]) {
    let mut lines = Vec::new();
    for chunk in cases.chunks(4) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|(p, kill, prior, late, seed)| {
                    s.spawn(move || crash_case(p, *kill, *prior, *late, seed))
                })
                .collect();
            for h in handles {
                lines.push(h.join().expect("a crash case failed (see above)"));
            }
        });
    }
    eprintln!("{}", lines.join("\n"));
}

/// The victim is a late file (the change file after it is already applied): the crash hits a
/// re-merge commit; the retry re-merges it again, once. Every point, both modes.
#[test]
fn crash_at_every_point_while_re_merging_a_late_file() {
    let mut cases = Vec::new();
    for (i, p) in POINTS.iter().enumerate() {
        for kill in [false, true] {
            let seed = (340 + 2 * i + usize::from(kill)).to_string();
            cases.push((*p, kill, 2, true, seed));
        }
    }
    run_cases(&cases);
}

/// Crashes among concurrent writers: 8 `dms2iceberg ingest` processes (2 whole trees, 6 as
/// shuffled single-file ingests) on one table, and half of all runs are set to crash at a random
/// failpoint in either mode while the others keep committing. Then one clean ingest of the tree.
/// The table must be exact, every file applied once, the history one chain, and nothing the
/// crashed runs left behind may ever become referenced.
#[test]
fn crashes_among_concurrent_writers() {
    let w = Work::new("chaos");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "1000",
            "--cdc-files",
            "16",
            "--cdc-rows",
            "100",
            "--seed",
            "401",
        ],
    );
    let meta = w.meta(TABLE);
    let mut rng = Rng::new(401);
    let mut workers = Vec::new();
    for i in 0..8 {
        let name = format!("p{i}");
        let root = w.dir.join("feeds").join(&name);
        let mut files = meta.files.clone();
        rng.shuffle(&mut files);
        let paths = make_feed(&w, &root, &files);
        let (feed, runs) = if i < 2 {
            (
                Feed::Tree {
                    roots: vec![root],
                    files_per_commit: 1,
                },
                1,
            )
        } else {
            let n = paths.len();
            (
                Feed::Events {
                    files: paths,
                    warm: false,
                },
                n,
            )
        };
        let faults = (0..runs)
            .map(|_| {
                rng.chance(0.5).then(|| {
                    let p = POINTS[rng.below(POINTS.len())];
                    if rng.chance(0.5) {
                        format!("{p}:kill")
                    } else {
                        p.to_string()
                    }
                })
            })
            .collect();
        workers.push(Worker {
            name,
            kind: Kind::Process,
            feed,
            faults,
        });
    }
    let (outcomes, wall) = run_workers(&w, workers);
    let errors: Vec<&String> = outcomes.iter().flat_map(|o| &o.errors).collect();
    assert!(
        errors.is_empty(),
        "runs failed without a failpoint: {errors:?}"
    );
    let mut crashes: std::collections::BTreeMap<String, usize> = Default::default();
    for c in outcomes.iter().flat_map(|o| &o.crashes) {
        *crashes.entry(c.clone()).or_default() += 1;
    }
    let reports: Vec<&Value> = outcomes.iter().flat_map(|o| &o.reports).collect();
    let fig = Figures::of(reports.iter().copied());

    // In between: whatever landed is one chain, each file at most once, nothing missing.
    let mid = inspect(&w, TABLE);
    if mid.pointer.is_some() {
        let hist = w.history(TABLE);
        check_inspection(TABLE, &hist, &mid);
        let twice: Vec<_> = files_in_history(&hist)
            .into_iter()
            .filter(|(_, c)| *c > 1)
            .collect();
        assert!(twice.is_empty(), "files applied twice: {twice:?}");
    }

    // A clean run finishes the tree.
    let (r, clean_reports) = ingest_json(&w, &[w.dms()], &[], &[]);
    r.assert_success();
    let clean = Figures::of(&clean_reports);
    let hist = check_history(&w, TABLE, &meta);
    let end = inspect(&w, TABLE);
    check_inspection(TABLE, &hist, &end);
    let adopted: Vec<&String> = mid.orphans.intersection(&end.referenced).collect();
    assert!(
        adopted.is_empty(),
        "files left by crashed runs became referenced: {adopted:?}"
    );
    let new_orphans: Vec<&String> = end.orphans.difference(&mid.orphans).collect();
    assert!(
        new_orphans.is_empty(),
        "the clean run left orphans: {new_orphans:?}"
    );
    check_totals(TABLE, &hist, w.expected(TABLE).len());
    w.assert_table(TABLE);
    eprintln!(
        "chaos: 8 processes, {} runs in {:.1}s, {} crashed ({:?}); {} commits by the workers \
         ({} late, {} replans), {} landed in crashed runs (after-swap), {} by the clean run; \
         {} orphan file(s) left ({}), never referenced",
        outcomes.iter().map(|o| o.runs).sum::<usize>(),
        wall.as_secs_f64(),
        crashes.values().sum::<usize>(),
        crashes,
        fig.applied_commits,
        fig.late_commits,
        fig.replans,
        hist.len() - fig.applied_commits - clean.applied_commits,
        clean.applied_commits,
        end.orphans.len(),
        kinds_text(&end.orphan_kinds()),
    );
}

/// The failpoints in the code are exactly the ones crashed at here (a point added to the
/// protocol must get its crash tests).
#[test]
fn every_point_is_covered() {
    let mut src = String::new();
    let mut dirs = vec![repo_root().join("shared/src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs")
                && !p.ends_with("commit/failpoint.rs")
            {
                src += &std::fs::read_to_string(&p).unwrap();
            }
        }
    }
    let mut found = BTreeSet::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find("failpoint(\"") {
        rest = &rest[i + "failpoint(\"".len()..];
        let end = rest.find('"').unwrap();
        found.insert(rest[..end].to_string());
    }
    // Compaction's own point is crashed at by tests/e2e/compact.rs
    // (`compaction_never_loses_to_continuous_ingest`), the two key ranges of a spilled load by
    // tests/e2e/fullload.rs (`a_key_range_that_fails_stops_the_other_and_commits_nothing`).
    let ours: BTreeSet<String> = POINTS
        .iter()
        .chain(["after-rewrite", "lower-key-range", "upper-key-range"].iter())
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        found, ours,
        "failpoints in the code differ from the ones these tests crash at"
    );
}
