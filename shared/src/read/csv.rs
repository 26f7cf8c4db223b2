//! CSV as DMS writes it: RFC 4180 quoting (delimiters, doubled quotes and newlines inside
//! quotes), configurable delimiter and NULL token, with or without a header (`AddColumnName`),
//! with or without an `Op` column (`IncludeOpForFullLoad`, `CdcInsertsOnly`).

use std::io::Read;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema};
use iceberg::spec::PrimitiveType;

use super::layout::{Layout, Role};
use super::text::{ColumnBuilder, TypeGuess};
use super::{BATCH_ROWS, ChangeBatch, DEFAULT_MAX_DECOMPRESSED_BYTES, Op, SourceData};
use crate::config::TableConfig;
use crate::error::{Error, InputError, Position, Rejected, Result, VALUE};
use crate::locate::DmsObject;
use crate::types::arrow_type;

pub struct CsvFile {
    label: String,
    data: SourceData,
    delimiter: Vec<u8>,
    null_value: Vec<u8>,
    layout: Layout,
    /// Whether the first record is a header to skip.
    has_header: bool,
    /// The line the header is on.
    header_line: u64,
    /// Fields every record must have.
    fields: usize,
    quarantine: bool,
    key_len: usize,
    /// The DMS `schema.table` (names the config section in messages).
    source: String,
}

type Reader = csv::Reader<Box<dyn Read + Send>>;

impl CsvFile {
    pub fn open(
        obj: &DmsObject,
        data: SourceData,
        cfg: &TableConfig,
        table_columns: Option<&[String]>,
    ) -> Result<CsvFile> {
        let label = obj.key.clone();
        let (mut reader, lines) = reader(&data, &label, &cfg.delimiter)?;
        let mut first = csv::ByteRecord::new();
        let got = reader
            .read_byte_record(&mut first)
            .map_err(|e| csv_error(&label, e))?;
        if !got {
            return Err(InputError::new(&label, "the file has no records").into());
        }
        let first_fields: Vec<String> = first
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        let configured: Option<Vec<String>> = cfg
            .columns
            .as_ref()
            .map(|c| c.iter().map(|(n, _)| n.clone()).collect());
        let declared_for = |names: &[String]| -> Vec<Option<PrimitiveType>> {
            names
                .iter()
                .map(|n| {
                    let n = cfg.column_name(n);
                    cfg.columns.as_ref().and_then(|cols| {
                        cols.iter()
                            .find(|(c, _)| cfg.column_name(c) == n)
                            .and_then(|(_, t)| t.clone())
                    })
                })
                .collect()
        };
        // A column list a headerless file could be read with: the configured one if it names
        // every field, else the table's. A shorter `columns` list only pins types.
        // A headerless change file always starts with its Op (DMS writes it whenever rows can
        // be updates or deletes): an extra leading field there is the Op even when it is not a
        // valid one, so that the row fails on its Op rather than on a field count.
        let op_first =
            first.get(0).and_then(Op::parse).is_some() || obj.kind == crate::locate::FileKind::Cdc;
        let fits = |names: &[String]| {
            names.len() == first_fields.len() || (op_first && names.len() + 1 == first_fields.len())
        };
        let table_names: Option<Vec<String>> = table_columns.map(<[String]>::to_vec);
        let headerless: Option<Vec<String>> = configured
            .clone()
            .filter(|c| fits(c))
            .or_else(|| table_names.clone().filter(|t| fits(t)));
        let has_header = match cfg.header {
            Some(h) => h,
            None => {
                let known: Vec<String> = configured
                    .iter()
                    .chain(table_names.iter())
                    .flatten()
                    .map(|n| cfg.column_name(n))
                    .collect();
                looks_like_header(&first_fields, &known, headerless.is_some(), cfg)
            }
        };
        let names: Vec<String> = if has_header {
            if let Some(long) = first_fields.iter().find(|f| f.len() > MAX_COLUMN_NAME) {
                return Err(InputError::new(
                    &label,
                    format!(
                        "the header has a column name of {} bytes (at most {MAX_COLUMN_NAME})",
                        long.len()
                    ),
                )
                .at(Position::Line(1))
                .into());
            }
            if let Some(bad) = first_fields.iter().find(|f| !is_column_name(f)) {
                return Err(InputError::new(
                    &label,
                    format!(
                        "`header = true` but the first line is not a header ({VALUE} is not a \
                         column name): for files without a header (AddColumnName=false) set \
                         `header = false` and list every column, in file order, under `columns` \
                         under [tables.\"{}\"]",
                        cfg.source
                    ),
                )
                .value(bad.as_str())
                .at(Position::Line(1))
                .into());
            }
            first_fields.clone()
        } else {
            let names: Vec<String> = match (headerless, configured, table_names) {
                (Some(n), _, _) | (None, Some(n), _) | (None, None, Some(n)) => n,
                (None, None, None) => {
                    let detail = match first_fields.iter().find(|f| !is_column_name(f)) {
                        Some(bad) => InputError::new(
                            &label,
                            format!(
                                "the first line is not a header ({VALUE} is not a column name) \
                                 and no column list is known: for files without a header \
                                 (AddColumnName=false) list every column, in file order, under \
                                 `columns` under [tables.\"{}\"]",
                                cfg.source
                            ),
                        )
                        .value(bad.as_str()),
                        None => InputError::new(
                            &label,
                            format!(
                                "`header = false` and no column list is known: list every \
                                 column, in file order, under `columns` under [tables.\"{}\"]",
                                cfg.source
                            ),
                        ),
                    };
                    return Err(detail.at(Position::Line(1)).into());
                }
            };
            // Headerless: an extra leading field is the Op column.
            if first_fields.len() == names.len() + 1 && op_first {
                std::iter::once("Op".to_string()).chain(names).collect()
            } else {
                names
            }
        };
        let declared = declared_for(&names);
        let layout = Layout::classify(&names, &declared, cfg);
        let key_len = cfg.primary_key.as_ref().map_or(0, |k| k.len());
        Ok(CsvFile {
            label,
            data,
            delimiter: cfg.delimiter.clone(),
            null_value: cfg.null_value.as_bytes().to_vec(),
            fields: names.len(),
            quarantine: cfg.bad_rows == crate::config::BadRows::Quarantine,
            layout,
            has_header,
            header_line: lines.lock().map_or(1, |mut l| {
                l.line_of(first.position().map_or(0, |p| p.byte()))
            }),
            key_len,
            source: cfg.source.clone(),
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The line of the header, when the file has one (errors about column names point there).
    pub fn header_line(&self) -> Option<u64> {
        self.has_header.then_some(self.header_line)
    }

    fn records(&self) -> Result<Records> {
        let (mut reader, lines) = reader(&self.data, &self.label, &self.delimiter)?;
        if self.has_header {
            let mut skip = csv::ByteRecord::new();
            reader
                .read_byte_record(&mut skip)
                .map_err(|e| csv_error(&self.label, e))?;
        }
        Ok(Records {
            reader,
            label: self.label.clone(),
            fields: self.fields,
            lines,
        })
    }

    /// Types of the data columns `names`, from every value in the file.
    pub fn infer_types(&self, names: &[String]) -> Result<Vec<PrimitiveType>> {
        let idx: Vec<usize> = names
            .iter()
            .map(|n| {
                self.layout
                    .roles
                    .iter()
                    .position(|r| matches!(r, Role::Data(c) if &c.name == n))
                    .ok_or_else(|| Error::Other(format!("{}: no column `{n}`", self.label)))
            })
            .collect::<Result<_>>()?;
        let mut guesses = vec![TypeGuess::default(); names.len()];
        let mut records = self.records()?;
        let mut rec = csv::ByteRecord::new();
        while let Some(line) = records.next(&mut rec)? {
            if records.count_error(&rec, line).is_some() {
                continue;
            }
            for (g, &i) in guesses.iter_mut().zip(&idx) {
                let v = rec.get(i).unwrap_or_default();
                if v != self.null_value.as_slice() {
                    g.observe(v);
                }
            }
        }
        Ok(guesses.iter().map(TypeGuess::result).collect())
    }

    pub fn read(
        self,
        types: Vec<PrimitiveType>,
        key_types: Vec<PrimitiveType>,
    ) -> Result<Box<dyn Iterator<Item = Result<ChangeBatch>> + Send>> {
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
        let declared: Vec<Option<PrimitiveType>> = self
            .layout
            .data_columns()
            .into_iter()
            .map(|c| c.declared)
            .collect();
        if data_cols.len() != types.len() {
            return Err(Error::Other(format!(
                "{}: {} types for {} columns",
                self.label,
                types.len(),
                data_cols.len()
            )));
        }
        let schema = std::sync::Arc::new(Schema::new(
            data_cols
                .iter()
                .zip(&types)
                .map(|((_, n), t)| Ok(Field::new(n, arrow_type(t)?, true)))
                .collect::<Result<Vec<_>>>()?,
        ));
        let before = self.layout.before_image_columns(self.key_len);
        let before_schema = match (&before, key_types.len() == self.key_len) {
            (Some(_), true) => Some(std::sync::Arc::new(Schema::new(
                key_types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| Ok(Field::new(format!("key{i}"), arrow_type(t)?, true)))
                    .collect::<Result<Vec<_>>>()?,
            ))),
            _ => None,
        };
        let op_index = self.layout.roles.iter().position(|r| *r == Role::Op);
        let hints = data_cols
            .iter()
            .zip(&types)
            .zip(&declared)
            .map(|(((_, name), t), d)| type_hint(&self.source, name, t, d.is_some()))
            .collect();
        let records = self.records()?;
        Ok(Box::new(CsvBatches {
            declared,
            hints,
            records,
            label: self.label,
            null_value: self.null_value,
            op_index,
            data_cols,
            types,
            schema,
            before: before.zip(before_schema).map(|(c, s)| (c, key_types, s)),
            quarantine: self.quarantine,
            done: false,
        }))
    }
}

/// Longest column name accepted in a header (Glue's limit is 255 characters).
const MAX_COLUMN_NAME: usize = 1024;

/// Longest CSV record: the parser holds a whole record in memory, so a file without line breaks
/// (or a decompression bomb of one line) must fail instead of growing without bound. DMS writes
/// LOBs truncated to `LobMaxSize` (32 KB by default).
pub const MAX_RECORD_BYTES: u64 = 128 << 20;

fn reader(data: &SourceData, label: &str, delimiter: &[u8]) -> Result<(Reader, Arc<Mutex<Lines>>)> {
    let mut input = data.open(label, DEFAULT_MAX_DECOMPRESSED_BYTES)?;
    // A UTF-8 byte order mark is not data.
    let mut head = [0u8; 3];
    let mut got = 0;
    while got < 3 {
        match input.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(Error::io(label.to_string(), e)),
        }
    }
    let skip = if got == 3 && head == [0xEF, 0xBB, 0xBF] {
        3
    } else {
        0
    };
    let input: Box<dyn Read + Send> =
        Box::new(std::io::Cursor::new(head[skip..got].to_vec()).chain(input));
    let (input, delimiter): (Box<dyn Read + Send>, u8) = match delimiter {
        [d] => (input, *d),
        many => (
            Box::new(MultiByteDelimiter::new(input, many.to_vec())),
            MultiByteDelimiter::<Box<dyn Read + Send>>::SEPARATOR,
        ),
    };
    let lines = Arc::new(Mutex::new(Lines::default()));
    let tracked = LineTracker {
        inner: input,
        lines: lines.clone(),
        offset: 0,
    };
    Ok((
        csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(delimiter)
            .double_quote(true)
            .buffer_capacity(1 << 16)
            .from_reader(Box::new(tracked) as Box<dyn Read + Send>),
        lines,
    ))
}

/// Newline positions of the stream the parser reads: a record's line is one more than the
/// newlines before its first byte, whatever quoted newlines or CRLF endings came before.
#[derive(Default)]
struct Lines {
    /// Offsets of newlines read but not yet before an asked position.
    pending: std::collections::VecDeque<u64>,
    /// Newlines before `asked`.
    before: u64,
    /// Start of the record being read: bytes past it count toward the record-size cap.
    record_start: u64,
}

impl Lines {
    fn line_of(&mut self, byte: u64) -> u64 {
        // After a CR the parser starts the next record at the LF that follows: a newline at the
        // record's start offset is still before it.
        while self.pending.front().is_some_and(|&n| n <= byte) {
            self.pending.pop_front();
            self.before += 1;
        }
        self.record_start = byte;
        self.before + 1
    }
}

struct LineTracker<R> {
    inner: R,
    lines: Arc<Mutex<Lines>>,
    offset: u64,
}

impl<R: Read> Read for LineTracker<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut lines = self
            .lines
            .lock()
            .map_err(|_| std::io::Error::other("line index poisoned"))?;
        for (i, b) in buf[..n].iter().enumerate() {
            if *b == b'\n' {
                lines.pending.push_back(self.offset + i as u64);
            }
        }
        self.offset += n as u64;
        if self.offset - lines.record_start > MAX_RECORD_BYTES + (1 << 16) {
            return Err(std::io::Error::other(format!(
                "a record is longer than {MAX_RECORD_BYTES} bytes (missing line breaks or an unterminated quote?)"
            )));
        }
        Ok(n)
    }
}

/// DMS allows a multi-character `CsvDelimiter`; the CSV parser takes one byte. This rewrites
/// each delimiter outside quoted fields to the ASCII unit separator (0x1F), leaving quoted text
/// as is. Matching is Knuth–Morris–Pratt, so overlapping partial matches are not missed. A raw
/// 0x1F outside quotes could not be told from a delimiter and is refused.
struct MultiByteDelimiter<R> {
    inner: R,
    delimiter: Vec<u8>,
    /// KMP failure function of `delimiter`.
    fail: Vec<usize>,
    in_quotes: bool,
    matched: usize,
    out: std::collections::VecDeque<u8>,
    eof: bool,
    error: Option<String>,
}

impl<R: Read> MultiByteDelimiter<R> {
    const SEPARATOR: u8 = 0x1f;

    fn new(inner: R, delimiter: Vec<u8>) -> Self {
        let mut fail = vec![0usize; delimiter.len()];
        let mut k = 0;
        for i in 1..delimiter.len() {
            while k > 0 && delimiter[i] != delimiter[k] {
                k = fail[k - 1];
            }
            if delimiter[i] == delimiter[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Self {
            inner,
            delimiter,
            fail,
            in_quotes: false,
            matched: 0,
            out: Default::default(),
            eof: false,
            error: None,
        }
    }

    fn push(&mut self, b: u8) {
        if self.in_quotes {
            if b == b'"' {
                self.in_quotes = false;
            }
            self.out.push_back(b);
            return;
        }
        if b == Self::SEPARATOR {
            self.error.get_or_insert_with(|| {
                "byte 0x1F outside quotes cannot be read with a multi-character delimiter".into()
            });
            return;
        }
        while self.matched > 0 && b != self.delimiter[self.matched] {
            // The bytes that can no longer start a match are data.
            let keep = self.fail[self.matched - 1];
            for i in 0..self.matched - keep {
                self.out.push_back(self.delimiter[i]);
            }
            self.matched = keep;
        }
        if b == self.delimiter[self.matched] {
            self.matched += 1;
            if self.matched == self.delimiter.len() {
                self.out.push_back(Self::SEPARATOR);
                self.matched = 0;
            }
            return;
        }
        if b == b'"' {
            self.in_quotes = true;
        }
        self.out.push_back(b);
    }
}

impl<R: Read> Read for MultiByteDelimiter<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut chunk = [0u8; 1 << 14];
        while self.out.len() < buf.len() && !self.eof && self.error.is_none() {
            let n = self.inner.read(&mut chunk)?;
            if n == 0 {
                self.eof = true;
                let partial = self.delimiter[..self.matched].to_vec();
                self.out.extend(partial);
                self.matched = 0;
                break;
            }
            for &b in &chunk[..n] {
                self.push(b);
                if self.error.is_some() {
                    // Nothing after the bad byte is passed on: the record it is in fails.
                    break;
                }
            }
        }
        if self.out.is_empty()
            && let Some(e) = &self.error
        {
            return Err(std::io::Error::other(e.clone()));
        }
        let n = buf.len().min(self.out.len());
        for (i, b) in self.out.drain(..n).enumerate() {
            buf[i] = b;
        }
        Ok(n)
    }
}

fn csv_error(label: &str, e: csv::Error) -> Error {
    let line = e.position().map(|p| p.line());
    let reason = match e.kind() {
        // Stream readers name the file themselves; say it once.
        csv::ErrorKind::Io(io) => {
            let m = io.to_string();
            m.strip_prefix(&format!("{label}: "))
                .map(str::to_string)
                .unwrap_or(m)
        }
        csv::ErrorKind::Utf8 { err, .. } => format!("invalid UTF-8: {err}"),
        _ => e.to_string(),
    };
    let mut err = InputError::new(label, reason);
    if let Some(l) = line {
        err = err.at(Position::Line(l));
    }
    err.into()
}

/// Plausible column name: what databases allow unquoted, as DMS writes them.
fn is_column_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == '#')
}

/// Whether the first record is a header (the endpoint's `AddColumnName` unset in the config).
/// It is when it starts with `Op`; it is not when a field cannot be a column name, or when it
/// starts like a change row (`I`, `U`, `D`) and a column list can read it. Otherwise it is when
/// every field names a known column (configured, the table's, a before-image of one, an ordering
/// column), or when no column list could read the file without a header. How many columns
/// `columns` lists does not decide it: a short list only pins types.
fn looks_like_header(
    first: &[String],
    known: &[String],
    headerless: bool,
    cfg: &TableConfig,
) -> bool {
    if first.first().is_some_and(|f| f.eq_ignore_ascii_case("op")) {
        return true;
    }
    if first.is_empty() || first.iter().any(|f| !is_column_name(f)) {
        return false;
    }
    if headerless
        && first
            .first()
            .is_some_and(|f| Op::parse(f.as_bytes()).is_some())
    {
        return false;
    }
    let prefix = cfg.column_name(&cfg.before_image_prefix);
    let special = [
        cfg.change_sequence_column.as_ref(),
        cfg.commit_timestamp_column.as_ref(),
        cfg.ordering_column.as_ref(),
    ];
    let all_known = first.iter().map(|f| cfg.column_name(f)).all(|f| {
        known.contains(&f)
            || (!prefix.is_empty()
                && f.strip_prefix(prefix.as_str())
                    .is_some_and(|b| known.iter().any(|n| n == b)))
            || special.contains(&Some(&f))
    });
    all_known || !headerless
}

struct Records {
    reader: Reader,
    label: String,
    fields: usize,
    lines: Arc<Mutex<Lines>>,
}

impl Records {
    /// Next record; returns the line it starts on.
    fn next(&mut self, rec: &mut csv::ByteRecord) -> Result<Option<u64>> {
        let read = self.reader.read_byte_record(rec);
        let got = match read {
            Ok(g) => g,
            Err(e) => {
                // Stream errors (decompression cap, record cap, bad bytes) carry no position:
                // the record being read starts where the reader stands.
                let line = self
                    .lines
                    .lock()
                    .map(|mut l| l.line_of(self.reader.position().byte()))
                    .ok();
                return Err(match (csv_error(&self.label, e), line) {
                    (Error::Input(mut ie), Some(line)) if ie.position.is_none() => {
                        ie.position = Some(Position::Line(line));
                        Error::Input(ie)
                    }
                    (e, _) => e,
                });
            }
        };
        if !got {
            return Ok(None);
        }
        let byte = rec.position().map_or(0, |p| p.byte());
        let line = self
            .lines
            .lock()
            .map_err(|_| Error::Other("line index poisoned".into()))?
            .line_of(byte);
        Ok(Some(line))
    }

    /// A record with the wrong number of fields.
    fn count_error(&self, rec: &csv::ByteRecord, line: u64) -> Option<InputError> {
        (rec.len() != self.fields).then(|| {
            InputError::new(
                &self.label,
                format!("expected {} fields, found {}", self.fields, rec.len()),
            )
            .at(Position::Line(line))
        })
    }
}

/// What an operator can do about a value that does not fit its column's type.
fn type_hint(source: &str, column: &str, t: &PrimitiveType, pinned: bool) -> Option<String> {
    if matches!(t, PrimitiveType::String | PrimitiveType::Binary) {
        return None;
    }
    Some(if pinned {
        format!(
            "; the column's type {t} is pinned by `columns` under [tables.\"{source}\"] \
             (`bad_rows = \"quarantine\"` sets such rows aside)"
        )
    } else {
        format!(
            "; the column's type {t} was inferred from the file that added the column: to keep \
             such values, pin the type before the column is created with `columns = [{{ name = \
             \"{column}\", type = \"string\" }}]` under [tables.\"{source}\"] (a column keeps its \
             type once created; `bad_rows = \"quarantine\"` sets such rows aside)"
        )
    })
}

struct CsvBatches {
    /// Per data column: the type the config declares (a `time` stored as text or a number is
    /// still read as a time of day).
    declared: Vec<Option<PrimitiveType>>,
    /// Per data column: the operator's way out when a value does not fit.
    hints: Vec<Option<String>>,
    records: Records,
    label: String,
    null_value: Vec<u8>,
    op_index: Option<usize>,
    data_cols: Vec<(usize, String)>,
    types: Vec<PrimitiveType>,
    schema: arrow_schema::SchemaRef,
    before: Option<(Vec<usize>, Vec<PrimitiveType>, arrow_schema::SchemaRef)>,
    /// Bad-row policy `quarantine`: set bad rows aside instead of failing.
    quarantine: bool,
    done: bool,
}

impl CsvBatches {
    fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        let mut builders = self
            .types
            .iter()
            .zip(&self.declared)
            .map(|(t, d)| ColumnBuilder::for_source(t, d.as_ref(), BATCH_ROWS))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| InputError::new(&self.label, e))?;
        let mut before_builders = match &self.before {
            Some((_, kt, _)) => Some(
                kt.iter()
                    .map(|t| ColumnBuilder::new(t, BATCH_ROWS))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| InputError::new(&self.label, e))?,
            ),
            None => None,
        };
        let mut ops = Vec::with_capacity(BATCH_ROWS);
        let mut positions = Vec::with_capacity(BATCH_ROWS);
        let mut rec = csv::ByteRecord::new();
        let mut rejected: Vec<Rejected> = Vec::new();
        // Rows appended to the builders but set aside (a value failed half-way through).
        let mut drop_rows: Vec<usize> = Vec::new();
        let quarantine = self.quarantine;
        let label = self.label.clone();
        let reject =
            |rec: &csv::ByteRecord, e: InputError, rejected: &mut Vec<Rejected>| -> Result<()> {
                if !quarantine {
                    return Err(e.into());
                }
                let fields: Vec<String> = rec
                    .iter()
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .collect();
                rejected.push(Rejected {
                    error: e,
                    record: serde_json::to_string(&fields).ok(),
                });
                Ok(())
            };
        while ops.len() < BATCH_ROWS && rejected.len() < BATCH_ROWS {
            let Some(line) = self.records.next(&mut rec)? else {
                break;
            };
            if let Some(e) = self.records.count_error(&rec, line) {
                reject(&rec, e, &mut rejected)?;
                continue;
            }
            let at = |col: &str, e: super::text::BadValue, hint: Option<&String>| -> InputError {
                let mut e = e;
                if let Some(h) = hint {
                    e.reason.push_str(h);
                }
                e.into_input_error(&label)
                    .at(Position::Line(line))
                    .column(col)
            };
            let op = match self.op_index {
                Some(i) => {
                    let v = rec.get(i).unwrap_or_default();
                    match Op::parse(v) {
                        Some(op) => op,
                        None => {
                            let e = InputError::new(
                                &label,
                                format!("unknown operation {VALUE} (expected I, U or D)"),
                            )
                            .value(String::from_utf8_lossy(v))
                            .at(Position::Line(line))
                            .column("Op");
                            reject(&rec, e, &mut rejected)?;
                            continue;
                        }
                    }
                }
                None => Op::Insert,
            };
            let mut failed: Option<InputError> = None;
            for ((b, (i, name)), hint) in builders.iter_mut().zip(&self.data_cols).zip(&self.hints)
            {
                if failed.is_some() {
                    b.push_null();
                    continue;
                }
                let v = rec.get(*i).unwrap_or_default();
                let v = (v != self.null_value.as_slice()).then_some(v);
                if let Err(e) = b.push(v) {
                    b.push_null();
                    failed = Some(at(name, e, hint.as_ref()));
                }
            }
            if let (Some(bb), Some((cols, _, _))) = (before_builders.as_mut(), &self.before) {
                for (b, i) in bb.iter_mut().zip(cols) {
                    if failed.is_some() {
                        b.push_null();
                        continue;
                    }
                    let v = rec.get(*i).unwrap_or_default();
                    let v = (v != self.null_value.as_slice() && !v.is_empty()).then_some(v);
                    if let Err(e) = b.push(v) {
                        b.push_null();
                        failed = Some(at("before-image", e, None));
                    }
                }
            }
            if let Some(e) = failed {
                reject(&rec, e, &mut rejected)?;
                drop_rows.push(ops.len());
            }
            ops.push(op);
            positions.push(line);
        }
        if ops.is_empty() && rejected.is_empty() {
            return Ok(None);
        }

        let columns = builders.iter_mut().map(|b| b.finish()).collect();
        let data = RecordBatch::try_new(self.schema.clone(), columns)?;
        let before = match (before_builders, &self.before) {
            (Some(mut bb), Some((_, _, s))) => Some(RecordBatch::try_new(
                s.clone(),
                bb.iter_mut().map(|b| b.finish()).collect(),
            )?),
            _ => None,
        };
        let batch = ChangeBatch {
            data,
            ops,
            positions,
            before,
            rejected,
        };
        if drop_rows.is_empty() {
            return Ok(Some(batch));
        }
        let keep: arrow_array::BooleanArray = (0..batch.ops.len())
            .map(|r| Some(drop_rows.binary_search(&r).is_err()))
            .collect();
        Ok(Some(batch.filter(&keep)?))
    }
}

impl Iterator for CsvBatches {
    type Item = Result<ChangeBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_batch() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
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
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use std::io::Write;

    fn cfg() -> TableConfig {
        let mut c = Config::default().table("s", "t").unwrap();
        c.primary_key = Some(vec!["id".into()]);
        c
    }

    fn obj(kind: FileKind) -> DmsObject {
        DmsObject {
            key: "s/t/f.csv".into(),
            schema: "s".into(),
            table: "t".into(),
            kind,
            format: FileFormat::Csv,
            order: OrderKey::parse("1/x").unwrap(),
        }
    }

    fn open(text: &[u8], cfg: &TableConfig) -> Result<SourceFile> {
        SourceFile::open(
            &obj(FileKind::Cdc),
            SourceData::Bytes(text.to_vec().into()),
            cfg,
            None,
        )
    }

    /// Reads with all columns typed as given (by name), keys as long.
    fn read_all(src: SourceFile, types: &[(&str, PrimitiveType)]) -> Result<Vec<ChangeBatch>> {
        let cols = src.columns();
        let t = cols
            .iter()
            .map(|c| {
                types
                    .iter()
                    .find(|(n, _)| *n == c.name)
                    .map(|(_, t)| t.clone())
                    .unwrap_or(PrimitiveType::String)
            })
            .collect();
        src.read(t, vec![PrimitiveType::Long])?.collect()
    }

    #[test]
    fn rfc4180_quoting_and_positions() {
        let text = b"Op,id,name,note\nI,1,\"Smith, Bob\",\"He said \"\"hi\"\"\"\nU,2,plain,\"line1\nline2\"\r\nD,3,,x\n";
        let src = open(text, &cfg()).unwrap();
        assert!(src.layout().has_op());
        let b = read_all(src, &[("id", PrimitiveType::Long)]).unwrap();
        let b = &b[0];
        assert_eq!(b.ops, vec![Op::Insert, Op::Update, Op::Delete]);
        assert_eq!(b.positions, vec![2, 3, 5]);
        let name = b.data.column(1).as_string::<i32>();
        assert_eq!(name.value(0), "Smith, Bob");
        assert!(name.is_null(2), "empty field is NULL by default");
        let note = b.data.column(2).as_string::<i32>();
        assert_eq!(note.value(0), "He said \"hi\"");
        assert_eq!(note.value(1), "line1\nline2");
    }

    #[test]
    fn null_token_and_delimiter() {
        let mut c = cfg();
        c.null_value = "\\N".into();
        c.delimiter = b"|".to_vec();
        let src = open(b"Op|id|v\nI|1|\nI|2|\\N\n", &c).unwrap();
        let b = &read_all(src, &[]).unwrap()[0];
        let v = b.data.column(1).as_string::<i32>();
        assert_eq!((v.is_null(0), v.value(0)), (false, ""));
        assert!(v.is_null(1));
    }

    #[test]
    fn headerless_with_and_without_op() {
        let mut c = cfg();
        c.columns = Some(vec![
            ("id".into(), Some(PrimitiveType::Long)),
            ("v".into(), None),
        ]);
        let with_op = open(b"I,1,a\nU,1,b\n", &c).unwrap();
        assert!(with_op.layout().has_op());
        assert_eq!(
            read_all(with_op, &[("id", PrimitiveType::Long)]).unwrap()[0].ops,
            vec![Op::Insert, Op::Update]
        );
        let load = open(b"1,a\n2,b\n", &c).unwrap();
        assert!(!load.layout().has_op());
        let b = &read_all(load, &[("id", PrimitiveType::Long)]).unwrap()[0];
        assert_eq!(b.ops, vec![Op::Insert, Op::Insert]);
        assert_eq!(b.data.column(0).as_primitive::<Int64Type>().value(1), 2);
        // A header is still recognised when columns are configured.
        let header = open(b"Op,id,v\nI,1,a\n", &c).unwrap();
        assert_eq!(
            read_all(header, &[("id", PrimitiveType::Long)]).unwrap()[0].positions,
            vec![2]
        );
    }

    #[test]
    fn a_headerless_change_row_with_an_unknown_op_fails_on_its_op() {
        // The table's columns are known (id, v); the change file's extra leading field is its
        // Op even when the Op is not I, U or D: the error is about the Op, not the field count.
        let c = cfg();
        let cols = ["id".to_string(), "v".to_string()];
        let src = SourceFile::open(
            &obj(FileKind::Cdc),
            SourceData::Bytes(b"X,1,b\n".to_vec().into()),
            &c,
            Some(&cols),
        )
        .unwrap();
        let e = read_all(src, &[("id", PrimitiveType::Long)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1, column `Op`"), "{e}");
        assert!(!e.contains("fields"), "{e}");
    }

    #[test]
    fn a_short_columns_list_only_pins_types() {
        // With a header, `columns` naming fewer columns than the file pins their types; header
        // detection does not count them.
        let mut c = cfg();
        c.columns = Some(vec![(
            "salary".into(),
            Some(PrimitiveType::Decimal {
                precision: 8,
                scale: 2,
            }),
        )]);
        for text in [
            &b"id,name,salary,dept\n1,Ada,5200.50,7\n"[..],
            &b"Op,id,name,salary,dept\nI,1,Ada,5200.50,7\n"[..],
        ] {
            let src = open(text, &c).unwrap();
            let cols = src.columns();
            let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, vec!["id", "name", "salary", "dept"]);
            assert_eq!(
                cols[2].declared,
                Some(PrimitiveType::Decimal {
                    precision: 8,
                    scale: 2
                })
            );
            assert_eq!(cols[0].declared, None);
        }
        // Headerless with the full list: a first row of name-like values is data.
        c.columns = Some(vec![
            ("last".into(), None),
            ("first".into(), None),
            ("city".into(), None),
        ]);
        let src = open(b"Smith,Bob,Dallas\nKing,Jean,Nantes\n", &c).unwrap();
        assert_eq!(read_all(src, &[]).unwrap()[0].positions, vec![1, 2]);
        // The same with a header naming the listed columns in another order.
        let src = open(b"city,last,first\nDallas,Smith,Bob\n", &c).unwrap();
        let names: Vec<String> = src.columns().into_iter().map(|c| c.name).collect();
        assert_eq!(names, vec!["city", "last", "first"]);
        // Headerless, the table's columns when the list is short.
        c.columns = Some(vec![("v".into(), Some(PrimitiveType::Long))]);
        let table = vec!["id".to_string(), "v".to_string()];
        let src = SourceFile::open(
            &obj(FileKind::Cdc),
            SourceData::Bytes(b"I,1,5\n".to_vec().into()),
            &c,
            Some(&table),
        )
        .unwrap();
        assert!(src.layout().has_op());
        assert_eq!(src.columns()[1].declared, Some(PrimitiveType::Long));
    }

    #[test]
    fn a_value_that_does_not_fit_names_the_config() {
        let mut c = cfg();
        c.columns = Some(vec![("n".into(), Some(PrimitiveType::Long))]);
        let e = read_all(
            open(b"Op,id,n\nI,1,51003\nI,2,01307\n", &c).unwrap(),
            &[("id", PrimitiveType::Long), ("n", PrimitiveType::Long)],
        )
        .unwrap_err();
        let Error::Input(ie) = &e else { panic!("{e}") };
        assert_eq!(ie.position, Some(Position::Line(3)));
        assert_eq!(ie.column.as_deref(), Some("n"));
        assert_eq!(ie.value.as_deref(), Some("01307"));
        let m = e.to_string();
        assert!(m.contains("`01307` has leading zeros"), "{m}");
        assert!(
            m.contains("pinned by `columns` under [tables.\"s.t\"]"),
            "{m}"
        );
        assert!(!e.redacted().contains("01307"), "{}", e.redacted());
        // Not pinned: the message says how to pin it.
        let e = read_all(
            open(b"Op,id,n\nI,1,51003\nI,2,01307\n", &cfg()).unwrap(),
            &[("id", PrimitiveType::Long), ("n", PrimitiveType::Long)],
        )
        .unwrap_err()
        .redacted();
        assert!(
            e.contains("columns = [{ name = \"n\", type = \"string\" }]")
                && e.contains("column `n`")
                && e.contains("line 3"),
            "{e}"
        );
    }

    #[test]
    fn headerless_without_configured_columns_is_a_clear_error() {
        let e = open(b"I,1,a\n", &cfg()).err().unwrap().to_string();
        assert!(e.contains("line 1") && e.contains("columns"), "{e}");
    }

    #[test]
    fn bad_rows_name_line_and_column() {
        let e = read_all(open(b"Op,id,v\nI,1,a\nI,2\n", &cfg()).unwrap(), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 3") && e.contains("expected 3 fields, found 2"),
            "{e}"
        );
        let e = read_all(open(b"Op,id,v\nX,1,a\n", &cfg()).unwrap(), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("`Op`") && e.contains("`X`"),
            "{e}"
        );
        let e = read_all(
            open(b"Op,id,v\nI,1,a\nI,x2,b\n", &cfg()).unwrap(),
            &[("id", PrimitiveType::Long)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 3") && e.contains("`id`") && e.contains("x2"),
            "{e}"
        );
        let e = read_all(open(b"Op,id,v\nI,1,\xff\n", &cfg()).unwrap(), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("UTF-8"), "{e}");
    }

    #[test]
    fn multi_byte_delimiter_outside_quotes_only() {
        let mut c = cfg();
        c.delimiter = b"||".to_vec();
        let src = open(b"Op||id||v\nI||1||\"a||b\"\nI||2||x|y\n", &c).unwrap();
        let b = &read_all(src, &[("id", PrimitiveType::Long)]).unwrap()[0];
        let v = b.data.column(1).as_string::<i32>();
        assert_eq!((v.value(0), v.value(1)), ("a||b", "x|y"));
    }

    #[test]
    fn gzip_is_detected_by_magic_bytes() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"Op,id\nI,1\nI,2\n").unwrap();
        let bytes = gz.finish().unwrap();
        let b = read_all(
            open(&bytes, &cfg()).unwrap(),
            &[("id", PrimitiveType::Long)],
        )
        .unwrap();
        assert_eq!(b[0].data.num_rows(), 2);
    }

    #[test]
    fn inference_reads_the_whole_file() {
        let mut text = b"Op,id,n,amount,ts\n".to_vec();
        for i in 0..20_000 {
            text.extend_from_slice(
                format!("I,{i},{i},1.5,2022-03-02 11:30:01.000000\n").as_bytes(),
            );
        }
        text.extend_from_slice(b"I,20000,late text,2.25,\n");
        let src = open(&text, &cfg()).unwrap();
        let t = src
            .infer_types(&["id".into(), "n".into(), "amount".into(), "ts".into()])
            .unwrap();
        assert_eq!(
            t,
            vec![
                PrimitiveType::Long,
                PrimitiveType::String,
                PrimitiveType::Decimal {
                    precision: 38,
                    scale: 2
                },
                PrimitiveType::Timestamp
            ]
        );
    }

    #[test]
    fn before_image_columns_are_found() {
        let src = open(b"Op,id,v,BI_id\nU,5,a,1\nI,7,b,\n", &cfg()).unwrap();
        assert_eq!(src.columns().len(), 2);
        let b = &read_all(src, &[("id", PrimitiveType::Long)]).unwrap()[0];
        let before = b
            .before
            .as_ref()
            .unwrap()
            .column(0)
            .as_primitive::<Int64Type>()
            .clone();
        assert_eq!(before.value(0), 1);
        assert!(before.is_null(1));
    }

    #[test]
    fn empty_and_truncated_inputs() {
        let e = SourceFile::open(
            &obj(FileKind::Load),
            SourceData::Bytes(Vec::new().into()),
            &cfg(),
            None,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("empty"), "{e}");
        let e = read_all(open(b"Op,id,v\nI,1,\"unterminated\n", &cfg()).unwrap(), &[]);
        assert!(e.is_ok() || e.unwrap_err().to_string().contains("line"));
    }
}
