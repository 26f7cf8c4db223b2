//! What an ingest run tells its caller: one report per commit (or per file it passed over), one
//! per table.

use std::time::Instant;

use serde::Serialize;

use super::FileInput;
use crate::lookup::LookupStats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Applied,
    /// The table already holds it (the applied-file record lists it).
    Skipped,
    /// From before the table's current full load (a reload): its effect is in the reload.
    Superseded,
    /// Older than the applied-file record reaches: not applied. `loud` in the report when the
    /// object changed after the record moved past it (it cannot have been applied).
    BeyondRecord,
}

/// What one commit did.
#[derive(Debug, Clone, Serialize)]
pub struct CommitReport {
    pub files: Vec<String>,
    pub status: Status,
    /// The file arrived after later files were applied and was re-merged with them.
    pub late: bool,
    /// The commit was a full reload: it replaced the table's contents.
    pub reload: bool,
    /// A file the table cannot have applied but will not apply (`beyond_record`): an operator
    /// must look at it.
    pub loud: bool,
    /// Why a file was skipped, superseded or not applied, when it was not simply applied before.
    pub note: Option<String>,
    pub rows_read: usize,
    /// The input was applied as a stream in bounded memory (every full load, and change
    /// files larger than `large_input_bytes`).
    pub streamed: bool,
    /// The input was read a second time: a streamed input that turned out not to be in key
    /// order (it was then sorted), or a large late input.
    pub read_twice: bool,
    /// Bytes of sorted runs a streamed input spilled to the spool folder.
    pub spilled_bytes: u64,
    /// Rows of a streamed input nearly in key order that came out of order: sorted apart and
    /// written as data files of their own (the rest went straight through).
    pub rows_set_aside: usize,
    /// Rows of a key replaced by a later row of the same key in the same input (a full load
    /// holding a key twice: the last in DMS order is kept).
    pub duplicate_keys: usize,
    pub inserted: usize,
    pub updated: usize,
    pub deleted: usize,
    /// `D` rows for keys the table did not hold.
    pub deletes_of_absent_keys: usize,
    /// Changes older (by the ordering column) than the row the table holds: not applied.
    pub stale_changes: usize,
    /// Rows set aside in `<table>__rejected` (bad-row policy `quarantine`).
    pub rows_rejected: usize,
    pub snapshot_id: Option<i64>,
    pub attempts: u32,
    pub replans: u32,
    /// Why plans were thrown away (conflict kinds), for metrics.
    pub conflicts: Vec<&'static str>,
    pub data_files: usize,
    pub delete_files: usize,
    /// Partitions the commit wrote files to (each costs at least one PUT, two with deletes).
    pub partitions: usize,
    pub columns_added: Vec<String>,
    pub columns_promoted: Vec<String>,
    pub lookup: LookupStats,
    pub elapsed_ms: u64,
    /// Where the time of the last (successful) attempt went.
    pub timings: Timings,
}

/// Microseconds per step of one commit: the pipeline's steps, for profiling in production.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    /// Loading the table's metadata from the catalog.
    pub load_us: u64,
    /// Fetching, reading, settling the schema and deduplicating the input.
    pub read_us: u64,
    /// Finding the live rows of the touched keys.
    pub lookup_us: u64,
    /// Data, delete and manifest files (for a large input: its second read too).
    pub write_us: u64,
    /// Manifest list, metadata and the catalog's compare-and-swap (with its retries).
    pub commit_us: u64,
    /// The whole commit, from the start of its last attempt (the steps' sum; `elapsed_ms` is
    /// this in whole milliseconds, rounded down).
    pub total_us: u64,
}

pub(super) fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros().try_into().unwrap_or(u64::MAX)
}

impl CommitReport {
    /// A report for files passed over (`status` other than applied).
    pub(super) fn passed_over(files: &[FileInput], status: Status, started: Instant) -> Self {
        CommitReport {
            files: files.iter().map(|f| f.object.key.clone()).collect(),
            status,
            late: false,
            reload: false,
            loud: false,
            note: None,
            rows_read: 0,
            streamed: false,
            read_twice: false,
            spilled_bytes: 0,
            rows_set_aside: 0,
            duplicate_keys: 0,
            inserted: 0,
            updated: 0,
            deleted: 0,
            deletes_of_absent_keys: 0,
            stale_changes: 0,
            rows_rejected: 0,
            snapshot_id: None,
            attempts: 0,
            replans: 0,
            conflicts: vec![],
            data_files: 0,
            partitions: 0,
            delete_files: 0,
            columns_added: vec![],
            columns_promoted: vec![],
            lookup: LookupStats::default(),
            timings: Timings::default(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        }
    }

    pub(super) fn skipped(files: &[FileInput], started: Instant) -> Self {
        Self::passed_over(files, Status::Skipped, started)
    }
}

/// One table's result.
#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    pub source: String,
    pub table: String,
    pub commits: Vec<CommitReport>,
    /// The error that stopped this table, if any (files after it were not applied), with the
    /// input value it is about: for the user.
    pub error: Option<String>,
    /// The same error without input values: for logs.
    #[serde(skip)]
    pub error_log: Option<String>,
    /// The error's kind ([`crate::Error::kind`]): what alarms and dead-letter triage route on.
    pub error_kind: Option<&'static str>,
    /// Files not applied because an earlier file failed.
    pub files_waiting: usize,
    /// Files not started because the run's deadline was near ([`super::Ingest::deadline`]).
    pub files_left_at_deadline: usize,
    /// The files the error is about (empty: it is about the table, every file waits on it).
    pub failed_files: Vec<String>,
}

impl TableReport {
    /// The report of source table `source` before anything is tried.
    pub(crate) fn new(source: String) -> TableReport {
        TableReport {
            source,
            table: String::new(),
            commits: vec![],
            error: None,
            error_log: None,
            error_kind: None,
            files_waiting: 0,
            files_left_at_deadline: 0,
            failed_files: Vec::new(),
        }
    }

    /// The table stopped at `e`: the message for the user, for logs, and its kind.
    pub fn fail(&mut self, e: &crate::Error) {
        self.error = Some(e.to_string());
        self.error_log = Some(e.redacted());
        self.error_kind = Some(e.kind());
    }

    pub fn applied_files(&self) -> usize {
        self.files_with(Status::Applied)
    }
    pub fn skipped_files(&self) -> usize {
        self.files_with(Status::Skipped)
    }
    pub fn superseded_files(&self) -> usize {
        self.files_with(Status::Superseded)
    }
    pub fn beyond_record_files(&self) -> usize {
        self.files_with(Status::BeyondRecord)
    }
    /// Files that need an operator: older than the record, and changed after it moved on.
    pub fn loud_files(&self) -> Vec<&str> {
        self.commits
            .iter()
            .filter(|c| c.loud)
            .flat_map(|c| c.files.iter().map(String::as_str))
            .collect()
    }
    pub fn reloads(&self) -> usize {
        self.commits.iter().filter(|c| c.reload).count()
    }
    fn files_with(&self, status: Status) -> usize {
        self.commits
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.files.len())
            .sum()
    }
}
