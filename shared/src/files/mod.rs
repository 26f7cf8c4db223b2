//! The table's own files, as stored and as decoded: metadata.json documents, manifest lists,
//! manifests, position-delete content, small Parquet files, key columns and key indexes. Every
//! reader of a table's files goes through one [`Files`]: storage plus the owner's
//! [`TableCache`], so a warm process reads back nothing it wrote or already read.

pub(crate) mod cache;
pub(crate) mod cost;
pub(crate) mod deletes;
pub(crate) mod dv;
pub(crate) mod index;
pub(crate) mod keys;
pub(crate) mod lineage;
pub(crate) mod live;
pub(crate) mod manifests;
pub(crate) mod metadata;
pub(crate) mod parquet;
pub(crate) mod prepared;
pub(crate) mod probe;
pub(crate) mod vocabulary;

use std::sync::Arc;

use iceberg::io::FileIO;

pub use cache::{CacheLimits, DEFAULT_KEY_CACHE_BYTES, FileReads, TableCache};
pub use cost::ReadCost;
pub(crate) use prepared::refuses_deletes;

use crate::error::Error;

/// Storage for a table's files and the cache their reads go through. Cheap to clone (both
/// are shared handles), so background tasks hold their own.
#[derive(Clone)]
pub struct Files {
    io: FileIO,
    cache: Arc<TableCache>,
}

impl Files {
    /// `cache` is the owner's: share one between the operations of a process.
    pub fn new(io: FileIO, cache: Arc<TableCache>) -> Files {
        Files { io, cache }
    }

    pub fn io(&self) -> &FileIO {
        &self.io
    }

    pub fn cache(&self) -> &Arc<TableCache> {
        &self.cache
    }
}

/// Whether a read keeps what it fetched. Lookups keep (the next commit of a warm process reads
/// the same manifests and delete files); walks over the whole history (expiry, orphans,
/// history) pass, so they do not push out what the next commit needs. What this process wrote
/// is always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    Keep,
    Pass,
}

/// The refusal of a table with equality deletes (Flink's and some Spark jobs' upserts), where
/// `source` is the file or snapshot that has them: lookups and compaction apply position deletes
/// only, so such rows would come back to life.
pub(crate) fn equality_deletes_refused(source: &str) -> Error {
    Error::Unsupported(format!(
        "table has equality delete files ({source}); dms2iceberg reads and writes position \
         deletes only and would resurrect the rows they delete: rewrite them away first (Spark: \
         CALL system.rewrite_data_files with delete-file-threshold=1), then ingest again"
    ))
}
