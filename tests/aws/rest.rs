//! An Iceberg REST catalog whose tables live on S3 and which vends storage credentials per table
//! (issue 25): rustberg (`tests/common/rest.rs`) over moto's S3, STS and IAM, with moto's IAM
//! authorization on (`moto_server.py vending-setup`), so that a request signed with keys that
//! may not touch the warehouse is refused. The CLI runs with such keys: it can write the table
//! only with the credentials the catalog vends for it.

use serde_json::Value;

use crate::common::rest::{Rustberg, S3Warehouse, TokenServer};
use crate::common::*;
use crate::lambda_support::Moto;

const TABLE: &str = "shop.orders";

#[test]
fn a_table_on_s3_is_written_with_the_credentials_the_catalog_vends() {
    let w = Work::new("rest_vended");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "200",
            "--cdc-files",
            "3",
            "--cdc-rows",
            "50",
            "--seed",
            "77",
        ],
    );
    let moto = Moto::start(&w.dir);
    let endpoint = moto.endpoint();
    let bucket = "vended-warehouse";
    let setup = run(
        &python(),
        [
            support("moto_server.py").display().to_string(),
            "vending-setup".into(),
            "--endpoint".into(),
            endpoint.clone(),
            "--bucket".into(),
            bucket.into(),
        ],
    )
    .assert_success();
    let iam: Value = serde_json::from_str(setup.stdout.trim()).unwrap();
    let keys = |who: &str| {
        (
            iam[who][0].as_str().unwrap().to_string(),
            iam[who][1].as_str().unwrap().to_string(),
        )
    };
    let (admin, nobody) = (keys("admin"), keys("nobody"));
    let server = Rustberg::start_on_s3(
        &w,
        &S3Warehouse {
            endpoint: &endpoint,
            bucket,
            key: (&admin.0, &admin.1),
            role_arn: iam["role_arn"].as_str().unwrap(),
        },
    );
    let config = w.config().display().to_string();
    let dms = w.dms().display().to_string();
    let ingest = [
        "ingest",
        "--json",
        dms.as_str(),
        "--config",
        config.as_str(),
    ];
    // The CLI's own keys may not write the warehouse.
    let ours = [
        ("AWS_ACCESS_KEY_ID", nobody.0.as_str()),
        ("AWS_SECRET_ACCESS_KEY", nobody.1.as_str()),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("DMS2ICEBERG_S3_PATH_STYLE", "true"),
    ];

    // Without asking for vended credentials: refused by S3, nothing committed.
    let refused = server.cli_with(&ingest, &ours, &["DMS2ICEBERG_REST_VENDED_CREDENTIALS"]);
    assert!(!refused.status.success(), "{}", refused.describe());
    assert!(
        refused.output().contains("AccessDenied") || refused.output().contains("PermissionDenied"),
        "the refusal says S3 denied access:\n{}",
        refused.describe()
    );
    let tables = server.cli_with(&["tables"], &ours, &[]).assert_success();
    assert!(!tables.stdout.contains(TABLE), "{}", tables.describe());

    // Asking for them: every file of the table is read and written with the vended ones.
    let mut vended = ours.to_vec();
    vended.push(("DMS2ICEBERG_REST_VENDED_CREDENTIALS", "true"));
    let applied = server.cli_with(&ingest, &vended, &[]).assert_success();
    let reports = parse_json_lines(&applied.stdout, "ingest --json");
    assert_eq!(
        reports.iter().filter(|r| r["status"] == "applied").count(),
        w.meta(TABLE).files.len(),
        "{}",
        applied.describe()
    );
    let expected = w.expected(TABLE);
    let scan = server
        .cli_with(&["scan", TABLE, "--format", "json"], &vended, &[])
        .assert_success();
    assert_rows(
        "scan (vended credentials)",
        &w.meta(TABLE),
        &expected,
        &parse_json_lines(&scan.stdout, "scan"),
    );
    let again = server.cli_with(&ingest, &vended, &[]).assert_success();
    let reports = parse_json_lines(&again.stdout, "ingest --json");
    assert!(
        reports.iter().all(|r| r["status"] != "applied"),
        "{}",
        again.describe()
    );

    // PyIceberg through the catalog with the credentials it vends; DuckDB on the metadata
    // location with the warehouse owner's keys.
    let p = w.write_jsonl("vended.expected.jsonl", &expected);
    let mut c = std::process::Command::new(python());
    c.arg(support("check_readers.py"))
        .args(["--rest-uri", &server.uri, "--s3-endpoint", &endpoint])
        .args(["--table", TABLE, "--expected"])
        .arg(&p)
        .arg("--meta")
        .arg(w.meta_path(TABLE))
        .env("DMS2ICEBERG_REST_TOKEN", &server.token)
        .env("DMS2ICEBERG_REST_VENDED_CREDENTIALS", "1")
        .env("AWS_ACCESS_KEY_ID", &admin.0)
        .env("AWS_SECRET_ACCESS_KEY", &admin.1)
        .env("AWS_REGION", "us-east-1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = c.output().expect("check_readers.py runs");
    assert!(
        out.status.success(),
        "independent readers disagree:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ingest and compaction functions on an Iceberg REST catalog (issue 37): the real binaries
/// under the Runtime API emulator, DMS objects in moto's S3, the tables in rustberg (bearer
/// token, `file://` warehouse). Two ingest functions race over the full load and then over the
/// change files (an event each against an SQS batch of all of them): the server refuses the
/// commits whose requirements no longer hold, the functions replan, and the table ends equal
/// to the generator's state, read by our scan, PyIceberg's RestCatalog and DuckDB. Then the
/// compaction function compacts it through the same catalog, and the rows stay.
///
/// Authentication as the template deploys it: one ingest function reads its bearer token from
/// a Secrets Manager secret (moto's) when it starts, the other takes it from its environment;
/// the compaction function reads OAuth2 client credentials (JSON) from another secret and
/// exchanges them at a stand-in identity provider. No log line carries a token or a secret.
#[test]
fn functions_on_a_rest_catalog_race_and_end_exact() {
    use crate::lambda_support::*;
    let lab = Lab::new("rest_functions");
    lab.generate(
        "synthetic",
        &[
            "--schema",
            "shop",
            "--table",
            "orders",
            "--rows",
            "150",
            "--cdc-files",
            "6",
            "--cdc-rows",
            "30",
            "--seed",
            "23",
        ],
    );
    lab.upload_config(&[]);
    let server = Rustberg::start(&lab.work);
    let files = lab.work.meta(TABLE).files.clone();
    let token_secret = lab
        .moto
        .create_secret("dms2iceberg/rest-token", &format!("{}\n", server.token));
    let base = [
        ("DMS2ICEBERG_CATALOG", "rest"),
        ("DMS2ICEBERG_REST_URI", server.uri.as_str()),
        // Tables in the DMS schema's namespace (`shop`), not the Lab's Glue database.
        ("DMS2ICEBERG_GLUE_DATABASE", ""),
        // Our own debug lines too: none may carry a secret.
        ("RUST_LOG", "dms2iceberg=debug,info"),
    ];
    let with = |extra: Vec<(&'static str, String)>| -> Vec<(&'static str, String)> {
        base.iter()
            .map(|(k, v)| (*k, v.to_string()))
            .chain(extra)
            .collect()
    };
    let env_a = with(vec![(
        "DMS2ICEBERG_REST_TOKEN_SECRET",
        token_secret.clone(),
    )]);
    let env_b = with(vec![("DMS2ICEBERG_REST_TOKEN", server.token.clone())]);
    fn refs<'a>(e: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        e.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
    let mut a = Function::start(&lab, "ingest-a", &refs(&env_a));
    let mut b = Function::start(&lab, "ingest-b", &refs(&env_b));
    assert!(
        a.log().contains("read from Secrets Manager") && a.log().contains(&token_secret),
        "ingest-a read its token from the secret:\n{}",
        a.log()
    );
    lab.upload(&files[0]);
    let ev = lab.s3_event(&files[0]);
    let (oa, ob) = race(&mut a, &mut b, ev.clone(), ev);
    assert_both_answered(&oa, &ob, &a, &b);
    for k in &files[1..] {
        lab.upload(k);
    }
    let last = lab.s3_event(files.last().unwrap());
    let batch = lab.sqs_batch(&files[1..]);
    let (oa, ob) = race(&mut a, &mut b, last, batch);
    assert_both_answered(&oa, &ob, &a, &b);
    assert!(ob.batch_item_failures().is_empty(), "{}", ob.body);
    let expected = lab.work.expected(TABLE);
    server.assert_table(&lab.work, TABLE, &expected);
    // Each DMS file in exactly one snapshot.
    let history = server
        .cli(&["history", TABLE, "--format", "json"])
        .assert_success();
    let applied: Vec<String> = parse_json_lines(&history.stdout, "history")
        .iter()
        .flat_map(|s| s["source_files"].as_array().cloned().unwrap_or_default())
        .map(|f| f.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(applied.len(), files.len(), "{applied:?}");

    // The compaction function on the same catalog, with OAuth2 client credentials from a
    // secret: it finds the table, compacts it, keeps rows.
    let idp = TokenServer::start(&lab.work, &server.token, 3600);
    let credential_secret = lab.moto.create_secret(
        "dms2iceberg/rest-oauth2",
        r#"{"client_id": "dms2iceberg", "client_secret": "s3cret"}"#,
    );
    let env_c = with(vec![
        (
            "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
            credential_secret.clone(),
        ),
        ("DMS2ICEBERG_REST_OAUTH2_URI", idp.uri.clone()),
        ("DMS2ICEBERG_COMPACTION", "on".into()),
    ]);
    let mut c = Function::start_compact(&lab, "compact", &refs(&env_c));
    let o = c.invoke_ok(&scheduled_event());
    let t = &o.body.as_array().expect("a report per table")[0];
    assert_eq!(t["error"], Value::Null, "{}", o.body);
    let compaction = &t["compaction"];
    assert!(
        compaction["data_files_after"].as_u64() < compaction["data_files_before"].as_u64(),
        "{}",
        o.body
    );
    assert!(
        idp.grants() >= 1,
        "the compaction function exchanged its credentials"
    );
    server.assert_table(&lab.work, TABLE, &expected);
    for f in [&a, &b, &c] {
        let log = f.log();
        assert!(
            !log.contains(&server.token) && !log.contains("s3cret"),
            "{} logged a secret:\n{log}",
            f.name
        );
    }
}

/// A function whose REST credentials cannot be read from Secrets Manager does not start: its
/// initialisation fails (`ConfigError`, posted to the Runtime API) naming the secret and what
/// is wrong (no such secret; a value of the wrong shape, itself never shown), and two ways of
/// authenticating at once are refused by name.
#[test]
fn a_function_whose_rest_secret_cannot_be_used_does_not_start() {
    use crate::lambda_support::*;
    let lab = Lab::new("rest_secret_refused");
    let value = "a-token-where-a-credential-belongs";
    let wrong_shape = lab
        .moto
        .create_secret("dms2iceberg/not-a-credential", value);
    let missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:dms2iceberg/missing-AbCdEf";
    let uri = "http://127.0.0.1:9";
    // A case's name, its environment, and what the refusal must say.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 3] = [
        (
            "missing",
            &[("DMS2ICEBERG_REST_TOKEN_SECRET", missing)],
            &[missing, "ResourceNotFoundException"],
        ),
        (
            "wrong-shape",
            &[("DMS2ICEBERG_REST_CREDENTIAL_SECRET", wrong_shape.as_str())],
            &[wrong_shape.as_str(), "client_id:client_secret"],
        ),
        (
            "two-ways",
            &[
                ("DMS2ICEBERG_REST_TOKEN_SECRET", wrong_shape.as_str()),
                ("DMS2ICEBERG_REST_TOKEN", "tok"),
            ],
            &[
                "set one of",
                "DMS2ICEBERG_REST_TOKEN, DMS2ICEBERG_REST_TOKEN_SECRET",
            ],
        ),
    ];
    for (name, extra, says) in cases {
        for (bin, which) in [(ingest_bin(), "ingest"), (compact_bin(), "compact")] {
            let mut env = vec![
                ("DMS2ICEBERG_CATALOG", "rest"),
                ("DMS2ICEBERG_REST_URI", uri),
            ];
            env.extend_from_slice(extra);
            let (status, log) =
                Function::init_failure(&lab, &format!("{name}-{which}"), &bin, &env);
            assert_eq!(
                status["init_error"]["error_type"], "ConfigError",
                "{name} ({which}): {status}\n{log}"
            );
            let msg = status["init_error"]["body"]["errorMessage"]
                .as_str()
                .unwrap_or_default();
            for s in says {
                assert!(msg.contains(s), "{name} ({which}): `{s}` not in {msg}");
            }
            assert!(
                !msg.contains(value) && !log.contains(value),
                "{name} ({which}): the secret's value shown:\n{msg}\n{log}"
            );
        }
    }
}
