//! Planning one ingest commit against the table as it is now: which pending files the table's
//! record says to apply (and how: as changes, late, or as a reload), then evolve (the schema,
//! from the files' headers) → read → dedupe → lookup → write, staged for [`crate::commit`]. The
//! commit loop calls [`IngestPlanner::plan`] again whenever another writer's commit invalidates
//! a plan.
//!
//! Here: the selection of the files and the path they take. The paths: [`in_memory`] (read
//! whole, looked up, then [`write`]) and [`streamed`] (full loads and large change files); both
//! end in [`staged`], the commit made of what they wrote.

use std::sync::Arc;
use std::time::Instant;

use iceberg::TableIdent;
use tracing::{info, warn};

use super::report::{CommitReport, Status, Timings, micros};
use super::{FileInput, Ingest};
use crate::commit::{AppliedInput, AppliedRecord, Plan, Planner, Staged, Standing};
use crate::config::TableConfig;
use crate::error::{Error, Rejected, Result};
use crate::evolve;
use crate::locate::FileKind;
use crate::table::LoadedTable;

/// Records a new CSV column's type is guessed from before the file streams (the rest of the
/// file is checked as it is read).
mod append;
mod in_memory;
mod staged;
mod streamed;
mod write;

use in_memory::KeyOutcome;
use staged::{Staging, Written};

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
        .map_or_else(String::new, |h| format!(" (up to {})", h.file_stem()));
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
        // Appended rows have no key: nothing to merge, a late file appends as any other.
        let key = match cfg.mode.appends() {
            true => Vec::new(),
            false => primary_key(cfg, table.as_ref())?,
        };
        // A late file is read with every applied file after it; only its keys are rewritten.
        let mut inputs = self.planned.clone();
        if mode == (Mode::Changes { late: true })
            && !cfg.mode.appends()
            && let Some(oldest) = self.planned.iter().map(|f| f.object.order.clone()).min()
        {
            for (_, key) in record.applied_after(&oldest)? {
                let source = &self.ingest.config.source;
                let object = match crate::locate::locate_transaction_file(&key, source)? {
                    // This table's rows of a CDC_TXN file.
                    Some(order) => {
                        let p = &self.planned[0].object;
                        Some(crate::locate::DmsObject::in_transaction_file(
                            &key, order, &p.schema, &p.table,
                        ))
                    }
                    None => crate::locate::locate(&key, source)?,
                };
                let object = object.ok_or_else(|| {
                    Error::Config(format!(
                        "applied object {key} is not a DMS file under the [source] settings any \
                         more"
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
            if cfg.mode.appends() {
                return self
                    .stage_append(table, record, carried, mode, inputs, timings)
                    .await;
            }
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
