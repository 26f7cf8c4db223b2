//! Key indexes: the sorted integer key column of a data file, packed, in memory and beside the
//! file in storage.
//!
//! Why: a change file's keys must be found in the table's live rows, and the changed keys of a
//! DMS file usually fall in every row group of every large file (updates of old rows at random).
//! Reading and decompressing a large file's key column for that (at 10M rows 80 MB of `i64`)
//! was most of a cold invocation. Sorted keys differ little from one to the next: as deltas in
//! LEB128 varints they take one or two bytes a key (dense ids: one), and zstd shrinks that to
//! almost nothing.
//!
//! In memory, [`PackedKeys`] holds blocks of [`BLOCK`] keys: each block's first key (plain, so
//! a search gallops over block heads) and the varint deltas of the rest. A search for sorted
//! keys decodes only the blocks it lands in.
//!
//! In storage ([`stored`]) an index is cut in pages of [`stored::PAGE_KEYS`] keys, each a
//! [`PackedKeys`] of its own, with a directory of the pages' key ranges: a lookup reads the
//! directory and then only the pages its keys can be in (range reads), so its cost follows the
//! number of changes, not the size of the table, and a process caches the pages it used, not
//! whole files' keys.

mod stored;

pub(crate) use stored::{
    IndexWriter, KEY_INDEX_SUFFIX, KEY_PAGES_SUFFIX, PageDir, decompressor, index_path, pages_path,
    upload_index,
};

use crate::error::{Error, Result};

/// Keys per block: a search decodes at most one block per key it looks for.
pub(crate) const BLOCK: usize = 128;

/// Data files with fewer rows get no stored index: their key column is one small read.
pub(crate) const INDEX_MIN_ROWS: u64 = super::parquet::ROW_GROUP_ROWS as u64;

/// A sorted integer key column, packed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PackedKeys {
    /// Per block: its first key, and where the deltas of its other keys start in `deltas`.
    heads: Vec<(i64, u64)>,
    /// LEB128 varints of `key[i] - key[i - 1]` for every key that does not start a block.
    deltas: Vec<u8>,
    len: usize,
    /// Per block: its keys are consecutive integers (every delta is 1), as in a full load of
    /// dense ids. A search computes a key's place in such a block instead of decoding it.
    dense: Vec<bool>,
}

/// Builds [`PackedKeys`] from keys in ascending order.
#[derive(Default)]
pub(crate) struct PackedBuilder {
    keys: PackedKeys,
    prev: i64,
}

impl PackedBuilder {
    /// Appends `values`; `false` (and the builder is spent) if they do not ascend.
    pub(crate) fn extend(&mut self, values: &[i64]) -> bool {
        for &v in values {
            let k = &mut self.keys;
            if k.len.is_multiple_of(BLOCK) {
                if k.len > 0 && v < self.prev {
                    return false;
                }
                k.heads.push((v, k.deltas.len() as u64));
            } else {
                if v < self.prev {
                    return false;
                }
                // v >= prev, so the difference fits u64 whatever the signs.
                put_varint(&mut k.deltas, v.wrapping_sub(self.prev) as u64);
            }
            k.len += 1;
            self.prev = v;
        }
        true
    }

    pub(crate) fn finish(mut self) -> PackedKeys {
        self.keys.deltas.shrink_to_fit();
        self.keys.heads.shrink_to_fit();
        self.keys.dense = dense_blocks(&self.keys.heads, &self.keys.deltas);
        self.keys
    }
}

/// Which blocks hold consecutive integers: every delta of the block is the one byte `1`.
fn dense_blocks(heads: &[(i64, u64)], deltas: &[u8]) -> Vec<bool> {
    (0..heads.len())
        .map(|b| {
            let start = heads[b].1 as usize;
            let end = heads.get(b + 1).map_or(deltas.len(), |h| h.1 as usize);
            deltas
                .get(start..end)
                .is_some_and(|d| d.iter().all(|&x| x == 1))
        })
        .collect()
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes the varint at `*at`; `None` past the end or on a malformed varint (a checksummed
/// index we wrote has neither; decoding must still not panic on any input).
fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Walks the keys from the start of a block.
struct Cursor<'a> {
    keys: &'a PackedKeys,
    pos: usize,
    value: i64,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn at_block(keys: &'a PackedKeys, block: usize) -> Option<Cursor<'a>> {
        let (value, at) = *keys.heads.get(block)?;
        Some(Cursor {
            keys,
            pos: block * BLOCK,
            value,
            at: at as usize,
        })
    }

    /// Moves to the next key; `false` at the end.
    fn advance(&mut self) -> bool {
        self.pos += 1;
        if self.pos >= self.keys.len {
            return false;
        }
        if self.pos.is_multiple_of(BLOCK) {
            match self.keys.heads.get(self.pos / BLOCK) {
                Some(&(v, at)) => {
                    self.value = v;
                    self.at = at as usize;
                    true
                }
                None => false,
            }
        } else {
            match get_varint(&self.keys.deltas, &mut self.at) {
                Some(d) => {
                    self.value = self.value.wrapping_add(d as i64);
                    true
                }
                None => false,
            }
        }
    }
}

impl PackedKeys {
    /// Memory held.
    pub(crate) fn size(&self) -> usize {
        self.heads.capacity() * std::mem::size_of::<(i64, u64)>()
            + self.deltas.capacity()
            + self.dense.capacity()
    }

    /// In a dense block, moves the cursor to `key` (above the cursor's key) if the block holds
    /// it, else to the block's last key: where decoding one delta at a time would stop.
    fn skip_dense(&self, c: &mut Cursor<'_>, key: i64) {
        let b = c.pos / BLOCK;
        if !self.dense.get(b).copied().unwrap_or(false) {
            return;
        }
        let (head, start) = self.heads[b];
        let block_len = (self.len - b * BLOCK).min(BLOCK);
        // Keys head, head + 1, ..., head + block_len - 1; the cursor is at one of them.
        let want = (i128::from(key) - i128::from(head)).min(block_len as i128 - 1);
        let now = (c.pos - b * BLOCK) as i128;
        if want <= now {
            return;
        }
        let off = want as usize;
        c.pos = b * BLOCK + off;
        c.value = head.wrapping_add(off as i64);
        // One byte per delta: the next one to read is the `off`-th.
        c.at = start as usize + off;
    }

    /// Positions of `keys` (ascending by value, distinct; each with its index in the caller's
    /// key batch): `(position, index)` for every stored key equal to one of them.
    ///
    /// One cursor walks forward through the keys for the whole search: a key in the block the
    /// cursor is in continues from where the last one stopped, and a key further on jumps to
    /// the block its first occurrence must be in (galloping over block heads). Each block is
    /// decoded at most once, however many keys land in it (a small file of a bucketed table
    /// spans the whole key range, so every one of a change's keys lands in it).
    pub(crate) fn search(&self, keys: &[(i64, usize)]) -> Vec<(i64, usize)> {
        let mut hits = Vec::new();
        let n = self.heads.len();
        let Some(mut c) = Cursor::at_block(self, 0) else {
            return hits;
        };
        for &(key, idx) in keys {
            if c.value < key {
                // The last block whose head is below the key; the cursor's block has a head
                // below it already, so only later blocks are looked at.
                let here = c.pos / BLOCK;
                let (mut lo, mut hi, mut step) = (here + 1, here + 1, 1usize);
                while hi < n && self.heads[hi].0 < key {
                    lo = hi + 1;
                    hi = hi.saturating_add(step).min(n);
                    step = step.saturating_mul(2);
                }
                let target = lo + self.heads[lo.min(n)..hi].partition_point(|h| h.0 < key) - 1;
                if target > here {
                    match Cursor::at_block(self, target) {
                        Some(at) => c = at,
                        None => break,
                    }
                }
                self.skip_dense(&mut c, key);
                while c.value < key {
                    if !c.advance() {
                        // Past the last key: so is every key still to come.
                        return hits;
                    }
                }
            }
            while c.value == key {
                hits.push((c.pos as i64, idx));
                if !c.advance() {
                    return hits;
                }
            }
        }
        hits
    }

    /// Every key, in order.
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<i64> {
        let mut out = Vec::with_capacity(self.len);
        if let Some(mut c) = Cursor::at_block(self, 0) {
            out.push(c.value);
            while c.advance() {
                out.push(c.value);
            }
        }
        out
    }

    /// The page body as stored ([`stored`]): block heads (first key i64, delta offset u64)
    /// then the delta bytes.
    pub(crate) fn body(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.heads.len() * 16 + self.deltas.len());
        for (first, at) in &self.heads {
            body.extend_from_slice(&first.to_le_bytes());
            body.extend_from_slice(&at.to_le_bytes());
        }
        body.extend_from_slice(&self.deltas);
        body
    }

    /// Keys from a [`PackedKeys::body`] of `len` keys. `Err`: the bytes do not hold that.
    pub(crate) fn from_body(body: &[u8], len: usize) -> Result<Self> {
        let blocks = len.div_ceil(BLOCK);
        let head_bytes = blocks
            .checked_mul(16)
            .filter(|&h| h <= body.len())
            .ok_or_else(|| Error::Table(format!("key index page too short for {len} keys")))?;
        let (head_bytes, deltas) = body.split_at(head_bytes);
        let mut heads = Vec::with_capacity(blocks);
        let mut prev_at = 0u64;
        for h in head_bytes.chunks_exact(16) {
            let (first, at) = h.split_at(8);
            let first = i64::from_le_bytes(first.try_into().map_err(index_error)?);
            let at = u64::from_le_bytes(at.try_into().map_err(index_error)?);
            if at < prev_at || at > deltas.len() as u64 {
                return Err(Error::Table("key index block offsets out of order".into()));
            }
            prev_at = at;
            heads.push((first, at));
        }
        let dense = dense_blocks(&heads, deltas);
        Ok(PackedKeys {
            heads,
            deltas: deltas.to_vec(),
            len,
            dense,
        })
    }
}

fn index_error(e: impl std::fmt::Display) -> Error {
    Error::Table(format!("key index: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn pack(v: &[i64]) -> PackedKeys {
        let mut b = PackedBuilder::default();
        assert!(b.extend(v));
        b.finish()
    }

    /// The positions a plain scan finds.
    pub(super) fn scan(v: &[i64], keys: &[(i64, usize)]) -> Vec<(i64, usize)> {
        let mut hits = Vec::new();
        for &(k, idx) in keys {
            for (i, x) in v.iter().enumerate() {
                if *x == k {
                    hits.push((i as i64, idx));
                }
            }
        }
        hits
    }

    #[test]
    fn keys_that_do_not_ascend_are_refused() {
        let mut b = PackedBuilder::default();
        assert!(b.extend(&[1, 2, 3]));
        assert!(!b.extend(&[2]));
        let mut b = PackedBuilder::default();
        let mut v: Vec<i64> = (0..BLOCK as i64).collect();
        v.push(-1); // the head of the second block
        assert!(!b.extend(&v));
    }

    proptest! {
        #[test]
        /// Runs of consecutive keys (dense blocks, searched without decoding) broken by gaps
        /// and repeated keys (blocks that are not dense).
        #[test]
        fn search_of_dense_runs_matches_a_scan(
            start in -1000i64..1000,
            runs in proptest::collection::vec((1usize..300, 0i64..3, 0usize..3), 1..6),
            wanted in proptest::collection::btree_set(-1100i64..2900, 0..200),
        ) {
            let mut v = Vec::new();
            let mut next = start;
            for (len, gap, repeats) in runs {
                for _ in 0..len {
                    v.push(next);
                    next += 1;
                }
                for _ in 0..repeats {
                    v.push(next - 1);
                }
                next += gap;
            }
            let keys: Vec<(i64, usize)> =
                wanted.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
            let p = pack(&v);
            prop_assert_eq!(p.search(&keys), scan(&v, &keys));
            let back = PackedKeys::from_body(&p.body(), v.len()).unwrap();
            prop_assert_eq!(back.search(&keys), scan(&v, &keys));
        }

        #[test]
        fn search_matches_a_scan(
            mut v in proptest::collection::vec(prop_oneof![
                -300i64..300,
                Just(i64::MIN),
                Just(i64::MAX),
            ], 0..700),
            mut wanted in proptest::collection::btree_set(-310i64..310, 0..80),
        ) {
            v.sort_unstable();
            wanted.insert(i64::MIN);
            let keys: Vec<(i64, usize)> =
                wanted.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
            let p = pack(&v);
            prop_assert_eq!(p.to_vec(), v.clone());
            prop_assert_eq!(p.search(&keys), scan(&v, &keys));
            let back = PackedKeys::from_body(&p.body(), v.len()).unwrap();
            prop_assert_eq!(back.search(&keys), scan(&v, &keys));
        }
    }
}
