//! The streamed commit: an input of any size applied in bounded memory.
//!
//! A full load (every LOAD file) and a change input larger than `large_input_bytes` are never
//! held whole. One thread reads the files (CSV parsed, Parquet decoded) into batches in the
//! table's types, each row tagged with its `Op` and its place in the input (a sequence number);
//! another sorts them by key, settles each key (its last change wins, as in [`crate::dedupe`]),
//! looks the settled keys up in the table a chunk at a time and writes the upserts into data
//! files as they come.
//!
//! Sorting costs nothing when the input is in key order already (a full load of a table
//! unloaded in key order: MySQL, SQL Server): the rows go straight through. The first row out
//! of order starts the input over through [`crate::spill`], which sorts runs of a quarter of
//! `large_input_bytes` (32 MiB by default; one filling while the one before is sorted and
//! spilled on a thread of its own) to the spool folder, each in two parts split at the first
//! run's median key, then merges the two key ranges apart, each settled, looked up and written
//! on threads of its own (both cores busy; two data files with disjoint key bounds). Restarting
//! (rather than merging what was already written) keeps one path for every row; it costs the
//! part read before the disorder, which for a change file is its first batch.
//!
//! Memory: the sort budget, one batch per spilled run while merging, a lookup chunk of
//! [`LOOKUP_CHUNK`] settled keys, and the open row group of each partition's data file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt8Type};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt8Array, UInt64Array};
use arrow_row::{OwnedRow, RowConverter, Rows, SortField};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::{DataFile, PrimitiveType, TableMetadata};

use super::FileInput;
use super::read::{align, reject_null_keys};
use crate::config::{BadRows, TableConfig};
use crate::error::{Error, InputError, Rejected, Result};
use crate::files::Files;
use crate::files::deletes::FileDeletes;
use crate::locate::FileKind;
use crate::lookup::{LookupStats, StaleCheck, locate_rows};
use crate::read::{ChangeBatch, Observe, Observed, Op, SourceFile};
use crate::spill::{SortSpec, Sorter};
use crate::write::data::DataFileStream;

/// Settled keys looked up in the table at once.
pub(crate) const LOOKUP_CHUNK: usize = 128 * 1024;
/// Batches read ahead of the sorter.
const READ_AHEAD: usize = 16;

/// Names of the two columns rows carry besides the table's.
const OP_COLUMN: &str = "__dms2iceberg_op";
const SEQ_COLUMN: &str = "__dms2iceberg_seq";

/// What the streamed pipeline reads and where it writes.
pub(super) struct StreamSpec {
    /// The table's settings, with its key as `primary_key`.
    pub(super) cfg: TableConfig,
    /// The inputs, in DMS order, fetched.
    pub(super) files: Vec<FileInput>,
    /// The table's columns before this input (names for headerless files).
    pub(super) table_columns: Option<Vec<String>>,
    /// Per file, per column: the type it is read as.
    pub(super) types: Vec<Vec<PrimitiveType>>,
    pub(super) key: Vec<String>,
    pub(super) key_types: Vec<PrimitiveType>,
    /// The table's schema (after this commit) as plain nullable Arrow fields.
    pub(super) processing: SchemaRef,
    pub(super) order_columns: Vec<String>,
    /// Every input is a full-load file (commits never mix the two kinds).
    pub(super) from_load: bool,
    /// Where sorted runs are spilled.
    pub(super) spool: PathBuf,
    /// Bytes of rows sorted in memory before a run is spilled.
    pub(super) sort_budget: usize,
    /// Per file: columns whose type was guessed from the file's first records (observed while
    /// read).
    pub(super) inferred: Vec<Vec<usize>>,
}

/// Types a whole-file inference gives, per (file, column), where the guess from the first
/// records was wrong.
pub(super) type Retype = BTreeMap<(usize, String), PrimitiveType>;

/// How [`run`] ended.
pub(super) enum Ran {
    Done(Box<Streamed>),
    /// A file does not fit the types guessed from its first records: settle the schema again
    /// with these types and run again.
    Retype(Retype),
}

/// Where the streamed pipeline looks keys up and writes files.
pub(super) struct Target<'a> {
    pub(super) files: &'a Files,
    /// The metadata files are written against (the table after this commit's schema change).
    pub(super) planned: Arc<TableMetadata>,
    /// The table as planned against, when it has rows to look up.
    pub(super) base: Option<Arc<TableMetadata>>,
    pub(super) target_file_size: u64,
}

/// What the streamed pipeline did.
#[derive(Debug, Default)]
pub(super) struct Streamed {
    pub(super) data: Vec<(i32, DataFile)>,
    pub(super) deletes: BTreeMap<String, FileDeletes>,
    pub(super) counts: Counts,
    pub(super) lookup: LookupStats,
    pub(super) max_seq: Option<String>,
    pub(super) rejected: Vec<Rejected>,
    /// Bytes of sorted runs spilled to the spool folder.
    pub(super) spilled_bytes: u64,
    /// Times the input was started over (it was not in key order).
    pub(super) restarts: u32,
    /// Rows out of key order that went to data files of their own.
    pub(super) set_aside: usize,
}

/// Rows by outcome.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub(super) rows_read: usize,
    pub(super) inserted: usize,
    pub(super) updated: usize,
    pub(super) deleted: usize,
    pub(super) deletes_of_absent_keys: usize,
    pub(super) stale: usize,
    /// Rows of a key that a later row of the same key in this input replaced.
    pub(super) duplicates: usize,
}

/// Applies the input: reads, sorts, settles, looks up and writes. Blocking (run it on a
/// blocking thread); async I/O goes through `handle`.
pub(super) fn run(
    spec: &StreamSpec,
    target: &Target<'_>,
    handle: &tokio::runtime::Handle,
) -> Result<Ran> {
    let mut restarts = 0;
    let mut sort = false;
    loop {
        match attempt(spec, target, handle, sort)? {
            Attempt::Done(mut s) => {
                s.restarts = restarts;
                return Ok(Ran::Done(s));
            }
            Attempt::OutOfOrder => {
                restarts += 1;
                sort = true;
            }
            Attempt::Retype(r) => return Ok(Ran::Retype(r)),
        }
    }
}

enum Attempt {
    Done(Box<Streamed>),
    /// Rows came out of key order while they went straight through: start over, sorting.
    OutOfOrder,
    Retype(Retype),
}

fn attempt(
    spec: &StreamSpec,
    target: &Target<'_>,
    handle: &tokio::runtime::Handle,
    sort: bool,
) -> Result<Attempt> {
    let schema = row_schema(&spec.processing);
    let (tx, rx) = sync_channel::<Result<RecordBatch>>(READ_AHEAD);
    let (wtx, wrx) = sync_channel::<ToWriter>(WRITE_AHEAD);
    let mut output = Output::new(spec, target, &schema, wtx)?;
    let (consumed, read, written) = std::thread::scope(|s| {
        // Three threads: this one sorts, settles and looks up; one reads, one encodes.
        let reader = s.spawn(|| read_rows(spec, &schema, tx));
        let writer = s.spawn(|| write_rows(spec, target, wrx, handle));
        // A consumer that stops early drops the receiver: the reader stops at its next batch.
        // Should it panic, the guard drops the writer's sender as the panic unwinds, so that
        // the writer stops (deleting its files) and the scope can join it.
        let consumed = {
            let guard = StopWriter(&mut output);
            consume(spec, handle, &schema, rx, sort, guard.0).and_then(|flow| match flow {
                Flow::Done => handle.block_on(guard.0.finish()).map(|()| flow),
                Flow::OutOfOrder => Ok(flow),
            })
        };
        // Without `Finish`, the writer deletes what it wrote (the guard dropped its sender).
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the reader thread panicked".into())));
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the writer thread panicked".into())));
        // The upper key range's files (a split sort) go with the writer's, kept or deleted
        // together.
        let range_data = std::mem::take(&mut output.range_data);
        let written = match written {
            Ok(mut files) => {
                files.extend(range_data);
                Ok(files)
            }
            Err(e) => {
                abandon(Ok(range_data), target, handle);
                Err(e)
            }
        };
        (consumed, read, written)
    });
    // The reader's error is the one to report (the consumer only saw the input stop).
    match (consumed, read) {
        (
            _,
            Ok(ReadSummary {
                retype: Some(r), ..
            }),
        ) => {
            abandon(written, target, handle);
            Ok(Attempt::Retype(r))
        }
        (_, Err(e)) | (Err(e), Ok(_)) => {
            abandon(written, target, handle);
            Err(e)
        }
        (Ok(Flow::OutOfOrder), Ok(_)) => {
            abandon(written, target, handle);
            Ok(Attempt::OutOfOrder)
        }
        (Ok(Flow::Done), Ok(read)) => {
            let data = written?;
            let mut counts = output.counts;
            counts.duplicates = output.duplicates;
            counts.rows_read = read.rows;
            Ok(Attempt::Done(Box::new(Streamed {
                data,
                deletes: output.deletes,
                counts,
                lookup: output.lookup,
                max_seq: read.max_seq,
                rejected: read.rejected,
                spilled_bytes: output.spilled_bytes,
                restarts: 0,
                set_aside: output.set_aside,
            })))
        }
    }
}

/// Drops an [`Output`]'s sender to its writer when it goes out of scope, unwinding included.
struct StopWriter<'o, 'a>(&'o mut Output<'a>);

impl Drop for StopWriter<'_, '_> {
    fn drop(&mut self) {
        self.0.writer = None;
    }
}

/// Deletes the files of an attempt that ended otherwise than its writer knew (the writer
/// deletes its own files when the rows stop without `Finish`).
fn abandon(
    written: Result<Vec<(i32, DataFile)>>,
    target: &Target<'_>,
    handle: &tokio::runtime::Handle,
) {
    if let Ok(files) = written {
        handle.block_on(async {
            for (_, f) in files {
                let _ = target.files.io().delete(f.file_path()).await;
            }
        });
    }
}

/// What the writer thread is told.
enum ToWriter {
    Rows(RecordBatch),
    /// Close the files written so far: the rows that follow go to new ones.
    NewFiles,
    /// The rows are complete: close the files.
    Finish,
}

/// Batches of upserts queued for the writer.
const WRITE_AHEAD: usize = 16;

/// Encodes the upserts into data files. Rows that stop without `Finish` (an error, or an
/// input started over) leave nothing behind.
fn write_rows(
    spec: &StreamSpec,
    target: &Target<'_>,
    rx: Receiver<ToWriter>,
    handle: &tokio::runtime::Handle,
) -> Result<Vec<(i32, DataFile)>> {
    let file_io = target.files.io();
    // Opened at the first rows, which tell which text columns get no dictionary.
    let mut sink: Option<DataFileStream> = None;
    // Files of sinks already closed (`NewFiles`): deleted if the rows stop without `Finish`.
    let mut closed: Vec<(i32, DataFile)> = Vec::new();
    let forget = |closed: &[(i32, DataFile)]| {
        handle.block_on(async {
            for (_, f) in closed {
                let _ = file_io.delete(f.file_path()).await;
            }
        })
    };
    for msg in rx {
        match msg {
            ToWriter::Rows(b) => {
                let written = match &mut sink {
                    Some(s) => handle.block_on(s.write(&b)),
                    None => DataFileStream::new(
                        file_io,
                        &target.planned,
                        &spec.key,
                        target.target_file_size,
                        spec.from_load,
                        usize::MAX,
                        crate::write::properties::varied_columns(&b),
                    )
                    .and_then(|mut s| {
                        let w = handle.block_on(s.write(&b));
                        sink = Some(s);
                        w
                    }),
                };
                if let Err(e) = written {
                    if let Some(s) = sink.take() {
                        handle.block_on(s.abort(file_io));
                    }
                    forget(&closed);
                    return Err(e);
                }
            }
            ToWriter::NewFiles => {
                if let Some(s) = sink.take() {
                    match handle.block_on(s.close()) {
                        Ok(files) => closed.extend(files),
                        Err(e) => {
                            forget(&closed);
                            return Err(e);
                        }
                    }
                }
            }
            ToWriter::Finish => {
                if let Some(s) = sink {
                    match handle.block_on(s.close()) {
                        Ok(files) => closed.extend(files),
                        Err(e) => {
                            forget(&closed);
                            return Err(e);
                        }
                    }
                }
                return Ok(closed);
            }
        }
    }
    if let Some(s) = sink {
        handle.block_on(s.abort(file_io));
    }
    forget(&closed);
    Err(Error::Internal("data files abandoned".into()))
}

/// The schema rows flow in: the table's columns, then `Op` and the sequence number.
fn row_schema(processing: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = processing
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(OP_COLUMN, DataType::UInt8, false));
    fields.push(Field::new(SEQ_COLUMN, DataType::UInt64, false));
    Arc::new(ArrowSchema::new(fields))
}

/// What the reader saw besides the rows.
struct ReadSummary {
    rows: usize,
    max_seq: Option<String>,
    rejected: Vec<Rejected>,
    /// A file did not fit the types guessed from its first records: it stopped there.
    retype: Option<Retype>,
}

/// Reads every input in DMS order and sends its rows. Stops quietly when the receiver is gone.
fn read_rows(
    spec: &StreamSpec,
    schema: &SchemaRef,
    tx: SyncSender<Result<RecordBatch>>,
) -> Result<ReadSummary> {
    let mut summary = ReadSummary {
        rows: 0,
        max_seq: None,
        rejected: Vec::new(),
        retype: None,
    };
    let stop = |tx: &SyncSender<Result<RecordBatch>>| {
        // Stops the consumer; what happened is returned from here.
        let _ = tx.send(Err(Error::Internal("the input could not be read".into())));
    };
    let mut seq = 0u64;
    for (i, f) in spec.files.iter().enumerate() {
        let data = f
            .data
            .clone()
            .ok_or_else(|| Error::Internal(format!("{} was not fetched", f.object.key)))?;
        let mut src = SourceFile::open(&f.object, data, &spec.cfg, spec.table_columns.as_deref())?;
        let observed = (!spec.inferred[i].is_empty()).then(|| {
            let o = Observe {
                columns: spec.inferred[i].clone(),
                seen: Arc::new(Mutex::new(Observed::default())),
            };
            src.observe(o.clone());
            o
        });
        let names: Vec<String> = src.columns().iter().map(|c| c.name.clone()).collect();
        for b in src.read(spec.types[i].clone(), spec.key_types.clone())? {
            let rows = b.and_then(|b| {
                let b = checked(spec, f, b, &mut summary)?;
                summary.rows += b.data.num_rows();
                tagged(spec, schema, b, &mut seq)
            });
            match rows {
                Ok(rows) => {
                    if tx.send(Ok(rows)).is_err() {
                        return Ok(summary);
                    }
                }
                Err(e) => {
                    stop(&tx);
                    return Err(e);
                }
            }
        }
        if let Some(o) = observed
            && let Some(r) = retype(spec, i, &names, &o)?
        {
            stop(&tx);
            summary.retype = Some(r);
            return Ok(summary);
        }
    }
    Ok(summary)
}

/// Whether file `i` fits the types guessed from its first records; if not, the types of the
/// whole file (observed, or when the read stopped at a value that did not fit, inferred again
/// from the whole file).
fn retype(spec: &StreamSpec, i: usize, names: &[String], o: &Observe) -> Result<Option<Retype>> {
    let (misfit, observed): (bool, Vec<PrimitiveType>) = {
        let seen = o
            .seen
            .lock()
            .map_err(|_| Error::Internal("observed types poisoned".into()))?;
        (
            seen.misfit,
            seen.guesses.iter().map(|g| g.result()).collect(),
        )
    };
    let columns: Vec<String> = o.columns.iter().map(|&c| names[c].clone()).collect();
    let whole = if misfit {
        let f = &spec.files[i];
        let data = f
            .data
            .clone()
            .ok_or_else(|| Error::Internal(format!("{} was not fetched", f.object.key)))?;
        SourceFile::open(&f.object, data, &spec.cfg, spec.table_columns.as_deref())?
            .infer_types(&columns)?
    } else {
        observed
    };
    let guessed: Vec<&PrimitiveType> = o.columns.iter().map(|&c| &spec.types[i][c]).collect();
    if !misfit && whole.iter().eq(guessed.iter().copied()) {
        return Ok(None);
    }
    Ok(Some(
        columns
            .into_iter()
            .zip(whole)
            .map(|(c, t)| ((i, c), t))
            .collect(),
    ))
}

/// A batch aligned to the table, its bad rows dealt with as the table's policy says.
fn checked(
    spec: &StreamSpec,
    f: &FileInput,
    b: ChangeBatch,
    summary: &mut ReadSummary,
) -> Result<ChangeBatch> {
    let mut b = align(b, &spec.processing)?;
    summary.rejected.append(&mut b.rejected);
    let change_file = f.object.kind == FileKind::Cdc;
    if spec.cfg.bad_rows == BadRows::Quarantine {
        b = reject_null_keys(
            b,
            &spec.key,
            f,
            &mut summary.rejected,
            "primary key value is NULL",
        )?;
        if change_file {
            let why = "a change row has no value in an ordering column";
            b = reject_null_keys(b, &spec.order_columns, f, &mut summary.rejected, why)?;
        }
    } else {
        refuse_nulls(&b, &spec.key, f, "primary key value is NULL")?;
        if change_file {
            refuse_nulls(
                &b,
                &spec.order_columns,
                f,
                "a change row has no value in an ordering column: its place among the changes \
                 of its key is unknown (set `bad_rows = \"quarantine\"` to set such rows aside)",
            )?;
        }
    }
    if let Some(c) = &spec.cfg.change_sequence_column
        && let Some(col) = b.data.column_by_name(c)
        && let Some(m) = col.as_string::<i32>().iter().flatten().max()
        && summary.max_seq.as_deref().is_none_or(|x| m > x)
    {
        summary.max_seq = Some(m.to_string());
    }
    Ok(b)
}

/// The first row with a NULL in one of `columns` is an input error naming it.
fn refuse_nulls(b: &ChangeBatch, columns: &[String], f: &FileInput, reason: &str) -> Result<()> {
    for c in columns {
        let Some(col) = b.data.column_by_name(c) else {
            continue;
        };
        if col.null_count() == 0 {
            continue;
        }
        if let Some(r) = (0..col.len()).find(|&r| col.is_null(r)) {
            return Err(InputError::new(&f.object.key, reason)
                .at(crate::read::position(f.object.format, b.positions[r]))
                .column(c.as_str())
                .into());
        }
    }
    Ok(())
}

/// The batch's rows with their `Op` and sequence number; an update whose before-image key
/// differs from its key also deletes the old key (a row of its own, at the same place).
fn tagged(
    spec: &StreamSpec,
    schema: &SchemaRef,
    b: ChangeBatch,
    seq: &mut u64,
) -> Result<RecordBatch> {
    let n = b.data.num_rows();
    let seqs = UInt64Array::from_iter_values(*seq..*seq + n as u64);
    *seq += n as u64;
    let ops = UInt8Array::from_iter_values(b.ops.iter().map(|o| *o as u8));
    let mut columns: Vec<ArrayRef> = b.data.columns().to_vec();
    columns.push(Arc::new(ops));
    columns.push(Arc::new(seqs));
    let rows = RecordBatch::try_new(schema.clone(), columns)?;
    match &b.before {
        Some(before) => {
            let moved = moved_keys(spec, &rows, before, &b.ops)?;
            match moved {
                Some(m) => Ok(arrow_select::concat::concat_batches(schema, [&rows, &m])?),
                None => Ok(rows),
            }
        }
        None => Ok(rows),
    }
}

/// Rows deleting the old key of each update whose before-image key differs from its key.
fn moved_keys(
    spec: &StreamSpec,
    rows: &RecordBatch,
    before: &RecordBatch,
    ops: &[Op],
) -> Result<Option<RecordBatch>> {
    let key_idx: Vec<usize> = spec
        .key
        .iter()
        .map(|k| rows.schema().index_of(k))
        .collect::<std::result::Result<_, _>>()?;
    let keys: Vec<ArrayRef> = key_idx.iter().map(|&i| rows.column(i).clone()).collect();
    let cast: Vec<ArrayRef> = before
        .columns()
        .iter()
        .zip(&keys)
        .map(|(b, k)| arrow_cast::cast(b, k.data_type()))
        .collect::<std::result::Result<_, _>>()?;
    let conv = RowConverter::new(
        keys.iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect(),
    )?;
    let (new, old) = (conv.convert_columns(&keys)?, conv.convert_columns(&cast)?);
    let at: Vec<u32> = (0..rows.num_rows())
        .filter(|&r| {
            // A before-image that is NULL tells nothing: no move.
            ops[r] == Op::Update && cast.iter().all(|a| !a.is_null(r)) && old.row(r) != new.row(r)
        })
        .map(|r| r as u32)
        .collect();
    if at.is_empty() {
        return Ok(None);
    }
    let idx = arrow_array::UInt32Array::from(at);
    let taken = arrow_select::take::take_record_batch(rows, &idx)?;
    let mut columns = taken.columns().to_vec();
    for (&k, c) in key_idx.iter().zip(&cast) {
        columns[k] = arrow_select::take::take(c, &idx, None)?;
    }
    let op = rows.num_columns() - 2;
    columns[op] = Arc::new(UInt8Array::from(vec![Op::Delete as u8; idx.len()]));
    Ok(Some(RecordBatch::try_new(rows.schema(), columns)?))
}

/// How the consumer ended.
enum Flow {
    Done,
    /// Rows came out of key order while going straight through.
    OutOfOrder,
}

/// Sorts (or checks the order of) the rows, settles each key and hands the winners on.
fn consume(
    spec: &StreamSpec,
    handle: &tokio::runtime::Handle,
    schema: &SchemaRef,
    rx: Receiver<Result<RecordBatch>>,
    sort: bool,
    output: &mut Output<'_>,
) -> Result<Flow> {
    let key_idx = output.key_idx.clone();
    let seq = schema.fields().len() - 1;
    let mut winners = Winners::new(schema, &key_idx, &output.order_idx)?;
    let mut settle = |b: RecordBatch, output: &mut Output<'_>| -> Result<()> {
        for w in winners.push(b)? {
            handle.block_on(output.push(w))?;
        }
        Ok(())
    };
    if sort {
        let mut sorter = Sorter::new(
            schema.clone(),
            SortSpec {
                key: key_idx.clone(),
                seq,
            },
            spec.sort_budget,
            &spec.spool,
        )?;
        // Two key ranges written at once hold an open row group per partition each: only
        // where there is one partition.
        if output
            .target
            .planned
            .default_partition_spec()
            .is_unpartitioned()
        {
            sorter = sorter.split_in_two();
        }
        for b in rx {
            sorter.push(b?)?;
        }
        let mut ranges = sorter.finish_ranges()?.into_iter();
        let Some(first) = ranges.next() else {
            return Err(Error::Internal("a sort without rows to merge".into()));
        };
        output.spilled_bytes = first.spilled_bytes;
        settle_ranges(
            spec,
            handle,
            schema,
            first,
            ranges.next(),
            output,
            &mut settle,
        )?;
    } else {
        let mut order = KeyOrder::new(schema, &key_idx)?;
        let mut aside = SetAside::new(spec, schema, &key_idx, seq)?;
        for b in rx {
            let b = b?;
            match &mut aside {
                Some(a) => {
                    let passing = a.split(b)?;
                    if a.too_many() {
                        return Ok(Flow::OutOfOrder);
                    }
                    for p in passing {
                        settle(p, output)?;
                    }
                }
                None => {
                    if !order.continues(&b)? {
                        return Ok(Flow::OutOfOrder);
                    }
                    settle(b, output)?;
                }
            }
        }
        if let Some(a) = &mut aside {
            for p in a.finish_split()? {
                settle(p, output)?;
            }
            // A short input mostly out of order: sorted whole, into one file.
            if a.rows * SET_ASIDE_LIMIT > a.rows + a.passed.rows {
                return Ok(Flow::OutOfOrder);
            }
        }
        if let Some(a) = aside
            && a.rows > 0
        {
            if let Some(w) = winners.finish()? {
                handle.block_on(output.push(w))?;
            }
            // The rows set aside, sorted, in data files of their own (each file stays sorted
            // by key): keys none of the rows that went straight through have, or the input
            // starts over through the sorter.
            handle.block_on(output.flush())?;
            output.send(ToWriter::NewFiles)?;
            let mut aside_winners = Winners::new(schema, &key_idx, &output.order_idx)?;
            let SetAside {
                rows,
                passed,
                sorter,
                ..
            } = a;
            let sorted = sorter.finish()?;
            output.spilled_bytes = sorted.spilled_bytes;
            let mut passed = passed.iter();
            for b in sorted {
                let b = b?;
                if passed.holds_any(&b, &key_idx) {
                    return Ok(Flow::OutOfOrder);
                }
                for w in aside_winners.push(b)? {
                    handle.block_on(output.push(w))?;
                }
            }
            if let Some(w) = aside_winners.finish()? {
                handle.block_on(output.push(w))?;
            }
            output.duplicates = winners.duplicates + aside_winners.duplicates;
            output.set_aside = rows;
            return Ok(Flow::Done);
        }
    }
    if let Some(w) = winners.finish()? {
        handle.block_on(output.push(w))?;
    }
    output.duplicates += winners.duplicates;
    Ok(Flow::Done)
}

/// Settles the lower key range of a sort here (`settle`) while the upper one, if the sort was
/// split, is settled, looked up and written on threads of its own ([`apply_range`]): merging
/// and encoding then use both cores. The upper range's outcome joins `output`'s, or its files
/// are deleted if the lower range fails. A range that fails stops the other at its next batch,
/// so the error is reported without waiting for the other half of the input.
fn settle_ranges(
    spec: &StreamSpec,
    handle: &tokio::runtime::Handle,
    schema: &SchemaRef,
    lower: crate::spill::Merge,
    upper: Option<crate::spill::Merge>,
    output: &mut Output<'_>,
    settle: &mut impl FnMut(RecordBatch, &mut Output<'_>) -> Result<()>,
) -> Result<()> {
    let target = output.target;
    // Set by the range that fails first; the other stops at its next batch.
    let failed = AtomicBool::new(false);
    let failed = &failed;
    std::thread::scope(|s| {
        let upper = upper.map(|merge| {
            s.spawn(move || {
                let r = apply_range(spec, target, schema, merge, handle, failed);
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                r
            })
        });
        // Stops (without an error of its own) once the upper range has failed.
        let lower = (|| {
            for b in lower {
                handle.block_on(crate::commit::failpoint("lower-key-range"))?;
                if failed.load(Ordering::Relaxed) {
                    tracing::info!("the upper key range failed: the lower one stops");
                    break;
                }
                settle(b?, output)?;
            }
            Ok(())
        })();
        if lower.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        let upper = upper.map(|t| {
            t.join()
                .unwrap_or_else(|_| Err(Error::Internal("a merge thread panicked".into())))
        });
        match (lower, upper) {
            (Ok(()), None) => Ok(()),
            (Ok(()), Some(Ok(Some(range)))) => {
                output.absorb(range);
                Ok(())
            }
            (Ok(()), Some(Err(e))) => Err(e),
            (Err(e), upper) => {
                if let Some(Ok(Some(range))) = upper {
                    handle.block_on(range.abandon(target));
                }
                Err(e)
            }
            // The upper range stops only after the lower one failed.
            (Ok(()), Some(Ok(None))) => Err(Error::Internal(
                "a key range stopped without an error".into(),
            )),
        }
    })
}

/// What one key range of a split sort came to: its rows settled, looked up and written (data
/// files closed), for [`Output::absorb`].
struct Range {
    data: Vec<(i32, DataFile)>,
    deletes: BTreeMap<String, FileDeletes>,
    counts: Counts,
    lookup: LookupStats,
    duplicates: usize,
}

impl Range {
    /// Deletes its data files (the attempt failed elsewhere).
    async fn abandon(self, target: &Target<'_>) {
        for (_, f) in self.data {
            let _ = target.files.io().delete(f.file_path()).await;
        }
    }
}

/// Settles, looks up and writes the rows of one key range, through an [`Output`] and a writer
/// of its own (its files deleted if it fails).
/// `None`: stopped because `failed` was set (the other range failed).
fn apply_range(
    spec: &StreamSpec,
    target: &Target<'_>,
    schema: &SchemaRef,
    merge: crate::spill::Merge,
    handle: &tokio::runtime::Handle,
    failed: &AtomicBool,
) -> Result<Option<Range>> {
    let (wtx, wrx) = sync_channel::<ToWriter>(WRITE_AHEAD);
    std::thread::scope(|s| {
        let writer = s.spawn(|| write_rows(spec, target, wrx, handle));
        // Made inside the scope: should the work below panic, the unwinding drops the writer's
        // sender before the scope joins the writer, which then stops instead of waiting.
        let mut output = Output::new(spec, target, schema, wtx)?;
        // `Ok(None)`: stopped.
        let applied = (|| -> Result<Option<usize>> {
            let mut winners = Winners::new(schema, &output.key_idx, &output.order_idx)?;
            for b in merge {
                if failed.load(Ordering::Relaxed) {
                    tracing::info!("the lower key range failed: the upper one stops");
                    return Ok(None);
                }
                handle.block_on(crate::commit::failpoint("upper-key-range"))?;
                for w in winners.push(b?)? {
                    handle.block_on(output.push(w))?;
                }
            }
            if let Some(w) = winners.finish()? {
                handle.block_on(output.push(w))?;
            }
            handle.block_on(output.finish())?;
            Ok(Some(winners.duplicates))
        })();
        // Without `Finish`, the writer deletes what it wrote.
        output.writer = None;
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the writer thread panicked".into())));
        match (applied, written) {
            (Ok(Some(duplicates)), Ok(data)) => Ok(Some(Range {
                data,
                deletes: std::mem::take(&mut output.deletes),
                counts: output.counts,
                lookup: std::mem::take(&mut output.lookup),
                duplicates,
            })),
            (Ok(None), written) => {
                abandon(written, target, handle);
                Ok(None)
            }
            (Err(e), written) => {
                abandon(written, target, handle);
                Err(e)
            }
            (Ok(_), Err(e)) => Err(e),
        }
    })
}

/// Rows out of key order in an input that is otherwise in order (a long-lived table unloaded
/// in its heap's order: most rows in key order, the updated ones wherever there was room).
/// The rows in order go straight through as before; a row whose key is below the highest key
/// passed so far is set aside, sorted apart (spilled past the sort budget) and written after
/// the others as data files of its own, so the cost follows the disorder, not the input. The
/// keys passed are kept (a byte or two each) to prove that no row set aside shares a key with
/// one passed: where one does (a key repeated across the disorder), or where too much is out of
/// order (random keys), the input starts over through the sorter as before. For a single
/// 64-bit integer key (serial keys, the ones that come nearly in order).
struct SetAside {
    codec: KeyCodec,
    highest: Option<i64>,
    passed: PassedKeys,
    sorter: Sorter,
    /// Rows set aside.
    rows: usize,
    /// The last rows read and their keys, undecided until the rows after them are read.
    held: Option<(RecordBatch, Vec<i64>)>,
}

/// Rows after a row that decide whether it was moved ahead of its place: most of them below it.
const LOOK_AHEAD: usize = 16;

/// Set aside more than one row in this many (after [`SET_ASIDE_AFTER`] rows): the input is not
/// nearly in order; sorting it whole costs less than passing part of it.
const SET_ASIDE_LIMIT: usize = 4;
const SET_ASIDE_AFTER: usize = 64 * 1024;

impl SetAside {
    fn new(
        spec: &StreamSpec,
        schema: &SchemaRef,
        key_idx: &[usize],
        seq: usize,
    ) -> Result<Option<SetAside>> {
        if !matches!(key_idx, [k] if schema.field(*k).data_type() == &DataType::Int64) {
            return Ok(None);
        }
        Ok(Some(SetAside {
            codec: KeyCodec::new(schema, key_idx)?,
            highest: None,
            passed: PassedKeys::default(),
            sorter: Sorter::new(
                schema.clone(),
                SortSpec {
                    key: key_idx.to_vec(),
                    seq,
                },
                spec.sort_budget,
                &spec.spool,
            )?,
            rows: 0,
            held: None,
        }))
    }

    /// The rows decided so far that continue the key order (the others are set aside): all
    /// but the last [`LOOK_AHEAD`] rows, which wait for the rows after them.
    fn split(&mut self, b: RecordBatch) -> Result<Vec<RecordBatch>> {
        let BatchKeys::Ints(new_keys) = self.codec.keys(&b)? else {
            return Err(Error::Internal("set-aside keys are not integers".into()));
        };
        let (held, mut keys) = match self.held.take() {
            Some((h, k)) => (Some(h), k),
            None => (None, Vec::new()),
        };
        keys.extend_from_slice(&new_keys);
        let rows = match held {
            // The held rows and this batch, as one (a copy only of rows a decision needs next to
            // each other: the held ones and a batch shorter than the look-ahead).
            Some(h) if b.num_rows() < LOOK_AHEAD => {
                vec![arrow_select::concat::concat_batches(&b.schema(), [&h, &b])?]
            }
            Some(h) => vec![h, b],
            None => vec![b],
        };
        let decided = keys.len().saturating_sub(LOOK_AHEAD);
        let pass = self.decide(&keys, decided);
        let mut out = Vec::new();
        let mut at = 0usize;
        let mut rest: Vec<RecordBatch> = Vec::new();
        for part in rows {
            let n = part.num_rows();
            let here = decided.saturating_sub(at).min(n);
            if here > 0 {
                out.extend(self.route(&part.slice(0, here), &pass[at..at + here])?);
            }
            if here < n {
                rest.push(part.slice(here, n - here));
            }
            at += n;
        }
        let rest = match rest.len() {
            0 => None,
            1 => rest.pop(),
            _ => Some(arrow_select::concat::concat_batches(
                &rest[0].schema(),
                &rest,
            )?),
        };
        self.held = rest.map(|r| (r, keys[decided..].to_vec()));
        Ok(out)
    }

    /// The held rows, decided with what follows them (nothing: the input ended).
    fn finish_split(&mut self) -> Result<Vec<RecordBatch>> {
        let Some((rows, keys)) = self.held.take() else {
            return Ok(Vec::new());
        };
        let pass = self.decide(&keys, keys.len());
        self.route(&rows, &pass)
    }

    /// Whether each of the first `upto` of `keys` goes straight through: at or above the highest
    /// key passed, and not a row moved ahead of its place (most of the rows after it smaller).
    fn decide(&mut self, keys: &[i64], upto: usize) -> Vec<bool> {
        (0..upto)
            .map(|i| {
                let k = keys[i];
                let ahead = &keys[i + 1..(i + 1 + LOOK_AHEAD).min(keys.len())];
                let below = ahead.iter().filter(|&&x| x < k).count();
                let pass = self.highest.is_none_or(|h| k >= h) && below * 2 <= ahead.len();
                if pass {
                    self.highest = Some(k);
                    self.passed.push(k);
                }
                pass
            })
            .collect()
    }

    /// The rows of `b` that `pass`; the others to the sorter.
    fn route(&mut self, b: &RecordBatch, pass: &[bool]) -> Result<Vec<RecordBatch>> {
        if pass.iter().all(|p| *p) {
            return Ok(vec![b.clone()]);
        }
        let aside: BooleanArray = pass.iter().map(|p| Some(!p)).collect();
        let aside = arrow_select::filter::filter_record_batch(b, &aside)?;
        self.rows += aside.num_rows();
        self.sorter.push(aside)?;
        let passing =
            arrow_select::filter::filter_record_batch(b, &BooleanArray::from(pass.to_vec()))?;
        Ok(if passing.num_rows() > 0 {
            vec![passing]
        } else {
            Vec::new()
        })
    }

    fn too_many(&self) -> bool {
        let seen = self.rows + self.passed.rows;
        seen >= SET_ASIDE_AFTER && self.rows * SET_ASIDE_LIMIT > seen
    }
}

/// Ascending keys as varint deltas: a byte for each key of a serial sequence.
#[derive(Default)]
struct PassedKeys {
    bytes: Vec<u8>,
    last: i64,
    rows: usize,
}

impl PassedKeys {
    fn push(&mut self, k: i64) {
        let mut d = if self.rows == 0 {
            k as u64
        } else {
            k.wrapping_sub(self.last) as u64
        };
        loop {
            let byte = (d & 0x7f) as u8;
            d >>= 7;
            if d == 0 {
                self.bytes.push(byte);
                break;
            }
            self.bytes.push(byte | 0x80);
        }
        self.last = k;
        self.rows += 1;
    }

    fn iter(&self) -> PassedIter<'_> {
        PassedIter {
            keys: self,
            at: 0,
            read: 0,
            current: None,
        }
    }
}

/// A walk over [`PassedKeys`] in ascending order.
struct PassedIter<'a> {
    keys: &'a PassedKeys,
    at: usize,
    read: usize,
    current: Option<i64>,
}

impl PassedIter<'_> {
    fn next_key(&mut self) -> Option<i64> {
        if self.read == self.keys.rows {
            return None;
        }
        let (mut d, mut shift) = (0u64, 0);
        while let Some(&byte) = self.keys.bytes.get(self.at) {
            self.at += 1;
            d |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        let k = match self.current {
            None => d as i64,
            Some(c) => c.wrapping_add(d as i64),
        };
        self.read += 1;
        self.current = Some(k);
        Some(k)
    }

    /// Whether a key of `b` (sorted by key, after every batch asked before) was passed.
    fn holds_any(&mut self, b: &RecordBatch, key_idx: &[usize]) -> bool {
        // Anything but the one integer key SetAside takes: say so, and the input starts over.
        let [k] = key_idx else {
            return true;
        };
        let Some(keys) = b.column(*k).as_primitive_opt::<Int64Type>() else {
            return true;
        };
        for &key in keys.values() {
            while self.current.is_none_or(|c| c < key) {
                if self.next_key().is_none() {
                    return false;
                }
            }
            if self.current == Some(key) {
                return true;
            }
        }
        false
    }
}

/// Keys of a batch in a form comparable across batches: a single Int64 key as integers, any
/// other key row-encoded.
enum BatchKeys {
    Ints(Vec<i64>),
    Rows(Rows),
}

struct KeyCodec {
    idx: Vec<usize>,
    /// `None`: a single Int64 key.
    rows: Option<RowConverter>,
}

impl KeyCodec {
    fn new(schema: &SchemaRef, idx: &[usize]) -> Result<KeyCodec> {
        let single_int = matches!(idx, [k] if schema.field(*k).data_type() == &DataType::Int64);
        let rows = if single_int {
            None
        } else {
            Some(RowConverter::new(
                idx.iter()
                    .map(|&k| SortField::new(schema.field(k).data_type().clone()))
                    .collect(),
            )?)
        };
        Ok(KeyCodec {
            idx: idx.to_vec(),
            rows,
        })
    }

    fn keys(&self, b: &RecordBatch) -> Result<BatchKeys> {
        match &self.rows {
            None => Ok(BatchKeys::Ints(
                b.column(self.idx[0])
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec(),
            )),
            Some(conv) => {
                let cols: Vec<ArrayRef> = self.idx.iter().map(|&k| b.column(k).clone()).collect();
                Ok(BatchKeys::Rows(conv.convert_columns(&cols)?))
            }
        }
    }
}

/// Checks that rows arrive in key order (equal keys together), across batches.
struct KeyOrder {
    codec: KeyCodec,
    last_int: Option<i64>,
    last_row: Option<OwnedRow>,
}

impl KeyOrder {
    fn new(schema: &SchemaRef, idx: &[usize]) -> Result<KeyOrder> {
        Ok(KeyOrder {
            codec: KeyCodec::new(schema, idx)?,
            last_int: None,
            last_row: None,
        })
    }

    /// Whether `b` continues the order so far (its rows and its first against the last seen).
    fn continues(&mut self, b: &RecordBatch) -> Result<bool> {
        if b.num_rows() == 0 {
            return Ok(true);
        }
        match self.codec.keys(b)? {
            BatchKeys::Ints(v) => {
                let ordered = v.is_sorted() && self.last_int.is_none_or(|l| l <= v[0]);
                self.last_int = v.last().copied();
                Ok(ordered)
            }
            BatchKeys::Rows(rows) => {
                let first_ok = self
                    .last_row
                    .as_ref()
                    .is_none_or(|l| l.row() <= rows.row(0));
                let ordered =
                    first_ok && (1..rows.num_rows()).all(|i| rows.row(i - 1) <= rows.row(i));
                self.last_row = Some(rows.row(rows.num_rows() - 1).owned());
                Ok(ordered)
            }
        }
    }
}

/// Settles sorted rows: of the rows of one key, the last change wins (by the ordering columns,
/// then input order). A key's rows may span batches: the last key of a batch waits for the next.
struct Winners {
    schema: SchemaRef,
    codec: KeyCodec,
    order: Option<(Vec<usize>, RowConverter)>,
    carry: Option<RecordBatch>,
    duplicates: usize,
}

impl Winners {
    fn new(schema: &SchemaRef, key_idx: &[usize], order_idx: &[usize]) -> Result<Winners> {
        let order = if order_idx.is_empty() {
            None
        } else {
            let conv = RowConverter::new(
                order_idx
                    .iter()
                    .map(|&i| SortField::new(schema.field(i).data_type().clone()))
                    .collect(),
            )?;
            Some((order_idx.to_vec(), conv))
        };
        Ok(Winners {
            schema: schema.clone(),
            codec: KeyCodec::new(schema, key_idx)?,
            order,
            carry: None,
            duplicates: 0,
        })
    }

    /// The winners of the keys `b` completes.
    fn push(&mut self, b: RecordBatch) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let b = match self.carry.take() {
            // The last key of the previous batch goes on here: its rows meet (a small copy
            // of the whole batch, only when a key's rows span two batches).
            Some(c) if b.num_rows() > 0 && self.same_key(&c, c.num_rows() - 1, &b, 0)? => {
                arrow_select::concat::concat_batches(&self.schema, [&c, &b])?
            }
            Some(c) => {
                out.extend(self.settle(c, true)?);
                b
            }
            None => b,
        };
        out.extend(self.settle(b, false)?);
        Ok(out)
    }

    /// The winner of the last key.
    fn finish(&mut self) -> Result<Option<RecordBatch>> {
        match self.carry.take() {
            Some(c) => self.settle(c, true),
            None => Ok(None),
        }
    }

    /// Whether row `i` of `a` and row `j` of `b` have the same key.
    fn same_key(&self, a: &RecordBatch, i: usize, b: &RecordBatch, j: usize) -> Result<bool> {
        Ok(
            match (
                self.codec.keys(&a.slice(i, 1))?,
                self.codec.keys(&b.slice(j, 1))?,
            ) {
                (BatchKeys::Ints(x), BatchKeys::Ints(y)) => x == y,
                (BatchKeys::Rows(x), BatchKeys::Rows(y)) => x.row(0) == y.row(0),
                _ => false,
            },
        )
    }

    fn settle(&mut self, b: RecordBatch, last: bool) -> Result<Option<RecordBatch>> {
        let n = b.num_rows();
        if n == 0 {
            return Ok(None);
        }
        let keys = self.codec.keys(&b)?;
        let same = |i: usize| match &keys {
            BatchKeys::Ints(v) => v[i] == v[i - 1],
            BatchKeys::Rows(r) => r.row(i) == r.row(i - 1),
        };
        let order = match &self.order {
            Some((idx, conv)) => {
                let cols: Vec<ArrayRef> = idx.iter().map(|&i| b.column(i).clone()).collect();
                Some(conv.convert_columns(&cols)?)
            }
            None => None,
        };
        let mut picked: Vec<u32> = Vec::with_capacity(n);
        let mut start = 0usize;
        for i in 1..=n {
            if i < n && same(i) {
                continue;
            }
            if i == n && !last {
                // The last key may go on in the next batch.
                self.carry = Some(b.slice(start, n - start));
                break;
            }
            let winner = match &order {
                // Input order breaks ties: the later of equal ordering values wins.
                Some(o) => (start..i)
                    .max_by(|&x, &y| o.row(x).cmp(&o.row(y)).then(x.cmp(&y)))
                    .unwrap_or(i - 1),
                None => i - 1,
            };
            self.duplicates += i - start - 1;
            picked.push(winner as u32);
            start = i;
        }
        if picked.is_empty() {
            return Ok(None);
        }
        // Every key once (the common case): the rows themselves, not a copy.
        if picked.iter().enumerate().all(|(i, p)| *p as usize == i) {
            return Ok(Some(b.slice(0, picked.len())));
        }
        let idx = arrow_array::UInt32Array::from(picked);
        Ok(Some(arrow_select::take::take_record_batch(&b, &idx)?))
    }
}

/// Settled rows looked up a chunk at a time, the upserts written.
struct Output<'a> {
    target: &'a Target<'a>,
    /// Where the upserts go (the writer thread); `None` once the rows are complete or given up.
    writer: Option<SyncSender<ToWriter>>,
    /// Columns of the table, in the rows.
    data_idx: Vec<usize>,
    key_idx: Vec<usize>,
    /// Key field ids in the base table (for lookups).
    key_ids: Vec<i32>,
    /// Field ids of the ordering columns in the base table (`None`: a column it lacks).
    order_ids: Vec<Option<i32>>,
    order_idx: Vec<usize>,
    from_load: bool,
    /// Snapshots that applied full-load files later in DMS order than this input's: their rows
    /// win over this input's (full-load files of one load commit in any order).
    newer: std::collections::HashSet<i64>,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    deletes: BTreeMap<String, FileDeletes>,
    counts: Counts,
    lookup: LookupStats,
    spilled_bytes: u64,
    duplicates: usize,
    /// Rows set aside as out of key order, written in data files of their own.
    set_aside: usize,
    /// Data files of the upper key range of a split sort, written by its own writer.
    range_data: Vec<(i32, DataFile)>,
}

impl<'a> Output<'a> {
    fn new(
        spec: &StreamSpec,
        target: &'a Target<'a>,
        schema: &SchemaRef,
        writer: SyncSender<ToWriter>,
    ) -> Result<Output<'a>> {
        let key_idx: Vec<usize> = spec
            .key
            .iter()
            .map(|k| schema.index_of(k))
            .collect::<std::result::Result<_, _>>()?;
        let (key_ids, order_ids) = match &target.base {
            Some(md) => {
                let s = md.current_schema();
                let key_ids = spec
                    .key
                    .iter()
                    .map(|k| {
                        s.field_id_by_name(k).ok_or_else(|| {
                            Error::Internal(format!("key column `{k}` not in table"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let order_ids = spec
                    .order_columns
                    .iter()
                    .map(|c| s.field_id_by_name(c))
                    .collect();
                (key_ids, order_ids)
            }
            None => (Vec::new(), Vec::new()),
        };
        Ok(Output {
            target,
            writer: Some(writer),
            data_idx: (0..spec.processing.fields().len()).collect(),
            key_idx,
            key_ids,
            order_ids,
            order_idx: spec
                .order_columns
                .iter()
                .map(|c| schema.index_of(c))
                .collect::<std::result::Result<_, _>>()?,
            from_load: spec.from_load,
            newer: match (&target.base, spec.from_load) {
                (Some(md), true) => later_loads(md, &spec.files),
                _ => Default::default(),
            },
            pending: Vec::new(),
            pending_rows: 0,
            deletes: BTreeMap::new(),
            counts: Counts::default(),
            lookup: LookupStats::default(),
            spilled_bytes: 0,
            duplicates: 0,
            set_aside: 0,
            range_data: Vec::new(),
        })
    }

    /// Takes in what another key range of the same input came to (its keys none of this one's).
    fn absorb(&mut self, range: Range) {
        self.range_data.extend(range.data);
        for (path, d) in range.deletes {
            match self.deletes.get_mut(&path) {
                Some(e) => e.positions.extend(d.positions),
                None => {
                    self.deletes.insert(path, d);
                }
            }
        }
        let (c, r) = (&mut self.counts, range.counts);
        c.inserted += r.inserted;
        c.updated += r.updated;
        c.deleted += r.deleted;
        c.deletes_of_absent_keys += r.deletes_of_absent_keys;
        c.stale += r.stale;
        add_stats(&mut self.lookup, &range.lookup);
        self.duplicates += range.duplicates;
    }

    async fn push(&mut self, winners: RecordBatch) -> Result<()> {
        self.pending_rows += winners.num_rows();
        self.pending.push(winners);
        if self.pending_rows >= LOOKUP_CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    /// Looks the pending keys up and writes their upserts.
    async fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let looks_up = self
            .target
            .base
            .as_ref()
            .is_some_and(|md| md.current_snapshot().is_some());
        if !looks_up {
            // Nothing to look up (a new or empty table): each batch goes on as it is.
            for rows in std::mem::take(&mut self.pending) {
                self.hand_on(&rows, None)?;
            }
            self.pending_rows = 0;
            return Ok(());
        }
        let schema = self.pending[0].schema();
        let rows = arrow_select::concat::concat_batches(&schema, self.pending.iter())?;
        self.pending.clear();
        self.pending_rows = 0;
        let n = rows.num_rows();
        let Some(md) = self.target.base.clone() else {
            return Ok(());
        };
        let keys = rows.project(&self.key_idx)?;
        let check = (!self.order_idx.is_empty() || !self.newer.is_empty()).then(|| StaleCheck {
            field_ids: self.order_ids.clone(),
            values: self
                .order_idx
                .iter()
                .map(|&i| rows.column(i).clone())
                .collect(),
            from_load: vec![self.from_load; n],
            newer_snapshots: self.newer.clone(),
        });
        let located = locate_rows(
            self.target.files,
            &md,
            &keys,
            self.key_ids.clone(),
            check.as_ref(),
        )
        .await?;
        add_stats(&mut self.lookup, &located.stats);
        for (path, d) in located.deletes {
            match self.deletes.get_mut(&path) {
                Some(e) => e.positions.extend(d.positions),
                None => {
                    self.deletes.insert(path, d);
                }
            }
        }
        self.hand_on(&rows, Some((&located.found, &located.stale)))
    }

    /// Counts the settled rows by outcome (`found`, `stale` per row from the lookup; none:
    /// nothing to look up) and sends their upserts to the writer.
    fn hand_on(&mut self, rows: &RecordBatch, located: Option<(&[bool], &[bool])>) -> Result<()> {
        let n = rows.num_rows();
        let op = rows
            .column(rows.num_columns() - 2)
            .as_primitive::<UInt8Type>();
        let mut write = Vec::with_capacity(n);
        for (i, o) in op.values().iter().enumerate() {
            let upsert = *o != Op::Delete as u8;
            let (found, stale) = located.map_or((false, false), |(f, s)| (f[i], s[i]));
            let c = &mut self.counts;
            match (stale, upsert, found) {
                (true, _, _) => c.stale += 1,
                (false, true, true) => c.updated += 1,
                (false, true, false) => c.inserted += 1,
                (false, false, true) => c.deleted += 1,
                (false, false, false) => c.deletes_of_absent_keys += 1,
            }
            write.push(upsert && !stale);
        }
        let data = rows.project(&self.data_idx)?;
        let data = if write.iter().all(|w| *w) {
            data
        } else {
            arrow_select::filter::filter_record_batch(&data, &BooleanArray::from(write))?
        };
        if data.num_rows() > 0 {
            self.send(ToWriter::Rows(data))?;
        }
        Ok(())
    }

    fn send(&self, msg: ToWriter) -> Result<()> {
        // A writer that stopped reports why when it is joined.
        self.writer
            .as_ref()
            .and_then(|w| w.send(msg).ok())
            .ok_or_else(|| Error::Internal("the data file writer stopped".into()))
    }

    /// Looks up and hands on what is pending, then tells the writer the rows are complete.
    async fn finish(&mut self) -> Result<()> {
        self.flush().await?;
        self.send(ToWriter::Finish)
    }
}

/// The snapshots of `md` that applied only full-load files, all later in DMS order than every
/// one of `files` (a snapshot whose files interleave with them is taken as older).
fn later_loads(md: &TableMetadata, files: &[FileInput]) -> std::collections::HashSet<i64> {
    let Some(ours) = files.iter().map(|f| &f.object.order).max() else {
        return Default::default();
    };
    crate::files::metadata::ancestry(md)
        .into_iter()
        .filter(|s| {
            let orders: Vec<String> = s
                .summary()
                .additional_properties
                .get(crate::files::vocabulary::keys::SOURCE_ORDERS)
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or_default();
            !orders.is_empty()
                && orders.iter().all(|o| {
                    crate::locate::OrderKey::parse(o).is_some_and(|o| o.is_load() && o > *ours)
                })
        })
        .map(|s| s.snapshot_id())
        .collect()
}

fn add_stats(total: &mut LookupStats, s: &LookupStats) {
    total.live_data_files = total.live_data_files.max(s.live_data_files);
    total.files_pruned_by_bounds += s.files_pruned_by_bounds;
    total.data_files_read += s.data_files_read;
    total.row_groups_read += s.row_groups_read;
    total.row_groups_pruned_by_stats += s.row_groups_pruned_by_stats;
    total.row_groups_pruned_by_bloom += s.row_groups_pruned_by_bloom;
    total.delete_files_read += s.delete_files_read;
    total.key_cache_hits += s.key_cache_hits;
    total.key_indexes_read += s.key_indexes_read;
    total.key_indexes_written += s.key_indexes_written;
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use proptest::prelude::*;

    /// Rows `(key, order value, op)` with their sequence numbers, in the pipeline's schema.
    fn rows(data: &[(i64, i64, u8, u64)], string_key: bool) -> RecordBatch {
        let processing = Arc::new(ArrowSchema::new(vec![
            Field::new(
                "k",
                if string_key {
                    DataType::Utf8
                } else {
                    DataType::Int64
                },
                true,
            ),
            Field::new("o", DataType::Int64, true),
        ]));
        let schema = row_schema(&processing);
        let k: ArrayRef = if string_key {
            Arc::new(StringArray::from_iter_values(
                data.iter().map(|r| format!("{:05}", r.0)),
            ))
        } else {
            Arc::new(Int64Array::from_iter_values(data.iter().map(|r| r.0)))
        };
        RecordBatch::try_new(
            schema,
            vec![
                k,
                Arc::new(Int64Array::from_iter_values(data.iter().map(|r| r.1))),
                Arc::new(UInt8Array::from_iter_values(data.iter().map(|r| r.2))),
                Arc::new(UInt64Array::from_iter_values(data.iter().map(|r| r.3))),
            ],
        )
        .expect("rows")
    }

    proptest! {
        /// Sorted rows cut into batches anywhere: one winner per key, the last change (by the
        /// ordering column when there is one, then input order), and a count of the others.
        #[test]
        fn winners_are_the_last_change_of_each_key(
            changes in proptest::collection::vec((0i64..40, 0i64..4, any::<bool>()), 1..400),
            cuts in proptest::collection::vec(1usize..60, 1..20),
            ordered in any::<bool>(),
            string_key in any::<bool>(),
        ) {
            // Rows in input order get sequence numbers; then they are sorted by (key, seq).
            let mut input: Vec<(i64, i64, u8, u64)> = changes
                .iter()
                .enumerate()
                .map(|(i, (k, o, d))| (*k, *o, if *d { Op::Delete as u8 } else { Op::Insert as u8 }, i as u64))
                .collect();
            input.sort_by_key(|r| (r.0, r.3));
            let all = rows(&input, string_key);
            let order_idx: Vec<usize> = if ordered { vec![1] } else { vec![] };
            let mut w = Winners::new(&all.schema(), &[0], &order_idx).expect("winners");
            let mut out: Vec<RecordBatch> = Vec::new();
            let (mut at, mut c) = (0usize, 0usize);
            while at < input.len() {
                let len = cuts[c % cuts.len()].min(input.len() - at);
                c += 1;
                out.extend(w.push(all.slice(at, len)).expect("push"));
                at += len;
            }
            out.extend(w.finish().expect("finish"));
            let got: Vec<u64> = out
                .iter()
                .flat_map(|b| b.column(3).as_primitive::<arrow_array::types::UInt64Type>().values().to_vec())
                .collect();
            // The model: per key, the maximum of (order value if ordered, seq).
            let mut expected: BTreeMap<i64, (i64, u64)> = BTreeMap::new();
            for r in &input {
                let rank = (if ordered { r.1 } else { 0 }, r.3);
                let e = expected.entry(r.0).or_insert(rank);
                if rank > *e {
                    *e = rank;
                }
            }
            let want: Vec<u64> = expected.values().map(|(_, s)| *s).collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(w.duplicates, input.len() - want.len());
        }

        /// The order check accepts exactly the inputs whose keys never go down, however cut.
        #[test]
        fn key_order_is_checked_across_batches(
            keys in proptest::collection::vec(0i64..30, 1..200),
            cut in 1usize..50,
            string_key in any::<bool>(),
        ) {
            let input: Vec<(i64, i64, u8, u64)> =
                keys.iter().enumerate().map(|(i, k)| (*k, 0, b'I', i as u64)).collect();
            let all = rows(&input, string_key);
            let mut order = KeyOrder::new(&all.schema(), &[0]).expect("order");
            let mut ok = true;
            let mut at = 0;
            while at < input.len() {
                let len = cut.min(input.len() - at);
                ok &= order.continues(&all.slice(at, len)).expect("check");
                at += len;
            }
            prop_assert_eq!(ok, keys.is_sorted());
        }

        /// The keys passed read back as pushed, and a sorted walk finds exactly the keys that
        /// were passed (whatever the gaps: varint deltas of any size).
        #[test]
        fn passed_keys_are_found_and_nothing_else(
            mut passed in proptest::collection::vec(-1_000_000_000_000i64..1_000_000_000_000, 0..300),
            mut asked in proptest::collection::vec(-1_000_000_000_000i64..1_000_000_000_000, 1..50),
            near in any::<bool>(),
        ) {
            passed.sort_unstable();
            if near {
                // Keys close to those passed, some equal.
                asked = asked.iter().enumerate().map(|(i, a)| {
                    passed.get(i % passed.len().max(1)).map_or(*a, |p| p + (a % 2))
                }).collect();
            }
            asked.sort_unstable();
            let mut keys = PassedKeys::default();
            for &k in &passed {
                keys.push(k);
            }
            let mut walk = keys.iter();
            let mut read = Vec::new();
            while let Some(k) = walk.next_key() {
                read.push(k);
            }
            prop_assert_eq!(&read, &passed);
            let batch = rows(&asked.iter().map(|k| (*k, 0, b'I', 0)).collect::<Vec<_>>(), false);
            let holds = keys.iter().holds_any(&batch, &[0]);
            prop_assert_eq!(holds, asked.iter().any(|a| passed.binary_search(a).is_ok()));
        }
    }
}
