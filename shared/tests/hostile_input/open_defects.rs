//! Open defects (ignored until fixed) and slow checks.

use super::*;

/// Errors raised in the byte stream under the CSV parser (the record-size cap, a 0x1F byte with a
/// multi-character delimiter, the decompression cap) name no line, and name the file twice: the
/// reader puts the label in its io::Error and `csv_error` (read/csv.rs) adds it again, e.g.
/// "bad input: f.csv: f.csv: byte 0x1F outside quotes cannot be read with a multi-character
/// delimiter". The record at fault starts at a known line (the reader tracks record starts).
#[test]
fn bug_stream_errors_lack_the_line() {
    let s = CsvSettings::simple("||", "");
    let r = read_through(
        open(b"Op||id||v\nI||1||a\nI||2\x1f||b\n", &s),
        &Typing::Strings,
        vec![],
    );
    let (_, e) = r.expect_err("0x1F is refused");
    let m = e.to_string();
    assert_eq!(m.matches(KEY).count(), 1, "{m}");
    assert!(m.contains("line 3"), "{m}");
}

/// Without `bucket_folder`, trailing all-digit folders are skipped as date partitions, so a table
/// whose name is digits/underscores (`2022`, `_1`) under any prefix folder is attributed to its
/// parent: `dms/sales/2022/LOAD….csv` is located as table `dms.sales`, not `sales.2022`. A key
/// alone cannot always tell; ways out: require `bucket_folder` when a key has more than
/// `<schema>/<table>/` before the file, accept as date folders only real dates (year 19xx/20xx,
/// month 01-12, day 01-31, hour 00-23) in DMS's `DatePartitionSequence` shapes, or a
/// `date_partition_folders` setting.
#[test]
fn numeric_table_name_is_not_a_date_folder() {
    let o = locate(
        "dms/sales/2022/LOAD00000001.csv",
        &SourceSettings::default(),
    )
    .unwrap()
    .unwrap();
    assert_eq!((o.schema.as_str(), o.table.as_str()), ("sales", "2022"));
}

/// The record-size cap (`MAX_RECORD_BYTES`, 128 MiB) stops a 256 MiB line: an error naming the
/// file, with peak memory bounded by the cap (~2x it: the record buffer doubles), not by the line.
#[test]
#[ignore = "slow (~40 s in a debug build): a 256 MiB line, plain and gzipped, in child processes"]
fn slow_record_size_cap_bounds_memory() {
    for scenario in ["data_line", "gzip_line"] {
        let m = measure(scenario, Some(256));
        assert!(
            m.growth_kb < 300 * 1024 && m.outcome.contains("error") && m.outcome.contains(KEY),
            "{scenario}: a {} KB input grew the peak by {} MB and {}",
            m.input_kb,
            m.growth_kb / 1024,
            m.outcome
        );
    }
}

/// The CSV reader's decompression cap is the fixed `DEFAULT_MAX_DECOMPRESSED_BYTES` (8 GiB): it
/// cannot be lowered per deployment (a Lambda has far less memory or /tmp), and testing it means
/// inflating 8 GiB. This reads an 8.7 MB bomb that inflates to 8.5 GiB of blank lines through
/// the CSV reader and expects the cap error naming the file: it passes, in 321 s (debug build, 2
/// cores).
#[test]
#[ignore = "slow (~5 min in a debug build): an 8.7 MB gzip inflating past the fixed 8 GiB cap"]
fn slow_gzip_bomb_past_the_default_cap() {
    let bomb = gzip_bomb(64 << 20, 136, b'\n');
    let start = Instant::now();
    let s = CsvSettings::simple(",", "");
    let r = read_through(open(&bomb, &s), &Typing::Strings, vec![]);
    let (_, e) = r.expect_err("the cap must stop the bomb");
    let m = e.to_string();
    if verbose() {
        eprintln!(
            "{} KB bomb stopped after {:.1?}: {m}",
            bomb.len() / 1024,
            start.elapsed()
        );
    }
    assert!(m.contains(KEY) && m.contains("limit"), "{m}");
}
