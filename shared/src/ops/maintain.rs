//! Table maintenance: expire old snapshots (and delete the files only they referenced), and
//! find or delete orphan files (in the table's folder, referenced by no snapshot or metadata).
//! Both have a dry-run mode that lists what would go. Orphans younger than a safety age are
//! never touched: they may belong to a commit in flight.

use std::collections::BTreeSet;

use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use serde::Serialize;
use tracing::{info, warn};

use crate::catalog::{Catalog, ListedFile};
use crate::commit::commit_metadata;
use crate::error::{Error, Result};
use crate::table::{LoadedTable, ancestry, keys, manifest_list};

#[derive(Debug, Clone, Serialize)]
pub struct ExpireReport {
    pub table: String,
    pub snapshots_expired: Vec<i64>,
    pub snapshots_kept: usize,
    /// Manifest lists, manifests, data and delete files only expired snapshots referenced.
    pub files_deleted: Vec<String>,
    pub dry_run: bool,
}

pub struct ExpireSnapshots<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    older_than_ms: i64,
    retain_last: usize,
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
            dry_run: false,
        }
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
        let mut expired: Vec<i64> = md
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| !keep.contains(id))
            .collect();
        expired.sort_unstable();
        expired
    }

    pub async fn execute(self) -> Result<ExpireReport> {
        let table = LoadedTable::load(self.catalog, &self.ident)
            .await?
            .ok_or_else(|| Error::Other(format!("table {} does not exist", self.ident)))?;
        let file_io = self.catalog.file_io();
        let before = table.metadata.clone();
        let mut report = ExpireReport {
            table: self.ident.to_string(),
            snapshots_expired: self.expired(&before),
            snapshots_kept: 0,
            files_deleted: vec![],
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
        // Files the expired snapshots reach that no kept snapshot does.
        let reachable_kept = reachable(file_io, &after, None, true).await?;
        let reachable_expired =
            reachable(file_io, &before, Some(&report.snapshots_expired), false).await?;
        report.files_deleted = reachable_expired
            .difference(&reachable_kept)
            .cloned()
            .collect();
        if !self.dry_run {
            for f in &report.files_deleted {
                if let Err(e) = file_io.delete(f).await {
                    warn!(file = %f, error = %e, "could not delete an expired file");
                }
            }
            info!(table = %self.ident, snapshots = report.snapshots_expired.len(), files = report.files_deleted.len(), "expired snapshots");
        }
        Ok(report)
    }
}

/// Every file snapshots reach (`only`: just those snapshots): manifest lists, manifests and the
/// data and delete files their entries name; with `live_only`, only entries that are live in
/// some snapshot (a DELETED entry records a removal, it does not keep the file).
async fn reachable(
    file_io: &FileIO,
    md: &TableMetadata,
    only: Option<&[i64]>,
    live_only: bool,
) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut seen_manifests = BTreeSet::new();
    for s in md.snapshots() {
        if only.is_some_and(|o| !o.contains(&s.snapshot_id())) {
            continue;
        }
        out.insert(s.manifest_list().to_string());
        for m in manifest_list(file_io, md, s).await? {
            if !seen_manifests.insert(m.manifest_path.clone()) {
                continue;
            }
            out.insert(m.manifest_path.clone());
            let manifest = m.load_manifest(file_io).await?;
            for e in manifest.entries() {
                if !live_only || e.is_alive() {
                    out.insert(e.file_path().to_string());
                }
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct OrphanReport {
    pub table: String,
    pub orphans: Vec<OrphanFile>,
    /// Unreferenced files left alone because they are younger than the safety age.
    pub too_young: usize,
    pub deleted: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct OrphanFile {
    pub path: String,
    pub size: u64,
    pub age_hours: f64,
}

pub struct Orphans<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    min_age_ms: i64,
    delete: bool,
}

impl<'a> Orphans<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent, min_age_ms: i64) -> Self {
        Orphans {
            catalog,
            ident,
            min_age_ms,
            delete: false,
        }
    }

    pub fn delete(mut self, delete: bool) -> Self {
        self.delete = delete;
        self
    }

    pub async fn execute(self) -> Result<OrphanReport> {
        let table = LoadedTable::load(self.catalog, &self.ident)
            .await?
            .ok_or_else(|| Error::Other(format!("table {} does not exist", self.ident)))?;
        let md = &table.metadata;
        let file_io = self.catalog.file_io();
        let mut referenced = reachable(file_io, md, None, false).await?;
        referenced.insert(table.pointer.metadata_location.clone());
        referenced.extend(md.metadata_log().iter().map(|l| l.metadata_file.clone()));
        referenced.extend(md.statistics_iter().map(|s| s.statistics_path.clone()));
        let now = chrono::Utc::now().timestamp_millis();
        let listed: Vec<ListedFile> = self.catalog.list_files(md.location()).await?;
        let mut report = OrphanReport {
            table: self.ident.to_string(),
            orphans: vec![],
            too_young: 0,
            deleted: 0,
        };
        for f in listed {
            if referenced.contains(&f.path) {
                continue;
            }
            if now - f.modified_ms < self.min_age_ms {
                report.too_young += 1;
                continue;
            }
            report.orphans.push(OrphanFile {
                path: f.path,
                size: f.size,
                age_hours: (now - f.modified_ms) as f64 / 3_600_000.0,
            });
        }
        if self.delete {
            // Re-read the pointer: a commit that landed meanwhile may reference "orphans" it
            // wrote (only possible for files younger than the safety age, which are skipped,
            // but the check is cheap).
            let again = LoadedTable::load(self.catalog, &self.ident).await?;
            let mut still = BTreeSet::new();
            if let Some(t) = &again {
                still = reachable(file_io, &t.metadata, None, false).await?;
                still.insert(t.pointer.metadata_location.clone());
                still.extend(
                    t.metadata
                        .metadata_log()
                        .iter()
                        .map(|l| l.metadata_file.clone()),
                );
            }
            for o in &report.orphans {
                if still.contains(&o.path) {
                    continue;
                }
                match file_io.delete(&o.path).await {
                    Ok(()) => report.deleted += 1,
                    Err(e) => warn!(file = %o.path, error = %e, "could not delete an orphan"),
                }
            }
        }
        Ok(report)
    }
}
