//! Output: settled rows looked up in the table a chunk of [`LOOKUP_CHUNK`] keys at a time
//! (what each replaces, whether it is stale), counted by outcome, and their upserts encoded
//! into data files on a writer thread of its own.
//!
//! Invariants: a writer keeps its files only when told `Finish`; rows that stop otherwise (an
//! error, an input started over, a panic unwinding) leave nothing behind. The lookup's stale
//! check is built here, where the settled rows and the table meet (dedupe, the step before,
//! knows nothing of lookups).

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender};

use arrow_array::cast::AsArray;
use arrow_array::types::UInt8Type;
use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use iceberg::spec::{DataFile, TableMetadata};

use super::settle::Range;
use super::{Counts, FileInput, LOOKUP_CHUNK, StreamSpec, Target};
use crate::error::{Error, Result};
use crate::files::deletes::FileDeletes;
use crate::lookup::{LookupStats, StaleCheck, locate_rows};
use crate::read::Op;
use crate::write::data::DataFileStream;

/// What the writer thread is told.
pub(super) enum ToWriter {
    Rows(RecordBatch),
    /// Close the files written so far: the rows that follow go to new ones.
    NewFiles,
    /// The rows are complete: close the files.
    Finish,
}

/// Deletes the files of an attempt that ended otherwise than its writer knew (the writer
/// deletes its own files when the rows stop without `Finish`).
pub(super) fn abandon(
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

/// Batches of upserts queued for the writer.
pub(super) const WRITE_AHEAD: usize = 16;

/// Encodes the upserts into data files. Rows that stop without `Finish` (an error, or an
/// input started over) leave nothing behind.
pub(super) fn write_rows(
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

/// Settled rows looked up a chunk at a time, the upserts written.
pub(super) struct Output<'a> {
    pub(super) target: &'a Target<'a>,
    /// Where the upserts go (the writer thread); `None` once the rows are complete or given up.
    pub(super) writer: Option<SyncSender<ToWriter>>,
    /// Columns of the table, in the rows.
    data_idx: Vec<usize>,
    pub(super) key_idx: Vec<usize>,
    /// Key field ids in the base table (for lookups).
    key_ids: Vec<i32>,
    /// Field ids of the ordering columns in the base table (`None`: a column it lacks).
    order_ids: Vec<Option<i32>>,
    pub(super) order_idx: Vec<usize>,
    from_load: bool,
    /// Snapshots that applied full-load files later in DMS order than this input's: their rows
    /// win over this input's (full-load files of one load commit in any order).
    newer: std::collections::HashSet<i64>,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pub(super) deletes: BTreeMap<String, FileDeletes>,
    pub(super) counts: Counts,
    pub(super) lookup: LookupStats,
    pub(super) spilled_bytes: u64,
    pub(super) duplicates: usize,
    /// Rows set aside as out of key order, written in data files of their own.
    pub(super) set_aside: usize,
    /// Data files of the upper key range of a split sort, written by its own writer.
    pub(super) range_data: Vec<(i32, DataFile)>,
}

impl<'a> Output<'a> {
    pub(super) fn new(
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
    pub(super) fn absorb(&mut self, range: Range) {
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

    pub(super) async fn push(&mut self, winners: RecordBatch) -> Result<()> {
        self.pending_rows += winners.num_rows();
        self.pending.push(winners);
        if self.pending_rows >= LOOKUP_CHUNK {
            self.flush().await?;
        }
        Ok(())
    }

    /// Looks the pending keys up and writes their upserts.
    pub(super) async fn flush(&mut self) -> Result<()> {
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

    pub(super) fn send(&self, msg: ToWriter) -> Result<()> {
        // A writer that stopped reports why when it is joined.
        self.writer
            .as_ref()
            .and_then(|w| w.send(msg).ok())
            .ok_or_else(|| Error::Internal("the data file writer stopped".into()))
    }

    /// Looks up and hands on what is pending, then tells the writer the rows are complete.
    pub(super) async fn finish(&mut self) -> Result<()> {
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
