//! What reading a table costs, measured from its metadata alone (the current snapshot's
//! manifest list and manifests, no data or delete file opened): what every engine's scan plan
//! opens before it reads a row. The compaction function decides from it whether a table needs
//! work (`ops::compact::Thresholds`); the read benchmark reports it.

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::TableMetadata;
use serde::Serialize;

use super::deletes::Targets;
use super::live::Scope;
use super::{Files, Fill};
use crate::error::Result;

/// The current snapshot's read cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReadCost {
    /// Manifests the manifest list names (each one a read for every scan plan).
    pub manifests: usize,
    pub data_files: usize,
    pub delete_files: usize,
    /// (data file, delete file) pairs a reader matches: a delete file that names one data file
    /// (`referenced_data_file`, or equal `file_path` bounds) pairs with it alone, any other with
    /// every data file its bounds allow.
    pub delete_pairs: usize,
    /// The most delete files one data file is paired with.
    pub max_deletes_per_data_file: usize,
    /// The largest fraction of a data file's rows its file-scoped delete files delete.
    pub max_deleted_ratio: f64,
    /// The most data files below `small_bytes` in one partition.
    pub max_small_files: usize,
}

impl Files {
    /// The read cost of the current snapshot of `md`; a data file is small below `small_bytes`.
    pub(crate) async fn read_cost(&self, md: &TableMetadata, small_bytes: u64) -> Result<ReadCost> {
        let Some(snapshot) = md.current_snapshot() else {
            return Ok(ReadCost::default());
        };
        let mut cost = ReadCost {
            manifests: self.manifest_list(md, snapshot).await?.len(),
            ..Default::default()
        };
        let live = self.live_in(md, snapshot, Scope::All, Fill::Keep).await?;
        // Per data file: rows, delete files paired, rows deleted by file-scoped ones.
        let mut data: BTreeMap<&str, (u64, usize, u64)> = BTreeMap::new();
        // Small files' sizes per partition (full-load files apart where compaction keeps them
        // apart).
        let mut small: HashMap<(i32, String, bool), Vec<u64>> = HashMap::new();
        for d in live.data() {
            let f = d.file();
            cost.data_files += 1;
            data.insert(f.file_path(), (f.record_count(), 0, 0));
            if f.file_size_in_bytes() < small_bytes {
                small
                    .entry((
                        d.spec_id,
                        format!("{:?}", f.partition()),
                        super::vocabulary::keeps_apart(md, f.file_path()),
                    ))
                    .or_default()
                    .push(f.file_size_in_bytes());
            }
        }
        for x in live.position_deletes() {
            cost.delete_files += 1;
            let f = x.file();
            match Targets::of(f) {
                Targets::One(p) => {
                    if let Some(e) = data.get_mut(p.as_str()) {
                        e.1 += 1;
                        e.2 += f.record_count();
                        cost.delete_pairs += 1;
                    }
                }
                Targets::Range(lo, hi) => {
                    let bounds = (
                        std::ops::Bound::Included(lo.as_str()),
                        std::ops::Bound::Included(hi.as_str()),
                    );
                    for (_, e) in data.range_mut::<str, _>(bounds) {
                        e.1 += 1;
                        cost.delete_pairs += 1;
                        if lo == hi {
                            e.2 += f.record_count();
                        }
                    }
                }
                Targets::Any => {
                    for e in data.values_mut() {
                        e.1 += 1;
                        cost.delete_pairs += 1;
                    }
                }
            }
        }
        for (rows, deletes, deleted) in data.values() {
            cost.max_deletes_per_data_file = cost.max_deletes_per_data_file.max(*deletes);
            if *rows > 0 {
                cost.max_deleted_ratio = cost.max_deleted_ratio.max(*deleted as f64 / *rows as f64);
            }
        }
        cost.max_small_files = small
            .into_values()
            .map(|mut sizes| {
                sizes.sort_unstable();
                sizes.len() - tiered_out(&sizes)
            })
            .max()
            .unwrap_or(0);
        Ok(cost)
    }
}

/// How many times the other small files of a partition together a small file may be before
/// compaction leaves it out of their rewrite: under continuous ingest it is what earlier runs
/// merged, and rewriting it with every handful of new files would copy it again and again. It
/// joins once the rest add up to this fraction of it, so files grow in tiers and each row is
/// rewritten a few times, not every run.
pub(crate) const TIER_FACTOR: u64 = 8;

/// Of small files' sizes in ascending order, how many of the largest are left out of their
/// rewrite by [`TIER_FACTOR`] (counted as "done", not as small files to merge).
pub(crate) fn tiered_out(ascending: &[u64]) -> usize {
    let mut rest: u64 = ascending.iter().sum();
    let mut out = 0;
    for size in ascending.iter().rev() {
        rest -= size;
        if *size <= TIER_FACTOR.saturating_mul(rest) {
            break;
        }
        out += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_files_far_larger_than_the_rest_together_are_left_out() {
        assert_eq!(tiered_out(&[]), 0);
        assert_eq!(tiered_out(&[10, 10, 10]), 0);
        // 3,000 > 8 x 40: out; 40 <= 8 x 30: in.
        assert_eq!(tiered_out(&[10, 10, 10, 40, 3_000]), 1);
        // Two tiers above the new files.
        assert_eq!(tiered_out(&[1, 1, 100, 10_000]), 2);
        // A file alone has no others to join.
        assert_eq!(tiered_out(&[5]), 1);
    }
}
