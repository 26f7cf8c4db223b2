//! The streaming rewrite of one compaction group: a k-way merge by key of the group's files,
//! each read in file order as a stream, deleted rows dropped as they pass, written by rolling
//! writers as the merged rows come.
//!
//! Our data files are written sorted by key and carry the table's key sort order id
//! (`crate::write`); a file that does not (another engine's, or one written before the key
//! changed) is read whole and sorted first. A file that claims the order but is found out of
//! order while merging makes the group start over with that file sorted first, so a wrong
//! claim costs time, never correctness.
//!
//! Memory, whatever the group's size: per input file one fetched Parquet row group and one
//! decoded batch of [`BATCH_ROWS`]; up to [`OUT_ROWS`] merged rows before they go to the writer;
//! the writer's open file's buffers; the group's deleted positions. The row map (4 bytes per
//! input row, `crate::commit::RowMap`) goes to a temporary file, not memory. Files sorted
//! first add their decoded size.

use arrow_array::{BooleanArray, RecordBatch};
use arrow_ord::sort::{SortColumn, lexsort_to_indices};
use arrow_row::{OwnedRow, RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataFile, TableMetadata};
use iceberg::table::Table;
use tracing::warn;

use std::sync::Arc;

use arrow_array::Int64Array;
use arrow_array::cast::AsArray as _;
use arrow_array::types::Int64Type;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::FileMetadata;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::arrow::{PARQUET_FIELD_ID_META_KEY, ProjectionMask};

use crate::commit::{RowMap, RowMapBuilder};
use crate::error::{Error, Result};
use crate::ops::scan::task_stream;
use crate::write::data::DataFileStream;
use iceberg::metadata_columns::{
    RESERVED_FIELD_ID_LAST_UPDATED_SEQUENCE_NUMBER as LAST_UPDATED,
    RESERVED_FIELD_ID_ROW_ID as ROW_ID,
};

/// Rows per batch read from an input file.
pub(super) const BATCH_ROWS: usize = 4096;
/// Merged rows handed to the writer at once.
const OUT_ROWS: usize = 8192;

/// One data file of a group.
pub(super) struct Input {
    /// The file, its deletes left out (they are applied here, so each row's position is known).
    pub task: FileScanTask,
    /// Positions of its deleted rows, sorted, without repeats.
    pub deleted: Vec<i64>,
    /// Whether it says it is sorted by the table's key.
    pub sorted: bool,
    /// Row lineage (v3 tables): each row written keeps its `_row_id` and
    /// `_last_updated_sequence_number`.
    pub lineage: Option<Lineage>,
}

/// What a file's rows' lineage is where the file does not store it: `_row_id` is the file's
/// first row id plus the row's position, `_last_updated_sequence_number` the file's data
/// sequence number (`None`: the file has no row ids yet, and its rows get new ones).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Lineage {
    pub first_row_id: Option<i64>,
    pub sequence_number: Option<i64>,
}

/// What a group's rewrite wrote.
pub(super) struct Merged {
    pub written: Vec<(i32, DataFile)>,
    /// Where each input row went; `None` when the rows went to several partitions (the spec
    /// changed since the files were written).
    pub map: Option<RowMap>,
    /// Key indexes written beside the files.
    pub key_indexes: usize,
}

/// The group's live rows, sorted by `key`, written as data files of the table's default spec.
pub(super) async fn merge_group(
    table: &Table,
    file_io: &FileIO,
    md: &TableMetadata,
    mut inputs: Vec<Input>,
    key: &[String],
    target: u64,
    full_load: bool,
) -> Result<Merged> {
    loop {
        let live: u64 = inputs
            .iter()
            .map(|i| i.task.record_count.unwrap_or(0))
            .sum();
        let mut out =
            DataFileStream::rewriting(file_io, md, key, target, full_load, live as usize)?;
        let mut merge = Merge::new(out.arrow_schema().clone(), key, &inputs)?;
        match merge.run(table, file_io, &inputs, &mut out).await {
            Ok(None) => return merge.finish(out).await,
            Ok(Some(unsorted)) => {
                out.abort(file_io).await;
                let input = &mut inputs[unsorted];
                warn!(file = %input.task.data_file_path, "data file says it is sorted by the key but is not: sorting it in memory");
                input.sorted = false;
            }
            Err(e) => {
                out.abort(file_io).await;
                return Err(e);
            }
        }
    }
}

/// Rows of one input, live rows only, with their positions in the file.
struct Piece {
    rows: RecordBatch,
    positions: Vec<u64>,
    /// Rows of the file this piece covers, deleted ones included.
    read: u64,
}

/// Where an input is in the merge.
struct Cursor {
    source: BoxStream<'static, Result<Piece>>,
    rows: RecordBatch,
    positions: Vec<u64>,
    keys: Option<Rows>,
    row: usize,
    /// Index of `rows` among the batches the pending output refers to.
    slot: usize,
    /// The last key of the previous batch (checks the file's order across batches).
    last: Option<OwnedRow>,
    read: u64,
}

enum Advanced {
    Ready,
    Done,
    Unsorted,
}

struct Merge {
    schema: SchemaRef,
    converter: Option<RowConverter>,
    key_idx: Vec<usize>,
    /// Per input, per old position: the row's number in the merged output.
    rows: RowMapBuilder,
}

impl Merge {
    fn new(schema: SchemaRef, key: &[String], inputs: &[Input]) -> Result<Merge> {
        let key_idx = key
            .iter()
            .map(|k| schema.index_of(k))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let converter = if key_idx.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                key_idx
                    .iter()
                    .map(|i| SortField::new(schema.field(*i).data_type().clone()))
                    .collect(),
            )?)
        };
        let rows = RowMapBuilder::new(
            &inputs
                .iter()
                .map(|i| {
                    (
                        i.task.data_file_path.clone(),
                        i.task.record_count.unwrap_or(0),
                        i.sorted,
                    )
                })
                .collect::<Vec<_>>(),
        )?;
        Ok(Merge {
            schema,
            converter,
            key_idx,
            rows,
        })
    }

    /// Merges every input into `out`; `Some(i)`: input `i` turned out not sorted.
    async fn run(
        &mut self,
        table: &Table,
        file_io: &FileIO,
        inputs: &[Input],
        out: &mut DataFileStream,
    ) -> Result<Option<usize>> {
        // Every input's first batch is fetched at once: for small files (one row group) that is
        // all their reading, concurrent instead of one object after another.
        // By index: a closure over borrowed items trips rustc's higher-ranked Send check (the
        // commit loop's planners are boxed as `Send`).
        let opened: Vec<Cursor> = futures::stream::iter(0..inputs.len())
            .map(|i| self.open(table, file_io, &inputs[i]))
            .buffered(16)
            .try_collect()
            .await?;
        let mut cursors = opened;
        let mut heap: Vec<usize> = Vec::new();
        let mut pending: Vec<RecordBatch> = Vec::new();
        for (i, c) in cursors.iter_mut().enumerate() {
            match self.advance(c, inputs[i].sorted).await? {
                Advanced::Ready => {
                    c.slot = pending.len();
                    pending.push(c.rows.clone());
                    heap.push(i);
                }
                Advanced::Done => self.check_count(c, &inputs[i])?,
                Advanced::Unsorted => return Ok(Some(i)),
            }
        }
        heapify(&mut heap, &cursors);
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(OUT_ROWS);
        let mut written = 0u64;
        while let Some(&top) = heap.first() {
            let c = &mut cursors[top];
            picks.push((c.slot, c.row));
            let pos = c.positions[c.row];
            if written >= RowMap::MAX_ROWS {
                return Err(Error::Config(format!(
                    "a compaction group of more than {} rows: lower --max-group-bytes",
                    RowMap::MAX_ROWS
                )));
            }
            self.rows.set(top, pos, written as u32)?;
            written += 1;
            c.row += 1;
            if c.row == c.rows.num_rows() {
                match self.advance(c, inputs[top].sorted).await? {
                    Advanced::Ready => {
                        c.slot = pending.len();
                        pending.push(c.rows.clone());
                    }
                    Advanced::Done => {
                        self.check_count(c, &inputs[top])?;
                        heap.swap_remove(0);
                    }
                    Advanced::Unsorted => return Ok(Some(top)),
                }
            }
            sift_down(&mut heap, 0, &cursors);
            if picks.len() >= OUT_ROWS || pending.len() >= cursors.len() + 64 {
                self.flush(&mut picks, &mut pending, &heap, &mut cursors, out)
                    .await?;
            }
        }
        self.flush(&mut picks, &mut pending, &heap, &mut cursors, out)
            .await?;
        Ok(None)
    }

    /// A cursor on `input`, before its first batch.
    async fn open(&self, table: &Table, file_io: &FileIO, input: &Input) -> Result<Cursor> {
        let source = if input.sorted {
            self.stream(table, file_io, input).await?
        } else {
            self.sorted_whole(table, file_io, input).await?
        };
        Ok(Cursor {
            source,
            rows: RecordBatch::new_empty(self.schema.clone()),
            positions: Vec::new(),
            keys: None,
            row: 0,
            slot: 0,
            last: None,
            read: 0,
        })
    }

    /// The file in its own order, deleted rows dropped; on a v3 table with each row's lineage
    /// in the last two columns.
    async fn stream(
        &self,
        table: &Table,
        file_io: &FileIO,
        input: &Input,
    ) -> Result<BoxStream<'static, Result<Piece>>> {
        let rows = task_stream(
            table,
            file_io,
            vec![input.task.clone()],
            &self.schema,
            Some(BATCH_ROWS),
        )
        .await?;
        let lineage = match input.lineage {
            Some(of) => Some(LineageSource {
                of,
                physical: stored_lineage(file_io, &input.task).await?,
                ids: Vec::new(),
                sequence_numbers: Vec::new(),
                at: 0,
                path: input.task.data_file_path.clone(),
            }),
            None => None,
        };
        let deleted = std::sync::Arc::new(input.deleted.clone());
        let state = (rows, 0u64, 0usize, lineage);
        Ok(futures::stream::try_unfold(
            state,
            move |(mut rows, offset, mut next_deleted, mut lineage)| {
                let deleted = deleted.clone();
                async move {
                    let Some(batch) = rows.next().await.transpose()? else {
                        return Ok(None);
                    };
                    let n = batch.num_rows() as u64;
                    let batch = match &mut lineage {
                        Some(l) => l.fill(batch, offset).await?,
                        None => batch,
                    };
                    let mut keep = Vec::with_capacity(n as usize);
                    let mut positions = Vec::with_capacity(n as usize);
                    for pos in offset..offset + n {
                        while deleted.get(next_deleted).is_some_and(|d| (*d as u64) < pos) {
                            next_deleted += 1;
                        }
                        let gone = deleted.get(next_deleted).is_some_and(|d| *d as u64 == pos);
                        keep.push(!gone);
                        if !gone {
                            positions.push(pos);
                        }
                    }
                    let rows_kept = if positions.len() as u64 == n {
                        batch
                    } else {
                        arrow_select::filter::filter_record_batch(
                            &batch,
                            &BooleanArray::from(keep),
                        )?
                    };
                    let piece = Piece {
                        rows: rows_kept,
                        positions,
                        read: n,
                    };
                    Ok(Some((piece, (rows, offset + n, next_deleted, lineage))))
                }
            },
        )
        .boxed())
    }

    /// The whole file read, deleted rows dropped, sorted by key, in pieces of [`BATCH_ROWS`].
    async fn sorted_whole(
        &self,
        table: &Table,
        file_io: &FileIO,
        input: &Input,
    ) -> Result<BoxStream<'static, Result<Piece>>> {
        let pieces: Vec<Piece> = self
            .stream(table, file_io, input)
            .await?
            .try_collect()
            .await?;
        let read: u64 = pieces.iter().map(|p| p.read).sum();
        let batches: Vec<&RecordBatch> = pieces.iter().map(|p| &p.rows).collect();
        let all = arrow_select::concat::concat_batches(&self.schema, batches)?;
        let positions: Vec<u64> = pieces.iter().flat_map(|p| p.positions.clone()).collect();
        drop(pieces);
        let (all, positions) = if self.key_idx.is_empty() || all.num_rows() == 0 {
            (all, positions)
        } else {
            let cols: Vec<SortColumn> = self
                .key_idx
                .iter()
                .map(|i| SortColumn {
                    values: all.column(*i).clone(),
                    options: None,
                })
                .collect();
            let idx = lexsort_to_indices(&cols, None)?;
            let positions = idx
                .values()
                .iter()
                .map(|i| positions[*i as usize])
                .collect();
            (
                arrow_select::take::take_record_batch(&all, &idx)?,
                positions,
            )
        };
        let mut out = Vec::new();
        let mut start = 0;
        while start < all.num_rows() || out.is_empty() {
            let len = BATCH_ROWS.min(all.num_rows() - start);
            out.push(Ok(Piece {
                rows: all.slice(start, len),
                positions: positions[start..start + len].to_vec(),
                // The rows read all belong to the first piece.
                read: if out.is_empty() { read } else { 0 },
            }));
            start += len;
        }
        Ok(futures::stream::iter(out).boxed())
    }

    /// Moves `c` to its next batch holding live rows; checks the file's order when `sorted`
    /// (the file claims it; a file we sorted ourselves needs no check).
    async fn advance(&self, c: &mut Cursor, sorted: bool) -> Result<Advanced> {
        if let (Some(keys), true) = (&c.keys, sorted)
            && c.rows.num_rows() > 0
        {
            c.last = Some(keys.row(c.rows.num_rows() - 1).owned());
        }
        loop {
            let Some(piece) = c.source.next().await.transpose()? else {
                c.rows = RecordBatch::new_empty(self.schema.clone());
                c.keys = None;
                return Ok(Advanced::Done);
            };
            c.read += piece.read;
            if piece.rows.num_rows() == 0 {
                continue;
            }
            let keys = match &self.converter {
                None => None,
                Some(conv) => {
                    let cols: Vec<_> = self
                        .key_idx
                        .iter()
                        .map(|i| piece.rows.column(*i).clone())
                        .collect();
                    Some(conv.convert_columns(&cols)?)
                }
            };
            if sorted
                && let Some(k) = &keys
                && !in_order(k, c.last.as_ref())
            {
                return Ok(Advanced::Unsorted);
            }
            c.rows = piece.rows;
            c.positions = piece.positions;
            c.keys = keys;
            c.row = 0;
            return Ok(Advanced::Ready);
        }
    }

    /// An input that ended must have had the rows its manifest entry says.
    fn check_count(&self, c: &Cursor, input: &Input) -> Result<()> {
        match input.task.record_count {
            Some(n) if n != c.read => Err(Error::Table(format!(
                "data file {}: read {} rows, its manifest entry says {n}",
                input.task.data_file_path, c.read
            ))),
            _ => Ok(()),
        }
    }

    /// Writes the rows picked so far; afterwards only the batches cursors are on stay.
    async fn flush(
        &self,
        picks: &mut Vec<(usize, usize)>,
        pending: &mut Vec<RecordBatch>,
        heap: &[usize],
        cursors: &mut [Cursor],
        out: &mut DataFileStream,
    ) -> Result<()> {
        if !picks.is_empty() {
            let refs: Vec<&RecordBatch> = pending.iter().collect();
            let batch = arrow_select::interleave::interleave_record_batch(&refs, picks)?;
            out.write(&batch).await?;
            picks.clear();
        }
        pending.clear();
        for &i in heap {
            cursors[i].slot = pending.len();
            pending.push(cursors[i].rows.clone());
        }
        Ok(())
    }

    /// The files written, and the row map when the rows went to one partition (in merge order).
    async fn finish(self, out: DataFileStream) -> Result<Merged> {
        let one_partition = out.partitions() <= 1;
        let (written, key_indexes) = out.close_indexed().await?;
        let map = if one_partition {
            let files = written
                .iter()
                .map(|(spec, f)| {
                    (
                        f.file_path().to_string(),
                        *spec,
                        f.partition().clone(),
                        f.record_count(),
                    )
                })
                .collect();
            Some(self.rows.finish(files)?)
        } else {
            None
        };
        Ok(Merged {
            written,
            map,
            key_indexes,
        })
    }
}

/// A file's rows' lineage as they pass: what the file stores (`_row_id` and
/// `_last_updated_sequence_number`, read beside its rows in the same order), else what its
/// manifest entry gives (see [`Lineage`]).
struct LineageSource {
    of: Lineage,
    physical: Option<BoxStream<'static, Result<RecordBatch>>>,
    ids: Vec<Option<i64>>,
    sequence_numbers: Vec<Option<i64>>,
    /// Values of `ids` and `sequence_numbers` already used.
    at: usize,
    path: String,
}

impl LineageSource {
    /// `batch` (rows from position `offset` on) with its last two columns filled.
    async fn fill(&mut self, batch: RecordBatch, offset: u64) -> Result<RecordBatch> {
        let n = batch.num_rows();
        self.stored(n).await?;
        let stored = self.at..self.at + n;
        let base = self.of.first_row_id;
        let ids: Int64Array = (self.ids[stored.clone()].iter().enumerate())
            .map(|(i, id)| id.or_else(|| base.map(|b| b + offset as i64 + i as i64)))
            .collect();
        let seqs: Int64Array = (self.sequence_numbers[stored].iter())
            .map(|s| s.or(self.of.sequence_number))
            .collect();
        self.at += n;
        let mut columns = batch.columns().to_vec();
        let w = columns.len();
        columns[w - 2] = Arc::new(ids);
        columns[w - 1] = Arc::new(seqs);
        Ok(RecordBatch::try_new(batch.schema(), columns)?)
    }

    /// Makes `n` stored values (or NULLs, for a file that stores none) available from `at`.
    async fn stored(&mut self, n: usize) -> Result<()> {
        if self.at > 0 {
            self.ids.drain(..self.at);
            self.sequence_numbers.drain(..self.at);
            self.at = 0;
        }
        let Some(physical) = &mut self.physical else {
            self.ids.resize(n, None);
            self.sequence_numbers.resize(n, None);
            return Ok(());
        };
        while self.ids.len() < n {
            let b = physical.next().await.transpose()?.ok_or_else(|| {
                Error::Table(format!(
                    "data file {}: its lineage columns end before its rows",
                    self.path
                ))
            })?;
            for (id, out) in [
                (ROW_ID, &mut self.ids),
                (LAST_UPDATED, &mut self.sequence_numbers),
            ] {
                match column_by_field_id(&b, id)? {
                    Some(c) => out.extend(c.iter()),
                    None => out.extend(std::iter::repeat_n(None, b.num_rows())),
                }
            }
        }
        Ok(())
    }
}

/// The column of `b` with Parquet field id `id`, as 64-bit integers.
fn column_by_field_id(b: &RecordBatch, id: i32) -> Result<Option<Int64Array>> {
    let Some(i) = b.schema().fields().iter().position(|f| {
        f.metadata()
            .get(PARQUET_FIELD_ID_META_KEY)
            .map(String::as_str)
            == Some(&id.to_string())
    }) else {
        return Ok(None);
    };
    let c = arrow_cast::cast(b.column(i), &arrow_schema::DataType::Int64)?;
    Ok(Some(c.as_primitive::<Int64Type>().clone()))
}

/// The `_row_id` and `_last_updated_sequence_number` columns a data file stores (engines store
/// them for rows they moved or modified; iceberg-rust's reader never reads them), in file
/// order; `None` if it stores neither.
async fn stored_lineage(
    file_io: &FileIO,
    task: &FileScanTask,
) -> Result<Option<BoxStream<'static, Result<RecordBatch>>>> {
    let input = file_io.new_input(&task.data_file_path)?;
    let reader = ArrowFileReader::new(
        FileMetadata {
            size: task.file_size_in_bytes,
        },
        input.reader().await?,
    );
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let roots: Vec<usize> = (builder.parquet_schema().root_schema().get_fields().iter())
        .enumerate()
        .filter(|(_, f)| {
            let info = f.get_basic_info();
            info.has_id() && [ROW_ID, LAST_UPDATED].contains(&info.id())
        })
        .map(|(i, _)| i)
        .collect();
    if roots.is_empty() {
        return Ok(None);
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let stream = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()?;
    Ok(Some(stream.map(|b| Ok(b?)).boxed()))
}

/// Whether `keys` are in order, after `last` (the previous batch's last key).
fn in_order(keys: &Rows, last: Option<&OwnedRow>) -> bool {
    if let Some(last) = last
        && keys.num_rows() > 0
        && keys.row(0) < last.row()
    {
        return false;
    }
    (1..keys.num_rows()).all(|i| keys.row(i - 1) <= keys.row(i))
}

/// Whether cursor `a`'s row comes before cursor `b`'s: by key, then by input (ties keep input
/// order, which is also the whole order of a table without a key).
fn before(cursors: &[Cursor], a: usize, b: usize) -> bool {
    let (ca, cb) = (&cursors[a], &cursors[b]);
    match (&ca.keys, &cb.keys) {
        (Some(ka), Some(kb)) => match ka.row(ca.row).cmp(&kb.row(cb.row)) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => a < b,
        },
        _ => a < b,
    }
}

fn sift_down(heap: &mut [usize], mut i: usize, cursors: &[Cursor]) {
    loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut least = i;
        if l < heap.len() && before(cursors, heap[l], heap[least]) {
            least = l;
        }
        if r < heap.len() && before(cursors, heap[r], heap[least]) {
            least = r;
        }
        if least == i {
            return;
        }
        heap.swap(i, least);
        i = least;
    }
}

fn heapify(heap: &mut [usize], cursors: &[Cursor]) {
    for i in (0..heap.len() / 2).rev() {
        sift_down(heap, i, cursors);
    }
}
