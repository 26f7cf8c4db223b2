//! Exactly once under concurrency: many writers, one table, one warehouse.
//!
//! Workers are threads of this process (each its own `SqliteCatalog::open` on the same
//! warehouse and its own `Ingest`) and `dms2iceberg ingest` processes, all released at once.
//! Each gets the generator's DMS files as its own copy (a file's identity is its DMS name, so
//! copies under different roots are the same file), as one tree or as one ingest per file in a
//! shuffled order with duplicates (S3 events: unordered, at least once), all of them or a subset.
//! Per-file ingests in shuffled order make files arrive after later ones were applied by someone
//! else: those are re-merged ("late") while other writers keep committing.
//!
//! Afterwards the table must equal the state the generator computed on its own (our scan and
//! PyIceberg and DuckDB), the history must be one parent chain with contiguous sequence numbers
//! and no snapshot outside it, every DMS file must be recorded by exactly one snapshot and
//! reported applied by exactly one worker, and no file may be left behind (lost attempts and
//! replans delete their own files). A single lost or duplicated row fails the row comparison;
//! a duplicated or lost file application fails the history check even where rows would agree.
//!
//! Run with `DMS2ICEBERG_PYTHON=$PWD/.venv/bin/python cargo test --features e2e --test e2e stress::
//! -- --nocapture`
//! to see the figures (commits/s, conflicts, attempts per commit).

use std::path::PathBuf;
use std::time::Instant;

use crate::common::*;
use crate::stress_support::*;
use serde_json::Value;

const TABLE: &str = "shop.orders";

/// `n` workers, half threads and half processes, cycling through four feeds: whole tree (plus a
/// second root with duplicate copies), a random subset as a tree, every file as a shuffled
/// sequence of single-file ingests with duplicates, a subset of files as such a sequence.
/// Worker 0 (thread) and worker n/2 (process) get every file, so the union covers the tree.
fn make_workers(w: &Work, meta: &Meta, n: usize, seed: u64, batch: usize) -> Vec<Worker> {
    let mut rng = Rng::new(seed);
    let mut workers = Vec::new();
    for i in 0..n {
        let kind = if i < n / 2 {
            Kind::Thread
        } else {
            Kind::Process
        };
        let name = format!("{}{}", if kind == Kind::Thread { "t" } else { "p" }, i);
        let root = w.dir.join("feeds").join(&name);
        let mode = i % 4;
        let mut files: Vec<String> = meta.files.clone();
        if mode == 1 || mode == 3 {
            let keep = 0.5 + 0.35 * (rng.below(100) as f64 / 100.0);
            files.retain(|_| rng.chance(keep));
            if files.is_empty() {
                files.push(meta.files[rng.below(meta.files.len())].clone());
            }
        }
        rng.shuffle(&mut files);
        let main = make_feed(w, &root.join("a"), &files);
        // Duplicates: the same DMS files again under a second root.
        let dups: Vec<String> = (0..4)
            .map(|_| files[rng.below(files.len())].clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let dup_paths = make_feed(w, &root.join("b"), &dups);
        let feed = match mode {
            0 | 1 => Feed::Tree {
                roots: if mode == 0 {
                    vec![root.join("a"), root.join("b")]
                } else {
                    vec![root.join("a")]
                },
                files_per_commit: batch,
            },
            _ => {
                let mut seq: Vec<PathBuf> = main;
                if mode == 2 {
                    // at-least-once: some files delivered twice, from either copy
                    for (k, p) in dup_paths.into_iter().enumerate() {
                        let at = rng.below(seq.len() + 1);
                        if k % 2 == 0 {
                            seq.insert(at, p);
                        } else {
                            let again = seq[rng.below(seq.len())].clone();
                            seq.insert(at, again);
                        }
                    }
                }
                Feed::Events {
                    files: seq,
                    warm: i % 8 < 4,
                }
            }
        };
        workers.push(Worker {
            name,
            kind,
            feed,
            faults: vec![],
        });
    }
    workers
}

fn describe_workers(workers: &[Worker]) -> String {
    workers
        .iter()
        .map(|wk| {
            let what = match &wk.feed {
                Feed::Tree {
                    roots,
                    files_per_commit,
                } => format!(
                    "tree ({} root(s), {files_per_commit} file(s)/commit)",
                    roots.len()
                ),
                Feed::Events { files, warm } => format!(
                    "{} single-file ingests ({})",
                    files.len(),
                    if *warm { "warm" } else { "cold" }
                ),
            };
            format!("{}:{:?}:{what}", wk.name, wk.kind)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Runs the workers and checks everything; returns the figures line. A run must exercise what
/// it is for (a late file re-merged, a conflict between writers): whether workers race is up to
/// the scheduler, so a run that did not is checked like any other and then run again, with
/// another seed, up to three runs in all.
fn stress(name: &str, gen_args: &[&str], n_workers: usize, seed: u64, batch: usize) -> String {
    let mut last = String::new();
    for run in 0..3u64 {
        let name = match run {
            0 => name.to_string(),
            _ => format!("{name}-again{run}"),
        };
        let (figures, exercised) = stress_once(&name, gen_args, n_workers, seed + run, batch);
        if exercised {
            return figures;
        }
        eprintln!("{name}: no late file or no conflict in this run; running again");
        last = figures;
    }
    panic!("no late file or no conflict: the run did not exercise what it should\n{last}");
}

/// One run of [`stress`]: the figures, and whether it exercised late files and conflicts.
fn stress_once(
    name: &str,
    gen_args: &[&str],
    n_workers: usize,
    seed: u64,
    batch: usize,
) -> (String, bool) {
    let started = Instant::now();
    let w = Work::new(name);
    w.generate("synthetic", gen_args);
    let meta = w.meta(TABLE);
    let workers = make_workers(&w, &meta, n_workers, seed, batch);
    let layout = describe_workers(&workers);
    let (outcomes, wall) = run_workers(&w, workers);

    let errors: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.errors
                .iter()
                .map(move |e| format!("worker {}: {e}", o.name))
        })
        .collect();
    let all_reports: Vec<&Value> = outcomes.iter().flat_map(|o| o.reports.iter()).collect();
    let fig = Figures::of(all_reports.iter().copied());
    let threads = Figures::of(
        outcomes
            .iter()
            .filter(|o| o.name.starts_with('t'))
            .flat_map(|o| o.reports.iter()),
    );
    let procs = Figures::of(
        outcomes
            .iter()
            .filter(|o| o.name.starts_with('p'))
            .flat_map(|o| o.reports.iter()),
    );
    let runs: usize = outcomes.iter().map(|o| o.runs).sum();
    let gave_up: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.gave_up.iter().map(move |e| format!("{}: {e}", o.name)))
        .collect();
    let figures = format!(
        "{name}: {n_workers} workers ({layout})\n  {} DMS files, {runs} ingest runs, wall {:.2}s: \
         {} snapshots committed ({:.1} commits/s), {} late re-merges, {} file deliveries skipped; \
         conflicts {} (replans {} + extra swap attempts {}), attempts/commit {:.2}; \
         threads: {} commits {} attempts {} replans; processes: {} commits {} attempts {} replans; \
         {} run(s) gave up on contention and were delivered again",
        meta.files.len(),
        wall.as_secs_f64(),
        fig.applied_commits,
        fig.applied_commits as f64 / wall.as_secs_f64(),
        fig.late_commits,
        fig.skipped_files,
        fig.conflicts(),
        fig.replans,
        fig.attempts - fig.applied_commits as u64,
        fig.attempts_per_commit(),
        threads.applied_commits,
        threads.attempts,
        threads.replans,
        procs.applied_commits,
        procs.attempts,
        procs.replans,
        gave_up.len(),
    );
    eprintln!("{figures}");
    for g in &gave_up {
        eprintln!("  gave up: {g}");
    }
    let exercised = fig.late_commits > 0 && fig.conflicts() > 0;
    assert!(
        errors.is_empty(),
        "{} worker run(s) failed:\n{}\n{figures}",
        errors.len(),
        errors.join("\n")
    );

    // Rows: exactly the generator's state, through our scan and two independent readers.
    let expected = w.expected(TABLE);
    let actual = w.scan(TABLE, &[]);
    assert_rows(&format!("{name}: scan"), &meta, &expected, &actual);

    // History: one chain, each file exactly once; metadata holds nothing outside the chain.
    let hist = check_history(&w, TABLE, &meta);
    let ins = inspect(&w, TABLE);
    check_inspection(TABLE, &hist, &ins);
    check_totals(TABLE, &hist, expected.len());

    // Reports agree with history: each file reported applied by exactly one worker, and one
    // applied report per snapshot.
    let by_reports = applied_by_reports(all_reports.iter().copied());
    let twice: Vec<_> = by_reports.iter().filter(|(_, c)| **c != 1).collect();
    assert!(
        twice.is_empty(),
        "files reported applied more than once: {twice:?}"
    );
    assert_eq!(
        by_reports.len(),
        meta.files.len(),
        "not every file was reported applied: {by_reports:?}"
    );
    assert_eq!(
        fig.applied_commits,
        hist.len(),
        "applied reports ({}) != snapshots ({})",
        fig.applied_commits,
        hist.len()
    );

    // No garbage: every lost attempt and every replan deletes its own files.
    assert!(
        ins.orphans.is_empty(),
        "{} file(s) under the table folder that no metadata references ({}): {:?}",
        ins.orphans.len(),
        kinds_text(&ins.orphan_kinds()),
        ins.orphans
    );

    w.check_readers(TABLE, &w.expected_path(TABLE), None);
    // However the workers raced, each data file has one delete file, and manifests stay few.
    w.assert_cheap_to_read(TABLE, 4);
    let line = format!(
        "  checked: rows == expected ({} rows, scan + PyIceberg + DuckDB), {} snapshots \
         in one chain, each file once, 0 orphans; test wall {:.1}s",
        expected.len(),
        hist.len(),
        started.elapsed().as_secs_f64()
    );
    eprintln!("{line}");
    (format!("{figures}\n{line}"), exercised)
}

const STRESS_TREE: &[&str] = &[
    "--format",
    "parquet",
    "--rows",
    "2500",
    "--cdc-files",
    "24",
    "--cdc-rows",
    "150",
    "--seed",
    "2024",
];

/// 16 workers (8 threads, 8 processes), one snapshot per file.
#[test]
fn sixteen_workers_one_table_every_file_exactly_once() {
    stress("stress16", STRESS_TREE, 16, 0x5EED, 1);
}

/// The same with tree workers committing several files per snapshot (`--files-per-commit 3`)
/// while single-file workers make files late under them.
#[test]
fn sixteen_workers_batched_commits_every_file_exactly_once() {
    stress("stress16_batched", STRESS_TREE, 16, 0xBA7C4, 3);
}

// ---------------------------------------------------------------------------------------------
// Batched commits (`--files-per-commit N`): the minimal cases behind the batched stress failure.

fn small_tree(name: &str, seed: &str, cdc_files: usize) -> (Work, Meta) {
    let w = Work::new(name);
    let n = cdc_files.to_string();
    w.generate(
        "synthetic",
        &[
            "--rows",
            "300",
            "--cdc-files",
            &n,
            "--cdc-rows",
            "120",
            "--seed",
            seed,
        ],
    );
    let meta = w.meta(TABLE);
    (w, meta)
}

/// A redelivered old file in the same batch as a new one (an SQS batch of S3 events, or a
/// re-synced folder): LOAD and change files 1–3 are applied; then `ingest c1 c4
/// --files-per-commit 2`. Expected: c1 skipped, c4 applied, table exact. Deterministic, no
/// concurrency involved.
#[test]
fn batch_with_a_redelivered_old_file_is_exact() {
    let (w, meta) = small_tree("batch_redelivered", "91", 6);
    let p = |i: usize| w.dms().join(&meta.files[i]);
    let (r, _) = ingest_json(&w, &[p(0), p(1), p(2), p(3)], &[], &[]);
    r.assert_success();
    let (r, reps) = ingest_json(&w, &[p(1), p(4)], &["--files-per-commit", "2"], &[]);
    let r = r.assert_success();
    eprintln!(
        "redelivered c1 with new c4 in one batch: {}",
        r.stdout.trim()
    );
    // The rest of the tree, one file per commit, so the final state is comparable.
    ingest_json(&w, &[w.dms()], &[], &[]).0.assert_success();
    w.assert_table(TABLE);
    check_history(&w, TABLE, &meta);
    let f = Figures::of(&reps);
    assert_eq!(f.applied_files, 1, "only c4 is new: {reps:?}");
}

/// The same DMS file under two roots in one run with `--files-per-commit 3`: it must be applied
/// once, recorded once.
#[test]
fn batch_with_the_same_file_under_two_roots_is_applied_once() {
    let (w, meta) = small_tree("batch_two_roots", "92", 6);
    let copy = w.dir.join("copy");
    make_feed(&w, &copy, &[meta.files[1].clone(), meta.files[3].clone()]);
    let (r, reps) = ingest_json(&w, &[w.dms(), copy], &["--files-per-commit", "3"], &[]);
    r.assert_success();
    check_history(&w, TABLE, &meta);
    w.assert_table(TABLE);
    let by = applied_by_reports(&reps);
    assert!(
        by.values().all(|c| *c == 1),
        "a file reported applied twice: {by:?}"
    );
}

/// A batching ingest forms its batches when it starts; a single-file ingest of the newest file
/// lands while it runs. Every batch after that is older than the table's watermark and must be
/// re-merged (or split), not committed on top of the newer file.
#[test]
fn batch_planned_before_a_concurrent_later_file_is_exact() {
    let mut failures = Vec::new();
    for (round, seed) in ["93", "94", "95"].into_iter().enumerate() {
        let (w, meta) = small_tree(&format!("batch_concurrent_{round}"), seed, 40);
        let last = w.dms().join(meta.files.last().unwrap());
        let mut a = Streaming::spawn(&w, &[w.dms()], &["--files-per-commit", "3"]);
        assert!(
            a.wait_for_reports(1, std::time::Duration::from_secs(60)),
            "the batching ingest printed no report"
        );
        let (rb, _) = ingest_json(&w, &[last], &[], &[]);
        rb.assert_success();
        a.finish().assert_success();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.assert_table(TABLE);
            check_history(&w, TABLE, &meta);
        }));
        if let Err(e) = result {
            failures.push(format!(
                "round {round}: {}",
                e.downcast_ref::<String>().cloned().unwrap_or_default()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Late files under concurrency: two processes, different files of one table.

fn late_round(
    name: &str,
    seed: &str,
    start: &str,
    second_files: impl Fn(&[String]) -> Vec<String>,
) -> (Figures, Figures) {
    let w = Work::new(name);
    w.generate(
        "synthetic",
        &[
            "--rows",
            "1500",
            "--cdc-files",
            "30",
            "--cdc-rows",
            "100",
            "--change-seq-column",
            "AR_H_CHANGE_SEQ",
            "--shuffle-rows",
            "--before-image",
            "--pk-update-ratio",
            "0.15",
            "--seed",
            seed,
        ],
    );
    let meta = w.meta(TABLE);
    let full = make_feed(&w, &w.dir.join("full"), &meta.files);
    drop(full);
    let subset = second_files(&meta.files);
    make_feed(&w, &w.dir.join("subset"), &subset);
    let full_root = vec![w.dir.join("full")];
    let sub_root = vec![w.dir.join("subset")];
    let (r_full, r_sub) = match start {
        // The subset first: its files are applied before the full tree's older ones.
        "subset-first" => {
            let mut s = Streaming::spawn(&w, &sub_root, &[]);
            assert!(
                s.wait_for_reports(1, std::time::Duration::from_secs(60)),
                "the subset ingest printed no report"
            );
            let f = Streaming::spawn(&w, &full_root, &[]);
            (f.finish(), s.finish())
        }
        // The full tree first, the subset after its first commits: both run together.
        "full-first" => {
            let mut f = Streaming::spawn(&w, &full_root, &[]);
            assert!(
                f.wait_for_reports(2, std::time::Duration::from_secs(60)),
                "the full ingest printed no report"
            );
            let s = Streaming::spawn(&w, &sub_root, &[]);
            (f.finish(), s.finish())
        }
        _ => {
            let f = Streaming::spawn(&w, &full_root, &[]);
            let s = Streaming::spawn(&w, &sub_root, &[]);
            (f.finish(), s.finish())
        }
    };
    let r_full = r_full.assert_success();
    let r_sub = r_sub.assert_success();
    let rep_full = parse_reports(&r_full);
    let rep_sub = parse_reports(&r_sub);
    let f_full = Figures::of(&rep_full);
    let f_sub = Figures::of(&rep_sub);
    eprintln!(
        "{name} ({start}): subset {:?}; full run: {} applied ({} late), {} skipped; subset run: {} applied ({} late), {} skipped; conflicts {}",
        subset.iter().map(|f| dms_name(f)).collect::<Vec<_>>(),
        f_full.applied_files,
        f_full.late_commits,
        f_full.skipped_files,
        f_sub.applied_files,
        f_sub.late_commits,
        f_sub.skipped_files,
        f_full.conflicts() + f_sub.conflicts(),
    );
    let hist = check_history(&w, TABLE, &meta);
    let ins = inspect(&w, TABLE);
    check_inspection(TABLE, &hist, &ins);
    check_totals(TABLE, &hist, w.expected(TABLE).len());
    assert!(ins.orphans.is_empty(), "orphans: {:?}", ins.orphans);
    let by_reports = applied_by_reports(rep_full.iter().chain(&rep_sub));
    assert!(
        by_reports.values().all(|c| *c == 1) && by_reports.len() == meta.files.len(),
        "each file must be reported applied exactly once: {by_reports:?}"
    );
    w.assert_table(TABLE);
    (f_full, f_sub)
}

/// One process has the whole tree, another only later change files plus an older one; they run
/// together in three arrangements. Whatever interleaving happens, files older than applied ones
/// are re-merged and the table ends at the expected state, each file applied once.
#[test]
fn two_processes_different_files_late_files_remerged() {
    let pick = |files: &[String]| -> Vec<String> {
        let n = files.len();
        // three late change files and one from the middle
        vec![
            files[n - 3].clone(),
            files[n - 2].clone(),
            files[n - 1].clone(),
            files[n / 2].clone(),
        ]
    };
    let pick2 = |files: &[String]| -> Vec<String> {
        let n = files.len();
        vec![files[n - 1].clone(), files[n - 5].clone(), files[3].clone()]
    };
    let mut late = 0;
    for (i, (start, seed)) in [
        ("subset-first", "71"),
        ("together", "72"),
        ("full-first", "73"),
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = if i == 1 {
            late_round(&format!("late_conc_{i}"), seed, start, pick2)
        } else {
            late_round(&format!("late_conc_{i}"), seed, start, pick)
        };
        late += a.late_commits + b.late_commits;
    }
    // The arrangement "subset first" makes the full tree's older files late for certain.
    assert!(
        late > 0,
        "no file was late: the test did not exercise re-merging"
    );
}
