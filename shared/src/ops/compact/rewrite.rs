//! One group rewritten: its rows read with their deletes applied, merged by key into
//! target-size files ([`super::merge`]), staged as a `replace` with the map of where each row
//! went.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataContentType, TableMetadata};

use crate::commit::{self, Added, Base, Change, MetadataChanges, Staged};
use crate::error::{Error, Result};
use crate::evolve::key_columns;
use crate::files::Fill;
use crate::files::deletes::{DeleteId, DeleteSource, DeletedPositions};
use crate::files::prepared::Prepared;
use crate::files::vocabulary::is_full_load_file;
use crate::table::LoadedTable;

use super::select::{Group, LiveDelete};
use super::{Compact, merge};

/// The data files a rewrite wrote, and the schema it wrote them in (a schema change meanwhile
/// makes the commit plan again).
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// Key indexes written beside the new files (as their rows were written).
    pub(super) key_indexes: usize,
}

impl Compact<'_> {
    /// Reads a group with its deletes applied and writes it sorted by key: a `replace` staged
    /// for the commit loop.
    pub(super) async fn rewrite(
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
        // Row lineage (v3): what each file's rows' ids and last changes are unless it stores them.
        let lineage: Option<HashMap<String, merge::Lineage>> = crate::files::lineage::tracks(&md)
            .then(|| {
                (group.files.iter())
                    .map(|f| {
                        let l = merge::Lineage {
                            first_row_id: f.first_row_id,
                            sequence_number: f.data_sequence_number,
                        };
                        (f.path.clone(), l)
                    })
                    .collect()
            });
        let inputs = self
            .inputs(&t, snapshot.snapshot_id(), &paths, &sorted, deletes)
            .await?
            .into_iter()
            .map(|mut i| {
                i.lineage = (lineage.as_ref())
                    .map(|l| l.get(&i.task.data_file_path).copied().unwrap_or_default());
                i
            })
            .collect();
        let key = key_columns(md.current_schema());
        let full_load = group.files.iter().all(|f| is_full_load_file(&f.path));
        let merge::Merged {
            written,
            map,
            key_indexes,
        } = merge::merge_group(&t, file_io, &md, inputs, &key, self.target(&md), full_load).await?;
        let map = map.map(Arc::new);

        // Delete files that only target removed (or long gone) files go too.
        let removed_deletes: BTreeSet<DeleteId> = deletes
            .iter()
            .filter(|d| d.targets.iter().all(|t| paths.contains(t)))
            .map(|d| d.id.clone())
            .collect();
        let snapshot_id = commit::new_snapshot_id(Some(&md));
        let mut prepared: Prepared = written
            .iter()
            .map(|(_, f)| f.file_path().to_string())
            .collect();
        // The files it removes are found in the manifests current when it commits (see
        // `commit::producer`): only the new files' manifest is written here.
        let manifests = commit::write_manifests(
            self.catalog.files(),
            &md,
            snapshot_id,
            &written,
            &[],
            Some(base_seq),
        )
        .await;
        let manifests = match manifests {
            Ok(m) => m,
            Err(e) => {
                prepared.abandon(file_io).await;
                return Err(e);
            }
        };
        prepared.extend(manifests.manifests.iter().map(|m| m.manifest_path.clone()));

        let mut added = Added::default();
        for (_, f) in &written {
            added.data_files += 1;
            added.records += f.record_count();
            added.data_files_size += f.file_size_in_bytes();
        }
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
                removed_data_files: paths,
                removed_delete_files: removed_deletes.clone(),
                row_map: map,
            },
            manifests: manifests.manifests,
            held: manifests.held,
            files: prepared,
            added: added.clone(),
            summary,
            record: None,
        };
        let rewritten = Rewritten { key_indexes };
        // The report's count: what the plan removes (the snapshot's summary counts what its
        // attempt found live).
        let mut reported = added;
        reported.removed_data_files = group.files.len() as u64;
        reported.removed_delete_files = removed_deletes.len() as u64;
        Ok((staged, reported, rewritten))
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
        // Each data file's deletes as the plan read them, by the data file they name: the
        // scan's own matching is by delete file path, which a Puffin file of many data files'
        // deletion vectors shares.
        let mut deletes: HashMap<&str, Vec<Arc<DeletedPositions>>> = HashMap::new();
        for d in planned {
            for target in d.content.keys() {
                if paths.contains(target) {
                    deletes
                        .entry(target.as_str())
                        .or_default()
                        .push(d.content.clone());
                }
            }
        }
        // The plan read every live delete of this snapshot; a position-delete file it did not
        // (none, unless the scan and the plan disagree) is read here.
        let planned_files: BTreeSet<&str> = planned.iter().map(|d| d.id.path.as_str()).collect();
        let mut unread: BTreeMap<String, DeleteSource> = BTreeMap::new();
        for d in tasks.iter().flat_map(|t| t.deletes.iter()) {
            if d.file_type != DataContentType::PositionDeletes {
                return Err(crate::files::equality_deletes_refused(&d.file_path));
            }
            if !planned_files.contains(d.file_path.as_str()) {
                unread.insert(
                    d.file_path.clone(),
                    DeleteSource {
                        id: DeleteId {
                            path: d.file_path.clone(),
                            offset: None,
                        },
                        size: d.file_size_in_bytes,
                        vector: None,
                    },
                );
            }
        }
        let unread: Vec<&DeleteSource> = unread.values().collect();
        let read = (self.catalog.files())
            .position_deletes_of(&unread, Fill::Pass)
            .await?;
        let unread: Vec<Arc<DeletedPositions>> = read.into_iter().map(|(c, _)| c).collect();
        for c in &unread {
            for target in c.keys() {
                if let Some(t) = paths.get(target) {
                    deletes.entry(t.as_str()).or_default().push(c.clone());
                }
            }
        }
        Ok(tasks
            .into_iter()
            .map(|mut task| {
                let mut deleted: Vec<i64> = deletes
                    .get(task.data_file_path.as_str())
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get(&task.data_file_path))
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
                    lineage: None,
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
