//! Which column of a DMS file is what: `Op`, table data, a before-image of a key column, or
//! something to drop. Shared by the CSV and Parquet readers so both treat names the same way.

use iceberg::spec::PrimitiveType;

use super::SourceColumn;
use crate::config::TableConfig;

#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    Op,
    /// A table column (name as the table names it).
    Data(SourceColumn),
    /// `BI_<key>`: before-image of key column `key` (index into the key).
    BeforeImage {
        key_index: usize,
    },
    Drop,
}

/// Roles of a file's columns, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub roles: Vec<Role>,
}

impl Layout {
    /// Classifies `names` (file order). `declared` gives a type per column where the file or
    /// config declares one.
    pub fn classify(
        names: &[String],
        declared: &[Option<PrimitiveType>],
        cfg: &TableConfig,
    ) -> Layout {
        let norm: Vec<String> = names.iter().map(|n| cfg.column_name(n)).collect();
        let present: std::collections::HashSet<&str> = norm.iter().map(String::as_str).collect();
        let key: Vec<String> = cfg.primary_key.clone().unwrap_or_default();
        let prefix = cfg.before_image_prefix.as_str();
        let roles = norm
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if n.eq_ignore_ascii_case("op") && i == 0 {
                    return Role::Op;
                }
                if cfg.drop_columns.iter().any(|d| d == n) {
                    return Role::Drop;
                }
                // A before-image is the prefix exactly as DMS writes it (`BI_`, not `bi_`)
                // followed by a key column that is also in this file. Anything else, including
                // before-images of non-key columns (column-filter `all`), is table data: a
                // source column `bi_total` is never dropped unseen.
                if let Some(base) = names[i].strip_prefix(prefix)
                    && !prefix.is_empty()
                {
                    let base = cfg.column_name(base);
                    if present.contains(base.as_str())
                        && let Some(key_index) = key.iter().position(|k| *k == base)
                    {
                        return Role::BeforeImage { key_index };
                    }
                }
                Role::Data(SourceColumn {
                    name: n.clone(),
                    declared: declared.get(i).cloned().flatten(),
                })
            })
            .collect();
        Layout { roles }
    }

    pub fn has_op(&self) -> bool {
        self.roles.contains(&Role::Op)
    }

    pub fn data_columns(&self) -> Vec<SourceColumn> {
        self.roles
            .iter()
            .filter_map(|r| match r {
                Role::Data(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    /// File column index of `BI_<key[i]>` for every key column, if all are present.
    pub fn before_image_columns(&self, key_len: usize) -> Option<Vec<usize>> {
        if key_len == 0 {
            // No key (`mode = "append"`): nothing has a before-image.
            return None;
        }
        let mut idx = vec![None; key_len];
        for (i, r) in self.roles.iter().enumerate() {
            if let Role::BeforeImage { key_index } = r
                && *key_index < key_len
            {
                idx[*key_index] = Some(i);
            }
        }
        idx.into_iter().collect()
    }

    /// Names of data columns that appear twice (after normalisation): ambiguous, refused.
    pub fn duplicate_column(&self) -> Option<String> {
        let mut seen = std::collections::HashSet::new();
        self.data_columns()
            .into_iter()
            .find(|c| !seen.insert(c.name.clone()))
            .map(|c| c.name)
    }
}
