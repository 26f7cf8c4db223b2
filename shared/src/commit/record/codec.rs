//! The record's stored form: the JSON of table property [`PROPERTY`], its change files
//! front-coded, deflated and base64-encoded, and a cache of records decoded from it.
//!
//! Invariants: the bytes are persisted in table properties and read by every dms2iceberg
//! version that meets the table: `encode` writes version 1 exactly as before (field names,
//! order, omitted empty fields, front coding, deflate level), and `decode` refuses a version it
//! does not know with a message that says what to do; a decoded record is a pure function of
//! the property text, so the cache is keyed by that text.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::{AppliedRecord, Generation, LoadFile};
use crate::error::{Error, Result};
use crate::locate::OrderKey;

/// Table property holding the record (JSON).
pub(crate) const PROPERTY: &str = "dms2iceberg.applied";

/// Records recently decoded, by their exact property text. One commit reads its table's record
/// several times (the plan, every attempt's validation, the attempt's new record) and a full
/// record (2,000 change files) takes a millisecond or more to decode: a commit at steady state
/// spent a third of its time there. Decoding is a pure function of the text, so the text is
/// the key; a few entries cover the tables one process commits to in turn.
/// Shared, not copied: a copy of a full record is thousands of allocations.
type Decoded = crate::files::cache::Fifo<String, Arc<AppliedRecord>>;
static DECODED: std::sync::LazyLock<std::sync::Mutex<Decoded>> =
    std::sync::LazyLock::new(|| std::sync::Mutex::new(Decoded::entries(8)));

fn decoded(raw: &str) -> Option<Arc<AppliedRecord>> {
    DECODED.lock().ok()?.get(raw).cloned()
}

fn remember_decoded(raw: &str, record: &Arc<AppliedRecord>) {
    if let Ok(mut d) = DECODED.lock() {
        d.insert(raw.to_string(), record.clone());
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    v: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    watermark: Option<OrderKey>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    change_seq: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    horizon: Option<OrderKey>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    horizon_ms: Option<i64>,
    /// Number of change files in `files` (for operators reading the raw property).
    count: usize,
    /// Change files: front-coded `order\tkey` lines, deflated, base64.
    files: String,
    load: Generation,
    #[serde(default)]
    superseded: Vec<LoadFile>,
}

impl AppliedRecord {
    /// The record in `properties`; `Ok(None)` when the table has none (yet).
    pub(crate) fn from_properties(
        properties: &std::collections::HashMap<String, String>,
    ) -> Result<Option<Arc<AppliedRecord>>> {
        let Some(raw) = properties.get(PROPERTY) else {
            return Ok(None);
        };
        if let Some(r) = decoded(raw) {
            return Ok(Some(r));
        }
        let record = Arc::new(AppliedRecord::decode(raw)?);
        remember_decoded(raw, &record);
        Ok(Some(record))
    }

    pub(crate) fn decode(raw: &str) -> Result<AppliedRecord> {
        let bad = |why: String| {
            Error::Table(format!(
                "table property {PROPERTY} cannot be read ({why}); it records which DMS files \
                 the table holds: restore it from an earlier metadata.json, or declare what the \
                 table holds with `dms2iceberg mark-applied`"
            ))
        };
        let s: Stored = serde_json::from_str(raw).map_err(|e| bad(e.to_string()))?;
        if s.v != 1 {
            return Err(bad(format!(
                "version {} is newer than this dms2iceberg",
                s.v
            )));
        }
        let files = decode_files(&s.files).map_err(bad)?;
        Ok(AppliedRecord {
            watermark: s.watermark,
            change_seq: s.change_seq,
            horizon: s.horizon,
            horizon_ms: s.horizon_ms,
            files,
            load: s.load,
            superseded: s.superseded,
        })
    }

    pub(crate) fn encode(&self) -> Result<String> {
        let s = Stored {
            v: 1,
            watermark: self.watermark.clone(),
            change_seq: self.change_seq.clone(),
            horizon: self.horizon.clone(),
            horizon_ms: self.horizon_ms,
            count: self.files.len(),
            files: encode_files(&self.files)?,
            load: self.load.clone(),
            superseded: self.superseded.clone(),
        };
        serde_json::to_string(&s).map_err(|e| Error::Internal(e.to_string()))
    }
}

impl Serialize for OrderKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OrderKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        OrderKey::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("bad DMS order `{s}`")))
    }
}

/// Front coding: each line is `<bytes shared with the previous line>:<rest>`.
fn front_code<'a>(out: &mut String, items: impl Iterator<Item = &'a str>) {
    use std::fmt::Write as _;
    let mut prev = "";
    for item in items {
        let mut shared = prev
            .bytes()
            .zip(item.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        while !item.is_char_boundary(shared) {
            shared -= 1;
        }
        let _ = writeln!(out, "{shared}:{}", &item[shared..]);
        prev = item;
    }
}

fn front_decode(text: &str) -> std::result::Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let (n, rest) = line
            .split_once(':')
            .ok_or_else(|| format!("bad line `{line}`"))?;
        let n: usize = n.parse().map_err(|_| format!("bad prefix in `{line}`"))?;
        let head = out
            .last()
            .map_or(Some(""), |prev| prev.get(..n))
            .filter(|h| h.len() == n)
            .ok_or_else(|| format!("prefix {n} longer than the previous entry"))?;
        let mut item = String::with_capacity(n + rest.len());
        item.push_str(head);
        item.push_str(rest);
        out.push(item);
    }
    Ok(out)
}

fn encode_files(files: &BTreeMap<OrderKey, String>) -> Result<String> {
    let mut text = String::new();
    front_code(&mut text, files.keys().map(OrderKey::as_str));
    text.push('\u{0}');
    front_code(&mut text, files.values().map(String::as_str));
    // The default level: `best` cost a third more time per commit for a fifth fewer bytes of
    // a property that is a few KB.
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(text.as_bytes())
        .map_err(|e| Error::Internal(e.to_string()))?;
    let bytes = z.finish().map_err(|e| Error::Internal(e.to_string()))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn decode_files(raw: &str) -> std::result::Result<BTreeMap<OrderKey, String>, String> {
    if raw.is_empty() {
        return Ok(BTreeMap::new());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    flate2::read::DeflateDecoder::new(bytes.as_slice())
        // The record is small; a corrupted one must not expand without bound.
        .take(64 << 20)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let (orders, keys) = text
        .split_once('\u{0}')
        .ok_or_else(|| "no key list".to_string())?;
    let orders = front_decode(orders)?;
    let keys = front_decode(keys)?;
    if orders.len() != keys.len() {
        return Err(format!("{} orders for {} keys", orders.len(), keys.len()));
    }
    orders
        .into_iter()
        .zip(keys)
        .map(|(o, k)| {
            OrderKey::parse(&o)
                .map(|o| (o, k))
                .ok_or_else(|| format!("bad order `{o}`"))
        })
        .collect()
}
