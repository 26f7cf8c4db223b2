//! lookup: where are the live rows of these keys? The answer becomes position deletes.
//!
//! Cost is proportional to the keys and the few files that may hold them, not to the table:
//! 1. data files whose key bounds (manifest `lower_bounds`/`upper_bounds`) hold none of the keys
//!    are skipped without being opened;
//! 2. in the remaining files, row groups whose statistics or bloom filter (we write both, on
//!    the key) exclude every key are skipped;
//! 3. only the key columns of what remains are read, and rows already deleted by existing
//!    position deletes are ignored.
//!
//! Manifests and delete files are immutable, so a warm process caches them by path, with the
//! decoded key columns of data files. A fresh process reads a large file's key column from its
//! key index ([`crate::files::index`]) when there is one: a fraction of the bytes and no decompression of
//! plain `i64` pages.

//!
//! The steps, one file each: [`scan`] reads a candidate file's key column (or answers from the
//! cache or the file's key index, [`key_index`]); [`stale`] compares the ordering columns of
//! the rows found with the changes'.

mod key_index;
mod scan;
mod stale;

pub(crate) use stale::{ValuesAt, read_values_at};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{Struct, TableMetadata};

use crate::error::Result;
use crate::files::deletes::{DeleteSource, DeletedPositions, FileDeletes, Targets};
use crate::files::live::Scope;
use crate::files::parquet::{READ_CONCURRENCY, SMALL_READ_CONCURRENCY};
use crate::files::probe::ProbeKeys;
use crate::files::{Files, Fill};
use scan::{FileScan, scan_file};
use stale::mark_stale;

/// What a lookup did, for logs and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LookupStats {
    pub live_data_files: usize,
    pub files_pruned_by_bounds: usize,
    pub data_files_read: usize,
    pub row_groups_read: usize,
    pub row_groups_pruned_by_stats: usize,
    pub row_groups_pruned_by_bloom: usize,
    pub delete_files_read: usize,
    /// Candidate files answered from the in-memory key cache without reading them.
    pub key_cache_hits: usize,
    /// Candidate files answered from their stored key index ([`index`]).
    pub key_indexes_read: usize,
    /// Key index uploads this lookup started (large files without an index whose key column
    /// it read whole).
    pub key_indexes_written: usize,
    /// Key index pages read from storage (the pages the keys fall in that the cache did not
    /// hold), and the range requests that read them.
    pub key_pages_read: usize,
    pub key_page_requests: usize,
}

#[derive(Debug, Default)]
pub struct Located {
    /// Positions to delete, per data file path.
    pub deletes: BTreeMap<String, FileDeletes>,
    /// Per key (row of the lookup's key batch): a live row was found.
    pub found: Vec<bool>,
    /// Per key: the live row is newer (by the ordering column) than the change: leave it.
    pub stale: Vec<bool>,
    pub stats: LookupStats,
    /// The keys as probed: what a concurrent commit's new files are checked against.
    pub(crate) keys: Option<Arc<ProbeKeys>>,
    /// Data files holding a row this lookup left in place because it is newer than its change
    /// (`stale`): the plan depends on those rows as well as on the ones it deletes.
    pub(crate) kept_in: std::collections::BTreeSet<String>,
    /// Per key: where its live row is (index into `live_files`, position), if found.
    pub(crate) live: Vec<Option<(u32, i64)>>,
    /// The data files of `live`: path and size.
    pub(crate) live_files: Vec<(String, u64)>,
}

/// A live data file that may hold some of the keys.
pub(crate) struct Candidate {
    /// The snapshot that added it.
    pub(crate) snapshot: Option<i64>,
    pub(crate) path: String,
    pub(crate) size: u64,
    pub(crate) rows: u64,
    pub(crate) spec_id: i32,
    pub(crate) partition: Struct,
}

/// A live position-delete file or deletion vector.
struct DeleteFile {
    source: DeleteSource,
    spec_id: i32,
    partition: Struct,
    targets: Targets,
}

/// How to tell whether a live row is newer than the change to its key.
pub struct StaleCheck {
    /// Field ids of the ordering columns, first decides; `None`: a column the table does not
    /// have yet (its rows hold NULL there).
    pub field_ids: Vec<Option<i32>>,
    /// Per column, per key: the ordering value of the change.
    pub values: Vec<ArrayRef>,
    /// Per key: the change comes from a full load. Full-load rows come before every change,
    /// so such a change is never stale, and neither is a change against a full-load row.
    pub from_load: Vec<bool>,
    /// Snapshots whose rows are all newer than every incoming change: full-load files later
    /// in DMS order than a full-load input, committed before it (full-load files of one load
    /// are applied in parallel). A key such a snapshot's file holds keeps that row.
    pub newer_snapshots: std::collections::HashSet<i64>,
}

/// Finds the live rows of `keys` (one column per key column, in the table's current types,
/// distinct) in the table's current snapshot.
/// With `order`, a live row whose ordering columns are greater than the incoming change's is
/// marked stale and not deleted: an older change never overwrites a newer row. Rows of
/// full-load files ([`crate::files::vocabulary::is_full_load_file`]) are never newer than a change.
pub(crate) async fn locate_rows(
    files: &Files,
    metadata: &TableMetadata,
    keys: &RecordBatch,
    key_field_ids: Vec<i32>,
    order: Option<&StaleCheck>,
) -> Result<Located> {
    let mut out = Located {
        found: vec![false; keys.num_rows()],
        stale: vec![false; keys.num_rows()],
        live: vec![None; keys.num_rows()],
        ..Default::default()
    };
    if keys.num_rows() == 0 {
        return Ok(out);
    }
    let k = Arc::new(ProbeKeys::new(keys, key_field_ids)?);
    out.keys = Some(k.clone());
    if metadata.current_snapshot().is_none() {
        return Ok(out);
    }
    let (candidates, delete_files) = candidates(files, metadata, &k, &mut out.stats).await?;
    let dead = dead_rows(files, &candidates, &delete_files, &mut out.stats).await?;
    let k = k.as_ref();
    // By index: a closure over `(usize, &Candidate)` items trips rustc's higher-ranked Send
    // check when this future is boxed as `Send` (the commit loop's planners are).
    let candidates_ref = &candidates;
    let large = &tokio::sync::Semaphore::new(READ_CONCURRENCY);
    let results: Vec<(usize, FileScan)> = futures::stream::iter(0..candidates.len())
        .map(|i| async move {
            scan_file(files, &candidates_ref[i], k, large)
                .await
                .map(|r| (i, r))
        })
        .buffer_unordered(SMALL_READ_CONCURRENCY)
        .try_collect()
        .await?;
    let mut live_hits: Vec<(usize, Vec<(i64, usize)>)> = Vec::new();
    for (i, scan) in results {
        let c = &candidates[i];
        out.stats.data_files_read += scan.opened as usize;
        out.stats.row_groups_read += scan.row_groups_read;
        out.stats.row_groups_pruned_by_stats += scan.pruned_by_stats;
        out.stats.row_groups_pruned_by_bloom += scan.pruned_by_bloom;
        out.stats.key_cache_hits += scan.cache_hit as usize;
        out.stats.key_indexes_read += scan.index_read as usize;
        out.stats.key_indexes_written += scan.index_written as usize;
        out.stats.key_pages_read += scan.pages_read;
        out.stats.key_page_requests += scan.page_requests;
        let deleted: Vec<&[i64]> = dead
            .get(&c.path)
            .into_iter()
            .flatten()
            .filter_map(|content| content.get(&c.path).map(Vec::as_slice))
            .collect();
        let hits = drop_deleted(scan.hits, &deleted);
        if !hits.is_empty() {
            let f = out.live_files.len() as u32;
            out.live_files.push((c.path.clone(), c.size));
            for (pos, key) in &hits {
                out.live[*key] = Some((f, *pos));
            }
        }
        for (_, key) in &hits {
            out.found[*key] = true;
        }
        if !hits.is_empty() {
            live_hits.push((i, hits));
        }
    }
    // Rows of snapshots newer than the input stay; so do rows newer than the change by the
    // ordering columns.
    if let Some(check) = order.filter(|c| !c.newer_snapshots.is_empty()) {
        for (i, hits) in &live_hits {
            if candidates[*i]
                .snapshot
                .is_some_and(|s| check.newer_snapshots.contains(&s))
            {
                for (_, key) in hits {
                    out.stale[*key] = true;
                }
            }
        }
    }
    if let Some(check) = order.filter(|c| !c.values.is_empty()) {
        mark_stale(files, check, &candidates, &live_hits, &mut out.stale).await?;
    }
    for (i, hits) in live_hits {
        let c = &candidates[i];
        let positions: Vec<i64> = hits
            .iter()
            .filter(|(_, key)| !out.stale[*key])
            .map(|(pos, _)| *pos)
            .collect();
        if positions.len() < hits.len() {
            out.kept_in.insert(c.path.clone());
        }
        if !positions.is_empty() {
            out.deletes.insert(
                c.path.clone(),
                FileDeletes {
                    spec_id: c.spec_id,
                    partition: c.partition.clone(),
                    positions,
                },
            );
        }
    }
    Ok(out)
}

/// Live data files whose key bounds may hold one of `k`, and every live position-delete file.
async fn candidates(
    files: &Files,
    metadata: &TableMetadata,
    k: &ProbeKeys,
    stats: &mut LookupStats,
) -> Result<(Vec<Candidate>, Vec<DeleteFile>)> {
    let live = files.live(metadata, Scope::All, Fill::Keep).await?;
    let mut candidates = Vec::new();
    for d in live.data() {
        let f = d.file();
        stats.live_data_files += 1;
        if k.may_contain(f.lower_bounds(), f.upper_bounds())? {
            candidates.push(Candidate {
                snapshot: d.entry.snapshot_id(),
                path: f.file_path().to_string(),
                size: f.file_size_in_bytes(),
                rows: f.record_count(),
                spec_id: d.spec_id,
                partition: f.partition().clone(),
            });
        } else {
            stats.files_pruned_by_bounds += 1;
        }
    }
    let delete_files = live
        .position_deletes()
        .map(|d| {
            let f = d.file();
            Ok(DeleteFile {
                source: DeleteSource::of(f)?,
                spec_id: d.spec_id,
                partition: f.partition().clone(),
                targets: Targets::of(f),
            })
        })
        .collect::<Result<_>>()?;
    Ok((candidates, delete_files))
}

/// The delete files that delete rows of each candidate file (by its path).
async fn dead_rows(
    files: &Files,
    candidates: &[Candidate],
    delete_files: &[DeleteFile],
    stats: &mut LookupStats,
) -> Result<HashMap<String, Vec<Arc<DeletedPositions>>>> {
    let applies = |d: &DeleteFile, c: &Candidate| {
        d.spec_id == c.spec_id && d.partition == c.partition && d.targets.may_target(&c.path)
    };
    // Every delete file that applies to a candidate, read concurrently (bounded) first: one
    // after another they cost a round trip each (hundreds with many partitions).
    let needed: Vec<usize> = (0..delete_files.len())
        .filter(|&i| candidates.iter().any(|c| applies(&delete_files[i], c)))
        .collect();
    let wanted: Vec<&DeleteSource> = needed.iter().map(|&i| &delete_files[i].source).collect();
    let read = files.position_deletes_of(&wanted, Fill::Keep).await?;
    let mut loaded: HashMap<usize, Arc<DeletedPositions>> = HashMap::new();
    for (i, (content, from_storage)) in needed.into_iter().zip(read) {
        stats.delete_files_read += from_storage as usize;
        loaded.insert(i, content);
    }
    // The lists themselves, not a set of their positions: a file that every commit since the
    // last compaction deleted rows of (a full load) has hundreds of thousands, and hashing
    // them all again on every commit was the largest cost of a warm lookup.
    let mut dead: HashMap<String, Vec<Arc<DeletedPositions>>> = HashMap::new();
    for c in candidates {
        for (i, d) in delete_files.iter().enumerate() {
            if !applies(d, c) {
                continue;
            }
            let Some(content) = loaded.get(&i) else {
                continue;
            };
            if content.contains_key(&c.path) {
                dead.entry(c.path.clone())
                    .or_default()
                    .push(content.clone());
            }
        }
    }
    Ok(dead)
}

/// `hits` (position, key) without the positions in `deleted` (ascending lists), in position
/// order. One merge per list, galloping: the cost follows the number of hits when the lists
/// are long.
fn drop_deleted(mut hits: Vec<(i64, usize)>, deleted: &[&[i64]]) -> Vec<(i64, usize)> {
    if deleted.is_empty() || hits.is_empty() {
        return hits;
    }
    if !hits.is_sorted_by_key(|h| h.0) {
        hits.sort_unstable_by_key(|h| h.0);
    }
    let mut dead = vec![false; hits.len()];
    for list in deleted {
        let mut j = 0usize;
        for ((pos, _), d) in hits.iter().zip(dead.iter_mut()) {
            let (mut lo, mut hi, mut step) = (j, j, 1usize);
            while hi < list.len() && list[hi] < *pos {
                lo = hi + 1;
                hi = hi.saturating_add(step).min(list.len());
                step = step.saturating_mul(2);
            }
            j = lo + list[lo..hi].partition_point(|x| x < pos);
            if list.get(j) == Some(pos) {
                *d = true;
            }
        }
    }
    hits.into_iter()
        .zip(dead)
        .filter_map(|(h, d)| (!d).then_some(h))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Dropping deleted positions by merging sorted lists keeps exactly the hits no list
        /// holds, whatever the order the hits come in.
        #[test]
        fn dropping_deleted_positions_matches_a_set(
            hits in proptest::collection::hash_set(0i64..400, 0..120),
            lists in proptest::collection::vec(
                proptest::collection::btree_set(0i64..400, 0..200), 0..4),
        ) {
            let hits: Vec<(i64, usize)> = hits.into_iter().zip(0..).collect();
            let lists: Vec<Vec<i64>> = lists.into_iter().map(|l| l.into_iter().collect()).collect();
            let slices: Vec<&[i64]> = lists.iter().map(Vec::as_slice).collect();
            let mut want: Vec<(i64, usize)> = hits
                .iter()
                .copied()
                .filter(|(p, _)| !lists.iter().any(|l| l.contains(p)))
                .collect();
            want.sort_unstable();
            let mut got = drop_deleted(hits, &slices);
            got.sort_unstable();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
