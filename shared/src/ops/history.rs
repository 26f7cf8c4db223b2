//! history: the snapshots of a table, oldest first, with what each applied.

use iceberg::TableIdent;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::table::{LoadedTable, ancestry, keys, source_files};

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotInfo {
    pub snapshot_id: i64,
    pub parent_id: Option<i64>,
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub operation: String,
    pub source_files: Vec<String>,
    pub watermark: Option<String>,
    pub rows_inserted: Option<u64>,
    pub rows_updated: Option<u64>,
    pub rows_deleted: Option<u64>,
    pub total_records: Option<u64>,
    pub total_data_files: Option<u64>,
    pub total_delete_files: Option<u64>,
    pub summary: std::collections::BTreeMap<String, String>,
}

pub async fn history(catalog: &dyn Catalog, ident: &TableIdent) -> Result<Vec<SnapshotInfo>> {
    let t = LoadedTable::load(catalog, ident)
        .await?
        .ok_or_else(|| Error::Other(format!("table {ident} does not exist")))?;
    let mut out: Vec<SnapshotInfo> = ancestry(&t.metadata)
        .into_iter()
        .map(|s| {
            let p = &s.summary().additional_properties;
            let num = |k: &str| p.get(k).and_then(|v| v.parse().ok());
            SnapshotInfo {
                snapshot_id: s.snapshot_id(),
                parent_id: s.parent_snapshot_id(),
                sequence_number: s.sequence_number(),
                timestamp_ms: s.timestamp_ms(),
                operation: s.summary().operation.as_str().to_string(),
                source_files: source_files(p),
                watermark: p.get(keys::WATERMARK).cloned(),
                rows_inserted: num(keys::ROWS_INSERTED),
                rows_updated: num(keys::ROWS_UPDATED),
                rows_deleted: num(keys::ROWS_DELETED),
                total_records: num("total-records"),
                total_data_files: num("total-data-files"),
                total_delete_files: num("total-delete-files"),
                summary: p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            }
        })
        .collect();
    out.reverse();
    Ok(out)
}
