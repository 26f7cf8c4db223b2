//! Helpers for the concurrency, crash and compaction tests (`stress`, `crash`, `compact` in
//! tests/e2e/).
//!
//! Included next to `common` (tests/e2e/main.rs: `#[path = "../common/stress.rs"] mod
//! stress_support;`):
//! - feeds: copies of generated DMS files under per-worker roots (`<root>/<schema>/<table>/…`;
//!   a file's identity is its DMS name, so copies under different roots are the same file);
//! - running the binary with an environment (fault injection) and reading its `--json` reports;
//! - workers: library threads (own catalog handle, own `Ingest`) and CLI processes;
//! - history checks: one parent chain, contiguous sequence numbers, every DMS file recorded in
//!   exactly one snapshot (`source_files` and `dms2iceberg.source-orders`);
//! - an independent inspection of the table folder (PyIceberg's Avro readers, no dms2iceberg
//!   code): which files the metadata log and every snapshot's manifests reference, which files
//!   are orphans, which referenced files are missing.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

// ------------------------------------------------------------------------------------------
// A small deterministic PRNG (the root package has no `rand`): splitmix64.

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Files and feeds

/// The DMS name of a key or path (its last component): what identifies a DMS file.
pub fn dms_name(key: &str) -> String {
    key.rsplit(['/', '\\']).next().unwrap_or(key).to_string()
}

/// Copies `files` (relative to `w.dms()`, e.g. `shop/orders/LOAD00000001.csv`) under `root`,
/// keeping `<schema>/<table>/<name>`. Returns the copied paths in the order given.
pub fn make_feed(w: &Work, root: &Path, files: &[String]) -> Vec<PathBuf> {
    files
        .iter()
        .map(|f| {
            let to = root.join(f);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(w.dms().join(f), &to)
                .unwrap_or_else(|e| panic!("cannot copy {f} to {}: {e}", to.display()));
            to
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// Running the binary with an environment

pub fn command(program: &Path, args: &[OsString], env: &[(&str, &str)]) -> (Command, String) {
    let mut c = Command::new(program);
    c.args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONIOENCODING", "utf-8")
        // Fault injection reaches only the runs that ask for it.
        .env_remove("DMS2ICEBERG_FAILPOINT");
    for (k, v) in env {
        c.env(k, v);
    }
    let text = std::iter::once(program.display().to_string())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    let prefix: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    (c, format!("{prefix}{text}"))
}

/// Runs a program with extra environment variables, capturing everything.
pub fn run_env(program: &Path, args: &[OsString], env: &[(&str, &str)]) -> Run {
    let (mut c, cmd) = command(program, args, env);
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    Run {
        cmd,
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `ingest PATH… --warehouse W --config C --json [extra…]` as arguments.
pub fn ingest_args(w: &Work, paths: &[PathBuf], extra: &[&str]) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["ingest".into()];
    a.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
    a.push("--warehouse".into());
    a.push(w.wh().into_os_string());
    a.push("--config".into());
    a.push(w.config().into_os_string());
    a.push("--json".into());
    a.extend(extra.iter().map(OsString::from));
    a
}

/// Runs `ingest --json` (with `env`); returns the run and its per-commit reports.
pub fn ingest_json(
    w: &Work,
    paths: &[PathBuf],
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Run, Vec<Value>) {
    let r = run_env(&bin(), &ingest_args(w, paths, extra), env);
    let reports = parse_reports(&r);
    (r, reports)
}

/// The `--json` commit reports of a run (lines starting with `{`).
pub fn parse_reports(r: &Run) -> Vec<Value> {
    r.stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "ingest --json printed a bad report ({e}): {l}\n{}",
                    r.describe()
                )
            })
        })
        .collect()
}

/// A running `ingest --json` whose reports can be awaited line by line.
pub struct Streaming {
    pub child: Child,
    pub cmd: String,
    lines: std::sync::mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
    pub seen: Vec<String>,
}

impl Streaming {
    pub fn spawn(w: &Work, paths: &[PathBuf], extra: &[&str]) -> Streaming {
        let (mut c, cmd) = command(&bin(), &ingest_args(w, paths, extra), &[]);
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd}: {e}"));
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Streaming {
            child,
            cmd,
            lines: rx,
            reader: Some(reader),
            seen: vec![],
        }
    }

    /// Waits until the process printed `n` report lines (or ended); true if it did.
    pub fn wait_for_reports(&mut self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => return false,
            }
        }
        true
    }

    pub fn finish(mut self) -> Run {
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut stderr);
        }
        let status = self.child.wait().unwrap();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
        let mut stdout = self.seen.join("\n");
        stdout.push('\n');
        Run {
            cmd: self.cmd.clone(),
            status,
            stdout,
            stderr,
        }
    }
}

// ------------------------------------------------------------------------------------------
// Workers

/// What a worker is given.
#[derive(Debug, Clone)]
pub enum Feed {
    /// One ingest of these roots (a tree each), `files_per_commit` per snapshot.
    Tree {
        roots: Vec<PathBuf>,
        files_per_commit: usize,
    },
    /// One ingest per file, in this order (S3 events: unordered, at least once).
    Events { files: Vec<PathBuf>, warm: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A thread of the test process: its own `SqliteCatalog::open` and `Ingest`.
    Thread,
    /// `dms2iceberg ingest` processes.
    Process,
}

#[derive(Debug, Clone)]
pub struct Worker {
    pub name: String,
    pub kind: Kind,
    pub feed: Feed,
    /// Processes only: `DMS2ICEBERG_FAILPOINT` for the n-th run (none where absent).
    pub faults: Vec<Option<String>>,
}

#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub name: String,
    pub reports: Vec<Value>,
    pub errors: Vec<String>,
    /// Runs that failed at the failpoint they were given.
    pub crashes: Vec<String>,
    /// Runs that gave up on contention ("the table kept changing concurrently") and were run
    /// again (a queue redelivers them).
    pub gave_up: Vec<String>,
    pub runs: usize,
}

/// How often a run that gave up on contention is delivered again.
pub const MAX_REDELIVERIES: usize = 5;

/// The ingest's documented give-up under contention: "the input was not applied and can be
/// retried" (commit retries or replans exhausted).
pub fn is_give_up(message: &str) -> bool {
    message.contains("kept changing concurrently")
        || message.contains("too many concurrent commits")
}

fn give_up_line(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.starts_with("error:") && is_give_up(l))
        .unwrap_or("gave up")
        .to_string()
}

/// Runs every worker at once (released together by a barrier); returns their outcomes and the
/// wall time from the release to the last worker's end.
pub fn run_workers(w: &Work, workers: Vec<Worker>) -> (Vec<Outcome>, Duration) {
    let barrier = Arc::new(Barrier::new(workers.len() + 1));
    let mut handles = Vec::new();
    for wk in workers {
        let barrier = barrier.clone();
        let wh = w.wh();
        let config = w.config();
        let args_of = {
            let wh = wh.clone();
            let config = config.clone();
            move |paths: &[PathBuf], extra: &[String]| -> Vec<OsString> {
                let mut a: Vec<OsString> = vec!["ingest".into()];
                a.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
                a.extend(["--warehouse".into(), wh.clone().into_os_string()]);
                a.extend(["--config".into(), config.clone().into_os_string()]);
                a.push("--json".into());
                a.extend(extra.iter().map(OsString::from));
                a
            }
        };
        handles.push(std::thread::spawn(move || match wk.kind {
            Kind::Thread => library_worker(&wk, &wh, &config, &barrier),
            Kind::Process => {
                let mut o = Outcome {
                    name: wk.name.clone(),
                    ..Default::default()
                };
                let runs: Vec<(Vec<PathBuf>, Vec<String>)> = match &wk.feed {
                    Feed::Tree {
                        roots,
                        files_per_commit,
                    } => vec![(
                        roots.clone(),
                        vec!["--files-per-commit".into(), files_per_commit.to_string()],
                    )],
                    Feed::Events { files, .. } => {
                        files.iter().map(|f| (vec![f.clone()], vec![])).collect()
                    }
                };
                barrier.wait();
                for (n, (paths, extra)) in runs.into_iter().enumerate() {
                    let fault = wk.faults.get(n).cloned().flatten();
                    let env: Vec<(&str, &str)> = fault
                        .as_deref()
                        .map(|f| ("DMS2ICEBERG_FAILPOINT", f))
                        .into_iter()
                        .collect();
                    let mut r = run_env(&bin(), &args_of(&paths, &extra), &env);
                    o.runs += 1;
                    o.reports.extend(parse_reports(&r));
                    // A documented, retriable give-up: redeliver, as SQS would.
                    let mut tries = 1;
                    while !r.status.success()
                        && fault.is_none()
                        && is_give_up(&r.stderr)
                        && tries < MAX_REDELIVERIES
                    {
                        o.gave_up.push(give_up_line(&r.stderr));
                        r = run_env(&bin(), &args_of(&paths, &extra), &env);
                        o.runs += 1;
                        tries += 1;
                        o.reports.extend(parse_reports(&r));
                    }
                    if !r.status.success() {
                        let at_fault = fault.as_ref().is_some_and(|f| {
                            let point = f.split(':').next().unwrap();
                            r.stderr.contains(&format!("failpoint {point}"))
                                || r.stderr.contains("may or may not have landed")
                        });
                        match fault {
                            Some(f) if at_fault => o.crashes.push(f),
                            _ => o.errors.push(r.describe()),
                        }
                    }
                }
                o
            }
        }));
    }
    barrier.wait();
    let started = Instant::now();
    let outcomes: Vec<Outcome> = handles
        .into_iter()
        .map(|h| h.join().expect("worker thread panicked"))
        .collect();
    (outcomes, started.elapsed())
}

fn library_worker(wk: &Worker, wh: &Path, config: &Path, barrier: &Barrier) -> Outcome {
    use dms2iceberg::catalog::SqliteCatalog;
    use dms2iceberg::config::Config;
    use dms2iceberg::ops::discover::discover;
    use dms2iceberg::ops::ingest::{Ingest, local_inputs};

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = Config::load(config).unwrap();
    barrier.wait();
    let mut o = Outcome {
        name: wk.name.clone(),
        ..Default::default()
    };
    rt.block_on(async {
        let catalog = SqliteCatalog::open(wh).unwrap();
        let mut rng = Rng::new(wk.name.bytes().fold(7u64, |h, b| h * 31 + b as u64));
        let batches: Vec<(Vec<PathBuf>, usize)> = match &wk.feed {
            Feed::Tree {
                roots,
                files_per_commit,
            } => vec![(roots.clone(), *files_per_commit)],
            Feed::Events { files, .. } => files.iter().map(|f| (vec![f.clone()], 1)).collect(),
        };
        let warm = matches!(wk.feed, Feed::Events { warm: true, .. });
        // A warm worker keeps one `Ingest` (and its lookup cache) across events, like a warm
        // Lambda; a cold one starts afresh for every ingest.
        let shared = Ingest::new(&catalog, &config);
        for (paths, fpc) in batches {
            let tables = discover(&paths, &config.source).unwrap();
            for t in tables {
                let mut files = t.files;
                // The order given does not matter (ingest sorts): shuffle to prove it.
                rng.shuffle(&mut files);
                let fresh;
                let ingest = if warm {
                    &shared
                } else {
                    fresh = Ingest::new(&catalog, &config).files_per_commit(fpc);
                    &fresh
                };
                let mut tries = 0;
                loop {
                    tries += 1;
                    let reports = &mut o.reports;
                    let report = ingest
                        .execute(&t.schema, &t.table, local_inputs(files.clone()), |c| {
                            reports.push(serde_json::to_value(c).unwrap())
                        })
                        .await;
                    o.runs += 1;
                    match report.error {
                        // A documented, retriable give-up: redeliver, as SQS would.
                        Some(e) if is_give_up(&e) && tries < MAX_REDELIVERIES => o.gave_up.push(e),
                        Some(e) => {
                            o.errors.push(format!("{}: {e}", t.table));
                            break;
                        }
                        None => break,
                    }
                }
            }
        }
    });
    o
}

// ------------------------------------------------------------------------------------------
// Figures from commit reports

#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub reports: usize,
    /// Commits that applied files (snapshots written by this set of reports).
    pub applied_commits: usize,
    pub applied_files: usize,
    pub skipped_files: usize,
    pub late_commits: usize,
    pub attempts: u64,
    pub replans: u64,
}

impl Figures {
    pub fn of<'a>(reports: impl IntoIterator<Item = &'a Value>) -> Figures {
        let mut f = Figures::default();
        for r in reports {
            f.reports += 1;
            let n = r["files"].as_array().map_or(0, |a| a.len());
            match r["status"].as_str() {
                Some("applied") => {
                    f.applied_commits += 1;
                    f.applied_files += n;
                    f.attempts += r["attempts"].as_u64().unwrap_or(0);
                    f.replans += r["replans"].as_u64().unwrap_or(0);
                    if r["late"].as_bool() == Some(true) {
                        f.late_commits += 1;
                    }
                }
                Some("skipped") => f.skipped_files += n,
                other => panic!("report with unknown status {other:?}: {r}"),
            }
        }
        f
    }

    /// Replans plus extra commit attempts, over the applied commits. A lost compare-and-swap
    /// retries, finds the winner's snapshot at validation and replans, and a replan restarts the
    /// attempt count: so on a table only ingest writes to, every conflict shows as a replan.
    pub fn conflicts(&self) -> u64 {
        self.attempts.saturating_sub(self.applied_commits as u64) + self.replans
    }

    pub fn attempts_per_commit(&self) -> f64 {
        self.attempts as f64 / self.applied_commits.max(1) as f64
    }
}

/// Every DMS name applied by the reports, with how many applied commits listed it.
pub fn applied_by_reports<'a>(
    reports: impl IntoIterator<Item = &'a Value>,
) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in reports {
        if r["status"] == "applied" {
            for f in r["files"].as_array().unwrap() {
                *m.entry(dms_name(f.as_str().unwrap())).or_default() += 1;
            }
        }
    }
    m
}

// ------------------------------------------------------------------------------------------
// History

/// Checks the history of `table` and returns it: a single parent chain from the first snapshot
/// to the current one with contiguous sequence numbers (no snapshot lost or forked), and every
/// DMS file of `meta.files` recorded by exactly one snapshot — in `source_files` and in
/// `dms2iceberg.source-orders` alike, no file twice, not even within one snapshot, no unknown
/// file.
#[track_caller]
pub fn check_history(w: &Work, table: &str, meta: &Meta) -> Vec<Value> {
    let hist = w.history(table);
    let dump = || {
        hist.iter()
            .map(|s| {
                format!(
                    "  {} parent {} seq {} {:?}",
                    s["snapshot_id"],
                    s["parent_id"],
                    s["sequence_number"],
                    s["source_files"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| dms_name(f.as_str().unwrap_or("?")))
                        .collect::<Vec<_>>()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(!hist.is_empty(), "{table}: no snapshots");
    let mut ids = BTreeSet::new();
    let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut orders: BTreeMap<String, usize> = BTreeMap::new();
    for (i, s) in hist.iter().enumerate() {
        let id = s["snapshot_id"].as_i64().expect("snapshot_id");
        assert!(
            ids.insert(id),
            "{table}: snapshot id {id} twice\n{}",
            dump()
        );
        let expected_parent = if i == 0 {
            Value::Null
        } else {
            hist[i - 1]["snapshot_id"].clone()
        };
        assert_eq!(
            s["parent_id"],
            expected_parent,
            "{table}: snapshot #{i} does not follow the previous one (forked or lost history)\n{}",
            dump()
        );
        assert_eq!(
            s["sequence_number"].as_i64(),
            Some(i as i64 + 1),
            "{table}: sequence numbers not contiguous at snapshot #{i}\n{}",
            dump()
        );
        let files: Vec<String> = s["source_files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| dms_name(f.as_str().expect("source file is a string")))
            .collect();
        let ords: Vec<String> = s["summary"]["dms2iceberg.source-orders"]
            .as_str()
            .map(|t| serde_json::from_str(t).expect("source-orders is a JSON list"))
            .unwrap_or_default();
        assert!(
            !files.is_empty(),
            "{table}: snapshot #{i} applied no DMS file: {s}"
        );
        assert_eq!(
            files.len(),
            ords.len(),
            "{table}: snapshot #{i}: source_files and source-orders differ in length: {s}"
        );
        for f in files {
            by_name.entry(f).or_default().push(i);
        }
        for o in ords {
            *orders.entry(o).or_default() += 1;
        }
    }
    let expected: BTreeSet<String> = meta.files.iter().map(|f| dms_name(f)).collect();
    let mut problems = Vec::new();
    for n in &expected {
        match by_name.get(n).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!("{n} was never applied (lost)")),
            Some([_]) => {}
            Some(more) => problems.push(format!(
                "{n} was applied {} times (snapshots #{more:?})",
                more.len()
            )),
        }
    }
    for n in by_name.keys().filter(|n| !expected.contains(*n)) {
        problems.push(format!("{n} is not a file of the tree"));
    }
    for (o, c) in orders.iter().filter(|(_, c)| **c > 1) {
        problems.push(format!("source order {o} recorded {c} times"));
    }
    assert!(
        problems.is_empty(),
        "{table}: history does not record every file exactly once:\n  {}\nhistory:\n{}",
        problems.join("\n  "),
        dump()
    );
    hist
}

/// How many snapshots of `hist` record each DMS name.
pub fn files_in_history(hist: &[Value]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for s in hist {
        for f in s["source_files"].as_array().unwrap() {
            *m.entry(dms_name(f.as_str().unwrap())).or_default() += 1;
        }
    }
    m
}

// ------------------------------------------------------------------------------------------
// Independent inspection of the table folder

const INSPECT_PY: &str = r#"
import json, os, sqlite3, sys
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import read_manifest_list

wh, ident = sys.argv[1], sys.argv[2]
ns, name = ident.rsplit(".", 1)

def local(p):
    return os.path.realpath(p[len("file://"):] if p.startswith("file://") else p)

io = PyArrowFileIO()
out = {"pointer": None, "files": [], "referenced": [], "orphans": [], "missing": [],
       "snapshots": [], "current_snapshot_id": None, "metadata_files": 0}
table_dir = os.path.realpath(os.path.join(wh, ns + ".db", name))
con = sqlite3.connect(os.path.join(wh, "catalog.db"))
row = con.execute(
    "select metadata_location from iceberg_tables where table_namespace=? and table_name=?",
    (ns, name)).fetchone()
ref = set()
if row and row[0]:
    out["pointer"] = row[0]
    md = json.load(open(local(row[0])))
    out["current_snapshot_id"] = md.get("current-snapshot-id")
    out["snapshots"] = sorted(s["snapshot-id"] for s in md.get("snapshots", []))
    metas = [row[0]] + [e["metadata-file"] for e in md.get("metadata-log", [])]
    out["metadata_files"] = len(metas)
    lists = set()
    for m in metas:
        ref.add(local(m))
        if not os.path.exists(local(m)):
            continue
        for s in json.load(open(local(m))).get("snapshots", []):
            lists.add(s["manifest-list"])
    manifests = set()
    for l in sorted(lists):
        ref.add(local(l))
        if not os.path.exists(local(l)):
            continue
        for mf in read_manifest_list(io.new_input(l)):
            if mf.manifest_path not in manifests:
                manifests.add(mf.manifest_path)
                ref.add(local(mf.manifest_path))
                if not os.path.exists(local(mf.manifest_path)):
                    continue
                for e in mf.fetch_manifest_entry(io, discard_deleted=False):
                    ref.add(local(e.data_file.file_path))
files = set()
for root, _, names in os.walk(table_dir):
    for n in names:
        files.add(os.path.realpath(os.path.join(root, n)))
out["files"] = sorted(files)
out["referenced"] = sorted(ref)
out["orphans"] = sorted(files - ref)
out["missing"] = sorted(ref - files)
print(json.dumps(out))
"#;

/// What is in a table's folder, computed independently of dms2iceberg.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub pointer: Option<String>,
    pub files: BTreeSet<String>,
    pub referenced: BTreeSet<String>,
    pub orphans: BTreeSet<String>,
    pub missing: BTreeSet<String>,
    /// Snapshot ids in the current metadata.json's `snapshots` list.
    pub snapshots: BTreeSet<i64>,
    pub current_snapshot_id: Option<i64>,
    pub metadata_files: usize,
}

impl Inspection {
    /// Orphans by kind: data, deletes, manifest, manifest-list, metadata, other.
    pub fn orphan_kinds(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for o in &self.orphans {
            *m.entry(file_kind(o)).or_default() += 1;
        }
        m
    }
}

pub fn file_kind(path: &str) -> &'static str {
    let n = dms_name(path);
    if n.ends_with(".metadata.json") {
        "metadata"
    } else if n.starts_with("snap-") && n.ends_with(".avro") {
        "manifest-list"
    } else if n.ends_with(".avro") {
        "manifest"
    } else if n.ends_with(".parquet") && n.contains("-deletes-") {
        "deletes"
    } else if n.ends_with(".parquet") {
        "data"
    } else {
        "other"
    }
}

pub fn kinds_text(k: &BTreeMap<&'static str, usize>) -> String {
    if k.is_empty() {
        return "none".into();
    }
    k.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Lists the table folder and what references what (PyIceberg's Avro readers on the
/// metadata log, every snapshot's manifest list and every manifest entry, deleted ones too).
pub fn inspect(w: &Work, table: &str) -> Inspection {
    let script = w.dir.join("inspect_table.py");
    if !script.exists() {
        std::fs::write(&script, INSPECT_PY).unwrap();
    }
    let r = run(
        &python(),
        [
            script.as_os_str(),
            w.wh().as_os_str(),
            std::ffi::OsStr::new(table),
        ],
    )
    .assert_success();
    let v: Value = serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("inspect_table.py: bad output ({e})\n{}", r.describe()));
    let set = |k: &str| -> BTreeSet<String> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    Inspection {
        pointer: v["pointer"].as_str().map(str::to_string),
        files: set("files"),
        referenced: set("referenced"),
        orphans: set("orphans"),
        missing: set("missing"),
        snapshots: v["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect(),
        current_snapshot_id: v["current_snapshot_id"].as_i64(),
        metadata_files: v["metadata_files"].as_u64().unwrap_or(0) as usize,
    }
}

/// The table's snapshots are exactly its history (no snapshot outside the chain), and no file
/// any metadata references is missing.
#[track_caller]
pub fn check_inspection(table: &str, hist: &[Value], i: &Inspection) {
    assert!(
        i.missing.is_empty(),
        "{table}: referenced files are missing: {:?}",
        i.missing
    );
    let chain: BTreeSet<i64> = hist
        .iter()
        .map(|s| s["snapshot_id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        i.snapshots, chain,
        "{table}: metadata holds snapshots outside the current chain (a lost commit?)"
    );
    assert_eq!(
        i.current_snapshot_id,
        hist.last().and_then(|s| s["snapshot_id"].as_i64()),
        "{table}: current snapshot is not the last of the history"
    );
}

/// The last snapshot's totals agree with the row count: every position delete removes a
/// distinct live row (a row deleted twice, or a delete that missed, would break this even when
/// a scan looks right).
#[track_caller]
pub fn check_totals(table: &str, hist: &[Value], rows: usize) {
    let last = hist.last().expect("no snapshots");
    let num = |k: &str| -> i64 {
        last["summary"][k]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{table}: summary has no {k}: {last}"))
    };
    let (records, deletes) = (num("total-records"), num("total-position-deletes"));
    assert_eq!(
        records - deletes,
        rows as i64,
        "{table}: total-records {records} - total-position-deletes {deletes} != {rows} live rows"
    );
}
