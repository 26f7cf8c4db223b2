//! The legacy path: the record of a table written before the table property existed (or whose
//! property another tool removed), rebuilt from the snapshot summaries of its history and
//! written as the property by the table's next commit.
//!
//! Invariants: snapshots are replayed oldest first, as they were applied; a history cut short
//! by snapshot expiry sets the record's horizon, so that files before it are beyond the record
//! rather than taken as never applied.

use std::sync::Arc;

use iceberg::spec::TableMetadata;

use super::{AppliedInput, AppliedRecord, is_load};
use crate::error::Result;
use crate::files::metadata::ancestry;
use crate::files::vocabulary::{keys, source_files};
use crate::locate::{FileKind, ObjectMeta, OrderKey};

impl AppliedRecord {
    /// The table's record: the property, or for tables written before it existed, rebuilt from
    /// the snapshot summaries of its history (and written as the property by its next commit).
    /// `None`: the table has no record at all.
    pub(crate) fn of_table(md: &TableMetadata) -> Result<Option<Arc<AppliedRecord>>> {
        if let Some(r) = AppliedRecord::from_properties(md.properties())? {
            return Ok(Some(r));
        }
        Ok(from_summaries(md).map(Arc::new))
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
