//! Hostile input through the CLI binary (issue 12): layouts and names DMS or an operator can
//! produce that once dropped files silently, mixed tables or stopped every table. Each test
//! writes a small DMS tree by hand, so the expected table is obvious by construction, and
//! compares the WHOLE table through our `scan`, PyIceberg and DuckDB (`check_readers.py`).
//!
//! Run through `scripts/test` (it provides DMS2ICEBERG_PYTHON).

use crate::common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Writes `text` at `rel` under the work dir (folders created).
fn put(w: &Work, rel: &str, text: &[u8]) -> PathBuf {
    let p = w.dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn config(w: &Work, toml: &str) {
    std::fs::write(w.config(), toml).unwrap();
}

/// `ingest` of the given paths (relative to the work dir).
fn ingest(w: &Work, rel: &[&str]) -> Run {
    let paths: Vec<PathBuf> = rel.iter().map(|r| w.dir.join(r)).collect();
    w.ingest_paths(&paths)
}

/// The whole table equals `rows` (key `id`, the given column types), through all three readers.
fn expect(w: &Work, table: &str, columns: &[(&str, &str)], rows: Vec<Value>, label: &str) {
    let meta = json!({
        "table": table,
        "dms_table": table,
        "primary_key": ["id"],
        "columns": columns.iter().map(|(c, t)| (c.to_string(), json!(t))).collect::<serde_json::Map<_, _>>(),
        "files": [],
        "pending_files": [],
    });
    let p = w.meta_path(table);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, meta.to_string()).unwrap();
    w.assert_table_rows(table, &rows, label);
}

fn fails_with(r: &Run, needles: &[&str]) {
    assert!(!r.status.success(), "expected a failure:\n{}", r.describe());
    for n in needles {
        assert!(
            r.stderr.contains(n),
            "stderr lacks {n:?}:\n{}",
            r.describe()
        );
    }
}

const ID_V: &[(&str, &str)] = &[("id", "long"), ("v", "string")];

fn id_v(rows: &[(i64, &str)]) -> Vec<Value> {
    rows.iter().map(|(i, v)| json!({"id": i, "v": v})).collect()
}

/// Item 2: with a bucket folder, parallel-load segment folders are distinct places in DMS order:
/// the second segment's LOAD file was dropped (ids 3-4 missing, exit 0).
#[test]
fn parallel_load_segments_under_a_bucket_folder() {
    let w = Work::new("hostile_segments");
    put(
        &w,
        "dms/s/t/seg1/LOAD00000001.csv",
        b"Op,id,v\nI,1,a\nI,2,b\n",
    );
    put(
        &w,
        "dms/s/t/seg2/LOAD00000001.csv",
        b"Op,id,v\nI,3,c\nI,4,d\n",
    );
    put(
        &w,
        "dms/s/t/20220302-1134010000.csv",
        b"Op,id,v\nU,4,d2\nD,1,\n",
    );
    config(
        &w,
        "[source]\nbucket_folder = \"dms\"\nparallel_load_folders = true\n[defaults]\nprimary_key = [\"id\"]\n",
    );
    ingest(&w, &["dms"]).assert_success();
    expect(
        &w,
        "s.t",
        ID_V,
        id_v(&[(2, "b"), (3, "c"), (4, "d2")]),
        "final",
    );
}

/// Item 3: an existing table's key comes from its identifier fields; before-images of that key
/// move rows even when the config names no `primary_key` (row 1 stayed next to row 10).
#[test]
fn key_change_on_an_existing_table_without_primary_key_in_the_config() {
    let w = Work::new("hostile_key_from_table");
    put(&w, "dms/s/t/LOAD00000001.csv", b"Op,id,v\nI,1,a\nI,2,b\n");
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    ingest(&w, &["dms"]).assert_success();
    config(&w, "[defaults]\nlowercase_names = true\n");
    put(
        &w,
        "dms/s/t/20220302-1134010000.csv",
        b"Op,BI_id,id,v\nU,1,10,x\n",
    );
    ingest(&w, &["dms"]).assert_success();
    expect(
        &w,
        "s.t",
        ID_V,
        id_v(&[(2, "b"), (10, "x")]),
        "after key change",
    );
}

/// Item 4: only `BI_<key column>` (the prefix as DMS writes it) is a before-image; a source column
/// `bi_total` next to `total`, or a before-image of a non-key column, is data, never dropped.
#[test]
fn columns_that_look_like_before_images_are_kept() {
    let w = Work::new("hostile_bi_columns");
    put(
        &w,
        "dms/s/t/LOAD00000001.csv",
        b"Op,id,total,bi_total,qty,BI_qty\nI,1,5,7,2,3\n",
    );
    put(
        &w,
        "dms/s/t/20220302-1134010000.csv",
        b"Op,BI_id,id,total,bi_total,qty,BI_qty\nU,1,2,6,8,4,2\n",
    );
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    ingest(&w, &["dms"]).assert_success();
    expect(
        &w,
        "s.t",
        &[
            ("id", "long"),
            ("total", "long"),
            ("bi_total", "long"),
            ("qty", "long"),
            ("bi_qty", "long"),
        ],
        vec![json!({"id": 2, "total": 6, "bi_total": 8, "qty": 4, "bi_qty": 2})],
        "final",
    );
}

const QUARANTINE_T: &str = "[tables.\"s.t\"]\nprimary_key = [\"id\"]\nbad_rows = \"quarantine\"\n\
                            columns = [{ name = \"n\", type = \"long\" }]\n";

/// The rejected-rows table of s.t as scanned, without the time it was written.
fn rejected_rows(w: &Work, table: &str) -> Vec<(String, Value, Value)> {
    w.scan(table, &[])
        .iter()
        .map(|r| {
            let file = r["source_file"].as_str().unwrap_or_default();
            (
                file.rsplit('/').next().unwrap_or_default().to_string(),
                r["line"].clone(),
                r["column_name"].clone(),
            )
        })
        .collect()
}

/// Item 6: a DMS table named `t__rejected` and t's rejected-rows table are kept apart: the
/// DMS table's LOAD was reported "already applied" and never landed. Now the DMS table is
/// refused with a message saying to set `target`, and lands once it is set.
#[test]
fn a_dms_table_named_like_a_rejected_rows_table_is_refused_until_renamed() {
    let w = Work::new("hostile_rejected_collision");
    put(&w, "dms/s/t/LOAD00000001.csv", b"Op,id,n\nI,1,10\nI,2,x\n");
    put(
        &w,
        "dms/s/t__rejected/LOAD00000001.csv",
        b"Op,id,v\nI,7,q\n",
    );
    let both = format!("{QUARANTINE_T}[tables.\"s.t__rejected\"]\nprimary_key = [\"id\"]\n");
    config(&w, &both);
    let r = ingest(&w, &["dms"]);
    fails_with(&r, &["s.t__rejected", "rejected rows of s.t", "target"]);
    expect(
        &w,
        "s.t",
        &[("id", "long"), ("n", "long")],
        vec![json!({"id": 1, "n": 10})],
        "good rows",
    );
    assert_eq!(
        rejected_rows(&w, "s.t__rejected"),
        vec![("LOAD00000001.csv".to_string(), json!(3), json!("n"))]
    );
    config(
        &w,
        &format!(
            "{QUARANTINE_T}[tables.\"s.t__rejected\"]\nprimary_key = [\"id\"]\ntarget = \"s.t_rejected_src\"\n"
        ),
    );
    ingest(&w, &["dms"]).assert_success();
    expect(&w, "s.t_rejected_src", ID_V, id_v(&[(7, "q")]), "renamed");
    assert_eq!(rejected_rows(&w, "s.t__rejected").len(), 1);
}

/// Item 6, the other way: quarantined rows of t never go into a DMS table named `t__rejected`
/// (they were reported set aside but were missing).
#[test]
fn rejected_rows_never_go_into_a_dms_table_of_that_name() {
    let w = Work::new("hostile_rejected_into_dms");
    put(
        &w,
        "dms/s/t__rejected/LOAD00000001.csv",
        b"Op,id,v\nI,7,q\n",
    );
    put(&w, "dms/s/t/LOAD00000001.csv", b"Op,id,n\nI,1,10\nI,2,x\n");
    config(
        &w,
        &format!("{QUARANTINE_T}[tables.\"s.t__rejected\"]\nprimary_key = [\"id\"]\n"),
    );
    ingest(&w, &["dms/s/t__rejected"]).assert_success();
    let r = ingest(&w, &["dms/s/t"]);
    fails_with(
        &r,
        &["rejected rows of s.t", "fed by DMS table s.t__rejected"],
    );
    expect(&w, "s.t__rejected", ID_V, id_v(&[(7, "q")]), "unchanged");
    let tables = w.tables().assert_success();
    assert!(
        !tables.stdout.lines().any(|l| l == "s.t"),
        "nothing of s.t may be committed:\n{}",
        tables.describe()
    );
}

/// Item 7: two files at one place in DMS order (fraction widths differ) stop the table there,
/// naming both; listing one under `skip_files` lets the other apply. One was silently dropped.
#[test]
fn two_change_files_at_one_place_stop_the_table_until_one_is_skipped() {
    let w = Work::new("hostile_same_place");
    put(&w, "dms/s/t/LOAD00000001.csv", b"Op,id,v\nI,1,a\nI,2,b\n");
    put(&w, "dms/s/t/20220302-113401.csv", b"Op,id,v\nU,1,x\n");
    put(&w, "dms/s/t/20220302-1134010000.csv", b"Op,id,v\nU,1,y\n");
    put(&w, "dms/s/t/20220302-1135000000.csv", b"Op,id,v\nU,2,z\n");
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    let r = ingest(&w, &["dms"]);
    fails_with(
        &r,
        &[
            "20220302-113401.csv",
            "20220302-1134010000.csv",
            "same place in DMS order",
            "skip_files",
        ],
    );
    expect(&w, "s.t", ID_V, id_v(&[(1, "a"), (2, "b")]), "stopped");
    config(
        &w,
        "[defaults]\nprimary_key = [\"id\"]\nskip_files = [\"20220302-113401.csv\"]\n",
    );
    ingest(&w, &["dms"]).assert_success();
    expect(&w, "s.t", ID_V, id_v(&[(1, "y"), (2, "z")]), "one skipped");
}

/// Writes a Parquet file with pyarrow (`rows`: (Op, id, v)), optionally gzip'd.
fn parquet(w: &Work, rel: &str, rows: &[(&str, i64, &str)], gzip: bool) {
    let p = w.dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let spec = serde_json::to_string(rows).unwrap();
    let script = "import gzip, io, json, sys\nimport pyarrow as pa, pyarrow.parquet as pq\n\
                  rows = json.loads(sys.argv[2])\n\
                  t = pa.table({'Op': [r[0] for r in rows], 'id': pa.array([r[1] for r in rows], pa.int64()), 'v': [r[2] for r in rows]})\n\
                  buf = io.BytesIO(); pq.write_table(t, buf)\n\
                  data = gzip.compress(buf.getvalue()) if sys.argv[3] == '1' else buf.getvalue()\n\
                  open(sys.argv[1], 'wb').write(data)\n";
    let gz = if gzip { "1" } else { "0" };
    run(
        &python(),
        ["-c", script, &p.display().to_string(), spec.as_str(), gz],
    )
    .assert_success();
}

/// Item 7: `x.csv` and `x.parquet` of one stem are one place too; a file at the place of one
/// applied earlier under another name is refused, not skipped as applied; byte-identical
/// copies under two roots stay one file.
#[test]
fn csv_and_parquet_of_one_stem_and_late_twins_are_refused_copies_are_one_file() {
    let w = Work::new("hostile_same_place_formats");
    put(&w, "dms/s/t/LOAD00000001.csv", b"Op,id,v\nI,1,a\nI,2,b\n");
    put(&w, "dms/s/t/20220302-1134010000.csv", b"Op,id,v\nU,1,x\n");
    parquet(
        &w,
        "dms/s/t/20220302-1134010000.parquet",
        &[("U", 1, "y")],
        false,
    );
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    let r = ingest(&w, &["dms"]);
    fails_with(
        &r,
        &["20220302-1134010000.csv", "20220302-1134010000.parquet"],
    );
    expect(&w, "s.t", ID_V, id_v(&[(1, "a"), (2, "b")]), "stopped");
    config(
        &w,
        "[defaults]\nprimary_key = [\"id\"]\nskip_files = [\"20220302-1134010000.csv\"]\n",
    );
    ingest(&w, &["dms"]).assert_success();
    expect(
        &w,
        "s.t",
        ID_V,
        id_v(&[(1, "y"), (2, "b")]),
        "parquet applied",
    );
    // A later delivery at an applied place, under another name.
    put(&w, "dms/s/t/20220302-113401.csv", b"Op,id,v\nU,2,late\n");
    let r = ingest(&w, &["dms"]);
    fails_with(&r, &["20220302-113401.csv", "applied earlier"]);
    expect(&w, "s.t", ID_V, id_v(&[(1, "y"), (2, "b")]), "twin refused");

    // Copies of one file under two roots: one file, applied once.
    let c = Work::new("hostile_copies");
    put(&c, "a/dms/s/u/LOAD00000001.csv", b"Op,id,v\nI,1,a\n");
    put(&c, "b/dms/s/u/LOAD00000001.csv", b"Op,id,v\nI,1,a\n");
    config(&c, "[defaults]\nprimary_key = [\"id\"]\n");
    ingest(&c, &["a", "b"]).assert_success();
    expect(&c, "s.u", ID_V, id_v(&[(1, "a")]), "copies");
    assert_eq!(c.history("s.u").len(), 1);
    // Not copies: the same name with other bytes is refused.
    put(&c, "a/dms/s/u/20220302-1134010000.csv", b"Op,id,v\nU,1,b\n");
    put(&c, "b/dms/s/u/20220302-1134010000.csv", b"Op,id,v\nU,1,c\n");
    let r = ingest(&c, &["a", "b"]);
    fails_with(&r, &["same place in DMS order"]);
    expect(
        &c,
        "s.u",
        ID_V,
        id_v(&[(1, "a")]),
        "differing copies refused",
    );
}

/// Item 9: a DMS schema named `catalog` (its folder clashed with `<warehouse>/catalog.db`).
#[test]
fn a_schema_named_catalog() {
    let w = Work::new("hostile_catalog_schema");
    put(&w, "dms/catalog/t/LOAD00000001.csv", b"Op,id,v\nI,1,a\n");
    put(
        &w,
        "dms/catalog/t/20220302-1134010000.csv",
        b"Op,id,v\nI,2,b\n",
    );
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    ingest(&w, &["dms"]).assert_success();
    expect(&w, "catalog.t", ID_V, id_v(&[(1, "a"), (2, "b")]), "final");
    assert!(w.wh().join("catalog.db").is_file());
}

fn mkfifo(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let ok = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", p.display());
}

fn symlink(target: &str, link: &Path) {
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Item 10: odd paths outside DMS table folders (a folder name no table can have, a dangling link,
/// a FIFO, a link loop, a DMS file name under a folder that is no table) stopped every table.
/// They are skipped and listed; every table applies; the exit code is 0.
#[test]
fn odd_paths_outside_table_folders_are_skipped_and_listed() {
    let w = Work::new("hostile_odd_paths");
    put(&w, "in/dms/s/t/LOAD00000001.csv", b"Op,id,v\nI,1,a\n");
    put(
        &w,
        "in/dms/s/t/20220302-1134010000.csv",
        b"Op,id,v\nI,2,b\n",
    );
    put(
        &w,
        "in/my data/dms/s/u/LOAD00000001.csv",
        b"Op,id,v\nI,3,c\n",
    );
    put(&w, "in/my notes/readme.txt", b"notes\n");
    // (A space is no longer odd: quoted source names have them, issue 16; a `.` cannot be one.)
    put(&w, "in/sa.les/t/LOAD00000001.csv", b"Op,id,v\nI,9,z\n");
    symlink("/nonexistent/dms2iceberg-test", &w.dir.join("in/broken"));
    symlink(".", &w.dir.join("in/dms/loop"));
    mkfifo(&w.dir.join("in/pipe"));
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    let r = ingest(&w, &["in"]).assert_success();
    for listed in [
        "my notes/readme.txt",
        "sa.les/t/LOAD00000001.csv",
        "broken",
        "pipe",
    ] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with("  ") && l.contains(listed)),
            "{listed} is not listed as skipped:\n{}",
            r.describe()
        );
    }
    assert!(r.stdout.contains("skipped 4 path(s)"), "{}", r.describe());
    expect(&w, "s.t", ID_V, id_v(&[(1, "a"), (2, "b")]), "t");
    expect(&w, "s.u", ID_V, id_v(&[(3, "c")]), "u");
}

/// Item 10: a DMS table's own bad file (a FIFO or a dangling link with a DMS file name) stops
/// that table at that file, naming it; other tables go on.
#[test]
fn a_fifo_or_dangling_link_in_a_table_folder_stops_only_that_table() {
    let w = Work::new("hostile_bad_table_files");
    put(&w, "dms/s/t/LOAD00000001.csv", b"Op,id,v\nI,1,a\n");
    put(&w, "dms/s/t/20220302-1134010000.csv", b"Op,id,v\nI,2,b\n");
    put(&w, "dms/s/u/LOAD00000001.csv", b"Op,id,v\nI,3,c\n");
    mkfifo(&w.dir.join("dms/s/u/20220302-1134010000.csv"));
    put(&w, "dms/s/u/20220302-1135010000.csv", b"Op,id,v\nI,4,d\n");
    put(&w, "dms/s/v/LOAD00000001.csv", b"Op,id,v\nI,5,e\n");
    symlink("gone.csv", &w.dir.join("dms/s/v/20220302-1134010000.csv"));
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    let r = ingest(&w, &["dms"]);
    fails_with(
        &r,
        &[
            "s/u/20220302-1134010000.csv",
            "not a regular file",
            "s/v/20220302-1134010000.csv",
            "symbolic link to a file that does not exist",
        ],
    );
    expect(&w, "s.t", ID_V, id_v(&[(1, "a"), (2, "b")]), "t");
    expect(&w, "s.u", ID_V, id_v(&[(3, "c")]), "u stops at the FIFO");
    expect(&w, "s.v", ID_V, id_v(&[(5, "e")]), "v stops at the link");
}

/// Item 11: with `bucket_folder = "shop"`, a schema also named `shop` (common with MySQL).
#[test]
fn a_schema_named_like_the_bucket_folder() {
    let w = Work::new("hostile_shop_shop");
    put(&w, "shop/shop/orders/LOAD00000001.csv", b"Op,id,v\nI,1,a\n");
    put(
        &w,
        "shop/shop/orders/2022/03/02/20220302-1134010000.csv",
        b"Op,id,v\nU,1,b\n",
    );
    put(
        &w,
        "shop/sales/orders/LOAD00000001.csv",
        b"Op,id,v\nI,2,c\n",
    );
    config(
        &w,
        "[source]\nbucket_folder = \"shop\"\n[defaults]\nprimary_key = [\"id\"]\n",
    );
    ingest(&w, &["shop"]).assert_success();
    expect(&w, "shop.orders", ID_V, id_v(&[(1, "b")]), "shop");
    expect(&w, "sales.orders", ID_V, id_v(&[(2, "c")]), "sales");
}

/// Item 12: a gzip'd Parquet file (gzip is detected by magic bytes) failed with "Corrupt footer".
#[test]
fn gzipped_parquet_is_read() {
    let w = Work::new("hostile_gzip_parquet");
    parquet(
        &w,
        "dms/s/t/LOAD00000001.parquet.gz",
        &[("I", 1, "a"), ("I", 2, "b")],
        true,
    );
    parquet(
        &w,
        "dms/s/t/20220302-1134010000.parquet",
        &[("U", 2, "c"), ("I", 3, "d")],
        true,
    );
    config(&w, "[defaults]\nprimary_key = [\"id\"]\n");
    ingest(&w, &["dms"]).assert_success();
    expect(
        &w,
        "s.t",
        ID_V,
        id_v(&[(1, "a"), (2, "c"), (3, "d")]),
        "final",
    );
}

/// Item 2/10: with a bucket folder, a DMS file in an unexpected folder of a table (a segment
/// folder without `parallel_load_folders`) stops that table, naming it, until it is moved or
/// listed under `skip_files`; other tables go on. It was merged into the table unseen.
#[test]
fn a_dms_file_in_an_unexpected_folder_stops_its_table() {
    let w = Work::new("hostile_unexpected_folder");
    put(&w, "dms/s/t/LOAD00000001.csv", b"Op,id,v\nI,1,a\n");
    put(&w, "dms/s/t/part2/LOAD00000002.csv", b"Op,id,v\nI,2,b\n");
    put(&w, "dms/s/u/LOAD00000001.csv", b"Op,id,v\nI,3,c\n");
    let base = "[source]\nbucket_folder = \"dms\"\n[defaults]\nprimary_key = [\"id\"]\n";
    config(&w, base);
    let r = ingest(&w, &["dms"]);
    fails_with(&r, &["part2/LOAD00000002.csv", "parallel_load_folders"]);
    expect(&w, "s.u", ID_V, id_v(&[(3, "c")]), "u");
    let tables = w.tables().assert_success();
    assert!(
        !tables.stdout.lines().any(|l| l == "s.t"),
        "{}",
        tables.describe()
    );
    config(
        &w,
        &format!("{base}[tables.\"s.t\"]\nskip_files = [\"part2/LOAD00000002.csv\"]\n"),
    );
    ingest(&w, &["dms"]).assert_success();
    expect(
        &w,
        "s.t",
        ID_V,
        id_v(&[(1, "a")]),
        "t without the stray file",
    );
}
