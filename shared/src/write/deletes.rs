//! Deletes: the rows a commit replaces or removes, as position-delete files (v2), one per data
//! file, or deletion vectors (v3), one Puffin file per vector.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::io::FileIO;
use iceberg::metadata_columns::{
    RESERVED_COL_NAME_DELETE_FILE_PATH, RESERVED_COL_NAME_DELETE_FILE_POS,
    RESERVED_FIELD_ID_DELETE_FILE_PATH, RESERVED_FIELD_ID_DELETE_FILE_POS,
};
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, FormatVersion, NestedField, PartitionKey,
    PrimitiveType, Schema, Struct, TableMetadata, Type,
};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator, LocationGenerator as _,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::data::DataWriter;
use super::properties::{Encoding, base_properties};
use crate::error::{Error, Result};
use crate::files::deletes::FileDeletes;
use crate::files::parquet::SMALL_FILE_CONCURRENCY;
use crate::types::conform_partition;

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
    let delete_schema = position_delete_schema()?;
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

/// The schema of a position-delete file: the spec's reserved `file_path` and `pos` columns.
fn position_delete_schema() -> Result<Arc<Schema>> {
    Ok(Arc::new(
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    RESERVED_FIELD_ID_DELETE_FILE_PATH,
                    RESERVED_COL_NAME_DELETE_FILE_PATH,
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::required(
                    RESERVED_FIELD_ID_DELETE_FILE_POS,
                    RESERVED_COL_NAME_DELETE_FILE_POS,
                    Type::Primitive(PrimitiveType::Long),
                )),
            ])
            .build()?,
    ))
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
    let delete_schema = position_delete_schema()?;
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
