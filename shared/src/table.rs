//! A table as loaded from the catalog, and the keys of what we write into its metadata.

use std::sync::Arc;

use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::{Snapshot, TableMetadata};
use iceberg::table::Table;

use crate::catalog::{Catalog, Pointer};
use crate::error::{Error, Result};
use crate::files::metadata::Refs;

/// Snapshot summary and table property keys we write. Which files a table holds is in the
/// table property [`crate::commit::record::PROPERTY`]; the summary keys describe each snapshot
/// for `history` (and, for tables written before that property existed, are where the record
/// is rebuilt from).
pub(crate) mod keys {
    /// JSON array of the DMS object keys this snapshot applied.
    pub(crate) const SOURCE_FILES: &str = "dms2iceberg.source-files";
    /// JSON array of the DMS order keys of those objects (same order as SOURCE_FILES).
    pub(crate) const SOURCE_ORDERS: &str = "dms2iceberg.source-orders";
    /// DMS order key of the last file applied to the table (cumulative).
    pub(crate) const WATERMARK: &str = "dms2iceberg.watermark";
    /// Table property: the DMS `schema.table` that feeds the table (two sources resolving to one
    /// table would silently mix their rows).
    pub(crate) const SOURCE_TABLE: &str = "dms2iceberg.source-table";
    /// Table property: files up to this DMS order count as applied (their snapshots expired).
    pub(crate) const EXPIRED_WATERMARK: &str = "dms2iceberg.expired-watermark";
    /// Greatest change sequence applied to the table (cumulative), when configured.
    pub(crate) const CHANGE_SEQ: &str = "dms2iceberg.change-seq";
    pub(crate) const ROWS_INSERTED: &str = "dms2iceberg.rows-inserted";
    pub(crate) const ROWS_UPDATED: &str = "dms2iceberg.rows-updated";
    pub(crate) const ROWS_DELETED: &str = "dms2iceberg.rows-deleted";
    /// The snapshot is a reload: it replaced the table's contents with a new full load.
    pub(crate) const RELOAD: &str = "dms2iceberg.reload";
    /// The snapshot is a truncate: the source table was truncated, every row removed.
    pub(crate) const TRUNCATE: &str = "dms2iceberg.truncate";
    pub(crate) const VERSION: &str = "dms2iceberg.version";
    /// Table property: how rows apply (`append`, `changelog`; absent: upsert), fixed when the
    /// table is created.
    pub(crate) const MODE: &str = "dms2iceberg.mode";
    /// Table property: the ordering columns ingest compares a change with the row it replaces
    /// by (JSON array), set by the first commit made with them configured. While it is set,
    /// compaction rewrites full-load files only with each other, so their rows keep their
    /// precedence over every change (`crate::write::FULL_LOAD_SUFFIX`); without it a full-load
    /// row has none to keep, and its file may be merged with change rows into one.
    pub(crate) const ORDERING_COLUMNS: &str = "dms2iceberg.ordering-columns";
}

#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub ident: TableIdent,
    pub pointer: Pointer,
    pub metadata: Arc<TableMetadata>,
    /// The metadata's branches and tags (iceberg-rust keeps them private): what a commit on
    /// this metadata builds its own refs from.
    pub(crate) refs: Arc<Refs>,
}

impl LoadedTable {
    pub async fn load(catalog: &dyn Catalog, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let Some(pointer) = catalog.load(ident).await? else {
            return Ok(None);
        };
        let (metadata, refs) = match catalog.files().metadata(&pointer.metadata_location).await {
            Ok(m) => m,
            Err(e) => return Err(missing_or(catalog, ident, &pointer.metadata_location, e).await),
        };
        Ok(Some(LoadedTable {
            ident: ident.clone(),
            pointer,
            metadata,
            refs,
        }))
    }

    /// An iceberg-rust `Table` for reading (scans, manifests).
    pub fn table(&self, file_io: &FileIO) -> Result<Table> {
        Ok(Table::builder()
            .identifier(self.ident.clone())
            .metadata(self.metadata.clone())
            .metadata_location(self.pointer.metadata_location.clone())
            .file_io(file_io.clone())
            .readonly(true)
            .runtime(iceberg::Runtime::try_current()?)
            .build()?)
    }
}

/// [`Error::MetadataDamaged`] when storage says the file at `location` is not there, or its
/// bytes are not table metadata (a read that failed for another reason, or a check that failed
/// too, is `e` as it was: only a definite answer calls the table damaged).
async fn missing_or(catalog: &dyn Catalog, ident: &TableIdent, location: &str, e: Error) -> Error {
    let damaged = |problem: String| Error::MetadataDamaged {
        table: ident.to_string(),
        location: location.to_string(),
        problem,
    };
    if let Error::Iceberg(ie) = &e
        && ie.kind() == iceberg::ErrorKind::DataInvalid
    {
        return damaged(format!("does not read as table metadata ({ie})"));
    }
    match catalog.file_io().exists(location).await {
        Ok(false) => damaged(
            "does not exist (files of a commit were deleted while the catalog named them)".into(),
        ),
        _ => e,
    }
}

/// Snapshots from the current one back to the first, following parents (the `snapshots` list
/// in metadata is unordered).
pub(crate) fn ancestry(metadata: &TableMetadata) -> Vec<&Arc<Snapshot>> {
    ancestors(metadata).collect()
}

/// [`ancestry`], lazily: a walk that stops early (at a base snapshot, at our own) costs what it
/// visits, not the whole history. Bounded by the snapshot count, so a parent cycle in damaged
/// metadata ends.
pub(crate) fn ancestors(metadata: &TableMetadata) -> impl Iterator<Item = &Arc<Snapshot>> {
    let mut next = metadata.current_snapshot_id();
    std::iter::from_fn(move || {
        let s = metadata.snapshot_by_id(next?)?;
        next = s.parent_snapshot_id();
        Some(s)
    })
    .take(metadata.snapshots().len())
}

/// Our summary properties of a snapshot, for `history`.
pub(crate) fn source_files(props: &std::collections::HashMap<String, String>) -> Vec<String> {
    props
        .get(keys::SOURCE_FILES)
        .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
        .unwrap_or_default()
}
