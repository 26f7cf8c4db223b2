//! The applied-file record: which DMS files a table holds, kept in the table property
//! [`PROPERTY`] and updated in the same metadata commit as the snapshot that applies them.
//!
//! Why a table property: every Iceberg writer (Spark, Glue's optimizers, Athena, PyIceberg)
//! carries properties forward on its own commits, and no snapshot expiry removes them. Snapshot
//! summaries, where the record used to live, vanish with their snapshots: after Spark's
//! `expire_snapshots` a table could no longer tell which DMS files it held and re-applied its
//! history over newer rows.
//!
//! What it holds, and the rules built on it ([`AppliedRecord::classify`]):
//! - **Change files** in a window of the most recent ones (`applied_record_files`, by DMS order).
//!   A file in the window is applied. A change file older than the newest applied one but not in
//!   the window is *late*: it is re-merged with the files after it. Files that fell out of the
//!   window (at or before the `horizon`) cannot be told apart from applied ones: they are
//!   [`Standing::BeyondRecord`], and loud when the object changed after the horizon moved (then
//!   it cannot have been applied).
//! - **The current full load** (a *generation*): its LOAD files with their identity (size, MD5,
//!   ETag, modification time). DMS reuses LOAD file names when a table is reloaded, so a name is
//!   not an identity: a LOAD file whose name is recorded with other content starts a new
//!   generation (a reload, which replaces the table's contents). A new load always rewrites its
//!   first file; its other files, if they arrive first, are applied as late files of the current
//!   load and taken along by the reload when it comes (modification times cannot decide this:
//!   copies change them). Identities of the previous generations'
//!   LOAD files are kept (bounded), so a late copy of an old load is superseded, not re-applied.
//! - A change file from before the current reload (its DMS order at or before the last change
//!   applied before the reload, or modified before the reload's first LOAD file) is
//!   [`Standing::Superseded`]: the reload already holds its effect.
//!
//! The record's size is bounded whatever the table's age: the window, the current load's files
//! and a few superseded generations.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Serialize};

use iceberg::spec::TableMetadata;

use crate::error::{Error, Result};
use crate::files::metadata::ancestry;
use crate::files::vocabulary::{keys, source_files};
use crate::locate::{FileKind, ObjectMeta, OrderKey};

/// Table property holding the record (JSON).
pub(crate) const PROPERTY: &str = "dms2iceberg.applied";
/// Earlier generations whose LOAD identities are kept.
const SUPERSEDED_GENERATIONS: usize = 3;

/// Whether the recorded LOAD file and an arriving object under its name hold the same
/// content: `None` when only a digest of the arriving object can tell.
fn same_content(recorded: &LoadFile, arriving: &ObjectMeta) -> Option<bool> {
    let r = &recorded.meta;
    if let (Some(a), Some(b)) = (&r.xxh3, &arriving.xxh3) {
        return Some(a == b);
    }
    if let (Some(a), Some(b)) = (&r.md5, &arriving.md5) {
        return Some(a == b);
    }
    if let (Some(a), Some(b)) = (r.size, arriving.size)
        && a != b
    {
        return Some(false);
    }
    if let (Some(a), Some(b)) = (&r.etag, &arriving.etag)
        && a == b
    {
        return Some(true);
    }
    if r.size.is_some()
        && r.size == arriving.size
        && r.modified_ms.is_some()
        && r.modified_ms == arriving.modified_ms
    {
        return Some(true);
    }
    if arriving.has_digest() {
        // Recorded without a digest (a table migrated from snapshot summaries): an object
        // modified after the file was applied is a new version.
        return Some(match (recorded.applied_ms, arriving.modified_ms) {
            (Some(applied), Some(m)) => m <= applied,
            _ => true,
        });
    }
    None
}

/// One LOAD file of a generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LoadFile {
    pub order: OrderKey,
    pub key: String,
    #[serde(flatten)]
    pub meta: ObjectMeta,
    /// When it was applied (epoch ms), for records without a digest.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub applied_ms: Option<i64>,
    /// Applied after change files of its load (a late file): it may as well be the first file of
    /// a new load that arrived before that load's `LOAD00000001`, so a reload takes it along.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub joined_late: bool,
}

/// A full load and what applies on top of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Generation {
    /// 1 for the first full load, +1 per reload (0: no full load applied yet).
    pub number: u32,
    #[serde(default)]
    pub files: Vec<LoadFile>,
    /// Greatest change-file order applied before this generation replaced the previous one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub since: Option<OrderKey>,
    /// Earliest modification time among this generation's LOAD files (reloads only): change
    /// files modified before it predate the reload.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub started_ms: Option<i64>,
    /// This load's files are not all listed (declared with `mark-applied`, or history expired
    /// before the record existed): unlisted LOAD files modified before this time are taken as
    /// part of it, already applied.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub before_ms: Option<i64>,
    /// This generation began with a truncate of the source table (DMS deleted the table's
    /// files), not with a full load.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub truncated: bool,
}

impl Generation {
    fn began_with(&self) -> &'static str {
        if self.truncated { "truncate" } else { "reload" }
    }
}

/// A truncate of the source table, as a commit applies it to the record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Truncation {
    /// When the source table was truncated (epoch ms): change files written before it are
    /// superseded; files written after it apply on the empty table.
    pub at_ms: i64,
    /// Files the record holds that were written after the truncate (applied before the truncate
    /// was seen): forgotten, so that they apply again, in order, on the empty table.
    pub written_after: std::collections::BTreeSet<OrderKey>,
}

/// The whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AppliedRecord {
    /// Greatest DMS order applied.
    pub watermark: Option<OrderKey>,
    /// Greatest change sequence value applied, when a change-sequence column is configured.
    pub change_seq: Option<String>,
    /// Change files at or before this order fell out of the window.
    pub horizon: Option<OrderKey>,
    /// When the horizon last moved (epoch ms).
    pub horizon_ms: Option<i64>,
    /// Applied change files in the window: order → object key.
    pub files: BTreeMap<OrderKey, String>,
    pub load: Generation,
    /// LOAD files of earlier generations (identity only).
    pub superseded: Vec<LoadFile>,
}

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

/// Where an arriving file stands against the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Standing {
    /// The table holds it.
    Applied,
    /// Not applied yet; `late` when files after it in DMS order are applied (re-merge).
    Pending { late: bool },
    /// A full load that replaces the table's contents.
    Reload,
    /// Older than the current full load: its effect is in the reload.
    Superseded(String),
    /// Older than the record reaches. `loud`: the object changed after the record moved past
    /// it, so it cannot have been applied.
    BeyondRecord { loud: bool },
    /// A LOAD file under a recorded name with the same size: only its MD5 tells.
    NeedsDigest,
}

/// One file a commit applies.
#[derive(Debug, Clone)]
pub struct AppliedInput {
    pub order: OrderKey,
    pub key: String,
    pub kind: FileKind,
    pub meta: ObjectMeta,
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

    /// The table's record: the property, or for tables written before it existed, rebuilt from
    /// the snapshot summaries of its history (and written as the property by its next commit).
    /// `None`: the table has no record at all.
    pub(crate) fn of_table(md: &TableMetadata) -> Result<Option<Arc<AppliedRecord>>> {
        if let Some(r) = AppliedRecord::from_properties(md.properties())? {
            return Ok(Some(r));
        }
        Ok(from_summaries(md).map(Arc::new))
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

    /// The object key recorded at `order` (a change file in the window, or a LOAD file of the
    /// current load).
    pub(crate) fn key_at(&self, order: &OrderKey) -> Option<&str> {
        self.files.get(order).map(String::as_str).or_else(|| {
            self.load
                .files
                .iter()
                .find(|f| &f.order == order)
                .map(|f| f.key.as_str())
        })
    }

    /// Greatest change-file order applied.
    fn last_change(&self) -> Option<&OrderKey> {
        self.watermark.as_ref().filter(|w| !is_load(w))
    }

    /// Where the file `order` (of `kind`, with what is known of its content) stands.
    pub(crate) fn classify(&self, order: &OrderKey, kind: FileKind, meta: &ObjectMeta) -> Standing {
        match kind {
            FileKind::Load => self.classify_load(order, meta),
            FileKind::Cdc => self.classify_change(order, meta),
        }
    }

    fn classify_load(&self, order: &OrderKey, meta: &ObjectMeta) -> Standing {
        if let Some(f) = self.load.files.iter().find(|f| &f.order == order) {
            return match same_content(f, meta) {
                Some(true) => Standing::Applied,
                Some(false) => self.reload_unless_superseded(order, meta),
                None => Standing::NeedsDigest,
            };
        }
        self.reload_unless_superseded(order, meta)
    }

    /// A LOAD file that is not one of the current load's: an old generation's (superseded), a
    /// file of the current load (no change applied on top yet, or modified before the first
    /// one: late), or the first file of a new load.
    fn reload_unless_superseded(&self, order: &OrderKey, meta: &ObjectMeta) -> Standing {
        let old = self
            .superseded
            .iter()
            .filter(|f| &f.order == order)
            .map(|f| same_content(f, meta));
        let mut undecided = false;
        for same in old {
            match same {
                Some(true) => {
                    return Standing::Superseded(
                        "a full-load file of an earlier load of this table".into(),
                    );
                }
                None => undecided = true,
                Some(false) => {}
            }
        }
        if undecided {
            return Standing::NeedsDigest;
        }
        let recorded = self.load.files.iter().any(|f| &f.order == order);
        if !recorded && let Some(before) = self.load.before_ms {
            // The load's files are not listed: an old one is taken as applied; a new one cannot
            // be told from a reload, so it is left to the operator.
            let loud = meta.modified_ms.is_none_or(|m| m > before);
            return Standing::BeyondRecord { loud };
        }
        if recorded {
            // The current load holds this name with other content: DMS wrote it again.
            return Standing::Reload;
        }
        // A name the current load does not hold: another file of it (multi-file or segmented),
        // late if changes were applied on top already. A new load always rewrites its first
        // file (`LOAD00000001`, per segment), which is what starts a reload; its other files
        // arriving before that one are taken along when it does (`joined_late`).
        Standing::Pending {
            late: self.last_change_in_generation().is_some(),
        }
    }

    /// The newest change file applied on top of the current load.
    fn last_change_in_generation(&self) -> Option<&OrderKey> {
        self.last_change()
            .filter(|w| self.load.since.as_ref().is_none_or(|s| *w > s))
    }

    fn classify_change(&self, order: &OrderKey, meta: &ObjectMeta) -> Standing {
        if self.files.contains_key(order) {
            return Standing::Applied;
        }
        // A generation after the first (a reload or a truncate) has what came before it in its
        // effect: older change files are superseded.
        if self.load.since.is_some() || self.load.started_ms.is_some() {
            if self.load.since.as_ref().is_some_and(|s| order <= s) {
                return Standing::Superseded(format!(
                    "a change file from before the table's {} (generation {})",
                    self.load.began_with(),
                    self.load.number
                ));
            }
            if let (Some(started), Some(m)) = (self.load.started_ms, meta.modified_ms)
                && m < started
            {
                return Standing::Superseded(format!(
                    "a change file written before the table's {} (generation {}) began",
                    self.load.began_with(),
                    self.load.number
                ));
            }
        }
        if self.horizon.as_ref().is_some_and(|h| order <= h) {
            let loud = match (meta.modified_ms, self.horizon_ms) {
                (Some(m), Some(h)) => m > h,
                _ => true,
            };
            return Standing::BeyondRecord { loud };
        }
        let late = self.last_change().is_some_and(|w| order < w);
        Standing::Pending { late }
    }

    /// Applied files after `order` that a late file must be re-merged with (this generation's
    /// LOAD files and change files), in DMS order; an error when some fell out of the window.
    pub(crate) fn applied_after(&self, order: &OrderKey) -> Result<Vec<(OrderKey, String)>> {
        let floor = match &self.load.since {
            Some(s) if s > order => s,
            _ => order,
        };
        if let Some(h) = &self.horizon
            && h > floor
        {
            return Err(Error::Order(format!(
                "{} arrived after files that the applied-file record no longer lists \
                 (it keeps the last {} change files, up to {}): it cannot be merged in order; \
                 reload the table from DMS, or raise `applied_record_files`",
                order.file_stem(),
                self.files.len(),
                h.file_stem()
            )));
        }
        let mut out: Vec<(OrderKey, String)> = self
            .load
            .files
            .iter()
            .filter(|f| &f.order > order)
            .map(|f| (f.order.clone(), f.key.clone()))
            .collect();
        out.extend(
            self.files
                .range(floor.clone()..)
                .filter(|(o, _)| *o > floor)
                .map(|(o, k)| (o.clone(), k.clone())),
        );
        out.sort();
        Ok(out)
    }

    /// The record after a commit applies `inputs` (`reload`: as a new generation). `window`:
    /// change files to keep; `now_ms`: wall time, for the horizon.
    pub(crate) fn applied(
        &self,
        inputs: &[AppliedInput],
        reload: bool,
        change_seq: Option<String>,
        window: usize,
        now_ms: i64,
    ) -> AppliedRecord {
        self.applied_with(inputs, &[], reload, change_seq, window, now_ms)
    }

    /// [`AppliedRecord::applied`], with `carried`: files of the current load a reload takes
    /// along into the new one (they joined late, see [`LoadFile::joined_late`]).
    pub(crate) fn applied_with(
        &self,
        inputs: &[AppliedInput],
        carried: &[LoadFile],
        reload: bool,
        change_seq: Option<String>,
        window: usize,
        now_ms: i64,
    ) -> AppliedRecord {
        let late_join = !reload && self.last_change_in_generation().is_some();
        let mut r = self.clone();
        if reload {
            let previous = std::mem::take(&mut r.load);
            // Identities of the last few loads, newest first: a late copy of one is superseded.
            let mut kept = previous.files.clone();
            kept.append(&mut r.superseded);
            kept.truncate(previous.files.len().max(1) * SUPERSEDED_GENERATIONS);
            r.superseded = kept;
            r.load = Generation {
                number: previous.number + 1,
                files: Vec::new(),
                since: self.last_change().cloned().or(previous.since),
                started_ms: None,
                before_ms: None,
                truncated: false,
            };
            r.load.files = carried
                .iter()
                .map(|f| LoadFile {
                    joined_late: false,
                    ..f.clone()
                })
                .collect();
        }
        for i in inputs {
            match i.kind {
                FileKind::Load => {
                    r.load.files.retain(|f| f.order != i.order);
                    r.load.files.push(LoadFile {
                        order: i.order.clone(),
                        key: i.key.clone(),
                        meta: i.meta.clone(),
                        applied_ms: Some(now_ms),
                        joined_late: late_join,
                    });
                    if r.load.number == 0 {
                        r.load.number = 1;
                    }
                    if reload && let Some(m) = i.meta.modified_ms {
                        r.load.started_ms = Some(r.load.started_ms.map_or(m, |s| s.min(m)));
                    }
                }
                FileKind::Cdc => {
                    r.files.insert(i.order.clone(), i.key.clone());
                }
            }
        }
        r.load.files.sort_by(|a, b| a.order.cmp(&b.order));
        if let Some(max) = inputs.iter().map(|i| &i.order).max()
            && r.watermark.as_ref().is_none_or(|w| max > w)
        {
            r.watermark = Some(max.clone());
        }
        if let Some(seq) = change_seq
            && r.change_seq.as_ref().is_none_or(|s| seq > *s)
        {
            r.change_seq = Some(seq);
        }
        while r.files.len() > window.max(1) {
            if let Some((o, _)) = r.files.pop_first() {
                r.horizon = Some(o);
                r.horizon_ms = Some(now_ms);
            }
        }
        r
    }

    /// The DMS objects the record says the table holds now: the current load's files and the
    /// change files applied on top of it.
    pub(crate) fn current_objects(&self) -> Vec<(&OrderKey, &str)> {
        let mut out: Vec<(&OrderKey, &str)> = self
            .load
            .files
            .iter()
            .map(|f| (&f.order, f.key.as_str()))
            .collect();
        out.extend(
            self.files
                .iter()
                .filter(|(o, _)| self.load.since.as_ref().is_none_or(|s| *o > s))
                .map(|(o, k)| (o, k.as_str())),
        );
        out
    }

    /// The record after the source table was truncated: a new generation without any file,
    /// everything applied before the truncate superseded (change files up to the last one
    /// applied, and any written before it), the files written after it forgotten so they apply
    /// again on the empty table.
    pub(crate) fn truncated(&self, t: &Truncation) -> AppliedRecord {
        let mut r = self.clone();
        r.files.retain(|o, _| !t.written_after.contains(o));
        let previous = std::mem::take(&mut r.load);
        // The load's files from before the truncate are superseded; later ones apply again.
        let mut kept: Vec<LoadFile> = previous
            .files
            .into_iter()
            .filter(|f| !t.written_after.contains(&f.order))
            .collect();
        let last_load = kept.iter().map(|f| f.order.clone()).max();
        let limit = kept.len().max(1) * SUPERSEDED_GENERATIONS;
        kept.append(&mut r.superseded);
        kept.truncate(limit);
        r.superseded = kept;
        let last_change = r.files.last_key_value().map(|(o, _)| o.clone());
        r.load = Generation {
            number: previous.number + 1,
            files: Vec::new(),
            since: last_change.clone().or(previous.since),
            started_ms: Some(t.at_ms),
            before_ms: None,
            truncated: true,
        };
        r.watermark = match (last_change, last_load) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        r
    }

    /// A record declaring every file up to `through` applied (an operator's statement about a
    /// table that has data but no record).
    pub(crate) fn declared(through: &OrderKey, now_ms: i64) -> AppliedRecord {
        AppliedRecord {
            watermark: Some(through.clone()),
            horizon: Some(through.clone()),
            horizon_ms: Some(now_ms),
            load: Generation {
                number: 1,
                before_ms: Some(now_ms),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

/// The record rebuilt from snapshot summaries (tables written before the property existed, or
/// whose property another tool removed): each snapshot's files replayed oldest first, and how
/// far expiry cut the history.
fn from_summaries(md: &TableMetadata) -> Option<AppliedRecord> {
    let chain = ancestry(md);
    let mut r = AppliedRecord::default();
    let mut any = false;
    for s in chain.iter().rev() {
        let p = &s.summary().additional_properties;
        let orders: Vec<String> = p
            .get(keys::SOURCE_ORDERS)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        let inputs: Vec<AppliedInput> = orders
            .iter()
            .zip(source_files(p))
            .filter_map(|(o, key)| {
                let order = OrderKey::parse(o)?;
                let kind = if is_load(&order) {
                    FileKind::Load
                } else {
                    FileKind::Cdc
                };
                Some(AppliedInput {
                    order,
                    key,
                    kind,
                    meta: ObjectMeta::default(),
                })
            })
            .collect();
        if inputs.is_empty() {
            continue;
        }
        any = true;
        let reload = p.get(keys::RELOAD).is_some_and(|v| v == "true");
        r = r.applied(&inputs, reload, None, usize::MAX, s.timestamp_ms());
        // Old versions kept the cumulative change sequence in every summary.
        if let Some(seq) = p.get(keys::CHANGE_SEQ) {
            r.change_seq = Some(seq.clone());
        }
    }
    if !any {
        return None;
    }
    // History cut short by snapshot expiry: what the expired snapshots applied is only known
    // up to a bound, and their full load is not known at all.
    let truncated = chain
        .last()
        .and_then(|root| root.parent_snapshot_id())
        .is_some();
    if truncated {
        let oldest = chain.last().map(|s| s.timestamp_ms());
        r.horizon = md
            .properties()
            .get(keys::EXPIRED_WATERMARK)
            .and_then(|w| OrderKey::parse(w))
            .or_else(|| r.files.keys().next().cloned());
        r.horizon_ms = oldest;
        if r.load.number <= 1 {
            r.load.before_ms = oldest;
        }
    }
    Some(r)
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

fn is_load(o: &OrderKey) -> bool {
    o.as_str().starts_with("0/")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cdc(n: u32) -> OrderKey {
        OrderKey::parse(&format!("1/20220302-{:06}000000000000", 113400 + n)).unwrap()
    }
    fn load(n: u32) -> OrderKey {
        OrderKey::parse(&format!("0/{n:016X}/")).unwrap()
    }
    fn meta(size: u64, md5: &str, modified_ms: i64) -> ObjectMeta {
        ObjectMeta {
            size: Some(size),
            modified_ms: Some(modified_ms),
            etag: None,
            md5: Some(md5.into()),
            xxh3: None,
        }
    }

    /// A truncate supersedes what the table held (the load's files, change files up to the last
    /// applied and any written before it), forgets files written after it so they apply again,
    /// and happens once: the new generation lists nothing.
    #[test]
    fn a_truncate_starts_an_empty_generation() {
        let m = |t: i64| meta(10, &format!("m{t}"), t);
        let r = AppliedRecord::default().applied(
            &[
                input(load(1), m(100)),
                input(cdc(1), m(200)),
                input(cdc(2), m(300)),
            ],
            false,
            None,
            100,
            1_000,
        );
        assert_eq!(r.current_objects().len(), 3);
        // cdc(3) was written (at 600) after DMS deleted the folder (at 500), and applied
        // before the deletion was seen.
        let r = r.applied(&[input(cdc(3), m(600))], false, None, 100, 2_000);
        let t = Truncation {
            at_ms: 500,
            written_after: [cdc(3)].into(),
        };
        let after = r.truncated(&t);
        assert!(
            after.current_objects().is_empty(),
            "{:?}",
            after.current_objects()
        );
        assert!(after.load.truncated && after.load.number == 2);
        assert_eq!(after.load.since, Some(cdc(2)));
        assert_eq!(after.watermark, Some(cdc(2)));
        // What the truncate removed never applies again, whenever it arrives.
        assert!(matches!(
            after.classify(&cdc(1), FileKind::Cdc, &m(200)),
            Standing::Applied
        ));
        assert!(matches!(
            after.classify(&load(1), FileKind::Load, &m(100)),
            Standing::Superseded(_)
        ));
        let e = after.classify(&cdc(2), FileKind::Cdc, &m(300));
        assert!(matches!(e, Standing::Applied), "{e:?}");
        // A change file written before the truncate that was never applied: superseded.
        let early = OrderKey::parse("1/20220302-1134025000000000000").unwrap();
        match after.classify(&early, FileKind::Cdc, &m(400)) {
            Standing::Superseded(why) => assert!(why.contains("truncate"), "{why}"),
            s => panic!("{s:?}"),
        }
        // The file written after the truncate, and later ones, apply on top.
        assert_eq!(
            after.classify(&cdc(3), FileKind::Cdc, &m(600)),
            Standing::Pending { late: false }
        );
        assert_eq!(
            after.classify(&cdc(4), FileKind::Cdc, &m(700)),
            Standing::Pending { late: false }
        );
        // A new full load after a drop and create starts on the empty table.
        assert_eq!(
            after.classify(&load(1), FileKind::Load, &meta(10, "new", 800)),
            Standing::Pending { late: false }
        );
        // Encoded and read back the same.
        assert_eq!(
            AppliedRecord::decode(&after.encode().unwrap()).unwrap(),
            after
        );
    }

    /// A LOAD file recorded with an XXH3 digest (as applied now), or with an MD5 alone (as
    /// records kept before): an arriving file under its name with the same size (and another
    /// modification time) is the same file or a reload by the digest the record has.
    #[test]
    fn load_files_are_known_by_xxh3_and_by_md5_in_older_records() {
        let xx = |x: &str, m: i64| ObjectMeta {
            size: Some(10),
            modified_ms: Some(m),
            xxh3: Some(x.into()),
            ..Default::default()
        };
        let now = 1_000;
        let r =
            AppliedRecord::default().applied(&[input(load(1), xx("aa", 1))], false, None, 10, now);
        // Same size, another modification time: only a digest can tell.
        let arriving = ObjectMeta {
            size: Some(10),
            modified_ms: Some(5),
            ..Default::default()
        };
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &arriving),
            Standing::NeedsDigest
        );
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &xx("aa", 5)),
            Standing::Applied
        );
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &xx("bb", 5)),
            Standing::Reload
        );
        // An older record kept an MD5: the arriving file's MD5 (computed for it) decides.
        let old = AppliedRecord::default().applied(
            &[input(load(1), meta(10, "m1", 1))],
            false,
            None,
            10,
            now,
        );
        let both = |m: &str| ObjectMeta {
            md5: Some(m.into()),
            ..xx("cc", 5)
        };
        assert_eq!(
            old.classify(&load(1), FileKind::Load, &both("m1")),
            Standing::Applied
        );
        assert_eq!(
            old.classify(&load(1), FileKind::Load, &both("m2")),
            Standing::Reload
        );
    }
    fn input(order: OrderKey, meta: ObjectMeta) -> AppliedInput {
        let kind = if is_load(&order) {
            FileKind::Load
        } else {
            FileKind::Cdc
        };
        AppliedInput {
            key: format!("s3://b/dms/s/t/{order}.csv"),
            order,
            kind,
            meta,
        }
    }
    fn apply(r: &AppliedRecord, inputs: Vec<AppliedInput>, reload: bool) -> AppliedRecord {
        r.applied(&inputs, reload, None, 3, 1_000)
    }

    #[test]
    fn round_trips_and_stays_small() {
        let mut r = AppliedRecord::default();
        r = apply(&r, vec![input(load(1), meta(10, "a", 100))], false);
        for n in 0..2_000 {
            r = r.applied(
                &[input(cdc(n), meta(5, "c", 200 + n as i64))],
                false,
                Some(format!("{n:035}")),
                crate::config::DEFAULT_WINDOW,
                5_000,
            );
        }
        let text = r.encode().unwrap();
        assert_eq!(AppliedRecord::decode(&text).unwrap(), r);
        assert!(
            text.len() < 20_000,
            "record of 2000 files is {} bytes",
            text.len()
        );
    }

    #[test]
    fn applied_late_and_pending_change_files() {
        let r = apply(
            &AppliedRecord::default(),
            vec![
                input(load(1), meta(10, "a", 100)),
                input(cdc(2), meta(1, "x", 200)),
            ],
            false,
        );
        let m = meta(1, "y", 300);
        assert_eq!(r.classify(&cdc(2), FileKind::Cdc, &m), Standing::Applied);
        assert_eq!(
            r.classify(&cdc(1), FileKind::Cdc, &m),
            Standing::Pending { late: true }
        );
        assert_eq!(
            r.classify(&cdc(3), FileKind::Cdc, &m),
            Standing::Pending { late: false }
        );
    }

    #[test]
    fn the_window_moves_the_horizon_and_late_files_beyond_it_are_loud() {
        let mut r = AppliedRecord::default();
        for n in 1..=5 {
            r = apply(&r, vec![input(cdc(n * 2), meta(1, "x", 100))], false);
        }
        assert_eq!(r.files.len(), 3);
        assert_eq!(r.horizon, Some(cdc(4)));
        // Unknown whether applied: quiet when the object is older than the move, loud if newer.
        let old = meta(1, "z", 900);
        let new = meta(1, "z", 2_000);
        assert_eq!(
            r.classify(&cdc(3), FileKind::Cdc, &old),
            Standing::BeyondRecord { loud: false }
        );
        assert_eq!(
            r.classify(&cdc(3), FileKind::Cdc, &new),
            Standing::BeyondRecord { loud: true }
        );
        // A late file inside the window re-merges with what follows it; before it, it cannot.
        assert_eq!(
            r.applied_after(&cdc(7)).unwrap(),
            vec![
                (cdc(8), r.files[&cdc(8)].clone()),
                (cdc(10), r.files[&cdc(10)].clone())
            ]
        );
        assert!(r.applied_after(&cdc(3)).is_err());
    }

    #[test]
    fn a_load_file_of_the_same_load_appends_and_a_new_version_reloads() {
        let r = apply(
            &AppliedRecord::default(),
            vec![input(load(1), meta(10, "a", 100))],
            false,
        );
        // LOAD2 of the same load, before any change file.
        assert_eq!(
            r.classify(&load(2), FileKind::Load, &meta(7, "b", 110)),
            Standing::Pending { late: false }
        );
        // LOAD1 again: same content under any timestamps.
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &meta(10, "a", 999)),
            Standing::Applied
        );
        // LOAD1 with other content: a reload.
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &meta(11, "q", 999)),
            Standing::Reload
        );
        // Same size, no digest known for the arriving copy: the digest decides.
        let no_digest = ObjectMeta {
            size: Some(10),
            modified_ms: Some(500),
            ..Default::default()
        };
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &no_digest),
            Standing::NeedsDigest
        );
    }

    #[test]
    fn after_changes_a_new_load_file_is_late_and_a_reload_takes_it_along() {
        let r = apply(
            &AppliedRecord::default(),
            vec![input(load(1), meta(10, "a", 100))],
            false,
        );
        let r = apply(&r, vec![input(cdc(1), meta(3, "c", 300))], false);
        // Whatever its modification time (copies change it): a late file of this load.
        for m in [150, 400] {
            assert_eq!(
                r.classify(&load(2), FileKind::Load, &meta(7, "b", m)),
                Standing::Pending { late: true }
            );
        }
        let r = apply(&r, vec![input(load(2), meta(7, "b", 400))], false);
        let joined: Vec<&LoadFile> = r.load.files.iter().filter(|f| f.joined_late).collect();
        assert_eq!(joined.len(), 1);
        // LOAD1 rewritten: a reload, which carries the late joiner into the new load.
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &meta(11, "a2", 500)),
            Standing::Reload
        );
        let carried = vec![joined[0].clone()];
        let r2 = r.applied_with(
            &[input(load(1), meta(11, "a2", 500))],
            &carried,
            true,
            None,
            3,
            1_000,
        );
        assert_eq!(r2.load.number, 2);
        assert_eq!(r2.load.files.len(), 2);
        assert!(r2.load.files.iter().all(|f| !f.joined_late));
    }

    #[test]
    fn a_reload_supersedes_older_change_files_and_the_old_load() {
        let r = apply(
            &AppliedRecord::default(),
            vec![input(load(1), meta(10, "a", 100))],
            false,
        );
        let r = apply(&r, vec![input(cdc(1), meta(3, "c", 200))], false);
        let r = apply(&r, vec![input(load(1), meta(12, "a2", 1_000))], true);
        assert_eq!(r.load.number, 2);
        assert_eq!(r.load.since, Some(cdc(1)));
        assert_eq!(r.load.started_ms, Some(1_000));
        // Another file of the new load appends; the old LOAD1 is superseded.
        assert_eq!(
            r.classify(&load(2), FileKind::Load, &meta(8, "b2", 1_010)),
            Standing::Pending { late: false }
        );
        assert!(matches!(
            r.classify(&load(1), FileKind::Load, &meta(10, "a", 100)),
            Standing::Superseded(_)
        ));
        // A change file written before the reload, arriving late: superseded by order or time.
        assert!(matches!(
            r.classify(&cdc(0), FileKind::Cdc, &meta(1, "o", 150)),
            Standing::Superseded(_)
        ));
        assert!(matches!(
            r.classify(&cdc(2), FileKind::Cdc, &meta(1, "o", 900)),
            Standing::Superseded(_)
        ));
        // One written after it applies.
        assert_eq!(
            r.classify(&cdc(3), FileKind::Cdc, &meta(1, "n", 1_100)),
            Standing::Pending { late: false }
        );
        // Daily full-load-only reruns: each new LOAD1 is the next reload.
        let r3 = apply(&r, vec![input(load(1), meta(13, "a3", 2_000))], true);
        assert_eq!(r3.load.number, 3);
        assert!(matches!(
            r3.classify(&load(1), FileKind::Load, &meta(12, "a2", 1_000)),
            Standing::Superseded(_)
        ));
    }

    #[test]
    fn re_merge_after_a_reload_only_reaches_this_generation() {
        let r = apply(
            &AppliedRecord::default(),
            vec![input(load(1), meta(10, "a", 100))],
            false,
        );
        let r = apply(&r, vec![input(cdc(1), meta(3, "c", 200))], false);
        let r = apply(&r, vec![input(load(1), meta(12, "a2", 1_000))], true);
        let r = apply(&r, vec![input(cdc(5), meta(3, "c", 1_200))], false);
        let after: Vec<OrderKey> = r
            .applied_after(&load(1))
            .unwrap()
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        assert_eq!(after, vec![cdc(5)]);
    }

    #[test]
    fn declared_record_counts_everything_before_as_applied() {
        let r = AppliedRecord::declared(&cdc(5), 1_000);
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &meta(9, "l", 500)),
            Standing::BeyondRecord { loud: false }
        );
        assert_eq!(
            r.classify(&load(1), FileKind::Load, &meta(9, "l", 5_000)),
            Standing::BeyondRecord { loud: true }
        );
        assert_eq!(
            r.classify(&cdc(4), FileKind::Cdc, &meta(1, "x", 500)),
            Standing::BeyondRecord { loud: false }
        );
        assert_eq!(
            r.classify(&cdc(6), FileKind::Cdc, &meta(1, "x", 2_000)),
            Standing::Pending { late: false }
        );
    }

    #[test]
    fn a_damaged_record_is_an_error_that_says_what_to_do() {
        let e = AppliedRecord::decode("{\"v\":1,\"count\":1,\"files\":\"!!\",\"load\":{}}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mark-applied"), "{e}");
    }
}
