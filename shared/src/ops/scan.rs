//! scan: read a table as of now, a snapshot, or a point in time, sorted by primary key.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ord::sort::{SortColumn, lexsort_to_indices};
use arrow_schema::SchemaRef;
use futures::TryStreamExt;
use iceberg::TableIdent;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::table::LoadedTable;

pub struct Scan<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    snapshot_id: Option<i64>,
    as_of_ms: Option<i64>,
    limit: Option<usize>,
}

pub struct ScanResult {
    pub schema: SchemaRef,
    pub batch: RecordBatch,
    pub snapshot_id: Option<i64>,
}

impl<'a> Scan<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Scan {
            catalog,
            ident,
            snapshot_id: None,
            as_of_ms: None,
            limit: None,
        }
    }
    pub fn snapshot_id(mut self, id: Option<i64>) -> Self {
        self.snapshot_id = id;
        self
    }
    /// The table as it was at this time (epoch milliseconds).
    pub fn as_of_ms(mut self, t: Option<i64>) -> Self {
        self.as_of_ms = t;
        self
    }
    pub fn limit(mut self, n: Option<usize>) -> Self {
        self.limit = n;
        self
    }

    pub async fn execute(self) -> Result<ScanResult> {
        let t = LoadedTable::load(self.catalog, &self.ident)
            .await?
            .ok_or_else(|| Error::Other(format!("table {} does not exist", self.ident)))?;
        let md = &t.metadata;
        let snapshot_id = match (self.snapshot_id, self.as_of_ms) {
            (Some(id), _) => {
                md.snapshot_by_id(id).ok_or_else(|| {
                    Error::Other(format!("table {} has no snapshot {id}", self.ident))
                })?;
                Some(id)
            }
            (None, Some(ts)) => Some(
                md.history()
                    .iter()
                    .filter(|l| l.timestamp_ms <= ts)
                    .max_by_key(|l| l.timestamp_ms)
                    .map(|l| l.snapshot_id)
                    .ok_or_else(|| {
                        Error::Other(format!(
                            "table {} had no snapshot at or before that time",
                            self.ident
                        ))
                    })?,
            ),
            (None, None) => md.current_snapshot_id(),
        };
        let schema = match snapshot_id.and_then(|id| md.snapshot_by_id(id)) {
            Some(s) => s.schema(md)?,
            None => md.current_schema().clone(),
        };
        let arrow_schema: SchemaRef = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
        let batches: Vec<RecordBatch> = match snapshot_id {
            None => vec![],
            Some(id) => {
                let table = t.table(self.catalog.file_io())?;
                let stream = table
                    .scan()
                    .snapshot_id(id)
                    .select_all()
                    .build()?
                    .to_arrow()
                    .await?;
                stream.try_collect().await?
            }
        };
        let out_schema = batches.first().map(|b| b.schema()).unwrap_or(arrow_schema);
        let all = arrow_select::concat::concat_batches(&out_schema, &batches)?;
        let key: Vec<usize> = schema
            .identifier_field_ids()
            .filter_map(|id| schema.name_by_field_id(id))
            .filter_map(|n| out_schema.index_of(n).ok())
            .collect();
        let sorted = if key.is_empty() || all.num_rows() == 0 {
            all
        } else {
            let cols: Vec<SortColumn> = key
                .iter()
                .map(|&i| SortColumn {
                    values: all.column(i).clone(),
                    options: None,
                })
                .collect();
            let idx = lexsort_to_indices(&cols, self.limit)?;
            arrow_select::take::take_record_batch(&all, &idx)?
        };
        let batch = match self.limit {
            Some(n) if n < sorted.num_rows() => sorted.slice(0, n),
            _ => sorted,
        };
        Ok(ScanResult {
            schema: out_schema,
            batch,
            snapshot_id,
        })
    }
}
