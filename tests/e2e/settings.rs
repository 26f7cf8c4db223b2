//! DMS endpoint settings that change what a change row means (issue 26): `CsvNoSupValue`
//! (`no_sup_value`: a column an update did not supply keeps the row's value). Whole tables
//! against the generator's model through our scan, PyIceberg and DuckDB.

use crate::common::*;

const TABLE: &str = "shop.orders";

/// Updates from a source that logs only the columns they change carry the marker in the
/// others (customer_id, and status, amount, note when unchanged): every such column keeps the
/// key's value, from the table (a file per commit) or from an earlier change of the key in the
/// same commit (four files per commit, and changes of one key within a file); inserts and
/// deletes are as DMS wrote them.
#[test]
fn unsupplied_columns_keep_the_rows_values() {
    for per_commit in ["1", "4"] {
        let w = Work::new(&format!("no_sup_{per_commit}"));
        w.generate(
            "synthetic",
            &[
                "--rows",
                "200",
                "--cdc-files",
                "5",
                "--cdc-rows",
                "120",
                "--no-sup-value",
                "_NOSUP_",
                "--seed",
                "2602",
            ],
        );
        let changed: usize = std::fs::read_dir(w.dms().join("shop/orders"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .map(|t| t.matches("_NOSUP_").count())
            .sum();
        assert!(
            changed > 100,
            "the tree carries the marker ({changed} times)"
        );
        let reports = w.ingest_json_with(&[w.dms()], &["--files-per-commit", per_commit]);
        assert!(
            reports.iter().all(|r| r["status"] == "applied"),
            "{reports:?}"
        );
        w.assert_table(TABLE);
    }
}

/// An insert has no current row: the marker in it fails its file naming file, line and
/// column, and nothing of that file is committed.
#[test]
fn an_insert_with_the_marker_is_refused() {
    let w = Work::plain("no_sup_insert");
    w.write_file("dms/s/t/LOAD00000001.csv", "Op,id,a,b\nI,1,a1,b1\n");
    w.write_file(
        "dms/s/t/20220302-1134010000.csv",
        "Op,id,a,b\nU,1,_NS_,B1\nI,2,_NS_,b2\n",
    );
    std::fs::write(
        w.config(),
        "[tables.\"s.t\"]\nprimary_key = [\"id\"]\nno_sup_value = \"_NS_\"\n",
    )
    .unwrap();
    let r = w.ingest();
    assert!(!r.status.success(), "{}", r.describe());
    let want = "20220302-1134010000.csv, line 3, column `a`: an insert carries `_NS_`";
    assert!(
        r.stderr.contains(want),
        "stderr lacks {want:?}:\n{}",
        r.describe()
    );
    assert_eq!(w.scan_csv("s.t"), "id,a,b\n1,a1,b1\n", "only the full load");
}

/// `PreserveTransactions=true` with `CdcPath`: the changes of two tables interleaved in shared
/// `CDC_TXN-*.csv` files (headerless `op,TABLE,SCHEMA,field…`, quoted line breaks included),
/// full loads in the table folders. Each table applies its rows of each file once, in file
/// order; a bad row of one table holds back that table only.
#[test]
fn transaction_files_apply_to_every_table_they_name() {
    let (w, names) = two_tables_in_transaction_files("cdc_txn", [31, 32], &["150", "60"], &[]);
    assert_eq!(names.len(), 4, "{names:?}");
    let txn = w.dms().join("cdc");
    let first = std::fs::read_to_string(txn.join(&names[0])).unwrap();
    assert!(
        first.contains(",orders,shop,") && first.contains(",items,shop,"),
        "one file holds both tables:\n{first}"
    );
    w.ingest().assert_success();
    w.assert_table("shop.orders");
    w.assert_table("shop.items");
    let again = w.ingest_json(&[w.dms()]);
    assert!(again.iter().all(|r| r["status"] != "applied"), "{again:?}");

    // A bad value in one table's row of the third file: that table stops before the file,
    // the other table applies it and the rest.
    let (w, names) = two_tables_in_transaction_files(
        "cdc_txn_bad",
        [33, 34],
        &["80", "30"],
        &["--nasty-ratio", "0"],
    );
    let third = w.dms().join("cdc").join(&names[2]);
    let text = std::fs::read_to_string(&third).unwrap();
    let (line, row) = text
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains(",items,shop,"))
        .unwrap();
    let mut fields: Vec<&str> = row.split(',').collect();
    fields[6] = "12x4"; // amount: op, table, schema, order_id, customer_id, status, amount
    let bad = fields.join(",");
    std::fs::write(&third, text.replacen(row, &bad, 1)).unwrap();
    let r = w.ingest();
    assert!(!r.status.success(), "{}", r.describe());
    let want = format!("{}, line {}, column `amount`", names[2], line + 1);
    assert!(
        r.stderr.contains(&want),
        "stderr lacks {want:?}:\n{}",
        r.describe()
    );
    w.assert_table("shop.orders");
    let items = w.asof("shop.items");
    w.assert_table_rows("shop.items", &items[2].rows, "before-the-bad-file");
}

/// Tables `orders` and `items` generated into shared transaction files under `cdc/` (four of
/// them, `[rows, cdc_rows]` per table), with the files' names in order.
fn two_tables_in_transaction_files(
    name: &str,
    seeds: [u64; 2],
    [rows, cdc_rows]: &[&str; 2],
    extra: &[&str],
) -> (Work, Vec<String>) {
    let w = Work::new(name);
    for (table, seed) in ["orders", "items"].into_iter().zip(seeds) {
        let seed = seed.to_string();
        let mut args = vec![
            "--cdc-path",
            "cdc",
            "--table",
            table,
            "--rows",
            rows,
            "--cdc-files",
            "4",
            "--cdc-rows",
            cdc_rows,
            "--seed",
            &seed,
        ];
        args.extend_from_slice(extra);
        w.generate("synthetic", &args);
    }
    let mut names: Vec<String> = std::fs::read_dir(w.dms().join("cdc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    (w, names)
}
