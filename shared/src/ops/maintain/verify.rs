//! verify: whether every snapshot a table's metadata keeps can be read: its manifest list and
//! manifests decode, every file they name as live exists, and (on request) the snapshot reads
//! in our scan. What `repair` uses to judge metadata, and what every end-to-end test checks of
//! the tables it leaves.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use iceberg::TableIdent;
use iceberg::spec::TableMetadata;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::files::{Files, Fill};
use crate::ops::scan::Scan;
use crate::table::LoadedTable;

/// Checks a table's snapshots; a builder ending in [`Verify::execute`].
pub struct Verify<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    read: bool,
}

/// What [`Verify`] found.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub table: String,
    pub metadata_location: String,
    pub snapshots: usize,
    /// Distinct files the snapshots name (manifest lists, manifests, live data and delete files).
    pub files: usize,
    /// Snapshots read whole in our scan (with `read`).
    pub snapshots_read: usize,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One thing wrong, and the snapshots it breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub what: String,
    pub snapshots: Vec<i64>,
}

impl<'a> Verify<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Verify {
            catalog,
            ident,
            read: false,
        }
    }

    /// Also read every snapshot whole in our scan (its rows through its deletes).
    pub fn read_snapshots(mut self, read: bool) -> Self {
        self.read = read;
        self
    }

    pub async fn execute(self) -> Result<VerifyReport> {
        let table = match LoadedTable::load(self.catalog, &self.ident).await {
            Ok(Some(t)) => t,
            Ok(None) => {
                return Err(Error::NoSuchTable {
                    table: self.ident.to_string(),
                });
            }
            // The metadata itself is what is wrong: a report that says so, like any problem.
            Err(Error::MetadataDamaged {
                table,
                location,
                problem,
            }) => {
                return Ok(VerifyReport {
                    table,
                    metadata_location: location.clone(),
                    snapshots: 0,
                    files: 0,
                    snapshots_read: 0,
                    problems: vec![Problem {
                        what: format!("metadata {location} {problem}"),
                        snapshots: Vec::new(),
                    }],
                });
            }
            Err(e) => return Err(e),
        };
        let md = &table.metadata;
        let (files, mut problems) = check_files(self.catalog.files(), md, None).await;
        let mut snapshots_read = 0;
        if self.read {
            let mut ids: Vec<i64> = md.snapshots().map(|s| s.snapshot_id()).collect();
            ids.sort_unstable();
            for id in ids {
                match Scan::new(self.catalog, self.ident.clone())
                    .snapshot_id(Some(id))
                    .execute()
                    .await
                {
                    Ok(_) => snapshots_read += 1,
                    Err(e) => problems.push(Problem {
                        what: format!("does not read in our scan: {e}"),
                        snapshots: vec![id],
                    }),
                }
            }
        }
        Ok(VerifyReport {
            table: self.ident.to_string(),
            metadata_location: table.pointer.metadata_location.clone(),
            snapshots: md.snapshots().len(),
            files,
            snapshots_read,
            problems,
        })
    }
}

/// What kind of file a snapshot names, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Named {
    ManifestList,
    Manifest,
    File,
}

impl Named {
    fn noun(self) -> &'static str {
        match self {
            Named::ManifestList => "manifest list",
            Named::Manifest => "manifest",
            Named::File => "file",
        }
    }
}

/// Checks that every file `md`'s snapshots (`only`: those) name as live exists and that their
/// manifest lists and manifests decode: the distinct files named, and what is wrong (empty: all
/// of it reads). A file checked once for every snapshot that names it.
pub(crate) async fn check_files(
    files: &Files,
    md: &TableMetadata,
    only: Option<&[i64]>,
) -> (usize, Vec<Problem>) {
    let mut problems = Vec::new();
    // path → (kind, snapshots naming it)
    let mut named: BTreeMap<String, (Named, Vec<i64>)> = BTreeMap::new();
    let mut name = |path: &str, kind: Named, id: i64| {
        named
            .entry(path.to_string())
            .or_insert_with(|| (kind, Vec::new()))
            .1
            .push(id);
    };
    let mut snapshots: Vec<_> = md
        .snapshots()
        .filter(|s| only.is_none_or(|o| o.contains(&s.snapshot_id())))
        .collect();
    snapshots.sort_by_key(|s| s.snapshot_id());
    for s in snapshots {
        let id = s.snapshot_id();
        name(s.manifest_list(), Named::ManifestList, id);
        let list = match files.manifest_list(md, s).await {
            Ok(l) => l,
            Err(e) => {
                problems.push(Problem {
                    what: format!("manifest list {} does not read: {e}", s.manifest_list()),
                    snapshots: vec![id],
                });
                continue;
            }
        };
        for m in list.iter() {
            name(&m.manifest_path, Named::Manifest, id);
        }
        // One manifest at a time: a manifest that does not read is named, and the others
        // still checked.
        for m in list.iter() {
            match files.manifest(m, Fill::Pass).await {
                Ok(manifest) => {
                    for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                        name(e.file_path(), Named::File, id);
                    }
                }
                Err(e) => problems.push(Problem {
                    what: format!("manifest {} does not read: {e}", m.manifest_path),
                    snapshots: vec![id],
                }),
            }
        }
    }
    let io = files.io();
    let checked: Vec<(&String, std::result::Result<bool, iceberg::Error>)> =
        futures::stream::iter(named.keys())
            .map(|path| async move { (path, io.exists(path).await) })
            .buffered(crate::files::parquet::SMALL_FILE_CONCURRENCY)
            .collect()
            .await;
    for (path, exists) in checked {
        let (kind, mut ids) = named[path].clone();
        ids.sort_unstable();
        ids.dedup();
        let what = match exists {
            Ok(true) => continue,
            Ok(false) => format!("{} {path} is missing", kind.noun()),
            Err(e) => format!("{} {path} could not be checked: {e}", kind.noun()),
        };
        problems.push(Problem {
            what,
            snapshots: ids,
        });
    }
    // Problems found while decoding come first; an unreadable manifest is also reported as
    // missing when it is: both say what a reader meets.
    problems.dedup();
    (named.len(), problems)
}
