//! Sorted runs: [`Sorter`] holds rows up to half its byte budget, sorts them and writes them to
//! the spool folder as a run (Arrow IPC, an unnamed file) on a thread of its own while the next
//! half fills; [`Sorter::finish`] and [`Sorter::finish_ranges`] hand the runs to a [`Merge`].
//!
//! Invariants: at most two runs are in memory (the one filling, the one being written: a
//! rendezvous channel); a run's rows are sorted by key then sequence number; split in two key
//! ranges, every run is cut at the same boundary (the first run's median key, with the smallest
//! sequence number), so every row of a key is in one range; run files are unlinked once created,
//! so nothing outlives the process.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::SchemaRef;

use super::file;
use super::keys::{BatchKeys, KeyCodec, SortSpec};
use super::merge::{Merge, Source};
use crate::error::{Error, Result};

/// Rows per batch a run is written in: a merge holds a batch of every run (of each key range)
/// at once, so smaller than the merge's own batches; and a batch (~80 KB at 80 bytes a row)
/// fits in a read buffer, so that the next buffer is read while this one is merged (at 4,096
/// rows a batch spanned three buffers and the merge waited for each).
const RUN_BATCH_ROWS: usize = 1024;

/// Each of a run's two read buffers while merging (one read while the other is filled: a
/// merge holds two per run, so small; direct reads of 64 KiB took twice as long per byte as
/// 256 KiB on the disk we measured).
const RUN_READ_BUFFER: usize = 128 * 1024;

/// Collects rows and sorts them, spilling sorted runs to `dir` beyond `budget` bytes.
///
/// A run is sorted and written on a thread of its own while the next one fills: reading the
/// input (CSV parsing) and sorting then use a core each. So that two runs in memory stay within
/// `budget`, a run is half of it.
pub(crate) struct Sorter {
    schema: SchemaRef,
    encoder: KeyCodec,
    /// Bytes held before they are handed over as a run.
    run_bytes: usize,
    dir: PathBuf,
    held: Vec<RecordBatch>,
    held_bytes: usize,
    /// Started at the first run.
    spiller: Option<Spiller>,
    /// Runs handed over so far.
    runs: usize,
    /// Spilled runs are written split in two key ranges ([`Sorter::finish_ranges`]).
    split: bool,
}

impl Sorter {
    pub(crate) fn new(
        schema: SchemaRef,
        spec: SortSpec,
        budget: usize,
        dir: &Path,
    ) -> Result<Sorter> {
        Ok(Sorter {
            encoder: KeyCodec::sort(&schema, &spec)?,
            schema,
            run_bytes: budget / 2,
            dir: dir.to_path_buf(),
            held: Vec::new(),
            held_bytes: 0,
            spiller: None,
            runs: 0,
            split: false,
        })
    }

    /// Writes each spilled run in two parts, below and from the first run's median key, so
    /// that [`Sorter::finish_ranges`] can merge the two key ranges apart (on two threads).
    pub(crate) fn split_in_two(mut self) -> Sorter {
        self.split = true;
        self
    }

    /// Adds rows (sequence numbers greater than every row added before).
    pub(crate) fn push(&mut self, b: RecordBatch) -> Result<()> {
        if b.num_rows() == 0 {
            return Ok(());
        }
        self.held_bytes += b.get_array_memory_size();
        self.held.push(b);
        if self.held_bytes >= self.run_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Runs handed over so far.
    #[cfg(test)]
    pub(super) fn runs(&self) -> usize {
        self.runs
    }

    /// Hands what is held over to the spilling thread (waiting while it still writes the run
    /// before).
    fn spill(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.held);
        self.held_bytes = 0;
        if self.spiller.is_none() {
            self.spiller = Some(Spiller::start(
                self.schema.clone(),
                self.encoder.clone(),
                self.dir.clone(),
                self.split,
            )?);
        }
        self.runs += 1;
        match &mut self.spiller {
            Some(s) => s.send(batches),
            None => Err(Error::Internal("the spilling thread is gone".into())),
        }
    }

    /// Every row, sorted.
    pub(crate) fn finish(mut self) -> Result<Merge> {
        let spilled = match self.spiller.take() {
            Some(s) => {
                let spilled = s.finish()?;
                // What the sorting thread freed stays in its own arena otherwise, where the
                // merge (on another thread) cannot reuse it: +60 MiB on a shuffled 1 GiB load.
                crate::process::release_freed_memory();
                spilled
            }
            None => Spilled::default(),
        };
        let io = spilled.io;
        let mut sources = read_runs(io.as_ref(), spilled.ranges.into_iter().flatten())?;
        if let Some(held) = sorted(std::mem::take(&mut self.held), &self.encoder)? {
            sources.push(Box::new(held));
        }
        Merge::new(self.encoder.clone(), sources, spilled.bytes)
    }

    /// Every row, sorted, as merges of consecutive key ranges (every row of a key in one):
    /// two after [`Sorter::split_in_two`] once a run was spilled (the rows still held are
    /// spilled too), else one. The spilled bytes are on the first.
    pub(crate) fn finish_ranges(mut self) -> Result<Vec<Merge>> {
        if !self.split || self.spiller.is_none() {
            return Ok(vec![self.finish()?]);
        }
        self.spill()?;
        let Some(s) = self.spiller.take() else {
            return Err(Error::Internal("the spilling thread is gone".into()));
        };
        let spilled = s.finish()?;
        crate::process::release_freed_memory();
        let mut bytes = spilled.bytes;
        let mut merges = Vec::with_capacity(spilled.ranges.len());
        for range in spilled.ranges {
            merges.push(Merge::new(
                self.encoder.clone(),
                read_runs(spilled.io.as_ref(), range)?,
                std::mem::take(&mut bytes),
            )?);
        }
        Ok(merges)
    }
}

/// The runs' rows, each run read back through `io` (there when any run was spilled).
fn read_runs(
    io: Option<&file::SpoolIo>,
    runs: impl IntoIterator<Item = SpilledRun>,
) -> Result<Vec<Source>> {
    let mut sources: Vec<Source> = Vec::new();
    for run in runs {
        let Some(io) = io else {
            return Err(Error::Internal(
                "spilled runs without a spool thread".into(),
            ));
        };
        sources.push(Box::new(run.read(io)?));
    }
    Ok(sources)
}

/// The thread that sorts runs and writes them to the spool folder, in the order handed over.
struct Spiller {
    tx: Option<SyncSender<Vec<RecordBatch>>>,
    thread: Option<JoinHandle<Result<Spilled>>>,
}

/// The runs written, in order, per key range (one range unless split), their bytes, and the
/// thread that reads them back.
#[derive(Default)]
struct Spilled {
    ranges: Vec<Vec<SpilledRun>>,
    bytes: u64,
    io: Option<file::SpoolIo>,
}

impl Spiller {
    fn start(schema: SchemaRef, encoder: KeyCodec, dir: PathBuf, split: bool) -> Result<Spiller> {
        // A rendezvous: a run is handed over only once the one before is written, so at most
        // two runs are in memory.
        let (tx, rx) = sync_channel::<Vec<RecordBatch>>(0);
        let io = file::SpoolIo::start()?;
        let thread = std::thread::Builder::new()
            .name("dms2iceberg-sort".into())
            .spawn(move || {
                let mut out = Spilled {
                    ranges: (0..if split { 2 } else { 1 }).map(|_| Vec::new()).collect(),
                    bytes: 0,
                    io: Some(io.clone()),
                };
                // Where the second range starts: the first run's median key.
                let mut boundary: Option<BatchKeys> = None;
                for batches in rx {
                    let Some(chunks) = sorted(batches, &encoder)? else {
                        continue;
                    };
                    if split && boundary.is_none() {
                        boundary = Some(chunks.median_key(&encoder)?);
                    }
                    let (parts, bytes) =
                        write_run(&dir, &io, &schema, chunks, &encoder, boundary.as_ref())?;
                    for (range, run) in out.ranges.iter_mut().zip(parts) {
                        range.extend(run);
                    }
                    out.bytes += bytes;
                }
                Ok(out)
            })
            .map_err(|e| Error::io("the spilling thread", e))?;
        Ok(Spiller {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn send(&mut self, batches: Vec<RecordBatch>) -> Result<()> {
        let sent = match &self.tx {
            Some(tx) => tx.send(batches).is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The thread stopped: its error says why.
        self.join().map(|_| ())
    }

    /// Waits for the last run and returns them all.
    fn finish(mut self) -> Result<Spilled> {
        self.join()
    }

    fn join(&mut self) -> Result<Spilled> {
        self.tx = None;
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(Error::Internal("the spilling thread panicked".into()))),
            None => Err(Error::Internal("the spilling thread is gone".into())),
        }
    }
}

impl Drop for Spiller {
    /// An abandoned sort (an error, an input started over) waits for the run being written, so
    /// no thread outlives it; the runs' files are unlinked already.
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.join();
        }
    }
}

/// `batches`' rows in sorted chunks (taken from the batches, never concatenated whole), or
/// `None` when there are none.
fn sorted(batches: Vec<RecordBatch>, encoder: &KeyCodec) -> Result<Option<SortedChunks>> {
    if batches.is_empty() {
        return Ok(None);
    }
    // Sort the (batch, row) pairs by the rows' keys: only the key and sequence columns are
    // gathered to sort; the rows themselves are gathered a chunk at a time.
    let seq = encoder
        .seq()
        .ok_or_else(|| Error::Internal("a sort without sequence numbers".into()))?;
    let (keys, seq) = concat_columns(&batches, encoder.key(), seq)?;
    let order = encoder.sort_indices(keys, seq)?;
    let mut starts = Vec::with_capacity(batches.len());
    let mut at = 0usize;
    for b in &batches {
        starts.push(at);
        at += b.num_rows();
    }
    let positions: Vec<(usize, usize)> = order
        .into_iter()
        .map(|i| {
            let i = i as usize;
            let b = starts.partition_point(|s| *s <= i) - 1;
            (b, i - starts[b])
        })
        .collect();
    Ok(Some(SortedChunks {
        batches,
        positions,
        at: 0,
    }))
}

/// Writes sorted rows as a run: one part, or two split at `boundary` (rows whose key is
/// below it, then the others; a part may be empty, `None`), and the bytes written.
fn write_run(
    dir: &Path,
    io: &file::SpoolIo,
    schema: &SchemaRef,
    chunks: SortedChunks,
    encoder: &KeyCodec,
    boundary: Option<&BatchKeys>,
) -> Result<(Vec<Option<SpilledRun>>, u64)> {
    let mut parts: Vec<RunWriter> = Vec::new();
    parts.push(RunWriter::new(dir, io, schema));
    if boundary.is_some() {
        parts.push(RunWriter::new(dir, io, schema));
    }
    let mut at = 0usize;
    for chunk in chunks {
        let chunk = chunk?;
        let split = match (boundary, at) {
            (Some(b), 0) => {
                // Sorted: the rows from the boundary on are the chunk's tail.
                let keys = encoder.encode(&chunk)?;
                let n = chunk.num_rows();
                let (mut lo, mut hi) = (0, n);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if keys.cmp(mid, b, 0) == std::cmp::Ordering::Less {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                let first_high = lo;
                if first_high < n {
                    at = 1;
                }
                first_high
            }
            _ => 0,
        };
        if split > 0 {
            parts[0].write(&chunk.slice(0, split))?;
        }
        if split < chunk.num_rows() {
            parts[at].write(&chunk.slice(split, chunk.num_rows() - split))?;
        }
    }
    let mut bytes = 0;
    let mut runs = Vec::with_capacity(parts.len());
    for p in parts {
        let (run, len) = p.finish()?;
        bytes += len;
        runs.push(run);
    }
    Ok((runs, bytes))
}

/// One run's file, created at its first rows.
struct RunWriter<'a> {
    dir: &'a Path,
    io: &'a file::SpoolIo,
    schema: &'a SchemaRef,
    open: Option<StreamWriter<file::SpoolWriter>>,
}

impl<'a> RunWriter<'a> {
    fn new(dir: &'a Path, io: &'a file::SpoolIo, schema: &'a SchemaRef) -> RunWriter<'a> {
        RunWriter {
            dir,
            io,
            schema,
            open: None,
        }
    }

    fn write(&mut self, rows: &RecordBatch) -> Result<()> {
        if self.open.is_none() {
            self.open = Some(StreamWriter::try_new_with_options(
                file::create(self.dir, self.io)?,
                self.schema,
                // Uncompressed: LZ4 took a tenth of a shuffled full load's CPU and saved a
                // fifth of the bytes.
                IpcWriteOptions::default(),
            )?);
        }
        if let Some(w) = &mut self.open {
            w.write(rows)?;
        }
        Ok(())
    }

    /// The run (`None`: no rows) and its bytes.
    fn finish(self) -> Result<(Option<SpilledRun>, u64)> {
        let dir = self.dir;
        let Some(mut w) = self.open else {
            return Ok((None, 0));
        };
        w.finish()?;
        let (file, len) = w
            .into_inner()?
            .finish()
            .map_err(|e| Error::io(dir.display().to_string(), e))?;
        Ok((Some(SpilledRun { file }), len))
    }
}

/// The key and sequence columns of `batches`, each concatenated.
fn concat_columns(
    batches: &[RecordBatch],
    key: &[usize],
    seq: usize,
) -> Result<(Vec<ArrayRef>, ArrayRef)> {
    let column = |i: usize| -> Result<ArrayRef> {
        let parts: Vec<&dyn arrow_array::Array> =
            batches.iter().map(|b| b.column(i).as_ref()).collect();
        Ok(arrow_select::concat::concat(&parts)?)
    };
    let keys = key.iter().map(|&k| column(k)).collect::<Result<_>>()?;
    Ok((keys, column(seq)?))
}

/// Sorted rows gathered from held batches, a chunk at a time.
struct SortedChunks {
    batches: Vec<RecordBatch>,
    positions: Vec<(usize, usize)>,
    at: usize,
}

impl SortedChunks {
    /// The key of the middle row, as a boundary: with the smallest sequence number, so every
    /// row of that key compares at or above it.
    fn median_key(&self, encoder: &KeyCodec) -> Result<BatchKeys> {
        let (b, row) = self.positions[self.positions.len() / 2];
        let batch = &self.batches[b];
        let keys: Vec<ArrayRef> = encoder
            .key()
            .iter()
            .map(|&k| batch.column(k).slice(row, 1))
            .collect();
        let seq: ArrayRef = Arc::new(arrow_array::UInt64Array::from(vec![0u64]));
        encoder.encode_columns(keys, Some(seq))
    }
}

impl Iterator for SortedChunks {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.positions.len() {
            return None;
        }
        let end = (self.at + RUN_BATCH_ROWS).min(self.positions.len());
        let refs: Vec<&RecordBatch> = self.batches.iter().collect();
        let chunk =
            arrow_select::interleave::interleave_record_batch(&refs, &self.positions[self.at..end]);
        self.at = end;
        Some(chunk.map_err(Error::from))
    }
}

/// A run in the spool folder: an unnamed file (unlinked once created, so nothing is left behind
/// whatever happens to the process).
struct SpilledRun {
    file: Arc<File>,
}

impl SpilledRun {
    fn read(
        self,
        io: &file::SpoolIo,
    ) -> Result<impl Iterator<Item = Result<RecordBatch>> + Send + use<>> {
        // A merge reads every run at once: a buffer each (a batch is read whole anyway).
        let reader = file::SpoolReader::new(self.file, io, RUN_READ_BUFFER)
            .map_err(|e| Error::io("spool file", e))?;
        let reader = StreamReader::try_new(reader, None)?;
        Ok(reader.map(|b| b.map_err(Error::from)))
    }
}
