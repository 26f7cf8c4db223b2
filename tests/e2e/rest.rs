//! The CLI on an Iceberg REST catalog written by others (rustberg, `tests/common/rest.rs`):
//! commits sent as requirements and updates, the server writing the metadata. Each table is
//! compared whole with the generator's expected state, read by our scan, PyIceberg's
//! RestCatalog and DuckDB's REST client (each its own client of the server).

use std::path::PathBuf;

use serde_json::Value;

use crate::common::rest::{Rustberg, TokenServer};
use crate::common::*;
use crate::stress_support::{Rng, make_feed};

const TABLE: &str = "shop.orders";

fn generated(name: &str, seed: &str, cdc_files: &str) -> Work {
    let w = Work::new(name);
    w.generate(
        "synthetic",
        &[
            "--rows",
            "300",
            "--cdc-files",
            cdc_files,
            "--cdc-rows",
            "80",
            "--seed",
            seed,
        ],
    );
    w
}

fn reports(r: &Run) -> Vec<Value> {
    parse_json_lines(&r.stdout, "ingest --json")
}

/// DMS files the reports say were applied.
fn applied(reports: &[Value]) -> u64 {
    reports
        .iter()
        .filter(|r| r["status"] == "applied")
        .map(|r| r["files"].as_array().map_or(0, |f| f.len() as u64))
        .sum()
}

#[test]
fn a_dms_tree_applies_exactly_through_a_rest_catalog() {
    let w = generated("rest_tree", "501", "5");
    let server = Rustberg::start(&w);
    let config = w.config().display().to_string();
    let dms = w.dms().display().to_string();
    let first = server
        .cli(&["ingest", "--json", &dms, "--config", &config])
        .assert_success();
    let files = w.meta(TABLE).files.len() as u64;
    assert_eq!(applied(&reports(&first)), files, "{}", first.describe());
    server.assert_table(&w, TABLE, &w.expected(TABLE));
    // One snapshot per file (the default), the first creating the table.
    let history = server
        .cli(&["history", TABLE, "--format", "json"])
        .assert_success();
    assert_eq!(
        parse_json_lines(&history.stdout, "history").len() as u64,
        files
    );
    // The tree again: every file is in the applied-file record the server kept.
    let again = server
        .cli(&["ingest", "--json", &dms, "--config", &config])
        .assert_success();
    assert_eq!(applied(&reports(&again)), 0, "{}", again.describe());
    let tables = server.cli(&["tables"]).assert_success();
    assert!(tables.stdout.contains(TABLE), "{}", tables.describe());
    // Nothing here uses AWS (a bearer token, a file:// warehouse): on a host with no AWS
    // variables and no instance metadata, no command says a word about AWS.
    let no_aws = [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_EC2_METADATA_DISABLED",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
    ];
    for args in [
        vec!["tables"],
        vec!["scan", TABLE, "--limit", "1"],
        vec!["ingest", &dms, "--config", &config],
    ] {
        let r = server.cli_with(&args, &[], &no_aws).assert_success();
        assert!(
            !r.stderr.contains("WARN") && !r.stderr.contains("IMDS"),
            "{}",
            r.describe()
        );
    }
    // SigV4 does need AWS: without a region, one line says which variable to set.
    let r = server.cli_with(
        &["tables"],
        &[("DMS2ICEBERG_REST_SIGV4", "glue")],
        &[&no_aws[..], &["DMS2ICEBERG_REST_TOKEN"]].concat(),
    );
    assert_eq!(r.status.code(), Some(1), "{}", r.describe());
    assert!(r.stderr.contains("AWS_REGION"), "{}", r.describe());
    assert!(
        !r.stderr.contains("WARN") && r.stderr.trim().lines().count() <= 2,
        "one clear error, no SDK dump:\n{}",
        r.describe()
    );

    // Metadata-only commits (expiry) go as updates too: the old snapshots leave, rows stay.
    let expire = server
        .cli(&[
            "expire",
            TABLE,
            "--older-than-hours",
            "0",
            "--retain-last",
            "2",
        ])
        .assert_success();
    let history = server
        .cli(&["history", TABLE, "--format", "json"])
        .assert_success();
    assert_eq!(
        parse_json_lines(&history.stdout, "history").len(),
        2,
        "{}",
        expire.describe()
    );
    server.assert_table(&w, TABLE, &w.expected(TABLE));
}

/// Four processes apply the same files, each in its own order, through one REST catalog at
/// once: the server refuses the commits whose requirements no longer hold (a 409 each), the
/// writers replan, and every file is applied once.
#[test]
fn concurrent_writers_through_a_rest_catalog_lose_swaps_and_nothing_else() {
    let w = generated("rest_concurrent", "502", "10");
    let server = Rustberg::start(&w);
    let meta = w.meta(TABLE);
    let mut rng = Rng::new(502);
    let config = w.config().display().to_string();
    let feeds: Vec<PathBuf> = (0..4)
        .map(|i| {
            let root = w.dir.join("feeds").join(format!("p{i}"));
            let mut files = meta.files.clone();
            rng.shuffle(&mut files);
            make_feed(&w, &root, &files);
            root
        })
        .collect();
    let runs: Vec<Run> = std::thread::scope(|s| {
        let handles: Vec<_> = feeds
            .iter()
            .map(|root| {
                let root = root.display().to_string();
                let server = &server;
                let config = &config;
                s.spawn(move || {
                    server.cli(&[
                        "ingest",
                        "--json",
                        &root,
                        "--config",
                        config,
                        "--files-per-commit",
                        "1",
                    ])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = Vec::new();
    for r in runs {
        let r = r.assert_success();
        all.extend(reports(&r));
    }
    assert_eq!(
        applied(&all),
        meta.files.len() as u64,
        "each file applied once across the writers: {all:?}"
    );
    let retried = all
        .iter()
        .filter(|r| r["attempts"].as_u64().unwrap_or(0) > 1)
        .count();
    assert!(
        retried > 0,
        "four writers on one table and no commit needed a second attempt: {all:?}"
    );
    server.assert_table(&w, TABLE, &w.expected(TABLE));
}

/// OAuth2 client credentials: the client fetches its token from the identity provider, renews
/// it before it expires (here: a second), and a wrong secret fails before anything is
/// written, naming where the token was refused.
#[test]
fn oauth2_client_credentials_are_exchanged_and_renewed() {
    let w = generated("rest_oauth2", "503", "3");
    let server = Rustberg::start(&w);
    let idp = TokenServer::start(&w, &server.token, 1);
    let config = w.config().display().to_string();
    let dms = w.dms().display().to_string();
    let wrong = server.cli_with(
        &["ingest", &dms, "--config", &config],
        &[
            ("DMS2ICEBERG_REST_CREDENTIAL", "dms2iceberg:wrong"),
            ("DMS2ICEBERG_REST_OAUTH2_URI", &idp.uri),
        ],
        &["DMS2ICEBERG_REST_TOKEN"],
    );
    assert!(!wrong.status.success(), "{}", wrong.describe());
    let out = wrong.output();
    assert!(
        out.contains(&idp.uri) && out.contains("401") && out.contains("wrong secret"),
        "the refusal should name the token endpoint and its reason:\n{}",
        wrong.describe()
    );
    assert_eq!(idp.grants(), 0);
    let tables = server.cli(&["tables"]).assert_success();
    assert!(!tables.stdout.contains(TABLE), "{}", tables.describe());

    // The files one by one. A token of one second is renewed before every request (a minute
    // before it expires, or at half its life if that is sooner).
    let files = w.meta(TABLE).files;
    for f in &files {
        let path = w.dms().join(f).display().to_string();
        server
            .cli_with(
                &["ingest", &path, "--config", &config],
                &[
                    ("DMS2ICEBERG_REST_CREDENTIAL", "dms2iceberg:s3cret"),
                    ("DMS2ICEBERG_REST_OAUTH2_URI", &idp.uri),
                ],
                &["DMS2ICEBERG_REST_TOKEN"],
            )
            .assert_success();
    }
    // A token per request, not one per run.
    assert!(
        idp.grants() > files.len(),
        "{} grants for {} runs",
        idp.grants(),
        files.len()
    );
    server.assert_table(&w, TABLE, &w.expected(TABLE));
}
