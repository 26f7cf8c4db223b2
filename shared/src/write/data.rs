//! Data files: the rows a commit upserts or compaction rewrites, written as Parquet files of the
//! table's default partition spec (one set per partition), sorted as the rows come, with a
//! bloom filter per key column, rolled over at the target size.

use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::{RecordBatchPartitionSplitter, schema_to_arrow_schema};
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, PartitionKey, Struct, TableMetadata,
};
use iceberg::writer::CurrentFileStatus as _;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::{RollingFileWriter, RollingFileWriterBuilder};
use parquet::basic::Compression;
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

use super::key_index::KeyIndexer;
use super::properties::{Encoding, SMALL_FILE_BYTES, base_properties, varied_columns};
use crate::error::{Error, Result};
use crate::files::parquet::{ROW_GROUP_ROWS, WRITE_CONCURRENCY};
use crate::files::vocabulary::FULL_LOAD_SUFFIX;

/// Writes `rows` (already in the table's current schema, column for column, sorted by key) as
/// data files of the table's default partition spec. Returns `(spec id, file)` pairs.
pub(crate) async fn write_data_files(
    file_io: &FileIO,
    metadata: &TableMetadata,
    rows: &RecordBatch,
    key: &[String],
    target_file_size: u64,
) -> Result<Vec<(i32, DataFile)>> {
    write_data_files_of(file_io, metadata, rows, key, target_file_size, false).await
}

/// [`write_data_files`]; `full_load`: every row comes from a full load (the files are named so).
pub(crate) async fn write_data_files_of(
    file_io: &FileIO,
    metadata: &TableMetadata,
    rows: &RecordBatch,
    key: &[String],
    target_file_size: u64,
    full_load: bool,
) -> Result<Vec<(i32, DataFile)>> {
    write_data_files_seen(
        file_io,
        metadata,
        rows,
        key,
        target_file_size,
        full_load,
        &|_, _| {},
    )
    .await
}

/// What a writer hands back about a file it wrote: its path and all its rows, in file order.
pub(crate) type SeenFile<'a> = &'a (dyn Fn(&str, &RecordBatch) + Sync);

/// [`write_data_files_of`]; `seen` is called with each file that holds one partition's rows
/// whole (a partition split over several files by size is not reported), so a caller can keep
/// what it wrote instead of reading it back.
pub(crate) async fn write_data_files_seen(
    file_io: &FileIO,
    metadata: &TableMetadata,
    rows: &RecordBatch,
    key: &[String],
    target_file_size: u64,
    full_load: bool,
    seen: SeenFile<'_>,
) -> Result<Vec<(i32, DataFile)>> {
    if rows.num_rows() == 0 {
        return Ok(Vec::new());
    }
    let plan = DataFilePlan::new(
        file_io,
        metadata,
        key,
        target_file_size,
        full_load,
        rows.num_rows(),
        Encoding::Change,
        false,
    )?;
    let batch = RecordBatch::try_new(plan.arrow_schema.clone(), rows.columns().to_vec())?;
    let parts: Vec<(Option<PartitionKey>, RecordBatch)> = plan.split(&batch)?;
    // One file (or more) per partition, uploaded concurrently (bounded): with many partitions,
    // one PUT after another is most of a commit's time on object storage. Each is encoded and
    // uploaded by a task of its own, so that encoding (about a millisecond per partition's
    // file) is shared by every core the function has.
    let plan_ref = &plan;
    let written: Vec<Vec<(i32, DataFile)>> = futures::stream::iter(parts)
        .map(|(pk, part)| {
            let mut w = match &plan_ref.small {
                Some(small) if part.get_array_memory_size() < SMALL_FILE_BYTES => small.build(),
                _ => plan_ref.builder.build(),
            };
            async move {
                let (pk, part, builders) = tokio::spawn(async move {
                    w.write(&pk, &part).await?;
                    let builders = w.close().await?;
                    Ok::<_, Error>((pk, part, builders))
                })
                .await
                .map_err(|e| Error::Internal(format!("data file writer: {e}")))??;
                let out = plan_ref.finish(&pk, builders)?;
                if let [(_, f)] = out.as_slice()
                    && f.record_count() == part.num_rows() as u64
                {
                    seen(f.file_path(), &part);
                }
                Ok::<_, Error>(out)
            }
        })
        .buffered(WRITE_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(written.into_iter().flatten().collect())
}

pub(super) type DataWriterBuilder = RollingFileWriterBuilder<
    ParquetWriterBuilder,
    DefaultLocationGenerator,
    DefaultFileNameGenerator,
>;
pub(super) type DataWriter =
    RollingFileWriter<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// How a table's data files are written: its default spec, sort order, Parquet properties
/// (a bloom filter per key column) and file names.
struct DataFilePlan {
    builder: DataWriterBuilder,
    /// [`Encoding::Change`]: the builder of files below [`SMALL_FILE_BYTES`], uncompressed.
    small: Option<DataWriterBuilder>,
    /// Set when the plain columns are not known yet ([`Encoding::Sampled`]): the builder is
    /// made again from these properties once the first rows show which columns vary too much
    /// for a dictionary.
    undecided: Option<WriterPropertiesBuilder>,
    writers: Writers,
    splitter: Option<RecordBatchPartitionSplitter>,
    arrow_schema: arrow_schema::SchemaRef,
    spec_id: i32,
    sort_order_id: i32,
}

/// What a data file writer is made of besides its Parquet properties; the file names (and
/// their counter) are shared by every writer made from it.
struct Writers {
    schema: iceberg::spec::SchemaRef,
    target_file_size: u64,
    file_io: FileIO,
    location: DefaultLocationGenerator,
    names: DefaultFileNameGenerator,
}

impl Writers {
    fn builder(&self, props: WriterProperties) -> DataWriterBuilder {
        RollingFileWriterBuilder::new(
            ParquetWriterBuilder::new(props, self.schema.clone()),
            self.target_file_size as usize,
            self.file_io.clone(),
            self.location.clone(),
            self.names.clone(),
        )
    }
}

impl DataFilePlan {
    /// `rows`: about how many rows the files will hold (sizes the bloom filters); `lineage`:
    /// the files also hold the row lineage columns (see [`DataFileStream::rewriting`]).
    #[allow(clippy::too_many_arguments)]
    fn new(
        file_io: &FileIO,
        metadata: &TableMetadata,
        key: &[String],
        target_file_size: u64,
        full_load: bool,
        rows: usize,
        encoding: Encoding,
        lineage: bool,
    ) -> Result<DataFilePlan> {
        let schema = match lineage {
            true => Arc::new(crate::files::lineage::write_schema(
                metadata.current_schema(),
            )?),
            false => metadata.current_schema().clone(),
        };
        let arrow_schema = Arc::new(schema_to_arrow_schema(&schema)?);
        let ndv = (rows.min(ROW_GROUP_ROWS)) as u64;
        let sampled = matches!(encoding, Encoding::Sampled);
        let change = matches!(encoding, Encoding::Change);
        let mut props = base_properties(encoding);
        for k in key {
            let path = ColumnPath::from(k.as_str());
            props = props
                .set_column_bloom_filter_enabled(path.clone(), true)
                .set_column_bloom_filter_ndv(path.clone(), ndv.max(16))
                .set_column_bloom_filter_fpp(path, 0.01);
        }
        let spec = metadata.default_partition_spec().clone();
        let splitter = if spec.is_unpartitioned() {
            None
        } else {
            Some(RecordBatchPartitionSplitter::try_new_with_computed_values(
                schema.clone(),
                spec.clone(),
            )?)
        };
        let writers = Writers {
            schema,
            target_file_size,
            file_io: file_io.clone(),
            location: DefaultLocationGenerator::new(metadata)?,
            names: DefaultFileNameGenerator::new(
                uuid::Uuid::new_v4().to_string(),
                full_load.then(|| FULL_LOAD_SUFFIX.to_string()),
                DataFileFormat::Parquet,
            ),
        };
        Ok(DataFilePlan {
            builder: writers.builder(props.clone().build()),
            small: change.then(|| {
                writers.builder(
                    (props.clone())
                        .set_compression(Compression::UNCOMPRESSED)
                        .build(),
                )
            }),
            undecided: sampled.then_some(props),
            writers,
            splitter,
            arrow_schema,
            spec_id: spec.spec_id(),
            sort_order_id: metadata.default_sort_order_id() as i32,
        })
    }

    /// With [`Encoding::Sampled`], before the first rows are written: the builder made again
    /// with the columns of `first` that vary too much for a dictionary written plain.
    fn decide_plain(&mut self, first: &RecordBatch) {
        let Some(mut props) = self.undecided.take() else {
            return;
        };
        for c in varied_columns(first) {
            props = props.set_column_dictionary_enabled(ColumnPath::from(c.as_str()), false);
        }
        self.builder = self.writers.builder(props.build());
    }

    /// `batch`'s rows per partition of the default spec.
    fn split(&self, batch: &RecordBatch) -> Result<Vec<(Option<PartitionKey>, RecordBatch)>> {
        Ok(match &self.splitter {
            None => vec![(None, batch.clone())],
            Some(s) => s
                .split(batch)?
                .into_iter()
                .map(|(k, b)| (Some(k), b))
                .collect(),
        })
    }

    /// The data files a closed writer of partition `pk` wrote.
    fn finish(
        &self,
        pk: &Option<PartitionKey>,
        builders: Vec<iceberg::spec::DataFileBuilder>,
    ) -> Result<Vec<(i32, DataFile)>> {
        builders
            .into_iter()
            .map(|mut b| {
                b.content(DataContentType::Data)
                    .partition(
                        pk.as_ref()
                            .map(|k| k.data().clone())
                            .unwrap_or_else(Struct::empty),
                    )
                    .partition_spec_id(self.spec_id)
                    .sort_order_id(self.sort_order_id);
                Ok((
                    self.spec_id,
                    b.build()
                        .map_err(|e| Error::Internal(format!("data file: {e}")))?,
                ))
            })
            .collect()
    }
}

/// Data files written from rows that arrive in batches, each partition's rows in the order
/// they come (sorted by key when they come sorted): one rolling writer per partition of the
/// table's default spec. Memory: each open writer's current row group.
pub(crate) struct DataFileStream {
    plan: DataFilePlan,
    /// Builds each file's key index as its rows are written (a single integer key).
    indexer: Option<KeyIndexer>,
    /// Open writers, in the order their partitions first appeared.
    writers: Vec<(Option<PartitionKey>, DataWriter)>,
    by_partition: std::collections::HashMap<String, usize>,
}

impl DataFileStream {
    /// `rows`: about how many rows will come (sizes the bloom filters); `plain`: text columns
    /// written without a dictionary ([`varied_columns`]).
    pub(crate) fn new(
        file_io: &FileIO,
        metadata: &TableMetadata,
        key: &[String],
        target_file_size: u64,
        full_load: bool,
        rows: usize,
        plain: Vec<String>,
    ) -> Result<DataFileStream> {
        let encoding = Encoding::Kept { plain };
        DataFilePlan::new(
            file_io,
            metadata,
            key,
            target_file_size,
            full_load,
            rows,
            encoding,
            false,
        )
        .map(|plan| DataFileStream::of(plan, file_io, key))
    }

    /// [`DataFileStream::new`] for rows moved from other files (compaction): on a table with
    /// row lineage (v3) the files also hold each row's `_row_id` and
    /// `_last_updated_sequence_number`, the last two columns of [`DataFileStream::arrow_schema`].
    pub(crate) fn rewriting(
        file_io: &FileIO,
        metadata: &TableMetadata,
        key: &[String],
        target_file_size: u64,
        full_load: bool,
        rows: usize,
    ) -> Result<DataFileStream> {
        let lineage = crate::files::lineage::tracks(metadata);
        let encoding = Encoding::Sampled;
        DataFilePlan::new(
            file_io,
            metadata,
            key,
            target_file_size,
            full_load,
            rows,
            encoding,
            lineage,
        )
        .map(|plan| DataFileStream::of(plan, file_io, key))
    }

    fn of(plan: DataFilePlan, file_io: &FileIO, key: &[String]) -> DataFileStream {
        let indexer = KeyIndexer::new(file_io, &plan.writers.schema, &plan.arrow_schema, key);
        DataFileStream {
            plan,
            indexer,
            writers: Vec::new(),
            by_partition: std::collections::HashMap::new(),
        }
    }

    /// The table's schema in Arrow form: what [`DataFileStream::write`] takes.
    pub(crate) fn arrow_schema(&self) -> &arrow_schema::SchemaRef {
        &self.plan.arrow_schema
    }

    /// Partitions rows went to so far.
    pub(crate) fn partitions(&self) -> usize {
        self.writers.len()
    }

    pub(crate) async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = RecordBatch::try_new(self.plan.arrow_schema.clone(), batch.columns().to_vec())?;
        if self.writers.is_empty() {
            self.plan.decide_plain(&batch);
        }
        for (pk, part) in self.plan.split(&batch)? {
            let name = format!("{:?}", pk.as_ref().map(|k| k.data()));
            let i = match self.by_partition.get(&name) {
                Some(i) => *i,
                None => {
                    self.writers.push((pk, self.plan.builder.build()));
                    self.by_partition.insert(name, self.writers.len() - 1);
                    self.writers.len() - 1
                }
            };
            let (pk, w) = &mut self.writers[i];
            w.write(pk, &part).await?;
            if let Some(ix) = self.indexer.as_mut() {
                ix.wrote(i, w.current_file_path(), &part);
            }
        }
        Ok(())
    }

    /// Closes every file: `(spec id, file)` per file, partition by partition in the order
    /// partitions first appeared, each partition's files in the order their rows came.
    pub(crate) async fn close(self) -> Result<Vec<(i32, DataFile)>> {
        Ok(self.close_indexed().await?.0)
    }

    /// [`DataFileStream::close`], once every file's key index is uploaded; with how many were
    /// (files of at least [`crate::files::index::INDEX_MIN_ROWS`] rows of a single integer key,
    /// in key order).
    pub(crate) async fn close_indexed(self) -> Result<(Vec<(i32, DataFile)>, usize)> {
        let mut out = Vec::new();
        for (pk, w) in self.writers {
            out.extend(self.plan.finish(&pk, w.close().await?)?);
        }
        let indexes = match self.indexer {
            Some(ix) => ix.finish(&out).await,
            None => 0,
        };
        Ok((out, indexes))
    }

    /// Closes and deletes every file written (an abandoned rewrite leaves nothing behind).
    pub(crate) async fn abort(self, file_io: &FileIO) {
        let mut paths = Vec::new();
        for (pk, w) in self.writers {
            if let Ok(builders) = w.close().await
                && let Ok(files) = self.plan.finish(&pk, builders)
            {
                paths.extend(files.into_iter().map(|(_, f)| f.file_path().to_string()));
            }
        }
        if let Some(ix) = self.indexer {
            let _ = ix.abort(&paths).await;
        }
        for p in paths {
            let _ = file_io.delete(&p).await;
        }
    }
}
