//! Order guarantees across files, checked through the CLI binary on hand-written DMS files
//! whose final state is obvious by construction.
//!
//! With an ordering column, a change older than the row the table holds never overwrites it,
//! even when the file carrying it comes later in DMS order. Without one, DMS order decides.

use std::path::{Path, PathBuf};
use std::process::Command;

fn work(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("d2i-ordering-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("dms/s/t")).unwrap();
    d
}

fn write(dir: &Path, file: &str, text: &str) {
    std::fs::write(dir.join("dms/s/t").join(file), text).unwrap();
}

fn run(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dms2iceberg"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const SEQ_5: &str = "00000000000000000000000000000000005";
const SEQ_1: &str = "00000000000000000000000000000000001";
const SEQ_3: &str = "00000000000000000000000000000000003";
const SEQ_4: &str = "00000000000000000000000000000000004";

fn tree(dir: &Path) {
    write(
        dir,
        "LOAD00000001.csv",
        "Op,id,v,seq\nI,1,a,\nI,2,b,\nI,3,c,\n",
    );
    write(
        dir,
        "20220302-1134010000.csv",
        &format!("Op,id,v,seq\nU,1,new,{SEQ_5}\nU,2,x,{SEQ_1}\n"),
    );
    // Later in DMS order, but its change to 1 is older than the one applied.
    write(
        dir,
        "20220302-1135010000.csv",
        &format!("Op,id,v,seq\nU,1,old,{SEQ_3}\nD,2,,{SEQ_4}\nU,3,c2,{SEQ_3}\n"),
    );
}

#[test]
fn an_older_change_never_overwrites_a_newer_row() {
    let d = work("seq");
    tree(&d);
    std::fs::write(
        d.join("c.toml"),
        "[tables.\"s.t\"]\nprimary_key = [\"id\"]\nchange_sequence_column = \"seq\"\n",
    )
    .unwrap();
    let reports = run(
        &d,
        &[
            "ingest",
            "dms",
            "--warehouse",
            "wh",
            "--config",
            "c.toml",
            "--json",
        ],
    );
    let last: serde_json::Value = serde_json::from_str(reports.lines().last().unwrap()).unwrap();
    assert_eq!(last["stale_changes"], 1, "{reports}");
    assert_eq!(last["deleted"], 1, "{reports}");
    let scan = run(&d, &["scan", "s.t", "--warehouse", "wh", "--format", "csv"]);
    assert_eq!(
        scan,
        format!("id,v,seq\n1,new,{SEQ_5}\n3,c2,{SEQ_3}\n"),
        "1 keeps its newer value, 2 is deleted (newer delete), 3 takes its only change"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn without_an_ordering_column_dms_order_decides() {
    let d = work("noseq");
    tree(&d);
    std::fs::write(
        d.join("c.toml"),
        "[tables.\"s.t\"]\nprimary_key = [\"id\"]\n",
    )
    .unwrap();
    run(
        &d,
        &["ingest", "dms", "--warehouse", "wh", "--config", "c.toml"],
    );
    let scan = run(&d, &["scan", "s.t", "--warehouse", "wh", "--format", "csv"]);
    assert_eq!(scan, format!("id,v,seq\n1,old,{SEQ_3}\n3,c2,{SEQ_3}\n"));
    let _ = std::fs::remove_dir_all(&d);
}
