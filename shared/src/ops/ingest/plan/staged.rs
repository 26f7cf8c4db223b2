//! The commit an ingest plan makes of what it wrote: its metadata (schema changes settled
//! first), its change (a row delta with the keys it read, or a reload), its summary and record.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use iceberg::spec::{DataFile, TableMetadata, TableMetadataBuilder};

use crate::commit::{
    self, Added, AppliedRecord, Base, Change, MetadataChanges, RecordUpdate, Staged,
};
use crate::config::TableMode;
use crate::error::{Error, Result};
use crate::evolve;
use crate::files::prepared::Prepared;
use crate::files::vocabulary::keys;
use crate::locate::FileKind;
use crate::ops::ingest::report::CommitReport;
use crate::table::LoadedTable;

use super::*;

/// What [`IngestPlanner::staged`] makes a commit of.
pub(super) struct Staging<'a> {
    pub(super) base: Base,
    pub(super) changes: MetadataChanges,
    pub(super) planned: Arc<TableMetadata>,
    pub(super) record: Arc<AppliedRecord>,
    pub(super) carried: Vec<crate::commit::record::LoadFile>,
    pub(super) mode: Mode,
    pub(super) written: Written,
    /// Data files the commit's position deletes point into.
    pub(super) referenced: std::collections::BTreeSet<String>,
    pub(super) change: &'a evolve::SchemaChange,
    pub(super) rows_rejected: usize,
    pub(super) max_seq: Option<String>,
    /// The keys the input's rows hold: what other writers' new files are checked against.
    pub(super) keys: commit::KeyScope,
    /// Data files whose rows the plan left in place as newer than their change.
    pub(super) kept: std::collections::BTreeSet<String>,
}

/// Everything a commit writes, before it is staged.
pub(super) struct Written {
    pub(super) data: Vec<(i32, DataFile)>,
    pub(super) deletes: Vec<(i32, DataFile)>,
    pub(super) snapshot_id: i64,
    pub(super) manifests: crate::commit::manifests::Encoded,
    pub(super) prepared: Prepared,
    /// Data files the delete files hold positions of: the plan's, and those whose deletes
    /// were merged with them (one delete file per data file).
    pub(super) deleted_in: std::collections::BTreeSet<String>,
    /// Live delete files the written ones replace.
    pub(super) replaced_deletes: std::collections::BTreeSet<crate::files::deletes::DeleteId>,
}

/// TableMetadataBuilder re-assigns field ids of a new table; ours are already 1..n in order,
/// which it keeps. Checked, because every file we write depends on it.
pub(super) fn check_ids_kept(
    ours: &iceberg::spec::Schema,
    theirs: &iceberg::spec::Schema,
) -> Result<()> {
    for f in ours.as_struct().fields() {
        if theirs.field_id_by_name(&f.name) != Some(f.id) {
            return Err(Error::Internal(format!(
                "field id of `{}` changed on table creation",
                f.name
            )));
        }
    }
    Ok(())
}

pub(super) fn added(data: &[(i32, DataFile)], deletes: &[(i32, DataFile)]) -> Added {
    let mut partitions = std::collections::BTreeSet::new();
    let mut added = Added::default();
    for (spec, f) in data {
        added.data_files += 1;
        added.records += f.record_count();
        added.data_files_size += f.file_size_in_bytes();
        partitions.insert((*spec, format!("{:?}", f.partition())));
    }
    for (spec, f) in deletes {
        added.count_delete(f);
        partitions.insert((*spec, format!("{:?}", f.partition())));
    }
    added.changed_partitions = partitions.len() as u64;
    added
}

impl IngestPlanner<'_> {
    /// The commit of what was written, and its report (row counts filled in by the caller).
    pub(super) fn staged(&self, s: Staging<'_>, report: &mut CommitReport) -> Result<Staged> {
        let Staging {
            base,
            changes,
            planned,
            record,
            carried,
            mode,
            written,
            referenced,
            change,
            rows_rejected,
            max_seq,
            keys,
            kept,
        } = s;
        report.late = mode == Mode::Changes { late: true };
        report.reload = mode == Mode::Reload;
        report.data_files = written.data.len();
        report.delete_files = written.deletes.len();
        report.partitions = written
            .data
            .iter()
            .chain(&written.deletes)
            .map(|(spec, f)| (*spec, f.partition()))
            .collect::<HashSet<_>>()
            .len();
        report.columns_added = change.added.clone();
        report.columns_promoted = change
            .promoted
            .iter()
            .map(|(n, a, b)| format!("{n}: {a} -> {b}"))
            .collect();
        report.rows_rejected = rows_rejected;
        let joins_load = mode == (Mode::Changes { late: false })
            && referenced.is_empty()
            && self.planned.iter().all(|f| f.object.kind == FileKind::Load);
        let change = match (mode, self.cfg.mode) {
            // A change history keeps what each load delivered, as it keeps every change.
            (_, TableMode::Changelog) => Change::Append,
            (Mode::Reload, _) => Change::Reload,
            (Mode::Changes { .. }, TableMode::Append) => Change::Append,
            (Mode::Changes { .. }, TableMode::Upsert) => Change::RowDelta {
                joins_load,
                referenced_data_files: referenced
                    .into_iter()
                    .chain(written.deleted_in.iter().cloned())
                    .collect(),
                keys,
                kept_rows_in: kept,
                checked: Default::default(),
                replaced_deletes: written.replaced_deletes.clone(),
            },
        };
        let summary = self.summary(report)?;
        Ok(Staged {
            ident: self.ident.clone(),
            base,
            changes,
            schema_id: planned.current_schema_id(),
            snapshot_id: written.snapshot_id,
            change,
            manifests: written.manifests.manifests,
            held: written.manifests.held,
            files: written.prepared,
            added: added(&written.data, &written.deletes),
            summary,
            record: Some(RecordUpdate {
                base_record: record,
                inputs: self.planned.iter().map(applied_input).collect(),
                reload: mode == Mode::Reload,
                carried,
                change_seq: max_seq,
                window: self.cfg.applied_record_files,
                truncate: None,
            }),
        })
    }

    /// Our snapshot summary: the files applied and the row counts (for `history`).
    pub(super) fn summary(&self, report: &CommitReport) -> Result<BTreeMap<String, String>> {
        let json =
            |v: &Vec<String>| serde_json::to_string(v).map_err(|e| Error::Internal(e.to_string()));
        let orders: Vec<String> = self
            .planned
            .iter()
            .map(|f| f.object.order.to_string())
            .collect();
        let mut p = BTreeMap::new();
        p.insert(keys::SOURCE_FILES.to_string(), json(&report.files)?);
        p.insert(keys::SOURCE_ORDERS.to_string(), json(&orders)?);
        p.insert(keys::ROWS_INSERTED.to_string(), report.inserted.to_string());
        p.insert(keys::ROWS_UPDATED.to_string(), report.updated.to_string());
        p.insert(keys::ROWS_DELETED.to_string(), report.deleted.to_string());
        if report.reload {
            p.insert(keys::RELOAD.to_string(), "true".into());
        }
        p.insert(
            keys::VERSION.to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        Ok(p)
    }

    /// Metadata the files are written against: the new table, or the current one changed.
    pub(super) async fn metadata_for(
        &self,
        table: Option<&LoadedTable>,
        schema: &iceberg::spec::Schema,
        change: &evolve::SchemaChange,
    ) -> Result<(Base, MetadataChanges, Arc<TableMetadata>)> {
        let cfg = self.cfg;
        match table {
            None => {
                let spec = evolve::partition_spec(
                    cfg.partition_by.as_deref().unwrap_or_default(),
                    schema,
                    &cfg.target(),
                )?;
                let sort = evolve::key_sort_order(schema)?;
                let mut props: HashMap<String, String> = [
                    ("write.parquet.compression-codec", "zstd"),
                    ("write.metadata.delete-after-commit.enabled", "true"),
                    ("write.metadata.previous-versions-max", "100"),
                    // Manifests merged on every commit into one per content and spec below
                    // 1 MiB (see `commit::manifests`): every reader's plan opens each manifest
                    // (DuckDB ~0.3 ms apiece locally, a GET each on S3), and a commit rewrites
                    // at most 1 MiB of them.
                    (
                        commit::manifests::MIN_COUNT_TO_MERGE,
                        commit::manifests::OUR_MIN_COUNT_TO_MERGE,
                    ),
                    (
                        commit::manifests::TARGET_SIZE_BYTES,
                        commit::manifests::OUR_TARGET_SIZE_BYTES,
                    ),
                    (
                        "write.target-file-size-bytes",
                        &cfg.target_file_size_bytes.to_string(),
                    ),
                    (keys::SOURCE_TABLE, &cfg.source),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
                if cfg.mode.appends() {
                    props.insert(keys::MODE.to_string(), cfg.mode.as_str().to_string());
                }
                props.extend(ordering_property(cfg, None)?);
                props.extend(cfg.properties.iter().map(|(k, v)| (k.clone(), v.clone())));
                let md = TableMetadataBuilder::new(
                    schema.clone(),
                    spec,
                    sort,
                    self.ingest.catalog.new_table_location(self.ident).await?,
                    cfg.format_version,
                    props,
                )?
                .build()?
                .metadata;
                check_ids_kept(schema, md.current_schema())?;
                let md = Arc::new(md);
                Ok((Base::Create(md.clone()), MetadataChanges::default(), md))
            }
            Some(t) => {
                let mut changes = MetadataChanges {
                    properties: ordering_property(cfg, Some(&t.metadata))?
                        .into_iter()
                        .collect(),
                    ..Default::default()
                };
                if !change.is_empty() {
                    changes.schema = Some(schema.clone());
                }
                if let Some(p) = &cfg.partition_by {
                    let spec = evolve::partition_spec(p, schema, &cfg.target())?;
                    if !evolve::same_partitioning(&spec, t.metadata.default_partition_spec()) {
                        changes.spec = Some(spec);
                    }
                }
                let planned = changes.apply(&t.metadata)?;
                Ok((Base::Existing(t.clone()), changes, planned))
            }
        }
    }
}

/// The table property that records the ordering columns ([`keys::ORDERING_COLUMNS`]), when
/// they are configured and `current` (the table, if it exists) does not already say so. It
/// stays when they are taken out of the configuration: full-load files merged with change rows
/// could not be told apart again.
fn ordering_property(
    cfg: &TableConfig,
    current: Option<&TableMetadata>,
) -> Result<Option<(String, String)>> {
    let columns: Vec<String> = (cfg.ordering_columns().iter())
        .map(|c| cfg.column_name(c))
        .collect();
    if columns.is_empty() {
        return Ok(None);
    }
    let value = serde_json::to_string(&columns).map_err(|e| Error::Internal(e.to_string()))?;
    let known = current.and_then(|md| md.properties().get(keys::ORDERING_COLUMNS));
    Ok((known != Some(&value)).then(|| (keys::ORDERING_COLUMNS.to_string(), value)))
}
