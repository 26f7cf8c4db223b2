//! What the ingest function reports of one table after a run: the log line and the CloudWatch
//! metrics (embedded metric format) of its commits, its backlog and its lag.
//!
//! Invariants: reporting only; nothing here decides what is applied. Counts sum the commits of
//! this invocation that applied; conflicts also count every attempt of a commit that found its
//! files applied by another writer.

use std::time::Instant;

use tracing::info;

use super::IngestHandler;
use crate::lambda::metrics::emf_line;
use crate::locate::DmsObject;
use crate::ops::ingest::{Status, TableReport};
use crate::storage::ObjectInfo;

impl IngestHandler {
    pub(super) fn log_table(
        &self,
        report: &TableReport,
        files: &[(DmsObject, ObjectInfo)],
        started: Instant,
        backlog_age_s: f64,
    ) {
        let applied: Vec<_> = report
            .commits
            .iter()
            .filter(|c| c.status == Status::Applied)
            .collect();
        let sum = |f: fn(&crate::ops::ingest::CommitReport) -> usize| {
            applied.iter().map(|c| f(c)).sum::<usize>()
        };
        let attempts: u32 = applied.iter().map(|c| c.attempts).sum();
        // Lost races count too: every attempt of a commit that found its files applied by
        // another writer meanwhile.
        let conflicts: u32 = report
            .commits
            .iter()
            .map(|c| match c.status {
                Status::Applied => c.attempts.saturating_sub(1) + c.replans,
                _ => c.attempts + c.replans,
            })
            .sum();
        // Lag: how long the newest applied file waited between landing in S3 and being committed.
        let newest_applied_ms = applied
            .iter()
            .flat_map(|c| c.files.iter())
            .filter_map(|k| {
                files
                    .iter()
                    .find(|(o, _)| &o.key == k)
                    .and_then(|(_, info)| info.last_modified_ms)
            })
            .max();
        let lag_s = newest_applied_ms
            .map(|m| (chrono::Utc::now().timestamp_millis() - m).max(0) as f64 / 1000.0);
        info!(
            table = %report.table,
            files_applied = report.applied_files(),
            files_skipped = report.skipped_files(),
            rows_inserted = sum(|c| c.inserted),
            rows_updated = sum(|c| c.updated),
            rows_deleted = sum(|c| c.deleted),
            snapshot_id = ?applied.last().and_then(|c| c.snapshot_id),
            commit_attempts = attempts,
            conflicts,
            files_waiting = report.files_waiting,
            files_left_at_deadline = report.files_left_at_deadline,
            backlog_age_s,
            error = ?report.error_log,
            duration_ms = started.elapsed().as_millis() as u64,
            "table processed"
        );
        let mut metrics = vec![
            ("RowsInserted", "Count", sum(|c| c.inserted) as f64),
            ("RowsUpdated", "Count", sum(|c| c.updated) as f64),
            ("RowsDeleted", "Count", sum(|c| c.deleted) as f64),
            ("FilesApplied", "Count", report.applied_files() as f64),
            ("FilesSkipped", "Count", report.skipped_files() as f64),
            ("FilesSuperseded", "Count", report.superseded_files() as f64),
            (
                "FilesBeyondRecord",
                "Count",
                report.beyond_record_files() as f64,
            ),
            (
                "FilesNotApplicable",
                "Count",
                report.loud_files().len() as f64,
            ),
            ("Reloads", "Count", report.reloads() as f64),
            ("FilesFailed", "Count", report.error.is_some() as u8 as f64),
            // Stopped at a failure: the table's later files wait until it is dealt with.
            (
                "TablesBlocked",
                "Count",
                report.error.is_some() as u8 as f64,
            ),
            ("BacklogAgeSeconds", "Seconds", backlog_age_s),
            (
                "FilesLeftAtDeadline",
                "Count",
                report.files_left_at_deadline as f64,
            ),
            ("CommitAttempts", "Count", attempts as f64),
            ("CommitConflicts", "Count", conflicts as f64),
        ];
        if let Some(l) = lag_s {
            metrics.push(("LagSeconds", "Seconds", l));
        }
        // Where the time went, per pipeline step (summed over this invocation's commits).
        let ms = |f: fn(&crate::ops::ingest::Timings) -> u64| -> f64 {
            applied.iter().map(|c| f(&c.timings)).sum::<u64>() as f64 / 1000.0
        };
        if !applied.is_empty() {
            metrics.extend([
                ("ReadMilliseconds", "Milliseconds", ms(|t| t.read_us)),
                ("LookupMilliseconds", "Milliseconds", ms(|t| t.lookup_us)),
                ("WriteMilliseconds", "Milliseconds", ms(|t| t.write_us)),
                ("CommitMilliseconds", "Milliseconds", ms(|t| t.commit_us)),
                ("DataFilesWritten", "Count", sum(|c| c.data_files) as f64),
                (
                    "DeleteFilesWritten",
                    "Count",
                    sum(|c| c.delete_files) as f64,
                ),
                // High-cardinality partition specs show here: every partition a commit
                // touches is a file (two with deletes) and a request each.
                (
                    "PartitionsWritten",
                    "Count",
                    applied.iter().map(|c| c.partitions).max().unwrap_or(0) as f64,
                ),
            ]);
        }
        println!(
            "{}",
            emf_line(
                &self.env.metric_function("ingest"),
                &report.table,
                self.env.table_metrics,
                &metrics
            )
        );
    }
}
