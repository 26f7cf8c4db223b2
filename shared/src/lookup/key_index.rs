//! A large data file's key index: written beside the file once a lookup (or compaction) has
//! its key column, read by fresh processes instead of the column ([`crate::files::index`]).

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use futures::TryStreamExt;
use iceberg::io::FileIO;
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;

use super::Candidate;
use super::scan::key_values;
use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::index::{self as index, INDEX_MIN_ROWS, PackedKeys};
use crate::files::keys::{FileKeys, KeyValues};
use crate::files::parquet::open_parquet;
use crate::files::probe::ProbeKeys;

/// Writes the key index of a data file that no lookup has read whole yet (compaction's output),
/// from its key column as stored. `Ok(false)`: none is written (not a single integer key of
/// `schema`, the table's current one, fewer than [`INDEX_MIN_ROWS`] rows, keys out of order, or an index
/// no smaller than the column).
pub async fn write_key_index(
    file_io: &FileIO,
    schema: &iceberg::spec::Schema,
    path: &str,
    size: u64,
    rows: u64,
) -> Result<bool> {
    use iceberg::spec::{PrimitiveType, Type};
    let field_ids = crate::evolve::key_field_ids(schema);
    let empty: ArrayRef = match field_ids.as_slice() {
        [fid] => match schema.field_by_id(*fid).map(|f| f.field_type.as_ref()) {
            Some(Type::Primitive(PrimitiveType::Long)) => {
                Arc::new(arrow_array::Int64Array::from(Vec::<i64>::new()))
            }
            Some(Type::Primitive(PrimitiveType::Int)) => {
                Arc::new(arrow_array::Int32Array::from(Vec::<i32>::new()))
            }
            _ => return Ok(false),
        },
        _ => return Ok(false),
    };
    if rows < INDEX_MIN_ROWS {
        return Ok(false);
    }
    // The key as a lookup names it: its types come from the batch of changed keys, which is
    // in the table's current types.
    let k = ProbeKeys::new(&RecordBatch::try_from_iter([("k", empty)])?, field_ids)?;
    let reader = open_parquet(file_io, path, size).await?;
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let md = builder.metadata().clone();
    let leaves = key_leaves(&md, &k, path)?;
    let batches: Vec<RecordBatch> = builder
        .with_projection(ProjectionMask::leaves(
            md.file_metadata().schema_descr_ptr().as_ref(),
            leaves.iter().copied(),
        ))
        .with_batch_size(64 * 1024)
        .build()?
        .try_collect()
        .await?;
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    if total as u64 != rows {
        return Err(Error::Table(format!(
            "{path}: {total} rows read, the manifest says {rows}"
        )));
    }
    let keys = Arc::new(FileKeys {
        values: key_values(&batches, &k, total, path)?,
        sorted: true,
    });
    store_index(
        file_io,
        path,
        size,
        k.sig,
        keys,
        key_column_bytes(&md, &leaves),
    )
    .await
}

/// Uploads a key index in the background ([`store_index`]); the owner of the cache waits for
/// it ([`crate::files::TableCache::finish_uploads`]).
pub(super) fn write_index(
    files: &Files,
    c: &Candidate,
    sig: &str,
    keys: Arc<FileKeys>,
    column_bytes: usize,
) {
    let (file_io, data_file, sig) = (files.io().clone(), c.path.clone(), sig.to_string());
    let file_size = c.size;
    let task = tokio::spawn(async move {
        match store_index(&file_io, &data_file, file_size, sig, keys, column_bytes).await {
            Ok(written) => tracing::debug!(file = %data_file, written, "key index"),
            Err(e) => tracing::warn!(file = %data_file, error = %e, "key index not written"),
        }
    });
    files.cache().track_upload(task);
}

/// Encodes the key index of `data_file` (of `file_size` bytes; keys of the types `sig` names)
/// and uploads it beside the file, if the keys are packed and the index is smaller than
/// `column_bytes`, the key column as the file stores it (dense or clustered keys are; random
/// 64-bit ids need not be). `Ok(false)`: not written.
async fn store_index(
    file_io: &FileIO,
    data_file: &str,
    file_size: u64,
    sig: String,
    keys: Arc<FileKeys>,
    column_bytes: usize,
) -> Result<bool> {
    // Compressing a large file's keys takes milliseconds: off the async workers.
    let encoded = tokio::task::spawn_blocking(move || match &keys.values {
        KeyValues::Packed(p) => p.encode(file_size, &sig).map(Some),
        _ => Ok(None),
    })
    .await
    .map_err(|e| Error::Internal(format!("key index: {e}")))??;
    match encoded {
        Some(b) if b.len() < column_bytes => {
            file_io
                .new_output(index::index_path(data_file))?
                .write(bytes::Bytes::from(b))
                .await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Parquet leaf index of each key column, by field id.
pub(super) fn key_leaves(
    md: &parquet::file::metadata::ParquetMetaData,
    k: &ProbeKeys,
    path: &str,
) -> Result<Vec<usize>> {
    let descr = md.file_metadata().schema_descr_ptr();
    let mut leaves = Vec::with_capacity(k.field_ids.len());
    for fid in &k.field_ids {
        let idx = (0..descr.num_columns()).find(|&i| {
            let t = descr.column(i).self_type_ptr();
            t.get_basic_info().has_id() && t.get_basic_info().id() == *fid
        });
        leaves.push(
            idx.ok_or_else(|| Error::Table(format!("{path}: no column with field id {fid}")))?,
        );
    }
    Ok(leaves)
}

/// The stored key index of a candidate file, if there is a usable one. A missing, foreign or
/// damaged index is no error: the file's key column is read instead.
pub(super) async fn read_index(file_io: &FileIO, c: &Candidate, sig: &str) -> Option<PackedKeys> {
    let path = index::index_path(&c.path);
    let bytes = match file_io.new_input(&path) {
        Ok(input) => input.read().await,
        Err(e) => Err(e),
    };
    // Not found is the usual reason (no lookup read the file whole yet); the storage layer
    // does not tell it apart from other failures, and either way the file itself is read.
    let bytes = bytes
        .map_err(|e| tracing::debug!(index = %path, error = %e, "no key index"))
        .ok()?;
    match PackedKeys::decode(&bytes, c.size, c.rows, sig) {
        Ok(Some(p)) => Some(p),
        Ok(None) => {
            tracing::debug!(index = %path, "key index of other key types or another file");
            None
        }
        Err(e) => {
            tracing::warn!(index = %path, error = %e, "key index unusable; reading the file");
            None
        }
    }
}

/// Compressed bytes of the key columns in a Parquet file.
pub(super) fn key_column_bytes(
    md: &parquet::file::metadata::ParquetMetaData,
    leaves: &[usize],
) -> usize {
    md.row_groups()
        .iter()
        .flat_map(|rg| leaves.iter().map(move |&l| rg.column(l).compressed_size()))
        .sum::<i64>()
        .max(0) as usize
}
