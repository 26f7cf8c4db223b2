//! Finds DMS files under local paths and groups them by source table, in DMS order.
//!
//! Anything else under the paths (other files, odd names, FIFOs, dangling links, unreadable
//! folders) is passed over and listed in [`Discovered::skipped`]: one odd path must not stop
//! every table. A path that names a DMS file inside a table's folder but cannot be placed
//! (an unexpected folder between table and file) is that table's problem:
//! [`TableFiles::unplaced`].

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::config::SourceSettings;
use crate::error::{Error, Result};
use crate::locate::{DmsObject, locate, locate_transaction_file, table_prefix};
use crate::read::SourceData;

/// One table's files, in apply order.
#[derive(Debug, Clone)]
pub struct TableFiles {
    pub schema: String,
    pub table: String,
    pub files: Vec<(DmsObject, PathBuf)>,
    /// DMS file names in this table's folder whose path could not be placed in DMS order
    /// (path, reason): the table must not be applied without them.
    pub unplaced: Vec<(PathBuf, String)>,
}

/// A path under the inputs that is not a DMS file of any table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

#[derive(Debug, Clone, Default)]
pub struct Discovered {
    pub tables: Vec<TableFiles>,
    pub skipped: Vec<Skipped>,
}

/// [`discover_all`] without the list of skipped paths.
pub fn discover(paths: &[PathBuf], source: &SourceSettings) -> Result<Vec<TableFiles>> {
    Ok(discover_all(paths, source)?.tables)
}

/// Walks `paths` (files or folders), locates every DMS file, and groups them per source table.
/// Only a path given on the command line that does not exist is an error.
pub fn discover_all(paths: &[PathBuf], source: &SourceSettings) -> Result<Discovered> {
    let mut by_table: BTreeMap<(String, String), Vec<(DmsObject, PathBuf)>> = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut unlocated: Vec<(PathBuf, String)> = Vec::new();
    let mut visited = HashSet::new();
    for root in paths {
        let root = root
            .canonicalize()
            .map_err(|e| Error::io(root.display().to_string(), e))?;
        let mut files = Vec::new();
        walk(&root, &mut files, &mut skipped, &mut visited);
        for f in files {
            // Keys are the path as given: the last folders name the schema and table.
            let key = f.to_string_lossy().replace('\\', "/");
            // A CDC_TXN file (`cdc_path`): a change file of every table it has rows of.
            match locate_transaction_file(&key, source) {
                Ok(Some(order)) => {
                    let delimiter = source.cdc_delimiter_bytes()?;
                    let data = SourceData::Path(f.clone());
                    match crate::read::transaction::tables_in(&data, &key, &delimiter) {
                        Ok(tables) => {
                            for (schema, table) in tables {
                                let obj = DmsObject::in_transaction_file(
                                    &key,
                                    order.clone(),
                                    &schema,
                                    &table,
                                );
                                by_table
                                    .entry((schema, table))
                                    .or_default()
                                    .push((obj, f.clone()));
                            }
                        }
                        // Whose changes it holds is unknown: no table can go on without it.
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    unlocated.push((f, e.to_string()));
                    continue;
                }
            }
            match locate(&key, source) {
                Ok(Some(obj)) => by_table
                    .entry((obj.schema.clone(), obj.table.clone()))
                    .or_default()
                    .push((obj, f)),
                Ok(None) => {
                    let reason = format!(
                        "{}not a DMS data file name (LOAD*, YYYYMMDD-HHMMSS*; .csv or .parquet)",
                        odd_kind(&f)
                    );
                    skipped.push(Skipped { path: f, reason })
                }
                Err(e) => unlocated.push((f, e.to_string())),
            }
        }
    }
    let mut tables: Vec<TableFiles> = by_table
        .into_iter()
        .map(|((schema, table), mut files)| {
            files.sort_by(|a, b| {
                a.0.order
                    .cmp(&b.0.order)
                    .then_with(|| a.0.key.cmp(&b.0.key))
            });
            files.dedup_by(|a, b| a.1 == b.1);
            TableFiles {
                schema,
                table,
                files,
                unplaced: vec![],
            }
        })
        .collect();
    // A DMS file name that cannot be placed belongs to the table whose folder holds it.
    for (path, reason) in unlocated {
        let key = path.to_string_lossy().replace('\\', "/");
        let owner = tables.iter_mut().find(|t| {
            t.files
                .iter()
                .filter_map(|(o, _)| table_prefix(o))
                .any(|prefix| key.starts_with(&prefix))
        });
        match owner {
            Some(t) => t.unplaced.push((path, reason)),
            None => skipped.push(Skipped { path, reason }),
        }
    }
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    skipped.dedup();
    Ok(Discovered { tables, skipped })
}

/// "a FIFO, " and the like for what is not a regular file, for messages.
fn odd_kind(p: &Path) -> &'static str {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => "",
        Ok(_) => "not a regular file (FIFO, socket or device), ",
        Err(_) => "a dangling symbolic link, ",
    }
}

/// Collects the files under `p` (following links to files and folders, each folder once);
/// what is neither a file nor a readable folder goes to `skipped` unless its name could be a
/// DMS file, in which case reading it fails the file where its table reaches it.
fn walk(
    p: &Path,
    out: &mut Vec<PathBuf>,
    skipped: &mut Vec<Skipped>,
    visited: &mut HashSet<PathBuf>,
) {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) => {
            if std::fs::symlink_metadata(p).is_ok() {
                // A dangling link: reading it names the problem if it is a DMS file.
                out.push(p.to_path_buf());
            } else {
                skipped.push(Skipped {
                    path: p.to_path_buf(),
                    reason: format!("cannot be read: {e}"),
                });
            }
            return;
        }
    };
    if !meta.is_dir() {
        // Regular files, and FIFOs, sockets, devices: never opened here (a FIFO would block).
        out.push(p.to_path_buf());
        return;
    }
    // A link back to a parent folder must not walk forever.
    if let Ok(real) = p.canonicalize()
        && !visited.insert(real)
    {
        return;
    }
    let entries = std::fs::read_dir(p).and_then(|d| {
        d.map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<Vec<PathBuf>>>()
    });
    let mut entries = match entries {
        Ok(e) => e,
        Err(e) => {
            skipped.push(Skipped {
                path: p.to_path_buf(),
                reason: format!("folder cannot be read: {e}"),
            });
            return;
        }
    };
    entries.sort();
    for e in entries {
        let name = e.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Hidden folders (.git, ._ files) are never DMS output.
        if name.starts_with('.') {
            continue;
        }
        walk(&e, out, skipped, visited);
    }
}
