//! One candidate file's key column, searched for the probed keys: from the cache, from the
//! file's key index, or read with its row groups pruned by statistics and bloom filters.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::Rows;
use futures::TryStreamExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::file::statistics::Statistics;

use super::Candidate;
use super::key_index::{key_leaves, read_directory, search_index, write_index};
use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::index::{INDEX_MIN_ROWS, PackedBuilder};
use crate::files::keys::{FileKeys, KeyValues};
use crate::files::parquet::{large_read_permit, open_parquet};
use crate::files::probe::{FirstColumn, ProbeKeys};
use crate::types::int_values;

pub(super) struct FileScan {
    pub(super) opened: bool,
    pub(super) cache_hit: bool,
    pub(super) index_read: bool,
    pub(super) index_written: bool,
    /// Key index pages read from storage, and the range requests that read them.
    pub(super) pages_read: usize,
    pub(super) page_requests: usize,
    pub(super) row_groups_read: usize,
    pub(super) pruned_by_stats: usize,
    pub(super) pruned_by_bloom: usize,
    /// (position, key index)
    pub(super) hits: Vec<(i64, usize)>,
}

/// Reads the key columns of one data file, skipping row groups that cannot hold a key; or
/// answers from the key cache.
pub(super) async fn scan_file(
    files: &Files,
    c: &Candidate,
    k: &ProbeKeys,
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
    if indexable && let Some(scan) = scan_index(files, c, k).await {
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
        // The next fresh process reads this file's key index instead of the column.
        if indexable && matches!(fk.values, KeyValues::Packed(_)) {
            write_index(files, c, &k.sig, fk.clone());
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

/// Answers from the file's stored key index ([`crate::files::index`]): its directory (cached)
/// and the pages the keys fall in. `None`: no usable index (none stored, another file's, or a
/// page that does not read): the caller reads the key column.
async fn scan_index(files: &Files, c: &Candidate, k: &ProbeKeys) -> Option<FileScan> {
    let keys = k.ints.as_deref()?;
    let cache = files.cache();
    let mut scan = FileScan::empty();
    let dir = match cache.cached_dir(&c.path, &k.sig) {
        Some(d) => d,
        None => {
            let d = Arc::new(read_directory(files.io(), c, &k.sig).await?);
            cache.cache_dir(&c.path, &k.sig, d.clone());
            scan.index_read = true;
            d
        }
    };
    match search_index(files, c, &k.sig, &dir, keys).await {
        Ok(found) => {
            scan.hits = found.hits;
            scan.pages_read = found.pages_read;
            scan.page_requests = found.page_requests;
            scan.cache_hit = !scan.index_read && found.pages_read == 0;
            Some(scan)
        }
        Err(e) => {
            tracing::warn!(file = %c.path, error = %e, "key index pages unusable; reading the file");
            None
        }
    }
}

/// A data file's key columns as read (every row, in file order), in the form a lookup keeps:
/// packed if a single integer key ascends, plain integers if not, row-encoded otherwise.
pub(super) fn key_values(
    batches: &[RecordBatch],
    k: &ProbeKeys,
    total: usize,
    path: &str,
) -> Result<KeyValues> {
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

impl FileScan {
    fn empty() -> FileScan {
        FileScan {
            opened: false,
            cache_hit: false,
            index_read: false,
            index_written: false,
            pages_read: 0,
            page_requests: 0,
            row_groups_read: 0,
            pruned_by_stats: 0,
            pruned_by_bloom: 0,
            hits: Vec::new(),
        }
    }
}

/// Positions of the looked-up keys in a file's cached key rows.
fn search(fk: &FileKeys, k: &ProbeKeys) -> Result<Vec<(i64, usize)>> {
    let rows = match (&fk.values, &k.ints) {
        (KeyValues::Rows(rows), _) => rows,
        (KeyValues::Ints(v), Some(keys)) => return Ok(search_ints(v, fk.sorted, keys)),
        (KeyValues::Packed(p), Some(keys)) => return Ok(p.search(keys)),
        // Unreachable: the cache entry's name says which form it holds (`ProbeKeys::sig`).
        (KeyValues::Ints(_) | KeyValues::Packed(_), None) => return Ok(Vec::new()),
    };
    let encoded = k.encoded()?;
    let mut hits = Vec::new();
    if fk.sorted {
        // ProbeKeys ascend, so each search starts where the last one ended and gallops forward:
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
fn key_columns_of(b: &RecordBatch, k: &ProbeKeys) -> Result<Vec<ArrayRef>> {
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

/// ProbeKeys (first column) inside a row group's min/max; `None` when statistics cannot tell.
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::DataType;

    use arrow_array::Int64Array;

    fn batch(values: &[i64]) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        RecordBatch::try_from_iter([("id", a)]).expect("batch")
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
            let k = ProbeKeys::new(&batch(&uniq), vec![1]).expect("keys");
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
            let k = ProbeKeys::new(&keys, fids.clone()).expect("keys");
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
