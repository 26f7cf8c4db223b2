//! commit: one atomic snapshot per input, through a compare-and-swap on the catalog pointer.
//!
//! iceberg-rust 0.10 can only fast-append, so this is our own row-delta producer built from its
//! public parts. The protocol and the invariants it keeps:
//!
//! 1. **Prepare once.** Data files, delete files and their manifests are written before the first
//!    attempt, with a fixed snapshot id and *unassigned* sequence numbers, so every attempt reuses
//!    them: the manifest list assigns the sequence number of whatever base the attempt builds on.
//! 2. **Nothing is visible until the swap.** A snapshot exists for readers only once the catalog
//!    pointer names a metadata file that contains it, and the pointer moves only by
//!    compare-and-swap from the exact metadata the attempt was built on. Two writers can never
//!    both win from one base.
//! 3. **Every attempt re-validates** against the table as it is now ([`validate`]): same table,
//!    our schema and spec still current, our input not already applied (then the commit is a
//!    no-op), our snapshot not already committed (an earlier attempt whose outcome was unknown),
//!    and no commit since our base that could invalidate our position deletes (only compaction
//!    may intervene, and only if every data file our deletes reference is still live). Anything
//!    else is a [`CommitError::Replan`]: the caller redoes the input against the new state.
//! 4. **A lost attempt deletes only its own files** (manifest list, metadata.json), after the
//!    swap said conflict. On an unknown outcome nothing is deleted: the table is reloaded and our
//!    snapshot id looked for — found means committed.
//! 5. **Abandoning** (replan, already applied, error) deletes the prepared files, which no
//!    metadata references ([`Staged::discard`]). A crash leaves them as orphans that
//!    `orphans` finds; they are never referenced, so they never change what readers see.

mod summary;
pub mod validate;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use iceberg::MetadataLocation;
use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestFile, ManifestListWriter, ManifestWriterBuilder,
    Operation, PartitionSpecRef, Schema, SchemaRef, Snapshot, SortOrder, Summary, TableMetadata,
    TableMetadataBuilder, UnboundPartitionSpec,
};
use tracing::{debug, info, warn};

pub use summary::Added;

use crate::catalog::{Catalog, SwapError};
use crate::error::{Error, Result};
use crate::locate::OrderKey;
use crate::table::LoadedTable;

/// The table a commit was planned against.
#[derive(Debug, Clone)]
pub enum Base {
    Existing(LoadedTable),
    /// The commit creates the table with this metadata (no snapshot yet).
    Create(Arc<TableMetadata>),
}

impl Base {
    pub fn metadata(&self) -> &Arc<TableMetadata> {
        match self {
            Base::Existing(t) => &t.metadata,
            Base::Create(m) => m,
        }
    }
}

/// Metadata changes that go with the snapshot.
#[derive(Debug, Clone, Default)]
pub struct MetadataChanges {
    pub schema: Option<Schema>,
    pub spec: Option<UnboundPartitionSpec>,
    pub sort_order: Option<SortOrder>,
}

impl MetadataChanges {
    pub fn is_empty(&self) -> bool {
        self.schema.is_none() && self.spec.is_none() && self.sort_order.is_none()
    }

    /// Applies the changes (without a snapshot): the metadata files must be written against.
    /// Deterministic, so validation can re-apply them to the current table and compare ids.
    pub fn apply(&self, base: &TableMetadata) -> Result<TableMetadata> {
        if self.is_empty() {
            return Ok(base.clone());
        }
        Ok(self
            .apply_to(base.clone().into_builder(None))?
            .build()?
            .metadata)
    }

    fn apply_to(&self, mut b: TableMetadataBuilder) -> Result<TableMetadataBuilder> {
        if let Some(s) = &self.schema {
            b = b.add_current_schema(s.clone())?;
        }
        if let Some(spec) = &self.spec {
            b = b.add_default_partition_spec(spec.clone())?;
        }
        if let Some(o) = &self.sort_order {
            b = b.add_sort_order(o.clone())?.set_default_sort_order(-1)?;
        }
        Ok(b)
    }
}

/// Everything one commit needs, prepared once and reused by every attempt.
#[derive(Debug)]
pub struct Staged {
    pub ident: TableIdent,
    pub base: Base,
    pub changes: MetadataChanges,
    /// Schema id and default spec id the files were written with (after `changes`).
    pub schema_id: i32,
    pub spec_id: i32,
    pub snapshot_id: i64,
    pub operation: Operation,
    pub manifests: Vec<ManifestFile>,
    /// Every file prepared for this commit (data, deletes, manifests): deleted if abandoned.
    pub files: Vec<String>,
    /// Data files our position deletes point into: must still be live when we commit.
    pub referenced_data_files: BTreeSet<String>,
    /// Rewrites (compaction): manifests of the base that `manifests` replace, and the data
    /// files they remove. Every replaced manifest must still be current, and no commit since the
    /// base may have added deletes against a removed file.
    pub replaced_manifests: BTreeSet<String>,
    pub removed_data_files: BTreeSet<String>,
    pub added: Added,
    /// Our summary properties (source files, watermark, row counts).
    pub properties: BTreeMap<String, String>,
    /// DMS order of every input file: if the table records all of them as applied, the commit
    /// is a no-op; if it records some, the commit is planned again without them.
    pub input_orders: Vec<OrderKey>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Committed {
        snapshot_id: i64,
        sequence_number: i64,
        attempts: u32,
        metadata_location: String,
    },
    /// The table already holds this input (duplicate delivery or a concurrent worker).
    AlreadyApplied { attempts: u32 },
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The table changed in a way our prepared files cannot follow: redo the input.
    #[error("replan needed: {0}")]
    Replan(String),
    /// The swap may have landed: prepared files must be kept (they may be live). Running the
    /// input again is safe: it finds the table's watermark and skips.
    #[error("commit outcome unknown: {0}")]
    Unknown(String),
    #[error(transparent)]
    Failed(#[from] Error),
}

/// Retry settings, from the table's `commit.retry.*` properties (Iceberg's names).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub num_retries: u32,
    pub min_wait: Duration,
    pub max_wait: Duration,
    pub total_timeout: Duration,
}

impl RetryPolicy {
    pub fn from_properties(p: &HashMap<String, String>) -> RetryPolicy {
        let get = |k: &str, d: u64| p.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(d);
        RetryPolicy {
            // More than Iceberg's default of 4: a Lambda fleet contends on hot tables.
            num_retries: get("commit.retry.num-retries", 20) as u32,
            min_wait: Duration::from_millis(get("commit.retry.min-wait-ms", 50)),
            max_wait: Duration::from_millis(get("commit.retry.max-wait-ms", 5_000)),
            total_timeout: Duration::from_millis(get("commit.retry.total-timeout-ms", 600_000)),
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.min_wait.as_millis() as u64 * 2u64.saturating_pow(attempt.min(16));
        let cap = exp.min(self.max_wait.as_millis() as u64).max(1);
        // Full jitter: contenders spread out instead of colliding again in lockstep.
        Duration::from_millis(rand::random_range(cap / 2..=cap))
    }
}

/// Test hook: `DMS2ICEBERG_FAILPOINT=<name>` fails at that step with an error,
/// `<name>:kill` aborts the process there, `<name>:sleep=MS` pauses there (to force races).
pub fn failpoint(name: &str) -> Result<()> {
    if let Ok(v) = std::env::var("DMS2ICEBERG_FAILPOINT") {
        let (point, action) = v.split_once(':').unwrap_or((v.as_str(), "error"));
        if point == name {
            if action == "kill" {
                eprintln!("failpoint {name}: killing the process");
                std::process::abort();
            }
            if let Some(ms) = action
                .strip_prefix("sleep=")
                .and_then(|m| m.parse::<u64>().ok())
            {
                std::thread::sleep(Duration::from_millis(ms));
                return Ok(());
            }
            return Err(Error::Other(format!("failpoint {name}")));
        }
    }
    Ok(())
}

/// Writes the manifests for `data` and `deletes` (one per partition spec and content). Data
/// sequence numbers are left unassigned (the manifest list gives the snapshot's), except for
/// rewritten data, which keeps the sequence number of the snapshot it was read from
/// (`data_sequence_number`).
pub async fn write_manifests(
    file_io: &FileIO,
    metadata: &TableMetadata,
    snapshot_id: i64,
    data: &[(i32, DataFile)],
    deletes: &[(i32, DataFile)],
    data_sequence_number: Option<i64>,
) -> Result<Vec<ManifestFile>> {
    let schema: SchemaRef = metadata.current_schema().clone();
    let mut out = Vec::new();
    for (content, files) in [(false, data), (true, deletes)] {
        let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
        for (spec, f) in files {
            by_spec.entry(*spec).or_default().push(f.clone());
        }
        for (spec_id, files) in by_spec {
            let spec: &PartitionSpecRef =
                metadata.partition_spec_by_id(spec_id).ok_or_else(|| {
                    Error::Other(format!(
                        "partition spec {spec_id} is not in the table metadata"
                    ))
                })?;
            let path = format!(
                "{}/metadata/{}-m{}.avro",
                metadata.location(),
                uuid::Uuid::new_v4(),
                out.len()
            );
            let output = file_io.new_output(&path)?;
            let builder = ManifestWriterBuilder::new(
                output,
                Some(snapshot_id),
                schema.clone(),
                spec.as_ref().clone(),
            );
            let mut w = if content {
                builder.build_v2_deletes()
            } else {
                builder.build_v2_data()
            };
            let seq = match (content, data_sequence_number) {
                (false, Some(s)) => s,
                _ => iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER,
            };
            for f in files {
                w.add_file(f, seq)?;
            }
            out.push(w.write_manifest_file().await?);
        }
    }
    Ok(out)
}

impl Staged {
    /// Deletes every prepared file (nothing references them unless a commit landed).
    pub async fn discard(&self, file_io: &FileIO) {
        for f in &self.files {
            if let Err(e) = file_io.delete(f).await {
                warn!(file = %f, error = %e, "could not delete an abandoned file");
            }
        }
    }
}

/// Runs the protocol until the snapshot is committed, found already applied, or needs a replan.
pub async fn commit(
    catalog: &dyn Catalog,
    staged: &Staged,
) -> std::result::Result<Outcome, CommitError> {
    let file_io = catalog.file_io();
    let policy = RetryPolicy::from_properties(staged.base.metadata().properties());
    let started = std::time::Instant::now();
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let current = LoadedTable::load(catalog, &staged.ident).await?;
        match validate::check(staged, current.as_ref(), file_io).await? {
            validate::Verdict::Proceed => {}
            validate::Verdict::AlreadyCommitted => {
                let t = current
                    .as_ref()
                    .ok_or_else(|| Error::Other("table vanished".into()))?;
                return Ok(committed(staged, t, attempt));
            }
            validate::Verdict::AlreadyApplied => {
                return Ok(Outcome::AlreadyApplied { attempts: attempt });
            }
        }
        let (new_metadata, location, list_path) =
            build_attempt(staged, current.as_ref(), file_io, attempt).await?;
        if let Err(e) = failpoint("after-metadata") {
            for f in [&list_path, &location] {
                let _ = file_io.delete(f).await;
            }
            return Err(e.into());
        }
        let base_pointer = current.as_ref().map(|t| &t.pointer);
        match catalog
            .swap(&staged.ident, base_pointer, &location, &new_metadata)
            .await
        {
            Ok(()) => {
                failpoint("after-swap").map_err(|e| CommitError::Unknown(e.to_string()))?;
                info!(table = %staged.ident, snapshot_id = staged.snapshot_id, attempts = attempt, "committed");
                cleanup_expired(file_io, current.as_ref(), &new_metadata).await;
                return Ok(Outcome::Committed {
                    snapshot_id: staged.snapshot_id,
                    sequence_number: new_metadata.last_sequence_number(),
                    attempts: attempt,
                    metadata_location: location,
                });
            }
            Err(SwapError::Conflict) => {
                debug!(table = %staged.ident, attempt, "commit conflict; retrying");
                for f in [&list_path, &location] {
                    if let Err(e) = file_io.delete(f).await {
                        warn!(file = %f, error = %e, "could not delete a lost attempt's file");
                    }
                }
            }
            Err(SwapError::Unknown(reason)) => {
                warn!(table = %staged.ident, attempt, %reason, "commit outcome unknown; checking");
                // Keep the files: the swap may have landed and they may be live.
            }
            Err(SwapError::Failed(e)) => return Err(e.into()),
        }
        if attempt > policy.num_retries || started.elapsed() > policy.total_timeout {
            return Err(Error::CommitFailed {
                table: staged.ident.to_string(),
                attempts: attempt,
                reason: "too many concurrent commits; the input was not applied and can be retried"
                    .into(),
            }
            .into());
        }
        tokio::time::sleep(policy.backoff(attempt)).await;
    }
}

fn committed(staged: &Staged, t: &LoadedTable, attempts: u32) -> Outcome {
    let seq = t
        .metadata
        .snapshot_by_id(staged.snapshot_id)
        .map(|s| s.sequence_number())
        .unwrap_or_default();
    Outcome::Committed {
        snapshot_id: staged.snapshot_id,
        sequence_number: seq,
        attempts,
        metadata_location: t.pointer.metadata_location.clone(),
    }
}

/// Manifest list, snapshot and metadata.json for one attempt on `current`.
async fn build_attempt(
    staged: &Staged,
    current: Option<&LoadedTable>,
    file_io: &FileIO,
    attempt: u32,
) -> Result<(TableMetadata, String, String)> {
    let (base_md, base_location) = match (current, &staged.base) {
        (Some(t), _) => (
            t.metadata.as_ref().clone(),
            Some(t.pointer.metadata_location.clone()),
        ),
        (None, Base::Create(m)) => (m.as_ref().clone(), None),
        (None, Base::Existing(_)) => return Err(Error::Other("table vanished".into())),
    };
    let parent = base_md.current_snapshot().cloned();
    let sequence_number = base_md.next_sequence_number();
    let list_path = format!(
        "{}/metadata/snap-{}-{}-{}.avro",
        base_md.location(),
        staged.snapshot_id,
        attempt,
        uuid::Uuid::new_v4()
    );
    let mut parent_manifests = Vec::new();
    if let Some(p) = &parent {
        parent_manifests = crate::table::manifest_list(file_io, &base_md, p).await?;
    }
    let mut writer = ManifestListWriter::v2(
        file_io.new_output(&list_path)?.writer().await?,
        staged.snapshot_id,
        parent.as_ref().map(|p| p.snapshot_id()),
        sequence_number,
    );
    let parent_manifests = parent_manifests
        .into_iter()
        .filter(|m| !staged.replaced_manifests.contains(&m.manifest_path));
    writer.add_manifests(staged.manifests.iter().cloned().chain(parent_manifests))?;
    writer.close().await?;
    if let Err(e) = failpoint("after-manifest-list") {
        let _ = file_io.delete(&list_path).await;
        return Err(e);
    }

    let mut props: HashMap<String, String> =
        summary::summarize(parent.as_ref().map(|p| p.summary()), &staged.added);
    props.extend(
        staged
            .properties
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let snapshot = Snapshot::builder()
        .with_snapshot_id(staged.snapshot_id)
        .with_parent_snapshot_id(parent.as_ref().map(|p| p.snapshot_id()))
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(
            chrono::Utc::now()
                .timestamp_millis()
                .max(base_md.last_updated_ms()),
        )
        .with_manifest_list(list_path.clone())
        .with_schema_id(staged.schema_id)
        .with_summary(Summary {
            operation: staged.operation.clone(),
            additional_properties: props,
        })
        .build();
    let builder = staged
        .changes
        .apply_to(base_md.clone().into_builder(base_location.clone()))?
        .set_branch_snapshot(snapshot, MAIN_BRANCH)?;
    let new_md = builder.build()?.metadata;
    let location = match &base_location {
        Some(l) => MetadataLocation::from_str(l)?
            .with_next_version()
            .with_new_metadata(&new_md),
        None => MetadataLocation::new_with_metadata(new_md.location(), &new_md),
    };
    let location = location.to_string();
    new_md
        .write_to(file_io, &MetadataLocation::from_str(&location)?)
        .await?;
    Ok((new_md, location, list_path))
}

/// Deletes metadata files that fell out of the metadata log (`write.metadata.previous-versions-max`)
/// when `write.metadata.delete-after-commit.enabled` is set, as Iceberg does.
async fn cleanup_expired(file_io: &FileIO, base: Option<&LoadedTable>, new: &TableMetadata) {
    let enabled = new
        .properties()
        .get("write.metadata.delete-after-commit.enabled")
        .is_some_and(|v| v == "true");
    let Some(base) = base.filter(|_| enabled) else {
        return;
    };
    let kept: BTreeSet<&str> = new
        .metadata_log()
        .iter()
        .map(|l| l.metadata_file.as_str())
        .collect();
    for old in base.metadata.metadata_log() {
        if !kept.contains(old.metadata_file.as_str()) {
            let _ = file_io.delete(&old.metadata_file).await;
        }
    }
}

/// A new snapshot id: positive, random (Iceberg's convention), not already in the table.
pub fn new_snapshot_id(metadata: Option<&TableMetadata>) -> i64 {
    loop {
        let id = (rand::random::<u64>() >> 2) as i64 + 1;
        if metadata.is_none_or(|m| m.snapshot_by_id(id).is_none()) {
            return id;
        }
    }
}

/// Format version for new tables: v2 (position deletes, read by every engine; see README).
pub const FORMAT_VERSION: FormatVersion = FormatVersion::V2;

/// Commits a metadata-only change (no new snapshot), such as expiring snapshots: `change`
/// derives the new metadata from the current one (`None`: nothing to do) and is re-run on every
/// attempt, so it always applies to the table as it is. Returns the committed metadata.
pub async fn commit_metadata<F>(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    change: F,
) -> Result<Option<TableMetadata>>
where
    F: Fn(&TableMetadata, &str) -> Result<Option<TableMetadata>>,
{
    let file_io = catalog.file_io();
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let current = LoadedTable::load(catalog, ident)
            .await?
            .ok_or_else(|| Error::Other(format!("table {ident} does not exist")))?;
        let policy = RetryPolicy::from_properties(current.metadata.properties());
        let Some(new) = change(&current.metadata, &current.pointer.metadata_location)? else {
            return Ok(None);
        };
        let location = MetadataLocation::from_str(&current.pointer.metadata_location)?
            .with_next_version()
            .with_new_metadata(&new)
            .to_string();
        new.write_to(file_io, &MetadataLocation::from_str(&location)?)
            .await?;
        match catalog
            .swap(ident, Some(&current.pointer), &location, &new)
            .await
        {
            Ok(()) => {
                cleanup_expired(file_io, Some(&current), &new).await;
                return Ok(Some(new));
            }
            Err(SwapError::Conflict) => {
                let _ = file_io.delete(&location).await;
            }
            Err(SwapError::Unknown(reason)) => {
                if LoadedTable::load(catalog, ident)
                    .await?
                    .is_some_and(|t| t.pointer.metadata_location == location)
                {
                    return Ok(Some(new));
                }
                warn!(table = %ident, %reason, "metadata commit outcome unknown; retrying");
            }
            Err(SwapError::Failed(e)) => return Err(e),
        }
        if attempt > policy.num_retries {
            return Err(Error::CommitFailed {
                table: ident.to_string(),
                attempts: attempt,
                reason: "too many concurrent commits".into(),
            });
        }
        tokio::time::sleep(policy.backoff(attempt)).await;
    }
}
