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
    NestedField, PrimitiveType, Schema, SortOrder, TableMetadata, TableMetadataBuilder, Type,
    UnboundPartitionSpec,
};

use crate::catalog::Catalog;
use crate::commit::{
    self, Added, AppliedInput, AppliedRecord, Base, Change, MetadataChanges, Plan, Planner,
    RecordUpdate, Staged, Standing,
};
use crate::config::DEFAULT_FORMAT_VERSION;
use crate::error::{Error, Position, Rejected, Result};
use crate::files::vocabulary::keys;
use crate::table::LoadedTable;
use crate::write::data::write_data_files;

/// Table property of a rejected-rows table: the table whose rows it holds. Names cannot keep the
/// two kinds apart (a DMS table may be called `t__rejected`), so each side checks the other's
/// mark: rows are only set aside in a table marked for their table, and a DMS table is never
/// fed into a rejected-rows table ([`crate::ops::ingest::check_source`]).
pub const REJECTED_ROWS_OF: &str = "dms2iceberg.rejected-rows-of";

/// Whether `metadata` is a rejected-rows table: marked, or made before the mark existed (no DMS
/// source and exactly the rejected-rows columns).
pub fn is_rejected_rows_table(metadata: &TableMetadata) -> bool {
    let props = metadata.properties();
    if props.contains_key(REJECTED_ROWS_OF) {
        return true;
    }
    let names = |s: &Schema| -> Vec<String> {
        s.as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect()
    };
    !props.contains_key(keys::SOURCE_TABLE)
        && schema().is_ok_and(|s| names(&s) == names(metadata.current_schema()))
}

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

/// Appends `rows` (rejected from the files `inputs`) to the companion table of `main`,
/// unless it already holds those files.
pub fn record<'a>(
    catalog: &'a dyn Catalog,
    main: &'a TableIdent,
    inputs: &'a [AppliedInput],
    rows: &'a [Rejected],
) -> futures::future::BoxFuture<'a, Result<()>> {
    // Boxed: the ingest planner awaits it inside its own (boxed, Send) plan.
    Box::pin(async move {
        if rows.is_empty() {
            return Ok(());
        }
        let ident = rejected_ident(main)?;
        let mut planner = RejectedPlanner {
            catalog,
            main,
            ident: ident.clone(),
            inputs,
            rows,
        };
        commit::run(catalog, &ident, None, &mut planner).await?;
        Ok(())
    })
}

struct RejectedPlanner<'a> {
    catalog: &'a dyn Catalog,
    main: &'a TableIdent,
    ident: TableIdent,
    inputs: &'a [AppliedInput],
    rows: &'a [Rejected],
}

#[async_trait::async_trait]
impl Planner for RejectedPlanner<'_> {
    type Report = ();

    async fn plan(&mut self, table: Option<LoadedTable>) -> Result<Plan<()>> {
        if let Some(t) = &table {
            self.check_ours(&t.metadata)?;
        }
        let record = match &table {
            Some(t) => AppliedRecord::of_table(&t.metadata)?.unwrap_or_default(),
            None => Default::default(),
        };
        if self
            .inputs
            .iter()
            .all(|i| record.classify(&i.order, i.kind, &i.meta) == Standing::Applied)
        {
            return Ok(Plan::Nothing(()));
        }
        let (base, md) = match &table {
            Some(t) => (Base::Existing(t.clone()), t.metadata.clone()),
            None => {
                let md = TableMetadataBuilder::new(
                    schema()?,
                    UnboundPartitionSpec::builder().build(),
                    SortOrder::unsorted_order(),
                    self.catalog.new_table_location(&self.ident).await?,
                    DEFAULT_FORMAT_VERSION,
                    [(REJECTED_ROWS_OF.to_string(), self.main.to_string())].into(),
                )?
                .build()?
                .metadata;
                let md = Arc::new(md);
                (Base::Create(md.clone()), md)
            }
        };
        let batch = rows_batch(&md, self.rows)?;
        let file_io = self.catalog.file_io();
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
            match commit::write_manifests(self.catalog.files(), &md, snapshot_id, &data, &[], None)
                .await
            {
                Ok(m) => m,
                Err(e) => {
                    for (_, f) in &data {
                        let _ = file_io.delete(f.file_path()).await;
                    }
                    return Err(e);
                }
            };
        let mut added = Added::default();
        for (_, f) in &data {
            added.data_files += 1;
            added.records += f.record_count();
            added.data_files_size += f.file_size_in_bytes();
        }
        added.changed_partitions = 1;
        let json =
            |v: Vec<String>| serde_json::to_string(&v).map_err(|e| Error::Internal(e.to_string()));
        let mut summary = BTreeMap::new();
        summary.insert(
            keys::SOURCE_FILES.to_string(),
            json(self.inputs.iter().map(|i| i.key.clone()).collect())?,
        );
        summary.insert(
            keys::SOURCE_ORDERS.to_string(),
            json(self.inputs.iter().map(|i| i.order.to_string()).collect())?,
        );
        let staged = Staged {
            ident: self.ident.clone(),
            base,
            changes: MetadataChanges::default(),
            schema_id: md.current_schema_id(),
            snapshot_id,
            change: Change::Append,
            files: data
                .iter()
                .map(|(_, f)| f.file_path().to_string())
                .chain(manifests.manifests.iter().map(|m| m.manifest_path.clone()))
                .collect(),
            manifests: manifests.manifests,
            held: manifests.held,
            added,
            summary,
            record: Some(RecordUpdate {
                base_record: record,
                inputs: self.inputs.to_vec(),
                reload: false,
                carried: vec![],
                change_seq: None,
                window: crate::config::DEFAULT_WINDOW,
                truncate: None,
            }),
        };
        Ok(Plan::Commit(Box::new(staged), ()))
    }
}

impl RejectedPlanner<'_> {
    /// Rows are only set aside in a table marked for their table.
    fn check_ours(&self, md: &TableMetadata) -> Result<()> {
        let (main, ident) = (self.main, &self.ident);
        let props = md.properties();
        let marked = props.get(REJECTED_ROWS_OF);
        let ours = match marked {
            Some(of) => *of == main.to_string(),
            None => is_rejected_rows_table(md),
        };
        if ours {
            return Ok(());
        }
        Err(Error::Config(format!(
            "the rejected rows of {main} go to {ident}, but {ident} is {}: set `target` under \
             the DMS table that resolves to {ident} to keep them apart",
            match (marked, props.get(keys::SOURCE_TABLE)) {
                (Some(of), _) => format!("the rejected-rows table of {of}"),
                (None, Some(fed)) => format!("fed by DMS table {fed}"),
                (None, None) => "another table".to_string(),
            }
        )))
    }
}

/// The rejected rows as a batch of the companion table's schema.
fn rows_batch(md: &TableMetadata, rows: &[Rejected]) -> Result<RecordBatch> {
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
    Ok(RecordBatch::try_new(
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
    )?)
}
