//! commit: every change to a table — a row delta (ingest), a rewrite (compaction), an append
//! (rejected rows), a reload (a new full load) — goes through this module, as one atomic
//! snapshot and a compare-and-swap on the catalog pointer.
//!
//! iceberg-rust 0.10 can only fast-append, so this is our own snapshot producer built from its
//! public parts. The protocol and the invariants it keeps:
//!
//! 1. **Prepare once.** Data files, delete files and their manifests are written before the first
//!    attempt ([`Staged`]), with a fixed snapshot id and *unassigned* sequence numbers, so every
//!    attempt reuses them: the manifest list assigns the sequence number of whatever base the
//!    attempt builds on. (A reload's removals depend on what is live at each attempt: they are
//!    the one part written per attempt.)
//! 2. **Nothing is visible until the swap.** A snapshot exists for readers only once the catalog
//!    pointer names a metadata file that contains it, and the pointer moves only by
//!    compare-and-swap from the exact metadata the attempt was built on. Two writers can never
//!    both win from one base.
//! 3. **The exactly-once record moves with the data.** Which DMS files the table holds lives in
//!    a table property ([`record`]), recomputed on every attempt from the table as it is and
//!    written in the same metadata as the snapshot: a snapshot that applies a file and the
//!    record that says so land together or not at all, and no other writer or snapshot expiry
//!    can lose the record.
//! 4. **Every attempt re-validates** against the table as it is now ([`validate`]; for the
//!    first attempt "now" is the base the plan just loaded, which the compare-and-swap of 2
//!    holds it to: a moved pointer makes it a lost swap, and the next attempt reloads): same table,
//!    our schema and spec still current, our input not already applied (then the commit is a
//!    no-op), our snapshot not already committed (an earlier attempt whose outcome was unknown),
//!    and nothing committed since our base that invalidates what we prepared. Anything else is a
//!    typed [`Conflict`]: the planner plans the input again against the new state.
//! 5. **A lost attempt deletes only its own files** (manifest list, metadata.json), after the
//!    swap said conflict. On an unknown outcome nothing is deleted: the table is reloaded and our
//!    snapshot id looked for — found means committed.
//! 6. **Abandoning** (replan, already applied, error) deletes the prepared files, which no
//!    metadata references ([`Staged::discard`]). A crash leaves them as orphans that `orphans`
//!    finds; they are never referenced, so they never change what readers see.
//! 7. **One retry budget** ([`retry::RetryPolicy`], from the table's `commit.retry.*`
//!    properties) covers lost swaps and replans alike, with jittered backoff between them.

pub(crate) mod carry;
mod encode;
mod failpoint;
pub(crate) mod manifests;
pub(crate) mod producer;
pub(crate) mod record;
pub(crate) mod request;
pub(crate) mod retry;
mod summary;
pub(crate) mod validate;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use iceberg::MetadataLocation;
use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, FormatVersion, ManifestFile, Operation, Schema, SortOrder, TableMetadata,
    TableMetadataBuilder, UnboundPartitionSpec,
};
use tracing::{debug, info, warn};

pub(crate) use carry::{RowMap, RowMapBuilder};
pub(crate) use failpoint::failpoint;
pub(crate) use manifests::write_manifests;
pub(crate) use record::{AppliedInput, AppliedRecord, Standing};
pub(crate) use summary::Added;
pub(crate) use validate::Conflict;

use crate::catalog::{Catalog, SwapError};
use crate::error::{Error, Result};
use crate::files::deletes::DeleteId;
use crate::files::prepared::Prepared;
use crate::table::LoadedTable;
use retry::{Budget, RetryPolicy};

/// The table a commit was planned against.
#[derive(Debug, Clone)]
pub(crate) enum Base {
    Existing(LoadedTable),
    /// The commit creates the table with this metadata (no snapshot yet).
    Create(Arc<TableMetadata>),
}

impl Base {
    pub(crate) fn metadata(&self) -> &Arc<TableMetadata> {
        match self {
            Base::Existing(t) => &t.metadata,
            Base::Create(m) => m,
        }
    }
}

/// Metadata changes that go with the snapshot.
#[derive(Debug, Clone, Default)]
pub(crate) struct MetadataChanges {
    pub schema: Option<Schema>,
    pub spec: Option<UnboundPartitionSpec>,
    pub sort_order: Option<SortOrder>,
    /// Table properties set (no requirement: the last commit's value wins).
    pub properties: HashMap<String, String>,
}

impl MetadataChanges {
    pub(crate) fn is_empty(&self) -> bool {
        self.schema.is_none()
            && self.spec.is_none()
            && self.sort_order.is_none()
            && self.properties.is_empty()
    }

    /// Applies the changes (without a snapshot): the metadata files must be written against.
    /// Deterministic, so validation can re-apply them to the current table and compare ids.
    /// No changes: `base` itself (a copy would be a pass over every snapshot of the table).
    pub(crate) fn apply(&self, base: &Arc<TableMetadata>) -> Result<Arc<TableMetadata>> {
        if self.is_empty() {
            return Ok(base.clone());
        }
        Ok(Arc::new(
            self.apply_to(base.as_ref().clone().into_builder(None))?
                .build()?
                .metadata,
        ))
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
        if !self.properties.is_empty() {
            b = b.set_properties(self.properties.clone())?;
        }
        Ok(b)
    }
}

/// What a commit does to the table's files: each kind has its own validation rules and its
/// own way of building the snapshot's manifest list.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// Ingest: new data files, and position deletes against live files (which must still be
    /// live when it commits). Another writer's commit meanwhile matters only if it removed one
    /// of those files, or added rows that may hold one of `keys` (as Iceberg Java's row delta
    /// validates against a conflict filter): its position deletes and its rows of other keys
    /// leave our plan as right as it was (a row deleted twice is deleted once).
    RowDelta {
        referenced_data_files: BTreeSet<String>,
        keys: KeyScope,
        /// Data files holding rows the plan left in place as newer than their change: a
        /// concurrent delete of such a row changes what the change should do.
        kept_rows_in: BTreeSet<String>,
        /// A full-load file's rows added to its load, replacing none: it may follow other files
        /// of the same load applied meanwhile, and create the table alongside them.
        joins_load: bool,
        /// Snapshots already found to add nothing within `keys` (a snapshot never changes):
        /// each attempt checks only those committed since the previous one.
        checked: Arc<std::sync::Mutex<BTreeSet<i64>>>,
        /// Live delete files whose positions this commit's delete files hold with its own, and
        /// which it removes: at most one delete file per data file. Each must still be live
        /// when it commits.
        replaced_deletes: BTreeSet<DeleteId>,
    },
    /// Compaction: files replaced by files holding the same rows; the removed files must still
    /// be live (they are found in whatever manifests list them when it commits). Rows of
    /// removed files that commits since the base deleted are deleted in the new files by the
    /// rewrite's own snapshot, through `row_map` (without one, such a commit means planning
    /// again).
    Rewrite {
        removed_data_files: BTreeSet<String>,
        /// Delete files that point only into removed files (if still live).
        removed_delete_files: BTreeSet<DeleteId>,
        row_map: Option<Arc<RowMap>>,
    },
    /// Rows appended (the rejected-rows table).
    Append,
    /// The same files, listed by fewer manifests: every manifest of the current snapshot
    /// merged into target-size manifests per content and spec (`rewrite-manifests`).
    RewriteManifests,
    /// A full load that replaces the table's contents: every file live at commit time is
    /// removed, the new files added.
    Reload,
}

impl Change {
    /// See [`Change::RowDelta::joins_load`].
    pub(crate) fn joins_load(&self) -> bool {
        matches!(
            self,
            Change::RowDelta {
                joins_load: true,
                ..
            }
        )
    }

    fn operation(&self, added_deletes: bool, added_data: bool) -> Operation {
        match self {
            Change::Rewrite { .. } | Change::RewriteManifests => Operation::Replace,
            Change::Reload => Operation::Overwrite,
            Change::Append => Operation::Append,
            Change::RowDelta { .. } => match (added_data, added_deletes) {
                (_, false) => Operation::Append,
                (false, true) => Operation::Delete,
                (true, true) => Operation::Overwrite,
            },
        }
    }
}

/// The range of key values a commit's data files hold, per key field id (from the files'
/// lower and upper bounds). `None`: not known (a file without bounds for a key column).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct KeyBounds(
    pub Option<BTreeMap<i32, (iceberg::spec::Datum, iceberg::spec::Datum)>>,
);

impl KeyBounds {
    /// The bounds of `files` on the key fields `ids`. Bounds of a key column before and after
    /// it was widened (int and long) compare as the wider type; bounds that do not compare
    /// leave the range unknown.
    pub(crate) fn of<'a>(files: impl IntoIterator<Item = &'a DataFile>, ids: &[i32]) -> KeyBounds {
        use crate::types::cmp_datums;
        let mut out: BTreeMap<i32, (iceberg::spec::Datum, iceberg::spec::Datum)> = BTreeMap::new();
        for f in files {
            for id in ids {
                let (Some(lo), Some(hi)) = (f.lower_bounds().get(id), f.upper_bounds().get(id))
                else {
                    return KeyBounds(None);
                };
                let e = out.entry(*id).or_insert_with(|| (lo.clone(), hi.clone()));
                match (cmp_datums(lo, &e.0), cmp_datums(hi, &e.1)) {
                    (Some(l), Some(h)) => {
                        if l.is_lt() {
                            e.0 = lo.clone();
                        }
                        if h.is_gt() {
                            e.1 = hi.clone();
                        }
                    }
                    _ => return KeyBounds(None),
                }
            }
        }
        KeyBounds(Some(out))
    }

    /// Whether a data file could hold a key within these bounds (unknown bounds: it could).
    pub(crate) fn may_overlap(&self, f: &DataFile) -> bool {
        let Some(ours) = &self.0 else { return true };
        ours.iter().all(|(id, (lo, hi))| {
            match (f.lower_bounds().get(id), f.upper_bounds().get(id)) {
                (Some(flo), Some(fhi)) => {
                    // A key widened since one side was written compares as the wider type;
                    // bounds that do not compare at all: overlap.
                    use crate::types::cmp_datums;
                    match (cmp_datums(flo, hi), cmp_datums(fhi, lo)) {
                        (Some(a), Some(b)) => a.is_le() && b.is_ge(),
                        _ => true,
                    }
                }
                _ => true,
            }
        })
    }
}

/// The keys a row delta's rows may hold, as precisely as the commit knows them: what another
/// writer's new data files are checked against.
#[derive(Debug, Clone)]
pub(crate) enum KeyScope {
    /// Every key the input changes (inserted, updated or deleted): a file conflicts only if
    /// its bounds hold one of them.
    Keys(Arc<crate::files::probe::ProbeKeys>),
    /// The range of the keys (a full-load file: the bounds of the files it wrote).
    Bounds(KeyBounds),
    /// Not known (an input too large to hold its keys): every added data file conflicts.
    Unknown,
}

impl KeyScope {
    /// Whether data file `f` may hold a row of one of these keys.
    pub(crate) fn may_hold(&self, f: &DataFile) -> bool {
        match self {
            KeyScope::Keys(k) => k
                .may_contain(f.lower_bounds(), f.upper_bounds())
                .unwrap_or(true),
            KeyScope::Bounds(b) => b.may_overlap(f),
            KeyScope::Unknown => true,
        }
    }
}

/// How the exactly-once record moves with a commit.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordUpdate {
    /// The record the input was planned against (validation replans if it moved).
    pub base_record: Arc<AppliedRecord>,
    pub inputs: Vec<AppliedInput>,
    /// The inputs are a new full load (a new generation).
    pub reload: bool,
    /// Files of the current load a reload takes along into the new one.
    pub carried: Vec<record::LoadFile>,
    /// Greatest change sequence of the inputs.
    pub change_seq: Option<String>,
    /// Change files the record keeps.
    pub window: usize,
    /// The commit is a truncate of the source table (no inputs): the record starts a new,
    /// empty generation ([`AppliedRecord::truncated`]).
    pub truncate: Option<record::Truncation>,
}

/// Everything one commit needs, prepared once and reused by every attempt.
#[derive(Debug)]
pub(crate) struct Staged {
    pub ident: TableIdent,
    pub base: Base,
    pub changes: MetadataChanges,
    /// Schema id the files were written with (after `changes`).
    pub schema_id: i32,
    pub snapshot_id: i64,
    pub change: Change,
    pub manifests: Vec<ManifestFile>,
    /// `manifests` encoded, not stored yet: an attempt stores those its list names, with the
    /// list and metadata.json; one a merge takes in is never stored.
    pub held: Vec<manifests::Upload>,
    /// Every file prepared for this commit (data, deletes, manifests): deleted if abandoned.
    pub(crate) files: Prepared,
    pub added: Added,
    /// Snapshot summary properties of ours (source files, row counts).
    pub summary: BTreeMap<String, String>,
    /// The record update, for commits that apply DMS files (none for compaction).
    pub record: Option<RecordUpdate>,
}

impl Staged {
    /// Deletes every prepared file (nothing references them unless a commit landed).
    pub(crate) async fn discard(&self, file_io: &FileIO) {
        self.files.abandon(file_io).await;
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
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
pub(crate) enum CommitError {
    /// The table changed in a way our prepared files cannot follow: plan the input again.
    #[error("replan needed: {0}")]
    Conflict(Conflict),
    /// The swap may have landed: prepared files must be kept (they may be live). Running the
    /// input again is safe: the table's record says whether it landed.
    #[error("commit outcome unknown: {0}")]
    Unknown(String),
    #[error(transparent)]
    Failed(#[from] Error),
}

/// A planner's decision for the table as it is now.
pub(crate) enum Plan<R> {
    /// Nothing to commit (every input already applied, nothing to compact, ...).
    Nothing(R),
    Commit(Box<Staged>, R),
}

/// Plans one commit; [`run`] calls it again whenever a conflict invalidates the plan.
#[async_trait::async_trait]
pub(crate) trait Planner: Send {
    type Report: Send;
    /// Plans against `table` (`None`: it does not exist yet). On an error the planner deletes
    /// whatever it wrote.
    async fn plan(&mut self, table: Option<LoadedTable>) -> Result<Plan<Self::Report>>;
}

/// How a [`run`] ended.
#[derive(Debug)]
pub(crate) struct Finished<R> {
    pub report: R,
    /// `None` when the planner found nothing to commit.
    pub outcome: Option<Outcome>,
    /// Plans thrown away because the table changed, by conflict kind.
    pub replans: Vec<&'static str>,
}

/// The one plan → commit → replan loop. `preloaded`: the table as the caller just loaded it
/// (saves a catalog round trip for the first plan).
pub(crate) async fn run<P: Planner>(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    preloaded: Option<Option<LoadedTable>>,
    planner: &mut P,
) -> Result<Finished<P::Report>> {
    let mut table = match preloaded {
        Some(t) => t,
        None => LoadedTable::load(catalog, ident).await?,
    };
    let mut budget = Budget::new(
        table
            .as_ref()
            .map(|t| RetryPolicy::of(&t.metadata))
            .unwrap_or_default(),
    );
    let mut replans = Vec::new();
    loop {
        let (staged, report) = match planner.plan(table).await? {
            Plan::Nothing(report) => {
                return Ok(Finished {
                    report,
                    outcome: None,
                    replans,
                });
            }
            Plan::Commit(staged, report) => (staged, report),
        };
        budget.update(RetryPolicy::of(staged.base.metadata()));
        let mut sent = Sent::default();
        let decided = attempt_until_decided(catalog, &staged, &mut budget, &mut sent).await;
        match decided {
            Ok(outcome) => {
                if matches!(outcome, Outcome::AlreadyApplied { .. }) {
                    abandon(catalog, ident, &staged, &sent).await;
                }
                return Ok(Finished {
                    report,
                    outcome: Some(outcome),
                    replans,
                });
            }
            Err(CommitError::Conflict(c)) => {
                abandon(catalog, ident, &staged, &sent).await;
                replans.push(c.kind());
                if !budget.retry() {
                    return Err(gave_up(ident, &budget, &c));
                }
                info!(table = %ident, conflict = c.kind(), reason = %c, "planning again");
                budget.wait().await;
                table = LoadedTable::load(catalog, ident).await?;
            }
            Err(CommitError::Failed(e)) => {
                abandon(catalog, ident, &staged, &sent).await;
                return Err(e);
            }
            Err(CommitError::Unknown(reason)) => {
                return Err(Error::CommitUnknown {
                    table: ident.to_string(),
                    reason,
                });
            }
        }
    }
}

/// Deletes the files prepared for `staged`, unless an attempt's outcome is unknown: what it
/// wrote may be what the catalog names (now, or once a request still in flight lands). Files no
/// snapshot ends up referencing are what `orphans` removes.
async fn abandon(catalog: &dyn Catalog, ident: &TableIdent, staged: &Staged, sent: &Sent) {
    if sent.unknown.is_empty() {
        staged.discard(catalog.file_io()).await;
    } else {
        warn!(
            table = %ident,
            snapshot_id = staged.snapshot_id,
            unknown = ?sent.unknown,
            "kept the commit's files: an attempt's outcome is unknown (files no snapshot \
             references are left to `orphans`)"
        );
    }
}

fn gave_up(ident: &TableIdent, budget: &Budget, last: &Conflict) -> Error {
    Error::CommitFailed {
        table: ident.to_string(),
        attempts: budget.retries(),
        reason: format!(
            "the table kept changing concurrently (last: {last}); nothing was committed and the \
             input can be retried"
        ),
    }
}

/// What the attempts of one staged commit sent to the catalog.
#[derive(Debug, Default)]
struct Sent {
    /// The metadata locations of attempts whose swap outcome is unknown (a 5xx, a timeout): each
    /// may be, or become, the table's current metadata.
    unknown: Vec<String>,
}

impl Sent {
    /// The attempt of unknown outcome that `t` shows landed: its metadata is the current one or
    /// in the metadata log (Iceberg Java's `checkCommitStatus`). Where the catalog writes the
    /// metadata (REST) our snapshot id is what shows it, see [`validate`].
    fn landed_in(&self, t: &LoadedTable) -> Option<&str> {
        self.unknown
            .iter()
            .find(|l| holds_metadata(t, l))
            .map(String::as_str)
    }
}

/// Attempts the staged commit until it lands, is found applied, or needs a replan. Lost swaps
/// (nothing else changed) are retried here on the new base, within `budget`.
///
/// Files an attempt wrote are deleted only after a certain refusal of its swap. After an
/// unknown outcome the next attempt looks first: the table is reloaded and, if the catalog
/// names (or has named) that attempt's metadata, or our snapshot is in the table's ancestry,
/// the commit landed. Otherwise it is attempted again on the table as it is.
async fn attempt_until_decided(
    catalog: &dyn Catalog,
    staged: &Staged,
    budget: &mut Budget,
    sent: &mut Sent,
) -> std::result::Result<Outcome, CommitError> {
    let file_io = catalog.file_io();
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        // The first attempt builds on the table the plan was made against, loaded moments ago:
        // the swap is a compare-and-swap from exactly that pointer, so a table that moved since
        // refuses it and the next attempt reloads and re-validates. This saves a catalog round
        // trip per commit (the commit's slowest request on AWS).
        let current = match (attempt, &staged.base) {
            (1, Base::Existing(t)) => Some(t.clone()),
            (1, Base::Create(_)) => None,
            _ => LoadedTable::load(catalog, &staged.ident).await?,
        };
        if let Some(t) = &current
            && let Some(location) = sent.landed_in(t)
        {
            info!(table = %staged.ident, snapshot_id = staged.snapshot_id, metadata = %location, "an attempt of unknown outcome had landed");
            return Ok(committed(staged, t, attempt));
        }
        let validated = validate::check_carrying(staged, current.as_ref(), catalog.files()).await?;
        match validated.verdict {
            validate::Verdict::Proceed => {}
            validate::Verdict::AlreadyCommitted => {
                let t = current
                    .as_ref()
                    .ok_or_else(|| CommitError::Conflict(Conflict::TableDropped))?;
                return Ok(committed(staged, t, attempt));
            }
            validate::Verdict::AlreadyApplied => {
                return Ok(Outcome::AlreadyApplied { attempts: attempt });
            }
        }
        let built = producer::build_attempt(
            staged,
            current.as_ref(),
            catalog.files(),
            attempt,
            validated,
            catalog.writes_metadata(),
        )
        .await?;
        if let Err(e) = failpoint("after-metadata").await {
            built.delete(file_io).await;
            return Err(e.into());
        }
        let base_pointer = current.as_ref().map(|t| &t.pointer);
        match catalog
            .commit(&staged.ident, base_pointer, &built.commit())
            .await
        {
            Ok(landed) => {
                failpoint("after-swap")
                    .await
                    .map_err(|e| CommitError::Unknown(e.to_string()))?;
                info!(table = %staged.ident, snapshot_id = staged.snapshot_id, attempts = attempt, "committed");
                built.delete_unlisted(file_io).await;
                // Metadata files the log dropped are ours to delete where we write them.
                if !catalog.writes_metadata() {
                    cleanup_expired(file_io, current.as_ref(), &built.metadata).await;
                }
                // The metadata as the catalog wrote it, else ours, moved, not copied: a copy
                // costs a pass over every snapshot of the table.
                let (metadata, refs) = match landed.metadata {
                    Some((m, r)) => (m, Some(r)),
                    None => (built.metadata, built.refs),
                };
                let sequence_number = metadata.last_sequence_number();
                catalog
                    .files()
                    .remember_metadata(&landed.metadata_location, metadata, refs);
                return Ok(Outcome::Committed {
                    snapshot_id: staged.snapshot_id,
                    sequence_number,
                    attempts: attempt,
                    metadata_location: landed.metadata_location,
                });
            }
            Err(SwapError::Conflict) => {
                debug!(table = %staged.ident, attempt, "commit conflict; retrying");
                built.delete(file_io).await;
            }
            Err(SwapError::Refused(reason)) => {
                info!(table = %staged.ident, attempt, %reason, "commit refused for now; retrying");
                built.delete(file_io).await;
            }
            Err(SwapError::Unknown(reason)) => {
                warn!(table = %staged.ident, attempt, %reason, metadata = %built.location, "commit outcome unknown; looking before anything else");
                // Keep the files: the swap may have landed and they may be live.
                sent.unknown.push(built.location.clone());
            }
            Err(SwapError::Failed(e)) => {
                built.delete(file_io).await;
                return Err(e.into());
            }
        }
        if !budget.retry() {
            return Err(match sent.unknown.last() {
                Some(location) => CommitError::Unknown(format!(
                    "gave up after {} attempts; whether {location} landed is unknown (the next \
                     run of the input finds out from the table)",
                    budget.retries()
                )),
                None => CommitError::Failed(gave_up(&staged.ident, budget, &Conflict::SwapLost)),
            });
        }
        budget.wait().await;
    }
}

/// Format versions we commit to: v1 tables are upgraded to v2 by our first commit (v2 readers
/// read v1 files; Iceberg's own upgrade is just this); v2 tables get position-delete files and
/// v3 tables deletion vectors and row lineage, as each version's readers expect.
pub(crate) fn writable_version(metadata: &TableMetadata, table: &str) -> Result<()> {
    match metadata.format_version() {
        FormatVersion::V1 | FormatVersion::V2 | FormatVersion::V3 => Ok(()),
        #[allow(unreachable_patterns)]
        v => Err(Error::Unsupported(format!(
            "table {table} is Iceberg format version {}; dms2iceberg writes versions 2 and 3",
            v as u8
        ))),
    }
}

/// Whether the metadata file at `location` is the table's current one or in its history (the
/// metadata log every later commit carries).
fn holds_metadata(t: &LoadedTable, location: &str) -> bool {
    t.pointer.metadata_location == location
        || t.metadata
            .metadata_log()
            .iter()
            .any(|m| m.metadata_file == location)
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
        if !kept.contains(old.metadata_file.as_str())
            && !crate::files::refuses_deletes(&old.metadata_file)
        {
            let _ = file_io.delete(&old.metadata_file).await;
        }
    }
}

/// A new snapshot id: positive, random (Iceberg's convention), not already in the table.
pub(crate) fn new_snapshot_id(metadata: Option<&TableMetadata>) -> i64 {
    loop {
        let id = (rand::random::<u64>() >> 2) as i64 + 1;
        if metadata.is_none_or(|m| m.snapshot_by_id(id).is_none()) {
            return id;
        }
    }
}

/// Commits a metadata-only change (no new snapshot), such as expiring snapshots or declaring
/// what a table holds: `change` derives the new metadata from the current one (`None`: nothing
/// to do) and is re-run on every attempt, so it always applies to the table as it is. Returns
/// the committed metadata.
pub(crate) async fn commit_metadata<F>(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    change: F,
) -> Result<Option<TableMetadata>>
where
    F: Fn(&TableMetadata, &str) -> Result<Option<TableMetadata>>,
{
    let file_io = catalog.file_io();
    let mut budget: Option<Budget> = None;
    loop {
        let current =
            LoadedTable::load(catalog, ident)
                .await?
                .ok_or_else(|| Error::NoSuchTable {
                    table: ident.to_string(),
                })?;
        let budget = budget.get_or_insert_with(|| Budget::new(RetryPolicy::of(&current.metadata)));
        let Some(new) = change(&current.metadata, &current.pointer.metadata_location)? else {
            return Ok(None);
        };
        let location = MetadataLocation::from_str(&current.pointer.metadata_location)?
            .with_next_version()
            .with_new_metadata(&new)
            .to_string();
        let writes_metadata = catalog.writes_metadata();
        let requirements =
            request::requirements(Some(&current.metadata), &MetadataChanges::default());
        let updates = if writes_metadata {
            request::metadata_updates(&current.metadata, &current.refs, &new)?
        } else {
            crate::files::metadata::write(file_io, &location, &new, None).await?;
            Vec::new()
        };
        let commit = crate::catalog::TableCommit {
            requirements: &requirements,
            updates: &updates,
            metadata: &new,
            location: &location,
        };
        match catalog.commit(ident, Some(&current.pointer), &commit).await {
            Ok(landed) => {
                if writes_metadata {
                    return Ok(Some(landed.metadata.map_or(new, |(m, _)| m)));
                }
                cleanup_expired(file_io, Some(&current), &new).await;
                return Ok(Some(new));
            }
            // Certain refusals: the file we wrote is named by no catalog.
            Err(SwapError::Conflict | SwapError::Refused(_)) => {
                if !writes_metadata {
                    let _ = file_io.delete(&location).await;
                }
            }
            // Where the catalog writes the file, ours never existed to be looked for: the
            // change is re-run on the table as it is, and finds nothing left to do if it
            // landed (expiry and the applied-file record are both that way).
            Err(SwapError::Unknown(reason)) if writes_metadata => {
                warn!(table = %ident, %reason, "metadata commit outcome unknown; re-running it");
            }
            Err(SwapError::Unknown(reason)) => {
                // As for a snapshot commit, the question is whether ours is in the table's
                // history, not whether it is still the newest: a writer may have committed on
                // top of it already, and applying the change again would apply it twice.
                if LoadedTable::load(catalog, ident)
                    .await?
                    .is_some_and(|t| holds_metadata(&t, &location))
                {
                    return Ok(Some(new));
                }
                warn!(table = %ident, %reason, "metadata commit outcome unknown; retrying");
            }
            Err(SwapError::Failed(e)) => return Err(e),
        }
        if !budget.retry() {
            return Err(gave_up(ident, budget, &Conflict::SwapLost));
        }
        budget.wait().await;
    }
}
