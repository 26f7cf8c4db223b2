//! history: the snapshots of a table, oldest first, with what each applied and how many rows
//! each left live.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::{Snapshot, TableMetadata};
use serde::Serialize;

use crate::catalog::Catalog;
use crate::commit::AppliedRecord;
use crate::error::{Error, Result};
use crate::files::deletes::DeleteSource;
use crate::files::live::Scope;
use crate::files::metadata::ancestry;
use crate::files::vocabulary::{keys, source_files};
use crate::files::{Files, Fill, TableCache};
use crate::table::LoadedTable;

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotInfo {
    pub snapshot_id: i64,
    pub parent_id: Option<i64>,
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub operation: String,
    pub source_files: Vec<String>,
    /// The snapshot emptied the table: its source table was truncated.
    pub truncate: bool,
    pub watermark: Option<String>,
    pub rows_inserted: Option<u64>,
    pub rows_updated: Option<u64>,
    pub rows_deleted: Option<u64>,
    /// Rows a reader sees in this snapshot: data file records minus the rows deleted by
    /// position deletes. `None` when equality deletes make it unknowable without a scan.
    pub live_rows: Option<u64>,
    /// Iceberg's `total-records`: rows in live data files, deleted rows included.
    pub total_records: Option<u64>,
    pub total_data_files: Option<u64>,
    pub total_delete_files: Option<u64>,
    pub summary: std::collections::BTreeMap<String, String>,
}

/// The table's applied-file record (table property `dms2iceberg.applied`), for operators: it
/// outlives snapshot expiry, so it is what decides which DMS files a table holds.
#[derive(Debug, Clone, Serialize)]
pub struct RecordView {
    /// Whether the table property holds it (false: rebuilt from snapshot summaries, written
    /// as the property by the table's next commit).
    pub in_property: bool,
    /// Bytes of the encoded property.
    pub property_bytes: usize,
    /// The greatest DMS order applied, and its file when the window still lists it.
    pub watermark: Option<String>,
    pub last_file: Option<String>,
    /// Change files listed individually (the window).
    pub files_in_window: usize,
    /// Change files at or before this order fell out of the window.
    pub horizon: Option<String>,
    pub horizon_ms: Option<i64>,
    pub change_seq: Option<String>,
    /// The current full load: its generation (1 = first load; +1 per reload) and files.
    pub load_generation: u32,
    pub load_files: Vec<String>,
    /// LOAD files of earlier loads, kept to recognise stale copies.
    pub superseded_load_files: usize,
}

impl RecordView {
    pub fn of(md: &TableMetadata) -> Result<Option<RecordView>> {
        let raw = md.properties().get(crate::commit::record::PROPERTY);
        let Some(r) = AppliedRecord::of_table(md)? else {
            return Ok(None);
        };
        Ok(Some(RecordView {
            in_property: raw.is_some(),
            property_bytes: raw.map_or(0, String::len),
            last_file: r
                .watermark
                .as_ref()
                .and_then(|w| r.key_at(w))
                .map(str::to_string),
            watermark: r.watermark.as_ref().map(|w| w.to_string()),
            files_in_window: r.files.len(),
            horizon: r.horizon.as_ref().map(|h| h.to_string()),
            horizon_ms: r.horizon_ms,
            change_seq: r.change_seq.clone(),
            load_generation: r.load.number,
            load_files: r.load.files.iter().map(|f| f.key.clone()).collect(),
            superseded_load_files: r.superseded.len(),
        }))
    }
}

/// The applied-file record of a table (`None`: it has none).
pub async fn applied_record(
    catalog: &dyn Catalog,
    ident: &TableIdent,
) -> Result<Option<RecordView>> {
    let t = LoadedTable::load(catalog, ident)
        .await?
        .ok_or_else(|| Error::NoSuchTable {
            table: ident.to_string(),
        })?;
    RecordView::of(&t.metadata)
}

pub async fn history(catalog: &dyn Catalog, ident: &TableIdent) -> Result<Vec<SnapshotInfo>> {
    let t = LoadedTable::load(catalog, ident)
        .await?
        .ok_or_else(|| Error::NoSuchTable {
            table: ident.to_string(),
        })?;
    let snapshots = ancestry(&t.metadata);
    let mut counter = LiveRows::new(catalog.file_io(), &t.metadata);
    let mut out: Vec<SnapshotInfo> = Vec::with_capacity(snapshots.len());
    // Oldest first: whether any data file was removed so far decides how rows are counted.
    for s in snapshots.into_iter().rev() {
        let p = &s.summary().additional_properties;
        let num = |k: &str| p.get(k).and_then(|v| v.parse().ok());
        out.push(SnapshotInfo {
            snapshot_id: s.snapshot_id(),
            parent_id: s.parent_snapshot_id(),
            sequence_number: s.sequence_number(),
            timestamp_ms: s.timestamp_ms(),
            operation: s.summary().operation.as_str().to_string(),
            source_files: source_files(p),
            truncate: p.get(keys::TRUNCATE).is_some_and(|v| v == "true"),
            watermark: p.get(keys::WATERMARK).cloned(),
            rows_inserted: num(keys::ROWS_INSERTED),
            rows_updated: num(keys::ROWS_UPDATED),
            rows_deleted: num(keys::ROWS_DELETED),
            live_rows: counter.live_rows(s).await?,
            total_records: num("total-records"),
            total_data_files: num("total-data-files"),
            total_delete_files: num("total-delete-files"),
            summary: p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        });
    }
    Ok(out)
}

/// Counts live rows per snapshot, oldest first.
///
/// While no data file has been removed (ingest only adds data and position-delete files, and
/// each position delete removes one live row), `total-records − total-position-deletes` is
/// exact. Once one has been (compaction, another engine's rewrite), a delete file may still
/// name rows of a removed file: then the snapshot's manifests are read and only deletes of live
/// data files count.
struct LiveRows<'a> {
    /// A cache of this walk's own: consecutive snapshots share most manifests and delete
    /// files, and a walk over the whole history must not push out what the next commit needs.
    files: Files,
    metadata: &'a TableMetadata,
    removed_any: bool,
}

impl<'a> LiveRows<'a> {
    fn new(file_io: &FileIO, metadata: &'a TableMetadata) -> Self {
        LiveRows {
            files: Files::new(file_io.clone(), Arc::new(TableCache::default())),
            metadata,
            removed_any: false,
        }
    }

    async fn live_rows(&mut self, s: &Snapshot) -> Result<Option<u64>> {
        let p = &s.summary().additional_properties;
        let num = |k: &str| p.get(k).and_then(|v| v.parse::<u64>().ok());
        self.removed_any |= num("deleted-data-files").is_some_and(|n| n > 0);
        if num("total-equality-deletes").is_some_and(|n| n > 0) {
            return Ok(None);
        }
        if !self.removed_any
            && let (Some(records), Some(deletes)) =
                (num("total-records"), num("total-position-deletes"))
        {
            return Ok(Some(records.saturating_sub(deletes)));
        }
        self.count_in_manifests(s).await
    }

    async fn count_in_manifests(&mut self, s: &Snapshot) -> Result<Option<u64>> {
        let live = (self.files)
            .live_in(self.metadata, s, Scope::All, Fill::Keep)
            .await?;
        if live.equality_deletes().is_some() {
            return Ok(None);
        }
        let records: HashMap<&str, u64> = live
            .data()
            .map(|d| (d.file().file_path(), d.file().record_count()))
            .collect();
        let mut deleted: HashMap<&str, HashSet<i64>> = HashMap::new();
        let mut counted: u64 = 0;
        for d in live.position_deletes() {
            let f = d.file();
            // A delete file of one data file that is live: every entry counts.
            if f.referenced_data_file()
                .is_some_and(|r| records.contains_key(r.as_str()))
            {
                counted += f.record_count();
                continue;
            }
            // A deletion vector of a data file no longer live deletes nothing here.
            if f.file_format() == iceberg::spec::DataFileFormat::Puffin {
                continue;
            }
            let (content, _) = (self.files)
                .position_deletes(&DeleteSource::of(f)?, Fill::Keep)
                .await?;
            for (target, positions) in content.iter() {
                if let Some((k, _)) = records.get_key_value(target.as_str()) {
                    deleted
                        .entry(k)
                        .or_default()
                        .extend(positions.iter().copied());
                }
            }
        }
        let total: u64 = records.values().sum();
        let dead: u64 = deleted.values().map(|p| p.len() as u64).sum::<u64>() + counted;
        Ok(Some(total.saturating_sub(dead)))
    }
}
