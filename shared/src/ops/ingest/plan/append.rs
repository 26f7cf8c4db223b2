//! The append path (`mode = "append"` and `"changelog"`): every row of the planned files is
//! appended as it is read, in DMS order and file order: no key, no dedupe, no lookup, no
//! deletes. Rows stream from a reader thread to the data-file writer, so memory follows a few
//! batches whatever the input's size. Exactly once per file, as every commit: the applied-file
//! record moves with the snapshot.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use iceberg::spec::PrimitiveType;

use crate::commit::{self, AppliedRecord, Staged};
use crate::config::{TableConfig, TableMode};
use crate::error::{Error, InputError, Rejected, Result};
use crate::evolve;
use crate::files::prepared::Prepared;
use crate::locate::FileKind;
use crate::ops::ingest::FileInput;
use crate::ops::ingest::read::{Inference, Prepared as Read, align, prepare, processing_schema};
use crate::ops::ingest::report::{CommitReport, Status, Timings, micros};
use crate::read::{ChangeBatch, Op};
use crate::table::LoadedTable;
use crate::write::data::DataFileStream;

use super::*;

/// The columns a change history (`mode = "changelog"`) adds to every row: the change's Op
/// (`I`, `U`, `D`), the DMS file it came from, and its line (CSV) or row (Parquet) there.
pub(crate) const CHANGELOG_COLUMNS: [(&str, PrimitiveType); 3] = [
    ("dms_op", PrimitiveType::String),
    ("dms_file", PrimitiveType::String),
    ("dms_row", PrimitiveType::Long),
];

/// Batches in flight between the reader thread and the writer.
const IN_FLIGHT: usize = 2;

/// What the reader thread hands back once every file is read.
struct ReadDone {
    rows: usize,
    rejected: Vec<Rejected>,
}

impl IngestPlanner<'_> {
    /// Appends every row of `inputs` (the planned files) to the table.
    pub(super) async fn stage_append(
        &mut self,
        table: Option<LoadedTable>,
        record: Arc<AppliedRecord>,
        carried: Vec<crate::commit::record::LoadFile>,
        mode: Mode,
        mut inputs: Vec<FileInput>,
        timings: &mut Timings,
    ) -> Result<(Staged, CommitReport, Vec<Rejected>)> {
        let started = Instant::now();
        // LOAD files are known by content too: a reload reuses their names.
        for f in inputs.iter_mut() {
            if f.object.kind == FileKind::Load && !f.meta.has_digest() {
                self.ingest.digest(f, false).await?;
            }
        }
        for (p, f) in self.planned.iter_mut().zip(&inputs) {
            p.meta = f.meta.clone();
        }
        let cfg = self.cfg.clone();
        let current = table.as_ref().map(|t| {
            (
                t.metadata.current_schema().as_ref().clone(),
                t.metadata.last_column_id(),
            )
        });
        let (read, files) = tokio::task::spawn_blocking(move || settle(&cfg, current, inputs))
            .await
            .map_err(|e| Error::Internal(format!("reader task failed: {e}")))??;
        let (base, changes, planned) = self
            .metadata_for(table.as_ref(), &read.schema, &read.change)
            .await?;
        timings.read_us = micros(started);
        let write_started = Instant::now();
        let change = read.change.clone();
        let file_io = self.ingest.catalog.file_io();
        let mut stream = DataFileStream::new(
            file_io,
            &planned,
            &[],
            self.cfg.target_file_size_bytes,
            self.planned.iter().all(|f| f.object.kind == FileKind::Load),
            0,
            Vec::new(),
        )?;
        let (tx, mut rx) = tokio::sync::mpsc::channel(IN_FLIGHT);
        let cfg = self.cfg.clone();
        let reader = tokio::task::spawn_blocking(move || read_rows(&cfg, read, files, &tx));
        let mut failed = None;
        while let Some(batch) = rx.recv().await {
            if let Err(e) = stream.write(&batch).await {
                failed = Some(e);
                break;
            }
        }
        // The reader stops once the channel is gone.
        drop(rx);
        let done = reader
            .await
            .map_err(|e| Error::Internal(format!("reader task failed: {e}")))
            .and_then(|r| r);
        let done = match (failed, done) {
            (None, Ok(d)) => d,
            (Some(e), _) | (None, Err(e)) => {
                stream.abort(file_io).await;
                return Err(e);
            }
        };
        let data = stream.close().await?;
        let mut prepared: Prepared = data
            .iter()
            .map(|(_, f)| f.file_path().to_string())
            .collect();
        let snapshot_id = commit::new_snapshot_id(Some(&planned));
        let manifests = match commit::write_manifests(
            self.ingest.catalog.files(),
            &planned,
            snapshot_id,
            &data,
            &[],
            None,
        )
        .await
        {
            Ok(m) => m,
            Err(e) => {
                prepared.abandon(file_io).await;
                return Err(e);
            }
        };
        prepared.extend(manifests.manifests.iter().map(|m| m.manifest_path.clone()));
        timings.write_us = micros(write_started);
        let mut report = CommitReport::passed_over(&self.planned, Status::Applied, self.started);
        report.rows_read = done.rows + done.rejected.len();
        report.inserted = done.rows;
        let staged = self.staged(
            Staging {
                base,
                changes,
                planned,
                record,
                carried,
                mode,
                written: Written {
                    data,
                    deletes: Vec::new(),
                    snapshot_id,
                    manifests,
                    prepared,
                    deleted_in: Default::default(),
                    replaced_deletes: Default::default(),
                },
                referenced: Default::default(),
                change: &change,
                rows_rejected: done.rejected.len(),
                max_seq: None,
                keys: commit::KeyScope::Unknown,
                kept: Default::default(),
            },
            &mut report,
        )?;
        Ok((staged, report, done.rejected))
    }
}

/// Opens the files and settles the table's schema by their columns (and, for a change
/// history, its own columns).
fn settle(
    cfg: &TableConfig,
    current: Option<(iceberg::spec::Schema, i32)>,
    files: Vec<FileInput>,
) -> Result<(Read, Vec<FileInput>)> {
    // Ids of columns another engine dropped are not given out again.
    let last_column_id = current.as_ref().map_or(0, |(_, l)| *l);
    let mut read = prepare(cfg, &[], current, &files, &Inference::Whole)?;
    if cfg.mode == TableMode::Changelog {
        let ours: Vec<(String, PrimitiveType)> = CHANGELOG_COLUMNS
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        let label = files.first().map_or("", |f| f.object.key.as_str());
        if let Some((next, ch)) =
            evolve::evolve(&read.schema, last_column_id, &ours, &cfg.target(), label)?
        {
            read.change.added.extend(ch.added);
            read.change.promoted.extend(ch.promoted);
            read.schema = next;
            read.processing = processing_schema(&read.schema)?;
        }
    }
    Ok((read, files))
}

/// Reads every file in order and sends its rows, aligned to the table's columns, to the
/// writer; an update or delete row in `mode = "append"` fails its file.
fn read_rows(
    cfg: &TableConfig,
    read: Read,
    files: Vec<FileInput>,
    tx: &tokio::sync::mpsc::Sender<RecordBatch>,
) -> Result<ReadDone> {
    let mut done = ReadDone {
        rows: 0,
        rejected: Vec::new(),
    };
    for ((src, f), types) in read.opened.into_iter().zip(&files).zip(read.types) {
        for b in src.read(types, Vec::new())? {
            let mut b = b?;
            done.rejected.append(&mut b.rejected);
            let rows = match cfg.mode {
                TableMode::Changelog => with_change_columns(b, &f.object.key)?,
                _ => {
                    only_inserts(&b, f, cfg)?;
                    b
                }
            };
            let rows = align(rows, &read.processing)?.data;
            done.rows += rows.num_rows();
            if tx.blocking_send(rows).is_err() {
                // The writer stopped (its error is the one reported).
                return Ok(done);
            }
        }
    }
    Ok(done)
}

/// `mode = "append"` takes inserts only: an update or delete has no row to apply to.
fn only_inserts(b: &ChangeBatch, f: &FileInput, cfg: &TableConfig) -> Result<()> {
    let Some(i) = b.ops.iter().position(|o| *o != Op::Insert) else {
        return Ok(());
    };
    let op = if b.ops[i] == Op::Update { "U" } else { "D" };
    Err(InputError::new(
        &f.object.key,
        format!(
            "`{op}` row in table {}, which has `mode = \"append\"` (inserts only: without a key \
             an update or delete has no row to apply to); use `mode = \"changelog\"` to keep \
             every change as a row, or set `primary_key` (and remove `mode`) to apply them",
            cfg.target()
        ),
    )
    .at(crate::read::position(f.object.format, b.positions[i]))
    .column("Op")
    .into())
}

/// The rows with the change-history columns added: Op, file, line or row.
fn with_change_columns(b: ChangeBatch, file: &str) -> Result<ChangeBatch> {
    let n = b.data.num_rows();
    let op: ArrayRef = Arc::new(StringArray::from_iter_values(b.ops.iter().map(
        |o| match o {
            Op::Insert => "I",
            Op::Update => "U",
            Op::Delete => "D",
        },
    )));
    let file: ArrayRef = Arc::new(StringArray::from_iter_values(std::iter::repeat_n(file, n)));
    let row: ArrayRef = Arc::new(Int64Array::from_iter_values(
        b.positions.iter().map(|p| *p as i64),
    ));
    let mut fields: Vec<arrow_schema::FieldRef> =
        b.data.schema().fields().iter().cloned().collect();
    let mut columns = b.data.columns().to_vec();
    for ((name, _), col) in CHANGELOG_COLUMNS.iter().zip([op, file, row]) {
        // A source column of the same name is the source's: ours replaces it (documented).
        if let Some(i) = fields.iter().position(|f| f.name() == name) {
            fields.remove(i);
            columns.remove(i);
        }
        fields.push(Arc::new(arrow_schema::Field::new(
            *name,
            col.data_type().clone(),
            true,
        )));
        columns.push(col);
    }
    let data = RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)?;
    Ok(ChangeBatch { data, ..b })
}
