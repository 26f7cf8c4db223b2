//! Parquet as DMS writes it (`DataFormat=parquet`): `Op` as a STRING column, INT8–64 and
//! UINT8–64, DECIMAL, DATE, TIME, TIMESTAMP in ms or µs, STRING, BINARY, BOOL, any codec.
//! Read a row group at a time; every column is cast to its table type.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use iceberg::spec::PrimitiveType;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::file::reader::{ChunkReader, Length};

use super::layout::{Layout, Role};
use super::text::ColumnBuilder;
use super::{BATCH_ROWS, ChangeBatch, Op, SourceData};
use crate::config::TableConfig;
use crate::error::{Error, InputError, Position, Result};
use crate::locate::DmsObject;
use crate::types::{arrow_type, iceberg_type_for_arrow};

pub struct ParquetFile {
    label: String,
    data: SourceData,
    layout: Layout,
    key_len: usize,
}

fn builder(
    data: &SourceData,
    label: &str,
) -> Result<ParquetRecordBatchReaderBuilder<ParquetSource>> {
    let src = match data {
        SourceData::Path(p) => ParquetSource::File(
            std::fs::File::open(p).map_err(|e| Error::io(p.display().to_string(), e))?,
        ),
        SourceData::Bytes(b) => ParquetSource::Bytes(b.clone()),
    };
    ParquetRecordBatchReaderBuilder::try_new(src)
        .map_err(|e| InputError::new(label, format!("not a readable Parquet file: {e}")).into())
}

/// Random access to either kind of source, as the Parquet reader needs.
pub enum ParquetSource {
    File(std::fs::File),
    Bytes(bytes::Bytes),
}

impl Length for ParquetSource {
    fn len(&self) -> u64 {
        match self {
            ParquetSource::File(f) => f.len(),
            ParquetSource::Bytes(b) => b.len() as u64,
        }
    }
}

impl ChunkReader for ParquetSource {
    type T = Box<dyn std::io::Read + Send>;
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(match self {
            ParquetSource::File(f) => Box::new(f.get_read(start)?),
            ParquetSource::Bytes(b) => Box::new(b.get_read(start)?),
        })
    }
    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        match self {
            ParquetSource::File(f) => f.get_bytes(start, length),
            ParquetSource::Bytes(b) => b.get_bytes(start, length),
        }
    }
}

impl ParquetFile {
    pub fn open(obj: &DmsObject, data: SourceData, cfg: &TableConfig) -> Result<ParquetFile> {
        let label = obj.key.clone();
        let b = builder(&data, &label)?;
        let schema = b.schema().clone();
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let mut declared = Vec::with_capacity(names.len());
        for f in schema.fields() {
            let n = cfg.column_name(f.name());
            let t = if Some(&n) == cfg.commit_timestamp_column.as_ref() && is_text(f.data_type()) {
                // DMS writes the commit-timestamp column as text even in Parquet.
                Some(PrimitiveType::Timestamp)
            } else {
                iceberg_type_for_arrow(f.data_type())
            };
            if t.is_none() && !f.name().eq_ignore_ascii_case("op") {
                return Err(InputError::new(
                    &label,
                    format!("Parquet type {} is not supported", f.data_type()),
                )
                .column(f.name())
                .into());
            }
            declared.push(t);
        }
        let layout = Layout::classify(&names, &declared, cfg);
        Ok(ParquetFile {
            label,
            data,
            layout,
            key_len: cfg.primary_key.as_ref().map_or(0, |k| k.len()),
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn read(
        self,
        types: Vec<PrimitiveType>,
        key_types: Vec<PrimitiveType>,
    ) -> Result<Box<dyn Iterator<Item = Result<ChangeBatch>> + Send>> {
        let reader = builder(&self.data, &self.label)?
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| InputError::new(&self.label, e.to_string()))?;
        let data_cols: Vec<(usize, String)> = self
            .layout
            .roles
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Role::Data(c) => Some((i, c.name.clone())),
                _ => None,
            })
            .collect();
        let schema = Arc::new(Schema::new(
            data_cols
                .iter()
                .zip(&types)
                .map(|((_, n), t)| Ok(Field::new(n, arrow_type(t)?, true)))
                .collect::<Result<Vec<_>>>()?,
        ));
        let before = self
            .layout
            .before_image_columns(self.key_len)
            .filter(|_| key_types.len() == self.key_len);
        Ok(Box::new(ParquetBatches {
            reader,
            label: self.label,
            op_index: self.layout.roles.iter().position(|r| *r == Role::Op),
            data_cols,
            types,
            schema,
            before,
            key_types,
            row: 0,
            done: false,
        }))
    }
}

fn is_text(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, v) => is_text(v),
        _ => false,
    }
}

struct ParquetBatches {
    reader: ParquetRecordBatchReader,
    label: String,
    op_index: Option<usize>,
    data_cols: Vec<(usize, String)>,
    types: Vec<PrimitiveType>,
    schema: SchemaRef,
    before: Option<Vec<usize>>,
    key_types: Vec<PrimitiveType>,
    row: u64,
    done: bool,
}

impl ParquetBatches {
    fn convert(&self, batch: RecordBatch) -> Result<ChangeBatch> {
        let n = batch.num_rows();
        let first_row = self.row;
        let ops = match self.op_index {
            Some(i) => {
                let col = as_strings(batch.column(i), &self.label, "Op")?;
                let col = col.as_string::<i32>();
                (0..n)
                    .map(|r| {
                        let v = if col.is_null(r) { "" } else { col.value(r) };
                        Op::parse(v.as_bytes()).ok_or_else(|| {
                            InputError::new(
                                &self.label,
                                format!("unknown operation `{v}` (expected I, U or D)"),
                            )
                            .at(Position::Row(first_row + r as u64))
                            .column("Op")
                            .into()
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            None => vec![Op::Insert; n],
        };
        let columns = self
            .data_cols
            .iter()
            .zip(&self.types)
            .map(|((i, name), t)| convert(batch.column(*i), t, &self.label, name, first_row))
            .collect::<Result<Vec<_>>>()?;
        let data = RecordBatch::try_new(self.schema.clone(), columns)?;
        let before = match &self.before {
            Some(cols) => {
                let arrays = cols
                    .iter()
                    .zip(&self.key_types)
                    .map(|(i, t)| {
                        let name = batch.schema().field(*i).name().clone();
                        convert(batch.column(*i), t, &self.label, &name, first_row)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let fields = arrays
                    .iter()
                    .enumerate()
                    .map(|(i, a)| Field::new(format!("key{i}"), a.data_type().clone(), true))
                    .collect::<Vec<_>>();
                Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
            }
            None => None,
        };
        Ok(ChangeBatch {
            data,
            ops,
            positions: (first_row..first_row + n as u64).collect(),
            before,
        })
    }
}

fn as_strings(a: &ArrayRef, label: &str, column: &str) -> Result<ArrayRef> {
    cast_with_options(
        a,
        &DataType::Utf8,
        &CastOptions {
            safe: false,
            ..Default::default()
        },
    )
    .map_err(|e| {
        InputError::new(label, format!("expected a string column: {e}"))
            .column(column)
            .into()
    })
}

/// Casts a source column to the Arrow type of its table type, refusing lossy casts.
fn convert(
    a: &ArrayRef,
    t: &PrimitiveType,
    label: &str,
    column: &str,
    first_row: u64,
) -> Result<ArrayRef> {
    let target = arrow_type(t)?;
    if a.data_type() == &target {
        return Ok(a.clone());
    }
    if matches!(
        t,
        PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::Date
            | PrimitiveType::Time
    ) && is_text(a.data_type())
    {
        // DMS's commit-timestamp column: text in `yyyy-MM-dd HH:mm:ss.SSSSSS`.
        let s = as_strings(a, label, column)?;
        let s = s.as_string::<i32>();
        let mut b = ColumnBuilder::new(t, s.len()).map_err(|e| InputError::new(label, e))?;
        for r in 0..s.len() {
            let v = (!s.is_null(r) && !s.value(r).is_empty()).then(|| s.value(r).as_bytes());
            b.push(v).map_err(|e| {
                Error::from(
                    InputError::new(label, e)
                        .at(Position::Row(first_row + r as u64))
                        .column(column),
                )
            })?;
        }
        return Ok(b.finish());
    }
    cast_with_options(
        a,
        &target,
        &CastOptions {
            safe: false,
            ..Default::default()
        },
    )
    .map_err(|e| {
        InputError::new(
            label,
            format!("cannot convert {} to {t}: {e}", a.data_type()),
        )
        .at(Position::Row(first_row))
        .column(column)
        .into()
    })
}

impl Iterator for ParquetBatches {
    type Item = Result<ChangeBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.reader.next() {
            None => {
                self.done = true;
                None
            }
            Some(Err(e)) => {
                self.done = true;
                Some(Err(InputError::new(
                    &self.label,
                    format!("cannot read Parquet data: {e}"),
                )
                .at(Position::Row(self.row))
                .into()))
            }
            Some(Ok(batch)) => {
                let n = batch.num_rows() as u64;
                let r = self.convert(batch);
                self.row += n;
                if r.is_err() {
                    self.done = true;
                }
                Some(r)
            }
        }
    }
}
