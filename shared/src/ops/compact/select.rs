//! What to rewrite: the live files of the current snapshot, grouped per partition into groups
//! worth rewriting (small files, and files carrying many deleted rows).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use iceberg::spec::{Struct, TableMetadata};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::files::Fill;
use crate::files::cost::tiered_out;
use crate::files::deletes::{DeleteId, DeleteSource, DeletedPositions};
use crate::files::live::Scope;
use crate::files::vocabulary::keeps_apart;

use super::Compact;

/// A live data file as the planner sees it.
#[derive(Debug, Clone)]
pub(super) struct LiveData {
    pub(super) path: String,
    pub(super) size: u64,
    pub(super) records: u64,
    pub(super) spec_id: i32,
    pub(super) partition: Struct,
    pub(super) deleted: u64,
    /// Delete files that point into it.
    pub(super) delete_files: usize,
    pub(super) sort_order_id: Option<i32>,
    /// Row lineage (v3): the file's first row id (inherited) and data sequence number, what
    /// its rows' `_row_id` and `_last_updated_sequence_number` are unless it stores them.
    pub(super) first_row_id: Option<i64>,
    pub(super) data_sequence_number: Option<i64>,
}

#[derive(Debug, Clone)]
pub(super) struct LiveDelete {
    pub(super) id: DeleteId,
    /// Live data files it deletes rows of (files already gone are left out).
    pub(super) targets: BTreeSet<String>,
    /// What it deletes, as read when planning: the rewrite applies it without reading again.
    pub(super) content: Arc<DeletedPositions>,
}

/// The files of one partition to rewrite together.
#[derive(Debug, Clone)]
pub(super) struct Group {
    pub(super) files: Vec<LiveData>,
    pub(super) bytes: u64,
}

impl Compact<'_> {
    /// Groups worth rewriting, most files first.
    pub(super) fn plan(&self, md: &TableMetadata, data: &[LiveData]) -> Vec<Group> {
        let target = self.target(md);
        let small = (target as f64 * self.options.min_file_ratio) as u64;
        // Where changes are ordered by columns, full-load files are rewritten only with each
        // other, so their rows keep their place before every change (`keeps_apart`).
        let mut by_partition: BTreeMap<(i32, String, bool), Vec<LiveData>> = BTreeMap::new();
        for f in data {
            if f.size < small || self.heavy(f) {
                by_partition
                    .entry((
                        f.spec_id,
                        format!("{:?}", f.partition),
                        keeps_apart(md, &f.path),
                    ))
                    .or_default()
                    .push(f.clone());
            }
        }
        let heavy = |f: &LiveData| self.heavy(f);
        let mut groups: Vec<Group> = Vec::new();
        for (_, mut files) in by_partition {
            files.sort_by(|a, b| a.path.cmp(&b.path));
            // Small files pay to rewrite together from `min_small_files` of them; otherwise a
            // file is rewritten only to shed its deletes. A small file many times the size of
            // the others together is left out, unless it sheds deletes (`tiered_out`).
            let mut small_files: Vec<&LiveData> = files.iter().filter(|f| f.size < small).collect();
            small_files.sort_by_key(|f| f.size);
            let sizes: Vec<u64> = small_files.iter().map(|f| f.size).collect();
            let out = tiered_out(&sizes);
            let done: BTreeSet<String> = small_files
                .drain(small_files.len() - out..)
                .map(|f| f.path.clone())
                .collect();
            if small_files.len() < self.options.min_small_files.max(2) {
                files.retain(|f| heavy(f));
            } else {
                files.retain(|f| !done.contains(&f.path) || heavy(f));
            }
            if files.is_empty() {
                continue;
            }
            let mut g = Group {
                files: Vec::new(),
                bytes: 0,
            };
            for f in files {
                if !g.files.is_empty()
                    && (g.bytes + f.size > self.options.max_group_bytes
                        || g.files.len() >= self.options.max_group_files.max(2))
                {
                    groups.push(std::mem::replace(
                        &mut g,
                        Group {
                            files: Vec::new(),
                            bytes: 0,
                        },
                    ));
                }
                g.bytes += f.size;
                g.files.push(f);
            }
            groups.push(g);
        }
        // A group of one file that sheds nothing would be rewritten as it is.
        groups.retain(|g| g.files.len() >= 2 || g.files.iter().any(&heavy));
        // Groups holding a file over the delete-file threshold first: under continuous ingest
        // there is always a fresh group of small change files, and a big full-load file that
        // every change adds a delete file to would otherwise wait behind them for ever.
        let threshold = self.options.max_delete_files.max(1);
        groups.sort_by_key(|g| {
            let over = g.files.iter().any(|f| f.delete_files >= threshold);
            (std::cmp::Reverse(over), std::cmp::Reverse(g.files.len()))
        });
        groups
    }
}

impl Compact<'_> {
    /// Whether a file is rewritten for its deletes alone: any deleted row when every delete
    /// file is to go, else past the deleted-row ratio or the delete-file count.
    fn heavy(&self, f: &LiveData) -> bool {
        let ratio = if f.records == 0 {
            1.0
        } else {
            f.deleted as f64 / f.records as f64
        };
        (f.deleted > 0 && (self.options.shed_all_deletes || ratio >= self.options.delete_ratio))
            || f.delete_files >= self.options.max_delete_files.max(1)
    }
}

/// Live data and delete files of the current snapshot, with deleted-row counts per data file.
pub(super) async fn live_files(
    catalog: &dyn Catalog,
    md: &TableMetadata,
) -> Result<(Vec<LiveData>, Vec<LiveDelete>)> {
    let files = catalog.files();
    let live = files.live(md, Scope::All, Fill::Pass).await?;
    let mut data: Vec<LiveData> = live
        .data_with_row_ids()
        .map(|(d, first_row_id)| {
            let f = d.file();
            LiveData {
                first_row_id,
                data_sequence_number: d.entry.sequence_number(),
                path: f.file_path().to_string(),
                size: f.file_size_in_bytes(),
                records: f.record_count(),
                spec_id: d.spec_id,
                partition: f.partition().clone(),
                deleted: 0,
                delete_files: 0,
                sort_order_id: f.sort_order_id(),
            }
        })
        .collect();
    let delete_files: Vec<DeleteSource> = live
        .position_deletes()
        .map(|d| DeleteSource::of(d.file()))
        .collect::<Result<_>>()?;
    let sources: Vec<&DeleteSource> = delete_files.iter().collect();
    let read = files.position_deletes_of(&sources, Fill::Pass).await?;
    let mut deleted_per_file: HashMap<String, (u64, usize)> = HashMap::new();
    let mut deletes = Vec::with_capacity(read.len());
    for (source, (content, _)) in delete_files.into_iter().zip(read) {
        for (p, pos) in content.iter() {
            let d = deleted_per_file.entry(p.clone()).or_default();
            d.0 += pos.len() as u64;
            d.1 += 1;
        }
        deletes.push(LiveDelete {
            id: source.id,
            targets: content.keys().cloned().collect(),
            content,
        });
    }
    for d in &mut data {
        (d.deleted, d.delete_files) = deleted_per_file.get(&d.path).copied().unwrap_or((0, 0));
    }
    // A delete file whose targets are all gone (rewritten earlier) is dangling: empty targets.
    let live: BTreeSet<String> = data.iter().map(|d| d.path.clone()).collect();
    for d in &mut deletes {
        d.targets.retain(|t| live.contains(t));
    }
    Ok((data, deletes))
}
