//! Table maintenance: expire old snapshots (and delete the files only they referenced), and
//! find or delete orphan files (in the table's folder, referenced by no snapshot or metadata).
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

use std::collections::{BTreeMap, BTreeSet};

use iceberg::TableIdent;
use iceberg::spec::TableMetadata;
use serde::Serialize;
use tracing::{info, warn};

use crate::catalog::{Catalog, ListedFile};
use crate::commit::commit_metadata;
use crate::error::{Error, Result};
use crate::files::{Files, Fill};
use crate::table::{LoadedTable, ancestry, keys};

/// The one spelling of a location that every writer's spelling of it maps to, for comparing:
/// `file:/x`, `file:///x`, `file://x` (as iceberg-rust reads it) and `/x` become `file:///x`;
/// `s3a://` and `s3n://` become `s3://`; `%XX` escapes are decoded; repeated slashes in the
/// path collapse and a trailing one goes. Two different files may in rare cases map to one
/// form (`a%20b` and `a b`): the callers only ever keep more because of it, never delete more.
pub fn normalize_location(location: &str) -> String {
    let (scheme, rest) = match split_scheme(location) {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("file".to_string(), location),
    };
    match scheme.as_str() {
        "file" => format!("file:///{}", clean_path(rest.trim_start_matches('/'))),
        "s3" | "s3a" | "s3n" => {
            let rest = rest.trim_start_matches('/');
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            format!("s3://{}/{}", bucket.to_ascii_lowercase(), clean_path(key))
        }
        other => {
            let rest = rest.trim_start_matches('/');
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            format!("{other}://{authority}/{}", clean_path(path))
        }
    }
}

/// `scheme:` and what follows, if `location` starts with a URI scheme (RFC 3986: a letter,
/// then letters, digits, `+`, `-`, `.`). A Windows drive letter is not one we meet.
fn split_scheme(location: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = location.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some((scheme, rest))
}

/// A path with `%XX` decoded, empty segments dropped (repeated and trailing slashes).
fn clean_path(path: &str) -> String {
    percent_decode(path)
        .split('/')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Whether `location` (normalized) lies under the folder `root` (normalized).
fn is_under(location: &str, root: &str) -> bool {
    location
        .strip_prefix(root.trim_end_matches('/'))
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The version in a metadata file's name: `00012-<uuid>.metadata.json` (our and Iceberg
/// Java's catalogs, `.gz` variants too) or a Hadoop table's `v12.metadata.json`.
pub fn metadata_version(location: &str) -> Option<u64> {
    let name = location.rsplit('/').next()?;
    let stem = name
        .strip_suffix(".metadata.json.gz")
        .or_else(|| name.strip_suffix(".gz.metadata.json"))
        .or_else(|| name.strip_suffix(".metadata.json"))?;
    let digits = match stem.strip_prefix('v') {
        Some(v) => v,
        None => stem.split_once('-')?.0,
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Every location the retained metadata of a table references, normalized, with what made it
/// live; and what cannot be matched to a listing of the table's folder.
struct Live {
    /// normalized location → as referenced
    refs: BTreeMap<String, String>,
    /// The table's folder, normalized: what `list_files` lists.
    root: String,
    /// The current metadata file's version: it and newer ones are never orphans.
    current_version: Option<u64>,
}

impl Live {
    async fn collect(files: &Files, table: &LoadedTable) -> Result<Live> {
        let md = &table.metadata;
        let mut refs = reachable(files, md, None, false).await?;
        let mut add = |loc: &str| {
            refs.entry(normalize_location(loc))
                .or_insert_with(|| loc.to_string());
        };
        add(&table.pointer.metadata_location);
        for l in md.metadata_log() {
            add(&l.metadata_file);
        }
        for s in md.statistics_iter() {
            add(&s.statistics_path);
        }
        for s in md.partition_statistics_iter() {
            add(&s.statistics_path);
        }
        Ok(Live {
            refs,
            root: normalize_location(md.location()),
            current_version: metadata_version(&table.pointer.metadata_location),
        })
    }

    /// Referenced locations outside the listed folder: a listing cannot show whether they are
    /// the same files as listed ones under another name, so nothing may be deleted.
    fn unmatched(&self) -> Vec<&str> {
        self.refs
            .iter()
            .filter(|(n, _)| !is_under(n, &self.root))
            .map(|(_, raw)| raw.as_str())
            .collect()
    }

    /// Why a listed file (normalized) must stay, if it must.
    fn keeps(&self, listed: &str) -> bool {
        if self.refs.contains_key(listed) {
            return true;
        }
        let (dir, name) = listed.rsplit_once('/').unwrap_or(("", listed));
        // Hadoop's local file system writes a `.<name>.crc` checksum beside each file it
        // writes (Iceberg Java on `file:` tables): it lives and goes with its file.
        if let Some(base) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".crc")) {
            return self.keeps(&format!("{dir}/{base}"));
        }
        // A key index (lookup::index) lives and goes with its data file.
        if let Some(base) = listed.strip_suffix(crate::files::index::KEY_INDEX_SUFFIX) {
            return self.refs.contains_key(base);
        }
        // A Hadoop catalog's pointer to the current metadata.
        if name == "version-hint.text" {
            return true;
        }
        // Newer metadata than the current (a commit of any writer in flight; the current one
        // is referenced). Another file of the current version lost its commit: it can never
        // become current. If the current one's name carries no version, every metadata file
        // stays.
        match (metadata_version(name), self.current_version) {
            (Some(v), Some(current)) => v > current,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ExpireReport {
    pub table: String,
    pub snapshots_expired: Vec<i64>,
    pub snapshots_kept: usize,
    /// Manifest lists, manifests, data and delete files only expired snapshots referenced.
    pub files_deleted: Vec<String>,
    /// Files only expired snapshots referenced that lie outside the table's folder (imported
    /// by another writer, e.g. Spark's `add_files`): never deleted.
    pub files_outside_table: Vec<String>,
    pub dry_run: bool,
}

pub struct ExpireSnapshots<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    older_than_ms: i64,
    retain_last: usize,
    dry_run: bool,
}

impl<'a> ExpireSnapshots<'a> {
    /// Expire snapshots older than `older_than_ms` (epoch ms), keeping at least `retain_last`
    /// of the current history.
    pub fn new(
        catalog: &'a dyn Catalog,
        ident: TableIdent,
        older_than_ms: i64,
        retain_last: usize,
    ) -> Self {
        ExpireSnapshots {
            catalog,
            ident,
            older_than_ms,
            retain_last: retain_last.max(1),
            dry_run: false,
        }
    }

    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    fn expired(&self, md: &TableMetadata) -> Vec<i64> {
        let chain = ancestry(md);
        let mut keep: BTreeSet<i64> = chain
            .iter()
            .take(self.retain_last)
            .map(|s| s.snapshot_id())
            .collect();
        keep.extend(
            md.snapshots()
                .filter(|s| s.timestamp_ms() >= self.older_than_ms)
                .map(|s| s.snapshot_id()),
        );
        // Tags and other branches (Spark's WAP, an operator's tag) are other writers' history:
        // their snapshots, and a branch's ancestry, stay.
        keep.extend(referenced_by_refs(md));
        let mut expired: Vec<i64> = md
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| !keep.contains(id))
            .collect();
        expired.sort_unstable();
        expired
    }

    pub async fn execute(self) -> Result<ExpireReport> {
        let table = LoadedTable::load(self.catalog, &self.ident)
            .await?
            .ok_or_else(|| Error::NoSuchTable {
                table: self.ident.to_string(),
            })?;
        let file_io = self.catalog.file_io();
        let before = table.metadata.clone();
        let mut report = ExpireReport {
            table: self.ident.to_string(),
            snapshots_expired: self.expired(&before),
            snapshots_kept: 0,
            files_deleted: vec![],
            files_outside_table: vec![],
            dry_run: self.dry_run,
        };
        if report.snapshots_expired.is_empty() {
            report.snapshots_kept = before.snapshots().len();
            return Ok(report);
        }
        let after: TableMetadata = if self.dry_run {
            let ids = report.snapshots_expired.clone();
            before
                .as_ref()
                .clone()
                .into_builder(None)
                .remove_snapshots(&ids)
                .build()?
                .metadata
        } else {
            let committed = commit_metadata(self.catalog, &self.ident, |md, location| {
                let ids = self.expired(md);
                if ids.is_empty() {
                    return Ok(None);
                }
                // Files applied by expired snapshots lose their records: remember up to where
                // everything counts as applied (see `table::applied_files`).
                let mut horizon = md.properties().get(keys::EXPIRED_WATERMARK).cloned();
                for id in &ids {
                    if let Some(w) = md.snapshot_by_id(*id).and_then(|s| {
                        s.summary()
                            .additional_properties
                            .get(keys::WATERMARK)
                            .cloned()
                    }) && horizon.as_ref().is_none_or(|h| w > *h)
                    {
                        horizon = Some(w);
                    }
                }
                let mut b = md
                    .clone()
                    .into_builder(Some(location.to_string()))
                    .remove_snapshots(&ids);
                if let Some(h) = horizon {
                    b = b.set_properties([(keys::EXPIRED_WATERMARK.to_string(), h)].into())?;
                }
                Ok(Some(b.build()?.metadata))
            })
            .await?;
            match committed {
                Some(m) => m,
                None => return Ok(report),
            }
        };
        let kept: BTreeSet<i64> = after.snapshots().map(|s| s.snapshot_id()).collect();
        report.snapshots_expired = before
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| !kept.contains(id))
            .collect();
        report.snapshots_kept = kept.len();
        let (deleted, outside) = self
            .files_to_delete(
                self.catalog.files(),
                &before,
                &after,
                &report.snapshots_expired,
            )
            .await?;
        report.files_deleted = deleted;
        report.files_outside_table = outside;
        if !self.dry_run {
            for f in &report.files_deleted {
                if let Err(e) = file_io.delete(f).await {
                    warn!(file = %f, error = %e, "could not delete an expired file");
                }
            }
            info!(table = %self.ident, snapshots = report.snapshots_expired.len(), files = report.files_deleted.len(), "expired snapshots");
        }
        if !report.files_outside_table.is_empty() {
            warn!(table = %self.ident, files = report.files_outside_table.len(), "files of expired snapshots outside the table's folder were kept");
        }
        Ok(report)
    }

    /// Files the expired snapshots reach that nothing retained does (compared normalized),
    /// as referenced; and those of them outside the table's folder, which are kept.
    async fn files_to_delete(
        &self,
        files: &Files,
        before: &TableMetadata,
        after: &TableMetadata,
        expired: &[i64],
    ) -> Result<(Vec<String>, Vec<String>)> {
        let mut retained = reachable(files, after, None, true).await?;
        if !self.dry_run {
            // What is retained now, after our commit: a writer may have committed since, and
            // its metadata is what readers open.
            if let Some(now) = LoadedTable::load(self.catalog, &self.ident).await? {
                retained.extend(reachable(files, &now.metadata, None, true).await?);
            }
        }
        for s in after.statistics_iter() {
            retained.insert(normalize_location(&s.statistics_path), String::new());
        }
        for s in after.partition_statistics_iter() {
            retained.insert(normalize_location(&s.statistics_path), String::new());
        }
        let root = normalize_location(after.location());
        let mut deleted = Vec::new();
        let mut outside = Vec::new();
        for (n, raw) in reachable(files, before, Some(expired), false).await? {
            if retained.contains_key(&n) {
                continue;
            }
            if is_under(&n, &root) {
                deleted.push(raw);
            } else {
                outside.push(raw);
            }
        }
        Ok((deleted, outside))
    }
}

/// Snapshots that tags and branches other than `main` hold: each ref's snapshot, and a
/// branch's ancestors.
fn referenced_by_refs(md: &TableMetadata) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    // iceberg-rust has no accessor for the refs; they are in the serialized metadata.
    let Ok(v) = serde_json::to_value(md) else {
        return out;
    };
    let Some(refs) = v.get("refs").and_then(|r| r.as_object()) else {
        return out;
    };
    for (name, r) in refs {
        if name == "main" {
            continue;
        }
        let Some(mut id) = r.get("snapshot-id").and_then(|i| i.as_i64()) else {
            continue;
        };
        let branch = r.get("type").and_then(|t| t.as_str()) == Some("branch");
        loop {
            if !out.insert(id) || !branch {
                break;
            }
            match md.snapshot_by_id(id).and_then(|s| s.parent_snapshot_id()) {
                Some(p) => id = p,
                None => break,
            }
        }
    }
    out
}

/// Every file snapshots reach (`only`: just those snapshots): manifest lists, manifests and the
/// data and delete files their entries name, normalized → as referenced; with `live_only`,
/// only entries that are live in some snapshot (a DELETED entry records a removal, it does not
/// keep the file).
async fn reachable(
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

#[derive(Debug, Clone, Serialize)]
pub struct OrphanReport {
    pub table: String,
    pub orphans: Vec<OrphanFile>,
    /// Unreferenced files left alone because they are younger than the safety age.
    pub too_young: usize,
    pub deleted: usize,
    /// Why nothing was (or, without `--delete`, would be) deleted, when the listing cannot be
    /// trusted: referenced locations outside the table's folder as listed.
    pub refused: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OrphanFile {
    pub path: String,
    pub size: u64,
    pub age_hours: f64,
}

pub struct Orphans<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    min_age_ms: i64,
    delete: bool,
}

impl<'a> Orphans<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent, min_age_ms: i64) -> Self {
        Orphans {
            catalog,
            ident,
            min_age_ms,
            delete: false,
        }
    }

    pub fn delete(mut self, delete: bool) -> Self {
        self.delete = delete;
        self
    }

    pub async fn execute(self) -> Result<OrphanReport> {
        let table = LoadedTable::load(self.catalog, &self.ident)
            .await?
            .ok_or_else(|| Error::NoSuchTable {
                table: self.ident.to_string(),
            })?;
        let file_io = self.catalog.file_io();
        let live = Live::collect(self.catalog.files(), &table).await?;
        let now = chrono::Utc::now().timestamp_millis();
        let listed: Vec<ListedFile> = self.catalog.list_files(table.metadata.location()).await?;
        let mut report = OrphanReport {
            table: self.ident.to_string(),
            orphans: vec![],
            too_young: 0,
            deleted: 0,
            refused: refusal(&live),
        };
        for f in listed {
            if live.keeps(&normalize_location(&f.path)) {
                continue;
            }
            if now - f.modified_ms < self.min_age_ms {
                report.too_young += 1;
                continue;
            }
            report.orphans.push(OrphanFile {
                path: f.path,
                size: f.size,
                age_hours: (now - f.modified_ms) as f64 / 3_600_000.0,
            });
        }
        if let Some(why) = &report.refused {
            warn!(table = %self.ident, reason = %why, "orphan files not deleted");
            return Ok(report);
        }
        if self.delete {
            // Re-read the pointer: a commit that landed meanwhile (any writer's) may reference
            // "orphans" it wrote. Only files younger than the safety age can be such, and they
            // are skipped, but the check is cheap.
            let again = match LoadedTable::load(self.catalog, &self.ident).await? {
                Some(t) if t.pointer != table.pointer => {
                    Some(Live::collect(self.catalog.files(), &t).await?)
                }
                _ => None,
            };
            if let Some(why) = again.as_ref().and_then(refusal) {
                warn!(table = %self.ident, reason = %why, "orphan files not deleted");
                report.refused = Some(why);
                return Ok(report);
            }
            for o in &report.orphans {
                if again
                    .as_ref()
                    .is_some_and(|l| l.keeps(&normalize_location(&o.path)))
                {
                    continue;
                }
                match file_io.delete(&o.path).await {
                    Ok(()) => report.deleted += 1,
                    Err(e) => warn!(file = %o.path, error = %e, "could not delete an orphan"),
                }
            }
        }
        Ok(report)
    }
}

/// Why orphans must not be deleted, if they must not.
fn refusal(live: &Live) -> Option<String> {
    let unmatched = live.unmatched();
    let first = unmatched.first()?;
    Some(format!(
        "{} location(s) the table's metadata references lie outside its folder {} as listed \
         (e.g. {first}): another scheme, bucket or root cannot be matched to the listing, so \
         a file that looks unreferenced may be in use; nothing is deleted",
        unmatched.len(),
        live.root
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_location_is_one() {
        let local = [
            "file:///w/sales.db/t/data/a.parquet",
            "file:/w/sales.db/t/data/a.parquet",
            "file://w/sales.db/t/data/a.parquet",
            "/w/sales.db/t/data/a.parquet",
            "FILE:/w//sales.db/t/data/a.parquet",
            "file:/w/sales%2Edb/t/data/a.parquet",
        ];
        for l in local {
            assert_eq!(
                normalize_location(l),
                "file:///w/sales.db/t/data/a.parquet",
                "{l}"
            );
        }
        let s3 = [
            "s3://bucket/wh/t/data/x=a b/f.parquet",
            "s3a://bucket/wh/t/data/x=a%20b/f.parquet",
            "s3n://bucket/wh/t/data/x=a%20b/f.parquet",
            "S3A://Bucket/wh/t//data/x=a b/f.parquet",
        ];
        for l in s3 {
            assert_eq!(
                normalize_location(l),
                "s3://bucket/wh/t/data/x=a b/f.parquet",
                "{l}"
            );
        }
        // Different files stay different.
        assert_ne!(
            normalize_location("s3://a/t/f"),
            normalize_location("s3://b/t/f")
        );
        assert_ne!(
            normalize_location("s3://a/t/f"),
            normalize_location("file:///a/t/f")
        );
        assert_ne!(
            normalize_location("gs://a/t/f"),
            normalize_location("s3://a/t/f")
        );
        // A lone or malformed escape is kept as written.
        assert_eq!(normalize_location("/w/100%"), "file:///w/100%");
        assert_eq!(normalize_location("/w/a%zz"), "file:///w/a%zz");
        assert!(is_under(
            &normalize_location("file:/w/t/data/a"),
            &normalize_location("file:///w/t/")
        ));
        assert!(!is_under(
            &normalize_location("file:///w/t2/data/a"),
            &normalize_location("file:///w/t")
        ));
    }

    #[test]
    fn metadata_versions_from_every_naming() {
        for (name, v) in [
            ("file:/w/t/metadata/00012-0b1c.metadata.json", Some(12)),
            ("s3://b/t/metadata/00003-0b1c.gz.metadata.json", Some(3)),
            ("s3://b/t/metadata/00003-0b1c.metadata.json.gz", Some(3)),
            ("/w/t/metadata/v7.metadata.json", Some(7)),
            ("/w/t/metadata/snap-1-0b1c.avro", None),
            ("/w/t/metadata/version-hint.text", None),
            ("/w/t/metadata/x-0b1c.metadata.json", None),
        ] {
            assert_eq!(metadata_version(name), v, "{name}");
        }
    }

    fn live(refs: &[&str], root: &str, current: &str) -> Live {
        Live {
            refs: refs
                .iter()
                .map(|r| (normalize_location(r), r.to_string()))
                .collect(),
            root: normalize_location(root),
            current_version: metadata_version(current),
        }
    }

    #[test]
    fn what_stays() {
        let l = live(
            &[
                "file:/w/t/metadata/00005-a.metadata.json",
                "file:/w/t/data/spark.parquet",
                "file:///w/t/data/ours.parquet",
            ],
            "file:///w/t",
            "file:/w/t/metadata/00005-a.metadata.json",
        );
        let keeps = |p: &str| l.keeps(&normalize_location(p));
        assert!(keeps("file:///w/t/data/spark.parquet"));
        assert!(keeps("file:///w/t/data/.spark.parquet.crc"));
        assert!(keeps("file:///w/t/metadata/00005-a.metadata.json"));
        // A newer metadata file: another writer's commit in flight.
        assert!(keeps("file:///w/t/metadata/00006-b.metadata.json"));
        assert!(keeps("file:///w/t/metadata/version-hint.text"));
        // A key index stays with its live data file, and goes with a removed one.
        assert!(keeps("file:///w/t/data/ours.parquet.keyindex"));
        assert!(!keeps("file:///w/t/data/stray.parquet.keyindex"));
        // Same version as the current one, another file: an attempt that lost its commit.
        assert!(!keeps("file:///w/t/metadata/00005-b.metadata.json"));
        // Older metadata no longer in the log, unreferenced data, their checksums: orphans.
        assert!(!keeps("file:///w/t/metadata/00002-c.metadata.json"));
        assert!(!keeps("file:///w/t/data/stray.parquet"));
        assert!(!keeps("file:///w/t/data/.stray.parquet.crc"));
        assert!(l.unmatched().is_empty());
        assert!(refusal(&l).is_none());
    }

    #[test]
    fn unmatched_references_refuse_deletion() {
        // Data in another bucket (or written under another root) cannot be matched to a
        // listing of the table's folder.
        let l = live(
            &[
                "s3a://bucket/wh/t/metadata/00002-a.metadata.json",
                "s3://other/imported/f.parquet",
            ],
            "s3://bucket/wh/t",
            "s3a://bucket/wh/t/metadata/00002-a.metadata.json",
        );
        assert_eq!(l.unmatched(), vec!["s3://other/imported/f.parquet"]);
        let why = refusal(&l).expect("refused");
        assert!(why.contains("s3://other/imported/f.parquet"), "{why}");
        assert!(why.contains("outside its folder s3://bucket/wh/t"), "{why}");
        // Unknown current version: no metadata file is ever an orphan.
        let l = live(&[], "file:///w/t", "file:///w/t/metadata/current.json");
        assert!(l.keeps(&normalize_location("/w/t/metadata/00001-x.metadata.json")));
    }
}
