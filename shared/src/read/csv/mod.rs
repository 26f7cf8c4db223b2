//! CSV as DMS writes it: RFC 4180 quoting (delimiters, doubled quotes and newlines inside
//! quotes), configurable delimiter and NULL token, with or without a header (`AddColumnName`),
//! with or without an `Op` column (`IncludeOpForFullLoad`, `CdcInsertsOnly`).
//!
//! How the pieces fit. `header`: [`CsvFile::open`] reads the first record to tell a header from
//! data and to name the columns. `records`: every later pass (inference, a read) streams the
//! records, each with the line it starts on; under the parser, `delimiter` rewrites a
//! multi-byte delimiter to one byte and `lines` tracks line breaks (and caps a record's size).
//! `batch`: a read converts records into [`ChangeBatch`]es of the table's types. `split`: a read
//! that may hold the input in memory cuts it into parts, each with its own record stream and
//! batches, parsed on threads of their own.

mod batch;
mod delimiter;
mod header;
mod lines;
mod records;
mod split;
#[cfg(test)]
mod testing;

use iceberg::spec::PrimitiveType;

use self::batch::{Conversion, CsvBatches};
use self::split::SplitLimits;
use super::layout::{Layout, Role};
use super::text::TypeGuess;
use super::{ChangeBatch, SourceData};
use crate::error::{Error, Result};

pub struct CsvFile {
    label: String,
    data: SourceData,
    delimiter: Vec<u8>,
    null_value: Vec<u8>,
    /// `no_sup_value`: the marker of a column an update did not supply.
    no_sup_value: Option<Vec<u8>>,
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

impl CsvFile {
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
                // The no-supplied-value marker says nothing of the column's type.
                if v != self.null_value.as_slice() && self.no_sup_value.as_deref() != Some(v) {
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
        let conversion = Conversion::new(&self, types, key_types)?;
        let parts = self.split_parts()?;
        let records = match &parts {
            Some(p) => p.first_records(&self)?,
            None => self.records()?,
        };
        let first = CsvBatches::new(conversion, records);
        match parts.filter(|p| !p.starts.is_empty()) {
            Some(p) => Ok(Box::new(p.batches(first, self.delimiter[0]))),
            None => Ok(Box::new(first)),
        }
    }
}

#[cfg(test)]
mod tests {
    use iceberg::spec::PrimitiveType;

    use super::testing::{cfg, open};

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
}
