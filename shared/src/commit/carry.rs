//! Carrying deletes over a rewrite: position deletes that other commits (ingest) landed against
//! files a compaction is replacing are translated, through the compaction's row map, into
//! position deletes against the files that replace them, written into the compaction's own
//! snapshot. Compaction then never has to plan again because ingest deleted rows meanwhile.
//!
//! Sequence numbers (Iceberg spec, "Scan Planning"): a position delete applies to a data file
//! whose data sequence number is <= the delete's. The rewritten files keep the data sequence
//! number of the snapshot they were read from (`base`); the carried deletes are added by the
//! rewrite snapshot itself (sequence number `N > base`), so they apply to the new files. They
//! name the new files by path, so they touch nothing else. The original delete files stay
//! (they now point only at removed files, which no reader reads); a later compaction drops them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use iceberg::io::FileIO;
use iceberg::spec::{DataFile, ManifestFile, Struct, TableMetadata};

use crate::error::{Error, Result};
use crate::write::{FileDeletes, write_position_deletes};

/// Where every row of the files a rewrite replaces went: 4 bytes per row read.
///
/// A rewrite writes its rows as one stream over its new files, in order; the map keeps each old
/// row's number in that stream and finds the new file and position only for the few rows a
/// concurrent commit deletes.
#[derive(Default)]
pub struct RowMap {
    /// The files written, in the order their rows were numbered, with the number of each
    /// file's first row.
    new_files: Vec<(String, i32, Struct, u64)>,
    /// Per replaced file, indexed by old position: the row's number, or [`RowMap::NOT_WRITTEN`].
    moved: HashMap<String, Vec<u32>>,
}

impl fmt::Debug for RowMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RowMap({} files -> {} files)",
            self.moved.len(),
            self.new_files.len()
        )
    }
}

impl RowMap {
    /// A row of a replaced file that was not written (it was deleted when the rewrite read it).
    pub const NOT_WRITTEN: u32 = u32::MAX;
    /// Rows one rewrite may write (row numbers are 32 bits, one value means not written).
    pub const MAX_ROWS: u64 = u32::MAX as u64;

    /// A map from one stream of rows written in order over `new_files` (path, spec id,
    /// partition, rows): `olds` holds, per replaced file and old position, the row's number in
    /// that stream, or [`RowMap::NOT_WRITTEN`].
    pub fn from_sequence(
        olds: Vec<(String, Vec<u32>)>,
        new_files: Vec<(String, i32, Struct, u64)>,
    ) -> Result<RowMap> {
        let mut files = Vec::with_capacity(new_files.len());
        let mut total = 0u64;
        for (path, spec, partition, rows) in new_files {
            files.push((path, spec, partition, total));
            total += rows;
        }
        for (old, rows) in &olds {
            if let Some(r) = rows
                .iter()
                .find(|r| **r != Self::NOT_WRITTEN && u64::from(**r) >= total)
            {
                return Err(Error::Other(format!(
                    "row map: row {r} of {total} written, from {old}"
                )));
            }
        }
        Ok(RowMap {
            new_files: files,
            moved: olds.into_iter().collect(),
        })
    }

    /// Whether the map covers `old`.
    pub fn covers(&self, old: &str) -> bool {
        self.moved.contains_key(old)
    }

    /// `deletes` (positions per replaced file) as positions per new file. Rows already deleted
    /// when the rewrite read them, or past the end of a file, need nothing.
    pub fn translate(
        &self,
        deletes: &BTreeMap<String, Vec<i64>>,
    ) -> Result<BTreeMap<String, FileDeletes>> {
        let mut out: BTreeMap<String, FileDeletes> = BTreeMap::new();
        for (old, positions) in deletes {
            let moved = self.moved.get(old).ok_or_else(|| {
                Error::Other(format!("rewrite has no row map for replaced file {old}"))
            })?;
            for p in positions {
                let Some(&row) = usize::try_from(*p).ok().and_then(|p| moved.get(p)) else {
                    continue;
                };
                if row == Self::NOT_WRITTEN {
                    continue;
                }
                let row = u64::from(row);
                // The last file starting at or before the row.
                let file = self.new_files.partition_point(|f| f.3 <= row);
                let Some((path, spec_id, partition, start)) =
                    file.checked_sub(1).and_then(|f| self.new_files.get(f))
                else {
                    return Err(Error::Other(format!(
                        "row map: no new file holds row {row}"
                    )));
                };
                out.entry(path.clone())
                    .or_insert_with(|| FileDeletes {
                        spec_id: *spec_id,
                        partition: partition.clone(),
                        positions: Vec::new(),
                    })
                    .positions
                    .push((row - start) as i64);
            }
        }
        Ok(out)
    }
}

/// The delete files and manifests one attempt adds to carry `deletes` over.
pub(super) struct Carried {
    pub manifests: Vec<ManifestFile>,
    pub files: Vec<DataFile>,
    /// Every path written (deleted if the attempt loses).
    pub written: Vec<String>,
}

/// Writes the translated deletes and their manifest (sequence number unassigned: the attempt's
/// snapshot gives its own, so they apply to the rewritten files).
pub(super) async fn write(
    file_io: &FileIO,
    md: &TableMetadata,
    snapshot_id: i64,
    map: &RowMap,
    deletes: &BTreeMap<String, Vec<i64>>,
) -> Result<Carried> {
    let translated = map.translate(deletes)?;
    let mut out = Carried {
        manifests: Vec::new(),
        files: Vec::new(),
        written: Vec::new(),
    };
    if translated.is_empty() {
        return Ok(out);
    }
    let files = write_position_deletes(file_io, md, &translated).await?;
    out.written
        .extend(files.iter().map(|(_, f)| f.file_path().to_string()));
    match super::write_manifests(file_io, md, snapshot_id, &[], &files, None).await {
        Ok(m) => {
            out.written
                .extend(m.iter().map(|m| m.manifest_path.clone()));
            out.manifests = m;
        }
        Err(e) => {
            for p in &out.written {
                let _ = file_io.delete(p).await;
            }
            return Err(e);
        }
    }
    out.files = files.into_iter().map(|(_, f)| f).collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, rows: u64) -> (String, i32, Struct, u64) {
        (name.to_string(), 0, Struct::empty(), rows)
    }

    #[test]
    fn a_sequence_maps_to_files_and_positions() {
        // Old file "a" (4 rows, row 1 deleted) and "b" (2 rows) merged as b0 a0 a2 b1 a3,
        // written as new files "x" (3 rows) and "y" (2 rows).
        let g = RowMap::NOT_WRITTEN;
        let map = RowMap::from_sequence(
            vec![("a".into(), vec![1, g, 2, 4]), ("b".into(), vec![0, 3])],
            vec![file("x", 3), file("y", 2)],
        )
        .unwrap();
        let deletes: BTreeMap<String, Vec<i64>> = [
            ("a".to_string(), vec![0, 1, 3]),
            ("b".to_string(), vec![1, 9]),
        ]
        .into();
        let out = map.translate(&deletes).unwrap();
        let got: Vec<(&str, Vec<i64>)> = out
            .iter()
            .map(|(p, d)| (p.as_str(), d.positions.clone()))
            .collect();
        // a0 -> x1, a1 was already deleted, a3 -> y1, b1 -> y0, b9 is past the end.
        assert_eq!(got, vec![("x", vec![1]), ("y", vec![1, 0])]);
    }

    #[test]
    fn a_sequence_beyond_the_rows_written_is_an_error() {
        let err = RowMap::from_sequence(vec![("a".into(), vec![0, 5])], vec![file("x", 2)]);
        assert!(err.is_err());
    }
}
