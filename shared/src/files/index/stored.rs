//! The stored form of a key index: a directory and pages, two objects beside the data file.
//!
//! Why pages: at a billion rows a change file's 10,000 random keys land in every large data
//! file, a hundred or so keys in each. Reading each file's whole index for them (tens of MB a
//! file, more than a cache holds) made a change file cost what the table's size costs. With
//! pages, a lookup reads each file's directory (a few KB, kept in memory) and the pages its keys
//! fall in, by range: its reads follow the number of changes.
//!
//! Objects, for a data file `<f>`:
//! - `<f>.keyindex` ([`KEY_INDEX_SUFFIX`]), the directory, read whole. Little-endian:
//!   `DMS2IKEY`, version u32 (2), data file size u64, record count u64, signature length u32 +
//!   the key signature (field ids and types), keys per page u32, page count u64, pages object
//!   size u64, then one zstd frame (content checksum on) of, per page, its first key i64, last
//!   key i64 and its byte length u32 in the pages object.
//! - `<f>.keypages` ([`KEY_PAGES_SUFFIX`]), the pages one after another, each a
//!   [`PackedKeys::body`] (bit-packed already: ids with small gaps take under half a byte a
//!   key) followed by its CRC-32, read by range. A page is used as read, not decompressed: a
//!   lookup that needs thousands of pages costs what reading them does. A page of consecutive
//!   integers (a full load of dense ids) has no bytes: its first and last key say every key.
//!   If every page is such, there is no pages object.
//!
//! Page `p` holds the keys at positions `p * PAGE_KEYS ..` of the file. Both objects are a
//! cache, never the truth:
//! - written by whoever writes the file in key order (a full load, an append, compaction) and
//!   otherwise by the first lookup that reads a large file's whole key column (files of at
//!   least [`super::INDEX_MIN_ROWS`] rows), whoever wrote the file (another engine too); pages
//!   first, then the directory, so a directory names pages that exist;
//! - used only if the directory names the same data file size, row count and key types as the
//!   manifest entry and the lookup, and every checksum holds; otherwise the file's key column
//!   is read, as without an index;
//! - data files are immutable and uniquely named, so an index never goes stale; two processes
//!   writing the same index write the same bytes;
//! - `orphans` keeps the index of a live data file and deletes that of a removed one; another
//!   engine's orphan clean-up may delete any index: the next cold lookup writes it again.
//!
//! Version 1 (one frame of the whole index) is read as no index: the next lookup that reads the
//! file's key column writes version 2 over it.

use std::ops::Range;

use super::{PackedBuilder, PackedKeys, index_error};
use crate::error::{Error, Result};

/// Keys per page: 32 blocks. A page of dense keys costs nothing to read, a page of keys with
/// gaps of 1 to 3 about 1.6 KB, of random 64-bit ids about 25 KB.
pub(crate) const PAGE_KEYS: usize = 4096;

/// Suffix of a data file's key index directory.
pub(crate) const KEY_INDEX_SUFFIX: &str = ".keyindex";

/// Suffix of a data file's key index pages.
pub(crate) const KEY_PAGES_SUFFIX: &str = ".keypages";

const MAGIC: &[u8; 8] = b"DMS2IKEY";
const VERSION: u32 = 2;

/// Where the key index directory of a data file lives.
pub(crate) fn index_path(data_file: &str) -> String {
    format!("{data_file}{KEY_INDEX_SUFFIX}")
}

/// Where the key index pages of a data file live.
pub(crate) fn pages_path(data_file: &str) -> String {
    format!("{data_file}{KEY_PAGES_SUFFIX}")
}

/// A key index's directory: each page's key range and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageDir {
    /// This process's number for this decoded directory ([`PageDir::id`]).
    id: u64,
    rows: u64,
    firsts: Vec<i64>,
    lasts: Vec<i64>,
    /// Page `p`'s bytes in the pages object: `offsets[p]..offsets[p + 1]`; empty for a page of
    /// consecutive keys.
    offsets: Vec<u64>,
}

/// A directory and pages, encoded, for upload.
pub(crate) struct StoredIndex {
    pub(crate) directory: Vec<u8>,
    /// Empty when every page is dense: then no pages object is written.
    pub(crate) pages: Vec<u8>,
}

/// Numbers for decoded directories.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl PageDir {
    /// Unique in this process for each directory decoded: names its pages in the cache.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn pages(&self) -> usize {
        self.firsts.len()
    }

    /// Memory held.
    pub(crate) fn size(&self) -> usize {
        std::mem::size_of::<Self>()
            + (self.firsts.capacity() + self.lasts.capacity() + self.offsets.capacity()) * 8
    }

    /// Position of page `p`'s first key in the file.
    pub(crate) fn page_start(&self, p: usize) -> i64 {
        (p * PAGE_KEYS) as i64
    }

    fn page_len(&self, p: usize) -> usize {
        (self.rows as usize - p * PAGE_KEYS).min(PAGE_KEYS)
    }

    /// Page `p`'s bytes in the pages object (empty: a dense page).
    pub(crate) fn byte_range(&self, p: usize) -> Range<u64> {
        self.offsets[p]..self.offsets[p + 1]
    }

    /// For `keys` (ascending, distinct, each with its index in the key batch): every page that
    /// may hold one, ascending, with the keys that fall in its key range (`keys[range]`). A key
    /// repeated across a page boundary falls in both pages.
    pub(crate) fn plan(&self, keys: &[(i64, usize)]) -> Vec<(usize, Range<usize>)> {
        let n = self.pages();
        let mut out: Vec<(usize, Range<usize>)> = Vec::new();
        let (Some(&lo), Some(&hi)) = (self.firsts.first(), self.lasts.last()) else {
            return out;
        };
        // Only the keys within the file's range (a change file's keys span every file).
        let from = keys.partition_point(|k| k.0 < lo);
        let to = keys.partition_point(|k| k.0 <= hi);
        for (i, &(key, _)) in keys.iter().enumerate().take(to).skip(from) {
            let mut p = self.lasts.partition_point(|&l| l < key);
            while p < n && self.firsts[p] <= key {
                match out.last_mut() {
                    Some((q, r)) if *q == p => r.end = i + 1,
                    _ => out.push((p, i..i + 1)),
                }
                p += 1;
            }
        }
        out
    }

    /// Hits of `keys` (all within page `p`'s key range) in dense page `p`: its keys are
    /// `first, first + 1, ..., last`, so each key is there once, at its offset from `first`.
    pub(crate) fn dense_hits(&self, p: usize, keys: &[(i64, usize)]) -> Vec<(i64, usize)> {
        let (first, start) = (self.firsts[p], self.page_start(p));
        keys.iter()
            .map(|&(key, idx)| (start + key.wrapping_sub(first), idx))
            .collect()
    }

    /// Pages with bytes (not dense).
    pub(crate) fn stored_pages(&self) -> usize {
        (0..self.pages())
            .filter(|&p| !self.byte_range(p).is_empty())
            .count()
    }

    /// Size of the pages object.
    pub(crate) fn pages_bytes(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Page `p` from its bytes (`byte_range(p)` of the pages object), its checksum checked.
    pub(crate) fn page(&self, p: usize, bytes: &[u8]) -> Result<PackedKeys> {
        let body = self.checked(p, bytes)?;
        let keys = PackedKeys::from_body(body, self.page_len(p))?;
        let first = self.firsts[p];
        if keys.heads.first().map(|h| h.0) != Some(first) {
            return Err(Error::Table(format!(
                "key index page {p} does not start with {first}"
            )));
        }
        Ok(keys)
    }

    /// Page `p`'s body, if its CRC-32 holds.
    fn checked<'b>(&self, p: usize, bytes: &'b [u8]) -> Result<&'b [u8]> {
        let (body, crc) = bytes
            .split_last_chunk::<4>()
            .ok_or_else(|| Error::Table(format!("key index page {p} is empty")))?;
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return Err(Error::Table(format!(
                "key index page {p}: checksum mismatch"
            )));
        }
        Ok(body)
    }

    /// Every key of the file as one [`PackedKeys`], from the whole pages object: what a lookup
    /// that needs most pages of a file keeps (one search structure instead of thousands).
    pub(crate) fn assemble(&self, pages: &[u8]) -> Result<PackedKeys> {
        if pages.len() as u64 != self.pages_bytes() {
            return Err(Error::Table(format!(
                "key index pages are {} bytes, the directory says {}",
                pages.len(),
                self.pages_bytes()
            )));
        }
        let mut keys = PackedKeys {
            len: self.rows as usize,
            ..Default::default()
        };
        keys.heads.reserve(keys.len.div_ceil(super::BLOCK));
        keys.data.reserve(pages.len() + self.pages() * 64);
        for p in 0..self.pages() {
            let r = self.byte_range(p);
            if r.is_empty() {
                // Consecutive keys: every block is base 1, width 0.
                let (first, n) = (self.firsts[p], self.page_len(p));
                for b in 0..n.div_ceil(super::BLOCK) {
                    let head = first + (b * super::BLOCK) as i64;
                    keys.heads.push((head, keys.data.len() as u64));
                    keys.data.extend_from_slice(&[1, 0]);
                }
            } else {
                let body = self.checked(p, &pages[r.start as usize..r.end as usize])?;
                let at = keys.heads.len();
                keys.append_body(body, self.page_len(p))?;
                if keys.heads.get(at).map(|h| h.0) != Some(self.firsts[p]) {
                    return Err(Error::Table(format!("key index page {p} is out of place")));
                }
            }
        }
        keys.dense = super::dense_blocks(&keys.heads, &keys.data);
        Ok(keys)
    }

    /// Reads a directory. `Ok(None)`: a valid index of another file (size, row count), of
    /// other key types than asked for, or of an earlier version. `Err`: not a valid index.
    pub(crate) fn decode(
        bytes: &[u8],
        file_size: u64,
        rows: u64,
        sig: &str,
    ) -> Result<Option<Self>> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(8)? != MAGIC {
            return Err(Error::Table("not a dms2iceberg key index".into()));
        }
        let version = r.u32()?;
        if version == 1 {
            return Ok(None);
        }
        if version != VERSION {
            return Err(Error::Table(format!("key index version {version} unknown")));
        }
        let (size, len) = (r.u64()?, r.u64()?);
        let sig_len = r.u32()? as usize;
        let stored_sig = r.take(sig_len)?;
        if size != file_size || len != rows || stored_sig != sig.as_bytes() {
            return Ok(None);
        }
        let page_keys = r.u32()? as usize;
        let (pages, pages_bytes) = (r.u64()? as usize, r.u64()?);
        let rows_n = usize::try_from(len).map_err(index_error)?;
        if page_keys != PAGE_KEYS || pages != rows_n.div_ceil(PAGE_KEYS) {
            return Err(Error::Table(format!(
                "key index holds {pages} pages of {page_keys} keys for {len} keys"
            )));
        }
        let body_len = pages
            .checked_mul(20)
            .ok_or_else(|| Error::Table("key index sizes overflow".into()))?;
        let body = zstd::bulk::decompress(&bytes[r.at..], body_len).map_err(index_error)?;
        if body.len() != body_len {
            return Err(Error::Table(format!(
                "key index directory is {} bytes, its header says {body_len}",
                body.len()
            )));
        }
        let mut dir = PageDir {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            rows: len,
            firsts: Vec::with_capacity(pages),
            lasts: Vec::with_capacity(pages),
            offsets: Vec::with_capacity(pages + 1),
        };
        dir.offsets.push(0);
        let mut end = 0u64;
        for (p, e) in body.chunks_exact(20).enumerate() {
            let first = i64::from_le_bytes(e[0..8].try_into().map_err(index_error)?);
            let last = i64::from_le_bytes(e[8..16].try_into().map_err(index_error)?);
            let bytes = u32::from_le_bytes(e[16..20].try_into().map_err(index_error)?);
            let ordered = last >= first && dir.lasts.last().is_none_or(|&l| l <= first);
            // A page without bytes holds consecutive keys: exactly as many as it has rows.
            let dense_ok =
                bytes > 0 || i128::from(last) - i128::from(first) + 1 == dir.page_len(p) as i128;
            if !ordered || !dense_ok {
                return Err(Error::Table(format!("key index page {p} out of order")));
            }
            end += u64::from(bytes);
            dir.firsts.push(first);
            dir.lasts.push(last);
            dir.offsets.push(end);
        }
        if end != pages_bytes {
            return Err(Error::Table(format!(
                "key index pages take {end} bytes, its header says {pages_bytes}"
            )));
        }
        Ok(Some(dir))
    }
}

/// Builds the stored index of a data file from its keys in file order: pages are sealed as
/// they fill, so the writer holds one page of keys and the packed pages.
#[derive(Default)]
pub(crate) struct IndexWriter {
    page: PackedBuilder,
    in_page: usize,
    /// The last key appended: a page's builder checks the order within the page, this across.
    last: Option<i64>,
    rows: u64,
    entries: Vec<u8>,
    pages: Vec<u8>,
    /// Keys came out of order: no index.
    spent: bool,
}

impl IndexWriter {
    /// A writer holding every key of `keys` (a file's key column as a lookup read it).
    pub(crate) fn of(keys: &PackedKeys) -> IndexWriter {
        let mut w = IndexWriter::default();
        let mut chunk = Vec::with_capacity(PAGE_KEYS);
        for k in keys.keys() {
            chunk.push(k);
            if chunk.len() == PAGE_KEYS {
                w.extend(&chunk);
                chunk.clear();
            }
        }
        w.extend(&chunk);
        w
    }

    /// Appends keys; `false` (and the writer is spent) if they do not ascend.
    pub(crate) fn extend(&mut self, mut values: &[i64]) -> bool {
        while !self.spent && !values.is_empty() {
            let take = (PAGE_KEYS - self.in_page).min(values.len());
            let (now, rest) = values.split_at(take);
            let across = self.in_page == 0 && self.last.is_some_and(|l| now[0] < l);
            if across || !self.page.extend(now) {
                self.spent = true;
                return false;
            }
            self.last = now.last().copied();
            self.in_page += take;
            self.rows += take as u64;
            if self.in_page == PAGE_KEYS {
                self.seal();
            }
            values = rest;
        }
        !self.spent
    }

    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// No index after all (keys that cannot be indexed came).
    pub(crate) fn give_up(&mut self) {
        self.spent = true;
    }

    fn seal(&mut self) {
        let keys = std::mem::take(&mut self.page).finish();
        let (first, last) = (
            keys.heads.first().map_or(0, |h| h.0),
            self.last.unwrap_or(0),
        );
        let bytes = if keys.is_consecutive() {
            0
        } else {
            let body = keys.body();
            let crc = crc32fast::hash(&body);
            self.pages.extend_from_slice(&body);
            self.pages.extend_from_slice(&crc.to_le_bytes());
            (body.len() + 4) as u32
        };
        self.entries.extend_from_slice(&first.to_le_bytes());
        self.entries.extend_from_slice(&last.to_le_bytes());
        self.entries.extend_from_slice(&bytes.to_le_bytes());
        self.in_page = 0;
    }

    /// The directory and pages for the data file of `file_size` bytes whose key types `sig`
    /// names; `None` if the keys did not ascend.
    pub(crate) fn finish(mut self, file_size: u64, sig: &str) -> Result<Option<StoredIndex>> {
        if self.in_page > 0 {
            self.seal();
        }
        if self.spent {
            return Ok(None);
        }
        let pages = self.rows.div_ceil(PAGE_KEYS as u64);
        let mut z = zstd::bulk::Compressor::new(3).map_err(index_error)?;
        z.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
            .map_err(index_error)?;
        let frame = z.compress(&self.entries).map_err(index_error)?;
        let mut out = Vec::with_capacity(frame.len() + 64 + sig.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&file_size.to_le_bytes());
        out.extend_from_slice(&self.rows.to_le_bytes());
        out.extend_from_slice(&(sig.len() as u32).to_le_bytes());
        out.extend_from_slice(sig.as_bytes());
        out.extend_from_slice(&(PAGE_KEYS as u32).to_le_bytes());
        out.extend_from_slice(&pages.to_le_bytes());
        out.extend_from_slice(&(self.pages.len() as u64).to_le_bytes());
        out.extend_from_slice(&frame);
        Ok(Some(StoredIndex {
            directory: out,
            pages: self.pages,
        }))
    }
}

/// Builds the index of `data_file` (of `file_size` bytes; key types `sig`) from the writer
/// `fill` returns and uploads it ([`upload_index`]); filling and encoding a large file's pages
/// takes milliseconds, so both run off the async workers. `Ok(false)`: the keys did not ascend,
/// nothing is written.
pub(crate) async fn store_index(
    file_io: &iceberg::io::FileIO,
    data_file: &str,
    file_size: u64,
    sig: String,
    fill: impl FnOnce() -> IndexWriter + Send + 'static,
) -> Result<bool> {
    let stored = tokio::task::spawn_blocking(move || fill().finish(file_size, &sig))
        .await
        .map_err(|e| Error::Internal(format!("key index: {e}")))??;
    match stored {
        Some(stored) => upload_index(file_io, data_file, stored)
            .await
            .map(|()| true),
        None => Ok(false),
    }
}

/// Uploads a key index: the pages first, then the directory that names them, so that a
/// directory found always has its pages.
async fn upload_index(
    file_io: &iceberg::io::FileIO,
    data_file: &str,
    stored: StoredIndex,
) -> Result<()> {
    if !stored.pages.is_empty() {
        file_io
            .new_output(pages_path(data_file))?
            .write(bytes::Bytes::from(stored.pages))
            .await?;
    }
    file_io
        .new_output(index_path(data_file))?
        .write(bytes::Bytes::from(stored.directory))
        .await?;
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| Error::Table("key index truncated".into()))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(index_error)?,
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(index_error)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{runs_of, scan};
    use super::*;
    use proptest::prelude::*;

    fn store(v: &[i64], size: u64, sig: &str) -> StoredIndex {
        let mut w = IndexWriter::default();
        // In uneven slices, as batches come.
        for chunk in v.chunks(1000) {
            assert!(w.extend(chunk));
        }
        assert_eq!(w.rows(), v.len() as u64);
        w.finish(size, sig).unwrap().unwrap()
    }

    /// What a lookup does: the directory's plan, dense pages answered from it, the others
    /// decoded from their byte range.
    fn search(stored: &StoredIndex, rows: u64, keys: &[(i64, usize)]) -> Vec<(i64, usize)> {
        let dir = PageDir::decode(&stored.directory, 9, rows, "s")
            .unwrap()
            .unwrap();
        let mut hits = Vec::new();
        for (p, range) in dir.plan(keys) {
            let r = dir.byte_range(p);
            if r.is_empty() {
                hits.extend(dir.dense_hits(p, &keys[range]));
            } else {
                let page = dir
                    .page(p, &stored.pages[r.start as usize..r.end as usize])
                    .unwrap();
                let start = dir.page_start(p);
                hits.extend(
                    page.search(&keys[range])
                        .into_iter()
                        .map(|(pos, i)| (start + pos, i)),
                );
            }
        }
        hits.sort_unstable();
        hits
    }

    #[test]
    fn dense_keys_store_no_pages_and_gapped_keys_about_a_bit_each() {
        let dense: Vec<i64> = (1..=1_000_000).collect();
        let s = store(&dense, 9, "s");
        assert!(s.pages.is_empty());
        assert!(s.directory.len() < 4_000, "{}", s.directory.len());
        let keys = [(1, 0), (4096, 1), (4097, 2), (999_999, 3), (1_000_001, 4)];
        assert_eq!(
            search(&s, dense.len() as u64, &keys),
            [(0, 0), (4095, 1), (4096, 2), (999_998, 3)]
        );
        // Gaps of one or two (deleted ids): about a bit and a half of entropy a key.
        let mut next = 0i64;
        let gapped: Vec<i64> = (0..1_000_000i64)
            .map(|r| {
                next += 1 + (r * 7919) % 5 / 4;
                next
            })
            .collect();
        let s = store(&gapped, 9, "s");
        assert!(s.pages.len() < 400_000, "{}", s.pages.len());
        let keys: Vec<(i64, usize)> = [gapped[5], gapped[700_000], gapped[999_999]]
            .into_iter()
            .zip(0..)
            .collect();
        assert_eq!(
            search(&s, gapped.len() as u64, &keys),
            [(5, 0), (700_000, 1), (999_999, 2)]
        );
    }

    #[test]
    fn an_index_of_another_file_key_type_or_version_is_not_used_and_damage_is_an_error() {
        let v: Vec<i64> = (0..10_000).map(|x| x * 3).collect();
        let s = store(&v, 100, "[1][Int64]i64");
        let d = |bytes: &[u8], size, rows, sig| PageDir::decode(bytes, size, rows, sig);
        assert!(
            d(&s.directory, 100, 10_000, "[1][Int64]i64")
                .unwrap()
                .is_some()
        );
        // Another file's size or row count, or other key types.
        for (size, rows, sig) in [
            (101, 10_000, "[1][Int64]i64"),
            (100, 10_001, "[1][Int64]i64"),
            (100, 10_000, "[1][Int32]i64"),
        ] {
            assert!(
                d(&s.directory, size, rows, sig).unwrap().is_none(),
                "{size} {rows} {sig}"
            );
        }
        // Version 1 (one frame of the whole index): not used, no error; the column is read.
        let mut v1 = s.directory.clone();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert!(d(&v1, 100, 10_000, "[1][Int64]i64").unwrap().is_none());
        // A flipped byte in the compressed directory fails zstd's checksum (or the frame).
        let mut bad = s.directory.clone();
        let at = bad.len() - 6;
        bad[at] ^= 0x55;
        assert!(d(&bad, 100, 10_000, "[1][Int64]i64").is_err());
        for cut in [0, 7, 20, s.directory.len() - 1] {
            assert!(
                d(&s.directory[..cut], 100, 10_000, "[1][Int64]i64").is_err(),
                "{cut}"
            );
        }
        // A damaged page is an error, not wrong positions.
        let dir = d(&s.directory, 100, 10_000, "[1][Int64]i64")
            .unwrap()
            .unwrap();
        let r = dir.byte_range(1);
        let mut page = s.pages[r.start as usize..r.end as usize].to_vec();
        let at = page.len() - 6;
        page[at] ^= 0x55;
        assert!(dir.page(1, &page).is_err());
        assert!(dir.page(1, &page[..page.len() / 2]).is_err());
    }

    #[test]
    fn keys_that_do_not_ascend_across_pages_are_refused() {
        let mut w = IndexWriter::default();
        let v: Vec<i64> = (0..PAGE_KEYS as i64).collect();
        assert!(w.extend(&v));
        assert!(!w.extend(&[5]));
        assert!(w.finish(1, "s").unwrap().is_none());
    }

    proptest! {
        /// Runs of consecutive keys (dense pages, answered from the directory) broken by gaps
        /// and keys repeated (also across page boundaries): the stored index finds exactly
        /// what a scan finds.
        #[test]
        fn stored_index_search_matches_a_scan(
            start in -100_000i64..100_000,
            runs in proptest::collection::vec((1usize..6000, 0i64..3, 0usize..3), 1..8),
            wanted in proptest::collection::btree_set(-101_000i64..150_000, 0..300),
            near in proptest::collection::vec(0usize..40_000, 0..50),
        ) {
            let v = runs_of(start, &runs);
            // Keys that are in the file, near page boundaries among them.
            let mut wanted = wanted;
            for i in near {
                if let Some(&k) = v.get(i) {
                    wanted.insert(k);
                }
                if let Some(&k) = v.get((i / PAGE_KEYS) * PAGE_KEYS) {
                    wanted.insert(k);
                }
            }
            let keys: Vec<(i64, usize)> = wanted.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
            let s = store(&v, 9, "s");
            let mut want = scan(&v, &keys);
            want.sort_unstable();
            prop_assert_eq!(search(&s, v.len() as u64, &keys), want);
            // Assembled whole, the pages are the file's keys packed in one piece.
            let dir = PageDir::decode(&s.directory, 9, v.len() as u64, "s").unwrap().unwrap();
            prop_assert_eq!(dir.assemble(&s.pages).unwrap(), super::super::tests::pack(&v));
        }
    }
}
