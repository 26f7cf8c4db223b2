//! Orphan files: in the table's folder, referenced by no retained metadata, older than a
//! safety age; listed, or deleted.

use std::collections::BTreeMap;

use iceberg::TableIdent;
use serde::Serialize;
use tracing::warn;

use super::location::{is_under, metadata_version, normalize_location};
use super::reachable;
use crate::catalog::{Catalog, ListedFile};
use crate::error::{Error, Result};
use crate::files::Files;
use crate::table::LoadedTable;

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
        // A key index (files::index: its directory and its pages) lives and goes with its
        // data file.
        use crate::files::index::{KEY_INDEX_SUFFIX, KEY_PAGES_SUFFIX};
        if let Some(base) = (listed.strip_suffix(KEY_INDEX_SUFFIX))
            .or_else(|| listed.strip_suffix(KEY_PAGES_SUFFIX))
        {
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
        if let Some(why) = self.catalog.maintained_by_service() {
            return Err(Error::Unsupported(format!(
                "{}: {why}; `orphans` leaves it to the service",
                self.ident
            )));
        }
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
        assert!(keeps("file:///w/t/data/ours.parquet.keypages"));
        assert!(!keeps("file:///w/t/data/stray.parquet.keypages"));
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
