//! Lossless types through the CLI on generated DMS trees (tests/support/dmsgen.py `--dms-types`:
//! a zip-code column whose full load has no leading zeros but whose change files do, and DMS
//! doubles written as DMS writes them, `+5.0656025000000000e+05`): a value is stored only if it
//! converts exactly; `columns` entries pin types on files with a header; DMS TIME columns are
//! stored as `time_type` says. Whole tables against the generator's model, through our scan,
//! PyIceberg and DuckDB.

use crate::common::*;

const TABLE: &str = "shop.orders";

fn small(extra: &[&'static str]) -> Vec<&'static str> {
    let mut a = vec![
        "--rows",
        "80",
        "--cdc-files",
        "3",
        "--cdc-rows",
        "40",
        "--nasty-ratio",
        "0",
        "--dms-types",
    ];
    a.extend_from_slice(extra);
    a
}

/// The first change file, and the line and value of its first zip code with a leading zero
/// (records are one line each: `--nasty-ratio 0`).
fn first_leading_zero(w: &Work) -> (String, usize, String) {
    let dir = w.dms().join("shop/orders");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("2022"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(dir.join(&f)).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let zip = header.iter().position(|h| *h == "zip").unwrap();
        for (i, l) in lines.enumerate() {
            let v = l.split(',').nth(zip).unwrap_or_default();
            if v.len() > 1 && v.starts_with('0') {
                return (f, i + 2, v.to_string());
            }
        }
    }
    panic!("no zip code with a leading zero was generated");
}

/// `01307` into a column inferred as long (from `51003`-like values of the full load) fails
/// the file naming file, line, column and the config that would pin the type; nothing of that
/// file is committed, and the table stays as the full load left it.
#[test]
fn leading_zeros_fail_the_file_and_name_the_fix() {
    let w = Work::new("leading_zeros");
    w.generate(
        "synthetic",
        &small(&["--pin", "weight=decimal(20,2)", "--pin", "units=long"]),
    );
    let (file, line, value) = first_leading_zero(&w);
    let r = w.ingest();
    assert!(!r.status.success(), "ingest must fail:\n{}", r.describe());
    let err = &r.stderr;
    for want in [
        format!("{file}, line {line}, column `zip`: `{value}` has leading zeros"),
        "FAILED".to_string(),
        "columns = [{ name = \"zip\", type = \"string\" }]".to_string(),
        "[tables.\"shop.orders\"]".to_string(),
    ] {
        assert!(
            err.contains(&want),
            "stderr lacks {want:?}:\n{}",
            r.describe()
        );
    }
    assert_eq!(
        err.matches("has leading zeros").count(),
        1,
        "the error is printed once:\n{err}"
    );
    let after_load = &w.asof(TABLE)[0];
    assert!(after_load.after_file.contains("LOAD00000001"));
    w.assert_table_rows(TABLE, &after_load.rows, "after-load");
}

/// Pinned types with a header: `columns` names three of the file's eleven columns and only pins
/// their types (zip as string keeps its zeros; DMS doubles exact into decimal and long).
#[test]
fn partial_overrides_pin_types_exactly() {
    let w = Work::new("pinned");
    w.generate(
        "synthetic",
        &small(&[
            "--pin",
            "zip=string",
            "--pin",
            "weight=decimal(20,2)",
            "--pin",
            "units=long",
        ]),
    );
    let cfg = std::fs::read_to_string(w.config()).unwrap();
    assert!(
        cfg.contains("{ name = \"zip\", type = \"string\" }") && !cfg.contains("header"),
        "{cfg}"
    );
    w.ingest().assert_success();
    w.assert_table(TABLE);
    let rows = w.scan(TABLE, &[]);
    assert!(
        rows.iter()
            .any(|r| r["zip"].as_str().is_some_and(|z| z.starts_with('0'))),
        "a zip code keeps its leading zero"
    );
    assert!(rows.iter().all(|r| r["units"].is_i64()), "units are longs");
}

/// Without pins, DMS doubles infer as double (zip pinned, so the changes apply).
#[test]
fn exponent_doubles_infer_double() {
    let w = Work::new("doubles");
    w.generate("synthetic", &small(&["--pin", "zip=string"]));
    let meta = w.meta(TABLE);
    assert_eq!(meta.columns["weight"], "double");
    w.ingest().assert_success();
    w.assert_table(TABLE);
}

/// DMS TIME columns (Parquet TIME32): stored as text by default, as microseconds with
/// `time_type = "long"`; a table created with Iceberg `time` keeps it when the setting changes.
#[test]
fn time_columns_follow_time_type() {
    for (args, ty) in [(vec![], "string"), (vec!["--time-type", "long"], "long")] {
        let w = Work::new(&format!("time_{ty}"));
        let mut a = vec![
            "--format",
            "parquet",
            "--rows",
            "60",
            "--cdc-files",
            "2",
            "--cdc-rows",
            "30",
        ];
        a.extend(args);
        w.generate("synthetic", &a);
        assert_eq!(w.meta(TABLE).columns["ship_time"], ty);
        w.ingest().assert_success();
        w.assert_table(TABLE);
    }
    let w = Work::new("time_kept");
    w.generate(
        "synthetic",
        &[
            "--format",
            "parquet",
            "--rows",
            "60",
            "--cdc-files",
            "3",
            "--cdc-rows",
            "30",
            "--time-type",
            "time",
            "--pending-from-file",
            "2",
        ],
    );
    w.ingest().assert_success();
    w.assert_table_rows(TABLE, &w.expected_initial(TABLE), "initial");
    let cfg = std::fs::read_to_string(w.config()).unwrap();
    std::fs::write(
        w.config(),
        cfg.replace("time_type = \"time\"", "time_type = \"string\""),
    )
    .unwrap();
    w.promote_pending();
    w.ingest().assert_success();
    // meta still says `time`: the existing column keeps its type.
    w.assert_table(TABLE);
}

/// DMS writes a REAL8 as `%.16e`: 0.99 arrives as `+9.8999999999999999e-01`. Pinned to
/// `decimal(10,2)`, each value is the decimal at that scale whose nearest double it is (the
/// cents the source held); a value no such decimal is (0.125) fails its file naming file, line
/// and column, and nothing of that file is committed.
#[test]
fn dms_doubles_pinned_to_decimal_keep_their_cents() {
    let w = Work::new("prices");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "80",
            "--cdc-files",
            "3",
            "--cdc-rows",
            "40",
            "--nasty-ratio",
            "0",
            "--dms-prices",
            "--pin",
            "price=decimal(10,2)",
        ],
    );
    assert_eq!(w.meta(TABLE).columns["price"], "decimal(10,2)");
    let dir = w.dms().join("shop/orders");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("2022"))
        .collect();
    files.sort();
    let last = std::fs::read_to_string(dir.join(files.last().unwrap())).unwrap();
    assert!(
        last.contains("+9.8999999999999999e-01") || last.contains("e-0"),
        "prices are written as DMS doubles:\n{last}"
    );
    w.ingest().assert_success();
    w.assert_table(TABLE);

    // 0.125 is exact in binary, and neither 0.12 nor 0.13 is that double.
    let mut lines = last.lines();
    let header = lines.next().unwrap();
    let price = header.split(',').position(|h| h == "price").unwrap();
    let record = lines.next().unwrap();
    let mut fields: Vec<&str> = record.split(',').collect();
    fields[price] = "+1.2500000000000000e-01";
    let bad = "20991231-0000000000.csv";
    w.write_file(
        &format!("dms/shop/orders/{bad}"),
        &format!("{header}\n{}\n", fields.join(",")),
    );
    let before = w.scan(TABLE, &[]);
    let r = w.ingest();
    assert!(!r.status.success(), "ingest must fail:\n{}", r.describe());
    let want = format!(
        "{bad}, line 2, column `price`: `+1.2500000000000000e-01` has more than 2 decimal places"
    );
    assert!(
        r.stderr.contains(&want),
        "stderr lacks {want:?}:\n{}",
        r.describe()
    );
    assert_eq!(
        w.scan(TABLE, &[]),
        before,
        "nothing of the bad file is committed"
    );
}
