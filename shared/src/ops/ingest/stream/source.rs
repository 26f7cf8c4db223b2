//! The row source: every input file read in DMS order (CSV parsed, Parquet decoded) into
//! batches in the table's types, its bad rows dealt with as the table's policy says, each row
//! tagged with its `Op` and its sequence number.
//!
//! Invariants: sequence numbers rise with the place of a row in the input (file in DMS order,
//! then row), so they order the changes of one key as `(file, position)` does; an update that
//! moves its row to another key adds a delete of the old key with the update's own number (the
//! same place); a file whose types were guessed from its first records and do not fit stops the
//! read with the types of the whole file (`Retype`), sending nothing more.

use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt8Array, UInt64Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::PrimitiveType;

use super::super::FileInput;
use super::super::read::{align, reject_null_keys};
use super::{OP_COLUMN, Retype, SEQ_COLUMN, StreamSpec};
use crate::config::BadRows;
use crate::error::{Error, InputError, Rejected, Result};
use crate::locate::FileKind;
use crate::read::{ChangeBatch, Observe, Observed, Op, SourceFile};

/// The schema rows flow in: the table's columns, then `Op` and the sequence number.
pub(super) fn row_schema(processing: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = processing
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(OP_COLUMN, DataType::UInt8, false));
    fields.push(Field::new(SEQ_COLUMN, DataType::UInt64, false));
    Arc::new(ArrowSchema::new(fields))
}

/// What the reader saw besides the rows.
pub(super) struct ReadSummary {
    pub(super) rows: usize,
    pub(super) max_seq: Option<String>,
    pub(super) rejected: Vec<Rejected>,
    /// A file did not fit the types guessed from its first records: it stopped there.
    pub(super) retype: Option<Retype>,
}

/// Reads every input in DMS order and sends its rows. Stops quietly when the receiver is gone.
pub(super) fn read_rows(
    spec: &StreamSpec,
    schema: &SchemaRef,
    tx: SyncSender<Result<RecordBatch>>,
) -> Result<ReadSummary> {
    let mut summary = ReadSummary {
        rows: 0,
        max_seq: None,
        rejected: Vec::new(),
        retype: None,
    };
    let stop = |tx: &SyncSender<Result<RecordBatch>>| {
        // Stops the consumer; what happened is returned from here.
        let _ = tx.send(Err(Error::Internal("the input could not be read".into())));
    };
    let mut seq = 0u64;
    for (i, f) in spec.files.iter().enumerate() {
        let data = f
            .data
            .clone()
            .ok_or_else(|| Error::Internal(format!("{} was not fetched", f.object.key)))?;
        let mut src = SourceFile::open(&f.object, data, &spec.cfg, spec.table_columns.as_deref())?;
        let observed = (!spec.inferred[i].is_empty()).then(|| {
            let o = Observe {
                columns: spec.inferred[i].clone(),
                seen: Arc::new(Mutex::new(Observed::default())),
            };
            src.observe(o.clone());
            o
        });
        let names: Vec<String> = src.columns().iter().map(|c| c.name.clone()).collect();
        for b in src.read(spec.types[i].clone(), spec.key_types.clone())? {
            let rows = b.and_then(|b| {
                let b = checked(spec, f, b, &mut summary)?;
                summary.rows += b.data.num_rows();
                tagged(spec, schema, b, &mut seq)
            });
            match rows {
                Ok(rows) => {
                    if tx.send(Ok(rows)).is_err() {
                        return Ok(summary);
                    }
                }
                Err(e) => {
                    stop(&tx);
                    return Err(e);
                }
            }
        }
        if let Some(o) = observed
            && let Some(r) = retype(spec, i, &names, &o)?
        {
            stop(&tx);
            summary.retype = Some(r);
            return Ok(summary);
        }
    }
    Ok(summary)
}

/// Whether file `i` fits the types guessed from its first records; if not, the types of the
/// whole file (observed, or when the read stopped at a value that did not fit, inferred again
/// from the whole file).
fn retype(spec: &StreamSpec, i: usize, names: &[String], o: &Observe) -> Result<Option<Retype>> {
    let (misfit, observed): (bool, Vec<PrimitiveType>) = {
        let seen = o
            .seen
            .lock()
            .map_err(|_| Error::Internal("observed types poisoned".into()))?;
        (
            seen.misfit,
            seen.guesses.iter().map(|g| g.result()).collect(),
        )
    };
    let columns: Vec<String> = o.columns.iter().map(|&c| names[c].clone()).collect();
    let whole = if misfit {
        let f = &spec.files[i];
        let data = f
            .data
            .clone()
            .ok_or_else(|| Error::Internal(format!("{} was not fetched", f.object.key)))?;
        SourceFile::open(&f.object, data, &spec.cfg, spec.table_columns.as_deref())?
            .infer_types(&columns)?
    } else {
        observed
    };
    let guessed: Vec<&PrimitiveType> = o.columns.iter().map(|&c| &spec.types[i][c]).collect();
    if !misfit && whole.iter().eq(guessed.iter().copied()) {
        return Ok(None);
    }
    Ok(Some(
        columns
            .into_iter()
            .zip(whole)
            .map(|(c, t)| ((i, c), t))
            .collect(),
    ))
}

/// A batch aligned to the table, its bad rows dealt with as the table's policy says.
fn checked(
    spec: &StreamSpec,
    f: &FileInput,
    b: ChangeBatch,
    summary: &mut ReadSummary,
) -> Result<ChangeBatch> {
    let mut b = align(b, &spec.processing)?;
    summary.rejected.append(&mut b.rejected);
    let change_file = f.object.kind == FileKind::Cdc;
    if spec.cfg.bad_rows == BadRows::Quarantine {
        b = reject_null_keys(
            b,
            &spec.key,
            f,
            &mut summary.rejected,
            "primary key value is NULL",
        )?;
        if change_file {
            let why = "a change row has no value in an ordering column";
            b = reject_null_keys(b, &spec.order_columns, f, &mut summary.rejected, why)?;
        }
    } else {
        refuse_nulls(&b, &spec.key, f, "primary key value is NULL")?;
        if change_file {
            refuse_nulls(
                &b,
                &spec.order_columns,
                f,
                "a change row has no value in an ordering column: its place among the changes \
                 of its key is unknown (set `bad_rows = \"quarantine\"` to set such rows aside)",
            )?;
        }
    }
    if let Some(c) = &spec.cfg.change_sequence_column
        && let Some(col) = b.data.column_by_name(c)
        && let Some(m) = col.as_string::<i32>().iter().flatten().max()
        && summary.max_seq.as_deref().is_none_or(|x| m > x)
    {
        summary.max_seq = Some(m.to_string());
    }
    Ok(b)
}

/// The first row with a NULL in one of `columns` is an input error naming it.
fn refuse_nulls(b: &ChangeBatch, columns: &[String], f: &FileInput, reason: &str) -> Result<()> {
    for c in columns {
        let Some(col) = b.data.column_by_name(c) else {
            continue;
        };
        if col.null_count() == 0 {
            continue;
        }
        if let Some(r) = (0..col.len()).find(|&r| col.is_null(r)) {
            return Err(InputError::new(&f.object.key, reason)
                .at(crate::read::position(f.object.format, b.positions[r]))
                .column(c.as_str())
                .into());
        }
    }
    Ok(())
}

/// The batch's rows with their `Op` and sequence number; an update whose before-image key
/// differs from its key also deletes the old key (a row of its own, at the same place).
fn tagged(
    spec: &StreamSpec,
    schema: &SchemaRef,
    b: ChangeBatch,
    seq: &mut u64,
) -> Result<RecordBatch> {
    let n = b.data.num_rows();
    let seqs = UInt64Array::from_iter_values(*seq..*seq + n as u64);
    *seq += n as u64;
    let ops = UInt8Array::from_iter_values(b.ops.iter().map(|o| *o as u8));
    let mut columns: Vec<ArrayRef> = b.data.columns().to_vec();
    columns.push(Arc::new(ops));
    columns.push(Arc::new(seqs));
    let rows = RecordBatch::try_new(schema.clone(), columns)?;
    match &b.before {
        Some(before) => {
            let moved = moved_keys(spec, &rows, before, &b.ops)?;
            match moved {
                Some(m) => Ok(arrow_select::concat::concat_batches(schema, [&rows, &m])?),
                None => Ok(rows),
            }
        }
        None => Ok(rows),
    }
}

/// Rows deleting the old key of each update whose before-image key differs from its key.
fn moved_keys(
    spec: &StreamSpec,
    rows: &RecordBatch,
    before: &RecordBatch,
    ops: &[Op],
) -> Result<Option<RecordBatch>> {
    let key_idx: Vec<usize> = spec
        .key
        .iter()
        .map(|k| rows.schema().index_of(k))
        .collect::<std::result::Result<_, _>>()?;
    let keys: Vec<ArrayRef> = key_idx.iter().map(|&i| rows.column(i).clone()).collect();
    let cast: Vec<ArrayRef> = before
        .columns()
        .iter()
        .zip(&keys)
        .map(|(b, k)| arrow_cast::cast(b, k.data_type()))
        .collect::<std::result::Result<_, _>>()?;
    let conv = RowConverter::new(
        keys.iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect(),
    )?;
    let (new, old) = (conv.convert_columns(&keys)?, conv.convert_columns(&cast)?);
    let at: Vec<u32> = (0..rows.num_rows())
        .filter(|&r| {
            // A before-image that is NULL tells nothing: no move.
            ops[r] == Op::Update && cast.iter().all(|a| !a.is_null(r)) && old.row(r) != new.row(r)
        })
        .map(|r| r as u32)
        .collect();
    if at.is_empty() {
        return Ok(None);
    }
    let idx = arrow_array::UInt32Array::from(at);
    let taken = arrow_select::take::take_record_batch(rows, &idx)?;
    let mut columns = taken.columns().to_vec();
    for (&k, c) in key_idx.iter().zip(&cast) {
        columns[k] = arrow_select::take::take(c, &idx, None)?;
    }
    let op = rows.num_columns() - 2;
    columns[op] = Arc::new(UInt8Array::from(vec![Op::Delete as u8; idx.len()]));
    Ok(Some(RecordBatch::try_new(rows.schema(), columns)?))
}
