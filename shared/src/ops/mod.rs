//! Table operations, one file each, each a builder ending in `execute`:
//! [`ingest`] applies DMS files; [`scan`] reads a table (time travel included); [`history`]
//! lists snapshots with what they applied.

pub mod compact;
pub mod discover;
pub mod history;
pub mod ingest;
pub mod maintain;
pub mod mark_applied;
pub mod rejected;
pub mod scan;

use iceberg::TableIdent;

use crate::error::{Error, Result};

/// `namespace.table` → identifier.
pub fn parse_ident(s: &str) -> Result<TableIdent> {
    let (ns, t) = s
        .rsplit_once('.')
        .ok_or_else(|| Error::Config(format!("table `{s}` must be `namespace.table`")))?;
    if ns.is_empty() || t.is_empty() {
        return Err(Error::Config(format!(
            "table `{s}` must be `namespace.table`"
        )));
    }
    Ok(TableIdent::from_strs(
        ns.split('.').chain(std::iter::once(t)),
    )?)
}
