//! mark_applied: an operator's statement of which DMS files a table holds, for a table that has
//! data but no applied-file record (created or rewritten by another engine, or migrated from a
//! version that kept the record in snapshot summaries only and had its history expired).
//! Ingest refuses such a table rather than apply its DMS history again over newer rows.
//!
//! One metadata commit (no snapshot): the table property [`crate::commit::record::PROPERTY`]
//! says every DMS file up to `through` is applied, or ([`MarkApplied::none`]) that the table
//! holds no DMS file, so that every one applies on top of its rows.

use iceberg::TableIdent;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::commit::commit_metadata;
use crate::commit::record::{AppliedRecord, PROPERTY};
use crate::config::SourceSettings;
use crate::error::{Error, Result};
use crate::locate::{OrderKey, locate};

#[derive(Debug, Clone, Serialize)]
pub struct MarkAppliedReport {
    pub table: String,
    /// The DMS file, as given, up to which every file now counts as applied; `None`: the table
    /// was declared to hold no DMS file.
    pub through: Option<String>,
    /// Whether the table had a record before (replaced with `force`).
    pub replaced: bool,
}

pub struct MarkApplied<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    through: Option<String>,
    force: bool,
}

impl<'a> MarkApplied<'a> {
    /// `through`: a DMS file (key, path or file name) the table holds, and every file before it.
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent, through: impl Into<String>) -> Self {
        MarkApplied {
            catalog,
            ident,
            through: Some(through.into()),
            force: false,
        }
    }

    /// The table holds no DMS file (it was filled another way before DMS wrote anything for
    /// it): every DMS file, full load included, applies on top of its rows, by key.
    pub fn none(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        MarkApplied {
            catalog,
            ident,
            through: None,
            force: false,
        }
    }

    /// Replace a record the table already has (its exact per-file knowledge is lost).
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    pub async fn execute(self) -> Result<MarkAppliedReport> {
        let record = match &self.through {
            Some(file) => {
                let now = chrono::Utc::now().timestamp_millis();
                AppliedRecord::declared(&order_of(file)?, now)
            }
            // What a table we created holds before its first file: nothing applied.
            None => AppliedRecord::default(),
        };
        let encoded = record.encode()?;
        let declared = match &self.through {
            Some(file) => format!("{file} and every DMS file before it"),
            None => "no DMS file".to_string(),
        };
        let replaced = std::sync::atomic::AtomicBool::new(false);
        let ident = self.ident.clone();
        commit_metadata(self.catalog, &self.ident, |md, location| {
            let existing = md.properties().contains_key(PROPERTY);
            if existing && !self.force {
                return Err(Error::Config(format!(
                    "table {ident} already records which DMS files it holds; `--force` replaces \
                     that record (with: the table holds {declared})"
                )));
            }
            replaced.store(existing, std::sync::atomic::Ordering::Relaxed);
            Ok(Some(
                md.clone()
                    .into_builder(Some(location.to_string()))
                    .set_properties([(PROPERTY.to_string(), encoded.clone())].into())?
                    .build()?
                    .metadata,
            ))
        })
        .await?;
        Ok(MarkAppliedReport {
            table: self.ident.to_string(),
            through: self.through,
            replaced: replaced.into_inner(),
        })
    }
}

/// The DMS order of a file named by key, path or bare file name.
fn order_of(file: &str) -> Result<OrderKey> {
    let key = if file.contains('/') {
        file.to_string()
    } else {
        // A bare file name: any schema/table folder gives the same order.
        format!("schema/table/{file}")
    };
    locate(&key, &SourceSettings::default())?
        .map(|o| o.order)
        .ok_or_else(|| {
            Error::Config(format!(
                "`{file}` is not a DMS file name (LOAD00000001.csv, 20220302-1134010000.csv, ...)"
            ))
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_names_keys_and_paths_give_the_order() {
        let a = super::order_of("20220302-1134010000.csv").unwrap();
        let b = super::order_of("s3://b/dms/sales/product/20220302-1134010000.csv").unwrap();
        assert_eq!(a, b);
        assert!(super::order_of("LOAD00000002.csv").unwrap() < a);
        assert!(super::order_of("notes.txt").is_err());
    }
}
