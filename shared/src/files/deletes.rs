//! Position-delete files: their content, as every reader of a table's deletes needs it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::cast::AsArray as _;
use arrow_array::types::Int64Type;
use arrow_schema::DataType;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, PrimitiveLiteral};

use super::cache::{Kind, get, put};
use crate::error::Result;

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
