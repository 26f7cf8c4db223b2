//! locate: an object key (S3 key or local path) → which DMS table it belongs to, whether it is a
//! full-load or change file, and its place in DMS order; and what is known of the object's
//! content ([`ObjectMeta`]), which tells two objects under one key apart.
//!
//! Layout (see docs/configuration.md, "Input"): `[bucket_folder/]<schema>/<table>/[date folders/]` then
//! `LOAD<hex>` (optionally `SEGMENTn_`-prefixed, or one `<segment>/` folder deeper with parallel
//! load) or `YYYYMMDD-HHMMSS<fraction>` change files, `.csv`/`.parquet`, optionally `.gz`.
//! Keys are validated strictly: no `..` or empty segments, no control characters. Schema and
//! table folders are the source's names as DMS writes them, which may hold spaces and `$`
//! (quoted names in SQL Server or PostgreSQL): such a table needs a `target` in the config,
//! since Iceberg and Glue names are lower-case identifiers ([`crate::config::Config::table`]).

use std::cmp::Ordering;
use std::fmt;

use crate::config::SourceSettings;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    /// Full load (`LOAD00000001.csv`): a snapshot of the source table.
    Load,
    /// Change data capture: rows carry `Op` I/U/D.
    Cdc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileFormat {
    Csv,
    Parquet,
}

/// Position of a file in DMS order; `Ord` on this is the apply order. Rendered as a string that
/// sorts the same way, stored in snapshot summaries as the table's watermark.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderKey(String);

impl OrderKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The place of a full-load file (they come before every change file).
    pub fn is_load(&self) -> bool {
        self.0.starts_with("0/")
    }

    pub fn parse(s: &str) -> Option<OrderKey> {
        (s.starts_with("0/") || s.starts_with("1/")).then(|| OrderKey(s.to_string()))
    }

    /// The place as people name it, for messages: the DMS file name it stands for, without the
    /// extension (`20220302-1134010000`, `LOAD00000001`, `SEGMENT2_LOAD00000003`), the
    /// fraction of a change file's time as DMS writes it (at least four digits).
    pub fn file_stem(&self) -> String {
        if let Some(stem) = self.0.strip_prefix("1/") {
            return match stem.split_once('-') {
                Some((date, time)) if time.len() >= 6 => {
                    let (hms, fraction) = time.split_at(6);
                    let fraction = fraction.trim_end_matches('0');
                    format!("{date}-{hms}{fraction:0<4}")
                }
                _ => stem.to_string(),
            };
        }
        if let Some(rest) = self.0.strip_prefix("0/") {
            let (hex, segment) = rest.split_once('/').unwrap_or((rest, ""));
            let counter = u64::from_str_radix(hex, 16).unwrap_or_default();
            let name = format!("LOAD{counter:08X}");
            return match segment.rsplit('/').find(|s| s.starts_with("SEGMENT")) {
                Some(seg) => format!("{seg}_{name}"),
                None if segment.is_empty() => name,
                None => format!("{segment}/{name}"),
            };
        }
        self.0.clone()
    }
}

impl Ord for OrderKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}
impl PartialOrd for OrderKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl fmt::Display for OrderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One DMS object, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmsObject {
    /// The key as given (decoded): used in messages and recorded in snapshot summaries.
    pub key: String,
    pub schema: String,
    pub table: String,
    pub kind: FileKind,
    pub format: FileFormat,
    pub order: OrderKey,
    /// A `CDC_TXN` file of `cdc_path` (`PreserveTransactions`), which holds the changes of
    /// several tables: this object is its rows of `schema.table` (the reader takes only those).
    pub transaction: bool,
}

impl DmsObject {
    /// `schema.table` as DMS names it.
    pub fn source_table(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// Table `schema.table`'s rows of the transaction file `key` (at `order`).
    pub fn in_transaction_file(key: &str, order: OrderKey, schema: &str, table: &str) -> DmsObject {
        DmsObject {
            key: key.to_string(),
            schema: schema.to_string(),
            table: table.to_string(),
            kind: FileKind::Cdc,
            format: FileFormat::Csv,
            order,
            transaction: true,
        }
    }
}

/// `[<bucket_folder>/]<cdc_path>/CDC_TXN-<yyyyMMddHHmmssSSS>.csv[.gz]` (`PreserveTransactions`
/// with `CdcPath`): its place in DMS order (among change files, by its time), or `None` when
/// `key` is no such file (or `cdc_path` is not set). The tables it holds are in its rows.
pub fn locate_transaction_file(key: &str, source: &SourceSettings) -> Result<Option<OrderKey>> {
    let Some(cdc_path) = source
        .cdc_path
        .as_deref()
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
    else {
        return Ok(None);
    };
    let bad = |reason: &str| Error::Key {
        key: key.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = key_path(key)?;
    let Some((folder, name)) = trimmed.rsplit_once('/') else {
        return Ok(None);
    };
    let name = name.strip_suffix(".gz").unwrap_or(name);
    let Some(stamp) = name
        .strip_prefix("CDC_TXN-")
        .and_then(|n| n.strip_suffix(".csv"))
    else {
        return Ok(None);
    };
    // The folder ends with `[<bucket_folder>/]<cdc_path>` (local paths may lead with more).
    let mut expected = String::new();
    if let Some(f) = source.bucket_folder.as_deref().map(|f| f.trim_matches('/'))
        && !f.is_empty()
    {
        expected.push_str(f);
        expected.push('/');
    }
    expected.push_str(cdc_path);
    let placed = folder == expected || folder.ends_with(&format!("/{expected}"));
    if !placed {
        return Ok(None);
    }
    if folder.split('/').any(|p| p == ".." || p == ".") {
        return Err(bad("contains a `.` or `..` segment"));
    }
    if stamp.len() != 17 || !stamp.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            "a CDC_TXN file's name is CDC_TXN-<yyyyMMddHHmmssSSS>.csv (17 digits)",
        ));
    }
    // Among change files by its time: `YYYYMMDD-HHMMSS` and the fraction, as theirs.
    Ok(OrderKey::parse(&format!(
        "1/{}-{}{:0<12}",
        &stamp[..8],
        &stamp[8..14],
        &stamp[14..]
    )))
}

/// The path part of a key (an `s3://bucket/key` URI's key: the bucket is not part of the
/// layout), once it is known to hold no backslash or control character.
fn key_path(key: &str) -> Result<&str> {
    if key.is_empty() || key.contains('\\') || key.chars().any(|c| c.is_control()) {
        return Err(Error::Key {
            key: key.to_string(),
            reason: "contains a backslash or control character".to_string(),
        });
    }
    Ok(match key.strip_prefix("s3://") {
        Some(rest) => rest.split_once('/').map_or("", |(_, k)| k),
        None => key,
    })
}

/// Parses `key`. `Ok(None)`: not a DMS data file (other objects may share the bucket); `Err`: it
/// looks like DMS output but is malformed or unsafe.
pub fn locate(key: &str, source: &SourceSettings) -> Result<Option<DmsObject>> {
    let bad = |reason: &str| Error::Key {
        key: key.to_string(),
        reason: reason.to_string(),
    };
    let key_trimmed = key_path(key)?.trim_start_matches('/');
    let mut parts: Vec<&str> = key_trimmed.split('/').collect();
    if parts.iter().any(|p| *p == ".." || *p == ".") {
        return Err(bad("contains a `.` or `..` segment"));
    }
    let Some(file_name) = parts.pop() else {
        return Ok(None);
    };
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad("contains an empty path segment"));
    }
    let Some((kind, format, stem_order)) = parse_file_name(file_name) else {
        return Ok(None);
    };
    let (schema, table, segment) = match source
        .bucket_folder
        .as_deref()
        .map(|f| f.trim_matches('/'))
        .filter(|f| !f.is_empty())
    {
        Some(folder) => {
            let prefix: Vec<&str> = folder.split('/').collect();
            // Local paths may carry leading directories before the bucket folder, and a schema
            // may be named like the folder (`shop/shop/orders/`): the first occurrence that
            // leaves a valid `<schema>/<table>/` layout is the anchor.
            let mut last_error = None;
            let mut found = None;
            for i in (0..parts.len()).filter(|&i| parts[i..].starts_with(&prefix)) {
                match table_folders(&parts[i + prefix.len()..], kind, source, true) {
                    Ok(t) => {
                        found = Some(t);
                        break;
                    }
                    Err(reason) => last_error = Some(reason),
                }
            }
            match (found, last_error) {
                (Some(t), _) => t,
                (None, Some(reason)) => return Err(bad(&reason)),
                (None, None) => return Ok(None),
            }
        }
        None => table_folders(&parts, kind, source, false).map_err(|r| bad(&r))?,
    };
    let order = match (kind, stem_order) {
        (
            FileKind::Load,
            StemOrder::Load {
                counter,
                segment: seg,
            },
        ) => {
            // Both a `SEGMENTn_` prefix and a segment folder may name the segment: keep both,
            // so two segments' files never share a place in DMS order.
            let seg = match (segment.is_empty(), seg.is_empty()) {
                (_, true) => segment,
                (true, false) => seg,
                (false, false) => format!("{segment}/{seg}"),
            };
            OrderKey(format!("0/{counter:016X}/{seg}"))
        }
        (_, StemOrder::Cdc(s)) => OrderKey(format!("1/{s}")),
        _ => return Err(bad("inconsistent file name")),
    };
    Ok(Some(DmsObject {
        key: key.to_string(),
        schema,
        table,
        kind,
        format,
        order,
        transaction: false,
    }))
}

/// `<schema>/<table>` (and a parallel-load segment folder) out of the folders before a DMS file
/// name. `anchored`: `folders` start right after the bucket folder, so the schema and table are
/// the first two and only date folders (and, for a parallel-load LOAD file, one segment folder)
/// may follow. Otherwise they are the last two, once those are stripped.
fn table_folders(
    folders: &[&str],
    kind: FileKind,
    source: &SourceSettings,
    anchored: bool,
) -> std::result::Result<(String, String, String), String> {
    let parallel = kind == FileKind::Load && source.parallel_load_folders;
    let mut segment = String::new();
    let (schema, table) = if anchored {
        let [schema, table, extra @ ..] = folders else {
            return Err("no <schema>/<table> after the bucket folder".into());
        };
        let mut extra = &extra[..extra.len() - date_folders(extra)];
        if let ([seg], true) = (extra, parallel) {
            segment = seg.to_string();
            extra = &[];
        }
        if let Some(first) = extra.first() {
            return Err(format!(
                "unexpected folder `{first}` between the table folder and the file (only date \
                 folders{} belong there)",
                if kind == FileKind::Load && !parallel {
                    ", or a parallel-load segment folder with `parallel_load_folders = true`,"
                } else {
                    ""
                }
            ));
        }
        (*schema, *table)
    } else {
        let mut rest = folders;
        if rest.len() > 2 {
            rest = &rest[..rest.len() - date_folders(&rest[2..])];
            if parallel && rest.len() > 2 {
                segment = rest[rest.len() - 1].to_string();
                rest = &rest[..rest.len() - 1];
            }
        }
        let [.., schema, table] = rest else {
            return Err("expected `<schema>/<table>/` before the file name".into());
        };
        (*schema, *table)
    };
    for name in [schema, table] {
        check_source_name(name)?;
    }
    Ok((schema.to_string(), table.to_string(), segment))
}

/// A schema or table folder as DMS names it. Source names may hold spaces and ASCII punctuation
/// (quoted identifiers). Refused: the characters the `schema.table` notation of the config and
/// its globs give a meaning (`.`, `*`, `?`); `%` (a name that reads as URL-encoded, `s%2Ft`, is
/// a decoding mistake, not a table); quotes and backticks (messages quote names with them);
/// spaces at either end (which the config could not tell apart); and any other character that
/// is not a letter or digit (control, invisible and bidirectional-override characters).
fn check_source_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.trim() != name {
        return Err(format!(
            "`{name}` is not a schema or table name (empty, or spaces at an end)"
        ));
    }
    let allowed = |c: char| {
        c.is_alphanumeric()
            || c == ' '
            || (c.is_ascii_punctuation() && !matches!(c, '.' | '*' | '?' | '%' | '"' | '\'' | '`'))
    };
    if let Some(c) = name.chars().find(|c| !allowed(*c)) {
        let shown = if c.is_control() || !c.is_ascii() && !c.is_alphanumeric() {
            format!("U+{:04X}", c as u32)
        } else {
            format!("`{c}`")
        };
        return Err(format!(
            "`{}` is not a schema or table name dms2iceberg can address: {shown} is not allowed \
             in one (`.`, `*` and `?` have a meaning in `schema.table` names and their globs)",
            name.escape_debug()
        ));
    }
    Ok(())
}

enum StemOrder {
    Load { counter: u64, segment: String },
    Cdc(String),
}

fn parse_file_name(name: &str) -> Option<(FileKind, FileFormat, StemOrder)> {
    let name = name.strip_suffix(".gz").unwrap_or(name);
    let (stem, format) = if let Some(s) = name.strip_suffix(".csv") {
        (s, FileFormat::Csv)
    } else if let Some(s) = name.strip_suffix(".parquet") {
        (s, FileFormat::Parquet)
    } else {
        return None;
    };
    // SEGMENTn_LOAD…
    let (segment, rest) = match stem.split_once('_') {
        Some((seg, rest))
            if seg.len() > 7
                && seg.starts_with("SEGMENT")
                && seg[7..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            (seg.to_string(), rest)
        }
        _ => (String::new(), stem),
    };
    if let Some(hex) = rest.strip_prefix("LOAD") {
        if !hex.is_empty()
            && hex.len() <= 16
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
        {
            let counter = u64::from_str_radix(hex, 16).ok()?;
            return Some((FileKind::Load, format, StemOrder::Load { counter, segment }));
        }
        return None;
    }
    if !segment.is_empty() {
        return None;
    }
    // YYYYMMDD-HHMMSS[fraction]: order by the timestamp, the fraction right-padded so names of
    // different widths still compare by time.
    let (date, time) = stem.split_once('-')?;
    if date.len() != 8
        || time.len() < 6
        || time.len() > 6 + 12
        || !date.bytes().all(|b| b.is_ascii_digit())
        || !time.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let key = format!("{date}-{}{:0<12}", &time[..6], &time[6..]);
    Some((FileKind::Cdc, format, StemOrder::Cdc(key)))
}

/// How many trailing folders of `parts` are a DMS date partition (`DatePartitionEnabled`):
/// the shapes `DatePartitionSequence` × `DatePartitionDelimiter` produce (`2022/03/02`,
/// `2022/03/02/11`, `2022/03`, `03/2022/02`, `02/03/2022`, `2022-03-02`, `2022_03_02`,
/// `20220302`, …) holding a real date. Anything else (`2022` alone, `v2`, `p01`) is a schema,
/// table or segment name. (The folder date is the commit date, which may differ from the date in
/// a change file's name around midnight, so the two are not compared.)
fn date_folders(parts: &[&str]) -> usize {
    for n in (1..=parts.len().min(4)).rev() {
        let tail = &parts[parts.len() - n..];
        let groups: Vec<&str> = if n == 1 {
            let c = tail[0];
            match (c.contains('-'), c.contains('_')) {
                (true, false) => c.split('-').collect(),
                (false, true) => c.split('_').collect(),
                (false, false) => vec![c],
                (true, true) => continue,
            }
        } else {
            tail.to_vec()
        };
        if groups
            .iter()
            .any(|g| g.is_empty() || !g.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        if parse_date_groups(&groups).is_some() {
            return n;
        }
    }
    0
}

/// A date out of date-partition groups: (year, month, day if present).
fn parse_date_groups(groups: &[&str]) -> Option<(u32, u32, Option<u32>)> {
    // Field order of each DatePartitionSequence: Y year, M month, D day, H hour.
    const SEQUENCES: [&[(char, usize)]; 5] = [
        &[('Y', 4), ('M', 2), ('D', 2)],
        &[('Y', 4), ('M', 2), ('D', 2), ('H', 2)],
        &[('Y', 4), ('M', 2)],
        &[('M', 2), ('Y', 4), ('D', 2)],
        &[('D', 2), ('M', 2), ('Y', 4)],
    ];
    for seq in SEQUENCES {
        // Separated groups match field by field; one unseparated group splits by widths.
        let fields: Vec<&str> = if groups.len() == seq.len()
            && groups.iter().zip(seq).all(|(g, (_, w))| g.len() == *w)
        {
            groups.to_vec()
        } else if groups.len() == 1 && groups[0].len() == seq.iter().map(|(_, w)| w).sum::<usize>()
        {
            let mut at = 0;
            seq.iter()
                .map(|(_, w)| {
                    let f = &groups[0][at..at + w];
                    at += w;
                    f
                })
                .collect()
        } else {
            continue;
        };
        let (mut y, mut m, mut d, mut h) = (None, None, None, None);
        for ((k, _), f) in seq.iter().zip(&fields) {
            let v: u32 = f.parse().ok()?;
            match k {
                'Y' => y = Some(v),
                'M' => m = Some(v),
                'D' => d = Some(v),
                _ => h = Some(v),
            }
        }
        let (y, m) = (y?, m?);
        if (1970..=2999).contains(&y)
            && (1..=12).contains(&m)
            && d.is_none_or(|d| (1..=31).contains(&d))
            && h.is_none_or(|h| h <= 23)
        {
            return Some((y, m, d));
        }
    }
    None
}

/// The folder of `obj`'s table inside its key (`dms/sales/product/`), without any bucket:
/// listing it finds every file of the table, date folders included.
pub fn table_prefix(obj: &DmsObject) -> Option<String> {
    let key = match obj.key.strip_prefix("s3://") {
        Some(rest) => rest.split_once('/').map_or("", |(_, k)| k),
        None => obj.key.as_str(),
    };
    let parts: Vec<&str> = key.split('/').collect();
    let last = parts.len().checked_sub(1)?;
    (1..last)
        .rev()
        .find(|&i| parts[i] == obj.table && parts[i - 1] == obj.schema)
        .map(|i| format!("{}/", parts[..=i].join("/")))
}

/// Whether two keys name the same file (same file name, wherever the folder): copies of one DMS
/// file, as opposed to two files that merely share a place in DMS order.
pub fn same_file_name(a: &str, b: &str) -> bool {
    let name = |k: &str| k.rsplit('/').next().unwrap_or(k).to_string();
    name(a) == name(b)
}

/// Decodes an S3 event key: `+` is a space, `%XX` a byte (UTF-8).
pub fn decode_event_key(key: &str) -> Result<String> {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| Error::Key {
                        key: key.to_string(),
                        reason: "bad %-escape".into(),
                    })?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| Error::Key {
        key: key.to_string(),
        reason: "not UTF-8 after decoding".into(),
    })
}

/// What is known of one object's content, to tell two objects under one name apart.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectMeta {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub size: Option<u64>,
    /// Last modified (S3) or mtime (local), epoch ms.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub modified_ms: Option<i64>,
    /// S3 ETag as listed (quotes removed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub etag: Option<String>,
    /// MD5 of the stored bytes (hex): what records kept before XXH3, and what is computed to
    /// compare with them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub md5: Option<String>,
    /// XXH3-128 of the stored bytes (hex), computed when the file was read.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub xxh3: Option<String>,
}

impl ObjectMeta {
    /// Whether a digest of the content is known.
    pub fn has_digest(&self) -> bool {
        self.md5.is_some() || self.xxh3.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(key: &str) -> Option<DmsObject> {
        locate(key, &SourceSettings::default()).unwrap()
    }

    #[test]
    fn load_and_cdc() {
        let l = loc("dms/sales/product/LOAD00000001.csv").unwrap();
        assert_eq!((l.schema.as_str(), l.table.as_str()), ("sales", "product"));
        assert_eq!(l.kind, FileKind::Load);
        let c = loc("dms/sales/product/20220302-1134010000.csv.gz").unwrap();
        assert_eq!(c.kind, FileKind::Cdc);
        assert_eq!(c.format, FileFormat::Csv);
        assert!(l.order < c.order);
        let p = loc("sales/product/20220302-1135010000.parquet").unwrap();
        assert_eq!(p.format, FileFormat::Parquet);
        assert!(c.order < p.order);
    }

    #[test]
    fn an_order_reads_as_the_file_it_stands_for() {
        for (key, stem) in [
            ("s/t/20220302-1134010000.csv", "20220302-1134010000"),
            ("s/t/20220302-113300000.csv", "20220302-1133000000"),
            (
                "s/t/20220302-113401123456789.parquet",
                "20220302-113401123456789",
            ),
            ("s/t/LOAD00000001.csv", "LOAD00000001"),
            ("s/t/LOAD0000000A.csv", "LOAD0000000A"),
            ("s/t/SEGMENT2_LOAD00000003.csv", "SEGMENT2_LOAD00000003"),
        ] {
            assert_eq!(loc(key).unwrap().order.file_stem(), stem, "{key}");
        }
    }

    #[test]
    fn load_order_is_hex() {
        let a = loc("s/t/LOAD00000009.csv").unwrap();
        let b = loc("s/t/LOAD0000000A.csv").unwrap();
        let c = loc("s/t/LOAD00000010.csv").unwrap();
        assert!(a.order < b.order && b.order < c.order);
        let s1 = loc("s/t/SEGMENT1_LOAD00000001.csv").unwrap();
        let s2 = loc("s/t/SEGMENT2_LOAD00000009.csv").unwrap();
        assert!(s1.order < s2.order);
        assert_eq!(s2.table, "t");
    }

    #[test]
    fn date_folders_are_skipped() {
        for k in [
            "b/sales/product/2022/03/02/20220302-1134010000.csv",
            "sales/product/2022/03/02/11/20220302-1134010000.csv",
            "sales/product/2022-03-02/20220302-1134010000.csv",
            "sales/product/2022_03_02/LOAD00000001.csv",
            "sales/product/20220302/20220302-1134010000.csv",
        ] {
            let o = loc(k).unwrap();
            assert_eq!(
                (o.schema.as_str(), o.table.as_str()),
                ("sales", "product"),
                "{k}"
            );
        }
    }

    #[test]
    fn numeric_names_are_not_date_folders() {
        let o = loc("dms/sales/2022/LOAD00000001.csv").unwrap();
        assert_eq!((o.schema.as_str(), o.table.as_str()), ("sales", "2022"));
        // 13 is not a month: these are not date folders, so they name the schema and table.
        let o = loc("dms/sales/t1/2022/13/02/20220302-1134010000.csv").unwrap();
        assert_eq!((o.schema.as_str(), o.table.as_str()), ("13", "02"));
        for k in [
            "x/sales/product/03/2022/02/20220302-1134010000.csv",
            "x/sales/product/02/03/2022/20220302-1134010000.csv",
            "x/sales/product/2022/03/20220302-1134010000.csv",
            "x/sales/product/2022-03-02-11/20220302-1134010000.csv",
        ] {
            let o = loc(k).unwrap();
            assert_eq!(
                (o.schema.as_str(), o.table.as_str()),
                ("sales", "product"),
                "{k}"
            );
        }
    }

    #[test]
    fn fraction_width_does_not_break_order() {
        let a = loc("s/t/20220302-113401999.csv").unwrap();
        let b = loc("s/t/20220302-1134020000.csv").unwrap();
        assert!(a.order < b.order);
    }

    #[test]
    fn parallel_load_and_bucket_folder() {
        let src = SourceSettings {
            bucket_folder: Some("landing/dms".into()),
            parallel_load_folders: true,
            ..Default::default()
        };
        let o = locate("landing/dms/sales/product/part_1/LOAD00000001.csv", &src)
            .unwrap()
            .unwrap();
        assert_eq!((o.schema.as_str(), o.table.as_str()), ("sales", "product"));
        let o = locate(
            "/tmp/x/landing/dms/sales/product/2022/03/02/20220302-1134010000.csv",
            &src,
        )
        .unwrap()
        .unwrap();
        assert_eq!(o.table, "product");
        assert!(
            locate("other/sales/product/LOAD00000001.csv", &src)
                .unwrap()
                .is_none()
        );
        let src = SourceSettings {
            bucket_folder: None,
            parallel_load_folders: true,
            ..Default::default()
        };
        let o = locate("dms/sales/product/p2020/LOAD00000001.csv", &src)
            .unwrap()
            .unwrap();
        assert_eq!((o.schema.as_str(), o.table.as_str()), ("sales", "product"));
    }

    #[test]
    fn parallel_load_segments_keep_their_place_under_a_bucket_folder() {
        let src = SourceSettings {
            bucket_folder: Some("dms".into()),
            parallel_load_folders: true,
            ..Default::default()
        };
        let at = |k: &str| locate(k, &src).unwrap().unwrap();
        let a = at("dms/sales/product/seg_a/LOAD00000001.csv");
        let b = at("dms/sales/product/seg_b/LOAD00000001.csv");
        assert_eq!((b.schema.as_str(), b.table.as_str()), ("sales", "product"));
        assert_ne!(a.order, b.order);
        // A segment folder and a SEGMENTn_ prefix together still name distinct places.
        let c = at("dms/sales/product/seg_a/SEGMENT1_LOAD00000001.csv");
        let d = at("dms/sales/product/seg_b/SEGMENT1_LOAD00000001.csv");
        assert_ne!(c.order, d.order);
        // Without parallel_load_folders a folder there is refused, never silently merged.
        let plain = SourceSettings {
            bucket_folder: Some("dms".into()),
            parallel_load_folders: false,
            ..Default::default()
        };
        let e = locate("dms/sales/product/seg_a/LOAD00000001.csv", &plain)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("seg_a") && e.contains("parallel_load_folders"),
            "{e}"
        );
    }

    #[test]
    fn schema_named_like_the_bucket_folder() {
        let src = SourceSettings {
            bucket_folder: Some("shop".into()),
            parallel_load_folders: false,
            ..Default::default()
        };
        for (k, want) in [
            ("shop/shop/orders/LOAD00000001.csv", ("shop", "orders")),
            (
                "/tmp/in/shop/shop/orders/LOAD00000001.csv",
                ("shop", "orders"),
            ),
            (
                "s3://b/shop/shop/shop/20220302-1134010000.csv",
                ("shop", "shop"),
            ),
            (
                "shop/shop/orders/2022/03/02/20220302-1134010000.csv",
                ("shop", "orders"),
            ),
            (
                "/home/shop/x/shop/sales/orders/LOAD00000001.csv",
                ("sales", "orders"),
            ),
        ] {
            let o = locate(k, &src).unwrap().unwrap();
            assert_eq!((o.schema.as_str(), o.table.as_str()), want, "{k}");
        }
    }

    #[test]
    fn s3_uris_locate_by_key() {
        let o = loc("s3://landing/dms/sales/product/LOAD00000001.csv").unwrap();
        assert_eq!((o.schema.as_str(), o.table.as_str()), ("sales", "product"));
        assert_eq!(o.key, "s3://landing/dms/sales/product/LOAD00000001.csv");
        let src = SourceSettings {
            bucket_folder: Some("dms".into()),
            parallel_load_folders: false,
            ..Default::default()
        };
        let o = locate("s3://dms/dms/sales/product/LOAD00000001.csv", &src)
            .unwrap()
            .unwrap();
        assert_eq!(o.schema, "sales");
    }

    #[test]
    fn table_prefixes() {
        let o = loc("s3://b/dms/sales/product/2022/03/02/20220302-1134010000.csv").unwrap();
        assert_eq!(table_prefix(&o).unwrap(), "dms/sales/product/");
        let o = loc("sales/product/LOAD00000001.csv").unwrap();
        assert_eq!(table_prefix(&o).unwrap(), "sales/product/");
    }

    #[test]
    fn ignores_other_objects() {
        assert!(loc("dms/sales/product/notes.txt").is_none());
        assert!(loc("dms/sales/product/LOADME.csv").is_none());
        assert!(loc("dms/sales/product/2022-03.csv").is_none());
    }

    #[test]
    fn rejects_unsafe_keys() {
        let s = SourceSettings::default();
        assert!(locate("dms/../etc/t/LOAD00000001.csv", &s).is_err());
        assert!(locate("dms/sales/./LOAD00000001.csv", &s).is_err());
        assert!(locate("dms//t/LOAD00000001.csv", &s).is_err());
        assert!(locate("dms/sa.les/t/LOAD00000001.csv", &s).is_err());
        assert!(locate("dms/s/t*/LOAD00000001.csv", &s).is_err());
        assert!(locate("dms/s/ t/LOAD00000001.csv", &s).is_err());
        assert!(locate("LOAD00000001.csv", &s).is_err());
        assert!(locate("dms\\x/t/LOAD00000001.csv", &s).is_err());
    }

    /// SQL Server and PostgreSQL quoted names hold spaces and `$`; DMS writes them as folders.
    #[test]
    fn quoted_source_names_are_tables() {
        let src = SourceSettings {
            bucket_folder: Some("dms".into()),
            parallel_load_folders: false,
            ..Default::default()
        };
        for (k, want) in [
            (
                "s3://landing/dms/sales/order line$items/20220302-1134010000.csv",
                ("sales", "order line$items"),
            ),
            (
                "dms/Sales Dept/Order #1 (old)/LOAD00000001.csv",
                ("Sales Dept", "Order #1 (old)"),
            ),
        ] {
            let o = locate(k, &src).unwrap().unwrap();
            assert_eq!((o.schema.as_str(), o.table.as_str()), want, "{k}");
            assert_eq!(
                table_prefix(&o).unwrap(),
                format!("dms/{}/{}/", want.0, want.1)
            );
        }
        let e = locate("dms/sales/a.b/LOAD00000001.csv", &src)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`a.b`") && e.contains("`.`"), "{e}");
    }

    #[test]
    fn decodes_event_keys() {
        assert_eq!(decode_event_key("a+b%2Fc").unwrap(), "a b/c");
        assert_eq!(decode_event_key("caf%C3%A9").unwrap(), "café");
        assert!(decode_event_key("bad%G1").is_err());
        assert!(decode_event_key("bad%FF").is_err());
    }
}
