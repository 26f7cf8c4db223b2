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
use std::collections::BTreeMap;

use crate::error::{Error, InputError, Position, Rejected, Result, VALUE};
use crate::locate::DmsObject;
use crate::types::{arrow_type, iceberg_type_for_arrow};

pub struct ParquetFile {
    label: String,
    data: Input,
    layout: Layout,
    key_len: usize,
    quarantine: bool,
}

/// What the Parquet reader reads: the object itself, or (a gzip'd file) its decompressed copy.
enum Input {
    Data(SourceData),
    /// An unnamed temporary file (unlinked once created): gone when the last handle closes.
    Spooled(std::fs::File),
}

impl Input {
    /// Parquet needs random access, so a gzip'd file (detected by its magic bytes, like CSV) is
    /// decompressed once, within the same size cap, into a temporary file.
    fn new(data: SourceData, label: &str) -> Result<Input> {
        if !data.is_gzip()? {
            return Ok(Input::Data(data));
        }
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "dms2iceberg-gunzip-{}-{}-{}.parquet",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(path.display().to_string(), e))?;
        // Unlinked at once: the open handle keeps it readable, nothing is left behind.
        let _ = std::fs::remove_file(&path);
        let mut reader = data.open(label, super::DEFAULT_MAX_DECOMPRESSED_BYTES)?;
        std::io::copy(&mut reader, &mut file).map_err(|e| {
            InputError::new(
                label,
                format!("cannot decompress the gzip'd Parquet file: {e}"),
            )
        })?;
        Ok(Input::Spooled(file))
    }
}

fn builder(data: &Input, label: &str) -> Result<ParquetRecordBatchReaderBuilder<ParquetSource>> {
    let src = match data {
        Input::Data(SourceData::Path(p)) => ParquetSource::File(
            std::fs::File::open(p).map_err(|e| Error::io(p.display().to_string(), e))?,
        ),
        Input::Data(SourceData::Bytes(b)) => ParquetSource::Bytes(b.clone()),
        Input::Spooled(f) => {
            ParquetSource::File(f.try_clone().map_err(|e| Error::io(label.to_string(), e))?)
        }
    };
    // Types come from the Parquet schema; the embedded Arrow schema hint (`ARROW:schema`) is
    // not needed and a corrupt one must not reach the IPC decoder.
    let options =
        parquet::arrow::arrow_reader::ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    guarded(label, || {
        ParquetRecordBatchReaderBuilder::try_new_with_options(src, options)
    })?
    .map_err(|e| InputError::new(label, format!("not a readable Parquet file: {e}")).into())
}

/// The Parquet crate asserts on some malformed footers instead of returning an error; a file
/// is input, so such a panic becomes an error naming the file.
fn guarded<T>(label: &str, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        InputError::new(label, format!("corrupt Parquet file ({why})")).into()
    })
}

/// Random access to either kind of source, as the Parquet reader needs.
pub(super) enum ParquetSource {
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
        let data = Input::new(data, &label)?;
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
            quarantine: cfg.bad_rows == crate::config::BadRows::Quarantine,
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
        let b = builder(&self.data, &self.label)?.with_batch_size(BATCH_ROWS);
        let reader = guarded(&self.label, || b.build())?
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
            quarantine: self.quarantine,
            // Rows are numbered from 1 in messages, like lines.
            row: 1,
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
    quarantine: bool,
    row: u64,
    done: bool,
}

impl ParquetBatches {
    fn convert(&self, batch: RecordBatch) -> Result<ChangeBatch> {
        let n = batch.num_rows();
        let first_row = self.row;
        // Bad rows by index (policy `quarantine`); with `fail` the first one is returned.
        let mut bad: BTreeMap<usize, InputError> = BTreeMap::new();
        let quarantine = self.quarantine;
        let ops = match self.op_index {
            Some(i) => {
                let col = as_strings(batch.column(i), &self.label, "Op")?;
                let col = col.as_string::<i32>();
                let mut ops = Vec::with_capacity(n);
                for r in 0..n {
                    let v = if col.is_null(r) { "" } else { col.value(r) };
                    match Op::parse(v.as_bytes()) {
                        Some(op) => ops.push(op),
                        None => {
                            let e = InputError::new(
                                &self.label,
                                format!("unknown operation {VALUE} (expected I, U or D)"),
                            )
                            .value(v)
                            .at(Position::Row(first_row + r as u64))
                            .column("Op");
                            if !quarantine {
                                return Err(e.into());
                            }
                            bad.insert(r, e);
                            ops.push(Op::Insert);
                        }
                    }
                }
                ops
            }
            None => vec![Op::Insert; n],
        };
        let mut columns = Vec::with_capacity(self.data_cols.len());
        for ((i, name), t) in self.data_cols.iter().zip(&self.types) {
            let bad = quarantine.then_some(&mut bad);
            columns.push(convert(
                batch.column(*i),
                t,
                &self.label,
                name,
                first_row,
                bad,
            )?);
        }
        let data = RecordBatch::try_new(self.schema.clone(), columns)?;
        let before = match &self.before {
            Some(cols) => {
                let mut arrays = Vec::with_capacity(cols.len());
                for (i, t) in cols.iter().zip(&self.key_types) {
                    let name = batch.schema().field(*i).name().clone();
                    let bad = quarantine.then_some(&mut bad);
                    arrays.push(convert(
                        batch.column(*i),
                        t,
                        &self.label,
                        &name,
                        first_row,
                        bad,
                    )?);
                }
                let fields = arrays
                    .iter()
                    .enumerate()
                    .map(|(i, a)| Field::new(format!("key{i}"), a.data_type().clone(), true))
                    .collect::<Vec<_>>();
                Some(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
            }
            None => None,
        };
        let keep: Option<arrow_array::BooleanArray> =
            (!bad.is_empty()).then(|| (0..n).map(|r| Some(!bad.contains_key(&r))).collect());
        let batch = ChangeBatch {
            data,
            ops,
            positions: (first_row..first_row + n as u64).collect(),
            before,
            rejected: bad
                .into_values()
                .map(|error| Rejected {
                    error,
                    record: None,
                })
                .collect(),
            unsupplied: Vec::new(),
        };
        match keep {
            Some(k) => batch.filter(&k),
            None => Ok(batch),
        }
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
/// `bad`: with the `quarantine` policy, rows whose value does not convert are recorded there
/// (and hold NULL) instead of failing the file. Only text conversions fail per row; a Parquet
/// column whose type cannot be cast fails the file either way.
fn convert(
    a: &ArrayRef,
    t: &PrimitiveType,
    label: &str,
    column: &str,
    first_row: u64,
    mut bad: Option<&mut BTreeMap<usize, InputError>>,
) -> Result<ArrayRef> {
    let target = arrow_type(t)?;
    if a.data_type() == &target {
        return Ok(a.clone());
    }
    if matches!(a.data_type(), DataType::Time32(_) | DataType::Time64(_))
        && matches!(t, PrimitiveType::String | PrimitiveType::Long)
    {
        return time_as(a, t, label, column);
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
            if let Err(e) = b.push(v) {
                let e = e.into_input_error(label);
                set_aside(e, (first_row, r), column, bad.as_deref_mut())?;
                b.push_null();
            }
        }
        return Ok(b.finish());
    }
    if let (PrimitiveType::Decimal { precision, scale }, DataType::Float32 | DataType::Float64) =
        (t, a.data_type())
    {
        // Arrow's cast would round 0.125 to 0.13: the decimal whose nearest float the value is,
        // or the row is refused (as for CSV text).
        let (p, s) = (*precision, *scale);
        let mut b = arrow_array::builder::Decimal128Builder::with_capacity(a.len());
        for r in 0..a.len() {
            if a.is_null(r) {
                b.append_null();
                continue;
            }
            let v = match a.data_type() {
                DataType::Float32 => {
                    let v = a.as_primitive::<arrow_array::types::Float32Type>().value(r);
                    super::text::decimal_of_float(v, p, s).map_err(|e| (e, v.to_string()))
                }
                _ => {
                    let v = a.as_primitive::<arrow_array::types::Float64Type>().value(r);
                    super::text::decimal_of_float(v, p, s).map_err(|e| (e, v.to_string()))
                }
            };
            match v {
                Ok(v) => b.append_value(v),
                Err((reason, value)) => {
                    let e = InputError::new(label, reason).value(value);
                    set_aside(e, (first_row, r), column, bad.as_deref_mut())?;
                    b.append_null();
                }
            }
        }
        let d = b
            .finish()
            .with_precision_and_scale(p as u8, s as i8)
            .map_err(|e| InputError::new(label, format!("decimal({p},{s}): {e}")))?;
        return Ok(Arc::new(d));
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
        // Arrow's message may quote the value: it goes where values go.
        InputError::new(
            label,
            format!("cannot convert {} to {t}: {VALUE}", a.data_type()),
        )
        .value(e.to_string())
        .at(Position::Row(first_row))
        .column(column)
        .into()
    })
}

/// A value of row `r` (of a batch starting at `first_row`) that does not convert: set aside
/// under the `quarantine` policy (`bad`; the caller stores NULL), else the read fails.
fn set_aside(
    e: InputError,
    (first_row, r): (u64, usize),
    column: &str,
    bad: Option<&mut BTreeMap<usize, InputError>>,
) -> Result<()> {
    let e = e.at(Position::Row(first_row + r as u64)).column(column);
    match bad {
        Some(bad) => {
            bad.entry(r).or_insert(e);
            Ok(())
        }
        None => Err(e.into()),
    }
}

/// A DMS `TIME` column stored as `HH:MM:SS.ffffff` text or as microseconds since midnight
/// (the table's `time_type`): every engine reads those; Spark cannot read Iceberg `time`.
fn time_as(a: &ArrayRef, t: &PrimitiveType, label: &str, column: &str) -> Result<ArrayRef> {
    let micros = cast_with_options(
        a,
        &DataType::Time64(arrow_schema::TimeUnit::Microsecond),
        &CastOptions {
            safe: false,
            ..Default::default()
        },
    )
    .and_then(|m| arrow_cast::cast(&m, &DataType::Int64))
    .map_err(|e| {
        InputError::new(
            label,
            format!("cannot read {} as a time of day: {e}", a.data_type()),
        )
        .column(column)
    })?;
    let micros = micros.as_primitive::<arrow_array::types::Int64Type>();
    Ok(match t {
        PrimitiveType::Long => Arc::new(micros.clone()),
        _ => Arc::new(
            micros
                .iter()
                .map(|v| v.map(super::text::format_time))
                .collect::<arrow_array::StringArray>(),
        ),
    })
}

impl Iterator for ParquetBatches {
    type Item = Result<ChangeBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = match guarded(&self.label, || self.reader.next()) {
            Ok(n) => n,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        match next {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::locate::{FileFormat, FileKind, OrderKey};
    use crate::read::SourceFile;
    use arrow_array::types::{Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType};
    use arrow_array::*;
    use arrow_schema::TimeUnit;

    fn parquet_bytes(batch: &RecordBatch) -> bytes::Bytes {
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
        buf.into()
    }

    #[test]
    fn dms_types_are_widened_and_converted() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("Op", DataType::Utf8, true),
            Field::new("ts_col", DataType::Utf8, true),
            Field::new("id", DataType::Int64, false),
            Field::new("small", DataType::UInt16, true),
            Field::new("big", DataType::UInt64, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("amount", DataType::Decimal128(10, 2), true),
            Field::new("tiny", DataType::Int8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["I", "D"])),
                Arc::new(StringArray::from(vec![
                    "2022-03-02 11:30:01.250000",
                    "2022-03-02 11:30:02.000000",
                ])),
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(UInt16Array::from(vec![65535, 0])),
                Arc::new(UInt64Array::from(vec![u64::MAX, 1])),
                Arc::new(TimestampMillisecondArray::from(vec![1_000, 2_500])),
                Arc::new(
                    Decimal128Array::from(vec![1234, -5])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(Int8Array::from(vec![-1, 7])),
            ],
        )
        .unwrap();
        let mut cfg = Config::default().table("s", "t").unwrap();
        cfg.primary_key = Some(vec!["id".into()]);
        cfg.commit_timestamp_column = Some("ts_col".into());
        let obj = DmsObject {
            key: "s/t/LOAD00000001.parquet".into(),
            schema: "s".into(),
            table: "t".into(),
            kind: FileKind::Cdc,
            format: FileFormat::Parquet,
            order: OrderKey::parse("1/x").unwrap(),
            transaction: false,
        };
        let src =
            SourceFile::open(&obj, SourceData::Bytes(parquet_bytes(&batch)), &cfg, None).unwrap();
        let cols = src.columns();
        let declared: Vec<PrimitiveType> =
            cols.iter().map(|c| c.declared.clone().unwrap()).collect();
        assert_eq!(
            declared,
            vec![
                PrimitiveType::Timestamp,
                PrimitiveType::Long,
                PrimitiveType::Int,
                PrimitiveType::Decimal {
                    precision: 20,
                    scale: 0
                },
                PrimitiveType::Timestamp,
                PrimitiveType::Decimal {
                    precision: 10,
                    scale: 2
                },
                PrimitiveType::Int,
            ]
        );
        // Read `tiny` as long (a promoted table column) and `amount` as decimal(12,2).
        let mut types = declared.clone();
        types[6] = PrimitiveType::Long;
        types[5] = PrimitiveType::Decimal {
            precision: 12,
            scale: 2,
        };
        let b: Vec<_> = src
            .read(types, vec![PrimitiveType::Long])
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        let b = &b[0];
        assert_eq!(b.ops, vec![Op::Insert, Op::Delete]);
        assert_eq!(b.positions, vec![1, 2]);
        let d = &b.data;
        assert_eq!(
            d.column(0)
                .as_primitive::<TimestampMicrosecondType>()
                .value(0),
            1_646_220_601_250_000
        );
        assert_eq!(d.column(2).as_primitive::<Int32Type>().value(0), 65535);
        assert_eq!(
            d.column(3).as_primitive::<Decimal128Type>().value(0),
            u64::MAX as i128
        );
        assert_eq!(
            d.column(4)
                .as_primitive::<TimestampMicrosecondType>()
                .value(1),
            2_500_000
        );
        assert_eq!(d.column(5).as_primitive::<Decimal128Type>().value(1), -5);
        assert_eq!(d.column(6).as_primitive::<Int64Type>().value(0), -1);
    }

    /// DMS doubles read into a pinned decimal: the decimal whose nearest double each is
    /// (0.99, stored as 0.98999…), a value no decimal at that scale is (0.125) refused naming
    /// its row and column; floats by their own width.
    #[test]
    fn doubles_into_decimals_take_the_decimal_of_their_double() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("Op", DataType::Utf8, true),
            Field::new("id", DataType::Int64, false),
            Field::new("price", DataType::Float64, true),
            Field::new("rate", DataType::Float32, true),
        ]));
        let batch = |prices: Vec<Option<f64>>| {
            let n = prices.len();
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(vec!["I"; n])),
                    Arc::new(Int64Array::from((1..=n as i64).collect::<Vec<_>>())),
                    Arc::new(Float64Array::from(prices)),
                    Arc::new(Float32Array::from(vec![Some(0.99f32); n])),
                ],
            )
            .unwrap()
        };
        let mut cfg = Config::default().table("s", "t").unwrap();
        cfg.primary_key = Some(vec!["id".into()]);
        let obj = DmsObject {
            key: "s/t/20220302-1134010000.parquet".into(),
            schema: "s".into(),
            table: "t".into(),
            kind: FileKind::Cdc,
            format: FileFormat::Parquet,
            order: OrderKey::parse("1/x").unwrap(),
            transaction: false,
        };
        let dec = PrimitiveType::Decimal {
            precision: 10,
            scale: 2,
        };
        let read = |prices| {
            let src = SourceFile::open(
                &obj,
                SourceData::Bytes(parquet_bytes(&batch(prices))),
                &cfg,
                None,
            )
            .unwrap();
            let types = vec![PrimitiveType::Long, dec.clone(), dec.clone()];
            src.read(types, vec![PrimitiveType::Long])
                .unwrap()
                .collect::<Result<Vec<_>>>()
        };
        let b = read(vec![Some(0.99), Some(19.99), None, Some(-0.07)]).unwrap();
        let price = b[0].data.column(1).as_primitive::<Decimal128Type>();
        assert_eq!(
            price.iter().collect::<Vec<_>>(),
            vec![Some(99), Some(1999), None, Some(-7)]
        );
        let rate = b[0].data.column(2).as_primitive::<Decimal128Type>();
        assert_eq!(rate.value(0), 99);
        let e = read(vec![Some(0.5), Some(0.125)]).unwrap_err().to_string();
        assert!(
            e.contains("price") && e.contains("row 2") && e.contains("more than 2 decimal places"),
            "{e}"
        );
    }

    #[test]
    fn truncated_file_is_an_input_error() {
        let mut cfg = Config::default().table("s", "t").unwrap();
        cfg.primary_key = Some(vec!["id".into()]);
        let obj = DmsObject {
            key: "s/t/x.parquet".into(),
            schema: "s".into(),
            table: "t".into(),
            kind: FileKind::Load,
            format: FileFormat::Parquet,
            order: OrderKey::parse("0/x").unwrap(),
            transaction: false,
        };
        let e = SourceFile::open(
            &obj,
            SourceData::Bytes(bytes::Bytes::from_static(b"PAR1garbage")),
            &cfg,
            None,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("x.parquet") && e.contains("Parquet"), "{e}");
    }
}
