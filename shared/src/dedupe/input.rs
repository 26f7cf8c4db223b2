//! The in-memory input: every row of a commit's files gathered in file order, with what
//! orders its changes (kind, ordering values, file and position), its key (row-encoded, and as
//! plain integers for a single integer key), and its events: the row's own change, and for an
//! update that moved its row to another key, a delete of the old key at the same place.
//!
//! Invariants: rows are numbered globally in file order (`metas`, `starts`), never copied whole
//! (only key and ordering columns are concatenated); the first `metas.len()` events are the rows
//! themselves, in row order, the moves after them; a NULL key, or a change row without an
//! ordering value, is an input error naming its file, line and column.

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;

use super::FileChanges;
use super::rule::{Rank, order_converter};
use crate::error::{Error, InputError, Result};
use crate::locate::FileKind;
use crate::read::{Op, position};
use crate::types::int_values;

/// Where an event's key is: a row's own key, or a before-image (batch, row).
#[derive(Clone, Copy)]
pub(super) enum KeyRef {
    Row(u32),
    Before(u32, u32),
}

/// One change to one key: `row` gives its place in source order.
pub(super) struct Event {
    pub(super) key: KeyRef,
    pub(super) row: u32,
    pub(super) delete: bool,
}

/// Row metadata used to order changes of one key.
pub(super) struct Meta {
    pub(super) file: u32,
    pub(super) kind: FileKind,
    pub(super) pos: u64,
    pub(super) op: Op,
}

/// Every row of a commit's input, in file order, with what orders it.
pub(super) struct Input {
    pub(super) metas: Vec<Meta>,
    pub(super) batches: Vec<RecordBatch>,
    /// Before-images: (index of the batch's first row, their key columns).
    pub(super) befores: Vec<(usize, RecordBatch)>,
    /// File label and format, per file index: for messages.
    pub(super) labels: Vec<(String, crate::locate::FileFormat)>,
    /// Index of each batch's first row.
    pub(super) starts: Vec<usize>,
    /// Per row (global index) with unsupplied cells: their columns.
    pub(super) unsupplied: std::collections::BTreeMap<u32, Vec<usize>>,
}

/// The key columns of every row, and their row encoding (what events sort by).
pub(super) struct Keys {
    pub(super) idx: Vec<usize>,
    pub(super) converter: RowConverter,
    pub(super) rows: Rows,
    /// Before-image keys cast to the key types, and row-encoded, per before-image batch.
    pub(super) before_arrays: Vec<Vec<ArrayRef>>,
    pub(super) before_rows: Vec<Rows>,
    /// A single integer key's values, per row and per before-image batch: sorting compares
    /// them instead of row encodings (the common key; a third of dedupe's time was `memcmp`).
    pub(super) ints: Option<(Vec<i64>, Vec<Vec<i64>>)>,
}

impl Keys {
    pub(super) fn of(&self, e: &Event) -> arrow_row::Row<'_> {
        match e.key {
            KeyRef::Row(r) => self.rows.row(r as usize),
            KeyRef::Before(b, i) => self.before_rows[b as usize].row(i as usize),
        }
    }

    /// The order of two events' keys: the order of their row encodings.
    pub(super) fn cmp(&self, a: &Event, b: &Event) -> std::cmp::Ordering {
        match &self.ints {
            Some(ints) => int_key(ints, a).cmp(&int_key(ints, b)),
            None => self.of(a).cmp(&self.of(b)),
        }
    }
}

/// An event's value of a single integer key (`Keys::ints`).
pub(super) fn int_key((rows, befores): &(Vec<i64>, Vec<Vec<i64>>), e: &Event) -> i64 {
    match e.key {
        KeyRef::Row(r) => rows[r as usize],
        KeyRef::Before(b, i) => befores[b as usize][i as usize],
    }
}

/// The ordering columns of every row (concatenated) and their row encoding.
pub(super) struct Order {
    pub(super) columns: Vec<ArrayRef>,
    pub(super) rows: Option<Rows>,
}

impl Input {
    pub(super) fn gather(files: Vec<FileChanges>) -> Input {
        let mut input = Input {
            metas: Vec::new(),
            batches: Vec::new(),
            befores: Vec::new(),
            labels: files.iter().map(|f| (f.label.clone(), f.format)).collect(),
            starts: Vec::new(),
            unsupplied: Default::default(),
        };
        for (fi, f) in files.into_iter().enumerate() {
            for b in f.batches {
                let start = input.metas.len();
                input.starts.push(start);
                for (op, pos) in b.ops.iter().zip(&b.positions) {
                    input.metas.push(Meta {
                        file: fi as u32,
                        kind: f.kind,
                        pos: *pos,
                        op: *op,
                    });
                }
                if let Some(before) = b.before {
                    input.befores.push((start, before));
                }
                for (r, c) in b.unsupplied {
                    input
                        .unsupplied
                        .entry((start + r) as u32)
                        .or_default()
                        .push(c);
                }
                input.batches.push(b.data);
            }
        }
        input
    }

    /// Column `i` of every row. No copy of the whole input: only the key (and ordering)
    /// columns are concatenated; the winning rows are gathered from the batches at the end.
    pub(super) fn column(&self, schema: &SchemaRef, i: usize) -> Result<ArrayRef> {
        let parts: Vec<&dyn arrow_array::Array> =
            self.batches.iter().map(|b| b.column(i).as_ref()).collect();
        if parts.is_empty() {
            return Ok(arrow_array::new_empty_array(schema.field(i).data_type()));
        }
        Ok(arrow_select::concat::concat(&parts)?)
    }

    /// An input error at row `r`, column `column`.
    pub(super) fn error_at(&self, r: usize, column: &str, reason: &str) -> Error {
        let m = &self.metas[r];
        let (label, format) = &self.labels[m.file as usize];
        InputError::new(label, reason)
            .at(position(*format, m.pos))
            .column(column)
            .into()
    }

    pub(super) fn keys(&self, schema: &SchemaRef, key: &[String]) -> Result<Keys> {
        let idx: Vec<usize> = key
            .iter()
            .map(|k| {
                schema.index_of(k).map_err(|_| {
                    Error::Internal(format!("key column `{k}` missing from the batch"))
                })
            })
            .collect::<Result<_>>()?;
        let arrays: Vec<ArrayRef> = idx
            .iter()
            .map(|&i| self.column(schema, i))
            .collect::<Result<_>>()?;
        for (k, a) in key.iter().zip(&arrays) {
            if let Some(r) = (0..a.len()).find(|&r| a.is_null(r)) {
                return Err(self.error_at(r, k, "primary key value is NULL"));
            }
        }
        let converter = key_converter(&arrays)?;
        let rows = converter.convert_columns(&arrays)?;
        let mut before_rows = Vec::with_capacity(self.befores.len());
        let mut before_arrays = Vec::with_capacity(self.befores.len());
        for (_, before) in &self.befores {
            let cast: Vec<ArrayRef> = before
                .columns()
                .iter()
                .zip(&arrays)
                .map(|(b, k)| arrow_cast::cast(b, k.data_type()))
                .collect::<std::result::Result<_, _>>()?;
            before_rows.push(converter.convert_columns(&cast)?);
            before_arrays.push(cast);
        }
        let ints = match arrays.as_slice() {
            [a] => int_values(a).and_then(|rows| {
                let befores: Option<Vec<Vec<i64>>> =
                    before_arrays.iter().map(|b| int_values(&b[0])).collect();
                befores.map(|b| (rows, b))
            }),
            _ => None,
        };
        Ok(Keys {
            idx,
            converter,
            rows,
            before_arrays,
            before_rows,
            ints,
        })
    }

    pub(super) fn order(&self, schema: &SchemaRef, order_columns: &[String]) -> Result<Order> {
        let columns: Vec<ArrayRef> = order_columns
            .iter()
            .map(|c| {
                let i = schema.index_of(c).map_err(|_| {
                    Error::Config(format!("ordering column `{c}` is not in the file"))
                })?;
                self.column(schema, i)
            })
            .collect::<Result<_>>()?;
        for (c, a) in order_columns.iter().zip(&columns) {
            if let Some(r) =
                (0..a.len()).find(|&r| a.is_null(r) && self.metas[r].kind == FileKind::Cdc)
            {
                return Err(self.error_at(
                    r,
                    c,
                    "a change row has no value in an ordering column: its place among the \
                     changes of its key is unknown (set `bad_rows = \"quarantine\"` to set such \
                     rows aside)",
                ));
            }
        }
        let rows = if columns.is_empty() {
            None
        } else {
            let conv = order_converter(columns.iter().map(|c| c.data_type().clone()))?;
            Some(conv.convert_columns(&columns)?)
        };
        Ok(Order { columns, rows })
    }

    /// Every change as (key, row, is delete): the rows themselves, plus a delete of the old key
    /// for each update whose before-image key differs.
    pub(super) fn events(&self, keys: &Keys) -> Result<Vec<Event>> {
        let mut events: Vec<Event> = (0..self.metas.len())
            .map(|r| Event {
                key: KeyRef::Row(r as u32),
                row: r as u32,
                delete: self.metas[r].op == Op::Delete,
            })
            .collect();
        for (b, (start, before)) in self.befores.iter().enumerate() {
            let (old, cast) = (&keys.before_rows[b], &keys.before_arrays[b]);
            for i in 0..before.num_rows() {
                let r = start + i;
                // A before-image that is NULL (or not a key value) tells nothing: no move.
                if self.metas[r].op != Op::Update || cast.iter().any(|a| a.is_null(i)) {
                    continue;
                }
                if old.row(i) != keys.rows.row(r) {
                    events.push(Event {
                        key: KeyRef::Before(b as u32, i as u32),
                        row: r as u32,
                        delete: true,
                    });
                }
            }
        }
        Ok(events)
    }

    /// Is row `a` later than row `b` in source order?
    pub(super) fn later(&self, order: Option<&Rows>, a: usize, b: usize) -> bool {
        self.rank(order, a) > self.rank(order, b)
    }

    /// Row `r`'s place among the changes of its key ([`super::rule`]).
    fn rank<'o>(&self, order: Option<&'o Rows>, r: usize) -> Rank<'o, (u32, u64)> {
        let m = &self.metas[r];
        Rank {
            kind: m.kind,
            order: order.map(|o| o.row(r)),
            place: (m.file, m.pos),
        }
    }

    /// (batch, row in it) of a row.
    pub(super) fn at(&self, r: u32) -> (usize, usize) {
        let r = r as usize;
        let b = self.starts.partition_point(|s| *s <= r) - 1;
        (b, r - self.starts[b])
    }
}

/// Row encoding of key columns: byte-comparable, so keys hash and sort without per-type code.
fn key_converter(key_arrays: &[ArrayRef]) -> Result<RowConverter> {
    Ok(RowConverter::new(
        key_arrays
            .iter()
            .map(|a| SortField::new(a.data_type().clone()))
            .collect(),
    )?)
}
