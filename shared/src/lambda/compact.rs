//! The compaction function, on two schedules. Every few minutes (the `compact` task) it
//! measures each table's read cost from its metadata ([`ReadCost`]: small files per partition,
//! delete files and deleted rows per data file, manifests) and compacts, within a time and byte
//! budget, only the tables past [`Thresholds`]; a table is rewritten when its readers start to
//! pay, not on the clock. Less often (the `expire` and `orphans` tasks; an event that names no
//! task runs all three) it expires old snapshots and deletes orphan files older than a safety
//! age. Tables run with bounded concurrency; whatever does not fit this invocation is done by
//! the next.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use tracing::{error, info};

use super::events::CompactEvent;
use super::metrics::emf_line;
use super::{FunctionEnv, FunctionError};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::files::ReadCost;
use crate::ops::compact::{Compact, CompactOptions, CompactReport, Thresholds};
use crate::ops::maintain::{ExpireSnapshots, Orphans, Repair};
use crate::table::LoadedTable;

/// Snapshots the compaction function keeps at most (`DMS2ICEBERG_SNAPSHOT_RETAIN_MAX`): about
/// 3 hours of a table fed a file a minute, 8 days of one fed hourly. Every query parses them
/// all (DuckDB ~12 µs each): at 500, a point lookup cost 2.3x a fresh table's after 10,000
/// commits, at 200 1.7x (bench/RESULTS.md, section 10).
pub const DEFAULT_RETAIN_MAX: usize = 200;

/// `DMS2ICEBERG_COMPACT_*` and maintenance settings.
#[derive(Debug, Clone)]
pub struct CompactEnv {
    /// `DMS2ICEBERG_COMPACT_MAX_BYTES` (default 1 GiB): input bytes per table and invocation.
    pub max_bytes: u64,
    /// When a table needs work: `DMS2ICEBERG_COMPACT_SMALL_FILES` (default 4; the older
    /// `DMS2ICEBERG_COMPACT_MIN_DATA_FILES` is read too), `..._DELETE_FILES_PER_DATA_FILE` (2),
    /// `..._DELETED_RATIO` (0.001), `..._MAX_MANIFESTS` (8): see [`Thresholds::default`].
    pub thresholds: Thresholds,
    /// `DMS2ICEBERG_COMPACT_CONCURRENCY` (default 2): tables at once.
    pub concurrency: usize,
    /// `DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS` (default 168).
    pub retention_hours: f64,
    /// `DMS2ICEBERG_SNAPSHOT_RETAIN_LAST` (default 10): newest snapshots always kept.
    pub retain_last: usize,
    /// `DMS2ICEBERG_SNAPSHOT_RETAIN_MAX` (default 200; 0: no limit): at most this many kept,
    /// however young (metadata.json, which every query parses, grows with them).
    pub retain_max: Option<usize>,
    /// `DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS` (default 72).
    pub orphan_min_age_hours: f64,
    /// `DMS2ICEBERG_COMPACTION`: `on`, `off`, or `auto` (the default: on, except where the
    /// catalog's service compacts the tables itself, S3 Tables).
    pub compaction: Option<bool>,
}

impl CompactEnv {
    pub fn from_env() -> Result<CompactEnv> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        fn parse<T: std::str::FromStr>(k: &str, v: Option<String>, d: T) -> Result<T> {
            match v {
                None => Ok(d),
                Some(v) => v
                    .parse()
                    .map_err(|_| Error::Config(format!("{k}=`{v}` is not a number"))),
            }
        }
        let compaction = match var("DMS2ICEBERG_COMPACTION").as_deref() {
            None | Some("auto") => None,
            Some("on") => Some(true),
            Some("off") => Some(false),
            Some(other) => {
                return Err(Error::Config(format!(
                    "DMS2ICEBERG_COMPACTION=`{other}`: use `auto`, `on` or `off`"
                )));
            }
        };
        Ok(CompactEnv {
            compaction,
            max_bytes: parse(
                "DMS2ICEBERG_COMPACT_MAX_BYTES",
                var("DMS2ICEBERG_COMPACT_MAX_BYTES"),
                1u64 << 30,
            )?,
            thresholds: Thresholds {
                small_files: parse(
                    "DMS2ICEBERG_COMPACT_SMALL_FILES",
                    var("DMS2ICEBERG_COMPACT_SMALL_FILES")
                        .or_else(|| var("DMS2ICEBERG_COMPACT_MIN_DATA_FILES")),
                    Thresholds::default().small_files,
                )?,
                deletes_per_data_file: parse(
                    "DMS2ICEBERG_COMPACT_DELETE_FILES_PER_DATA_FILE",
                    var("DMS2ICEBERG_COMPACT_DELETE_FILES_PER_DATA_FILE"),
                    Thresholds::default().deletes_per_data_file,
                )?,
                deleted_ratio: parse(
                    "DMS2ICEBERG_COMPACT_DELETED_RATIO",
                    var("DMS2ICEBERG_COMPACT_DELETED_RATIO"),
                    Thresholds::default().deleted_ratio,
                )?,
                manifests: parse(
                    "DMS2ICEBERG_COMPACT_MAX_MANIFESTS",
                    var("DMS2ICEBERG_COMPACT_MAX_MANIFESTS"),
                    Thresholds::default().manifests,
                )?,
            },
            concurrency: parse(
                "DMS2ICEBERG_COMPACT_CONCURRENCY",
                var("DMS2ICEBERG_COMPACT_CONCURRENCY"),
                2usize,
            )?
            .max(1),
            retention_hours: parse(
                "DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS",
                var("DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS"),
                168.0,
            )?,
            retain_last: parse(
                "DMS2ICEBERG_SNAPSHOT_RETAIN_LAST",
                var("DMS2ICEBERG_SNAPSHOT_RETAIN_LAST"),
                10usize,
            )?,
            retain_max: Some(parse(
                "DMS2ICEBERG_SNAPSHOT_RETAIN_MAX",
                var("DMS2ICEBERG_SNAPSHOT_RETAIN_MAX"),
                DEFAULT_RETAIN_MAX,
            )?)
            .filter(|n| *n > 0),
            orphan_min_age_hours: parse(
                "DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS",
                var("DMS2ICEBERG_ORPHAN_MIN_AGE_HOURS"),
                72.0,
            )?,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TableMaintenance {
    pub table: String,
    pub compaction: Option<CompactReport>,
    /// The read cost measured before any work (the compaction report says what it decided).
    pub read_cost: Option<ReadCost>,
    pub snapshots_expired: usize,
    pub files_expired: usize,
    pub orphans_deleted: usize,
    /// The metadata a damaged table was restored from (see `ops::maintain::Repair`).
    pub repaired: Option<String>,
    pub error: Option<String>,
}

pub struct CompactHandler {
    catalog: Arc<dyn Catalog>,
    /// `DMS2ICEBERG_GLUE_DATABASE`: only this namespace's tables.
    database: Option<String>,
    settings: CompactEnv,
    /// `DMS2ICEBERG_TABLE_METRICS`: metrics per table besides the aggregates.
    table_metrics: bool,
    /// The metrics' `Function` dimension (the deployed function's name).
    metric_function: String,
}

impl CompactHandler {
    /// `catalog`: where the tables are (Glue in AWS, restricted to the function's database).
    pub fn new(catalog: Arc<dyn Catalog>, env: &FunctionEnv, settings: CompactEnv) -> Self {
        CompactHandler {
            catalog,
            database: env.database.clone(),
            settings,
            table_metrics: env.table_metrics,
            metric_function: env.metric_function("compact"),
        }
    }

    /// Runs one pass of the event's tasks; `deadline`: when the invocation must have returned.
    /// A catalog without tables (the database not created yet) is a pass with nothing to do.
    pub async fn handle(
        &self,
        event: CompactEvent,
        deadline: Option<Instant>,
    ) -> std::result::Result<Vec<TableMaintenance>, FunctionError> {
        let started = Instant::now();
        // Leave a margin for the commit in flight and the response.
        let budget = deadline
            .map(|d| {
                d.saturating_duration_since(started)
                    .saturating_sub(Duration::from_secs(60))
            })
            .unwrap_or(Duration::from_secs(600));
        let mut tables = self.catalog.list_tables().await?;
        if let Some(db) = &self.database {
            tables.retain(|t| t.namespace().as_ref().join(".") == *db);
        }
        let event = &event;
        let results: Vec<TableMaintenance> = futures::stream::iter(tables)
            .map(|ident| async move {
                let table = ident.to_string();
                match self.maintain(&ident, event, started, budget).await {
                    Ok(r) => r,
                    Err(e) => {
                        error!(%table, error = %e, kind = e.kind(), "maintenance failed");
                        println!(
                            "{}",
                            emf_line(
                                &self.metric_function,
                                &table,
                                self.table_metrics,
                                &[("TablesFailed", "Count", 1.0)]
                            )
                        );
                        TableMaintenance {
                            error: Some(e.redacted()),
                            ..TableMaintenance::of(table)
                        }
                    }
                }
            })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        Ok(results)
    }

    async fn maintain(
        &self,
        ident: &iceberg::TableIdent,
        event: &CompactEvent,
        started: Instant,
        budget: Duration,
    ) -> Result<TableMaintenance> {
        let table_started = Instant::now();
        let mut out = TableMaintenance::of(ident.to_string());
        let catalog = self.catalog.as_ref();
        // A damaged table (its catalog names metadata that is gone) stops every reader and
        // writer: repaired first, whatever the pass was for. `{"tasks": ["repair"]}` judges
        // every table whole (missing manifests or data files too).
        let loaded = match LoadedTable::load(catalog, ident).await {
            Err(Error::MetadataDamaged { .. }) => None,
            Err(e) => return Err(e),
            Ok(None) => return Ok(out),
            Ok(Some(t)) => Some(t),
        };
        if loaded.is_none() || event.names("repair") {
            let r = Repair::new(catalog, ident.clone()).execute().await?;
            if r.was_damaged() {
                error!(
                    table = %out.table,
                    damaged = %r.damaged,
                    problems = ?r.problems,
                    restored_from = ?r.restored_from,
                    applied_through = ?r.applied_through,
                    "table was damaged and is repaired: DMS files applied after the restored \
                     record are applied again by the next ingest of the table"
                );
                out.repaired = r.restored_from;
            }
        }
        let compact_here = self
            .settings
            .compaction
            .unwrap_or(catalog.maintained_by_service().is_none());
        if event.runs("compact") {
            let remaining = budget.saturating_sub(started.elapsed());
            let compact = Compact::new(catalog, ident.clone())
                .options(CompactOptions {
                    max_bytes: self.settings.max_bytes,
                    time_budget: remaining,
                    ..Default::default()
                })
                .by_read_cost(self.settings.thresholds);
            if compact_here && !remaining.is_zero() {
                let r = compact.execute().await?;
                out.read_cost = r.read_cost.clone();
                out.compaction = Some(r);
            } else {
                out.read_cost = Some(compact.read_cost().await?);
            }
        }
        // The catalog's service expires snapshots and removes orphans itself (S3 Tables).
        if catalog.maintained_by_service().is_some() {
            return Ok(self.report(out, table_started));
        }
        if event.runs("expire") {
            let cutoff = chrono::Utc::now().timestamp_millis()
                - (self.settings.retention_hours * 3_600_000.0) as i64;
            let e = ExpireSnapshots::new(catalog, ident.clone(), cutoff, self.settings.retain_last)
                .retain_max(self.settings.retain_max)
                .execute()
                .await?;
            out.snapshots_expired = e.snapshots_expired.len();
            out.files_expired = e.files_deleted.len();
        }
        if event.runs("orphans") {
            let o = Orphans::new(
                catalog,
                ident.clone(),
                (self.settings.orphan_min_age_hours * 3_600_000.0) as i64,
            )
            .delete(true)
            .execute()
            .await?;
            out.orphans_deleted = o.deleted;
        }
        Ok(self.report(out, table_started))
    }

    /// Logs and emits the metrics of one table's maintenance.
    fn report(&self, out: TableMaintenance, table_started: Instant) -> TableMaintenance {
        // Without a compaction the table's files are those its read cost counted (a zero report
        // would graph as an empty table after every quiet run).
        let cost = out.read_cost.clone().unwrap_or_default();
        let c = out.compaction.clone().unwrap_or_else(|| CompactReport {
            table: out.table.clone(),
            data_files_before: cost.data_files,
            data_files_after: cost.data_files,
            delete_files_before: cost.delete_files,
            delete_files_after: cost.delete_files,
            ..Default::default()
        });
        info!(
            table = %out.table,
            data_files_before = c.data_files_before,
            data_files_after = c.data_files_after,
            delete_files_before = c.delete_files_before,
            delete_files_after = c.delete_files_after,
            bytes_rewritten = c.bytes_rewritten,
            manifests = cost.manifests,
            max_small_files = cost.max_small_files,
            max_deletes_per_data_file = cost.max_deletes_per_data_file,
            compacted_because = ?c.compacted_because,
            manifests_rewritten = ?c.manifests_rewritten,
            snapshots_expired = out.snapshots_expired,
            orphans_deleted = out.orphans_deleted,
            duration_ms = table_started.elapsed().as_millis() as u64,
            "table maintained"
        );
        println!(
            "{}",
            emf_line(
                &self.metric_function,
                &out.table,
                self.table_metrics,
                &[
                    ("TablesFailed", "Count", 0.0),
                    ("FilesRewritten", "Count", c.data_files_rewritten as f64),
                    ("BytesRewritten", "Bytes", c.bytes_rewritten as f64),
                    ("DeleteFilesRemoved", "Count", c.delete_files_removed as f64),
                    ("DataFilesAfter", "Count", c.data_files_after as f64),
                    ("Manifests", "Count", cost.manifests as f64),
                    (
                        "SmallFilesPerPartition",
                        "Count",
                        cost.max_small_files as f64
                    ),
                    (
                        "DeleteFilesPerDataFile",
                        "Count",
                        cost.max_deletes_per_data_file as f64
                    ),
                    ("SnapshotsExpired", "Count", out.snapshots_expired as f64),
                    ("OrphansDeleted", "Count", out.orphans_deleted as f64),
                    (
                        "TablesRepaired",
                        "Count",
                        f64::from(u8::from(out.repaired.is_some()))
                    ),
                    (
                        "DurationMs",
                        "Milliseconds",
                        table_started.elapsed().as_millis() as f64
                    ),
                ],
            )
        );
        out
    }
}

impl TableMaintenance {
    fn of(table: String) -> TableMaintenance {
        TableMaintenance {
            table,
            compaction: None,
            read_cost: None,
            snapshots_expired: 0,
            files_expired: 0,
            orphans_deleted: 0,
            repaired: None,
            error: None,
        }
    }
}
