//! Finds DMS files under local paths and groups them by source table, in DMS order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::SourceSettings;
use crate::error::{Error, Result};
use crate::locate::{DmsObject, locate};

/// One table's files, in apply order.
#[derive(Debug, Clone)]
pub struct TableFiles {
    pub schema: String,
    pub table: String,
    pub files: Vec<(DmsObject, PathBuf)>,
}

/// Walks `paths` (files or folders), locates every DMS file, and groups them per source table.
/// Objects that are not DMS data files are ignored; malformed DMS-looking keys are errors.
pub fn discover(paths: &[PathBuf], source: &SourceSettings) -> Result<Vec<TableFiles>> {
    let mut by_table: BTreeMap<(String, String), Vec<(DmsObject, PathBuf)>> = BTreeMap::new();
    for root in paths {
        let root = root
            .canonicalize()
            .map_err(|e| Error::io(root.display().to_string(), e))?;
        let mut files = Vec::new();
        walk(&root, &mut files)?;
        for f in files {
            // Keys are the path as given: the last folders name the schema and table.
            let key = f.to_string_lossy().replace('\\', "/");
            if let Some(obj) = locate(&key, source)? {
                by_table
                    .entry((obj.schema.clone(), obj.table.clone()))
                    .or_default()
                    .push((obj, f));
            }
        }
    }
    Ok(by_table
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
            }
        })
        .collect())
}

fn walk(p: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(p).map_err(|e| Error::io(p.display().to_string(), e))?;
    if meta.is_file() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| Error::io(p.display().to_string(), e))?
        .map(|e| {
            e.map(|e| e.path())
                .map_err(|e| Error::io(p.display().to_string(), e))
        })
        .collect::<Result<_>>()?;
    entries.sort();
    for e in entries {
        let name = e.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Hidden folders (.git, ._ files) are never DMS output.
        if name.starts_with('.') {
            continue;
        }
        walk(&e, out)?;
    }
    Ok(())
}
