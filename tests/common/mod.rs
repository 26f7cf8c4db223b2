//! Helpers for the end-to-end tests of the `dms2iceberg` binary.
//!
//! The tests drive three programs:
//! - `tests/support/dmsgen.py` writes a DMS output tree plus the expected table state
//!   (computed by its own model) and a `config.toml`;
//! - the `dms2iceberg` binary ingests the tree and scans the table (`--format json`);
//! - `tests/support/check_readers.py` reads the same table with PyIceberg and DuckDB.
//!
//! Python comes from `DMS2ICEBERG_PYTHON`, which `scripts/test` sets up (a venv with the
//! pinned PyIceberg / DuckDB / pyarrow). What needs no Python (running the binary, work dirs,
//! JSON lines) is in `cli.rs`, re-exported here; the fast tier includes that file alone.
#![allow(dead_code)]

mod cli;
pub use cli::*;
/// An Iceberg REST catalog server for the tests (rustberg).
pub mod rest;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use cli::truncate;

/// The Python interpreter of the test venv.
pub fn python() -> PathBuf {
    match std::env::var_os("DMS2ICEBERG_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "DMS2ICEBERG_PYTHON is not set.\n\
             The end-to-end tests need the Python test tools (DMS generator, PyIceberg, DuckDB).\n\
             Run the tests with `scripts/test` (it creates .venv and sets DMS2ICEBERG_PYTHON), or\n\
             run `scripts/test` once and then `DMS2ICEBERG_PYTHON=$PWD/.venv/bin/python cargo test`."
        ),
    }
}

/// `expected/<table>.meta.json` written by dmsgen.
#[derive(Debug, Clone)]
pub struct Meta {
    pub table: String,
    pub dms_table: String,
    pub primary_key: Vec<String>,
    /// column (lower-case) -> Iceberg type name
    pub columns: BTreeMap<String, String>,
    /// DMS files in apply order, relative to `dms/`
    pub files: Vec<String>,
    pub pending_files: Vec<String>,
    /// The config's `mode`: with `append` or `changelog` the table has no key, `primary_key`
    /// only says what rows are compared by, and a scan returns them in no particular order.
    pub mode: String,
}

impl Meta {
    fn from_json(v: &Value) -> Meta {
        let strs = |k: &str| -> Vec<String> {
            v[k].as_array()
                .unwrap_or_else(|| panic!("meta.json: {k} missing"))
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect()
        };
        Meta {
            table: v["table"].as_str().unwrap().to_string(),
            dms_table: v["dms_table"].as_str().unwrap().to_string(),
            primary_key: strs("primary_key"),
            columns: v["columns"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, t)| (k.clone(), t.as_str().unwrap().to_string()))
                .collect(),
            files: strs("files"),
            mode: v["mode"].as_str().unwrap_or("upsert").to_string(),
            pending_files: strs("pending_files"),
        }
    }
}

/// State after one DMS file (from `expected/<table>.asof.json`).
#[derive(Debug, Clone)]
pub struct Step {
    pub after_file: String,
    pub pending: bool,
    pub rows: Vec<Value>,
}

/// What `--corrupt` broke (from `expected/<table>.corrupt.json`).
#[derive(Debug, Clone)]
pub struct Corrupt {
    pub kind: String,
    /// relative to the work dir after `promote_pending`, e.g. `dms/shop/orders/2022….csv`
    pub file: Option<String>,
    pub line: Option<u64>,
    pub record: Option<u64>,
    pub column: Option<String>,
    pub table: String,
}

impl Work {
    /// [`Work::plain`], after checking that the Python test tools are set up (failing early,
    /// with instructions, if not).
    pub fn new(name: &str) -> Work {
        python();
        Work::plain(name)
    }

    pub fn expected_path(&self, table: &str) -> PathBuf {
        self.dir.join("expected").join(format!("{table}.jsonl"))
    }
    pub fn meta_path(&self, table: &str) -> PathBuf {
        self.dir.join("expected").join(format!("{table}.meta.json"))
    }

    /// `dmsgen.py <scenario> --out DIR <args…>`; panics if the generator fails.
    pub fn generate(&self, scenario: &str, args: &[&str]) {
        let mut a: Vec<String> = vec![
            support("dmsgen.py").display().to_string(),
            scenario.to_string(),
            "--out".to_string(),
            self.dir.display().to_string(),
        ];
        a.extend(args.iter().map(|s| s.to_string()));
        run(&python(), &a).assert_success();
    }

    pub fn meta(&self, table: &str) -> Meta {
        Meta::from_json(&read_json(&self.meta_path(table)))
    }
    pub fn expected(&self, table: &str) -> Vec<Value> {
        read_jsonl(&self.expected_path(table))
    }
    pub fn expected_initial(&self, table: &str) -> Vec<Value> {
        read_jsonl(
            &self
                .dir
                .join("expected")
                .join(format!("{table}.initial.jsonl")),
        )
    }
    pub fn asof(&self, table: &str) -> Vec<Step> {
        let v = read_json(&self.dir.join("expected").join(format!("{table}.asof.json")));
        v.as_array()
            .expect("asof.json is a list")
            .iter()
            .map(|s| Step {
                after_file: s["after_file"].as_str().unwrap().to_string(),
                pending: s["pending"].as_bool().unwrap_or(false),
                rows: s["rows"].as_array().unwrap().clone(),
            })
            .collect()
    }
    pub fn corrupt(&self, table: &str) -> Corrupt {
        let v = read_json(
            &self
                .dir
                .join("expected")
                .join(format!("{table}.corrupt.json")),
        );
        let s = |k: &str| v[k].as_str().map(str::to_string);
        Corrupt {
            kind: s("kind").unwrap(),
            file: s("file"),
            line: v["line"].as_u64(),
            record: v["record"].as_u64(),
            column: s("column"),
            table: s("table").unwrap(),
        }
    }

    /// Moves everything under `pending/dms` into `dms` (the next batch DMS "uploads").
    pub fn promote_pending(&self) {
        let from = self.dir.join("pending").join("dms");
        move_tree(&from, &self.dms());
    }

    /// `check_readers.py` (PyIceberg + DuckDB) on `table` against an expected JSON-lines file.
    fn run_check_readers(&self, table: &str, expected: &Path, extra: &[String]) -> Run {
        let mut a: Vec<String> = vec![
            support("check_readers.py").display().to_string(),
            "--warehouse".into(),
            self.wh().display().to_string(),
            "--table".into(),
            table.into(),
            "--expected".into(),
            expected.display().to_string(),
            "--meta".into(),
            self.meta_path(table).display().to_string(),
        ];
        a.extend_from_slice(extra);
        let r = run(&python(), &a);
        if !r.status.success() {
            panic!(
                "independent readers disagree with the expected state of {table} (work dir {}):\n{}",
                self.dir.display(),
                r.describe()
            );
        }
        r
    }

    /// Runs check_readers.py (PyIceberg + DuckDB) against an expected JSON-lines file.
    pub fn check_readers(&self, table: &str, expected: &Path, snapshot: Option<i64>) {
        let extra: Vec<String> = snapshot
            .map(|id| vec!["--snapshot-id".into(), id.to_string()])
            .unwrap_or_default();
        self.run_check_readers(table, expected, &extra);
    }

    /// PyIceberg and DuckDB read the table (each `repeat` times, checked against the expected
    /// state): median seconds per read, by reader.
    pub fn reader_times(&self, table: &str, repeat: usize) -> Vec<(String, f64)> {
        let extra = ["--repeat".to_string(), repeat.to_string()];
        let r = self.run_check_readers(table, &self.expected_path(table), &extra);
        r.stdout
            .lines()
            .filter_map(|l| {
                let name = l.strip_prefix('[')?.split(']').next()?.to_string();
                let secs = l.rsplit("read_s=").next()?.trim().parse().ok()?;
                Some((name, secs))
            })
            .collect()
    }

    /// scan == expected/<table>.jsonl, and PyIceberg + DuckDB agree.
    pub fn assert_table(&self, table: &str) {
        let meta = self.meta(table);
        let expected = self.expected(table);
        let actual = self.scan(table, &[]);
        assert_rows(&format!("scan {table}"), &meta, &expected, &actual);
        self.check_readers(table, &self.expected_path(table), None);
    }

    /// scan == the given rows (and the readers agree, via a temporary expected file).
    pub fn assert_table_rows(&self, table: &str, expected: &[Value], label: &str) {
        let meta = self.meta(table);
        let actual = self.scan(table, &[]);
        assert_rows(&format!("scan {table} ({label})"), &meta, expected, &actual);
        let p = self.write_jsonl(&format!("{table}.{label}.expected.jsonl"), expected);
        self.check_readers(table, &p, None);
    }
}

fn move_tree(from: &Path, to: &Path) {
    if !from.exists() {
        return;
    }
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            move_tree(&e.path(), &dest);
        } else {
            std::fs::rename(e.path(), &dest).unwrap();
        }
    }
}

// ------------------------------------------------------------------------------------------
// Row comparison: exact, tolerant of representation where the JSON contract allows it
// (decimals by value, integers as integers), with a readable diff.

/// Canonical text of a decimal number: no leading/trailing zeros, no "-0".
pub fn canon_decimal(v: &Value) -> Option<String> {
    let s = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(&s)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty()
        || !int.chars().all(|c| c.is_ascii_digit())
        || !frac.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let mut out = String::new();
    if neg && (int != "0" || !frac.is_empty()) {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    Some(out)
}

fn as_integer(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i128)
            }),
        _ => None,
    }
}

pub fn values_equal(exp: &Value, act: &Value, ty: Option<&str>) -> bool {
    if exp.is_null() || act.is_null() {
        return exp.is_null() && act.is_null();
    }
    let ty = ty.unwrap_or("").to_ascii_lowercase();
    if ty.starts_with("decimal") {
        return matches!((canon_decimal(exp), canon_decimal(act)), (Some(a), Some(b)) if a == b);
    }
    match ty.as_str() {
        "int" | "long" => {
            matches!((as_integer(exp), as_integer(act)), (Some(a), Some(b)) if a == b)
        }
        "float" | "double" => match (exp.as_f64(), act.as_f64()) {
            (Some(a), Some(b)) => exp.is_number() && act.is_number() && a == b,
            _ => false,
        },
        "binary" => match (exp.as_str(), act.as_str()) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            _ => false,
        },
        "" => match (exp, act) {
            (Value::Number(_), Value::Number(_)) => match (as_integer(exp), as_integer(act)) {
                (Some(a), Some(b)) => a == b,
                _ => exp.as_f64() == act.as_f64(),
            },
            _ => exp == act,
        },
        _ => exp == act,
    }
}

/// One part of a row's primary key, ordered like the table's sort order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyPart {
    Null,
    Int(i128),
    Text(String),
}

fn key_part(v: &Value, ty: Option<&str>) -> KeyPart {
    if v.is_null() {
        return KeyPart::Null;
    }
    if let Some(i) = as_integer(v) {
        return KeyPart::Int(i);
    }
    if let Some(c) = canon_decimal(v).filter(|_| ty.is_some_and(|t| t.starts_with("decimal"))) {
        return match c.parse::<i128>() {
            Ok(i) => KeyPart::Int(i),
            Err(_) => KeyPart::Text(c),
        };
    }
    match v {
        Value::String(s) => KeyPart::Text(s.clone()),
        other => KeyPart::Text(other.to_string()),
    }
}

fn row_key(row: &Value, meta: &Meta, idx: usize) -> Vec<KeyPart> {
    if meta.primary_key.is_empty() {
        return vec![KeyPart::Int(idx as i128)];
    }
    meta.primary_key
        .iter()
        .map(|k| key_part(&row[k.as_str()], meta.columns.get(k).map(String::as_str)))
        .collect()
}

fn fmt_key(meta: &Meta, key: &[KeyPart]) -> String {
    meta.primary_key
        .iter()
        .zip(key)
        .map(|(n, k)| match k {
            KeyPart::Null => format!("{n}=null"),
            KeyPart::Int(i) => format!("{n}={i}"),
            KeyPart::Text(s) => format!("{n}={s:?}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn short(v: &Value) -> String {
    truncate(&v.to_string(), 300)
}

type RowIndex<'a> = BTreeMap<Vec<KeyPart>, &'a Map<String, Value>>;

fn index_rows<'a>(
    meta: &Meta,
    rows: &'a [Value],
    what: &str,
    diffs: &mut Vec<String>,
) -> RowIndex<'a> {
    let mut m = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        let Some(obj) = r.as_object() else {
            diffs.push(format!("{what} row {i} is not a JSON object: {}", short(r)));
            continue;
        };
        let k = row_key(r, meta, i);
        if m.insert(k.clone(), obj).is_some() {
            diffs.push(format!("{what} has duplicate key {}", fmt_key(meta, &k)));
        }
    }
    m
}

/// Differences between expected and actual rows (empty = equal).
pub fn diff_rows(meta: &Meta, expected: &[Value], actual: &[Value]) -> Vec<String> {
    const MAX: usize = 25;
    let mut diffs = Vec::new();
    let exp = index_rows(meta, expected, "expected", &mut diffs);
    let act = index_rows(meta, actual, "actual", &mut diffs);
    let missing: Vec<_> = exp.keys().filter(|k| !act.contains_key(*k)).collect();
    let extra: Vec<_> = act.keys().filter(|k| !exp.contains_key(*k)).collect();
    if !missing.is_empty() {
        diffs.push(format!("{} row(s) missing from actual:", missing.len()));
        for k in missing.iter().take(MAX) {
            diffs.push(format!(
                "  - {}: {}",
                fmt_key(meta, k),
                short(&Value::Object(exp[*k].clone()))
            ));
        }
        if missing.len() > MAX {
            diffs.push(format!("  ... and {} more", missing.len() - MAX));
        }
    }
    if !extra.is_empty() {
        diffs.push(format!("{} unexpected row(s) in actual:", extra.len()));
        for k in extra.iter().take(MAX) {
            diffs.push(format!(
                "  + {}: {}",
                fmt_key(meta, k),
                short(&Value::Object(act[*k].clone()))
            ));
        }
        if extra.len() > MAX {
            diffs.push(format!("  ... and {} more", extra.len() - MAX));
        }
    }
    let mut differing = 0usize;
    for (k, er) in &exp {
        let Some(ar) = act.get(k) else { continue };
        let cols: BTreeSet<&String> = er.keys().chain(ar.keys()).collect();
        let mut parts = Vec::new();
        for c in cols {
            match (er.get(c), ar.get(c)) {
                (Some(e), None) => parts.push(format!("{c}: expected {}, column absent", short(e))),
                (None, Some(a)) => parts.push(format!("{c}: not expected, actual {}", short(a))),
                (Some(e), Some(a)) => {
                    if !values_equal(e, a, meta.columns.get(c.as_str()).map(String::as_str)) {
                        parts.push(format!("{c}: expected {}, actual {}", short(e), short(a)));
                    }
                }
                (None, None) => {}
            }
        }
        if !parts.is_empty() {
            differing += 1;
            if differing <= MAX {
                diffs.push(format!(
                    "row {} differs: {}",
                    fmt_key(meta, k),
                    parts.join("; ")
                ));
            }
        }
    }
    if differing > MAX {
        diffs.push(format!("... and {} more differing row(s)", differing - MAX));
    }
    if differing > 0 {
        diffs.push(format!("{differing} row(s) differ"));
    }
    if diffs.is_empty() && !meta.primary_key.is_empty() && meta.mode == "upsert" {
        let keys: Vec<_> = actual
            .iter()
            .enumerate()
            .map(|(i, r)| row_key(r, meta, i))
            .collect();
        if let Some(i) = (1..keys.len()).find(|&i| keys[i - 1] > keys[i]) {
            diffs.push(format!(
                "rows are not sorted by primary key ({}): row {} ({}) comes after row {} ({})",
                meta.primary_key.join(","),
                i,
                fmt_key(meta, &keys[i]),
                i - 1,
                fmt_key(meta, &keys[i - 1])
            ));
        }
    }
    if !diffs.is_empty() {
        diffs.insert(
            0,
            format!(
                "expected {} row(s), actual {} row(s)",
                expected.len(),
                actual.len()
            ),
        );
    }
    diffs
}

/// Panics with a readable diff unless the rows are equal.
#[track_caller]
pub fn assert_rows(what: &str, meta: &Meta, expected: &[Value], actual: &[Value]) {
    let d = diff_rows(meta, expected, actual);
    if !d.is_empty() {
        let mut s = format!("{what}: table {} differs from expected\n", meta.table);
        for l in d {
            let _ = writeln!(s, "    {l}");
        }
        panic!("{s}");
    }
}

/// Finds the asof step a snapshot corresponds to: the last file (in apply order) it lists.
pub fn step_of_snapshot<'a>(snap: &Value, steps: &'a [Step]) -> (usize, &'a Step) {
    let files: Vec<&str> = snap["source_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().expect("source_files are strings"))
        .collect();
    steps
        .iter()
        .enumerate()
        .rev()
        .find(|(_, s)| files.iter().any(|f| f.ends_with(&s.after_file)))
        .unwrap_or_else(|| panic!("snapshot {snap} lists no known DMS file (known: {steps:?})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta() -> Meta {
        Meta {
            table: "t.t".into(),
            dms_table: "t.t".into(),
            primary_key: vec!["id".into()],
            columns: [("id", "long"), ("d", "decimal(12,2)"), ("s", "string")]
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            files: vec![],
            pending_files: vec![],
            mode: "upsert".into(),
        }
    }

    #[test]
    fn decimals_by_value_and_diffs_are_readable() {
        let m = meta();
        let e = vec![
            json!({"id": 1, "d": "12.50", "s": "a"}),
            json!({"id": 2, "d": null, "s": "b"}),
        ];
        let a = vec![
            json!({"id": 1, "d": 12.5, "s": "a"}),
            json!({"id": 2, "d": null, "s": "b"}),
        ];
        assert!(diff_rows(&m, &e, &a).is_empty());
        let a = vec![
            json!({"id": 1, "d": "12.51", "s": "a"}),
            json!({"id": 3, "d": null, "s": "b"}),
        ];
        let d = diff_rows(&m, &e, &a).join("\n");
        assert!(d.contains("missing") && d.contains("id=2"), "{d}");
        assert!(d.contains("unexpected") && d.contains("id=3"), "{d}");
        assert!(d.contains("d: expected \"12.50\", actual \"12.51\""), "{d}");
        assert_eq!(canon_decimal(&json!("-0.00")).as_deref(), Some("0"));
        assert_eq!(
            canon_decimal(&json!("18446744073709551615")).as_deref(),
            Some("18446744073709551615")
        );
        assert!(mentions_number("line 37, column x", 37));
        assert!(!mentions_number("line 370", 37));
    }
}
