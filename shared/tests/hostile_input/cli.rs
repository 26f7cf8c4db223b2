//! Regressions of issue 12: hostile input through the CLI (the table-level cases are in
//! tests/hostile.rs).

use super::*;

/// All rows of `bytes` read as Parquet under `key`, with declared types.
pub(super) fn parquet_rows(key: &str, data: SourceData) -> Result<Vec<RecordBatch>, String> {
    let src = SourceFile::open(&object(key), data, &parquet_table_config(), None)
        .map_err(|e| e.to_string())?;
    let types = src
        .columns()
        .iter()
        .map(|c| c.declared.clone().unwrap_or(PrimitiveType::String))
        .collect();
    src.read(types, vec![PrimitiveType::Long])
        .map_err(|e| e.to_string())?
        .map(|b| b.map(|b| b.data).map_err(|e| e.to_string()))
        .collect()
}

/// A gzip'd Parquet file (gzip is detected by magic bytes, whatever the name) reads exactly like
/// the plain file, from memory and from disk. Was: "Corrupt footer".
#[test]
fn gzipped_parquet_reads_like_the_plain_file() {
    let plain = write_parquet(&dms_batch(300, 7), None);
    let want = parquet_rows(PARQUET_KEY, SourceData::Bytes(plain.clone().into())).unwrap();
    let gz = gzip(&plain);
    let got = parquet_rows(PARQUET_KEY, SourceData::Bytes(gz.clone().into())).unwrap();
    assert_eq!(got, want);
    let dir = std::env::temp_dir().join(format!("d2i-gzparquet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("20220302-1134010000.parquet.gz");
    std::fs::write(&path, &gz).unwrap();
    let got = parquet_rows(
        "dms/hostile/t1/20220302-1134010000.parquet.gz",
        SourceData::Path(path),
    )
    .unwrap();
    assert_eq!(got, want);
    // The decompressed copy is unlinked at once: nothing is left behind.
    let leftovers = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("dms2iceberg-gunzip-{}-", std::process::id()))
        })
        .count();
    assert_eq!(leftovers, 0);
    // A corrupt gzip'd Parquet file is an error naming the file.
    let mut bad = gz.clone();
    bad.truncate(gz.len() / 2);
    let e = parquet_rows(PARQUET_KEY, SourceData::Bytes(bad.into())).unwrap_err();
    assert!(e.contains(PARQUET_KEY), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A duplicate column in a header names the header's line. Was: file and column only.
#[test]
fn duplicate_header_columns_name_the_line() {
    let s = CsvSettings::simple(",", "");
    for (text, line) in [
        (&b"Op,id,v,V\nI,1,a,b\n"[..], "line 1"),
        (&b"\xEF\xBB\xBFOp,id,v,v\nI,1,a,b\n"[..], "line 1"),
    ] {
        let e = open(text, &s).err().expect("duplicate refused").to_string();
        assert!(
            e.contains(KEY) && e.contains(line) && e.contains("column `v`") && e.contains("twice"),
            "{e}"
        );
    }
}

/// Only `BI_<key column>`, with the prefix as configured (as DMS writes it), is a before-image;
/// `bi_total` next to `total`, and before-images of non-key columns, are data. Was: both
/// dropped without a word.
#[test]
fn only_before_images_of_key_columns_are_taken_out() {
    let s = CsvSettings::simple(",", "");
    let src = open(
        b"Op,BI_id,id,total,bi_total,qty,BI_qty\nU,1,2,6,8,4,2\n",
        &s,
    )
    .unwrap();
    let names: Vec<String> = src.columns().into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["id", "total", "bi_total", "qty", "bi_qty"]);
    let b = read_through(Ok(src), &Typing::Strings, vec![PrimitiveType::Long]).unwrap();
    let before = b[0]
        .before
        .as_ref()
        .expect("BI_id is the key's before-image");
    assert_eq!(before.column(0).as_primitive::<Int64Type>().value(0), 1);
}

/// A file wider than `MAX_COLUMNS` is refused at once, naming the file; one at the limit opens.
/// Was: ~42 KB per column for one row, 100,000 columns (a 1 MB file) took 4.2 GB and 275 s.
#[test]
fn too_many_columns_are_refused_quickly() {
    let limit = dms2iceberg::read::MAX_COLUMNS;
    let (t, r) = open_wide(100_000, |i| format!("c{i}"));
    let e = r.expect_err("100,000 columns are refused");
    assert!(
        e.contains(KEY) && e.contains("100000 data columns") && e.contains(&limit.to_string()),
        "{e}"
    );
    assert!(t < Duration::from_secs(5), "refusing took {t:?}");
    // `open_wide` names the first column `c0`: with `id` it is one column more.
    let (_, r) = open_wide(limit - 1, |i| {
        if i == 0 { "id".into() } else { format!("c{i}") }
    });
    assert_eq!(r.unwrap(), limit - 1);
    let (_, r) = open_wide(limit + 1, |i| format!("c{i}"));
    assert!(r.is_err());
}

/// A FIFO or a dangling link where a DMS file should be is an error naming it, found without
/// opening it (a FIFO would block the reader for ever).
#[test]
fn non_regular_files_are_named_not_opened() {
    let dir = std::env::temp_dir().join(format!("d2i-nonregular-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("20220302-1134010000.csv");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let link = dir.join("20220302-1135010000.csv");
    std::os::unix::fs::symlink("missing.csv", &link).unwrap();
    let s = CsvSettings::simple(",", "");
    for (path, why) in [
        (fifo, "not a regular file"),
        (link, "symbolic link to a file that does not exist"),
    ] {
        let started = Instant::now();
        let e = SourceFile::open(
            &object(KEY),
            SourceData::Path(path.clone()),
            &s.table_config(),
            None,
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains(why),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two sources hold the same bytes: copies of one DMS file.
#[test]
fn same_content_compares_bytes() {
    let a = SourceData::Bytes(b"Op,id\nI,1\n".to_vec().into());
    let b = SourceData::Bytes(b"Op,id\nI,1\n".to_vec().into());
    let c = SourceData::Bytes(b"Op,id\nI,2\n".to_vec().into());
    assert!(a.same_content(&b).unwrap());
    assert!(!a.same_content(&c).unwrap());
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut other = big.clone();
    other[150_000] ^= 1;
    let big = SourceData::Bytes(big.into());
    assert!(big.same_content(&big.clone()).unwrap());
    assert!(!big.same_content(&SourceData::Bytes(other.into())).unwrap());
}
