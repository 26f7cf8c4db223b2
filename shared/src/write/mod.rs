//! write: Parquet data files for the rows a commit upserts, and position-delete files for the
//! rows it replaces or removes.
//!
//! Data files are sorted by key (rows arrive sorted from dedupe), carry column statistics and a
//! bloom filter on each key column, and roll over at the target size; a partitioned table gets
//! one set of files per partition. Those are what make [`crate::lookup`] cheap later: sorted
//! files have narrow key bounds, and row groups can be skipped by statistics and bloom filters.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::{RecordBatchPartitionSplitter, schema_to_arrow_schema};
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, FormatVersion, NestedField, PartitionKey,
    PrimitiveType, Schema, Struct, TableMetadata, Type,
};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator, LocationGenerator as _,
};
use iceberg::writer::file_writer::rolling_writer::{RollingFileWriter, RollingFileWriterBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

use crate::error::{Error, Result};
use crate::types::conform_partition;

/// Files uploaded at once by one commit: enough to hide object-storage latency with many
/// partitions (a 200-partition change writes 400 files: 7 rounds of PUTs, not 25). Memory
/// hardly grows with it: the rows are in memory already, and each upload holds one
/// partition's encoded file.
pub(crate) const WRITE_CONCURRENCY: usize = 64;

/// Small files written or deleted at once: a commit writes a delete file per data file it
/// touches (a 200-partition table with a few files per partition: hundreds), each a few KB, and
/// an abandoned attempt deletes what it wrote; the bound is round trips, not memory.
pub(crate) const SMALL_FILE_CONCURRENCY: usize = 256;

/// A change's rows for one partition below this (in memory) are written uncompressed: the
/// Parquet writer makes a zstd context per column chunk (about a megabyte to set up, even for a
/// few rows), so a commit spread over 200 partitions made ~1,200 of them for files of a few KB
/// whose compression saves less than it costs. Compaction rewrites them with zstd.
const SMALL_FILE_BYTES: usize = 64 << 10;

/// Rows per Parquet row group: the unit that statistics and bloom filters let a lookup skip.
pub(crate) const ROW_GROUP_ROWS: usize = 128 * 1024;

pub(crate) use crate::files::deletes::{DELETE_FILE_PATH_ID, DELETE_POS_ID};

/// How a file's columns are encoded. zstd level 1 everywhere: it encodes in about two thirds
/// of level 3's time for about 1% more bytes (a 1 GB full load: 2.99 against 4.30 s on one
/// core, 193 against 191 MB; see bench/RESULTS.md).
#[derive(Debug, Clone)]
enum Encoding {
    /// No dictionary pages: the files one change file's commit writes (compaction rewrites
    /// them). A dictionary costs a hash of every value, and zstd finds the repeats of a
    /// low-cardinality column by itself (a 10,000-row change: 166.8 KB against 218.6 KB).
    Change,
    /// Dictionary pages (readers filter dictionary-encoded columns without decoding them):
    /// full loads, compaction's output and other streamed inputs, the files that stay. Except
    /// for the columns listed ([`varied_columns`]): building a dictionary of nearly unique
    /// values was a tenth of a full load's CPU for nothing.
    Kept { plain: Vec<String> },
    /// [`Encoding::Kept`], the plain columns picked from the first rows written: compaction's
    /// output, whose rows are not seen before it writes (a dictionary of a key column costs a
    /// reader more than it saves: DuckDB scanned a compacted 1M-row file in 35.6 ms with one,
    /// 32.6 ms without).
    Sampled,
}

/// Columns of `sample` (a first batch of rows) whose values are so varied that a dictionary
/// does not pay: most values distinct (a key, a sequence, a measure), or a dictionary of a whole
/// row group that would overflow its page (long, nearly unique text). Written without one.
pub(crate) fn varied_columns(sample: &RecordBatch) -> Vec<String> {
    const DICTIONARY_PAGE_BYTES: usize = 1 << 20;
    let rows = sample.num_rows();
    if rows == 0 {
        return Vec::new();
    }
    sample
        .schema()
        .fields()
        .iter()
        .zip(sample.columns())
        .filter_map(|(f, c)| {
            let conv = arrow_row::RowConverter::new(vec![arrow_row::SortField::new(
                c.data_type().clone(),
            )])
            .ok()?;
            let encoded = conv.convert_columns(std::slice::from_ref(c)).ok()?;
            let distinct: std::collections::HashSet<&[u8]> =
                (0..rows).map(|i| encoded.row(i).data()).collect();
            let bytes: usize = distinct.iter().map(|v| v.len()).sum();
            // The dictionary one row group would build, at this sample's rate.
            let expected = bytes.saturating_mul(ROW_GROUP_ROWS) / rows;
            (distinct.len() * 2 > rows || expected > DICTIONARY_PAGE_BYTES)
                .then(|| f.name().clone())
        })
        .collect()
}

fn base_properties(encoding: Encoding) -> WriterPropertiesBuilder {
    let (level, dictionary, plain) = match encoding {
        Encoding::Change => (1, false, Vec::new()),
        Encoding::Kept { plain } => (1, true, plain),
        Encoding::Sampled => (1, true, Vec::new()),
    };
    let mut b = WriterProperties::builder();
    for c in plain {
        b = b.set_column_dictionary_enabled(ColumnPath::from(c.as_str()), false);
    }
    b.set_compression(Compression::ZSTD(
        ZstdLevel::try_new(level).unwrap_or_default(),
    ))
    .set_dictionary_enabled(dictionary)
    .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
    .set_created_by(format!("dms2iceberg {}", env!("CARGO_PKG_VERSION")))
}

/// Name suffix of data files that hold only full-load rows (`<uuid>-00000-fullload.parquet`).
/// Full-load rows come before every change, whatever their ordering columns say (DMS stamps
/// them with the transfer time, and changes cached during the load can be older): a lookup
/// never takes a row of such a file for newer than a change. The name says it, so it survives
/// snapshot expiry and needs no extra read; a file rewritten by another engine loses it.
pub(crate) const FULL_LOAD_SUFFIX: &str = "fullload";

/// Whether a data file (by path) holds only full-load rows.
pub(crate) fn is_full_load_file(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.ends_with(&format!("-{FULL_LOAD_SUFFIX}.parquet")))
}

/// Whether compaction must rewrite a data file only with other full-load files: it holds only
/// full-load rows and the table's changes are ordered by columns
/// ([`crate::table::keys::ORDERING_COLUMNS`]), against which those rows keep their precedence.
/// Without ordering columns nothing compares a full-load row with a change, and merging the
/// file with the change rows leaves readers one file instead of two.
pub(crate) fn keeps_apart(md: &TableMetadata, path: &str) -> bool {
    is_full_load_file(path)
        && md
            .properties()
            .contains_key(crate::table::keys::ORDERING_COLUMNS)
}

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

type DataWriterBuilder = RollingFileWriterBuilder<
    ParquetWriterBuilder,
    DefaultLocationGenerator,
    DefaultFileNameGenerator,
>;
type DataWriter =
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
            true => Arc::new(crate::commit::lineage::write_schema(
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
        .map(DataFileStream::of)
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
        let lineage = crate::commit::lineage::tracks(metadata);
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
        .map(DataFileStream::of)
    }

    fn of(plan: DataFilePlan) -> DataFileStream {
        DataFileStream {
            plan,
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
        }
        Ok(())
    }

    /// Closes every file: `(spec id, file)` per file, partition by partition in the order
    /// partitions first appeared, each partition's files in the order their rows came.
    pub(crate) async fn close(self) -> Result<Vec<(i32, DataFile)>> {
        let mut out = Vec::new();
        for (pk, w) in self.writers {
            out.extend(self.plan.finish(&pk, w.close().await?)?);
        }
        Ok(out)
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
        for p in paths {
            let _ = file_io.delete(&p).await;
        }
    }
}

/// The rows of one data file to delete, and where that file lives.
#[derive(Debug, Clone, PartialEq)]
pub struct FileDeletes {
    pub spec_id: i32,
    pub partition: Struct,
    pub positions: Vec<i64>,
}

/// Writes position-delete files: one per data file (file-scoped: `referenced_data_file` and
/// equal `file_path` bounds, so a reader matches it to its data file without opening it, as
/// Iceberg Java has written them by default since 1.5), rows sorted by position. `deletes` is
/// keyed by data file path and holds every position the file's one delete file keeps.
///
/// A v3 table gets deletion vectors instead (the spec forbids new position-delete files there):
/// see [`write_deletion_vectors`].
pub(crate) async fn write_position_deletes(
    file_io: &FileIO,
    metadata: &TableMetadata,
    deletes: &BTreeMap<String, FileDeletes>,
) -> Result<Vec<(i32, DataFile)>> {
    if metadata.format_version() >= FormatVersion::V3 {
        return write_deletion_vectors(file_io, metadata, deletes).await;
    }
    let delete_schema = Arc::new(
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    DELETE_FILE_PATH_ID,
                    "file_path",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::required(
                    DELETE_POS_ID,
                    "pos",
                    Type::Primitive(PrimitiveType::Long),
                )),
            ])
            .build()?,
    );
    let arrow_schema = delete_batch_schema(&delete_schema)?;
    let files: Vec<(&String, &FileDeletes)> = deletes
        .iter()
        .filter(|(_, d)| !d.positions.is_empty())
        .collect();
    // Full paths as statistics so readers can prune delete files by `file_path` bounds. The
    // path is one value per file: a dictionary stores it once, where plain pages repeat it on
    // every row for every reader to decompress and compare (a file's deletes accumulate to tens
    // of thousands of rows between compactions).
    // Positions delta-encoded (they are sorted: a few bits each) and no compression codec: a
    // commit writes one small delete file per data file it touches (on a 200-partition table,
    // hundreds), and the zstd writer's contexts, created per column of every file (and per
    // column by every reader), cost more CPU than compressing these few KB could save.
    let props = base_properties(Encoding::Change)
        .set_compression(Compression::UNCOMPRESSED)
        .set_statistics_truncate_length(None)
        .set_column_dictionary_enabled(ColumnPath::from("file_path"), true)
        .set_column_encoding(
            ColumnPath::from("pos"),
            parquet::basic::Encoding::DELTA_BINARY_PACKED,
        )
        .build();
    // Concurrent uploads (bounded), each file encoded and uploaded by a task of its own: a
    // commit to a partitioned table writes hundreds, and their encoding (a few hundred
    // microseconds each) is then shared by every core the function has.
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let metadata = Arc::new(metadata.clone());
    // Owned: a closure over borrowed items trips rustc's higher-ranked Send check when the
    // caller's future is boxed as `Send`.
    let files: Vec<(String, FileDeletes)> = files
        .into_iter()
        .map(|(p, d)| (p.clone(), d.clone()))
        .collect();
    let written: Vec<Vec<(i32, DataFile)>> = futures::stream::iter(files)
        .map(|(path, d)| {
            let ds = DeleteSchema {
                props: props.clone(),
                schema: delete_schema.clone(),
                arrow: arrow_schema.clone(),
            };
            let (file_io, metadata) = (file_io.clone(), metadata.clone());
            async move {
                tokio::spawn(async move {
                    write_delete_file(
                        &file_io,
                        &metadata,
                        ds,
                        (d.spec_id, &d.partition),
                        &[(&path, &d)],
                    )
                    .await
                })
                .await
                .map_err(|e| Error::Internal(format!("delete file writer: {e}")))?
            }
        })
        .buffered(SMALL_FILE_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(written.into_iter().flatten().collect())
}

/// One position-delete file for every data file in `deletes` (one partition), as v2 writers
/// that scope deletes to a partition write them (Iceberg Java before 1.5, Spark with
/// `write.delete.granularity=partition`): the tests' other engine.
#[cfg(test)]
pub(crate) async fn write_partition_scoped_deletes(
    file_io: &FileIO,
    metadata: &TableMetadata,
    deletes: &BTreeMap<String, FileDeletes>,
) -> Result<Vec<(i32, DataFile)>> {
    let delete_schema = Arc::new(
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    DELETE_FILE_PATH_ID,
                    "file_path",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::required(
                    DELETE_POS_ID,
                    "pos",
                    Type::Primitive(PrimitiveType::Long),
                )),
            ])
            .build()?,
    );
    let ds = DeleteSchema {
        props: base_properties(Encoding::Change)
            .set_statistics_truncate_length(None)
            .build(),
        arrow: delete_batch_schema(&delete_schema)?,
        schema: delete_schema,
    };
    let files: Vec<(&String, &FileDeletes)> = deletes.iter().collect();
    let (spec_id, partition) = (files[0].1.spec_id, files[0].1.partition.clone());
    write_delete_file(file_io, metadata, ds, (spec_id, &partition), &files).await
}

/// Writes one deletion vector per data file of `deletes` (every position its one vector
/// keeps), each in a Puffin file of its own, with its manifest entry (`referenced_data_file`,
/// `content_offset`, `content_size_in_bytes`). One file per vector, not one per commit as
/// Iceberg Java writes them: DuckDB's Iceberg reader up to 1.5.5 reads a vector of a Puffin file
/// that holds several from the wrong place in its cached reads (duckdb-iceberg PR 1182), and
/// drops the wrong rows; a vector alone in its file reads right everywhere. A commit writes as
/// many objects as a v2 commit writes position-delete files.
async fn write_deletion_vectors(
    file_io: &FileIO,
    metadata: &TableMetadata,
    deletes: &BTreeMap<String, FileDeletes>,
) -> Result<Vec<(i32, DataFile)>> {
    let locations = DefaultLocationGenerator::new(metadata)?;
    let files: Vec<(&String, &FileDeletes)> = deletes
        .iter()
        .filter(|(_, d)| !d.positions.is_empty())
        .collect();
    let files = &files;
    let locations = &locations;
    futures::stream::iter(0..files.len())
        .map(|i| async move {
            let (data_file, d) = files[i];
            let (bytes, mut placed) =
                crate::files::dv::puffin(&[(data_file, &d.positions)], CREATED_BY)?;
            let p = placed
                .pop()
                .ok_or_else(|| Error::Internal("a Puffin file without its vector".into()))?;
            let path = locations
                .generate_location(None, &format!("{}-deletes.puffin", uuid::Uuid::new_v4()));
            let size = bytes.len() as u64;
            file_io.new_output(&path)?.write(bytes.into()).await?;
            // As for a position-delete file: the data file's partition in the current types.
            let spec = metadata.partition_spec_by_id(d.spec_id).ok_or_else(|| {
                Error::Table(format!(
                    "partition spec {} not in table metadata",
                    d.spec_id
                ))
            })?;
            let partition_type = spec.partition_type(metadata.current_schema())?;
            let partition = conform_partition(&d.partition, &partition_type)
                .unwrap_or_else(|| d.partition.clone());
            let file = p.entry(path, size, d.spec_id, partition)?;
            Ok::<_, Error>((d.spec_id, file))
        })
        .buffered(SMALL_FILE_CONCURRENCY)
        .try_collect()
        .await
}

/// What our Puffin files say wrote them.
const CREATED_BY: &str = concat!("dms2iceberg ", env!("CARGO_PKG_VERSION"));

/// Rows of a position-delete file written at once.
const DELETE_CHUNK_ROWS: usize = 64 * 1024;

/// Writes the collected `(path, position)` rows and empties the lists.
async fn write_delete_rows(
    w: &mut DataWriter,
    pk: &Option<PartitionKey>,
    arrow_schema: &Arc<arrow_schema::Schema>,
    runs: &mut Vec<(&str, usize)>,
    positions: &mut Vec<i64>,
) -> Result<()> {
    if positions.is_empty() {
        return Ok(());
    }
    // The path as a dictionary, one value per run of rows of the same data file: written as a
    // plain string column it was copied once per row (megabytes for the tens of thousands of
    // positions a full-load file's delete file holds between compactions).
    let mut keys: Vec<i32> = Vec::with_capacity(positions.len());
    let mut values: Vec<&str> = Vec::new();
    for (p, n) in runs.drain(..) {
        if values.last() != Some(&p) {
            values.push(p);
        }
        keys.extend(std::iter::repeat_n(values.len() as i32 - 1, n));
    }
    let path = arrow_array::DictionaryArray::<arrow_array::types::Int32Type>::try_new(
        arrow_array::Int32Array::from(keys),
        Arc::new(StringArray::from(values)),
    )?;
    let batch = RecordBatch::try_new(
        arrow_schema.clone(),
        vec![
            Arc::new(path) as ArrayRef,
            Arc::new(Int64Array::from(std::mem::take(positions))) as ArrayRef,
        ],
    )?;
    w.write(pk, &batch).await?;
    Ok(())
}

/// The delete-file schema, in Iceberg and Arrow form (the path column dictionary-typed, as
/// [`write_delete_rows`] builds it), and the writer properties.
struct DeleteSchema {
    props: WriterProperties,
    schema: Arc<Schema>,
    arrow: Arc<arrow_schema::Schema>,
}

/// The Arrow form of the delete-file schema whose batches [`write_delete_rows`] makes.
fn delete_batch_schema(schema: &Schema) -> Result<Arc<arrow_schema::Schema>> {
    let plain = schema_to_arrow_schema(schema)?;
    let path = arrow_schema::DataType::Dictionary(
        Box::new(arrow_schema::DataType::Int32),
        Box::new(arrow_schema::DataType::Utf8),
    );
    let fields: Vec<arrow_schema::FieldRef> = (plain.fields().iter())
        .zip([path, arrow_schema::DataType::Int64])
        .map(|(f, t)| Arc::new(f.as_ref().clone().with_data_type(t)))
        .collect();
    Ok(Arc::new(arrow_schema::Schema::new(fields)))
}

/// One partition's position-delete file.
async fn write_delete_file(
    file_io: &FileIO,
    metadata: &TableMetadata,
    ds: DeleteSchema,
    (spec_id, partition): (i32, &Struct),
    files: &[(&String, &FileDeletes)],
) -> Result<Vec<(i32, DataFile)>> {
    let DeleteSchema {
        props,
        schema: delete_schema,
        arrow: arrow_schema,
    } = ds;
    let mut out = Vec::new();
    let spec = metadata
        .partition_spec_by_id(spec_id)
        .ok_or_else(|| Error::Table(format!("partition spec {spec_id} not in table metadata")))?;
    // The data file's partition as its manifest entry was read: values of a partition source
    // widened since are made the current type (see `conform_partition`).
    let partition_type = spec.partition_type(metadata.current_schema())?;
    let partition =
        conform_partition(partition, &partition_type).unwrap_or_else(|| partition.clone());
    let pk = (!spec.is_unpartitioned()).then(|| {
        PartitionKey::new(
            spec.as_ref().clone(),
            metadata.current_schema().clone(),
            partition.clone(),
        )
    });
    let mut w = RollingFileWriterBuilder::new(
        ParquetWriterBuilder::new(props.clone(), delete_schema.clone()),
        usize::MAX,
        file_io.clone(),
        DefaultLocationGenerator::new(metadata)?,
        DefaultFileNameGenerator::new(
            format!("{}-deletes", uuid::Uuid::new_v4()),
            None,
            DataFileFormat::Parquet,
        ),
    )
    .build();
    // Written a chunk of rows at a time: a large input can delete millions of rows, and each
    // row repeats its data file's path.
    let mut count = 0u64;
    // (data file, rows) in order: the path column's runs.
    let mut runs: Vec<(&str, usize)> = Vec::new();
    let mut positions: Vec<i64> = Vec::new();
    for (path, d) in files {
        let mut p = d.positions.clone();
        p.sort_unstable();
        p.dedup();
        count += p.len() as u64;
        for chunk in p.chunks(DELETE_CHUNK_ROWS) {
            runs.push((path.as_str(), chunk.len()));
            positions.extend_from_slice(chunk);
            if positions.len() >= DELETE_CHUNK_ROWS {
                write_delete_rows(&mut w, &pk, &arrow_schema, &mut runs, &mut positions).await?;
            }
        }
    }
    write_delete_rows(&mut w, &pk, &arrow_schema, &mut runs, &mut positions).await?;
    for mut b in w.close().await? {
        b.content(DataContentType::PositionDeletes)
            .partition(partition.clone())
            .partition_spec_id(spec_id)
            .record_count(count);
        if files.len() == 1 {
            b.referenced_data_file(Some(files[0].0.clone()));
        }
        out.push((
            spec_id,
            b.build()
                .map_err(|e| Error::Internal(format!("delete file: {e}")))?,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearly_unique_columns_get_no_dictionary() {
        let n = 8192i64;
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("id", arrow_schema::DataType::Int64, false),
            arrow_schema::Field::new("status", arrow_schema::DataType::Utf8, false),
            arrow_schema::Field::new("note", arrow_schema::DataType::Utf8, false),
            arrow_schema::Field::new("bucket", arrow_schema::DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| ["NEW", "PAID", "SHIPPED"][i as usize % 3]),
                )),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("order {i} of a customer, shipped on time")),
                )),
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 100))),
            ],
        )
        .expect("batch");
        assert_eq!(varied_columns(&batch), ["id", "note"]);
    }
}
