//! Settling: of the rows of one key (sorted by key, then sequence number), the latest change
//! wins, decided by the one rule of [`crate::dedupe::rule`]; and the two key ranges of a split
//! sort settled at once, the upper on threads of its own.
//!
//! Invariants: rows arrive sorted by key, then sequence number, so a key's rows are adjacent
//! and in input order (a row's place in its batch ranks it as its sequence number does); a key
//! whose rows reach the end of a batch waits for the next batch (`carry`), so each key is
//! settled once, whatever the cuts; `duplicates` counts every row that lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_row::RowConverter;
use arrow_schema::SchemaRef;
use iceberg::spec::DataFile;

use super::output::{Output, ToWriter, WRITE_AHEAD, abandon, write_rows};
use super::{Counts, StreamSpec, Target, input_kind};
use crate::dedupe::rule::{Rank, order_converter};
use crate::error::{Error, Result};
use crate::files::deletes::FileDeletes;
use crate::locate::FileKind;
use crate::lookup::LookupStats;
use crate::spill::{BatchKeys, KeyCodec, Merge};

/// Settles the lower key range of a sort here (`settle`) while the upper one, if the sort was
/// split, is settled, looked up and written on threads of its own ([`apply_range`]): merging
/// and encoding then use both cores. The upper range's outcome joins `output`'s, or its files
/// are deleted if the lower range fails. A range that fails stops the other at its next batch,
/// so the error is reported without waiting for the other half of the input.
pub(super) fn settle_ranges(
    spec: &StreamSpec,
    handle: &tokio::runtime::Handle,
    schema: &SchemaRef,
    lower: Merge,
    upper: Option<Merge>,
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
pub(super) struct Range {
    pub(super) data: Vec<(i32, DataFile)>,
    pub(super) deletes: BTreeMap<String, FileDeletes>,
    pub(super) counts: Counts,
    pub(super) lookup: LookupStats,
    pub(super) duplicates: usize,
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
    merge: Merge,
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
            let mut winners =
                Winners::new(schema, &output.key_idx, &output.order_idx, input_kind(spec))?;
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

/// Settles sorted rows: of the rows of one key, the latest change wins ([`Rank`]: the ordering
/// columns, then input order). A key's rows may span batches: the last key of a batch waits for
/// the next.
pub(super) struct Winners {
    schema: SchemaRef,
    codec: KeyCodec,
    order: Option<(Vec<usize>, RowConverter)>,
    /// The kind of every row (an input never mixes them).
    kind: FileKind,
    carry: Option<RecordBatch>,
    pub(super) duplicates: usize,
}

impl Winners {
    pub(super) fn new(
        schema: &SchemaRef,
        key_idx: &[usize],
        order_idx: &[usize],
        kind: FileKind,
    ) -> Result<Winners> {
        let order = if order_idx.is_empty() {
            None
        } else {
            let conv = order_converter(
                order_idx
                    .iter()
                    .map(|&i| schema.field(i).data_type().clone()),
            )?;
            Some((order_idx.to_vec(), conv))
        };
        Ok(Winners {
            schema: schema.clone(),
            codec: KeyCodec::keys(schema, key_idx)?,
            order,
            kind,
            carry: None,
            duplicates: 0,
        })
    }

    /// The winners of the keys `b` completes.
    pub(super) fn push(&mut self, b: RecordBatch) -> Result<Vec<RecordBatch>> {
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
    pub(super) fn finish(&mut self) -> Result<Option<RecordBatch>> {
        match self.carry.take() {
            Some(c) => self.settle(c, true),
            None => Ok(None),
        }
    }

    /// Whether row `i` of `a` and row `j` of `b` have the same key.
    fn same_key(&self, a: &RecordBatch, i: usize, b: &RecordBatch, j: usize) -> Result<bool> {
        let (x, y) = (
            self.codec.encode(&a.slice(i, 1))?,
            self.codec.encode(&b.slice(j, 1))?,
        );
        Ok(x.cmp(0, &y, 0) == std::cmp::Ordering::Equal)
    }

    fn settle(&mut self, b: RecordBatch, last: bool) -> Result<Option<RecordBatch>> {
        let n = b.num_rows();
        if n == 0 {
            return Ok(None);
        }
        let keys: BatchKeys = self.codec.encode(&b)?;
        let order = match &self.order {
            Some((idx, conv)) => {
                let cols: Vec<ArrayRef> = idx.iter().map(|&i| b.column(i).clone()).collect();
                Some(conv.convert_columns(&cols)?)
            }
            None => None,
        };
        // Sorted by sequence number within a key, a row's place in the batch is its place in
        // the input.
        let rank = |x: usize| Rank {
            kind: self.kind,
            order: order.as_ref().map(|o| o.row(x)),
            place: x,
        };
        let mut picked: Vec<u32> = Vec::with_capacity(n);
        let mut start = 0usize;
        for i in 1..=n {
            if i < n && keys.same(i, i - 1) {
                continue;
            }
            if i == n && !last {
                // The last key may go on in the next batch.
                self.carry = Some(b.slice(start, n - start));
                break;
            }
            // A key changed once (the common case) compares nothing.
            let winner = (start..i)
                .reduce(|w, g| if rank(g) > rank(w) { g } else { w })
                .unwrap_or(i - 1);
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
