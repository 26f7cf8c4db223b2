//! Writing what the in-memory path decided: data files for upserts (started speculatively
//! while the lookup runs), position deletes, and their manifests.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use iceberg::spec::{DataFile, TableMetadata};

use crate::commit::{self, failpoint};
use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::deletes::{FileDeletes, MergedDeletes};
use crate::files::prepared::Prepared;
use crate::locate::FileKind;
use crate::lookup::Located;
use crate::ops::ingest::read::ReadResult;
use crate::process::spawn_beside;
use crate::write::data::write_data_files_seen;
use crate::write::deletes::write_position_deletes;

use super::*;

pub(super) type Manifests = crate::commit::manifests::Encoded;

/// The data files of a speculative write ([`IngestPlanner::speculate`]), with the rows of each
/// file that holds a whole partition (for the lookup cache).
pub(super) type Speculative = tokio::task::JoinHandle<
    Result<(
        Vec<(i32, DataFile)>,
        Vec<(String, arrow_array::RecordBatch)>,
    )>,
>;

/// What the delete branch of [`IngestPlanner::write`] wrote, and the error that stopped it:
/// what it wrote before an error is the caller's to delete.
#[derive(Default)]
pub(super) struct DeleteBranch {
    pub(super) files: Vec<(i32, DataFile)>,
    pub(super) manifests: Manifests,
    /// The positions each delete file holds (the new ones merged with the live ones), and the
    /// live delete files they replace.
    pub(super) merged: MergedDeletes,
    pub(super) error: Option<Error>,
}

impl DeleteBranch {
    pub(super) fn failed(e: Error) -> DeleteBranch {
        DeleteBranch {
            error: Some(e),
            ..Default::default()
        }
    }
}

/// Position-delete files, one per data file with the live deletes of that file merged in, and
/// their manifest (owned arguments: it runs as its own task).
pub(super) async fn delete_branch(
    files: Files,
    planned: Arc<TableMetadata>,
    deletes: BTreeMap<String, FileDeletes>,
    snapshot_id: i64,
) -> DeleteBranch {
    let mut out = DeleteBranch::default();
    let steps = async {
        out.merged = files.merge_with_live_deletes(&planned, &deletes).await?;
        out.files = write_position_deletes(files.io(), &planned, &out.merged.deletes).await?;
        failpoint("after-delete-files").await?;
        out.manifests =
            commit::write_manifests(&files, &planned, snapshot_id, &[], &out.files, None).await?;
        Ok::<_, Error>(())
    }
    .await;
    out.error = steps.err();
    out
}

impl IngestPlanner<'_> {
    /// Data files (upserts that are not stale), position deletes and their manifests.
    pub(super) async fn write(
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
            prepared.extend(manifests.manifests.iter().map(|m| m.manifest_path.clone()));
            Ok::<_, Error>((data, manifests))
        }
        .await;
        // Whatever the delete branch wrote is in `prepared` before any error is returned.
        let deletes = delete_branch.await.unwrap_or_else(|e| {
            DeleteBranch::failed(Error::Internal(format!("writing delete files: {e}")))
        });
        prepared.extend(deletes.files.iter().map(|(_, f)| f.file_path().to_string()));
        prepared.extend(
            deletes
                .manifests
                .manifests
                .iter()
                .map(|m| m.manifest_path.clone()),
        );
        if !deletes.files.is_empty() {
            self.remember_deletes(&deletes.files, &deletes.merged.deletes);
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
            Ok((data, delete_files, snapshot_id, manifests)) => Ok(Written {
                data,
                deletes: delete_files,
                snapshot_id,
                manifests,
                prepared,
                deleted_in: deletes.merged.deletes.keys().cloned().collect(),
                replaced_deletes: deletes.merged.replaced,
            }),
            Err(e) => {
                prepared.abandon(file_io).await;
                Err(e)
            }
        }
    }

    /// Keeps the content of the delete files just written (one per data file) in the lookup
    /// cache, as a later read of them would load it.
    pub(super) fn remember_deletes(
        &self,
        written: &[(i32, DataFile)],
        deletes: &BTreeMap<String, FileDeletes>,
    ) {
        for (_, f) in written {
            let Some(target) = f.referenced_data_file() else {
                continue;
            };
            let Some(d) = deletes.get(&target) else {
                continue;
            };
            let mut p = d.positions.clone();
            p.sort_unstable();
            p.dedup();
            // Anything but what the writer made of it is read back.
            if p.len() as u64 == f.record_count() {
                let content: crate::files::deletes::DeletedPositions = [(target, p)].into();
                self.ingest
                    .catalog
                    .files()
                    .remember_position_deletes(crate::files::deletes::DeleteId::of(f), content);
            }
        }
    }

    /// Starts writing the upserts as dedupe left them, as a task of its own, while the lookup
    /// runs: only a key whose table row turns out newer than its change (ordering columns)
    /// would be left out, and that is rare (a file delivered late, a replay). The encoding then
    /// runs on another core beside the lookup, and on object storage the upload overlaps the
    /// lookup's reads. A large input is written from its second pass instead.
    pub(super) async fn speculate(
        &self,
        planned: &Arc<TableMetadata>,
        key: &[String],
        read: &ReadResult,
    ) -> Option<Speculative> {
        // Rows still missing values of the table's (unsupplied columns) are written once
        // the lookup has read them.
        if read.second_pass.is_some()
            || read.deduped.upserts.num_rows() == 0
            || !read.deduped.from_table.is_empty()
        {
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
    pub(super) async fn discard(&self, speculative: Option<Speculative>) {
        let Some(s) = speculative else { return };
        if let Ok(Ok((files, _))) = s.await {
            for (_, f) in files {
                let _ = self.ingest.catalog.file_io().delete(f.file_path()).await;
            }
        }
    }

    pub(super) async fn write_data(
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
}
