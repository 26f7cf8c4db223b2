//! The compaction function, on a schedule: for every table of the Glue database that needs it
//! (by file counts in its current snapshot), compact within a time and byte budget, expire old
//! snapshots and delete orphan files older than a safety age. Tables run with bounded
//! concurrency; whatever does not fit this invocation is done by the next.

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
use crate::ops::compact::{Compact, CompactOptions, CompactReport};
use crate::ops::maintain::{ExpireSnapshots, Orphans};
use crate::table::LoadedTable;

/// `DMS2ICEBERG_COMPACT_*` and maintenance settings.
#[derive(Debug, Clone)]
pub struct CompactEnv {
    /// `DMS2ICEBERG_COMPACT_MAX_BYTES` (default 1 GiB): input bytes per table and invocation.
    pub max_bytes: u64,
    /// `DMS2ICEBERG_COMPACT_MIN_DATA_FILES` (default 8): a table needs compaction from this many
    /// data files, or from one delete file.
    pub min_data_files: u64,
    /// `DMS2ICEBERG_COMPACT_CONCURRENCY` (default 2): tables at once.
    pub concurrency: usize,
    /// `DMS2ICEBERG_SNAPSHOT_RETENTION_HOURS` (default 168).
    pub retention_hours: f64,
    /// `DMS2ICEBERG_SNAPSHOT_RETAIN_LAST` (default 10): newest snapshots always kept.
    pub retain_last: usize,
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
            min_data_files: parse(
                "DMS2ICEBERG_COMPACT_MIN_DATA_FILES",
                var("DMS2ICEBERG_COMPACT_MIN_DATA_FILES"),
                8u64,
            )?,
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
    pub snapshots_expired: usize,
    pub files_expired: usize,
    pub orphans_deleted: usize,
    pub error: Option<String>,
}

pub struct CompactHandler {
    catalog: Arc<dyn Catalog>,
    /// `DMS2ICEBERG_GLUE_DATABASE`: only this namespace's tables.
    database: Option<String>,
    settings: CompactEnv,
}

impl CompactHandler {
    /// `catalog`: where the tables are (Glue in AWS, restricted to the function's database).
    pub fn new(catalog: Arc<dyn Catalog>, env: &FunctionEnv, settings: CompactEnv) -> Self {
        CompactHandler {
            catalog,
            database: env.database.clone(),
            settings,
        }
    }

    /// Runs one pass; `deadline`: when the invocation must have returned. A catalog without
    /// tables (the database not created yet) is a pass with nothing to do.
    pub async fn handle(
        &self,
        _event: CompactEvent,
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
        let results: Vec<TableMaintenance> = futures::stream::iter(tables)
            .map(|ident| async move {
                let table = ident.to_string();
                match self.maintain(&ident, started, budget).await {
                    Ok(r) => r,
                    Err(e) => {
                        error!(%table, error = %e, kind = e.kind(), "maintenance failed");
                        TableMaintenance {
                            table,
                            compaction: None,
                            snapshots_expired: 0,
                            files_expired: 0,
                            orphans_deleted: 0,
                            error: Some(e.redacted()),
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
        started: Instant,
        budget: Duration,
    ) -> Result<TableMaintenance> {
        let table_started = Instant::now();
        let mut out = TableMaintenance {
            table: ident.to_string(),
            compaction: None,
            snapshots_expired: 0,
            files_expired: 0,
            orphans_deleted: 0,
            error: None,
        };
        let catalog = self.catalog.as_ref();
        let Some(t) = LoadedTable::load(catalog, ident).await? else {
            return Ok(out);
        };
        let totals = t.metadata.current_snapshot().map(|s| {
            let p = &s.summary().additional_properties;
            let n = |k: &str| p.get(k).and_then(|v| v.parse::<u64>().ok());
            (n("total-data-files"), n("total-delete-files"))
        });
        // Unknown totals (a snapshot by another writer): let the planner decide.
        let needs_work = match totals {
            Some((Some(data), Some(deletes))) => {
                data >= self.settings.min_data_files || deletes > 0
            }
            Some(_) => true,
            None => false,
        };
        let remaining = budget.saturating_sub(started.elapsed());
        let compact_here = self
            .settings
            .compaction
            .unwrap_or(catalog.maintained_by_service().is_none());
        if compact_here && needs_work && !remaining.is_zero() {
            let r = Compact::new(catalog, ident.clone())
                .options(CompactOptions {
                    max_bytes: self.settings.max_bytes,
                    time_budget: remaining,
                    ..Default::default()
                })
                .execute()
                .await?;
            out.compaction = Some(r);
        }
        // The catalog's service expires snapshots and removes orphans itself (S3 Tables).
        if catalog.maintained_by_service().is_some() {
            return Ok(self.report(out, totals, table_started));
        }
        let cutoff = chrono::Utc::now().timestamp_millis()
            - (self.settings.retention_hours * 3_600_000.0) as i64;
        let e = ExpireSnapshots::new(catalog, ident.clone(), cutoff, self.settings.retain_last)
            .execute()
            .await?;
        out.snapshots_expired = e.snapshots_expired.len();
        out.files_expired = e.files_deleted.len();
        let o = Orphans::new(
            catalog,
            ident.clone(),
            (self.settings.orphan_min_age_hours * 3_600_000.0) as i64,
        )
        .delete(true)
        .execute()
        .await?;
        out.orphans_deleted = o.deleted;
        Ok(self.report(out, totals, table_started))
    }

    /// Logs and emits the metrics of one table's maintenance.
    fn report(
        &self,
        out: TableMaintenance,
        totals: Option<(Option<u64>, Option<u64>)>,
        table_started: Instant,
    ) -> TableMaintenance {
        // Without a compaction the table's files are those of the snapshot read at the start
        // (a zero report would graph as an empty table after every quiet run).
        let c = out.compaction.clone().unwrap_or_else(|| {
            let (data, deletes) = match totals {
                Some((d, x)) => (d.unwrap_or(0) as usize, x.unwrap_or(0) as usize),
                None => (0, 0),
            };
            CompactReport {
                table: out.table.clone(),
                data_files_before: data,
                data_files_after: data,
                delete_files_before: deletes,
                delete_files_after: deletes,
                ..Default::default()
            }
        });
        info!(
            table = %out.table,
            data_files_before = c.data_files_before,
            data_files_after = c.data_files_after,
            delete_files_before = c.delete_files_before,
            delete_files_after = c.delete_files_after,
            bytes_rewritten = c.bytes_rewritten,
            snapshots_expired = out.snapshots_expired,
            orphans_deleted = out.orphans_deleted,
            duration_ms = table_started.elapsed().as_millis() as u64,
            "table maintained"
        );
        println!(
            "{}",
            emf_line(
                "compact",
                &out.table,
                &[
                    ("FilesRewritten", "Count", c.data_files_rewritten as f64),
                    ("BytesRewritten", "Bytes", c.bytes_rewritten as f64),
                    ("DeleteFilesRemoved", "Count", c.delete_files_removed as f64),
                    ("DataFilesAfter", "Count", c.data_files_after as f64),
                    ("SnapshotsExpired", "Count", out.snapshots_expired as f64),
                    ("OrphansDeleted", "Count", out.orphans_deleted as f64),
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
