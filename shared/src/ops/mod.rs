//! Table operations, one file (or folder) each. Those with options are builders ending in
//! `execute` ([`ingest::Ingest`], [`scan::Scan`], [`compact::Compact`],
//! [`maintain::ExpireSnapshots`], [`maintain::Orphans`], [`mark_applied::MarkApplied`],
//! [`truncate::Truncate`], [`upgrade::Upgrade`]); the
//! others are plain functions ([`history::history`], [`discover::discover_all`],
//! [`rejected`]'s side table of rows set aside).

pub mod compact;
pub mod discover;
pub mod history;
pub mod ingest;
pub mod maintain;
pub mod mark_applied;
pub mod rejected;
pub mod scan;
pub mod truncate;
pub mod upgrade;

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
