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
//! key index ([`index`]) when there is one: a fraction of the bytes and no decompression of
//! plain `i64` pages.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::DataType;
use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::spec::{Datum, PrimitiveLiteral, Struct, TableMetadata};
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::file::statistics::Statistics;

use crate::error::{Error, Result};
use crate::files::deletes::DeletedPositions;
use crate::files::index::{self as index, INDEX_MIN_ROWS, PackedBuilder, PackedKeys};
use crate::files::keys::{FileKeys, KeyValues, key_signature, single_int_column};
use crate::files::live::Scope;
use crate::files::parquet::{
    READ_CONCURRENCY, SMALL_READ_CONCURRENCY, large_read_permit, open_parquet,
};
use crate::files::{Files, Fill};
use crate::types::int_values;
use crate::write::FileDeletes;

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
    /// Key index uploads this lookup started (large files whose key column it read whole; an
    /// index no smaller than the column is dropped before upload).
    pub key_indexes_written: usize,
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
}

/// The keys being looked up, in the forms each pruning step needs.
struct Keys {
    /// Identifies the key types (cached encodings are only valid for the same types).
    sig: String,
    field_ids: Vec<i32>,
    types: Vec<DataType>,
    converter: RowConverter,
    /// The key columns as given.
    arrays: Vec<ArrayRef>,
    /// Row encodings, made on first use: a single integer key, the common case, is searched
    /// as integers and never needs them (making them was a quarter of a warm lookup).
    encoded: OnceLock<Encoded>,
    /// First key column as plain values, sorted (row-group statistics and bloom filters).
    first: FirstColumn,
    /// A single integer key (int or long): its values with their index in the key batch,
    /// sorted by value.
    ints: Option<Vec<(i64, usize)>>,
}

/// The keys in `arrow-row` form, for keys other than a single integer column.
struct Encoded {
    /// Encoded full keys, sorted, with their index in the key batch.
    sorted: Vec<(Vec<u8>, usize)>,
    /// Encoded full key → index in the key batch.
    index: HashMap<Vec<u8>, usize>,
    /// Per key column: single-column encodings, sorted, and their converter (bounds checks).
    columns: Vec<(RowConverter, Vec<Vec<u8>>)>,
}

enum FirstColumn {
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Other,
}

impl Keys {
    fn new(keys: &RecordBatch, field_ids: Vec<i32>) -> Result<Keys> {
        let arrays: Vec<ArrayRef> = keys.columns().to_vec();
        let types: Vec<DataType> = arrays.iter().map(|a| a.data_type().clone()).collect();
        let converter =
            RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
        let first = match arrays.first() {
            Some(a) => first_values(a),
            None => FirstColumn::Other,
        };
        let ints = single_int_column(&arrays).map(|v| {
            let mut v: Vec<(i64, usize)> = v.into_iter().zip(0..).collect();
            v.sort_unstable();
            v.dedup_by_key(|(x, _)| *x);
            v
        });
        let sig = key_signature(&field_ids, &types, ints.is_some());
        Ok(Keys {
            sig,
            field_ids,
            types,
            converter,
            arrays,
            encoded: OnceLock::new(),
            first,
            ints,
        })
    }

    /// The row encodings of the keys, made by the first caller.
    fn encoded(&self) -> Result<&Encoded> {
        if let Some(e) = self.encoded.get() {
            return Ok(e);
        }
        let rows = self.converter.convert_columns(&self.arrays)?;
        let index: HashMap<Vec<u8>, usize> = (0..rows.num_rows())
            .map(|i| (rows.row(i).as_ref().to_vec(), i))
            .collect();
        let mut sorted: Vec<(Vec<u8>, usize)> =
            index.iter().map(|(k, v)| (k.clone(), *v)).collect();
        sorted.sort_unstable();
        let mut columns = Vec::new();
        for a in &self.arrays {
            let c = RowConverter::new(vec![SortField::new(a.data_type().clone())])?;
            let r = c.convert_columns(std::slice::from_ref(a))?;
            let mut v: Vec<Vec<u8>> = (0..r.num_rows())
                .map(|i| r.row(i).as_ref().to_vec())
                .collect();
            v.sort_unstable();
            v.dedup();
            columns.push((c, v));
        }
        // Another thread may have won the race; both made the same encodings.
        let _ = self.encoded.set(Encoded {
            sorted,
            index,
            columns,
        });
        self.encoded
            .get()
            .ok_or_else(|| Error::Internal("key encodings were not kept".into()))
    }

    /// Could a file whose key columns lie within these bounds hold one of the keys?
    fn may_contain(
        &self,
        lower: &HashMap<i32, Datum>,
        upper: &HashMap<i32, Datum>,
    ) -> Result<bool> {
        if let (Some(ints), [fid]) = (&self.ints, self.field_ids.as_slice())
            && let (Some(lo), Some(hi)) = (
                lower.get(fid).and_then(datum_i64),
                upper.get(fid).and_then(datum_i64),
            )
        {
            let at = ints.partition_point(|(v, _)| *v < lo);
            return Ok(at < ints.len() && ints[at].0 <= hi);
        }
        for (i, fid) in self.field_ids.iter().enumerate() {
            let (Some(lo), Some(hi)) = (lower.get(fid), upper.get(fid)) else {
                continue;
            };
            let (Some(lo), Some(hi)) = (self.encode_datum(i, lo)?, self.encode_datum(i, hi)?)
            else {
                continue;
            };
            let sorted = &self.encoded()?.columns[i].1;
            let at = sorted.partition_point(|v| v.as_slice() < lo.as_slice());
            if at == sorted.len() || sorted[at].as_slice() > hi.as_slice() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn encode_datum(&self, col: usize, d: &Datum) -> Result<Option<Vec<u8>>> {
        let Some(a) = datum_array(d) else {
            return Ok(None);
        };
        let Ok(a) = arrow_cast::cast(&a, &self.types[col]) else {
            return Ok(None);
        };
        let r = self.encoded()?.columns[col].0.convert_columns(&[a])?;
        Ok(Some(r.row(0).as_ref().to_vec()))
    }
}

/// An int or long bound as i64.
fn datum_i64(d: &Datum) -> Option<i64> {
    match d.literal() {
        PrimitiveLiteral::Int(v) => Some(i64::from(*v)),
        PrimitiveLiteral::Long(v) => Some(*v),
        _ => None,
    }
}

fn first_values(a: &ArrayRef) -> FirstColumn {
    let ints = match a.data_type() {
        DataType::Int64 | DataType::Int32 => int_values(a),
        DataType::Date32 => Some(
            a.as_primitive::<Date32Type>()
                .values()
                .iter()
                .map(|v| *v as i64)
                .collect(),
        ),
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => Some(
            a.as_primitive::<TimestampMicrosecondType>()
                .values()
                .to_vec(),
        ),
        _ => None,
    };
    if let Some(mut v) = ints {
        v.sort_unstable();
        v.dedup();
        return FirstColumn::Ints(v);
    }
    if let DataType::Utf8 = a.data_type() {
        let s = a.as_string::<i32>();
        let mut v: Vec<String> = (0..s.len()).map(|i| s.value(i).to_string()).collect();
        v.sort_unstable();
        v.dedup();
        return FirstColumn::Strings(v);
    }
    FirstColumn::Other
}

/// A one-element Arrow array holding a bound value.
fn datum_array(d: &Datum) -> Option<ArrayRef> {
    use arrow_array::*;
    use iceberg::spec::PrimitiveType as P;
    Some(match (d.data_type(), d.literal()) {
        (P::Int, PrimitiveLiteral::Int(v)) => Arc::new(Int32Array::from(vec![*v])),
        (P::Long, PrimitiveLiteral::Long(v)) => Arc::new(Int64Array::from(vec![*v])),
        (P::Date, PrimitiveLiteral::Int(v)) => Arc::new(Date32Array::from(vec![*v])),
        (P::Timestamp, PrimitiveLiteral::Long(v)) => {
            Arc::new(TimestampMicrosecondArray::from(vec![*v]))
        }
        (P::Timestamptz, PrimitiveLiteral::Long(v)) => {
            Arc::new(TimestampMicrosecondArray::from(vec![*v]).with_timezone("+00:00"))
        }
        (P::String, PrimitiveLiteral::String(v)) => Arc::new(StringArray::from(vec![v.as_str()])),
        (P::Decimal { precision, scale }, PrimitiveLiteral::Int128(v)) => Arc::new(
            Decimal128Array::from(vec![*v])
                .with_precision_and_scale(*precision as u8, *scale as i8)
                .ok()?,
        ),
        _ => return None,
    })
}

/// A live data file that may hold some of the keys.
struct Candidate {
    /// The snapshot that added it.
    snapshot: Option<i64>,
    path: String,
    size: u64,
    rows: u64,
    spec_id: i32,
    partition: Struct,
}

/// A live position-delete file.
struct DeleteFile {
    path: String,
    size: u64,
    spec_id: i32,
    partition: Struct,
    referenced: Option<String>,
    bounds: Option<(String, String)>,
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
/// full-load files ([`crate::write::is_full_load_file`]) are never newer than a change.
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
        ..Default::default()
    };
    if metadata.current_snapshot().is_none() || keys.num_rows() == 0 {
        return Ok(out);
    }
    let k = Keys::new(keys, key_field_ids)?;
    let (candidates, delete_files) = candidates(files, metadata, &k, &mut out.stats).await?;
    let dead = dead_rows(files, &candidates, &delete_files, &mut out.stats).await?;
    let k = &k;
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
        let deleted: Vec<&[i64]> = dead
            .get(&c.path)
            .into_iter()
            .flatten()
            .filter_map(|content| content.get(&c.path).map(Vec::as_slice))
            .collect();
        let hits = drop_deleted(scan.hits, &deleted);
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
            .into_iter()
            .filter(|(_, key)| !out.stale[*key])
            .map(|(pos, _)| pos)
            .collect();
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
    k: &Keys,
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
    let bound = |m: &HashMap<i32, Datum>| match m
        .get(&crate::write::DELETE_FILE_PATH_ID)
        .map(|d| d.literal())
    {
        Some(PrimitiveLiteral::String(s)) => Some(s.clone()),
        _ => None,
    };
    let delete_files = live
        .position_deletes()
        .map(|d| {
            let f = d.file();
            DeleteFile {
                path: f.file_path().to_string(),
                size: f.file_size_in_bytes(),
                spec_id: d.spec_id,
                partition: f.partition().clone(),
                referenced: f.referenced_data_file(),
                bounds: bound(f.lower_bounds()).zip(bound(f.upper_bounds())),
            }
        })
        .collect();
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
        d.spec_id == c.spec_id
            && d.partition == c.partition
            && match (&d.referenced, &d.bounds) {
                (Some(r), _) => *r == c.path,
                (None, Some((lo, hi))) => {
                    lo.as_str() <= c.path.as_str() && c.path.as_str() <= hi.as_str()
                }
                (None, None) => true,
            }
    };
    // Every delete file that applies to a candidate, read concurrently (bounded) first: one
    // after another they cost a round trip each (hundreds with many partitions).
    let needed: Vec<usize> = (0..delete_files.len())
        .filter(|&i| candidates.iter().any(|c| applies(&delete_files[i], c)))
        .collect();
    let wanted: Vec<(&str, u64)> = needed
        .iter()
        .map(|&i| (delete_files[i].path.as_str(), delete_files[i].size))
        .collect();
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

/// Marks the keys whose live row is newer than their change. Only rows of change files are
/// compared, and only with changes from change files: full-load rows come first.
async fn mark_stale(
    files: &Files,
    check: &StaleCheck,
    candidates: &[Candidate],
    live_hits: &[(usize, Vec<(i64, usize)>)],
    stale: &mut [bool],
) -> Result<()> {
    let conv = RowConverter::new(
        check
            .values
            .iter()
            .map(|v| SortField::new(v.data_type().clone()))
            .collect(),
    )?;
    let incoming = conv.convert_columns(&check.values)?;
    let mut work: Vec<(&Candidate, Vec<(i64, usize)>)> = Vec::new();
    for (i, hits) in live_hits {
        let c = &candidates[*i];
        if crate::write::is_full_load_file(&c.path) {
            continue;
        }
        let hits: Vec<(i64, usize)> = hits
            .iter()
            .filter(|(_, key)| !check.from_load.get(*key).copied().unwrap_or(false))
            .copied()
            .collect();
        if !hits.is_empty() {
            work.push((c, hits));
        }
    }
    // The files' ordering values, read concurrently (bounded), from the cache when warm.
    let work_ref = &work;
    let read: Vec<(usize, Vec<ArrayRef>)> = futures::stream::iter(0..work.len())
        .map(|w| async move {
            let (c, hits) = &work_ref[w];
            let positions: Vec<i64> = hits.iter().map(|(p, _)| *p).collect();
            let mut columns = Vec::with_capacity(check.values.len());
            for (fid, v) in check.field_ids.iter().zip(&check.values) {
                columns.push(match fid {
                    Some(fid) => {
                        let at = ValuesAt {
                            path: &c.path,
                            size: c.size,
                            field_id: *fid,
                            data_type: v.data_type(),
                        };
                        read_values_at(files, at, &positions).await?
                    }
                    None => arrow_array::new_null_array(v.data_type(), positions.len()),
                });
            }
            Ok::<_, Error>((w, columns))
        })
        .buffer_unordered(READ_CONCURRENCY)
        .try_collect()
        .await?;
    for (w, columns) in read {
        let hits = &work[w].1;
        let table_rows = conv.convert_columns(&columns)?;
        for (j, (_, key)) in hits.iter().enumerate() {
            if table_rows.row(j) > incoming.row(*key) {
                stale[*key] = true;
            }
        }
    }
    Ok(())
}

struct FileScan {
    opened: bool,
    cache_hit: bool,
    index_read: bool,
    index_written: bool,
    row_groups_read: usize,
    pruned_by_stats: usize,
    pruned_by_bloom: usize,
    /// (position, key index)
    hits: Vec<(i64, usize)>,
}

/// Reads the key columns of one data file, skipping row groups that cannot hold a key; or
/// answers from the key cache.
async fn scan_file(
    files: &Files,
    c: &Candidate,
    k: &Keys,
    large: &tokio::sync::Semaphore,
) -> Result<FileScan> {
    let cache = files.cache();
    if let Some(fk) = cache.cached_keys(&c.path, &k.sig) {
        let mut scan = FileScan::empty();
        scan.cache_hit = true;
        scan.hits = search(&fk, k)?;
        return Ok(scan);
    }
    let indexable = k.ints.is_some() && c.rows >= INDEX_MIN_ROWS;
    if indexable && let Some(packed) = read_index(files.io(), c, &k.sig).await {
        let fk = Arc::new(FileKeys {
            values: KeyValues::Packed(packed),
            sorted: true,
        });
        let mut scan = FileScan::empty();
        scan.index_read = true;
        scan.hits = search(&fk, k)?;
        cache.cache_keys(&c.path, &k.sig, fk);
        return Ok(scan);
    }
    let _permit = large_read_permit(large, c.size).await?;
    let reader = open_parquet(files.io(), &c.path, c.size).await?;
    let mut builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let md = builder.metadata().clone();
    let descr = md.file_metadata().schema_descr_ptr();
    let leaves = key_leaves(&md, k, &c.path)?;
    let mut scan = FileScan::empty();
    scan.opened = true;
    let mut selected: Vec<usize> = Vec::new();
    let mut starts = Vec::with_capacity(md.num_row_groups());
    let mut start = 0i64;
    for rg in 0..md.num_row_groups() {
        starts.push(start);
        start += md.row_group(rg).num_rows();
        let stats = md.row_group(rg).column(leaves[0]).statistics();
        let in_range: Option<Vec<Probe>> = candidates_in_range(&k.first, stats);
        match in_range {
            Some(v) if v.is_empty() => {
                scan.pruned_by_stats += 1;
                continue;
            }
            Some(v) => {
                if let Some(bloom) = builder
                    .get_row_group_column_bloom_filter(rg, leaves[0])
                    .await?
                {
                    let physical = descr.column(leaves[0]).physical_type();
                    if !v.iter().any(|p| p.check(&bloom, physical)) {
                        scan.pruned_by_bloom += 1;
                        continue;
                    }
                }
            }
            None => {}
        }
        selected.push(rg);
    }
    // Worth caching: read the whole key column once, later lookups search memory.
    let fill = cache.key_budget() > 0 && selected.len() * 2 >= md.num_row_groups();
    if fill {
        selected = (0..md.num_row_groups()).collect();
    }
    if selected.is_empty() {
        return Ok(scan);
    }
    scan.row_groups_read = selected.len();
    let mut leaf_sorted = leaves.clone();
    leaf_sorted.sort_unstable();
    leaf_sorted.dedup();
    let stream = builder
        .with_projection(ProjectionMask::leaves(&descr, leaf_sorted.iter().copied()))
        .with_row_groups(selected.clone())
        .with_batch_size(64 * 1024)
        .build()?;
    let batches: Vec<RecordBatch> = stream.try_collect().await?;
    // Row positions: the selected row groups in order, rows consumed sequentially.
    let mut rg_iter = selected
        .iter()
        .map(|&rg| (starts[rg], md.row_group(rg).num_rows()));
    let (mut rg_start, mut rg_left) = rg_iter.next().unwrap_or((0, 0));
    let mut offset = 0i64;
    if fill {
        let total: usize = batches.iter().map(|b| b.num_rows()).sum();
        let values = key_values(&batches, k, total, &c.path)?;
        let sorted = values.sorted();
        let fk = Arc::new(FileKeys { values, sorted });
        scan.hits = search(&fk, k)?;
        // The next fresh process reads this column from a key index instead, if the index is
        // smaller than the column as stored (dense or clustered keys; not random 64-bit ids).
        if indexable && matches!(fk.values, KeyValues::Packed(_)) {
            let column_bytes = key_column_bytes(&md, &leaves);
            write_index(files, c, &k.sig, fk.clone(), column_bytes);
            scan.index_written = true;
        }
        cache.cache_keys(&c.path, &k.sig, fk);
        return Ok(scan);
    }
    let index = &k.encoded()?.index;
    for b in batches {
        let cols = key_columns_of(&b, k)?;
        let rows: Rows = k.converter.convert_columns(&cols)?;
        for i in 0..b.num_rows() {
            while rg_left == 0 {
                match rg_iter.next() {
                    Some((s, n)) => {
                        rg_start = s;
                        rg_left = n;
                        offset = 0;
                    }
                    None => {
                        return Err(Error::Table(format!(
                            "{}: more rows than row groups hold",
                            c.path
                        )));
                    }
                }
            }
            if let Some(&key) = index.get(rows.row(i).as_ref()) {
                scan.hits.push((rg_start + offset, key));
            }
            offset += 1;
            rg_left -= 1;
        }
    }
    Ok(scan)
}

/// A data file's key columns as read (every row, in file order), in the form a lookup keeps:
/// packed if a single integer key ascends, plain integers if not, row-encoded otherwise.
fn key_values(batches: &[RecordBatch], k: &Keys, total: usize, path: &str) -> Result<KeyValues> {
    Ok(if k.ints.is_some() {
        // Packed as the batches come (no 8-byte copy of the column) while they ascend.
        let mut packed = Some(PackedBuilder::default());
        let mut v = Vec::new();
        for b in batches {
            let cols = key_columns_of(b, k)?;
            let col = cols.first().filter(|c| c.null_count() == 0);
            let Some(x) = col.and_then(int_values) else {
                return Err(Error::Internal(format!(
                    "{}: key column is not an integer column without NULLs",
                    path
                )));
            };
            if let Some(p) = packed.as_mut()
                && !p.extend(&x)
            {
                // Out of order: start over plain, from the batches before this one.
                packed = None;
                v.reserve(total);
                for before in batches.iter().take_while(|x| !std::ptr::eq(*x, b)) {
                    let cols = key_columns_of(before, k)?;
                    v.extend(cols.first().and_then(int_values).unwrap_or_default());
                }
            }
            if packed.is_none() {
                v.extend(x);
            }
        }
        match packed {
            Some(p) => KeyValues::Packed(p.finish()),
            None => KeyValues::Ints(v),
        }
    } else {
        let mut rows = k.converter.empty_rows(total, total * 8);
        for b in batches {
            k.converter.append(&mut rows, &key_columns_of(b, k)?)?;
        }
        KeyValues::Rows(rows)
    })
}

/// Writes the key index of a data file that no lookup has read whole yet (compaction's output),
/// from its key column as stored. `Ok(false)`: none is written (not a single integer key of
/// `schema`, the table's current one, fewer than [`INDEX_MIN_ROWS`] rows, keys out of order, or an index
/// no smaller than the column).
pub async fn write_key_index(
    file_io: &FileIO,
    schema: &iceberg::spec::Schema,
    path: &str,
    size: u64,
    rows: u64,
) -> Result<bool> {
    use iceberg::spec::{PrimitiveType, Type};
    let field_ids = crate::evolve::key_field_ids(schema);
    let empty: ArrayRef = match field_ids.as_slice() {
        [fid] => match schema.field_by_id(*fid).map(|f| f.field_type.as_ref()) {
            Some(Type::Primitive(PrimitiveType::Long)) => {
                Arc::new(arrow_array::Int64Array::from(Vec::<i64>::new()))
            }
            Some(Type::Primitive(PrimitiveType::Int)) => {
                Arc::new(arrow_array::Int32Array::from(Vec::<i32>::new()))
            }
            _ => return Ok(false),
        },
        _ => return Ok(false),
    };
    if rows < INDEX_MIN_ROWS {
        return Ok(false);
    }
    // The key as a lookup names it: its types come from the batch of changed keys, which is
    // in the table's current types.
    let k = Keys::new(&RecordBatch::try_from_iter([("k", empty)])?, field_ids)?;
    let reader = open_parquet(file_io, path, size).await?;
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let md = builder.metadata().clone();
    let leaves = key_leaves(&md, &k, path)?;
    let batches: Vec<RecordBatch> = builder
        .with_projection(ProjectionMask::leaves(
            md.file_metadata().schema_descr_ptr().as_ref(),
            leaves.iter().copied(),
        ))
        .with_batch_size(64 * 1024)
        .build()?
        .try_collect()
        .await?;
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    if total as u64 != rows {
        return Err(Error::Table(format!(
            "{path}: {total} rows read, the manifest says {rows}"
        )));
    }
    let keys = Arc::new(FileKeys {
        values: key_values(&batches, &k, total, path)?,
        sorted: true,
    });
    store_index(
        file_io,
        path,
        size,
        k.sig,
        keys,
        key_column_bytes(&md, &leaves),
    )
    .await
}

/// Uploads a key index in the background ([`store_index`]); the owner of the cache waits for
/// it ([`crate::files::TableCache::finish_uploads`]).
fn write_index(files: &Files, c: &Candidate, sig: &str, keys: Arc<FileKeys>, column_bytes: usize) {
    let (file_io, data_file, sig) = (files.io().clone(), c.path.clone(), sig.to_string());
    let file_size = c.size;
    let task = tokio::spawn(async move {
        match store_index(&file_io, &data_file, file_size, sig, keys, column_bytes).await {
            Ok(written) => tracing::debug!(file = %data_file, written, "key index"),
            Err(e) => tracing::warn!(file = %data_file, error = %e, "key index not written"),
        }
    });
    files.cache().track_upload(task);
}

/// Encodes the key index of `data_file` (of `file_size` bytes; keys of the types `sig` names)
/// and uploads it beside the file, if the keys are packed and the index is smaller than
/// `column_bytes`, the key column as the file stores it (dense or clustered keys are; random
/// 64-bit ids need not be). `Ok(false)`: not written.
async fn store_index(
    file_io: &FileIO,
    data_file: &str,
    file_size: u64,
    sig: String,
    keys: Arc<FileKeys>,
    column_bytes: usize,
) -> Result<bool> {
    // Compressing a large file's keys takes milliseconds: off the async workers.
    let encoded = tokio::task::spawn_blocking(move || match &keys.values {
        KeyValues::Packed(p) => p.encode(file_size, &sig).map(Some),
        _ => Ok(None),
    })
    .await
    .map_err(|e| Error::Internal(format!("key index: {e}")))??;
    match encoded {
        Some(b) if b.len() < column_bytes => {
            file_io
                .new_output(index::index_path(data_file))?
                .write(bytes::Bytes::from(b))
                .await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Parquet leaf index of each key column, by field id.
fn key_leaves(
    md: &parquet::file::metadata::ParquetMetaData,
    k: &Keys,
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

/// The stored key index of a candidate file, if there is a usable one. A missing, foreign or
/// damaged index is no error: the file's key column is read instead.
async fn read_index(file_io: &FileIO, c: &Candidate, sig: &str) -> Option<PackedKeys> {
    let path = index::index_path(&c.path);
    let bytes = match file_io.new_input(&path) {
        Ok(input) => input.read().await,
        Err(e) => Err(e),
    };
    // Not found is the usual reason (no lookup read the file whole yet); the storage layer
    // does not tell it apart from other failures, and either way the file itself is read.
    let bytes = bytes
        .map_err(|e| tracing::debug!(index = %path, error = %e, "no key index"))
        .ok()?;
    match PackedKeys::decode(&bytes, c.size, c.rows, sig) {
        Ok(Some(p)) => Some(p),
        Ok(None) => {
            tracing::debug!(index = %path, "key index of other key types or another file");
            None
        }
        Err(e) => {
            tracing::warn!(index = %path, error = %e, "key index unusable; reading the file");
            None
        }
    }
}

/// Compressed bytes of the key columns in a Parquet file.
fn key_column_bytes(md: &parquet::file::metadata::ParquetMetaData, leaves: &[usize]) -> usize {
    md.row_groups()
        .iter()
        .flat_map(|rg| leaves.iter().map(move |&l| rg.column(l).compressed_size()))
        .sum::<i64>()
        .max(0) as usize
}

impl FileScan {
    fn empty() -> FileScan {
        FileScan {
            opened: false,
            cache_hit: false,
            index_read: false,
            index_written: false,
            row_groups_read: 0,
            pruned_by_stats: 0,
            pruned_by_bloom: 0,
            hits: Vec::new(),
        }
    }
}

/// Positions of the looked-up keys in a file's cached key rows.
fn search(fk: &FileKeys, k: &Keys) -> Result<Vec<(i64, usize)>> {
    let rows = match (&fk.values, &k.ints) {
        (KeyValues::Rows(rows), _) => rows,
        (KeyValues::Ints(v), Some(keys)) => return Ok(search_ints(v, fk.sorted, keys)),
        (KeyValues::Packed(p), Some(keys)) => return Ok(p.search(keys)),
        // Unreachable: the cache entry's name says which form it holds (`Keys::sig`).
        (KeyValues::Ints(_) | KeyValues::Packed(_), None) => return Ok(Vec::new()),
    };
    let encoded = k.encoded()?;
    let mut hits = Vec::new();
    if fk.sorted {
        // Keys ascend, so each search starts where the last one ended and gallops forward:
        // probes stay near each other (a binary search over the whole column per key was a
        // cache miss per probe, the largest cost of a warm lookup).
        let n = rows.num_rows();
        let mut start = 0usize;
        for (key, idx) in &encoded.sorted {
            let key = key.as_slice();
            let mut step = 1usize;
            let mut lo = start;
            let mut hi = start;
            while hi < n && rows.row(hi).as_ref() < key {
                lo = hi + 1;
                hi = hi.saturating_add(step).min(n);
                step = step.saturating_mul(2);
            }
            while lo < hi {
                let mid = (lo + hi) / 2;
                if rows.row(mid).as_ref() < key {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            while lo < n && rows.row(lo).as_ref() == key {
                hits.push((lo as i64, *idx));
                lo += 1;
            }
            start = lo;
        }
    } else {
        for i in 0..rows.num_rows() {
            if let Some(&idx) = encoded.index.get(rows.row(i).as_ref()) {
                hits.push((i as i64, idx));
            }
        }
    }
    Ok(hits)
}

/// [`search`] over a single integer key column.
fn search_ints(v: &[i64], sorted: bool, keys: &[(i64, usize)]) -> Vec<(i64, usize)> {
    let mut hits = Vec::new();
    if sorted {
        let mut start = 0usize;
        for &(key, idx) in keys {
            // Gallop from where the previous key ended, then binary-search the last stride.
            let mut step = 1usize;
            let (mut lo, mut hi) = (start, start);
            while hi < v.len() && v[hi] < key {
                lo = hi + 1;
                hi = hi.saturating_add(step).min(v.len());
                step = step.saturating_mul(2);
            }
            lo += v[lo..hi].partition_point(|x| *x < key);
            while lo < v.len() && v[lo] == key {
                hits.push((lo as i64, idx));
                lo += 1;
            }
            start = lo;
        }
    } else {
        for (i, x) in v.iter().enumerate() {
            if let Ok(j) = keys.binary_search_by_key(x, |(k, _)| *k) {
                hits.push((i as i64, keys[j].1));
            }
        }
    }
    hits
}

/// The key columns of a projected batch in key order, cast to the current key types (a file
/// written before a promotion holds the narrower type).
fn key_columns_of(b: &RecordBatch, k: &Keys) -> Result<Vec<ArrayRef>> {
    let schema = b.schema();
    k.field_ids
        .iter()
        .zip(&k.types)
        .map(|(fid, t)| {
            let i = schema
                .fields()
                .iter()
                .position(|f| {
                    f.metadata()
                        .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
                        .and_then(|v| v.parse::<i32>().ok())
                        == Some(*fid)
                })
                .ok_or_else(|| {
                    Error::Internal(format!("key field {fid} missing from projection"))
                })?;
            Ok(arrow_cast::cast(b.column(i), t)?)
        })
        .collect()
}

/// A key value to test against a bloom filter.
enum Probe<'a> {
    Int(i64),
    Str(&'a str),
}

impl Probe<'_> {
    fn check(&self, bloom: &parquet::bloom_filter::Sbbf, physical: parquet::basic::Type) -> bool {
        use parquet::basic::Type as T;
        match (self, physical) {
            (Probe::Int(v), T::INT64) => bloom.check(v),
            (Probe::Int(v), T::INT32) => i32::try_from(*v).is_ok_and(|v| bloom.check(&v)),
            (Probe::Str(s), T::BYTE_ARRAY) => bloom.check(*s),
            _ => true,
        }
    }
}

/// Keys (first column) inside a row group's min/max; `None` when statistics cannot tell.
fn candidates_in_range<'a>(
    first: &'a FirstColumn,
    stats: Option<&Statistics>,
) -> Option<Vec<Probe<'a>>> {
    let stats = stats?;
    match (first, stats) {
        (FirstColumn::Ints(v), Statistics::Int64(s)) => {
            let (lo, hi) = (*s.min_opt()?, *s.max_opt()?);
            Some(range(v, &lo, &hi).iter().map(|x| Probe::Int(*x)).collect())
        }
        (FirstColumn::Ints(v), Statistics::Int32(s)) => {
            let (lo, hi) = (*s.min_opt()? as i64, *s.max_opt()? as i64);
            Some(range(v, &lo, &hi).iter().map(|x| Probe::Int(*x)).collect())
        }
        (FirstColumn::Strings(v), Statistics::ByteArray(s))
            if s.min_is_exact() && s.max_is_exact() =>
        {
            let lo = std::str::from_utf8(s.min_opt()?.data()).ok()?;
            let hi = std::str::from_utf8(s.max_opt()?.data()).ok()?;
            let at = v.partition_point(|x| x.as_str() < lo);
            let end = v.partition_point(|x| x.as_str() <= hi);
            Some(
                v[at..end.max(at)]
                    .iter()
                    .map(|x| Probe::Str(x.as_str()))
                    .collect(),
            )
        }
        _ => None,
    }
}

fn range<'a, T: Ord>(v: &'a [T], lo: &T, hi: &T) -> &'a [T] {
    let at = v.partition_point(|x| x < lo);
    let end = v.partition_point(|x| x <= hi);
    &v[at..end.max(at)]
}

/// One column of one data file, compared as `data_type`.
struct ValuesAt<'a> {
    path: &'a str,
    size: u64,
    field_id: i32,
    data_type: &'a DataType,
}

/// Values of column `field_id` at `positions` of a data file, cast to `data_type` (NULL where
/// the file predates the column). Reads only the row groups that hold those positions, or the
/// whole column (kept in `cache`) when most of them are needed.
async fn read_values_at(files: &Files, at: ValuesAt<'_>, positions: &[i64]) -> Result<ArrayRef> {
    let cache = files.cache();
    let ValuesAt {
        path,
        size,
        field_id,
        data_type,
    } = at;
    let sig = format!("values {field_id} {data_type}");
    let take_at = |all: &ArrayRef, idx: arrow_array::UInt64Array| -> Result<ArrayRef> {
        if let Some(p) = idx.values().iter().find(|p| **p as usize >= all.len()) {
            return Err(Error::Table(format!(
                "{path}: row {p} beyond the file's {} rows",
                all.len()
            )));
        }
        Ok(arrow_select::take::take(all, &idx, None)?)
    };
    if let Some(all) = cache.cached_values(path, &sig) {
        let idx = arrow_array::UInt64Array::from_iter_values(positions.iter().map(|p| *p as u64));
        return take_at(&all, idx);
    }
    let reader = open_parquet(files.io(), path, size).await?;
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let md = builder.metadata().clone();
    let descr = md.file_metadata().schema_descr_ptr();
    let leaf = (0..descr.num_columns()).find(|&i| {
        let t = descr.column(i).self_type_ptr();
        t.get_basic_info().has_id() && t.get_basic_info().id() == field_id
    });
    let Some(leaf) = leaf else {
        return Ok(arrow_array::new_null_array(data_type, positions.len()));
    };
    let mut starts = Vec::with_capacity(md.num_row_groups());
    let mut start = 0i64;
    for rg in 0..md.num_row_groups() {
        starts.push(start);
        start += md.row_group(rg).num_rows();
    }
    let rg_of = |p: i64| starts.partition_point(|s| *s <= p).saturating_sub(1);
    let mut groups: Vec<usize> = positions.iter().map(|p| rg_of(*p)).collect();
    groups.sort_unstable();
    groups.dedup();
    // Same rule as the key columns: when most of the file is needed anyway, read the whole
    // column once and keep it, so later lookups of a warm process compare from memory.
    let fill = cache.key_budget() > 0 && groups.len() * 2 >= md.num_row_groups();
    if fill {
        groups = (0..md.num_row_groups()).collect();
    }
    let stream = builder
        .with_projection(ProjectionMask::leaves(&descr, [leaf]))
        .with_row_groups(groups.clone())
        .build()?;
    let batches: Vec<RecordBatch> = stream.try_collect().await?;
    let columns: Vec<ArrayRef> = batches
        .iter()
        .map(|b| arrow_cast::cast(b.column(0), data_type))
        .collect::<std::result::Result<_, _>>()?;
    let refs: Vec<&dyn Array> = columns.iter().map(|c| c.as_ref()).collect();
    let all = if refs.is_empty() {
        arrow_array::new_empty_array(data_type)
    } else {
        arrow_select::concat::concat(&refs)?
    };
    if fill {
        cache.cache_values(path, &sig, all.clone());
    }
    // Offset of each selected row group within `all`.
    let mut offset = std::collections::HashMap::new();
    let mut at = 0i64;
    for g in &groups {
        offset.insert(*g, at);
        at += md.row_group(*g).num_rows();
    }
    let idx = arrow_array::UInt64Array::from_iter_values(positions.iter().map(|p| {
        let g = rg_of(*p);
        (offset[&g] + (p - starts[g])) as u64
    }));
    take_at(&all, idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_signature_does_not_change() {
        // Stored key indexes carry it: a change would make every one of them unusable.
        assert_eq!(
            key_signature(&[1], &[DataType::Int64], true),
            "[1][Int64]i64"
        );
        assert_eq!(
            key_signature(&[1, 3], &[DataType::Int32, DataType::Utf8], false),
            "[1, 3][Int32, Utf8]rows"
        );
    }
    use arrow_array::Int64Array;

    fn batch(values: &[i64]) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        RecordBatch::try_from_iter([("id", a)]).expect("batch")
    }

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

    /// The galloping search finds exactly what a scan of every row finds, with duplicates
    /// in the file, keys before, between and after the file's range, dense and sparse keys.
    #[test]
    fn search_matches_a_full_scan() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for case in 0..200 {
            let n = next(3000) as usize;
            let span = 1 + next(10_000);
            let mut file: Vec<i64> = (0..n).map(|_| next(span) as i64 - 50).collect();
            file.sort_unstable();
            let nkeys = 1 + next(if case % 2 == 0 { 20 } else { 5000 }) as usize;
            let keys: Vec<i64> = (0..nkeys).map(|_| next(span + 100) as i64 - 100).collect();
            let mut uniq = keys.clone();
            uniq.sort_unstable();
            uniq.dedup();
            let k = Keys::new(&batch(&uniq), vec![1]).expect("keys");
            assert!(k.ints.is_some(), "a long key is searched as integers");
            let mut want: Vec<(i64, usize)> = Vec::new();
            for (pos, v) in file.iter().enumerate() {
                if let Some(i) = uniq.iter().position(|u| u == v) {
                    want.push((pos as i64, i));
                }
            }
            want.sort_unstable();
            // The same file as sorted rows, sorted integers, and shuffled integers.
            let fb = batch(&file);
            let rows = k.converter.convert_columns(fb.columns()).expect("rows");
            let mut shuffled: Vec<(usize, i64)> = file.iter().copied().enumerate().collect();
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, next(i as u64 + 1) as usize);
            }
            let forms = [
                (KeyValues::Rows(rows), true),
                (KeyValues::Ints(file.clone()), true),
                (crate::files::keys::pack(file.clone()), true),
                (
                    KeyValues::Ints(shuffled.iter().map(|(_, v)| *v).collect()),
                    false,
                ),
            ];
            for (form, (values, sorted)) in forms.into_iter().enumerate() {
                let mut got = search(&FileKeys { values, sorted }, &k).expect("search");
                if !sorted {
                    // Back to positions in the unshuffled file.
                    for h in &mut got {
                        h.0 = shuffled[h.0 as usize].0 as i64;
                    }
                }
                got.sort_unstable();
                assert_eq!(
                    got,
                    want,
                    "case {case} form {form}: file {n} rows, {} keys",
                    uniq.len()
                );
            }
        }
    }

    /// What a writer remembers is found by a lookup with keys of the same types (one integer
    /// key, a string key, a composite key) and answers as a read of the file would: the cache
    /// entry names must agree, or every warm lookup reads its own files back.
    #[test]
    fn remembered_keys_answer_lookups() {
        use arrow_array::StringArray;
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![3, 5, 5, 9, 12]));
        let names: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e"]));
        let cases: Vec<(Vec<i32>, Vec<ArrayRef>, Vec<usize>)> = vec![
            (vec![1], vec![ids.clone()], vec![1, 2, 4]),
            (vec![2], vec![names.clone()], vec![1, 4]),
            (vec![1, 2], vec![ids.clone(), names.clone()], vec![2, 3]),
        ];
        for (fids, cols, look_at) in cases {
            let cache = crate::files::TableCache::default();
            cache.remember_keys("s3://w/t/data/f.parquet", &fids, &cols);
            // The keys looked up: some rows of the file, and one absent key.
            let idx = arrow_array::UInt32Array::from(
                look_at.iter().map(|i| *i as u32).collect::<Vec<_>>(),
            );
            let mut key_cols: Vec<ArrayRef> = cols
                .iter()
                .map(|c| arrow_select::take::take(c, &idx, None).expect("take"))
                .collect();
            let absent: Vec<ArrayRef> = cols
                .iter()
                .map(|c| match c.data_type() {
                    DataType::Int64 => Arc::new(Int64Array::from(vec![100])) as ArrayRef,
                    _ => Arc::new(StringArray::from(vec!["zz"])) as ArrayRef,
                })
                .collect();
            for (k, a) in key_cols.iter_mut().zip(absent) {
                *k = arrow_select::concat::concat(&[k.as_ref(), a.as_ref()]).expect("concat");
            }
            let fields: Vec<(String, ArrayRef)> = key_cols
                .into_iter()
                .enumerate()
                .map(|(i, c)| (format!("k{i}"), c))
                .collect();
            let keys = RecordBatch::try_from_iter(fields).expect("keys");
            let k = Keys::new(&keys, fids.clone()).expect("keys");
            let fk = cache
                .cached_keys("s3://w/t/data/f.parquet", &k.sig)
                .unwrap_or_else(|| panic!("{fids:?}: remembered keys not found by a lookup"));
            let mut got = search(&fk, &k).expect("search");
            got.sort_unstable();
            // Row 1 and 2 share id 5: an id-only lookup of 5 finds both rows.
            let mut want: Vec<(i64, usize)> = Vec::new();
            for (ki, row) in look_at.iter().enumerate() {
                let same = |r: usize| match fids.as_slice() {
                    [1] => [3, 5, 5, 9, 12][r] == [3, 5, 5, 9, 12][*row],
                    _ => r == *row,
                };
                for r in 0..5 {
                    if same(r) && !want.iter().any(|(p, _)| *p == r as i64) {
                        want.push((r as i64, ki));
                    }
                }
            }
            want.sort_unstable();
            if fids == vec![1] {
                // Duplicate lookup keys collapse to one index per value.
                got.dedup_by_key(|h| h.0);
            }
            assert_eq!(got, want, "{fids:?}");
        }
    }
}
