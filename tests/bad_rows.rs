//! Bad-row policy, both ways, through the CLI binary: `fail` (default) commits nothing of a file
//! with a bad row and names file, line and column; `quarantine` sets bad rows aside in
//! `<table>__rejected` and applies the rest, once.

// The Python-free helpers alone: this suite runs in the fast tier (plain `cargo test`).
#[path = "common/cli.rs"]
mod common;

use common::Work;

/// A work dir with a full load of six rows, four of them bad (`n` not a number, unknown Op,
/// NULL key, too few fields).
fn work(name: &str) -> Work {
    let w = Work::plain(&format!("badrows-{name}"));
    w.write_file(
        "dms/s/t/LOAD00000001.csv",
        "Op,id,v,n\nI,1,a,10\nI,2,b,x\nX,3,c,30\nI,,d,40\nI,5,e\nI,6,f,60\n",
    );
    w
}

fn config(w: &Work, policy: &str) {
    std::fs::write(
        w.config(),
        format!("[tables.\"s.t\"]\nprimary_key = [\"id\"]\nbad_rows = \"{policy}\"\ncolumns = [{{ name = \"n\", type = \"long\" }}]\n"),
    )
    .unwrap();
}

#[test]
fn fail_commits_nothing_and_names_the_row() {
    let w = work("fail");
    config(&w, "fail");
    let out = w.ingest();
    assert!(!out.status.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("LOAD00000001.csv, line 3, column `n`"),
        "{}",
        out.stderr
    );
    let tables = w.tables().assert_success();
    assert_eq!(tables.stdout, "", "no table was created");
}

#[test]
fn quarantine_applies_the_rest_and_records_each_bad_row_once() {
    let w = work("quarantine");
    config(&w, "quarantine");
    for _ in 0..2 {
        w.ingest().assert_success();
    }
    assert_eq!(w.scan_csv("s.t"), "id,v,n\n1,a,10\n6,f,60\n");
    let rows = w.scan("s.t__rejected", &[]);
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
}

/// A change row with an empty change-sequence value cannot be placed among its key's changes:
/// it is not dropped as stale but fails its file naming file, line and column (or, with
/// `quarantine`, is set aside). Full-load rows may have it empty (DMS leaves it so).
#[test]
fn an_empty_change_sequence_is_refused_not_dropped() {
    for policy in ["fail", "quarantine"] {
        let w = work(&format!("emptyseq-{policy}"));
        w.write_file("dms/s/t/LOAD00000001.csv", "Op,id,v,seq\nI,1,a,\nI,2,b,\n");
        w.write_file(
            "dms/s/t/20220302-1134010000.csv",
            "Op,id,v,seq\nU,1,x,00000000000000000000000000000000005\nU,2,y,\n",
        );
        std::fs::write(
            w.config(),
            format!(
                "[tables.\"s.t\"]\nprimary_key = [\"id\"]\nchange_sequence_column = \"seq\"\nbad_rows = \"{policy}\"\n"
            ),
        )
        .unwrap();
        let out = w.ingest();
        let err = &out.stderr;
        let scan = w.scan_csv("s.t");
        if policy == "fail" {
            assert!(!out.status.success(), "{}", out.describe());
            assert!(
                err.contains("20220302-1134010000.csv, line 3, column `seq`: a change row has no value in an ordering column"),
                "{err}"
            );
            assert_eq!(
                scan, "id,v,seq\n1,a,\n2,b,\n",
                "nothing of the file applied"
            );
        } else {
            assert!(out.status.success(), "{err}");
            assert!(err.contains("1 rows could not be read"), "{err}");
            assert_eq!(
                scan, "id,v,seq\n1,x,00000000000000000000000000000000005\n2,b,\n",
                "the row without a sequence is set aside, the rest applies"
            );
        }
    }
}

/// With `quarantine`, a value that would not be stored exactly (leading zeros into a long)
/// sets its row aside with the reason; the other rows apply.
#[test]
fn quarantine_sets_aside_values_that_do_not_fit_exactly() {
    let w = work("lossless");
    w.write_file(
        "dms/s/t/LOAD00000001.csv",
        "Op,id,zip,w\nI,1,51003,+5.0656000000000000e+05\n",
    );
    w.write_file(
        "dms/s/t/20220302-1134010000.csv",
        "Op,id,zip,w\nI,2,01307,+1.2500000000000000e+00\nI,3,75320,-2.5000000000000000e-01\n",
    );
    std::fs::write(
        w.config(),
        "[tables.\"s.t\"]\nprimary_key = [\"id\"]\nbad_rows = \"quarantine\"\ncolumns = [{ name = \"w\", type = \"decimal(10,2)\" }]\n",
    )
    .unwrap();
    w.ingest().assert_success();
    assert_eq!(
        w.scan_csv("s.t"),
        "id,zip,w\n1,51003,506560.00\n3,75320,-0.25\n"
    );
    let rej = w.scan_csv("s.t__rejected");
    assert!(
        rej.contains("20220302-1134010000.csv")
            && rej.contains("zip")
            && rej.contains("leading zeros"),
        "{rej}"
    );
}
