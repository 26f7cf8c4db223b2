//! Helpers for tests/aws/ (`lambda`, `sam_local`): the Lambda binaries (ingest, compact) run
//! against a local S3 + Glue emulator.
//!
//! - `tests/support/moto_server.py serve`: moto in server mode (S3 path-style + Glue on one
//!   loopback port) with Glue `UpdateTable` honouring `VersionId` like AWS Glue.
//! - `tests/support/lambda_runtime_api.py`: the Lambda Runtime API; the binary polls it like it
//!   polls Lambda's, and the test invokes it through the emulator's `/_emulator/invoke`.
//! - S3, Glue and both emulators are spoken to over plain HTTP/1.1 (a minimal client below;
//!   moto does not check signatures, so a fake `Authorization` header only names the service).
//!
//! One `Lab` per test: its own emulator processes, work dir, buckets `landing` and `warehouse`,
//! Glue database `dms`. Every process started here is killed when its handle drops.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::common::{
    Meta, Run, Work, assert_rows, parse_json_lines, python, support, verify_catalog,
};

pub const LANDING: &str = "landing";
pub const WAREHOUSE_BUCKET: &str = "warehouse";
pub const WAREHOUSE: &str = "s3://warehouse/warehouse";
pub const DB: &str = "dms";
/// The S3 key of the function's config (`DMS2ICEBERG_CONFIG=s3://landing/config/dms2iceberg.toml`).
pub const CONFIG_KEY: &str = "config/dms2iceberg.toml";

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

// ---------------------------------------------------------------------------------------------
// Minimal HTTP/1.1 client (loopback only)

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {}", self.text()))
    }
}

pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<HttpResponse> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of HTTP headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {head:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&b[..eol]).into_owned();
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        b = &b[eol + 2..];
        if size == 0 || b.len() < size {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[(size + 2).min(b.len())..];
    }
}

/// Percent-encodes an S3 key for a request path (`/` kept).
pub fn encode_key(key: &str) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes an S3 notification key (`+` = space, `%XX`), for matching events to files only.
pub fn decode_event_key(key: &str) -> String {
    let b = key.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(h, 16).unwrap());
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Child processes

/// A child process killed (and reaped) on drop; its output goes to `log`.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> Proc {
        let f = File::create(&log).unwrap();
        cmd.stdout(f.try_clone().unwrap())
            .stderr(f)
            .stdin(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            name: name.to_string(),
            child,
            log,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the log if the process has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}); its output ({}):\n{}",
                self.name,
                self.log.display(),
                tail(&self.log_text(), 8000)
            );
        }
    }

    /// Waits for a port file the process writes once it listens.
    pub fn wait_port(&mut self, port_file: &Path, within: Duration) -> u16 {
        let t = Instant::now();
        loop {
            if let Ok(s) = std::fs::read_to_string(port_file)
                && let Ok(p) = s.trim().parse()
            {
                return p;
            }
            self.assert_running();
            if t.elapsed() > within {
                panic!(
                    "{} did not start listening within {within:?}:\n{}",
                    self.name,
                    tail(&self.log_text(), 8000)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn tail(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut start = s.len() - n;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("[… {start} bytes]\n{}", &s[start..])
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

fn next_id() -> usize {
    SEQ.fetch_add(1, Ordering::SeqCst)
}

fn python_cmd(script: &str) -> Command {
    let mut c = Command::new(python());
    c.arg(support(script))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONIOENCODING", "utf-8")
        .env("PYTHONUNBUFFERED", "1");
    c
}

// ---------------------------------------------------------------------------------------------
// moto: S3 + Glue

pub struct Moto {
    pub proc: Proc,
    pub port: u16,
    /// The S3 Tables table buckets made through [`Moto::create_table_bucket`] (their ARNs):
    /// the catalogs [`Moto::verify_catalogs`] checks beside Glue.
    table_buckets: Mutex<Vec<String>>,
}

/// A fake SigV4 header: moto does not check signatures but reads region and service from it.
fn auth(service: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, \
         SignedHeaders=host, Signature=0000"
    )
}

impl Moto {
    pub fn start(dir: &Path) -> Moto {
        Moto::start_on(dir, "127.0.0.1")
    }

    /// Listening on `host` (`0.0.0.0`: also for containers, through Docker's bridge).
    pub fn start_on(dir: &Path, host: &str) -> Moto {
        let n = next_id();
        let port_file = dir.join(format!("moto-{n}.port"));
        let mut cmd = python_cmd("moto_server.py");
        cmd.arg("serve")
            .arg("--host")
            .arg(host)
            .arg("--port-file")
            .arg(&port_file);
        let mut proc = Proc::spawn("moto_server.py", cmd, dir.join(format!("moto-{n}.log")));
        let port = proc.wait_port(&port_file, Duration::from_secs(90));
        Moto {
            proc,
            port,
            table_buckets: Mutex::new(Vec::new()),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn s3(&self, method: &str, path: &str, body: &[u8]) -> HttpResponse {
        let a = auth("s3");
        http(
            self.port,
            method,
            path,
            &[
                ("Authorization", a.as_str()),
                ("Content-Type", "application/octet-stream"),
            ],
            body,
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("S3 {method} {path}: {e}"))
    }

    pub fn create_bucket(&self, bucket: &str) {
        let r = self.s3("PUT", &format!("/{bucket}"), b"");
        assert_eq!(r.status, 200, "CreateBucket {bucket}: {}", r.text());
    }

    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let r = self.s3("PUT", &format!("/{bucket}/{}", encode_key(key)), body);
        assert_eq!(r.status, 200, "PutObject {bucket}/{key}: {}", r.text());
    }

    pub fn delete(&self, bucket: &str, key: &str) {
        let r = self.s3("DELETE", &format!("/{bucket}/{}", encode_key(key)), b"");
        assert!(
            r.status == 204 || r.status == 200,
            "DeleteObject: {}",
            r.text()
        );
    }

    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let r = self.s3("GET", &format!("/{bucket}/{}", encode_key(key)), b"");
        (r.status == 200).then_some(r.body)
    }

    /// A Glue API call: `Ok(response)` or `Err((error code, message))`.
    pub fn glue(&self, action: &str, body: &Value) -> Result<Value, (String, String)> {
        let a = auth("glue");
        let target = format!("AWSGlue.{action}");
        let r = http(
            self.port,
            "POST",
            "/",
            &[
                ("Authorization", a.as_str()),
                ("X-Amz-Target", target.as_str()),
                ("Content-Type", "application/x-amz-json-1.1"),
            ],
            body.to_string().as_bytes(),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("Glue {action}: {e}"));
        let v: Value = if r.body.is_empty() {
            json!({})
        } else {
            r.json()
        };
        if r.status == 200 {
            Ok(v)
        } else {
            let code = v["__type"]
                .as_str()
                .or(v["code"].as_str())
                .unwrap_or("?")
                .rsplit('#')
                .next()
                .unwrap()
                .to_string();
            let msg = v["message"]
                .as_str()
                .or(v["Message"].as_str())
                .unwrap_or("")
                .to_string();
            Err((code, msg))
        }
    }

    /// `GetTable` → the `Table` object.
    pub fn glue_table(&self, db: &str, name: &str) -> Value {
        self.glue("GetTable", &json!({"DatabaseName": db, "Name": name}))
            .unwrap_or_else(|e| panic!("GetTable {db}.{name}: {e:?}"))["Table"]
            .clone()
    }

    /// Creates an S3 Tables table bucket; its ARN.
    pub fn create_table_bucket(&self, name: &str) -> String {
        let a = auth("s3tables");
        let r = http(
            self.port,
            "PUT",
            "/buckets",
            &[
                ("Authorization", a.as_str()),
                ("Content-Type", "application/json"),
            ],
            json!({ "name": name }).to_string().as_bytes(),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("CreateTableBucket {name}: {e}"));
        assert_eq!(r.status, 200, "CreateTableBucket {name}: {}", r.text());
        let arn = r.json()["arn"]
            .as_str()
            .unwrap_or_else(|| panic!("CreateTableBucket {name}: {}", r.text()))
            .to_string();
        self.table_buckets.lock().unwrap().push(arn.clone());
        arn
    }

    /// Creates a Secrets Manager secret holding `value` (`SecretString`); its ARN.
    pub fn create_secret(&self, name: &str, value: &str) -> String {
        let a = auth("secretsmanager");
        let r = http(
            self.port,
            "POST",
            "/",
            &[
                ("Authorization", a.as_str()),
                ("X-Amz-Target", "secretsmanager.CreateSecret"),
                ("Content-Type", "application/x-amz-json-1.1"),
            ],
            json!({ "Name": name, "SecretString": value })
                .to_string()
                .as_bytes(),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("CreateSecret {name}: {e}"));
        assert_eq!(r.status, 200, "CreateSecret {name}: {}", r.text());
        r.json()["ARN"]
            .as_str()
            .unwrap_or_else(|| panic!("CreateSecret {name}: {}", r.text()))
            .to_string()
    }

    /// The emulator's counters (`update_table.applied / refused / unversioned`,
    /// `s3tables_update.applied / refused`).
    pub fn stats(&self) -> Value {
        http(
            self.port,
            "GET",
            "/_dms2iceberg/stats",
            &[],
            b"",
            Duration::from_secs(10),
        )
        .unwrap()
        .json()
    }

    /// Sets the emulator's test switches (`tests/support/moto_server.py`: faults, delays).
    pub fn configure(&self, body: &serde_json::Value) {
        let r = http(
            self.port,
            "POST",
            "/_dms2iceberg/config",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("configuring the emulator with {body}: {e}"));
        assert_eq!(
            r.status,
            200,
            "configuring the emulator with {body}: {}",
            r.text()
        );
    }

    pub fn set_update_table_delay_ms(&self, ms: u64) {
        self.configure(&json!({"update_table_delay_ms": ms}));
    }

    /// Turns fault injection off (`{"faults": null}`: the defaults, rate 0), so that what
    /// follows sees the emulator's state as it is.
    pub fn faults_off(&self) {
        self.configure(&json!({"faults": null}));
    }

    /// Our CLI with the emulator's AWS environment (`home`: its HOME).
    pub fn cli(&self, home: &Path, args: &[String]) -> Run {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_dms2iceberg"));
        let mut cmd = Command::new(&bin);
        cmd.env_clear().args(args);
        for (k, v) in self.aws_env(home) {
            cmd.env(k, v);
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        Run {
            cmd: format!("dms2iceberg {}", args.join(" ")),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The end-of-test invariant on the emulator's catalogs (faults off first): every Iceberg
    /// table in Glue (warehouse [`WAREHOUSE`]) and in every table bucket made through
    /// [`Moto::create_table_bucket`] verified with `verify --read` (see
    /// [`crate::common::verify_catalog`]): their reports, or what is wrong.
    pub fn check_catalogs(&self, home: &Path) -> Result<Vec<Value>, String> {
        self.faults_off();
        let cli = |a: &[String]| self.cli(home, a);
        let mut catalogs = vec![(
            "Glue".to_string(),
            vec!["--catalog", "glue", "--warehouse", WAREHOUSE],
        )];
        let buckets = self.table_buckets.lock().unwrap().clone();
        for arn in &buckets {
            catalogs.push((
                format!("S3 Tables {arn}"),
                vec!["--catalog", "s3tables", "--warehouse", arn.as_str()],
            ));
        }
        let mut reports = Vec::new();
        let mut failures = Vec::new();
        for (what, flags) in catalogs {
            let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
            match verify_catalog(&cli, &flags) {
                Ok(r) => reports.extend(r),
                Err(e) => failures.push(format!("{what}:\n{e}")),
            }
        }
        match failures.is_empty() {
            true => Ok(reports),
            false => Err(failures.join("\n")),
        }
    }

    /// What every AWS client of a test gets: the emulator, a region, dummy credentials, nothing
    /// from the developer's own AWS setup.
    pub fn aws_env(&self, home: &Path) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("DMS2ICEBERG_S3_PATH_STYLE", "true".into()),
            ("HOME", home.display().to_string()),
            (
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The Lambda Runtime API emulator and the function binary

/// The outcome of one invocation, as the Runtime API emulator recorded it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub request_id: String,
    /// `response`, `error`, `init_error` or `timeout`
    pub outcome: String,
    pub body: Value,
    pub served_at_ms: i64,
    pub finished_at_ms: i64,
    pub duration_ms: i64,
}

impl Outcome {
    pub fn is_response(&self) -> bool {
        self.outcome == "response"
    }
    pub fn error_message(&self) -> String {
        self.body["errorMessage"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| self.body.to_string())
    }
    /// `batchItemFailures[*].itemIdentifier` of an SQS response.
    pub fn batch_item_failures(&self) -> Vec<String> {
        assert!(self.is_response(), "not a response: {self:?}");
        let mut v: Vec<String> = self.body["batchItemFailures"]
            .as_array()
            .unwrap_or_else(|| panic!("no batchItemFailures in {}", self.body))
            .iter()
            .map(|f| f["itemIdentifier"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    }
}

pub struct RuntimeApi {
    pub proc: Proc,
    pub port: u16,
}

impl RuntimeApi {
    pub fn start(dir: &Path, name: &str) -> RuntimeApi {
        let port_file = dir.join(format!("{name}.runtime.port"));
        let mut cmd = python_cmd("lambda_runtime_api.py");
        cmd.arg("--port-file")
            .arg(&port_file)
            .arg("--results")
            .arg(dir.join(format!("{name}.results.jsonl")))
            .arg("--function-name")
            .arg(name);
        let mut proc = Proc::spawn(
            "lambda_runtime_api.py",
            cmd,
            dir.join(format!("{name}.runtime.log")),
        );
        let port = proc.wait_port(&port_file, Duration::from_secs(30));
        RuntimeApi { proc, port }
    }

    pub fn status(&self) -> Value {
        http(
            self.port,
            "GET",
            "/_emulator/status",
            &[],
            b"",
            Duration::from_secs(10),
        )
        .unwrap()
        .json()
    }

    pub fn invoke(&self, event: &Value, timeout: Duration) -> Outcome {
        let path = format!("/_emulator/invoke?timeout_s={}", timeout.as_secs());
        let r = http(
            self.port,
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            event.to_string().as_bytes(),
            timeout + Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("invoke through the Runtime API emulator: {e}"));
        assert_eq!(r.status, 200, "emulator: {}", r.text());
        let v = r.json();
        Outcome {
            request_id: v["request_id"].as_str().unwrap_or("").to_string(),
            outcome: v["outcome"].as_str().unwrap_or("?").to_string(),
            body: v["body"].clone(),
            served_at_ms: v["served_at_ms"].as_i64().unwrap_or(0),
            finished_at_ms: v["finished_at_ms"].as_i64().unwrap_or(0),
            duration_ms: v["duration_ms"].as_i64().unwrap_or(0),
        }
    }
}

/// Newest modification time of the files under `path` (a file or a directory tree).
fn newest_mtime(path: &Path) -> Option<SystemTime> {
    let md = std::fs::metadata(path).ok()?;
    if md.is_file() {
        return md.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}

/// The ingest binary, `target/<profile>/dms2iceberg-ingest` (a test of the root package cannot
/// depend on another package's binary). `scripts/test` builds it together with the tests
/// (`cargo build --workspace --bins --tests`, the feature set of `cargo test --workspace`, so it
/// shares their artifacts). If it is missing or older than its sources, it is built here with
/// that same command.
///
/// `DMS2ICEBERG_INGEST_BIN` runs another build instead (e.g. the release binary, to measure it).
pub fn ingest_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        function_bin(
            "dms2iceberg-ingest",
            "functions/ingest",
            "DMS2ICEBERG_INGEST_BIN",
        )
    })
    .clone()
}

/// The compaction binary, `target/<profile>/dms2iceberg-compact`, found (or built) like
/// [`ingest_bin`]; `DMS2ICEBERG_COMPACT_BIN` runs another build instead.
pub fn compact_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        function_bin(
            "dms2iceberg-compact",
            "functions/compact",
            "DMS2ICEBERG_COMPACT_BIN",
        )
    })
    .clone()
}

/// A function binary of the workspace next to the CLI the tests were built with: `override_var`
/// if set, else `target/<profile>/<name>`, built when missing or older than `shared/` and
/// `function_dir`.
fn function_bin(name: &str, function_dir: &str, override_var: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(override_var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.exists(), "{override_var}={} does not exist", p.display());
        return p;
    }
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_dms2iceberg"));
    let profile_dir = cli.parent().unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap().to_path_buf();
    let bin = profile_dir.join(name);
    let root = crate::common::repo_root();
    let sources = [
        "shared/src",
        "shared/Cargo.toml",
        function_dir,
        "Cargo.lock",
        "Cargo.toml",
    ]
    .iter()
    .filter_map(|p| newest_mtime(&root.join(p)))
    .max();
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    let fresh = matches!((built, sources), (Some(b), Some(s)) if b >= s);
    if !fresh {
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        eprintln!(
            "{} is missing or older than its sources: cargo build --workspace --bins --tests",
            bin.display()
        );
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&root)
            .args(["build", "--quiet", "--workspace", "--bins", "--tests"])
            .arg("--target-dir")
            .arg(&target_dir);
        if release {
            cmd.arg("--release");
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cargo} build: {e}"));
        assert!(
            out.status.success(),
            "cargo build --workspace --bins --tests failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(bin.exists(), "{} missing after the build", bin.display());
    bin
}

/// One running function (ingest or compact): the binary polling its own Runtime API emulator.
pub struct Function {
    pub name: String,
    pub runtime: RuntimeApi,
    pub proc: Proc,
    /// Wall clock just before the process was spawned.
    pub spawned_ms: i64,
    /// Spawn → the function's first `next` (initialisation done, runtime loop polling).
    pub cold_start_ms: i64,
}

impl Function {
    /// Starts the ingest binary with the Lambda environment plus `env`, and waits until it polls.
    pub fn start(lab: &Lab, name: &str, env: &[(&str, &str)]) -> Function {
        Function::start_bin(lab, name, &ingest_bin(), env)
    }

    /// Starts the compaction binary with the Lambda environment plus `env`.
    pub fn start_compact(lab: &Lab, name: &str, env: &[(&str, &str)]) -> Function {
        Function::start_bin(lab, name, &compact_bin(), env)
    }

    /// Starts `bin` (a function binary) with the Lambda environment plus `env`, and waits until
    /// it polls. The ingest settings of the base environment are ignored by the compact binary.
    pub fn start_bin(lab: &Lab, name: &str, bin: &Path, env: &[(&str, &str)]) -> Function {
        let runtime = RuntimeApi::start(&lab.work.dir, name);
        let (cmd, bin_name) = Function::command(lab, name, bin, &runtime, env);
        let spawned_ms = now_ms();
        let mut proc = Proc::spawn(
            &bin_name,
            cmd,
            lab.work.dir.join(format!("{name}.function.log")),
        );
        let t = Instant::now();
        let first_next = loop {
            if let Some(ms) = runtime.status()["first_next_ms"].as_i64() {
                break ms;
            }
            proc.assert_running();
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{name}: no /next within 60 s:\n{}",
                tail(&proc.log_text(), 8000)
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        Function {
            name: name.to_string(),
            runtime,
            proc,
            spawned_ms,
            cold_start_ms: first_next - spawned_ms,
        }
    }

    /// Runs `bin` as [`Function::start_bin`] does, expecting its initialisation to fail: what
    /// the Runtime API emulator recorded (`init_error`) and the function's output, once it
    /// exited.
    pub fn init_failure(
        lab: &Lab,
        name: &str,
        bin: &Path,
        env: &[(&str, &str)],
    ) -> (Value, String) {
        let runtime = RuntimeApi::start(&lab.work.dir, name);
        let (cmd, bin_name) = Function::command(lab, name, bin, &runtime, env);
        let mut proc = Proc::spawn(
            &bin_name,
            cmd,
            lab.work.dir.join(format!("{name}.function.log")),
        );
        let t = Instant::now();
        let status = loop {
            if let Ok(Some(status)) = proc.child.try_wait() {
                break status;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{name}: still running after 60 s (its initialisation was to fail):\n{}",
                tail(&proc.log_text(), 8000)
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!status.success(), "{name}: exited {status}");
        (runtime.status(), proc.log_text())
    }

    /// The command of a function binary: the Lambda environment against `runtime`, the moto
    /// AWS environment, the base settings, then `env`.
    fn command(
        lab: &Lab,
        name: &str,
        bin: &Path,
        runtime: &RuntimeApi,
        env: &[(&str, &str)],
    ) -> (Command, String) {
        let dir = &lab.work.dir;
        let spool = dir.join(format!("{name}.spool"));
        let bin_name = bin
            .file_name()
            .map_or_else(|| "function".into(), |n| n.to_string_lossy().into_owned());
        let log_group = format!("/aws/lambda/{bin_name}");
        let mut cmd = Command::new(bin);
        cmd.env_clear();
        for (k, v) in lab.moto.aws_env(dir) {
            cmd.env(k, v);
        }
        let api = format!("127.0.0.1:{}", runtime.port);
        let base: Vec<(&str, &str)> = vec![
            ("AWS_LAMBDA_RUNTIME_API", &api),
            ("AWS_LAMBDA_FUNCTION_NAME", name),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
            (
                "AWS_LAMBDA_LOG_STREAM_NAME",
                "2026/11/30/[$LATEST]0123456789abcdef",
            ),
            ("AWS_LAMBDA_LOG_GROUP_NAME", &log_group),
            ("DMS2ICEBERG_WAREHOUSE", WAREHOUSE),
            ("DMS2ICEBERG_GLUE_DATABASE", DB),
            ("DMS2ICEBERG_CONFIG", "s3://landing/config/dms2iceberg.toml"),
            ("DMS2ICEBERG_MAX_FILES_PER_COMMIT", "1"),
            ("DMS2ICEBERG_MAX_FILES_PER_INVOCATION", "100"),
            ("RUST_BACKTRACE", "1"),
        ];
        for (k, v) in base {
            cmd.env(k, v);
        }
        cmd.env("DMS2ICEBERG_SPOOL_DIR", &spool);
        for (k, v) in env {
            cmd.env(k, v);
        }
        (cmd, bin_name)
    }

    /// Invokes the function with `event` and waits for its outcome.
    pub fn invoke(&mut self, event: &Value) -> Outcome {
        let o = self.runtime.invoke(event, Duration::from_secs(120));
        if o.outcome == "timeout" || o.outcome == "init_error" {
            self.proc.assert_running();
            panic!(
                "{}: invocation {}:\n{}",
                self.name,
                o.outcome,
                tail(&self.proc.log_text(), 8000)
            );
        }
        o
    }

    /// Invokes and panics (with the function's log) unless it answered with a response.
    pub fn invoke_ok(&mut self, event: &Value) -> Outcome {
        let o = self.invoke(event);
        assert!(
            o.is_response(),
            "{}: invocation failed: {}\nevent: {}\nlog:\n{}",
            self.name,
            o.error_message(),
            tail(&event.to_string(), 2000),
            tail(&self.proc.log_text(), 6000)
        );
        o
    }

    pub fn log(&self) -> String {
        self.proc.log_text()
    }

    /// `init_ms` of the function's "initialised" log line.
    pub fn init_ms(&self) -> Option<i64> {
        self.log().lines().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["fields"]["message"] == "initialised")
                .then(|| v["fields"]["init_ms"].as_i64())
                .flatten()
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Events

/// S3 notification events by object key, as dmsgen wrote them (`--events`).
pub fn s3_events(events_dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(events_dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let key = decode_event_key(v["Records"][0]["s3"]["object"]["key"].as_str().unwrap());
        out.insert(key, v);
    }
    out
}

static MSG: AtomicUsize = AtomicUsize::new(0);

/// An SQS message record wrapping `body` (an S3 notification or EventBridge event, or any text).
pub fn sqs_record(body: &str) -> (String, Value) {
    let n = MSG.fetch_add(1, Ordering::SeqCst);
    let id = format!("0a1b2c3d-0000-4000-8000-{n:012}");
    let rec = json!({
        "messageId": id,
        "receiptHandle": format!("AQEB{n:08}handle"),
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": now_ms().to_string(),
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": now_ms().to_string()
        },
        "messageAttributes": {},
        "md5OfBody": "00000000000000000000000000000000",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:dms2iceberg-ingest",
        "awsRegion": "us-east-1"
    });
    (id, rec)
}

/// Invokes `a` with `ea` and `b` with `eb` at the same time (two functions racing).
pub fn race(a: &mut Function, b: &mut Function, ea: Value, eb: Value) -> (Outcome, Outcome) {
    std::thread::scope(|s| {
        let ha = s.spawn(move || a.invoke(&ea));
        let hb = s.spawn(move || b.invoke(&eb));
        (ha.join().unwrap(), hb.join().unwrap())
    })
}

/// Both invocations of a [`race`] answered (neither failed, timed out or crashed), with both
/// functions' logs in the message if not.
pub fn assert_both_answered(oa: &Outcome, ob: &Outcome, a: &Function, b: &Function) {
    assert!(
        oa.is_response() && ob.is_response(),
        "a: {oa:?}\nb: {ob:?}\nlog a:\n{}\nlog b:\n{}",
        tail(&a.log(), 4000),
        tail(&b.log(), 4000)
    );
}

pub fn sqs_event(records: &[Value]) -> Value {
    json!({ "Records": records })
}

/// An EventBridge "Object Created" event (the key as stored, not URL-encoded).
pub fn eventbridge_event(bucket: &str, key: &str, size: usize) -> Value {
    let n = MSG.fetch_add(1, Ordering::SeqCst);
    json!({
        "version": "0",
        "id": format!("17793124-05d4-b198-2fde-{n:012}"),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-11-30T12:00:00Z",
        "region": "us-east-1",
        "resources": [format!("arn:aws:s3:::{bucket}")],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": {"key": key, "size": size, "etag": "00000000000000000000000000000000",
                       "sequencer": format!("{n:016X}")},
            "request-id": "EXAMPLE",
            "requester": "123456789012",
            "source-ip-address": "10.0.0.1",
            "reason": "PutObject"
        }
    })
}

/// An EventBridge "Scheduled Event", as a schedule rule (the template's `CompactSchedule`)
/// invokes the compaction function with.
pub fn scheduled_event() -> Value {
    let n = MSG.fetch_add(1, Ordering::SeqCst);
    json!({
        "version": "0",
        "id": format!("53dc4d37-cffa-4f76-80c9-{n:012}"),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-11-30T13:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/dms2iceberg-compact-schedule"],
        "detail": {}
    })
}

/// The files of a table's current snapshot, as PyIceberg (GlueCatalog on the emulator) reads
/// them from the manifests: live entries by content type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFiles {
    pub metadata_location: String,
    pub snapshot_id: Option<i64>,
    /// Snapshots the table metadata holds.
    pub snapshots: usize,
    pub data_files: u64,
    pub position_delete_files: u64,
    pub equality_delete_files: u64,
    /// Records in the data files (deleted rows included).
    pub data_records: u64,
    pub data_bytes: u64,
    /// `total-data-files` / `total-delete-files` of the snapshot summary (what the writer says).
    pub summary_total_data_files: Option<u64>,
    pub summary_total_delete_files: Option<u64>,
}

impl SnapshotFiles {
    pub fn delete_files(&self) -> u64 {
        self.position_delete_files + self.equality_delete_files
    }
}

const SNAPSHOT_FILES_PY: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from moto_server import glue_catalog
from pyiceberg.manifest import DataFileContent
t = glue_catalog(sys.argv[2]).load_table(sys.argv[3])
s = t.current_snapshot()
out = {"metadata_location": t.metadata_location, "snapshot_id": None,
       "snapshots": len(t.metadata.snapshots), "data": 0, "pos": 0, "eq": 0,
       "records": 0, "bytes": 0, "summary": {}}
if s is not None:
    out["snapshot_id"] = s.snapshot_id
    out["summary"] = dict(s.summary.additional_properties) if s.summary else {}
    for m in s.manifests(t.io):
        for e in m.fetch_manifest_entry(t.io, discard_deleted=True):
            f = e.data_file
            if f.content == DataFileContent.DATA:
                out["data"] += 1
                out["records"] += f.record_count
                out["bytes"] += f.file_size_in_bytes
            elif f.content == DataFileContent.POSITION_DELETES:
                out["pos"] += 1
            else:
                out["eq"] += 1
print(json.dumps(out))
"#;

// ---------------------------------------------------------------------------------------------
// The lab: emulator, buckets, generated DMS trees, readers

/// When it drops at the end of a test that passed (before its emulator stops), every table in
/// Glue and in the table buckets made through its emulator is verified
/// ([`Lab::verify_tables`]); then its work dir checks its local warehouses, if any. A test that
/// leaves a table broken on purpose says why with [`Lab::skip_verify`].
pub struct Lab {
    // Dropped in this order, after `Lab`'s own `drop` (which needs the emulator running).
    pub work: Work,
    pub moto: Moto,
    /// The DMS endpoint's BucketFolder: objects are `<folder>/<schema>/<table>/…`.
    pub folder: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() || self.work.verify_skipped().is_some() {
            return;
        }
        let started = Instant::now();
        match self.moto.check_catalogs(&self.work.dir) {
            Ok(reports) => eprintln!(
                "{}: end-of-test verification of Glue and S3 Tables: {} table(s) in {} ms",
                self.work.name,
                reports.len(),
                started.elapsed().as_millis()
            ),
            Err(e) => panic!(
                "{}: a table does not verify at the end of the test (every snapshot still in a \
                 table's metadata must read, and every file its manifests name exist; a test \
                 that leaves a table broken on purpose calls `skip_verify(\"why\")`).\n{e}",
                self.work.name
            ),
        }
    }
}

impl Lab {
    pub fn new(name: &str) -> Lab {
        Lab::with_folder(name, "dms")
    }

    pub fn with_folder(name: &str, folder: &str) -> Lab {
        let work = Work::new(&format!("lambda-{name}"));
        let moto = Moto::start(&work.dir);
        moto.create_bucket(LANDING);
        moto.create_bucket(WAREHOUSE_BUCKET);
        Lab {
            work,
            moto,
            folder: folder.to_string(),
        }
    }

    pub fn events_dir(&self) -> PathBuf {
        self.work.dir.join("events")
    }

    /// Skips the end-of-test verification of the lab's catalogs (and of its work dir's): for a
    /// test that leaves a table broken on purpose; `why` says what is broken.
    pub fn skip_verify(&self, why: &str) {
        self.work.skip_verify(why);
    }

    /// The end-of-test invariant now: every table in Glue and in the lab's table buckets (and
    /// in local warehouses of its work dir) verified with `verify --read`; panics with what is
    /// wrong. Turns the emulator's fault injection off.
    #[track_caller]
    pub fn verify_tables(&self) -> Vec<Value> {
        let mut reports = self
            .moto
            .check_catalogs(&self.work.dir)
            .unwrap_or_else(|e| panic!("{}: a table does not verify:\n{e}", self.work.name));
        reports.extend(self.work.verify_tables());
        reports
    }

    /// dmsgen into the work dir: objects under `<folder>/<schema>/<table>/` (the BucketFolder),
    /// one S3 event per object into `events/`.
    pub fn generate(&self, scenario: &str, args: &[&str]) {
        let ev = self.events_dir().display().to_string();
        let mut a: Vec<&str> = args.to_vec();
        a.extend([
            "--bucket-folder",
            &self.folder,
            "--events",
            &ev,
            "--bucket",
            LANDING,
        ]);
        self.work.generate(scenario, &a);
    }

    /// The S3 event dmsgen wrote for an object key.
    pub fn s3_event(&self, key: &str) -> Value {
        s3_events(&self.events_dir())
            .remove(key)
            .unwrap_or_else(|| panic!("dmsgen wrote no event for {key}"))
    }

    /// Local file of an object key (dmsgen writes `dms/<key>`, held-back files `pending/dms/<key>`).
    pub fn local(&self, key: &str) -> PathBuf {
        for root in [
            self.work.dir.join("dms"),
            self.work.dir.join("pending").join("dms"),
        ] {
            let p = root.join(key);
            if p.exists() {
                return p;
            }
        }
        panic!("no generated file for key {key}")
    }

    /// Uploads one generated object to the landing bucket under its key.
    pub fn upload(&self, key: &str) -> usize {
        let data = std::fs::read(self.local(key)).unwrap();
        self.moto.put(LANDING, key, &data);
        data.len()
    }

    /// The config the function reads: dmsgen's config.toml with `[source] bucket_folder`,
    /// and `extra` lines inserted under table sections (`(section, line)`).
    pub fn config_text(&self, extra: &[(&str, &str)]) -> String {
        let mut text = std::fs::read_to_string(self.work.config()).unwrap();
        for (section, line) in extra {
            let header = format!("[tables.\"{section}\"]\n");
            assert!(text.contains(&header), "no section {header} in\n{text}");
            text = text.replacen(&header, &format!("{header}{line}\n"), 1);
        }
        let line = format!("bucket_folder = \"{}\"\n", self.folder);
        // dmsgen writes a [source] section of its own for some settings (`cdc_path`).
        match text.find("[source]\n") {
            Some(i) => {
                let at = i + "[source]\n".len();
                format!("{}{line}{}", &text[..at], &text[at..])
            }
            None => format!("[source]\n{line}\n{text}"),
        }
    }

    /// One SQS batch carrying the S3 events of `keys`.
    pub fn sqs_batch(&self, keys: &[String]) -> Value {
        sqs_event(
            &keys
                .iter()
                .map(|k| sqs_record(&self.s3_event(k).to_string()).1)
                .collect::<Vec<_>>(),
        )
    }

    pub fn upload_config(&self, extra: &[(&str, &str)]) {
        let text = self.config_text(extra);
        self.moto.put(LANDING, CONFIG_KEY, text.as_bytes());
    }

    /// The Glue/Iceberg name of a generated table (`sales.product` → `dms.product`).
    pub fn glue_name(&self, meta: &Meta) -> String {
        format!("{DB}.{}", meta.table.rsplit('.').next().unwrap())
    }

    /// Runs our CLI against Glue with the emulator's AWS environment.
    pub fn cli(&self, args: &[&str]) -> Run {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_dms2iceberg"));
        let mut cmd = Command::new(&bin);
        cmd.env_clear().args(args);
        for (k, v) in self.moto.aws_env(&self.work.dir) {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        Run {
            cmd: format!("dms2iceberg {}", args.join(" ")),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `dms2iceberg <command> <ns.table> --catalog s3tables --warehouse ARN --format json`
    pub fn s3tables_json(&self, arn: &str, command: &str, table: &str) -> Vec<Value> {
        let r = self
            .cli(&[
                command,
                table,
                "--catalog",
                "s3tables",
                "--warehouse",
                arn,
                "--format",
                "json",
            ])
            .assert_success();
        parse_json_lines(&r.stdout, &format!("{command} {table}"))
    }

    /// The generated table `table` in table bucket `arn` equals `rows` through our scan, and
    /// through PyIceberg (a static table) and DuckDB on the metadata location the s3tables API
    /// returns.
    pub fn assert_s3tables_rows(&self, arn: &str, table: &str, rows: &[Value], label: &str) {
        let meta = self.work.meta(table);
        let name = self.glue_name(&meta);
        let actual = self.s3tables_json(arn, "scan", &name);
        assert_rows(&format!("scan {name} ({label})"), &meta, rows, &actual);
        let expected = self
            .work
            .write_jsonl(&format!("{name}.{label}.s3tables.jsonl"), rows);
        let mut cmd = python_cmd("moto_server.py");
        cmd.args([
            "check-s3tables",
            "--endpoint",
            &self.moto.endpoint(),
            "--bucket-arn",
            arn,
            "--table",
            &name,
        ])
        .arg("--expected")
        .arg(&expected)
        .arg("--meta")
        .arg(self.work.meta_path(table))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("HOME", &self.work.dir);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "PyIceberg / DuckDB disagree with {} for {name} on S3 Tables:\n{}\n{}",
            expected.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("{}", String::from_utf8_lossy(&out.stdout));
    }

    /// `dms2iceberg <command> <db.table> --catalog glue --warehouse s3://… --format json`
    fn glue_json(&self, command: &str, glue_table: &str) -> Vec<Value> {
        let r = self
            .cli(&[
                command,
                glue_table,
                "--catalog",
                "glue",
                "--warehouse",
                WAREHOUSE,
                "--format",
                "json",
            ])
            .assert_success();
        parse_json_lines(&r.stdout, &format!("{command} {glue_table}"))
    }

    /// `dms2iceberg scan <db.table>` on the Glue catalog.
    pub fn scan(&self, glue_table: &str) -> Vec<Value> {
        self.glue_json("scan", glue_table)
    }

    /// `dms2iceberg history <db.table>` on the Glue catalog.
    pub fn history(&self, glue_table: &str) -> Vec<Value> {
        self.glue_json("history", glue_table)
    }

    /// Every DMS file the table's snapshots record, in snapshot order (duplicates kept).
    pub fn applied_files(&self, glue_table: &str) -> Vec<String> {
        self.history(glue_table)
            .iter()
            .flat_map(|s| {
                s["source_files"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|f| f.as_str().unwrap().to_string())
            })
            .collect()
    }

    /// PyIceberg's GlueCatalog (pointed at the emulator) reads the table; compared with `expected`.
    pub fn check_pyiceberg(&self, glue_table: &str, expected: &Path, meta: &Path) {
        let mut cmd = python_cmd("moto_server.py");
        cmd.args([
            "check-table",
            "--endpoint",
            &self.moto.endpoint(),
            "--table",
            glue_table,
        ])
        .arg("--expected")
        .arg(expected)
        .arg("--meta")
        .arg(meta)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("HOME", &self.work.dir);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "PyIceberg (GlueCatalog on the emulator) disagrees with {} for {glue_table}:\n{}\n{}",
            expected.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The generated table `table` (dmsgen's name, e.g. `sales.product`) through our scan and
    /// PyIceberg equals `rows`; its Glue entry is an Iceberg table with every column of `meta`.
    pub fn assert_table_rows(&self, table: &str, rows: &[Value], label: &str) {
        let meta = self.work.meta(table);
        let name = self.glue_name(&meta);
        let actual = self.scan(&name);
        assert_rows(&format!("scan {name} ({label})"), &meta, rows, &actual);
        let p = self
            .work
            .write_jsonl(&format!("{name}.{label}.expected.jsonl"), rows);
        self.check_pyiceberg(&name, &p, &self.work.meta_path(table));
    }

    /// Final state: expected/<table>.jsonl, plus the Glue table checks.
    pub fn assert_table(&self, table: &str) {
        let rows = self.work.expected(table);
        self.assert_table_rows(table, &rows, "final");
        self.assert_glue_entry(table);
    }

    /// The Glue table as Athena & co. need it (Iceberg's GlueCatalog conventions).
    pub fn assert_glue_entry(&self, table: &str) -> Value {
        let meta = self.work.meta(table);
        let name = meta.table.rsplit('.').next().unwrap().to_string();
        let t = self.moto.glue_table(DB, &name);
        let p = &t["Parameters"];
        assert_eq!(t["TableType"], "EXTERNAL_TABLE", "TableType of {name}: {t}");
        assert!(
            p["table_type"]
                .as_str()
                .is_some_and(|v| v.eq_ignore_ascii_case("ICEBERG")),
            "table_type of {name}: {t}"
        );
        let loc = format!("{WAREHOUSE}/{DB}.db/{name}");
        let ml = p["metadata_location"].as_str().unwrap_or_default();
        assert!(
            ml.starts_with(&format!("{loc}/metadata/")) && ml.ends_with(".metadata.json"),
            "metadata_location of {name}: {t}"
        );
        let prev = p["previous_metadata_location"].as_str().unwrap_or_default();
        assert!(
            prev.starts_with(&format!("{loc}/metadata/")) && prev != ml,
            "previous_metadata_location of {name}: {t}"
        );
        assert_eq!(
            t["StorageDescriptor"]["Location"], loc,
            "StorageDescriptor.Location of {name}"
        );
        let cols: Vec<&str> = t["StorageDescriptor"]["Columns"]
            .as_array()
            .unwrap_or_else(|| panic!("no StorageDescriptor.Columns: {t}"))
            .iter()
            .map(|c| c["Name"].as_str().unwrap())
            .collect();
        for c in meta.columns.keys() {
            assert!(
                cols.contains(&c.as_str()),
                "Glue StorageDescriptor of {name} lacks column {c}: {cols:?}"
            );
        }
        // The metadata file Glue names exists in the warehouse bucket.
        let key = ml
            .strip_prefix(&format!("s3://{WAREHOUSE_BUCKET}/"))
            .unwrap();
        assert!(
            self.moto.get(WAREHOUSE_BUCKET, key).is_some(),
            "{ml} does not exist"
        );
        t
    }

    /// Data and delete files of the current snapshot of `glue_table` (`db.table`), read through
    /// PyIceberg's GlueCatalog on the emulator (independently of our reader).
    pub fn snapshot_files(&self, glue_table: &str) -> SnapshotFiles {
        let out = Command::new(python())
            .arg("-c")
            .arg(SNAPSHOT_FILES_PY)
            .arg(crate::common::repo_root().join("tests").join("support"))
            .arg(self.moto.endpoint())
            .arg(glue_table)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("HOME", &self.work.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "PyIceberg could not list the files of {glue_table}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "files of {glue_table}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
        let total = |k: &str| v["summary"][k].as_str().and_then(|s| s.parse().ok());
        SnapshotFiles {
            metadata_location: v["metadata_location"].as_str().unwrap_or("").to_string(),
            snapshot_id: v["snapshot_id"].as_i64(),
            snapshots: n("snapshots") as usize,
            data_files: n("data"),
            position_delete_files: n("pos"),
            equality_delete_files: n("eq"),
            data_records: n("records"),
            data_bytes: n("bytes"),
            summary_total_data_files: total("total-data-files"),
            summary_total_delete_files: total("total-delete-files"),
        }
    }

    /// The generated DMS files of a table, in DMS (apply) order, as object keys.
    pub fn files(&self, table: &str) -> Vec<String> {
        self.work.meta(table).files
    }
}

/// A small deterministic PRNG (xorshift64*), for shuffles that reproduce from a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// Median of some millisecond figures.
pub fn median(v: &[i64]) -> i64 {
    let mut s = v.to_vec();
    s.sort();
    s[s.len() / 2]
}
