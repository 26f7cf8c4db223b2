//! ingest: apply a table's pending DMS files in DMS order, one snapshot per file (or per batch
//! of files), exactly once.
//!
//! Per commit: read → dedupe → evolve → lookup → write → commit. Files the table's snapshots
//! record as applied are skipped, so running the same ingest twice changes nothing. A file that
//! arrives after later files were applied ("late": S3 does not order deliveries) is re-merged:
//! its changes and the later files' changes to the same keys are deduplicated together, so those
//! keys end as if every file had been applied in DMS order. A file that fails stops its table
//! (later files wait: order matters); nothing of it is committed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{Field, Schema as ArrowSchema, SchemaRef};
use iceberg::TableIdent;
use iceberg::spec::{Operation, PrimitiveType, Schema, TableMetadataBuilder, Type};
use serde::Serialize;
use tracing::{info, warn};

use crate::catalog::Catalog;
use crate::commit::{self, Added, Base, CommitError, MetadataChanges, Outcome, Staged, failpoint};
use crate::config::{BadRows, Config, TableConfig};
use crate::dedupe::{Deduped, FileChanges, dedupe};
use crate::error::{Error, InputError, Rejected, Result};
use crate::evolve::{self, SchemaChange};
use crate::locate::{DmsObject, OrderKey};
use crate::lookup::{LookupCache, LookupStats, locate_rows};
use crate::read::{ChangeBatch, SourceData, SourceFile};
use crate::table::{LoadedTable, applied_files, keys};
use crate::types::arrow_type;
use crate::write::{write_data_files_of, write_position_deletes};

mod second_pass;
use second_pass::SecondPass;

/// One input object; `data: None` is fetched through the [`ObjectSource`] when needed (and
/// released after reading), so a long backlog is never held on disk or in memory at once.
#[derive(Debug, Clone)]
pub struct FileInput {
    pub object: DmsObject,
    pub data: Option<SourceData>,
}

/// Fetches an already-applied object again by key (to re-merge a late file).
#[async_trait::async_trait]
pub trait ObjectSource: Send + Sync {
    async fn fetch(&self, key: &str) -> Result<SourceData>;
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
            return Err(Error::Other(format!(
                "{key} was applied earlier and is needed again to re-merge a late file, but it is gone"
            )));
        }
        Ok(SourceData::Path(p))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Applied,
    /// Already applied earlier (at or before the table's watermark).
    Skipped,
}

/// What one commit did.
#[derive(Debug, Clone, Serialize)]
pub struct CommitReport {
    pub files: Vec<String>,
    pub status: Status,
    /// The file arrived after later files were applied and was re-merged with them.
    pub late: bool,
    /// Why a file was skipped, when it was not simply applied before.
    pub note: Option<String>,
    pub rows_read: usize,
    /// The input was larger than `large_input_bytes`: deduplicated on its key columns, then
    /// its winning rows were read a second time.
    pub read_twice: bool,
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
    pub data_files: usize,
    pub delete_files: usize,
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
}

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros().try_into().unwrap_or(u64::MAX)
}

impl CommitReport {
    fn skipped(files: &[FileInput], started: Instant) -> CommitReport {
        CommitReport {
            files: files.iter().map(|f| f.object.key.clone()).collect(),
            status: Status::Skipped,
            late: false,
            note: None,
            rows_read: 0,
            read_twice: false,
            inserted: 0,
            updated: 0,
            deleted: 0,
            deletes_of_absent_keys: 0,
            stale_changes: 0,
            rows_rejected: 0,
            snapshot_id: None,
            attempts: 0,
            replans: 0,
            data_files: 0,
            delete_files: 0,
            columns_added: vec![],
            columns_promoted: vec![],
            lookup: LookupStats::default(),
            timings: Timings::default(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        }
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
    /// Files not applied because an earlier file failed.
    pub files_waiting: usize,
}

impl TableReport {
    pub fn applied_files(&self) -> usize {
        self.files_with(Status::Applied)
    }
    pub fn skipped_files(&self) -> usize {
        self.files_with(Status::Skipped)
    }
    fn files_with(&self, status: Status) -> usize {
        self.commits
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.files.len())
            .sum()
    }
}

/// Builder for an ingest run.
pub struct Ingest<'a> {
    catalog: &'a dyn Catalog,
    config: &'a Config,
    cache: Arc<LookupCache>,
    objects: Arc<dyn ObjectSource>,
    files_per_commit: usize,
    preloaded: std::sync::Mutex<Option<Option<LoadedTable>>>,
}

/// Replans before giving up: each one means another writer changed the table under us.
const MAX_REPLANS: u32 = 20;

impl<'a> Ingest<'a> {
    pub fn new(catalog: &'a dyn Catalog, config: &'a Config) -> Self {
        Ingest {
            catalog,
            config,
            cache: Arc::new(LookupCache::default()),
            objects: Arc::new(LocalFiles),
            files_per_commit: 1,
            preloaded: std::sync::Mutex::new(None),
        }
    }

    /// Where applied objects are fetched again from (default: keys are local paths).
    pub fn objects(mut self, objects: Arc<dyn ObjectSource>) -> Self {
        self.objects = objects;
        self
    }

    /// Share a lookup cache across runs (warm Lambda, long CLI run).
    pub fn cache(mut self, cache: Arc<LookupCache>) -> Self {
        self.cache = cache;
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
    pub async fn execute(
        &self,
        schema: &str,
        table: &str,
        mut files: Vec<FileInput>,
        mut on_commit: impl FnMut(&CommitReport),
    ) -> TableReport {
        // A file's identity is its place in DMS order (its name): copies of one file under two
        // roots are one file.
        files.sort_by(|a, b| a.object.order.cmp(&b.object.order));
        files.dedup_by(|a, b| a.object.order == b.object.order);
        let mut report = TableReport {
            source: format!("{schema}.{table}"),
            table: String::new(),
            commits: vec![],
            error: None,
            error_log: None,
            files_waiting: 0,
        };
        let cfg = match self.config.table(schema, table) {
            Ok(c) => c,
            Err(e) => {
                report.error_log = Some(e.redacted());
                report.error = Some(e.to_string());
                report.files_waiting = files.len();
                return report;
            }
        };
        report.table = cfg.target();
        let ident = match TableIdent::from_strs([&cfg.namespace, &cfg.table]) {
            Ok(i) => i,
            Err(e) => {
                report.error = Some(e.to_string());
                report.error_log = report.error.clone();
                return report;
            }
        };
        // The table as the caller just loaded it, or as it is now: checked, then the base of
        // the first commit (the commit protocol validates it against the catalog anyway).
        let preloaded = self
            .preloaded
            .lock()
            .ok()
            .and_then(|mut p| p.take())
            .filter(|t| t.as_ref().is_none_or(|t| t.ident == ident));
        let loaded = match preloaded {
            Some(t) => Ok(t),
            None => LoadedTable::load(self.catalog, &ident).await,
        };
        let mut loaded = match loaded.and_then(|t| {
            t.as_ref().map_or(Ok(()), |t| check_source(&cfg, t))?;
            Ok(t)
        }) {
            Ok(t) => Some(t),
            Err(e) => {
                report.error_log = Some(e.redacted());
                report.error = Some(e.to_string());
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
        // Groups of `files_per_commit`; each commit re-checks which of its files are applied
        // and whether they are late (the table may move while this runs).
        let mut i = 0;
        while i < files.len() {
            // A commit holds full-load files or change files, never both: its data files are
            // then named for what they hold (full-load rows are older than every change).
            let n = files[i..]
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
                Err(e) => {
                    // The caller reports the error (the CLI prints it once, the function logs
                    // it with its table): here only for debugging, the value as its own field.
                    tracing::debug!(table = %ident, files = ?group.iter().map(|f| &f.object.key).collect::<Vec<_>>(), error = %e.redacted(), value = ?e.value(), "file not applied");
                    report.error_log = Some(e.redacted());
                    report.error = Some(e.to_string());
                    report.files_waiting = files.len() - i - n;
                    return report;
                }
            }
            i += n;
        }
        report
    }

    /// One commit for the files of `group` the table does not hold yet (reported first as
    /// skipped: the others), replanning when a concurrent writer invalidates the plan.
    async fn apply(
        &self,
        cfg: &TableConfig,
        ident: &TableIdent,
        group: &[FileInput],
        mut loaded: Option<Option<LoadedTable>>,
    ) -> Result<Vec<CommitReport>> {
        let started = Instant::now();
        let mut replans = 0;
        let mut out = Vec::new();
        let mut pending: Vec<FileInput> = group.to_vec();
        loop {
            let load_started = Instant::now();
            let table = match loaded.take() {
                Some(t) => t,
                None => LoadedTable::load(self.catalog, ident).await?,
            };
            let load_us = micros(load_started);
            if let Some(t) = &table {
                let applied = applied_files(&t.metadata);
                let (done, rest): (Vec<FileInput>, Vec<FileInput>) = pending
                    .into_iter()
                    .partition(|f| applied.contains(&f.object.order));
                if !done.is_empty() {
                    out.push(CommitReport::skipped(&done, started));
                }
                pending = rest;
            }
            if pending.is_empty() {
                return Ok(out);
            }
            let files = pending.as_slice();
            let (staged, mut report, rejected) = self.plan(cfg, ident, table, files).await?;
            // Rejected rows land first (idempotent per file), then the table's commit.
            if !rejected.is_empty() {
                let inputs: Vec<(String, OrderKey)> = files
                    .iter()
                    .map(|f| (f.object.key.clone(), f.object.order.clone()))
                    .collect();
                if let Err(e) =
                    crate::ops::rejected::record(self.catalog, ident, &inputs, &rejected).await
                {
                    staged.discard(self.catalog.file_io()).await;
                    return Err(e);
                }
                warn!(table = %ident, rows = rejected.len(), first = %rejected[0].error.redacted(), "rows set aside in the rejected-rows table");
            }
            report.timings.load_us = load_us;
            let commit_started = Instant::now();
            let committed = commit::commit(self.catalog, &staged).await;
            report.timings.commit_us = micros(commit_started);
            match committed {
                Ok(Outcome::Committed {
                    snapshot_id,
                    attempts,
                    ..
                }) => {
                    report.snapshot_id = Some(snapshot_id);
                    report.attempts = attempts;
                    report.replans = replans;
                    report.elapsed_ms = started.elapsed().as_millis() as u64;
                    info!(
                        table = %ident, files = ?report.files, rows_read = report.rows_read,
                        inserted = report.inserted, updated = report.updated, deleted = report.deleted,
                        snapshot_id, attempts, replans, elapsed_ms = report.elapsed_ms,
                        timings = ?report.timings, "applied"
                    );
                    out.push(report);
                    return Ok(out);
                }
                Ok(Outcome::AlreadyApplied { attempts }) => {
                    // Another writer applied these files while we planned: a lost race.
                    staged.discard(self.catalog.file_io()).await;
                    let mut r = CommitReport::skipped(files, started);
                    r.attempts = attempts;
                    r.replans = replans;
                    out.push(r);
                    return Ok(out);
                }
                Err(CommitError::Replan(reason)) => {
                    staged.discard(self.catalog.file_io()).await;
                    replans += 1;
                    if replans > MAX_REPLANS {
                        return Err(Error::CommitFailed {
                            table: ident.to_string(),
                            attempts: replans,
                            reason: format!("the table kept changing concurrently ({reason})"),
                        });
                    }
                    info!(table = %ident, %reason, "replanning");
                    // Spread contending writers out before reading again.
                    let cap = (50u64 << replans.min(6)).min(2_000);
                    tokio::time::sleep(std::time::Duration::from_millis(rand::random_range(
                        cap / 2..=cap,
                    )))
                    .await;
                }
                Err(CommitError::Failed(e)) => {
                    staged.discard(self.catalog.file_io()).await;
                    return Err(e);
                }
                Err(CommitError::Unknown(reason)) => {
                    return Err(Error::Other(format!(
                        "commit to {ident} may or may not have landed ({reason}); run the ingest again: \
                         it skips what is applied"
                    )));
                }
            }
        }
    }

    /// Reads, dedupes, looks up and writes everything a commit needs.
    async fn plan(
        &self,
        cfg: &TableConfig,
        ident: &TableIdent,
        table: Option<LoadedTable>,
        files: &[FileInput],
    ) -> Result<(Staged, CommitReport, Vec<Rejected>)> {
        let started = Instant::now();
        let current = table.as_ref().map(|t| t.metadata.clone());
        if let Some(t) = &table {
            check_source(cfg, t)?;
        }
        let key: Vec<String> = match current
            .as_ref()
            .map(|m| evolve::key_columns(m.current_schema()))
            .filter(|k| !k.is_empty())
        {
            Some(k) => k,
            None => cfg.primary_key.clone().ok_or_else(|| Error::NoPrimaryKey {
                table: cfg.target(),
                source_table: cfg.source.clone(),
            })?,
        };
        // A late file is read with every applied file after it; only its keys are rewritten.
        let mut inputs = files.to_vec();
        let mut late = false;
        let oldest = files.iter().map(|f| f.object.order.clone()).min();
        if let (Some(t), Some(oldest)) = (&table, &oldest)
            && t.watermark().file.as_ref().is_some_and(|w| oldest < w)
        {
            // Older than files already applied: re-merge with every applied file after it.
            late = true;
            for (_, key) in applied_files(&t.metadata).after(oldest) {
                let object =
                    crate::locate::locate(&key, &self.config.source)?.ok_or_else(|| {
                        Error::Other(format!("applied object {key} is not a DMS file any more"))
                    })?;
                inputs.push(FileInput { object, data: None });
            }
            info!(table = %ident, files = files.len(), later_files = inputs.len() - files.len(), "late input: re-merging with later files");
        }
        // Fetch what is not local yet; release it once read, whatever the outcome.
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
        let result = self
            .plan_read(cfg, ident, table, files, inputs, late, key, started)
            .await;
        // Fetched objects go once read (and, for a large input, read again).
        for d in &fetched {
            self.objects.release(d).await;
        }
        result
    }

    /// Reads the (fetched) inputs, dedupes, looks up, writes: everything after fetching.
    #[allow(clippy::too_many_arguments)]
    async fn plan_read(
        &self,
        cfg: &TableConfig,
        ident: &TableIdent,
        table: Option<LoadedTable>,
        files: &[FileInput],
        inputs: Vec<FileInput>,
        late: bool,
        key: Vec<String>,
        started: Instant,
    ) -> Result<(Staged, CommitReport, Vec<Rejected>)> {
        let mut timings = Timings::default();
        let file_io = self.catalog.file_io().clone();
        // Every row of this commit comes from a full load (see `execute`).
        let full_load = inputs
            .iter()
            .all(|f| f.object.kind == crate::locate::FileKind::Load);
        let current = table.as_ref().map(|t| t.metadata.clone());
        let read = {
            let cfg = cfg.clone();
            let key = key.clone();
            let schema = current
                .as_ref()
                .map(|m| (m.current_schema().as_ref().clone(), m.last_column_id()));
            let only_keys_of = late.then_some(files.len());
            tokio::task::spawn_blocking(move || {
                read_files(&cfg, &key, schema, inputs, only_keys_of)
            })
            .await
            .map_err(|e| Error::Other(format!("reader task failed: {e}")))??
        };
        let ReadResult {
            schema,
            change,
            deduped,
            max_seq,
            rejected,
            second_pass,
        } = read;

        // Metadata the files are written against: the new table, or the current one changed.
        let (base, changes, planned) = match &table {
            None => {
                let spec = evolve::partition_spec(
                    cfg.partition_by.as_deref().unwrap_or_default(),
                    &schema,
                    &cfg.target(),
                )?;
                let sort = evolve::key_sort_order(&schema)?;
                let mut props: std::collections::HashMap<String, String> = [
                    ("write.parquet.compression-codec", "zstd"),
                    ("write.metadata.delete-after-commit.enabled", "true"),
                    ("write.metadata.previous-versions-max", "100"),
                    (
                        "write.target-file-size-bytes",
                        &cfg.target_file_size_bytes.to_string(),
                    ),
                    (keys::SOURCE_TABLE, &cfg.source),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
                props.extend(cfg.properties.iter().map(|(k, v)| (k.clone(), v.clone())));
                let md = TableMetadataBuilder::new(
                    schema.clone(),
                    spec,
                    sort,
                    self.catalog.default_location(ident),
                    commit::FORMAT_VERSION,
                    props,
                )?
                .build()?
                .metadata;
                check_ids_kept(&schema, md.current_schema())?;
                let md = Arc::new(md);
                (Base::Create(md.clone()), MetadataChanges::default(), md)
            }
            Some(t) => {
                let mut changes = MetadataChanges::default();
                if !change.is_empty() {
                    changes.schema = Some(schema.clone());
                }
                if let Some(p) = &cfg.partition_by {
                    let spec = evolve::partition_spec(p, &schema, &cfg.target())?;
                    if !evolve::same_partitioning(&spec, t.metadata.default_partition_spec()) {
                        changes.spec = Some(spec);
                    }
                }
                let planned = Arc::new(changes.apply(&t.metadata)?);
                (Base::Existing(t.clone()), changes, planned)
            }
        };

        // Where the live rows of the touched keys are.
        let lookup_started = Instant::now();
        timings.read_us = micros(started);
        let located = match &current {
            Some(md) => {
                let ids = key
                    .iter()
                    .map(|k| {
                        md.current_schema()
                            .field_id_by_name(k)
                            .ok_or_else(|| Error::Other(format!("key column `{k}` not in table")))
                    })
                    .collect::<Result<Vec<_>>>()?;
                // With ordering columns, an older change never overwrites a newer row (a file
                // applied out of order, a replayed change).
                let order = deduped.stale_check(md.current_schema(), &cfg.ordering_columns());
                locate_rows(
                    &file_io,
                    md,
                    &deduped.keys,
                    ids,
                    order.as_ref(),
                    &self.cache,
                )
                .await?
            }
            None => crate::lookup::Located {
                found: vec![false; deduped.keys.num_rows()],
                stale: vec![false; deduped.keys.num_rows()],
                ..Default::default()
            },
        };
        failpoint("after-lookup")?;
        timings.lookup_us = micros(lookup_started);
        let write_started = Instant::now();
        // Upserts of stale keys are dropped (their live row stays as it is).
        let upserts = if located.stale.iter().any(|s| *s) {
            let keep: arrow_array::BooleanArray = deduped
                .upserted
                .iter()
                .zip(&located.stale)
                .filter(|(up, _)| up.unwrap_or(false))
                .map(|(_, stale)| Some(!stale))
                .collect();
            arrow_select::filter::filter_record_batch(&deduped.upserts, &keep)?
        } else {
            deduped.upserts.clone()
        };

        let read_twice = second_pass.is_some();
        let mut prepared: Vec<String> = Vec::new();
        let result = async {
            let mut data = Vec::new();
            match second_pass {
                None => {
                    data = write_data_files_of(
                        &file_io,
                        &planned,
                        &upserts,
                        &key,
                        cfg.target_file_size_bytes,
                        full_load,
                    )
                    .await?;
                    prepared.extend(data.iter().map(|(_, f)| f.file_path().to_string()));
                }
                Some(pass) => {
                    // The winning rows of a large input, read again in sorted chunks.
                    let mut keep: std::collections::HashMap<u32, std::collections::HashSet<u64>> =
                        std::collections::HashMap::new();
                    let mut sources = deduped.upsert_sources.iter();
                    for (up, stale) in deduped.upserted.iter().zip(&located.stale) {
                        if up.unwrap_or(false)
                            && let Some((file, pos)) = sources.next()
                            && !stale
                        {
                            keep.entry(*file).or_default().insert(*pos);
                        }
                    }
                    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
                    let reader = tokio::task::spawn_blocking(move || pass.run(keep, tx));
                    while let Some(chunk) = rx.recv().await {
                        let written = write_data_files_of(
                            &file_io,
                            &planned,
                            &chunk?,
                            &key,
                            cfg.target_file_size_bytes,
                            full_load,
                        )
                        .await?;
                        prepared.extend(written.iter().map(|(_, f)| f.file_path().to_string()));
                        data.extend(written);
                    }
                    reader
                        .await
                        .map_err(|e| Error::Other(format!("reader task failed: {e}")))?;
                }
            }
            failpoint("after-data-files")?;
            let deletes = write_position_deletes(&file_io, &planned, &located.deletes).await?;
            prepared.extend(deletes.iter().map(|(_, f)| f.file_path().to_string()));
            failpoint("after-delete-files")?;
            let snapshot_id = commit::new_snapshot_id(Some(&planned));
            let manifests =
                commit::write_manifests(&file_io, &planned, snapshot_id, &data, &deletes, None)
                    .await?;
            prepared.extend(manifests.iter().map(|m| m.manifest_path.clone()));
            failpoint("after-manifests")?;
            Ok::<_, Error>((data, deletes, snapshot_id, manifests))
        }
        .await;
        let (data, deletes, snapshot_id, manifests) = match result {
            Ok(r) => r,
            Err(e) => {
                for p in &prepared {
                    let _ = file_io.delete(p).await;
                }
                return Err(e);
            }
        };

        timings.write_us = micros(write_started);
        let mut report = CommitReport::skipped(files, Instant::now());
        report.timings = timings;
        report.status = Status::Applied;
        report.late = late;
        report.rows_read = deduped.rows_read;
        report.read_twice = read_twice;
        for (i, up) in deduped.upserted.iter().enumerate() {
            if located.stale[i] {
                report.stale_changes += 1;
                continue;
            }
            match (up.unwrap_or(false), located.found[i]) {
                (true, true) => report.updated += 1,
                (true, false) => report.inserted += 1,
                (false, true) => report.deleted += 1,
                (false, false) => report.deletes_of_absent_keys += 1,
            }
        }
        report.data_files = data.len();
        report.delete_files = deletes.len();
        report.columns_added = change.added.clone();
        report.columns_promoted = change
            .promoted
            .iter()
            .map(|(n, a, b)| format!("{n}: {a} -> {b}"))
            .collect();
        report.lookup = located.stats.clone();

        let mut partitions = std::collections::BTreeSet::new();
        let mut added = Added::default();
        for (spec, f) in &data {
            added.data_files += 1;
            added.records += f.record_count();
            added.data_files_size += f.file_size_in_bytes();
            partitions.insert((*spec, format!("{:?}", f.partition())));
        }
        for (spec, f) in &deletes {
            added.delete_files += 1;
            added.position_deletes += f.record_count();
            added.delete_files_size += f.file_size_in_bytes();
            partitions.insert((*spec, format!("{:?}", f.partition())));
        }
        added.changed_partitions = partitions.len() as u64;

        let input_order: Option<OrderKey> = files.iter().map(|f| f.object.order.clone()).max();
        let input_orders: Vec<OrderKey> = files.iter().map(|f| f.object.order.clone()).collect();
        let mut properties = BTreeMap::new();
        properties.insert(
            keys::SOURCE_FILES.to_string(),
            serde_json::to_string(&report.files).map_err(|e| Error::Other(e.to_string()))?,
        );
        properties.insert(
            keys::SOURCE_ORDERS.to_string(),
            serde_json::to_string(
                &files
                    .iter()
                    .map(|f| f.object.order.to_string())
                    .collect::<Vec<_>>(),
            )
            .map_err(|e| Error::Other(e.to_string()))?,
        );
        let previous_watermark = table.as_ref().and_then(|t| t.watermark().file);
        if let Some(w) = [previous_watermark, input_order.clone()]
            .into_iter()
            .flatten()
            .max()
        {
            properties.insert(keys::WATERMARK.to_string(), w.to_string());
        }
        let previous_seq = table.as_ref().and_then(|t| t.watermark().change_seq);
        if let Some(seq) = [previous_seq, max_seq].into_iter().flatten().max() {
            properties.insert(keys::CHANGE_SEQ.to_string(), seq);
        }
        properties.insert(keys::ROWS_INSERTED.to_string(), report.inserted.to_string());
        properties.insert(keys::ROWS_UPDATED.to_string(), report.updated.to_string());
        properties.insert(keys::ROWS_DELETED.to_string(), report.deleted.to_string());
        properties.insert(
            keys::VERSION.to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );

        let operation = match (data.is_empty(), deletes.is_empty()) {
            (_, true) => Operation::Append,
            (true, false) => Operation::Delete,
            (false, false) => Operation::Overwrite,
        };
        let staged = Staged {
            ident: ident.clone(),
            base,
            changes,
            schema_id: planned.current_schema_id(),
            spec_id: planned.default_partition_spec_id(),
            snapshot_id,
            operation,
            manifests,
            files: prepared,
            referenced_data_files: located.deletes.keys().cloned().collect(),
            replaced_manifests: Default::default(),
            removed_data_files: Default::default(),
            added,
            properties,
            input_orders,
        };
        report.rows_rejected = rejected.len();
        Ok((staged, report, rejected))
    }
}

/// A table is fed by one DMS table: two resolving to the same Iceberg table (same name in two
/// schemas under one Glue database, a `target` typo) would silently mix their rows, and their
/// files (same names) would even pass for applied.
pub fn check_source(cfg: &TableConfig, table: &LoadedTable) -> Result<()> {
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

/// TableMetadataBuilder re-assigns field ids of a new table; ours are already 1..n in order,
/// which it keeps. Checked, because every file we write depends on it.
fn check_ids_kept(ours: &Schema, theirs: &Schema) -> Result<()> {
    for f in ours.as_struct().fields() {
        if theirs.field_id_by_name(&f.name) != Some(f.id) {
            return Err(Error::Other(format!(
                "field id of `{}` changed on table creation",
                f.name
            )));
        }
    }
    Ok(())
}

struct ReadResult {
    /// The table schema after this commit.
    schema: Schema,
    change: SchemaChange,
    deduped: Deduped,
    max_seq: Option<String>,
    /// Rows set aside (bad-row policy `quarantine`).
    rejected: Vec<Rejected>,
    /// A large input was deduplicated on its key columns only: its rows are read again.
    second_pass: Option<SecondPass>,
}

/// Opens every file, settles the schema, reads and dedupes (blocking I/O and CPU).
fn read_files(
    cfg: &TableConfig,
    key: &[String],
    current: Option<(Schema, i32)>,
    mut files: Vec<FileInput>,
    only_keys_of_first: Option<usize>,
) -> Result<ReadResult> {
    // `only_keys_of_first = Some(n)`: only keys the first n inputs touch are rewritten (a late
    // input re-merged with files applied after it). Source order across files is DMS order.
    let restrict: Option<Vec<OrderKey>> =
        only_keys_of_first.map(|n| files[..n].iter().map(|f| f.object.order.clone()).collect());
    files.sort_by(|a, b| a.object.order.cmp(&b.object.order));
    let only_keys_of: Option<Vec<usize>> = restrict.map(|r| {
        files
            .iter()
            .enumerate()
            .filter(|(_, f)| r.contains(&f.object.order))
            .map(|(i, _)| i)
            .collect()
    });
    let table_name = cfg.target();
    let mut schema: Option<Schema> = current.as_ref().map(|(s, _)| s.clone());
    let mut last_column_id = current.as_ref().map_or(0, |(_, l)| *l);
    let mut change = SchemaChange::default();
    let table_columns: Option<Vec<String>> = schema.as_ref().map(|s| {
        s.as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect()
    });
    let mut opened = Vec::with_capacity(files.len());
    for f in &files {
        let data = f
            .data
            .clone()
            .ok_or_else(|| Error::Other(format!("{} was not fetched", f.object.key)))?;
        let src = SourceFile::open(&f.object, data, cfg, table_columns.as_deref())?;
        if let Some(dup) = src.layout().duplicate_column() {
            return Err(InputError::new(&f.object.key, "the column appears twice")
                .column(dup)
                .into());
        }
        let cols = src.columns();
        let mut typed: Vec<(String, Option<PrimitiveType>)> = Vec::with_capacity(cols.len());
        for c in &cols {
            let existing = schema
                .as_ref()
                .and_then(|s| s.field_by_name(&c.name))
                .and_then(|f| match f.field_type.as_ref() {
                    Type::Primitive(p) => Some(p.clone()),
                    _ => None,
                });
            // A DMS TIME column is stored as `time_type` says (an existing column keeps its type).
            let declared = c
                .declared
                .as_ref()
                .map(|d| crate::types::stored_type(d, existing.as_ref(), cfg.time_type));
            let t = if Some(&c.name) == cfg.change_sequence_column.as_ref() {
                Some(c.declared.clone().unwrap_or(PrimitiveType::String))
            } else if matches!(src, SourceFile::Csv(_)) {
                // Text takes the table's type when the column exists; else declared or inferred.
                existing.or(declared).or_else(|| {
                    (Some(&c.name) == cfg.commit_timestamp_column.as_ref())
                        .then_some(PrimitiveType::Timestamp)
                })
            } else {
                declared
            };
            typed.push((c.name.clone(), t));
        }
        let unknown: Vec<String> = typed
            .iter()
            .filter(|(_, t)| t.is_none())
            .map(|(n, _)| n.clone())
            .collect();
        let inferred = if unknown.is_empty() {
            vec![]
        } else if cfg.infer_types {
            src.infer_types(&unknown)?
        } else {
            vec![PrimitiveType::String; unknown.len()]
        };
        let mut inferred = inferred.into_iter();
        let typed: Vec<(String, PrimitiveType)> = typed
            .into_iter()
            .map(|(n, t)| {
                let t = t
                    .or_else(|| inferred.next())
                    .unwrap_or(PrimitiveType::String);
                (n, t)
            })
            .collect();
        match &schema {
            None => {
                let s = evolve::initial_schema(&typed, key, &table_name)?;
                last_column_id = s.highest_field_id();
                schema = Some(s);
            }
            Some(s) => {
                if let Some((next, ch)) =
                    evolve::evolve(s, last_column_id, &typed, &table_name, &f.object.key)?
                {
                    last_column_id = next.highest_field_id();
                    change.added.extend(ch.added);
                    change.promoted.extend(ch.promoted);
                    schema = Some(next);
                }
            }
        }
        opened.push(src);
    }
    let schema = schema.ok_or_else(|| Error::Other("no files to read".into()))?;
    for k in key {
        if schema.field_by_name(k).is_none() {
            return Err(Error::Schema {
                table: table_name.clone(),
                reason: format!(
                    "primary key column `{k}` is not in the file (check `primary_key` in the config)"
                ),
            });
        }
    }
    let processing = processing_schema(&schema)?;
    let key_types: Vec<PrimitiveType> = key
        .iter()
        .map(|k| primitive(&schema, k))
        .collect::<Result<_>>()?;
    let order_columns = cfg.ordering_columns();
    if let Some(c) = order_columns
        .iter()
        .find(|c| schema.field_by_name(c).is_none())
    {
        return Err(Error::Config(format!(
            "table {table_name}: ordering column `{c}` (ordering_column / change_sequence_column / \
             commit_timestamp_column under [tables.\"{}\"]) is not in the files",
            cfg.source
        )));
    }
    let mut changes = Vec::with_capacity(opened.len());
    let mut max_seq: Option<String> = None;
    let mut rejected: Vec<Rejected> = Vec::new();
    let input_bytes: u64 = files
        .iter()
        .map(|f| f.data.as_ref().map_or(Ok(0), |d| d.len()))
        .sum::<Result<u64>>()?;
    let large = input_bytes > cfg.large_input_bytes;
    // A large input keeps only the key and ordering columns in memory.
    let slim: Option<(SchemaRef, Vec<usize>)> = if large {
        let keep: Vec<usize> = processing
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| key.contains(f.name()) || order_columns.contains(f.name()))
            .map(|(i, _)| i)
            .collect();
        Some((Arc::new(processing.project(&keep)?), keep))
    } else {
        None
    };
    let mut all_types: Vec<Vec<PrimitiveType>> = Vec::with_capacity(files.len());
    for (src, f) in opened.into_iter().zip(&files) {
        let types: Vec<PrimitiveType> = src
            .columns()
            .iter()
            .map(|c| primitive(&schema, &c.name))
            .collect::<Result<_>>()?;
        all_types.push(types.clone());
        let mut batches = Vec::new();
        for b in src.read(types, key_types.clone())? {
            let mut b = align(b?, &processing)?;
            rejected.append(&mut b.rejected);
            if cfg.bad_rows == BadRows::Quarantine {
                b = reject_null_keys(b, key, f, &mut rejected, "primary key value is NULL")?;
                // A change row must be placed among its key's changes.
                if f.object.kind == crate::locate::FileKind::Cdc {
                    let why = "a change row has no value in an ordering column";
                    b = reject_null_keys(b, &order_columns, f, &mut rejected, why)?;
                }
            }
            if let Some(seq) = &cfg.change_sequence_column
                && let Some(col) = b.data.column_by_name(seq)
                && let Some(m) = col.as_string::<i32>().iter().flatten().max()
                && max_seq.as_deref().is_none_or(|x| m > x)
            {
                max_seq = Some(m.to_string());
            }
            if let Some((_, cols)) = &slim {
                b.data = b.data.project(cols)?;
            }
            batches.push(b);
        }
        changes.push(FileChanges {
            label: f.object.key.clone(),
            kind: f.object.kind,
            format: f.object.format,
            batches,
        });
    }
    let dedupe_schema = slim.as_ref().map_or(processing.clone(), |(s, _)| s.clone());
    let deduped = dedupe(
        dedupe_schema,
        changes,
        key,
        &order_columns,
        only_keys_of.as_deref(),
    )?;
    let second_pass = large.then(|| SecondPass {
        cfg: cfg.clone(),
        files,
        table_columns,
        types: all_types,
        key_types,
        processing,
        key: key.to_vec(),
    });
    Ok(ReadResult {
        schema,
        change,
        deduped,
        max_seq,
        rejected,
        second_pass,
    })
}

/// Quarantine: rows whose key (or, in a change file, ordering column) is NULL cannot be
/// applied; set them aside with `reason`.
fn reject_null_keys(
    b: ChangeBatch,
    key: &[String],
    f: &FileInput,
    rejected: &mut Vec<Rejected>,
    reason: &str,
) -> Result<ChangeBatch> {
    let cols: Vec<(&String, &ArrayRef)> = key
        .iter()
        .filter_map(|k| b.data.column_by_name(k).map(|c| (k, c)))
        .collect();
    if cols.iter().all(|(_, c)| c.null_count() == 0) {
        return Ok(b);
    }
    let mut keep = Vec::with_capacity(b.data.num_rows());
    for r in 0..b.data.num_rows() {
        match cols.iter().find(|(_, c)| c.is_null(r)) {
            Some((k, _)) => {
                rejected.push(Rejected {
                    error: InputError::new(&f.object.key, reason)
                        .at(crate::read::position(f.object.format, b.positions[r]))
                        .column(k.as_str()),
                    record: None,
                });
                keep.push(Some(false));
            }
            None => keep.push(Some(true)),
        }
    }
    b.filter(&arrow_array::BooleanArray::from(keep))
}

fn primitive(schema: &Schema, name: &str) -> Result<PrimitiveType> {
    match schema.field_by_name(name).map(|f| f.field_type.as_ref()) {
        Some(Type::Primitive(p)) => Ok(p.clone()),
        _ => Err(Error::Other(format!(
            "column `{name}` is not a primitive column of the table"
        ))),
    }
}

/// The table schema as plain nullable Arrow fields: what batches are aligned to.
fn processing_schema(schema: &Schema) -> Result<SchemaRef> {
    let fields = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| match f.field_type.as_ref() {
            Type::Primitive(p) => Ok(Field::new(&f.name, arrow_type(p)?, true)),
            other => Err(Error::Other(format!(
                "column `{}` has nested type {other}",
                f.name
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(ArrowSchema::new(fields)))
}

/// Reorders a file's batch into the table's column order; columns the file lacks are NULL.
fn align(b: ChangeBatch, schema: &SchemaRef) -> Result<ChangeBatch> {
    let n = b.data.num_rows();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match b.data.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => Ok(arrow_cast::cast(c, f.data_type())?),
            None => Ok(new_null_array(f.data_type(), n)),
        })
        .collect::<Result<_>>()?;
    Ok(ChangeBatch {
        data: RecordBatch::try_new(schema.clone(), columns)?,
        ..b
    })
}

/// The files of `objects` as local paths (CLI).
pub fn local_inputs(files: Vec<(DmsObject, std::path::PathBuf)>) -> Vec<FileInput> {
    files
        .into_iter()
        .map(|(object, path)| FileInput {
            object,
            data: Some(SourceData::Path(path)),
        })
        .collect()
}
