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

use iceberg::TableIdent;
use iceberg::spec::TableMetadata;
use serde::Serialize;
use tracing::info;

use crate::catalog::Catalog;
use crate::commit::{self, Added, Outcome, Plan, Planner};
use crate::error::{Error, Result};
use crate::files::live::Scope;
use crate::files::{Fill, ReadCost};
use crate::ops::maintain::RewriteManifests;
use crate::table::LoadedTable;

mod merge;
mod rewrite;
mod select;

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
    /// A partition's small files are rewritten together once there are this many.
    pub min_small_files: usize,
    /// `true` (`compact` by hand): a file with any deleted rows is rewritten, so that no delete
    /// file is left. `false` (compaction by read cost): only a file past `delete_ratio` or
    /// `max_delete_files` is; a file with few deleted rows keeps its one delete file, which a
    /// reader matches to it alone and reads cheaply.
    pub shed_all_deletes: bool,
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
            min_small_files: 2,
            shed_all_deletes: true,
        }
    }
}

/// When a table's read cost ([`ReadCost`], measured from its metadata) calls for work: what
/// the compaction function and `compact --if-needed` decide by. The defaults come from the read
/// benchmark (bench/RESULTS.md, "Reading what we write"): DuckDB pays about a quarter of a
/// millisecond per small file and per manifest on a local disk, a round trip each on S3, so a
/// 1M-row table scans within 1.5x of one plain Parquet file while these hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Small data files (below 75% of the target size) in one partition.
    pub small_files: usize,
    /// Delete files one data file is paired with (ours keep one; other engines may add more).
    pub deletes_per_data_file: usize,
    /// Fraction of a data file's rows deleted.
    pub deleted_ratio: f64,
    /// Manifests the current snapshot lists.
    pub manifests: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            small_files: 4,
            deletes_per_data_file: 2,
            deleted_ratio: 0.001,
            manifests: 8,
        }
    }
}

/// A fraction as a percentage with the digits it needs (0.1, 12.5, 50).
fn percent(x: f64) -> String {
    let p = x * 100.0;
    let s = format!("{p:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

impl Thresholds {
    /// What `cost` passes: the reasons to compact (empty: nothing to do).
    pub fn compaction_reasons(&self, cost: &ReadCost) -> Vec<String> {
        let mut why = Vec::new();
        if cost.max_small_files >= self.small_files.max(2) {
            why.push(format!(
                "{} small data files in one partition (threshold {})",
                cost.max_small_files, self.small_files
            ));
        }
        if cost.max_deletes_per_data_file >= self.deletes_per_data_file.max(1) {
            why.push(format!(
                "{} delete files on one data file (threshold {})",
                cost.max_deletes_per_data_file, self.deletes_per_data_file
            ));
        }
        if cost.max_deleted_ratio >= self.deleted_ratio {
            why.push(format!(
                "{}% of a data file's rows deleted (threshold {}%)",
                percent(cost.max_deleted_ratio),
                percent(self.deleted_ratio)
            ));
        }
        why
    }

    /// Whether the manifests call for a rewrite.
    pub fn manifests_exceeded(&self, cost: &ReadCost) -> bool {
        cost.manifests > self.manifests.max(1)
    }

    /// Compaction options that rewrite what these thresholds count.
    pub fn options(&self, base: CompactOptions) -> CompactOptions {
        CompactOptions {
            delete_ratio: self.deleted_ratio,
            max_delete_files: self.deletes_per_data_file.max(1),
            min_small_files: self.small_files.max(2),
            shed_all_deletes: false,
            ..base
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
    /// Compaction by read cost ([`Compact::by_read_cost`]): the cost measured first, and what
    /// of it passed the thresholds (empty: nothing was rewritten).
    pub read_cost: Option<ReadCost>,
    pub compacted_because: Vec<String>,
    /// Manifests before and after a manifest rewrite, when one ran.
    pub manifests_rewritten: Option<(usize, usize)>,
    pub elapsed_ms: u64,
}

pub struct Compact<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    options: CompactOptions,
    by_read_cost: Option<Thresholds>,
}

impl<'a> Compact<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Compact {
            catalog,
            ident,
            options: CompactOptions::default(),
            by_read_cost: None,
        }
    }

    /// Options; with [`Compact::by_read_cost`] set after them, the thresholds' own override
    /// what they count.
    pub fn options(mut self, options: CompactOptions) -> Self {
        self.options = options;
        self
    }

    /// Compacts only when the table's read cost passes `thresholds`, and then what they count
    /// (a file with few deleted rows keeps its delete file); rewrites the manifests when there
    /// are more than they allow. What the compaction function runs.
    pub fn by_read_cost(mut self, thresholds: Thresholds) -> Self {
        self.options = thresholds.options(self.options);
        self.by_read_cost = Some(thresholds);
        self
    }

    pub async fn execute(self) -> Result<CompactReport> {
        let started = Instant::now();
        let mut report = CompactReport {
            table: self.ident.to_string(),
            ..Default::default()
        };
        if let Some(th) = self.by_read_cost {
            let cost = self.read_cost().await?;
            report.compacted_because = th.compaction_reasons(&cost);
            let files = (cost.data_files, cost.delete_files);
            let manifests = th.manifests_exceeded(&cost);
            report.read_cost = Some(cost);
            if !report.compacted_because.is_empty() {
                self.rewrite_groups(started, &mut report).await?;
            } else {
                (report.data_files_before, report.delete_files_before) = files;
                (report.data_files_after, report.delete_files_after) = files;
            }
            // A compaction's own commits merge manifests by the table's settings; a table
            // another engine fills may still list many.
            if manifests {
                let r = RewriteManifests::new(self.catalog, self.ident.clone())
                    .above(th.manifests)
                    .execute()
                    .await?;
                if r.snapshot_id.is_some() {
                    report.manifests_rewritten = Some((r.manifests_before, r.manifests_after));
                }
            }
        } else {
            self.rewrite_groups(started, &mut report).await?;
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// The groups worth rewriting, one commit each, within the run's budget.
    async fn rewrite_groups(&self, started: Instant, report: &mut CompactReport) -> Result<()> {
        let mut planner = GroupPlanner {
            compact: self,
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
                report.key_indexes_written += rewritten.key_indexes;
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
        Ok(())
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

    /// The table's read cost, small files counted below this compaction's small-file size.
    pub async fn read_cost(&self) -> Result<ReadCost> {
        let Some(t) = LoadedTable::load(self.catalog, &self.ident).await? else {
            return Err(Error::NoSuchTable {
                table: self.ident.to_string(),
            });
        };
        let small = (self.target(&t.metadata) as f64 * self.options.min_file_ratio) as u64;
        self.catalog.files().read_cost(&t.metadata, small).await
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
        let mut groups = c.plan(&table.metadata, &data);
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
