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
//!
//! Layout: this file holds the record and its rules; `codec` its stored form (the bytes of the
//! table property: they must not change, an older or newer dms2iceberg reads them), `legacy`
//! the record rebuilt from snapshot summaries for tables written before the property.

mod codec;
mod legacy;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::locate::{FileKind, ObjectMeta, OrderKey};

pub(crate) use codec::PROPERTY;

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

impl AppliedRecord {
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

fn is_load(o: &OrderKey) -> bool {
    o.as_str().starts_with("0/")
}
