//! Rows set aside under the `quarantine` bad-row policy go to a companion table
//! `<namespace>.<table>__rejected`: the file, the line (CSV) or row (Parquet), the column, the
//! reason and the record as read. It is written before the main table's commit and records the
//! files it holds, so a retry never adds the same rows twice; an operator fixes the source and
//! re-feeds the rows from there.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use iceberg::TableIdent;
use iceberg::spec::{
    NestedField, Operation, PrimitiveType, Schema, SortOrder, TableMetadataBuilder, Type,
    UnboundPartitionSpec,
};

use crate::catalog::Catalog;
use crate::commit::{self, Added, Base, CommitError, MetadataChanges, Outcome, Staged};
use crate::error::{Error, Position, Rejected, Result};
use crate::locate::OrderKey;
use crate::table::{LoadedTable, applied_files, keys};
use crate::write::write_data_files;

/// Name of the companion table.
pub fn rejected_ident(main: &TableIdent) -> Result<TableIdent> {
    Ok(TableIdent::new(
        main.namespace().clone(),
        format!("{}__rejected", main.name()),
    ))
}

fn schema() -> Result<Schema> {
    let f = |id, name: &str, t: PrimitiveType, required| {
        Arc::new(NestedField::new(id, name, Type::Primitive(t), required))
    };
    Ok(Schema::builder()
        .with_fields(vec![
            f(1, "source_file", PrimitiveType::String, true),
            f(2, "line", PrimitiveType::Long, false),
            f(3, "row", PrimitiveType::Long, false),
            f(4, "column_name", PrimitiveType::String, false),
            f(5, "reason", PrimitiveType::String, true),
            f(6, "record", PrimitiveType::String, false),
            f(7, "rejected_at", PrimitiveType::Timestamptz, true),
        ])
        .build()?)
}

/// Appends `rows` (rejected from the files `inputs`: (object key, DMS order)) to the companion
/// table of `main`, unless it already holds those files.
pub async fn record(
    catalog: &dyn Catalog,
    main: &TableIdent,
    inputs: &[(String, OrderKey)],
    rows: &[Rejected],
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let ident = rejected_ident(main)?;
    for _ in 0..10 {
        let table = LoadedTable::load(catalog, &ident).await?;
        if let Some(t) = &table {
            let applied = applied_files(&t.metadata);
            if inputs.iter().all(|(_, o)| applied.contains(o)) {
                return Ok(());
            }
        }
        let (base, md) = match &table {
            Some(t) => (Base::Existing(t.clone()), t.metadata.clone()),
            None => {
                let md = TableMetadataBuilder::new(
                    schema()?,
                    UnboundPartitionSpec::builder().build(),
                    SortOrder::unsorted_order(),
                    catalog.default_location(&ident),
                    commit::FORMAT_VERSION,
                    Default::default(),
                )?
                .build()?
                .metadata;
                let md = Arc::new(md);
                (Base::Create(md.clone()), md)
            }
        };
        let now = chrono::Utc::now().timestamp_micros();
        let (lines, row_idx): (Vec<Option<i64>>, Vec<Option<i64>>) = rows
            .iter()
            .map(|r| match r.error.position {
                Some(Position::Line(l)) => (Some(l as i64), None),
                Some(Position::Row(n)) => (None, Some(n as i64)),
                None => (None, None),
            })
            .unzip();
        let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(md.current_schema())?);
        let batch = RecordBatch::try_new(
            arrow_schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.error.file.as_str()),
                )) as ArrayRef,
                Arc::new(Int64Array::from(lines)),
                Arc::new(Int64Array::from(row_idx)),
                Arc::new(StringArray::from_iter(
                    rows.iter().map(|r| r.error.column.as_deref()),
                )),
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|r| r.error.message()),
                )),
                Arc::new(StringArray::from_iter(
                    rows.iter().map(|r| r.record.as_deref()),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![now; rows.len()]).with_timezone("+00:00"),
                ),
            ],
        )?;
        let file_io = catalog.file_io();
        let data = write_data_files(
            file_io,
            &md,
            &batch,
            &[],
            crate::config::DEFAULT_TARGET_FILE_SIZE,
        )
        .await?;
        let snapshot_id = commit::new_snapshot_id(Some(&md));
        let manifests =
            commit::write_manifests(file_io, &md, snapshot_id, &data, &[], None).await?;
        let mut added = Added::default();
        for (_, f) in &data {
            added.data_files += 1;
            added.records += f.record_count();
            added.data_files_size += f.file_size_in_bytes();
        }
        added.changed_partitions = 1;
        let mut properties = BTreeMap::new();
        let keys_json = serde_json::to_string(&inputs.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .map_err(|e| Error::Other(e.to_string()))?;
        let orders_json = serde_json::to_string(
            &inputs
                .iter()
                .map(|(_, o)| o.to_string())
                .collect::<Vec<_>>(),
        )
        .map_err(|e| Error::Other(e.to_string()))?;
        properties.insert(keys::SOURCE_FILES.to_string(), keys_json);
        properties.insert(keys::SOURCE_ORDERS.to_string(), orders_json);
        let staged = Staged {
            ident: ident.clone(),
            base,
            changes: MetadataChanges::default(),
            schema_id: md.current_schema_id(),
            spec_id: md.default_partition_spec_id(),
            snapshot_id,
            operation: Operation::Append,
            files: data
                .iter()
                .map(|(_, f)| f.file_path().to_string())
                .chain(manifests.iter().map(|m| m.manifest_path.clone()))
                .collect(),
            manifests,
            referenced_data_files: Default::default(),
            replaced_manifests: Default::default(),
            removed_data_files: Default::default(),
            added,
            properties,
            input_orders: inputs.iter().map(|(_, o)| o.clone()).collect(),
        };
        match commit::commit(catalog, &staged).await {
            Ok(Outcome::Committed { .. }) => return Ok(()),
            Ok(Outcome::AlreadyApplied { .. }) => {
                staged.discard(file_io).await;
                return Ok(());
            }
            Err(CommitError::Replan(_)) => {
                staged.discard(file_io).await;
            }
            Err(CommitError::Failed(e)) => {
                staged.discard(file_io).await;
                return Err(e);
            }
            Err(CommitError::Unknown(r)) => {
                return Err(Error::Other(format!(
                    "rejected rows: commit outcome unknown: {r}"
                )));
            }
        }
    }
    Err(Error::CommitFailed {
        table: ident.to_string(),
        attempts: 10,
        reason: "the rejected-rows table kept changing".into(),
    })
}
