//! A table as loaded from the catalog, and the ingest state it carries in snapshot summaries.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::{Snapshot, TableMetadata};
use iceberg::table::Table;

use crate::catalog::{Catalog, Pointer};
use crate::error::Result;
use crate::locate::OrderKey;

/// Snapshot summary keys we write. Every snapshot we commit carries the watermark forward,
/// so the current snapshot alone tells what has been applied.
pub mod keys {
    /// JSON array of the DMS object keys this snapshot applied.
    pub const SOURCE_FILES: &str = "dms2iceberg.source-files";
    /// JSON array of the DMS order keys of those objects (same order as SOURCE_FILES).
    pub const SOURCE_ORDERS: &str = "dms2iceberg.source-orders";
    /// DMS order key of the last file applied to the table (cumulative).
    pub const WATERMARK: &str = "dms2iceberg.watermark";
    /// Table property: the DMS `schema.table` that feeds the table (two sources resolving to one
    /// table would silently mix their rows).
    pub const SOURCE_TABLE: &str = "dms2iceberg.source-table";
    /// Table property: files up to this DMS order count as applied (their snapshots expired).
    pub const EXPIRED_WATERMARK: &str = "dms2iceberg.expired-watermark";
    /// Greatest change sequence applied to the table (cumulative), when configured.
    pub const CHANGE_SEQ: &str = "dms2iceberg.change-seq";
    pub const ROWS_INSERTED: &str = "dms2iceberg.rows-inserted";
    pub const ROWS_UPDATED: &str = "dms2iceberg.rows-updated";
    pub const ROWS_DELETED: &str = "dms2iceberg.rows-deleted";
    pub const VERSION: &str = "dms2iceberg.version";
}

/// Parsed metadata files, newest last. A metadata file is never rewritten (each commit writes
/// a new one under a new name), so its location identifies its content: one commit loads its
/// table several times (plan, validation, the function's checks), and a long snapshot history
/// makes every parse cost more.
static METADATA: Mutex<Vec<(String, Arc<TableMetadata>)>> = Mutex::new(Vec::new());
const METADATA_CACHED: usize = 8;

async fn read_metadata(file_io: &FileIO, location: &str) -> Result<Arc<TableMetadata>> {
    let cached = |m: &Vec<(String, Arc<TableMetadata>)>| {
        m.iter()
            .find(|(l, _)| l == location)
            .map(|(_, t)| t.clone())
    };
    if let Ok(m) = METADATA.lock()
        && let Some(t) = cached(&m)
    {
        return Ok(t);
    }
    let metadata = Arc::new(TableMetadata::read_from(file_io, location).await?);
    if let Ok(mut m) = METADATA.lock()
        && cached(&m).is_none()
    {
        if m.len() >= METADATA_CACHED {
            m.remove(0);
        }
        m.push((location.to_string(), metadata.clone()));
    }
    Ok(metadata)
}

#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub ident: TableIdent,
    pub pointer: Pointer,
    pub metadata: Arc<TableMetadata>,
}

/// What has been applied to a table, from its snapshot summaries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watermark {
    pub file: Option<OrderKey>,
    pub change_seq: Option<String>,
}

impl LoadedTable {
    pub async fn load(catalog: &dyn Catalog, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let Some(pointer) = catalog.load(ident).await? else {
            return Ok(None);
        };
        let metadata = read_metadata(catalog.file_io(), &pointer.metadata_location).await?;
        Ok(Some(LoadedTable {
            ident: ident.clone(),
            pointer,
            metadata,
        }))
    }

    pub fn watermark(&self) -> Watermark {
        watermark(&self.metadata)
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

/// Snapshots from the current one back to the first, following parents (the `snapshots` list
/// in metadata is unordered).
pub fn ancestry(metadata: &TableMetadata) -> Vec<&Arc<Snapshot>> {
    let mut out = Vec::new();
    let mut next = metadata.current_snapshot_id();
    while let Some(id) = next {
        let Some(s) = metadata.snapshot_by_id(id) else {
            break;
        };
        out.push(s);
        next = s.parent_snapshot_id();
    }
    out
}

/// The newest ingest state in the current snapshot's ancestry (snapshots by other writers
/// carry none and are skipped).
pub fn watermark(metadata: &TableMetadata) -> Watermark {
    for s in ancestry(metadata) {
        let p = &s.summary().additional_properties;
        if let Some(w) = p.get(keys::WATERMARK) {
            return Watermark {
                file: OrderKey::parse(w),
                change_seq: p.get(keys::CHANGE_SEQ).cloned(),
            };
        }
    }
    Watermark::default()
}

/// Which DMS files a table holds, from the summaries of its snapshot ancestry.
#[derive(Debug, Clone, Default)]
pub struct AppliedFiles {
    /// Order key → object key.
    pub files: BTreeMap<OrderKey, String>,
    /// Expired snapshots took older records with them: files up to here count as applied (a
    /// file arriving later than the snapshot retention is not told apart from an applied one).
    pub horizon: Option<OrderKey>,
}

impl AppliedFiles {
    pub fn contains(&self, order: &OrderKey) -> bool {
        self.files.contains_key(order) || self.horizon.as_ref().is_some_and(|h| order <= h)
    }

    /// Applied files after `order`, in DMS order.
    pub fn after(&self, order: &OrderKey) -> Vec<(OrderKey, String)> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.files
            .range((Excluded(order.clone()), Unbounded))
            .map(|(o, k)| (o.clone(), k.clone()))
            .collect()
    }
}

pub fn applied_files(metadata: &TableMetadata) -> AppliedFiles {
    let mut out = AppliedFiles::default();
    let chain = ancestry(metadata);
    let truncated = chain
        .last()
        .and_then(|root| root.parent_snapshot_id())
        .is_some();
    out.horizon = metadata
        .properties()
        .get(keys::EXPIRED_WATERMARK)
        .and_then(|w| OrderKey::parse(w));
    if truncated && out.horizon.is_none() {
        // Expired by another tool: the oldest retained snapshot's watermark is the best bound.
        out.horizon = chain
            .iter()
            .rev()
            .find_map(|s| s.summary().additional_properties.get(keys::WATERMARK))
            .and_then(|w| OrderKey::parse(w));
    }
    for s in chain {
        let p = &s.summary().additional_properties;
        let orders: Vec<String> = p
            .get(keys::SOURCE_ORDERS)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        for (o, k) in orders.iter().zip(source_files(p)) {
            if let Some(o) = OrderKey::parse(o) {
                out.files.entry(o).or_insert(k);
            }
        }
    }
    out
}

/// Our summary properties of a snapshot, for `history`.
pub fn source_files(props: &std::collections::HashMap<String, String>) -> Vec<String> {
    props
        .get(keys::SOURCE_FILES)
        .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
        .unwrap_or_default()
}

/// Properties carried forward by a snapshot that applies no input (e.g. compaction).
pub fn carried_state(metadata: &TableMetadata) -> BTreeMap<String, String> {
    let w = watermark(metadata);
    let mut m = BTreeMap::new();
    if let Some(f) = w.file {
        m.insert(keys::WATERMARK.to_string(), f.to_string());
    }
    if let Some(s) = w.change_seq {
        m.insert(keys::CHANGE_SEQ.to_string(), s);
    }
    m
}

/// The manifests of `snapshot` (unencrypted tables; we never write encrypted ones).
pub async fn manifest_list(
    file_io: &FileIO,
    metadata: &TableMetadata,
    snapshot: &Snapshot,
) -> Result<Vec<iceberg::spec::ManifestFile>> {
    let bytes = file_io.new_input(snapshot.manifest_list())?.read().await?;
    let list = iceberg::spec::ManifestList::parse_with_version(&bytes, metadata.format_version())?;
    Ok(list.consume_entries().into_iter().collect())
}
