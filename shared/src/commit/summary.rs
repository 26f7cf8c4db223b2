//! Snapshot summary: the `added-*` counts of this commit and the `total-*` running totals that
//! engines show (Iceberg's SnapshotSummary keys). Totals are only written when the parent has
//! them, as Iceberg does, so they are never wrong.

use std::collections::HashMap;

use iceberg::spec::{DataContentType, DataFile, DataFileFormat, Summary};

/// What a commit adds (and, for rewrites, removes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Added {
    pub data_files: u64,
    pub records: u64,
    pub data_files_size: u64,
    pub delete_files: u64,
    /// Of `delete_files`, deletion vectors (v3).
    pub dvs: u64,
    pub position_deletes: u64,
    pub delete_files_size: u64,
    pub changed_partitions: u64,
    pub removed_data_files: u64,
    pub removed_records: u64,
    pub removed_data_files_size: u64,
    pub removed_delete_files: u64,
    pub removed_dvs: u64,
    pub removed_position_deletes: u64,
    pub removed_delete_files_size: u64,
}

impl Added {
    /// Counts files a snapshot removes (a rewrite's inputs, a reload's whole table).
    pub(crate) fn count_removed(&mut self, removed: &[(DataContentType, DataFile)]) {
        for (content, f) in removed {
            match content {
                DataContentType::Data => {
                    self.removed_data_files += 1;
                    self.removed_records += f.record_count();
                    self.removed_data_files_size += f.file_size_in_bytes();
                }
                _ => {
                    self.removed_delete_files += 1;
                    self.removed_dvs += is_dv(f) as u64;
                    self.removed_position_deletes += f.record_count();
                    self.removed_delete_files_size += delete_size(f);
                }
            }
        }
    }

    /// Counts a delete file (or deletion vector) the snapshot adds.
    pub(crate) fn count_delete(&mut self, f: &DataFile) {
        self.delete_files += 1;
        self.dvs += is_dv(f) as u64;
        self.position_deletes += f.record_count();
        self.delete_files_size += delete_size(f);
    }
}

fn is_dv(f: &DataFile) -> bool {
    f.file_format() == DataFileFormat::Puffin
}

/// A deletion vector's size is its blob's, not the Puffin file's it shares (Java's
/// `ScanTaskUtil.contentSizeInBytes`).
fn delete_size(f: &DataFile) -> u64 {
    match f.content_size_in_bytes() {
        Some(n) if is_dv(f) => u64::try_from(n).unwrap_or(0),
        _ => f.file_size_in_bytes(),
    }
}

pub(super) fn summarize(parent: Option<&Summary>, a: &Added) -> HashMap<String, String> {
    let mut m = HashMap::new();
    let mut put = |k: &str, v: u64| {
        if v > 0 {
            m.insert(k.to_string(), v.to_string());
        }
    };
    put("added-data-files", a.data_files);
    put("added-records", a.records);
    put("added-files-size", a.data_files_size + a.delete_files_size);
    put("added-delete-files", a.delete_files);
    put("added-position-delete-files", a.delete_files - a.dvs);
    put("added-dvs", a.dvs);
    put("added-position-deletes", a.position_deletes);
    put("deleted-data-files", a.removed_data_files);
    put("deleted-records", a.removed_records);
    put(
        "removed-files-size",
        a.removed_data_files_size + a.removed_delete_files_size,
    );
    put("removed-delete-files", a.removed_delete_files);
    put(
        "removed-position-delete-files",
        a.removed_delete_files - a.removed_dvs,
    );
    put("removed-dvs", a.removed_dvs);
    put("removed-position-deletes", a.removed_position_deletes);
    m.insert(
        "changed-partition-count".into(),
        a.changed_partitions.to_string(),
    );

    let total = |key: &str, add: u64, remove: u64| -> Option<u64> {
        match parent {
            None => Some(add.saturating_sub(remove)),
            Some(p) => p
                .additional_properties
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .map(|t| (t + add).saturating_sub(remove)),
        }
    };
    for (key, add, remove) in [
        ("total-data-files", a.data_files, a.removed_data_files),
        ("total-records", a.records, a.removed_records),
        (
            "total-files-size",
            a.data_files_size + a.delete_files_size,
            a.removed_data_files_size + a.removed_delete_files_size,
        ),
        ("total-delete-files", a.delete_files, a.removed_delete_files),
        (
            "total-position-deletes",
            a.position_deletes,
            a.removed_position_deletes,
        ),
        ("total-equality-deletes", 0, 0),
    ] {
        if let Some(t) = total(key, add, remove) {
            m.insert(key.to_string(), t.to_string());
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::Operation;

    #[test]
    fn totals_follow_the_parent() {
        let first = summarize(
            None,
            &Added {
                data_files: 1,
                records: 6,
                data_files_size: 100,
                ..Default::default()
            },
        );
        assert_eq!(first["total-records"], "6");
        assert_eq!(first["total-delete-files"], "0");
        let parent = Summary {
            operation: Operation::Append,
            additional_properties: first,
        };
        let second = summarize(
            Some(&parent),
            &Added {
                data_files: 1,
                records: 2,
                data_files_size: 50,
                delete_files: 1,
                position_deletes: 1,
                delete_files_size: 10,
                ..Default::default()
            },
        );
        assert_eq!(second["total-records"], "8");
        assert_eq!(second["total-data-files"], "2");
        assert_eq!(second["total-files-size"], "160");
        assert_eq!(second["total-position-deletes"], "1");
        assert_eq!(second["added-files-size"], "60");
        let foreign = Summary {
            operation: Operation::Append,
            additional_properties: HashMap::new(),
        };
        assert!(!summarize(Some(&foreign), &Added::default()).contains_key("total-records"));
    }
}
