//! Planning one ingest commit against the table as it is now: which pending files the table's
//! record says to apply (and how: as changes, late, or as a reload), then evolve (the schema,
//! from the files' headers) → read → dedupe → lookup → write, staged for [`crate::commit`]. The commit loop calls [`IngestPlanner::plan`]
//! again whenever another writer's commit invalidates a plan.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use iceberg::TableIdent;
use iceberg::spec::{DataFile, TableMetadata, TableMetadataBuilder};
use tracing::{info, warn};

use super::read::{Inference, ReadResult, read_files};
use super::report::{CommitReport, Status, Timings, micros};
use super::{FileInput, Ingest};
use crate::commit::{
    self, Added, AppliedInput, AppliedRecord, Base, Change, MetadataChanges, Plan, Planner,
    RecordUpdate, Staged, Standing, failpoint,
};
use crate::config::TableConfig;
use crate::error::{Error, Rejected, Result};
use crate::evolve;
use crate::files::Files;
use crate::files::prepared::Prepared;
use crate::locate::FileKind;
use crate::lookup::{Located, locate_rows};
use crate::process::spawn_beside;
use crate::table::{LoadedTable, keys};
use crate::write::{write_data_files_seen, write_position_deletes};

/// Records a new CSV column's type is guessed from before the file streams (the rest of the
/// file is checked as it is read).
const INFER_FROM_RECORDS: usize = 100_000;

/// How the selected inputs apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Changes on top of the table; `late`: re-merged with the files applied after them.
    Changes { late: bool },
    /// A new full load replacing the table's contents.
    Reload,
}

/// Plans the commits of one group of files, one at a time.
pub(super) struct IngestPlanner<'a> {
    pub(super) ingest: &'a Ingest<'a>,
    pub(super) cfg: &'a TableConfig,
    pub(super) ident: &'a TableIdent,
    /// Files not decided yet, in DMS order.
    pub(super) pending: Vec<FileInput>,
    /// Files passed over (applied before, superseded, beyond the record): reported once each.
    pub(super) decided: Vec<CommitReport>,
    pub(super) started: Instant,
    /// Files the current plan applies (taken out of `pending`; put back if it is abandoned).
    planned: Vec<FileInput>,
}

impl<'a> IngestPlanner<'a> {
    pub(super) fn new(
        ingest: &'a Ingest<'a>,
        cfg: &'a TableConfig,
        ident: &'a TableIdent,
        pending: Vec<FileInput>,
    ) -> Self {
        IngestPlanner {
            ingest,
            cfg,
            ident,
            pending,
            decided: Vec::new(),
            started: Instant::now(),
            planned: Vec::new(),
        }
    }

    /// Files still to plan after the last commit.
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The files the last plan applied.
    pub(super) fn planned(&self) -> &[FileInput] {
        &self.planned
    }

    /// Decides every pending file against `record`: passed over ones are reported, the rest
    /// stay pending with their standing.
    async fn classify(&mut self, record: &AppliedRecord) -> Result<Vec<Standing>> {
        let mut keep = Vec::new();
        let mut standings = Vec::new();
        for mut f in std::mem::take(&mut self.pending) {
            let mut standing = record.classify(&f.object.order, f.object.kind, &f.meta);
            if standing == Standing::NeedsDigest {
                // MD5 too: the recorded file may be known by its MD5 alone (older records).
                self.ingest.digest(&mut f, true).await?;
                standing = record.classify(&f.object.order, f.object.kind, &f.meta);
            }
            let started = self.started;
            let report =
                |status| CommitReport::passed_over(std::slice::from_ref(&f), status, started);
            match standing {
                Standing::Applied => self.decided.push(report(Status::Skipped)),
                Standing::Superseded(why) => {
                    info!(table = %self.ident, file = %f.object.key, %why, "superseded by a reload; not applied");
                    let mut r = report(Status::Superseded);
                    r.note = Some(why);
                    self.decided.push(r);
                }
                Standing::BeyondRecord { loud } => {
                    let mut r = report(Status::BeyondRecord);
                    r.loud = loud;
                    r.note = Some(beyond_record_note(record, loud));
                    if loud {
                        warn!(table = %self.ident, file = %f.object.key, "older than the applied-file record and changed since: not applied");
                    }
                    self.decided.push(r);
                }
                s => {
                    standings.push(s);
                    keep.push(f);
                }
            }
        }
        self.pending = keep;
        Ok(standings)
    }

    /// Takes the files of the next commit out of `pending`: a run of full-load files that
    /// reloads the table, or of files that apply as changes (up to the next reload).
    fn select(&mut self, standings: &[Standing]) -> Mode {
        let reload = standings.first() == Some(&Standing::Reload);
        let n = if reload {
            // The new load's files, together; changes after them apply on the new load.
            self.pending
                .iter()
                .take_while(|f| f.object.kind == FileKind::Load)
                .count()
        } else {
            standings
                .iter()
                .take_while(|s| **s != Standing::Reload)
                .count()
        };
        let late = standings[..n].contains(&Standing::Pending { late: true });
        self.planned = self.pending.drain(..n).collect();
        if reload {
            Mode::Reload
        } else {
            Mode::Changes { late }
        }
    }

    /// Puts the files of an abandoned plan back in front of the pending ones.
    fn unplan(&mut self) {
        let mut files = std::mem::take(&mut self.planned);
        files.append(&mut self.pending);
        self.pending = files;
    }
}

fn beyond_record_note(record: &AppliedRecord, loud: bool) -> String {
    let horizon = record
        .horizon
        .as_ref()
        .map_or_else(String::new, |h| format!(" (up to {h})"));
    if loud {
        format!(
            "older than the files the table's applied-file record lists{horizon}, and changed \
             after the record moved past it: it was not applied and cannot be merged in order; \
             if it is new, reload the table from DMS; if it is a copy of an applied file, list \
             it in `skip_files`"
        )
    } else {
        format!(
            "older than the files the table's applied-file record lists{horizon}: taken as \
             applied long ago"
        )
    }
}

#[async_trait::async_trait]
impl Planner for IngestPlanner<'_> {
    type Report = CommitReport;

    async fn plan(&mut self, table: Option<LoadedTable>) -> Result<Plan<CommitReport>> {
        self.unplan();
        let load_started = Instant::now();
        let record = match &table {
            Some(t) => {
                super::check_source(self.cfg, t)?;
                match AppliedRecord::of_table(&t.metadata)? {
                    Some(r) => r,
                    None if t.metadata.current_snapshot().is_some() => {
                        return Err(Error::NoRecord {
                            table: self.cfg.target(),
                        });
                    }
                    None => Default::default(),
                }
            }
            None => Default::default(),
        };
        let standings = self.classify(&record).await?;
        if self.pending.is_empty() {
            return Ok(Plan::Nothing(CommitReport::skipped(&[], self.started)));
        }
        let mode = self.select(&standings);
        let mut timings = Timings {
            load_us: micros(load_started),
            ..Default::default()
        };
        let (staged, mut report, rejected) = self.stage(table, record, mode, &mut timings).await?;
        // Rejected rows land first (idempotent per file), then the table's commit.
        if !rejected.is_empty() {
            let inputs: Vec<AppliedInput> = self.planned.iter().map(applied_input).collect();
            if let Err(e) =
                crate::ops::rejected::record(self.ingest.catalog, self.ident, &inputs, &rejected)
                    .await
            {
                staged.discard(self.ingest.catalog.file_io()).await;
                return Err(e);
            }
            warn!(table = %self.ident, rows = rejected.len(), first = %rejected[0].error.redacted(), "rows set aside in the rejected-rows table");
        }
        report.timings = timings;
        Ok(Plan::Commit(Box::new(staged), report))
    }
}

fn applied_input(f: &FileInput) -> AppliedInput {
    AppliedInput {
        order: f.object.order.clone(),
        key: f.object.key.clone(),
        kind: f.object.kind,
        meta: f.meta.clone(),
    }
}

/// What [`IngestPlanner::staged`] makes a commit of.
struct Staging<'a> {
    base: Base,
    changes: MetadataChanges,
    planned: Arc<TableMetadata>,
    record: Arc<AppliedRecord>,
    carried: Vec<crate::commit::record::LoadFile>,
    mode: Mode,
    written: Written,
    /// Data files the commit's position deletes point into.
    referenced: std::collections::BTreeSet<String>,
    change: &'a evolve::SchemaChange,
    rows_rejected: usize,
    max_seq: Option<String>,
    /// The keys the input's rows hold: what other writers' new files are checked against.
    keys: commit::KeyScope,
    /// Data files whose rows the plan left in place as newer than their change.
    kept: std::collections::BTreeSet<String>,
}

/// A running digest of an input's content.
type Digest = tokio::task::JoinHandle<Result<crate::read::Digests>>;

/// What [`IngestPlanner::stream`] settled and did: the schema read, the base and planned
/// metadata, the pipeline's result, and whether a file was read again with other types.
type StreamedStage = (
    super::read::Prepared,
    Base,
    MetadataChanges,
    Arc<TableMetadata>,
    super::stream::Streamed,
    bool,
);

/// Everything a commit writes, before it is staged.
struct Written {
    data: Vec<(i32, DataFile)>,
    deletes: Vec<(i32, DataFile)>,
    snapshot_id: i64,
    manifests: Vec<iceberg::spec::ManifestFile>,
    prepared: Prepared,
}

impl IngestPlanner<'_> {
    /// Reads, dedupes, looks up and writes the planned files; stages the commit.
    async fn stage(
        &mut self,
        table: Option<LoadedTable>,
        record: Arc<AppliedRecord>,
        mode: Mode,
        timings: &mut Timings,
    ) -> Result<(Staged, CommitReport, Vec<Rejected>)> {
        let started = Instant::now();
        let cfg = self.cfg;
        let key = primary_key(cfg, table.as_ref())?;
        // A late file is read with every applied file after it; only its keys are rewritten.
        let mut inputs = self.planned.clone();
        if mode == (Mode::Changes { late: true })
            && let Some(oldest) = self.planned.iter().map(|f| f.object.order.clone()).min()
        {
            for (_, key) in record.applied_after(&oldest)? {
                let object =
                    crate::locate::locate(&key, &self.ingest.config.source)?.ok_or_else(|| {
                        Error::Config(format!(
                            "applied object {key} is not a DMS file under the [source] settings \
                             any more"
                        ))
                    })?;
                inputs.push(FileInput::new(object, None));
            }
            info!(table = %self.ident, files = self.planned.len(), later_files = inputs.len() - self.planned.len(), "late input: re-merging with later files");
        }
        // A reload takes along the files of the current load that joined it late: they are
        // most likely files of the new load that arrived before its first one.
        let mut carried = Vec::new();
        let mut fetched = Vec::new();
        if mode == Mode::Reload {
            for f in record.load.files.iter().filter(|f| f.joined_late) {
                if self.planned.iter().any(|p| p.object.order == f.order) {
                    continue;
                }
                let Some(object) = crate::locate::locate(&f.key, &self.ingest.config.source)?
                else {
                    continue;
                };
                match self.ingest.objects.fetch_if_present(&f.key).await? {
                    Some(data) => {
                        fetched.push(data.clone());
                        inputs.push(FileInput::new(object, Some(data)).with_meta(f.meta.clone()));
                        carried.push(f.clone());
                    }
                    None => {
                        info!(table = %self.ident, file = %f.key, "a late file of the previous load is gone: not taken into the reload")
                    }
                }
            }
        }
        match self.ingest.fetch(&mut inputs).await {
            Ok(f) => fetched.extend(f),
            Err(e) => {
                for d in &fetched {
                    self.ingest.objects.release(d).await;
                }
                return Err(self.late_load_or(e));
            }
        }
        let result = async {
            if self.streams(&inputs, mode)? {
                // LOAD files are known by content too (a reload reuses their names): their
                // digests are computed beside the stream, on another thread.
                let digests = self.digests(&inputs);
                return self
                    .stage_streamed(table, record, carried, mode, key, inputs, digests, timings)
                    .await;
            }
            // LOAD files are known by content too: a reload reuses their names.
            for f in inputs.iter_mut().take(self.planned.len()) {
                if f.object.kind == FileKind::Load && !f.meta.has_digest() {
                    self.ingest.digest(f, false).await?;
                }
            }
            for (p, f) in self.planned.iter_mut().zip(&inputs) {
                p.meta = f.meta.clone();
            }
            let read = self.read(&table, &key, inputs, mode).await?;
            timings.read_us = micros(started);
            self.stage_read(table, record, carried, mode, key, read, timings)
                .await
        }
        .await;
        for d in &fetched {
            self.ingest.objects.release(d).await;
        }
        result
    }

    /// A late full-load file whose re-merge partners cannot be read is most likely the first
    /// file to arrive of a new load (DMS empties the folder when it reloads a table): say so.
    fn late_load_or(&self, e: Error) -> Error {
        match self
            .planned
            .iter()
            .find(|f| f.object.kind == FileKind::Load)
        {
            Some(f) => Error::Order(format!(
                "{}: a full-load file the current load does not hold arrived after changes were \
                 applied on top of that load, and the files it would be merged with cannot be \
                 read ({e}). If it belongs to a new full load (a table reload, whose files DMS \
                 writes after emptying the folder), it applies once that load's first file \
                 (LOAD00000001) has been applied: run the ingest again then",
                f.object.key
            )),
            None => e,
        }
    }

    async fn read(
        &self,
        table: &Option<LoadedTable>,
        key: &[String],
        inputs: Vec<FileInput>,
        mode: Mode,
    ) -> Result<ReadResult> {
        let cfg = self.cfg.clone();
        let key = key.to_vec();
        let schema = table.as_ref().map(|t| {
            (
                t.metadata.current_schema().as_ref().clone(),
                t.metadata.last_column_id(),
            )
        });
        let only_keys_of = (mode == Mode::Changes { late: true }).then_some(self.planned.len());
        tokio::task::spawn_blocking(move || read_files(&cfg, &key, schema, inputs, only_keys_of))
            .await
            .map_err(|e| Error::Internal(format!("reader task failed: {e}")))?
    }

    #[allow(clippy::too_many_arguments)]
    async fn stage_read(
        &self,
        table: Option<LoadedTable>,
        record: Arc<AppliedRecord>,
        carried: Vec<crate::commit::record::LoadFile>,
        mode: Mode,
        key: Vec<String>,
        read: ReadResult,
        timings: &mut Timings,
    ) -> Result<(Staged, CommitReport, Vec<Rejected>)> {
        let (base, changes, planned) =
            self.metadata_for(table.as_ref(), &read.schema, &read.change)?;
        let lookup_started = Instant::now();
        let speculative = self.speculate(&planned, &key, &read).await;
        let located = async {
            // A reload replaces every row: nothing to look up.
            let located = match (&table, mode) {
                (Some(t), Mode::Changes { .. }) => self.locate(&t.metadata, &key, &read).await?,
                _ => Located {
                    found: vec![false; read.deduped.keys.num_rows()],
                    stale: vec![false; read.deduped.keys.num_rows()],
                    ..Default::default()
                },
            };
            failpoint("after-lookup").await?;
            Ok::<_, Error>(located)
        }
        .await;
        let located = match located {
            Ok(l) => l,
            Err(e) => {
                self.discard(speculative).await;
                return Err(e);
            }
        };
        timings.lookup_us = micros(lookup_started);
        let write_started = Instant::now();
        let outcomes = KeyOutcome::of(&read.deduped, &located);
        let written = self
            .write(&planned, &key, &read, &located, &outcomes, speculative)
            .await?;
        timings.write_us = micros(write_started);
        let mut report = CommitReport::passed_over(&self.planned, Status::Applied, self.started);
        report.rows_read = read.deduped.rows_read;
        report.read_twice = read.second_pass.is_some();
        count_rows(&mut report, &outcomes);
        report.lookup = located.stats.clone();
        let referenced = located.deletes.keys().cloned().collect();
        let staged = self.staged(
            Staging {
                base,
                changes,
                planned,
                record,
                carried,
                mode,
                written,
                referenced,
                change: &read.change,
                rows_rejected: read.rejected.len(),
                max_seq: read.max_seq.clone(),
                keys: located
                    .keys
                    .clone()
                    .map_or(commit::KeyScope::Unknown, commit::KeyScope::Keys),
                kept: located.kept_in.clone(),
            },
            &mut report,
        )?;
        Ok((staged, report, read.rejected))
    }

    /// The commit of what was written, and its report (row counts filled in by the caller).
    fn staged(&self, s: Staging<'_>, report: &mut CommitReport) -> Result<Staged> {
        let Staging {
            base,
            changes,
            planned,
            record,
            carried,
            mode,
            written,
            referenced,
            change,
            rows_rejected,
            max_seq,
            keys,
            kept,
        } = s;
        report.late = mode == Mode::Changes { late: true };
        report.reload = mode == Mode::Reload;
        report.data_files = written.data.len();
        report.delete_files = written.deletes.len();
        report.partitions = written
            .data
            .iter()
            .chain(&written.deletes)
            .map(|(spec, f)| (*spec, f.partition()))
            .collect::<HashSet<_>>()
            .len();
        report.columns_added = change.added.clone();
        report.columns_promoted = change
            .promoted
            .iter()
            .map(|(n, a, b)| format!("{n}: {a} -> {b}"))
            .collect();
        report.rows_rejected = rows_rejected;
        let joins_load = mode == (Mode::Changes { late: false })
            && referenced.is_empty()
            && self.planned.iter().all(|f| f.object.kind == FileKind::Load);
        let change = match mode {
            Mode::Reload => Change::Reload,
            Mode::Changes { .. } => Change::RowDelta {
                joins_load,
                referenced_data_files: referenced,
                keys,
                kept_rows_in: kept,
                checked: Default::default(),
            },
        };
        let summary = self.summary(report)?;
        Ok(Staged {
            ident: self.ident.clone(),
            base,
            changes,
            schema_id: planned.current_schema_id(),
            snapshot_id: written.snapshot_id,
            change,
            manifests: written.manifests,
            files: written.prepared,
            added: added(&written.data, &written.deletes),
            summary,
            record: Some(RecordUpdate {
                base_record: record,
                inputs: self.planned.iter().map(applied_input).collect(),
                reload: mode == Mode::Reload,
                carried,
                change_seq: max_seq,
                window: self.cfg.applied_record_files,
            }),
        })
    }

    /// Whether the input is applied by the streamed path ([`super::stream`]): every full load
    /// (its files can be of any size), and change files larger than `large_input_bytes`. A
    /// late file re-merged with later ones keeps the in-memory path.
    fn streams(&self, inputs: &[FileInput], mode: Mode) -> Result<bool> {
        if mode == (Mode::Changes { late: true }) {
            return Ok(false);
        }
        if inputs.iter().all(|f| f.object.kind == FileKind::Load) {
            return Ok(true);
        }
        let bytes: u64 = inputs
            .iter()
            .map(|f| f.data.as_ref().map_or(Ok(0), |d| d.len()))
            .sum::<Result<u64>>()?;
        Ok(bytes > self.cfg.large_input_bytes)
    }

    /// The digest of each planned LOAD file that has none yet, computed on blocking threads.
    fn digests(&self, inputs: &[FileInput]) -> Vec<(String, Digest)> {
        inputs
            .iter()
            .take(self.planned.len())
            .filter(|f| f.object.kind == FileKind::Load && !f.meta.has_digest())
            .filter_map(|f| {
                let data = f.data.clone()?;
                let label = f.object.key.clone();
                Some((
                    f.object.key.clone(),
                    tokio::task::spawn_blocking(move || data.digest(&label, false)),
                ))
            })
            .collect()
    }

    /// Reads, settles, looks up and writes the input as a stream in bounded memory.
    #[allow(clippy::too_many_arguments)]
    async fn stage_streamed(
        &mut self,
        table: Option<LoadedTable>,
        record: Arc<AppliedRecord>,
        carried: Vec<crate::commit::record::LoadFile>,
        mode: Mode,
        key: Vec<String>,
        mut inputs: Vec<FileInput>,
        digests: Vec<(String, Digest)>,
        timings: &mut Timings,
    ) -> Result<(Staged, CommitReport, Vec<Rejected>)> {
        let started = Instant::now();
        let streamed = self.stream(table.as_ref(), mode, &key, &mut inputs).await;
        // The digests are awaited whatever happened (their threads read the inputs).
        let mut digested = Vec::new();
        for (k, d) in digests {
            let d = d
                .await
                .map_err(|e| Error::Internal(format!("digest task failed: {e}")))
                .and_then(|d| d);
            digested.push((k, d));
        }
        let (prepared, base, changes, planned, streamed, retyped) = streamed?;
        for (k, d) in digested {
            let d = d?;
            if let Some(p) = self.planned.iter_mut().find(|p| p.object.key == k) {
                d.record_in(&mut p.meta);
            }
        }
        timings.read_us = micros(started);
        let write_started = Instant::now();
        let written = self
            .write_streamed(&planned, &streamed.data, &streamed.deletes)
            .await?;
        timings.write_us = micros(write_started);
        let c = &streamed.counts;
        let mut report = CommitReport::passed_over(&self.planned, Status::Applied, self.started);
        report.rows_read = c.rows_read;
        report.inserted = c.inserted;
        report.updated = c.updated;
        report.deleted = c.deleted;
        report.deletes_of_absent_keys = c.deletes_of_absent_keys;
        report.stale_changes = c.stale;
        report.duplicate_keys = c.duplicates;
        report.streamed = true;
        report.read_twice = streamed.restarts > 0 || retyped;
        report.spilled_bytes = streamed.spilled_bytes;
        report.lookup = streamed.lookup.clone();
        if c.duplicates > 0 {
            warn!(table = %self.ident, rows = c.duplicates, files = ?self.planned.iter().map(|f| &f.object.key).collect::<Vec<_>>(), "rows of a key replaced by a later row of the same key in the same input (the last one in DMS order is kept)");
        }
        // A full-load input's key range (every key it holds is in a file it wrote, unless a
        // row was left as newer): concurrent commits of its load only conflict within it. The
        // keys of a streamed change file are not kept: any added row conflicts.
        let all_load = self.planned.iter().all(|f| f.object.kind == FileKind::Load);
        let keys = if all_load && c.stale == 0 {
            let s = planned.current_schema();
            let ids: Vec<i32> = key.iter().filter_map(|k| s.field_id_by_name(k)).collect();
            commit::KeyScope::Bounds(commit::KeyBounds::of(
                streamed.data.iter().map(|(_, f)| f),
                &ids,
            ))
        } else {
            commit::KeyScope::Unknown
        };
        let staged = self.staged(
            Staging {
                base,
                changes,
                planned,
                record,
                carried,
                mode,
                written,
                referenced: streamed.deletes.keys().cloned().collect(),
                change: &prepared.change,
                rows_rejected: streamed.rejected.len(),
                max_seq: streamed.max_seq.clone(),
                keys,
                kept: Default::default(),
            },
            &mut report,
        )?;
        Ok((staged, report, streamed.rejected))
    }

    /// Settles the schema and runs the streamed pipeline ([`super::stream`]), again with the
    /// types of a file's whole content when its first records gave the wrong ones.
    async fn stream(
        &self,
        table: Option<&LoadedTable>,
        mode: Mode,
        key: &[String],
        inputs: &mut [FileInput],
    ) -> Result<StreamedStage> {
        let key = key.to_vec();
        inputs.sort_by(|a, b| a.object.order.cmp(&b.object.order));
        let cfg = TableConfig {
            primary_key: Some(key.clone()),
            ..self.cfg.clone()
        };
        let current = table.map(|t| {
            (
                t.metadata.current_schema().as_ref().clone(),
                t.metadata.last_column_id(),
            )
        });
        // New CSV columns are typed from their file's first records, and the rest of the file
        // is checked while it streams; a file that does not fit is streamed again with the
        // types of all its values (what inferring from the whole file first would have given).
        let mut inference = Inference::Start {
            records: INFER_FROM_RECORDS,
        };
        let mut retyped = false;
        loop {
            let prepared = {
                let (cfg, key, inputs, inference) =
                    (cfg.clone(), key.clone(), inputs.to_vec(), inference.clone());
                let current = current.clone();
                tokio::task::spawn_blocking(move || {
                    super::read::prepare(&cfg, &key, current, &inputs, &inference)
                })
                .await
                .map_err(|e| Error::Internal(format!("reader task failed: {e}")))??
            };
            let (base, changes, planned) =
                self.metadata_for(table, &prepared.schema, &prepared.change)?;
            let spec = super::stream::StreamSpec {
                from_load: inputs.iter().all(|f| f.object.kind == FileKind::Load),
                cfg: cfg.clone(),
                files: inputs.to_vec(),
                table_columns: prepared.table_columns.clone(),
                types: prepared.types.clone(),
                key: key.clone(),
                key_types: prepared.key_types.clone(),
                processing: prepared.processing.clone(),
                order_columns: prepared.order_columns.clone(),
                spool: self.ingest.spool.clone(),
                sort_budget: usize::try_from(self.cfg.large_input_bytes / 2).unwrap_or(usize::MAX),
                inferred: prepared.inferred.clone(),
            };
            // A reload replaces every row: nothing to look up.
            let lookup_base = match (table, mode) {
                (Some(t), Mode::Changes { .. }) => Some(t.metadata.clone()),
                _ => None,
            };
            let files = self.ingest.catalog.files().clone();
            let target_file_size = self.cfg.target_file_size_bytes;
            let planned_md = planned.clone();
            let handle = tokio::runtime::Handle::current();
            let ran = tokio::task::spawn_blocking(move || {
                let target = super::stream::Target {
                    files: &files,
                    planned: planned_md,
                    base: lookup_base,
                    target_file_size,
                };
                let ran = super::stream::run(&spec, &target, &handle);
                crate::process::release_freed_memory();
                ran
            })
            .await
            .map_err(|e| Error::Internal(format!("streamed read failed: {e}")))??;
            match ran {
                super::stream::Ran::Done(s) => {
                    return Ok((prepared, base, changes, planned, *s, retyped));
                }
                super::stream::Ran::Retype(r) => {
                    retyped = true;
                    info!(table = %self.ident, columns = ?r.keys().map(|(_, c)| c).collect::<Vec<_>>(), "a column's values do not all fit the type its first records gave: reading again");
                    let mut types = match inference {
                        Inference::Given { types, .. } => types,
                        _ => BTreeMap::new(),
                    };
                    types.extend(r);
                    inference = Inference::Given {
                        records: INFER_FROM_RECORDS,
                        types,
                    };
                }
            }
        }
    }

    /// The delete files of a streamed input and the manifests of its files (its data files
    /// are written already); on an error every file is deleted.
    async fn write_streamed(
        &self,
        planned: &Arc<TableMetadata>,
        data: &[(i32, DataFile)],
        deletes: &BTreeMap<String, crate::write::FileDeletes>,
    ) -> Result<Written> {
        let file_io = self.ingest.catalog.file_io();
        let snapshot_id = commit::new_snapshot_id(Some(planned));
        let mut prepared: Prepared = data
            .iter()
            .map(|(_, f)| f.file_path().to_string())
            .collect();
        let result = async {
            // The streamed lookup ran with the read, before the data files were complete.
            failpoint("after-lookup").await?;
            failpoint("after-data-files").await?;
            let delete_files = write_position_deletes(file_io, planned, deletes).await?;
            prepared.extend(delete_files.iter().map(|(_, f)| f.file_path().to_string()));
            failpoint("after-delete-files").await?;
            let manifests = commit::write_manifests(
                self.ingest.catalog.files(),
                planned,
                snapshot_id,
                data,
                &delete_files,
                None,
            )
            .await?;
            prepared.extend(manifests.iter().map(|m| m.manifest_path.clone()));
            failpoint("after-manifests").await?;
            Ok::<_, Error>((delete_files, manifests))
        }
        .await;
        match result {
            Ok((delete_files, manifests)) => Ok(Written {
                data: data.to_vec(),
                deletes: delete_files,
                snapshot_id,
                manifests,
                prepared,
            }),
            Err(e) => {
                prepared.abandon(file_io).await;
                Err(e)
            }
        }
    }

    /// Metadata the files are written against: the new table, or the current one changed.
    fn metadata_for(
        &self,
        table: Option<&LoadedTable>,
        schema: &iceberg::spec::Schema,
        change: &evolve::SchemaChange,
    ) -> Result<(Base, MetadataChanges, Arc<TableMetadata>)> {
        let cfg = self.cfg;
        match table {
            None => {
                let spec = evolve::partition_spec(
                    cfg.partition_by.as_deref().unwrap_or_default(),
                    schema,
                    &cfg.target(),
                )?;
                let sort = evolve::key_sort_order(schema)?;
                let mut props: HashMap<String, String> = [
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
                    self.ingest.catalog.default_location(self.ident),
                    commit::FORMAT_VERSION,
                    props,
                )?
                .build()?
                .metadata;
                check_ids_kept(schema, md.current_schema())?;
                let md = Arc::new(md);
                Ok((Base::Create(md.clone()), MetadataChanges::default(), md))
            }
            Some(t) => {
                let mut changes = MetadataChanges::default();
                if !change.is_empty() {
                    changes.schema = Some(schema.clone());
                }
                if let Some(p) = &cfg.partition_by {
                    let spec = evolve::partition_spec(p, schema, &cfg.target())?;
                    if !evolve::same_partitioning(&spec, t.metadata.default_partition_spec()) {
                        changes.spec = Some(spec);
                    }
                }
                let planned = changes.apply(&t.metadata)?;
                Ok((Base::Existing(t.clone()), changes, planned))
            }
        }
    }

    /// Where the live rows of the touched keys are.
    async fn locate(
        &self,
        md: &TableMetadata,
        key: &[String],
        read: &ReadResult,
    ) -> Result<Located> {
        let ids = key
            .iter()
            .map(|k| {
                md.current_schema()
                    .field_id_by_name(k)
                    .ok_or_else(|| Error::Internal(format!("key column `{k}` not in table")))
            })
            .collect::<Result<Vec<_>>>()?;
        // With ordering columns, an older change never overwrites a newer row (a file applied
        // out of order, a replayed change).
        let order = read
            .deduped
            .stale_check(md.current_schema(), &self.cfg.ordering_columns());
        locate_rows(
            self.ingest.catalog.files(),
            md,
            &read.deduped.keys,
            ids,
            order.as_ref(),
        )
        .await
    }

    /// Data files (upserts that are not stale), position deletes and their manifests.
    async fn write(
        &self,
        planned: &Arc<TableMetadata>,
        key: &[String],
        read: &ReadResult,
        located: &Located,
        outcomes: &[KeyOutcome],
        speculative: Option<Speculative>,
    ) -> Result<Written> {
        let file_io = self.ingest.catalog.file_io();
        let mut prepared = Prepared::default();
        let snapshot_id = commit::new_snapshot_id(Some(planned));
        // Two independent branches: data files → their manifest, and delete files → theirs.
        // The delete branch runs as its own task, so that its Parquet encoding and, on a local
        // warehouse, its blocking writes and fsyncs run on another core beside the data
        // file's instead of after them (on S3 the uploads overlapped already).
        let delete_branch = spawn_beside(delete_branch(
            self.ingest.catalog.files().clone(),
            planned.clone(),
            located.deletes.clone(),
            snapshot_id,
        ))
        .await;
        let data = async {
            let data = self
                .write_data(planned, key, read, outcomes, speculative, &mut prepared)
                .await?;
            failpoint("after-data-files").await?;
            let manifests = commit::write_manifests(
                self.ingest.catalog.files(),
                planned,
                snapshot_id,
                &data,
                &[],
                None,
            )
            .await?;
            prepared.extend(manifests.iter().map(|m| m.manifest_path.clone()));
            Ok::<_, Error>((data, manifests))
        }
        .await;
        // Whatever the delete branch wrote is in `prepared` before any error is returned.
        let deletes = delete_branch.await.unwrap_or_else(|e| {
            DeleteBranch::failed(Error::Internal(format!("writing delete files: {e}")))
        });
        prepared.extend(deletes.files.iter().map(|(_, f)| f.file_path().to_string()));
        prepared.extend(deletes.manifests.iter().map(|m| m.manifest_path.clone()));
        if !deletes.files.is_empty() {
            self.remember_deletes(&deletes.files, &located.deletes);
        }
        let result = match (data, deletes.error) {
            (Err(e), _) | (Ok(_), Some(e)) => Err(e),
            (Ok((data, mut manifests)), None) => {
                manifests.extend(deletes.manifests);
                match failpoint("after-manifests").await {
                    Ok(()) => Ok((data, deletes.files, snapshot_id, manifests)),
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok((data, deletes, snapshot_id, manifests)) => Ok(Written {
                data,
                deletes,
                snapshot_id,
                manifests,
                prepared,
            }),
            Err(e) => {
                prepared.abandon(file_io).await;
                Err(e)
            }
        }
    }

    /// Keeps the content of the delete files just written (one per partition) in the lookup
    /// cache, as a later read of them would load it.
    fn remember_deletes(
        &self,
        written: &[(i32, DataFile)],
        deletes: &BTreeMap<String, crate::write::FileDeletes>,
    ) {
        for (spec_id, f) in written {
            let content: crate::files::deletes::DeletedPositions = deletes
                .iter()
                .filter(|(_, d)| d.spec_id == *spec_id && &d.partition == f.partition())
                .map(|(path, d)| {
                    let mut p = d.positions.clone();
                    p.sort_unstable();
                    p.dedup();
                    (path.clone(), p)
                })
                .collect();
            let count: usize = content.values().map(Vec::len).sum();
            // One file per partition is what the writer makes; anything else is read back.
            if count as u64 == f.record_count() {
                self.ingest
                    .catalog
                    .files()
                    .remember_position_deletes(f.file_path(), content);
            }
        }
    }

    /// Starts writing the upserts as dedupe left them, as a task of its own, while the lookup
    /// runs: only a key whose table row turns out newer than its change (ordering columns)
    /// would be left out, and that is rare (a file delivered late, a replay). The encoding then
    /// runs on another core beside the lookup, and on object storage the upload overlaps the
    /// lookup's reads. A large input is written from its second pass instead.
    async fn speculate(
        &self,
        planned: &Arc<TableMetadata>,
        key: &[String],
        read: &ReadResult,
    ) -> Option<Speculative> {
        if read.second_pass.is_some() || read.deduped.upserts.num_rows() == 0 {
            return None;
        }
        let (file_io, planned) = (self.ingest.catalog.file_io().clone(), planned.clone());
        let (upserts, key) = (read.deduped.upserts.clone(), key.to_vec());
        let target = self.cfg.target_file_size_bytes;
        let full_load = self.planned.iter().all(|f| f.object.kind == FileKind::Load);
        Some(
            spawn_beside(async move {
                let seen = std::sync::Mutex::new(Vec::new());
                let files = write_data_files_seen(
                    &file_io,
                    &planned,
                    &upserts,
                    &key,
                    target,
                    full_load,
                    &|path, rows| {
                        if let Ok(mut s) = seen.lock() {
                            s.push((path.to_string(), rows.clone()));
                        }
                    },
                )
                .await?;
                let seen = seen.into_inner().unwrap_or_default();
                Ok((files, seen))
            })
            .await,
        )
    }

    /// Deletes what a speculative write wrote (the commit it was for failed before its write).
    async fn discard(&self, speculative: Option<Speculative>) {
        let Some(s) = speculative else { return };
        if let Ok(Ok((files, _))) = s.await {
            for (_, f) in files {
                let _ = self.ingest.catalog.file_io().delete(f.file_path()).await;
            }
        }
    }

    async fn write_data(
        &self,
        planned: &Arc<TableMetadata>,
        key: &[String],
        read: &ReadResult,
        outcomes: &[KeyOutcome],
        speculative: Option<Speculative>,
        prepared: &mut Prepared,
    ) -> Result<Vec<(i32, DataFile)>> {
        let file_io = self.ingest.catalog.file_io();
        let target = self.cfg.target_file_size_bytes;
        let deduped = &read.deduped;
        // Every row of this commit comes from a full load (commits never mix the two): its
        // files are named so, and later changes are never judged stale against them.
        let full_load = self.planned.iter().all(|f| f.object.kind == FileKind::Load);
        // Upserts of stale keys are dropped (their live row stays as it is).
        let write = KeyOutcome::upserts_to_write(outcomes, deduped);
        // The key columns of what we write stay in the lookup cache: the next commit of a warm
        // process does not read its own files back.
        let schema = planned.current_schema();
        let key_ids: Option<Vec<i32>> = key.iter().map(|k| schema.field_id_by_name(k)).collect();
        let cache = self.ingest.catalog.files().cache();
        let seen = |path: &str, rows: &arrow_array::RecordBatch| {
            let Some(ids) = &key_ids else { return };
            let cols: Option<Vec<arrow_array::ArrayRef>> = key
                .iter()
                .map(|k| rows.column_by_name(k).cloned())
                .collect();
            if let Some(cols) = cols {
                cache.remember_keys(path, ids, &cols);
            }
        };
        let Some(pass) = &read.second_pass else {
            if let Some(spec) = speculative {
                let (data, seen_parts) = spec
                    .await
                    .map_err(|e| Error::Internal(format!("writing data files: {e}")))??;
                if write.iter().all(|w| *w) {
                    prepared.extend(data.iter().map(|(_, f)| f.file_path().to_string()));
                    for (path, rows) in &seen_parts {
                        seen(path, rows);
                    }
                    return Ok(data);
                }
                // Some keys are stale: their rows must not be in the files. Written again
                // below without them; these were never referenced.
                for (_, f) in &data {
                    let _ = file_io.delete(f.file_path()).await;
                }
            }
            let upserts = if write.iter().any(|w| !w) {
                let keep = arrow_array::BooleanArray::from(write);
                arrow_select::filter::filter_record_batch(&deduped.upserts, &keep)?
            } else {
                deduped.upserts.clone()
            };
            let data =
                write_data_files_seen(file_io, planned, &upserts, key, target, full_load, &seen)
                    .await?;
            prepared.extend(data.iter().map(|(_, f)| f.file_path().to_string()));
            return Ok(data);
        };
        // The winning rows of a large input, read again in sorted chunks.
        let mut keep: HashMap<u32, HashSet<u64>> = HashMap::new();
        for ((file, pos), w) in deduped.upsert_sources.iter().zip(&write) {
            if *w {
                keep.entry(*file).or_default().insert(*pos);
            }
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let pass = pass.clone();
        let reader = tokio::task::spawn_blocking(move || pass.run(keep, tx));
        let mut data = Vec::new();
        while let Some(chunk) = rx.recv().await {
            let written =
                write_data_files_seen(file_io, planned, &chunk?, key, target, full_load, &seen)
                    .await?;
            prepared.extend(written.iter().map(|(_, f)| f.file_path().to_string()));
            data.extend(written);
        }
        reader
            .await
            .map_err(|e| Error::Internal(format!("reader task failed: {e}")))?;
        Ok(data)
    }

    /// Our snapshot summary: the files applied and the row counts (for `history`).
    fn summary(&self, report: &CommitReport) -> Result<BTreeMap<String, String>> {
        let json =
            |v: &Vec<String>| serde_json::to_string(v).map_err(|e| Error::Internal(e.to_string()));
        let orders: Vec<String> = self
            .planned
            .iter()
            .map(|f| f.object.order.to_string())
            .collect();
        let mut p = BTreeMap::new();
        p.insert(keys::SOURCE_FILES.to_string(), json(&report.files)?);
        p.insert(keys::SOURCE_ORDERS.to_string(), json(&orders)?);
        p.insert(keys::ROWS_INSERTED.to_string(), report.inserted.to_string());
        p.insert(keys::ROWS_UPDATED.to_string(), report.updated.to_string());
        p.insert(keys::ROWS_DELETED.to_string(), report.deleted.to_string());
        if report.reload {
            p.insert(keys::RELOAD.to_string(), "true".into());
        }
        p.insert(
            keys::VERSION.to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        Ok(p)
    }
}

/// The table's key (identifier fields), else the configured one.
fn primary_key(cfg: &TableConfig, table: Option<&LoadedTable>) -> Result<Vec<String>> {
    match table
        .map(|t| evolve::key_columns(t.metadata.current_schema()))
        .filter(|k| !k.is_empty())
    {
        Some(k) => Ok(k),
        None => cfg.primary_key.clone().ok_or_else(|| Error::NoPrimaryKey {
            table: cfg.target(),
            source_table: cfg.source.clone(),
        }),
    }
}

/// What a commit does to one key: its last change (upsert or delete, from dedupe) against
/// what the table held for it (from the lookup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyOutcome {
    Insert,
    Update,
    Delete,
    /// A delete of a key the table did not hold.
    DeleteAbsent,
    /// The table's row is newer than the change (ordering columns): left as it is.
    Stale,
}

impl KeyOutcome {
    /// One per row of `deduped.keys`.
    fn of(deduped: &crate::dedupe::Deduped, located: &Located) -> Vec<KeyOutcome> {
        (0..deduped.keys.num_rows())
            .map(|i| {
                let upsert = deduped.upserted.value(i);
                match (located.stale[i], upsert, located.found[i]) {
                    (true, _, _) => KeyOutcome::Stale,
                    (false, true, true) => KeyOutcome::Update,
                    (false, true, false) => KeyOutcome::Insert,
                    (false, false, true) => KeyOutcome::Delete,
                    (false, false, false) => KeyOutcome::DeleteAbsent,
                }
            })
            .collect()
    }

    /// Per upserted key (the rows of `deduped.upserts`, in key order): whether to write it.
    fn upserts_to_write(outcomes: &[KeyOutcome], deduped: &crate::dedupe::Deduped) -> Vec<bool> {
        outcomes
            .iter()
            .enumerate()
            .filter(|(i, _)| deduped.upserted.value(*i))
            .map(|(_, o)| *o != KeyOutcome::Stale)
            .collect()
    }
}

fn count_rows(report: &mut CommitReport, outcomes: &[KeyOutcome]) {
    for o in outcomes {
        match o {
            KeyOutcome::Insert => report.inserted += 1,
            KeyOutcome::Update => report.updated += 1,
            KeyOutcome::Delete => report.deleted += 1,
            KeyOutcome::DeleteAbsent => report.deletes_of_absent_keys += 1,
            KeyOutcome::Stale => report.stale_changes += 1,
        }
    }
}

fn added(data: &[(i32, DataFile)], deletes: &[(i32, DataFile)]) -> Added {
    let mut partitions = std::collections::BTreeSet::new();
    let mut added = Added::default();
    for (spec, f) in data {
        added.data_files += 1;
        added.records += f.record_count();
        added.data_files_size += f.file_size_in_bytes();
        partitions.insert((*spec, format!("{:?}", f.partition())));
    }
    for (spec, f) in deletes {
        added.delete_files += 1;
        added.position_deletes += f.record_count();
        added.delete_files_size += f.file_size_in_bytes();
        partitions.insert((*spec, format!("{:?}", f.partition())));
    }
    added.changed_partitions = partitions.len() as u64;
    added
}

/// TableMetadataBuilder re-assigns field ids of a new table; ours are already 1..n in order,
/// which it keeps. Checked, because every file we write depends on it.
fn check_ids_kept(ours: &iceberg::spec::Schema, theirs: &iceberg::spec::Schema) -> Result<()> {
    for f in ours.as_struct().fields() {
        if theirs.field_id_by_name(&f.name) != Some(f.id) {
            return Err(Error::Internal(format!(
                "field id of `{}` changed on table creation",
                f.name
            )));
        }
    }
    Ok(())
}

type Manifests = Vec<iceberg::spec::ManifestFile>;

/// The data files of a speculative write ([`IngestPlanner::speculate`]), with the rows of each
/// file that holds a whole partition (for the lookup cache).
type Speculative = tokio::task::JoinHandle<
    Result<(
        Vec<(i32, DataFile)>,
        Vec<(String, arrow_array::RecordBatch)>,
    )>,
>;

/// What the delete branch of [`IngestPlanner::write`] wrote, and the error that stopped it:
/// what it wrote before an error is the caller's to delete.
struct DeleteBranch {
    files: Vec<(i32, DataFile)>,
    manifests: Manifests,
    error: Option<Error>,
}

impl DeleteBranch {
    fn failed(e: Error) -> DeleteBranch {
        DeleteBranch {
            files: Vec::new(),
            manifests: Vec::new(),
            error: Some(e),
        }
    }
}

/// Position-delete files and their manifest (owned arguments: it runs as its own task).
async fn delete_branch(
    files: Files,
    planned: Arc<TableMetadata>,
    deletes: BTreeMap<String, crate::write::FileDeletes>,
    snapshot_id: i64,
) -> DeleteBranch {
    let mut out = DeleteBranch {
        files: Vec::new(),
        manifests: Vec::new(),
        error: None,
    };
    let steps = async {
        out.files = write_position_deletes(files.io(), &planned, &deletes).await?;
        failpoint("after-delete-files").await?;
        out.manifests =
            commit::write_manifests(&files, &planned, snapshot_id, &[], &out.files, None).await?;
        Ok::<_, Error>(())
    }
    .await;
    out.error = steps.err();
    out
}
