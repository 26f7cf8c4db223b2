//! Bad-row policy, both ways, through the CLI binary: `fail` (default) commits nothing of a file
//! with a bad row and names file, line and column; `quarantine` sets bad rows aside in
//! `<table>__rejected` and applies the rest, once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn work(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("d2i-badrows-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("dms/s/t")).unwrap();
    std::fs::write(
        d.join("dms/s/t/LOAD00000001.csv"),
        "Op,id,v,n\nI,1,a,10\nI,2,b,x\nX,3,c,30\nI,,d,40\nI,5,e\nI,6,f,60\n",
    )
    .unwrap();
    d
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dms2iceberg"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn config(dir: &Path, policy: &str) {
    std::fs::write(
        dir.join("c.toml"),
        format!("[tables.\"s.t\"]\nprimary_key = [\"id\"]\nbad_rows = \"{policy}\"\ncolumns = [{{ name = \"n\", type = \"long\" }}]\n"),
    )
    .unwrap();
}

#[test]
fn fail_commits_nothing_and_names_the_row() {
    let d = work("fail");
    config(&d, "fail");
    let out = run(
        &d,
        &["ingest", "dms", "--warehouse", "wh", "--config", "c.toml"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("LOAD00000001.csv, line 3, column `n`"),
        "{err}"
    );
    let tables = run(&d, &["tables", "--warehouse", "wh"]);
    assert_eq!(
        String::from_utf8_lossy(&tables.stdout),
        "",
        "no table was created"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn quarantine_applies_the_rest_and_records_each_bad_row_once() {
    let d = work("quarantine");
    config(&d, "quarantine");
    for _ in 0..2 {
        let out = run(
            &d,
            &["ingest", "dms", "--warehouse", "wh", "--config", "c.toml"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let scan = run(&d, &["scan", "s.t", "--warehouse", "wh", "--format", "csv"]);
    assert_eq!(
        String::from_utf8_lossy(&scan.stdout),
        "id,v,n\n1,a,10\n6,f,60\n"
    );
    let rej = run(
        &d,
        &[
            "scan",
            "s.t__rejected",
            "--warehouse",
            "wh",
            "--format",
            "json",
        ],
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&rej.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut got: Vec<(i64, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["line"].as_i64().unwrap(),
                r["column_name"].as_str().unwrap_or("").to_string(),
                r["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    let lines: Vec<(i64, &str)> = got.iter().map(|(l, c, _)| (*l, c.as_str())).collect();
    assert_eq!(
        lines,
        vec![(3, "n"), (4, "Op"), (5, "id"), (6, "")],
        "{got:?}"
    );
    assert!(
        got[0].2.contains("`x`")
            && got[2].2.contains("NULL")
            && got[3].2.contains("expected 4 fields")
    );
    let _ = std::fs::remove_dir_all(&d);
}
