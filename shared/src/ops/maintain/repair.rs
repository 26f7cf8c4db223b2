//! repair: a table whose catalog names metadata that cannot be read whole (the metadata file
//! itself, or a manifest list, manifest or data file it needs, is gone) is pointed back at the
//! newest metadata of its history that can.
//!
//! How a table gets there: a writer deleted the files of a commit whose swap had in fact taken
//! effect (an answer lost, then a refused retry taken for a lost race: what dms2iceberg before
//! 0.2 did on Glue and S3 Tables). Every later reader and writer fails on it.
//!
//! What the repair does, so that no row is lost:
//! 1. Judges the metadata the catalog names: it parses, and its current snapshot's manifest
//!    list, manifests and live files are there ([`check_files`]): then there is nothing to
//!    repair (older snapshots that lost files are reported, not repaired: moving the table
//!    back past them would drop commits that read; `expire` drops the snapshots instead).
//! 2. Lists the table's metadata folder and takes the newest metadata file older than the one
//!    named (by version: newer or equal versions are attempts that never became current) that
//!    is the same table and whose current snapshot reads whole.
//! 3. Writes it again as the next version, with the table property `dms2iceberg.repaired`
//!    saying when, from what and to what, and swaps the catalog to it from the damaged pointer
//!    (a compare-and-swap: a table that moved meanwhile is left alone).
//!
//! The applied-file record travels in the metadata, so the restored table records exactly
//! what its rows hold: the DMS files the lost commits applied count as not applied, and the
//! next ingest of the table (any new file's event, or the CLI on the table's folder) applies
//! them again from the landing bucket, in order.

use std::str::FromStr as _;

use iceberg::spec::TableMetadata;
use iceberg::{MetadataLocation, TableIdent};
use serde::Serialize;
use tracing::{info, warn};

use super::location::metadata_version;
use super::verify::check_files;
use crate::catalog::{Catalog, Pointer, SwapError};
use crate::error::{Error, Result};

/// Table property: the last repair (JSON: `at` epoch ms, `damaged` the metadata the catalog
/// named, `problem`, `restored` the metadata the table was restored from).
pub const REPAIRED: &str = "dms2iceberg.repaired";

/// Points a damaged table back at intact metadata; a builder ending in [`Repair::execute`].
pub struct Repair<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    dry_run: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    pub table: String,
    /// The metadata the catalog named.
    pub damaged: String,
    /// Why it needed repair (empty: it did not).
    pub problems: Vec<String>,
    /// The metadata the table was (or, in a dry run, would be) restored from.
    pub restored_from: Option<String>,
    /// Newer metadata files passed over, and why.
    pub passed_over: Vec<(String, String)>,
    /// The new metadata the catalog now names (`None`: nothing done).
    pub metadata_location: Option<String>,
    /// The restored table's current snapshot.
    pub snapshot_id: Option<i64>,
    /// A table whose current snapshot reads is not repaired; what is wrong with its older
    /// snapshots, if anything (expiring them drops the problem with them).
    pub older_snapshots_broken: Vec<String>,
    /// The newest DMS file the restored table's record holds: files after it are applied
    /// again by the next ingest.
    pub applied_through: Option<String>,
    pub dry_run: bool,
}

impl RepairReport {
    pub fn was_damaged(&self) -> bool {
        !self.problems.is_empty()
    }
}

impl<'a> Repair<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Repair {
            catalog,
            ident,
            dry_run: false,
        }
    }

    /// Say what would be done, change nothing.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    pub async fn execute(self) -> Result<RepairReport> {
        let table = self.ident.to_string();
        if self.catalog.writes_metadata() {
            return Err(Error::Unsupported(format!(
                "{table}: a REST catalog writes and keeps its tables' metadata itself; repair \
                 it with the catalog's own tools (or drop the table without purging and register \
                 intact metadata)"
            )));
        }
        let pointer = self
            .catalog
            .load(&self.ident)
            .await?
            .ok_or_else(|| Error::NoSuchTable {
                table: table.clone(),
            })?;
        let mut report = RepairReport {
            table: table.clone(),
            damaged: pointer.metadata_location.clone(),
            problems: Vec::new(),
            restored_from: None,
            passed_over: Vec::new(),
            metadata_location: None,
            snapshot_id: None,
            older_snapshots_broken: Vec::new(),
            applied_through: None,
            dry_run: self.dry_run,
        };
        let named = match self.read_whole(&pointer.metadata_location).await? {
            Judged::Whole(_, older) => {
                report.older_snapshots_broken = older;
                return Ok(report);
            }
            Judged::Broken(problems, md) => {
                report.problems = problems;
                md
            }
        };
        let (location, metadata) = self
            .newest_whole(&pointer, named.as_ref(), &mut report)
            .await?;
        report.snapshot_id = metadata.current_snapshot_id();
        report.applied_through = crate::ops::history::RecordView::of(&metadata)
            .ok()
            .flatten()
            .and_then(|r| r.last_file.or(r.watermark));
        report.restored_from = Some(location.clone());
        if self.dry_run {
            return Ok(report);
        }
        let note = serde_json::json!({
            "at": chrono::Utc::now().timestamp_millis(),
            "damaged": pointer.metadata_location,
            "problem": report.problems.first(),
            "restored": location,
        });
        let repaired = metadata
            .into_builder(Some(location.clone()))
            .set_properties([(REPAIRED.to_string(), note.to_string())].into())?
            .build()?
            .metadata;
        // The next version after the damaged one: newer than anything of the lineage.
        let new_location = MetadataLocation::from_str(&pointer.metadata_location)
            .or_else(|_| MetadataLocation::from_str(&location))?
            .with_next_version()
            .with_new_metadata(&repaired)
            .to_string();
        crate::files::metadata::write(self.catalog.file_io(), &new_location, &repaired, None)
            .await?;
        match self
            .catalog
            .swap(&self.ident, Some(&pointer), &new_location, &repaired)
            .await
        {
            Ok(()) => {}
            Err(SwapError::Unknown(reason)) => {
                // Look, as a commit does: the catalog naming our file means it landed.
                let now = self.catalog.load(&self.ident).await?;
                if now.as_ref().map(|p| p.metadata_location.as_str()) != Some(&new_location) {
                    return Err(Error::CommitUnknown { table, reason });
                }
            }
            Err(SwapError::Conflict | SwapError::Refused(_)) => {
                let _ = self.catalog.file_io().delete(&new_location).await;
                return Err(Error::CommitFailed {
                    table,
                    attempts: 1,
                    reason: "the table changed while it was repaired (another repair, or a \
                             writer); run the repair again to judge it as it is now"
                        .into(),
                });
            }
            Err(SwapError::Failed(e)) => {
                let _ = self.catalog.file_io().delete(&new_location).await;
                return Err(e);
            }
        }
        warn!(
            table = %report.table,
            damaged = %report.damaged,
            restored_from = %location,
            metadata = %new_location,
            applied_through = ?report.applied_through,
            "repaired a damaged table: DMS files after the restored record are applied again by the next ingest"
        );
        report.metadata_location = Some(new_location);
        Ok(report)
    }

    /// The metadata at `location` and whether the table it describes reads: the metadata
    /// parses, and its current snapshot's manifest list, manifests and live files are all
    /// there. Older snapshots do not count (a file lost from a snapshot the table has moved
    /// past is no reason to move the table back: `expire` drops such snapshots); their
    /// problems are returned apart.
    async fn read_whole(&self, location: &str) -> Result<Judged> {
        let files = self.catalog.files();
        let bytes = match files.io().new_input(location)?.read().await {
            Ok(b) => b,
            Err(e) => {
                return match files.io().exists(location).await {
                    Ok(false) => Ok(Judged::Broken(
                        vec![format!("metadata {location} is missing")],
                        None,
                    )),
                    // There, or not known to be missing: a read that failed for another reason
                    // is no ground for repair.
                    _ => Err(e.into()),
                };
            }
        };
        let md = match crate::files::metadata::parse_bytes(location, &bytes) {
            Ok((md, _)) => std::sync::Arc::new(md),
            Err(e) => {
                return Ok(Judged::Broken(
                    vec![format!(
                        "metadata {location} does not read as table metadata: {e}"
                    )],
                    None,
                ));
            }
        };
        let Some(current) = md.current_snapshot_id() else {
            return Ok(Judged::Whole(md, Vec::new()));
        };
        let (_, problems) = check_files(files, &md, Some(&[current])).await;
        if problems.is_empty() {
            let (_, older) = check_files(files, &md, None).await;
            let older = older
                .into_iter()
                .map(|p| format!("{} (snapshots {:?})", p.what, p.snapshots))
                .collect();
            return Ok(Judged::Whole(md, older));
        }
        Ok(Judged::Broken(
            problems
                .into_iter()
                .map(|p| format!("{} (the current snapshot {current})", p.what))
                .collect(),
            Some(md),
        ))
    }

    /// The newest metadata file of the table's history before `pointer`'s that reads whole.
    async fn newest_whole(
        &self,
        pointer: &Pointer,
        named: Option<&std::sync::Arc<TableMetadata>>,
        report: &mut RepairReport,
    ) -> Result<(String, TableMetadata)> {
        let damaged = &pointer.metadata_location;
        let Some((folder, _)) = damaged.rsplit_once('/') else {
            return Err(Error::Table(format!(
                "{}: metadata location {damaged} has no folder to look for older metadata in",
                report.table
            )));
        };
        let ceiling = metadata_version(damaged);
        let mut candidates: Vec<(u64, i64, String)> = self
            .catalog
            .list_files(folder)
            .await?
            .into_iter()
            .filter(|f| f.path != *damaged)
            .filter_map(|f| Some((metadata_version(&f.path)?, f.modified_ms, f.path)))
            .collect();
        // Newest first: by version, then by when it was written.
        candidates.sort_by(|a, b| b.cmp(a));
        for (version, _, path) in candidates {
            if ceiling.is_some_and(|c| version >= c) {
                report.passed_over.push((
                    path,
                    "not older than the damaged metadata: an attempt that never became current"
                        .into(),
                ));
                continue;
            }
            match self.read_whole(&path).await {
                Ok(Judged::Whole(md, _)) => {
                    if let Some(n) = named
                        && n.uuid() != md.uuid()
                    {
                        report
                            .passed_over
                            .push((path, format!("another table (uuid {})", md.uuid())));
                        continue;
                    }
                    info!(table = %report.table, metadata = %path, "newest intact metadata");
                    return Ok((path, md.as_ref().clone()));
                }
                Ok(Judged::Broken(problems, _)) => {
                    let why = problems.into_iter().next().unwrap_or_default();
                    report.passed_over.push((path, why));
                }
                Err(e) => report.passed_over.push((path, e.to_string())),
            }
        }
        Err(Error::Table(format!(
            "{}: no metadata older than {damaged} in {folder} reads whole; nothing was changed \
             (passed over: {:?})",
            report.table, report.passed_over
        )))
    }
}

/// Metadata judged by whether the table it describes reads.
enum Judged {
    /// Its current snapshot reads; what is wrong with older snapshots, if anything.
    Whole(std::sync::Arc<TableMetadata>, Vec<String>),
    /// What is wrong, and the metadata if it could be read at all.
    Broken(Vec<String>, Option<std::sync::Arc<TableMetadata>>),
}
