//! Validation of a prepared commit against the table as it is now, run before every attempt.
//! [`check`] calls one method per rule; each failure says what happened and what follows.

use std::collections::BTreeSet;

use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, ManifestContentType, Operation, TableMetadata};

use super::{Base, CommitError, Staged};
use crate::table::{LoadedTable, ancestry, applied_files};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    /// Our snapshot is already in the table (an earlier attempt landed).
    AlreadyCommitted,
    /// The table's watermark already covers our input.
    AlreadyApplied,
}

type Check = std::result::Result<Option<Verdict>, CommitError>;

fn replan(reason: impl Into<String>) -> CommitError {
    CommitError::Replan(reason.into())
}

pub async fn check(
    staged: &Staged,
    current: Option<&LoadedTable>,
    file_io: &FileIO,
) -> std::result::Result<Verdict, CommitError> {
    let Some(current) = current else {
        return match &staged.base {
            Base::Create(_) => Ok(Verdict::Proceed),
            Base::Existing(_) => Err(replan("the table was dropped since it was read")),
        };
    };
    let now = current.metadata.as_ref();
    for rule in [
        already_committed(staged, now),
        table_is_the_planned_one(staged, now),
        input_not_applied(staged, now),
        schema_and_spec_unchanged(staged, now),
    ] {
        if let Some(v) = rule? {
            return Ok(v);
        }
    }
    if let Some(v) = intervening_commits_are_compatible(staged, now, file_io).await? {
        return Ok(v);
    }
    Ok(Verdict::Proceed)
}

/// Our snapshot id in the current ancestry means a previous attempt (whose outcome we did not
/// hear) committed: done, never commit twice.
fn already_committed(staged: &Staged, now: &TableMetadata) -> Check {
    Ok(ancestry(now)
        .iter()
        .any(|s| s.snapshot_id() == staged.snapshot_id)
        .then_some(Verdict::AlreadyCommitted))
}

/// A table created concurrently by someone else, or dropped and re-created, is not the table
/// our files were written for (field ids may differ).
fn table_is_the_planned_one(staged: &Staged, now: &TableMetadata) -> Check {
    match &staged.base {
        Base::Create(_) => Err(replan("the table was created concurrently; re-reading it")),
        Base::Existing(b) if b.metadata.uuid() != now.uuid() => Err(replan(
            "the table was dropped and re-created since it was read",
        )),
        Base::Existing(_) => Ok(None),
    }
}

/// Idempotency: an input the table's snapshots record as applied (by us earlier, or by a
/// concurrent worker) must not be applied again.
fn input_not_applied(staged: &Staged, now: &TableMetadata) -> Check {
    if staged.input_orders.is_empty() {
        return Ok(None);
    }
    let applied = applied_files(now);
    let done = staged
        .input_orders
        .iter()
        .filter(|o| applied.contains(o))
        .count();
    if done == staged.input_orders.len() {
        Ok(Some(Verdict::AlreadyApplied))
    } else if done > 0 {
        Err(replan("some of the input files were applied concurrently"))
    } else {
        Ok(None)
    }
}

/// Our files were written with the schema and partition spec planned from the base; a
/// concurrent schema or spec change could give field ids or partitions another meaning.
fn schema_and_spec_unchanged(staged: &Staged, now: &TableMetadata) -> Check {
    let base = staged.base.metadata();
    if now.current_schema_id() != base.current_schema_id()
        || now.last_column_id() != base.last_column_id()
        || now.schemas_iter().len() != base.schemas_iter().len()
    {
        return Err(replan("the table schema changed concurrently"));
    }
    if now.default_partition_spec_id() != base.default_partition_spec_id()
        || now.partition_specs_iter().len() != base.partition_specs_iter().len()
    {
        return Err(replan("the partition spec changed concurrently"));
    }
    Ok(None)
}

/// Commits since our base. An ingest may only be preceded by compaction (`replace`), and only
/// if every data file its position deletes reference is still live; any other commit may have
/// changed rows of its keys, so they must be located again. A rewrite (compaction) may follow
/// anything that left the manifests it replaces in place and added no deletes against the files
/// it removes (else those deletes would be lost with the files).
async fn intervening_commits_are_compatible(
    staged: &Staged,
    now: &TableMetadata,
    file_io: &FileIO,
) -> Check {
    let base_snapshot = staged.base.metadata().current_snapshot_id();
    if now.current_snapshot_id() == base_snapshot {
        return Ok(None);
    }
    let mut intervening = Vec::new();
    let mut found_base = base_snapshot.is_none();
    for s in ancestry(now) {
        if Some(s.snapshot_id()) == base_snapshot {
            found_base = true;
            break;
        }
        intervening.push(s.clone());
    }
    if !found_base {
        return Err(replan(
            "the table's history was rolled back or rewritten since it was read",
        ));
    }
    if staged.operation == Operation::Replace {
        return rewrite_still_valid(staged, now, &intervening, file_io).await;
    }
    if let Some(s) = intervening
        .iter()
        .find(|s| s.summary().operation != Operation::Replace)
    {
        return Err(replan(format!(
            "snapshot {} ({}) was committed concurrently",
            s.snapshot_id(),
            s.summary().operation.as_str()
        )));
    }
    if staged.referenced_data_files.is_empty() {
        return Ok(None);
    }
    let live = live_data_files(now, file_io).await?;
    if let Some(gone) = staged
        .referenced_data_files
        .iter()
        .find(|f| !live.contains(*f))
    {
        return Err(replan(format!(
            "data file {gone} was rewritten concurrently (compaction)"
        )));
    }
    Ok(None)
}

async fn rewrite_still_valid(
    staged: &Staged,
    now: &TableMetadata,
    intervening: &[std::sync::Arc<iceberg::spec::Snapshot>],
    file_io: &FileIO,
) -> Check {
    if let Some(current) = now.current_snapshot() {
        let listed: BTreeSet<String> = crate::table::manifest_list(file_io, now, current)
            .await?
            .into_iter()
            .map(|m| m.manifest_path)
            .collect();
        if let Some(m) = staged
            .replaced_manifests
            .iter()
            .find(|m| !listed.contains(*m))
        {
            return Err(replan(format!("manifest {m} was rewritten concurrently")));
        }
    }
    for s in intervening {
        for m in crate::table::manifest_list(file_io, now, s).await? {
            if m.content != ManifestContentType::Deletes || m.added_snapshot_id != s.snapshot_id() {
                continue;
            }
            let manifest = m.load_manifest(file_io).await.map_err(crate::Error::from)?;
            for e in manifest.entries() {
                if e.status() != iceberg::spec::ManifestStatus::Added {
                    continue;
                }
                let f = e.data_file();
                let targets: Vec<String> = match f.referenced_data_file() {
                    Some(r) => vec![r],
                    None => crate::lookup::read_position_deletes(
                        file_io,
                        f.file_path(),
                        f.file_size_in_bytes(),
                    )
                    .await?
                    .into_keys()
                    .collect(),
                };
                if let Some(t) = targets
                    .iter()
                    .find(|t| staged.removed_data_files.contains(*t))
                {
                    return Err(replan(format!(
                        "snapshot {} deleted rows of {t}, which this rewrite replaces",
                        s.snapshot_id()
                    )));
                }
            }
        }
    }
    Ok(None)
}

/// Paths of the data files in the current snapshot.
pub async fn live_data_files(
    md: &TableMetadata,
    file_io: &FileIO,
) -> std::result::Result<BTreeSet<String>, CommitError> {
    let mut out = BTreeSet::new();
    let Some(s) = md.current_snapshot() else {
        return Ok(out);
    };
    for m in crate::table::manifest_list(file_io, md, s).await? {
        if m.content != ManifestContentType::Data {
            continue;
        }
        let manifest = m.load_manifest(file_io).await.map_err(crate::Error::from)?;
        for e in manifest.entries() {
            if e.is_alive() && e.content_type() == DataContentType::Data {
                out.insert(e.file_path().to_string());
            }
        }
    }
    Ok(out)
}
