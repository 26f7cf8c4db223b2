//! Validation of a prepared commit against the table as it is now, run before every attempt.
//! [`check`] calls one method per rule; each failure is a typed [`Conflict`] whose message says
//! what happened and what follows, or an error when no replan can help.
//!
//! Other Iceberg writers (Spark, Glue's optimizers, Athena, PyIceberg) commit to the same
//! tables. Their commits are handled by what they can have changed, not by who made them:
//! - a row delta (ingest) located the live rows of its keys at its base; a commit since then
//!   matters only if it added data files whose bounds may hold one of those keys (rows of our
//!   keys we did not see), or removed a file our position deletes point into (the rows moved);
//!   then the input is planned again. Appends of other keys, position deletes (a row deleted
//!   twice is deleted once) and `replace` snapshots (compaction, Spark's `rewrite_data_files`,
//!   `rewrite_position_delete_files`: every row kept) that keep our files leave the plan right;
//! - a rewrite (compaction) must still find the manifests it replaces; position deletes
//!   committed since its base against files it replaces are carried over to its new files
//!   ([`super::carry`]) when it has a row map, and otherwise mean planning again;
//! - a reload replaces whatever is live when it commits: only schema and spec matter;
//! - equality deletes, which Flink and some Spark jobs write, are refused: our lookups and
//!   compaction read position deletes only, and would resurrect rows.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use iceberg::spec::{ManifestContentType, ManifestStatus, Operation, Snapshot, TableMetadata};

use super::record::{AppliedRecord, Standing};
use super::{Base, Change, CommitError, KeyScope, RowMap, Staged};
use crate::files::deletes::{DeleteId, DeleteSource, Targets};
use crate::files::live::Scope;
use crate::files::metadata::ancestors;
use crate::files::{Files, Fill};
use crate::table::LoadedTable;

/// Why a prepared commit cannot go ahead as planned: the input must be planned again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// Another writer moved the catalog pointer between our load and our swap.
    SwapLost,
    TableDropped,
    TableRecreated,
    CreatedConcurrently,
    /// Some (not all) of the input files were applied by another writer meanwhile.
    InputPartlyApplied,
    /// Other DMS files were applied meanwhile: whether ours are late, superseded or a reload
    /// may have changed.
    RecordMoved,
    SchemaChanged,
    SpecChanged,
    /// The table moved to another format version (an operator's `upgrade`): what a plan
    /// wrote (position-delete files or deletion vectors, rows with or without their ids)
    /// follows the version it was planned on.
    FormatChanged,
    /// Our base snapshot is no longer in the table's history (rollback, or expired).
    HistoryRewritten,
    /// A commit that can change rows landed since our base: our keys must be located again.
    RowsChanged {
        snapshot: i64,
        operation: String,
    },
    /// A file our position deletes point into is gone (rewritten by compaction).
    ReferencedFileRemoved {
        file: String,
    },
    /// A delete file this commit's merged deletes replace was replaced or removed by another
    /// commit, or another commit added deletes for a data file this commit writes deletes for:
    /// its one delete file per data file would miss their positions.
    DeleteFileReplaced {
        file: String,
    },
    /// Compaction: a commit deleted rows of a file it replaces.
    DeletesAgainstRewrittenFile {
        file: String,
        snapshot: i64,
    },
}

impl Conflict {
    /// A stable name for logs and metrics.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Conflict::SwapLost => "swap_lost",
            Conflict::TableDropped => "table_dropped",
            Conflict::TableRecreated => "table_recreated",
            Conflict::CreatedConcurrently => "created_concurrently",
            Conflict::InputPartlyApplied => "input_partly_applied",
            Conflict::RecordMoved => "record_moved",
            Conflict::SchemaChanged => "schema_changed",
            Conflict::SpecChanged => "spec_changed",
            Conflict::FormatChanged => "format_changed",
            Conflict::HistoryRewritten => "history_rewritten",
            Conflict::RowsChanged { .. } => "rows_changed",
            Conflict::ReferencedFileRemoved { .. } => "referenced_file_removed",
            Conflict::DeleteFileReplaced { .. } => "delete_file_replaced",
            Conflict::DeletesAgainstRewrittenFile { .. } => "deletes_against_rewritten_file",
        }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::SwapLost => write!(f, "another commit landed first"),
            Conflict::TableDropped => write!(f, "the table was dropped since it was read"),
            Conflict::TableRecreated => {
                write!(f, "the table was dropped and re-created since it was read")
            }
            Conflict::CreatedConcurrently => {
                write!(f, "the table was created concurrently; re-reading it")
            }
            Conflict::InputPartlyApplied => {
                write!(f, "some of the input files were applied concurrently")
            }
            Conflict::RecordMoved => write!(f, "other DMS files were applied concurrently"),
            Conflict::SchemaChanged => write!(f, "the table schema changed concurrently"),
            Conflict::SpecChanged => write!(f, "the partition spec changed concurrently"),
            Conflict::FormatChanged => write!(f, "the table's format version changed concurrently"),
            Conflict::HistoryRewritten => write!(
                f,
                "the table's history was rolled back or expired past the snapshot this commit was planned on"
            ),
            Conflict::RowsChanged {
                snapshot,
                operation,
            } => write!(
                f,
                "snapshot {snapshot} ({operation}) was committed concurrently and may have changed rows of the same keys"
            ),
            Conflict::ReferencedFileRemoved { file } => {
                write!(f, "data file {file} was rewritten concurrently")
            }
            Conflict::DeleteFileReplaced { file } => write!(
                f,
                "the deletes of data file or delete file {file} changed concurrently"
            ),
            Conflict::DeletesAgainstRewrittenFile { file, snapshot } => write!(
                f,
                "snapshot {snapshot} deleted rows of {file}, which this rewrite replaces"
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Verdict {
    #[default]
    Proceed,
    /// Our snapshot is already in the table (an earlier attempt landed).
    AlreadyCommitted,
    /// The table's record already holds our input.
    AlreadyApplied,
}

type Check = std::result::Result<Option<Verdict>, CommitError>;
/// A rule of [`check_carrying`]; the argument receives the record a rule read.
type Rule<'a> = &'a dyn Fn(&mut Option<Arc<AppliedRecord>>) -> Check;

fn conflict(c: Conflict) -> CommitError {
    CommitError::Conflict(c)
}

/// Positions per replaced data file that commits since a rewrite's base deleted: the rewrite
/// carries them over to the files replacing them.
pub(crate) type CarriedDeletes = BTreeMap<String, Vec<i64>>;

/// What validation decided, and what it found that the attempt builds on.
#[derive(Debug, Default)]
pub(crate) struct Validated {
    pub verdict: Verdict,
    /// Deletes a rewrite must carry over to its new files.
    pub carry: CarriedDeletes,
    /// The table's applied-file record as validation read it (for a commit that updates it):
    /// the attempt derives the new record from it instead of decoding the property again.
    pub record: Option<Arc<AppliedRecord>>,
}

/// [`check_carrying`]'s verdict alone (the rule tests).
#[cfg(test)]
pub(crate) async fn check(
    staged: &Staged,
    current: Option<&LoadedTable>,
    files: &Files,
) -> std::result::Result<Verdict, CommitError> {
    Ok(check_carrying(staged, current, files).await?.verdict)
}

/// Runs every rule in order (the first that decides wins), and returns the deletes a rewrite
/// must carry over to its new files and the record it read.
pub(crate) async fn check_carrying(
    staged: &Staged,
    current: Option<&LoadedTable>,
    files: &Files,
) -> std::result::Result<Validated, CommitError> {
    let mut out = Validated::default();
    let Some(current) = current else {
        return match &staged.base {
            Base::Create(_) => Ok(out),
            Base::Existing(_) => Err(conflict(Conflict::TableDropped)),
        };
    };
    let now = current.metadata.as_ref();
    // In order, each run only if those before it decided nothing.
    let rules: [Rule; 4] = [
        &|_| already_committed(staged, now),
        &|_| table_is_the_planned_one(staged, now),
        &|record| input_not_applied(staged, now, record),
        &|_| schema_and_spec_unchanged(staged, now),
    ];
    for rule in rules {
        if let Some(v) = rule(&mut out.record)? {
            out.verdict = v;
            return Ok(out);
        }
    }
    let intervening = intervening_snapshots(staged, now)?;
    no_equality_deletes(&intervening)?;
    match &staged.change {
        Change::RowDelta {
            referenced_data_files,
            keys,
            kept_rows_in,
            checked,
            replaced_deletes,
            ..
        } => {
            row_delta_still_valid(
                RowDeltaReads {
                    referenced: referenced_data_files,
                    replaced: replaced_deletes,
                    kept: kept_rows_in,
                    keys,
                    checked,
                },
                now,
                &intervening,
                files,
            )
            .await?
        }
        Change::Rewrite {
            removed_data_files,
            row_map,
            ..
        } => {
            out.carry = rewrite_still_valid(
                removed_data_files,
                row_map.as_deref(),
                now,
                &intervening,
                files,
            )
            .await?;
        }
        // A reload replaces whatever is live when it commits; appended rows touch nothing; a
        // manifest rewrite lists whatever is live when it commits.
        Change::Reload | Change::Append | Change::RewriteManifests => {}
    }
    Ok(out)
}

/// Our snapshot id in the current ancestry means a previous attempt (whose outcome we did not
/// hear) committed: done, never commit twice.
///
/// Costs what can have been committed since our base, not the whole history: a snapshot the
/// table does not hold at all is not in its ancestry (one lookup, every first attempt), and
/// ours, if it landed, descends from our base (every attempt builds on the base or on a table
/// that still has the base among its ancestors, see [`intervening_snapshots`]), so the walk
/// stops at the base.
fn already_committed(staged: &Staged, now: &TableMetadata) -> Check {
    if now.snapshot_by_id(staged.snapshot_id).is_none() {
        return Ok(None);
    }
    let base = staged.base.metadata().current_snapshot_id();
    for s in ancestors(now) {
        if s.snapshot_id() == staged.snapshot_id {
            return Ok(Some(Verdict::AlreadyCommitted));
        }
        if Some(s.snapshot_id()) == base {
            break;
        }
    }
    Ok(None)
}

/// A table created concurrently by someone else, or dropped and re-created, is not the table
/// our files were written for (field ids may differ).
fn table_is_the_planned_one(staged: &Staged, now: &TableMetadata) -> Check {
    match &staged.base {
        // Full-load files of one load, committed at once, each create the table: one wins, and
        // the others' files fit it when it has the very shape they were written for.
        Base::Create(ours) if staged.change.joins_load() && same_shape(ours, now) => Ok(None),
        Base::Create(_) => Err(conflict(Conflict::CreatedConcurrently)),
        Base::Existing(b) if b.metadata.uuid() != now.uuid() => {
            Err(conflict(Conflict::TableRecreated))
        }
        Base::Existing(_) => Ok(None),
    }
}

/// Idempotency: input the table's record holds (applied by a concurrent worker, or by an
/// earlier attempt whose outcome we lost) must not be applied again. The record read is left in
/// `read` for the attempt.
fn input_not_applied(
    staged: &Staged,
    now: &TableMetadata,
    read: &mut Option<Arc<AppliedRecord>>,
) -> Check {
    let Some(update) = &staged.record else {
        return Ok(None);
    };
    if update.truncate.is_some() {
        // A truncate removes every live row: files applied since it was planned must be
        // planned into it (applied again after it, if written after the truncate).
        let record = read.insert(AppliedRecord::of_table(now)?.unwrap_or_default());
        return match *record == update.base_record {
            true => Ok(None),
            false => Err(conflict(Conflict::RecordMoved)),
        };
    }
    if update.inputs.is_empty() {
        return Ok(None);
    }
    let record = read.insert(AppliedRecord::of_table(now)?.unwrap_or_default());
    let done = update
        .inputs
        .iter()
        .filter(|i| record.classify(&i.order, i.kind, &i.meta) == Standing::Applied)
        .count();
    if done == update.inputs.len() {
        Ok(Some(Verdict::AlreadyApplied))
    } else if done > 0 {
        Err(conflict(Conflict::InputPartlyApplied))
    } else if *record != update.base_record
        && !(staged.change.joins_load() && still_joins_its_load(update, record))
        && !(matches!(staged.change, Change::Append) && still_appends(update, record))
    {
        Err(conflict(Conflict::RecordMoved))
    } else {
        Ok(None)
    }
}

/// A full-load input may follow other files of its load applied meanwhile: the record moved
/// only within the same load (no reload, nothing applied on top), and every input still joins
/// that load as a plain file of it.
fn still_joins_its_load(update: &super::RecordUpdate, now: &AppliedRecord) -> bool {
    same_load(&update.base_record, now)
        && !update.reload
        && update
            .inputs
            .iter()
            .all(|i| now.classify(&i.order, i.kind, &i.meta) == (Standing::Pending { late: false }))
}

/// Appended rows follow whatever was applied meanwhile: the record moved only within the same
/// load (no reload since), and every input is still one to apply.
fn still_appends(update: &super::RecordUpdate, now: &AppliedRecord) -> bool {
    same_load(&update.base_record, now)
        && !update.reload
        && update.inputs.iter().all(|i| {
            matches!(
                now.classify(&i.order, i.kind, &i.meta),
                Standing::Pending { .. }
            )
        })
}

/// The record moved only within the load `base` was planned on (the first load counts as the
/// one a table without a load was waiting for).
fn same_load(base: &AppliedRecord, now: &AppliedRecord) -> bool {
    now.load.number == base.load.number || (base.load.number == 0 && now.load.number == 1)
}

/// Whether `now` (a table another writer created) is exactly the table `ours` would have
/// created: same schema with the same field ids, key, partition spec, sort order, location.
fn same_shape(ours: &TableMetadata, now: &TableMetadata) -> bool {
    let (a, b) = (ours.current_schema(), now.current_schema());
    a.as_struct() == b.as_struct()
        && a.identifier_field_ids().collect::<BTreeSet<_>>()
            == b.identifier_field_ids().collect::<BTreeSet<_>>()
        && ours.current_schema_id() == now.current_schema_id()
        && ours.last_column_id() == now.last_column_id()
        && ours.default_partition_spec_id() == now.default_partition_spec_id()
        && ours.default_partition_spec().fields() == now.default_partition_spec().fields()
        && ours.default_sort_order() == now.default_sort_order()
        && ours.location() == now.location()
        && ours.format_version() == now.format_version()
}

/// Our files were written with the schema and partition spec planned from the base; a
/// concurrent schema or spec change could give field ids or partitions another meaning.
fn schema_and_spec_unchanged(staged: &Staged, now: &TableMetadata) -> Check {
    let base = staged.base.metadata();
    if now.current_schema_id() != base.current_schema_id()
        || now.last_column_id() != base.last_column_id()
        || now.schemas_iter().len() != base.schemas_iter().len()
    {
        return Err(conflict(Conflict::SchemaChanged));
    }
    if now.default_partition_spec_id() != base.default_partition_spec_id()
        || now.partition_specs_iter().len() != base.partition_specs_iter().len()
    {
        return Err(conflict(Conflict::SpecChanged));
    }
    if now.format_version() != base.format_version() {
        return Err(conflict(Conflict::FormatChanged));
    }
    Ok(None)
}

/// Snapshots committed since our base, newest first; our base must still be an ancestor.
fn intervening_snapshots(
    staged: &Staged,
    now: &TableMetadata,
) -> std::result::Result<Vec<Arc<Snapshot>>, CommitError> {
    let base_snapshot = staged.base.metadata().current_snapshot_id();
    if now.current_snapshot_id() == base_snapshot {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for s in ancestors(now) {
        if Some(s.snapshot_id()) == base_snapshot {
            return Ok(out);
        }
        out.push(s.clone());
    }
    if base_snapshot.is_none() {
        return Ok(out);
    }
    Err(conflict(Conflict::HistoryRewritten))
}

/// Equality deletes from another engine: refused, whatever this commit is.
fn no_equality_deletes(intervening: &[Arc<Snapshot>]) -> std::result::Result<(), CommitError> {
    for s in intervening {
        let p = &s.summary().additional_properties;
        let added = |k: &str| p.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        if added("added-equality-delete-files") > 0 || added("added-equality-deletes") > 0 {
            return Err(CommitError::Failed(crate::files::equality_deletes_refused(
                &format!(
                    "snapshot {} ({})",
                    s.snapshot_id(),
                    s.summary().operation.as_str()
                ),
            )));
        }
    }
    Ok(())
}

/// What a row delta's plan read: the rows it deletes (in `referenced` files, whose live delete
/// files it replaces with its own), the rows it left as newer (in `kept` files), and the keys it
/// changes.
struct RowDeltaReads<'a> {
    referenced: &'a BTreeSet<String>,
    replaced: &'a BTreeSet<DeleteId>,
    kept: &'a BTreeSet<String>,
    keys: &'a KeyScope,
    checked: &'a Mutex<BTreeSet<i64>>,
}

/// A row delta (ingest, a full-load file's append) conflicts with a commit since its base only
/// if that commit changed what its plan read: added rows that may hold one of its keys, deleted
/// a row it left in place as newer, added or removed deletes of a data file it writes the one
/// delete file of, or removed a file it deletes rows of. Each intervening snapshot's added
/// files are checked once ([`changes_what_we_read`]; a `replace` keeps every row where it was,
/// so only what it does to deletes counts), after every file the plan read rows of was found
/// still live.
async fn row_delta_still_valid(
    reads: RowDeltaReads<'_>,
    now: &TableMetadata,
    intervening: &[Arc<Snapshot>],
    files: &Files,
) -> std::result::Result<(), CommitError> {
    use futures::{StreamExt, TryStreamExt};
    // A file the plan read rows of that is gone (rewritten) is the first thing to say.
    let read_rows = !(reads.referenced.is_empty() && reads.kept.is_empty());
    if !intervening.is_empty() && read_rows {
        let live = live_data_files(now, files).await?;
        if let Some(gone) = reads
            .referenced
            .iter()
            .chain(reads.kept)
            .find(|f| !live.contains(*f))
        {
            return Err(conflict(Conflict::ReferencedFileRemoved {
                file: gone.clone(),
            }));
        }
    }
    let checked = reads.checked;
    let seen = |id: i64| checked.lock().is_ok_and(|c| c.contains(&id));
    // A `replace` keeps every row, but may rewrite the deletes of files this commit deletes
    // rows of.
    let deletes_matter = !reads.referenced.is_empty() || !reads.replaced.is_empty();
    let unchecked: Vec<&Arc<Snapshot>> = intervening
        .iter()
        .filter(|s| {
            (s.summary().operation != Operation::Replace || deletes_matter)
                && !seen(s.snapshot_id())
        })
        .collect();
    // Many files of one load commit while a large one is read: their manifests are read
    // concurrently (on object storage each is a round trip).
    // By index: a closure over borrowed items trips rustc's higher-ranked Send check.
    let (unchecked_ref, reads_ref) = (&unchecked, &reads);
    let found: Vec<(i64, Option<Conflict>)> = futures::stream::iter(0..unchecked.len())
        .map(|i| async move {
            let s = unchecked_ref[i];
            changes_what_we_read(reads_ref, now, s, files)
                .await
                .map(|o| (s.snapshot_id(), o))
        })
        .buffered(crate::files::parquet::READ_CONCURRENCY)
        .try_collect()
        .await?;
    for (snapshot, found) in found {
        if let Some(c) = found {
            return Err(conflict(c));
        }
        if let Ok(mut c) = checked.lock() {
            c.insert(snapshot);
        }
    }
    Ok(())
}

/// What snapshot `s` changed of what the plan read: a data file that may hold one of our keys
/// (keys not known: any snapshot that is not a `replace` may have, the strict rule); a
/// position-delete file that may delete rows of a file we delete rows of or kept rows of; or
/// the removal of a delete file we replace.
async fn changes_what_we_read(
    reads: &RowDeltaReads<'_>,
    now: &TableMetadata,
    s: &Snapshot,
    files: &Files,
) -> std::result::Result<Option<Conflict>, CommitError> {
    let rows_changed = || {
        Some(Conflict::RowsChanged {
            snapshot: s.snapshot_id(),
            operation: s.summary().operation.as_str().to_string(),
        })
    };
    if s.summary().operation != Operation::Replace {
        if matches!(reads.keys, KeyScope::Unknown) {
            return Ok(rows_changed());
        }
        for manifest in files.added_by(now, s, ManifestContentType::Data).await? {
            if manifest
                .entries()
                .iter()
                .any(|e| e.status() == ManifestStatus::Added && reads.keys.may_hold(e.data_file()))
            {
                return Ok(rows_changed());
            }
        }
    }
    if reads.kept.is_empty() && reads.referenced.is_empty() && reads.replaced.is_empty() {
        return Ok(None);
    }
    for manifest in files.added_by(now, s, ManifestContentType::Deletes).await? {
        for e in manifest.entries() {
            let f = e.data_file();
            match e.status() {
                ManifestStatus::Added => {
                    let targets = Targets::of(f);
                    if targets.may_target_any(reads.kept) {
                        return Ok(rows_changed());
                    }
                    if targets.may_target_any(reads.referenced) {
                        return Ok(Some(Conflict::DeleteFileReplaced {
                            file: f.file_path().to_string(),
                        }));
                    }
                }
                ManifestStatus::Deleted if reads.replaced.contains(&DeleteId::of(f)) => {
                    return Ok(Some(Conflict::DeleteFileReplaced {
                        file: DeleteId::of(f).to_string(),
                    }));
                }
                _ => {}
            }
        }
    }
    Ok(None)
}

/// The files a rewrite replaces must still be live (another rewrite of them, a reload, or a
/// rollback means planning again); position deletes committed since the base against them are
/// returned to be carried over (each must be covered by `row_map`, else the rewrite is planned
/// again). Manifests rewritten meanwhile do not matter: each attempt finds the files in
/// whatever manifests list them then.
async fn rewrite_still_valid(
    removed_data_files: &BTreeSet<String>,
    row_map: Option<&RowMap>,
    now: &TableMetadata,
    intervening: &[Arc<Snapshot>],
    files: &Files,
) -> std::result::Result<CarriedDeletes, CommitError> {
    let mut carry = CarriedDeletes::new();
    if intervening.is_empty() {
        return Ok(carry);
    }
    let live = live_data_files(now, files).await?;
    if let Some(gone) = removed_data_files.iter().find(|f| !live.contains(*f)) {
        return Err(conflict(Conflict::ReferencedFileRemoved {
            file: gone.clone(),
        }));
    }
    for s in intervening {
        for manifest in files.added_by(now, s, ManifestContentType::Deletes).await? {
            for e in manifest.entries() {
                if e.status() != ManifestStatus::Added {
                    continue;
                }
                let f = e.data_file();
                if f.referenced_data_file()
                    .is_some_and(|r| !removed_data_files.contains(&r))
                {
                    continue;
                }
                let (content, _) = files
                    .position_deletes(&DeleteSource::of(f)?, Fill::Pass)
                    .await?;
                for (target, positions) in content.iter() {
                    if !removed_data_files.contains(target) {
                        continue;
                    }
                    if !row_map.is_some_and(|r| r.covers(target)) {
                        return Err(conflict(Conflict::DeletesAgainstRewrittenFile {
                            file: target.clone(),
                            snapshot: s.snapshot_id(),
                        }));
                    }
                    carry
                        .entry(target.clone())
                        .or_default()
                        .extend_from_slice(positions);
                }
            }
        }
    }
    Ok(carry)
}

/// Paths of the data files in the current snapshot.
pub(crate) async fn live_data_files(
    md: &TableMetadata,
    files: &Files,
) -> std::result::Result<BTreeSet<String>, CommitError> {
    let live = files.live(md, Scope::Data, Fill::Pass).await?;
    Ok(live
        .data()
        .map(|d| d.file().file_path().to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{
        DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, Struct,
    };

    use super::super::{KeyBounds, KeyScope};

    fn file(name: &str, lo: Datum, hi: Datum) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("{name}.parquet"))
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(1)
            .file_size_in_bytes(1)
            .lower_bounds([(1, lo)].into())
            .upper_bounds([(1, hi)].into())
            .build()
            .expect("data file")
    }

    /// A key widened from int to long: the bounds of files written before (4-byte, read as
    /// `int`) and after (`long`) are one range, and another writer's file conflicts exactly
    /// when its range meets ours, whichever side is the narrower.
    #[test]
    fn key_bounds_compare_across_a_widened_key() {
        let big = i64::from(i32::MAX) + 10;
        let old = file("old", Datum::int(100), Datum::int(150));
        let new = file("new", Datum::long(big), Datum::long(big + 5));
        let ours = KeyBounds::of([&old, &new], &[1]);
        assert_eq!(
            ours,
            KeyBounds(Some([(1, (Datum::int(100), Datum::long(big + 5)))].into()))
        );
        // Either order of the files gives the same range.
        let reversed = KeyBounds::of([&new, &old], &[1]);
        assert!(reversed.may_overlap(&file("x", Datum::int(99), Datum::int(100))));
        assert!(!reversed.may_overlap(&file("x", Datum::int(0), Datum::int(99))));

        for ours in [&ours, &reversed] {
            assert!(ours.may_overlap(&file("a", Datum::long(big + 5), Datum::long(big + 9))));
            assert!(!ours.may_overlap(&file("b", Datum::long(big + 6), Datum::long(big + 9))));
            assert!(!ours.may_overlap(&file("c", Datum::int(0), Datum::int(99))));
            assert!(ours.may_overlap(&file("d", Datum::int(0), Datum::int(100))));
            let scope = KeyScope::Bounds((*ours).clone());
            assert!(!scope.may_hold(&file("e", Datum::long(-5), Datum::long(99))));
            assert!(scope.may_hold(&file("f", Datum::int(120), Datum::int(120))));
        }
        // Only the narrow file's range: a long file beyond the int range does not meet it.
        let narrow = KeyBounds::of([&old], &[1]);
        assert!(!narrow.may_overlap(&new));
        assert!(narrow.may_overlap(&file("g", Datum::long(150), Datum::long(big))));

        // Bounds that compare in no order (another type altogether) leave the range unknown.
        let odd = file("s", Datum::string("a"), Datum::string("b"));
        assert_eq!(KeyBounds::of([&old, &odd], &[1]), KeyBounds(None));
        assert!(narrow.may_overlap(&odd));
    }
}
