//! A large data file's key index ([`crate::files::index`]): its directory and the pages a
//! lookup's keys fall in, read by range and cached page by page; and the index written by the
//! first lookup that had to read a file's whole key column.

use std::ops::Range;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;

use super::Candidate;
use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::index::{IndexWriter, PackedKeys, PageDir, index_path, pages_path, store_index};
use crate::files::keys::{FileKeys, KeyValues};
use crate::files::probe::ProbeKeys;

/// Pages of one file whose byte ranges are at most this far apart are read in one request: on
/// object storage a request costs what ~64 KiB of transfer does (S3: ~20 ms to the first
/// byte), and on a local disk too a read per page cost more than reading through (measured at
/// a billion rows: a fresh process 0.18 s reading 7,700 ranges, 0.10 s reading 2,100).
const COALESCE_GAP: u64 = 64 << 10;
/// The largest range read in one request.
const MAX_RANGE: u64 = 4 << 20;
/// Range requests of one file in flight at once.
const RANGE_CONCURRENCY: usize = 4;
/// A lookup that needs at least 1/this of a file's stored pages reads them all and keeps the
/// file's keys whole.
const WHOLE_FRACTION: usize = 4;

/// Builds and uploads, in the background, the key index of a file whose whole key column a
/// lookup read (`keys`); the owner of the cache waits for it
/// ([`crate::files::TableCache::finish_uploads`]).
pub(super) fn write_index(files: &Files, c: &Candidate, sig: &str, keys: Arc<FileKeys>) {
    let (file_io, data_file, sig) = (files.io().clone(), c.path.clone(), sig.to_string());
    let file_size = c.size;
    let task = tokio::spawn(async move {
        let fill = move || match &keys.values {
            KeyValues::Packed(p) => IndexWriter::of(p),
            _ => {
                let mut w = IndexWriter::default();
                w.give_up();
                w
            }
        };
        match store_index(&file_io, &data_file, file_size, sig, fill).await {
            Ok(written) => tracing::debug!(file = %data_file, written, "key index"),
            Err(e) => tracing::warn!(file = %data_file, error = %e, "key index not written"),
        }
    });
    files.cache().track_upload(task);
}

/// The stored key index directory of a candidate file, if there is a usable one. A missing,
/// foreign or damaged index is no error: the file's key column is read instead.
pub(super) async fn read_directory(file_io: &FileIO, c: &Candidate, sig: &str) -> Option<PageDir> {
    let path = index_path(&c.path);
    let bytes = match file_io.new_input(&path) {
        Ok(input) => input.read().await,
        Err(e) => Err(e),
    };
    // Not found is the usual reason (a file another engine wrote); the storage layer does not
    // tell it apart from other failures, and either way the file itself is read.
    let bytes = bytes
        .map_err(|e| tracing::debug!(index = %path, error = %e, "no key index"))
        .ok()?;
    match PageDir::decode(&bytes, c.size, c.rows, sig) {
        Ok(Some(d)) => Some(d),
        Ok(None) => {
            tracing::debug!(index = %path, "key index of other key types, another file or version");
            None
        }
        Err(e) => {
            tracing::warn!(index = %path, error = %e, "key index unusable; reading the file");
            None
        }
    }
}

/// Reads and decodes `pages` (ascending, none dense) of a file's index: neighbouring pages
/// in one range request each, the requests concurrently. Returns the pages and the number of
/// requests.
pub(super) async fn read_pages(
    file_io: &FileIO,
    data_file: &str,
    dir: &PageDir,
    pages: &[usize],
) -> Result<(Vec<(usize, PackedKeys)>, usize)> {
    let requests = coalesce(dir, pages, COALESCE_GAP);
    if requests.is_empty() {
        return Ok((Vec::new(), 0));
    }
    let reader = file_io.new_input(pages_path(data_file))?.reader().await?;
    let (reader, requests_ref) = (&reader, &requests);
    // By index: a closure over borrowed items trips rustc's higher-ranked Send check when the
    // commit loop boxes this future as `Send` (see `locate_rows`).
    let read: Vec<Vec<(usize, PackedKeys)>> = futures::stream::iter(0..requests.len())
        .map(|i| async move {
            let (range, group) = &requests_ref[i];
            let bytes = reader.read(range.clone()).await?;
            if bytes.len() as u64 != range.end - range.start {
                return Err(Error::Table(format!(
                    "{}: {} bytes read of {:?}",
                    pages_path(data_file),
                    bytes.len(),
                    range
                )));
            }
            group
                .iter()
                .map(|&p| {
                    let r = dir.byte_range(p);
                    let at = (r.start - range.start) as usize..(r.end - range.start) as usize;
                    Ok((p, dir.page(p, &bytes[at])?))
                })
                .collect::<Result<Vec<_>>>()
        })
        .buffered(RANGE_CONCURRENCY)
        .try_collect()
        .await?;
    Ok((read.into_iter().flatten().collect(), requests.len()))
}

/// Byte ranges to request for `pages` (neighbours up to `gap` bytes apart in one), each with
/// the pages it holds.
fn coalesce(dir: &PageDir, pages: &[usize], gap: u64) -> Vec<(Range<u64>, Vec<usize>)> {
    let mut out: Vec<(Range<u64>, Vec<usize>)> = Vec::new();
    for &p in pages {
        let r = dir.byte_range(p);
        if r.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((range, group))
                if r.start <= range.end + gap && r.end - range.start <= MAX_RANGE =>
            {
                range.end = r.end;
                group.push(p);
            }
            _ => out.push((r, vec![p])),
        }
    }
    out
}

/// Positions of `keys` (ascending, distinct) in a file by its index: dense pages answered
/// from the directory, the others from the cache or read. `Err`: a page could not be read or
/// decoded (the caller reads the key column instead).
pub(super) async fn search_index(
    files: &Files,
    c: &Candidate,
    sig: &str,
    dir: &Arc<PageDir>,
    keys: &[(i64, usize)],
) -> Result<IndexSearch> {
    let plan = dir.plan(keys);
    let cache = files.cache();
    let mut out = IndexSearch::default();
    let stored = dir.stored_pages();
    let needed = (plan.iter())
        .filter(|(p, _)| !dir.byte_range(*p).is_empty())
        .count();
    if stored > 0 && needed * WHOLE_FRACTION >= stored {
        // Most of the file's pages: one request for all of them, and the file's keys kept
        // whole, as one search structure (thousands of pages cost more to look up one by one
        // than to search at once). Happens when a change file is large against the table.
        let bytes = files.io().new_input(pages_path(&c.path))?.read().await?;
        let dir = dir.clone();
        let whole = tokio::task::spawn_blocking(move || dir.assemble(&bytes))
            .await
            .map_err(|e| Error::Internal(format!("key index: {e}")))??;
        out.hits = whole.search(keys);
        out.pages_read = stored;
        out.page_requests = 1;
        let fk = Arc::new(FileKeys {
            values: KeyValues::Packed(whole),
            sorted: true,
        });
        cache.cache_keys(&c.path, sig, fk);
        return Ok(out);
    }
    let mut pages: Vec<(usize, Range<usize>, Option<Arc<PackedKeys>>)> =
        Vec::with_capacity(plan.len());
    for (p, range) in plan {
        if dir.byte_range(p).is_empty() {
            out.hits.extend(dir.dense_hits(p, &keys[range]));
            continue;
        }
        let cached = cache.cached_page(dir, p);
        pages.push((p, range, cached));
    }
    let missing: Vec<usize> = (pages.iter())
        .filter(|(_, _, cached)| cached.is_none())
        .map(|(p, _, _)| *p)
        .collect();
    let (read, requests) = read_pages(files.io(), &c.path, dir, &missing).await?;
    out.pages_read = read.len();
    out.page_requests = requests;
    let mut read = read.into_iter().peekable();
    for (p, range, cached) in pages {
        let page = match cached {
            Some(page) => page,
            None => match read.next_if(|(q, _)| *q == p) {
                Some((_, page)) => {
                    let page = Arc::new(page);
                    cache.cache_page(dir, p, page.clone());
                    page
                }
                None => return Err(Error::Internal(format!("key index page {p} not read"))),
            },
        };
        let start = dir.page_start(p);
        out.hits.extend(
            page.search(&keys[range])
                .into_iter()
                .map(|(pos, idx)| (start + pos, idx)),
        );
    }
    Ok(out)
}

/// What [`search_index`] found and read.
#[derive(Default)]
pub(super) struct IndexSearch {
    /// (position, key index), by page.
    pub(super) hits: Vec<(i64, usize)>,
    pub(super) pages_read: usize,
    pub(super) page_requests: usize,
}

/// Parquet leaf index of each key column, by field id.
pub(super) fn key_leaves(
    md: &parquet::file::metadata::ParquetMetaData,
    k: &ProbeKeys,
    path: &str,
) -> Result<Vec<usize>> {
    let descr = md.file_metadata().schema_descr_ptr();
    let mut leaves = Vec::with_capacity(k.field_ids.len());
    for fid in &k.field_ids {
        let idx = (0..descr.num_columns()).find(|&i| {
            let t = descr.column(i).self_type_ptr();
            t.get_basic_info().has_id() && t.get_basic_info().id() == *fid
        });
        leaves.push(
            idx.ok_or_else(|| Error::Table(format!("{path}: no column with field id {fid}")))?,
        );
    }
    Ok(leaves)
}
