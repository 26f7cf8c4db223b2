//! Expire old snapshots, and delete the files only they referenced.

use std::collections::BTreeSet;

use iceberg::TableIdent;
use iceberg::spec::TableMetadata;
use serde::Serialize;
use tracing::{info, warn};

use super::location::{is_under, normalize_location};
use super::reachable;
use crate::catalog::Catalog;
use crate::commit::commit_metadata;
use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::metadata::ancestry;
use crate::files::vocabulary::keys;
use crate::table::LoadedTable;

#[derive(Debug, Clone, Serialize)]
pub struct ExpireReport {
    pub table: String,
    pub snapshots_expired: Vec<i64>,
    pub snapshots_kept: usize,
    /// Manifest lists, manifests, data and delete files only expired snapshots referenced.
    pub files_deleted: Vec<String>,
    /// Files only expired snapshots referenced that lie outside the table's folder (imported
    /// by another writer, e.g. Spark's `add_files`): never deleted.
    pub files_outside_table: Vec<String>,
    pub dry_run: bool,
}

pub struct ExpireSnapshots<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    older_than_ms: i64,
    retain_last: usize,
    retain_max: Option<usize>,
    dry_run: bool,
}

impl<'a> ExpireSnapshots<'a> {
    /// Expire snapshots older than `older_than_ms` (epoch ms), keeping at least `retain_last`
    /// of the current history.
    pub fn new(
        catalog: &'a dyn Catalog,
        ident: TableIdent,
        older_than_ms: i64,
        retain_last: usize,
    ) -> Self {
        ExpireSnapshots {
            catalog,
            ident,
            older_than_ms,
            retain_last: retain_last.max(1),
            retain_max: None,
            dry_run: false,
        }
    }

    /// Keeps at most `n` snapshots of the main branch's history, however young: the oldest
    /// beyond them expire too (never fewer than `retain_last`). Every reader parses
    /// metadata.json whole on every query, and its size follows the snapshots it lists (DuckDB
    /// spends ~10 µs per snapshot of ours): a table fed a file a minute would otherwise list
    /// ~10,000 for a week of retention. The history stays contiguous (no gaps), so time travel
    /// by timestamp keeps working back to the oldest kept snapshot.
    pub fn retain_max(mut self, n: Option<usize>) -> Self {
        self.retain_max = n.map(|n| n.max(self.retain_last));
        self
    }

    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    fn expired(&self, md: &TableMetadata) -> Vec<i64> {
        let chain = ancestry(md);
        let mut keep: BTreeSet<i64> = chain
            .iter()
            .take(self.retain_last)
            .map(|s| s.snapshot_id())
            .collect();
        keep.extend(
            md.snapshots()
                .filter(|s| s.timestamp_ms() >= self.older_than_ms)
                .map(|s| s.snapshot_id()),
        );
        if let Some(max) = self.retain_max {
            let newest: BTreeSet<i64> = chain.iter().take(max).map(|s| s.snapshot_id()).collect();
            keep.retain(|id| newest.contains(id));
        }
        // Tags and other branches (Spark's WAP, an operator's tag) are other writers' history:
        // their snapshots, and a branch's ancestry, stay.
        keep.extend(referenced_by_refs(md));
        let mut expired: Vec<i64> = md
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| !keep.contains(id))
            .collect();
        expired.sort_unstable();
        expired
    }

    pub async fn execute(self) -> Result<ExpireReport> {
        if let Some(why) = self.catalog.maintained_by_service() {
            return Err(Error::Unsupported(format!(
                "{}: {why}; `expire` leaves it to the service",
                self.ident
            )));
        }
        let table = LoadedTable::load(self.catalog, &self.ident)
            .await?
            .ok_or_else(|| Error::NoSuchTable {
                table: self.ident.to_string(),
            })?;
        let file_io = self.catalog.file_io();
        let before = table.metadata.clone();
        let mut report = ExpireReport {
            table: self.ident.to_string(),
            snapshots_expired: self.expired(&before),
            snapshots_kept: 0,
            files_deleted: vec![],
            files_outside_table: vec![],
            dry_run: self.dry_run,
        };
        if report.snapshots_expired.is_empty() {
            report.snapshots_kept = before.snapshots().len();
            return Ok(report);
        }
        let after: TableMetadata = if self.dry_run {
            let ids = report.snapshots_expired.clone();
            before
                .as_ref()
                .clone()
                .into_builder(None)
                .remove_snapshots(&ids)
                .build()?
                .metadata
        } else {
            let committed = commit_metadata(self.catalog, &self.ident, |md, location| {
                let ids = self.expired(md);
                if ids.is_empty() {
                    return Ok(None);
                }
                // Files applied by expired snapshots lose their records: remember up to where
                // everything counts as applied (see `table::applied_files`).
                let mut horizon = md.properties().get(keys::EXPIRED_WATERMARK).cloned();
                for id in &ids {
                    if let Some(w) = md.snapshot_by_id(*id).and_then(|s| {
                        s.summary()
                            .additional_properties
                            .get(keys::WATERMARK)
                            .cloned()
                    }) && horizon.as_ref().is_none_or(|h| w > *h)
                    {
                        horizon = Some(w);
                    }
                }
                let mut b = md
                    .clone()
                    .into_builder(Some(location.to_string()))
                    .remove_snapshots(&ids);
                if let Some(h) = horizon {
                    b = b.set_properties([(keys::EXPIRED_WATERMARK.to_string(), h)].into())?;
                }
                Ok(Some(b.build()?.metadata))
            })
            .await?;
            match committed {
                Some(m) => m,
                None => return Ok(report),
            }
        };
        let kept: BTreeSet<i64> = after.snapshots().map(|s| s.snapshot_id()).collect();
        report.snapshots_expired = before
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| !kept.contains(id))
            .collect();
        report.snapshots_kept = kept.len();
        let (deleted, outside) = self
            .files_to_delete(
                self.catalog.files(),
                &before,
                &after,
                &report.snapshots_expired,
            )
            .await?;
        report.files_deleted = deleted;
        report.files_outside_table = outside;
        if !self.dry_run {
            for f in &report.files_deleted {
                if let Err(e) = file_io.delete(f).await {
                    warn!(file = %f, error = %e, "could not delete an expired file");
                }
            }
            info!(table = %self.ident, snapshots = report.snapshots_expired.len(), files = report.files_deleted.len(), "expired snapshots");
        }
        if !report.files_outside_table.is_empty() {
            warn!(table = %self.ident, files = report.files_outside_table.len(), "files of expired snapshots outside the table's folder were kept");
        }
        Ok(report)
    }

    /// Files the expired snapshots reach that nothing retained does (compared normalized),
    /// as referenced; and those of them outside the table's folder, which are kept.
    async fn files_to_delete(
        &self,
        files: &Files,
        before: &TableMetadata,
        after: &TableMetadata,
        expired: &[i64],
    ) -> Result<(Vec<String>, Vec<String>)> {
        let mut retained = reachable(files, after, None, true).await?;
        if !self.dry_run {
            // What is retained now, after our commit: a writer may have committed since, and
            // its metadata is what readers open.
            if let Some(now) = LoadedTable::load(self.catalog, &self.ident).await? {
                retained.extend(reachable(files, &now.metadata, None, true).await?);
            }
        }
        for s in after.statistics_iter() {
            retained.insert(normalize_location(&s.statistics_path), String::new());
        }
        for s in after.partition_statistics_iter() {
            retained.insert(normalize_location(&s.statistics_path), String::new());
        }
        let root = normalize_location(after.location());
        let mut deleted = Vec::new();
        let mut outside = Vec::new();
        for (n, raw) in reachable(files, before, Some(expired), false).await? {
            if retained.contains_key(&n) {
                continue;
            }
            if is_under(&n, &root) {
                deleted.push(raw);
            } else {
                outside.push(raw);
            }
        }
        Ok((deleted, outside))
    }
}

/// Snapshots that tags and branches other than `main` hold: each ref's snapshot, and a
/// branch's ancestors.
fn referenced_by_refs(md: &TableMetadata) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    // iceberg-rust has no accessor for the refs; they are in the serialized metadata.
    let Ok(v) = serde_json::to_value(md) else {
        return out;
    };
    let Some(refs) = v.get("refs").and_then(|r| r.as_object()) else {
        return out;
    };
    for (name, r) in refs {
        if name == "main" {
            continue;
        }
        let Some(mut id) = r.get("snapshot-id").and_then(|i| i.as_i64()) else {
            continue;
        };
        let branch = r.get("type").and_then(|t| t.as_str()) == Some("branch");
        loop {
            if !out.insert(id) || !branch {
                break;
            }
            match md.snapshot_by_id(id).and_then(|s| s.parent_snapshot_id()) {
                Some(p) => id = p,
                None => break,
            }
        }
    }
    out
}
