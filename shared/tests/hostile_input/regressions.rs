//! Regressions: defects these tests found, fixed in the library (commit 488c9d4).

use super::*;

/// Opens a header of `n` columns named by `name(i)` and checks it for duplicates, as ingest does.
pub(super) fn open_wide(
    n: usize,
    name: impl Fn(usize) -> String,
) -> (Duration, Result<usize, String>) {
    let mut text = b"Op".to_vec();
    for i in 0..n {
        text.push(b',');
        text.extend(name(i).bytes());
    }
    text.extend_from_slice(b"\nI");
    text.extend(std::iter::repeat_n(b',', n));
    text.push(b'\n');
    let start = Instant::now();
    let r = open(&text, &CsvSettings::simple(",", "")).map(|src| {
        let _ = src.layout().duplicate_column();
        src.columns().len()
    });
    (start.elapsed(), r.map_err(|e| e.to_string()))
}

/// Wide headers cost linear time. Was: `Layout::classify` looked every before-image's base name
/// up in the whole header and `duplicate_column` compared every pair (O(n²)): 100,000 distinct
/// names (1.2 MB) took 245 s in the debug build, and 30,000 identical `BI_x` names (a ~1 KB gzip)
/// about 20 s.
#[test]
fn wide_headers_open_in_linear_time() {
    for (n, name) in [
        (
            30_000,
            &(|_| "BI_x".to_string()) as &dyn Fn(usize) -> String,
        ),
        (30_000, &|i| format!("bi_c{i}")),
        (30_000, &|i| format!("c{i}")),
    ] {
        let (t, r) = open_wide(n, name);
        assert!(t < Duration::from_secs(5), "{n} columns took {t:?}: {r:?}");
    }
    let (_, r) = open_wide(2_000, |i| format!("c{i}"));
    assert_eq!(r.unwrap(), 2_000);
}

/// Runs `f`, turning a panic into a failure that says where the library panicked.
pub(super) fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{what}: the library panicked: {msg}")
        }
    }
}

/// Was a panic: `split_zone` (read/text.rs) did `s.split_at(s.len() - 6)` inside a multi-byte
/// character. Reached from CSV (a timestamptz column) and from Parquet (a text column read as
/// timestamptz, e.g. DMS's commit-timestamp column).
#[test]
fn timestamptz_text_with_multibyte_tail_is_an_error() {
    let value = "2022-03-02 11:30:01€abcd";
    let s = CsvSettings::simple(",", "");
    let text = format!("Op,id,ts\nI,1,{value}\n");
    let r = no_panic("CSV timestamptz", || {
        read_through(
            open(text.as_bytes(), &s),
            &Typing::Fixed(vec![PrimitiveType::Long, PrimitiveType::Timestamptz]),
            vec![PrimitiveType::Long],
        )
    });
    let (_, e) = r.expect_err("not a timestamp");
    let m = e.to_string();
    assert!(
        m.contains(KEY) && m.contains("line 2") && m.contains("`ts`"),
        "{m}"
    );

    let batch = RecordBatch::try_from_iter(vec![
        ("Op", Arc::new(StringArray::from(vec!["I"])) as ArrayRef),
        ("ts", Arc::new(StringArray::from(vec![value])) as ArrayRef),
    ])
    .unwrap();
    let r = no_panic("Parquet text as timestamptz", || {
        read_through(
            open_parquet(write_parquet(&batch, None)),
            &Typing::Fixed(vec![PrimitiveType::Timestamptz]),
            vec![],
        )
    });
    let (_, e) = r.expect_err("not a timestamp");
    let m = e.to_string();
    assert!(
        m.contains(PARQUET_KEY) && m.contains("row 1,") && m.contains("`ts`"),
        "{m}"
    );
}

/// Was: csv-core already counts newlines inside quotes and the reader added them again (line 6
/// for a record on line 5); after a CRLF record end csv-core has not consumed the LF when the next
/// record starts (one line low). `csv_round_trip` checks every record's line; these are the
/// minimal cases.
#[test]
fn csv_line_numbers_after_quoted_newlines_and_crlf() {
    let s = CsvSettings::simple(",", "");
    let m = open_err(b"Op,id,v\nI,1,a\nI,2,\"b\nc\"\nX,3,d\n", &s);
    assert!(m.contains("line 5"), "quoted newline: {m}");
    let m = open_err(b"Op,id,v\r\nI,1,a\r\nI,2\r\n", &s);
    assert!(m.contains("line 3"), "CRLF: {m}");
    let m = open_err(b"Op,id,v\r\nI,1,\"a\r\nb\"\r\nI,2\r\n", &s);
    assert!(m.contains("line 4"), "CRLF and a quoted CRLF: {m}");
}

/// Was a panic: Parquet files written by Arrow carry their Arrow schema as base64 IPC under
/// `ARROW:schema`, which the reader decoded, and arrow-ipc panics on malformed flatbuffers
/// (`unimplemented!("Type NONE")`, "Int type with bit width ... not supported", unwraps: 128 of
/// 1808 single-byte corruptions). Every single-byte corruption must be an error or be ignored.
#[test]
fn corrupt_arrow_schema_metadata_is_not_a_panic() {
    let batch = dms_batch(5, 0);
    let ipc = base64_decode(&parquet::arrow::encode_arrow_schema(&batch.schema()));
    let mut panics = Vec::new();
    for i in 0..ipc.len() {
        for x in [0x01u8, 0x80] {
            let mut bad = ipc.clone();
            bad[i] ^= x;
            let props = parquet::file::properties::WriterProperties::builder()
                .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
                    parquet::arrow::ARROW_SCHEMA_META_KEY.to_string(),
                    base64_encode(&bad),
                )]))
                .build();
            let bytes = write_parquet(&batch, Some(props));
            let r = std::panic::catch_unwind(|| read_parquet(open_parquet(bytes)).map(|_| ()));
            match r {
                Ok(Err((_, e))) => assert!(e.to_string().contains(PARQUET_KEY), "{e}"),
                Ok(Ok(())) => {}
                Err(p) => panics.push(format!(
                    "byte {i} ^ {x:#04x}: {}",
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                )),
            }
        }
    }
    assert!(
        panics.is_empty(),
        "{} of {} corruptions of ARROW:schema panic, e.g.:\n{}",
        panics.len(),
        ipc.len() * 2,
        panics
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

pub(super) const B64: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub(super) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                out.push(B64[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) fn base64_decode(s: &str) -> Vec<u8> {
    let vals: Vec<u32> = s
        .bytes()
        .filter(|b| *b != b'=')
        .map(|b| B64.iter().position(|c| *c == b).unwrap() as u32)
        .collect();
    let mut out = Vec::new();
    for c in vals.chunks(4) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (k, v)| n | v << (18 - 6 * k));
        for k in 0..c.len() - 1 {
            out.push((n >> (16 - 8 * k)) as u8);
        }
    }
    out
}

/// Was: a header field of any length was a column name (a 16 MiB first line became one column,
/// costing ~9x its size in memory on the way).
#[test]
fn enormous_header_name_is_refused() {
    let s = CsvSettings::simple(",", "");
    let mut text = b"Op,id,".to_vec();
    text.extend(std::iter::repeat_n(b'x', 100_000));
    text.extend_from_slice(b"\nI,1,a\n");
    let m = open_err(&text, &s);
    assert!(m.contains("line 1") && m.contains("column name"), "{m}");
}

/// Was: a file whose only column is `Op` failed with "Invalid argument error: must either specify
/// a row count or at least one column", an Arrow error naming no file.
#[test]
fn files_without_data_columns_are_named() {
    let s = CsvSettings::simple(",", "");
    for text in [&b"Op\nI\n"[..], b"Op,dropme\nI,1\n", b"op,DROPME\n"] {
        let mut s = s.clone();
        s.drop_v = true;
        let r = read_through(open(text, &s), &Typing::Strings, vec![]);
        let (_, e) = r.expect_err("no data columns");
        assert!(e.to_string().contains(KEY), "{e}");
    }
    let batch = RecordBatch::try_from_iter(vec![(
        "Op",
        Arc::new(StringArray::from(vec!["I"])) as ArrayRef,
    )])
    .unwrap();
    let (_, e) =
        read_parquet(open_parquet(write_parquet(&batch, None))).expect_err("no data columns");
    assert!(e.to_string().contains(PARQUET_KEY), "{e}");
}

/// Was: with `columns` configured, a first data row whose values were column names was taken for
/// a header (row lost; its Op value became a column, so later U/D rows read as inserts).
#[test]
fn headerless_first_row_of_column_names_is_data() {
    let mut s = CsvSettings::simple(",", "");
    s.columns = Some(vec![("id", None), ("v", None)]);
    let b = read_through(open(b"I,id,v\nD,1,b\n", &s), &Typing::Strings, vec![]).unwrap();
    let ops: Vec<Op> = b.iter().flat_map(|b| b.ops.clone()).collect();
    assert_eq!(ops, vec![Op::Insert, Op::Delete]);
}

/// Files without `Op`: a headerless first row counts as a header only when every field names a
/// column (read/csv.rs `looks_like_header`; the `header` setting removes the guess). A full load (no `Op`)
/// of a two-column table whose first row has one value equal to a column name, or a NULL token
/// that is an identifier (`NULL`) next to one, loses that row and names the columns after its
/// values. Found by `csv_round_trip` (10,000 cases): `NULL,c0` with columns `c0, c1`.
#[test]
fn headerless_row_with_a_column_name_value_is_data() {
    let mut s = CsvSettings::simple(",", "NULL");
    s.columns = Some(vec![("c0", None), ("c1", None)]);
    let b = read_through(
        open(
            b"NULL,c0
x,y
",
            &s,
        ),
        &Typing::Strings,
        vec![],
    )
    .unwrap();
    let cols: Vec<String> = open(
        b"NULL,c0
x,y
",
        &s,
    )
    .unwrap()
    .columns()
    .into_iter()
    .map(|c| c.name)
    .collect();
    assert_eq!(cols, vec!["c0", "c1"]);
    assert_eq!(b.iter().map(|b| b.data.num_rows()).sum::<usize>(), 2);
    let mut s = CsvSettings::simple(",", "");
    s.columns = Some(vec![("id", None), ("status", None)]);
    let b = read_through(
        open(
            b"1,status
2,ok
",
            &s,
        ),
        &Typing::Strings,
        vec![],
    )
    .unwrap();
    assert_eq!(b.iter().map(|b| b.data.num_rows()).sum::<usize>(), 2);
}

/// Was: a raw 0x1F byte split an unquoted field silently (multi-character delimiters are
/// rewritten to 0x1F), and the naive matcher missed a delimiter overlapping a partial match
/// (`--|` in `a---|b`).
#[test]
fn multi_byte_delimiter_overlaps_and_unit_separator() {
    let s = CsvSettings::simple("||", "");
    let r = read_through(
        open(b"Op||id||v\nI||1\x1fx\n", &s),
        &Typing::Strings,
        vec![],
    );
    let (_, e) = r.expect_err("0x1F must not split a field silently");
    assert!(e.to_string().contains(KEY), "{e}");
    let s = CsvSettings::simple("--|", "");
    let b = read_through(
        open(b"Op--|id--|v\nI--|a---|b\n", &s),
        &Typing::Strings,
        vec![],
    )
    .expect("`a-` then `b`");
    let id = b[0].data.column(0).as_string::<i32>().value(0).to_string();
    assert_eq!(id, "a-");
}

/// Were accepted: with a bucket folder, empty segments after `<schema>/<table>` (two objects with
/// the same table and order); `%+1` as an escape (`u8::from_str_radix` takes a sign).
#[test]
fn empty_segments_and_signed_escapes_are_refused() {
    let src = SourceSettings {
        bucket_folder: Some("dms".into()),
        parallel_load_folders: false,
        ..Default::default()
    };
    let r = locate("dms/s/t//LOAD00000001.csv", &src);
    assert!(r.is_err(), "{r:?}");
    assert!(decode_event_key("dms/s/t%+1/LOAD00000001.csv").is_err());
    assert!(decode_event_key("dms/s/t%-1/LOAD00000001.csv").is_err());
}
