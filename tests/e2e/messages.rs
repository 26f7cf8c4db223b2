//! What the CLI tells its user and what it logs, through the binary:
//! - row values never reach log lines at the default levels, however they are quoted (they are
//!   carried apart from message text); the user's own error line shows them;
//! - each error is printed once, a failed table's line says FAILED and why, without repeating
//!   the table name; logs are plain text when stderr is not a terminal;
//! - one output flag (`--format`, `--json` still accepted), refused when unsupported;
//! - `scan --format json` keys in column order; `history` shows live rows.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const SECRET: &str = "SSN-078-05-1120";

fn cli(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(bin());
    c.args(args).current_dir(dir).env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Lines of stderr written by the log layer (`<time>  LEVEL target: …`), not the CLI's own
/// `error:` / `warning:` lines for its user.
fn log_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            [" TRACE ", " DEBUG ", " INFO ", " WARN ", " ERROR "]
                .iter()
                .any(|lv| l.contains(lv))
                && l.starts_with(|c: char| c.is_ascii_digit())
        })
        .collect()
}

fn table_dir(dir: &Path) -> std::path::PathBuf {
    let t = dir.join("dms/s/t");
    std::fs::create_dir_all(&t).unwrap();
    t
}

/// Writes a Parquet file with string columns (pyarrow from the test venv).
fn parquet(path: &Path, columns: &[(&str, Vec<&str>)]) {
    let spec: Vec<(String, Vec<String>)> = columns
        .iter()
        .map(|(n, v)| (n.to_string(), v.iter().map(|s| s.to_string()).collect()))
        .collect();
    let code = format!(
        "import json, pyarrow as pa, pyarrow.parquet as pq\n\
         cols = json.loads({:?})\n\
         pq.write_table(pa.table({{n: pa.array(v, pa.string()) for n, v in cols}}), {:?})\n",
        serde_json::to_string(&spec).unwrap(),
        path.display().to_string()
    );
    run(&python(), ["-c", code.as_str()]).assert_success();
}

/// Writes the input of a case into a work dir, with the planted value.
type Setup = Box<dyn Fn(&Path, &str)>;

/// One failing input per error path that carries a value.
struct Case {
    name: &'static str,
    config: String,
    setup: Setup,
}

fn cases() -> Vec<Case> {
    let base = "[tables.\"s.t\"]\nprimary_key = [\"id\"]\n";
    vec![
        Case {
            name: "value-into-long",
            config: format!("{base}columns = [{{ name = \"n\", type = \"long\" }}]\n"),
            setup: Box::new(|d, v| {
                std::fs::write(
                    table_dir(d).join("LOAD00000001.csv"),
                    format!("Op,id,n\nI,1,5\nI,2,{v}\n"),
                )
                .unwrap()
            }),
        },
        Case {
            name: "leading-zeros-like",
            config: format!("{base}columns = [{{ name = \"n\", type = \"decimal(10,2)\" }}]\n"),
            setup: Box::new(|d, v| {
                std::fs::write(
                    table_dir(d).join("LOAD00000001.csv"),
                    format!("Op,id,n\nI,1,{v}\n"),
                )
                .unwrap()
            }),
        },
        Case {
            name: "unknown-op",
            config: base.to_string(),
            setup: Box::new(|d, v| {
                std::fs::write(
                    table_dir(d).join("LOAD00000001.csv"),
                    format!("Op,id,n\nI,1,5\n{v},2,6\n"),
                )
                .unwrap()
            }),
        },
        Case {
            name: "not-a-header",
            config: format!("{base}header = true\n"),
            setup: Box::new(|d, v| {
                std::fs::write(
                    table_dir(d).join("LOAD00000001.csv"),
                    format!("{v},1,2\nI,1,5\n"),
                )
                .unwrap()
            }),
        },
        Case {
            name: "no-column-list",
            config: base.to_string(),
            setup: Box::new(|d, v| {
                std::fs::write(
                    table_dir(d).join("LOAD00000001.csv"),
                    format!("{v} x,1,2\n"),
                )
                .unwrap()
            }),
        },
        Case {
            name: "parquet-string-timestamp",
            config: format!("{base}commit_timestamp_column = \"ts\"\n"),
            setup: Box::new(|d, v| {
                parquet(
                    &table_dir(d).join("LOAD00000001.parquet"),
                    &[
                        ("Op", vec!["I", "I"]),
                        ("ts", vec!["2022-03-02 11:30:01.000000", v]),
                        ("id", vec!["1", "2"]),
                    ],
                )
            }),
        },
        Case {
            name: "parquet-op",
            config: base.to_string(),
            setup: Box::new(|d, v| {
                parquet(
                    &table_dir(d).join("LOAD00000001.parquet"),
                    &[("Op", vec!["I", v]), ("id", vec!["1", "2"])],
                )
            }),
        },
    ]
}

/// A value planted in bad input — in backticks, in double quotes, plain — is in the user's
/// error line but in no log line, at the CLI's default level and at `info` (the functions'
/// default); `quarantine` warnings too. At `debug` it is logged, as a field of its own.
#[test]
fn values_never_reach_default_level_logs() {
    let _ = python();
    let quotings = [
        format!("`{SECRET}`"),
        format!("\"{SECRET}\""),
        SECRET.to_string(),
    ];
    for case in cases() {
        for (qi, v) in quotings.iter().enumerate() {
            for policy in ["fail", "quarantine"] {
                let w = Work::new(&format!("redact-{}-{qi}-{policy}", case.name));
                let d = &w.dir;
                // CSV quoting of the planted value.
                let field = if v.contains('"') {
                    format!("\"{}\"", v.replace('"', "\"\""))
                } else {
                    v.clone()
                };
                let planted = if case.name.starts_with("parquet") {
                    v.as_str()
                } else {
                    field.as_str()
                };
                (case.setup)(d, planted);
                std::fs::write(
                    d.join("c.toml"),
                    format!("{}bad_rows = \"{policy}\"\n", case.config),
                )
                .unwrap();
                let mut user_saw_it = false;
                for level in [None, Some("info")] {
                    let env: Vec<(&str, &str)> =
                        level.map(|l| ("RUST_LOG", l)).into_iter().collect();
                    let wh = format!("wh-{}", level.unwrap_or("default"));
                    let out = cli(
                        d,
                        &env,
                        &["ingest", "dms", "--warehouse", &wh, "--config", "c.toml"],
                    );
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    for l in log_lines(&stderr) {
                        assert!(
                            !l.contains(SECRET),
                            "{} ({policy}, quoting {qi}, RUST_LOG={level:?}): a log line holds the value:\n{l}",
                            case.name
                        );
                    }
                    assert!(
                        !stderr.contains('\x1b'),
                        "no colour codes off a terminal: {stderr}"
                    );
                    user_saw_it |= stderr.contains(SECRET);
                    if policy == "quarantine"
                        && level == Some("info")
                        && case.name == "value-into-long"
                    {
                        let warn = log_lines(&stderr)
                            .into_iter()
                            .find(|l| l.contains("rows set aside"))
                            .unwrap_or_else(|| panic!("no quarantine warning: {stderr}"));
                        assert!(warn.contains("column `n`"), "names the column: {warn}");
                    }
                }
                if policy == "fail" {
                    assert!(
                        user_saw_it,
                        "{} (quoting {qi}): the user's error line shows the value",
                        case.name
                    );
                }
            }
        }
    }
    // At debug level the value is logged, as its own field.
    let w = Work::new("redact-debug");
    (cases()[0].setup)(&w.dir, SECRET);
    std::fs::write(w.dir.join("c.toml"), &cases()[0].config).unwrap();
    let out = cli(
        &w.dir,
        &[("RUST_LOG", "debug")],
        &["ingest", "dms", "--warehouse", "wh", "--config", "c.toml"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        log_lines(&stderr)
            .iter()
            .any(|l| l.contains(&format!("value=Some(\"{SECRET}\")"))),
        "{stderr}"
    );
}

/// A failed table: one error, on stderr, on the table's line, saying FAILED and why, the table
/// named once; what was applied before stays and the counts say so.
#[test]
fn a_failed_table_says_failed_once() {
    let w = Work::new("failed-line");
    let t = table_dir(&w.dir);
    std::fs::write(t.join("LOAD00000001.csv"), "Op,id,n\nI,1,5\n").unwrap();
    std::fs::write(t.join("20220302-1134010000.csv"), "Op,id,n\nU,1,x\n").unwrap();
    std::fs::write(t.join("20220302-1135010000.csv"), "Op,id,n\nU,1,7\n").unwrap();
    std::fs::write(
        w.dir.join("c.toml"),
        "[tables.\"s.t\"]\nprimary_key = [\"id\"]\n",
    )
    .unwrap();
    let out = cli(
        &w.dir,
        &[("RUST_LOG", "info")],
        &["ingest", "dms", "--warehouse", "wh", "--config", "c.toml"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.is_empty(),
        "the failed table is reported on stderr: {stdout}"
    );
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].starts_with("error: s.t -> s.t: FAILED: bad input: ")
            && errors[0].contains(
                "dms/s/t/20220302-1134010000.csv, line 2, column `n`: cannot parse `x` as long"
            ),
        "{}",
        errors[0]
    );
    assert_eq!(
        stderr.matches("cannot parse").count(),
        1,
        "printed once: {stderr}"
    );
    assert!(
        stderr.contains("1 files applied, 0 skipped (already applied), 1 waiting"),
        "{stderr}"
    );
    // A schema error: the table is named once.
    let w = Work::new("failed-schema");
    let t = table_dir(&w.dir);
    std::fs::write(t.join("LOAD00000001.csv"), "Op,id,n\nI,1,5\n").unwrap();
    std::fs::write(
        w.dir.join("c.toml"),
        "[tables.\"s.t\"]\nprimary_key = [\"nope\"]\n",
    )
    .unwrap();
    let out = cli(
        &w.dir,
        &[],
        &["ingest", "dms", "--warehouse", "wh", "--config", "c.toml"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: s.t -> s.t: FAILED: primary key column `nope`"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("s.t").count(), 2, "{stderr}");
}

/// `--format json` on every command that prints, `--json` still accepted, unsupported formats
/// refused; `scan --format json` keys in column order; `history` shows live rows, before and
/// after compaction.
#[test]
fn one_output_flag_and_exact_outputs() {
    let w = Work::new("formats");
    let t = table_dir(&w.dir);
    std::fs::write(
        t.join("LOAD00000001.csv"),
        "Op,zeta,id,alpha\nI,z1,1,a\nI,z2,2,b\nI,z3,3,c\nI,z4,4,d\n",
    )
    .unwrap();
    std::fs::write(
        t.join("20220302-1134010000.csv"),
        "Op,zeta,id,alpha\nU,z2b,2,b\nD,z3,3,c\nI,z5,5,e\n",
    )
    .unwrap();
    std::fs::write(
        t.join("20220302-1135010000.csv"),
        "Op,zeta,id,alpha\nU,z1b,1,a\nD,z4,4,d\n",
    )
    .unwrap();
    std::fs::write(
        w.dir.join("c.toml"),
        "[tables.\"s.t\"]\nprimary_key = [\"id\"]\n",
    )
    .unwrap();
    let json = |args: &[&str]| -> Vec<Value> {
        let out = cli(&w.dir, &[], args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_json_lines(&String::from_utf8_lossy(&out.stdout), &format!("{args:?}"))
    };
    let reports = json(&[
        "ingest",
        "dms",
        "--warehouse",
        "wh",
        "--config",
        "c.toml",
        "--format",
        "json",
    ]);
    assert_eq!(reports.len(), 3);
    // Scan: keys in column order, not sorted.
    let out = cli(
        &w.dir,
        &[],
        &["scan", "s.t", "--warehouse", "wh", "--format", "json"],
    );
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(first, r#"{"zeta":"z1b","id":1,"alpha":"a"}"#);
    // History: live rows (3), not Iceberg's total-records (which counts the 2 deleted and the
    // 2 replaced rows: 7).
    let h = json(&["history", "s.t", "--warehouse", "wh", "--format", "json"]);
    let live: Vec<u64> = h.iter().map(|s| s["live_rows"].as_u64().unwrap()).collect();
    assert_eq!(live, vec![4, 4, 3]);
    assert_eq!(h[2]["total_records"], 7);
    let out = cli(&w.dir, &[], &["history", "s.t", "--warehouse", "wh"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().contains(" rows "), "{text}");
    // Every reporting command speaks JSON with --format json and with --json.
    for flag in [&["--format", "json"][..], &["--json"][..]] {
        for cmd in [
            &["compact", "s.t", "--warehouse", "wh"][..],
            &["expire", "s.t", "--warehouse", "wh", "--dry-run"][..],
            &["orphans", "s.t", "--warehouse", "wh"][..],
            &["tables", "--warehouse", "wh"][..],
            &["history", "s.t", "--warehouse", "wh"][..],
        ] {
            let args: Vec<&str> = cmd.iter().chain(flag.iter()).copied().collect();
            assert!(!json(&args).is_empty(), "{args:?}");
        }
    }
    // After compaction rewrote the files (deletes applied), every snapshot still counts right.
    let h = json(&["history", "s.t", "--warehouse", "wh", "--format", "json"]);
    assert!(h.len() >= 4, "compaction committed: {h:?}");
    assert_eq!(h.last().unwrap()["live_rows"], 3);
    let live: Vec<u64> = h.iter().map(|s| s["live_rows"].as_u64().unwrap()).collect();
    assert_eq!(&live[..3], &[4, 4, 3]);
    let scan = json(&["scan", "s.t", "--warehouse", "wh", "--format", "json"]);
    assert_eq!(scan.len(), 3);
    // Unsupported formats are refused, not printed as something else.
    for args in [
        &["history", "s.t", "--warehouse", "wh", "--format", "csv"][..],
        &["compact", "s.t", "--warehouse", "wh", "--format", "csv"][..],
        &["ingest", "dms", "--warehouse", "wh", "--format", "table"][..],
    ] {
        let out = cli(&w.dir, &[], args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid value"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
