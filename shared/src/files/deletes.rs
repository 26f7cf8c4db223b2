//! Position deletes: their content, as every reader of a table's deletes needs it, whether a
//! v2 position-delete file (Parquet) or a v3 deletion vector (one blob of a Puffin file).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::cast::AsArray as _;
use arrow_array::types::Int64Type;
use arrow_schema::DataType;
use iceberg::io::FileIO;
use iceberg::metadata_columns::RESERVED_FIELD_ID_DELETE_FILE_PATH;
use iceberg::spec::{DataFile, DataFileFormat, PrimitiveLiteral, Struct};

use super::cache::{Kind, get, put};
use crate::error::{Error, Result};

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
            .get(&RESERVED_FIELD_ID_DELETE_FILE_PATH)
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

/// What identifies a live delete: its file, and for a deletion vector its offset in that file
/// (a Puffin file holds the vectors of many data files, each its own manifest entry, and a
/// commit replaces one vector while the others of the same file stay live).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct DeleteId {
    pub path: String,
    pub offset: Option<i64>,
}

impl DeleteId {
    pub(crate) fn of(f: &DataFile) -> DeleteId {
        DeleteId {
            path: f.file_path().to_string(),
            offset: (f.file_format() == DataFileFormat::Puffin)
                .then(|| f.content_offset())
                .flatten(),
        }
    }
}

impl std::fmt::Display for DeleteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{} (deletion vector at byte {o})", self.path),
            None => f.write_str(&self.path),
        }
    }
}

/// Where a live delete's positions are, as its manifest entry tells: a whole position-delete
/// file, or the byte range of one deletion vector.
#[derive(Debug, Clone)]
pub(crate) struct DeleteSource {
    pub id: DeleteId,
    /// The file's size.
    pub size: u64,
    pub vector: Option<Vector>,
}

/// A deletion vector's place and what its manifest entry says it holds.
#[derive(Debug, Clone)]
pub(crate) struct Vector {
    pub offset: u64,
    pub length: u64,
    pub referenced_data_file: String,
    pub cardinality: u64,
}

impl DeleteSource {
    /// Refuses a deletion vector whose entry lacks what the spec requires of it.
    pub(crate) fn of(f: &DataFile) -> Result<DeleteSource> {
        let id = DeleteId::of(f);
        let vector = match f.file_format() {
            DataFileFormat::Puffin => {
                let bad = |what: &str| {
                    Error::Table(format!(
                        "deletion vector in {}: its manifest entry has no {what}",
                        f.file_path()
                    ))
                };
                let offset = f.content_offset().ok_or_else(|| bad("content_offset"))?;
                let length = f
                    .content_size_in_bytes()
                    .ok_or_else(|| bad("content_size_in_bytes"))?;
                let referenced_data_file = f
                    .referenced_data_file()
                    .ok_or_else(|| bad("referenced_data_file"))?;
                let (Ok(offset), Ok(length)) = (u64::try_from(offset), u64::try_from(length))
                else {
                    return Err(bad("valid content_offset and content_size_in_bytes"));
                };
                Some(Vector {
                    offset,
                    length,
                    referenced_data_file,
                    cardinality: f.record_count(),
                })
            }
            _ => None,
        };
        Ok(DeleteSource {
            id,
            size: f.file_size_in_bytes(),
            vector,
        })
    }

    /// The bytes a read fetches (bounds concurrent large reads).
    pub(crate) fn read_size(&self) -> u64 {
        self.vector.as_ref().map_or(self.size, |v| v.length)
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

/// Reads one deletion vector: its byte range only (one ranged GET), checked against its entry.
async fn read_deletion_vector(
    file_io: &FileIO,
    path: &str,
    v: &Vector,
) -> Result<DeletedPositions> {
    let what = format!("{path} at byte {}", v.offset);
    let end = v
        .offset
        .checked_add(v.length)
        .ok_or_else(|| Error::Table(format!("deletion vector {what}: its length overflows")))?;
    let bytes = file_io
        .new_input(path)?
        .reader()
        .await?
        .read(v.offset..end)
        .await?;
    let positions = super::dv::decode(&bytes, Some(v.cardinality), &what)?;
    Ok(HashMap::from([(v.referenced_data_file.clone(), positions)]))
}

impl super::Files {
    /// The positions `source` deletes, and whether they were read from storage (not the
    /// cache).
    pub(crate) async fn position_deletes(
        &self,
        source: &DeleteSource,
        fill: super::Fill,
    ) -> Result<(Arc<DeletedPositions>, bool)> {
        if let Some(d) = get(&self.cache().deletes, &source.id) {
            return Ok((d, false));
        }
        let path = source.id.path.as_str();
        let content = Arc::new(match &source.vector {
            Some(v) => read_deletion_vector(self.io(), path, v).await?,
            None => read_position_deletes(self.io(), path, source.size).await?,
        });
        self.cache().count_read(Kind::PositionDeletes);
        if fill == super::Fill::Keep {
            put(&self.cache().deletes, source.id.clone(), content.clone());
        }
        Ok((content, true))
    }

    /// Keeps the content of a delete this process just wrote.
    pub(crate) fn remember_position_deletes(&self, id: DeleteId, content: DeletedPositions) {
        put(&self.cache().deletes, id, Arc::new(content));
    }
}

/// The rows of one data file to delete, and where that file lives.
#[derive(Debug, Clone, PartialEq)]
pub struct FileDeletes {
    pub spec_id: i32,
    pub partition: Struct,
    pub positions: Vec<i64>,
}

/// The deletes a commit writes so that each data file keeps at most one live delete file (the
/// rule Iceberg v3 sets for deletion vectors, applied to v2 position deletes): per data file,
/// the commit's new positions with those of every live delete file that deletes rows of it,
/// and the delete files those replace (removed by the same commit).
#[derive(Debug, Default)]
pub(crate) struct MergedDeletes {
    /// Every position each data file's one delete file holds, by data file path.
    pub deletes: BTreeMap<String, FileDeletes>,
    /// Live deletes whose positions `deletes` holds.
    pub replaced: BTreeSet<DeleteId>,
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
        let deletes: Vec<(DeleteSource, Targets)> = live
            .position_deletes()
            .map(|d| Ok((DeleteSource::of(d.file())?, Targets::of(d.file()))))
            .collect::<Result<_>>()?;
        let mut pending: BTreeSet<String> = new.keys().cloned().collect();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while !pending.is_empty() {
            let round = std::mem::take(&mut pending);
            seen.extend(round.iter().cloned());
            let wanted: Vec<&DeleteSource> = deletes
                .iter()
                .filter(|(d, t)| !out.replaced.contains(&d.id) && t.may_target_any(&round))
                .map(|(d, _)| d)
                .collect();
            let read = self.position_deletes_of(&wanted, super::Fill::Keep).await?;
            for (source, (content, _)) in wanted.iter().zip(read) {
                if !content.keys().any(|t| round.contains(t)) {
                    continue;
                }
                out.replaced.insert(source.id.clone());
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
