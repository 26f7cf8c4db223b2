//! The backlog policy of an event-driven ingest: given a table's DMS files (its folder's listing
//! in DMS order) and its applied-file record, which files a run applies, and afterwards which
//! the table holds and how long the oldest one it does not hold has waited. The Lambda handler
//! (`lambda::ingest`) lists, reads and reports; what to apply is decided here.
//!
//! Invariants: a run applies pending files in DMS order from the oldest, at most `cap` of them,
//! so a late, lost or duplicated event never reorders or re-applies changes; the one exception
//! is a full load in progress, where an event for some of its files applies those and only
//! those (the load's other files are applied by their own events, at the same time). A file
//! counts as held only when the record settles it under the same file name (DMS reuses names
//! of LOAD files, never the place in DMS order of a file with another name).

use std::collections::BTreeSet;

use crate::commit::{AppliedRecord, Standing};
use crate::locate::{DmsObject, FileKind, ObjectMeta};
use crate::ops::ingest::TableReport;

/// One file of a table's folder as the policy sees it: where it is in DMS order, and what its
/// listing tells of its content.
pub(crate) type Listed = (DmsObject, ObjectMeta);

/// Whether the table's record has settled `o`: applied, superseded by a reload, or older than
/// the record and unchanged since (taken as applied). A LOAD file whose identity only its
/// content can tell is not settled: the ingest reads it. A file at the place of an applied file
/// of another name is not settled: the ingest refuses it (two files at one place in DMS order).
pub(crate) fn settled(record: &AppliedRecord, o: &DmsObject, meta: &ObjectMeta) -> bool {
    let settled = matches!(
        record.classify(&o.order, o.kind, meta),
        Standing::Applied | Standing::Superseded(_) | Standing::BeyondRecord { loud: false }
    );
    settled
        && record
            .key_at(&o.order)
            .is_none_or(|k| crate::locate::same_file_name(k, &o.key))
}

/// The files (indices into `files`, in DMS order) a run applies for an event that names the
/// object keys `named`: the backlog up to `cap` files, or during a full load the named files of
/// the load alone.
pub(crate) fn to_apply(
    files: &[Listed],
    named: &[&str],
    applied: &AppliedRecord,
    cap: usize,
) -> Vec<usize> {
    let (others, load_files) = load_in_progress(files, named, applied);
    if others {
        return load_files;
    }
    (0..files.len())
        .filter(|&i| !settled(applied, &files[i].0, &files[i].1))
        .take(cap)
        .collect()
}

/// Whether the event names files of the table's current load while other files of it are
/// pending (their own events apply them elsewhere, at the same time), and then the named ones
/// to apply: the pending full-load files that join the load as plain files of it (not a
/// reload, nothing applied on top of the load yet), in DMS order.
fn load_in_progress(
    files: &[Listed],
    named: &[&str],
    applied: &AppliedRecord,
) -> (bool, Vec<usize>) {
    let in_load = |o: &DmsObject, meta: &ObjectMeta| {
        o.kind == FileKind::Load
            && matches!(
                applied.classify(&o.order, o.kind, meta),
                Standing::Pending { late: false } | Standing::Applied
            )
    };
    let names_the_load = files
        .iter()
        .any(|(o, meta)| named.contains(&o.key.as_str()) && in_load(o, meta));
    let (mine, others): (Vec<usize>, Vec<usize>) = (0..files.len())
        .filter(|&i| {
            let (o, meta) = &files[i];
            o.kind == FileKind::Load
                && applied.classify(&o.order, o.kind, meta) == (Standing::Pending { late: false })
        })
        .partition(|&i| named.contains(&files[i].0.key.as_str()));
    (names_the_load && !others.is_empty(), mine)
}

/// The object keys of `files` the table holds after a run that ended without an error: those
/// held before it (`before`), those the run's commits settled (applied, skipped, superseded or
/// taken as applied; a loud file is not), and those configuration skips.
pub(crate) fn held_after_run(
    files: &[Listed],
    before: &AppliedRecord,
    report: &TableReport,
    skipped: impl Fn(&str) -> bool,
) -> BTreeSet<String> {
    let by_run: BTreeSet<&str> = report
        .commits
        .iter()
        .filter(|c| !c.loud)
        .flat_map(|c| c.files.iter().map(String::as_str))
        .collect();
    files
        .iter()
        .filter(|(o, meta)| {
            settled(before, o, meta) || by_run.contains(o.key.as_str()) || skipped(&o.key)
        })
        .map(|(o, _)| o.key.clone())
        .collect()
}

/// The object keys of `files` the table's `record` holds (read again after a run that failed),
/// or configuration skips.
pub(crate) fn held(
    files: &[Listed],
    record: &AppliedRecord,
    skipped: impl Fn(&str) -> bool,
) -> BTreeSet<String> {
    files
        .iter()
        .filter(|(o, meta)| settled(record, o, meta) || skipped(&o.key))
        .map(|(o, _)| o.key.clone())
        .collect()
}

/// Seconds the oldest file of `files` the table does not hold has waited at `now_ms`: 0 for a
/// table that is caught up (quiet periods count as none), growing at every retry of a table
/// that is stuck.
pub(crate) fn backlog_age_s(files: &[Listed], held: &BTreeSet<String>, now_ms: i64) -> f64 {
    files
        .iter()
        .filter(|(o, _)| !held.contains(&o.key))
        .filter_map(|(_, meta)| meta.modified_ms)
        .min()
        .map_or(0.0, |m| (now_ms - m).max(0) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::AppliedInput;
    use crate::config::SourceSettings;

    /// Change files of `sales.product` with these names, each modified at `at_ms`.
    fn listed(names: &[&str], at_ms: i64) -> Vec<Listed> {
        names
            .iter()
            .map(|n| {
                let uri = format!("s3://b/sales/product/{n}");
                let o = crate::locate::locate(&uri, &SourceSettings::default())
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| panic!("{uri} is a DMS key"));
                let meta = ObjectMeta {
                    size: Some(1),
                    modified_ms: Some(at_ms),
                    ..Default::default()
                };
                (o, meta)
            })
            .collect()
    }

    /// A run takes the pending files in DMS order, at most the cap; a file the record holds is
    /// settled (and counts as held), and the backlog's age is that of the oldest file not held.
    #[test]
    fn a_run_applies_the_backlog_in_order_up_to_the_cap() {
        let files = listed(
            &[
                "20220302-1134010000.csv",
                "20220302-1134020000.csv",
                "20220302-1134030000.csv",
            ],
            1_000,
        );
        let nothing = AppliedRecord::default();
        assert_eq!(to_apply(&files, &[], &nothing, 2), vec![0, 1]);
        let (o, meta) = &files[0];
        let first = nothing.applied(
            &[AppliedInput {
                order: o.order.clone(),
                key: o.key.clone(),
                kind: o.kind,
                meta: meta.clone(),
            }],
            false,
            None,
            100,
            2_000,
        );
        assert!(settled(&first, o, meta));
        assert_eq!(to_apply(&files, &[], &first, 2), vec![1, 2]);
        let held_now = held(&files, &first, |_| false);
        assert_eq!(held_now, BTreeSet::from([o.key.clone()]));
        assert_eq!(backlog_age_s(&files, &held_now, 4_000), 3.0);
        let all: BTreeSet<String> = files.iter().map(|(o, _)| o.key.clone()).collect();
        assert_eq!(backlog_age_s(&files, &all, 4_000), 0.0);
        // Skipped by configuration: held without being applied.
        assert_eq!(held(&files, &nothing, |_| true), all);
    }
}
