//! ingest: apply a table's pending DMS files in DMS order, one snapshot per file (or per batch
//! of files), exactly once.
//!
//! Per commit: read → dedupe → evolve → lookup → write → commit ([`plan`] builds it, the
//! [`crate::commit`] loop lands it). The table's applied-file record decides what each file is:
//! - already applied: skipped, so running the same ingest twice changes nothing;
//! - a change file that arrives after later files were applied ("late": S3 does not order
//!   deliveries) is re-merged: its changes and the later files' changes to the same keys are
//!   deduplicated together, so those keys end as if every file had been applied in DMS order;
//! - a full-load file that is not the current load's (a table reload: DMS reuses the names)
//!   replaces the table's contents in one snapshot, and change files from before it are
//!   superseded;
//! - older than the record reaches: not applied, and reported.
//!
//! A file that fails stops its table (later files wait: order matters); nothing of it is
//! committed.

// Its one caller is the ingest function (`lambda::ingest`).
#[cfg(feature = "aws")]
pub(crate) mod backlog;
mod plan;
mod read;
mod report;
mod second_pass;
mod stream;

use std::sync::Arc;
use std::time::Instant;

use iceberg::TableIdent;
use tracing::warn;

pub use report::{CommitReport, Status, TableReport, Timings};

use crate::catalog::Catalog;
use crate::commit::{self, AppliedRecord, Outcome, Standing};
use crate::config::{Config, TableConfig};
use crate::error::{Error, InputError, Result};
use crate::files::vocabulary::keys;
use crate::locate::{DmsObject, ObjectMeta};
use crate::read::SourceData;
use crate::table::LoadedTable;
use plan::IngestPlanner;

/// One input object; `data: None` is fetched through the [`ObjectSource`] when needed (and
/// released after reading), so a long backlog is never held on disk or in memory at once.
#[derive(Debug, Clone)]
pub struct FileInput {
    pub object: DmsObject,
    pub data: Option<SourceData>,
    /// What is known of its content (size, modification time, ETag, MD5): full-load files
    /// are known by content, since a table reload reuses their names.
    pub meta: ObjectMeta,
}

impl FileInput {
    pub fn new(object: DmsObject, data: Option<SourceData>) -> Self {
        FileInput {
            object,
            data,
            meta: ObjectMeta::default(),
        }
    }

    pub fn with_meta(mut self, meta: ObjectMeta) -> Self {
        self.meta = meta;
        self
    }
}

/// Fetches an object by key (to read it, or to re-merge an applied file with a late one).
#[async_trait::async_trait]
pub trait ObjectSource: Send + Sync {
    async fn fetch(&self, key: &str) -> Result<SourceData>;
    /// Like `fetch`, but `None` when the object does not exist (any more).
    async fn fetch_if_present(&self, key: &str) -> Result<Option<SourceData>> {
        self.fetch(key).await.map(Some)
    }
    /// Called once a fetched object has been read.
    async fn release(&self, _data: &SourceData) {}
}

/// Keys are local paths.
pub struct LocalFiles;

#[async_trait::async_trait]
impl ObjectSource for LocalFiles {
    async fn fetch(&self, key: &str) -> Result<SourceData> {
        let p = std::path::PathBuf::from(key);
        if !p.is_file() {
            return Err(Error::Storage(format!(
                "{key} was applied earlier and is needed again to re-merge a late file, but it is gone"
            )));
        }
        Ok(SourceData::Path(p))
    }

    async fn fetch_if_present(&self, key: &str) -> Result<Option<SourceData>> {
        let p = std::path::PathBuf::from(key);
        Ok(p.is_file().then_some(SourceData::Path(p)))
    }
}

/// Builder for an ingest run.
pub struct Ingest<'a> {
    catalog: &'a dyn Catalog,
    config: &'a Config,
    objects: Arc<dyn ObjectSource>,
    files_per_commit: usize,
    preloaded: std::sync::Mutex<Option<Option<LoadedTable>>>,
    /// Where a streamed input spills its sorted runs.
    spool: std::path::PathBuf,
    /// Full-load files of one load applied at once, each its own commit.
    parallel: usize,
    /// When the caller must have returned (a Lambda invocation's deadline): no file is started
    /// that could not be finished by then (see [`Ingest::deadline`]).
    deadline: Option<Deadline>,
}

/// A deadline and the time the run had when it started.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    total: std::time::Duration,
}

impl Deadline {
    /// Time to keep in hand before starting a file: twice the longest file applied so far in
    /// this run (the next may take as long), and at least a tenth of the run's time, 1 to 30 s.
    fn reserve(&self, longest: std::time::Duration) -> std::time::Duration {
        let floor = (self.total / 10).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(30),
        );
        (longest * 2).max(floor)
    }

    /// Whether a file may still be started.
    fn allows(&self, longest: std::time::Duration) -> bool {
        self.at.saturating_duration_since(Instant::now()) > self.reserve(longest)
    }
}

impl<'a> Ingest<'a> {
    pub fn new(catalog: &'a dyn Catalog, config: &'a Config) -> Self {
        Ingest {
            catalog,
            config,
            objects: Arc::new(LocalFiles),
            files_per_commit: 1,
            preloaded: std::sync::Mutex::new(None),
            spool: std::env::temp_dir().join("dms2iceberg"),
            parallel: 1,
            deadline: None,
        }
    }

    /// Starts no file once the time left before `at` is short of what the files applied so
    /// far suggest the next one needs (twice the longest, at least a tenth of the time there
    /// was, 1 to 30 s): the files left are reported (`files_left_at_deadline`), for the next
    /// invocation, instead of a timeout failing them all.
    pub fn deadline(mut self, at: Option<Instant>) -> Self {
        self.deadline = at.map(|at| Deadline {
            at,
            total: at.saturating_duration_since(Instant::now()),
        });
        self
    }

    /// Applies up to `n` full-load files of one load at once, each as its own commit (an
    /// append; the others' commits meanwhile do not make it plan again unless their keys
    /// overlap its own). Change files still apply one after another, once every full-load file
    /// before them is applied. Memory: `n` streamed inputs.
    pub fn parallel(mut self, n: usize) -> Self {
        self.parallel = n.max(1);
        self
    }

    /// Where a streamed input (a full load, a large change file) spills its sorted runs
    /// (default: `dms2iceberg` in the system's temporary folder). Spilled files are unlinked as
    /// soon as they are created: nothing is left behind.
    pub fn spool(mut self, dir: std::path::PathBuf) -> Self {
        self.spool = dir;
        self
    }

    /// Where objects are fetched from (default: keys are local paths).
    pub fn objects(mut self, objects: Arc<dyn ObjectSource>) -> Self {
        self.objects = objects;
        self
    }

    /// The table as the caller just loaded it (`None`: it does not exist), so the next
    /// `execute` for it does not load it again.
    pub fn loaded(self, table: Option<LoadedTable>) -> Self {
        if let Ok(mut p) = self.preloaded.lock() {
            *p = Some(table);
        }
        self
    }

    /// Files per snapshot (default 1: one snapshot per DMS file, the finest time travel).
    pub fn files_per_commit(mut self, n: usize) -> Self {
        self.files_per_commit = n.max(1);
        self
    }

    /// Applies `files` (all of one source table) in DMS order; stops at the first failure.
    /// Returns once the key indexes its lookups started uploading are written too.
    pub async fn execute(
        &self,
        schema: &str,
        table: &str,
        files: Vec<FileInput>,
        on_commit: impl FnMut(&CommitReport),
    ) -> TableReport {
        let report = self.apply_files(schema, table, files, on_commit).await;
        self.catalog.files().cache().finish_uploads().await;
        report
    }

    async fn apply_files(
        &self,
        schema: &str,
        table: &str,
        mut files: Vec<FileInput>,
        mut on_commit: impl FnMut(&CommitReport),
    ) -> TableReport {
        // Files at one place in DMS order are settled by `same_place` below.
        files.sort_by(|a, b| {
            a.object
                .order
                .cmp(&b.object.order)
                .then_with(|| a.object.key.cmp(&b.object.key))
        });
        files.dedup_by(|a, b| a.object.key == b.object.key);
        let mut report = TableReport::new(format!("{schema}.{table}"));
        let (cfg, ident) = match self.resolve(schema, table) {
            Ok(r) => r,
            Err(e) => {
                report.fail(&e);
                report.files_waiting = files.len();
                return report;
            }
        };
        report.table = cfg.target();
        let mut loaded = match self.first_base(&ident).await {
            Ok(t) => Some(t),
            Err(e) => {
                report.fail(&e);
                report.files_waiting = files.len();
                return report;
            }
        };
        // Files the operator listed under `skip_files` are passed over, never applied.
        files.retain(|f| {
            let skip = cfg.is_skipped(&f.object.key);
            if skip {
                warn!(table = %ident, file = %f.object.key, "listed in skip_files: not applied");
                let mut r = CommitReport::skipped(std::slice::from_ref(f), Instant::now());
                r.note = Some("listed in skip_files".into());
                on_commit(&r);
                report.commits.push(r);
            }
            !skip
        });
        let record = match loaded.as_ref().and_then(Option::as_ref) {
            Some(t) => AppliedRecord::of_table(&t.metadata).ok().flatten(),
            None => None,
        };
        let stop = same_place(&mut files, record.as_deref());
        let end = stop.as_ref().map_or(files.len(), |s| s.at);
        let mut i = 0;
        let mut longest = std::time::Duration::ZERO;
        while i < end {
            if let Some(d) = &self.deadline
                && !d.allows(longest)
            {
                report.files_left_at_deadline = end - i;
                tracing::info!(
                    table = %ident,
                    files_left = end - i,
                    longest_ms = longest.as_millis() as u64,
                    "the invocation's deadline is near: files left for the next invocation"
                );
                return report;
            }
            let started = Instant::now();
            let k = match self
                .parallel_loads(&ident, &files[i..end], &mut loaded)
                .await
            {
                Ok(k) => k,
                Err(e) => {
                    report.fail(&e);
                    report.files_waiting = end - i;
                    return report;
                }
            };
            if k >= 2 {
                let (reports, failed) = self.apply_at_once(&cfg, &ident, &files[i..i + k]).await;
                // The table moved: the next commit loads it again.
                loaded = None;
                for r in reports {
                    on_commit(&r);
                    report.commits.push(r);
                }
                if let Some((e, not_applied)) = failed {
                    report.fail(&e);
                    let applied: std::collections::BTreeSet<&str> = report
                        .commits
                        .iter()
                        .flat_map(|c| c.files.iter().map(String::as_str))
                        .collect();
                    report.failed_files = files[i..i + k]
                        .iter()
                        .map(|f| f.object.key.clone())
                        .filter(|k| !applied.contains(k.as_str()))
                        .collect();
                    report.files_waiting = not_applied + (end - i - k);
                    return report;
                }
                longest = longest.max(started.elapsed());
                i += k;
                continue;
            }
            // A commit holds full-load files or change files, never both: its data files are
            // then named for what they hold (full-load rows are older than every change).
            let n = files[i..end]
                .iter()
                .take(self.files_per_commit)
                .take_while(|f| f.object.kind == files[i].object.kind)
                .count();
            let group = &files[i..i + n];
            match self.apply(&cfg, &ident, group, loaded.take()).await {
                Ok(reports) => {
                    for r in reports {
                        on_commit(&r);
                        report.commits.push(r);
                    }
                }
                Err((reports, e)) => {
                    for r in reports {
                        on_commit(&r);
                        report.commits.push(r);
                    }
                    // The caller reports the error (the CLI prints it once, the function logs
                    // it with its table): here only for debugging, the value as its own field.
                    tracing::debug!(table = %ident, files = ?group.iter().map(|f| &f.object.key).collect::<Vec<_>>(), error = %e.redacted(), value = ?e.value(), "file not applied");
                    report.fail(&e);
                    report.failed_files = group.iter().map(|f| f.object.key.clone()).collect();
                    report.files_waiting = files.len() - i - n;
                    return report;
                }
            }
            longest = longest.max(started.elapsed());
            i += n;
        }
        if let Some(s) = stop {
            tracing::debug!(table = %ident, error = %s.error.redacted(), "two files at one place in DMS order");
            report.fail(&s.error);
            report.failed_files = files[s.at..(s.at + s.involved).min(files.len())]
                .iter()
                .map(|f| f.object.key.clone())
                .collect();
            report.files_waiting = files.len() - s.at - s.involved;
        }
        report
    }

    /// The table as the caller just loaded it, or as it is now (`None`: not created yet): the
    /// base of the first plan (the commit protocol validates it against the catalog anyway).
    async fn first_base(&self, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let preloaded = self
            .preloaded
            .lock()
            .ok()
            .and_then(|mut p| p.take())
            .filter(|t| t.as_ref().is_none_or(|t| &t.ident == ident));
        match preloaded {
            Some(t) => Ok(t),
            None => LoadedTable::load(self.catalog, ident).await,
        }
    }

    /// How many of `files` (from the next one on) to apply at once: the run of full-load
    /// files that apply as plain appends to the current load (not a reload, nothing applied on
    /// top of the load yet, the table exists), when applying in parallel. `loaded`: the table
    /// as loaded for the next commit (reloaded here when it is needed and not known).
    async fn parallel_loads(
        &self,
        ident: &TableIdent,
        files: &[FileInput],
        loaded: &mut Option<Option<LoadedTable>>,
    ) -> Result<usize> {
        let loads = files
            .iter()
            .take_while(|f| f.object.kind == crate::locate::FileKind::Load)
            .count();
        if self.parallel < 2 || loads < 2 {
            return Ok(0);
        }
        let table = match loaded.take() {
            Some(t) => t,
            None => LoadedTable::load(self.catalog, ident).await?,
        };
        // The first file of a new table creates it alone.
        let Some(t) = table else {
            *loaded = Some(None);
            return Ok(0);
        };
        let record = AppliedRecord::of_table(&t.metadata)?.unwrap_or_default();
        let k = files[..loads]
            .iter()
            .take_while(|f| {
                record.classify(&f.object.order, f.object.kind, &f.meta)
                    == (Standing::Pending { late: false })
            })
            .count();
        *loaded = Some(Some(t));
        Ok(k)
    }

    /// Applies `files` (full-load files of one load), up to `parallel` at once, each as its own
    /// commit. On an error the files in flight finish; returns the error and how many files
    /// were not applied.
    async fn apply_at_once(
        &self,
        cfg: &TableConfig,
        ident: &TableIdent,
        files: &[FileInput],
    ) -> (Vec<CommitReport>, Option<(Error, usize)>) {
        use futures::StreamExt;
        let results: Vec<_> = futures::stream::iter(files.iter())
            .map(|f| self.apply(cfg, ident, std::slice::from_ref(f), None))
            .buffer_unordered(self.parallel)
            .collect()
            .await;
        let mut reports = Vec::new();
        let mut failed: Option<(Error, usize)> = None;
        for r in results {
            match r {
                Ok(mut rs) => reports.append(&mut rs),
                Err((mut rs, e)) => {
                    reports.append(&mut rs);
                    let n = failed.as_ref().map_or(0, |(_, n)| *n) + 1;
                    failed = Some(match failed {
                        Some((first, _)) => (first, n),
                        None => (e, n),
                    });
                }
            }
        }
        reports.sort_by(|a, b| a.files.cmp(&b.files));
        (reports, failed)
    }

    fn resolve(&self, schema: &str, table: &str) -> Result<(TableConfig, TableIdent)> {
        let cfg = self.config.table(schema, table)?;
        let ident = TableIdent::from_strs([&cfg.namespace, &cfg.table])?;
        Ok((cfg, ident))
    }

    /// Applies `group` (files of one table, DMS order): as many commits as the table's record
    /// asks for (a reload is its own commit), each through the commit loop. Returns a report
    /// per commit and per file passed over; on an error, those made before it.
    async fn apply(
        &self,
        cfg: &TableConfig,
        ident: &TableIdent,
        group: &[FileInput],
        mut loaded: Option<Option<LoadedTable>>,
    ) -> std::result::Result<Vec<CommitReport>, (Vec<CommitReport>, Error)> {
        let mut planner = IngestPlanner::new(self, cfg, ident, group.to_vec());
        let mut out = Vec::new();
        loop {
            let started = Instant::now();
            let finished = commit::run(self.catalog, ident, loaded.take(), &mut planner).await;
            out.append(&mut planner.decided);
            let finished = match finished {
                Ok(f) => f,
                Err(e) => return Err((out, e)),
            };
            let mut report = finished.report;
            report.replans = finished.replans.len() as u32;
            report.conflicts = finished.replans;
            match finished.outcome {
                None => {}
                Some(Outcome::Committed {
                    snapshot_id,
                    attempts,
                    ..
                }) => {
                    report.snapshot_id = Some(snapshot_id);
                    report.attempts = attempts;
                    let total_us = report::micros(started);
                    report.timings.total_us = total_us;
                    report.timings.commit_us = total_us
                        .saturating_sub(report.timings.load_us + report.timings.read_us)
                        .saturating_sub(report.timings.lookup_us + report.timings.write_us);
                    report.elapsed_ms = total_us / 1000;
                    tracing::info!(
                        table = %ident, files = ?report.files, rows_read = report.rows_read,
                        inserted = report.inserted, updated = report.updated, deleted = report.deleted,
                        reload = report.reload, snapshot_id, attempts, replans = report.replans,
                        elapsed_ms = report.elapsed_ms, timings = ?report.timings, "applied"
                    );
                    out.push(report);
                }
                Some(Outcome::AlreadyApplied { attempts }) => {
                    // Another writer applied these files while we planned: a lost race.
                    let mut r = CommitReport::skipped(planner.planned(), started);
                    r.attempts = attempts;
                    r.replans = report.replans;
                    r.conflicts = report.conflicts;
                    out.push(r);
                }
            }
            if !planner.has_pending() {
                return Ok(out);
            }
        }
    }

    /// Fetches the inputs that are not local yet; returns what to release once read.
    async fn fetch(&self, inputs: &mut [FileInput]) -> Result<Vec<SourceData>> {
        let mut fetched = Vec::new();
        for f in inputs.iter_mut().filter(|f| f.data.is_none()) {
            match self.objects.fetch(&f.object.key).await {
                Ok(d) => {
                    fetched.push(d.clone());
                    f.data = Some(d);
                }
                Err(e) => {
                    for d in &fetched {
                        self.objects.release(d).await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(fetched)
    }

    /// Computes the digests of the input's stored bytes (fetching it if needed) to tell it from
    /// a recorded file under its name: XXH3, and MD5 when that record kept only an MD5.
    async fn digest(&self, f: &mut FileInput, md5: bool) -> Result<()> {
        let fetched = self.fetch(std::slice::from_mut(f)).await?;
        let data = f
            .data
            .clone()
            .ok_or_else(|| Error::Internal(format!("{} was not fetched", f.object.key)))?;
        let label = f.object.key.clone();
        let digest = tokio::task::spawn_blocking(move || data.digest(&label, md5))
            .await
            .map_err(|e| Error::Internal(format!("digest task failed: {e}")));
        if !fetched.is_empty() {
            // Fetched only for the digest: read again when applied.
            for d in &fetched {
                self.objects.release(d).await;
            }
            f.data = None;
        }
        digest??.record_in(&mut f.meta);
        Ok(())
    }
}

/// A table is fed by one DMS table: two resolving to the same Iceberg table (same name in two
/// schemas under one Glue database, a `target` typo) would silently mix their rows, and their
/// files (same names) would even pass for applied.
pub fn check_source(cfg: &TableConfig, table: &LoadedTable) -> Result<()> {
    crate::commit::writable_version(&table.metadata, &cfg.target())?;
    if crate::ops::rejected::is_rejected_rows_table(&table.metadata) {
        return Err(Error::Config(format!(
            "table {} holds the rejected rows of {}; DMS table {} resolves to it too: set \
             `target` under [tables.\"{}\"] to keep them apart",
            cfg.target(),
            table
                .metadata
                .properties()
                .get(crate::ops::rejected::REJECTED_ROWS_OF)
                .map_or("another table", String::as_str),
            cfg.source,
            cfg.source
        )));
    }
    check_mode(cfg, table)?;
    match table.metadata.properties().get(keys::SOURCE_TABLE) {
        Some(fed_by) if *fed_by != cfg.source => Err(Error::Config(format!(
            "table {} holds DMS table {fed_by}; {} resolves to it too (its name, or \
             DMS2ICEBERG_GLUE_DATABASE, maps both to one table): set `target` under \
             [tables.\"{}\"] to keep them apart",
            cfg.target(),
            cfg.source,
            cfg.source
        ))),
        _ => Ok(()),
    }
}

/// A table keeps the mode it was created with: appending to a keyed table would add rows that
/// duplicate keys, and merging by key into an appended one would merge rows that were never
/// one row.
fn check_mode(cfg: &TableConfig, table: &LoadedTable) -> Result<()> {
    let md = &table.metadata;
    let keyed = !crate::evolve::key_columns(md.current_schema()).is_empty();
    // Without the mark: upsert if we applied files to it (or it has a key); a keyless table
    // another engine made can take either mode.
    let applied = crate::commit::AppliedRecord::of_table(md)?.is_some();
    let table_mode = match md.properties().get(keys::MODE) {
        Some(m) => Some(m.as_str()),
        None if keyed || applied => Some("upsert"),
        None => None,
    };
    let refuse = |why: String| {
        Err(Error::Config(format!(
            "table {}: `mode = \"{}\"` under [tables.\"{}\"], but {why}; a table keeps the \
             mode it was created with (reload it into a new table to change it)",
            cfg.target(),
            cfg.mode.as_str(),
            cfg.source
        )))
    };
    if cfg.mode.appends() && keyed {
        return refuse("the table has a primary key (identifier fields)".into());
    }
    match table_mode {
        Some(m) if m != cfg.mode.as_str() => {
            refuse(format!("the table was created with `mode = \"{m}\"`"))
        }
        _ => Ok(()),
    }
}

/// Where [`same_place`] stops a table.
struct SamePlace {
    /// Index of the first file not applied.
    at: usize,
    /// Files from `at` the error is about.
    involved: usize,
    error: Error,
}

/// Two files at one place in DMS order (`20220302-113401.csv` and `20220302-1134010000.csv`,
/// `x.csv` and `x.parquet`) have no defined order between them. Byte-identical copies (one file
/// under two roots) are one file; otherwise the table stops there, neither is applied, and the
/// error names both: the operator lists the one not to apply under `skip_files`. `files` is in
/// DMS order.
fn same_place(files: &mut Vec<FileInput>, record: Option<&AppliedRecord>) -> Option<SamePlace> {
    let mut i = 0;
    while i < files.len() {
        let this = &files[i].object;
        if let Some(earlier) = record.and_then(|r| r.key_at(&this.order))
            && !crate::locate::same_file_name(earlier, &this.key)
        {
            let error = InputError::new(
                &this.key,
                format!(
                    "has the same place in DMS order as {earlier}, applied earlier, and is not \
                     that file: DMS never writes two files for one place. Nothing of it was \
                     applied; list it under skip_files once its changes are known to be in the table"
                ),
            );
            return Some(SamePlace {
                at: i,
                involved: 1,
                error: error.into(),
            });
        }
        if let Some(next) = files.get(i + 1)
            && next.object.order == this.order
        {
            let copies = match (&files[i].data, &next.data) {
                (Some(a), Some(b)) => a.same_content(b).unwrap_or(false),
                _ => false,
            };
            if copies {
                files.remove(i + 1);
                continue;
            }
            let error = InputError::new(
                &next.object.key,
                format!(
                    "has the same place in DMS order as {} (the same time or LOAD number, \
                     another name or format): which comes first is unknown, so neither was \
                     applied. List the one not to apply under skip_files",
                    this.key
                ),
            );
            return Some(SamePlace {
                at: i,
                involved: 2,
                error: error.into(),
            });
        }
        i += 1;
    }
    None
}

/// The files of `objects` as local paths (CLI), with their size and modification time.
pub fn local_inputs(files: Vec<(DmsObject, std::path::PathBuf)>) -> Vec<FileInput> {
    files
        .into_iter()
        .map(|(object, path)| {
            let meta = std::fs::metadata(&path)
                .map(|m| ObjectMeta {
                    size: Some(m.len()),
                    modified_ms: m
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as i64),
                    ..Default::default()
                })
                .unwrap_or_default();
            FileInput::new(object, Some(SourceData::Path(path))).with_meta(meta)
        })
        .collect()
}

/// A planner for `files` (tests of the commit protocol).
#[cfg(test)]
pub(crate) fn planner_for_tests<'a>(
    ingest: &'a Ingest<'a>,
    cfg: &'a TableConfig,
    ident: &'a TableIdent,
    files: Vec<FileInput>,
) -> impl commit::Planner<Report = CommitReport> + 'a {
    IngestPlanner::new(ingest, cfg, ident, files)
}

#[cfg(test)]
mod deadline_tests {
    use super::Deadline;
    use std::time::{Duration, Instant};

    #[test]
    fn the_reserve_is_twice_the_slowest_file_and_a_tenth_of_the_time_within_1_to_30_s() {
        let d = |total: u64| Deadline {
            at: Instant::now() + Duration::from_secs(total),
            total: Duration::from_secs(total),
        };
        assert_eq!(d(300).reserve(Duration::ZERO), Duration::from_secs(30));
        assert_eq!(d(900).reserve(Duration::ZERO), Duration::from_secs(30));
        assert_eq!(d(60).reserve(Duration::ZERO), Duration::from_secs(6));
        assert_eq!(d(5).reserve(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            d(300).reserve(Duration::from_secs(40)),
            Duration::from_secs(80)
        );
        assert!(d(300).allows(Duration::from_secs(100)));
        assert!(!d(300).allows(Duration::from_secs(200)));
        assert!(!d(0).allows(Duration::ZERO));
    }
}
