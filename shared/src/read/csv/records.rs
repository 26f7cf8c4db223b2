//! The record stream: the parser over a file's bytes (gunzipped, without a byte order mark,
//! multi-byte delimiters rewritten), each record with the line it starts on.

use std::io::Read;
use std::sync::{Arc, Mutex};

use super::CsvFile;
use super::delimiter::MultiByteDelimiter;
use super::lines::{LineTracker, Lines};
use super::split::Boundary;
use crate::error::{Error, InputError, Position, Result};
use crate::read::{DEFAULT_MAX_DECOMPRESSED_BYTES, SourceData};

pub(super) type Reader = csv::Reader<Box<dyn Read + Send>>;

/// A UTF-8 byte order mark, which is not data.
pub(super) const UTF8_BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

impl CsvFile {
    pub(super) fn records(&self) -> Result<Records> {
        self.records_of(&self.data)
    }

    /// The records of `data`, this file's bytes (or a copy of them held in memory).
    pub(super) fn records_of(&self, data: &SourceData) -> Result<Records> {
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
}

pub(super) fn reader(
    data: &SourceData,
    label: &str,
    delimiter: &[u8],
) -> Result<(Reader, Arc<Mutex<Lines>>)> {
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
pub(super) fn csv_reader(
    input: Box<dyn Read + Send>,
    delimiter: u8,
) -> (Reader, Arc<Mutex<Lines>>) {
    let lines = Arc::new(Mutex::new(Lines::default()));
    let tracked = LineTracker::new(input, lines.clone());
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

pub(super) fn csv_error(label: &str, e: csv::Error) -> Error {
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

/// A file's records (or a part's, in a split parse), each with the line it starts on: the
/// parser knows only byte offsets.
pub(super) struct Records {
    pub(super) reader: Reader,
    pub(super) label: String,
    pub(super) fields: usize,
    pub(super) lines: Arc<Mutex<Lines>>,
    /// Lines of the file before this stream (a later part of a split parse).
    pub(super) line_base: u64,
    /// Where the next part of a split parse takes over.
    pub(super) boundary: Option<Boundary>,
}

impl Records {
    /// Next record; returns the line it starts on.
    pub(super) fn next(&mut self, rec: &mut csv::ByteRecord) -> Result<Option<u64>> {
        if self.boundary.as_ref().is_some_and(Boundary::handed_over) {
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
        if self.boundary.as_mut().is_some_and(|b| b.reached(byte)) {
            return Ok(None);
        }
        let line = self
            .lines
            .lock()
            .map_err(|_| Error::Internal("line index poisoned".into()))?
            .line_of(byte);
        Ok(Some(self.line_base + line))
    }

    /// A record with the wrong number of fields.
    pub(super) fn count_error(&self, rec: &csv::ByteRecord, line: u64) -> Option<InputError> {
        (rec.len() != self.fields).then(|| {
            InputError::new(
                &self.label,
                format!("expected {} fields, found {}", self.fields, rec.len()),
            )
            .at(Position::Line(line))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use iceberg::spec::PrimitiveType;

    use super::super::testing::{cfg, obj, open, read_all};
    use crate::locate::FileKind;
    use crate::read::{Op, SourceData, SourceFile};

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
