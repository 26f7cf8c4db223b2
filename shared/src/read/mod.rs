//! read: one DMS file → a stream of [`ChangeBatch`]es (Arrow columns typed for the table, plus
//! the `Op` of each row, its position in the file, and before-image key values).
//!
//! Memory is bounded by the batch size: files are streamed, never loaded whole (gzip is
//! decompressed on the fly, Parquet is read a row group at a time).

mod csv;
mod layout;
mod parquet;
pub(crate) mod text;
pub mod transaction;

use std::io::Read;
use std::path::PathBuf;

use arrow_array::RecordBatch;
use bytes::Bytes;
use iceberg::spec::PrimitiveType;

pub use self::csv::{CsvFile, Observe, Observed};
pub use self::layout::{Layout, Role};
pub use self::parquet::ParquetFile;
use crate::config::TableConfig;
use crate::error::{Error, InputError, Position, Result};
use crate::locate::{DmsObject, FileFormat, ObjectMeta};

/// Most data columns a file (and a table) may have. Writing a Parquet file costs about 170 KB of
/// fixed memory per column (a compression context and a dictionary table each) whatever the
/// rows: 4096 columns (MySQL's limit; Oracle, PostgreSQL and SQL Server allow fewer without
/// sparse columns) stay near 200 MB, and a file of 100,000 tiny columns is refused at once
/// instead of taking gigabytes and minutes.
pub const MAX_COLUMNS: usize = 4096;

/// Rows per batch: small enough to bound memory, large enough to amortise per-batch work.
pub const BATCH_ROWS: usize = 8192;

/// The first bytes of a gzip stream.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Cap on the decompressed size of a gzip file (a gzip bomb fails instead of filling memory or
/// disk); DMS files are at most 1 GB uncompressed by default (`MaxFileSize`).
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: u64 = 8 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    Insert = b'I',
    Update = b'U',
    Delete = b'D',
}

impl Op {
    pub fn parse(s: &[u8]) -> Option<Op> {
        match s {
            b"I" | b"i" => Some(Op::Insert),
            b"U" | b"u" => Some(Op::Update),
            b"D" | b"d" => Some(Op::Delete),
            _ => None,
        }
    }
}

/// Decoded rows of one file, in file order.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    /// Data columns in file order, named as the table names them, in the Arrow type of the
    /// column's Iceberg type (see [`crate::types::arrow_type`]).
    pub data: RecordBatch,
    pub ops: Vec<Op>,
    /// CSV: the line each record starts on; Parquet: the row number (from 1).
    pub positions: Vec<u64>,
    /// `BI_<key>` values, one column per key column (named like the key column), when the file
    /// has before-image columns for every key column.
    pub before: Option<RecordBatch>,
    /// Rows set aside (bad-row policy `quarantine`); they are not in `data`.
    pub rejected: Vec<crate::error::Rejected>,
    /// Cells of updates the source did not supply (the `no_sup_value` marker), as (row, column
    /// index in `data`), in row order: NULL in `data`, they keep the row's current value.
    pub unsupplied: Vec<(usize, usize)>,
}

impl ChangeBatch {
    /// Keeps the rows where `keep` is true.
    pub fn filter(self, keep: &arrow_array::BooleanArray) -> Result<ChangeBatch> {
        let data = arrow_select::filter::filter_record_batch(&self.data, keep)?;
        let before = match &self.before {
            Some(b) => Some(arrow_select::filter::filter_record_batch(b, keep)?),
            None => None,
        };
        let mask: Vec<bool> = keep.iter().map(|k| k.unwrap_or(false)).collect();
        fn pick<T>(v: Vec<T>, mask: &[bool]) -> Vec<T> {
            v.into_iter()
                .zip(mask)
                .filter(|(_, k)| **k)
                .map(|(x, _)| x)
                .collect()
        }
        // Rows kept before each row: its new number.
        let mut renumber = Vec::with_capacity(mask.len());
        let mut kept = 0;
        for k in &mask {
            renumber.push(kept);
            kept += *k as usize;
        }
        let unsupplied = self
            .unsupplied
            .iter()
            .filter(|(r, _)| mask[*r])
            .map(|(r, c)| (renumber[*r], *c))
            .collect();
        Ok(ChangeBatch {
            data,
            ops: pick(self.ops, &mask),
            positions: pick(self.positions, &mask),
            before,
            rejected: self.rejected,
            unsupplied,
        })
    }
}

/// Digests of an object's stored bytes ([`SourceData::digest`]).
#[derive(Debug, Clone)]
pub struct Digests {
    pub md5: Option<String>,
    /// XXH3-128, hex.
    pub xxh3: String,
    pub size: u64,
}

impl Digests {
    /// Into what is known of the object's content.
    pub fn record_in(self, meta: &mut ObjectMeta) {
        if self.md5.is_some() {
            meta.md5 = self.md5;
        }
        meta.xxh3 = Some(self.xxh3);
        meta.size.get_or_insert(self.size);
    }
}

/// Bytes of one object: a local file or a buffer (downloaded object).
#[derive(Debug, Clone)]
pub enum SourceData {
    Path(PathBuf),
    Bytes(Bytes),
}

impl SourceData {
    /// Size in bytes; a path that is not a regular file (FIFO, socket, device, folder, dangling
    /// link) is an input error naming it, found before anything opens it (a FIFO would block).
    pub fn len(&self) -> Result<u64> {
        match self {
            SourceData::Path(p) => {
                let label = p.display().to_string();
                match std::fs::metadata(p) {
                    Ok(m) if m.is_file() => Ok(m.len()),
                    Ok(_) => Err(InputError::new(
                        label,
                        "not a regular file (a FIFO, socket, device or folder): it cannot be read as a DMS file",
                    )
                    .into()),
                    Err(e)
                        if e.kind() == std::io::ErrorKind::NotFound
                            && std::fs::symlink_metadata(p).is_ok() =>
                    {
                        Err(InputError::new(label, "a symbolic link to a file that does not exist").into())
                    }
                    Err(e) => Err(Error::io(label, e)),
                }
            }
            SourceData::Bytes(b) => Ok(b.len() as u64),
        }
    }

    /// Whether both hold the same bytes (two copies of one DMS file).
    pub fn same_content(&self, other: &SourceData) -> Result<bool> {
        if self.len()? != other.len()? {
            return Ok(false);
        }
        let (mut a, mut b) = (self.open_raw()?, other.open_raw()?);
        let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
        loop {
            let n = read_full(&mut a, &mut x).map_err(|e| Error::io(self.label(), e))?;
            let m = read_full(&mut b, &mut y).map_err(|e| Error::io(other.label(), e))?;
            if n != m || x[..n] != y[..m] {
                return Ok(false);
            }
            if n == 0 {
                return Ok(true);
            }
        }
    }

    fn label(&self) -> String {
        match self {
            SourceData::Path(p) => p.display().to_string(),
            SourceData::Bytes(_) => "(downloaded object)".into(),
        }
    }

    /// The bytes (gunzipped) held in memory, if they are at most `max` bytes (and, gzipped, at
    /// most `max_gzipped` as stored: one likely to exceed `max` once decompressed would be
    /// decompressed twice) and readable; a file that is not is left to a streaming read, which
    /// reports what is wrong with it.
    pub fn in_memory(&self, max: u64, max_gzipped: u64) -> Option<Bytes> {
        let (gzip, len) = (self.is_gzip().ok()?, self.len().ok()?);
        if len > if gzip { max_gzipped } else { max } {
            return None;
        }
        match self {
            SourceData::Bytes(b) if !gzip => Some(b.clone()),
            SourceData::Path(p) if !gzip => std::fs::read(p).ok().map(Bytes::from),
            _ => {
                // Text compresses about tenfold: room for that, at most `max`.
                let room = len.saturating_mul(10).min(max + 1);
                let mut held = Vec::with_capacity(usize::try_from(room).ok()?);
                self.open(&self.label(), max)
                    .ok()?
                    .take(max + 1)
                    .read_to_end(&mut held)
                    .ok()?;
                (held.len() as u64 <= max).then(|| Bytes::from(held))
            }
        }
    }

    /// Whether the data starts with the gzip magic bytes.
    pub fn is_gzip(&self) -> Result<bool> {
        let mut head = [0u8; 2];
        let n =
            read_full(&mut self.open_raw()?, &mut head).map_err(|e| Error::io(self.label(), e))?;
        Ok(n == 2 && head == GZIP_MAGIC)
    }

    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Digests of the stored bytes (as stored: not gunzipped) and their length: XXH3-128
    /// always, MD5 when `md5` (comparing with a record that kept only an MD5).
    pub fn digest(&self, label: &str, md5: bool) -> Result<Digests> {
        use md5::Digest;
        let mut r = self.open_raw()?;
        let mut m = md5.then(md5::Md5::new);
        let mut x = xxhash_rust::xxh3::Xxh3::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        loop {
            let k = r.read(&mut buf).map_err(|e| Error::io(label, e))?;
            if k == 0 {
                break;
            }
            x.update(&buf[..k]);
            if let Some(m) = m.as_mut() {
                m.update(&buf[..k]);
            }
            n += k as u64;
        }
        Ok(Digests {
            md5: m.map(|m| m.finalize().iter().map(|b| format!("{b:02x}")).collect()),
            xxh3: format!("{:032x}", x.digest128()),
            size: n,
        })
    }

    fn open_raw(&self) -> Result<Box<dyn Read + Send>> {
        match self {
            SourceData::Path(p) => Ok(Box::new(std::io::BufReader::with_capacity(1 << 16, {
                self.len()?;
                std::fs::File::open(p).map_err(|e| Error::io(p.display().to_string(), e))?
            }))),
            SourceData::Bytes(b) => Ok(Box::new(std::io::Cursor::new(b.clone()))),
        }
    }

    /// Opens for streaming, transparently gunzipping (detected by magic bytes, not by name).
    pub fn open(&self, label: &str, max_decompressed: u64) -> Result<Box<dyn Read + Send>> {
        let mut raw = self.open_raw()?;
        let mut magic = [0u8; 2];
        let mut got = 0;
        while got < 2 {
            let n = raw
                .read(&mut magic[got..])
                .map_err(|e| Error::io(label.to_string(), e))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let head = std::io::Cursor::new(magic[..got].to_vec());
        let chained = head.chain(raw);
        if got == 2 && magic == GZIP_MAGIC {
            Ok(Box::new(CappedReader {
                inner: flate2::read::MultiGzDecoder::new(chained),
                left: max_decompressed,
                limit: max_decompressed,
                label: label.to_string(),
            }))
        } else {
            Ok(Box::new(chained))
        }
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Fails (instead of silently truncating) once more than `left` bytes have been read.
struct CappedReader<R> {
    inner: R,
    left: u64,
    limit: u64,
    label: String,
}

impl<R: Read> Read for CappedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            return Err(std::io::Error::other(format!(
                "{}: decompressed size exceeds the limit of {} bytes",
                self.label, self.limit
            )));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A column of the file that becomes a table column.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceColumn {
    /// Name as the table names it.
    pub name: String,
    /// Type the file itself declares (Parquet), or the config declares (CSV); `None`: CSV text
    /// whose type comes from the table or from inference.
    pub declared: Option<PrimitiveType>,
}

/// An opened DMS file whose layout is known and whose rows can be streamed.
pub enum SourceFile {
    Csv(Box<CsvFile>),
    Parquet(Box<ParquetFile>),
}

impl SourceFile {
    /// Opens `obj` and works out its layout (header, Op column, before-image columns, matched
    /// to the key in `cfg`). `table_columns`: names the table already has, which headerless CSV
    /// may fall back to.
    pub fn open(
        obj: &DmsObject,
        data: SourceData,
        cfg: &TableConfig,
        table_columns: Option<&[String]>,
    ) -> Result<SourceFile> {
        if data.is_empty()? {
            return Err(InputError::new(&obj.key, "the file is empty (0 bytes)").into());
        }
        // A CDC_TXN file: this table's rows, read as a headerless change file of its own.
        let transaction_cfg;
        let (data, cfg) = if obj.transaction {
            let rows =
                transaction::rows_of(&data, &obj.key, &cfg.cdc_delimiter, &obj.schema, &obj.table)?;
            transaction_cfg = TableConfig {
                header: Some(false),
                delimiter: cfg.cdc_delimiter.clone(),
                ..cfg.clone()
            };
            (SourceData::Bytes(rows.into()), &transaction_cfg)
        } else {
            (data, cfg)
        };
        let file = match obj.format {
            FileFormat::Csv => {
                SourceFile::Csv(Box::new(CsvFile::open(obj, data, cfg, table_columns)?))
            }
            FileFormat::Parquet => {
                SourceFile::Parquet(Box::new(ParquetFile::open(obj, data, cfg)?))
            }
        };
        let columns = file.columns().len();
        if columns == 0 {
            return Err(InputError::new(
                &obj.key,
                "the file has no data columns (only Op, before-images or dropped columns)",
            )
            .into());
        }
        if columns > MAX_COLUMNS {
            return Err(InputError::new(
                &obj.key,
                format!(
                    "the file has {columns} data columns; at most {MAX_COLUMNS} are supported \
                     (each costs fixed memory when the table's files are written; drop_columns \
                     leaves columns out)"
                ),
            )
            .into());
        }
        if let Some(dup) = file.layout().duplicate_column() {
            let mut e = InputError::new(&obj.key, "the column appears twice").column(dup);
            if let SourceFile::Csv(c) = &file
                && let Some(line) = c.header_line()
            {
                e = e.at(Position::Line(line));
            }
            return Err(e.into());
        }
        Ok(file)
    }

    pub fn layout(&self) -> &Layout {
        match self {
            SourceFile::Csv(c) => c.layout(),
            SourceFile::Parquet(p) => p.layout(),
        }
    }

    /// The table columns this file carries, in file order.
    pub fn columns(&self) -> Vec<SourceColumn> {
        self.layout().data_columns()
    }

    /// CSV: infers the types of `names` from the whole file (one streaming pass).
    pub fn infer_types(&self, names: &[String]) -> Result<Vec<PrimitiveType>> {
        match self {
            SourceFile::Csv(c) => c.infer_types(names),
            SourceFile::Parquet(p) => Err(Error::Internal(format!(
                "{}: Parquet columns have declared types",
                p.label()
            ))),
        }
    }

    /// Lets a CSV input be held in memory and parsed on several threads (see
    /// `CsvFile::allow_split`).
    pub fn allow_split(&mut self) {
        if let SourceFile::Csv(c) = self {
            c.allow_split();
        }
    }

    /// Observes the values of some columns while reading (CSV; a Parquet file is typed).
    pub fn observe(&mut self, o: Observe) {
        if let SourceFile::Csv(c) = self {
            c.observe(o);
        }
    }

    /// Streams the rows, each data column converted to `types[i]` (one per [`Self::columns`]),
    /// before-image key columns to `key_types` (one per key column).
    pub fn read(
        self,
        types: Vec<PrimitiveType>,
        key_types: Vec<PrimitiveType>,
    ) -> Result<Box<dyn Iterator<Item = Result<ChangeBatch>> + Send>> {
        match self {
            SourceFile::Csv(c) => c.read(types, key_types),
            SourceFile::Parquet(p) => p.read(types, key_types),
        }
    }
}

/// Position of a row for messages.
pub fn position(kind: FileFormat, p: u64) -> Position {
    match kind {
        FileFormat::Csv => Position::Line(p),
        FileFormat::Parquet => Position::Row(p),
    }
}
