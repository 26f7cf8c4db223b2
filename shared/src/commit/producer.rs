//! One attempt's files: the manifest list (what the snapshot holds), the snapshot with its
//! summary, and the new metadata.json with the exactly-once record, built on the table as it
//! is now.

use std::collections::HashMap;
use std::str::FromStr;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, FormatVersion, MAIN_BRANCH, ManifestFile, ManifestListWriter, Snapshot,
    Summary, TableMetadata, UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::{MetadataLocation, TableRequirement, TableUpdate};

use super::record::{AppliedRecord, PROPERTY};
use super::{Base, Change, CommitError, Staged, failpoint, manifests, summary};
use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::deletes::DeleteId;
use crate::files::lineage;
use crate::files::metadata::Refs;
use crate::files::prepared::Prepared;
use crate::table::LoadedTable;

/// Files one attempt wrote: deleted if the attempt loses.
pub(super) struct Built {
    pub metadata: TableMetadata,
    /// The metadata's refs, when they could be derived from the base's (see `files::metadata`).
    pub refs: Option<Refs>,
    /// Where the metadata is written (unless the catalog writes it itself).
    pub location: String,
    /// The commit as requirements and updates (`commit::request`).
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
    /// Manifest list, manifests written for this attempt only (filtered and merged ones), and
    /// the metadata file if we wrote it.
    written: Prepared,
    /// The commit's prepared manifests this attempt's merge took in (listed by none).
    unlisted: Prepared,
}

impl Built {
    pub(super) async fn delete(&self, file_io: &FileIO) {
        self.written.abandon(file_io).await;
    }

    /// Once the attempt landed: deletes the prepared manifests its merge took in.
    pub(super) async fn delete_unlisted(&self, file_io: &FileIO) {
        self.unlisted.abandon(file_io).await;
    }

    pub(super) fn commit(&self) -> crate::catalog::TableCommit<'_> {
        crate::catalog::TableCommit {
            requirements: &self.requirements,
            updates: &self.updates,
            metadata: &self.metadata,
            location: &self.location,
        }
    }
}

/// The manifests of the attempt's snapshot: the parent's without what the change removes
/// (and without those that list no live file), the change's own, and for a rewrite the deletes
/// it carries over; merged by the table's properties (see [`super::manifests`]). The files
/// written here are recorded in `written`, the removed files counted in `added`.
async fn attempt_manifests(
    staged: &Staged,
    (base_md, write_md): (&TableMetadata, &TableMetadata),
    files: &Files,
    parent_manifests: &[ManifestFile],
    carry: &super::validate::CarriedDeletes,
    (written, added): (&mut Prepared, &mut super::Added),
) -> std::result::Result<(Vec<ManifestFile>, Vec<manifests::Upload>), CommitError> {
    let filtered = manifests::filter(
        files,
        write_md,
        parent_manifests,
        staged.snapshot_id,
        &removing(&staged.change),
    )
    .await?;
    added.count_removed(&filtered.removed);
    if let Change::RowDelta {
        replaced_deletes, ..
    } = &staged.change
        && filtered.removed.len() < replaced_deletes.len()
    {
        // Another writer replaced or removed a delete file this commit's merged deletes hold.
        let gone = replaced_deletes
            .iter()
            .find(|p| !filtered.removed.iter().any(|(_, f)| DeleteId::of(f) == **p))
            .map(|p| p.to_string())
            .unwrap_or_default();
        return Err(CommitError::Conflict(super::Conflict::DeleteFileReplaced {
            file: gone,
        }));
    }
    let mut ours = staged.manifests.clone();
    let mut held = staged.held.clone();
    if let Change::Rewrite {
        row_map: Some(map), ..
    } = &staged.change
        && !carry.is_empty()
    {
        let c = super::carry::write(files, write_md, staged.snapshot_id, map, carry).await?;
        written.extend(c.written);
        for f in &c.files {
            added.count_delete(f);
        }
        ours.extend(c.manifests.manifests);
        held.extend(c.manifests.held);
    }
    let mut policy = manifests::MergePolicy::of(base_md);
    if matches!(staged.change, Change::RewriteManifests) {
        // Every bin of several manifests is merged, whatever the table's merge settings.
        policy.enabled = true;
        policy.min_count = 2;
    }
    let (list, merged) = manifests::merge(
        files,
        write_md,
        staged.snapshot_id,
        (ours, filtered.manifests),
        &[filtered.written.as_slice(), held.as_slice()].concat(),
        policy,
    )
    .await?;
    // Stored with the list and metadata.json (only what the list names): filtered and merged
    // manifests, and the commit's own held ones it lists as they are.
    let uploads: Vec<manifests::Upload> = filtered
        .written
        .into_iter()
        .chain(merged)
        .chain(held)
        .filter(|(p, _)| list.iter().any(|m| m.manifest_path == *p))
        .collect();
    Ok((list, uploads))
}

/// The files `change` removes, decided per attempt against the table as it is then: a row
/// delta the delete files its merged ones replace; a rewrite the files it rewrote, the delete
/// files it planned to drop, and any delete file left pointing only at a file it removes (a
/// concurrent commit's, whose positions it carries over); a reload everything.
fn removing(change: &Change) -> manifests::Removing<'_> {
    match change {
        Change::RowDelta {
            replaced_deletes, ..
        } => manifests::Removing {
            data: false,
            deletes: !replaced_deletes.is_empty(),
            remove: Box::new(|f| replaced_deletes.contains(&DeleteId::of(f))),
        },
        Change::Rewrite {
            removed_data_files,
            removed_delete_files,
            ..
        } => manifests::Removing {
            data: true,
            deletes: true,
            remove: Box::new(|f| match f.content_type() {
                DataContentType::Data => removed_data_files.contains(f.file_path()),
                _ => {
                    removed_delete_files.contains(&DeleteId::of(f))
                        || manifests::only_targets(f, removed_data_files)
                }
            }),
        },
        Change::Reload => manifests::Removing {
            data: true,
            deletes: true,
            remove: Box::new(|_| true),
        },
        // Every manifest read (nothing removed): one only readable with its header widened is
        // written again even where it would not be merged (alone in its bin).
        Change::RewriteManifests => manifests::Removing {
            data: true,
            deletes: true,
            remove: Box::new(|_| false),
        },
        Change::Append => manifests::Removing::nothing(),
    }
}

/// Builds on `current` as `validated` found it. The metadata is copied once, into the builder:
/// everything else reads it in place (a copy is a pass over every snapshot of the table).
/// What an attempt builds on: the table as it is now, or the metadata of a table the commit
/// creates; its metadata location and refs.
fn attempt_base<'a>(
    staged: &'a Staged,
    current: Option<&'a LoadedTable>,
    empty: &'a Refs,
) -> Result<(&'a std::sync::Arc<TableMetadata>, Option<String>, &'a Refs)> {
    match (current, &staged.base) {
        (Some(t), _) => Ok((
            &t.metadata,
            Some(t.pointer.metadata_location.clone()),
            t.refs.as_ref(),
        )),
        // A table not yet created has no snapshots, so no refs.
        (None, Base::Create(m)) => Ok((m, None, empty)),
        (None, Base::Existing(_)) => Err(Error::Internal("table vanished".into())),
    }
}

/// The commit's own manifests a merge took in that were stored before the attempt (held ones
/// never are): nothing will list them once it lands.
fn unlisted(staged: &Staged, listed: &[ManifestFile]) -> Prepared {
    staged
        .manifests
        .iter()
        .filter(|m| !listed.iter().any(|l| l.manifest_path == m.manifest_path))
        .filter(|m| !staged.held.iter().any(|(p, _)| *p == m.manifest_path))
        .map(|m| m.manifest_path.clone())
        .collect()
}

pub(super) async fn build_attempt(
    staged: &Staged,
    current: Option<&LoadedTable>,
    files: &Files,
    attempt: u32,
    validated: super::validate::Validated,
    writes_metadata: bool,
) -> std::result::Result<Built, CommitError> {
    let super::validate::Validated {
        carry,
        record: validated_record,
        ..
    } = validated;
    let carry = &carry;
    let empty = Refs::new();
    let (base_arc, base_location, base_refs) = attempt_base(staged, current, &empty)?;
    let base_md = base_arc.as_ref();
    super::writable_version(base_md, &staged.ident.to_string())?;
    // What the manifests this attempt writes (filtered, merged, carried deletes) are written
    // against: the table with the commit's own schema and spec changes, as its new files were.
    // A manifest declares the schema its entries are written in, and a commit that widens a
    // column lists new files with wide bounds (validation made sure the table's schema is still
    // the one the changes were planned on). The same `Arc` when the commit changes no metadata.
    let write_md = staged.changes.apply(base_arc)?;
    let parent = base_md.current_snapshot().cloned();
    // What the table's next sequence number is once it is v2 (a v1 table's is always 0, and our
    // commit upgrades it).
    let sequence_number = base_md.last_sequence_number() + 1;
    let mut written = Prepared::default();
    let file_io = files.io();

    // What the snapshot holds besides our prepared manifests.
    let parent_manifests = match &parent {
        Some(p) => files.manifest_list(base_md, p).await?.as_ref().clone(),
        None => Vec::new(),
    };
    let mut added = staged.added.clone();
    let listed = attempt_manifests(
        staged,
        (base_md, &write_md),
        files,
        &parent_manifests,
        carry,
        (&mut written, &mut added),
    )
    .await;
    let (listed, uploads) = match listed {
        Ok(l) => l,
        Err(e) => {
            written.abandon(file_io).await;
            return Err(e);
        }
    };
    written.extend(uploads.iter().map(|(p, _)| p.clone()));
    let unlisted = unlisted(staged, &listed);

    let list_path = format!(
        "{}/metadata/snap-{}-{}-{}.avro",
        base_md.location(),
        staged.snapshot_id,
        attempt,
        uuid::Uuid::new_v4()
    );
    written.push(list_path.clone());
    let mut entries = list_entries(listed, sequence_number);
    // Row ids (v3): recomputed on every attempt from the table's `next-row-id` as it is then.
    let row_range = match lineage::row_range(base_md, &mut entries) {
        Ok(r) => r,
        Err(e) => {
            written.abandon(file_io).await;
            return Err(e.into());
        }
    };
    let snapshot = new_snapshot(
        staged,
        base_md,
        &added,
        sequence_number,
        &list_path,
        row_range,
    );
    // The manifest list needs only the entries: it is written by a task of its own while the
    // metadata is built and written (the local filesystem's writes and fsyncs block the thread
    // they run on; on S3 the two uploads overlap either way).
    let list_written = write_list(file_io, &list_path, &entries, &snapshot).await;
    let base = (base_md, base_location.as_deref(), base_refs);
    let built = build_metadata(staged, base, snapshot, validated_record);
    let (metadata, refs, location, requirements, updates) = match built {
        Ok(b) => b,
        Err(e) => {
            // The list is deleted once its write is over, not while it may still be written.
            let _ = list_written.await;
            written.abandon(file_io).await;
            return Err(e.into());
        }
    };
    // The manifest list and metadata.json in flight together: the metadata names the list by
    // its path, and nothing can read either before the swap makes the metadata current. A
    // catalog that writes its metadata itself gets the list alone.
    let write_metadata = async {
        if writes_metadata {
            Ok(())
        } else {
            crate::files::metadata::write(file_io, &location, &metadata, refs.as_ref()).await
        }
    };
    let (list, meta, stored) = tokio::join!(
        list_written,
        write_metadata,
        manifests::upload(files, uploads)
    );
    if !writes_metadata {
        written.push(location.clone());
    }
    let result = match list.and(meta).and(stored) {
        Ok(()) => failpoint("after-manifest-list").await,
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        written.abandon(file_io).await;
        return Err(e.into());
    }
    files.remember_manifest_list(&list_path, entries);
    Ok(Built {
        metadata,
        refs,
        location,
        requirements,
        updates,
        written,
        unlisted,
    })
}

/// The attempt's manifest list as a read of it returns it: every manifest this attempt wrote
/// (ours, and those it filtered or merged) gets this attempt's sequence number, as the writer
/// assigns it. A cached entry left unassigned would make the next commit's writer refuse the
/// list.
fn list_entries(listed: Vec<ManifestFile>, sequence_number: i64) -> Vec<ManifestFile> {
    listed
        .into_iter()
        .map(|mut m| {
            if m.sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
                m.sequence_number = sequence_number;
            }
            if m.min_sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
                m.min_sequence_number = sequence_number;
            }
            m
        })
        .collect()
}

/// The attempt's snapshot on the current one of `base_md`.
fn new_snapshot(
    staged: &Staged,
    base_md: &TableMetadata,
    added: &super::Added,
    sequence_number: i64,
    list_path: &str,
    row_range: Option<(u64, u64)>,
) -> Snapshot {
    let parent = base_md.current_snapshot();
    let mut props: HashMap<String, String> = summary::summarize(parent.map(|p| p.summary()), added);
    props.extend(staged.summary.iter().map(|(k, v)| (k.clone(), v.clone())));
    let added_data = staged.added.data_files > 0;
    let added_deletes = staged.added.delete_files > 0;
    let builder = Snapshot::builder()
        .with_snapshot_id(staged.snapshot_id)
        .with_parent_snapshot_id(parent.map(|p| p.snapshot_id()))
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(
            chrono::Utc::now()
                .timestamp_millis()
                .max(base_md.last_updated_ms()),
        )
        .with_manifest_list(list_path.to_string())
        .with_schema_id(staged.schema_id)
        .with_summary(Summary {
            operation: staged.change.operation(added_deletes, added_data),
            additional_properties: props,
        });
    match row_range {
        Some((first_row_id, added_rows)) => {
            builder.with_row_range(first_row_id, added_rows).build()
        }
        None => builder.build(),
    }
}

/// Starts writing the manifest list of `snapshot` on a task of its own; the future resolves
/// when it is written.
async fn write_list(
    file_io: &FileIO,
    list_path: &str,
    entries: &[ManifestFile],
    snapshot: &Snapshot,
) -> impl Future<Output = Result<()>> + use<> {
    let (file_io, list_path, entries) = (file_io.clone(), list_path.to_string(), entries.to_vec());
    let (snapshot_id, parent_id, sequence_number, first_row_id) = (
        snapshot.snapshot_id(),
        snapshot.parent_snapshot_id(),
        snapshot.sequence_number(),
        snapshot.first_row_id(),
    );
    let task = crate::process::spawn_beside(async move {
        let out = file_io.new_output(&list_path)?.writer().await?;
        // Every data manifest has its range already (`lineage::assign`): the v3 writer checks.
        let mut writer = match first_row_id {
            Some(first) => {
                ManifestListWriter::v3(out, snapshot_id, parent_id, sequence_number, Some(first))
            }
            None => ManifestListWriter::v2(out, snapshot_id, parent_id, sequence_number),
        };
        writer.add_manifests(entries.into_iter())?;
        writer.close().await?;
        Ok::<_, Error>(())
    })
    .await;
    async move {
        task.await
            .map_err(|e| Error::Internal(format!("writing the manifest list: {e}")))?
    }
}

/// The table's next metadata: the staged changes, the format upgrade a v1 table gets, the new
/// snapshot as `main`, the applied-file record; with its refs, location, and the commit as
/// requirements and updates (a create's updates make the table from nothing).
type Next = (
    TableMetadata,
    Option<Refs>,
    String,
    Vec<TableRequirement>,
    Vec<TableUpdate>,
);

fn build_metadata(
    staged: &Staged,
    (base_md, base_location, base_refs): (&TableMetadata, Option<&str>, &Refs),
    snapshot: Snapshot,
    validated_record: Option<std::sync::Arc<AppliedRecord>>,
) -> Result<Next> {
    let mut builder = staged.changes.apply_to(
        base_md
            .clone()
            .into_builder(base_location.map(str::to_string)),
    )?;
    if base_md.format_version() == FormatVersion::V1 {
        builder = builder.upgrade_format_version(FormatVersion::V2)?;
    }
    let mut builder = builder.set_branch_snapshot(snapshot, MAIN_BRANCH)?;
    if let Some(update) = &staged.record {
        // Recomputed from the table as it is: validation made sure it still holds what the
        // input was planned against, and read it (unless it had no inputs to check).
        let now = match validated_record {
            Some(r) => r,
            None => AppliedRecord::of_table(base_md)?.unwrap_or_default(),
        };
        let next = match &update.truncate {
            Some(t) => now.truncated(t),
            None => now.applied_with(
                &update.inputs,
                &update.carried,
                update.reload,
                update.change_seq.clone(),
                update.window,
                chrono::Utc::now().timestamp_millis(),
            ),
        };
        builder = builder.set_properties([(PROPERTY.to_string(), next.encode()?)].into())?;
    }
    let build = builder.build()?;
    let metadata = build.metadata;
    let refs = crate::files::metadata::refs_after(base_refs, &build.changes, &metadata);
    // Only a table not yet created has no metadata location.
    let existing = base_location.is_some().then_some(base_md);
    let requirements = super::request::requirements(existing, &staged.changes);
    let updates = match existing {
        Some(_) => build.changes,
        None => {
            let mut u = super::request::creation_updates(base_md);
            u.extend(build.changes);
            u
        }
    };
    let location = match base_location {
        Some(l) => MetadataLocation::from_str(l)?
            .with_next_version()
            .with_new_metadata(&metadata),
        None => MetadataLocation::new_with_metadata(metadata.location(), &metadata),
    }
    .to_string();
    Ok((metadata, refs, location, requirements, updates))
}
