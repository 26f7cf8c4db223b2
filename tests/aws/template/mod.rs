//! Deployment checks of `template.yaml` (AWS SAM) and `infra/`.
//!
//! - `cfn-lint template.yaml` and `sam validate --lint` must pass, offline (both run with dummy
//!   credentials and a dead HTTP(S) proxy, so any network access fails instead of hanging).
//! - Least privilege, checked on the template as written and as SAM transforms it: no `Resource:
//!   "*"` (but for `lakeformation:GetDataAccess`, which has no resource type), no wildcard
//!   actions, no wildcard in a resource but the five prefix and table patterns listed in
//!   `WILDCARD_RESOURCES`, no managed policies, S3 object access only under the DMS and warehouse
//!   prefixes (writes only under the warehouse), `s3:ListBucket` only with an `s3:prefix`
//!   condition, Glue only on the catalog, the one database and its tables, S3 Tables only on the
//!   one table bucket and its tables, Secrets Manager only `GetSecretValue` of the REST
//!   catalog's secret, Parameter Store only `GetParameter` of the config parameter, SQS only
//!   consuming the ingest queue and sending to its dead-letter queue, KMS only with the keys the
//!   parameters name (`Decrypt` of DMS files and the secret, data keys of the warehouse through
//!   S3; the DMS role what an SSE-KMS S3 target needs) and only when one is named, the compact
//!   role nowhere near the landing bucket, the config or a queue, logs only to the functions' own
//!   log groups.
//! - The alarms docs/runbook.md describes, each on the metric, statistic, threshold and periods
//!   its table states, on the stack's own functions, notifying the topics; the metrics they and
//!   the dashboard name are ones the functions emit; the dashboard's totals work with
//!   `TableMetrics=off` and its per-table widgets appear with `on`.
//! - Deployment defaults: the config written from `TablesConfig` (a TOML the library parses,
//!   matching the recommended DMS endpoint settings) into Parameter Store, a Glue database name
//!   unique per stack, no `AWS_ENDPOINT_URL` in any deployment, compaction runs that end before
//!   the next of their schedule, the EventBridge rule refusing (by the template's Rules) to
//!   share a bucket with the warehouse in a way that would match the warehouse's writes, and
//!   `infra/parameters.yaml` (what `sam deploy` reads) holding the template's defaults.
//! - Each catalog (Glue, S3 Tables, and REST on Glue's or S3 Tables' endpoint or elsewhere, with
//!   each way of authenticating) gets only what it uses, its functions are told so in their
//!   environment, and the template's Rules refuse inconsistent parameters.
//! - The wiring the README promises: build metadata naming real binaries, environment, the
//!   SQS event source with partial batch responses, DLQ, schedule, parameter defaults, outputs.
//! - `infra/events/*.json` match the EventBridge rule, and `infra/env.json` only sets variables
//!   the template declares (`sam local invoke` silently ignores any other).
//!
//! The tools come from `DMS2ICEBERG_INFRA_PYTHON`: a venv built from
//! `tests/support/requirements-infra.txt` (exact pins of cfn-lint and aws-sam-cli), which
//! `scripts/test` creates and exports.
//!
//! Layout: this file runs the tools and loads the template (what every check shares); one
//! file per kind of check: `lint` (the linters), `patterns` (intrinsic functions rendered as
//! patterns), `privilege` (least privilege), `deployment` (one deployment, its conditions
//! decided: what each catalog gets), `wiring`, `events` (sample events, env.json and the
//! metrics the functions emit), `alarms` (as docs/runbook.md states them), `defaults`
//! (deployment defaults).

mod alarms;
mod defaults;
mod deployment;
mod events;
mod lint;
mod patterns;
mod privilege;
mod wiring;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use self::deployment::*;
use self::events::*;
use self::patterns::*;
use self::privilege::*;
use self::wiring::*;

const TOOL_TIMEOUT: Duration = Duration::from_secs(300);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn infra_python() -> PathBuf {
    match std::env::var_os("DMS2ICEBERG_INFRA_PYTHON") {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            assert!(
                p.exists(),
                "DMS2ICEBERG_INFRA_PYTHON={} does not exist. Run `scripts/test`, which builds the \
                 infra venv from tests/support/requirements-infra.txt.",
                p.display()
            );
            p
        }
        _ => panic!(
            "DMS2ICEBERG_INFRA_PYTHON is not set.\n\
             The template tests need cfn-lint and the AWS SAM CLI from \
             tests/support/requirements-infra.txt. Run the tests with `scripts/test` (it creates \
             the venv and exports DMS2ICEBERG_INFRA_PYTHON), or after one run of it: \
             `DMS2ICEBERG_INFRA_PYTHON=$PWD/.venv-infra/bin/python cargo test --features e2e --test aws template::`."
        ),
    }
}

/// A console script of the infra venv (next to its python).
fn venv_tool(name: &str) -> PathBuf {
    let python = infra_python();
    let tool = python
        .parent()
        .expect("DMS2ICEBERG_INFRA_PYTHON has a parent directory")
        .join(name);
    assert!(
        tool.exists(),
        "{} is missing: the venv of DMS2ICEBERG_INFRA_PYTHON was not built from \
         tests/support/requirements-infra.txt (run `scripts/test`)",
        tool.display()
    );
    tool
}

/// Offline, deterministic environment for the AWS tools.
fn offline(mut cmd: Command) -> Command {
    cmd.current_dir(root())
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("SAM_CLI_TELEMETRY", "0")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("http_proxy", "http://127.0.0.1:9")
        .env("https_proxy", "http://127.0.0.1:9")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_ENDPOINT_URL")
        .stdin(Stdio::null());
    cmd
}

/// Run with a time limit; the output is returned whatever the exit status.
fn run(mut cmd: Command) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    // Drain the pipes on threads so a chatty tool cannot block on a full pipe.
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut b).ok();
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut b).ok();
        b
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for tool") {
            break status;
        }
        if start.elapsed() > TOOL_TIMEOUT {
            child.kill().ok();
            child.wait().ok();
            panic!("{what} did not finish within {TOOL_TIMEOUT:?} (network access?)");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out_t.join().expect("stdout reader"),
        stderr: err_t.join().expect("stderr reader"),
    }
}

fn describe(o: &Output) -> String {
    format!(
        "exit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The template as written (CloudFormation short tags turned into `Fn::*` objects by
/// cfn-lint's own YAML loader), as transformed by SAM (aws-sam-translator, offline: local
/// CodeUri replaced by a placeholder as `sam validate` does, no managed policy lookups), and
/// infra/samconfig.toml with its parameter_overrides parsed the way the SAM CLI parses them.
const LOADER: &str = r#"
import copy, json, sys, tomllib
from cfnlint.decode import cfn_yaml
from samtranslator.translator.transform import transform
from samcli.cli.types import CfnParameterOverridesType

class NoManagedPolicies:
    def load(self):
        return {}

raw = json.loads(json.dumps(cfn_yaml.load(sys.argv[1])))
sam = copy.deepcopy(raw)
for res in sam.get("Resources", {}).values():
    if res.get("Type") == "AWS::Serverless::Function":
        res["Properties"]["CodeUri"] = "s3://placeholder/code.zip"
transformed = transform(sam, {}, NoManagedPolicies())
with open(sys.argv[2], "rb") as f:
    samconfig = tomllib.load(f)
po = samconfig["default"]["deploy"]["parameters"].get("parameter_overrides", "")
overrides = CfnParameterOverridesType().convert((po,) if isinstance(po, str) else tuple(po), None, None)
json.dump({"raw": raw, "transformed": transformed, "samconfig": samconfig, "overrides": overrides}, sys.stdout)
"#;

struct Loaded {
    raw: Value,
    transformed: Value,
    samconfig: Value,
    overrides: Value,
}

fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let mut cmd = offline(Command::new(infra_python()));
        cmd.args(["-c", LOADER, "template.yaml", "infra/samconfig.toml"]);
        let o = run(cmd);
        assert!(
            o.status.success(),
            "loading template.yaml failed\n{}",
            describe(&o)
        );
        let mut v: Value = serde_json::from_slice(&o.stdout).expect("loader prints JSON");
        Loaded {
            raw: v["raw"].take(),
            transformed: v["transformed"].take(),
            samconfig: v["samconfig"].take(),
            overrides: v["overrides"].take(),
        }
    })
}

fn read_json(rel: &str) -> Value {
    let p = root().join(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
