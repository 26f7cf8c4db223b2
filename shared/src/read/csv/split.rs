//! The split parse: a large input held in memory, cut at guessed record starts, and its parts
//! parsed on several threads; a wrong guess falls back to one parse from there on.

use std::collections::VecDeque;

use super::CsvFile;
use super::batch::CsvBatches;
use super::records::{Records, UTF8_BOM, csv_reader};
use crate::error::{Error, Result};
use crate::read::{ChangeBatch, GZIP_MAGIC, SourceData};

/// How far an input is split for a parse on several threads.
#[derive(Clone, Copy, Debug)]
pub(super) struct SplitLimits {
    /// At most this many parts.
    pub(super) parts: usize,
    /// Parts of at least this many bytes.
    pub(super) min_part_bytes: usize,
}

impl SplitLimits {
    /// One part per core (up to 8), of at least 256 KiB: a smaller part gains less than the
    /// thread costs.
    pub(super) fn for_this_machine() -> SplitLimits {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        SplitLimits {
            parts: cores.min(8),
            min_part_bytes: 256 << 10,
        }
    }
}

/// Largest input (decompressed) held in memory to be parsed in parts; larger ones stream.
const SPLIT_MAX_BYTES: u64 = 64 << 20;

impl CsvFile {
    /// The input held in memory and where to split it for a parse on several threads (no
    /// split when it is too small), if it may be held.
    pub(super) fn split_parts(&self) -> Result<Option<Split>> {
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
pub(super) struct Split {
    data: bytes::Bytes,
    /// Start of every part after the first.
    pub(super) starts: Vec<usize>,
}

impl Split {
    /// The first part's records: from the start (byte order mark and header skipped as usual)
    /// up to the second part, if any.
    pub(super) fn first_records(&self, file: &CsvFile) -> Result<Records> {
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
    pub(super) fn batches(self, first: CsvBatches, delimiter: u8) -> SplitBatches {
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
                label: parts[0].records.label.clone(),
                fields: parts[0].records.fields,
                lines,
                line_base: newlines,
                boundary,
            };
            parts.push(parts[0].with_records(records));
        }
        SplitBatches {
            parts,
            out: VecDeque::new(),
            parsed: false,
        }
    }
}

/// Where a part of a split parse hands over to the next part (see `SplitBatches`).
pub(super) struct Boundary {
    /// Offset, in this part's stream, where the next part's stream starts: just after a newline.
    at: u64,
    /// Whether a record of this part starts there, so that the next part's records are this
    /// file's records from there on. `None` until a record reaches it.
    clean: Option<bool>,
}

impl Boundary {
    /// Whether this part's records have reached the next part's, which take over from there.
    pub(super) fn handed_over(&self) -> bool {
        self.clean == Some(true)
    }

    /// Whether the record the parser places at `byte` is the next part's first record (this
    /// part then ends); decided by the first record that reaches the boundary.
    pub(super) fn reached(&mut self, byte: u64) -> bool {
        if self.clean.is_some() || byte + 1 < self.at {
            return false;
        }
        // After a CRLF (or blank lines) the parser places a record at the newline before its
        // first byte, which is one byte before the boundary at most when the next part
        // starts with it. Any other position past it means the guessed split was inside a
        // record: this part then reads on to the end.
        let clean = byte == self.at || byte + 1 == self.at;
        self.clean = Some(clean);
        clean
    }
}

/// A CSV input parsed in parts, one thread per part; yields the batches in file order. A part
/// that ends in an error ends the input there (what a single parse would report first); a part
/// whose records did not end exactly at the next part's start has read on to the end, and the
/// later parts are discarded.
pub(super) struct SplitBatches {
    parts: Vec<CsvBatches>,
    out: VecDeque<Result<ChangeBatch>>,
    parsed: bool,
}

impl CsvBatches {
    /// Every batch up to the boundary (or the end, or the first error), and whether the
    /// boundary was clean.
    fn parse_all(mut self) -> (Vec<Result<ChangeBatch>>, Option<bool>) {
        let batches: Vec<_> = self.by_ref().collect();
        let clean = self.records.boundary.as_ref().and_then(|b| b.clean);
        (batches, clean)
    }
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
    use std::io::Write;

    use super::super::testing::{cfg, outcome};

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
