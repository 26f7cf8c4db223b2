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
use super::{BATCH_ROWS, ChangeBatch, DEFAULT_MAX_DECOMPRESSED_BYTES, GZIP_MAGIC, Op, SourceData};
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
    /// How the input may be held in memory and parsed in parts on several threads, if at all.
    split: Option<SplitLimits>,
    /// Columns whose values are observed while read (their type is a guess).
    observe: Option<Observe>,
}

/// Columns whose type was guessed from a file's first records (a new table's or new column's
/// type): while the file is read, every value of them is observed, so that the reader can tell
/// whether the whole file fits the guess. A value that does not fit ends the read (`misfit`):
/// the file is to be read again with the types the whole file gives.
#[derive(Clone, Debug)]
pub struct Observe {
    /// Data column positions (as in `SourceFile::columns`).
    pub columns: Vec<usize>,
    pub seen: std::sync::Arc<std::sync::Mutex<Observed>>,
}

/// What an observed read saw.
#[derive(Debug, Default)]
pub struct Observed {
    /// Per observed column, what its values fit.
    pub guesses: Vec<TypeGuess>,
    /// A value did not fit its column's guessed type: the read ended early.
    pub misfit: bool,
}

/// How far an input is split for a parse on several threads.
#[derive(Clone, Copy, Debug)]
struct SplitLimits {
    /// At most this many parts.
    parts: usize,
    /// Parts of at least this many bytes.
    min_part_bytes: usize,
}

impl SplitLimits {
    /// One part per core (up to 8), of at least 256 KiB: a smaller part gains less than the
    /// thread costs.
    fn for_this_machine() -> SplitLimits {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        SplitLimits {
            parts: cores.min(8),
            min_part_bytes: 256 << 10,
        }
    }
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
            split: None,
            observe: None,
        })
    }

    /// Observes the values of some columns while reading (see [`Observe`]).
    pub fn observe(&mut self, o: Observe) {
        self.observe = Some(o);
    }

    /// The types of `names` guessed from the first `records` records (the rest of the file is
    /// observed while it is read: [`Observe`]).
    pub fn infer_types_from_start(
        &self,
        names: &[String],
        records: usize,
    ) -> Result<Vec<PrimitiveType>> {
        self.infer(names, Some(records))
    }

    /// Lets `read` hold the input in memory and parse it in parts on several threads (when it
    /// is large enough and the machine has the cores). For inputs whose rows are all kept in
    /// memory anyway: the parts' batches are held until every part is parsed.
    pub fn allow_split(&mut self) {
        self.split = Some(SplitLimits::for_this_machine());
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The line of the header, when the file has one (errors about column names point there).
    pub fn header_line(&self) -> Option<u64> {
        self.has_header.then_some(self.header_line)
    }

    fn records(&self) -> Result<Records> {
        self.records_of(&self.data)
    }

    /// The records of `data`, this file's bytes (or a copy of them held in memory).
    fn records_of(&self, data: &SourceData) -> Result<Records> {
        let (mut reader, lines) = reader(data, &self.label, &self.delimiter)?;
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
            line_base: 0,
            boundary: None,
        })
    }

    /// Types of the data columns `names`, from every value in the file.
    pub fn infer_types(&self, names: &[String]) -> Result<Vec<PrimitiveType>> {
        self.infer(names, None)
    }

    fn infer(&self, names: &[String], max_records: Option<usize>) -> Result<Vec<PrimitiveType>> {
        let idx: Vec<usize> = names
            .iter()
            .map(|n| {
                self.layout
                    .roles
                    .iter()
                    .position(|r| matches!(r, Role::Data(c) if &c.name == n))
                    .ok_or_else(|| Error::Internal(format!("{}: no column `{n}`", self.label)))
            })
            .collect::<Result<_>>()?;
        let mut guesses = vec![TypeGuess::default(); names.len()];
        let mut records = self.records()?;
        let mut rec = csv::ByteRecord::new();
        let mut left = max_records.unwrap_or(usize::MAX);
        while left > 0
            && let Some(line) = records.next(&mut rec)?
        {
            left -= 1;
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
            return Err(Error::Internal(format!(
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
        let parts = self.split_parts()?;
        let records = match &parts {
            Some(p) => p.first_records(&self)?,
            None => self.records()?,
        };
        let parts = parts.filter(|p| !p.starts.is_empty());
        let first = CsvBatches {
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
            observe: self.observe,
            done: false,
        };
        match parts {
            Some(p) => Ok(Box::new(p.batches(first, self.delimiter[0]))),
            None => Ok(Box::new(first)),
        }
    }

    /// The input held in memory and where to split it for a parse on several threads (no
    /// split when it is too small), if it may be held.
    fn split_parts(&self) -> Result<Option<Split>> {
        let Some(limits) = self.split else {
            return Ok(None);
        };
        if limits.parts < 2 || self.delimiter.len() != 1 {
            return Ok(None);
        }
        // Held whatever its size (a small input is read whole either way), up to a limit;
        // gzipped, if it is unlikely to exceed that limit once decompressed.
        let Some(data) = self.data.in_memory(SPLIT_MAX_BYTES, SPLIT_MAX_BYTES / 16) else {
            return Ok(None);
        };
        // Held decompressed: bytes that still look like gzip would be gunzipped again.
        if data.starts_with(&GZIP_MAGIC) {
            return Ok(None);
        }
        let parts = limits.parts.min(data.len() / limits.min_part_bytes.max(1));
        let starts = split_points(&data, parts);
        Ok(Some(Split { data, starts }))
    }
}

/// Longest column name accepted in a header (Glue's limit is 255 characters).
const MAX_COLUMN_NAME: usize = 1024;

/// Longest CSV record: the parser holds a whole record in memory, so a file without line breaks
/// (or a decompression bomb of one line) must fail instead of growing without bound. DMS writes
/// LOBs truncated to `LobMaxSize` (32 KB by default).
pub(super) const MAX_RECORD_BYTES: u64 = 128 << 20;

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
    let skip = if got == 3 && head == UTF8_BOM { 3 } else { 0 };
    let input: Box<dyn Read + Send> =
        Box::new(std::io::Cursor::new(head[skip..got].to_vec()).chain(input));
    let (input, delimiter): (Box<dyn Read + Send>, u8) = match delimiter {
        [d] => (input, *d),
        many => (
            Box::new(MultiByteDelimiter::new(input, many.to_vec())),
            MultiByteDelimiter::<Box<dyn Read + Send>>::SEPARATOR,
        ),
    };
    Ok(csv_reader(input, delimiter))
}

/// The parser over a stream that is ready to parse (no byte order mark, one-byte delimiter).
fn csv_reader(input: Box<dyn Read + Send>, delimiter: u8) -> (Reader, Arc<Mutex<Lines>>) {
    let lines = Arc::new(Mutex::new(Lines::default()));
    let tracked = LineTracker {
        inner: input,
        lines: lines.clone(),
        offset: 0,
    };
    (
        csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(delimiter)
            .double_quote(true)
            .buffer_capacity(1 << 16)
            .from_reader(Box::new(tracked) as Box<dyn Read + Send>),
        lines,
    )
}

/// Line-break positions of the stream the parser reads: a record's line is one more than the
/// newlines before its first byte, whatever quoted newlines, CRLF endings or blank lines came
/// before.
#[derive(Default)]
struct Lines {
    /// Offsets of the CRs and LFs read but not yet before an asked position (`true`: an LF).
    pending: std::collections::VecDeque<(u64, bool)>,
    /// Newlines before `asked`.
    before: u64,
    /// Start of the record being read: bytes past it count toward the record-size cap.
    record_start: u64,
}

impl Lines {
    /// The line of the record the parser places at `byte`.
    fn line_of(&mut self, byte: u64) -> u64 {
        while self.pending.front().is_some_and(|&(o, _)| o < byte) {
            self.count_front();
        }
        // The parser places a record where it started looking for one: after a CR at the LF
        // that follows, before any blank lines. Its first byte is the first that is neither.
        let mut at = byte;
        while self.pending.front().is_some_and(|&(o, _)| o == at) {
            self.count_front();
            at += 1;
        }
        self.record_start = byte;
        self.before + 1
    }

    fn count_front(&mut self) {
        if let Some((_, lf)) = self.pending.pop_front() {
            self.before += u64::from(lf);
        }
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
        let (offset, read) = (self.offset, &buf[..n]);
        lines.pending.extend(
            memchr::memchr2_iter(b'\r', b'\n', read).map(|i| (offset + i as u64, read[i] == b'\n')),
        );
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
    /// Lines of the file before this stream (a later part of a split parse).
    line_base: u64,
    /// Where the next part of a split parse takes over.
    boundary: Option<Boundary>,
}

/// Where a part of a split parse hands over to the next part (see `SplitBatches`).
struct Boundary {
    /// Offset, in this part's stream, where the next part's stream starts: just after a newline.
    at: u64,
    /// Whether a record of this part starts there, so that the next part's records are this
    /// file's records from there on. `None` until a record reaches it.
    clean: Option<bool>,
}

impl Records {
    /// Next record; returns the line it starts on.
    fn next(&mut self, rec: &mut csv::ByteRecord) -> Result<Option<u64>> {
        if self
            .boundary
            .as_ref()
            .is_some_and(|b| b.clean == Some(true))
        {
            return Ok(None);
        }
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
                    (Error::Input(mut ie), Some(line)) => {
                        ie.position = Some(match ie.position {
                            Some(Position::Line(l)) => Position::Line(self.line_base + l),
                            Some(p) => p,
                            None => Position::Line(self.line_base + line),
                        });
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
        if let Some(b) = self.boundary.as_mut()
            && b.clean.is_none()
            && byte + 1 >= b.at
        {
            // After a CRLF (or blank lines) the parser places a record at the newline before its
            // first byte, which is one byte before the boundary at most when the next part
            // starts with it. Any other position past it means the guessed split was inside a
            // record: this part then reads on to the end.
            let clean = byte == b.at || byte + 1 == b.at;
            b.clean = Some(clean);
            if clean {
                return Ok(None);
            }
        }
        let line = self
            .lines
            .lock()
            .map_err(|_| Error::Internal("line index poisoned".into()))?
            .line_of(byte);
        Ok(Some(self.line_base + line))
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
    observe: Option<Observe>,
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
        let observed: Vec<usize> = self
            .observe
            .as_ref()
            .map(|o| o.columns.clone())
            .unwrap_or_default();
        let mut guesses = vec![TypeGuess::default(); observed.len()];
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
            for (c, ((b, (i, name)), hint)) in builders
                .iter_mut()
                .zip(&self.data_cols)
                .zip(&self.hints)
                .enumerate()
            {
                if failed.is_some() {
                    b.push_null();
                    continue;
                }
                let v = rec.get(*i).unwrap_or_default();
                let v = (v != self.null_value.as_slice()).then_some(v);
                let watched = observed.iter().position(|o| *o == c);
                if let (Some(k), Some(v)) = (watched, v) {
                    guesses[k].observe(v);
                }
                if let Err(e) = b.push(v) {
                    if watched.is_some() {
                        // The guess from the first records is wrong: read again.
                        self.end_observing(&guesses, true);
                        return Ok(None);
                    }
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
        self.end_observing(&guesses, false);
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

    /// Adds a batch's observations to what the read saw; `misfit` ends the read.
    fn end_observing(&mut self, guesses: &[TypeGuess], misfit: bool) {
        let Some(o) = &self.observe else { return };
        if let Ok(mut seen) = o.seen.lock() {
            if seen.guesses.len() < guesses.len() {
                seen.guesses.resize(guesses.len(), TypeGuess::default());
            }
            for (s, g) in seen.guesses.iter_mut().zip(guesses) {
                s.merge(g);
            }
            seen.misfit |= misfit;
        }
        if misfit {
            self.done = true;
        }
    }

    /// The same reading of other records (another part of a split parse).
    fn with_records(&self, records: Records) -> CsvBatches {
        CsvBatches {
            declared: self.declared.clone(),
            hints: self.hints.clone(),
            records,
            label: self.label.clone(),
            null_value: self.null_value.clone(),
            op_index: self.op_index,
            data_cols: self.data_cols.clone(),
            types: self.types.clone(),
            schema: self.schema.clone(),
            before: self.before.clone(),
            quarantine: self.quarantine,
            observe: self.observe.clone(),
            done: false,
        }
    }

    /// Every batch up to the boundary (or the end, or the first error), and whether the
    /// boundary was clean.
    fn parse_all(mut self) -> (Vec<Result<ChangeBatch>>, Option<bool>) {
        let batches: Vec<_> = self.by_ref().collect();
        let clean = self.records.boundary.as_ref().and_then(|b| b.clean);
        (batches, clean)
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

/// Largest input (decompressed) held in memory to be parsed in parts; larger ones stream.
const SPLIT_MAX_BYTES: u64 = 64 << 20;
/// A UTF-8 byte order mark, which is not data.
const UTF8_BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Offsets at which to start the parts after the first: each just after a newline that is
/// outside quotes if every quote so far opened or closed a quoted field. That is a guess (a
/// quote inside an unquoted field is data), which the parse checks: a part whose last record
/// does not end at the next part's start reads on to the end of the input instead.
fn split_points(data: &[u8], parts: usize) -> Vec<usize> {
    let mut starts = Vec::new();
    // Parity of the quotes in data[..counted].
    let (mut odd, mut counted) = (false, 0usize);
    for i in 1..parts {
        let target = data.len() / parts * i;
        if target <= counted {
            continue;
        }
        odd ^= memchr::memchr_iter(b'"', &data[counted..target]).count() % 2 == 1;
        let mut pos = target;
        let start = loop {
            let Some(k) = memchr::memchr2(b'"', b'\n', &data[pos..]) else {
                break None;
            };
            let at = pos + k;
            pos = at + 1;
            if data[at] == b'"' {
                odd = !odd;
            } else if !odd {
                break Some(pos);
            }
        };
        match start {
            Some(s) if s < data.len() => {
                starts.push(s);
                counted = s;
            }
            _ => break,
        }
    }
    starts
}

/// An input held in memory and where its parts start.
struct Split {
    data: bytes::Bytes,
    /// Start of every part after the first.
    starts: Vec<usize>,
}

impl Split {
    /// The first part's records: from the start (byte order mark and header skipped as usual)
    /// up to the second part, if any.
    fn first_records(&self, file: &CsvFile) -> Result<Records> {
        let mut records = file.records_of(&SourceData::Bytes(self.data.clone()))?;
        // The parser's offsets start after a byte order mark.
        let bom = if self.data.starts_with(&UTF8_BOM) {
            UTF8_BOM.len()
        } else {
            0
        };
        records.boundary = self.starts.first().map(|&s| Boundary {
            at: (s - bom) as u64,
            clean: None,
        });
        Ok(records)
    }

    /// The batches of every part, `first` being the first part's.
    fn batches(self, first: CsvBatches, delimiter: u8) -> SplitBatches {
        let mut parts = vec![first];
        let mut newlines = 0u64;
        let mut counted = 0usize;
        for (i, &start) in self.starts.iter().enumerate() {
            newlines += memchr::memchr_iter(b'\n', &self.data[counted..start]).count() as u64;
            counted = start;
            let input = Box::new(std::io::Cursor::new(self.data.slice(start..)));
            let (reader, lines) = csv_reader(input, delimiter);
            let boundary = self.starts.get(i + 1).map(|next| Boundary {
                at: (next - start) as u64,
                clean: None,
            });
            let records = Records {
                reader,
                label: parts[0].label.clone(),
                fields: parts[0].records.fields,
                lines,
                line_base: newlines,
                boundary,
            };
            parts.push(parts[0].with_records(records));
        }
        SplitBatches {
            parts,
            out: std::collections::VecDeque::new(),
            parsed: false,
        }
    }
}

/// A CSV input parsed in parts, one thread per part; yields the batches in file order. A part
/// that ends in an error ends the input there (what a single parse would report first); a part
/// whose records did not end exactly at the next part's start has read on to the end, and the
/// later parts are discarded.
struct SplitBatches {
    parts: Vec<CsvBatches>,
    out: std::collections::VecDeque<Result<ChangeBatch>>,
    parsed: bool,
}

impl SplitBatches {
    fn parse(&mut self) {
        let parts = std::mem::take(&mut self.parts);
        let parsed: Vec<(Vec<Result<ChangeBatch>>, Option<bool>)> = std::thread::scope(|s| {
            let mut parts = parts.into_iter();
            let first = parts.next();
            let handles: Vec<_> = parts.map(|p| s.spawn(move || p.parse_all())).collect();
            let mut all = Vec::with_capacity(handles.len() + 1);
            all.extend(first.map(CsvBatches::parse_all));
            for h in handles {
                all.push(h.join().unwrap_or_else(|_| {
                    (
                        vec![Err(Error::Internal("CSV parser thread panicked".into()))],
                        None,
                    )
                }));
            }
            all
        });
        for (batches, clean) in parsed {
            let failed = batches.last().is_some_and(|b| b.is_err());
            self.out.extend(batches);
            if failed || clean != Some(true) {
                break;
            }
        }
    }
}

impl Iterator for SplitBatches {
    type Item = Result<ChangeBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        if !self.parsed {
            self.parsed = true;
            self.parse();
        }
        self.out.pop_front()
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
        let t = column_types(&src, types);
        src.read(t, vec![PrimitiveType::Long])?.collect()
    }

    /// The type of each of `src`'s columns: as given by name, else string.
    fn column_types(src: &SourceFile, types: &[(&str, PrimitiveType)]) -> Vec<PrimitiveType> {
        src.columns()
            .iter()
            .map(|c| {
                types
                    .iter()
                    .find(|(n, _)| *n == c.name)
                    .map_or(PrimitiveType::String, |(_, t)| t.clone())
            })
            .collect()
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

    /// Everything a read yields, as text: the error it ends with (a reader stops there, so
    /// that is all), or per row its op, line and values, then the rows set aside; and how many
    /// batches it took.
    fn outcome(text: &[u8], cfg: &TableConfig, parts: Option<usize>) -> (Vec<String>, usize) {
        let mut src = match open(text, cfg) {
            Ok(s) => s,
            Err(e) => return (vec![format!("open: {e}")], 0),
        };
        if let (SourceFile::Csv(c), Some(parts)) = (&mut src, parts) {
            c.split = Some(SplitLimits {
                parts,
                min_part_bytes: 1,
            });
        }
        let t = column_types(&src, &[("id", PrimitiveType::Long)]);
        let (mut out, mut set_aside) = (Vec::new(), Vec::new());
        let mut batches = 0;
        let iter = match src.read(t, vec![PrimitiveType::Long]) {
            Ok(i) => i,
            Err(e) => return (vec![format!("read: {e}")], 0),
        };
        for b in iter {
            let b = match b {
                Ok(b) => b,
                Err(e) => return (vec![format!("error: {e}")], batches),
            };
            batches += 1;
            for r in &b.rejected {
                set_aside.push(format!("rejected: {} {:?}", r.error, r.record));
            }
            for row in 0..b.data.num_rows() {
                let values: Vec<String> = b
                    .data
                    .columns()
                    .iter()
                    .map(|c| {
                        arrow_cast::display::array_value_to_string(c, row)
                            .unwrap_or_else(|e| e.to_string())
                    })
                    .collect();
                out.push(format!(
                    "{:?} line {} {values:?}",
                    b.ops[row], b.positions[row]
                ));
            }
        }
        out.extend(set_aside);
        (out, batches)
    }

    /// A well-formed file of `rows` change rows, with `end` after each.
    fn well_formed(rows: usize, end: &str) -> Vec<u8> {
        let mut t = format!("Op,id,a,b{end}");
        for i in 0..rows {
            t.push_str(&format!("U,{i},\"x, {i}\",\"two{end}lines\"{end}"));
        }
        t.into_bytes()
    }

    #[test]
    fn a_split_parse_reads_each_part_on_its_own_and_matches_one_parse() {
        for end in ["\n", "\r\n"] {
            let text = well_formed(1000, end);
            let (one, one_batches) = outcome(&text, &cfg(), None);
            assert_eq!(one.len(), 1000);
            assert_eq!(one_batches, 1);
            let (split, batches) = outcome(&text, &cfg(), Some(4));
            assert_eq!(split, one, "line ending {end:?}");
            assert_eq!(batches, 4, "every part was used (line ending {end:?})");
        }
    }

    #[test]
    fn a_record_after_blank_lines_is_placed_on_its_own_line() {
        // The parser places a record where it started looking for one: after a CRLF, at the
        // LF, before any blank lines (a split parse, starting after them, showed it).
        let text = b"Op,id,a,b\r\nI,1,x,y\r\n\n\r\nI,2,x,y\n\nI,3,x,y\r\n";
        let (rows, _) = outcome(text, &cfg(), None);
        let lines: Vec<&str> = rows.iter().map(|r| r.split(' ').nth(2).unwrap()).collect();
        assert_eq!(lines, vec!["2", "5", "7"], "{rows:?}");
    }

    #[test]
    fn a_gzipped_input_is_split_once_decompressed() {
        let text = well_formed(1000, "\n");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).unwrap();
        let gz = gz.finish().unwrap();
        let (one, _) = outcome(&text, &cfg(), None);
        let (split, batches) = outcome(&gz, &cfg(), Some(3));
        assert_eq!(split, one);
        assert_eq!(batches, 3);
    }

    #[test]
    fn a_split_guessed_inside_a_record_falls_back_to_one_parse() {
        // A quote inside an unquoted field is data, not the start of a quoted field: counting
        // quotes then guesses the splits inside records, which the parse must notice.
        let mut text = b"Op,id,a,b\nI,0,ab\"c,x\n".to_vec();
        text.extend_from_slice(&well_formed(1000, "\n")[b"Op,id,a,b\n".len()..]);
        let (one, _) = outcome(&text, &cfg(), None);
        assert_eq!(one.len(), 1001);
        let (split, batches) = outcome(&text, &cfg(), Some(4));
        assert_eq!(split, one);
        assert_eq!(batches, 1, "the first part read on to the end");
    }

    #[test]
    fn a_split_parse_reports_the_first_bad_row_in_file_order() {
        let mut text = well_formed(1000, "\n");
        // Bad rows near the start and the end: the first one is reported.
        let s = String::from_utf8(text.clone()).unwrap();
        let s = s
            .replacen("U,5,", "U,five,", 1)
            .replacen("U,990,", "Q,990,", 1);
        text = s.into_bytes();
        let (one, _) = outcome(&text, &cfg(), None);
        let (split, _) = outcome(&text, &cfg(), Some(4));
        assert_eq!(split, one);
        assert!(one.last().unwrap().contains("line 12"), "{:?}", one.last());
        let mut q = cfg();
        q.bad_rows = crate::config::BadRows::Quarantine;
        let (one, _) = outcome(&text, &q, None);
        let (split, _) = outcome(&text, &q, Some(4));
        assert_eq!(split, one);
        assert_eq!(one.iter().filter(|r| r.starts_with("rejected")).count(), 2);
    }

    fn field() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            "[a-z ]{0,4}",
            "[a-z\",\n]{0,6}".prop_map(|v| format!("\"{}\"", v.replace('"', "\"\""))),
            "[a-z]{1,3}\"[a-z]{0,2}",
        ]
    }

    fn token() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (
                prop::sample::select(vec!["I", "U", "D", "X"]),
                prop::sample::select(vec!["1", "22", "x", ""]),
                field(),
                field(),
                prop::sample::select(vec!["\n", "\r\n", "\n\n", "\r"]),
            )
                .prop_map(|(op, id, a, b, end)| format!("{op},{id},{a},{b}{end}")),
            1 => "[a1,\"\n\r IU]{0,12}",
        ]
    }

    proptest::proptest! {
        /// Whatever the bytes (quotes in odd places, CR, CRLF, blank lines, wrong field counts,
        /// bad values), a parse in parts yields what one parse yields: the same rows, lines,
        /// rows set aside and error.
        #[test]
        fn a_split_parse_yields_what_one_parse_yields(
            bom in proptest::bool::ANY,
            tokens in proptest::collection::vec(token(), 0..60),
            parts in 2usize..7,
            quarantine in proptest::bool::ANY,
        ) {
            let mut text = if bom { vec![0xEF, 0xBB, 0xBF] } else { Vec::new() };
            text.extend_from_slice(b"Op,id,a,b\n");
            text.extend(tokens.concat().into_bytes());
            let mut c = cfg();
            if quarantine {
                c.bad_rows = crate::config::BadRows::Quarantine;
            }
            let (one, _) = outcome(&text, &c, None);
            let (split, _) = outcome(&text, &c, Some(parts));
            proptest::prop_assert_eq!(split, one);
        }
    }
}
