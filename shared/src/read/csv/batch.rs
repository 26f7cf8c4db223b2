//! Records → [`ChangeBatch`]es: each field converted to its column's type, the Op and the
//! before-image key values taken out, and a bad row failing the read or set aside.

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema, SchemaRef};
use iceberg::spec::PrimitiveType;

use super::records::Records;
use super::{CsvFile, Observe};
use crate::error::{Error, InputError, Position, Rejected, Result, VALUE};
use crate::read::layout::Role;
use crate::read::text::{BadValue, ColumnBuilder, TypeGuess};
use crate::read::{BATCH_ROWS, ChangeBatch, Op};
use crate::types::arrow_type;

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

/// How a record becomes a row of the table's types; the same for every part of a split parse.
#[derive(Clone)]
pub(super) struct Conversion {
    /// Per data column: the type the config declares (a `time` stored as text or a number is
    /// still read as a time of day).
    declared: Vec<Option<PrimitiveType>>,
    /// Per data column: the operator's way out when a value does not fit.
    hints: Vec<Option<String>>,
    label: String,
    null_value: Vec<u8>,
    no_sup_value: Option<Vec<u8>>,
    op_index: Option<usize>,
    data_cols: Vec<(usize, String)>,
    types: Vec<PrimitiveType>,
    schema: SchemaRef,
    before: Option<(Vec<usize>, Vec<PrimitiveType>, SchemaRef)>,
    /// Bad-row policy `quarantine`: set bad rows aside instead of failing.
    quarantine: bool,
    observe: Option<Observe>,
}

/// A value did not fit the type guessed for its observed column (see [`Observe`]): the read
/// ends, and the file is to be read again with the types the whole file gives.
struct Misfit;

/// A batch being filled.
struct Filling {
    data: Vec<ColumnBuilder>,
    before: Option<Vec<ColumnBuilder>>,
    ops: Vec<Op>,
    positions: Vec<u64>,
    /// Per observed column, what its values fit.
    guesses: Vec<TypeGuess>,
    rejected: Vec<Rejected>,
    /// Rows appended to the builders but set aside (a value failed half-way through).
    drop_rows: Vec<usize>,
    /// (row, data column) of the cells an update did not supply.
    unsupplied: Vec<(usize, usize)>,
}

impl Conversion {
    /// `file`'s data columns read as `types` (one per data column), its before-image key
    /// columns as `key_types` (one per key column).
    pub(super) fn new(
        file: &CsvFile,
        types: Vec<PrimitiveType>,
        key_types: Vec<PrimitiveType>,
    ) -> Result<Conversion> {
        let data_cols: Vec<(usize, String)> = file
            .layout
            .roles
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Role::Data(c) => Some((i, c.name.clone())),
                _ => None,
            })
            .collect();
        let declared: Vec<Option<PrimitiveType>> = file
            .layout
            .data_columns()
            .into_iter()
            .map(|c| c.declared)
            .collect();
        if data_cols.len() != types.len() {
            return Err(Error::Internal(format!(
                "{}: {} types for {} columns",
                file.label,
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
        let before = file.layout.before_image_columns(file.key_len);
        let before_schema = match (&before, key_types.len() == file.key_len) {
            (Some(_), true) => Some(std::sync::Arc::new(Schema::new(
                key_types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| Ok(Field::new(format!("key{i}"), arrow_type(t)?, true)))
                    .collect::<Result<Vec<_>>>()?,
            ))),
            _ => None,
        };
        let op_index = file.layout.roles.iter().position(|r| *r == Role::Op);
        let hints = data_cols
            .iter()
            .zip(&types)
            .zip(&declared)
            .map(|(((_, name), t), d)| type_hint(&file.source, name, t, d.is_some()))
            .collect();
        Ok(Conversion {
            declared,
            hints,
            label: file.label.clone(),
            null_value: file.null_value.clone(),
            no_sup_value: file.no_sup_value.clone(),
            op_index,
            data_cols,
            types,
            schema,
            before: before.zip(before_schema).map(|(c, s)| (c, key_types, s)),
            quarantine: file.quarantine,
            observe: file.observe.clone(),
        })
    }

    fn start(&self) -> Result<Filling> {
        let data = self
            .types
            .iter()
            .zip(&self.declared)
            .map(|(t, d)| ColumnBuilder::for_source(t, d.as_ref(), BATCH_ROWS))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| InputError::new(&self.label, e))?;
        let before = match &self.before {
            Some((_, kt, _)) => Some(
                kt.iter()
                    .map(|t| ColumnBuilder::new(t, BATCH_ROWS))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| InputError::new(&self.label, e))?,
            ),
            None => None,
        };
        let observed = self.observe.as_ref().map_or(0, |o| o.columns.len());
        Ok(Filling {
            data,
            before,
            ops: Vec::with_capacity(BATCH_ROWS),
            positions: Vec::with_capacity(BATCH_ROWS),
            guesses: vec![TypeGuess::default(); observed],
            rejected: Vec::new(),
            drop_rows: Vec::new(),
            unsupplied: Vec::new(),
        })
    }

    /// Appends the record on `line` to `batch`, or sets it aside; a [`Misfit`] appends nothing.
    fn append(
        &self,
        rec: &csv::ByteRecord,
        line: u64,
        batch: &mut Filling,
    ) -> Result<Option<Misfit>> {
        let op = match self.op(rec, line) {
            Ok(op) => op,
            Err(e) => {
                self.reject(rec, e, &mut batch.rejected)?;
                return Ok(None);
            }
        };
        let failed = match self.push_data(rec, line, op, batch) {
            Ok(failed) => failed,
            Err(misfit) => return Ok(Some(misfit)),
        };
        if let Some(e) = self.push_before(rec, line, batch, failed) {
            self.reject(rec, e, &mut batch.rejected)?;
            batch.drop_rows.push(batch.ops.len());
        }
        batch.ops.push(op);
        batch.positions.push(line);
        Ok(None)
    }

    fn op(&self, rec: &csv::ByteRecord, line: u64) -> Result<Op, InputError> {
        let Some(i) = self.op_index else {
            return Ok(Op::Insert);
        };
        let v = rec.get(i).unwrap_or_default();
        Op::parse(v).ok_or_else(|| {
            InputError::new(
                &self.label,
                format!("unknown operation {VALUE} (expected I, U or D)"),
            )
            .value(String::from_utf8_lossy(v))
            .at(Position::Line(line))
            .column("Op")
        })
    }

    /// Appends the record's data values; from the first that does not fit its column (which
    /// is returned), NULLs, so that the columns stay aligned until the row is dropped.
    fn push_data(
        &self,
        rec: &csv::ByteRecord,
        line: u64,
        op: Op,
        batch: &mut Filling,
    ) -> Result<Option<InputError>, Misfit> {
        let observed = self.observe.as_ref().map_or(&[][..], |o| &o.columns[..]);
        let mut failed: Option<InputError> = None;
        for (c, ((b, (i, name)), hint)) in batch
            .data
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
            if self.no_sup_value.as_deref() == Some(v) {
                match op {
                    // Not supplied: the row's current value stays (NULL until it is read).
                    Op::Update => batch.unsupplied.push((batch.ops.len(), c)),
                    // A delete's other columns are not applied.
                    Op::Delete => {}
                    Op::Insert => {
                        b.push_null();
                        failed = Some(
                            InputError::new(
                                &self.label,
                                format!(
                                    "an insert carries {VALUE}, the `no_sup_value` marker of a \
                                     column the source did not supply: an inserted row has no \
                                     current value to keep"
                                ),
                            )
                            .value(String::from_utf8_lossy(v))
                            .at(Position::Line(line))
                            .column(name),
                        );
                        continue;
                    }
                }
                b.push_null();
                continue;
            }
            let v = (v != self.null_value.as_slice()).then_some(v);
            let watched = observed.iter().position(|o| *o == c);
            if let (Some(k), Some(v)) = (watched, v) {
                batch.guesses[k].observe(v);
            }
            if let Err(e) = b.push(v) {
                if watched.is_some() {
                    // The guess from the first records is wrong: read again.
                    return Err(Misfit);
                }
                b.push_null();
                failed = Some(self.bad_value(line, name, e, hint.as_ref()));
            }
        }
        Ok(failed)
    }

    /// Appends the record's before-image key values (NULLs once a value has `failed`); the
    /// first value that did not fit, if any.
    fn push_before(
        &self,
        rec: &csv::ByteRecord,
        line: u64,
        batch: &mut Filling,
        mut failed: Option<InputError>,
    ) -> Option<InputError> {
        if let (Some(bb), Some((cols, _, _))) = (batch.before.as_mut(), &self.before) {
            for (b, i) in bb.iter_mut().zip(cols) {
                if failed.is_some() {
                    b.push_null();
                    continue;
                }
                let v = rec.get(*i).unwrap_or_default();
                let v = (v != self.null_value.as_slice() && !v.is_empty()).then_some(v);
                if let Err(e) = b.push(v) {
                    b.push_null();
                    failed = Some(self.bad_value(line, "before-image", e, None));
                }
            }
        }
        failed
    }

    fn bad_value(&self, line: u64, column: &str, e: BadValue, hint: Option<&String>) -> InputError {
        let mut e = e;
        if let Some(h) = hint {
            e.reason.push_str(h);
        }
        e.into_input_error(&self.label)
            .at(Position::Line(line))
            .column(column)
    }

    /// A bad row: set aside under the bad-row policy `quarantine`, else the read fails.
    fn reject(
        &self,
        rec: &csv::ByteRecord,
        e: InputError,
        rejected: &mut Vec<Rejected>,
    ) -> Result<()> {
        if !self.quarantine {
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
    }

    fn finish(&self, batch: Filling) -> Result<ChangeBatch> {
        let Filling {
            mut data,
            before,
            ops,
            positions,
            rejected,
            drop_rows,
            unsupplied,
            ..
        } = batch;
        let columns = data.iter_mut().map(|b| b.finish()).collect();
        let data = RecordBatch::try_new(self.schema.clone(), columns)?;
        let before = match (before, &self.before) {
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
            unsupplied,
        };
        if drop_rows.is_empty() {
            return Ok(batch);
        }
        let keep: arrow_array::BooleanArray = (0..batch.ops.len())
            .map(|r| Some(drop_rows.binary_search(&r).is_err()))
            .collect();
        batch.filter(&keep)
    }
}

/// A file's records (or a part's, in a split parse) as batches of at most [`BATCH_ROWS`] rows.
pub(super) struct CsvBatches {
    conversion: Conversion,
    pub(super) records: Records,
    done: bool,
}

impl CsvBatches {
    pub(super) fn new(conversion: Conversion, records: Records) -> CsvBatches {
        CsvBatches {
            conversion,
            records,
            done: false,
        }
    }

    fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        let mut batch = self.conversion.start()?;
        let mut rec = csv::ByteRecord::new();
        while batch.ops.len() < BATCH_ROWS && batch.rejected.len() < BATCH_ROWS {
            let Some(line) = self.records.next(&mut rec)? else {
                break;
            };
            if let Some(e) = self.records.count_error(&rec, line) {
                self.conversion.reject(&rec, e, &mut batch.rejected)?;
                continue;
            }
            if let Some(Misfit) = self.conversion.append(&rec, line, &mut batch)? {
                self.end_observing(&batch.guesses, true);
                return Ok(None);
            }
        }
        self.end_observing(&batch.guesses, false);
        if batch.ops.is_empty() && batch.rejected.is_empty() {
            return Ok(None);
        }
        self.conversion.finish(batch).map(Some)
    }

    /// Adds a batch's observations to what the read saw; `misfit` ends the read.
    fn end_observing(&mut self, guesses: &[TypeGuess], misfit: bool) {
        let Some(o) = &self.conversion.observe else {
            return;
        };
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
    pub(super) fn with_records(&self, records: Records) -> CsvBatches {
        CsvBatches::new(self.conversion.clone(), records)
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
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use iceberg::spec::PrimitiveType;

    use super::super::testing::{cfg, open, read_all};
    use crate::error::{Error, Position};

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
}
