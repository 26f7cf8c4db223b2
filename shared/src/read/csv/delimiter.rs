//! Multi-byte delimiters, rewritten to one byte for the CSV parser.

use std::io::Read;

/// DMS allows a multi-character `CsvDelimiter`; the CSV parser takes one byte. This rewrites
/// each delimiter outside quoted fields to the ASCII unit separator (0x1F), leaving quoted text
/// as is. Matching is Knuth–Morris–Pratt, so overlapping partial matches are not missed. A raw
/// 0x1F outside quotes could not be told from a delimiter and is refused.
pub(super) struct MultiByteDelimiter<R> {
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
    pub(super) const SEPARATOR: u8 = 0x1f;

    pub(super) fn new(inner: R, delimiter: Vec<u8>) -> Self {
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

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use iceberg::spec::PrimitiveType;

    use super::super::testing::{cfg, open, read_all};

    #[test]
    fn multi_byte_delimiter_outside_quotes_only() {
        let mut c = cfg();
        c.delimiter = b"||".to_vec();
        let src = open(b"Op||id||v\nI||1||\"a||b\"\nI||2||x|y\n", &c).unwrap();
        let b = &read_all(src, &[("id", PrimitiveType::Long)]).unwrap()[0];
        let v = b.data.column(1).as_string::<i32>();
        assert_eq!((v.value(0), v.value(1)), ("a||b", "x|y"));
    }
}
