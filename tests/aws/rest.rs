//! An Iceberg REST catalog whose tables live on S3 and which vends storage credentials per table
//! (issue 25): rustberg (`tests/common/rest.rs`) over moto's S3, STS and IAM, with moto's IAM
//! authorization on (`moto_server.py vending-setup`), so that a request signed with keys that
//! may not touch the warehouse is refused. The CLI runs with such keys: it can write the table
//! only with the credentials the catalog vends for it.

use serde_json::Value;

use crate::common::rest::{Rustberg, S3Warehouse};
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
