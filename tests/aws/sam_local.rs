//! `sam local invoke` for real: infra/README.md's "Test locally" recipe, step by step, with every
//! sample event of `infra/events/`, the functions in Docker (SAM CLI's Runtime Interface
//! Emulator on the base image `scripts/sam-docker image` builds), S3 and Glue from the emulator
//! (`tests/support/moto_server.py`, Glue `VersionId` enforced) on the host. Checks each response
//! and the tables afterwards, through our CLI on Glue and through PyIceberg's GlueCatalog.
//!
//! Needs a Docker daemon and the base image: `scripts/test` provides both where it can (as root:
//! `scripts/sam-docker start` and `image`) and sets `DMS2ICEBERG_SAM_LOCAL=1`, or
//! `DMS2ICEBERG_SAM_LOCAL=skip:<why>` where it cannot; then this test says why it did not run.
//! By hand, after one `scripts/test`:
//! `DMS2ICEBERG_PYTHON=$PWD/.venv/bin/python DMS2ICEBERG_INFRA_PYTHON=$PWD/.venv-infra/bin/python
//! DMS2ICEBERG_SAM_LOCAL=1 cargo test --features e2e --test aws sam_local -- --nocapture`.
//!
//! Deviations from the recipe, each for the test's sake: the emulator listens on a free port
//! (not 5000) and `infra/env.json` is copied with that port; the functions' `bootstrap` is the
//! test build of the binaries staged into the layout `sam build` produces (`sam build` itself
//! would cross-compile a release build with cargo-lambda, minutes more, and is checked by
//! tests/aws/template/); the events are invoked with `--skip-pull-image` and
//! `--parameter-overrides Architecture=x86_64`, as the README says for an x86 machine.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::common::{python, repo_root, support};
use crate::lambda_support::{Moto, compact_bin, ingest_bin};
use serde_json::{Value, json};

const LANDING: &str = "dms2iceberg-landing";
const WAREHOUSE_BUCKET: &str = "dms2iceberg-warehouse";
const WAREHOUSE: &str = "s3://dms2iceberg-warehouse/warehouse/";

/// Whether this machine runs the test, or why not.
fn enabled() -> Result<(), String> {
    match std::env::var("DMS2ICEBERG_SAM_LOCAL").ok().as_deref() {
        Some("1") => Ok(()),
        Some(v) if v.starts_with("skip:") => Err(v["skip:".len()..].trim().to_string()),
        _ => Err(
            "DMS2ICEBERG_SAM_LOCAL is not set: run `scripts/test` (as root it starts \
                  dockerd and builds the base image), or set it to 1 once `scripts/sam-docker \
                  check` succeeds"
                .into(),
        ),
    }
}

fn infra_tool(name: &str) -> PathBuf {
    let py = std::env::var_os("DMS2ICEBERG_INFRA_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv-infra/bin/python"));
    let tool = py.parent().unwrap().join(name);
    assert!(
        tool.exists(),
        "{} is missing: build .venv-infra with scripts/test",
        tool.display()
    );
    tool
}

/// What `sam build` leaves in `.aws-sam/build` (template with `CodeUri` pointing at each
/// function's folder, and the binary as `bootstrap` there), built from the test binaries.
fn stage_build(dir: &Path) -> PathBuf {
    let build = dir.join("build");
    let mut template = std::fs::read_to_string(repo_root().join("template.yaml")).unwrap();
    for (from, to) in [
        ("CodeUri: functions/ingest", "CodeUri: IngestFunction"),
        ("CodeUri: functions/compact", "CodeUri: CompactFunction"),
    ] {
        assert!(template.contains(from), "template.yaml has no `{from}`");
        template = template.replace(from, to);
    }
    for (function, bin) in [
        ("IngestFunction", ingest_bin()),
        ("CompactFunction", compact_bin()),
    ] {
        let d = build.join(function);
        std::fs::create_dir_all(&d).unwrap();
        // A link, not a copy: a debug build is hundreds of MB.
        if std::fs::hard_link(&bin, d.join("bootstrap")).is_err() {
            std::fs::copy(&bin, d.join("bootstrap")).unwrap();
        }
    }
    std::fs::write(build.join("template.yaml"), template).unwrap();
    build
}

struct Invoked {
    response: Value,
    stderr: String,
    seconds: f64,
}

/// `sam local invoke FUNCTION -e infra/events/EVENT`, as the README runs it.
fn sam_invoke(build: &Path, env_json: &Path, function: &str, event: &str) -> Invoked {
    let root = repo_root();
    let mut cmd = Command::new(infra_tool("sam"));
    cmd.current_dir(&root)
        .args(["local", "invoke", function, "-e"])
        .arg(format!("infra/events/{event}"))
        .arg("--template")
        .arg(build.join("template.yaml"))
        .arg("--config-file")
        .arg(root.join("infra/samconfig.toml"))
        .arg("--env-vars")
        .arg(env_json)
        .args([
            "--skip-pull-image",
            "--parameter-overrides",
            "Architecture=x86_64",
        ])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_REGION", "us-east-1")
        .env("SAM_CLI_TELEMETRY", "0")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_ENDPOINT_URL")
        .stdin(Stdio::null());
    let t = Instant::now();
    let out = cmd.output().expect("run sam local invoke");
    let seconds = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "sam local invoke {function} -e {event} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // SAM prints the function's response as the last line of stdout (its own logs and the
    // function's go to stderr).
    let response = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!("sam local invoke {function} -e {event}: no JSON response:\n{stdout}\n{stderr}")
        });
    Invoked {
        response,
        stderr,
        seconds,
    }
}

/// Rows of `db.table` through our CLI on Glue (`scan --format json`).
fn scan(moto: &Moto, home: &Path, table: &str) -> Vec<Value> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dms2iceberg"));
    cmd.env_clear().args([
        "scan",
        table,
        "--catalog",
        "glue",
        "--warehouse",
        WAREHOUSE,
        "--format",
        "json",
    ]);
    for (k, v) in moto.aws_env(home) {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "scan {table}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::parse_json_lines(&String::from_utf8_lossy(&out.stdout), table)
}

/// PyIceberg's GlueCatalog on the emulator reads `table` as `rows`.
fn check_pyiceberg(moto: &Moto, dir: &Path, table: &str, rows: &[Value]) {
    let expected = dir.join(format!("{table}.expected.jsonl"));
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&expected, text).unwrap();
    let out = Command::new(python())
        .arg(support("moto_server.py"))
        .args([
            "check-table",
            "--endpoint",
            &moto.endpoint(),
            "--table",
            table,
        ])
        .arg("--expected")
        .arg(&expected)
        .args(["--key", "product_id"])
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PyIceberg (GlueCatalog) disagrees for {table}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn product(id: i64, cat: &str, name: &str, q: i64, t: &str) -> Value {
    json!({"product_id": id, "category": cat, "product_name": name,
           "quantity_available": q, "last_update_time": format!("2022-03-02 {t}.000000")})
}

/// Uploads a local tree under `prefix` of `bucket`.
fn upload_tree(moto: &Moto, bucket: &str, prefix: &str, from: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let key = format!("{prefix}/{}", p.file_name().unwrap().to_string_lossy());
        if p.is_dir() {
            upload_tree(moto, bucket, &key, &p);
        } else {
            moto.put(bucket, &key, &std::fs::read(&p).unwrap());
        }
    }
}

#[test]
fn sam_local_invoke_every_sample_event() {
    if let Err(why) = enabled() {
        eprintln!("SKIPPED sam_local_invoke_every_sample_event: {why}");
        return;
    }
    let started = Instant::now();
    let work = common::Work::new("sam-local");
    let dir = &work.dir;
    let root = repo_root();

    // The emulator, where containers reach it (the README's `moto_server -H 0.0.0.0 -p 5000`).
    let moto = Moto::start_on(dir, "0.0.0.0");
    let env_json = dir.join("env.json");
    let env_text = std::fs::read_to_string(root.join("infra/env.json")).unwrap();
    assert!(env_text.contains("host.docker.internal:5000"), "{env_text}");
    std::fs::write(
        &env_json,
        env_text.replace(
            "host.docker.internal:5000",
            &format!("host.docker.internal:{}", moto.port),
        ),
    )
    .unwrap();

    // The README's uploads: the buckets, examples/dms, the quoted-name table's file, the config.
    moto.create_bucket(LANDING);
    moto.create_bucket(WAREHOUSE_BUCKET);
    upload_tree(&moto, LANDING, "dms", &root.join("examples/dms"));
    moto.put(
        LANDING,
        "dms/sales/order line$items/20220302-1134010000.csv",
        &std::fs::read(root.join("examples/dms/sales/product/20220302-1134010000.csv")).unwrap(),
    );
    moto.put(
        LANDING,
        "config/dms2iceberg.toml",
        &std::fs::read(root.join("infra/local/dms2iceberg.toml")).unwrap(),
    );
    let build = stage_build(dir);
    let setup_s = started.elapsed().as_secs_f64();

    // Every sample event, in the README's order; a new one must be added here.
    let mut events: Vec<String> = std::fs::read_dir(root.join("infra/events"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    events.sort();
    assert_eq!(
        events,
        [
            "eventbridge.json",
            "s3-put.json",
            "schedule.json",
            "sqs.json"
        ],
        "infra/events/ changed: give the new event its expectations here"
    );
    let mut times = Vec::new();

    let r = sam_invoke(&build, &env_json, "IngestFunction", "s3-put.json");
    times.push(("s3-put.json", r.seconds));
    assert_eq!(
        r.response,
        json!({"tables": ["sales.order line$items", "sales.product"]}),
        "{}",
        r.stderr
    );
    let r = sam_invoke(&build, &env_json, "IngestFunction", "sqs.json");
    times.push(("sqs.json", r.seconds));
    assert_eq!(r.response, json!({"batchItemFailures": []}), "{}", r.stderr);
    let r = sam_invoke(&build, &env_json, "IngestFunction", "eventbridge.json");
    times.push(("eventbridge.json", r.seconds));
    assert_eq!(
        r.response,
        json!({"tables": ["sales.product"]}),
        "{}",
        r.stderr
    );

    let product_rows = vec![
        product(100, "Smartphone", "Apple iPhone 12", 30, "11:30:01"),
        product(101, "Smartphone", "Samsung Galaxy S21", 25, "11:30:01"),
        product(102, "Laptop", "Dell XPS 13", 11, "11:35:01"),
        product(104, "Tablet", "Samsung Galaxy Tab S7", 20, "11:30:01"),
        product(105, "Headphones", "Sony WH-1000XM4", 50, "11:30:01"),
        product(106, "Tablet", "Apple iPad Air", 40, "11:34:01"),
    ];
    let line_items = vec![
        product(102, "Laptop", "Dell XPS 13", 16, "11:34:01"),
        product(106, "Tablet", "Apple iPad Air", 40, "11:34:01"),
    ];
    let tables = [
        ("dms2iceberg.product", &product_rows),
        ("dms2iceberg.order_line_items", &line_items),
    ];
    for (t, rows) in tables {
        assert_eq!(&scan(&moto, dir, t), rows, "{t} after the ingest events");
        check_pyiceberg(&moto, dir, t, rows);
    }

    let r = sam_invoke(&build, &env_json, "CompactFunction", "schedule.json");
    times.push(("schedule.json", r.seconds));
    let reports = r
        .response
        .as_array()
        .unwrap_or_else(|| panic!("compaction answers with a report per table: {}", r.response));
    assert_eq!(reports.len(), 2, "{}", r.response);
    let p = reports
        .iter()
        .find(|x| x["table"] == "dms2iceberg.product")
        .unwrap_or_else(|| panic!("no product report: {}", r.response));
    assert!(p["error"].is_null(), "{p}");
    let c = &p["compaction"];
    assert!(
        c["delete_files_before"].as_u64() > Some(0) && c["delete_files_after"] == 0,
        "the product table's delete files are applied and dropped: {p}"
    );
    // By read cost: the files that shed their deletes are rewritten; two small files are
    // below the small-file threshold and stay apart.
    assert!(
        c["data_files_after"].as_u64() <= c["data_files_before"].as_u64()
            && c["compacted_because"]
                .as_array()
                .is_some_and(|a| !a.is_empty()),
        "{p}"
    );
    for (t, rows) in tables {
        assert_eq!(&scan(&moto, dir, t), rows, "{t} after compaction");
        check_pyiceberg(&moto, dir, t, rows);
    }
    let stats = moto.stats();
    assert_eq!(stats["update_table"]["unversioned"], 0, "{stats}");
    // The end-of-test invariant (a `Lab` checks it when it drops; this test has none): every
    // snapshot of every table reads, every file its manifests name exists.
    if let Err(e) = moto.check_catalogs(dir) {
        panic!("a table does not verify at the end of the test:\n{e}");
    }

    eprintln!(
        "sam-local-measure: setup {setup_s:.1}s; invocations {}; total {:.1}s",
        times
            .iter()
            .map(|(e, s)| format!("{e} {s:.1}s"))
            .collect::<Vec<_>>()
            .join(", "),
        started.elapsed().as_secs_f64()
    );
}
