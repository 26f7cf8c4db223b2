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

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

// ---------------------------------------------------------------------------------------------
// The linters

#[test]
fn cfn_lint_passes() {
    let mut cmd = offline(Command::new(venv_tool("cfn-lint")));
    cmd.args(["--format", "parseable", "template.yaml"]);
    let o = run(cmd);
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "cfn-lint reported findings\n{}",
        describe(&o)
    );
}

#[test]
fn sam_validate_lint_passes_offline() {
    let mut cmd = offline(Command::new(venv_tool("sam")));
    cmd.args(["validate", "--lint", "--template", "template.yaml"]);
    let o = run(cmd);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("is a valid SAM Template"),
        "sam validate --lint failed\n{}",
        describe(&o)
    );
}

// ---------------------------------------------------------------------------------------------
// Intrinsic functions rendered as patterns

/// The strings a value can take, with intrinsics kept symbolic: `Fn::Sub` gives its template
/// (`arn:${AWS::Partition}:s3:::${Bucket}/${DmsPrefix}*`), `Ref` gives `${Name}`, `Fn::GetAtt`
/// gives `${Res.Attr}`, `Fn::If` gives both branches, `Fn::Join` joins the pieces' renderings.
fn render(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Bool(b) => vec![b.to_string()],
        Value::Array(items) => items.iter().flat_map(render).collect(),
        Value::Object(m) if m.len() == 1 => {
            let (k, a) = m.iter().next().expect("one key");
            match k.as_str() {
                "Ref" if a == "AWS::NoValue" => vec![],
                "Ref" => vec![format!("${{{}}}", a.as_str().unwrap_or("?"))],
                "Fn::Sub" => match a {
                    Value::String(s) => vec![s.clone()],
                    Value::Array(x) => vec![x[0].as_str().unwrap_or("?").to_string()],
                    _ => vec!["?".into()],
                },
                "Fn::GetAtt" => {
                    let parts: Vec<&str> = match a {
                        Value::Array(x) => x.iter().filter_map(Value::as_str).collect(),
                        Value::String(s) => s.split('.').collect(),
                        _ => vec![],
                    };
                    vec![format!("${{{}}}", parts.join("."))]
                }
                "Fn::If" => a
                    .as_array()
                    .map(|x| x.iter().skip(1).flat_map(render).collect())
                    .unwrap_or_default(),
                "Fn::Join" => {
                    let sep = a[0].as_str().unwrap_or("");
                    let pieces: Vec<String> = a[1]
                        .as_array()
                        .map(|x| x.iter().map(|p| render(p).join("|")).collect())
                        .unwrap_or_default();
                    vec![pieces.join(sep)]
                }
                other => vec![format!("<{other}>")],
            }
        }
        _ => vec![v.to_string()],
    }
}

/// Statements of a policy document; `Fn::If` items contribute both branches.
fn statements(doc: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let items = match &doc["Statement"] {
        Value::Array(a) => a.clone(),
        Value::Null => vec![],
        one => vec![one.clone()],
    };
    for s in items {
        if let Some(branches) = s.get("Fn::If").and_then(Value::as_array) {
            for b in branches.iter().skip(1) {
                if b.get("Sid").is_some() || b.get("Effect").is_some() {
                    out.push(b.clone());
                }
            }
        } else {
            out.push(s);
        }
    }
    out
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Null => vec![],
        Value::Array(a) => a.iter().flat_map(render).collect(),
        one => render(one),
    }
}

// ---------------------------------------------------------------------------------------------
// Least privilege

/// A policy document and where it comes from.
struct Doc {
    owner: String,
    doc: Value,
    /// A resource policy (queue, bucket, topic) rather than an identity policy.
    resource_policy: bool,
    /// Identity policy of a role Lambda assumes.
    lambda_role: bool,
    /// Identity policy of a role DMS assumes.
    dms_role: bool,
}

fn trusts(role: &Value, service: &str) -> bool {
    statements(&role["Properties"]["AssumeRolePolicyDocument"])
        .iter()
        .any(|s| {
            strings(&s["Principal"]["Service"])
                .iter()
                .any(|p| p == service)
        })
}

fn policy_docs(template: &Value) -> Vec<Doc> {
    let mut docs = Vec::new();
    let empty = serde_json::Map::new();
    let resources = template["Resources"].as_object().unwrap_or(&empty);
    for (id, r) in resources {
        let props = &r["Properties"];
        match r["Type"].as_str().unwrap_or("") {
            "AWS::IAM::Role" => {
                let lambda_role = trusts(r, "lambda.amazonaws.com");
                let dms_role = trusts(r, "dms.amazonaws.com");
                for p in props["Policies"].as_array().into_iter().flatten() {
                    docs.push(Doc {
                        owner: id.clone(),
                        doc: p["PolicyDocument"].clone(),
                        resource_policy: false,
                        lambda_role,
                        dms_role,
                    });
                }
            }
            "AWS::IAM::Policy" | "AWS::IAM::ManagedPolicy" => {
                let lambda_role = strings(&props["Roles"]).iter().any(|role| {
                    let name = role.trim_start_matches("${").trim_end_matches('}');
                    resources
                        .get(name)
                        .is_some_and(|res| trusts(res, "lambda.amazonaws.com"))
                });
                docs.push(Doc {
                    owner: id.clone(),
                    doc: props["PolicyDocument"].clone(),
                    resource_policy: false,
                    lambda_role,
                    dms_role: false,
                });
            }
            "AWS::SQS::QueuePolicy" | "AWS::S3::BucketPolicy" | "AWS::SNS::TopicPolicy" => {
                docs.push(Doc {
                    owner: id.clone(),
                    doc: props["PolicyDocument"].clone(),
                    resource_policy: true,
                    lambda_role: false,
                    dms_role: false,
                });
            }
            _ => {}
        }
    }
    docs
}

const DMS_OBJECTS: &str = "arn:${AWS::Partition}:s3:::${Bucket}/${DmsPrefix}*";
/// The config parameter (Parameter Store) the ingest function reads.
const CONFIG_PARAMETER: &str =
    "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${ConfigParameter}";
const INGEST_QUEUE: &str = "${IngestQueue.Arn}";
const DEAD_LETTER_QUEUE: &str = "${IngestDeadLetterQueue.Arn}";
const WAREHOUSE_OBJECTS: &str = "arn:${AWS::Partition}:s3:::${Bucket}/${WarehousePrefix}*";
const CONFIG_OBJECT: &str = "arn:${AWS::Partition}:s3:::${Path}";
const BUCKET: &str = "arn:${AWS::Partition}:s3:::${Bucket}";
const GLUE: [&str; 3] = [
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:catalog",
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:database/${DatabaseName.Value}",
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${DatabaseName.Value}/*",
];
/// Every resource with a wildcard that a policy of the stack may name (an object prefix, the
/// database's tables, the table bucket's tables), and `*` for `lakeformation:GetDataAccess`
/// alone: nothing else.
const WILDCARD_RESOURCES: [&str; 5] = [DMS_OBJECTS, WAREHOUSE_OBJECTS, GLUE[2], TABLES, "*"];
/// A table bucket, created by the stack or given as a parameter, and the tables in it (a table's
/// ARN is `<bucket ARN>/table/<table id>`: namespaces are not part of it).
const TABLE_BUCKETS: [&str; 2] = ["${TableBucket.TableBucketARN}", "${TableBucketArn}"];
const TABLES: &str = "${Bucket}/table/*";
/// What the functions do on a table bucket: create namespaces and tables, list them (compact);
/// read the bucket (the REST endpoint's `GET /v1/config`).
const S3TABLES_BUCKET_ACTIONS: [&str; 4] = [
    "s3tables:CreateNamespace",
    "s3tables:CreateTable",
    "s3tables:ListTables",
    "s3tables:GetTableBucket",
];
/// The REST catalog's secret, and the keys a function may use: the landing bucket's (decrypt DMS
/// files), the secret's (decrypt, through Secrets Manager) and the warehouse's (data keys and
/// decrypt, through S3 on a warehouse bucket).
const REST_SECRET: &str = "${RestSecretArn}";
const LANDING_KEY: &str = "${LandingBucketKmsKeyArn}";
const SECRET_KEY: &str = "${RestSecretKmsKeyArn}";
const WAREHOUSE_KEY: &str = "${WarehouseKmsKeyArn}";
/// What the DMS role may do with the landing bucket's key (an SSE-KMS S3 target).
const DMS_KMS_ACTIONS: [&str; 4] = [
    "kms:GenerateDataKey",
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:DescribeKey",
];
/// The Glue actions of Glue's Data Catalog API and of its Iceberg REST endpoint.
const GLUE_ACTIONS: [&str; 7] = [
    "glue:GetCatalog",
    "glue:GetDatabase",
    "glue:CreateDatabase",
    "glue:GetTable",
    "glue:GetTables",
    "glue:CreateTable",
    "glue:UpdateTable",
];
/// What they do on a table: read and swap its pointer, read and write its files.
const S3TABLES_TABLE_ACTIONS: [&str; 4] = [
    "s3tables:GetTableMetadataLocation",
    "s3tables:UpdateTableMetadataLocation",
    "s3tables:GetTableData",
    "s3tables:PutTableData",
];
const S3_WRITES: [&str; 4] = [
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:PutObjectTagging",
];

/// Every least-privilege violation of a template (empty = fine).
fn least_privilege_violations(template: &Value) -> Vec<String> {
    let mut v = Vec::new();
    let empty = serde_json::Map::new();
    let resources = template["Resources"].as_object().unwrap_or(&empty);
    let log_groups: BTreeSet<String> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Logs::LogGroup")
        .map(|(id, _)| format!("${{{id}.Arn}}"))
        .collect();

    for (id, r) in resources {
        if r["Type"] == "AWS::IAM::Role"
            && !strings(&r["Properties"]["ManagedPolicyArns"]).is_empty()
        {
            v.push(format!(
                "{id}: managed policies {:?} (AWSLambdaBasicExecutionRole & co. use Resource \"*\")",
                strings(&r["Properties"]["ManagedPolicyArns"])
            ));
        }
    }

    for d in policy_docs(template) {
        let sts = statements(&d.doc);
        for s in &sts {
            let sid = s["Sid"].as_str().unwrap_or("(no Sid)");
            let at = format!("{} / {sid}", d.owner);
            if s["Effect"] != "Allow" {
                continue;
            }
            if s.get("NotAction").is_some() || s.get("NotResource").is_some() {
                v.push(format!("{at}: NotAction/NotResource"));
            }
            let actions = strings(&s["Action"]);
            let res = strings(&s["Resource"]);
            for a in &actions {
                if a.contains('*') {
                    v.push(format!("{at}: wildcard action {a}"));
                }
            }
            if res.is_empty() {
                v.push(format!("{at}: no Resource"));
            }
            // lakeformation:GetDataAccess has no resource type: "*" is the only resource IAM
            // accepts for it (Lake Formation's own grants decide what it vends), alone in its
            // statement.
            let resourceless = actions == ["lakeformation:GetDataAccess"];
            for r in &res {
                if r == "*" && !resourceless {
                    v.push(format!("{at}: Resource \"*\""));
                }
                if r.contains('*') && !WILDCARD_RESOURCES.contains(&r.as_str()) {
                    v.push(format!(
                        "{at}: a wildcard resource not in WILDCARD_RESOURCES: {r}"
                    ));
                }
            }
            if d.resource_policy
                && !s["Principal"]["Service"].is_null()
                && !s["Condition"].to_string().contains("aws:SourceArn")
            {
                v.push(format!(
                    "{at}: service principal without an aws:SourceArn condition"
                ));
            }
            // S3 object ARNs in any Allow: only under the two prefixes (or the config object).
            for r in &res {
                if r.contains(":s3:::") && r.contains('/') {
                    let ok = r == DMS_OBJECTS || r == WAREHOUSE_OBJECTS || r == CONFIG_OBJECT;
                    if !ok {
                        v.push(format!("{at}: S3 object ARN outside the prefixes: {r}"));
                    }
                }
            }
            // ---- The DMS role: KMS only with the landing bucket's key, for writing objects.
            if d.dms_role {
                for a in actions.iter().filter(|a| a.starts_with("kms:")) {
                    if !DMS_KMS_ACTIONS.contains(&a.as_str()) {
                        v.push(format!("{at}: unexpected KMS action {a} for DMS"));
                    }
                    if res.iter().any(|r| r != LANDING_KEY) {
                        v.push(format!(
                            "{at}: {a} on {res:?}, not the landing bucket's key"
                        ));
                    }
                }
            }
            if !d.lambda_role {
                continue;
            }
            // ---- Lambda roles: S3
            let s3: Vec<&String> = actions.iter().filter(|a| a.starts_with("s3:")).collect();
            for a in &s3 {
                match a.as_str() {
                    "s3:ListBucket" => {
                        if res.iter().any(|r| r != BUCKET) {
                            v.push(format!("{at}: s3:ListBucket on {res:?}"));
                        }
                        let prefixes = strings(&s["Condition"]["StringLike"]["s3:prefix"]);
                        if prefixes.is_empty()
                            || prefixes
                                .iter()
                                .any(|p| p != "${DmsPrefix}*" && p != "${WarehousePrefix}*")
                        {
                            v.push(format!(
                                "{at}: s3:ListBucket without an s3:prefix condition on a prefix ({prefixes:?})"
                            ));
                        }
                    }
                    "s3:GetObject" => {}
                    w if S3_WRITES.contains(&w) => {
                        if res.iter().any(|r| r != WAREHOUSE_OBJECTS) {
                            v.push(format!("{at}: {w} outside the warehouse prefix ({res:?})"));
                        }
                    }
                    other => v.push(format!("{at}: unexpected S3 action {other}")),
                }
            }
            // ---- Glue
            for a in actions.iter().filter(|a| a.starts_with("glue:")) {
                if !GLUE_ACTIONS.contains(&a.as_str()) {
                    v.push(format!("{at}: unexpected Glue action {a}"));
                }
            }
            if actions.iter().any(|a| a.starts_with("glue:")) {
                for r in &res {
                    if !GLUE.contains(&r.as_str()) {
                        v.push(format!("{at}: Glue resource outside the database: {r}"));
                    }
                }
            }
            // ---- S3 Tables: the one table bucket; pointer and data actions only on its tables
            for a in actions.iter().filter(|a| a.starts_with("s3tables:")) {
                let allowed: &[&str] = if S3TABLES_BUCKET_ACTIONS.contains(&a.as_str()) {
                    &TABLE_BUCKETS
                } else if S3TABLES_TABLE_ACTIONS.contains(&a.as_str()) {
                    &[TABLES]
                } else {
                    v.push(format!("{at}: unexpected S3 Tables action {a}"));
                    continue;
                };
                for r in &res {
                    if !allowed.contains(&r.as_str()) {
                        v.push(format!("{at}: {a} on {r}"));
                    }
                }
            }
            // ---- Logs: only its own log groups
            if actions.iter().any(|a| a.starts_with("logs:")) {
                for a in &actions {
                    if a != "logs:CreateLogStream" && a != "logs:PutLogEvents" {
                        v.push(format!("{at}: unexpected logs action {a}"));
                    }
                }
                for r in &res {
                    if !log_groups.contains(r) {
                        v.push(format!("{at}: logs on {r}, not a log group of this stack"));
                    }
                }
            }
            // ---- SQS: consume the ingest queue; send to its dead-letter queue only
            for a in actions.iter().filter(|a| a.starts_with("sqs:")) {
                let consume = [
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:ChangeMessageVisibility",
                    "sqs:GetQueueAttributes",
                ];
                let queue = if consume.contains(&a.as_str()) {
                    INGEST_QUEUE
                } else if a == "sqs:SendMessage" {
                    DEAD_LETTER_QUEUE
                } else {
                    v.push(format!("{at}: unexpected SQS action {a}"));
                    continue;
                };
                if res.iter().any(|r| r != queue) {
                    v.push(format!("{at}: {a} on {res:?}, not {queue}"));
                }
            }
            // ---- Parameter Store: read the config parameter, nothing else
            for a in actions.iter().filter(|a| a.starts_with("ssm:")) {
                if a != "ssm:GetParameter" {
                    v.push(format!("{at}: unexpected Parameter Store action {a}"));
                }
                if res.iter().any(|r| r != CONFIG_PARAMETER) {
                    v.push(format!("{at}: {a} on {res:?}, not the config parameter"));
                }
            }
            // ---- Secrets Manager: the REST catalog's secret, read
            for a in actions.iter().filter(|a| a.starts_with("secretsmanager:")) {
                if a != "secretsmanager:GetSecretValue" {
                    v.push(format!("{at}: unexpected Secrets Manager action {a}"));
                }
                for r in &res {
                    if r != REST_SECRET {
                        v.push(format!("{at}: {a} on {r}"));
                    }
                }
            }
            // ---- Lake Formation: vended credentials only
            for a in actions.iter().filter(|a| a.starts_with("lakeformation:")) {
                if a != "lakeformation:GetDataAccess" {
                    v.push(format!("{at}: unexpected Lake Formation action {a}"));
                }
            }
            // ---- KMS: decrypt DMS files and the secret (through Secrets Manager); data keys and
            // decrypt with the warehouse's key (through S3, but on a table bucket's tables)
            let via = strings(&s["Condition"]["StringEquals"]["kms:ViaService"]);
            for a in actions.iter().filter(|a| a.starts_with("kms:")) {
                for r in &res {
                    let allowed: &[&str] = match r.as_str() {
                        LANDING_KEY | SECRET_KEY => &["kms:Decrypt"],
                        WAREHOUSE_KEY => &["kms:GenerateDataKey", "kms:Decrypt"],
                        _ => {
                            v.push(format!("{at}: {a} on {r}, not a key the parameters name"));
                            continue;
                        }
                    };
                    if !allowed.contains(&a.as_str()) {
                        v.push(format!("{at}: {a} on {r}"));
                    }
                    if r == SECRET_KEY && via.iter().all(|x| !x.starts_with("secretsmanager.")) {
                        v.push(format!(
                            "{at}: {a} on the secret's key without kms:ViaService"
                        ));
                    }
                    if r == WAREHOUSE_KEY
                        && !via.is_empty()
                        && via.iter().any(|x| !x.starts_with("s3."))
                    {
                        v.push(format!("{at}: {a} on the warehouse key via {via:?}"));
                    }
                }
            }
            for a in &actions {
                let service = a.split(':').next().unwrap_or("");
                if ![
                    "s3",
                    "s3tables",
                    "glue",
                    "logs",
                    "sqs",
                    "kms",
                    "secretsmanager",
                    "lakeformation",
                    "ssm",
                ]
                .contains(&service)
                {
                    v.push(format!("{at}: unexpected action {a}"));
                }
            }
        }
    }
    v
}

/// The identity statements of the role a function runs with, rendered.
fn role_of(template: &Value, function: &str) -> (String, Vec<Value>) {
    let role = render(&template["Resources"][function]["Properties"]["Role"]);
    assert_eq!(role.len(), 1, "{function}: Role {role:?}");
    let role_id = role[0]
        .trim_start_matches("${")
        .trim_end_matches('}')
        .trim_end_matches(".Arn")
        .to_string();
    let docs = policy_docs(template);
    let sts = docs
        .iter()
        .filter(|d| d.owner == role_id)
        .flat_map(|d| statements(&d.doc))
        .collect();
    (role_id, sts)
}

#[test]
fn iam_is_least_privilege() {
    let l = loaded();
    for (name, t) in [
        ("template.yaml", &l.raw),
        ("SAM-transformed template", &l.transformed),
    ] {
        let v = least_privilege_violations(t);
        assert!(
            v.is_empty(),
            "{name}: least-privilege violations:\n  {}",
            v.join("\n  ")
        );
    }

    let t = &l.transformed;
    // Ingest: reads the DMS prefix, reads and writes the warehouse, consumes its queue.
    let (ingest_role, ingest) = role_of(t, "IngestFunction");
    let has = |sts: &[Value], action: &str, resource: &str| {
        sts.iter().any(|s| {
            strings(&s["Action"]).iter().any(|a| a == action)
                && strings(&s["Resource"]).iter().any(|r| r == resource)
        })
    };
    assert!(
        has(&ingest, "s3:GetObject", DMS_OBJECTS),
        "{ingest_role}: cannot read DMS files"
    );
    assert!(
        has(&ingest, "s3:PutObject", WAREHOUSE_OBJECTS),
        "{ingest_role}: cannot write the warehouse"
    );
    assert!(
        has(&ingest, "s3:DeleteObject", WAREHOUSE_OBJECTS),
        "{ingest_role}: cannot delete its own lost files"
    );
    assert!(
        has(&ingest, "s3:ListBucket", BUCKET),
        "{ingest_role}: cannot list"
    );
    for a in [
        "glue:GetDatabase",
        "glue:CreateDatabase",
        "glue:GetTable",
        "glue:GetTables",
        "glue:CreateTable",
        "glue:UpdateTable",
    ] {
        for r in GLUE {
            assert!(has(&ingest, a, r), "{ingest_role}: {a} on {r} missing");
        }
    }
    assert!(
        has(&ingest, "sqs:ReceiveMessage", INGEST_QUEUE),
        "{ingest_role}: cannot poll its queue"
    );
    assert!(
        has(&ingest, "sqs:SendMessage", DEAD_LETTER_QUEUE),
        "{ingest_role}: cannot send a record no retry can help to the dead-letter queue"
    );
    assert!(
        has(&ingest, "ssm:GetParameter", CONFIG_PARAMETER),
        "{ingest_role}: cannot read the config parameter"
    );
    assert!(
        has(&ingest, "logs:PutLogEvents", "${IngestLogGroup.Arn}"),
        "{ingest_role}: cannot log"
    );

    // Compact: warehouse and Glue read + UpdateTable only; never the landing bucket or a queue.
    let (compact_role, compact) = role_of(t, "CompactFunction");
    assert_ne!(
        ingest_role, compact_role,
        "the functions must not share a role"
    );
    assert!(
        has(&compact, "s3:DeleteObject", WAREHOUSE_OBJECTS),
        "{compact_role}: cannot remove orphans"
    );
    assert!(
        has(&compact, "glue:UpdateTable", GLUE[2]),
        "{compact_role}: cannot commit"
    );
    assert!(
        has(&compact, "logs:PutLogEvents", "${CompactLogGroup.Arn}"),
        "{compact_role}: cannot log"
    );
    let compact_text = serde_json::to_string(&compact).expect("json");
    for forbidden in [
        "LandingBucket",
        "DmsPrefix",
        "sqs:",
        "ssm:",
        "ConfigS3Uri",
        "ConfigParameter",
        "glue:Create",
        "s3tables:Create",
    ] {
        assert!(
            !compact_text.contains(forbidden),
            "{compact_role} mentions {forbidden}: {compact_text}"
        );
    }
}

/// The checker itself catches what it is meant to catch.
#[test]
fn least_privilege_checker_catches_violations() {
    let role = |statement: Value| {
        json!({"Resources": {
            "R": {"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": {"Statement": [{"Effect": "Allow",
                    "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]},
                "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [statement]}}]}}}})
    };
    let cases = [
        json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "s3:*", "Resource": {"Fn::Sub": DMS_OBJECTS}}),
        json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${Bucket}/*"}}),
        json!({"Effect": "Allow", "Action": "s3:PutObject", "Resource": {"Fn::Sub": DMS_OBJECTS}}),
        json!({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": {"Fn::Sub": BUCKET}}),
        json!({"Effect": "Allow", "Action": "glue:GetTable", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/*"}}),
        json!({"Effect": "Allow", "Action": "logs:PutLogEvents", "Resource": "arn:aws:logs:us-east-1:123456789012:log-group:x:*"}),
        json!({"Effect": "Allow", "Action": ["glue:GetTable", "glue:DeleteTable"], "Resource": {"Fn::Sub": GLUE[2]}}),
        json!({"Fn::If": ["C", {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "arn:aws:iam::1:role/x"}, {"Ref": "AWS::NoValue"}]}),
        json!({"Effect": "Allow", "Action": "s3tables:DeleteTable", "Resource": {"Fn::Sub": TABLES}}),
        json!({"Effect": "Allow", "Action": "s3tables:GetTableData", "Resource": {"Ref": "TableBucketArn"}}),
        json!({"Effect": "Allow", "Action": "s3tables:CreateTable", "Resource": "arn:aws:s3tables:us-east-1:123456789012:bucket/*"}),
        json!({"Effect": "Allow", "Action": ["lakeformation:GetDataAccess", "glue:GetTable"], "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "lakeformation:GrantPermissions", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "arn:aws:secretsmanager:us-east-1:123456789012:secret:other-AbCdEf"}),
        json!({"Effect": "Allow", "Action": "secretsmanager:ListSecrets", "Resource": {"Ref": "RestSecretArn"}}),
        json!({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "arn:aws:kms:us-east-1:123456789012:key/other"}),
        json!({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": {"Ref": "RestSecretKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": {"Ref": "LandingBucketKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:Encrypt", "Resource": {"Ref": "WarehouseKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": {"Ref": "WarehouseKmsKeyArn"},
            "Condition": {"StringEquals": {"kms:ViaService": "sqs.us-east-1.amazonaws.com"}}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/*"}}),
        json!({"Effect": "Allow", "Action": "ssm:PutParameter", "Resource": {"Fn::Sub": CONFIG_PARAMETER}}),
        json!({"Effect": "Allow", "Action": "ssm:GetParametersByPath", "Resource": {"Fn::Sub": CONFIG_PARAMETER}}),
        json!({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["IngestQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": "sqs:ReceiveMessage", "Resource": {"Fn::GetAtt": ["IngestDeadLetterQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": "sqs:PurgeQueue", "Resource": {"Fn::GetAtt": ["IngestDeadLetterQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Sub": "arn:${AWS::Partition}:s3:::${Bucket}/config/*"}}),
    ];
    for c in cases {
        let v = least_privilege_violations(&role(c.clone()));
        assert!(!v.is_empty(), "not caught: {c}");
    }
    let fine = json!({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": {"Fn::Sub": BUCKET},
        "Condition": {"StringLike": {"s3:prefix": {"Fn::Sub": "${DmsPrefix}*"}}}});
    let v = least_privilege_violations(&role(fine));
    assert!(v.is_empty(), "false positive: {v:?}");
    for fine in [
        json!({"Effect": "Allow", "Action": "lakeformation:GetDataAccess", "Resource": "*"}),
        json!({"Effect": "Allow", "Action": "ssm:GetParameter", "Resource": {"Fn::Sub": CONFIG_PARAMETER}}),
        json!({"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["IngestDeadLetterQueue", "Arn"]}}),
        json!({"Effect": "Allow", "Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Resource": {"Ref": "WarehouseKmsKeyArn"},
            "Condition": {"StringEquals": {"kms:ViaService": {"Fn::Sub": "s3.${AWS::Region}.${AWS::URLSuffix}"}}}}),
        json!({"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": "RestSecretArn"}}),
        json!({"Effect": "Allow", "Action": "kms:Decrypt", "Resource": {"Ref": "RestSecretKmsKeyArn"},
            "Condition": {"StringEquals": {"kms:ViaService": {"Fn::Sub": "secretsmanager.${AWS::Region}.${AWS::URLSuffix}"}}}}),
    ] {
        let v = least_privilege_violations(&role(fine.clone()));
        assert!(v.is_empty(), "false positive {fine}: {v:?}");
    }
    let managed = json!({"Resources": {"R": {"Type": "AWS::IAM::Role", "Properties": {
        "ManagedPolicyArns": ["arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]}}}});
    assert!(!least_privilege_violations(&managed).is_empty());

    // The DMS role: what an SSE-KMS target needs, with the landing bucket's key alone.
    let dms = |statement: Value| {
        json!({"Resources": {
            "D": {"Type": "AWS::IAM::Role", "Properties": {
                "AssumeRolePolicyDocument": {"Statement": [{"Effect": "Allow",
                    "Principal": {"Service": "dms.amazonaws.com"}, "Action": "sts:AssumeRole"}]},
                "Policies": [{"PolicyName": "p", "PolicyDocument": {"Statement": [statement]}}]}}}})
    };
    for c in [
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": {"Ref": "WarehouseKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:ReEncryptFrom", "Resource": {"Ref": "LandingBucketKmsKeyArn"}}),
        json!({"Effect": "Allow", "Action": "kms:GenerateDataKey", "Resource": "*"}),
    ] {
        assert!(
            !least_privilege_violations(&dms(c.clone())).is_empty(),
            "not caught: {c}"
        );
    }
    let fine = json!({"Effect": "Allow", "Action": DMS_KMS_ACTIONS, "Resource": {"Ref": "LandingBucketKmsKeyArn"}});
    let v = least_privilege_violations(&dms(fine));
    assert!(v.is_empty(), "false positive: {v:?}");
}

// ---------------------------------------------------------------------------------------------
// One deployment: the template with its conditions decided

/// A condition's value for these parameters (the rest at their defaults).
fn condition(t: &Value, c: &Value, params: &[(&str, &str)]) -> bool {
    let value = |v: &Value| -> String {
        match v.get("Ref").and_then(Value::as_str) {
            Some(p) => param_value(t, p, params),
            None => v.as_str().map_or_else(|| v.to_string(), str::to_string),
        }
    };
    let (k, a) = c
        .as_object()
        .and_then(|m| m.iter().next())
        .unwrap_or_else(|| panic!("not a condition: {c}"));
    let all = || a.as_array().expect("a list of conditions").iter();
    match k.as_str() {
        "Fn::Equals" => value(&a[0]) == value(&a[1]),
        "Fn::And" => all().all(|x| condition(t, x, params)),
        "Fn::Or" => all().any(|x| condition(t, x, params)),
        "Fn::Not" => !condition(t, &a[0], params),
        "Condition" => {
            let name = a.as_str().expect("a condition name");
            condition(t, &t["Conditions"][name], params)
        }
        other => panic!("condition function {other} not understood"),
    }
}

/// A deployment's stack, unless the parameters name other pseudo parameters (`AWS::AccountId`
/// `123456789012` is the account `sam local` evaluates templates with).
const PSEUDO: [(&str, &str); 5] = [
    ("AWS::AccountId", "111122223333"),
    ("AWS::Region", "eu-west-1"),
    ("AWS::Partition", "aws"),
    ("AWS::StackName", "dms2iceberg"),
    (
        "AWS::StackId",
        "arn:aws:cloudformation:eu-west-1:111122223333:stack/dms2iceberg/4f9b2c1e-5a3d-11ef-9c2b-0a1b2c3d4e5f",
    ),
];

/// A parameter's (or pseudo parameter's) value for these parameters (the rest at their
/// defaults).
fn param_value(t: &Value, name: &str, params: &[(&str, &str)]) -> String {
    if let Some((_, v)) = params.iter().find(|(k, _)| *k == name) {
        return v.to_string();
    }
    if name.starts_with("AWS::") {
        return PSEUDO
            .iter()
            .find(|(k, _)| *k == name)
            .unwrap_or_else(|| panic!("pseudo parameter {name} not modelled"))
            .1
            .to_string();
    }
    match param_default(t, name) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// `v` with every `Fn::If` replaced by the branch these parameters take (`AWS::NoValue`
/// branches dropped from lists and maps).
fn decide(t: &Value, v: &Value, params: &[(&str, &str)]) -> Option<Value> {
    match v {
        Value::Object(m) if m.len() == 1 && m.contains_key("Fn::If") => {
            let a = &m["Fn::If"];
            let name = a[0].as_str().expect("Fn::If names a condition");
            let taken = condition(t, &json!({ "Condition": name }), params);
            decide(t, &a[if taken { 1 } else { 2 }], params)
        }
        Value::Object(m) if m.get("Ref") == Some(&json!("AWS::NoValue")) => None,
        Value::Object(m) => Some(Value::Object(
            m.iter()
                .filter_map(|(k, x)| decide(t, x, params).map(|x| (k.clone(), x)))
                .collect(),
        )),
        Value::Array(a) => Some(Value::Array(
            a.iter().filter_map(|x| decide(t, x, params)).collect(),
        )),
        other => Some(other.clone()),
    }
}

/// The template as CloudFormation deploys it with these parameters: resources whose condition
/// is false removed, every `Fn::If` decided.
fn deployed(t: &Value, params: &[(&str, &str)]) -> Value {
    let mut out = decide(t, t, params).expect("a template");
    if let Some(resources) = out["Resources"].as_object_mut() {
        resources.retain(|_, r| match r["Condition"].as_str() {
            Some(c) => condition(t, &json!({ "Condition": c }), params),
            None => true,
        });
    }
    out
}

/// Actions a function's role allows, each with the resources it is allowed on.
fn allowed(t: &Value, function: &str) -> Vec<(String, Vec<String>)> {
    role_of(t, function)
        .1
        .iter()
        .flat_map(|s| {
            let res = strings(&s["Resource"]);
            strings(&s["Action"])
                .into_iter()
                .map(move |a| (a, res.clone()))
        })
        .collect()
}

/// The template's Rules these parameters break (rule name and description); empty = none.
fn broken_rules(t: &Value, params: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let empty = serde_json::Map::new();
    for (name, rule) in t["Rules"].as_object().unwrap_or(&empty) {
        let applies = rule
            .get("RuleCondition")
            .is_none_or(|c| condition(t, c, params));
        if !applies {
            continue;
        }
        for a in rule["Assertions"].as_array().into_iter().flatten() {
            if !condition(t, &a["Assert"], params) {
                out.push(format!("{name}: {}", a["AssertDescription"]));
            }
        }
    }
    out
}

/// Which Glue API a deployment uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum GlueUse {
    None,
    /// The Data Catalog API (`Catalog=glue`).
    Api,
    /// Its Iceberg REST endpoint (`Catalog=rest`, SigV4 `glue`).
    Rest,
}

/// One deployment and what its functions must be granted and told; everything else they must
/// not be granted.
struct CatalogCase {
    name: &'static str,
    params: &'static [(&'static str, &'static str)],
    glue: GlueUse,
    /// The table bucket the functions work in.
    table_bucket: Option<&'static str>,
    /// Through S3 Tables' Iceberg REST endpoint (`s3tables:GetTableBucket` for its config).
    s3tables_rest: bool,
    /// Read/write under the warehouse prefix (the functions' own S3 grants).
    warehouse: bool,
    /// `lakeformation:GetDataAccess` (Glue's endpoint vending credentials).
    lake_formation: bool,
    /// `secretsmanager:GetSecretValue` on `RestSecretArn`, and `kms:Decrypt` of its key.
    secret: bool,
    secret_key: bool,
    /// Both functions' catalog variables, rendered (`None`: absent).
    env: &'static [(&'static str, Option<&'static str>)],
    /// The maintenance schedule: its tasks and state.
    maintenance: (&'static str, &'static str),
    /// The compact function's `DMS2ICEBERG_COMPACTION`, rendered.
    compaction: &'static str,
}

const SECRET_ARN: &str =
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:dms2iceberg/rest-AbCdEf";
const GLUE_REST_URI: &str = "https://glue.${AWS::Region}.${AWS::URLSuffix}/iceberg";
const S3TABLES_REST_URI: &str = "https://s3tables.${AWS::Region}.${AWS::URLSuffix}/iceberg";
/// The REST variables, absent unless the case says otherwise.
const REST_ENV: [&str; 8] = [
    "DMS2ICEBERG_REST_URI",
    "DMS2ICEBERG_REST_WAREHOUSE",
    "DMS2ICEBERG_REST_SIGV4",
    "DMS2ICEBERG_REST_TOKEN_SECRET",
    "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
    "DMS2ICEBERG_REST_OAUTH2_URI",
    "DMS2ICEBERG_REST_SCOPE",
    "DMS2ICEBERG_REST_VENDED_CREDENTIALS",
];
const ALL_TASKS: &str = r#"["expire","orphans"]"#;

fn catalog_cases() -> Vec<CatalogCase> {
    vec![
        CatalogCase {
            name: "glue (the default)",
            params: &[],
            glue: GlueUse::Api,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: true,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_CATALOG", Some("${Catalog}")),
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some("")),
            ],
            maintenance: (ALL_TASKS, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "s3tables, a table bucket the stack creates",
            params: &[("Catalog", "s3tables")],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[0]),
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some(TABLE_BUCKETS[0])),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (ALL_TASKS, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "s3tables, an existing table bucket",
            params: &[
                ("Catalog", "s3tables"),
                (
                    "TableBucketArn",
                    "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
                ),
            ],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[1]),
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some(TABLE_BUCKETS[1])),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (ALL_TASKS, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest on Glue's Iceberg REST endpoint",
            params: &[("Catalog", "rest"), ("RestAuthentication", "glue")],
            glue: GlueUse::Rest,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: true,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_CATALOG", Some("${Catalog}")),
                ("DMS2ICEBERG_REST_URI", Some(GLUE_REST_URI)),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some("${AWS::AccountId}")),
                ("DMS2ICEBERG_REST_SIGV4", Some("glue")),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some("")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest on Glue's endpoint, Lake Formation vending the credentials",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "glue"),
                ("RestVendedCredentials", "true"),
            ],
            glue: GlueUse::Rest,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: false,
            lake_formation: true,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some(GLUE_REST_URI)),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some("${AWS::AccountId}")),
                ("DMS2ICEBERG_REST_SIGV4", Some("glue")),
                ("DMS2ICEBERG_REST_VENDED_CREDENTIALS", Some("true")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest on S3 Tables' endpoint, a table bucket the stack creates",
            params: &[("Catalog", "rest"), ("RestAuthentication", "s3tables")],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[0]),
            s3tables_rest: true,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some(S3TABLES_REST_URI)),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some(TABLE_BUCKETS[0])),
                ("DMS2ICEBERG_REST_SIGV4", Some("s3tables")),
                ("DMS2ICEBERG_TABLE_BUCKET_ARN", Some("")),
            ],
            // The service maintains the tables.
            maintenance: (r#"["expire"]"#, "DISABLED"),
            compaction: "off",
        },
        CatalogCase {
            name: "rest on S3 Tables' endpoint, an existing bucket, another URI, compaction on",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "s3tables"),
                (
                    "TableBucketArn",
                    "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
                ),
                (
                    "RestUri",
                    "https://s3tables.eu-west-1.amazonaws.com/iceberg",
                ),
                ("Compaction", "on"),
            ],
            glue: GlueUse::None,
            table_bucket: Some(TABLE_BUCKETS[1]),
            s3tables_rest: true,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some(TABLE_BUCKETS[1])),
                ("DMS2ICEBERG_REST_SIGV4", Some("s3tables")),
            ],
            maintenance: (r#"["expire"]"#, "DISABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest elsewhere, a bearer token from Secrets Manager, vended credentials",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "token"),
                ("RestUri", "https://polaris.example.com/api/catalog"),
                ("RestWarehouse", "lake"),
                ("RestSecretArn", SECRET_ARN),
                ("RestVendedCredentials", "true"),
            ],
            glue: GlueUse::None,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: true,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                ("DMS2ICEBERG_REST_WAREHOUSE", Some("${RestWarehouse}")),
                ("DMS2ICEBERG_REST_TOKEN_SECRET", Some("${RestSecretArn}")),
                ("DMS2ICEBERG_REST_VENDED_CREDENTIALS", Some("true")),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest elsewhere, OAuth2 credentials from a KMS-encrypted secret, a named warehouse bucket",
            params: &[
                ("Catalog", "rest"),
                ("RestAuthentication", "credential"),
                ("RestUri", "https://lakekeeper.example.com/catalog"),
                ("RestSecretArn", SECRET_ARN),
                (
                    "RestSecretKmsKeyArn",
                    "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
                ),
                ("RestOAuth2Uri", "https://idp.example.com/oauth2/token"),
                ("RestScope", "lakekeeper"),
                ("WarehouseBucketName", "lake-tables"),
            ],
            glue: GlueUse::None,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: true,
            lake_formation: false,
            secret: true,
            secret_key: true,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                (
                    "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
                    Some("${RestSecretArn}"),
                ),
                ("DMS2ICEBERG_REST_OAUTH2_URI", Some("${RestOAuth2Uri}")),
                ("DMS2ICEBERG_REST_SCOPE", Some("${RestScope}")),
                ("DMS2ICEBERG_WAREHOUSE", Some("")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
        CatalogCase {
            name: "rest elsewhere, unauthenticated, vended credentials",
            params: &[
                ("Catalog", "rest"),
                ("RestUri", "http://catalog.internal:8181"),
                ("RestVendedCredentials", "true"),
            ],
            glue: GlueUse::None,
            table_bucket: None,
            s3tables_rest: false,
            warehouse: false,
            lake_formation: false,
            secret: false,
            secret_key: false,
            env: &[
                ("DMS2ICEBERG_REST_URI", Some("${RestUri}")),
                ("DMS2ICEBERG_REST_VENDED_CREDENTIALS", Some("true")),
            ],
            maintenance: (r#"["expire"]"#, "ENABLED"),
            compaction: "${Compaction}",
        },
    ]
}

/// Each catalog gets the permissions it uses and none of the others': S3 Tables no Glue and no
/// warehouse bucket, Glue no table bucket, Glue's and S3 Tables' REST endpoints what their REST
/// operations map to, a REST catalog elsewhere nothing but its secret (and the warehouse bucket
/// it names); the functions are told which catalog they use, and nothing else (the REST
/// variables are absent unless used); the compaction function runs what the catalog leaves to
/// it; and the template's Rules accept each case.
#[test]
fn each_catalog_is_granted_only_what_it_uses() {
    let raw = &loaded().raw;
    for case in catalog_cases() {
        let name = case.name;
        let params = case.params;
        let broken = broken_rules(raw, params);
        assert!(broken.is_empty(), "{name}: rules refuse it: {broken:?}");
        let t = deployed(raw, params);
        let v = least_privilege_violations(&t);
        assert!(v.is_empty(), "{name}: violations:\n  {}", v.join("\n  "));
        let has_resource = |id: &str| t["Resources"].get(id).is_some();

        // The environment: what the case lists, the REST variables absent otherwise.
        let env = &t["Globals"]["Function"]["Environment"]["Variables"];
        for (var, want) in case.env {
            match want {
                Some(w) => assert_eq!(render(&env[*var]), [*w], "{name}: {var}"),
                None => assert!(env.get(*var).is_none(), "{name}: {var} set"),
            }
        }
        for var in REST_ENV {
            if !case.env.iter().any(|(k, _)| *k == var) {
                assert!(env.get(var).is_none(), "{name}: {var} set: {}", env[var]);
            }
        }
        let compact = &t["Resources"]["CompactFunction"]["Properties"];
        assert_eq!(
            render(&compact["Environment"]["Variables"]["DMS2ICEBERG_COMPACTION"]),
            [case.compaction],
            "{name}"
        );
        let maintenance = &compact["Events"]["Maintenance"]["Properties"];
        let input: Value =
            serde_json::from_str(maintenance["Input"].as_str().expect("Input decided"))
                .expect("JSON input");
        assert_eq!(
            input["tasks"],
            serde_json::from_str::<Value>(case.maintenance.0).expect("tasks"),
            "{name}"
        );
        assert_eq!(maintenance["State"], case.maintenance.1, "{name}");

        // Resources the catalog needs, and none other.
        let named_warehouse = params.iter().any(|(k, _)| *k == "WarehouseBucketName");
        assert_eq!(
            has_resource("WarehouseBucket"),
            case.glue != GlueUse::None && !named_warehouse,
            "{name}: WarehouseBucket"
        );
        assert_eq!(
            has_resource("GlueDatabase"),
            case.glue != GlueUse::None,
            "{name}: GlueDatabase"
        );
        assert_eq!(
            has_resource("TableBucket"),
            case.table_bucket == Some(TABLE_BUCKETS[0]),
            "{name}: TableBucket"
        );

        // Grants.
        let ingest = allowed(&t, "IngestFunction");
        let compact = allowed(&t, "CompactFunction");
        let can = |grants: &[(String, Vec<String>)], a: &str, r: &str| {
            grants
                .iter()
                .any(|(x, rs)| x == a && rs.iter().any(|y| y == r))
        };
        let any = |grants: &[(String, Vec<String>)], pred: &dyn Fn(&str, &str) -> bool| {
            grants.iter().any(|(a, rs)| rs.iter().any(|r| pred(a, r)))
        };
        let both = [("ingest", &ingest), ("compact", &compact)];
        assert!(
            can(&ingest, "s3:GetObject", DMS_OBJECTS),
            "{name}: ingest cannot read DMS files"
        );
        for (who, grants) in both {
            assert_eq!(
                any(grants, &|_, r| r == WAREHOUSE_OBJECTS),
                case.warehouse,
                "{name}: {who}: the warehouse prefix"
            );
            if case.warehouse {
                assert!(
                    can(grants, "s3:PutObject", WAREHOUSE_OBJECTS),
                    "{name}: {who}"
                );
                assert!(can(grants, "s3:ListBucket", BUCKET), "{name}: {who}");
            }
            assert_eq!(
                any(grants, &|a, _| a == "lakeformation:GetDataAccess"),
                case.lake_formation,
                "{name}: {who}: Lake Formation"
            );
            assert_eq!(
                can(grants, "secretsmanager:GetSecretValue", REST_SECRET),
                case.secret,
                "{name}: {who}: the secret"
            );
            assert_eq!(
                any(grants, &|a, _| a.starts_with("secretsmanager:")),
                case.secret,
                "{name}: {who}: Secrets Manager"
            );
            assert_eq!(
                can(grants, "kms:Decrypt", SECRET_KEY),
                case.secret_key,
                "{name}: {who}: the secret's key"
            );
            if case.glue == GlueUse::None {
                assert!(
                    !any(grants, &|a, _| a.starts_with("glue:")),
                    "{name}: {who} has Glue"
                );
            }
            match case.table_bucket {
                None => assert!(
                    !any(grants, &|a, _| a.starts_with("s3tables:")),
                    "{name}: {who} has S3 Tables"
                ),
                Some(bucket) => {
                    for a in S3TABLES_TABLE_ACTIONS {
                        assert!(can(grants, a, TABLES), "{name}: {who} lacks {a}");
                    }
                    assert_eq!(
                        can(grants, "s3tables:GetTableBucket", bucket),
                        case.s3tables_rest,
                        "{name}: {who}: GetTableBucket"
                    );
                }
            }
        }
        if let Some(bucket) = case.table_bucket {
            for a in ["s3tables:CreateNamespace", "s3tables:CreateTable"] {
                assert!(can(&ingest, a, bucket), "{name}: ingest lacks {a}");
                assert!(!can(&compact, a, bucket), "{name}: compact has {a}");
            }
            assert!(
                can(&compact, "s3tables:ListTables", bucket),
                "{name}: compact cannot list"
            );
        }
        let (ingest_glue, compact_glue): (&[&str], &[&str]) = match case.glue {
            GlueUse::None => (&[], &[]),
            GlueUse::Api => (
                &[
                    "glue:GetDatabase",
                    "glue:CreateDatabase",
                    "glue:GetTable",
                    "glue:GetTables",
                    "glue:CreateTable",
                    "glue:UpdateTable",
                ],
                &[
                    "glue:GetDatabase",
                    "glue:GetTable",
                    "glue:GetTables",
                    "glue:UpdateTable",
                ],
            ),
            // GetConfig = GetCatalog, CreateNamespace = CreateDatabase, LoadTable = GetTable,
            // CreateTable, UpdateTable; ListTables = GetTables (compact).
            GlueUse::Rest => (
                &[
                    "glue:GetCatalog",
                    "glue:GetDatabase",
                    "glue:CreateDatabase",
                    "glue:GetTable",
                    "glue:CreateTable",
                    "glue:UpdateTable",
                ],
                &[
                    "glue:GetCatalog",
                    "glue:GetDatabase",
                    "glue:GetTable",
                    "glue:GetTables",
                    "glue:UpdateTable",
                ],
            ),
        };
        for (who, grants, want) in [
            ("ingest", &ingest, ingest_glue),
            ("compact", &compact, compact_glue),
        ] {
            let got: BTreeSet<&str> = grants
                .iter()
                .filter(|(a, _)| a.starts_with("glue:"))
                .map(|(a, _)| a.as_str())
                .collect();
            assert_eq!(
                got,
                want.iter().copied().collect::<BTreeSet<_>>(),
                "{name}: {who}'s Glue actions"
            );
            for a in want {
                for r in GLUE {
                    assert!(can(grants, a, r), "{name}: {who}: {a} on {r}");
                }
            }
        }
    }
}

/// The Rules refuse parameters that do not fit together, each with its reason.
#[test]
fn inconsistent_catalog_parameters_are_refused() {
    let raw = &loaded().raw;
    let cases: [&[(&str, &str)]; 11] = [
        &[("RestUri", "https://polaris.example.com/api/catalog")],
        &[("RestAuthentication", "glue")],
        &[("Catalog", "s3tables"), ("RestVendedCredentials", "true")],
        &[("Catalog", "rest")],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "token"),
            ("RestUri", "https://polaris.example.com/api/catalog"),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "glue"),
            ("RestSecretArn", SECRET_ARN),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "glue"),
            ("RestWarehouse", "123456789012"),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "token"),
            ("RestUri", "https://polaris.example.com/api/catalog"),
            ("RestSecretArn", SECRET_ARN),
            ("RestScope", "PRINCIPAL_ROLE:ALL"),
        ],
        &[
            ("Catalog", "rest"),
            ("RestAuthentication", "glue"),
            (
                "TableBucketArn",
                "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
            ),
        ],
        &[
            ("Catalog", "rest"),
            ("RestUri", "http://catalog.internal:8181"),
            (
                "RestSecretKmsKeyArn",
                "arn:aws:kms:eu-west-1:123456789012:key/1234abcd",
            ),
        ],
        &[
            ("Catalog", "glue"),
            (
                "TableBucketArn",
                "arn:aws:s3tables:eu-west-1:123456789012:bucket/lake",
            ),
        ],
    ];
    for params in cases {
        assert!(
            !broken_rules(raw, params).is_empty(),
            "accepted: {params:?}"
        );
    }
    assert!(
        broken_rules(raw, &[]).is_empty(),
        "the defaults are refused"
    );
}

// ---------------------------------------------------------------------------------------------
// Wiring

fn param_default(t: &Value, name: &str) -> Value {
    let p = &t["Parameters"][name];
    assert!(p.is_object(), "parameter {name} missing");
    p["Default"].clone()
}

fn as_i64(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Environment variable names a function gets: Globals plus its own.
fn declared_env(raw: &Value, function: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for vars in [
        &raw["Globals"]["Function"]["Environment"]["Variables"],
        &raw["Resources"][function]["Properties"]["Environment"]["Variables"],
    ] {
        if let Some(m) = vars.as_object() {
            names.extend(m.keys().cloned());
        }
    }
    names
}

const COMMON_ENV: [&str; 14] = [
    "DMS2ICEBERG_CATALOG",
    "DMS2ICEBERG_WAREHOUSE",
    "DMS2ICEBERG_TABLE_BUCKET_ARN",
    "DMS2ICEBERG_REST_URI",
    "DMS2ICEBERG_REST_WAREHOUSE",
    "DMS2ICEBERG_REST_SIGV4",
    "DMS2ICEBERG_REST_TOKEN_SECRET",
    "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
    "DMS2ICEBERG_REST_OAUTH2_URI",
    "DMS2ICEBERG_REST_SCOPE",
    "DMS2ICEBERG_REST_VENDED_CREDENTIALS",
    "DMS2ICEBERG_GLUE_DATABASE",
    "DMS2ICEBERG_TABLE_METRICS",
    "RUST_LOG",
];
/// The ingest function's own: its config, dead-letter queue and batching (the compact function
/// reads none of them, and may read neither the config nor a queue).
const INGEST_ENV: [&str; 6] = [
    "DMS2ICEBERG_CONFIG",
    "DMS2ICEBERG_DEAD_LETTER_QUEUE_URL",
    "DMS2ICEBERG_MAX_FILES_PER_COMMIT",
    "DMS2ICEBERG_MAX_FILES_PER_INVOCATION",
    "DMS2ICEBERG_PARALLEL_LOADS",
    "DMS2ICEBERG_FORMAT_VERSION",
];
const COMPACT_ENV: [&str; 5] = [
    "DMS2ICEBERG_COMPACTION",
    "DMS2ICEBERG_COMPACT_MAX_BYTES",
    "DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS",
    "DMS2ICEBERG_SNAPSHOT_RETAIN_MAX",
    "DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS",
];

#[test]
fn functions_are_wired_as_documented() {
    let l = loaded();
    let raw = &l.raw;
    let t = &l.transformed;

    // Contract defaults.
    for (name, want) in [
        ("Architecture", json!("arm64")),
        ("IngestMemorySize", json!(1769)),
        ("CompactMemorySize", json!(3008)),
        ("IngestTimeout", json!(300)),
        ("CompactTimeout", json!(240)),
        ("LandingBucketName", json!("")),
        ("DmsPrefix", json!("dms/")),
        ("WarehouseBucketName", json!("")),
        ("WarehousePrefix", json!("warehouse/")),
        ("MaxFilesPerCommit", json!(1)),
        ("MaxFilesPerInvocation", json!(100)),
        ("LogLevel", json!("info")),
        ("CompactSchedule", json!("rate(5 minutes)")),
        ("MaintenanceSchedule", json!("rate(1 hour)")),
        ("SnapshotRetainMax", json!(200)),
        ("CompactMaxBytes", json!(1073741824)),
        ("SnapshotRetentionHours", json!(168)),
        ("OrphanMinAgeHours", json!(72)),
        ("QueueMaxReceiveCount", json!(5)),
        ("Catalog", json!("glue")),
        ("TableBucketArn", json!("")),
        ("Compaction", json!("auto")),
        ("RestAuthentication", json!("none")),
        ("RestUri", json!("")),
        ("RestWarehouse", json!("")),
        ("RestSecretArn", json!("")),
        ("RestVendedCredentials", json!("false")),
        ("GlueDatabaseName", json!("")),
        ("CreateGlueDatabase", json!("true")),
        ("ConfigS3Uri", json!("")),
        ("TableMetrics", json!("off")),
        ("LagAlarmMinutes", json!(30)),
        ("AlarmEmail", json!("")),
        ("AlarmTopicArn", json!("")),
        ("WarehouseKmsKeyArn", json!("")),
        ("LandingBucketKmsKeyArn", json!("")),
        ("QueueVisibilityTimeout", json!(1800)),
    ] {
        assert_eq!(param_default(raw, name), want, "default of {name}");
    }
    assert_eq!(
        strings(&raw["Parameters"]["TableMetrics"]["AllowedValues"]),
        ["off", "on"]
    );
    let arch = strings(&raw["Parameters"]["Architecture"]["AllowedValues"]);
    assert_eq!(arch, ["arm64", "x86_64"]);
    assert_eq!(
        strings(&raw["Parameters"]["Catalog"]["AllowedValues"]),
        ["glue", "s3tables", "rest"]
    );
    assert_eq!(
        strings(&raw["Parameters"]["RestAuthentication"]["AllowedValues"]),
        ["none", "glue", "s3tables", "token", "credential"]
    );
    // Every parameter is in a group of the console's form, every REST one labelled.
    let interface = &raw["Metadata"]["AWS::CloudFormation::Interface"];
    let grouped: BTreeSet<String> = interface["ParameterGroups"]
        .as_array()
        .expect("parameter groups")
        .iter()
        .flat_map(|g| strings(&g["Parameters"]))
        .collect();
    for p in raw["Parameters"].as_object().expect("parameters").keys() {
        assert!(grouped.contains(p), "parameter {p} in no ParameterGroup");
        if p.starts_with("Rest") {
            assert!(
                interface["ParameterLabels"][p]["default"].is_string(),
                "parameter {p} has no label"
            );
        }
    }
    // Every variable the template sets is one the functions read (a misspelt name would be
    // ignored silently).
    let source = rust_sources(&root().join("shared/src"));
    for function in ["IngestFunction", "CompactFunction"] {
        for name in declared_env(raw, function) {
            if name.starts_with("DMS2ICEBERG_") {
                assert!(
                    source.contains(&format!("\"{name}\"")),
                    "{function}: {name} is read nowhere in shared/src"
                );
            }
        }
    }
    // AWS: visibility timeout at least six times the function timeout.
    assert!(
        as_i64(&param_default(raw, "QueueVisibilityTimeout"))
            >= 6 * as_i64(&param_default(raw, "IngestTimeout")),
        "QueueVisibilityTimeout default < 6 x IngestTimeout default"
    );

    // Build metadata: cargo-lambda, a binary each, CodeUri the workspace member defining it.
    for (function, binary, memory, timeout) in [
        (
            "IngestFunction",
            "dms2iceberg-ingest",
            "IngestMemorySize",
            "IngestTimeout",
        ),
        (
            "CompactFunction",
            "dms2iceberg-compact",
            "CompactMemorySize",
            "CompactTimeout",
        ),
    ] {
        let f = &raw["Resources"][function];
        assert_eq!(f["Type"], "AWS::Serverless::Function");
        assert_eq!(
            f["Metadata"]["BuildMethod"], "rust-cargolambda",
            "{function}"
        );
        assert_eq!(
            f["Metadata"]["BuildProperties"]["Binary"], binary,
            "{function}"
        );
        let code_uri = f["Properties"]["CodeUri"].as_str().expect("local CodeUri");
        let manifest = root().join(code_uri).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| {
            panic!("{function}: CodeUri {code_uri} has no Cargo.toml ({e}); sam build needs the package")
        });
        assert!(
            text.contains(&format!("name = \"{binary}\"")),
            "{}: no bin/package named {binary}",
            manifest.display()
        );
        let workspace = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
        assert!(
            workspace.contains(&format!("\"{code_uri}\"")),
            "{code_uri} is not a member of the workspace in Cargo.toml"
        );
        let lf = &t["Resources"][function]["Properties"];
        assert_eq!(lf["Runtime"], "provided.al2023", "{function}");
        assert_eq!(lf["Handler"], "bootstrap", "{function}");
        assert_eq!(
            render(&lf["Architectures"]),
            ["${Architecture}"],
            "{function}"
        );
        assert_eq!(
            render(&lf["MemorySize"]),
            [format!("${{{memory}}}")],
            "{function}"
        );
        assert_eq!(
            render(&lf["Timeout"]),
            [format!("${{{timeout}}}")],
            "{function}"
        );
        let env = declared_env(raw, function);
        for name in COMMON_ENV {
            assert!(env.contains(name), "{function}: {name} not set");
        }
        // Its own log group, with a retention.
        let lg = render(&lf["LoggingConfig"]["LogGroup"]);
        assert_eq!(lg.len(), 1, "{function}: LoggingConfig.LogGroup");
        let lg_id = lg[0].trim_start_matches("${").trim_end_matches('}');
        let group = &t["Resources"][lg_id];
        assert_eq!(group["Type"], "AWS::Logs::LogGroup", "{function}: {lg_id}");
        assert_eq!(
            render(&group["Properties"]["RetentionInDays"]),
            ["${LogRetentionDays}"]
        );
    }
    let compact_env = declared_env(raw, "CompactFunction");
    for name in COMPACT_ENV {
        assert!(
            compact_env.contains(name),
            "CompactFunction: {name} not set"
        );
    }
    let ingest_env = declared_env(raw, "IngestFunction");
    for name in INGEST_ENV {
        assert!(ingest_env.contains(name), "IngestFunction: {name} not set");
        assert!(
            !compact_env.contains(name),
            "CompactFunction: {name} set (the ingest function's alone)"
        );
    }

    // Ingest: SQS event source with partial batch responses; queue -> DLQ after N receives.
    let esm: Vec<&Value> = t["Resources"]
        .as_object()
        .expect("resources")
        .values()
        .filter(|r| {
            r["Type"] == "AWS::Lambda::EventSourceMapping"
                && render(&r["Properties"]["FunctionName"]) == ["${IngestFunction}"]
        })
        .collect();
    assert_eq!(esm.len(), 1, "one event source for IngestFunction");
    let esm = &esm[0]["Properties"];
    assert_eq!(render(&esm["EventSourceArn"]), ["${IngestQueue.Arn}"]);
    assert_eq!(
        strings(&esm["FunctionResponseTypes"]),
        ["ReportBatchItemFailures"]
    );
    let q = &t["Resources"]["IngestQueue"]["Properties"];
    assert_eq!(
        render(&q["VisibilityTimeout"]),
        ["${QueueVisibilityTimeout}"]
    );
    assert_eq!(
        render(&q["RedrivePolicy"]["deadLetterTargetArn"]),
        ["${IngestDeadLetterQueue.Arn}"]
    );
    assert_eq!(
        render(&q["RedrivePolicy"]["maxReceiveCount"]),
        ["${QueueMaxReceiveCount}"]
    );
    let dlq = &t["Resources"]["IngestDeadLetterQueue"]["Properties"];
    assert!(
        as_i64(&dlq["MessageRetentionPeriod"]) > as_i64(&q["MessageRetentionPeriod"]),
        "the DLQ must retain longer than the queue (moved messages keep their enqueue time)"
    );

    // S3 Object Created and Object Deleted (a source truncate) -> EventBridge rule -> queue,
    // for DMS files under the prefix only.
    let rule = &t["Resources"]["DmsObjectCreatedRule"]["Properties"];
    assert_eq!(strings(&rule["EventPattern"]["source"]), ["aws.s3"]);
    assert_eq!(
        strings(&rule["EventPattern"]["detail-type"]),
        ["Object Created", "Object Deleted"]
    );
    let keys: Vec<String> = rule["EventPattern"]["detail"]["object"]["key"]
        .as_array()
        .expect("key patterns")
        .iter()
        .flat_map(|k| render(&k["wildcard"]))
        .collect();
    assert_eq!(
        keys,
        [
            "${DmsPrefix}*.csv",
            "${DmsPrefix}*.csv.gz",
            "${DmsPrefix}*.parquet"
        ]
    );
    let target = &rule["Targets"][0];
    assert_eq!(render(&target["Arn"]), ["${IngestQueue.Arn}"]);
    assert_eq!(
        render(&target["DeadLetterConfig"]["Arn"]),
        ["${IngestDeadLetterQueue.Arn}"]
    );
    let landing = &t["Resources"]["LandingBucket"]["Properties"];
    assert_eq!(
        landing["NotificationConfiguration"]["EventBridgeConfiguration"]["EventBridgeEnabled"],
        json!(true),
        "a created landing bucket must send events to EventBridge"
    );

    // Compact: on the schedule parameter (the default catalog: every maintenance task; the
    // catalogs' differences are checked in `each_catalog_is_granted_only_what_it_uses`).
    let t = &deployed(t, &[]);
    let schedules: Vec<&Value> = t["Resources"]
        .as_object()
        .expect("resources")
        .values()
        .filter(|r| {
            r["Type"] == "AWS::Events::Rule"
                && r["Properties"]["Targets"][0]["Arn"]
                    == json!({"Fn::GetAtt": ["CompactFunction", "Arn"]})
        })
        .collect();
    // Two schedules: compaction by read cost often, expiry and orphans less often; each
    // names its tasks (the function's event contract, `CompactEvent::tasks`).
    assert_eq!(schedules.len(), 2, "two schedules for CompactFunction");
    let mut wired: Vec<(Vec<String>, Value)> = schedules
        .iter()
        .map(|r| {
            let input: Value = serde_json::from_str(
                r["Properties"]["Targets"][0]["Input"]
                    .as_str()
                    .unwrap_or("{}"),
            )
            .expect("schedule input is JSON");
            (
                render(&r["Properties"]["ScheduleExpression"]),
                input["tasks"].clone(),
            )
        })
        .collect();
    wired.sort_by_key(|w| w.0.clone());
    assert_eq!(
        wired,
        [
            (vec!["${CompactSchedule}".to_string()], json!(["compact"])),
            (
                vec!["${MaintenanceSchedule}".to_string()],
                json!(["expire", "orphans"])
            ),
        ]
    );

    // Outputs operators need.
    for o in [
        "LandingBucket",
        "DmsPrefix",
        "WarehouseLocation",
        "GlueDatabase",
        "TableBucketArn",
        "RestCatalogUri",
        "IngestQueueUrl",
        "DeadLetterQueueUrl",
        "IngestFunctionName",
        "IngestFunctionArn",
        "CompactFunctionName",
        "CompactFunctionArn",
        "ConfigParameterName",
        "AlarmTopicArnCreated",
        "DashboardName",
    ] {
        assert!(raw["Outputs"][o].is_object(), "output {o} missing");
    }

    // No Resource "*" hides in a parameterless corner: no AWS::Serverless policy templates.
    for f in ["IngestFunction", "CompactFunction"] {
        assert!(
            raw["Resources"][f]["Properties"].get("Policies").is_none(),
            "{f}: use Role, not Policies"
        );
    }
}

/// The text of every `.rs` file under `dir`.
fn rust_sources(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.expect("entry").path();
        if path.is_dir() {
            out.push_str(&rust_sources(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&path).expect("source"));
        }
    }
    out
}

#[test]
fn samconfig_is_sane() {
    let l = loaded();
    let c = &l.samconfig["default"];
    assert_eq!(c["deploy"]["parameters"]["capabilities"], "CAPABILITY_IAM");
    assert_eq!(c["deploy"]["parameters"]["resolve_s3"], json!(true));
    assert_eq!(
        c["build"]["parameters"]["cached"],
        json!(false),
        "cached builds would hash only CodeUri, not shared/"
    );
    assert_eq!(
        c["local_invoke"]["parameters"]["env_vars"],
        "infra/env.json"
    );
    // `sam deploy` reads the parameters most deployments set from infra/parameters.yaml, as
    // shipped the template's defaults; every other parameter has a default, so a deployment
    // asks nothing.
    assert_eq!(
        c["deploy"]["parameters"]["parameter_overrides"],
        "file://infra/parameters.yaml"
    );
    let overrides = l.overrides.as_object().expect("overrides");
    for needed in ["TablesConfig", "AlarmEmail", "GlueDatabaseName"] {
        assert!(
            overrides.contains_key(needed),
            "infra/parameters.yaml lacks {needed}"
        );
    }
    assert!(
        overrides.len() <= 8,
        "few parameters to set: {:?}",
        overrides.keys()
    );
    for (name, p) in l.raw["Parameters"].as_object().expect("parameters") {
        assert!(
            p.get("Default").is_some(),
            "parameter {name} has no default"
        );
    }
    for (k, v) in overrides {
        assert!(
            l.raw["Parameters"][k].is_object(),
            "samconfig overrides unknown parameter {k}"
        );
        let default = param_default(&l.raw, k);
        let default = default
            .as_str()
            .map(str::to_string)
            .unwrap_or(default.to_string());
        assert_eq!(
            v.as_str(),
            Some(default.as_str()),
            "samconfig {k} differs from the template default"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Sample events and env.json

/// EventBridge `wildcard`: `*` matches any run of characters (including `/`).
fn wildcard(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// S3 notification keys are form-URL-encoded (`+` = space, `%XX`).
fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("ascii");
                out.push(u8::from_str_radix(hex, 16).expect("hex escape"));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).expect("utf-8 key")
}

fn rule_matches(raw: &Value, bucket: &str, key: &str) -> bool {
    let prefix = param_default(raw, "DmsPrefix");
    let prefix = prefix.as_str().expect("DmsPrefix");
    let keys =
        raw["Resources"]["DmsObjectCreatedRule"]["Properties"]["EventPattern"]["detail"]["object"]
            ["key"]
            .as_array()
            .expect("key patterns")
            .iter()
            .flat_map(|k| render(&k["wildcard"]))
            .map(|p| p.replace("${DmsPrefix}", prefix))
            .collect::<Vec<_>>();
    !bucket.is_empty() && keys.iter().any(|p| wildcard(p, key))
}

#[test]
fn sample_events_are_realistic_and_match_the_rule() {
    let raw = &loaded().raw;

    let s3 = read_json("infra/events/s3-put.json");
    let recs = s3["Records"].as_array().expect("Records");
    assert_eq!(recs.len(), 2);
    for r in recs {
        assert_eq!(r["eventSource"], "aws:s3");
        assert_eq!(r["eventName"], "ObjectCreated:Put");
        let key = r["s3"]["object"]["key"].as_str().expect("key");
        let bucket = r["s3"]["bucket"]["name"].as_str().expect("bucket");
        assert!(rule_matches(raw, bucket, key), "rule would not match {key}");
    }
    assert_eq!(
        recs[0]["s3"]["object"]["key"],
        "dms/sales/product/20220302-1134010000.csv"
    );
    let encoded = recs[1]["s3"]["object"]["key"].as_str().expect("key");
    let decoded = url_decode(encoded);
    assert_ne!(
        decoded, encoded,
        "the second record shows a URL-encoded key"
    );
    assert_eq!(
        decoded,
        "dms/sales/order line$items/20220302-1134010000.csv"
    );

    let eb = read_json("infra/events/eventbridge.json");
    assert_eq!(eb["source"], "aws.s3");
    assert_eq!(eb["detail-type"], "Object Created");
    let key = eb["detail"]["object"]["key"].as_str().expect("key");
    assert!(rule_matches(
        raw,
        eb["detail"]["bucket"]["name"].as_str().unwrap_or(""),
        key
    ));

    let sqs = read_json("infra/events/sqs.json");
    let bodies: Vec<Value> = sqs["Records"]
        .as_array()
        .expect("Records")
        .iter()
        .map(|r| {
            assert_eq!(r["eventSource"], "aws:sqs");
            serde_json::from_str(r["body"].as_str().expect("body")).expect("body is JSON")
        })
        .collect();
    assert!(
        bodies
            .iter()
            .any(|b| b["Records"][0]["eventSource"] == "aws:s3"),
        "an S3 notification body"
    );
    assert!(
        bodies.iter().any(|b| b["detail-type"] == "Object Created"),
        "an EventBridge body (the deployed wiring)"
    );

    let sched = read_json("infra/events/schedule.json");
    assert_eq!(sched["source"], "aws.events");
    assert_eq!(sched["detail-type"], "Scheduled Event");
}

#[test]
fn env_json_only_sets_declared_variables() {
    let raw = &loaded().raw;
    let env = read_json("infra/env.json");
    let functions = env.as_object().expect("env.json is an object");
    assert!(!functions.is_empty());
    for (function, vars) in functions {
        assert!(
            raw["Resources"][function].is_object(),
            "env.json names unknown function {function}"
        );
        let declared = declared_env(raw, function);
        for name in vars.as_object().expect("variables").keys() {
            assert!(
                declared.contains(name),
                "env.json sets {name} for {function}, which the template does not declare: \
                 `sam local invoke` would silently drop it"
            );
        }
        for name in ["AWS_ENDPOINT_URL", "DMS2ICEBERG_S3_PATH_STYLE"] {
            assert!(
                vars.get(name).is_some(),
                "env.json: {function} lacks {name}"
            );
        }
    }
}

#[test]
fn helpers_behave() {
    assert!(wildcard("dms/*.csv", "dms/sales/product/LOAD00000001.csv"));
    assert!(!wildcard(
        "dms/*.csv",
        "dms/sales/product/LOAD00000001.csv.gz"
    ));
    assert!(wildcard("dms/*.csv.gz", "dms/a/b/LOAD00000001.csv.gz"));
    assert!(!wildcard("dms/*.parquet", "other/a/b/x.parquet"));
    assert_eq!(url_decode("a+b%24c%2Fd"), "a b$c/d");
    assert_eq!(
        render(&json!({"Fn::If": ["C", {"Ref": "A"}, {"Ref": "AWS::NoValue"}]})),
        ["${A}"]
    );
    assert!(Path::new(&root()).join("template.yaml").exists());
}

/// Every metric the functions emit in their EMF lines, from their source, with the files that
/// emit it (`ingest.rs`, `compact.rs`): the `("Name", "Unit", value)` tuples in
/// shared/src/lambda/ (whitespace and line breaks allowed), but for metrics.rs (the line's
/// format, and its unit test's sample metric) and tests.rs.
fn emitted_metrics() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut names = std::collections::BTreeMap::<String, BTreeSet<String>>::new();
    let dir = root().join("shared/src/lambda");
    for e in std::fs::read_dir(&dir).expect("shared/src/lambda") {
        let path = e.expect("entry").path();
        if path.extension().is_none_or(|x| x != "rs")
            || path.ends_with("tests.rs")
            || path.ends_with("metrics.rs")
        {
            continue;
        }
        let file = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        let text: String = std::fs::read_to_string(&path)
            .expect("source")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for unit in ["Count", "Seconds", "Milliseconds", "Bytes"] {
            let tail = format!("\", \"{unit}\",");
            let mut rest = text.as_str();
            while let Some(i) = rest.find(&tail) {
                let before = &rest[..i];
                if let Some(quote) = before.rfind('"') {
                    let name = &before[quote + 1..];
                    let opens_tuple = before[..quote].trim_end().ends_with('(');
                    if opens_tuple
                        && !name.is_empty()
                        && name.chars().all(|c| c.is_ascii_alphanumeric())
                    {
                        names
                            .entry(name.to_string())
                            .or_default()
                            .insert(file.clone());
                    }
                }
                rest = &rest[i + tail.len()..];
            }
        }
    }
    names
}

fn emitted_metric_names() -> BTreeSet<String> {
    emitted_metrics().into_keys().collect()
}

/// The function resource whose source emits metric `name` (each metric is one function's).
fn emitting_function(name: &str) -> &'static str {
    let metrics = emitted_metrics();
    let files = metrics
        .get(name)
        .unwrap_or_else(|| panic!("metric {name} is emitted nowhere in shared/src/lambda"));
    match files.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ingest.rs"] => "IngestFunction",
        ["compact.rs"] => "CompactFunction",
        ref other => panic!("metric {name} is emitted by {other:?}, not one function"),
    }
}

/// The dashboard body of this deployment: its `Fn::Sub` variables decided (the per-table
/// widgets), every `${...}` that names a resource or pseudo parameter replaced by `x` (each
/// checked to exist), parsed.
fn dashboard(raw: &Value, params: &[(&str, &str)]) -> Value {
    let t = deployed(raw, params);
    let sub = &t["Resources"]["OperationsDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"];
    let (body, vars) = match sub {
        Value::Array(a) => (a[0].as_str().expect("body").to_string(), a[1].clone()),
        Value::String(s) => (s.clone(), json!({})),
        other => panic!("DashboardBody: {other}"),
    };
    let mut body = body;
    if let Some(vars) = vars.as_object() {
        for (k, v) in vars {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Object(m) => m["Fn::Sub"].as_str().expect("a Sub").to_string(),
                other => panic!("{k}: {other}"),
            };
            body = body.replace(&format!("${{{k}}}"), &v);
        }
    }
    let mut text = String::new();
    let mut rest = body.as_str();
    while let Some(i) = rest.find("${") {
        text.push_str(&rest[..i]);
        let end = rest[i..].find('}').expect("closed ${") + i;
        let name = &rest[i + 2..end];
        let resource = name.split('.').next().unwrap_or_default();
        assert!(
            name.starts_with("AWS::") || raw["Resources"].get(resource).is_some(),
            "${{{name}}} names no resource"
        );
        text.push('x');
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the dashboard body is not JSON ({e}):\n{text}"))
}

/// Metric names the dashboard shows: `dms2iceberg` rows (namespace, name, `Function`, function)
/// and SEARCH expressions; AWS namespaces apart. Checks that every `dms2iceberg` row names the
/// function that emits it, and every SEARCH stays within our namespace, its per-table
/// dimensions and one of this stack's functions.
fn dashboard_metrics(body: &Value) -> (BTreeSet<String>, BTreeSet<String>, usize) {
    let mut shown = BTreeSet::new();
    let mut aws = BTreeSet::new();
    let mut searches = 0;
    for w in body["widgets"].as_array().expect("widgets") {
        for m in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let items = m.as_array().expect("a metric row");
            match items.first() {
                Some(Value::String(ns)) if ns == "dms2iceberg" => {
                    let name = items[1].as_str().expect("metric name");
                    assert_eq!(items[2], "Function", "{name}: dimension");
                    assert!(
                        items[3] == "x" && items.len() == 5,
                        "{name}: one dimension, the function: {m}"
                    );
                    shown.insert(name.to_string());
                }
                Some(Value::String(ns)) => {
                    aws.insert(format!("{ns} {}", items[1].as_str().unwrap_or_default()));
                }
                _ => {
                    for e in items {
                        let expr = e["expression"].as_str().unwrap_or_default();
                        if expr.contains("SEARCH(") {
                            searches += 1;
                            assert!(
                                expr.contains("{dms2iceberg,Function,Table} Function=\"x\""),
                                "a search outside our namespace, its per-table dimensions or \
                                 this stack's functions: {expr}"
                            );
                        }
                        for part in expr.split("MetricName=\"").skip(1) {
                            shown.insert(part.split('"').next().unwrap_or_default().to_string());
                        }
                    }
                }
            }
        }
    }
    (shown, aws, searches)
}

#[test]
fn the_dashboard_shows_only_metrics_the_functions_emit() {
    let raw = &loaded().raw;
    assert_eq!(
        raw["Parameters"]["Dashboard"]["Default"], "true",
        "on by default"
    );
    let dash = &raw["Resources"]["OperationsDashboard"];
    assert_eq!(dash["Type"], "AWS::CloudWatch::Dashboard");
    assert_eq!(dash["Condition"], "CreateDashboard");
    assert!(
        condition(raw, &json!({"Condition": "CreateDashboard"}), &[]),
        "created with the defaults"
    );
    assert!(
        !condition(
            raw,
            &json!({"Condition": "CreateDashboard"}),
            &[("Dashboard", "false")]
        ),
        "Dashboard=false turns it off"
    );
    // Each `dms2iceberg` row names the function that emits the metric.
    let sub = serde_json::to_string(&dash["Properties"]["DashboardBody"]).expect("json");
    let mut rest = sub.as_str();
    let row = "[\\\"dms2iceberg\\\", \\\"";
    while let Some(i) = rest.find(row) {
        let after = &rest[i + row.len()..];
        let name = &after[..after.find("\\\"").expect("name")];
        let function = format!("\\\"Function\\\", \\\"${{{}}}\\\"", emitting_function(name));
        assert!(
            after.starts_with(&format!("{name}\\\", {function}")),
            "dashboard row of {name} does not name {function}: {}",
            &after[..80.min(after.len())]
        );
        rest = after;
    }

    let emitted = emitted_metric_names();
    for must in ["FilesApplied", "LagSeconds", "CommitConflicts", "Manifests"] {
        assert!(
            emitted.contains(must),
            "the scan of the source found {emitted:?}"
        );
    }
    // TableMetrics=off (the default): the totals, no search (nothing per table is published).
    let off = dashboard(raw, &[]);
    let (shown, aws, searches) = dashboard_metrics(&off);
    assert_eq!(searches, 0, "per-table widgets with TableMetrics=off");
    let unknown: Vec<&String> = shown.difference(&emitted).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard names metrics nobody emits: {unknown:?}"
    );
    for needed in [
        "LagSeconds",
        "BacklogAgeSeconds",
        "FilesApplied",
        "RowsInserted",
        "FilesFailed",
        "FilesDeadLettered",
        "TablesBlocked",
        "FilesLeftAtDeadline",
        "CommitConflicts",
        "CommitAttempts",
        "ReadMilliseconds",
        "CommitMilliseconds",
        "FilesRewritten",
        "DeleteFilesPerDataFile",
        "Manifests",
        "TablesFailed",
        "TablesRepaired",
    ] {
        assert!(shown.contains(needed), "{needed} not on the dashboard");
    }
    for needed in [
        "AWS/SQS ApproximateNumberOfMessagesVisible",
        "AWS/SQS ApproximateAgeOfOldestMessage",
        "AWS/Lambda Errors",
        "AWS/Lambda Throttles",
    ] {
        assert!(
            aws.contains(needed),
            "{needed} not on the dashboard: {aws:?}"
        );
    }
    // TableMetrics=on: the same, and per-table widgets below them.
    let on = dashboard(raw, &[("TableMetrics", "on")]);
    let (shown_on, _, searches) = dashboard_metrics(&on);
    assert!(
        searches >= 5,
        "per-table widgets with TableMetrics=on: {searches}"
    );
    let unknown: Vec<&String> = shown_on.difference(&emitted).collect();
    assert!(unknown.is_empty(), "per-table widgets name {unknown:?}");
    assert!(
        on["widgets"].as_array().expect("widgets").len()
            > off["widgets"].as_array().expect("widgets").len()
    );
    // Widgets do not overlap (the per-table ones come below the totals).
    let mut cells = BTreeSet::new();
    for w in on["widgets"].as_array().expect("widgets") {
        let (x, y, wd, h) = (
            as_i64(&w["x"]),
            as_i64(&w["y"]),
            as_i64(&w["width"]),
            as_i64(&w["height"]),
        );
        for i in x..x + wd {
            for j in y..y + h {
                assert!(cells.insert((i, j)), "widgets overlap at ({i}, {j}): {w}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Alarms, as docs/runbook.md states them

/// One alarm as the runbook's table states it.
#[derive(Debug)]
struct RunbookAlarm {
    name: String,
    /// (namespace, metric, statistic)
    metrics: Vec<(String, String, String)>,
    /// `sum` of several metrics, `div60` of one, or the metric itself.
    math: &'static str,
    of: String,
    comparison: String,
    threshold: String,
    datapoints: i64,
    periods: i64,
    period_s: i64,
}

/// The table in docs/runbook.md's "Alarms at a glance": `| alarm | of | metric (statistic) |
/// threshold | datapoints | period |`.
fn runbook_alarms() -> Vec<RunbookAlarm> {
    let text = std::fs::read_to_string(root().join("docs/runbook.md")).expect("docs/runbook.md");
    let table = text
        .split("| alarm | of | metric (statistic) | threshold | datapoints | period |")
        .nth(1)
        .expect("docs/runbook.md has the alarms table");
    let mut out = Vec::new();
    for line in table.lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 6, "runbook table row: {line}");
        let name = cells[0].trim_matches('`').to_string();
        let metric_text = cells[2];
        let (metric_text, math) = match metric_text.strip_suffix(" / 60") {
            Some(m) => (m, "div60"),
            None if metric_text.contains(" + ") => (metric_text, "sum"),
            None => (metric_text, "one"),
        };
        let metrics = metric_text
            .split(" + ")
            .map(|m| {
                let (ns_name, stat) = m
                    .trim()
                    .strip_suffix(')')
                    .and_then(|m| m.split_once(" ("))
                    .unwrap_or_else(|| panic!("`namespace Metric (Statistic)`: {m}"));
                let (ns, metric) = ns_name.split_once(' ').expect("namespace and metric");
                (ns.to_string(), metric.to_string(), stat.to_string())
            })
            .collect();
        let (comparison, threshold) = cells[3].split_once(' ').expect("`> 0`");
        let (m, n) = cells[4].split_once(" of ").expect("`M of N`");
        let period_s = match cells[5] {
            "5 min" => 300,
            "1 hour" => 3600,
            other => panic!("period {other}"),
        };
        out.push(RunbookAlarm {
            name,
            metrics,
            math,
            of: cells[1].to_string(),
            comparison: comparison.to_string(),
            threshold: threshold.trim_matches('`').to_string(),
            datapoints: m.parse().expect("M"),
            periods: n.parse().expect("N"),
            period_s,
        });
    }
    assert!(!out.is_empty());
    out
}

#[test]
fn alarms_are_the_runbooks() {
    let raw = &loaded().raw;
    let runbook_text =
        std::fs::read_to_string(root().join("docs/runbook.md")).expect("docs/runbook.md");
    let in_runbook = runbook_alarms();
    let alarms: Vec<(&String, &Value)> = raw["Resources"]
        .as_object()
        .expect("resources")
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .collect();
    let names: BTreeSet<&str> = alarms.iter().map(|(n, _)| n.as_str()).collect();
    let documented: BTreeSet<&str> = in_runbook.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names, documented,
        "the template's alarms and the runbook's table"
    );
    // What the issue asks alarms for.
    for needed in [
        "DeadLetterQueueAlarm",
        "FilesFailedAlarm",
        "FilesDeadLetteredAlarm",
        "TableBlockedAlarm",
        "LagAlarm",
        "IngestErrorsAlarm",
        "CompactionFailingAlarm",
        "TableRepairedAlarm",
    ] {
        assert!(names.contains(needed), "no {needed}");
    }
    let emitted = emitted_metric_names();
    for want in &in_runbook {
        let name = &want.name;
        let a = &raw["Resources"][name.as_str()]["Properties"];
        // Each has its runbook section, which the description points to.
        assert!(
            runbook_text.contains(&format!("\n### {name}\n")),
            "docs/runbook.md has no `### {name}` section"
        );
        let description = render(&a["AlarmDescription"]).join("");
        assert!(
            description.contains(&format!("docs/runbook.md, \"{name}\"")),
            "{name}: description {description}"
        );
        // It notifies both optional topics.
        assert_eq!(
            a["AlarmActions"],
            json!([
                {"Fn::If": ["HasAlarmTopic", {"Ref": "AlarmTopicArn"}, {"Ref": "AWS::NoValue"}]},
                {"Fn::If": ["HasAlarmEmail", {"Ref": "AlarmTopic"}, {"Ref": "AWS::NoValue"}]}
            ]),
            "{name}: AlarmActions"
        );
        assert_eq!(
            a["TreatMissingData"], "notBreaching",
            "{name}: a quiet period breaches"
        );
        // The metrics, as (namespace, name, statistic, dimension, period), and the expression.
        let (metrics, expression) = match a.get("Metrics") {
            None => (
                vec![(
                    a["Namespace"].clone(),
                    a["MetricName"].clone(),
                    a["Statistic"].clone(),
                    a["Dimensions"].clone(),
                    as_i64(&a["Period"]),
                )],
                None,
            ),
            Some(list) => {
                let list = list.as_array().expect("Metrics");
                let returned: Vec<&Value> =
                    list.iter().filter(|m| m["ReturnData"] == true).collect();
                assert_eq!(returned.len(), 1, "{name}: one expression returned");
                let ids: Vec<&str> = list
                    .iter()
                    .filter(|m| m["ReturnData"] == false)
                    .map(|m| m["Id"].as_str().expect("Id"))
                    .collect();
                let expected = match want.math {
                    "div60" => format!("{} / 60", ids[0]),
                    "sum" => ids
                        .iter()
                        .map(|i| format!("FILL({i}, 0)"))
                        .collect::<Vec<_>>()
                        .join(" + "),
                    other => panic!("{name}: math {other} with Metrics"),
                };
                assert_eq!(returned[0]["Expression"], expected, "{name}: expression");
                (
                    list.iter()
                        .filter(|m| m["ReturnData"] == false)
                        .map(|m| {
                            let s = &m["MetricStat"];
                            (
                                s["Metric"]["Namespace"].clone(),
                                s["Metric"]["MetricName"].clone(),
                                s["Stat"].clone(),
                                s["Metric"]["Dimensions"].clone(),
                                as_i64(&s["Period"]),
                            )
                        })
                        .collect(),
                    Some(expected),
                )
            }
        };
        if want.math == "one" {
            assert!(
                expression.is_none(),
                "{name}: an expression the runbook does not state"
            );
        }
        assert_eq!(metrics.len(), want.metrics.len(), "{name}: metrics");
        for ((ns, metric, stat, dims, period), (wns, wmetric, wstat)) in
            metrics.iter().zip(&want.metrics)
        {
            assert_eq!(ns, wns.as_str(), "{name}: namespace");
            assert_eq!(metric, wmetric.as_str(), "{name}: metric");
            assert_eq!(stat, wstat.as_str(), "{name}: statistic of {wmetric}");
            assert_eq!(*period, want.period_s, "{name}: period");
            let dims = dims.as_array().expect("one dimension");
            assert_eq!(dims.len(), 1, "{name}: dimensions {dims:?}");
            let (dim, value) = (&dims[0]["Name"], render(&dims[0]["Value"]));
            let expect = match (wns.as_str(), want.of.as_str()) {
                ("dms2iceberg", _) => {
                    // Our metrics: the totals over all tables, of the function emitting them.
                    assert!(
                        emitted.contains(wmetric),
                        "{name}: {wmetric} is emitted nowhere"
                    );
                    let f = emitting_function(wmetric);
                    assert_eq!(
                        want.of,
                        if f == "IngestFunction" {
                            "ingest"
                        } else {
                            "compact"
                        },
                        "{name}: {wmetric} is the {f}'s"
                    );
                    ("Function", format!("${{{f}}}"))
                }
                ("AWS/Lambda", "ingest") => ("FunctionName", "${IngestFunction}".into()),
                ("AWS/Lambda", "compact") => ("FunctionName", "${CompactFunction}".into()),
                ("AWS/SQS", "dead-letter queue") => {
                    ("QueueName", "${IngestDeadLetterQueue.QueueName}".into())
                }
                ("AWS/SQS", "ingest queue") => ("QueueName", "${IngestQueue.QueueName}".into()),
                other => panic!("{name}: {other:?} not understood"),
            };
            assert_eq!(
                (dim.as_str().unwrap_or_default(), value),
                (expect.0, vec![expect.1]),
                "{name}"
            );
        }
        let comparison = match a["ComparisonOperator"].as_str() {
            Some("GreaterThanThreshold") => ">",
            Some("GreaterThanOrEqualToThreshold") => "≥",
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(comparison, want.comparison, "{name}: comparison");
        let threshold = render(&a["Threshold"]).join("");
        assert_eq!(
            threshold.trim_start_matches("${").trim_end_matches('}'),
            want.threshold,
            "{name}: threshold"
        );
        let periods = as_i64(&a["EvaluationPeriods"]);
        let datapoints = a.get("DatapointsToAlarm").map_or(periods, as_i64);
        assert_eq!(
            (datapoints, periods),
            (want.datapoints, want.periods),
            "{name}: datapoints to alarm"
        );
    }

    // The `Function` dimension the alarms name is the function's name, so that two stacks in
    // one account never mix: the functions publish under AWS_LAMBDA_FUNCTION_NAME, which
    // `operations::metrics_name_the_deployed_function` checks on the real binaries' output.

    // AlarmEmail creates a topic with that address subscribed; without it, no topic.
    let topic = &raw["Resources"]["AlarmTopic"];
    assert_eq!(topic["Type"], "AWS::SNS::Topic");
    assert_eq!(topic["Condition"], "HasAlarmEmail");
    assert_eq!(
        topic["Properties"]["Subscription"],
        json!([{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}])
    );
    assert!(
        deployed(raw, &[])
            .pointer("/Resources/AlarmTopic")
            .is_none()
    );
    assert!(
        deployed(raw, &[("AlarmEmail", "ops@example.com")])
            .pointer("/Resources/AlarmTopic")
            .is_some()
    );
}

// ---------------------------------------------------------------------------------------------
// Deployment defaults

/// A template value as CloudFormation would compute it for these parameters: `Ref` of
/// parameters and pseudo parameters, `Fn::If`, `Fn::Join`, `Fn::Select`, `Fn::Split`, and
/// `Fn::Sub` of parameters; other references come out as `${Name}`.
fn eval(t: &Value, v: &Value, params: &[(&str, &str)]) -> Value {
    let s = |x: &Value| -> String {
        match eval(t, x, params) {
            Value::String(s) => s,
            other => panic!("not a string: {other}"),
        }
    };
    match v {
        Value::Object(m) if m.len() == 1 => {
            let (k, a) = m.iter().next().expect("one key");
            match k.as_str() {
                "Ref" => {
                    let name = a.as_str().expect("Ref name");
                    if t["Parameters"].get(name).is_some() || name.starts_with("AWS::") {
                        Value::String(param_value(t, name, params))
                    } else {
                        Value::String(format!("${{{name}}}"))
                    }
                }
                "Fn::If" => {
                    let name = a[0].as_str().expect("condition");
                    let taken = condition(t, &json!({ "Condition": name }), params);
                    eval(t, &a[if taken { 1 } else { 2 }], params)
                }
                "Fn::Join" => Value::String(
                    a[1].as_array()
                        .expect("Join list")
                        .iter()
                        .map(s)
                        .collect::<Vec<_>>()
                        .join(a[0].as_str().expect("separator")),
                ),
                "Fn::Split" => Value::Array(
                    s(&a[1])
                        .split(a[0].as_str().expect("literal delimiter"))
                        .map(|x| Value::String(x.into()))
                        .collect(),
                ),
                "Fn::Select" => {
                    let i = as_i64(&a[0]) as usize;
                    match eval(t, &a[1], params) {
                        Value::Array(items) => items[i].clone(),
                        other => panic!("Select from {other}"),
                    }
                }
                "Fn::Sub" => {
                    let mut text = a.as_str().expect("plain Sub").to_string();
                    for p in t["Parameters"].as_object().expect("parameters").keys() {
                        text = text.replace(&format!("${{{p}}}"), &param_value(t, p, params));
                    }
                    for (p, _) in PSEUDO {
                        text = text.replace(&format!("${{{p}}}"), &param_value(t, p, params));
                    }
                    Value::String(text)
                }
                _ => Value::String(render(v).join("")),
            }
        }
        other => other.clone(),
    }
}

#[test]
fn the_config_goes_to_parameter_store_from_tables_config() {
    let raw = &loaded().raw;
    let p = &raw["Parameters"]["TablesConfig"];
    let text = p["Default"].as_str().expect("a default config");
    assert_eq!(
        as_i64(&p["MaxLength"]),
        4096,
        "CloudFormation's parameter value limit"
    );
    assert!(text.len() <= 4096, "the default is {} bytes", text.len());

    // The default parses, and its [defaults] name the columns the recommended endpoint settings
    // produce: the commit timestamp column and the AR_H_CHANGE_SEQ column.
    let settings = read_json("infra/dms-endpoint-settings.json");
    let mappings = read_json("infra/dms-table-mappings.json");
    let change_seq = mappings["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["rule-action"] == "add-column" && r["expression"] == "$AR_H_CHANGE_SEQ")
        .and_then(|r| r["value"].as_str())
        .expect("the table mappings add an AR_H_CHANGE_SEQ column");
    let config = dms2iceberg::config::Config::from_toml(text)
        .unwrap_or_else(|e| panic!("TablesConfig's default does not parse: {e}\n{text}"));
    let any = config.table("sales", "orders").expect("a table's settings");
    assert_eq!(any.change_sequence_column.as_deref(), Some(change_seq));
    assert_eq!(
        any.commit_timestamp_column.as_deref(),
        settings["TimestampColumnName"].as_str()
    );
    assert_eq!(any.primary_key, None, "no table is configured by default");
    // Its commented example is a valid entry once uncommented.
    let example: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(x) if x.starts_with("[tables.") || x.starts_with("primary_key") => x,
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(example, text, "the default has a commented table example");
    let config = dms2iceberg::config::Config::from_toml(&example).expect("the example parses");
    assert_eq!(
        config
            .table("sales", "orders")
            .expect("settings")
            .primary_key,
        Some(vec!["order_id".to_string()])
    );

    // Default: the stack writes it into the config parameter, which the ingest function reads
    // (ssm:<name>) and may read, alone.
    let t = deployed(raw, &[]);
    let param = &t["Resources"]["ConfigParameter"];
    assert_eq!(param["Type"], "AWS::SSM::Parameter");
    assert_eq!(param["Properties"]["Type"], "String");
    assert_eq!(param["Properties"]["Value"], json!({"Ref": "TablesConfig"}));
    assert_eq!(
        eval(raw, &param["Properties"]["Name"], &[]),
        "/dms2iceberg/dms2iceberg/config"
    );
    let ingest_env = &t["Resources"]["IngestFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        render(&ingest_env["DMS2ICEBERG_CONFIG"]),
        ["ssm:${ConfigParameter}"]
    );
    let ingest = allowed(&t, "IngestFunction");
    let compact = allowed(&t, "CompactFunction");
    let can = |grants: &[(String, Vec<String>)], a: &str, r: &str| {
        grants
            .iter()
            .any(|(x, rs)| x == a && rs.iter().any(|y| y == r))
    };
    assert!(can(&ingest, "ssm:GetParameter", CONFIG_PARAMETER));
    assert!(
        !ingest
            .iter()
            .any(|(_, rs)| rs.iter().any(|r| r == CONFIG_OBJECT))
    );
    assert!(t["Outputs"]["ConfigParameterName"].is_object());
    // ConfigS3Uri instead: no parameter, the object alone.
    let uri = [("ConfigS3Uri", "s3://my-bucket/config/dms2iceberg.toml")];
    let t = deployed(raw, &uri);
    assert!(t["Resources"].get("ConfigParameter").is_none());
    let ingest_env = &t["Resources"]["IngestFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        render(&ingest_env["DMS2ICEBERG_CONFIG"]),
        ["${ConfigS3Uri}"]
    );
    let ingest_s3 = allowed(&t, "IngestFunction");
    assert!(can(&ingest_s3, "s3:GetObject", CONFIG_OBJECT));
    assert!(!ingest_s3.iter().any(|(a, _)| a.starts_with("ssm:")));
    // The compact function reads no config either way.
    for grants in [compact, allowed(&t, "CompactFunction")] {
        assert!(
            !grants
                .iter()
                .any(|(a, rs)| a.starts_with("ssm:") || rs.iter().any(|r| r == CONFIG_OBJECT))
        );
    }
}

#[test]
fn records_no_retry_can_help_go_to_the_dead_letter_queue_at_once() {
    let raw = &loaded().raw;
    let t = deployed(raw, &[]);
    let env = &t["Resources"]["IngestFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        render(&env["DMS2ICEBERG_DEAD_LETTER_QUEUE_URL"]),
        ["${IngestDeadLetterQueue}"],
        "the queue's URL (Ref)"
    );
    let ingest = allowed(&t, "IngestFunction");
    let sends: Vec<&Vec<String>> = ingest
        .iter()
        .filter(|(a, _)| a == "sqs:SendMessage")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(sends, [&vec![DEAD_LETTER_QUEUE.to_string()]]);
    // An SQS-managed key: sending needs no KMS grant.
    let dlq = &t["Resources"]["IngestDeadLetterQueue"]["Properties"];
    assert_eq!(dlq["SqsManagedSseEnabled"], true);
    assert!(dlq.get("KmsMasterKeyId").is_none());
    assert!(
        !allowed(&t, "CompactFunction")
            .iter()
            .any(|(a, _)| a.starts_with("sqs:"))
    );
}

#[test]
fn the_glue_database_is_unique_per_stack() {
    let raw = &loaded().raw;
    let db = &raw["Resources"]["DatabaseName"]["Properties"];
    assert_eq!(db["AllowedPattern"], "^[a-z0-9_]{1,255}$");
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 255
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !s.starts_with('_')
            && !s.ends_with('_')
    };
    let a = eval(raw, &db["Value"], &[]);
    assert_eq!(a, "dms2iceberg_4f9b2c1e", "from the stack id");
    let b = eval(
        raw,
        &db["Value"],
        &[(
            "AWS::StackId",
            "arn:aws:cloudformation:eu-west-1:111122223333:stack/dms2iceberg/9a0c77d2-5a3d-11ef-9c2b-0a1b2c3d4e5f",
        )],
    );
    assert_ne!(
        a, b,
        "the same stack name created again gets another database"
    );
    for v in [&a, &b] {
        assert!(
            valid(v.as_str().expect("a name")),
            "{v}: not a Glue, Athena and S3 Tables name"
        );
    }
    assert_eq!(
        eval(raw, &db["Value"], &[("GlueDatabaseName", "sales")]),
        "sales"
    );
    // Everything names the database through that one value.
    let t = deployed(raw, &[]);
    assert_eq!(
        render(&t["Globals"]["Function"]["Environment"]["Variables"]["DMS2ICEBERG_GLUE_DATABASE"]),
        ["${DatabaseName.Value}"]
    );
    assert_eq!(
        render(&t["Resources"]["GlueDatabase"]["Properties"]["DatabaseInput"]["Name"]),
        ["${DatabaseName.Value}"]
    );
    assert_eq!(t["Resources"]["GlueDatabase"]["DeletionPolicy"], "Retain");
    assert_eq!(
        render(&t["Outputs"]["GlueDatabase"]["Value"]),
        ["${DatabaseName.Value}"]
    );
    let text = serde_json::to_string(&raw["Resources"]).expect("json");
    assert_eq!(
        text.matches("\"Ref\":\"GlueDatabaseName\"").count()
            + text.matches("${GlueDatabaseName}").count(),
        1,
        "GlueDatabaseName is read through DatabaseName alone"
    );
}

#[test]
fn kms_keys_are_granted_only_when_named() {
    let raw = &loaded().raw;
    const KEY: &str = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let kms_of = |t: &Value, f: &str| -> Vec<(String, Vec<String>)> {
        allowed(t, f)
            .into_iter()
            .filter(|(a, _)| a.starts_with("kms:"))
            .collect()
    };
    let statements_on = |t: &Value, f: &str, key: &str| -> Vec<Value> {
        role_of(t, f)
            .1
            .into_iter()
            .filter(|s| strings(&s["Resource"]).iter().any(|r| r == key))
            .collect()
    };
    let encryption = |t: &Value, bucket: &str| {
        t["Resources"][bucket]["Properties"]["BucketEncryption"]
            ["ServerSideEncryptionConfiguration"][0]
            .clone()
    };
    let dms_kms = |t: &Value| -> Vec<String> {
        policy_docs(t)
            .iter()
            .filter(|d| d.dms_role)
            .flat_map(|d| statements(&d.doc))
            .flat_map(|s| strings(&s["Action"]))
            .filter(|a| a.starts_with("kms:"))
            .collect()
    };

    // No key named: no KMS anywhere, SSE-S3 buckets.
    let t = deployed(raw, &[]);
    for f in ["IngestFunction", "CompactFunction"] {
        assert!(kms_of(&t, f).is_empty(), "{f}: {:?}", kms_of(&t, f));
    }
    assert!(dms_kms(&t).is_empty());
    for b in ["LandingBucket", "WarehouseBucket"] {
        assert_eq!(
            encryption(&t, b),
            json!({"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}),
            "{b}"
        );
    }

    // The warehouse's key on Glue: both functions, data keys and decrypt, through S3 only; the
    // bucket the stack creates encrypts with it, a bucket key on.
    let t = deployed(raw, &[("WarehouseKmsKeyArn", KEY)]);
    for f in ["IngestFunction", "CompactFunction"] {
        let on_key = statements_on(&t, f, WAREHOUSE_KEY);
        assert_eq!(on_key.len(), 1, "{f}: {on_key:?}");
        let mut actions = strings(&on_key[0]["Action"]);
        actions.sort();
        assert_eq!(actions, ["kms:Decrypt", "kms:GenerateDataKey"], "{f}");
        assert_eq!(
            render(&on_key[0]["Condition"]["StringEquals"]["kms:ViaService"]),
            ["s3.${AWS::Region}.${AWS::URLSuffix}"],
            "{f}: the warehouse key through S3 only"
        );
    }
    assert_eq!(
        encryption(&t, "WarehouseBucket"),
        json!({"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms",
            "KMSMasterKeyID": {"Ref": "WarehouseKmsKeyArn"}}, "BucketKeyEnabled": true})
    );
    assert!(dms_kms(&t).is_empty(), "DMS never writes the warehouse");

    // On S3 Tables: the table bucket the stack creates encrypts with it; both functions may use
    // it on its tables.
    let t = deployed(raw, &[("WarehouseKmsKeyArn", KEY), ("Catalog", "s3tables")]);
    assert_eq!(
        t["Resources"]["TableBucket"]["Properties"]["EncryptionConfiguration"],
        json!({"SSEAlgorithm": "aws:kms", "KMSKeyArn": {"Ref": "WarehouseKmsKeyArn"}})
    );
    for f in ["IngestFunction", "CompactFunction"] {
        let on_key = statements_on(&t, f, WAREHOUSE_KEY);
        assert_eq!(on_key.len(), 1, "{f}");
        let mut actions = strings(&on_key[0]["Action"]);
        actions.sort();
        assert_eq!(actions, ["kms:Decrypt", "kms:GenerateDataKey"], "{f}");
    }
    assert!(
        deployed(raw, &[("Catalog", "s3tables")])["Resources"]["TableBucket"]["Properties"]
            .get("EncryptionConfiguration")
            .is_none()
    );
    // A REST catalog that vends credentials for storage the stack does not name: no grant.
    let t = deployed(
        raw,
        &[
            ("WarehouseKmsKeyArn", KEY),
            ("Catalog", "rest"),
            ("RestUri", "http://catalog.internal:8181"),
            ("RestVendedCredentials", "true"),
        ],
    );
    for f in ["IngestFunction", "CompactFunction"] {
        assert!(kms_of(&t, f).is_empty(), "{f}");
    }

    // The landing bucket's key: the ingest function decrypts DMS files, DMS writes them (what
    // an SSE-KMS S3 target needs), the compact function nothing; a landing bucket the stack
    // creates encrypts with it.
    let t = deployed(raw, &[("LandingBucketKmsKeyArn", KEY)]);
    assert_eq!(
        kms_of(&t, "IngestFunction"),
        [("kms:Decrypt".to_string(), vec![LANDING_KEY.to_string()])]
    );
    assert!(kms_of(&t, "CompactFunction").is_empty());
    let mut dms = dms_kms(&t);
    dms.sort();
    let mut want = DMS_KMS_ACTIONS.to_vec();
    want.sort();
    assert_eq!(dms, want);
    assert_eq!(
        encryption(&t, "LandingBucket"),
        json!({"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms",
            "KMSMasterKeyID": {"Ref": "LandingBucketKmsKeyArn"}}, "BucketKeyEnabled": true})
    );
    let v = least_privilege_violations(&t);
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn no_deployment_overrides_the_aws_endpoints() {
    let raw = &loaded().raw;
    let declared_anywhere = |t: &Value| {
        let mut found = Vec::new();
        for vars in std::iter::once(&t["Globals"]["Function"]["Environment"]["Variables"]).chain(
            ["IngestFunction", "CompactFunction"]
                .iter()
                .map(|f| &t["Resources"][*f]["Properties"]["Environment"]["Variables"]),
        ) {
            for (k, _) in vars.as_object().into_iter().flatten() {
                if k.starts_with("AWS_ENDPOINT_URL") {
                    found.push(k.clone());
                }
            }
        }
        found
    };
    let mut cases: Vec<&[(&str, &str)]> = vec![&[]];
    let catalogs = catalog_cases();
    cases.extend(catalogs.iter().map(|c| c.params));
    for params in cases {
        let t = deployed(raw, params);
        assert!(
            declared_anywhere(&t).is_empty(),
            "{params:?}: {:?} in a deployment",
            declared_anywhere(&t)
        );
    }
    // `sam local` (its pseudo account) sees it declared, so env.json can point it at an emulator.
    let local = deployed(raw, &[("AWS::AccountId", "123456789012")]);
    assert_eq!(declared_anywhere(&local), ["AWS_ENDPOINT_URL"]);
}

/// Seconds of an EventBridge `rate(...)` expression.
fn rate_seconds(expr: &str) -> i64 {
    let inner = expr
        .strip_prefix("rate(")
        .and_then(|x| x.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a rate(): {expr}"));
    let (n, unit) = inner.split_once(' ').expect("rate(N unit)");
    let n: i64 = n.parse().expect("N");
    n * match unit.trim_end_matches('s') {
        "minute" => 60,
        "hour" => 3600,
        "day" => 86400,
        other => panic!("unit {other}"),
    }
}

#[test]
fn compaction_runs_do_not_overlap() {
    let raw = &loaded().raw;
    let timeout = as_i64(&param_default(raw, "CompactTimeout"));
    for schedule in ["CompactSchedule", "MaintenanceSchedule"] {
        let every = rate_seconds(param_default(raw, schedule).as_str().expect("a rate"));
        // A minute of slack: EventBridge fires a schedule within its minute, and a run the
        // service could not start within 60 s is dropped (below).
        assert!(
            timeout + 60 <= every,
            "CompactTimeout {timeout} s and {schedule} every {every} s: a run can still be \
             going when the next starts"
        );
    }
    let f = &raw["Resources"]["CompactFunction"]["Properties"];
    assert_eq!(render(&f["Timeout"]), ["${CompactTimeout}"]);
    assert_eq!(f["EventInvokeConfig"]["MaximumRetryAttempts"], 0);
    assert!(
        as_i64(&f["EventInvokeConfig"]["MaximumEventAgeInSeconds"]) <= 60,
        "a run delayed by throttling would start late and overlap the next"
    );
    assert_eq!(rate_seconds("rate(5 minutes)"), 300);
    assert_eq!(rate_seconds("rate(1 hour)"), 3600);
}

/// Whether the deployed rule matches an object event of `bucket`/`key`.
fn deployed_rule_matches(t: &Value, params: &[(&str, &str)], bucket: &str, key: &str) -> bool {
    let p = &t["Resources"]["DmsObjectCreatedRule"]["Properties"]["EventPattern"];
    let prefix = param_value(t, "DmsPrefix", params);
    let buckets: Vec<String> = p["detail"]["bucket"]["name"]
        .as_array()
        .expect("bucket names")
        .iter()
        .flat_map(render)
        .map(|b| match b.as_str() {
            "${LandingBucket}" => "created-landing-bucket".to_string(),
            "${LandingBucketName}" => param_value(t, "LandingBucketName", params),
            other => panic!("bucket {other}"),
        })
        .collect();
    let keys: Vec<String> = p["detail"]["object"]["key"]
        .as_array()
        .expect("key patterns")
        .iter()
        .flat_map(|k| render(&k["wildcard"]))
        .map(|k| k.replace("${DmsPrefix}", &prefix))
        .collect();
    buckets.iter().any(|b| b == bucket) && keys.iter().any(|k| wildcard(k, key))
}

#[test]
fn the_rule_never_matches_the_warehouses_writes() {
    let raw = &loaded().raw;
    let accepted: [&[(&str, &str)]; 4] = [
        &[],
        &[("DmsPrefix", "")],
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
        ],
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
            ("DmsPrefix", "cdc/dms/"),
            ("WarehousePrefix", "iceberg/"),
        ],
    ];
    for params in accepted {
        assert!(broken_rules(raw, params).is_empty(), "{params:?} refused");
        let t = deployed(raw, params);
        let landing = match param_value(raw, "LandingBucketName", params) {
            b if b.is_empty() => "created-landing-bucket".to_string(),
            b => b,
        };
        let warehouse = match param_value(raw, "WarehouseBucketName", params) {
            b if b.is_empty() => "created-warehouse-bucket".to_string(),
            b => b,
        };
        let wp = param_value(raw, "WarehousePrefix", params);
        let dp = param_value(raw, "DmsPrefix", params);
        for key in [
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/data/00000-0-4c1f.parquet"),
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/data/00000-0-4c1f-deletes.parquet"),
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/metadata/00012-9a1e.metadata.json"),
            format!("{wp}dms2iceberg_4f9b2c1e.db/orders/metadata/snap-77-1-9a1e.avro"),
        ] {
            assert!(
                !deployed_rule_matches(&t, params, &warehouse, &key),
                "{params:?}: the rule matches the warehouse's {warehouse}/{key}"
            );
        }
        for key in [
            format!("{dp}sales/orders/LOAD00000001.parquet"),
            format!("{dp}sales/orders/20220302-1134010000.csv"),
            format!("{dp}sales/orders/2022/03/02/20220302-1134010000.csv.gz"),
        ] {
            assert!(
                deployed_rule_matches(&t, params, &landing, &key),
                "{params:?}: the rule misses DMS's {landing}/{key}"
            );
        }
    }
    // One bucket with a prefix left empty: refused before anything is created.
    for params in [
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
            ("DmsPrefix", ""),
        ][..],
        &[
            ("LandingBucketName", "lake"),
            ("WarehouseBucketName", "lake"),
            ("WarehousePrefix", ""),
        ],
        &[("DmsPrefix", "data/"), ("WarehousePrefix", "data/")],
    ] {
        assert!(
            !broken_rules(raw, params).is_empty(),
            "accepted: {params:?}"
        );
    }
}

#[test]
fn cost_md_counts_the_metrics_the_functions_emit() {
    let cost = std::fs::read_to_string(root().join("docs/cost.md")).expect("docs/cost.md");
    let n = emitted_metric_names().len();
    assert!(
        cost.contains(&format!("**{n} metric names**")),
        "docs/cost.md does not state the {n} metric names the functions emit \
         (`**{n} metric names**`): {:?}",
        emitted_metric_names()
    );
}
