//! Running the `dms2iceberg` binary in a work directory, without Python: what every test binary
//! of the root package shares, including the fast tier (`tests/bad_rows.rs`, which includes this
//! file alone as its `common`). `common/mod.rs` adds the DMS generator and the independent
//! readers (`.venv`) on top and re-exports everything here.
//!
//! Set `DMS2ICEBERG_KEEP_TEST_DIRS=1` to keep every work directory; a failing test always keeps
//! its own and prints its path.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn support(script: &str) -> PathBuf {
    repo_root().join("tests").join("support").join(script)
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dms2iceberg"))
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Run {
    pub cmd: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Panics (with everything it printed) unless the command succeeded; the run, for reading.
    pub fn assert_success(self) -> Run {
        if !self.status.success() {
            panic!("command failed ({}):\n{}", self.status, self.describe());
        }
        self
    }

    /// stdout + stderr, for looking for error messages wherever they were printed.
    pub fn output(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    pub fn describe(&self) -> String {
        format!(
            "$ {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmd,
            truncate(&self.stdout, 20_000),
            truncate(&self.stderr, 20_000)
        )
    }
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &s[..end], s.len() - end)
}

pub fn run<I, S>(program: &Path, args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let cmd = std::iter::once(program.as_os_str())
        .chain(args.iter().map(|a| a.as_os_str()))
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new(program)
        .args(&args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONIOENCODING", "utf-8")
        // A Python process the watchdog aborts prints every thread's traceback first.
        .env("PYTHONFAULTHANDLER", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_or_dump(&mut child, &cmd, &stderr);
    Run {
        cmd,
        status,
        stdout: stdout.recv().unwrap_or_default(),
        stderr: stderr.recv().unwrap_or_default(),
    }
}

/// Reads a child's pipe to its end on a thread of its own (so neither pipe can fill and stall
/// the child); the text arrives on the channel.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = pipe {
            let _ = r.read_to_end(&mut buf);
        }
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

/// How long one command of a test may run: a hung process fails its test with its stacks,
/// instead of holding CI until its limit (`DMS2ICEBERG_TEST_CHILD_TIMEOUT`, seconds).
fn child_timeout() -> Duration {
    let secs = std::env::var("DMS2ICEBERG_TEST_CHILD_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    Duration::from_secs(secs)
}

/// Waits for `child`. Past [`child_timeout`]: prints its native stacks (gdb, when installed),
/// aborts it (a Python process then prints its tracebacks on `stderr`), and panics with both.
pub fn wait_or_dump(child: &mut Child, cmd: &str, stderr: &mpsc::Receiver<String>) -> ExitStatus {
    let deadline = Instant::now() + child_timeout();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => break,
            Err(e) => panic!("waiting for {cmd}: {e}"),
        }
    }
    let pid = child.id().to_string();
    let stacks = match Command::new("gdb")
        .args(["-p", &pid, "-batch", "-nx", "-ex", "thread apply all bt"])
        .output()
    {
        Ok(o) => format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("(no native stacks: gdb: {e})"),
    };
    let _ = Command::new("kill").args(["-ABRT", &pid]).status();
    let aborted = Instant::now() + Duration::from_secs(5);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < aborted {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let printed = stderr
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_default();
    panic!(
        "{cmd} still ran after {:?}: aborted.\n--- its stderr ---\n{}\n--- its threads ---\n{}",
        child_timeout(),
        truncate(&printed, 100_000),
        truncate(&stacks, 200_000)
    );
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Parses JSON-lines output (the contract of `scan --format json` and `history --format json`).
pub fn parse_json_lines(text: &str, what: &str) -> Vec<Value> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Value>(l).unwrap_or_else(|e| {
                panic!(
                    "{what}: line {} is not a JSON object ({e}): {}\n--- whole output ---\n{}",
                    i + 1,
                    truncate(l, 500),
                    truncate(text, 5000)
                )
            })
        })
        .collect()
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_json_lines(&text, &path.display().to_string())
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", path.display()))
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh work directory for one test: `dms/`, `wh/`, `config.toml` (and, from the generator,
/// `expected/`).
///
/// When it drops at the end of a test that passed, every table of every local warehouse in it
/// is verified ([`Work::verify_tables`]): a test that leaves a table some snapshot of which does
/// not read fails, unless it said why with [`Work::skip_verify`].
pub struct Work {
    pub dir: PathBuf,
    pub name: String,
    /// Why the end-of-test verification is skipped (`None`: it runs).
    skip_verify: Mutex<Option<String>>,
}

impl Work {
    /// An empty work dir of its own (name, process, counter, time), for a hand-written tree;
    /// needs no Python. [`Work::new`] (in `common/mod.rs`) is the same for generated trees.
    pub fn plain(name: &str) -> Work {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "dms2iceberg-e2e-{name}-{}-{n}-{nanos:x}",
            std::process::id()
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        std::fs::create_dir_all(&dir).unwrap();
        Work {
            dir,
            name: name.to_string(),
            skip_verify: Mutex::new(None),
        }
    }

    pub fn dms(&self) -> PathBuf {
        self.dir.join("dms")
    }
    pub fn wh(&self) -> PathBuf {
        self.dir.join("wh")
    }
    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// Runs the binary with the given arguments (nothing added).
    pub fn cli<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        run(&bin(), args)
    }

    /// `dms2iceberg ingest PATH… --warehouse wh --config config.toml`
    pub fn ingest_paths(&self, paths: &[PathBuf]) -> Run {
        let mut a: Vec<std::ffi::OsString> = vec!["ingest".into()];
        a.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
        a.push("--warehouse".into());
        a.push(self.wh().into_os_string());
        a.push("--config".into());
        a.push(self.config().into_os_string());
        self.cli(&a)
    }

    /// Adds `line` (`key = value`) to the `[defaults]` of the generated config.toml.
    pub fn set_default(&self, line: &str) {
        let path = self.config();
        let text = std::fs::read_to_string(&path).expect("config.toml");
        assert!(
            text.contains("[defaults]\n"),
            "no [defaults] in {}",
            path.display()
        );
        let text = text.replacen("[defaults]\n", &format!("[defaults]\n{line}\n"), 1);
        std::fs::write(&path, text).expect("write config.toml");
    }

    /// `ingest … --json`: one report per commit.
    pub fn ingest_json(&self, paths: &[PathBuf]) -> Vec<Value> {
        self.ingest_json_with(paths, &[])
    }

    /// `ingest PATH… --warehouse wh --config config.toml --json EXTRA…`: one report per commit.
    pub fn ingest_json_with(&self, paths: &[PathBuf], extra: &[&str]) -> Vec<Value> {
        let mut a: Vec<std::ffi::OsString> = vec!["ingest".into(), "--json".into()];
        a.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
        a.push("--warehouse".into());
        a.push(self.wh().into_os_string());
        a.push("--config".into());
        a.push(self.config().into_os_string());
        a.extend(extra.iter().map(std::ffi::OsString::from));
        let r = self.cli(&a).assert_success();
        parse_json_lines(&r.stdout, "ingest --json")
    }

    /// Ingests the whole `dms/` tree.
    pub fn ingest(&self) -> Run {
        self.ingest_paths(&[self.dms()])
    }

    /// `scan TABLE --format json [extra…]`, raw.
    pub fn scan_run(&self, table: &str, extra: &[&str]) -> Run {
        let wh = self.wh().display().to_string();
        let mut a = vec!["scan", table, "--warehouse", &wh, "--format", "json"];
        a.extend_from_slice(extra);
        self.cli(&a)
    }

    /// `scan TABLE --format json [extra…]`, parsed; panics if the scan fails.
    pub fn scan(&self, table: &str, extra: &[&str]) -> Vec<Value> {
        let r = self.scan_run(table, extra).assert_success();
        parse_json_lines(&r.stdout, &format!("scan {table}"))
    }

    /// `scan TABLE --format csv`: the text it printed; panics if the scan fails.
    pub fn scan_csv(&self, table: &str) -> String {
        let wh = self.wh().display().to_string();
        self.cli(&["scan", table, "--warehouse", &wh, "--format", "csv"])
            .assert_success()
            .stdout
    }

    /// `history TABLE --format json`, parsed (one object per snapshot, oldest first).
    pub fn history(&self, table: &str) -> Vec<Value> {
        let wh = self.wh().display().to_string();
        let r = self
            .cli(&["history", table, "--warehouse", &wh, "--format", "json"])
            .assert_success();
        let h = parse_json_lines(&r.stdout, &format!("history {table}"));
        for (i, s) in h.iter().enumerate() {
            for k in ["snapshot_id", "timestamp_ms", "operation", "source_files"] {
                assert!(
                    s.get(k).is_some(),
                    "history {table}: snapshot #{i} has no `{k}`: {s}"
                );
            }
            assert!(
                s["source_files"].is_array(),
                "history {table}: source_files must be a list: {s}"
            );
        }
        h
    }

    pub fn tables(&self) -> Run {
        let wh = self.wh().display().to_string();
        self.cli(&["tables", "--warehouse", &wh])
    }

    /// A table's read cost as `tables --format json` reports it (manifests, delete files per
    /// data file, ...).
    pub fn read_cost(&self, table: &str) -> Value {
        let wh = self.wh().display().to_string();
        let run = self
            .cli(&["tables", "--warehouse", &wh, "--format", "json"])
            .assert_success();
        run.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["table"] == table)
            .map(|v| v["read_cost"].clone())
            .unwrap_or_else(|| panic!("no table {table} in `tables`:\n{}", run.describe()))
    }

    /// Our commits keep one delete file per data file, and few manifests: checked from the
    /// table's read cost. `manifests`: the most the current snapshot may list.
    pub fn assert_cheap_to_read(&self, table: &str, manifests: u64) {
        let c = self.read_cost(table);
        assert!(
            c["max_deletes_per_data_file"].as_u64().unwrap_or(99) <= 1,
            "{table}: a data file has several delete files: {c}"
        );
        assert!(
            c["manifests"].as_u64().unwrap_or(u64::MAX) <= manifests,
            "{table}: more than {manifests} manifests: {c}"
        );
    }

    /// Writes rows as JSON lines into the work dir (e.g. an intermediate state for check_readers).
    pub fn write_jsonl(&self, name: &str, rows: &[Value]) -> PathBuf {
        let p = self.dir.join(name);
        let mut s = String::new();
        for r in rows {
            s.push_str(&serde_json::to_string(r).unwrap());
            s.push('\n');
        }
        std::fs::write(&p, s).unwrap();
        p
    }

    /// Writes `text` to `rel` (relative to the work dir), creating its folders; the path.
    pub fn write_file(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()));
        p
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "work dir of failed test {} kept: {}",
                self.name,
                self.dir.display()
            );
            return;
        }
        if let Some(why) = self.verify_skipped() {
            eprintln!("{}: end-of-test verification skipped: {why}", self.name);
        } else if !self.warehouses().is_empty() {
            let started = Instant::now();
            match self.check_tables() {
                Ok(reports) => eprintln!(
                    "{}: end-of-test verification: {} table(s), {} snapshot(s) read whole in {} ms",
                    self.name,
                    reports.len(),
                    reports
                        .iter()
                        .filter_map(|r| r["snapshots_read"].as_u64())
                        .sum::<u64>(),
                    started.elapsed().as_millis()
                ),
                Err(e) => panic!(
                    "{}: a table does not verify at the end of the test (every snapshot still in \
                     a table's metadata must read, and every file its manifests name exist; a \
                     test that leaves a table broken on purpose calls `skip_verify(\"why\")`).\n\
                     {e}\nwork dir kept: {}",
                    self.name,
                    self.dir.display()
                ),
            }
        }
        if std::env::var_os("DMS2ICEBERG_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ------------------------------------------------------------------------------------------
// The invariant every end-to-end test ends on (issue 48): every snapshot still in a table's
// metadata reads in our scan, and every file its manifests name exists. `Work`, `Lab`
// (`lambda.rs`: Glue, S3 Tables) and `Rustberg` (`rest.rs`) check it when they drop at the end
// of a test that passed; a test may check it earlier itself.

/// `dms2iceberg verify TABLE --read --format json CATALOG…` through `cli` (`catalog`: the flags
/// naming the catalog, e.g. `--warehouse wh`): the report if every snapshot reads whole, else
/// what is wrong (its problems, or what the command printed).
pub fn verify_table(
    cli: &dyn Fn(&[String]) -> Run,
    catalog: &[String],
    table: &str,
) -> Result<Value, String> {
    let mut a: Vec<String> = ["verify", table, "--read", "--format", "json"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend_from_slice(catalog);
    let r = cli(&a);
    let report = serde_json::from_str::<Value>(r.stdout.trim()).ok();
    let Some(v) = report.filter(|v| v["problems"].is_array()) else {
        return Err(format!("{table}: verify failed:\n{}", r.describe()));
    };
    let problems = v["problems"].as_array().unwrap();
    if problems.is_empty() && r.status.success() {
        // Every snapshot read whole: `--read` did read them.
        if v["snapshots_read"] != v["snapshots"] {
            return Err(format!(
                "{table}: verify read {} of {} snapshots:\n{}",
                v["snapshots_read"],
                v["snapshots"],
                r.describe()
            ));
        }
        return Ok(v);
    }
    let mut s = format!(
        "{table}: {} problem(s) (metadata {}; `{}` exited {}):",
        problems.len(),
        v["metadata_location"].as_str().unwrap_or("?"),
        r.cmd,
        r.status
    );
    for p in problems {
        s.push_str(&format!(
            "\n    {} (snapshots {})",
            p["what"].as_str().unwrap_or("?"),
            p["snapshots"]
        ));
    }
    Err(s)
}

/// Every table of a catalog (`tables --format json CATALOG…`), each through [`verify_table`]:
/// their reports, or every table that does not verify (a catalog whose tables cannot even be
/// listed fails too).
pub fn verify_catalog(
    cli: &dyn Fn(&[String]) -> Run,
    catalog: &[String],
) -> Result<Vec<Value>, String> {
    let mut a: Vec<String> = vec!["tables".into(), "--format".into(), "json".into()];
    a.extend_from_slice(catalog);
    let listed = cli(&a);
    if !listed.status.success() {
        return Err(format!(
            "the tables could not be listed:\n{}",
            listed.describe()
        ));
    }
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for t in parse_json_lines(&listed.stdout, "tables --format json") {
        let Some(table) = t["table"].as_str() else {
            return Err(format!("`tables` line without a table: {t}"));
        };
        match verify_table(cli, catalog, table) {
            Ok(r) => reports.push(r),
            Err(e) => failures.push(e),
        }
    }
    match failures.is_empty() {
        true => Ok(reports),
        false => Err(failures.join("\n")),
    }
}

impl Work {
    /// Skips the verification of this work dir's tables when it drops (and of a `Lab`'s
    /// catalogs built on it): for a test that leaves a table broken on purpose. `why` is
    /// printed; it must say what is broken.
    pub fn skip_verify(&self, why: &str) {
        assert!(!why.trim().is_empty(), "skip_verify needs a reason");
        *self.skip_verify.lock().unwrap() = Some(why.to_string());
    }

    /// Why the end-of-test verification is skipped, if it is.
    pub fn verify_skipped(&self) -> Option<String> {
        self.skip_verify.lock().unwrap().clone()
    }

    /// The local warehouses in the work dir: folders holding a `catalog.db` (`wh/`, and any a
    /// test made elsewhere in it), at most three levels down.
    pub fn warehouses(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
            if dir.join("catalog.db").is_file() {
                out.push(dir.to_path_buf());
            }
            if depth == 0 {
                return;
            }
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            let mut dirs: Vec<PathBuf> = rd
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            dirs.sort();
            for d in dirs {
                walk(&d, depth - 1, out);
            }
        }
        let mut out = Vec::new();
        walk(&self.dir, 3, &mut out);
        out
    }

    /// `verify TABLE --warehouse wh EXTRA…`, raw (for tests of `verify` itself).
    pub fn verify_run(&self, table: &str, extra: &[&str]) -> Run {
        let wh = self.wh().display().to_string();
        let mut a = vec!["verify", table, "--warehouse", &wh];
        a.extend_from_slice(extra);
        self.cli(&a)
    }

    /// Every table of every local warehouse in the work dir verified with `verify --read`:
    /// their reports, or what is wrong.
    pub fn check_tables(&self) -> Result<Vec<Value>, String> {
        let cli = |a: &[String]| self.cli(a);
        let mut reports = Vec::new();
        let mut failures = Vec::new();
        for wh in self.warehouses() {
            let catalog = vec!["--warehouse".to_string(), wh.display().to_string()];
            match verify_catalog(&cli, &catalog) {
                Ok(r) => reports.extend(r),
                Err(e) => failures.push(format!("warehouse {}:\n{e}", wh.display())),
            }
        }
        match failures.is_empty() {
            true => Ok(reports),
            false => Err(failures.join("\n")),
        }
    }

    /// [`Work::check_tables`], panicking with what is wrong: what every test checks when its
    /// work dir drops, callable earlier (e.g. between two phases of a test).
    #[track_caller]
    pub fn verify_tables(&self) -> Vec<Value> {
        self.check_tables()
            .unwrap_or_else(|e| panic!("{}: a table does not verify:\n{e}", self.name))
    }
}

/// True if `text` contains `n` as a whole number (not part of a longer digit run).
pub fn mentions_number(text: &str, n: u64) -> bool {
    let needle = n.to_string();
    let b = text.as_bytes();
    let mut start = 0;
    while let Some(pos) = text[start..].find(&needle) {
        let i = start + pos;
        let j = i + needle.len();
        let before = i == 0 || !b[i - 1].is_ascii_digit();
        let after = j >= b.len() || !b[j].is_ascii_digit();
        if before && after {
            return true;
        }
        start = i + 1;
    }
    false
}
