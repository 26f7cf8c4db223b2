//! An Iceberg REST catalog server that others wrote (rustberg, from crates.io; `scripts/test`
//! builds it and sets `DMS2ICEBERG_RUSTBERG`), one per test on a free loopback port, its
//! catalog and `file://` warehouse in the test's work dir, API-key authentication on (the key
//! is sent as a bearer token, as PyIceberg's `token=` sends it).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Run, Work, bin, python, support, verify_catalog};

/// When it drops at the end of a test that passed, every table of the catalog is verified with
/// `verify --read` ([`Rustberg::verify_tables`]) before the server stops; a test that leaves a
/// table broken on purpose says why with [`Rustberg::skip_verify`].
pub struct Rustberg {
    child: Child,
    pub uri: String,
    /// The API key the server accepts (as `Authorization: Bearer`).
    pub token: String,
    pub warehouse: PathBuf,
    log: PathBuf,
    /// What a client needs beside the token to read the warehouse's files (the owner's keys
    /// for a warehouse on S3): the environment of the end-of-test verification.
    storage_env: Vec<(String, String)>,
    skip_verify: Mutex<Option<String>>,
}

pub fn rustberg_bin() -> PathBuf {
    match std::env::var_os("DMS2ICEBERG_RUSTBERG") {
        Some(p) if Path::new(&p).is_file() => PathBuf::from(p),
        _ => panic!(
            "DMS2ICEBERG_RUSTBERG is not set to the rustberg binary: run the tests through \
             scripts/test, which builds it (cargo install rustberg, cached under ~/.cache/dms2iceberg)"
        ),
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

/// A warehouse on S3 (an emulator) for [`Rustberg::start_on_s3`], with the credential vending
/// the server does from it.
pub struct S3Warehouse<'a> {
    /// The S3 (and STS) endpoint.
    pub endpoint: &'a str,
    pub bucket: &'a str,
    /// The server's own keys (metadata files, and STS AssumeRole for vending).
    pub key: (&'a str, &'a str),
    /// The role whose credentials the server vends, scoped to each table's prefix.
    pub role_arn: &'a str,
}

impl Rustberg {
    /// A `file://` warehouse in the work dir.
    pub fn start(w: &Work) -> Rustberg {
        let warehouse = w.dir.join("rustberg").join("warehouse");
        std::fs::create_dir_all(&warehouse).unwrap();
        let storage = format!("warehouse_location = \"file://{}\"\n", warehouse.display());
        Rustberg::launch(w, &storage, &[], warehouse, Vec::new())
    }

    /// A warehouse on S3 that vends per-table credentials (STS AssumeRole of `s3.role_arn`)
    /// to clients that ask for them.
    pub fn start_on_s3(w: &Work, s3: &S3Warehouse) -> Rustberg {
        let storage = format!(
            r#"warehouse_location = "s3://{bucket}/warehouse"
[storage.properties]
"s3.endpoint" = "{endpoint}"
"s3.path-style-access" = "true"
"s3.region" = "us-east-1"
"s3.access-key-id" = "env:RUSTBERG_S3_KEY"
"s3.secret-access-key" = "env:RUSTBERG_S3_SECRET"
[credentials]
provider = "aws"
[credentials.aws]
region = "us-east-1"
role_arn = "{role}"
duration_seconds = 900
"#,
            bucket = s3.bucket,
            endpoint = s3.endpoint,
            role = s3.role_arn
        );
        let env = [
            ("RUSTBERG_S3_KEY", s3.key.0),
            ("RUSTBERG_S3_SECRET", s3.key.1),
            // Its STS client: the SDK's standard chain and endpoint variables.
            ("AWS_ACCESS_KEY_ID", s3.key.0),
            ("AWS_SECRET_ACCESS_KEY", s3.key.1),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", s3.endpoint),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ];
        // The warehouse owner's keys read its files directly (as DuckDB does in the tests).
        let storage_env = [
            ("AWS_ACCESS_KEY_ID", s3.key.0),
            ("AWS_SECRET_ACCESS_KEY", s3.key.1),
            ("AWS_ENDPOINT_URL", s3.endpoint),
            ("DMS2ICEBERG_S3_PATH_STYLE", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Rustberg::launch(w, &storage, &env, PathBuf::new(), storage_env)
    }

    fn launch(
        w: &Work,
        storage: &str,
        env: &[(&str, &str)],
        warehouse: PathBuf,
        storage_env: Vec<(String, String)>,
    ) -> Rustberg {
        let bin = rustberg_bin();
        let dir = w.dir.join("rustberg");
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let port = free_port();
        let token = format!("rb_test_{}", uuid_like());
        let config = dir.join("config.toml");
        let text = format!(
            "{}{storage}",
            include_str!("../support/rustberg.toml")
                .replace("@PORT@", &port.to_string())
                .replace("@DATA@", &data.display().to_string())
        );
        std::fs::File::create(&config)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .unwrap();
        let log = dir.join("rustberg.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(&bin)
            .args(["--config", &config.display().to_string(), "--insecure-http"])
            .env("RUSTBERG_KEY", &token)
            .envs(env.iter().copied())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let server = Rustberg {
            child,
            uri: format!("http://127.0.0.1:{port}"),
            token,
            warehouse,
            log,
            storage_env,
            skip_verify: Mutex::new(None),
        };
        server.wait_ready(&bin);
        server
    }

    fn wait_ready(&self, bin: &Path) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = format!("{}/ready", self.uri);
        while Instant::now() < deadline {
            let ok = Command::new(bin)
                .args(["healthcheck", "--url", &url])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "rustberg did not become ready at {}; its log:\n{}",
            self.uri,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// The environment a client of this server runs with (`extra` added).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("DMS2ICEBERG_REST_TOKEN".into(), self.token.clone()),
            // No AWS here: the SDK's region lookup would try the instance metadata service.
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ]
    }

    /// `dms2iceberg --catalog rest --uri URI <args…>` with the token in the environment
    /// (`env` replaces or adds variables, `remove` takes them away).
    pub fn cli_with(&self, args: &[&str], env: &[(&str, &str)], remove: &[&str]) -> Run {
        let mut all: Vec<String> = vec!["--catalog".into(), "rest".into(), "--uri".into()];
        all.push(self.uri.clone());
        all.extend(args.iter().map(|s| s.to_string()));
        // A run that never ends fails its test instead of holding the suite (coreutils'
        // `timeout`: status 124 when it had to stop the run).
        let mut c = Command::new("timeout");
        c.arg("--kill-after=10")
            .arg(CLI_TIMEOUT_SECS.to_string())
            .arg(bin())
            .args(&all);
        for (k, v) in self.env() {
            c.env(k, v);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        for k in remove {
            c.env_remove(k);
        }
        let out = c
            .output()
            .unwrap_or_else(|e| panic!("cannot run dms2iceberg: {e}"));
        let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.code() == Some(124) {
            stderr.push_str(&format!(
                "\n(the test harness stopped this run after {CLI_TIMEOUT_SECS} s: it hung)"
            ));
        }
        Run {
            cmd: format!("dms2iceberg {}", all.join(" ")),
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr,
        }
    }

    pub fn cli(&self, args: &[&str]) -> Run {
        self.cli_with(args, &[], &[])
    }

    /// Ingests `paths` with the work dir's config, JSON reports.
    pub fn ingest(&self, w: &Work, paths: &[PathBuf]) -> Run {
        let config = w.config().display().to_string();
        let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let mut args: Vec<&str> = vec!["ingest"];
        args.extend(paths.iter().map(String::as_str));
        args.extend(["--config", &config]);
        self.cli(&args)
    }

    pub fn scan(&self, table: &str) -> Vec<serde_json::Value> {
        let r = self
            .cli(&["scan", table, "--format", "json"])
            .assert_success();
        super::parse_json_lines(&r.stdout, &format!("scan {table}"))
    }

    /// Our scan, PyIceberg's RestCatalog and DuckDB's REST client all read `expected`.
    pub fn assert_table(&self, w: &Work, table: &str, expected: &[serde_json::Value]) {
        let meta = w.meta(table);
        super::assert_rows(
            &format!("scan {table} (REST)"),
            &meta,
            expected,
            &self.scan(table),
        );
        let p = w.write_jsonl(&format!("{table}.rest.expected.jsonl"), expected);
        let mut c = Command::new(python());
        c.args([
            support("check_readers.py").display().to_string(),
            "--rest-uri".into(),
            self.uri.clone(),
            "--table".into(),
            table.into(),
            "--expected".into(),
            p.display().to_string(),
            "--meta".into(),
            w.meta_path(table).display().to_string(),
        ])
        .env("DMS2ICEBERG_REST_TOKEN", &self.token)
        .env("PYTHONDONTWRITEBYTECODE", "1");
        let out = c.output().expect("check_readers.py runs");
        assert!(
            out.status.success(),
            "independent REST readers disagree with the expected state of {table}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Skips the end-of-test verification of the catalog's tables: for a test that leaves a
    /// table broken on purpose; `why` says what is broken.
    pub fn skip_verify(&self, why: &str) {
        assert!(!why.trim().is_empty(), "skip_verify needs a reason");
        *self.skip_verify.lock().unwrap() = Some(why.to_string());
    }

    /// Every table of the catalog verified with `verify --read` (see
    /// [`super::verify_catalog`]): their reports, or what is wrong.
    pub fn check_tables(&self) -> Result<Vec<serde_json::Value>, String> {
        let env: Vec<(&str, &str)> = self
            .storage_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let cli = |a: &[String]| {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            self.cli_with(&a, &env, &[])
        };
        verify_catalog(&cli, &[])
    }

    /// [`Rustberg::check_tables`], panicking with what is wrong: the end-of-test invariant,
    /// callable earlier.
    #[track_caller]
    pub fn verify_tables(&self) -> Vec<serde_json::Value> {
        self.check_tables()
            .unwrap_or_else(|e| panic!("REST catalog {}: a table does not verify:\n{e}", self.uri))
    }
}

/// Longest a CLI run against the REST catalog may take in a test.
const CLI_TIMEOUT_SECS: u64 = 600;

impl Drop for Rustberg {
    fn drop(&mut self) {
        let checked = if std::thread::panicking() {
            Ok(Vec::new())
        } else if let Some(why) = self.skip_verify.lock().unwrap().clone() {
            eprintln!(
                "REST catalog {}: end-of-test verification skipped: {why}",
                self.uri
            );
            Ok(Vec::new())
        } else {
            let started = Instant::now();
            let checked = self.check_tables();
            if let Ok(reports) = &checked {
                eprintln!(
                    "REST catalog {}: end-of-test verification: {} table(s) in {} ms",
                    self.uri,
                    reports.len(),
                    started.elapsed().as_millis()
                );
            }
            checked
        };
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Err(e) = checked {
            panic!(
                "REST catalog {}: a table does not verify at the end of the test (every snapshot \
                 still in a table's metadata must read, and every file its manifests name \
                 exist; a test that leaves a table broken on purpose calls \
                 `skip_verify(\"why\")`).\n{e}",
                self.uri
            );
        }
    }
}

/// A stand-in identity provider for OAuth2 client credentials (tests/support/oauth_server.py):
/// client `dms2iceberg` with secret `s3cret` gets `token` (what the catalog accepts).
pub struct TokenServer {
    child: Child,
    /// The token endpoint (`DMS2ICEBERG_REST_OAUTH2_URI`).
    pub uri: String,
    grants: PathBuf,
}

impl TokenServer {
    pub fn start(w: &Work, token: &str, expires_in: u64) -> TokenServer {
        let port_file = w.dir.join("oauth.port");
        let grants = w.dir.join("oauth.grants");
        let child = Command::new(python())
            .args([
                support("oauth_server.py").display().to_string(),
                "--port-file".into(),
                port_file.display().to_string(),
                "--client-id".into(),
                "dms2iceberg".into(),
                "--client-secret".into(),
                "s3cret".into(),
                "--token".into(),
                token.into(),
                "--grants".into(),
                grants.display().to_string(),
                "--expires-in".into(),
                expires_in.to_string(),
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("oauth_server.py starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p;
            }
            assert!(Instant::now() < deadline, "oauth_server.py did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        TokenServer {
            child,
            uri: format!("http://127.0.0.1:{}/token", port.trim()),
            grants,
        }
    }

    /// Tokens granted so far.
    pub fn grants(&self) -> usize {
        std::fs::read_to_string(&self.grants)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A unique-enough suffix for keys (no uuid crate in the tests).
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", nanos, std::process::id())
}
