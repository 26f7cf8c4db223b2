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
//!
//! Layout, one concern a file: this file is the driver (the threads of an attempt, the start
//! over when the input is out of order, and `consume`, which routes rows between the
//! others); `source` reads the rows, `order` detects key order and sets rows aside, `settle`
//! keeps each key's latest change (the rule of [`crate::dedupe::rule`]), `output` looks the
//! winners up and writes them. Rows flow as Arrow batches of the table's columns plus two of
//! the pipeline's own ([`source::row_schema`]): the `Op` and the sequence number, the place of
//! the row in the input, which settling and the sort order rows of one key by.

mod order;
mod output;
mod settle;
mod source;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use iceberg::spec::{DataFile, PrimitiveType, TableMetadata};

use self::order::{KeyOrder, SET_ASIDE_LIMIT, SetAside};
use self::output::{Output, ToWriter, WRITE_AHEAD, abandon, write_rows};
use self::settle::{Winners, settle_ranges};
use self::source::{ReadSummary, read_rows, row_schema};
use super::FileInput;
use crate::config::TableConfig;
use crate::error::{Error, Rejected, Result};
use crate::files::Files;
use crate::files::deletes::FileDeletes;
use crate::locate::FileKind;
use crate::lookup::LookupStats;
use crate::spill::{SortSpec, Sorter};

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
    let kind = input_kind(spec);
    let mut winners = Winners::new(schema, &key_idx, &output.order_idx, kind)?;
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
            let mut aside_winners = Winners::new(schema, &key_idx, &output.order_idx, kind)?;
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

/// The kind of every file of the input (commits never mix the two).
fn input_kind(spec: &StreamSpec) -> FileKind {
    if spec.from_load {
        FileKind::Load
    } else {
        FileKind::Cdc
    }
}
