//! Faults of both kinds, as AWS produces them, on everything a table's commits touch: 10% of
//! the requests to the warehouse bucket and to Glue's table actions fail, half before taking
//! effect (503 SlowDown, ThrottlingException) and half after (the change made, the answer lost
//! as a 500: what a timeout or a dropped connection does). The emulator decides each fault from
//! a seed (`tests/support/moto_server.py`, "Fault injection"), so a failing seed replays.
//!
//! One scenario per seed, three tables of DMS files:
//! 1. Under faults, two ingest functions at once take SQS batches of S3 notifications, and the
//!    CLI applies one of the tables from its local copy at the same time. A message whose
//!    record fails is delivered again (as SQS does after the visibility timeout), up to the
//!    queue's receive count; then it waits in the dead-letter queue.
//! 2. Without faults, the dead-letter queue is redriven: every record succeeds, every table
//!    equals its source, and every DMS file was applied exactly once.
//! 3. Under faults again, the compaction function compacts, expires snapshots and removes
//!    orphans, pass after pass; then one pass without faults.
//!
//! At the end every table equals its source in our scan, PyIceberg and DuckDB; `verify --read`
//! finds every file of every snapshot and reads each; and every file in a table's folder that
//! its metadata does not reference is one `orphans` finds.
//!
//! Seeds: `DMS2ICEBERG_FAULT_SEEDS=7,8` (default three). The seed of a failing scenario is
//! printed with the command that replays it.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use serde_json::{Value, json};

use crate::common::{assert_rows, python, support};
use crate::lambda_support::{
    DB, Function, Lab, Outcome, Rng, WAREHOUSE, scheduled_event, sqs_event, sqs_record, tail,
};

/// Share of the requests in scope that fail.
const RATE: f64 = 0.10;
/// Receives before a message goes to the dead-letter queue (the template's default
/// `QueueMaxReceiveCount`).
const MAX_RECEIVES: u32 = 5;
/// Messages per invocation (an SQS batch).
const BATCH: usize = 4;

/// dmsgen's table, how it is generated, and whether the CLI applies it too.
struct Source {
    table: &'static str,
    scenario: &'static str,
    args: String,
    cli: bool,
}

fn sources(seed: u64) -> Vec<Source> {
    vec![
        Source {
            table: "shop.orders",
            scenario: "synthetic",
            args: format!(
                "--schema shop --table orders --rows 160 --cdc-files 8 --cdc-rows 30 \
                 --before-image --pk-update-ratio 0.1 --seed {seed}"
            ),
            cli: false,
        },
        Source {
            table: "shop.items",
            scenario: "synthetic",
            args: format!(
                "--format parquet --schema shop --table items --rows 120 --cdc-files 8 \
                 --cdc-rows 25 --seed {}",
                seed + 1000
            ),
            cli: true,
        },
        Source {
            table: "sales.product",
            scenario: "product",
            args: "--format parquet".into(),
            cli: false,
        },
    ]
}

fn seeds() -> Vec<u64> {
    match std::env::var("DMS2ICEBERG_FAULT_SEEDS") {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|x| x.trim().parse().expect("DMS2ICEBERG_FAULT_SEEDS: numbers"))
            .collect(),
        _ => vec![11, 23, 37],
    }
}

/// One SQS message: its record, and how often it was received.
#[derive(Clone)]
struct Message {
    id: String,
    record: Value,
    key: String,
    receives: u32,
}

/// What the scenario counted, for the figures in bench/RESULTS.md and the closing note.
#[derive(Debug, Default)]
struct Tally {
    invocations: usize,
    invocations_failed: usize,
    records_failed: usize,
    redeliveries: usize,
    dead_lettered: usize,
    cli_runs: usize,
    cli_failed: usize,
    compaction_passes: usize,
    tables_failed_in_compaction: usize,
}

#[test]
fn functions_and_cli_under_faults_end_exact() {
    python();
    for seed in seeds() {
        let started = Instant::now();
        let r = std::panic::catch_unwind(|| scenario(seed));
        if let Err(e) = r {
            eprintln!(
                "fault scenario failed for seed {seed}; replay it with \
                 DMS2ICEBERG_FAULT_SEEDS={seed} cargo test --features dms2iceberg-cli/e2e \
                 --test aws faults:: -- --nocapture"
            );
            std::panic::resume_unwind(e);
        }
        eprintln!(
            "fault-measure: seed {seed} done in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
}

fn set_faults(lab: &Lab, rate: f64, seed: u64) {
    lab.moto.configure(
        &json!({"faults": {"rate": rate, "seed": seed, "after_share": 0.5,
            "buckets": ["warehouse"], "services": ["s3", "glue"]}}),
    );
}

/// The emulator's fault counters: (before, after, by kind).
fn faults(lab: &Lab) -> (i64, i64, BTreeMap<String, i64>) {
    let f = lab.moto.stats()["faults"].clone();
    let by = f["by"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_i64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    (
        f["before"].as_i64().unwrap_or(0),
        f["after"].as_i64().unwrap_or(0),
        by,
    )
}

fn scenario(seed: u64) {
    let t0 = Instant::now();
    let phase = |what: &str| {
        eprintln!(
            "fault-measure: seed {seed}: {what} at {:.1} s",
            t0.elapsed().as_secs_f64()
        )
    };
    let lab = Lab::new(&format!("faults-{seed}"));
    let sources = sources(seed);
    for s in &sources {
        let a: Vec<&str> = s.args.split_whitespace().collect();
        lab.generate(s.scenario, &a);
    }
    lab.upload_config(&[]);
    let mut tally = Tally::default();

    // Every DMS file lands in the landing bucket (not faulted: DMS wrote it), one message each.
    let mut queue: VecDeque<Message> = VecDeque::new();
    let mut rng = Rng::new(seed);
    for s in &sources {
        for key in &lab.work.meta(s.table).files {
            lab.upload(key);
            let (id, record) = sqs_record(&lab.s3_event(key).to_string());
            queue.push_back(Message {
                id,
                record,
                key: key.clone(),
                receives: 0,
            });
        }
    }
    let mut shuffled: Vec<Message> = queue.drain(..).collect();
    // Late and early events, as S3 delivers them: order within a batch does not matter.
    rng.shuffle(&mut shuffled[..]);
    queue.extend(shuffled);

    // The CLI applies the table it shares with the functions from its own copy, into the same
    // Glue table (`--database`, as the functions' DMS2ICEBERG_GLUE_DATABASE), with their config.
    let cli_config = lab.work.dir.join("cli-config.toml");
    std::fs::write(&cli_config, lab.config_text(&[])).unwrap();
    let cli_folders: Vec<String> = sources
        .iter()
        .filter(|s| s.cli)
        .map(|s| {
            let (schema, table) = s.table.split_once('.').unwrap();
            lab.work
                .dir
                .join("dms")
                .join(&lab.folder)
                .join(schema)
                .join(table)
                .display()
                .to_string()
        })
        .collect();
    let mut cli_done = cli_folders.is_empty();

    phase("generated and uploaded");
    // 1. Under faults: two functions and the CLI at once, SQS redelivery, a dead-letter queue.
    set_faults(&lab, RATE, seed);
    // A few files per invocation: a backlog goes on through SQS redelivery, as on AWS.
    let cap = [("DMS2ICEBERG_MAX_FILES_PER_INVOCATION", "3")];
    let mut a = Function::start(&lab, "ingest-a", &cap);
    let mut b = Function::start(&lab, "ingest-b", &cap);
    let mut dead: Vec<Message> = Vec::new();
    let mut round = 0;
    while !queue.is_empty() || !cli_done {
        round += 1;
        assert!(round < 200, "seed {seed}: no end to the redeliveries");
        let take = |q: &mut VecDeque<Message>| -> Vec<Message> {
            (0..BATCH).filter_map(|_| q.pop_front()).collect()
        };
        let (ba, bb) = (take(&mut queue), take(&mut queue));
        let run_cli = !cli_done;
        let (oa, ob, cli) = std::thread::scope(|s| {
            let ha = (!ba.is_empty()).then(|| {
                let ev = sqs_event(&ba.iter().map(|m| m.record.clone()).collect::<Vec<_>>());
                let a = &mut a;
                s.spawn(move || a.invoke(&ev))
            });
            let hb = (!bb.is_empty()).then(|| {
                let ev = sqs_event(&bb.iter().map(|m| m.record.clone()).collect::<Vec<_>>());
                let b = &mut b;
                s.spawn(move || b.invoke(&ev))
            });
            let hc = run_cli.then(|| {
                let (lab, cfg, folders) = (&lab, &cli_config, &cli_folders);
                s.spawn(move || {
                    let mut args = vec![
                        "ingest".to_string(),
                        "--catalog".into(),
                        "glue".into(),
                        "--warehouse".into(),
                        WAREHOUSE.into(),
                        "--config".into(),
                        cfg.display().to_string(),
                        "--database".into(),
                        DB.into(),
                    ];
                    args.extend(folders.iter().cloned());
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    lab.cli(&args)
                })
            });
            (
                ha.map(|h| h.join().unwrap()),
                hb.map(|h| h.join().unwrap()),
                hc.map(|h| h.join().unwrap()),
            )
        });
        if let Some(run) = cli {
            tally.cli_runs += 1;
            if run.status.success() {
                cli_done = true;
            } else {
                tally.cli_failed += 1;
                assert!(
                    tally.cli_runs < 12,
                    "seed {seed}: the CLI failed {} times under faults; last:\n{}",
                    tally.cli_failed,
                    tail(&run.stderr, 4000)
                );
            }
        }
        for (batch, outcome, f) in [(ba, oa, &a), (bb, ob, &b)] {
            let Some(outcome) = outcome else { continue };
            tally.invocations += 1;
            let failed = failed_ids(&outcome, &batch, &mut tally);
            for mut m in batch {
                if !failed.contains(&m.id) {
                    continue;
                }
                m.receives += 1;
                if m.receives >= MAX_RECEIVES {
                    tally.dead_lettered += 1;
                    eprintln!(
                        "fault-measure: seed {seed}: {} dead-lettered after {} receives ({})",
                        m.key,
                        m.receives,
                        last_failure(f, &m.id)
                    );
                    dead.push(m);
                } else {
                    tally.redeliveries += 1;
                    queue.push_back(m);
                }
            }
        }
    }
    let (before, after, by) = faults(&lab);
    eprintln!(
        "fault-measure: seed {seed}: ingest under faults: {before} before + {after} after \
         injected; {tally:?}; by kind {by:?}"
    );
    assert!(
        before > 0 && after > 0,
        "seed {seed}: the faults did not happen ({before} before, {after} after)"
    );
    phase("ingested under faults");
    // 2. Without faults: the dead-letter queue redriven; every record succeeds.
    set_faults(&lab, 0.0, seed);
    for chunk in dead.chunks(BATCH) {
        let ev = sqs_event(&chunk.iter().map(|m| m.record.clone()).collect::<Vec<_>>());
        let o = a.invoke_ok(&ev);
        assert!(
            o.batch_item_failures().is_empty(),
            "seed {seed}: the redrive failed: {}\n{}",
            o.body,
            tail(&a.log(), 6000)
        );
    }
    for s in &sources {
        our_scan(&lab, s.table);
        assert_each_file_once(&lab, s.table);
        verify(&lab, s.table);
    }

    phase("redriven and checked");
    // 3. Compaction, expiry and orphans under faults, pass after pass; then one clean pass.
    set_faults(&lab, RATE, seed + 1);
    let env = [
        ("DMS2ICEBERG_COMPACT_SMALL_FILES", "3"),
        ("DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS", "0"),
        ("DMS2ICEBERG_SNAPSHOT_RETAIN_LAST", "3"),
        ("DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS", "0"),
    ];
    let mut compact = Function::start_compact(&lab, "compact", &env);
    for _ in 0..2 {
        let o = compact.invoke(&scheduled_event());
        tally.compaction_passes += 1;
        count_compaction(&o, &mut tally);
    }
    let (before2, after2, _) = faults(&lab);
    set_faults(&lab, 0.0, seed);
    let clean = compact.invoke_ok(&scheduled_event());
    let errors: Vec<&Value> = clean
        .body
        .as_array()
        .unwrap_or_else(|| panic!("compaction answer: {}", clean.body))
        .iter()
        .filter(|t| !t["error"].is_null())
        .collect();
    assert!(
        errors.is_empty(),
        "seed {seed}: a clean compaction pass failed: {errors:?}\n{}",
        tail(&compact.log(), 6000)
    );
    eprintln!(
        "fault-measure: seed {seed}: compaction under faults: {} before + {} after injected; {tally:?}",
        before2 - before,
        after2 - after
    );
    phase("compacted");
    std::thread::scope(|scope| {
        for s in &sources {
            let lab = &lab;
            scope.spawn(move || {
                our_scan(lab, s.table);
                other_readers(lab, s.table);
            });
        }
    });
    let tables: Vec<&str> = sources.iter().map(|s| s.table).collect();
    nothing_orphans_would_miss(&lab, &tables);
    phase("checked");
}

/// The ids of `batch` whose records failed: the batch item failures of a response, every
/// message of a failed invocation.
fn failed_ids(outcome: &Outcome, batch: &[Message], tally: &mut Tally) -> Vec<String> {
    if outcome.is_response() {
        let f = outcome.batch_item_failures();
        tally.records_failed += f.len();
        f
    } else {
        tally.invocations_failed += 1;
        tally.records_failed += batch.len();
        batch.iter().map(|m| m.id.clone()).collect()
    }
}

/// The reason the function logged for the last failure of a message (its `record failed`
/// line).
fn last_failure(f: &Function, message_id: &str) -> String {
    f.log()
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            v["fields"]["message"] == "record failed"
                && v["fields"]["record"]
                    .as_str()
                    .is_some_and(|r| r.contains(message_id))
        })
        .and_then(|v| v["fields"]["reason"].as_str().map(str::to_string))
        .unwrap_or_else(|| "the invocation failed".into())
}

fn count_compaction(o: &Outcome, tally: &mut Tally) {
    if !o.is_response() {
        tally.tables_failed_in_compaction += 1;
        return;
    }
    tally.tables_failed_in_compaction += o
        .body
        .as_array()
        .map_or(0, |ts| ts.iter().filter(|t| !t["error"].is_null()).count());
}

/// Every DMS file of `table` is recorded by exactly one snapshot (the CLI records local paths,
/// the functions object keys: compared by file name).
fn assert_each_file_once(lab: &Lab, table: &str) {
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let base = |f: &str| f.rsplit('/').next().unwrap().to_string();
    let mut applied: Vec<String> = lab.applied_files(&name).iter().map(|f| base(f)).collect();
    applied.sort();
    let mut want: Vec<String> = meta.files.iter().map(|f| base(f)).collect();
    want.sort();
    assert_eq!(applied, want, "{name}: each DMS file applied exactly once");
}

/// Our scan (the CLI on Glue) equals the source's final state.
fn our_scan(lab: &Lab, table: &str) {
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let actual = lab.scan(&name);
    assert_rows(
        &format!("scan {name}"),
        &meta,
        &lab.work.expected(table),
        &actual,
    );
}

/// PyIceberg (Glue catalog) and DuckDB's iceberg_scan (on the metadata Glue names) equal the
/// source's final state: one interpreter for both.
fn other_readers(lab: &Lab, table: &str) {
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let expected = lab
        .work
        .write_jsonl(&format!("{name}.expected.jsonl"), &lab.work.expected(table));
    let out = std::process::Command::new(python())
        .arg(support("moto_server.py"))
        .args(["check-table", "--duckdb", "--endpoint"])
        .arg(lab.moto.endpoint())
        .args(["--table", &name, "--expected"])
        .arg(&expected)
        .arg("--meta")
        .arg(lab.work.meta_path(table))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("HOME", &lab.work.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: PyIceberg or DuckDB disagree:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `verify --read`: every snapshot's files exist and every snapshot reads.
fn verify(lab: &Lab, table: &str) {
    let name = lab.glue_name(&lab.work.meta(table));
    let r = lab.cli(&[
        "verify",
        &name,
        "--read",
        "--catalog",
        "glue",
        "--warehouse",
        WAREHOUSE,
    ]);
    assert!(
        r.status.success(),
        "{name}: verify found problems:\n{}\n{}",
        r.stdout,
        r.stderr
    );
}

/// `TABLE<TAB>path` of every file in the tables' folders that their metadata does not
/// reference (PyIceberg's reading of it).
fn unreferenced(lab: &Lab, names: &[String]) -> Vec<(String, String)> {
    let mut cmd = std::process::Command::new(python());
    cmd.arg(support("moto_server.py"))
        .args(["unreferenced", "--endpoint"])
        .arg(lab.moto.endpoint());
    for n in names {
        cmd.args(["--table", n]);
    }
    let out = cmd
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("HOME", &lab.work.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(t, p)| (t.to_string(), p.to_string()))
        .collect()
}

/// Every file in a table's folder that its metadata does not reference is one `orphans` lists
/// (or metadata newer than the current, which it keeps as a commit in flight); after
/// `orphans --delete` nothing unreferenced is left but such metadata, and the tables still
/// verify.
fn nothing_orphans_would_miss(lab: &Lab, tables: &[&str]) {
    let names: Vec<String> = tables
        .iter()
        .map(|t| lab.glue_name(&lab.work.meta(t)))
        .collect();
    let version =
        |p: &str| -> Option<u64> { p.rsplit('/').next()?.split_once('-')?.0.parse().ok() };
    let current: BTreeMap<&str, Option<u64>> = names
        .iter()
        .map(|n| {
            let g = lab.moto.glue_table(DB, n.rsplit('.').next().unwrap());
            (
                n.as_str(),
                version(g["Parameters"]["metadata_location"].as_str().unwrap()),
            )
        })
        .collect();
    let kept_by_rule = |t: &str, p: &str| p.ends_with(".metadata.json") && version(p) > current[t];
    let orphans = |name: &str, delete: bool| {
        let mut args = vec![
            "orphans",
            name,
            "--min-age-hours",
            "0",
            "--format",
            "json",
            "--catalog",
            "glue",
            "--warehouse",
            WAREHOUSE,
        ];
        if delete {
            args.push("--delete");
        }
        let r = lab.cli(&args);
        assert!(r.status.success(), "{}", r.describe());
        let report: Value = serde_json::from_str(r.stdout.trim()).unwrap();
        report["orphans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["path"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let found: Vec<String> = names.iter().flat_map(|n| orphans(n, false)).collect();
    let missed: Vec<(String, String)> = unreferenced(lab, &names)
        .into_iter()
        .filter(|(t, p)| !found.contains(p) && !kept_by_rule(t, p))
        .collect();
    assert!(
        missed.is_empty(),
        "files their metadata does not reference that `orphans` does not find: {missed:?}"
    );
    for n in &names {
        orphans(n, true);
    }
    let left: Vec<(String, String)> = unreferenced(lab, &names)
        .into_iter()
        .filter(|(t, p)| !kept_by_rule(t, p))
        .collect();
    assert!(left.is_empty(), "left after orphans: {left:?}");
    for t in tables {
        verify(lab, t);
    }
}

/// Which catalog an answers-lost scenario commits to.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Glue,
    S3Tables,
}

/// Every catalog update takes effect and loses its answer (a 500 after the change: Glue
/// `UpdateTable`/`CreateTable`, S3 Tables `UpdateTableMetadataLocation`), deterministically:
/// every commit of the ingest function and of the compaction function is one whose outcome is
/// unknown, found landed by looking. Nothing is deleted that the catalog names; every file is
/// applied once; the tables end exact.
#[test]
fn every_commit_answer_lost_on_glue_ends_exact() {
    answers_lost(Kind::Glue);
}

#[test]
fn every_commit_answer_lost_on_s3_tables_ends_exact() {
    answers_lost(Kind::S3Tables);
}

fn answers_lost(kind: Kind) {
    python();
    let lab = Lab::new(&format!("answers-lost-{kind:?}").to_lowercase());
    lab.generate(
        "synthetic",
        &"--schema shop --table orders --rows 120 --cdc-files 5 --cdc-rows 25 --before-image --pk-update-ratio 0.1 --seed 5"
            .split_whitespace()
            .collect::<Vec<_>>(),
    );
    lab.upload_config(&[]);
    let table = "shop.orders";
    let meta = lab.work.meta(table);
    let arn = match kind {
        Kind::S3Tables => Some(lab.moto.create_table_bucket("lost-answers")),
        Kind::Glue => None,
    };
    let env: Vec<(&str, &str)> = match &arn {
        Some(arn) => vec![
            ("DMS2ICEBERG_CATALOG", "s3tables"),
            ("DMS2ICEBERG_TABLE_BUCKET_ARN", arn.as_str()),
        ],
        None => vec![],
    };
    let (service, actions) = match kind {
        Kind::Glue => ("glue", json!(["UpdateTable", "CreateTable"])),
        Kind::S3Tables => ("s3tables", json!(["UpdateTableMetadataLocation"])),
    };
    lab.moto.configure(
        &json!({"faults": {"rate": 1.0, "seed": 1, "after_share": 1.0,
            "services": [service], "actions": actions}}),
    );

    let mut f = Function::start(&lab, "ingest", &env);
    for key in &meta.files {
        lab.upload(key);
        let (_, record) = sqs_record(&lab.s3_event(key).to_string());
        let o = f.invoke_ok(&sqs_event(&[record]));
        assert!(
            o.batch_item_failures().is_empty(),
            "{key}: {}\n{}",
            o.body,
            tail(&f.log(), 6000)
        );
    }
    let (_, after, by) = faults(&lab);
    assert!(
        after >= meta.files.len() as i64,
        "every commit's answer should have been lost: {after} after-faults for {} files ({by:?})",
        meta.files.len()
    );
    assert!(
        f.log().contains("an attempt of unknown outcome had landed"),
        "{}",
        tail(&f.log(), 4000)
    );
    match &arn {
        Some(arn) => {
            lab.assert_s3tables_rows(arn, table, &lab.work.expected(table), "answers-lost");
        }
        None => {
            our_scan(&lab, table);
            other_readers(&lab, table);
            assert_each_file_once(&lab, table);
            verify(&lab, table);
            // Compaction, expiry and orphans with every commit's answer lost too.
            let mut c = Function::start_compact(
                &lab,
                "compact",
                &[
                    ("DMS2ICEBERG_COMPACT_SMALL_FILES", "2"),
                    ("DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS", "0"),
                    ("DMS2ICEBERG_SNAPSHOT_RETAIN_LAST", "2"),
                    ("DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS", "0"),
                ],
            );
            let o = c.invoke_ok(&scheduled_event());
            let t = &o.body.as_array().unwrap()[0];
            assert!(t["error"].is_null(), "{}\n{}", o.body, tail(&c.log(), 6000));
            assert!(
                t["compaction"]["data_files_after"].as_u64()
                    < t["compaction"]["data_files_before"].as_u64(),
                "{}",
                o.body
            );
            assert!(t["snapshots_expired"].as_u64() > Some(0), "{}", o.body);
            our_scan(&lab, table);
            other_readers(&lab, table);
            verify(&lab, table);
        }
    }
}

/// A table damaged as the defect damaged tables before commits looked at unknown outcomes:
/// the catalog names a metadata file that was deleted. The ingest function fails its records
/// with `TableDamaged` and a message naming the repair; the compaction function's next pass
/// repairs it; the redelivered records apply what the lost commit had applied, and the table
/// ends exact.
#[test]
fn a_damaged_table_is_repaired_by_the_compaction_function() {
    python();
    let lab = Lab::new("damaged");
    lab.generate(
        "synthetic",
        &"--schema shop --table orders --rows 100 --cdc-files 4 --cdc-rows 20 --seed 9"
            .split_whitespace()
            .collect::<Vec<_>>(),
    );
    lab.upload_config(&[]);
    let table = "shop.orders";
    let meta = lab.work.meta(table);
    let name = lab.glue_name(&meta);
    let mut f = Function::start(&lab, "ingest", &[]);
    let (applied, last) = meta.files.split_at(meta.files.len() - 1);
    for key in applied {
        lab.upload(key);
        f.invoke_ok(&lab.s3_event(key));
    }
    // The damage: the current metadata.json deleted while Glue names it.
    let glue = lab.moto.glue_table(DB, name.rsplit('.').next().unwrap());
    let location = glue["Parameters"]["metadata_location"]
        .as_str()
        .unwrap()
        .to_string();
    let (bucket, key) = location
        .trim_start_matches("s3://")
        .split_once('/')
        .unwrap();
    lab.moto.delete(bucket, key);
    // A new execution environment (a warm one remembers the metadata it wrote and never
    // reads it back).
    drop(f);
    let mut f = Function::start(&lab, "ingest-cold", &[]);

    // The next file's record fails, naming the damage and the repair.
    lab.upload(&last[0]);
    let (id, record) = sqs_record(&lab.s3_event(&last[0]).to_string());
    let o = f.invoke_ok(&sqs_event(std::slice::from_ref(&record)));
    assert_eq!(o.batch_item_failures(), vec![id.clone()], "{}", o.body);
    let reason = last_failure(&f, &id);
    assert!(
        reason.contains("is damaged") && reason.contains("repair"),
        "{reason}"
    );
    assert!(
        f.log().contains("\"kind\":\"TableDamaged\""),
        "{}",
        tail(&f.log(), 3000)
    );

    // The compaction function's pass repairs it.
    let mut c = Function::start_compact(&lab, "compact", &[]);
    let o = c.invoke_ok(&scheduled_event());
    let t = &o.body.as_array().unwrap()[0];
    assert!(t["error"].is_null(), "{}\n{}", o.body, tail(&c.log(), 4000));
    assert!(
        t["repaired"]
            .as_str()
            .is_some_and(|r| r.ends_with(".metadata.json")),
        "{}",
        o.body
    );
    assert!(
        c.log().contains("\"TablesRepaired\""),
        "{}",
        tail(&c.log(), 3000)
    );
    verify(&lab, table);

    // Redelivered: the lost commit's file and the new one apply, in order, once each.
    let o = f.invoke_ok(&sqs_event(&[record]));
    assert!(o.batch_item_failures().is_empty(), "{}", o.body);
    our_scan(&lab, table);
    other_readers(&lab, table);
    assert_each_file_once(&lab, table);
    verify(&lab, table);
}

/// The same faults on an Iceberg REST catalog (rustberg behind `tests/support/fault_proxy.py`):
/// 10% of the requests that change the catalog fail, half before the server sees them (503),
/// half after it applied them (the answer lost as a 500). Two CLI processes apply the same DMS
/// tree at once, each retried until it succeeds; then compaction and expiry, under the same
/// faults. Every file applied once, the table exact in our scan, PyIceberg and DuckDB.
#[test]
fn cli_on_a_rest_catalog_under_faults_ends_exact() {
    rest_under_faults(RATE, 0.5, 41);
}

/// A fifth of the requests that change the catalog applied with their answers lost, none
/// refused: what the REST path did before this test existed, now kept so.
#[test]
fn cli_on_a_rest_catalog_losing_a_fifth_of_its_answers_ends_exact() {
    rest_under_faults(0.2, 1.0, 43);
}

fn rest_under_faults(rate: f64, after_share: f64, seed: u64) {
    use crate::common::rest::Rustberg;
    use crate::common::{Run, Work};
    use crate::lambda_support::Proc;
    python();
    let table = "shop.orders";
    let w = Work::new(&format!("rest-faults-{seed}"));
    let spec = format!(
        "--rows 150 --cdc-files 10 --cdc-rows 30 --before-image --pk-update-ratio 0.1 --seed {seed}"
    );
    w.generate("synthetic", &spec.split_whitespace().collect::<Vec<_>>());
    let server = Rustberg::start(&w);
    let port_file = w.dir.join("fault_proxy.port");
    let mut cmd = std::process::Command::new(python());
    cmd.arg(support("fault_proxy.py"))
        .args(["serve", "--quiet", "--upstream", &server.uri, "--port-file"])
        .arg(&port_file)
        .args(["--rate", &rate.to_string(), "--seed", &seed.to_string()])
        .args(["--after-share", &after_share.to_string()]);
    let mut proxy = Proc::spawn("fault_proxy.py", cmd, w.dir.join("fault_proxy.log"));
    let port = proxy.wait_port(&port_file, std::time::Duration::from_secs(30));
    let uri = format!("http://127.0.0.1:{port}");
    // The CLI through the proxy, with the server's token; retried as an operator or a
    // scheduler would, until it succeeds.
    let through_proxy = |args: &[&str]| -> (Run, usize) {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut c = std::process::Command::new(crate::common::bin());
            c.args(["--catalog", "rest", "--uri", &uri]).args(args);
            for (k, v) in server.env() {
                c.env(k, v);
            }
            let out = c.output().unwrap();
            let run = Run {
                cmd: format!("dms2iceberg {}", args.join(" ")),
                status: out.status,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
            if run.status.success() {
                return (run, tries);
            }
            assert!(
                tries < 10,
                "failed {tries} times under faults:\n{}",
                run.describe()
            );
        }
    };
    let config = w.config().display().to_string();
    let dms = w.dms().display().to_string();
    let ingest = ["ingest", dms.as_str(), "--config", config.as_str()];
    let (ta, tb) = std::thread::scope(|s| {
        let a = s.spawn(|| through_proxy(&ingest).1);
        let b = s.spawn(|| through_proxy(&ingest).1);
        (a.join().unwrap(), b.join().unwrap())
    });
    // Each DMS file recorded by exactly one snapshot (before expiry drops snapshots).
    let history = server
        .cli(&["history", table, "--format", "json"])
        .assert_success();
    let mut applied: Vec<String> = crate::common::parse_json_lines(&history.stdout, "history")
        .iter()
        .flat_map(|s| s["source_files"].as_array().cloned().unwrap_or_default())
        .map(|f| f.as_str().unwrap().rsplit('/').next().unwrap().to_string())
        .collect();
    applied.sort();
    let mut want: Vec<String> = w
        .meta(table)
        .files
        .iter()
        .map(|f| f.rsplit('/').next().unwrap().to_string())
        .collect();
    want.sort();
    assert_eq!(applied, want, "each DMS file applied exactly once");
    let (_, tc) = through_proxy(&["compact", table, "--target-file-size", "1048576"]);
    let (_, te) = through_proxy(&[
        "expire",
        table,
        "--older-than-hours",
        "0",
        "--retain-last",
        "3",
    ]);
    let stats = crate::lambda_support::http(
        port,
        "GET",
        "/_faults/stats",
        &[],
        b"",
        std::time::Duration::from_secs(10),
    )
    .unwrap()
    .json();
    eprintln!(
        "fault-measure: rest (rate {rate}, after share {after_share}): {} before + {} after \
         injected of {} requests; runs until success: ingest {ta} and {tb}, compact {tc}, \
         expire {te}; by kind {}",
        stats["before"], stats["after"], stats["requests"], stats["by"]
    );
    assert!(stats["after"].as_i64() > Some(0), "{stats}");
    assert!(
        after_share == 1.0 || stats["before"].as_i64() > Some(0),
        "{stats}"
    );
    proxy.assert_running();
    // Read without the proxy: the server's own answers.
    server.assert_table(&w, table, &w.expected(table));
    let r = server.cli(&["verify", table, "--read"]).assert_success();
    assert!(r.stdout.contains(": ok:"), "{}", r.describe());
}
