//! Tables without a primary key (issue 26 item 4): `mode = "append"` (keyless source tables,
//! `CdcInsertsOnly`: every row appended, exactly once per file) and `mode = "changelog"` (every
//! change row appended with its Op, DMS file and row: the history). Whole tables against the
//! generator's model (tests/support/dmsgen.py `--mode`), through our scan, PyIceberg and
//! DuckDB.

use serde_json::Value;

use crate::common::*;

const EVENTS: &str = "audit.events";
const ORDERS: &str = "shop.orders";

fn applied(reports: &[Value]) -> usize {
    reports
        .iter()
        .filter(|r| r["status"] == "applied")
        .map(|r| r["files"].as_array().map_or(0, Vec::len))
        .sum()
}

/// A keyless log table with `CdcInsertsOnly` and `IncludeOpForFullLoad=false` (no Op field in
/// any file): every row is appended, repeated rows and repeated `order_id`s included, each file
/// once however often it is delivered; one commit per file or several files per commit alike.
#[test]
fn a_keyless_table_appends_every_row_once() {
    for per_commit in ["1", "3"] {
        let w = Work::new(&format!("append_{per_commit}"));
        w.generate(
            "events",
            &[
                "--mode",
                "append",
                "--no-op-in-load",
                "--cdc-inserts-only",
                "--rows",
                "300",
                "--cdc-files",
                "5",
                "--cdc-rows",
                "60",
                "--seed",
                "26",
            ],
        );
        let cfg = std::fs::read_to_string(w.config()).unwrap();
        assert!(
            cfg.contains("mode = \"append\"") && !cfg.contains("primary_key"),
            "{cfg}"
        );
        let first = w.dms().join("audit/events/LOAD00000001.csv");
        let text = std::fs::read_to_string(&first).unwrap();
        assert!(text.starts_with("event_id,"), "no Op field:\n{text}");
        let reports = w.ingest_json_with(&[w.dms()], &["--files-per-commit", per_commit]);
        assert_eq!(applied(&reports), 6, "{reports:?}");
        let rows: usize = reports
            .iter()
            .map(|r| r["inserted"].as_u64().unwrap_or(0) as usize)
            .sum();
        assert_eq!(rows, 600, "{reports:?}");
        w.assert_table(EVENTS);
        // Every file again: nothing appended twice.
        let again = w.ingest_json(&[w.dms()]);
        assert_eq!(applied(&again), 0, "{again:?}");
        w.assert_table(EVENTS);
    }
}

/// An update in an append table has no row to apply to: its file fails naming file, line and
/// `Op`; nothing of it is committed, and the files before it stay applied.
#[test]
fn an_update_in_an_append_table_fails_its_file() {
    let w = Work::new("append_update");
    w.generate(
        "events",
        &[
            "--mode",
            "append",
            "--rows",
            "40",
            "--cdc-files",
            "2",
            "--cdc-rows",
            "10",
        ],
    );
    w.ingest().assert_success();
    // A keyless table's scan comes in no particular order.
    let scan = || {
        let mut rows = w.scan(EVENTS, &[]);
        rows.sort_by_key(|r| r["event_id"].as_i64());
        rows
    };
    let before = scan();
    let bad = "20991231-0000000000.csv";
    w.write_file(
        &format!("dms/audit/events/{bad}"),
        "Op,event_id,order_id,kind,note,created_at\nI,9001,1,NEW,x,2022-03-03 00:00:00\nU,1,1,PAID,y,2022-03-03 00:00:01\n",
    );
    let r = w.ingest();
    assert!(!r.status.success(), "{}", r.describe());
    let want = format!(
        "{bad}, line 3, column `Op`: `U` row in table {EVENTS}, which has `mode = \"append\"`"
    );
    assert!(
        r.stderr.contains(&want),
        "stderr lacks {want:?}:\n{}",
        r.describe()
    );
    assert_eq!(scan(), before, "nothing of the failed file");
    w.assert_table(EVENTS);
}

/// Every change of a keyed source table kept as a row with its Op, file and line (CSV, quoted
/// line breaks included) or row (Parquet, rows shuffled within files): deletes as their before
/// image, updates as their after image; exactly once per file.
#[test]
fn a_changelog_keeps_every_change_with_its_op_file_and_row() {
    for format in ["csv", "parquet"] {
        let w = Work::new(&format!("changelog_{format}"));
        w.generate(
            "synthetic",
            &[
                "--mode",
                "changelog",
                "--format",
                format,
                "--rows",
                "150",
                "--cdc-files",
                "4",
                "--cdc-rows",
                "50",
                "--timestamp-column",
                "dms_ts",
                "--shuffle-rows",
                "--seed",
                "261",
            ],
        );
        let meta = w.meta(ORDERS);
        assert_eq!(meta.columns["dms_row"], "long");
        w.ingest().assert_success();
        w.assert_table(ORDERS);
        let rows = w.scan(ORDERS, &[]);
        for op in ["I", "U", "D"] {
            assert!(rows.iter().any(|r| r["dms_op"] == op), "no {op} row");
        }
        let again = w.ingest_json(&[w.dms()]);
        assert_eq!(applied(&again), 0, "{again:?}");
    }
}

/// A table keeps the mode it was created with: an append table is not merged by a key set
/// later, and a keyed table is not appended to.
#[test]
fn a_table_keeps_its_mode() {
    let w = Work::new("mode_kept");
    w.generate(
        "events",
        &[
            "--mode",
            "append",
            "--rows",
            "20",
            "--cdc-files",
            "1",
            "--cdc-rows",
            "5",
        ],
    );
    w.ingest().assert_success();
    let cfg = std::fs::read_to_string(w.config()).unwrap();
    std::fs::write(
        w.config(),
        cfg.replace("mode = \"append\"", "primary_key = [\"event_id\"]"),
    )
    .unwrap();
    w.write_file(
        "dms/audit/events/20991231-0000000000.csv",
        "Op,event_id,order_id,kind,note,created_at\nI,9001,1,NEW,x,2022-03-03 00:00:00\n",
    );
    let r = w.ingest();
    assert!(!r.status.success(), "{}", r.describe());
    assert!(
        r.stderr
            .contains("the table was created with `mode = \"append\"`"),
        "{}",
        r.describe()
    );
    w.assert_table(EVENTS);

    let w = Work::new("mode_kept_keyed");
    w.generate("product", &[]);
    w.ingest().assert_success();
    let cfg = std::fs::read_to_string(w.config()).unwrap();
    std::fs::write(w.config(), format!("{cfg}mode = \"append\"\n")).unwrap();
    w.write_file(
        "dms/sales/product/20991231-0000000000.csv",
        "Op,product_id,category,product_name,quantity_available,last_update_time\nI,900,Tablet,x,1,2022-03-03 00:00:00\n",
    );
    let r = w.ingest();
    assert!(!r.status.success(), "{}", r.describe());
    assert!(
        r.stderr.contains("the table has a primary key"),
        "{}",
        r.describe()
    );
    w.assert_table("sales.product");
}
