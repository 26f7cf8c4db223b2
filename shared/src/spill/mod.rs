//! Rows sorted by key in bounded memory: an external merge sort over the spool folder.
//!
//! A commit's input can be larger than memory (a 1 GB full-load file, a 1 GB change file), and
//! its rows must come out sorted by key: data files are written sorted (what makes lookups and
//! key indexes cheap), and duplicates of one key must meet to be settled. [`Sorter`] holds rows
//! up to half a byte budget, then sorts them and writes them to an unnamed file in the spool
//! folder as a *run* (Arrow IPC) on a thread of its own while the next half fills; [`Merge`]
//! then reads every run a batch at a time and merges them; split in two key ranges, the two
//! are merged apart ([`Sorter::finish_ranges`]). Memory: the budget while sorting, and one
//! batch of `RUN_BATCH_ROWS` and two read buffers of `RUN_READ_BUFFER` per run (per key
//! range) while merging. Run files bypass the page cache ([`file`]).
//!
//! Rows carry a sequence number column (their place in the input): rows are ordered by key,
//! then by sequence number, so the changes of one key come out in input order.

mod file;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;

use crate::error::{Error, Result};

/// Rows per batch that a merge yields.
pub(crate) const MERGE_BATCH_ROWS: usize = 8192;

/// Rows per batch a run is written in: a merge holds a batch of every run (of each key range)
/// at once, so smaller than the merge's own batches; and a batch (~80 KB at 80 bytes a row)
/// fits in a read buffer, so that the next buffer is read while this one is merged (at 4,096
/// rows a batch spanned three buffers and the merge waited for each).
const RUN_BATCH_ROWS: usize = 1024;

/// Each of a run's two read buffers while merging (one read while the other is filled: a
/// merge holds two per run, so small; direct reads of 64 KiB took twice as long per byte as
/// 256 KiB on the disk we measured).
const RUN_READ_BUFFER: usize = 128 * 1024;

/// How rows are compared: by the key columns, then by the sequence number column.
#[derive(Clone)]
pub(crate) struct SortSpec {
    pub(crate) key: Vec<usize>,
    pub(crate) seq: usize,
}

/// The sort keys of one batch, comparable across batches of one sort.
enum BatchKeys {
    /// A single 64-bit integer key (the common case): compared as integers.
    Ints { keys: Vec<i64>, seq: Vec<u64> },
    /// Row-encoded key columns, then the sequence number.
    Rows(Rows),
}

impl BatchKeys {
    fn cmp(&self, i: usize, other: &BatchKeys, j: usize) -> std::cmp::Ordering {
        match (self, other) {
            (BatchKeys::Ints { keys: a, seq: sa }, BatchKeys::Ints { keys: b, seq: sb }) => {
                (a[i], sa[i]).cmp(&(b[j], sb[j]))
            }
            (BatchKeys::Rows(a), BatchKeys::Rows(b)) => a.row(i).cmp(&b.row(j)),
            // One sort converts every batch the same way.
            _ => std::cmp::Ordering::Equal,
        }
    }
}

/// Converts batches to [`BatchKeys`], the same way for every batch of one sort.
#[derive(Clone)]
pub(crate) struct KeyEncoder {
    spec: SortSpec,
    /// `None`: a single Int64 key.
    rows: Option<Arc<RowConverter>>,
}

impl KeyEncoder {
    pub(crate) fn new(schema: &SchemaRef, spec: SortSpec) -> Result<KeyEncoder> {
        let single_int = matches!(spec.key.as_slice(), [k]
            if schema.field(*k).data_type() == &arrow_schema::DataType::Int64);
        let rows = if single_int {
            None
        } else {
            let mut fields: Vec<SortField> = spec
                .key
                .iter()
                .map(|&k| SortField::new(schema.field(k).data_type().clone()))
                .collect();
            fields.push(SortField::new(arrow_schema::DataType::UInt64));
            Some(Arc::new(RowConverter::new(fields)?))
        };
        Ok(KeyEncoder { spec, rows })
    }

    fn encode(&self, b: &RecordBatch) -> Result<BatchKeys> {
        let keys: Vec<ArrayRef> = self.spec.key.iter().map(|&k| b.column(k).clone()).collect();
        self.encode_columns(keys, b.column(self.spec.seq).clone())
    }

    fn encode_columns(&self, mut keys: Vec<ArrayRef>, seq: ArrayRef) -> Result<BatchKeys> {
        match &self.rows {
            None => Ok(BatchKeys::Ints {
                keys: keys[0]
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .values()
                    .to_vec(),
                seq: seq.as_primitive::<UInt64Type>().values().to_vec(),
            }),
            Some(conv) => {
                keys.push(seq);
                Ok(BatchKeys::Rows(conv.convert_columns(&keys)?))
            }
        }
    }

    /// Indices that sort rows by key, then sequence number, given their key and sequence
    /// columns.
    fn sort_indices(&self, keys: Vec<ArrayRef>, seq: ArrayRef) -> Result<Vec<u32>> {
        let n = seq.len();
        let mut idx: Vec<u32> = (0..n as u32).collect();
        match self.encode_columns(keys, seq)? {
            BatchKeys::Ints { keys, seq } => {
                let mut pairs: Vec<(i64, u64, u32)> = keys
                    .iter()
                    .zip(&seq)
                    .zip(0u32..)
                    .map(|((k, s), i)| (*k, *s, i))
                    .collect();
                pairs.sort_unstable();
                idx = pairs.into_iter().map(|(_, _, i)| i).collect();
            }
            BatchKeys::Rows(rows) => {
                idx.sort_unstable_by(|a, b| rows.row(*a as usize).cmp(&rows.row(*b as usize)));
            }
        }
        Ok(idx)
    }
}

/// Collects rows and sorts them, spilling sorted runs to `dir` beyond `budget` bytes.
///
/// A run is sorted and written on a thread of its own while the next one fills: reading the
/// input (CSV parsing) and sorting then use a core each. So that two runs in memory stay within
/// `budget`, a run is half of it.
pub(crate) struct Sorter {
    schema: SchemaRef,
    encoder: KeyEncoder,
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
            encoder: KeyEncoder::new(&schema, spec)?,
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
    fn runs(&self) -> usize {
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

/// An input of a merge.
type Source = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

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
    fn start(schema: SchemaRef, encoder: KeyEncoder, dir: PathBuf, split: bool) -> Result<Spiller> {
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
fn sorted(batches: Vec<RecordBatch>, encoder: &KeyEncoder) -> Result<Option<SortedChunks>> {
    if batches.is_empty() {
        return Ok(None);
    }
    // Sort the (batch, row) pairs by the rows' keys: only the key and sequence columns are
    // gathered to sort; the rows themselves are gathered a chunk at a time.
    let (keys, seq) = concat_columns(&batches, &encoder.spec)?;
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
    encoder: &KeyEncoder,
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
fn concat_columns(batches: &[RecordBatch], spec: &SortSpec) -> Result<(Vec<ArrayRef>, ArrayRef)> {
    let column = |i: usize| -> Result<ArrayRef> {
        let parts: Vec<&dyn arrow_array::Array> =
            batches.iter().map(|b| b.column(i).as_ref()).collect();
        Ok(arrow_select::concat::concat(&parts)?)
    };
    let keys = spec.key.iter().map(|&k| column(k)).collect::<Result<_>>()?;
    Ok((keys, column(spec.seq)?))
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
    fn median_key(&self, encoder: &KeyEncoder) -> Result<BatchKeys> {
        let (b, row) = self.positions[self.positions.len() / 2];
        let batch = &self.batches[b];
        let keys: Vec<ArrayRef> = encoder
            .spec
            .key
            .iter()
            .map(|&k| batch.column(k).slice(row, 1))
            .collect();
        let seq: ArrayRef = Arc::new(arrow_array::UInt64Array::from(vec![0u64]));
        encoder.encode_columns(keys, seq)
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

/// One input of a merge: its current batch and position.
struct Head {
    source: Source,
    batch: RecordBatch,
    keys: BatchKeys,
    row: usize,
    /// Index of `batch` in the merge's `slots`.
    slot: usize,
    /// No rows left: loses every match.
    done: bool,
}

/// An empty node of the tournament while it is built.
const EMPTY: usize = usize::MAX;

/// Sorted inputs merged into one sorted stream of batches.
///
/// A tournament (loser) tree picks the next row: a row costs one match per level (log2 of the
/// inputs), half what a binary heap's sift costs. With a single integer key, each input's
/// current key and sequence number are kept beside the tree as one `u128` ordered as they
/// are, so a match compares two integers in one small array.
pub(crate) struct Merge {
    encoder: KeyEncoder,
    heads: Vec<Head>,
    /// Per head, its current row's [`int_order`] when the key is a single integer
    /// (`u128::MAX` once it has no rows).
    ints: Option<Vec<u128>>,
    /// `tree[0]`: the head whose row comes next; `tree[1..]`: the loser of each match (the
    /// inputs are the leaves `heads.len()..2 * heads.len()`, node `n`'s parent is `n / 2`).
    tree: Vec<usize>,
    /// Batches the pending output rows come from.
    slots: Vec<RecordBatch>,
    pending: Vec<(usize, usize)>,
    /// Bytes the sort wrote to the spool folder.
    pub(crate) spilled_bytes: u64,
}

impl Merge {
    fn new(encoder: KeyEncoder, sources: Vec<Source>, spilled_bytes: u64) -> Result<Merge> {
        let mut m = Merge {
            ints: encoder.rows.is_none().then(Vec::new),
            encoder,
            heads: Vec::new(),
            tree: Vec::new(),
            slots: Vec::new(),
            pending: Vec::new(),
            spilled_bytes,
        };
        for mut source in sources {
            if let Some((batch, keys)) = next_batch(&mut source, &m.encoder)? {
                m.slots.push(batch.clone());
                m.heads.push(Head {
                    source,
                    batch,
                    keys,
                    row: 0,
                    slot: m.slots.len() - 1,
                    done: false,
                });
            }
        }
        if let Some(ints) = &mut m.ints {
            *ints = m.heads.iter().map(|h| current_int(&h.keys, 0)).collect();
        }
        m.build();
        Ok(m)
    }

    /// Plays every input up the tree: a node keeps the first input that reaches it until the
    /// other side's arrives, then the loser, and the winner goes on.
    fn build(&mut self) {
        let k = self.heads.len();
        self.tree = vec![EMPTY; k.max(1)];
        for leaf in 0..k {
            let mut c = leaf;
            let mut node = (leaf + k) / 2;
            while node > 0 {
                let t = self.tree[node];
                if t == EMPTY {
                    self.tree[node] = c;
                    c = EMPTY;
                    break;
                }
                if self.beats(t, c) {
                    self.tree[node] = c;
                    c = t;
                }
                node /= 2;
            }
            if c != EMPTY {
                self.tree[0] = c;
            }
        }
    }

    /// Whether head `a`'s row comes before head `b`'s (ties: the earlier input, which holds
    /// the earlier sequence numbers).
    fn beats(&self, a: usize, b: usize) -> bool {
        if let Some(ints) = &self.ints {
            return (ints[a], a) < (ints[b], b);
        }
        let (x, y) = (&self.heads[a], &self.heads[b]);
        if x.done || y.done {
            return !x.done || (y.done && a < b);
        }
        match x.keys.cmp(x.row, &y.keys, y.row) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => a < b,
        }
    }

    /// Moves head `h` to its next row (its source's next batch past the last one).
    fn advance(&mut self, h: usize) -> Result<()> {
        let head = &mut self.heads[h];
        head.row += 1;
        if head.row >= head.batch.num_rows() {
            match next_batch(&mut head.source, &self.encoder)? {
                Some((batch, keys)) => {
                    self.slots.push(batch.clone());
                    let head = &mut self.heads[h];
                    head.batch = batch;
                    head.keys = keys;
                    head.row = 0;
                    head.slot = self.slots.len() - 1;
                }
                None => {
                    head.done = true;
                    if let Some(ints) = &mut self.ints {
                        ints[h] = u128::MAX;
                    }
                    return Ok(());
                }
            }
        }
        if let Some(ints) = &mut self.ints {
            let head = &self.heads[h];
            ints[h] = current_int(&head.keys, head.row);
        }
        Ok(())
    }

    /// Replays head `w`'s path (it moved to its next row): it meets the loser kept at each
    /// node on the way up, and the winner of the last match comes next.
    fn replay(&mut self, w: usize, k: usize) {
        let mut c = w;
        let mut node = (w + k) / 2;
        match &self.ints {
            Some(ints) => {
                while node > 0 {
                    let t = self.tree[node];
                    if (ints[t], t) < (ints[c], c) {
                        self.tree[node] = c;
                        c = t;
                    }
                    node /= 2;
                }
            }
            None => {
                while node > 0 {
                    let t = self.tree[node];
                    if self.beats(t, c) {
                        self.tree[node] = c;
                        c = t;
                    }
                    node /= 2;
                }
            }
        }
        self.tree[0] = c;
    }

    /// The next sorted batch of up to [`MERGE_BATCH_ROWS`] rows.
    fn next_sorted(&mut self) -> Result<Option<RecordBatch>> {
        let k = self.heads.len();
        while self.pending.len() < MERGE_BATCH_ROWS {
            let w = self.tree[0];
            if w == EMPTY || self.heads[w].done {
                break;
            }
            let head = &self.heads[w];
            self.pending.push((head.slot, head.row));
            self.advance(w)?;
            self.replay(w, k);
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&RecordBatch> = self.slots.iter().collect();
        let out = arrow_select::interleave::interleave_record_batch(&refs, &self.pending)?;
        self.pending.clear();
        // Keep only the batches the heads are still in.
        let mut slots = Vec::with_capacity(self.heads.len());
        for head in self.heads.iter_mut().filter(|h| !h.done) {
            slots.push(head.batch.clone());
            head.slot = slots.len() - 1;
        }
        self.slots = slots;
        Ok(Some(out))
    }
}

/// Row `row`'s key and sequence number of an integer-keyed batch as one integer that orders
/// as the pair does (the key's sign bit flipped, so that negative keys come first).
fn current_int(keys: &BatchKeys, row: usize) -> u128 {
    match keys {
        BatchKeys::Ints { keys, seq } => int_order(keys[row], seq[row]),
        // One sort converts every batch the same way.
        BatchKeys::Rows(_) => 0,
    }
}

fn int_order(key: i64, seq: u64) -> u128 {
    (u128::from(key as u64 ^ (1 << 63)) << 64) | u128::from(seq)
}

impl Iterator for Merge {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_sorted().transpose()
    }
}

fn next_batch(
    source: &mut Source,
    encoder: &KeyEncoder,
) -> Result<Option<(RecordBatch, BatchKeys)>> {
    for b in source.by_ref() {
        let b = b?;
        if b.num_rows() > 0 {
            let keys = encoder.encode(&b)?;
            return Ok(Some((b, keys)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};
    use proptest::prelude::*;

    fn schema(string_key: bool) -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(
                "k",
                if string_key {
                    DataType::Utf8
                } else {
                    DataType::Int64
                },
                false,
            ),
            Field::new("v", DataType::Int64, true),
            Field::new("seq", DataType::UInt64, false),
        ]))
    }

    fn batch(schema: &SchemaRef, rows: &[(i64, i64, u64)], string_key: bool) -> RecordBatch {
        let k: ArrayRef = if string_key {
            Arc::new(StringArray::from_iter_values(
                // Offset so that text orders as the numbers do.
                rows.iter().map(|r| format!("{:08}", r.0 + 1_000_000)),
            ))
        } else {
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)))
        };
        RecordBatch::try_new(
            schema.clone(),
            vec![
                k,
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .expect("batch")
    }

    /// A sorter on `schema(string_key)` with `budget`, and `rows` (key, value) pushed in
    /// batches of `chunk`, each row's sequence number its place.
    fn sorter_of(
        rows: &[(i64, i64)],
        chunk: usize,
        budget: usize,
        string_key: bool,
        split: bool,
    ) -> Sorter {
        let s = schema(string_key);
        let dir = std::env::temp_dir().join("dms2iceberg-spill-tests");
        let mut sorter = Sorter::new(
            s.clone(),
            SortSpec {
                key: vec![0],
                seq: 2,
            },
            budget,
            &dir,
        )
        .expect("sorter");
        if split {
            sorter = sorter.split_in_two();
        }
        let with_seq: Vec<(i64, i64, u64)> = rows
            .iter()
            .enumerate()
            .map(|(i, (k, v))| (*k, *v, i as u64))
            .collect();
        for c in with_seq.chunks(chunk.max(1)) {
            sorter.push(batch(&s, c, string_key)).expect("push");
        }
        sorter
    }

    /// A merge's rows as (value, seq).
    fn values(merge: Merge) -> Vec<(i64, u64)> {
        let mut out = Vec::new();
        for b in merge {
            let b = b.expect("batch");
            let seq = b.column(2).as_primitive::<UInt64Type>();
            let v = b.column(1).as_primitive::<arrow_array::types::Int64Type>();
            for i in 0..b.num_rows() {
                out.push((v.value(i), seq.value(i)));
            }
        }
        out
    }

    fn sort_all(
        rows: &[(i64, i64)],
        chunk: usize,
        budget: usize,
        string_key: bool,
    ) -> (Vec<(i64, u64)>, usize) {
        let sorter = sorter_of(rows, chunk, budget, string_key, false);
        let runs = sorter.runs();
        (values(sorter.finish().expect("finish")), runs)
    }

    /// Sorts with the runs split in two key ranges: per range, the rows' (value, seq).
    fn sort_ranges(rows: &[(i64, i64)], chunk: usize, string_key: bool) -> Vec<Vec<(i64, u64)>> {
        sorter_of(rows, chunk, 0, string_key, true)
            .finish_ranges()
            .expect("finish")
            .into_iter()
            .map(values)
            .collect()
    }

    proptest! {
        /// Split in two key ranges, the ranges one after the other are a stable sort of the
        /// rows, and every row of a key is in one range.
        #[test]
        fn ranges_are_a_stable_sort_split_between_keys(
            keys in proptest::collection::vec(0i64..40, 1..2000),
            chunk in 1usize..500,
            string_key in any::<bool>(),
        ) {
            let rows: Vec<(i64, i64)> = keys.iter().enumerate().map(|(i, k)| (*k, i as i64)).collect();
            let ranges = sort_ranges(&rows, chunk, string_key);
            prop_assert_eq!(ranges.len(), 2);
            let mut expected = rows.clone();
            expected.sort_by_key(|r| r.0);
            let got: Vec<(i64, i64)> = ranges
                .iter()
                .flatten()
                .map(|(v, _)| (keys[*v as usize], *v))
                .collect();
            prop_assert_eq!(got, expected);
            let lower: std::collections::BTreeSet<i64> =
                ranges[0].iter().map(|(v, _)| keys[*v as usize]).collect();
            prop_assert!(ranges[1].iter().all(|(v, _)| !lower.contains(&keys[*v as usize])));
        }

        /// Whatever the budget (a run per batch, or none) and the key type, the merge yields
        /// every row once, ordered by key and then input order.
        #[test]
        fn merge_equals_a_stable_sort(
            keys in proptest::collection::vec(-25i64..25, 0..3000),
            chunk in 1usize..700,
            spill_every_batch in any::<bool>(),
            string_key in any::<bool>(),
        ) {
            let rows: Vec<(i64, i64)> = keys.iter().enumerate().map(|(i, k)| (*k, i as i64)).collect();
            let budget = if spill_every_batch { 0 } else { usize::MAX / 2 };
            let (out, runs) = sort_all(&rows, chunk, budget, string_key);
            if spill_every_batch {
                prop_assert_eq!(runs, rows.len().div_ceil(chunk));
            } else {
                prop_assert_eq!(runs, 0);
            }
            let mut expected: Vec<(i64, i64)> = rows.clone();
            expected.sort_by_key(|r| r.0); // stable: input order within a key
            let got: Vec<(i64, i64)> = out.iter().map(|(v, _)| (keys[*v as usize], *v)).collect();
            prop_assert_eq!(got, expected);
            prop_assert!(out.iter().all(|(v, seq)| *v as u64 == *seq));
        }
    }

    #[test]
    fn a_run_that_cannot_be_written_fails_the_sort() {
        // The spool folder is a path under a regular file: the spilling thread cannot create
        // its run, and the error reaches the caller (at a later push or at finish).
        let file = std::env::temp_dir().join(format!("dms2iceberg-spill-{}", uuid::Uuid::new_v4()));
        std::fs::write(&file, b"not a folder").expect("file");
        let s = schema(false);
        let mut sorter = Sorter::new(
            s.clone(),
            SortSpec {
                key: vec![0],
                seq: 2,
            },
            0,
            &file.join("spool"),
        )
        .expect("sorter");
        let mut failed = None;
        for i in 0..4u64 {
            if let Err(e) = sorter.push(batch(&s, &[(i as i64, 0, i)], false)) {
                failed = Some(e);
                break;
            }
        }
        let err = match failed {
            Some(e) => e,
            None => match sorter.finish() {
                Err(e) => e,
                Ok(_) => panic!("a sort whose runs cannot be written succeeded"),
            },
        };
        assert!(err.to_string().contains("spool"), "{err}");
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn integer_keys_order_as_their_pairs() {
        let pairs = [
            (i64::MIN, 0),
            (i64::MIN, u64::MAX - 1),
            (-1, 5),
            (0, 0),
            (0, 1),
            (1, 0),
            (i64::MAX, 0),
            (i64::MAX, u64::MAX - 1),
        ];
        for a in pairs {
            for b in pairs {
                assert_eq!(int_order(a.0, a.1).cmp(&int_order(b.0, b.1)), a.cmp(&b));
            }
            // An input with no rows left comes after every row.
            assert!(int_order(a.0, a.1) < u128::MAX);
        }
    }

    #[test]
    fn runs_spill_and_merge_in_order() {
        // 200k rows in batches of 10k with a 1 MiB budget: several runs.
        let n = 200_000i64;
        let rows: Vec<(i64, i64)> = (0..n).map(|i| ((i * 7919) % 1000, i)).collect();
        let (out, runs) = sort_all(&rows, 10_000, 0, false);
        assert!(runs >= 2, "expected spilled runs, got {runs}");
        assert_eq!(out.len(), n as usize);
        for w in out.windows(2) {
            let (a, b) = (rows[w[0].0 as usize].0, rows[w[1].0 as usize].0);
            assert!(a < b || (a == b && w[0].1 < w[1].1));
        }
    }
}
