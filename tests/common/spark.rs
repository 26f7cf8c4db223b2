//! Iceberg Java (Spark 3.5 + iceberg-spark-runtime 1.10) as an independent reader and writer:
//! one JVM per test binary (`tests/support/spark_session.py serve`), shared by its tests one
//! request at a time.
//!
//! `scripts/test` builds `.venv-spark` and sets `DMS2ICEBERG_SPARK_PYTHON` and
//! `DMS2ICEBERG_SPARK_JARS`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::support;

/// Longest a single request may take (a JVM stuck on a lock must fail the test, not hang it).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

pub struct Spark {
    _child: Child,
    stdin: ChildStdin,
    answers: Receiver<String>,
    log: PathBuf,
    next_id: u64,
    /// Seconds the JVM took to start, and spent answering requests.
    pub startup_secs: f64,
    pub busy_secs: f64,
}

/// The test binary's Spark session (started on first use).
pub fn spark() -> MutexGuard<'static, Spark> {
    static SPARK: OnceLock<Mutex<Spark>> = OnceLock::new();
    SPARK
        .get_or_init(|| Mutex::new(Spark::start()))
        .lock()
        // A test that failed while holding the session leaves it usable.
        .unwrap_or_else(|e| e.into_inner())
}

fn spark_python() -> PathBuf {
    match std::env::var_os("DMS2ICEBERG_SPARK_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "DMS2ICEBERG_SPARK_PYTHON is not set.\n\
             The Spark tests need Iceberg Java (pyspark 3.5 + iceberg-spark-runtime 1.10) in\n\
             .venv-spark: run them through `scripts/test`, which builds it and sets\n\
             DMS2ICEBERG_SPARK_PYTHON and DMS2ICEBERG_SPARK_JARS."
        ),
    }
}

impl Spark {
    fn start() -> Spark {
        let log =
            std::env::temp_dir().join(format!("dms2iceberg-spark-{}.log", std::process::id()));
        let err = std::fs::File::create(&log).expect("spark log file");
        let mut child = Command::new(spark_python())
            .arg(support("spark_session.py"))
            .arg("serve")
            .env("SPARK_LOCAL_IP", "127.0.0.1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start tests/support/spark_session.py: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Spark {
            _child: child,
            stdin,
            answers,
            log,
            next_id: 0,
            startup_secs: 0.0,
            busy_secs: 0.0,
        };
        let ready = s.receive(None);
        assert!(
            ready["ok"] == true,
            "Spark did not start: {ready}\n{}",
            s.log_tail()
        );
        s.startup_secs = ready["startup_secs"].as_f64().unwrap_or(0.0);
        eprintln!(
            "spark-measure: JVM session started in {:.1}s",
            s.startup_secs
        );
        s
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("at "))
            .collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        format!(
            "--- Spark log ({}), last lines ---\n{tail}",
            self.log.display()
        )
    }

    fn receive(&mut self, id: Option<u64>) -> Value {
        let line = match self.answers.recv_timeout(REQUEST_TIMEOUT) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "Spark did not answer within {REQUEST_TIMEOUT:?}\n{}",
                    self.log_tail()
                )
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the Spark session exited\n{}", self.log_tail())
            }
        };
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("Spark session: bad answer ({e}): {line}"));
        if let Some(id) = id {
            assert_eq!(
                v["id"],
                json!(id),
                "Spark session answered out of order: {v}"
            );
        }
        v
    }

    /// Sends one request; the answer, `ok` or not.
    pub fn request(&mut self, mut req: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        req["id"] = json!(id);
        let started = Instant::now();
        writeln!(self.stdin, "{req}").expect("write to the Spark session");
        self.stdin.flush().expect("flush the Spark session");
        let v = self.receive(Some(id));
        self.busy_secs += started.elapsed().as_secs_f64();
        v
    }

    /// Like `request`, panicking (with the Spark log) unless it succeeded.
    pub fn ok(&mut self, req: Value) -> Value {
        let what = req.to_string();
        let v = self.request(req);
        if v["ok"] != true {
            panic!(
                "Spark request failed: {what}\n{}\n{}\n{}",
                v["error"].as_str().unwrap_or(""),
                v["trace"].as_str().unwrap_or(""),
                self.log_tail()
            );
        }
        v
    }

    /// Registers Spark catalog `name`: Iceberg's JdbcCatalog on `warehouse/catalog.db`.
    pub fn catalog(&mut self, name: &str, warehouse: &Path) {
        self.ok(json!({"op": "catalog", "name": name, "warehouse": warehouse}));
    }

    /// Runs SQL statements; the rows of each (JSON contract).
    pub fn sql(&mut self, statements: &[&str]) -> Vec<Vec<Value>> {
        let v = self.ok(json!({"op": "sql", "statements": statements}));
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().clone())
            .collect()
    }

    /// Reads `source` (`{"table": "cat.ns.t"}` or `{"metadata": location}`, optionally with
    /// `snapshot_id`) and compares it with the expected rows; the differences (empty: equal).
    pub fn diff(&mut self, source: Value, expected: &Path, meta: &Path) -> Vec<String> {
        let v =
            self.ok(json!({"op": "check", "source": source, "expected": expected, "meta": meta}));
        v["diff"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap_or("").to_string())
            .collect()
    }

    /// Iceberg Java's DeleteOrphanFiles action on `table` (any age: the procedure refuses
    /// less than a day); the locations it deleted.
    pub fn remove_orphans(&mut self, table: &str) -> Vec<String> {
        let v = self.ok(json!({"op": "remove_orphans", "table": table}));
        v["deleted"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect()
    }
}
