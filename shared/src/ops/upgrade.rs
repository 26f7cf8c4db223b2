//! upgrade: move a table to a later Iceberg format version, only when an operator asks
//! (one-way: no format version goes back). One metadata commit (no snapshot), as Iceberg's own
//! `'format-version'` property change is. To version 3 the table starts tracking row lineage at
//! `next-row-id` 0; our next commit gives every existing row its id (its manifests get ranges)
//! and writes deletion vectors from then on, each replacing the position-delete files of its
//! data file.

use iceberg::TableIdent;
use iceberg::spec::FormatVersion;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::commit::commit_metadata;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize)]
pub struct UpgradeReport {
    pub table: String,
    pub from: u8,
    pub to: u8,
    /// Whether the table was already at `to` (nothing committed).
    pub unchanged: bool,
}

pub struct Upgrade<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    to: FormatVersion,
}

impl<'a> Upgrade<'a> {
    /// `to`: 2 or 3.
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent, to: u8) -> Result<Self> {
        let to = match to {
            2 => FormatVersion::V2,
            3 => FormatVersion::V3,
            v => {
                return Err(Error::Config(format!(
                    "format version {v}: dms2iceberg writes versions 2 and 3"
                )));
            }
        };
        Ok(Upgrade { catalog, ident, to })
    }

    pub async fn execute(self) -> Result<UpgradeReport> {
        let from = std::sync::Mutex::new(None);
        let (ident, to) = (&self.ident, self.to);
        commit_metadata(self.catalog, &self.ident, |md, location| {
            let now = md.format_version();
            *from.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
            if now > to {
                return Err(Error::Unsupported(format!(
                    "table {ident} is format version {}: format versions only go up",
                    now as u8
                )));
            }
            if now == to {
                return Ok(None);
            }
            Ok(Some(
                md.clone()
                    .into_builder(Some(location.to_string()))
                    .upgrade_format_version(to)?
                    .build()?
                    .metadata,
            ))
        })
        .await?;
        let from = from
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .ok_or_else(|| Error::NoSuchTable {
                table: self.ident.to_string(),
            })?;
        Ok(UpgradeReport {
            table: self.ident.to_string(),
            from: from as u8,
            to: to as u8,
            unchanged: from == to,
        })
    }
}
