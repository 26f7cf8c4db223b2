//! Parquet: hostile files and schemas read as errors naming the file and the row.

use super::*;

pub(super) fn parquet_table_config() -> TableConfig {
    CsvSettings::simple(",", "").table_config()
}

pub(super) fn open_parquet(bytes: Vec<u8>) -> Result<SourceFile, Error> {
    SourceFile::open(
        &object(PARQUET_KEY),
        SourceData::Bytes(bytes.into()),
        &parquet_table_config(),
        None,
    )
}

/// Writes `batch` as Parquet without the embedded Arrow schema (`ARROW:schema`), like DMS.
pub(super) fn write_parquet(
    batch: &RecordBatch,
    props: Option<parquet::file::properties::WriterProperties>,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let options = parquet::arrow::arrow_writer::ArrowWriterOptions::new()
        .with_properties(props.unwrap_or_default())
        .with_skip_arrow_metadata(true);
    let mut w =
        parquet::arrow::ArrowWriter::try_new_with_options(&mut buf, batch.schema(), options)
            .unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    buf
}

/// A DMS-shaped Parquet file: Op, a nullable key, text, decimal, timestamp, bool, uint16.
pub(super) fn dms_batch(rows: usize, null_key_every: usize) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("Op", DataType::Utf8, true),
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("amount", DataType::Decimal128(10, 2), true),
        Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("small", DataType::UInt16, true),
    ]));
    let ops: Vec<&str> = (0..rows).map(|i| ["I", "U", "D"][i % 3]).collect();
    let ids: Vec<Option<i64>> = (0..rows)
        .map(|i| (null_key_every == 0 || i % null_key_every != 0).then_some(i as i64))
        .collect();
    let names: Vec<Option<String>> = (0..rows)
        .map(|i| (i % 5 != 0).then(|| format!("name {i} é\n\"q\"")))
        .collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(ops)),
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(names)),
            Arc::new(
                Decimal128Array::from((0..rows as i128).map(|i| i * 7 - 50).collect::<Vec<_>>())
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
            Arc::new(TimestampMillisecondArray::from(
                (0..rows as i64)
                    .map(|i| 1_646_220_601_000 + i)
                    .collect::<Vec<_>>(),
            )),
            Arc::new(BooleanArray::from(
                (0..rows).map(|i| i % 2 == 0).collect::<Vec<_>>(),
            )),
            Arc::new(UInt16Array::from((0..rows as u16).collect::<Vec<_>>())),
        ],
    )
    .unwrap()
}

pub(super) fn parquet_variants() -> Vec<Vec<u8>> {
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;
    let batch = dms_batch(300, 7);
    let props = |c: Compression, dict: bool, rg: usize, stats: bool| {
        let mut b = WriterProperties::builder()
            .set_compression(c)
            .set_dictionary_enabled(dict)
            .set_max_row_group_row_count(Some(rg));
        if !stats {
            b = b.set_statistics_enabled(parquet::file::properties::EnabledStatistics::None);
        }
        b.build()
    };
    vec![
        write_parquet(&batch, None),
        write_parquet(
            &batch,
            Some(props(Compression::UNCOMPRESSED, false, 100, false)),
        ),
        write_parquet(&batch, Some(props(Compression::SNAPPY, true, 64, true))),
        write_parquet(
            &batch,
            Some(props(
                Compression::ZSTD(ZstdLevel::default()),
                true,
                1000,
                true,
            )),
        ),
        write_parquet(
            &dms_batch(3, 0),
            Some(props(Compression::UNCOMPRESSED, false, 10, true)),
        ),
        // Written the default Arrow way, with `ARROW:schema` in the footer.
        write_parquet_with_arrow_schema(&batch),
        write_parquet_with_arrow_schema(&dms_batch(3, 0)),
    ]
}

pub(super) fn write_parquet_with_arrow_schema(batch: &RecordBatch) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    buf
}

/// Read a Parquet source with its declared types.
pub(super) fn read_parquet(
    src: Result<SourceFile, Error>,
) -> Result<Vec<ChangeBatch>, (Stage, Error)> {
    let typing = match &src {
        Ok(s) => Typing::Fixed(
            s.columns()
                .iter()
                .map(|c| c.declared.clone().unwrap_or(PrimitiveType::String))
                .collect::<Vec<_>>(),
        ),
        Err(_) => Typing::Strings,
    };
    let typing = match typing {
        Typing::Fixed(t) if t.is_empty() => Typing::Strings,
        t => t,
    };
    read_through(src, &typing, vec![PrimitiveType::Long])
}

#[test]
fn parquet_files_read_as_written() {
    for bytes in parquet_variants() {
        let b = read_parquet(open_parquet(bytes)).unwrap();
        let rows: usize = b.iter().map(|b| b.data.num_rows()).sum();
        assert!(rows == 300 || rows == 3, "{rows}");
    }
}

/// Truncated, bit-flipped and byte-overwritten Parquet files: never a panic, errors name the file.
#[test]
fn mutated_parquet_never_panics() {
    let variants = Arc::new(parquet_variants());
    let n = variants.len();
    let mutation = prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..6);
    check(
        "mutated_parquet_never_panics",
        600,
        (
            0..n,
            prop::option::of(any::<prop::sample::Index>()),
            mutation,
        ),
        move |(v, truncate, mutations)| {
            let mut bytes = variants[v].clone();
            for (at, byte, kind) in mutations {
                let i = at.index(bytes.len());
                match kind {
                    0 => bytes[i] ^= byte.max(1),
                    1 => bytes[i] = byte,
                    // Mutate near the footer, where the metadata is.
                    _ => {
                        let j = bytes.len() - 1 - (i % 300.min(bytes.len()));
                        bytes[j] ^= byte.max(1);
                    }
                }
            }
            if let Some(t) = truncate {
                let len = t.index(bytes.len());
                bytes.truncate(len);
            }
            if let Err((stage, e)) = read_parquet(open_parquet(bytes)) {
                check_error(stage, &e, PARQUET_KEY)?;
            }
            Ok(())
        },
    );
}

/// Random bytes named `.parquet`, with and without the magic and a plausible footer.
#[test]
fn random_bytes_named_parquet_never_panic() {
    check(
        "random_bytes_named_parquet_never_panic",
        1500,
        (
            prop::collection::vec(any::<u8>(), 0..600),
            0u8..4,
            any::<u32>(),
        ),
        |(body, shape, len)| {
            let mut bytes = Vec::new();
            match shape {
                0 => bytes.extend(&body),
                1 => {
                    bytes.extend(b"PAR1");
                    bytes.extend(&body);
                    bytes.extend(b"PAR1");
                }
                _ => {
                    bytes.extend(b"PAR1");
                    bytes.extend(&body);
                    let footer = if shape == 2 { body.len() as u32 } else { len };
                    bytes.extend(footer.to_le_bytes());
                    bytes.extend(b"PAR1");
                }
            }
            let r = read_parquet(open_parquet(bytes.clone()));
            match r {
                Err((stage, e)) => check_error(stage, &e, PARQUET_KEY)?,
                Ok(_) => prop_assert!(!bytes.is_empty()),
            }
            Ok(())
        },
    );
}

#[test]
fn truncated_parquet_and_random_bytes_are_clear_errors() {
    let good = parquet_variants().remove(0);
    for cut in [
        0,
        1,
        4,
        8,
        good.len() / 2,
        good.len() - 9,
        good.len() - 8,
        good.len() - 1,
    ] {
        let r = read_parquet(open_parquet(good[..cut].to_vec()));
        let (_, e) = r.err().unwrap_or_else(|| panic!("cut at {cut} read"));
        let m = e.to_string();
        assert!(m.contains(PARQUET_KEY), "{m}");
        if cut > 0 {
            assert!(m.contains("Parquet"), "{m}");
        }
    }
    let m = open_parquet(b"Op,id\nI,1\n".to_vec())
        .err()
        .unwrap()
        .to_string();
    assert!(
        m.contains(PARQUET_KEY) && m.contains("not a readable Parquet file"),
        "{m}"
    );
}

/// Column types DMS never writes: a clear error naming the file and the column.
#[test]
fn parquet_with_types_dms_never_writes() {
    let ids = Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef;
    let op = Arc::new(StringArray::from(vec!["I", "U"])) as ArrayRef;
    let list = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None]),
        None,
    ])) as ArrayRef;
    let strukt = Arc::new(StructArray::from(vec![(
        Arc::new(Field::new("x", DataType::Int32, true)),
        Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef,
    )])) as ArrayRef;
    for (name, col) in [("tags", list.clone()), ("nested", strukt)] {
        let batch =
            RecordBatch::try_from_iter(vec![("Op", op.clone()), ("id", ids.clone()), (name, col)])
                .unwrap();
        let m = open_parquet(write_parquet(&batch, None))
            .err()
            .unwrap()
            .to_string();
        assert!(
            m.contains(PARQUET_KEY) && m.contains(name) && m.contains("not supported"),
            "{m}"
        );
    }
    // An `Op` column that is a list: refused when read, naming the column.
    let batch = RecordBatch::try_from_iter(vec![("Op", list), ("id", ids.clone())]).unwrap();
    let r = read_parquet(open_parquet(write_parquet(&batch, None)));
    let (_, e) = r.expect_err("a list Op column is an error");
    let m = e.to_string();
    assert!(m.contains(PARQUET_KEY) && m.contains("Op"), "{m}");
    // An `Op` column of numbers: the value is named with its row.
    let batch = RecordBatch::try_from_iter(vec![
        ("Op", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
        ("id", ids),
    ])
    .unwrap();
    let (_, e) = read_parquet(open_parquet(write_parquet(&batch, None)))
        .err()
        .unwrap();
    let m = e.to_string();
    assert!(
        m.contains(PARQUET_KEY) && m.contains("row 1,") && m.contains("`1`"),
        "{m}"
    );
}

/// A NULL key is not the reader's business (dedupe refuses it): the reader passes it through.
#[test]
fn null_keys_pass_through_the_readers() {
    let b = read_parquet(open_parquet(write_parquet(&dms_batch(20, 7), None))).unwrap();
    let id = b[0].data.column(0).as_primitive::<Int64Type>();
    assert!(id.is_null(0) && id.is_null(7) && !id.is_null(1));
    let s = CsvSettings::simple(",", "\\N");
    let b = read_through(
        open(b"Op,id,v\nI,\\N,a\nU,,b\n", &s),
        &Typing::Fixed(vec![PrimitiveType::Long, PrimitiveType::String]),
        vec![PrimitiveType::Long],
    );
    // With the NULL token `\N`, an empty key is an empty string, which is not a long.
    let (_, e) = b.expect_err("empty string is not a long");
    let m = e.to_string();
    assert!(m.contains("line 3") && m.contains("`id`"), "{m}");
    let b = read_through(
        open(b"Op,id,v\nI,\\N,a\n", &s),
        &Typing::Fixed(vec![PrimitiveType::Long, PrimitiveType::String]),
        vec![PrimitiveType::Long],
    )
    .unwrap();
    assert!(b[0].data.column(0).is_null(0));
}

/// A bad Op deep in a multi-batch Parquet file is reported with its row number.
#[test]
fn parquet_row_errors_name_the_row() {
    let rows = 20_000;
    let mut ops: Vec<&str> = vec!["I"; rows];
    ops[12_345] = "Z";
    let batch = RecordBatch::try_from_iter(vec![
        ("Op", Arc::new(StringArray::from(ops)) as ArrayRef),
        (
            "id",
            Arc::new(Int64Array::from((0..rows as i64).collect::<Vec<_>>())) as ArrayRef,
        ),
    ])
    .unwrap();
    let (_, e) = read_parquet(open_parquet(write_parquet(&batch, None)))
        .err()
        .unwrap();
    let m = e.to_string();
    assert!(
        // Rows count from 1 in messages, like lines: index 12,345 is row 12,346.
        m.contains(PARQUET_KEY) && m.contains("row 12346") && m.contains("`Z`"),
        "{m}"
    );
}
