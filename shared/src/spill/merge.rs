//! The merge of sorted runs: [`Merge`] yields every row of its inputs in one sorted stream of
//! batches of [`MERGE_BATCH_ROWS`] rows.
//!
//! Invariants: inputs are sorted by key then sequence number, and hold disjoint sequence
//! numbers (so ties between inputs never decide anything; the earlier input wins them); memory
//! is one batch per input plus the pending output rows.

use arrow_array::RecordBatch;

use super::keys::{BatchKeys, KeyCodec};
use crate::error::Result;

/// Rows per batch that a merge yields.
pub(crate) const MERGE_BATCH_ROWS: usize = 8192;

/// An input of a merge.
pub(super) type Source = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

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
    encoder: KeyCodec,
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
    pub(super) fn new(
        encoder: KeyCodec,
        sources: Vec<Source>,
        spilled_bytes: u64,
    ) -> Result<Merge> {
        let mut m = Merge {
            ints: encoder.is_int().then(Vec::new),
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

pub(super) fn int_order(key: i64, seq: u64) -> u128 {
    (u128::from(key as u64 ^ (1 << 63)) << 64) | u128::from(seq)
}

impl Iterator for Merge {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_sorted().transpose()
    }
}

fn next_batch(source: &mut Source, encoder: &KeyCodec) -> Result<Option<(RecordBatch, BatchKeys)>> {
    for b in source.by_ref() {
        let b = b?;
        if b.num_rows() > 0 {
            let keys = encoder.encode(&b)?;
            return Ok(Some((b, keys)));
        }
    }
    Ok(None)
}
