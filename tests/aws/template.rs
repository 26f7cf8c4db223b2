//! Deployment checks of `template.yaml` (AWS SAM) and `infra/`.
//!
//! - `cfn-lint template.yaml` and `sam validate --lint` must pass, offline (both run with dummy
//!   credentials and a dead HTTP(S) proxy, so any network access fails instead of hanging).
//! - Least privilege, checked on the template as written and as SAM transforms it: no `Resource:
//!   "*"` (but for `lakeformation:GetDataAccess`, which has no resource type), no wildcard
//!   actions, no managed policies, S3 object access only under the DMS and warehouse prefixes
//!   (writes only under the warehouse), `s3:ListBucket` only with an `s3:prefix` condition, Glue
//!   only on the catalog, the one database and its tables, S3 Tables only on the one table bucket
//!   and its tables, Secrets Manager only `GetSecretValue` of the REST catalog's secret, KMS only
//!   `Decrypt` with the named keys, the compact role nowhere near the landing bucket, logs only
//!   to the functions' own log groups.
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
                for p in props["Policies"].as_array().into_iter().flatten() {
                    docs.push(Doc {
                        owner: id.clone(),
                        doc: p["PolicyDocument"].clone(),
                        resource_policy: false,
                        lambda_role,
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
                });
            }
            "AWS::SQS::QueuePolicy" | "AWS::S3::BucketPolicy" | "AWS::SNS::TopicPolicy" => {
                docs.push(Doc {
                    owner: id.clone(),
                    doc: props["PolicyDocument"].clone(),
                    resource_policy: true,
                    lambda_role: false,
                });
            }
            _ => {}
        }
    }
    docs
}

const DMS_OBJECTS: &str = "arn:${AWS::Partition}:s3:::${Bucket}/${DmsPrefix}*";
const WAREHOUSE_OBJECTS: &str = "arn:${AWS::Partition}:s3:::${Bucket}/${WarehousePrefix}*";
const CONFIG_OBJECT: &str = "arn:${AWS::Partition}:s3:::${Path}";
const BUCKET: &str = "arn:${AWS::Partition}:s3:::${Bucket}";
const GLUE: [&str; 3] = [
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:catalog",
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:database/${GlueDatabaseName}",
    "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:table/${GlueDatabaseName}/*",
];
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
/// The REST catalog's secret, and the keys a function may decrypt with.
const REST_SECRET: &str = "${RestSecretArn}";
const KMS_KEYS: [&str; 2] = ["${LandingBucketKmsKeyArn}", "${RestSecretKmsKeyArn}"];
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
            // ---- SQS: consume only
            for a in actions.iter().filter(|a| a.starts_with("sqs:")) {
                let allowed = [
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:ChangeMessageVisibility",
                    "sqs:GetQueueAttributes",
                ];
                if !allowed.contains(&a.as_str()) {
                    v.push(format!("{at}: unexpected SQS action {a}"));
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
            // ---- KMS: decrypt with the named keys; the secret's key only through Secrets Manager
            for a in actions.iter().filter(|a| a.starts_with("kms:")) {
                if a != "kms:Decrypt" {
                    v.push(format!("{at}: unexpected KMS action {a}"));
                }
                for r in &res {
                    if !KMS_KEYS.contains(&r.as_str()) {
                        v.push(format!("{at}: {a} on {r}"));
                    }
                    if r == KMS_KEYS[1]
                        && strings(&s["Condition"]["StringEquals"]["kms:ViaService"])
                            .iter()
                            .all(|via| !via.starts_with("secretsmanager."))
                    {
                        v.push(format!(
                            "{at}: {a} on the secret's key without kms:ViaService"
                        ));
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
        has(&ingest, "sqs:ReceiveMessage", "${IngestQueue.Arn}"),
        "{ingest_role}: cannot poll its queue"
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
}

// ---------------------------------------------------------------------------------------------
// One deployment: the template with its conditions decided

/// A condition's value for these parameters (the rest at their defaults).
fn condition(t: &Value, c: &Value, params: &[(&str, &str)]) -> bool {
    let value = |v: &Value| -> String {
        match v.get("Ref").and_then(Value::as_str) {
            Some(p) => params
                .iter()
                .find(|(k, _)| *k == p)
                .map(|(_, v)| v.to_string())
                .unwrap_or_else(|| match param_default(t, p) {
                    Value::String(s) => s,
                    other => other.to_string(),
                }),
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
                can(grants, "kms:Decrypt", KMS_KEYS[1]),
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

const COMMON_ENV: [&str; 16] = [
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
    "DMS2ICEBERG_CONFIG",
    "DMS2ICEBERG_MAX_FILES_PER_COMMIT",
    "DMS2ICEBERG_MAX_FILES_PER_INVOCATION",
    "RUST_LOG",
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
        ("CompactTimeout", json!(900)),
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
    ] {
        assert_eq!(param_default(raw, name), want, "default of {name}");
    }
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
    let overrides = l.overrides.as_object().expect("overrides");
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

/// Every metric name the functions emit in their EMF lines, from their source: the
/// `("Name", "Unit", value)` tuples in shared/src/lambda/ (whitespace and line breaks allowed).
fn emitted_metric_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let dir = root().join("shared/src/lambda");
    for e in std::fs::read_dir(&dir).expect("shared/src/lambda") {
        let path = e.expect("entry").path();
        if path.extension().is_none_or(|x| x != "rs") || path.ends_with("tests.rs") {
            continue;
        }
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
                        names.insert(name.to_string());
                    }
                }
                rest = &rest[i + tail.len()..];
            }
        }
    }
    names
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
    let body = dash["Properties"]["DashboardBody"]["Fn::Sub"]
        .as_str()
        .expect("DashboardBody: !Sub of a JSON string");
    // `${...}` are the stack's own names (region, queues, functions): each must exist.
    let mut text = String::new();
    let mut rest = body;
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
    let body: Value = serde_json::from_str(&text).expect("the dashboard body is JSON");
    let widgets = body["widgets"].as_array().expect("widgets");
    let emitted = emitted_metric_names();
    for must in ["FilesApplied", "LagSeconds", "CommitConflicts", "Manifests"] {
        assert!(
            emitted.contains(must),
            "the scan of the source found {emitted:?}"
        );
    }
    let mut shown = BTreeSet::new();
    let mut aws = BTreeSet::new();
    for w in widgets {
        for m in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let items = m.as_array().expect("a metric row");
            match items.first() {
                Some(Value::String(ns)) => {
                    aws.insert(format!("{ns} {}", items[1].as_str().unwrap_or_default()));
                }
                _ => {
                    for e in items {
                        let expr = e["expression"].as_str().unwrap_or_default();
                        assert!(
                            !expr.contains("SEARCH(")
                                || expr.contains("{dms2iceberg,Function,Table}"),
                            "a search outside our namespace and dimensions: {expr}"
                        );
                        for part in expr.split("MetricName=\"").skip(1) {
                            shown.insert(part.split('"').next().unwrap_or_default().to_string());
                        }
                    }
                }
            }
        }
    }
    let unknown: Vec<&String> = shown.difference(&emitted).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard names metrics nobody emits: {unknown:?}"
    );
    // What the issue asks the dashboard to show.
    for needed in [
        "LagSeconds",
        "FilesApplied",
        "RowsInserted",
        "FilesFailed",
        "CommitConflicts",
        "CommitAttempts",
        "ReadMilliseconds",
        "CommitMilliseconds",
        "FilesRewritten",
        "DeleteFilesPerDataFile",
        "Manifests",
    ] {
        assert!(shown.contains(needed), "{needed} not on the dashboard");
    }
    for needed in [
        "AWS/SQS ApproximateNumberOfMessagesVisible",
        "AWS/Lambda Errors",
    ] {
        assert!(
            aws.contains(needed),
            "{needed} not on the dashboard: {aws:?}"
        );
    }
}
