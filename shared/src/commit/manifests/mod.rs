//! The manifests a snapshot lists, as Iceberg Java's merging producer keeps them (what every
//! reader of the table pays for on every scan plan):
//!
//! 1. **Its own changes**, written once per commit ([`write_manifests`]): ADDED entries with the
//!    sequence number left for the manifest list to assign.
//! 2. **The parent's manifests, filtered** ([`filter`]) on every attempt against the table as it
//!    is then: a manifest holding a file the commit removes is rewritten (the file as a DELETED
//!    entry of this snapshot, the rest EXISTING, earlier snapshots' DELETED entries dropped); a
//!    manifest with no live (ADDED or EXISTING) entry is left out of the list, so what a
//!    compaction removed is listed by the snapshot that removed it and by no later one.
//! 3. **Merged** ([`merge`]) by the table's `commit.manifest-merge.enabled`,
//!    `commit.manifest.min-count-to-merge` and `commit.manifest.target-size-bytes` (Java's
//!    defaults when unset: on, 100, 8 MiB): per content and partition spec, manifests are
//!    packed from the end of the list into target-size bins; a bin of several is rewritten as
//!    one, except the bin holding the commit's new manifest while it has fewer than the minimum
//!    count (`ManifestMergeManager`). A merged manifest keeps this snapshot's ADDED and DELETED
//!    entries as they are and every other live entry as EXISTING.
//!
//! Manifests this process writes are remembered as written ([`Files::remember_manifest`]), so
//! a warm process never reads back what it merged or filtered. An attempt's filtered and merged
//! manifests are encoded in memory and handed back as [`Upload`]s: the attempt uploads them
//! together with its manifest list and metadata.json, so filtering and merging add no round
//! trip to a commit on object storage.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::future::Either;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataContentType, DataFile, Datum, FormatVersion, Manifest, ManifestContentType, ManifestEntry,
    ManifestFile, ManifestMetadata, ManifestStatus, ManifestWriter, ManifestWriterBuilder,
    PrimitiveType, SchemaRef, StructType, TableMetadata, UNASSIGNED_SEQUENCE_NUMBER,
};
use tracing::warn;

use super::encode;
use crate::error::{Error, Result};
use crate::files::lineage;
use crate::files::{Files, Fill};
use crate::types::{conform_partition, promote_datum};

/// Table properties (and Iceberg Java's defaults) for merging manifests on commit.
pub(crate) const MERGE_ENABLED: &str = "commit.manifest-merge.enabled";
pub(crate) const MIN_COUNT_TO_MERGE: &str = "commit.manifest.min-count-to-merge";
pub(crate) const TARGET_SIZE_BYTES: &str = "commit.manifest.target-size-bytes";
const DEFAULT_MIN_COUNT_TO_MERGE: usize = 100;
const DEFAULT_TARGET_SIZE_BYTES: u64 = 8 << 20;
/// What tables dms2iceberg creates are given (a table's own setting, or `properties` in its
/// configuration, wins): each commit merges the bin its new manifest is in, so an
/// unpartitioned table lists one data and one delete manifest below the target size.
pub(crate) const OUR_MIN_COUNT_TO_MERGE: &str = "2";
pub(crate) const OUR_TARGET_SIZE_BYTES: &str = "1048576";

/// How a commit merges manifests, from the table's properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergePolicy {
    pub enabled: bool,
    pub min_count: usize,
    pub target_bytes: u64,
}

impl MergePolicy {
    pub(crate) fn of(md: &TableMetadata) -> MergePolicy {
        let p = md.properties();
        MergePolicy {
            enabled: p.get(MERGE_ENABLED).is_none_or(|v| v != "false"),
            min_count: p
                .get(MIN_COUNT_TO_MERGE)
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MIN_COUNT_TO_MERGE),
            target_bytes: p
                .get(TARGET_SIZE_BYTES)
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .unwrap_or(DEFAULT_TARGET_SIZE_BYTES),
        }
    }
}

/// A manifest encoded, not yet stored: its path and bytes.
pub(crate) type Upload = (String, bytes::Bytes);

/// Stores `uploads`, several at a time.
pub(crate) async fn upload(files: &Files, uploads: Vec<Upload>) -> Result<()> {
    futures::stream::iter(uploads)
        .map(|(path, bytes)| async move {
            files.io().new_output(&path)?.write(bytes).await?;
            Ok::<_, Error>(())
        })
        .buffer_unordered(crate::files::parquet::WRITE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// One manifest being written: its entries as written (what [`Files::remember_manifest`]
/// keeps), encoded at [`Out::finish`] into memory under its real path ([`encode`]; iceberg-rust's
/// writer where that declines), the bytes handed back to store.
///
/// A manifest declares in its header the schema its entries' bounds and partition values are
/// written with, and readers decode them by it (iceberg-rust strictly: an 8-byte bound under an
/// `int` header fails the whole manifest). It is the current schema of the metadata the
/// manifest is written against (`md`: for a commit, the table with the commit's own schema
/// change applied), and every entry is written in it: one listed before a column was widened
/// has its bounds and partition values converted to the wider type ([`Out::conform`]).
struct Out {
    path: String,
    snapshot_id: i64,
    spec: iceberg::spec::PartitionSpecRef,
    /// The schema the header declares.
    schema: SchemaRef,
    /// The spec's partition type under `schema`.
    partition_type: StructType,
    content: ManifestContentType,
    entries: Vec<ManifestEntry>,
}

impl Out {
    fn new(
        md: &TableMetadata,
        snapshot_id: i64,
        spec_id: i32,
        content: ManifestContentType,
    ) -> Result<Out> {
        let spec = md.partition_spec_by_id(spec_id).ok_or_else(|| {
            Error::Table(format!(
                "partition spec {spec_id} is not in the table metadata"
            ))
        })?;
        let path = format!(
            "{}/metadata/{}-m0.avro",
            md.location(),
            uuid::Uuid::new_v4()
        );
        let schema = md.current_schema().clone();
        let partition_type = spec.partition_type(&schema)?;
        Ok(Out {
            path,
            snapshot_id,
            spec: spec.clone(),
            schema,
            partition_type,
            content,
            entries: Vec::new(),
        })
    }

    /// The type the header gives column `id`, if it is a column of the schema (a bound may be
    /// of a reserved column, such as a position delete's `file_path`, or of one since dropped).
    fn column_type(&self, id: i32) -> Option<&PrimitiveType> {
        self.schema.field_by_id(id)?.field_type.as_primitive_type()
    }

    /// `f` as this manifest's schema types it: the bounds and partition values of a column
    /// widened since `f` was listed (int → long, float → double, decimal precision) converted
    /// to the wider type, as a reader of the old bytes would read them. Java keeps the old
    /// bytes under the new header, which readers must then tell by their length; written in
    /// the header's type they decode the same everywhere, iceberg-rust included, and a later
    /// rewrite reads them back as the type they are. A bound no promotion explains (another
    /// writer's) is left out: a missing bound only costs pruning. `f` itself when nothing
    /// changes, as for every entry of a table that never widened a column.
    fn conform(&self, f: DataFile) -> DataFile {
        let bound_fits =
            |(id, d): (&i32, &Datum)| self.column_type(*id).is_none_or(|t| d.data_type() == t);
        let partition = conform_partition(f.partition(), &self.partition_type);
        if partition.is_none()
            && f.lower_bounds().iter().all(bound_fits)
            && f.upper_bounds().iter().all(bound_fits)
        {
            return f;
        }
        let conform_bounds = |m: &HashMap<i32, Datum>| -> HashMap<i32, Datum> {
            m.iter()
                .filter_map(|(id, d)| match self.column_type(*id) {
                    None => Some((*id, d.clone())),
                    Some(t) => match promote_datum(d, t) {
                        Some(p) => Some((*id, p)),
                        None => {
                            warn!(file = f.file_path(), field = id, bound = %d.data_type(), column = %t, "a bound of another type than its column: left out of the rewritten manifest entry");
                            None
                        }
                    },
                })
                .collect()
        };
        let mut b = lineage::builder_of(&f, self.spec.spec_id());
        b.lower_bounds(conform_bounds(f.lower_bounds()))
            .upper_bounds(conform_bounds(f.upper_bounds()));
        if let Some(p) = partition {
            b.partition(p);
        }
        match b.build() {
            Ok(conformed) => conformed,
            // Every field came from a built file: unreachable, but never worth a failed commit.
            Err(e) => {
                warn!(file = f.file_path(), error = %e, "could not rebuild a manifest entry in the widened types; kept as it was");
                f
            }
        }
    }

    /// iceberg-rust's writer of this manifest, into `memory`.
    fn writer(&self, md: &TableMetadata, memory: &iceberg::io::FileIO) -> Result<ManifestWriter> {
        let builder = ManifestWriterBuilder::new(
            memory.new_output(&self.path)?,
            Some(self.snapshot_id),
            self.schema.clone(),
            self.spec.as_ref().clone(),
        );
        Ok(match (self.content, lineage::tracks(md)) {
            (ManifestContentType::Data, false) => builder.build_v2_data(),
            (ManifestContentType::Deletes, false) => builder.build_v2_deletes(),
            (ManifestContentType::Data, true) => builder.build_v3_data(),
            (ManifestContentType::Deletes, true) => builder.build_v3_deletes(),
        })
    }

    /// A file this snapshot adds: `sequence_number` unassigned (the list gives the snapshot's)
    /// or the data sequence number a rewrite keeps.
    fn added(&mut self, snapshot_id: i64, f: DataFile, sequence_number: i64) {
        let f = self.conform(f);
        self.entries.push(
            ManifestEntry::builder()
                .status(ManifestStatus::Added)
                .snapshot_id(snapshot_id)
                .sequence_number_opt((sequence_number >= 0).then_some(sequence_number))
                .data_file(f)
                .build(),
        );
    }

    /// A live entry of an earlier snapshot, carried as EXISTING with its numbers and the
    /// `first_row_id` it inherited.
    fn existing(&mut self, e: &ManifestEntry, first_row_id: Option<i64>) -> Result<()> {
        let (sid, seq, file_seq) = numbers(e)?;
        let f = lineage::with_first_row_id(e.data_file(), self.spec.spec_id(), first_row_id)?;
        let f = self.conform(f);
        self.entries.push(
            ManifestEntry::builder()
                .status(ManifestStatus::Existing)
                .snapshot_id(sid)
                .sequence_number(seq)
                .file_sequence_number_opt(file_seq)
                .data_file(f)
                .build(),
        );
        Ok(())
    }

    /// A file this snapshot removes (`e` as it was live), or removed (`e` already DELETED by it).
    /// `first_row_id`: what it inherited, as for [`Out::existing`].
    fn deleted(
        &mut self,
        snapshot_id: i64,
        e: &ManifestEntry,
        first_row_id: Option<i64>,
    ) -> Result<()> {
        let (_, seq, file_seq) = numbers(e)?;
        let f = lineage::with_first_row_id(e.data_file(), self.spec.spec_id(), first_row_id)?;
        let f = self.conform(f);
        self.entries.push(
            ManifestEntry::builder()
                .status(ManifestStatus::Deleted)
                .snapshot_id(snapshot_id)
                .sequence_number(seq)
                .file_sequence_number_opt(file_seq)
                .data_file(f)
                .build(),
        );
        Ok(())
    }

    /// The manifest's list entry and its bytes, remembered as written.
    async fn finish(self, files: &Files, md: &TableMetadata) -> Result<(ManifestFile, Upload)> {
        let memory = iceberg::io::FileIO::new_with_memory();
        // The writer with no entries: the header and the list entry's constant fields.
        let template = self.writer(md, &memory)?.write_manifest_file().await?;
        let header = memory.new_input(&self.path)?.read().await?;
        let encoded = encode::manifest(
            &header,
            template,
            &self.partition_type,
            self.content,
            &self.entries,
        )?;
        let (written, bytes) = match encoded {
            Some(done) => done,
            None => self.write_with_iceberg(md, &memory).await?,
        };
        let schema = self.schema.clone();
        let metadata = ManifestMetadata::builder()
            .schema_id(schema.schema_id())
            .schema(schema)
            .partition_spec(self.spec.as_ref().clone())
            .format_version(md.format_version().max(FormatVersion::V2))
            .content(self.content)
            .build();
        files.remember_manifest(&self.path, Manifest::new(metadata, self.entries));
        Ok((written, (self.path, bytes)))
    }

    /// The manifest as iceberg-rust's writer encodes it: for partition values [`encode`] does
    /// not write.
    async fn write_with_iceberg(
        &self,
        md: &TableMetadata,
        memory: &iceberg::io::FileIO,
    ) -> Result<(ManifestFile, bytes::Bytes)> {
        let mut w = self.writer(md, memory)?;
        for e in &self.entries {
            let f = e.data_file().clone();
            if e.status() == ManifestStatus::Added {
                w.add_file(f, e.sequence_number().unwrap_or(UNASSIGNED_SEQUENCE_NUMBER))?;
                continue;
            }
            let (sid, seq, file_seq) = numbers(e)?;
            match e.status() {
                ManifestStatus::Existing => w.add_existing_file(f, sid, seq, file_seq)?,
                _ => w.add_delete_file(f, seq, file_seq)?,
            }
        }
        let written = w.write_manifest_file().await?;
        let bytes = memory.new_input(&self.path)?.read().await?;
        Ok((written, bytes))
    }
}

/// Snapshot id, data and file sequence numbers of a live or deleted entry as read (inherited).
fn numbers(e: &ManifestEntry) -> Result<(i64, i64, Option<i64>)> {
    match (e.snapshot_id(), e.sequence_number()) {
        (Some(sid), Some(seq)) if seq >= 0 => Ok((sid, seq, e.file_sequence_number.or(Some(seq)))),
        _ => Err(Error::Table(format!(
            "manifest entry {} lacks its snapshot id or sequence number",
            e.file_path()
        ))),
    }
}

/// Manifests encoded for a commit, not stored: the attempt whose manifest list names one stores
/// it with the list and metadata.json ([`super::Staged::held`]); one a merge takes in is never
/// stored.
#[derive(Debug, Default)]
pub(crate) struct Encoded {
    pub manifests: Vec<ManifestFile>,
    pub held: Vec<Upload>,
}

impl Encoded {
    pub(crate) fn extend(&mut self, other: Encoded) {
        self.manifests.extend(other.manifests);
        self.held.extend(other.held);
    }
}

/// Encodes the manifests for `data` and `deletes` (one per partition spec and content), as
/// [`Encoded`]. Data sequence numbers are left unassigned (the manifest list gives the
/// snapshot's), except for rewritten data, which keeps the sequence number of the snapshot it
/// was read from (`data_sequence_number`).
pub(crate) async fn write_manifests(
    files: &Files,
    metadata: &TableMetadata,
    snapshot_id: i64,
    data: &[(i32, DataFile)],
    deletes: &[(i32, DataFile)],
    data_sequence_number: Option<i64>,
) -> Result<Encoded> {
    let mut jobs: BTreeMap<(bool, i32), Vec<DataFile>> = BTreeMap::new();
    for (is_delete, of_kind) in [(false, data), (true, deletes)] {
        for (spec, f) in of_kind {
            jobs.entry((is_delete, *spec)).or_default().push(f.clone());
        }
    }
    let jobs: Vec<((bool, i32), Vec<DataFile>)> = jobs.into_iter().collect();
    // By index: a closure over borrowed items trips rustc's higher-ranked Send check when the
    // caller's future is boxed as `Send`.
    let jobs_ref = &jobs;
    futures::stream::iter(0..jobs.len())
        .map(|n| async move {
            let ((is_delete, spec_id), of_kind) = &jobs_ref[n];
            let content = match is_delete {
                true => ManifestContentType::Deletes,
                false => ManifestContentType::Data,
            };
            let seq = match (is_delete, data_sequence_number) {
                (false, Some(s)) => s,
                _ => UNASSIGNED_SEQUENCE_NUMBER,
            };
            let mut out = Out::new(metadata, snapshot_id, *spec_id, content)?;
            for f in of_kind {
                out.added(snapshot_id, f.clone(), seq);
            }
            out.finish(files, metadata).await
        })
        .buffered(crate::files::parquet::WRITE_CONCURRENCY)
        .try_fold(Encoded::default(), |mut e, (m, upload)| async move {
            e.manifests.push(m);
            e.held.push(upload);
            Ok(e)
        })
        .await
}

/// The parent's manifests as this snapshot keeps them.
#[derive(Debug, Default)]
pub(crate) struct Filtered {
    /// Manifests with a live entry, in the parent's order: unchanged, or rewritten without the
    /// removed files (which they list as DELETED).
    pub manifests: Vec<ManifestFile>,
    /// Manifests this attempt wrote, to store.
    pub written: Vec<Upload>,
    /// The live files the commit removed.
    pub removed: Vec<(DataContentType, DataFile)>,
}

/// Which live files a commit removes: `data` and `deletes` say which contents to look at (a
/// manifest of another content is not read), `remove` picks the files.
pub(crate) struct Removing<'a> {
    pub data: bool,
    pub deletes: bool,
    pub remove: Box<dyn Fn(&DataFile) -> bool + Send + Sync + 'a>,
}

impl Removing<'_> {
    pub(crate) fn nothing() -> Removing<'static> {
        Removing {
            data: false,
            deletes: false,
            remove: Box::new(|_| false),
        }
    }

    fn looks_at(&self, m: &ManifestFile) -> bool {
        match m.content {
            ManifestContentType::Data => self.data,
            ManifestContentType::Deletes => self.deletes,
        }
    }
}

/// Whether the manifest may list a live file. Counts a writer did not record: it may.
fn has_live_entries(m: &ManifestFile) -> bool {
    match (m.added_files_count, m.existing_files_count) {
        (Some(a), Some(e)) => a + e > 0,
        _ => true,
    }
}

/// The parent's manifests without those that list no live file, and with the files `removing`
/// picks removed (see the module's point 2).
pub(crate) async fn filter(
    files: &Files,
    md: &TableMetadata,
    parent: &[ManifestFile],
    snapshot_id: i64,
    removing: &Removing<'_>,
) -> Result<Filtered> {
    let live: Vec<&ManifestFile> = parent.iter().filter(|m| has_live_entries(m)).collect();
    // Written again in `md`'s schema though nothing is removed from them: a manifest this
    // process could read only with its header widened (see `Files::load_widened`), and one
    // whose partition values are of a partition source's type before it was widened.
    let widened = widened_partition_specs(md);
    let rewrite = |m: &ManifestFile| {
        files.was_widened(&m.manifest_path) || widened.contains_key(&m.partition_spec_id)
    };
    let examined: Vec<ManifestFile> = live
        .iter()
        .filter(|m| removing.looks_at(m) || rewrite(m))
        .map(|m| (*m).clone())
        .collect();
    let read = files.manifests(&examined, Fill::Keep).await?;
    let mut touched: BTreeMap<&str, &Manifest> = BTreeMap::new();
    for (m, manifest) in examined.iter().zip(&read) {
        let holds = manifest
            .entries()
            .iter()
            .any(|e| e.is_alive() && (removing.remove)(e.data_file()));
        let stale = widened.get(&m.partition_spec_id).is_some_and(|now| {
            let spec = &manifest.metadata().partition_spec;
            spec.partition_type(&manifest.metadata().schema)
                .ok()
                .as_ref()
                != Some(now)
        });
        if holds || stale || files.was_widened(&m.manifest_path) {
            touched.insert(m.manifest_path.as_str(), manifest.as_ref());
        }
    }
    let mut out = Filtered::default();
    // In the parent's order, each manifest kept as it is or rewritten; the rewrites encoded at
    // once.
    let mut listed = Vec::with_capacity(live.len());
    for m in live {
        let Some(manifest) = touched.get(m.manifest_path.as_str()) else {
            listed.push(Either::Left(futures::future::ok((m.clone(), None))));
            continue;
        };
        let mut w = Out::new(md, snapshot_id, m.partition_spec_id, m.content)?;
        let row_ids = lineage::inherited(m, manifest.entries());
        for (e, row_id) in manifest.entries().iter().zip(row_ids) {
            if !e.is_alive() {
                continue;
            }
            if (removing.remove)(e.data_file()) {
                out.removed.push((e.content_type(), e.data_file().clone()));
                w.deleted(snapshot_id, e, row_id)?;
            } else {
                w.existing(e, row_id)?;
            }
        }
        listed.push(Either::Right(async move {
            let (m, upload) = w.finish(files, md).await?;
            Ok::<_, Error>((m, Some(upload)))
        }));
    }
    for (m, upload) in futures::future::try_join_all(listed).await? {
        out.manifests.push(m);
        out.written.extend(upload);
    }
    Ok(out)
}

/// The partition specs of `md` whose partition type an earlier schema gives otherwise (the
/// source of an identity or truncate field was widened), with their type now; empty for a
/// table that never widened a partition source.
///
/// Every manifest of such a spec that declares the earlier type is written again: iceberg-rust
/// matches a position delete to its data file by partition value, and a data file listed with
/// `Int(3)` would not meet a delete file listed with `Long(3)` (our scan and compaction would
/// bring deleted rows back). Rewritten, every manifest of the snapshot holds the wider type.
fn widened_partition_specs(md: &TableMetadata) -> BTreeMap<i32, StructType> {
    md.partition_specs_iter()
        .filter_map(|spec| {
            let now = spec.partition_type(md.current_schema()).ok()?;
            let before = md
                .schemas_iter()
                .filter_map(|s| spec.partition_type(s).ok())
                .any(|t| t != now);
            before.then(|| (spec.spec_id(), now))
        })
        .collect()
}

/// The entries of a manifest in the list being built: this snapshot's own as written (their
/// sequence numbers are not assigned yet, so they must not go through the cache of listed
/// manifests, which would keep them inherited from an unassigned list entry; a filtered one is
/// not even stored yet), any other as listed.
async fn entries_of(
    files: &Files,
    m: &ManifestFile,
    snapshot_id: i64,
    pending: &[Upload],
) -> Result<Manifest> {
    if m.added_snapshot_id == snapshot_id && m.sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
        if let Some(w) = files.written_manifest(&m.manifest_path) {
            return Ok(w.as_ref().clone());
        }
        if let Some((_, bytes)) = pending.iter().find(|(p, _)| *p == m.manifest_path) {
            return Ok(Manifest::parse_avro(bytes)?);
        }
        // Written as entries with unassigned numbers: read as they are.
        let bytes = files.io().new_input(&m.manifest_path)?.read().await?;
        return Ok(Manifest::parse_avro(&bytes)?);
    }
    Ok(files.manifest(m, Fill::Keep).await?.as_ref().clone())
}

/// Java's `ListPacker(target, lookback 1).packEnd`: from the end of the list back, each bin
/// takes items until the next would pass the target (an empty bin takes any item); bins and
/// their items in list order. The under-filled bin is the first, where new manifests are.
fn pack_end(weights: &[u64], target: u64) -> Vec<Vec<usize>> {
    let mut bins: Vec<Vec<usize>> = Vec::new();
    let (mut bin, mut weight) = (Vec::new(), 0u64);
    for i in (0..weights.len()).rev() {
        if !bin.is_empty() && weight.saturating_add(weights[i]) > target {
            bins.push(std::mem::take(&mut bin));
            weight = 0;
        }
        bin.push(i);
        weight = weight.saturating_add(weights[i]);
    }
    if !bin.is_empty() {
        bins.push(bin);
    }
    bins.reverse();
    for b in &mut bins {
        b.reverse();
    }
    bins
}

/// The snapshot's manifests: `ours` (this commit's new ones) then `kept` (the filtered
/// parent's), merged per content and spec by `policy` (see the module's point 3). Returns the
/// list and the manifests merged here, to store. `pending`: manifests of this attempt not
/// stored yet (filtered ones).
pub(crate) async fn merge(
    files: &Files,
    md: &TableMetadata,
    snapshot_id: i64,
    (ours, kept): (Vec<ManifestFile>, Vec<ManifestFile>),
    pending: &[Upload],
    policy: MergePolicy,
) -> Result<(Vec<ManifestFile>, Vec<Upload>)> {
    let all: Vec<ManifestFile> = ours.into_iter().chain(kept).collect();
    if !policy.enabled {
        return Ok((all, Vec::new()));
    }
    // The list in order, each entry a manifest kept as it is or a bin merged; the bins merged
    // at once.
    let mut listed = Vec::with_capacity(all.len());
    for content in [ManifestContentType::Data, ManifestContentType::Deletes] {
        let of_content: Vec<&ManifestFile> = all.iter().filter(|m| m.content == content).collect();
        let Some(first) = of_content.first().map(|m| m.manifest_path.clone()) else {
            continue;
        };
        // Per spec, newest spec first (Java's reverse-ordered map of groups).
        let mut by_spec: BTreeMap<std::cmp::Reverse<i32>, Vec<&ManifestFile>> = BTreeMap::new();
        for m in of_content {
            by_spec
                .entry(std::cmp::Reverse(m.partition_spec_id))
                .or_default()
                .push(m);
        }
        for (std::cmp::Reverse(spec_id), group) in by_spec {
            let weights: Vec<u64> = group
                .iter()
                .map(|m| u64::try_from(m.manifest_length).unwrap_or(0))
                .collect();
            for bin in pack_end(&weights, policy.target_bytes) {
                let members: Vec<&ManifestFile> = bin.iter().map(|&i| group[i]).collect();
                let holds_first = members.iter().any(|m| m.manifest_path == first);
                if members.len() == 1 || (holds_first && members.len() < policy.min_count) {
                    listed.extend(
                        members
                            .into_iter()
                            .map(|m| Either::Left(futures::future::ok((m.clone(), None)))),
                    );
                    continue;
                }
                let members: Vec<ManifestFile> = members.into_iter().cloned().collect();
                listed.push(Either::Right(async move {
                    let of = (snapshot_id, spec_id, content);
                    let (m, upload) = merge_bin(files, md, of, &members, pending).await?;
                    Ok::<_, Error>((m, Some(upload)))
                }));
            }
        }
    }
    let mut list = Vec::with_capacity(listed.len());
    let mut written = Vec::new();
    for (m, upload) in futures::future::try_join_all(listed).await? {
        list.push(m);
        written.extend(upload);
    }
    Ok((list, written))
}

/// One manifest holding the entries of `members`: this snapshot's ADDED and DELETED entries as
/// they are, every other live entry EXISTING; earlier snapshots' DELETED entries dropped.
async fn merge_bin(
    files: &Files,
    md: &TableMetadata,
    (snapshot_id, spec_id, content): (i64, i32, ManifestContentType),
    members: &[ManifestFile],
    pending: &[Upload],
) -> Result<(ManifestFile, Upload)> {
    let mut w = Out::new(md, snapshot_id, spec_id, content)?;
    for m in members {
        let manifest = entries_of(files, m, snapshot_id, pending).await?;
        // This attempt's own manifests have no range yet: their entries hold what they
        // inherited (filtered ones) or nothing (new files, which the merged manifest's range
        // numbers).
        let row_ids: Vec<Option<i64>> = if m.added_snapshot_id == snapshot_id {
            (manifest.entries().iter())
                .map(|e| e.data_file().first_row_id())
                .collect()
        } else {
            lineage::inherited(m, manifest.entries())
        };
        for (e, row_id) in manifest.entries().iter().zip(row_ids) {
            let ours = e.snapshot_id() == Some(snapshot_id);
            match e.status() {
                ManifestStatus::Deleted if ours => w.deleted(snapshot_id, e, row_id)?,
                ManifestStatus::Deleted => {}
                ManifestStatus::Added if ours => w.added(
                    snapshot_id,
                    e.data_file().clone(),
                    e.sequence_number().unwrap_or(UNASSIGNED_SEQUENCE_NUMBER),
                ),
                _ => w.existing(e, row_id)?,
            }
        }
    }
    w.finish(files, md).await
}

/// Whether delete file `f` deletes rows of files in `removed` only, as its manifest entry
/// tells: it names one data file (`referenced_data_file`, or equal `file_path` bounds).
pub(crate) fn only_targets(f: &DataFile, removed: &BTreeSet<String>) -> bool {
    match crate::files::deletes::Targets::of(f) {
        crate::files::deletes::Targets::One(p) => removed.contains(&p),
        crate::files::deletes::Targets::Range(lo, hi) => lo == hi && removed.contains(&lo),
        crate::files::deletes::Targets::Any => false,
    }
}

#[cfg(test)]
mod tests;
