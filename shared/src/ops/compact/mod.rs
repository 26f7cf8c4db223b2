//! compact: rewrite small data files, and files carrying many deleted rows, into target-size
//! files sorted by key with their deletes applied; drop delete files nothing live needs.
//!
//! Safe alongside ingest: each partition group is one `replace` snapshot through the same commit
//! protocol. Rewritten files keep the data sequence number of the snapshot they were read from.
//! The rewrite records where each row went (a [`RowMap`]): if ingest commits deletes against a
//! file being replaced, the commit carries them over to the new files in its own snapshot
//! ([`crate::commit::carry`]) instead of planning the group again, so a delete is never dropped,
//! a row never resurrected, and compaction never loses to ingest. Ingest re-locates its rows
//! when compaction replaced a file its deletes pointed into.
//! Work per run is bounded by bytes and time; the next run continues.

use std::time::{Duration, Instant};

use futures::StreamExt;
use iceberg::TableIdent;
use iceberg::spec::TableMetadata;
use serde::Serialize;
use tracing::info;

use crate::catalog::Catalog;
use crate::commit::{self, Added, Outcome, Plan, Planner};
use crate::error::{Error, Result};
use crate::files::Fill;
use crate::files::live::Scope;
use crate::table::LoadedTable;

mod merge;
mod rewrite;
mod select;

use rewrite::NewFile;
pub use rewrite::Rewritten;
use select::{Group, live_files};

#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Output file size; default: the table's `write.target-file-size-bytes` (else 512 MiB).
    pub target_file_size: Option<u64>,
    /// Files smaller than this fraction of the target are rewritten.
    pub min_file_ratio: f64,
    /// Files with at least this fraction of their rows deleted are rewritten.
    pub delete_ratio: f64,
    /// Files that at least this many delete files point into are rewritten, however few rows
    /// they delete: every reader opens every delete file, so under continuous ingest their
    /// number (not the rows they delete) is what slows reads down.
    pub max_delete_files: usize,
    /// Input bytes per rewrite group (one snapshot). A group is streamed (see `merge`): its
    /// size bounds how long one commit's work takes, not memory.
    pub max_group_bytes: u64,
    /// Files per rewrite group: memory holds one batch (and one fetched row group) per file.
    pub max_group_files: usize,
    /// Input bytes per run.
    pub max_bytes: u64,
    /// Wall time per run (a Lambda must finish before its timeout).
    pub time_budget: Duration,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            target_file_size: None,
            min_file_ratio: 0.75,
            delete_ratio: 0.1,
            max_delete_files: 8,
            max_group_bytes: 256 << 20,
            max_group_files: 100,
            max_bytes: 1 << 30,
            time_budget: Duration::from_secs(600),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactReport {
    pub table: String,
    pub data_files_before: usize,
    pub delete_files_before: usize,
    pub data_files_after: usize,
    pub delete_files_after: usize,
    pub data_files_rewritten: usize,
    pub data_files_written: usize,
    pub delete_files_removed: usize,
    pub bytes_rewritten: u64,
    pub records_written: u64,
    pub commits: usize,
    /// Plans thrown away because the table changed (never because of ingest's deletes: those
    /// are carried over).
    pub replans: usize,
    /// Rows that commits landed meanwhile deleted from files being rewritten, deleted in the
    /// new files by the rewrite's own snapshot.
    pub deletes_carried: u64,
    /// Groups left for the next run (budget reached).
    pub groups_left: usize,
    /// Key indexes written for the large files the rewrite wrote.
    pub key_indexes_written: usize,
    pub elapsed_ms: u64,
}

pub struct Compact<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    options: CompactOptions,
}

impl<'a> Compact<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Compact {
            catalog,
            ident,
            options: CompactOptions::default(),
        }
    }

    pub fn options(mut self, options: CompactOptions) -> Self {
        self.options = options;
        self
    }

    pub async fn execute(self) -> Result<CompactReport> {
        let started = Instant::now();
        let mut report = CompactReport {
            table: self.ident.to_string(),
            ..Default::default()
        };
        let mut planner = GroupPlanner {
            compact: &self,
            budget: self.options.max_bytes,
            started,
            first: true,
            counts: (0, 0),
            before: None,
            groups_left: 0,
        };
        // One group per commit, through the commit loop (which plans a group again when
        // ingest deletes rows of its files meanwhile), until nothing is left within budget.
        loop {
            let finished = commit::run(self.catalog, &self.ident, None, &mut planner).await?;
            report.replans += finished.replans.len();
            if let Some(before) = planner.before.take() {
                (report.data_files_before, report.delete_files_before) = before;
            }
            let Some((group, stats, rewritten)) = finished.report else {
                break;
            };
            if let Some(Outcome::Committed { snapshot_id, .. }) = finished.outcome {
                let carried = self.carried(snapshot_id).await?;
                info!(table = %self.ident, snapshot_id, files = group.files.len(), bytes = group.bytes, deletes_carried = carried, "compacted a group");
                report.deletes_carried += carried;
                report.commits += 1;
                report.data_files_rewritten += group.files.len();
                report.data_files_written += stats.data_files as usize;
                report.delete_files_removed += stats.removed_delete_files as usize;
                report.bytes_rewritten += group.bytes;
                report.records_written += stats.records;
                report.key_indexes_written += self.write_key_indexes(&rewritten).await;
                planner.budget = planner.budget.saturating_sub(group.bytes);
            }
        }
        report.groups_left = planner.groups_left;
        (report.data_files_after, report.delete_files_after) = planner.counts;
        if let Some(table) = LoadedTable::load(self.catalog, &self.ident).await? {
            let live = (self.catalog.files())
                .live(&table.metadata, Scope::All, Fill::Pass)
                .await?;
            report.data_files_after = live.data().count();
            report.delete_files_after = live.position_deletes().count();
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Writes the key indexes of the large files a committed group wrote, so that the first
    /// fresh lookup after a compaction reads an index, not the new files' key columns
    /// ([`crate::lookup::index`]). An index is a cache: a failure is logged, not returned.
    async fn write_key_indexes(&self, rewritten: &Rewritten) -> usize {
        let large: Vec<&NewFile> = rewritten
            .files
            .iter()
            .filter(|f| f.rows >= crate::files::index::INDEX_MIN_ROWS)
            .collect();
        let schema = rewritten.schema.as_ref();
        let file_io = self.catalog.file_io();
        let written: Vec<bool> = futures::stream::iter(large)
            .map(|f| async move {
                match crate::lookup::write_key_index(file_io, schema, &f.path, f.size, f.rows).await
                {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::warn!(file = %f.path, error = %e, "key index not written");
                        false
                    }
                }
            })
            .buffer_unordered(crate::files::parquet::READ_CONCURRENCY)
            .collect()
            .await;
        written.into_iter().filter(|w| *w).count()
    }

    /// Position deletes snapshot `snapshot_id` (ours) carried over from concurrent commits.
    async fn carried(&self, snapshot_id: i64) -> Result<u64> {
        let Some(t) = LoadedTable::load(self.catalog, &self.ident).await? else {
            return Ok(0);
        };
        Ok(t.metadata
            .snapshot_by_id(snapshot_id)
            .and_then(|s| {
                s.summary()
                    .additional_properties
                    .get("added-position-deletes")
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0))
    }

    fn target(&self, md: &TableMetadata) -> u64 {
        self.options.target_file_size.unwrap_or_else(|| {
            md.properties()
                .get("write.target-file-size-bytes")
                .and_then(|v| v.parse().ok())
                .unwrap_or(crate::config::DEFAULT_TARGET_FILE_SIZE)
        })
    }
}

/// Plans one rewrite group per commit against the table as it is now.
struct GroupPlanner<'a> {
    compact: &'a Compact<'a>,
    /// Input bytes left for this run.
    budget: u64,
    started: Instant,
    first: bool,
    /// Data and delete files at the last plan.
    counts: (usize, usize),
    /// Data and delete files before the run (set by the first plan).
    before: Option<(usize, usize)>,
    /// Groups left for the next run at the last plan.
    groups_left: usize,
}

#[async_trait::async_trait]
impl Planner for GroupPlanner<'_> {
    /// The group and what its commit adds and removes; `None`: nothing (more) to do.
    type Report = Option<(Group, Added, Rewritten)>;

    async fn plan(&mut self, table: Option<LoadedTable>) -> Result<Plan<Self::Report>> {
        let c = self.compact;
        let Some(table) = table else {
            return Err(Error::NoSuchTable {
                table: c.ident.to_string(),
            });
        };
        crate::commit::writable_version(&table.metadata, &c.ident.to_string())?;
        let (data, deletes) = live_files(c.catalog, &table.metadata).await?;
        self.counts = (data.len(), deletes.len());
        if self.first {
            self.before = Some(self.counts);
            self.first = false;
        }
        let mut groups = c.plan(&table.metadata, &data, &deletes);
        if groups.is_empty() && deletes.iter().any(|d| d.targets.is_empty()) {
            // Nothing to rewrite, but delete files point only at files gone: drop them.
            groups.push(Group {
                files: Vec::new(),
                bytes: 0,
            });
        }
        self.groups_left = groups.len();
        let within = groups
            .first()
            .filter(|g| g.bytes <= self.budget || self.budget == c.options.max_bytes);
        let Some(group) = within.filter(|_| self.started.elapsed() <= c.options.time_budget) else {
            return Ok(Plan::Nothing(None));
        };
        self.groups_left -= 1;
        let (staged, added, rewritten) = c.rewrite(&table, group, &deletes).await?;
        // New files written, nothing committed yet: commits landing here get carried over.
        if let Err(e) = commit::failpoint("after-rewrite").await {
            staged.discard(c.catalog.file_io()).await;
            return Err(e);
        }
        Ok(Plan::Commit(
            Box::new(staged),
            Some((group.clone(), added, rewritten)),
        ))
    }
}

/// The staged commit of the first group the next run would rewrite (tests of the protocol).
#[cfg(test)]
pub(crate) async fn plan_for_tests(c: &Compact<'_>, table: LoadedTable) -> Option<commit::Staged> {
    let mut planner = GroupPlanner {
        compact: c,
        budget: c.options.max_bytes,
        started: Instant::now(),
        first: true,
        counts: (0, 0),
        before: None,
        groups_left: 0,
    };
    match planner.plan(Some(table)).await.ok()? {
        Plan::Commit(staged, _) => Some(*staged),
        Plan::Nothing(_) => None,
    }
}
