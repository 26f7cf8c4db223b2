//! What one core can do with a full-load file: the limit a full load is measured against.
//!
//! `cargo bench --bench load_limit -- FILE [--key COLUMN] [--level N] [--no-dictionary]`
//!
//! On one thread, one after another: (1) parse FILE (a DMS CSV or Parquet LOAD file, gzip or
//! not) into typed Arrow batches with the library's own reader, types inferred as a new table's
//! would be; (2) encode those batches as Parquet with the settings a full load's data files are
//! written with (zstd, dictionary pages, 128 Ki-row groups, statistics, a bloom filter on the
//! key column) into memory. Prints MB/s of the stored input for each and for both in a row
//! (`1 / (1/parse + 1/encode)`): a pipeline on one core cannot beat that figure.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use dms2iceberg::config::Config;
use dms2iceberg::locate::{FileFormat, locate};
use dms2iceberg::read::{SourceData, SourceFile};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut file = None;
    let mut key = "id".to_string();
    let mut level = 1;
    let mut dictionary = true;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--key" => key = it.next().unwrap_or_default(),
            "--level" => level = it.next().and_then(|l| l.parse().ok()).unwrap_or(1),
            "--no-dictionary" => dictionary = false,
            _ => file = Some(a),
        }
    }
    let Some(file) = file else {
        eprintln!("usage: load_limit FILE [--key COLUMN] [--level N] [--no-dictionary]");
        std::process::exit(2);
    };
    let path = std::path::PathBuf::from(&file);
    let stored = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64;
    let format = if file.contains(".parquet") {
        FileFormat::Parquet
    } else {
        FileFormat::Csv
    };
    let config = Config::default();
    let name = if format == FileFormat::Parquet {
        "s/t/LOAD00000001.parquet"
    } else {
        "s/t/LOAD00000001.csv"
    };
    let mut object = locate(name, &config.source)
        .expect("locate")
        .expect("a DMS file");
    object.key = file.clone();
    let cfg = config.table("s", "t").expect("config");

    // 1. Parse.
    let started = Instant::now();
    let src = SourceFile::open(&object, SourceData::Path(path.clone()), &cfg, None).expect("open");
    let names: Vec<String> = src.columns().iter().map(|c| c.name.clone()).collect();
    let declared: Vec<Option<_>> = src.columns().iter().map(|c| c.declared.clone()).collect();
    let infer = declared.iter().all(Option::is_none);
    let types = if infer {
        src.infer_types(&names).expect("infer")
    } else {
        declared.into_iter().map(|t| t.expect("declared")).collect()
    };
    let inferred_s = started.elapsed().as_secs_f64();
    let key_at = names.iter().position(|n| *n == key).expect("key column");
    let mut batches: Vec<RecordBatch> = Vec::new();
    for b in src
        .read(types.clone(), vec![types[key_at].clone()])
        .expect("read")
    {
        batches.push(b.expect("batch").data);
    }
    let parse_s = started.elapsed().as_secs_f64() - inferred_s;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();

    // 2. Encode.
    let schema = batches[0].schema();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(level).expect("level")))
        .set_dictionary_enabled(dictionary)
        .set_max_row_group_row_count(Some(128 * 1024))
        .set_column_bloom_filter_enabled(ColumnPath::from(key.as_str()), true)
        .set_column_bloom_filter_ndv(ColumnPath::from(key.as_str()), 128 * 1024)
        .build();
    let started = Instant::now();
    let mut w = ArrowWriter::try_new(Vec::new(), Arc::clone(&schema), Some(props)).expect("writer");
    for b in &batches {
        w.write(b).expect("write");
    }
    let out = w.into_inner().expect("close");
    let encode_s = started.elapsed().as_secs_f64();

    let mb = stored / 1e6;
    println!(
        "{file}: {:.0} MB stored, {rows} rows, {} columns",
        mb,
        names.len()
    );
    if infer {
        println!(
            "  type inference (a whole pass): {inferred_s:.2} s ({:.0} MB/s)",
            mb / inferred_s
        );
    }
    println!("  parse:  {parse_s:.2} s  {:.0} MB/s", mb / parse_s);
    println!(
        "  encode: {encode_s:.2} s  {:.0} MB/s  (zstd {level}, dictionary {dictionary}; {:.0} MB written)",
        mb / encode_s,
        out.len() as f64 / 1e6
    );
    println!(
        "  one core, parse then encode: {:.2} s  {:.0} MB/s",
        parse_s + encode_s,
        mb / (parse_s + encode_s)
    );
}
