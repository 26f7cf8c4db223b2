//! mark_applied: an operator's statement of which DMS files a table holds, for a table that has
//! data but no applied-file record (created or rewritten by another engine, or migrated from a
//! version that kept the record in snapshot summaries only and had its history expired).
//! Ingest refuses such a table rather than apply its DMS history again over newer rows.
//!
//! One metadata commit (no snapshot): the table property [`crate::commit::record::PROPERTY`]
//! says every DMS file up to `through` is applied.

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
    /// DMS order position every file up to which now counts as applied.
    pub through: String,
    /// The record the table had before (`None`: none).
    pub replaced: Option<String>,
}

pub struct MarkApplied<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    through: String,
    force: bool,
}

impl<'a> MarkApplied<'a> {
    /// `through`: a DMS file (key, path or file name) the table holds, and every file before it.
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent, through: impl Into<String>) -> Self {
        MarkApplied {
            catalog,
            ident,
            through: through.into(),
            force: false,
        }
    }

    /// Replace a record the table already has (its exact per-file knowledge is lost).
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    pub async fn execute(self) -> Result<MarkAppliedReport> {
        let through = order_of(&self.through)?;
        let now = chrono::Utc::now().timestamp_millis();
        let encoded = AppliedRecord::declared(&through, now).encode()?;
        let replaced = std::sync::Mutex::new(None);
        let ident = self.ident.clone();
        commit_metadata(self.catalog, &self.ident, |md, location| {
            let existing = md.properties().get(PROPERTY).cloned();
            if existing.is_some() && !self.force {
                return Err(Error::Config(format!(
                    "table {ident} already records which DMS files it holds; `--force` replaces \
                     that record (files it lists individually are then only known up to {through})"
                )));
            }
            if let Ok(mut r) = replaced.lock() {
                *r = existing;
            }
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
            through: through.to_string(),
            replaced: replaced.into_inner().ok().flatten(),
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
