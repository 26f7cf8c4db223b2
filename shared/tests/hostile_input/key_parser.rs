//! 1. The key parser: any object key gives a place or an error, never a panic.

use super::*;

/// What a located schema or table name may be: one plain path component.
/// A source name as DMS writes quoted identifiers (issue 16): letters, digits, interior spaces
/// and ASCII punctuation other than `.`, `*`, `?`, `%`, quotes, backticks, `/` and `\\`.
pub(super) fn plain_name(n: &str) -> bool {
    !n.is_empty()
        && n.trim() == n
        && !n.contains(['/', '\\', '.', '*', '?', '%', '"', '\'', '`'])
        && n.chars().all(|c| {
            !c.is_control() && (c.is_alphanumeric() || c == ' ' || c.is_ascii_punctuation())
        })
}

/// The invariants of one `locate` answer.
pub(super) fn check_locate(key: &str, source: &SourceSettings) -> TestCaseResult {
    match locate(key, source) {
        Ok(None) => {}
        Ok(Some(o)) => {
            prop_assert_eq!(&o.key, key);
            prop_assert!(
                plain_name(&o.schema),
                "schema {:?} from {:?}",
                o.schema,
                key
            );
            prop_assert!(plain_name(&o.table), "table {:?} from {:?}", o.table, key);
            let segments: Vec<&str> = key.split('/').collect();
            prop_assert!(
                !segments.iter().any(|s| *s == ".." || *s == "."),
                "`.`/`..` segment accepted: {key:?}"
            );
            prop_assert!(!key.contains('\\') && !key.chars().any(char::is_control));
            prop_assert!(
                key.trim_start_matches('/')
                    .split('/')
                    .all(|s| !s.is_empty()),
                "empty segment accepted: {key:?}"
            );
            prop_assert!(
                segments
                    .windows(2)
                    .any(|w| w[0] == o.schema && w[1] == o.table),
                "schema/table are not adjacent segments of {key:?}"
            );
            let order = o.order.as_str();
            prop_assert_eq!(OrderKey::parse(order), Some(o.order.clone()));
            match o.kind {
                FileKind::Load => prop_assert!(order.starts_with("0/")),
                FileKind::Cdc => prop_assert!(order.starts_with("1/")),
            }
            let name = key.rsplit('/').next().unwrap_or_default();
            let name = name.strip_suffix(".gz").unwrap_or(name);
            match o.format {
                FileFormat::Csv => prop_assert!(name.ends_with(".csv")),
                FileFormat::Parquet => prop_assert!(name.ends_with(".parquet")),
            }
        }
        Err(e) => {
            prop_assert!(matches!(e, Error::Key { .. }), "{e:?}");
            prop_assert!(e.is_input_error());
            prop_assert!(
                e.to_string().contains(key),
                "error does not name the key: {e}"
            );
        }
    }
    Ok(())
}

pub(super) fn key_segment() -> BoxedStrategy<String> {
    let tricky = prop::sample::select(vec![
        "dms",
        "sales",
        "product",
        "..",
        ".",
        "",
        "...",
        "%2F",
        "%2E%2E",
        "a%2Fb",
        "a\\b",
        "\\",
        "2022",
        "03",
        "2022-03-02",
        "20220302",
        "2022_03_02",
        "11",
        "SEGMENT1_LOAD00000001.csv",
        "LOAD00000001.csv",
        "20220302-113401.csv",
        "p_1",
        "é",
        "日本",
        "a b",
        "a\tb",
        "a\u{0}b",
        "\u{7f}",
        "\u{85}",
        "\u{202e}rtl",
        "zero\u{200b}width",
        "$",
        "#",
        "-",
        "_",
        "~",
        "a.b",
        " ",
        "%",
        "+",
        "ǅ",
        "\u{feff}",
        "CON",
        "nul",
    ])
    .prop_map(String::from);
    prop_oneof![
        4 => "[a-z][a-z0-9_]{0,8}",
        3 => tricky,
        1 => "\\PC{0,6}",
        1 => any::<String>(),
        1 => "[0-9_-]{1,10}",
    ]
    .boxed()
}

pub(super) fn file_name() -> BoxedStrategy<String> {
    let stem = prop_oneof![
        3 => ("(SEGMENT[0-9]{1,3}_)?", "[0-9A-Fa-f]{0,18}").prop_map(|(s, h)| format!("{s}LOAD{h}")),
        3 => "[0-9]{6,9}-[0-9]{4,20}",
        1 => "\\PC{0,12}",
        1 => prop::sample::select(vec!["LOAD", "SEGMENT_LOAD1", "SEGMENT1_", "-", "LOAD-1"]).prop_map(String::from),
    ];
    let ext = prop::sample::select(vec![
        ".csv",
        ".parquet",
        ".csv.gz",
        ".parquet.gz",
        ".gz",
        ".CSV",
        "",
        ".csv.",
        ".gz.csv",
        ".csv.gz.gz",
    ]);
    (stem, ext).prop_map(|(s, e)| s + e).boxed()
}

pub(super) fn structured_key() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["", "", "/", "//"]),
        prop::collection::vec(key_segment(), 0..7),
        file_name(),
        prop::sample::select(vec!["", "", "", "/", "\n"]),
    )
        .prop_map(|(lead, segs, file, trail)| {
            let mut k = lead.to_string();
            for s in segs {
                k.push_str(&s);
                k.push('/');
            }
            k + &file + trail
        })
}

pub(super) fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => structured_key(),
        1 => any::<String>(),
        1 => "[a-z/._%\\\\]{0,40}",
    ]
}

pub(super) fn source_settings() -> impl Strategy<Value = SourceSettings> {
    (
        prop::option::of(prop::sample::select(vec![
            "dms",
            "landing/dms",
            "/dms/",
            "",
            "a/b",
            "..",
            "dms//x",
            "sales",
        ])),
        any::<bool>(),
    )
        .prop_map(|(f, p)| SourceSettings {
            bucket_folder: f.map(String::from),
            parallel_load_folders: p,
            ..Default::default()
        })
}

#[test]
fn locate_never_panics_and_only_yields_plain_names() {
    check(
        "locate_never_panics_and_only_yields_plain_names",
        2500,
        (any_key(), source_settings()),
        |(key, source)| check_locate(&key, &source),
    );
}

/// S3 event keys are %-encoded: any byte string encoded as S3 would decodes back exactly (or is
/// refused as non-UTF-8), and whatever it decodes to is then located safely.
#[test]
fn event_keys_of_any_bytes_decode_exactly_and_locate_safely() {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..48),
        structured_key().prop_map(String::into_bytes),
    ];
    let style = prop::collection::vec(0u8..4, 48..49);
    check(
        "event_keys_of_any_bytes_decode_exactly_and_locate_safely",
        2000,
        (bytes, style, source_settings()),
        |(bytes, style, source)| {
            // Encode: unreserved bytes literally (or escaped), space as `+` (or %20), the rest
            // as %XX in either case.
            let mut enc = String::new();
            for (i, &b) in bytes.iter().enumerate() {
                let s = style[i % style.len()];
                if (b.is_ascii_alphanumeric() || b"/-_.!*'()".contains(&b)) && s != 0 {
                    enc.push(b as char);
                } else if b == b' ' && s != 0 {
                    enc.push('+');
                } else if s % 2 == 0 {
                    enc.push_str(&format!("%{b:02X}"));
                } else {
                    enc.push_str(&format!("%{b:02x}"));
                }
            }
            match decode_event_key(&enc) {
                Ok(k) => {
                    prop_assert_eq!(k.as_bytes(), &bytes[..]);
                    check_locate(&k, &source)?;
                }
                Err(e) => {
                    prop_assert!(std::str::from_utf8(&bytes).is_err(), "{enc}: {e}");
                    prop_assert!(e.to_string().contains(&enc));
                }
            }
            Ok(())
        },
    );
}

#[test]
fn decoding_arbitrary_event_keys_never_panics() {
    let raw = prop_oneof![
        any::<String>(),
        "[%+a-fA-F0-9/G.]{0,24}",
        "(%[0-9a-fA-F]{0,2}|%[+-][0-9]|[a-z/]){0,12}",
    ];
    check(
        "decoding_arbitrary_event_keys_never_panics",
        2000,
        (raw, source_settings()),
        |(raw, source)| {
            match decode_event_key(&raw) {
                Ok(k) => check_locate(&k, &source)?,
                Err(e) => prop_assert!(e.to_string().contains(&raw)),
            }
            Ok(())
        },
    );
}

pub(super) fn name_with_letter() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9_$#-]{0,15}"
}

/// One date partition in each shape DMS writes (`DatePartitionSequence` × delimiter), holding a
/// real date: the locator strips only those (a table may be called `2022`).
pub(super) fn date_folders() -> impl Strategy<Value = Vec<String>> {
    let (y, m, d, h) = (
        "(19[7-9][0-9]|2[0-9]{3})",
        "(0[1-9]|1[0-2])",
        "(0[1-9]|1[0-9]|2[0-8])",
        "([01][0-9]|2[0-3])",
    );
    let shapes = [
        format!("{y}/{m}/{d}"),
        format!("{y}/{m}/{d}/{h}"),
        format!("{y}/{m}"),
        format!("{m}/{y}/{d}"),
        format!("{d}/{m}/{y}"),
        format!("{y}-{m}-{d}"),
        format!("{y}_{m}_{d}"),
        format!("{y}{m}{d}"),
        format!("{y}{m}{d}{h}"),
        format!("{y}{m}"),
    ];
    let one = proptest::strategy::Union::new(shapes.iter().map(|p| {
        proptest::string::string_regex(p)
            .expect("a valid pattern")
            .boxed()
    }));
    prop::collection::vec(one, 1..2)
}

pub(super) fn dms_file_name() -> impl Strategy<Value = String> {
    let stem = prop_oneof![
        "LOAD[0-9A-F]{8}",
        "SEGMENT[1-9]_LOAD[0-9A-F]{8}",
        "[12][0-9]{7}-[0-9]{10}",
        "[12][0-9]{7}-[0-9]{6,18}",
    ];
    let ext = prop::sample::select(vec![".csv", ".parquet", ".csv.gz", ".parquet.gz"]);
    (stem, ext).prop_map(|(s, e)| s + e)
}

/// The same file under any date-partition folders belongs to the same table, in the same order.
#[test]
fn date_folders_do_not_change_the_table() {
    let prefix = prop::collection::vec("[a-z][a-z0-9]{0,6}", 0..3);
    check(
        "date_folders_do_not_change_the_table",
        1000,
        (
            prefix,
            name_with_letter(),
            name_with_letter(),
            date_folders(),
            dms_file_name(),
            any::<bool>(),
            any::<bool>(),
            "[a-z][a-z0-9_]{0,8}",
        ),
        |(prefix, schema, table, dates, file, with_bucket_folder, parallel, segment)| {
            let folder = with_bucket_folder.then(|| "landing/dms".to_string());
            let source = SourceSettings {
                bucket_folder: folder.clone(),
                parallel_load_folders: parallel,
                ..Default::default()
            };
            let mut head: Vec<String> = prefix;
            if let Some(f) = &folder {
                head.push(f.clone());
            }
            head.push(schema.clone());
            head.push(table.clone());
            // With parallel load, DMS writes LOAD files one (segment) folder deeper.
            if parallel && file.contains("LOAD") {
                head.push(segment);
            }
            let plain = format!("{}/{file}", head.join("/"));
            let dated = format!("{}/{}/{file}", head.join("/"), dates.join("/"));
            let a = locate(&plain, &source);
            let b = locate(&dated, &source);
            let (Ok(Some(a)), Ok(Some(b))) = (&a, &b) else {
                return Err(TestCaseError::fail(format!(
                    "{plain}: {a:?}\n{dated}: {b:?}"
                )));
            };
            prop_assert_eq!((&a.schema, &a.table), (&schema, &table));
            prop_assert_eq!((&b.schema, &b.table), (&schema, &table));
            prop_assert_eq!((a.kind, a.format, &a.order), (b.kind, b.format, &b.order));
            Ok(())
        },
    );
}

pub(super) fn load_key(counter: u64, width: usize, segment: Option<u8>) -> String {
    let seg = segment.map(|s| format!("SEGMENT{s}_")).unwrap_or_default();
    format!("dms/s/t/{seg}LOAD{counter:0width$X}.csv")
}

/// LOAD files sort by their hex counter whatever its width (DMS pads to 8 digits; counters past
/// FFFFFFFF get longer), and every LOAD file sorts before every change file.
#[test]
fn load_order_is_monotone_in_the_hex_counter() {
    let counter = prop_oneof![0u64..0x100, 0u64..0x1_0000_0000, any::<u64>()];
    check(
        "load_order_is_monotone_in_the_hex_counter",
        2000,
        (
            counter.clone(),
            counter,
            1usize..=16,
            1usize..=16,
            prop::option::of(1u8..10),
            "[12][0-9]{7}-[0-9]{6,18}",
        ),
        |(a, b, wa, wb, seg, cdc)| {
            let s = SourceSettings::default();
            let ka = load_key(a, wa, seg);
            let kb = load_key(b, wb, seg);
            let oa = locate(&ka, &s).unwrap().unwrap();
            let ob = locate(&kb, &s).unwrap().unwrap();
            prop_assert_eq!(oa.kind, FileKind::Load);
            prop_assert_eq!(oa.order.cmp(&ob.order), a.cmp(&b), "{} vs {}", ka, kb);
            // The rendered order (stored in snapshot summaries) sorts the same way.
            prop_assert_eq!(oa.order.as_str().cmp(ob.order.as_str()), a.cmp(&b));
            let c = locate(&format!("dms/s/t/{cdc}.csv"), &s).unwrap().unwrap();
            prop_assert!(oa.order < c.order && ob.order < c.order);
            Ok(())
        },
    );
}

/// Change files sort by time, whatever the width of the fraction.
#[test]
fn change_file_order_is_monotone_in_time() {
    let stamp = (
        20000101u32..20991231,
        0u32..240000,
        0u64..1_000_000_000_000,
        0usize..=12,
    );
    check(
        "change_file_order_is_monotone_in_time",
        2000,
        (stamp.clone(), stamp),
        |(a, b)| {
            // (date, hhmmss, fraction as 12 digits, digits shown): shown digits of the fraction
            // must be exact, so the shown value is the fraction truncated to `width` digits.
            let render = |(d, t, f, w): (u32, u32, u64, usize)| {
                let frac = format!("{f:012}");
                (
                    format!("dms/s/t/{d}-{t:06}{}.csv", &frac[..w]),
                    (d, t, frac[..w].to_string() + &"0".repeat(12 - w)),
                )
            };
            let (ka, ta) = render(a);
            let (kb, tb) = render(b);
            let s = SourceSettings::default();
            let oa = locate(&ka, &s).unwrap().unwrap();
            let ob = locate(&kb, &s).unwrap().unwrap();
            prop_assert_eq!(oa.kind, FileKind::Cdc);
            prop_assert_eq!(oa.order.cmp(&ob.order), ta.cmp(&tb), "{} vs {}", ka, kb);
            Ok(())
        },
    );
}

#[test]
fn unsafe_and_odd_keys() {
    let s = SourceSettings::default();
    let err = |k: &str| {
        let r = locate(k, &s);
        assert!(r.is_err(), "{k:?} should be refused: {r:?}");
        let m = r.unwrap_err().to_string();
        assert!(m.contains(k), "{m}");
    };
    let none = |k: &str| assert_eq!(locate(k, &s).unwrap(), None, "{k:?}");
    let table = |k: &str| {
        let o = locate(k, &s)
            .unwrap()
            .unwrap_or_else(|| panic!("{k:?} not located"));
        (o.schema, o.table)
    };
    for k in [
        "dms/../etc/t/LOAD00000001.csv",
        "dms/s/../LOAD00000001.csv",
        "../s/t/LOAD00000001.csv",
        "dms/s/t/../LOAD00000001.csv",
        "dms/./s/t/LOAD00000001.csv",
        "dms/s/t/./LOAD00000001.csv",
        "dms/s/./LOAD00000001.csv",
        "dms\\s\\t\\LOAD00000001.csv",
        "dms/s/t\\..\\x/LOAD00000001.csv",
        "dms//t/LOAD00000001.csv",
        "dms/s//LOAD00000001.csv",
        "dms/s/t//LOAD00000001.csv",
        "dms/s%2Ft/t/LOAD00000001.csv",
        "dms/%2E%2E/t/LOAD00000001.csv",
        "dms/s/t\n/LOAD00000001.csv",
        "dms/s/t\u{0}/LOAD00000001.csv",
        "dms/s/t\u{7f}/LOAD00000001.csv",
        "dms/s/t\u{202e}x/LOAD00000001.csv",
        "dms/s/zero\u{200b}width/LOAD00000001.csv",
        "dms/s/ a/LOAD00000001.csv",
        "dms/s/a.b/LOAD00000001.csv",
        "dms/s/a*/LOAD00000001.csv",
        "LOAD00000001.csv",
        "/LOAD00000001.csv",
        "t/LOAD00000001.csv",
        "",
    ] {
        err(k);
    }
    for k in [
        "dms/s/t/",
        "dms/s/t",
        "/",
        "//",
        "dms/s/t/LOAD00000001.txt",
        "dms/s/t/LOAD.csv",
        "dms/s/t/load00000001.csv",
        "dms/s/t/LOAD0000000g.csv",
        "dms/s/t/LOAD00000000000000001.csv",
        "dms/s/t/SEGMENT_LOAD00000001.csv",
        "dms/s/t/SEGMENTx_LOAD00000001.csv",
        "dms/s/t/SEGMENT1_20220302-113401.csv",
        "dms/s/t/2022030-113401.csv",
        "dms/s/t/20220302-11340.csv",
        "dms/s/t/20220302-1134010000000000000.csv",
        "dms/s/t/20220302-113401.csv.zip",
        "dms/s/t/.csv",
        "dms/s/t/..csv",
    ] {
        none(k);
    }
    // Encoded slashes and dots become real ones after decoding: then the usual rules apply.
    let decoded = decode_event_key("dms/s/t%2F..%2F..%2Fx/LOAD00000001.csv").unwrap();
    err(&decoded);
    let decoded = decode_event_key("dms%2Fsales%2Fproduct%2FLOAD00000001.csv").unwrap();
    assert_eq!(table(&decoded), ("sales".into(), "product".into()));
    // Leading slashes (local absolute paths) are fine.
    assert_eq!(
        table("//dms/s/t/LOAD00000001.csv"),
        ("s".into(), "t".into())
    );
    assert_eq!(
        table("/tmp/x/s/t/LOAD00000001.csv"),
        ("s".into(), "t".into())
    );
    // Quoted source names (SQL Server, PostgreSQL) hold spaces and punctuation (issue 16).
    assert_eq!(
        table("dms/sales/order line$items/LOAD00000001.csv"),
        ("sales".into(), "order line$items".into())
    );
    // Names in other scripts are names.
    assert_eq!(
        table("dms/販売/製品/LOAD00000001.csv"),
        ("販売".into(), "製品".into())
    );
}

/// 100 KB keys of every shape are answered quickly (no quadratic work, no deep recursion).
#[test]
fn very_long_keys() {
    let file = "LOAD00000001.csv";
    let n = 100_000;
    let keys: Vec<(String, SourceSettings)> = vec![
        (
            format!("s/{}/{file}", "a".repeat(n)),
            SourceSettings::default(),
        ),
        (
            format!("{}s/t/{file}", "a/".repeat(n / 2)),
            SourceSettings::default(),
        ),
        (
            format!("{}s/t/{file}", "/".repeat(n)),
            SourceSettings::default(),
        ),
        (
            format!("s/t/{}{file}", "2022/".repeat(n / 5)),
            SourceSettings::default(),
        ),
        (
            format!("s/t/{}{file}", "../".repeat(n / 3)),
            SourceSettings::default(),
        ),
        (format!("s/t/{}", "9".repeat(n)), SourceSettings::default()),
        (
            format!("s/t/LOAD{}.csv", "0".repeat(n)),
            SourceSettings::default(),
        ),
        (
            format!("s/t/20220302-{}.csv", "1".repeat(n)),
            SourceSettings::default(),
        ),
        ("é".repeat(n / 2), SourceSettings::default()),
        (
            format!("{}s/t/{file}", "dms/".repeat(n / 4)),
            SourceSettings {
                bucket_folder: Some("dms".into()),
                parallel_load_folders: true,
                ..Default::default()
            },
        ),
        (
            format!("{}x/s/t/{file}", "a/".repeat(n / 2)),
            SourceSettings {
                bucket_folder: Some(["a"; 50].join("/") + "/b"),
                parallel_load_folders: false,
                ..Default::default()
            },
        ),
    ];
    for (k, src) in &keys {
        let start = Instant::now();
        let r = locate(k, src);
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{} bytes took {took:?}",
            k.len()
        );
        if let Ok(Some(o)) = &r {
            assert!(plain_name(&o.schema) && plain_name(&o.table));
        }
        if let Err(e) = &r {
            assert!(e.to_string().contains(k.as_str()));
        }
        let start = Instant::now();
        let _ = decode_event_key(k);
        let _ = decode_event_key(&"%41".repeat(n / 3));
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
