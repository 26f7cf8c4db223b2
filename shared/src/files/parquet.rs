//! Reading the table's small Parquet files (position deletes, key columns, key indexes' data
//! files): whole in one request when small, by ranges when not; and the limits every reader
//! and writer of table files shares (requests in flight, rows per row group).

use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::TryStreamExt as _;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::{FileIO, FileMetadata};
use parquet::arrow::ParquetRecordBatchStreamBuilder;

use crate::error::{Error, Result};

/// Reads in flight at once per lookup step (manifests, delete files, key columns, ordering
/// values): enough to cover object-storage round trips, few enough for Lambda's memory.
pub(crate) const READ_CONCURRENCY: usize = 16;

/// Reads of small files ([`WHOLE_FILE_BYTES`] at most, read whole) in flight at once: a
/// fresh process on a table with many partitions reads hundreds of them, and each holds at
/// most a megabyte.
pub(crate) const SMALL_READ_CONCURRENCY: usize = 64;

/// Files uploaded at once by one commit: enough to hide object-storage latency with many
/// partitions (a 200-partition change writes 400 files: 7 rounds of PUTs, not 25). Memory
/// hardly grows with it: the rows are in memory already, and each upload holds one
/// partition's encoded file.
pub(crate) const WRITE_CONCURRENCY: usize = 64;

/// Small files written or deleted at once: a commit writes a delete file per data file it
/// touches (a 200-partition table with a few files per partition: hundreds), each a few KB, and
/// an abandoned attempt deletes what it wrote; the bound is round trips, not memory.
pub(crate) const SMALL_FILE_CONCURRENCY: usize = 256;

/// Rows per Parquet row group: the unit that statistics and bloom filters let a lookup skip.
pub(crate) const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Parquet files up to this size are read whole, in one request: their footer, bloom filters
/// and columns would otherwise cost three round trips one after another.
pub(crate) const WHOLE_FILE_BYTES: u64 = 1 << 20;

/// A Parquet file held in memory, read whole.
struct WholeFile(bytes::Bytes);

impl parquet::arrow::async_reader::AsyncFileReader for WholeFile {
    fn get_bytes(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> futures::future::BoxFuture<'_, parquet::errors::Result<bytes::Bytes>> {
        let len = self.0.len() as u64;
        let r = if range.start <= range.end && range.end <= len {
            Ok(self.0.slice(range.start as usize..range.end as usize))
        } else {
            Err(parquet::errors::ParquetError::EOF(format!(
                "range {range:?} beyond the file's {len} bytes"
            )))
        };
        Box::pin(futures::future::ready(r))
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a parquet::arrow::arrow_reader::ArrowReaderOptions>,
    ) -> futures::future::BoxFuture<
        'a,
        parquet::errors::Result<Arc<parquet::file::metadata::ParquetMetaData>>,
    > {
        let r = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&self.0)
            .map(Arc::new);
        Box::pin(futures::future::ready(r))
    }
}

/// Small files are read whole, SMALL_READ_CONCURRENCY at once; a file larger than
/// [`WHOLE_FILE_BYTES`] reads ranges of its own and holds a permit of `large` (sized
/// READ_CONCURRENCY) while it does.
pub(crate) async fn large_read_permit(
    large: &tokio::sync::Semaphore,
    size: u64,
) -> Result<Option<tokio::sync::SemaphorePermit<'_>>> {
    if size <= WHOLE_FILE_BYTES {
        return Ok(None);
    }
    large
        .acquire()
        .await
        .map(Some)
        .map_err(|e| Error::Internal(format!("read limit: {e}")))
}

/// Opens a Parquet file for async reading: whole, in one request, if it is small; else
/// reading ranges as asked.
pub(crate) async fn open_parquet(
    file_io: &FileIO,
    path: &str,
    size: u64,
) -> Result<Box<dyn parquet::arrow::async_reader::AsyncFileReader>> {
    let input = file_io.new_input(path)?;
    if size <= WHOLE_FILE_BYTES {
        return Ok(Box::new(WholeFile(input.read().await?)));
    }
    Ok(Box::new(ArrowFileReader::new(
        FileMetadata { size },
        input.reader().await?,
    )))
}

/// Every row of a (small) Parquet file.
pub(crate) async fn read_all(file_io: &FileIO, path: &str, size: u64) -> Result<Vec<RecordBatch>> {
    let reader = open_parquet(file_io, path, size).await?;
    let stream = ParquetRecordBatchStreamBuilder::new(reader)
        .await?
        .build()?;
    Ok(stream.try_collect().await?)
}
