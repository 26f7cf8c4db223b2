//! Line numbers of records, and the cap on a record's size, tracked in the bytes the parser
//! reads.

use std::io::Read;
use std::sync::{Arc, Mutex};

/// Longest CSV record: the parser holds a whole record in memory, so a file without line breaks
/// (or a decompression bomb of one line) must fail instead of growing without bound. DMS writes
/// LOBs truncated to `LobMaxSize` (32 KB by default).
const MAX_RECORD_BYTES: u64 = 128 << 20;

/// Line-break positions of the stream the parser reads: a record's line is one more than the
/// newlines before its first byte, whatever quoted newlines, CRLF endings or blank lines came
/// before.
#[derive(Default)]
pub(super) struct Lines {
    /// Offsets of the CRs and LFs read but not yet before an asked position (`true`: an LF).
    pending: std::collections::VecDeque<(u64, bool)>,
    /// Newlines before `asked`.
    before: u64,
    /// Start of the record being read: bytes past it count toward the record-size cap.
    record_start: u64,
}

impl Lines {
    /// The line of the record the parser places at `byte`.
    pub(super) fn line_of(&mut self, byte: u64) -> u64 {
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

/// The parser's input, watched: the parser gives byte offsets, and messages need lines.
pub(super) struct LineTracker<R> {
    inner: R,
    lines: Arc<Mutex<Lines>>,
    offset: u64,
}

impl<R> LineTracker<R> {
    pub(super) fn new(inner: R, lines: Arc<Mutex<Lines>>) -> Self {
        LineTracker {
            inner,
            lines,
            offset: 0,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::super::testing::{cfg, outcome};

    #[test]
    fn a_record_after_blank_lines_is_placed_on_its_own_line() {
        // The parser places a record where it started looking for one: after a CRLF, at the
        // LF, before any blank lines (a split parse, starting after them, showed it).
        let text = b"Op,id,a,b\r\nI,1,x,y\r\n\n\r\nI,2,x,y\n\nI,3,x,y\r\n";
        let (rows, _) = outcome(text, &cfg(), None);
        let lines: Vec<&str> = rows.iter().map(|r| r.split(' ').nth(2).unwrap()).collect();
        assert_eq!(lines, vec!["2", "5", "7"], "{rows:?}");
    }
}
