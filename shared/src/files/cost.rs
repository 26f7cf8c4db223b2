//! What reading a table costs, measured from its metadata alone (the current snapshot's
//! manifest list and manifests, no data or delete file opened): what every engine's scan plan
//! opens before it reads a row. The compaction function decides from it whether a table needs
//! work ([`crate::ops::compact::Thresholds`]); the read benchmark reports it.

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
        let mut small: HashMap<(i32, String), usize> = HashMap::new();
        for d in live.data() {
            let f = d.file();
            cost.data_files += 1;
            data.insert(f.file_path(), (f.record_count(), 0, 0));
            if f.file_size_in_bytes() < small_bytes {
                *small
                    .entry((d.spec_id, format!("{:?}", f.partition())))
                    .or_default() += 1;
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
        cost.max_small_files = small.values().copied().max().unwrap_or(0);
        Ok(cost)
    }
}
