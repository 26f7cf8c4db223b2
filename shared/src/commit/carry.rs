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

use iceberg::spec::{DataFile, Struct, TableMetadata};

use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::deletes::FileDeletes;
use crate::files::prepared::Prepared;
use crate::write::deletes::write_position_deletes;

/// Where every row of the files a rewrite replaces went: 4 bytes per row read, kept in an
/// unlinked temporary file (not in memory: a group's size must not set compaction's memory).
///
/// A rewrite writes its rows as one stream over its new files, in order; the map keeps each old
/// row's number in that stream and finds the new file and position only for the few rows a
/// concurrent commit deletes.
pub(crate) struct RowMap {
    /// The files written, in the order their rows were numbered, with the number of each
    /// file's first row.
    new_files: Vec<(String, i32, Struct, u64)>,
    /// Per replaced file: where its row numbers start in `spill` (bytes), and its row count.
    moved: HashMap<String, (u64, u64)>,
    spill: std::fs::File,
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

/// Row numbers per entry in a spill buffer before it is written out.
const SPILL_BUFFER: usize = 16 * 1024;

/// Fills a [`RowMap`] while a rewrite writes. Each replaced file's row numbers go to its own
/// region of the spill file through a small buffer when its rows come in file order (files
/// streamed by the merge), or are kept in memory until the end when they come in any order
/// (files sorted in memory first, which are in memory anyway).
pub(crate) struct RowMapBuilder {
    spill: std::fs::File,
    inputs: Vec<InputRows>,
}

struct InputRows {
    path: String,
    rows: u64,
    /// Where the file's region starts in the spill file (bytes).
    offset: u64,
    rows_in_order: Option<InOrder>,
    any_order: Vec<u32>,
}

struct InOrder {
    /// The next old position expected; earlier ones are buffered or written.
    next: u64,
    /// Positions written out so far.
    flushed: u64,
    buf: Vec<u32>,
}

impl RowMapBuilder {
    /// `inputs`: per replaced file, its path, its row count (deleted rows included) and whether
    /// its rows will come in file order.
    pub(crate) fn new(inputs: &[(String, u64, bool)]) -> Result<RowMapBuilder> {
        let path =
            std::env::temp_dir().join(format!("dms2iceberg-rowmap-{}", uuid::Uuid::new_v4()));
        let spill = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| {
                Error::Internal(format!("row map: cannot create {}: {e}", path.display()))
            })?;
        // Unlinked at once: the open handle keeps it; nothing is left behind, even by a crash.
        let _ = std::fs::remove_file(&path);
        let mut offset = 0;
        let mut out = Vec::with_capacity(inputs.len());
        for (path, rows, in_order) in inputs {
            out.push(InputRows {
                path: path.clone(),
                rows: *rows,
                offset,
                rows_in_order: in_order.then(|| InOrder {
                    next: 0,
                    flushed: 0,
                    buf: Vec::with_capacity(SPILL_BUFFER.min(*rows as usize)),
                }),
                any_order: if *in_order {
                    Vec::new()
                } else {
                    vec![RowMap::NOT_WRITTEN; *rows as usize]
                },
            });
            offset += rows * 4;
        }
        Ok(RowMapBuilder { spill, inputs: out })
    }

    /// Row `pos` of replaced file `input` is row `row` of the rewrite's output.
    pub(crate) fn set(&mut self, input: usize, pos: u64, row: u32) -> Result<()> {
        let spill = &self.spill;
        let i = self
            .inputs
            .get_mut(input)
            .ok_or_else(|| Error::Internal(format!("row map: no input {input}")))?;
        if pos >= i.rows {
            return Err(Error::Internal(format!(
                "data file {}: row {pos} beyond the {} rows its manifest entry says",
                i.path, i.rows
            )));
        }
        let Some(o) = &mut i.rows_in_order else {
            i.any_order[pos as usize] = row;
            return Ok(());
        };
        if pos < o.next {
            return Err(Error::Internal(format!(
                "row map: rows of {} out of file order ({pos} after {})",
                i.path, o.next
            )));
        }
        for _ in o.next..pos {
            push(spill, i.offset, o, RowMap::NOT_WRITTEN)?;
        }
        push(spill, i.offset, o, row)?;
        o.next = pos + 1;
        Ok(())
    }

    /// The map onto `new_files` (path, spec id, partition, rows), in the order rows were
    /// written.
    pub(crate) fn finish(mut self, new_files: Vec<(String, i32, Struct, u64)>) -> Result<RowMap> {
        let mut files = Vec::with_capacity(new_files.len());
        let mut total = 0u64;
        for (path, spec, partition, rows) in new_files {
            files.push((path, spec, partition, total));
            total += rows;
        }
        let mut moved = HashMap::with_capacity(self.inputs.len());
        for i in &mut self.inputs {
            match &mut i.rows_in_order {
                Some(o) => {
                    for _ in o.next..i.rows {
                        push(&self.spill, i.offset, o, RowMap::NOT_WRITTEN)?;
                    }
                    flush(&self.spill, i.offset, o)?;
                }
                None => {
                    if let Some(r) = i
                        .any_order
                        .iter()
                        .find(|r| **r != RowMap::NOT_WRITTEN && u64::from(**r) >= total)
                    {
                        return Err(Error::Internal(format!(
                            "row map: row {r} of {total} written, from {}",
                            i.path
                        )));
                    }
                    let bytes: Vec<u8> = i.any_order.iter().flat_map(|r| r.to_le_bytes()).collect();
                    write_at(&self.spill, &bytes, i.offset)?;
                    i.any_order = Vec::new();
                }
            }
            moved.insert(i.path.clone(), (i.offset, i.rows));
        }
        Ok(RowMap {
            new_files: files,
            moved,
            spill: self.spill,
        })
    }
}

fn push(spill: &std::fs::File, offset: u64, o: &mut InOrder, row: u32) -> Result<()> {
    o.buf.push(row);
    if o.buf.len() >= SPILL_BUFFER {
        flush(spill, offset, o)?;
    }
    Ok(())
}

fn flush(spill: &std::fs::File, offset: u64, o: &mut InOrder) -> Result<()> {
    let bytes: Vec<u8> = o.buf.iter().flat_map(|r| r.to_le_bytes()).collect();
    write_at(spill, &bytes, offset + o.flushed * 4)?;
    o.flushed += o.buf.len() as u64;
    o.buf.clear();
    Ok(())
}

fn write_at(spill: &std::fs::File, bytes: &[u8], at: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    spill
        .write_all_at(bytes, at)
        .map_err(|e| Error::Internal(format!("row map: cannot write its temporary file: {e}")))
}

impl RowMap {
    /// A row of a replaced file that was not written (it was deleted when the rewrite read it).
    pub(crate) const NOT_WRITTEN: u32 = u32::MAX;
    /// Rows one rewrite may write (row numbers are 32 bits, one value means not written).
    pub(crate) const MAX_ROWS: u64 = u32::MAX as u64;

    /// A map from `olds` (per replaced file and old position: the row's number in the output,
    /// or [`RowMap::NOT_WRITTEN`]) onto `new_files` (path, spec id, partition, rows).
    #[cfg(test)]
    pub(crate) fn from_sequence(
        olds: Vec<(String, Vec<u32>)>,
        new_files: Vec<(String, i32, Struct, u64)>,
    ) -> Result<RowMap> {
        let inputs: Vec<(String, u64, bool)> = olds
            .iter()
            .map(|(p, v)| (p.clone(), v.len() as u64, false))
            .collect();
        let mut b = RowMapBuilder::new(&inputs)?;
        for (i, (_, rows)) in olds.iter().enumerate() {
            for (pos, row) in rows.iter().enumerate() {
                b.set(i, pos as u64, *row)?;
            }
        }
        b.finish(new_files)
    }

    /// The row number of `old`'s row `pos`, or `None` past its end.
    fn row_of(&self, old: &str, pos: i64) -> Result<Option<u32>> {
        use std::os::unix::fs::FileExt;
        let (offset, rows) = self.moved.get(old).ok_or_else(|| {
            Error::Internal(format!("rewrite has no row map for replaced file {old}"))
        })?;
        let Ok(pos) = u64::try_from(pos) else {
            return Ok(None);
        };
        if pos >= *rows {
            return Ok(None);
        }
        let mut b = [0u8; 4];
        self.spill
            .read_exact_at(&mut b, offset + pos * 4)
            .map_err(|e| {
                Error::Internal(format!("row map: cannot read its temporary file: {e}"))
            })?;
        Ok(Some(u32::from_le_bytes(b)))
    }

    /// Whether the map covers `old`.
    pub(crate) fn covers(&self, old: &str) -> bool {
        self.moved.contains_key(old)
    }

    /// `deletes` (positions per replaced file) as positions per new file. Rows already deleted
    /// when the rewrite read them, or past the end of a file, need nothing.
    pub(crate) fn translate(
        &self,
        deletes: &BTreeMap<String, Vec<i64>>,
    ) -> Result<BTreeMap<String, FileDeletes>> {
        let mut out: BTreeMap<String, FileDeletes> = BTreeMap::new();
        for (old, positions) in deletes {
            for p in positions {
                let Some(row) = self.row_of(old, *p)? else {
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
                    return Err(Error::Internal(format!(
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
    pub manifests: super::manifests::Encoded,
    pub files: Vec<DataFile>,
    /// Every path written (deleted if the attempt loses).
    pub(crate) written: Prepared,
}

/// Writes the translated deletes and their manifest (sequence number unassigned: the attempt's
/// snapshot gives its own, so they apply to the rewritten files).
pub(super) async fn write(
    files: &Files,
    md: &TableMetadata,
    snapshot_id: i64,
    map: &RowMap,
    deletes: &BTreeMap<String, Vec<i64>>,
) -> Result<Carried> {
    let translated = map.translate(deletes)?;
    let mut out = Carried {
        manifests: Default::default(),
        files: Vec::new(),
        written: Prepared::default(),
    };
    if translated.is_empty() {
        return Ok(out);
    }
    let file_io = files.io();
    let deletes_written = write_position_deletes(file_io, md, &translated).await?;
    out.written.extend(
        deletes_written
            .iter()
            .map(|(_, f)| f.file_path().to_string()),
    );
    match super::write_manifests(files, md, snapshot_id, &[], &deletes_written, None).await {
        Ok(m) => {
            out.written
                .extend(m.manifests.iter().map(|m| m.manifest_path.clone()));
            out.manifests = m;
        }
        Err(e) => {
            out.written.abandon(file_io).await;
            return Err(e);
        }
    }
    out.files = deletes_written.into_iter().map(|(_, f)| f).collect();
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
