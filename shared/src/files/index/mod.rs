//! Key indexes: the sorted integer key column of a data file, packed, in memory and beside the
//! file in storage.
//!
//! Why: a change file's keys must be found in the table's live rows, and the changed keys of a
//! DMS file usually fall in every row group of every large file (updates of old rows at random).
//! Reading and decompressing a large file's key column for that (at 10M rows 80 MB of `i64`)
//! was most of a cold invocation. Sorted keys differ little from one to the next: bit-packed
//! differences take a few bits a key (dense ids: none).
//!
//! In memory, [`PackedKeys`] holds blocks of [`BLOCK`] keys: each block's first key (plain, so
//! a search gallops over block heads) and the bit-packed differences of the rest. A search for
//! sorted keys walks only the blocks it lands in.
//!
//! In storage ([`stored`]) an index is cut in pages of [`stored::PAGE_KEYS`] keys, each a
//! [`PackedKeys`] of its own, with a directory of the pages' key ranges: a lookup reads the
//! directory and then only the pages its keys can be in (range reads), so its cost follows the
//! number of changes, not the size of the table, and a process caches the pages it used, not
//! whole files' keys.

mod stored;

pub(crate) use stored::{
    IndexWriter, KEY_INDEX_SUFFIX, KEY_PAGES_SUFFIX, PageDir, index_path, pages_path, store_index,
};

use crate::error::{Error, Result};

/// Keys per block: a search decodes at most one block per key it looks for.
pub(crate) const BLOCK: usize = 128;

/// Data files with fewer rows get no stored index: their key column is one small read.
pub(crate) const INDEX_MIN_ROWS: u64 = super::parquet::ROW_GROUP_ROWS as u64;

/// A sorted integer key column, packed: per block of [`BLOCK`] keys its first key (plain, so a
/// search gallops over block heads) and the differences from each key to the next, bit-packed
/// at the block's width above the block's smallest difference.
///
/// A block's bytes in `data`: its smallest difference `base` (LEB128 varint), the width `w`
/// (one byte, 0 to 64), then `w` bits per difference after `base`, least significant first.
/// Ids with gaps of 1 to 3 take 2 bits a key (a block's 127 differences in 32 bytes); dense
/// ids (every difference 1) take nothing beyond the two header bytes. The same bytes are what
/// a stored page holds ([`stored`]): a page is read, not decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PackedKeys {
    /// Per block: its first key, and where its bytes start in `data`.
    heads: Vec<(i64, u64)>,
    data: Vec<u8>,
    len: usize,
    /// Per block: its keys are consecutive integers (base 1, width 0), as in a full load of
    /// dense ids. A search computes a key's place in such a block instead of walking it.
    dense: Vec<bool>,
}

/// Builds [`PackedKeys`] from keys in ascending order.
#[derive(Default)]
pub(crate) struct PackedBuilder {
    keys: PackedKeys,
    /// The current block's keys.
    block: Vec<i64>,
    prev: Option<i64>,
    spent: bool,
}

impl PackedBuilder {
    /// Appends `values`; `false` (and the builder is spent) if they do not ascend.
    pub(crate) fn extend(&mut self, values: &[i64]) -> bool {
        if self.spent {
            return false;
        }
        for &v in values {
            if self.prev.is_some_and(|p| v < p) {
                self.spent = true;
                return false;
            }
            self.prev = Some(v);
            self.keys.len += 1;
            self.block.push(v);
            if self.block.len() == BLOCK {
                self.seal();
            }
        }
        true
    }

    fn seal(&mut self) {
        if self.block.is_empty() {
            return;
        }
        encode_block(&mut self.keys, &self.block);
        self.block.clear();
    }

    pub(crate) fn finish(mut self) -> PackedKeys {
        self.seal();
        self.keys.data.shrink_to_fit();
        self.keys.heads.shrink_to_fit();
        self.keys.dense = dense_blocks(&self.keys.heads, &self.keys.data);
        self.keys
    }
}

/// Appends one block of ascending keys to `keys`.
fn encode_block(keys: &mut PackedKeys, block: &[i64]) {
    let (head, rest) = (block[0], &block[1..]);
    keys.heads.push((head, keys.data.len() as u64));
    // Ascending, so each difference fits u64 whatever the signs.
    let diffs = block.windows(2).map(|w| w[1].wrapping_sub(w[0]) as u64);
    let base = diffs.clone().min().unwrap_or(1);
    let span = diffs.clone().max().unwrap_or(1) - base;
    let w = 64 - span.leading_zeros();
    put_varint(&mut keys.data, base);
    keys.data.push(w as u8);
    if w == 0 || rest.is_empty() {
        return;
    }
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    for d in diffs {
        acc |= u128::from(d - base) << bits;
        bits += w;
        while bits >= 8 {
            keys.data.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        keys.data.push(acc as u8);
    }
}

/// Bytes of a block's packed differences.
fn packed_len(keys_in_block: usize, w: u32) -> usize {
    (keys_in_block.saturating_sub(1) * w as usize).div_ceil(8)
}

/// A block's header at `at`: (base, width, where its packed bits start); `None` if malformed.
fn block_header(data: &[u8], at: usize) -> Option<(u64, u32, usize)> {
    let mut i = at;
    let base = get_varint(data, &mut i)?;
    let w = u32::from(*data.get(i)?);
    (w <= 64).then_some((base, w, i + 1))
}

/// The `w`-bit value at bit `bit` of `p` (bits past the end read as 0).
fn get_bits(p: &[u8], bit: usize, w: u32) -> u64 {
    if w == 0 {
        return 0;
    }
    let byte = bit / 8;
    // Fast path: one unaligned 8-byte read holds the value (a search's inner loop).
    if w <= 56
        && let Some(b8) = p.get(byte..byte + 8)
    {
        let mut b = [0u8; 8];
        b.copy_from_slice(b8);
        return (u64::from_le_bytes(b) >> (bit % 8)) & ((1u64 << w) - 1);
    }
    let mut buf = [0u8; 16];
    if let Some(src) = p.get(byte..) {
        let n = src.len().min(16);
        buf[..n].copy_from_slice(&src[..n]);
    }
    let v = (u128::from_le_bytes(buf) >> (bit % 8)) as u64;
    if w == 64 { v } else { v & ((1u64 << w) - 1) }
}

/// Which blocks hold consecutive integers: base 1, width 0.
fn dense_blocks(heads: &[(i64, u64)], data: &[u8]) -> Vec<bool> {
    heads
        .iter()
        .map(|&(_, at)| matches!(block_header(data, at as usize), Some((1, 0, _))))
        .collect()
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes the varint at `*at`; `None` past the end or on a malformed varint (decoding must
/// not panic on any input).
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
    /// The block's smallest difference and width, and where its packed bits start.
    base: u64,
    w: u32,
    bits_at: usize,
}

impl<'a> Cursor<'a> {
    fn at_block(keys: &'a PackedKeys, block: usize) -> Option<Cursor<'a>> {
        let (value, at) = *keys.heads.get(block)?;
        let (base, w, bits_at) = block_header(&keys.data, at as usize)?;
        Some(Cursor {
            keys,
            pos: block * BLOCK,
            value,
            base,
            w,
            bits_at,
        })
    }

    /// Moves to the next key; `false` at the end.
    fn advance(&mut self) -> bool {
        self.pos += 1;
        if self.pos >= self.keys.len {
            return false;
        }
        let i = self.pos % BLOCK;
        if i == 0 {
            match Cursor::at_block(self.keys, self.pos / BLOCK) {
                Some(c) => {
                    *self = c;
                    true
                }
                None => false,
            }
        } else {
            let packed = self.keys.data.get(self.bits_at..).unwrap_or_default();
            let d = self.base + get_bits(packed, (i - 1) * self.w as usize, self.w);
            self.value = self.value.wrapping_add(d as i64);
            true
        }
    }
}

impl PackedKeys {
    /// Memory held.
    pub(crate) fn size(&self) -> usize {
        self.heads.capacity() * std::mem::size_of::<(i64, u64)>()
            + self.data.capacity()
            + self.dense.capacity()
    }

    /// In a dense block, moves the cursor to `key` (above the cursor's key) if the block holds
    /// it, else to the block's last key: where walking one key at a time would stop.
    fn skip_dense(&self, c: &mut Cursor<'_>, key: i64) {
        let b = c.pos / BLOCK;
        if !self.dense.get(b).copied().unwrap_or(false) {
            return;
        }
        let head = self.heads[b].0;
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
    }

    /// Positions of `keys` (ascending by value, distinct; each with its index in the caller's
    /// key batch): `(position, index)` for every stored key equal to one of them.
    ///
    /// One cursor walks forward through the keys for the whole search: a key in the block the
    /// cursor is in continues from where the last one stopped, and a key further on jumps to
    /// the block its first occurrence must be in (galloping over block heads). Each block is
    /// walked at most once, however many keys land in it (a small file of a bucketed table
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
    pub(crate) fn keys(&self) -> impl Iterator<Item = i64> + '_ {
        let mut cursor = Cursor::at_block(self, 0);
        let mut first = true;
        std::iter::from_fn(move || {
            let c = cursor.as_mut()?;
            if std::mem::take(&mut first) || c.advance() {
                Some(c.value)
            } else {
                cursor = None;
                None
            }
        })
    }

    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<i64> {
        self.keys().collect()
    }

    /// Every key is the one before it plus one (a page of dense ids): every block dense, and
    /// each block's head one past the block before it.
    pub(crate) fn is_consecutive(&self) -> bool {
        self.dense.iter().all(|&d| d)
            && (self.heads.windows(2)).all(|w| w[1].0 == w[0].0.wrapping_add(BLOCK as i64))
    }

    /// The page body as stored ([`stored`]): block heads (first key i64, byte offset u64)
    /// then the blocks' bytes.
    pub(crate) fn body(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.heads.len() * 16 + self.data.len());
        for (first, at) in &self.heads {
            body.extend_from_slice(&first.to_le_bytes());
            body.extend_from_slice(&at.to_le_bytes());
        }
        body.extend_from_slice(&self.data);
        body
    }

    /// Keys from a [`PackedKeys::body`] of `len` keys. `Err`: the bytes do not hold that
    /// (every block's header and bits must lie where the heads say).
    pub(crate) fn from_body(body: &[u8], len: usize) -> Result<Self> {
        let mut keys = PackedKeys {
            len,
            ..Default::default()
        };
        keys.append_body(body, len)?;
        keys.dense = dense_blocks(&keys.heads, &keys.data);
        Ok(keys)
    }

    /// Appends the blocks of a [`PackedKeys::body`] of `len` keys (a page of a file, after the
    /// pages before it: every page but the last holds whole blocks). Checks what
    /// [`PackedKeys::from_body`] checks; `dense` is left to the caller.
    fn append_body(&mut self, body: &[u8], len: usize) -> Result<()> {
        let blocks = len.div_ceil(BLOCK);
        let head_bytes = blocks
            .checked_mul(16)
            .filter(|&h| h <= body.len())
            .ok_or_else(|| Error::Table(format!("key index page too short for {len} keys")))?;
        let (head_bytes, data) = body.split_at(head_bytes);
        let base = self.data.len() as u64;
        let mut expect = 0usize;
        for (b, h) in head_bytes.chunks_exact(16).enumerate() {
            let (first, at) = h.split_at(8);
            let first = i64::from_le_bytes(first.try_into().map_err(index_error)?);
            let at = u64::from_le_bytes(at.try_into().map_err(index_error)?) as usize;
            let in_block = (len - b * BLOCK).min(BLOCK);
            let header = block_header(data, at).filter(|_| at == expect);
            let Some((_, w, bits_at)) = header else {
                return Err(Error::Table("key index block out of place".into()));
            };
            expect = bits_at + packed_len(in_block, w);
            if expect > data.len() {
                return Err(Error::Table("key index block past its page".into()));
            }
            self.heads.push((first, at as u64 + base));
        }
        if expect != data.len() {
            return Err(Error::Table("key index page longer than its blocks".into()));
        }
        self.data.extend_from_slice(data);
        Ok(())
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

    /// Keys from `start`: per run, `len` consecutive keys, the last repeated `repeats` times,
    /// then a gap of `gap`.
    pub(super) fn runs_of(start: i64, runs: &[(usize, i64, usize)]) -> Vec<i64> {
        let mut v = Vec::new();
        let mut next = start;
        for &(len, gap, repeats) in runs {
            for _ in 0..len {
                v.push(next);
                next += 1;
            }
            v.extend(std::iter::repeat_n(next - 1, repeats));
            next += gap;
        }
        v
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
        /// Runs of consecutive keys (dense blocks, searched without decoding) broken by gaps
        /// and repeated keys (blocks that are not dense).
        #[test]
        fn search_of_dense_runs_matches_a_scan(
            start in -1000i64..1000,
            runs in proptest::collection::vec((1usize..300, 0i64..3, 0usize..3), 1..6),
            wanted in proptest::collection::btree_set(-1100i64..2900, 0..200),
        ) {
            let v = runs_of(start, &runs);
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
