//! compact: rewrite small data files, and files carrying many deleted rows, into target-size
//! files sorted by key with their deletes applied; drop delete files nothing live needs.
//!
//! Safe alongside ingest: each partition group is one `replace` snapshot through the same commit
//! protocol. Rewritten files keep the data sequence number of the snapshot they were read from.
//! If ingest committed deletes against a file being replaced, the group is planned again from the
//! new snapshot rather than committed (a delete is never dropped, a row never resurrected);
//! ingest likewise re-locates its rows when compaction replaced a file its deletes pointed into.
//! Work per run is bounded by bytes and time; the next run continues.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_ord::sort::{SortColumn, lexsort_to_indices};
use futures::{StreamExt, TryStreamExt};
use iceberg::TableIdent;
use iceberg::spec::{
    DataContentType, DataFile, ManifestContentType, ManifestFile, ManifestStatus,
    ManifestWriterBuilder, Operation, Struct, TableMetadata,
};
use serde::Serialize;
use tracing::info;

use crate::catalog::Catalog;
use crate::commit::{self, Added, Base, CommitError, MetadataChanges, Outcome, Staged};
use crate::error::{Error, Result};
use crate::evolve::key_columns;
use crate::lookup::read_position_deletes;
use crate::table::{LoadedTable, carried_state, manifest_list};
use crate::write::{is_full_load_file, write_data_files_of};

#[derive(Debug, Clone)]
pub struct CompactOptions {
    /// Output file size; default: the table's `write.target-file-size-bytes` (else 512 MiB).
    pub target_file_size: Option<u64>,
    /// Files smaller than this fraction of the target are rewritten.
    pub min_file_ratio: f64,
    /// Files with at least this fraction of their rows deleted are rewritten.
    pub delete_ratio: f64,
    /// Input bytes per rewrite group (one snapshot): bounds memory.
    pub max_group_bytes: u64,
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
            max_group_bytes: 256 << 20,
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
    pub replans: usize,
    /// Groups left for the next run (budget reached).
    pub groups_left: usize,
    pub elapsed_ms: u64,
}

pub struct Compact<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    options: CompactOptions,
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
}

#[derive(Debug, Clone)]
struct LiveDelete {
    path: String,
    /// Live data files it deletes rows of (files already gone are left out).
    targets: BTreeSet<String>,
}

/// The files of one partition to rewrite together.
#[derive(Debug, Clone)]
struct Group {
    files: Vec<LiveData>,
    bytes: u64,
}

const MAX_REPLANS: usize = 10;

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
        let mut budget = self.options.max_bytes;
        let mut first = true;
        let mut replans = 0;
        loop {
            let Some(table) = LoadedTable::load(self.catalog, &self.ident).await? else {
                return Err(Error::Other(format!("table {} does not exist", self.ident)));
            };
            let (data, deletes) = live_files(self.catalog, &table.metadata).await?;
            if first {
                report.data_files_before = data.len();
                report.delete_files_before = deletes.len();
                first = false;
            }
            report.data_files_after = data.len();
            report.delete_files_after = deletes.len();
            let mut groups = self.plan(&table.metadata, &data, &deletes);
            if groups.is_empty() && deletes.iter().any(|d| d.targets.is_empty()) {
                // Nothing to rewrite, but delete files point only at files gone: drop them.
                groups.push(Group {
                    files: Vec::new(),
                    bytes: 0,
                });
            }
            let Some(group) = groups
                .first()
                .filter(|g| g.bytes <= budget || report.commits == 0)
            else {
                report.groups_left = groups.len();
                break;
            };
            if started.elapsed() > self.options.time_budget {
                report.groups_left = groups.len();
                break;
            }
            match self.rewrite(&table, group, &deletes).await {
                Ok((outcome, stats)) => {
                    if let Outcome::Committed { snapshot_id, .. } = outcome {
                        info!(table = %self.ident, snapshot_id, files = group.files.len(), bytes = group.bytes, "compacted a group");
                        report.commits += 1;
                        report.data_files_rewritten += group.files.len();
                        report.data_files_written += stats.data_files as usize;
                        report.delete_files_removed += stats.removed_delete_files as usize;
                        report.bytes_rewritten += group.bytes;
                        report.records_written += stats.records;
                        budget = budget.saturating_sub(group.bytes);
                    }
                }
                Err(CommitError::Replan(reason)) => {
                    replans += 1;
                    report.replans += 1;
                    info!(table = %self.ident, %reason, "compaction group changed under us; planning again");
                    if replans > MAX_REPLANS {
                        return Err(Error::CommitFailed {
                            table: self.ident.to_string(),
                            attempts: replans as u32,
                            reason: format!(
                                "ingest kept changing the files being compacted ({reason}); the next run retries"
                            ),
                        });
                    }
                }
                Err(CommitError::Failed(e)) => return Err(e),
                Err(CommitError::Unknown(r)) => {
                    return Err(Error::Other(format!(
                        "compaction commit outcome unknown: {r}"
                    )));
                }
            }
        }
        if let Some(table) = LoadedTable::load(self.catalog, &self.ident).await? {
            let (data, deletes) = live_files(self.catalog, &table.metadata).await?;
            report.data_files_after = data.len();
            report.delete_files_after = deletes.len();
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
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
            if f.size < small || (f.deleted > 0 && deleted_ratio >= self.options.delete_ratio) {
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
                if !g.files.is_empty() && g.bytes + f.size > self.options.max_group_bytes {
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
        groups.sort_by_key(|g| std::cmp::Reverse(g.files.len()));
        groups
    }

    /// Reads a group with its deletes applied, writes it sorted by key, commits a `replace`.
    async fn rewrite(
        &self,
        table: &LoadedTable,
        group: &Group,
        deletes: &[LiveDelete],
    ) -> std::result::Result<(Outcome, Added), CommitError> {
        let file_io = self.catalog.file_io();
        let md = table.metadata.clone();
        let snapshot = md
            .current_snapshot()
            .ok_or_else(|| Error::Other("no snapshot".into()))?;
        let base_seq = snapshot.sequence_number();
        let paths: BTreeSet<String> = group.files.iter().map(|f| f.path.clone()).collect();

        // Rows of the group as of the snapshot, deletes applied, in the current schema.
        let t = table.table(file_io)?;
        let scan = t
            .scan()
            .snapshot_id(snapshot.snapshot_id())
            .select_all()
            .build()
            .map_err(Error::from)?;
        let wanted = paths.clone();
        let tasks = scan
            .plan_files()
            .await
            .map_err(Error::from)?
            .try_filter(move |task| futures::future::ready(wanted.contains(&task.data_file_path)))
            .boxed();
        let batches: Vec<RecordBatch> = t
            .reader_builder()
            .build()
            .read(tasks)
            .map_err(Error::from)?
            .stream()
            .try_collect()
            .await
            .map_err(Error::from)?;
        let schema = md.current_schema().clone();
        let arrow_schema = std::sync::Arc::new(
            iceberg::arrow::schema_to_arrow_schema(&schema).map_err(Error::from)?,
        );
        let all =
            arrow_select::concat::concat_batches(&arrow_schema, &batches).map_err(Error::from)?;
        let key = key_columns(&schema);
        let sorted = if key.is_empty() || all.num_rows() == 0 {
            all
        } else {
            let cols: Vec<SortColumn> = key
                .iter()
                .filter_map(|k| all.column_by_name(k))
                .map(|c| SortColumn {
                    values: c.clone(),
                    options: None,
                })
                .collect();
            let idx = lexsort_to_indices(&cols, None).map_err(Error::from)?;
            arrow_select::take::take_record_batch(&all, &idx).map_err(Error::from)?
        };
        let full_load = group.files.iter().all(|f| is_full_load_file(&f.path));
        let written =
            write_data_files_of(file_io, &md, &sorted, &key, self.target(&md), full_load).await?;

        // Delete files that only target removed (or long gone) files go too.
        let removed_deletes: BTreeSet<String> = deletes
            .iter()
            .filter(|d| d.targets.iter().all(|t| paths.contains(t)))
            .map(|d| d.path.clone())
            .collect();
        let snapshot_id = commit::new_snapshot_id(Some(&md));
        let mut prepared: Vec<String> = written
            .iter()
            .map(|(_, f)| f.file_path().to_string())
            .collect();
        let result = async {
            let mut manifests =
                commit::write_manifests(file_io, &md, snapshot_id, &written, &[], Some(base_seq))
                    .await?;
            let (rewritten, replaced, removed) =
                rewrite_manifests(file_io, &md, snapshot_id, &paths, &removed_deletes).await?;
            manifests.extend(rewritten);
            Ok::<_, Error>((manifests, replaced, removed))
        }
        .await;
        let (manifests, replaced, removed) = match result {
            Ok(r) => r,
            Err(e) => {
                for p in &prepared {
                    let _ = file_io.delete(p).await;
                }
                return Err(e.into());
            }
        };
        prepared.extend(manifests.iter().map(|m| m.manifest_path.clone()));

        let mut added = Added::default();
        for (_, f) in &written {
            added.data_files += 1;
            added.records += f.record_count();
            added.data_files_size += f.file_size_in_bytes();
        }
        for (content, f) in &removed {
            match content {
                DataContentType::Data => {
                    added.removed_data_files += 1;
                    added.removed_records += f.record_count();
                    added.removed_data_files_size += f.file_size_in_bytes();
                }
                _ => {
                    added.removed_delete_files += 1;
                    added.removed_position_deletes += f.record_count();
                    added.removed_delete_files_size += f.file_size_in_bytes();
                }
            }
        }
        added.changed_partitions = 1;
        let mut properties = carried_state(&md);
        properties.insert(
            "dms2iceberg.compaction".into(),
            format!("{} files", group.files.len()),
        );
        let staged = Staged {
            ident: self.ident.clone(),
            base: Base::Existing(table.clone()),
            changes: MetadataChanges::default(),
            schema_id: md.current_schema_id(),
            spec_id: md.default_partition_spec_id(),
            snapshot_id,
            operation: Operation::Replace,
            manifests,
            files: prepared,
            referenced_data_files: Default::default(),
            replaced_manifests: replaced,
            removed_data_files: paths,
            added: added.clone(),
            properties,
            input_orders: Vec::new(),
        };
        match commit::commit(self.catalog, &staged).await {
            Ok(o) => Ok((o, added)),
            Err(CommitError::Unknown(r)) => Err(CommitError::Unknown(r)),
            Err(e) => {
                staged.discard(file_io).await;
                Err(e)
            }
        }
    }
}

/// Rewrites every manifest of the current snapshot that holds a removed file: the removed ones
/// become DELETED entries, the rest EXISTING (same snapshot and sequence numbers).
async fn rewrite_manifests(
    file_io: &iceberg::io::FileIO,
    md: &TableMetadata,
    snapshot_id: i64,
    removed_data: &BTreeSet<String>,
    removed_deletes: &BTreeSet<String>,
) -> Result<(
    Vec<ManifestFile>,
    BTreeSet<String>,
    Vec<(DataContentType, DataFile)>,
)> {
    let Some(snapshot) = md.current_snapshot() else {
        return Ok(Default::default());
    };
    let mut out = Vec::new();
    let mut replaced = BTreeSet::new();
    let mut removed = Vec::new();
    for m in manifest_list(file_io, md, snapshot).await? {
        let manifest = m.load_manifest(file_io).await?;
        let touched = manifest.entries().iter().any(|e| {
            e.is_alive()
                && (removed_data.contains(e.file_path()) || removed_deletes.contains(e.file_path()))
        });
        if !touched {
            continue;
        }
        let spec = md
            .partition_spec_by_id(m.partition_spec_id)
            .ok_or_else(|| {
                Error::Other(format!(
                    "partition spec {} not in table metadata",
                    m.partition_spec_id
                ))
            })?;
        let path = format!(
            "{}/metadata/{}-m{}.avro",
            md.location(),
            uuid::Uuid::new_v4(),
            out.len()
        );
        let builder = ManifestWriterBuilder::new(
            file_io.new_output(&path)?,
            Some(snapshot_id),
            md.current_schema().clone(),
            spec.as_ref().clone(),
        );
        let mut w = match m.content {
            ManifestContentType::Data => builder.build_v2_data(),
            ManifestContentType::Deletes => builder.build_v2_deletes(),
        };
        for e in manifest.entries() {
            if !e.is_alive() {
                continue;
            }
            let (Some(seq), Some(file_seq), Some(sid)) =
                (e.sequence_number(), e.file_sequence_number, e.snapshot_id())
            else {
                return Err(Error::Other(format!(
                    "manifest entry {} lacks sequence numbers",
                    e.file_path()
                )));
            };
            let f = e.data_file().clone();
            if removed_data.contains(e.file_path()) || removed_deletes.contains(e.file_path()) {
                removed.push((f.content_type(), f.clone()));
                w.add_delete_file(f, seq, Some(file_seq))?;
            } else {
                w.add_existing_file(f, sid, seq, Some(file_seq))?;
            }
        }
        out.push(w.write_manifest_file().await?);
        replaced.insert(m.manifest_path.clone());
    }
    Ok((out, replaced, removed))
}

/// Live data and delete files of the current snapshot, with deleted-row counts per data file.
async fn live_files(
    catalog: &dyn Catalog,
    md: &TableMetadata,
) -> Result<(Vec<LiveData>, Vec<LiveDelete>)> {
    let file_io = catalog.file_io();
    let Some(snapshot) = md.current_snapshot() else {
        return Ok((vec![], vec![]));
    };
    let mut data = Vec::new();
    let mut deletes = Vec::new();
    let manifests = manifest_list(file_io, md, snapshot).await?;
    let loaded: Vec<(ManifestFile, iceberg::spec::Manifest)> = futures::stream::iter(manifests)
        .map(|m| async move {
            let manifest = m.load_manifest(file_io).await?;
            Ok::<_, Error>((m, manifest))
        })
        .buffer_unordered(8)
        .try_collect()
        .await?;
    let mut deleted_per_file: HashMap<String, u64> = HashMap::new();
    for (m, manifest) in &loaded {
        for e in manifest.entries() {
            if !e.is_alive() || e.status() == ManifestStatus::Deleted {
                continue;
            }
            let f = e.data_file();
            match f.content_type() {
                DataContentType::Data => data.push(LiveData {
                    path: f.file_path().to_string(),
                    size: f.file_size_in_bytes(),
                    records: f.record_count(),
                    spec_id: m.partition_spec_id,
                    partition: f.partition().clone(),
                    deleted: 0,
                }),
                DataContentType::PositionDeletes => {
                    let content =
                        read_position_deletes(file_io, f.file_path(), f.file_size_in_bytes())
                            .await?;
                    for (p, pos) in &content {
                        *deleted_per_file.entry(p.clone()).or_default() += pos.len() as u64;
                    }
                    deletes.push(LiveDelete {
                        path: f.file_path().to_string(),
                        targets: content.into_keys().collect(),
                    });
                }
                DataContentType::EqualityDeletes => {
                    return Err(Error::Other(format!(
                        "table has equality delete files ({}); compaction of such tables is not supported",
                        f.file_path()
                    )));
                }
            }
        }
    }
    for d in &mut data {
        d.deleted = deleted_per_file.get(&d.path).copied().unwrap_or(0);
    }
    // A delete file whose targets are all gone (rewritten earlier) is dangling: empty targets.
    let live: BTreeSet<String> = data.iter().map(|d| d.path.clone()).collect();
    for d in &mut deletes {
        d.targets.retain(|t| live.contains(t));
    }
    Ok((data, deletes))
}
