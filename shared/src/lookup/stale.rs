//! Which found rows are newer than their change: the ordering columns of the rows a lookup
//! found, read at their positions, compared with the changes'.

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::DataType;
use futures::{StreamExt, TryStreamExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;

use super::{Candidate, StaleCheck};
use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::parquet::{READ_CONCURRENCY, open_parquet};

/// Marks the keys whose live row is newer than their change. Only rows of change files are
/// compared, and only with changes from change files: full-load rows come first.
pub(super) async fn mark_stale(
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
        if crate::files::vocabulary::is_full_load_file(&c.path) {
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

/// One column of one data file, compared as `data_type`.
pub(crate) struct ValuesAt<'a> {
    pub(crate) path: &'a str,
    pub(crate) size: u64,
    pub(crate) field_id: i32,
    pub(crate) data_type: &'a DataType,
}

/// Values of column `field_id` at `positions` of a data file, cast to `data_type` (NULL where
/// the file predates the column). Reads only the row groups that hold those positions, or the
/// whole column (kept in `cache`) when most of them are needed.
pub(crate) async fn read_values_at(
    files: &Files,
    at: ValuesAt<'_>,
    positions: &[i64],
) -> Result<ArrayRef> {
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
