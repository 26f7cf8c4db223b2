//! One attempt's files: the manifest list (what the snapshot holds), the snapshot with its
//! summary, and the new metadata.json with the exactly-once record, built on the table as it
//! is now.

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile,
    ManifestListWriter, ManifestWriterBuilder, Snapshot, Summary, TableMetadata,
    UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::{MetadataLocation, TableRequirement, TableUpdate};

use super::record::{AppliedRecord, PROPERTY};
use super::{Base, Change, Staged, failpoint, summary};
use crate::error::{Error, Result};
use crate::files::metadata::Refs;
use crate::files::prepared::Prepared;
use crate::files::{Files, Fill};
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
    /// Manifest list, manifests written for this attempt only (a reload's removals), and the
    /// metadata file if we wrote it.
    written: Prepared,
}

impl Built {
    pub(super) async fn delete(&self, file_io: &FileIO) {
        self.written.abandon(file_io).await;
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

/// The parent's manifests this attempt's snapshot keeps, plus the manifests its change writes
/// besides ours: a rewrite's carried deletes, a reload's removals (their files recorded in
/// `written`, their counts in `added`).
async fn carried_manifests(
    staged: &Staged,
    base_md: &TableMetadata,
    files: &Files,
    parent_manifests: Vec<ManifestFile>,
    carry: &super::validate::CarriedDeletes,
    (written, added): (&mut Prepared, &mut super::Added),
) -> Result<Vec<ManifestFile>> {
    Ok(match &staged.change {
        Change::RowDelta { .. } | Change::Append => parent_manifests,
        Change::Rewrite {
            replaced_manifests,
            row_map,
            ..
        } => {
            let mut kept: Vec<ManifestFile> = parent_manifests
                .into_iter()
                .filter(|m| !replaced_manifests.contains(&m.manifest_path))
                .collect();
            if let (Some(map), false) = (row_map, carry.is_empty()) {
                let c = super::carry::write(files, base_md, staged.snapshot_id, map, carry).await?;
                written.extend(c.written);
                for f in &c.files {
                    added.delete_files += 1;
                    added.position_deletes += f.record_count();
                    added.delete_files_size += f.file_size_in_bytes();
                }
                kept.extend(c.manifests);
            }
            kept
        }
        Change::Reload => {
            let removal = remove_files(files, base_md, staged.snapshot_id, |_| true).await?;
            written.extend(removal.manifests.iter().map(|m| m.manifest_path.clone()));
            added.count_removed(&removal.removed);
            removal.manifests
        }
    })
}

/// Builds on `current` as `validated` found it. The metadata is copied once, into the builder:
/// everything else reads it in place (a copy is a pass over every snapshot of the table).
pub(super) async fn build_attempt(
    staged: &Staged,
    current: Option<&LoadedTable>,
    files: &Files,
    attempt: u32,
    validated: super::validate::Validated,
    writes_metadata: bool,
) -> Result<Built> {
    let super::validate::Validated {
        carry,
        record: validated_record,
        ..
    } = validated;
    let carry = &carry;
    let empty = Refs::new();
    let (base_md, base_location, base_refs): (&TableMetadata, _, &Refs) =
        match (current, &staged.base) {
            (Some(t), _) => (
                t.metadata.as_ref(),
                Some(t.pointer.metadata_location.clone()),
                t.refs.as_ref(),
            ),
            // A table not yet created has no snapshots, so no refs.
            (None, Base::Create(m)) => (m.as_ref(), None, &empty),
            (None, Base::Existing(_)) => return Err(Error::Internal("table vanished".into())),
        };
    super::writable_version(base_md, &staged.ident.to_string())?;
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
    let carried = carried_manifests(
        staged,
        base_md,
        files,
        parent_manifests,
        carry,
        (&mut written, &mut added),
    )
    .await?;

    let list_path = format!(
        "{}/metadata/snap-{}-{}-{}.avro",
        base_md.location(),
        staged.snapshot_id,
        attempt,
        uuid::Uuid::new_v4()
    );
    written.push(list_path.clone());
    let entries = list_entries(staged, carried, sequence_number);
    let snapshot = new_snapshot(staged, base_md, &added, sequence_number, &list_path);
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
            return Err(e);
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
    let (list, meta) = tokio::join!(list_written, write_metadata);
    if !writes_metadata {
        written.push(location.clone());
    }
    let result = match list.and(meta) {
        Ok(()) => failpoint("after-manifest-list").await,
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        written.abandon(file_io).await;
        return Err(e);
    }
    files.remember_manifest_list(&list_path, entries);
    Ok(Built {
        metadata,
        refs,
        location,
        requirements,
        updates,
        written,
    })
}

/// The attempt's manifest list as a read of it returns it: every manifest this attempt wrote
/// (ours, and those a reload or rewrite wrote to remove files) gets this attempt's sequence
/// number, as the writer assigns it. A cached entry left unassigned would make the next
/// commit's writer refuse the list.
fn list_entries(
    staged: &Staged,
    carried: Vec<ManifestFile>,
    sequence_number: i64,
) -> Vec<ManifestFile> {
    staged
        .manifests
        .iter()
        .cloned()
        .chain(carried)
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
) -> Snapshot {
    let parent = base_md.current_snapshot();
    let mut props: HashMap<String, String> = summary::summarize(parent.map(|p| p.summary()), added);
    props.extend(staged.summary.iter().map(|(k, v)| (k.clone(), v.clone())));
    let added_data = staged.added.data_files > 0;
    let added_deletes = staged.added.delete_files > 0;
    Snapshot::builder()
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
        })
        .build()
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
    let (snapshot_id, parent_id, sequence_number) = (
        snapshot.snapshot_id(),
        snapshot.parent_snapshot_id(),
        snapshot.sequence_number(),
    );
    let task = crate::process::spawn_beside(async move {
        let mut writer = ManifestListWriter::v2(
            file_io.new_output(&list_path)?.writer().await?,
            snapshot_id,
            parent_id,
            sequence_number,
        );
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

/// Manifests that replace the current snapshot's manifests holding removed files.
pub(crate) struct Removal {
    /// The rewritten manifests (removed files as DELETED entries, the rest EXISTING).
    pub manifests: Vec<ManifestFile>,
    /// Paths of the manifests they replace.
    pub replaced: BTreeSet<String>,
    pub removed: Vec<(DataContentType, DataFile)>,
}

/// Rewrites every manifest of the current snapshot that holds a live file `remove` selects:
/// those become DELETED entries (so snapshot diffs and expiry see them go), the rest stay as
/// EXISTING entries with their snapshot and sequence numbers. Manifests left with no live
/// entry are dropped.
pub(crate) async fn remove_files(
    files: &Files,
    md: &TableMetadata,
    snapshot_id: i64,
    remove: impl Fn(&DataFile) -> bool,
) -> Result<Removal> {
    let mut out = Removal {
        manifests: Vec::new(),
        replaced: BTreeSet::new(),
        removed: Vec::new(),
    };
    let Some(snapshot) = md.current_snapshot() else {
        return Ok(out);
    };
    let list = files.manifest_list(md, snapshot).await?;
    for (m, manifest) in list.iter().zip(files.manifests(&list, Fill::Pass).await?) {
        let touched = manifest
            .entries()
            .iter()
            .any(|e| e.is_alive() && remove(e.data_file()));
        if !touched {
            continue;
        }
        let spec = md
            .partition_spec_by_id(m.partition_spec_id)
            .ok_or_else(|| {
                Error::Table(format!(
                    "partition spec {} not in table metadata",
                    m.partition_spec_id
                ))
            })?;
        let path = format!(
            "{}/metadata/{}-m{}.avro",
            md.location(),
            uuid::Uuid::new_v4(),
            out.manifests.len()
        );
        let builder = ManifestWriterBuilder::new(
            files.io().new_output(&path)?,
            Some(snapshot_id),
            md.current_schema().clone(),
            spec.as_ref().clone(),
        );
        let mut w = match m.content {
            ManifestContentType::Data => builder.build_v2_data(),
            ManifestContentType::Deletes => builder.build_v2_deletes(),
        };
        for e in manifest.entries() {
            if !e.is_alive() {
                continue;
            }
            let (Some(seq), Some(file_seq), Some(sid)) =
                (e.sequence_number(), e.file_sequence_number, e.snapshot_id())
            else {
                return Err(Error::Table(format!(
                    "manifest entry {} lacks sequence numbers",
                    e.file_path()
                )));
            };
            let f = e.data_file().clone();
            if remove(e.data_file()) {
                out.removed.push((f.content_type(), f.clone()));
                w.add_delete_file(f, seq, Some(file_seq))?;
            } else {
                w.add_existing_file(f, sid, seq, Some(file_seq))?;
            }
        }
        out.manifests.push(w.write_manifest_file().await?);
        out.replaced.insert(m.manifest_path.clone());
    }
    Ok(out)
}
