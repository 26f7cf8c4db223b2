//! compact: rewrite small data files, and files carrying many deleted rows, into target-size
//! files sorted by key with their deletes applied; drop delete files nothing live needs.
//!
//! Safe alongside ingest: each partition group is one `replace` snapshot through the same commit
//! protocol. Rewritten files keep the data sequence number of the snapshot they were read from.
//! The rewrite records where each row went (a [`RowMap`]): if ingest commits deletes against a
//! file being replaced, the commit carries them over to the new files in its own snapshot
//! ([`crate::commit::carry`]) instead of planning the group again, so a delete is never dropped,
//! a row never resurrected, and compaction never loses to ingest. Ingest re-locates its rows
//! when compaction replaced a file its deletes pointed into.
//! Work per run is bounded by bytes and time; the next run continues.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use iceberg::TableIdent;
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataContentType, Struct, TableMetadata};
use serde::Serialize;
use tracing::info;

use crate::catalog::Catalog;
use crate::commit::{
    self, Added, Base, Change, MetadataChanges, Outcome, Plan, Planner, Staged, remove_files,
};
use crate::error::{Error, Result};
use crate::evolve::key_columns;
use crate::files::Fill;
use crate::files::deletes::DeletedPositions;
use crate::files::live::Scope;
use crate::files::prepared::Prepared;
use crate::table::LoadedTable;
use crate::write::is_full_load_file;

mod merge;

#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Output file size; default: the table's `write.target-file-size-bytes` (else 512 MiB).
    pub target_file_size: Option<u64>,
    /// Files smaller than this fraction of the target are rewritten.
    pub min_file_ratio: f64,
    /// Files with at least this fraction of their rows deleted are rewritten.
    pub delete_ratio: f64,
    /// Files that at least this many delete files point into are rewritten, however few rows
    /// they delete: every reader opens every delete file, so under continuous ingest their
    /// number (not the rows they delete) is what slows reads down.
    pub max_delete_files: usize,
    /// Input bytes per rewrite group (one snapshot). A group is streamed (see `merge`): its
    /// size bounds how long one commit's work takes, not memory.
    pub max_group_bytes: u64,
    /// Files per rewrite group: memory holds one batch (and one fetched row group) per file.
    pub max_group_files: usize,
    /// Input bytes per run.
    pub max_bytes: u64,
    /// Wall time per run (a Lambda must finish before its timeout).
    pub time_budget: Duration,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            target_file_size: None,
            min_file_ratio: 0.75,
            delete_ratio: 0.1,
            max_delete_files: 8,
            max_group_bytes: 256 << 20,
            max_group_files: 100,
            max_bytes: 1 << 30,
            time_budget: Duration::from_secs(600),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactReport {
    pub table: String,
    pub data_files_before: usize,
    pub delete_files_before: usize,
    pub data_files_after: usize,
    pub delete_files_after: usize,
    pub data_files_rewritten: usize,
    pub data_files_written: usize,
    pub delete_files_removed: usize,
    pub bytes_rewritten: u64,
    pub records_written: u64,
    pub commits: usize,
    /// Plans thrown away because the table changed (never because of ingest's deletes: those
    /// are carried over).
    pub replans: usize,
    /// Rows that commits landed meanwhile deleted from files being rewritten, deleted in the
    /// new files by the rewrite's own snapshot.
    pub deletes_carried: u64,
    /// Groups left for the next run (budget reached).
    pub groups_left: usize,
    /// Key indexes written for the large files the rewrite wrote.
    pub key_indexes_written: usize,
    pub elapsed_ms: u64,
}

pub struct Compact<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    options: CompactOptions,
}

/// The data files a rewrite wrote, and the schema it wrote them in (a schema change meanwhile
/// makes the commit plan again).
#[derive(Debug, Clone)]
pub struct Rewritten {
    schema: iceberg::spec::SchemaRef,
    files: Vec<NewFile>,
}

#[derive(Debug, Clone)]
struct NewFile {
    path: String,
    size: u64,
    rows: u64,
}

/// A live data file as the planner sees it.
#[derive(Debug, Clone)]
struct LiveData {
    path: String,
    size: u64,
    records: u64,
    spec_id: i32,
    partition: Struct,
    deleted: u64,
    /// Delete files that point into it.
    delete_files: usize,
    sort_order_id: Option<i32>,
}

#[derive(Debug, Clone)]
struct LiveDelete {
    path: String,
    /// Live data files it deletes rows of (files already gone are left out).
    targets: BTreeSet<String>,
    /// What it deletes, as read when planning: the rewrite applies it without reading again.
    content: Arc<DeletedPositions>,
}

/// The files of one partition to rewrite together.
#[derive(Debug, Clone)]
struct Group {
    files: Vec<LiveData>,
    bytes: u64,
}

impl<'a> Compact<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Compact {
            catalog,
            ident,
            options: CompactOptions::default(),
        }
    }

    pub fn options(mut self, options: CompactOptions) -> Self {
        self.options = options;
        self
    }

    pub async fn execute(self) -> Result<CompactReport> {
        let started = Instant::now();
        let mut report = CompactReport {
            table: self.ident.to_string(),
            ..Default::default()
        };
        let mut planner = GroupPlanner {
            compact: &self,
            budget: self.options.max_bytes,
            started,
            first: true,
            counts: (0, 0),
            before: None,
            groups_left: 0,
        };
        // One group per commit, through the commit loop (which plans a group again when
        // ingest deletes rows of its files meanwhile), until nothing is left within budget.
        loop {
            let finished = commit::run(self.catalog, &self.ident, None, &mut planner).await?;
            report.replans += finished.replans.len();
            if let Some(before) = planner.before.take() {
                (report.data_files_before, report.delete_files_before) = before;
            }
            let Some((group, stats, rewritten)) = finished.report else {
                break;
            };
            if let Some(Outcome::Committed { snapshot_id, .. }) = finished.outcome {
                let carried = self.carried(snapshot_id).await?;
                info!(table = %self.ident, snapshot_id, files = group.files.len(), bytes = group.bytes, deletes_carried = carried, "compacted a group");
                report.deletes_carried += carried;
                report.commits += 1;
                report.data_files_rewritten += group.files.len();
                report.data_files_written += stats.data_files as usize;
                report.delete_files_removed += stats.removed_delete_files as usize;
                report.bytes_rewritten += group.bytes;
                report.records_written += stats.records;
                report.key_indexes_written += self.write_key_indexes(&rewritten).await;
                planner.budget = planner.budget.saturating_sub(group.bytes);
            }
        }
        report.groups_left = planner.groups_left;
        (report.data_files_after, report.delete_files_after) = planner.counts;
        if let Some(table) = LoadedTable::load(self.catalog, &self.ident).await? {
            let live = (self.catalog.files())
                .live(&table.metadata, Scope::All, Fill::Pass)
                .await?;
            report.data_files_after = live.data().count();
            report.delete_files_after = live.position_deletes().count();
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Writes the key indexes of the large files a committed group wrote, so that the first
    /// fresh lookup after a compaction reads an index, not the new files' key columns
    /// ([`crate::lookup::index`]). An index is a cache: a failure is logged, not returned.
    async fn write_key_indexes(&self, rewritten: &Rewritten) -> usize {
        let large: Vec<&NewFile> = rewritten
            .files
            .iter()
            .filter(|f| f.rows >= crate::files::index::INDEX_MIN_ROWS)
            .collect();
        let schema = rewritten.schema.as_ref();
        let file_io = self.catalog.file_io();
        let written: Vec<bool> = futures::stream::iter(large)
            .map(|f| async move {
                match crate::lookup::write_key_index(file_io, schema, &f.path, f.size, f.rows).await
                {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::warn!(file = %f.path, error = %e, "key index not written");
                        false
                    }
                }
            })
            .buffer_unordered(crate::files::parquet::READ_CONCURRENCY)
            .collect()
            .await;
        written.into_iter().filter(|w| *w).count()
    }

    /// Position deletes snapshot `snapshot_id` (ours) carried over from concurrent commits.
    async fn carried(&self, snapshot_id: i64) -> Result<u64> {
        let Some(t) = LoadedTable::load(self.catalog, &self.ident).await? else {
            return Ok(0);
        };
        Ok(t.metadata
            .snapshot_by_id(snapshot_id)
            .and_then(|s| {
                s.summary()
                    .additional_properties
                    .get("added-position-deletes")
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0))
    }

    fn target(&self, md: &TableMetadata) -> u64 {
        self.options.target_file_size.unwrap_or_else(|| {
            md.properties()
                .get("write.target-file-size-bytes")
                .and_then(|v| v.parse().ok())
                .unwrap_or(crate::config::DEFAULT_TARGET_FILE_SIZE)
        })
    }

    /// Groups worth rewriting, most files first.
    fn plan(&self, md: &TableMetadata, data: &[LiveData], deletes: &[LiveDelete]) -> Vec<Group> {
        let target = self.target(md);
        let small = (target as f64 * self.options.min_file_ratio) as u64;
        // Full-load files are rewritten only with each other, so their rows keep their place
        // before every change (see `write::FULL_LOAD_SUFFIX`).
        let mut by_partition: BTreeMap<(i32, String, bool), Vec<LiveData>> = BTreeMap::new();
        for f in data {
            let deleted_ratio = if f.records == 0 {
                1.0
            } else {
                f.deleted as f64 / f.records as f64
            };
            if f.size < small
                || (f.deleted > 0 && deleted_ratio >= self.options.delete_ratio)
                || f.delete_files >= self.options.max_delete_files.max(1)
            {
                by_partition
                    .entry((
                        f.spec_id,
                        format!("{:?}", f.partition),
                        is_full_load_file(&f.path),
                    ))
                    .or_default()
                    .push(f.clone());
            }
        }
        let with_deletes: BTreeSet<&str> = deletes
            .iter()
            .flat_map(|d| d.targets.iter().map(String::as_str))
            .collect();
        let mut groups: Vec<Group> = Vec::new();
        for (_, mut files) in by_partition {
            files.sort_by(|a, b| a.path.cmp(&b.path));
            // Rewriting one file only pays if it sheds deletes.
            if files.len() < 2 && !files.iter().any(|f| with_deletes.contains(f.path.as_str())) {
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
            if g.files.len() >= 2
                || g.files
                    .iter()
                    .any(|f| with_deletes.contains(f.path.as_str()))
            {
                groups.push(g);
            }
        }
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

    /// Reads a group with its deletes applied and writes it sorted by key: a `replace` staged
    /// for the commit loop.
    async fn rewrite(
        &self,
        table: &LoadedTable,
        group: &Group,
        deletes: &[LiveDelete],
    ) -> Result<(Staged, Added, Rewritten)> {
        let file_io = self.catalog.file_io();
        let md = table.metadata.clone();
        let snapshot = md
            .current_snapshot()
            .ok_or_else(|| Error::Internal("no snapshot".into()))?;
        let base_seq = snapshot.sequence_number();
        let paths: BTreeSet<String> = group.files.iter().map(|f| f.path.clone()).collect();
        let t = table.table(file_io)?;
        let sorted: BTreeSet<String> = group
            .files
            .iter()
            .filter(|f| sorted_by_key(&md, f.sort_order_id))
            .map(|f| f.path.clone())
            .collect();
        let inputs = self
            .inputs(&t, snapshot.snapshot_id(), &paths, &sorted, deletes)
            .await?;
        let key = key_columns(md.current_schema());
        let full_load = group.files.iter().all(|f| is_full_load_file(&f.path));
        let merge::Merged { written, map } =
            merge::merge_group(&t, file_io, &md, inputs, &key, self.target(&md), full_load).await?;
        let map = map.map(Arc::new);

        // Delete files that only target removed (or long gone) files go too.
        let removed_deletes: BTreeSet<String> = deletes
            .iter()
            .filter(|d| d.targets.iter().all(|t| paths.contains(t)))
            .map(|d| d.path.clone())
            .collect();
        let snapshot_id = commit::new_snapshot_id(Some(&md));
        let mut prepared: Prepared = written
            .iter()
            .map(|(_, f)| f.file_path().to_string())
            .collect();
        let result = async {
            let mut manifests = commit::write_manifests(
                self.catalog.files(),
                &md,
                snapshot_id,
                &written,
                &[],
                Some(base_seq),
            )
            .await?;
            let removal = remove_files(self.catalog.files(), &md, snapshot_id, |f| {
                paths.contains(f.file_path()) || removed_deletes.contains(f.file_path())
            })
            .await?;
            manifests.extend(removal.manifests);
            Ok::<_, Error>((manifests, removal.replaced, removal.removed))
        }
        .await;
        let (manifests, replaced, removed) = match result {
            Ok(r) => r,
            Err(e) => {
                prepared.abandon(file_io).await;
                return Err(e);
            }
        };
        prepared.extend(manifests.iter().map(|m| m.manifest_path.clone()));

        let mut added = Added::default();
        for (_, f) in &written {
            added.data_files += 1;
            added.records += f.record_count();
            added.data_files_size += f.file_size_in_bytes();
        }
        added.count_removed(&removed);
        added.changed_partitions = 1;
        let mut summary = BTreeMap::new();
        summary.insert(
            "dms2iceberg.compaction".into(),
            format!("{} files", group.files.len()),
        );
        let staged = Staged {
            ident: self.ident.clone(),
            base: Base::Existing(table.clone()),
            changes: MetadataChanges::default(),
            schema_id: md.current_schema_id(),
            snapshot_id,
            change: Change::Rewrite {
                replaced_manifests: replaced,
                removed_data_files: paths,
                row_map: map,
            },
            manifests,
            files: prepared,
            added: added.clone(),
            summary,
            record: None,
        };
        let rewritten = Rewritten {
            schema: md.current_schema().clone(),
            files: written
                .iter()
                .map(|(_, f)| NewFile {
                    path: f.file_path().to_string(),
                    size: f.file_size_in_bytes(),
                    rows: f.record_count(),
                })
                .collect(),
        };
        Ok((staged, added, rewritten))
    }

    /// The group's files as of `snapshot_id`, each with its deleted positions. Deletes are
    /// applied by the merge rather than by the reader, so that each row's position in its file
    /// is known (the row map carries later deletes over by position). Each delete file is read
    /// once, several at a time.
    async fn inputs(
        &self,
        t: &iceberg::table::Table,
        snapshot_id: i64,
        paths: &BTreeSet<String>,
        sorted: &BTreeSet<String>,
        planned: &[LiveDelete],
    ) -> Result<Vec<merge::Input>> {
        let scan = t.scan().snapshot_id(snapshot_id).select_all().build()?;
        let wanted = paths.clone();
        let tasks: Vec<FileScanTask> = scan
            .plan_files()
            .await?
            .try_filter(move |task| futures::future::ready(wanted.contains(&task.data_file_path)))
            .try_collect()
            .await?;
        let mut deletes: HashMap<String, Arc<DeletedPositions>> = planned
            .iter()
            .map(|d| (d.path.clone(), d.content.clone()))
            .collect();
        // The plan read every live delete file of this snapshot; one it did not (none, unless
        // the scan and the plan disagree) is read here.
        let mut unread: BTreeMap<String, u64> = BTreeMap::new();
        for d in tasks.iter().flat_map(|t| t.deletes.iter()) {
            if d.file_type != DataContentType::PositionDeletes {
                return Err(crate::files::equality_deletes_refused(&d.file_path));
            }
            if !deletes.contains_key(&d.file_path) {
                unread.insert(d.file_path.clone(), d.file_size_in_bytes);
            }
        }
        let unread: Vec<(&str, u64)> = unread.iter().map(|(p, s)| (p.as_str(), *s)).collect();
        let read = (self.catalog.files())
            .position_deletes_of(&unread, Fill::Pass)
            .await?;
        deletes.extend(
            unread
                .iter()
                .zip(read)
                .map(|((p, _), (c, _))| (p.to_string(), c)),
        );
        Ok(tasks
            .into_iter()
            .map(|mut task| {
                let mut deleted: Vec<i64> = task
                    .deletes
                    .iter()
                    .filter_map(|d| deletes.get(&d.file_path)?.get(&task.data_file_path))
                    .flatten()
                    .copied()
                    .collect();
                deleted.sort_unstable();
                deleted.dedup();
                task.deletes.clear();
                let sorted = sorted.contains(task.data_file_path.as_str());
                merge::Input {
                    task,
                    deleted,
                    sorted,
                }
            })
            .collect())
    }
}

/// Whether a data file of sort order `order` is sorted by the table's key: it carries the
/// table's default order, and that order is the key (ascending). The key may have changed since
/// the order was set; another engine may write files of no order.
fn sorted_by_key(md: &TableMetadata, order: Option<i32>) -> bool {
    let Some(order) = order else {
        return false;
    };
    let default = md.default_sort_order();
    let key = crate::evolve::key_field_ids(md.current_schema());
    order == md.default_sort_order_id() as i32
        && !default.is_unsorted()
        && default.fields.len() == key.len()
        && default.fields.iter().zip(&key).all(|(f, k)| {
            f.source_id == *k
                && f.transform == iceberg::spec::Transform::Identity
                && f.direction == iceberg::spec::SortDirection::Ascending
                && f.null_order == iceberg::spec::NullOrder::First
        })
}

/// Plans one rewrite group per commit against the table as it is now.
struct GroupPlanner<'a> {
    compact: &'a Compact<'a>,
    /// Input bytes left for this run.
    budget: u64,
    started: Instant,
    first: bool,
    /// Data and delete files at the last plan.
    counts: (usize, usize),
    /// Data and delete files before the run (set by the first plan).
    before: Option<(usize, usize)>,
    /// Groups left for the next run at the last plan.
    groups_left: usize,
}

#[async_trait::async_trait]
impl Planner for GroupPlanner<'_> {
    /// The group and what its commit adds and removes; `None`: nothing (more) to do.
    type Report = Option<(Group, Added, Rewritten)>;

    async fn plan(&mut self, table: Option<LoadedTable>) -> Result<Plan<Self::Report>> {
        let c = self.compact;
        let Some(table) = table else {
            return Err(Error::NoSuchTable {
                table: c.ident.to_string(),
            });
        };
        crate::commit::writable_version(&table.metadata, &c.ident.to_string())?;
        let (data, deletes) = live_files(c.catalog, &table.metadata).await?;
        self.counts = (data.len(), deletes.len());
        if self.first {
            self.before = Some(self.counts);
            self.first = false;
        }
        let mut groups = c.plan(&table.metadata, &data, &deletes);
        if groups.is_empty() && deletes.iter().any(|d| d.targets.is_empty()) {
            // Nothing to rewrite, but delete files point only at files gone: drop them.
            groups.push(Group {
                files: Vec::new(),
                bytes: 0,
            });
        }
        self.groups_left = groups.len();
        let within = groups
            .first()
            .filter(|g| g.bytes <= self.budget || self.budget == c.options.max_bytes);
        let Some(group) = within.filter(|_| self.started.elapsed() <= c.options.time_budget) else {
            return Ok(Plan::Nothing(None));
        };
        self.groups_left -= 1;
        let (staged, added, rewritten) = c.rewrite(&table, group, &deletes).await?;
        // New files written, nothing committed yet: commits landing here get carried over.
        if let Err(e) = commit::failpoint("after-rewrite").await {
            staged.discard(c.catalog.file_io()).await;
            return Err(e);
        }
        Ok(Plan::Commit(
            Box::new(staged),
            Some((group.clone(), added, rewritten)),
        ))
    }
}

/// Live data and delete files of the current snapshot, with deleted-row counts per data file.
async fn live_files(
    catalog: &dyn Catalog,
    md: &TableMetadata,
) -> Result<(Vec<LiveData>, Vec<LiveDelete>)> {
    let files = catalog.files();
    let live = files.live(md, Scope::All, Fill::Pass).await?;
    let mut data: Vec<LiveData> = live
        .data()
        .map(|d| {
            let f = d.file();
            LiveData {
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
    let delete_files: Vec<(&str, u64)> = live
        .position_deletes()
        .map(|d| (d.file().file_path(), d.file().file_size_in_bytes()))
        .collect();
    let read = files.position_deletes_of(&delete_files, Fill::Pass).await?;
    let mut deleted_per_file: HashMap<String, (u64, usize)> = HashMap::new();
    let mut deletes = Vec::with_capacity(read.len());
    for ((path, _), (content, _)) in delete_files.iter().zip(read) {
        for (p, pos) in content.iter() {
            let d = deleted_per_file.entry(p.clone()).or_default();
            d.0 += pos.len() as u64;
            d.1 += 1;
        }
        deletes.push(LiveDelete {
            path: path.to_string(),
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

/// The staged commit of the first group the next run would rewrite (tests of the protocol).
#[cfg(test)]
pub(crate) async fn plan_for_tests(c: &Compact<'_>, table: LoadedTable) -> Option<Staged> {
    let mut planner = GroupPlanner {
        compact: c,
        budget: c.options.max_bytes,
        started: Instant::now(),
        first: true,
        counts: (0, 0),
        before: None,
        groups_left: 0,
    };
    match planner.plan(Some(table)).await.ok()? {
        Plan::Commit(staged, _) => Some(*staged),
        Plan::Nothing(_) => None,
    }
}
