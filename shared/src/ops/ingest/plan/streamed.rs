//! The streamed path ([`crate::ops::ingest::stream`]): full loads of any size and large change files,
//! read in bounded memory, their schema settled from their first records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use iceberg::spec::{DataFile, TableMetadata};
use tracing::{info, warn};

use crate::commit::{self, AppliedRecord, Base, MetadataChanges, Staged, failpoint};
use crate::config::TableConfig;
use crate::error::{Error, Rejected, Result};
use crate::files::prepared::Prepared;
use crate::locate::FileKind;
use crate::ops::ingest::FileInput;
use crate::ops::ingest::read::Inference;
use crate::ops::ingest::report::{CommitReport, Status, Timings, micros};
use crate::table::LoadedTable;
use crate::write::deletes::write_position_deletes;

use super::*;

/// A running digest of an input's content.
pub(super) type Digest = tokio::task::JoinHandle<Result<crate::read::Digests>>;

/// What [`IngestPlanner::stream`] settled and did: the schema read, the base and planned
/// metadata, the pipeline's result, and whether a file was read again with other types.
pub(super) type StreamedStage = (
    crate::ops::ingest::read::Prepared,
    Base,
    MetadataChanges,
    Arc<TableMetadata>,
    crate::ops::ingest::stream::Streamed,
    bool,
);

impl IngestPlanner<'_> {
    /// Whether the input is applied by the streamed path ([`crate::ops::ingest::stream`]): every full load
    /// (its files can be of any size), and change files larger than `large_input_bytes`. A
    /// late file re-merged with later ones keeps the in-memory path.
    pub(super) fn streams(&self, inputs: &[FileInput], mode: Mode) -> Result<bool> {
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
        // Changes with unsupplied columns are merged with the earlier changes of their key,
        // which the streamed path does not hold.
        Ok(bytes > self.cfg.large_input_bytes && self.cfg.no_sup_value.is_none())
    }

    /// The digest of each planned LOAD file that has none yet, computed on blocking threads.
    pub(super) fn digests(&self, inputs: &[FileInput]) -> Vec<(String, Digest)> {
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
    pub(super) async fn stage_streamed(
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
        report.rows_set_aside = streamed.set_aside;
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

    /// Settles the schema and runs the streamed pipeline ([`crate::ops::ingest::stream`]), again with the
    /// types of a file's whole content when its first records gave the wrong ones.
    pub(super) async fn stream(
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
                    crate::ops::ingest::read::prepare(&cfg, &key, current, &inputs, &inference)
                })
                .await
                .map_err(|e| Error::Internal(format!("reader task failed: {e}")))??
            };
            let (base, changes, planned) = self
                .metadata_for(table, &prepared.schema, &prepared.change)
                .await?;
            let spec = crate::ops::ingest::stream::StreamSpec {
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
                let target = crate::ops::ingest::stream::Target {
                    files: &files,
                    planned: planned_md,
                    base: lookup_base,
                    target_file_size,
                };
                let ran = crate::ops::ingest::stream::run(&spec, &target, &handle);
                crate::process::release_freed_memory();
                ran
            })
            .await
            .map_err(|e| Error::Internal(format!("streamed read failed: {e}")))??;
            match ran {
                crate::ops::ingest::stream::Ran::Done(s) => {
                    return Ok((prepared, base, changes, planned, *s, retyped));
                }
                crate::ops::ingest::stream::Ran::Retype(r) => {
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
    pub(super) async fn write_streamed(
        &self,
        planned: &Arc<TableMetadata>,
        data: &[(i32, DataFile)],
        deletes: &BTreeMap<String, crate::files::deletes::FileDeletes>,
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
            let files = self.ingest.catalog.files();
            let merged = files.merge_with_live_deletes(planned, deletes).await?;
            let delete_files = write_position_deletes(file_io, planned, &merged.deletes).await?;
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
            prepared.extend(manifests.manifests.iter().map(|m| m.manifest_path.clone()));
            failpoint("after-manifests").await?;
            Ok::<_, Error>((delete_files, manifests, merged))
        }
        .await;
        match result {
            Ok((delete_files, manifests, merged)) => Ok(Written {
                data: data.to_vec(),
                deletes: delete_files,
                snapshot_id,
                manifests,
                prepared,
                deleted_in: merged.deletes.keys().cloned().collect(),
                replaced_deletes: merged.replaced,
            }),
            Err(e) => {
                prepared.abandon(file_io).await;
                Err(e)
            }
        }
    }
}
