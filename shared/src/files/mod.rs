//! The table's own files, as stored: metadata.json documents (and, as the layer grows, the
//! manifest lists, manifests and delete files a snapshot's live files are read from).

pub(crate) mod cache;
pub(crate) mod deletes;
pub(crate) mod metadata;
pub(crate) mod parquet;

use crate::error::Error;

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
