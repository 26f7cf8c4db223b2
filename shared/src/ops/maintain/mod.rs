//! Table maintenance: expire old snapshots (and delete the files only they referenced), find or
//! delete orphan files (in the table's folder, referenced by no snapshot or metadata), rewrite
//! a table's manifests into few, check that every snapshot reads ([`verify`]) and point a
//! damaged table back at intact metadata ([`repair`]).
//! Both have a dry-run mode that lists what would go. Orphans younger than a safety age are
//! never touched: they may belong to a commit in flight.
//!
//! Other Iceberg writers (Spark, Glue, Athena, PyIceberg) share our tables, and each spells
//! locations its own way: Iceberg Java on a local disk writes `file:/x` where we write
//! `file:///x`, Hadoop's S3A writes `s3a://` where AWS SDK writers write `s3://`. Every
//! comparison therefore goes through [`normalize_location`]. A file counts as live when any
//! retained metadata references it (every snapshot's manifest list, manifests and their
//! entries, the metadata log, statistics and partition-statistics files), and the current
//! metadata.json and anything newer (a concurrent commit) is never deleted. When a referenced
//! location cannot be matched to the listing at all (another scheme, bucket or root), a file
//! that looks unreferenced may still be in use: `orphans` then refuses to delete and says why.
//!
//! One file per idea: [`location`] (the one spelling of a location, metadata versions),
//! [`expire`], [`orphans`], [`verify`] and [`repair`]; what a table's snapshots reach, which
//! expiry and orphans both need, is here.

mod expire;
mod location;
mod manifests;
mod orphans;
mod repair;
mod verify;

use std::collections::{BTreeMap, BTreeSet};

use iceberg::spec::TableMetadata;

use crate::error::Result;
use crate::files::{Files, Fill};

pub use expire::{ExpireReport, ExpireSnapshots};
pub use location::{metadata_version, normalize_location};
pub use manifests::{RewriteManifests, RewriteManifestsReport};
pub use orphans::{OrphanFile, OrphanReport, Orphans};
pub use repair::{REPAIRED, Repair, RepairReport};
pub use verify::{Problem, Verify, VerifyReport};

/// Every file snapshots reach (`only`: just those snapshots): manifest lists, manifests and the
/// data and delete files their entries name, normalized → as referenced; with `live_only`,
/// only entries that are live in some snapshot (a DELETED entry records a removal, it does not
/// keep the file).
pub(super) async fn reachable(
    files: &Files,
    md: &TableMetadata,
    only: Option<&[i64]>,
    live_only: bool,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut add = |loc: &str| {
        out.entry(normalize_location(loc))
            .or_insert_with(|| loc.to_string());
    };
    let mut seen_manifests = BTreeSet::new();
    let mut manifests = Vec::new();
    for s in md.snapshots() {
        if only.is_some_and(|o| !o.contains(&s.snapshot_id())) {
            continue;
        }
        add(s.manifest_list());
        for m in files.manifest_list(md, s).await?.iter() {
            if seen_manifests.insert(m.manifest_path.clone()) {
                add(&m.manifest_path);
                manifests.push(m.clone());
            }
        }
    }
    // Every manifest of the history, once: read through without filling the cache, so the
    // next commit still finds what it needs there.
    for manifest in files.manifests(&manifests, Fill::Pass).await? {
        for e in manifest.entries() {
            if !live_only || e.is_alive() {
                add(e.file_path());
            }
        }
    }
    Ok(out)
}
