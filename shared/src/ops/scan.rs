//! scan: read a table as of now, a snapshot, or a point in time, sorted by primary key.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ord::sort::{SortColumn, lexsort_to_indices};
use arrow_schema::{DataType, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use iceberg::TableIdent;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::{FileIO, FileMetadata};
use iceberg::scan::FileScanTask;
use iceberg::spec::{Snapshot, TableMetadata};
use iceberg::table::Table;
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::files::deletes::DeleteSource;
use crate::files::live::Scope;
use crate::files::{Files, Fill};
use crate::table::LoadedTable;

pub struct Scan<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    snapshot_id: Option<i64>,
    as_of_ms: Option<i64>,
    limit: Option<usize>,
}

pub struct ScanResult {
    pub schema: SchemaRef,
    pub batch: RecordBatch,
    pub snapshot_id: Option<i64>,
}

impl<'a> Scan<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Scan {
            catalog,
            ident,
            snapshot_id: None,
            as_of_ms: None,
            limit: None,
        }
    }
    pub fn snapshot_id(mut self, id: Option<i64>) -> Self {
        self.snapshot_id = id;
        self
    }
    /// The table as it was at this time (epoch milliseconds).
    pub fn as_of_ms(mut self, t: Option<i64>) -> Self {
        self.as_of_ms = t;
        self
    }
    pub fn limit(mut self, n: Option<usize>) -> Self {
        self.limit = n;
        self
    }

    pub async fn execute(self) -> Result<ScanResult> {
        let t = LoadedTable::load(self.catalog, &self.ident)
            .await?
            .ok_or_else(|| Error::NoSuchTable {
                table: self.ident.to_string(),
            })?;
        let md = &t.metadata;
        let snapshot_id = match (self.snapshot_id, self.as_of_ms) {
            (Some(id), _) => {
                md.snapshot_by_id(id).ok_or_else(|| Error::NoSuchSnapshot {
                    table: self.ident.to_string(),
                    what: id.to_string(),
                })?;
                Some(id)
            }
            (None, Some(ts)) => Some(
                md.history()
                    .iter()
                    .filter(|l| l.timestamp_ms <= ts)
                    .max_by_key(|l| l.timestamp_ms)
                    .map(|l| l.snapshot_id)
                    .ok_or_else(|| Error::NoSuchSnapshot {
                        table: self.ident.to_string(),
                        what: "at or before that time".into(),
                    })?,
            ),
            (None, None) => md.current_snapshot_id(),
        };
        let schema = match snapshot_id.and_then(|id| md.snapshot_by_id(id)) {
            Some(s) => s.schema(md)?,
            None => md.current_schema().clone(),
        };
        let out_schema: SchemaRef = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
        let batches: Vec<RecordBatch> = match snapshot_id {
            None => vec![],
            Some(id) => {
                let file_io = self.catalog.file_io();
                let table = t.table(file_io)?;
                let tasks: Vec<FileScanTask> = table
                    .scan()
                    .snapshot_id(id)
                    .select_all()
                    .build()?
                    .plan_files()
                    .await?
                    .try_collect()
                    .await?;
                let snapshot = md
                    .snapshot_by_id(id)
                    .ok_or_else(|| Error::Internal(format!("snapshot {id} vanished")))?;
                let deleted = position_deletes(self.catalog.files(), md, snapshot).await?;
                if deleted.any {
                    read_with_deletes(&table, file_io, tasks, &out_schema, &deleted).await?
                } else {
                    read_tasks(&table, file_io, tasks, &out_schema).await?
                }
            }
        };
        let all = arrow_select::concat::concat_batches(&out_schema, &batches)?;
        let key: Vec<usize> = crate::evolve::key_field_ids(&schema)
            .into_iter()
            .filter_map(|id| schema.name_by_field_id(id))
            .filter_map(|n| out_schema.index_of(n).ok())
            .collect();
        let sorted = if key.is_empty() || all.num_rows() == 0 {
            all
        } else {
            let cols: Vec<SortColumn> = key
                .iter()
                .map(|&i| SortColumn {
                    values: all.column(i).clone(),
                    options: None,
                })
                .collect();
            let idx = lexsort_to_indices(&cols, self.limit)?;
            arrow_select::take::take_record_batch(&all, &idx)?
        };
        let batch = match self.limit {
            Some(n) if n < sorted.num_rows() => sorted.slice(0, n),
            _ => sorted,
        };
        Ok(ScanResult {
            schema: out_schema,
            batch,
            snapshot_id,
        })
    }
}

/// Every position deleted in `snapshot`, per data file (deletion vectors and position-delete
/// files alike), applied by [`read_with_deletes`] rather than by iceberg-rust 0.10's reader:
/// - its reader matches deletes to data files by delete file path, which a Puffin file of many
///   vectors shares, and reads every delete file as Parquet;
/// - its `CachingDeleteFileLoader` shares a position-delete file between the data files it
///   reads at once (every delete file of a partition is attached to every data file there),
///   and a task that finds another loading the file waits on a `Notify` it starts listening to
///   only after releasing the lock, so a `notify_waiters()` in between is lost and the scan
///   waits forever (apache/iceberg-rust#2859, fixed after 0.10.1): `verify --read` once hung
///   so, idle, after a test's functions had finished.
async fn position_deletes(
    files: &Files,
    md: &TableMetadata,
    snapshot: &Snapshot,
) -> Result<Deleted> {
    let live = files.live_in(md, snapshot, Scope::All, Fill::Pass).await?;
    let sources: Vec<DeleteSource> = live
        .position_deletes()
        .map(|d| DeleteSource::of(d.file()))
        .collect::<Result<_>>()?;
    if sources.is_empty() {
        return Ok(Deleted::default());
    }
    let refs: Vec<&DeleteSource> = sources.iter().collect();
    let mut deleted: HashMap<String, Vec<i64>> = HashMap::new();
    for (content, _) in files.position_deletes_of(&refs, Fill::Pass).await? {
        for (target, positions) in content.iter() {
            deleted
                .entry(target.clone())
                .or_default()
                .extend_from_slice(positions);
        }
    }
    for p in deleted.values_mut() {
        p.sort_unstable();
        p.dedup();
    }
    Ok(Deleted { any: true, deleted })
}

#[derive(Default)]
struct Deleted {
    /// The snapshot has live position deletes (files or vectors).
    any: bool,
    /// Every position deleted per data file.
    deleted: HashMap<String, Vec<i64>>,
}

/// [`read_tasks`] of a snapshot with position deletes: each file is read whole with its
/// position deletes taken out of the task (equality deletes stay with the reader), and the
/// rows at its deleted positions dropped here, in file order.
async fn read_with_deletes(
    table: &Table,
    file_io: &FileIO,
    tasks: Vec<FileScanTask>,
    schema: &SchemaRef,
    deleted: &Deleted,
) -> Result<Vec<RecordBatch>> {
    let per_file: Vec<Vec<RecordBatch>> =
        futures::stream::iter(tasks.into_iter().map(|mut task| {
            task.deletes
                .retain(|d| d.file_type != iceberg::spec::DataContentType::PositionDeletes);
            let positions = deleted
                .deleted
                .get(&task.data_file_path)
                .map(Vec::as_slice)
                .unwrap_or_default();
            async move {
                let batches = read_tasks(table, file_io, vec![task], schema).await?;
                drop_positions(batches, positions)
            }
        }))
        .buffered(8)
        .try_collect()
        .await?;
    Ok(per_file.into_iter().flatten().collect())
}

/// `batches` (a whole file's rows in order) without the rows at `deleted` (ascending).
fn drop_positions(batches: Vec<RecordBatch>, deleted: &[i64]) -> Result<Vec<RecordBatch>> {
    if deleted.is_empty() {
        return Ok(batches);
    }
    let mut start = 0i64;
    let mut next = 0usize;
    let mut out = Vec::with_capacity(batches.len());
    for b in batches {
        let n = b.num_rows() as i64;
        let keep: arrow_array::BooleanArray = (start..start + n)
            .map(|pos| {
                while next < deleted.len() && deleted[next] < pos {
                    next += 1;
                }
                Some(!(next < deleted.len() && deleted[next] == pos))
            })
            .collect();
        start += n;
        out.push(arrow_select::filter::filter_record_batch(&b, &keep)?);
    }
    Ok(out)
}

/// The rows of `tasks`, deletes applied, each batch in `schema` (the scanned schema as
/// iceberg-rust maps it to Arrow).
///
/// iceberg-rust 0.10 fills a column that a data file predates (added later by schema
/// evolution) only for some Arrow types: for `binary` (LargeBinary), `time`, `uuid` or `fixed`
/// it fails with "unexpected target column type". Such a column is left out of the
/// projection of every file that lacks it (its Parquet schema says so: one footer read per
/// file, and only when the schema has such a column) and filled with NULLs here, which is
/// what the Iceberg spec reads for a column a file does not have.
pub(crate) async fn read_tasks(
    table: &Table,
    file_io: &FileIO,
    tasks: Vec<FileScanTask>,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    task_stream(table, file_io, tasks, schema, None)
        .await?
        .try_collect()
        .await
}

/// [`read_tasks`] as a stream: the tasks' rows in order, `batch_size` rows per batch (default:
/// the Parquet reader's), one row group of a file fetched at a time.
pub(crate) async fn task_stream(
    table: &Table,
    file_io: &FileIO,
    mut tasks: Vec<FileScanTask>,
    schema: &SchemaRef,
    batch_size: Option<usize>,
) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
    // Several tasks sharing a position-delete file can hang iceberg-rust 0.10's reader (see
    // `position_deletes`): one task per reader, or none with position deletes.
    if tasks.len() > 1
        && tasks.iter().any(|t| {
            (t.deletes.iter())
                .any(|d| d.file_type == iceberg::spec::DataContentType::PositionDeletes)
        })
    {
        return Err(Error::Internal(
            "position deletes are applied by dms2iceberg, not handed to iceberg-rust's reader \
             with other tasks"
                .into(),
        ));
    }
    let unfillable: BTreeSet<i32> = schema
        .fields()
        .iter()
        .filter(|f| !fillable(f.data_type()))
        .filter_map(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY)?.parse().ok())
        .collect();
    if !unfillable.is_empty() {
        // By index: a closure over `&FileScanTask` items trips rustc's higher-ranked Send
        // check when this future is boxed as `Send` (compaction's planner is).
        let tasks_ref = &tasks;
        let present: Vec<Option<BTreeSet<i32>>> = futures::stream::iter(0..tasks.len())
            .map(|i| {
                let t = &tasks_ref[i];
                file_field_ids(file_io, &t.data_file_path, t.file_size_in_bytes)
            })
            .buffered(8)
            .try_collect()
            .await?;
        for (task, present) in tasks.iter_mut().zip(present) {
            // A file without field ids is read by name mapping: left to iceberg-rust.
            if let Some(present) = present {
                task.project_field_ids
                    .retain(|id| !unfillable.contains(id) || present.contains(id));
            }
        }
    }
    let stream = futures::stream::iter(tasks.into_iter().map(Ok)).boxed();
    let mut reader = table.reader_builder();
    if let Some(n) = batch_size {
        reader = reader.with_batch_size(n);
    }
    let schema = schema.clone();
    Ok(reader
        .build()
        .read(stream)?
        .stream()
        .map(move |b| {
            let b = b?;
            if b.schema() == schema {
                return Ok(b);
            }
            let columns: Vec<ArrayRef> = schema
                .fields()
                .iter()
                .map(|f| match b.column_by_name(f.name()) {
                    Some(c) => c.clone(),
                    None => arrow_array::new_null_array(f.data_type(), b.num_rows()),
                })
                .collect();
            Ok(RecordBatch::try_new(schema.clone(), columns)?)
        })
        .boxed())
}

/// Arrow types iceberg-rust 0.10 can fill for a column a data file lacks
/// (`arrow::value::create_primitive_array_repeated`).
fn fillable(t: &DataType) -> bool {
    match t {
        DataType::Boolean
        | DataType::Int32
        | DataType::Int64
        | DataType::Date32
        | DataType::Timestamp(_, _)
        | DataType::Float32
        | DataType::Float64
        | DataType::Utf8
        | DataType::Binary
        | DataType::Decimal128(_, _)
        | DataType::Null => true,
        DataType::Struct(fields) => fields.iter().all(|f| fillable(f.data_type())),
        _ => false,
    }
}

/// The top-level field ids of a Parquet data file's schema (`None` if it has none).
async fn file_field_ids(file_io: &FileIO, path: &str, size: u64) -> Result<Option<BTreeSet<i32>>> {
    let input = file_io.new_input(path)?;
    let reader = ArrowFileReader::new(FileMetadata { size }, input.reader().await?);
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let descr = builder.metadata().file_metadata().schema_descr_ptr();
    let ids: BTreeSet<i32> = descr
        .root_schema()
        .get_fields()
        .iter()
        .filter(|f| f.get_basic_info().has_id())
        .map(|f| f.get_basic_info().id())
        .collect();
    Ok((!ids.is_empty()).then_some(ids))
}
