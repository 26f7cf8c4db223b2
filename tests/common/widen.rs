//! The widened-columns scenario (issue 48, part 2), shared by `tests/e2e/widen.rs` (our scan,
//! PyIceberg, DuckDB) and `tests/spark.rs` (Iceberg Java): a table whose columns widen (INT →
//! BIGINT, REAL → DOUBLE, DECIMAL(9,2) → DECIMAL(12,2)) as DMS files arrive, written here
//! (Parquet with Rust's writer, CSV as text) with the table's expected state after each file
//! computed by a model of the changes; then `rewrite-manifests` (when merging is off),
//! `compact` and one more file. Parquet widens by its declared types; CSV by the `columns`
//! pins, changed between calls as an operator would after the source's `ALTER TABLE`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Decimal128Array, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use serde_json::{Value, json};

use crate::common::*;

pub const TABLE: &str = "s.t";

/// A row of the source table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    id: i64,
    customer_id: Option<i64>,
    ratio: Option<f64>,
    /// In cents.
    amount: Option<i128>,
    note: String,
}

impl Row {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "customer_id": self.customer_id,
            "ratio": self.ratio,
            "amount": self.amount.map(cents),
            "note": self.note,
        })
    }
}

pub fn cents(c: i128) -> String {
    let sign = if c < 0 { "-" } else { "" };
    let a = c.unsigned_abs();
    format!("{sign}{}.{:02}", a / 100, a % 100)
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    I,
    U,
    D,
}

/// One DMS file: its name, whether its columns have the wide types, its changes.
pub struct DmsFile {
    name: String,
    wide: bool,
    changes: Vec<(Op, Row)>,
}

impl DmsFile {
    fn is_load(&self) -> bool {
        self.name.starts_with("LOAD")
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Format {
    Parquet,
    Csv,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Calls {
    /// Everything up to the compaction in as few ingest calls as the format allows (Parquet:
    /// one; CSV: one before and one after the pins change).
    One,
    /// A fresh process per file.
    Separate,
}

pub struct Case {
    pub name: &'static str,
    pub format: Format,
    pub calls: Calls,
    /// The primary key `id` widens too (int → long), and new keys are beyond the int range.
    pub key_widens: bool,
    /// `commit.manifest-merge.enabled`: with `false` the manifests of earlier commits stay as
    /// they were written until `rewrite-manifests`.
    pub merge: bool,
    /// `partition_by`, if any.
    pub partition_by: Option<&'static str>,
}

pub fn row(
    id: i64,
    customer_id: Option<i64>,
    ratio: Option<f64>,
    amount: Option<i128>,
    note: &str,
) -> Row {
    Row {
        id,
        customer_id,
        ratio,
        amount,
        note: note.to_string(),
    }
}

/// The files of a case, in DMS order. Values of the wide files need the wide types: customer
/// ids past the int range, doubles no float holds, amounts of 12 digits (and with
/// `key_widens`, new keys past the int range).
pub fn files(key_widens: bool) -> (Vec<DmsFile>, DmsFile) {
    let narrow = |id: i64, note: &str| {
        let null = id % 7 == 0;
        row(
            id,
            (!null).then_some(1000 + id),
            (!null).then_some(id as f64 * 0.25),
            (!null).then_some(i128::from(id) * 1234),
            note,
        )
    };
    let wide = |id: i64, note: &str| {
        row(
            id,
            Some(5_000_000_000 + id),
            // No float holds `<id>.1`; written out, it reads back as the same double (the
            // JSON parser of the comparison is exact for short numbers only).
            Some(format!("{id}.1").parse().unwrap()),
            Some(123_456_789_000 + i128::from(id)),
            note,
        )
    };
    // What a delete carries besides the key does not matter.
    let gone = |id: i64| row(id, None, None, None, "");
    let new_key = |k: i64| {
        if key_widens {
            3_000_000_000 + k
        } else {
            100 + k
        }
    };
    let load = DmsFile {
        name: "LOAD00000001".into(),
        wide: false,
        changes: (1..=60).map(|id| (Op::I, narrow(id, "load"))).collect(),
    };
    let mut c1 = Vec::new();
    c1.extend((1..=5).map(|id| (Op::U, narrow(id, "c1"))));
    c1.extend((6..=8).map(|id| (Op::D, gone(id))));
    c1.extend((61..=65).map(|id| (Op::I, narrow(id, "c1"))));
    // The widening file: updates of rows in the load's file and in c1's, deletes, new rows.
    let mut c2 = Vec::new();
    c2.push((Op::U, wide(1, "c2")));
    c2.extend((9..=14).map(|id| (Op::U, wide(id, "c2"))));
    c2.extend((15..=17).map(|id| (Op::D, gone(id))));
    c2.push((Op::D, gone(62)));
    c2.extend((1..=5).map(|k| (Op::I, wide(new_key(k), "c2"))));
    // After the widening: rows of every earlier file changed again.
    let c3 = vec![
        (Op::U, wide(2, "c3")),
        (Op::U, wide(9, "c3")),
        (Op::U, wide(20, "c3")),
        (Op::U, wide(63, "c3")),
        (Op::D, gone(new_key(1))),
        (Op::D, gone(21)),
        (Op::U, wide(new_key(2), "c3")),
        (Op::I, wide(new_key(6), "c3")),
    ];
    // A narrow file after the widening (its values cast up as they are read).
    let c4 = vec![
        (Op::U, narrow(22, "c4")),
        (Op::U, narrow(10, "c4")),
        (Op::D, gone(23)),
        (Op::I, narrow(70, "c4")),
    ];
    // After compaction.
    let c5 = vec![
        (Op::U, wide(24, "c5")),
        (Op::U, wide(11, "c5")),
        (Op::U, wide(new_key(3), "c5")),
        (Op::D, gone(25)),
        (Op::D, gone(new_key(4))),
        (Op::I, wide(new_key(7), "c5")),
    ];
    // c4 is narrow: its keys must fit an int.
    let before_compaction = vec![
        load,
        DmsFile {
            name: "20240101-100000000".into(),
            wide: false,
            changes: c1,
        },
        DmsFile {
            name: "20240101-110000000".into(),
            wide: true,
            changes: c2,
        },
        DmsFile {
            name: "20240101-120000000".into(),
            wide: true,
            changes: c3,
        },
        DmsFile {
            name: "20240101-130000000".into(),
            wide: false,
            changes: c4,
        },
    ];
    let after = DmsFile {
        name: "20240101-140000000".into(),
        wide: true,
        changes: c5,
    };
    (before_compaction, after)
}

/// The types of a file's columns (`key_widens` false: the key stays int in wide files too).
pub fn types(wide: bool, key_widens: bool) -> [(&'static str, &'static str); 5] {
    [
        ("id", if wide && key_widens { "long" } else { "int" }),
        ("customer_id", if wide { "long" } else { "int" }),
        ("ratio", if wide { "double" } else { "float" }),
        (
            "amount",
            if wide {
                "decimal(12,2)"
            } else {
                "decimal(9,2)"
            },
        ),
        ("note", "string"),
    ]
}

pub fn write_parquet(path: &PathBuf, f: &DmsFile, key_widens: bool) {
    let wide_key = f.wide && key_widens;
    let rows = &f.changes;
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    if !f.is_load() {
        fields.push(Field::new("Op", DataType::Utf8, false));
        let ops: Vec<&str> = rows
            .iter()
            .map(|(op, _)| match op {
                Op::I => "I",
                Op::U => "U",
                Op::D => "D",
            })
            .collect();
        columns.push(Arc::new(StringArray::from(ops)));
    }
    let ids = rows.iter().map(|(_, r)| r.id);
    if wide_key {
        fields.push(Field::new("id", DataType::Int64, false));
        columns.push(Arc::new(Int64Array::from_iter_values(ids)));
    } else {
        fields.push(Field::new("id", DataType::Int32, false));
        let ids = ids.map(|v| i32::try_from(v).expect("a narrow file's key fits an int"));
        columns.push(Arc::new(Int32Array::from_iter_values(ids)));
    }
    let customers = rows.iter().map(|(_, r)| r.customer_id);
    let ratios = rows.iter().map(|(_, r)| r.ratio);
    let amounts: Vec<Option<i128>> = rows.iter().map(|(_, r)| r.amount).collect();
    if f.wide {
        fields.push(Field::new("customer_id", DataType::Int64, true));
        columns.push(Arc::new(customers.collect::<Int64Array>()));
        fields.push(Field::new("ratio", DataType::Float64, true));
        columns.push(Arc::new(ratios.collect::<Float64Array>()));
        fields.push(Field::new("amount", DataType::Decimal128(12, 2), true));
        columns.push(Arc::new(
            Decimal128Array::from(amounts)
                .with_precision_and_scale(12, 2)
                .unwrap(),
        ));
    } else {
        fields.push(Field::new("customer_id", DataType::Int32, true));
        let c: Int32Array = customers
            .map(|v| v.map(|v| i32::try_from(v).expect("a narrow file's value fits an int")))
            .collect();
        columns.push(Arc::new(c));
        fields.push(Field::new("ratio", DataType::Float32, true));
        let r: Float32Array = ratios.map(|v| v.map(|v| v as f32)).collect();
        columns.push(Arc::new(r));
        fields.push(Field::new("amount", DataType::Decimal128(9, 2), true));
        columns.push(Arc::new(
            Decimal128Array::from(amounts)
                .with_precision_and_scale(9, 2)
                .unwrap(),
        ));
    }
    fields.push(Field::new("note", DataType::Utf8, true));
    let notes: Vec<&str> = rows.iter().map(|(_, r)| r.note.as_str()).collect();
    columns.push(Arc::new(StringArray::from(notes)));
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

pub fn write_csv(path: &PathBuf, f: &DmsFile) {
    let mut s = String::new();
    if !f.is_load() {
        s.push_str("Op,");
    }
    s.push_str("id,customer_id,ratio,amount,note\n");
    let opt = |v: Option<String>| v.unwrap_or_default();
    for (op, r) in &f.changes {
        if !f.is_load() {
            s.push_str(match op {
                Op::I => "I,",
                Op::U => "U,",
                Op::D => "D,",
            });
        }
        s.push_str(&format!(
            "{},{},{},{},{}\n",
            r.id,
            opt(r.customer_id.map(|v| v.to_string())),
            opt(r.ratio.map(|v| v.to_string())),
            opt(r.amount.map(cents)),
            r.note
        ));
    }
    std::fs::write(path, s).unwrap();
}

/// The test's config: the key, the merge setting, and for CSV the pins of `wide` types.
pub fn config(case: &Case, wide: bool) -> String {
    let mut c = format!("[tables.\"{TABLE}\"]\nprimary_key = [\"id\"]\n");
    if !case.merge {
        c.push_str("properties = { \"commit.manifest-merge.enabled\" = \"false\" }\n");
    }
    if let Some(p) = case.partition_by {
        c.push_str(&format!("partition_by = [\"{p}\"]\n"));
    }
    if case.format == Format::Csv {
        let pins: Vec<String> = types(wide, case.key_widens)[..4]
            .iter()
            .map(|(n, t)| format!("{{ name = \"{n}\", type = \"{t}\" }}"))
            .collect();
        c.push_str(&format!("columns = [{}]\n", pins.join(", ")));
    }
    c
}

/// Writes `f` into the DMS tree; its path.
pub fn place(w: &Work, case: &Case, f: &DmsFile) -> PathBuf {
    let dir = w.dms().join("s/t");
    std::fs::create_dir_all(&dir).unwrap();
    match case.format {
        Format::Parquet => {
            let p = dir.join(format!("{}.parquet", f.name));
            write_parquet(&p, f, case.key_widens);
            p
        }
        Format::Csv => {
            let p = dir.join(format!("{}.csv", f.name));
            write_csv(&p, f);
            p
        }
    }
}

/// The model: the table's rows after each file, by key.
#[derive(Default, Clone)]
pub struct Model(BTreeMap<i64, Row>);

impl Model {
    fn apply(&mut self, f: &DmsFile) {
        for (op, r) in &f.changes {
            match op {
                Op::I | Op::U => {
                    self.0.insert(r.id, r.clone());
                }
                Op::D => {
                    self.0.remove(&r.id);
                }
            }
        }
    }
    fn rows(&self) -> Vec<Value> {
        self.0.values().map(Row::json).collect()
    }
}

/// What the readers compare by: the key and the widened types.
pub fn write_meta(w: &Work, key_widens: bool) {
    let columns: serde_json::Map<String, Value> = types(true, key_widens)
        .iter()
        .map(|(n, t)| (n.to_string(), json!(t)))
        .collect();
    let meta = json!({
        "table": TABLE,
        "dms_table": TABLE,
        "primary_key": ["id"],
        "columns": columns,
        "files": [],
        "pending_files": [],
        "mode": "upsert",
    });
    w.write_file(
        &format!("expected/{TABLE}.meta.json"),
        &serde_json::to_string_pretty(&meta).unwrap(),
    );
}

/// `dms2iceberg ARGS… --warehouse wh --catalog-name CATALOG`, succeeded.
fn cli(w: &Work, catalog: &str, args: &[&str]) -> Run {
    let wh = w.wh().display().to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--warehouse", &wh, "--catalog-name", catalog]);
    w.cli(&a).assert_success()
}

/// The Iceberg type of each column in the table's current schema, and its `format-version`
/// (from its metadata.json).
pub fn table_types(w: &Work) -> BTreeMap<String, String> {
    let db = w.wh().join("catalog.db");
    let code = format!(
        "import sqlite3, json\n\
         con = sqlite3.connect({:?})\n\
         loc = con.execute(\"SELECT metadata_location FROM iceberg_tables WHERE table_name='t'\").fetchone()[0]\n\
         md = json.load(open(loc.removeprefix('file://')))\n\
         s = [s for s in md['schemas'] if s['schema-id'] == md['current-schema-id']][0]\n\
         types = {{f['name']: f['type'] for f in s['fields']}}\n\
         types['format-version'] = str(md['format-version'])\n\
         print(json.dumps(types))\n",
        db.display().to_string()
    );
    let r = run(&python(), ["-c", code.as_str()]).assert_success();
    serde_json::from_str(r.stdout.trim()).unwrap()
}

/// A snapshot of the table and the rows it holds.
pub struct Snapshot {
    pub id: i64,
    pub operation: String,
    pub rows: Vec<Value>,
}

/// Builds the case's table in `w`, `check`ing the table against the model after each ingest
/// call and maintenance command (`check(rows, label)`); every snapshot, oldest first, with the
/// state after the last DMS file it holds (a compaction or manifest rewrite holds what its
/// parent held).
pub fn build(w: &Work, case: &Case, check: &mut dyn FnMut(&[Value], &str)) -> Vec<Snapshot> {
    build_in(w, "default", case, check)
}

/// [`build`] with the table under `catalog` in `catalog.db` (`--catalog-name`: Iceberg's
/// JdbcCatalog in Spark looks it up by the Spark catalog's name).
pub fn build_in(
    w: &Work,
    catalog: &str,
    case: &Case,
    check: &mut dyn FnMut(&[Value], &str),
) -> Vec<Snapshot> {
    let cfg = w.config().display().to_string();
    write_meta(w, case.key_widens);
    let (before, after) = files(case.key_widens);
    std::fs::write(w.config(), config(case, false)).unwrap();

    // Ingest calls: lists of files; the config's pins widen before the first wide file (CSV).
    let mut calls: Vec<Vec<usize>> = match case.calls {
        Calls::Separate => (0..before.len()).map(|i| vec![i]).collect(),
        Calls::One => match case.format {
            Format::Parquet => vec![(0..before.len()).collect()],
            Format::Csv => {
                let first_wide = before.iter().position(|f| f.wide).unwrap();
                vec![
                    (0..first_wide).collect(),
                    (first_wide..before.len()).collect(),
                ]
            }
        },
    };
    // The expected state after each file, by file name.
    let mut model = Model::default();
    let mut after_file: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for call in calls.drain(..) {
        if case.format == Format::Csv && call.iter().any(|&i| before[i].wide) {
            std::fs::write(w.config(), config(case, true)).unwrap();
        }
        let paths: Vec<PathBuf> = call.iter().map(|&i| place(w, case, &before[i])).collect();
        let mut args: Vec<String> = vec!["ingest".into()];
        args.extend(paths.iter().map(|p| p.display().to_string()));
        args.extend(["--config".into(), cfg.clone()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(w, catalog, &args);
        for &i in &call {
            model.apply(&before[i]);
            after_file.insert(before[i].name.clone(), model.rows());
        }
        check(
            &model.rows(),
            &format!("after-{}", before[*call.last().unwrap()].name),
        );
    }
    let want_types = types(true, case.key_widens);
    let got_types = table_types(w);
    // `scripts/test` runs this suite again on v3 tables (deletion vectors, row lineage).
    let version = std::env::var("DMS2ICEBERG_FORMAT_VERSION").unwrap_or_else(|_| "2".into());
    assert_eq!(got_types["format-version"], version);
    for (n, t) in want_types {
        assert_eq!(
            got_types[n].replace(' ', ""),
            t,
            "column {n}: {got_types:?}"
        );
    }

    if !case.merge {
        cli(w, catalog, &["rewrite-manifests", TABLE]);
        check(&model.rows(), "after-rewrite-manifests");
    }
    cli(w, catalog, &["compact", TABLE]);
    check(&model.rows(), "after-compact");

    let p = place(w, case, &after);
    let p = p.display().to_string();
    cli(w, catalog, &["ingest", &p, "--config", &cfg]);
    model.apply(&after);
    after_file.insert(after.name.clone(), model.rows());
    check(&model.rows(), "after-compaction-and-more");

    let hist = cli(w, catalog, &["history", TABLE, "--format", "json"]);
    let hist = parse_json_lines(&hist.stdout, "history");
    let mut state: Option<&Vec<Value>> = None;
    let mut out = Vec::with_capacity(hist.len());
    for (i, snap) in hist.iter().enumerate() {
        let sources: Vec<&str> = snap["source_files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        if let Some(last) = sources.last() {
            let name = last.rsplit('/').next().unwrap().split('.').next().unwrap();
            state = Some(&after_file[name]);
        }
        let rows = state.unwrap_or_else(|| panic!("snapshot #{i} holds no DMS file: {snap}"));
        out.push(Snapshot {
            id: snap["snapshot_id"].as_i64().unwrap(),
            operation: snap["operation"].as_str().unwrap_or_default().to_string(),
            rows: rows.clone(),
        });
    }
    assert!(
        out.iter().any(|s| s.operation == "replace"),
        "compaction committed a snapshot"
    );
    out
}
