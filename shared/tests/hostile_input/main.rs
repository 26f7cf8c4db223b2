//! Hostile input: the key parser and the readers never panic, never let a small input take
//! unbounded memory or time, and reject bad input with an error that names the file (and the line
//! or row where one record is at fault).
//!
//! Properties run through proptest on the stable toolchain (no cargo-fuzz). Each property runs a
//! default number of cases chosen so the whole file takes well under 30 s on 2 cores; set
//! `PROPTEST_CASES=N` to run N cases of every property instead (long runs), and
//! `HOSTILE_INPUT_STATS=1` (with `--nocapture`) to print how many cases each property ran and the
//! memory measurements. Nothing is printed on success otherwise.
//!
//! Tests marked `#[ignore = "BUG: ..."]` reproduce defects of the library that are not fixed yet;
//! run them with `--ignored`.
//!
//! Layout: this file holds the harness (a property runner) and the fixtures every suite
//! shares; one file per suite: `key_parser`, `csv_reader`, `hostile_files` (specific hostile files),
//! `memory` (measured in a child process), `parquet_files`, `regressions` (defects these tests found,
//! fixed), `open_defects` (ignored until fixed, and slow checks), `cli` (issue 12: hostile input
//! through the CLI).

mod cli;
mod csv_reader;
mod hostile_files;
mod key_parser;
mod memory;
mod open_defects;
mod parquet_files;
mod regressions;

use std::fmt;
use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, Int32Array, Int64Array, ListArray, RecordBatch,
    StringArray, StructArray, TimestampMillisecondArray, UInt16Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use dms2iceberg::config::{ColumnSetting, Config, SourceSettings, TableConfig, TableSettings};
use dms2iceberg::error::Error;
use dms2iceberg::locate::{DmsObject, FileFormat, FileKind, OrderKey, decode_event_key, locate};
use dms2iceberg::read::{ChangeBatch, DEFAULT_MAX_DECOMPRESSED_BYTES, Op, SourceData, SourceFile};
use iceberg::spec::PrimitiveType;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestCaseResult, TestRunner};

use self::csv_reader::*;
use self::hostile_files::*;
use self::memory::*;
use self::parquet_files::*;
use self::regressions::*;

// ---------------------------------------------------------------------------------------------
// Harness: a property runner that honours PROPTEST_CASES, keeps no regression files (this test
// owns no other file) and counts the cases it ran.
// ---------------------------------------------------------------------------------------------

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn verbose() -> bool {
    std::env::var_os("HOSTILE_INPUT_STATS").is_some()
}

/// Runs `test` on `cases(default_cases)` values of `strategy`; a failure (or a panic inside the
/// library) fails the test with the shrunk input.
fn check<S>(name: &str, default_cases: u32, strategy: S, test: impl Fn(S::Value) -> TestCaseResult)
where
    S: Strategy,
    S::Value: fmt::Debug,
{
    let config = ProptestConfig {
        cases: cases(default_cases),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let ran = AtomicU64::new(0);
    let start = Instant::now();
    let result = runner.run(&strategy, |v| {
        ran.fetch_add(1, Ordering::Relaxed);
        test(v)
    });
    if verbose() {
        eprintln!(
            "hostile_input: {name}: {} cases in {:.2?}",
            ran.load(Ordering::Relaxed),
            start.elapsed()
        );
    }
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

/// Bytes shown as an escaped byte string in failure reports.
#[derive(Clone)]
struct Text(Vec<u8>);

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() > 4096 {
            write!(
                f,
                "b\"{}\"... ({} bytes)",
                self.0[..4096].escape_ascii(),
                self.0.len()
            )
        } else {
            write!(f, "b\"{}\"", self.0.escape_ascii())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// The key every reader test uses: every error message must contain it.
const KEY: &str = "dms/hostile/t1/20220302-1134010000.csv";
const PARQUET_KEY: &str = "dms/hostile/t1/20220302-1134010000.parquet";

fn object(key: &str) -> DmsObject {
    locate(key, &SourceSettings::default())
        .expect("fixture key is valid")
        .expect("fixture key is a DMS file")
}

/// Per-table settings of the CSV properties.
#[derive(Debug, Clone)]
struct CsvSettings {
    /// As written in the config (`\t` is the two characters backslash and t).
    delimiter: &'static str,
    null_value: &'static str,
    /// `columns` in the config: names (and optional types) for headerless files.
    columns: Option<Vec<(&'static str, Option<&'static str>)>>,
    /// Column names of an existing table (headerless fallback).
    table_columns: Option<Vec<String>>,
    lowercase: bool,
    drop_v: bool,
}

impl CsvSettings {
    fn simple(delimiter: &'static str, null_value: &'static str) -> Self {
        CsvSettings {
            delimiter,
            null_value,
            columns: None,
            table_columns: None,
            lowercase: true,
            drop_v: false,
        }
    }

    fn delimiter_bytes(&self) -> Vec<u8> {
        if self.delimiter == "\\t" {
            b"\t".to_vec()
        } else {
            self.delimiter.as_bytes().to_vec()
        }
    }

    fn table_config(&self) -> TableConfig {
        let defaults = TableSettings {
            primary_key: Some(vec!["id".into()]),
            delimiter: Some(self.delimiter.into()),
            null_value: Some(self.null_value.into()),
            lowercase_names: Some(self.lowercase),
            drop_columns: self.drop_v.then(|| vec!["dropme".into()]),
            columns: self.columns.as_ref().map(|c| {
                c.iter()
                    .map(|(n, t)| ColumnSetting {
                        name: n.to_string(),
                        ty: t.map(str::to_string),
                    })
                    .collect()
            }),
            ..TableSettings::default()
        };
        let config = Config {
            defaults,
            ..Config::default()
        };
        config
            .table("hostile", "t1")
            .expect("fixture config is valid")
    }
}

fn csv_settings() -> impl Strategy<Value = CsvSettings> {
    let columns = prop_oneof![
        3 => Just(None),
        1 => Just(Some(vec![("id", Some("long")), ("v", None)])),
        1 => Just(Some(vec![("id", None), ("v", None), ("w", Some("string"))])),
        1 => Just(Some(vec![("ID", Some("string")), ("BI_id", None), ("v", Some("decimal(10,2)"))])),
    ];
    let table_columns = prop_oneof![
        3 => Just(None),
        1 => Just(Some(vec!["id".to_string(), "v".to_string()])),
    ];
    (
        prop::sample::select(vec![",", ",", "|", "\\t", "||", "~^~", ";;"]),
        prop::sample::select(vec!["", "\\N", "NULL"]),
        columns,
        table_columns,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(delimiter, null_value, columns, table_columns, lowercase, drop_v)| CsvSettings {
                delimiter,
                null_value,
                columns,
                table_columns,
                lowercase,
                drop_v,
            },
        )
}

fn open(bytes: &[u8], settings: &CsvSettings) -> Result<SourceFile, Error> {
    open_as(KEY, bytes, settings)
}

fn open_as(key: &str, bytes: &[u8], settings: &CsvSettings) -> Result<SourceFile, Error> {
    SourceFile::open(
        &object(key),
        SourceData::Bytes(bytes.to_vec().into()),
        &settings.table_config(),
        settings.table_columns.as_deref(),
    )
}

/// How a test types the data columns before reading.
#[derive(Debug, Clone)]
enum Typing {
    /// Declared types, the rest inferred from the file (what ingest does for a new table).
    Infer,
    /// Everything as string.
    Strings,
    /// Column i gets `types[i % len]` (what ingest does when the table has types already).
    Fixed(Vec<PrimitiveType>),
}

/// Types the CSV properties read columns as (every type text can be read as).
fn column_types() -> Vec<PrimitiveType> {
    vec![
        PrimitiveType::Boolean,
        PrimitiveType::Int,
        PrimitiveType::Long,
        PrimitiveType::Float,
        PrimitiveType::Double,
        PrimitiveType::Decimal {
            precision: 10,
            scale: 2,
        },
        PrimitiveType::Decimal {
            precision: 38,
            scale: 0,
        },
        PrimitiveType::Decimal {
            precision: 38,
            scale: 38,
        },
        PrimitiveType::Date,
        PrimitiveType::Time,
        PrimitiveType::Timestamp,
        PrimitiveType::Timestamptz,
        PrimitiveType::String,
        PrimitiveType::Binary,
    ]
}

fn typing() -> impl Strategy<Value = Typing> {
    prop_oneof![
        2 => Just(Typing::Infer),
        1 => Just(Typing::Strings),
        2 => prop::collection::vec(prop::sample::select(column_types()), 1..4).prop_map(Typing::Fixed),
    ]
}

fn key_types() -> impl Strategy<Value = Vec<PrimitiveType>> {
    prop_oneof![
        Just(vec![PrimitiveType::Long]),
        Just(vec![PrimitiveType::String]),
        Just(vec![]),
    ]
}

/// Where an error came from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Open,
    Infer,
    Read,
    /// From the batch iterator: a record (or the stream) is at fault.
    Rows,
}

/// Open, type, read and drain a file the way ingest does; checks every batch's invariants.
fn read_through(
    src: Result<SourceFile, Error>,
    typing: &Typing,
    key_types: Vec<PrimitiveType>,
) -> Result<Vec<ChangeBatch>, (Stage, Error)> {
    let src = src.map_err(|e| (Stage::Open, e))?;
    let columns = src.columns();
    let types: Vec<PrimitiveType> = match typing {
        Typing::Strings => vec![PrimitiveType::String; columns.len()],
        Typing::Fixed(t) => (0..columns.len()).map(|i| t[i % t.len()].clone()).collect(),
        Typing::Infer => {
            let unknown: Vec<String> = columns
                .iter()
                .filter(|c| c.declared.is_none())
                .map(|c| c.name.clone())
                .collect();
            let mut inferred = if unknown.is_empty() {
                Vec::new()
            } else {
                src.infer_types(&unknown).map_err(|e| (Stage::Infer, e))?
            };
            assert_eq!(
                inferred.len(),
                unknown.len(),
                "one inferred type per column"
            );
            inferred.reverse();
            columns
                .iter()
                .map(|c| {
                    c.declared
                        .clone()
                        .unwrap_or_else(|| inferred.pop().expect("counted above"))
                })
                .collect()
        }
    };
    let batches = src
        .read(types.clone(), key_types)
        .map_err(|e| (Stage::Read, e))?;
    let mut out = Vec::new();
    let mut last_position = None;
    for b in batches {
        let b = b.map_err(|e| (Stage::Rows, e))?;
        let n = b.data.num_rows();
        assert!(n > 0, "no empty batches");
        assert_eq!(b.ops.len(), n);
        assert_eq!(b.positions.len(), n);
        assert_eq!(b.data.num_columns(), types.len());
        if let Some(before) = &b.before {
            assert_eq!(before.num_rows(), n);
        }
        for &p in &b.positions {
            // Non-decreasing: records separated by a bare CR share a line number.
            assert!(
                last_position <= Some(p),
                "positions go back: {last_position:?} then {p}"
            );
            last_position = Some(p);
        }
        out.push(b);
    }
    Ok(out)
}

/// The checks every error from a reader must pass: it names the file; when one record is at
/// fault, it names the line (CSV) or row (Parquet). Errors from the row iterator must be input
/// errors (not Arrow or I/O errors that name no file).
///
/// Record-level means: a value of a column, a field count, or invalid UTF-8. Errors of the byte
/// stream under the parser (gzip, the record-size cap, a 0x1F byte with a multi-character
/// delimiter) only need the file here; `bug_stream_errors_lack_the_line` wants the line too.
fn check_error(stage: Stage, e: &Error, key: &str) -> TestCaseResult {
    let msg = e.to_string();
    prop_assert!(msg.contains(key), "error does not name the file: {msg}");
    if stage == Stage::Rows {
        match e {
            Error::Input(ie) => {
                let record_level = ie.column.is_some()
                    || ie.reason.starts_with("expected ")
                    || ie.reason.contains("UTF-8");
                prop_assert!(
                    !record_level || ie.position.is_some(),
                    "record error without a line: {msg}"
                )
            }
            other => prop_assert!(false, "row error is not an input error: {other:?}"),
        }
    }
    Ok(())
}
