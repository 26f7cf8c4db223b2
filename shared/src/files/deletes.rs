//! Position-delete files: their content, as every reader of a table's deletes needs it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::cast::AsArray as _;
use arrow_array::types::Int64Type;
use arrow_schema::DataType;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, PrimitiveLiteral};

use super::cache::{Kind, get, put};
use crate::error::Result;
use crate::write::FileDeletes;

/// Field ids Iceberg reserves for position-delete files.
pub(crate) const DELETE_FILE_PATH_ID: i32 = 2147483546;
pub(crate) const DELETE_POS_ID: i32 = 2147483545;

/// The data files a position-delete file may delete rows of, as its manifest entry tells
/// without reading it: the one it names (`referenced_data_file`), else the range of its
/// `file_path` column's bounds, else any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Targets {
    One(String),
    Range(String, String),
    Any,
}

impl Targets {
    pub(crate) fn of(f: &DataFile) -> Targets {
        if let Some(r) = f.referenced_data_file() {
            return Targets::One(r);
        }
        let bound = |m: &HashMap<i32, iceberg::spec::Datum>| match m
            .get(&DELETE_FILE_PATH_ID)
            .map(|d| d.literal())
        {
            Some(PrimitiveLiteral::String(s)) => Some(s.clone()),
            _ => None,
        };
        match (bound(f.lower_bounds()), bound(f.upper_bounds())) {
            (Some(lo), Some(hi)) => Targets::Range(lo, hi),
            _ => Targets::Any,
        }
    }

    /// Whether rows of data file `path` may be deleted.
    pub(crate) fn may_target(&self, path: &str) -> bool {
        match self {
            Targets::One(r) => r == path,
            Targets::Range(lo, hi) => lo.as_str() <= path && path <= hi.as_str(),
            Targets::Any => true,
        }
    }

    /// Whether rows of one of `paths` may be deleted.
    pub(crate) fn may_target_any(&self, paths: &BTreeSet<String>) -> bool {
        match self {
            Targets::One(r) => paths.contains(r),
            Targets::Range(lo, hi) => paths.range(lo.clone()..=hi.clone()).next().is_some(),
            Targets::Any => !paths.is_empty(),
        }
    }
}

/// Content of a position-delete file: deleted positions per data file path.
pub(crate) type DeletedPositions = HashMap<String, Vec<i64>>;

/// Reads a position-delete file (sorted and deduplicated per data file).
pub(crate) async fn read_position_deletes(
    file_io: &FileIO,
    path: &str,
    size: u64,
) -> Result<DeletedPositions> {
    let batches = super::parquet::read_all(file_io, path, size).await?;
    let mut map: DeletedPositions = HashMap::new();
    for b in batches {
        let (paths, pos) = (b.column(0), b.column(1));
        let paths = arrow_cast::cast(paths, &DataType::Utf8)?;
        let paths = paths.as_string::<i32>();
        let pos = arrow_cast::cast(pos, &DataType::Int64)?;
        let pos = pos.as_primitive::<Int64Type>();
        // Rows come grouped by path (the spec sorts them by path, then position).
        let mut i = 0;
        while i < b.num_rows() {
            let path = paths.value(i);
            let run = (i..b.num_rows())
                .find(|&r| paths.value(r) != path)
                .unwrap_or(b.num_rows());
            map.entry(path.to_string())
                .or_default()
                .extend_from_slice(&pos.values()[i..run]);
            i = run;
        }
    }
    // Lookups merge these lists with sorted hits: ascending, whatever the writer did.
    for v in map.values_mut() {
        if !v.is_sorted() {
            v.sort_unstable();
        }
        v.dedup();
    }
    Ok(map)
}

impl super::Files {
    /// The content of the position-delete file at `path`, and whether it was read from
    /// storage (not the cache).
    pub(crate) async fn position_deletes(
        &self,
        path: &str,
        size: u64,
        fill: super::Fill,
    ) -> Result<(Arc<DeletedPositions>, bool)> {
        if let Some(d) = get(&self.cache().deletes, path) {
            return Ok((d, false));
        }
        let content = Arc::new(read_position_deletes(self.io(), path, size).await?);
        self.cache().count_read(Kind::PositionDeletes);
        if fill == super::Fill::Keep {
            put(&self.cache().deletes, path.to_string(), content.clone());
        }
        Ok((content, true))
    }

    /// Keeps the content of a position-delete file this process just wrote.
    pub(crate) fn remember_position_deletes(&self, path: &str, content: DeletedPositions) {
        put(&self.cache().deletes, path.to_string(), Arc::new(content));
    }
}

/// The deletes a commit writes so that each data file keeps at most one live delete file (the
/// rule Iceberg v3 sets for deletion vectors, applied to v2 position deletes): per data file,
/// the commit's new positions with those of every live delete file that deletes rows of it,
/// and the delete files those replace (removed by the same commit).
#[derive(Debug, Default)]
pub(crate) struct MergedDeletes {
    /// Every position each data file's one delete file holds, by data file path.
    pub deletes: BTreeMap<String, FileDeletes>,
    /// Live delete files whose positions `deletes` holds.
    pub replaced: BTreeSet<String>,
}

impl super::Files {
    /// Merges `new` (positions per data file) with the live deletes of the current snapshot of
    /// `md`. A delete file that deletes rows of several data files (an earlier version's, or
    /// another engine's partition-scoped file) is replaced whole: each of its other live data
    /// files gets its own merged file too, and so on for their delete files (the first commit
    /// on such a table splits them once; afterwards every delete file names one data file).
    /// Positions of data files no longer live are dropped with the files that held them.
    pub(crate) async fn merge_with_live_deletes(
        &self,
        md: &iceberg::spec::TableMetadata,
        new: &BTreeMap<String, FileDeletes>,
    ) -> Result<MergedDeletes> {
        let mut out = MergedDeletes {
            deletes: new.clone(),
            replaced: BTreeSet::new(),
        };
        if new.is_empty() || md.current_snapshot().is_none() {
            return Ok(out);
        }
        let live = self
            .live(md, super::live::Scope::All, super::Fill::Keep)
            .await?;
        let data: HashMap<&str, (i32, &iceberg::spec::Struct)> = live
            .data()
            .map(|d| (d.file().file_path(), (d.spec_id, d.file().partition())))
            .collect();
        let deletes: Vec<(&str, u64, Targets)> = live
            .position_deletes()
            .map(|d| {
                let f = d.file();
                (f.file_path(), f.file_size_in_bytes(), Targets::of(f))
            })
            .collect();
        let mut pending: BTreeSet<String> = new.keys().cloned().collect();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while !pending.is_empty() {
            let round = std::mem::take(&mut pending);
            seen.extend(round.iter().cloned());
            let wanted: Vec<(&str, u64)> = deletes
                .iter()
                .filter(|(p, _, t)| !out.replaced.contains(*p) && t.may_target_any(&round))
                .map(|(p, size, _)| (*p, *size))
                .collect();
            let read = self.position_deletes_of(&wanted, super::Fill::Keep).await?;
            for ((path, _), (content, _)) in wanted.iter().zip(read) {
                if !content.keys().any(|t| round.contains(t)) {
                    continue;
                }
                out.replaced.insert(path.to_string());
                for (target, positions) in content.iter() {
                    let Some((spec_id, partition)) = data.get(target.as_str()) else {
                        continue;
                    };
                    out.deletes
                        .entry(target.clone())
                        .or_insert_with(|| FileDeletes {
                            spec_id: *spec_id,
                            partition: (*partition).clone(),
                            positions: Vec::new(),
                        })
                        .positions
                        .extend_from_slice(positions);
                    if !seen.contains(target) {
                        pending.insert(target.clone());
                    }
                }
            }
        }
        for d in out.deletes.values_mut() {
            d.positions.sort_unstable();
            d.positions.dedup();
        }
        Ok(out)
    }
}
