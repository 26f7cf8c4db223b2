//! dedupe: of all changes to one primary key within a commit, keep the last.
//!
//! "Last" is decided by, in order: full-load rows before change rows; the ordering columns
//! ([`crate::config::TableConfig::ordering_columns`]: `ordering_column`, the change-sequence
//! column `AR_H_CHANGE_SEQ`, the commit-timestamp column, those configured, first decides); the
//! file's place in DMS order; the row's place in its file. A change row without a value in an
//! ordering column cannot be placed and is refused (a full-load row may lack one: DMS leaves
//! the change sequence empty there). Iceberg does not apply a delete to a data file
//! of the same sequence number, so two versions of one key in one commit would both survive:
//! deduplicating here is what makes a commit correct, not an optimisation.
//!
//! A `U` whose before-image key (`BI_<key>`) differs from its key moved the row: it becomes a
//! delete of the old key and an upsert of the new one, at the same place in the order.
//!
//! A column an update did not supply (`no_sup_value`) keeps the key's current value: the
//! value of the latest earlier change of the key in the same commit that supplied it, else the
//! table's (read by the lookup, [`Deduped::from_table`]).

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::SchemaRef;

use crate::error::{Error, InputError, Result};
use crate::locate::FileKind;
use crate::read::{ChangeBatch, Op, position};
use crate::types::int_values;

/// One input file's rows, already aligned to the commit's schema.
pub(crate) struct FileChanges {
    pub label: String,
    pub kind: FileKind,
    pub format: crate::locate::FileFormat,
    pub batches: Vec<ChangeBatch>,
}

/// What a commit applies.
#[derive(Debug)]
pub(crate) struct Deduped {
    /// Rows to write (last change per key is I or U), sorted by key.
    pub upserts: RecordBatch,
    /// Where each row of `upserts` comes from: (file index, position in that file). A large
    /// input is deduplicated on its key columns alone, then its winning rows are read again
    /// from these positions.
    pub upsert_sources: Vec<(u32, u64)>,
    /// Every key this commit touches, sorted: upserted keys and deleted keys.
    pub keys: RecordBatch,
    /// Per row of `keys`: true if upserted, false if deleted.
    pub upserted: BooleanArray,
    /// Per ordering column, per row of `keys`: the winning change's value, to compare with
    /// the row the table holds (empty without ordering columns).
    pub order_values: Vec<ArrayRef>,
    /// Per row of `keys`: the winning change comes from a full-load file.
    pub from_load: Vec<bool>,
    /// Cells of `upserts` an update did not supply and no earlier change of its key in this
    /// commit did: (row of `upserts`, column), in row order. NULL until filled with the value
    /// of the key's live row in the table.
    pub from_table: Vec<(usize, usize)>,
    /// Per row of `upserts`: its row in `keys`.
    pub upsert_keys: Vec<usize>,
    /// Rows read from the files.
    pub rows_read: usize,
}

/// Where an unsupplied cell of a winning update takes its value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FillFrom {
    /// An earlier change of the key in this commit (its row).
    Row(u32),
    /// The key's live row in the table.
    Table,
    /// Nothing: the key was deleted before the update in this commit.
    Null,
}

/// An unsupplied cell of a winner (by index into the winners).
struct Fill {
    winner: usize,
    column: usize,
    from: FillFrom,
}

/// Where an event's key is: a row's own key, or a before-image (batch, row).
#[derive(Clone, Copy)]
enum KeyRef {
    Row(u32),
    Before(u32, u32),
}

/// One change to one key: `row` gives its place in source order.
struct Event {
    key: KeyRef,
    row: u32,
    delete: bool,
}

/// Row metadata used to order changes of one key.
struct Meta {
    file: u32,
    kind: FileKind,
    pos: u64,
    op: Op,
}

/// `only_keys_of`: keep only keys these files (indexes into `files`) touch. A file that arrives
/// after later files were applied is re-merged this way: its changes and every later change
/// to the same keys, in source order, decide those keys' rows.
pub(crate) fn dedupe(
    schema: SchemaRef,
    files: Vec<FileChanges>,
    key: &[String],
    order_columns: &[String],
    only_keys_of: Option<&[usize]>,
) -> Result<Deduped> {
    let input = Input::gather(files);
    let keys = input.keys(&schema, key)?;
    let order = input.order(&schema, order_columns)?;
    let events = input.events(&keys)?;
    let (winners, fills) = input.winners(&events, &keys, order.rows.as_ref(), only_keys_of)?;
    input.assemble(&schema, &keys, &order.columns, &winners, &fills)
}

/// Every row of a commit's input, in file order, with what orders it.
struct Input {
    metas: Vec<Meta>,
    batches: Vec<RecordBatch>,
    /// Before-images: (index of the batch's first row, their key columns).
    befores: Vec<(usize, RecordBatch)>,
    /// File label and format, per file index: for messages.
    labels: Vec<(String, crate::locate::FileFormat)>,
    /// Index of each batch's first row.
    starts: Vec<usize>,
    /// Per row (global index) with unsupplied cells: their columns.
    unsupplied: std::collections::BTreeMap<u32, Vec<usize>>,
}

/// The key columns of every row, and their row encoding (what events sort by).
struct Keys {
    idx: Vec<usize>,
    converter: RowConverter,
    rows: Rows,
    /// Before-image keys cast to the key types, and row-encoded, per before-image batch.
    before_arrays: Vec<Vec<ArrayRef>>,
    before_rows: Vec<Rows>,
    /// A single integer key's values, per row and per before-image batch: sorting compares
    /// them instead of row encodings (the common key; a third of dedupe's time was `memcmp`).
    ints: Option<(Vec<i64>, Vec<Vec<i64>>)>,
}

impl Keys {
    fn of(&self, e: &Event) -> arrow_row::Row<'_> {
        match e.key {
            KeyRef::Row(r) => self.rows.row(r as usize),
            KeyRef::Before(b, i) => self.before_rows[b as usize].row(i as usize),
        }
    }

    /// The order of two events' keys: the order of their row encodings.
    fn cmp(&self, a: &Event, b: &Event) -> std::cmp::Ordering {
        match &self.ints {
            Some(ints) => int_key(ints, a).cmp(&int_key(ints, b)),
            None => self.of(a).cmp(&self.of(b)),
        }
    }
}

/// An event's value of a single integer key (`Keys::ints`).
fn int_key((rows, befores): &(Vec<i64>, Vec<Vec<i64>>), e: &Event) -> i64 {
    match e.key {
        KeyRef::Row(r) => rows[r as usize],
        KeyRef::Before(b, i) => befores[b as usize][i as usize],
    }
}

/// The ordering columns of every row (concatenated) and their row encoding.
struct Order {
    columns: Vec<ArrayRef>,
    rows: Option<Rows>,
}

impl Input {
    fn gather(files: Vec<FileChanges>) -> Input {
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
    fn column(&self, schema: &SchemaRef, i: usize) -> Result<ArrayRef> {
        let parts: Vec<&dyn arrow_array::Array> =
            self.batches.iter().map(|b| b.column(i).as_ref()).collect();
        if parts.is_empty() {
            return Ok(arrow_array::new_empty_array(schema.field(i).data_type()));
        }
        Ok(arrow_select::concat::concat(&parts)?)
    }

    /// An input error at row `r`, column `column`.
    fn error_at(&self, r: usize, column: &str, reason: &str) -> Error {
        let m = &self.metas[r];
        let (label, format) = &self.labels[m.file as usize];
        InputError::new(label, reason)
            .at(position(*format, m.pos))
            .column(column)
            .into()
    }

    fn keys(&self, schema: &SchemaRef, key: &[String]) -> Result<Keys> {
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

    fn order(&self, schema: &SchemaRef, order_columns: &[String]) -> Result<Order> {
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
            let conv = RowConverter::new(
                columns
                    .iter()
                    .map(|c| SortField::new(c.data_type().clone()))
                    .collect(),
            )?;
            Some(conv.convert_columns(&columns)?)
        };
        Ok(Order { columns, rows })
    }

    /// Every change as (key, row, is delete): the rows themselves, plus a delete of the old key
    /// for each update whose before-image key differs.
    fn events(&self, keys: &Keys) -> Result<Vec<Event>> {
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
    fn later(&self, order: Option<&Rows>, a: usize, b: usize) -> bool {
        let (ma, mb) = (&self.metas[a], &self.metas[b]);
        if ma.kind != mb.kind {
            return ma.kind > mb.kind;
        }
        if let Some(o) = order {
            let (oa, ob) = (o.row(a), o.row(b));
            if oa != ob {
                return oa > ob;
            }
        }
        (ma.file, ma.pos) > (mb.file, mb.pos)
    }

    /// The last event of each key (restricted to keys `only_keys_of` touch), in key order, and
    /// where the unsupplied cells of those that have some take their values from.
    fn winners<'e>(
        &self,
        events: &'e [Event],
        keys: &Keys,
        order: Option<&Rows>,
        only_keys_of: Option<&[usize]>,
    ) -> Result<(Vec<&'e Event>, Vec<Fill>)> {
        // Sort by key; the last change in source order wins each key. Sorting (rather than
        // hashing) keeps memory to one small entry per change.
        let sorted: Vec<&Event> = match &keys.ints {
            // A single integer key: sorting plain (value, index) pairs is several times faster
            // than comparing through the events.
            Some(ints) => {
                let mut pairs: Vec<(i64, u32)> = events
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (int_key(ints, e), i as u32))
                    .collect();
                pairs.sort_unstable();
                pairs.iter().map(|&(_, i)| &events[i as usize]).collect()
            }
            None => {
                let mut sorted: Vec<&Event> = events.iter().collect();
                sorted.sort_unstable_by(|a, b| keys.cmp(a, b));
                sorted
            }
        };
        let mut winners = Vec::new();
        let mut fills = Vec::new();
        let mut group_start = 0;
        for (i, e) in sorted.iter().enumerate() {
            if sorted
                .get(i + 1)
                .is_some_and(|n| keys.cmp(n, e) == std::cmp::Ordering::Equal)
            {
                continue;
            }
            let group = &sorted[group_start..=i];
            group_start = i + 1;
            let wanted = only_keys_of.is_none_or(|files| {
                group
                    .iter()
                    .any(|g| files.contains(&(self.metas[g.row as usize].file as usize)))
            });
            if !wanted {
                continue;
            }
            // Rows differ in (file, position): one of any two is later.
            let last = group.iter().copied().reduce(|w, g| {
                if self.later(order, g.row as usize, w.row as usize) {
                    g
                } else {
                    w
                }
            });
            if let Some(w) = last
                && !w.delete
                && let Some(columns) = self.unsupplied.get(&w.row)
            {
                for (column, from) in self.fill_from(group, w, columns, order, events)? {
                    fills.push(Fill {
                        winner: winners.len(),
                        column,
                        from,
                    });
                }
            }
            winners.extend(last);
        }
        Ok((winners, fills))
    }

    /// For each of `columns` the winning update `w` did not supply: the latest earlier change
    /// of its key (`group`) that did, the table when none did, nothing after a delete.
    fn fill_from(
        &self,
        group: &[&Event],
        w: &Event,
        columns: &[usize],
        order: Option<&Rows>,
        events: &[Event],
    ) -> Result<Vec<(usize, FillFrom)>> {
        // An update that moved the row to this key replaced the old key's row, which this
        // key's lookup does not find. (Moves are the events after one per row.)
        if events[self.metas.len()..].iter().any(|e| e.row == w.row) {
            return Err(self.error_at(
                w.row as usize,
                "Op",
                "an update that changes the key leaves columns unsupplied (the `no_sup_value` \
                 marker): the row it replaces is under the old key; log every column of the \
                 table at the source (full supplemental logging) for such updates",
            ));
        }
        let mut earlier: Vec<&Event> = group
            .iter()
            .copied()
            .filter(|e| e.row != w.row && self.later(order, w.row as usize, e.row as usize))
            .collect();
        // Latest first.
        earlier.sort_by(|a, b| {
            if self.later(order, a.row as usize, b.row as usize) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        });
        Ok(columns
            .iter()
            .map(|&c| {
                for e in &earlier {
                    if e.delete {
                        return (c, FillFrom::Null);
                    }
                    let unsupplied = self
                        .unsupplied
                        .get(&e.row)
                        .is_some_and(|cols| cols.contains(&c));
                    if !unsupplied {
                        return (c, FillFrom::Row(e.row));
                    }
                }
                (c, FillFrom::Table)
            })
            .collect())
    }

    /// (batch, row in it) of a row.
    fn at(&self, r: u32) -> (usize, usize) {
        let r = r as usize;
        let b = self.starts.partition_point(|s| *s <= r) - 1;
        (b, r - self.starts[b])
    }

    fn assemble(
        &self,
        schema: &SchemaRef,
        keys: &Keys,
        order_columns: &[ArrayRef],
        winners: &[&Event],
        fills: &[Fill],
    ) -> Result<Deduped> {
        // (batch, row) of each winning upsert, in key order.
        let upsert_at: Vec<(usize, usize)> = winners
            .iter()
            .filter(|e| !e.delete)
            .map(|e| self.at(e.row))
            .collect();
        // Per winner: its row in `upserts` (deletes have none).
        let mut upsert_of = Vec::with_capacity(winners.len());
        let mut upsert_keys = Vec::with_capacity(upsert_at.len());
        for (k, e) in winners.iter().enumerate() {
            upsert_of.push(upsert_keys.len());
            if !e.delete {
                upsert_keys.push(k);
            }
        }
        let mut upserts = if self.batches.is_empty() {
            RecordBatch::new_empty(schema.clone())
        } else {
            let refs: Vec<&RecordBatch> = self.batches.iter().collect();
            arrow_select::interleave::interleave_record_batch(&refs, &upsert_at)?
        };
        let mut from_table = Vec::new();
        if !fills.is_empty() {
            // Unsupplied cells take the value of the earlier change that supplied it.
            let mut columns = upserts.columns().to_vec();
            let mut by_column: std::collections::BTreeMap<usize, Vec<(usize, usize)>> =
                Default::default();
            for f in fills {
                let row = upsert_of[f.winner];
                match f.from {
                    FillFrom::Row(r) => {
                        by_column
                            .entry(f.column)
                            .or_insert_with(|| upsert_at.clone())[row] = self.at(r);
                    }
                    FillFrom::Table => from_table.push((row, f.column)),
                    FillFrom::Null => {}
                }
            }
            for (c, at) in by_column {
                let parts: Vec<&dyn Array> =
                    self.batches.iter().map(|b| b.column(c).as_ref()).collect();
                columns[c] = arrow_select::interleave::interleave(&parts, &at)?;
            }
            upserts = RecordBatch::try_new(upserts.schema(), columns)?;
            from_table.sort_unstable();
        }
        let upsert_sources: Vec<(u32, u64)> = winners
            .iter()
            .filter(|e| !e.delete)
            .map(|e| {
                (
                    self.metas[e.row as usize].file,
                    self.metas[e.row as usize].pos,
                )
            })
            .collect();
        let parsed = keys
            .converter
            .convert_rows(winners.iter().map(|e| keys.of(e)))?;
        let key_schema = Arc::new(arrow_schema::Schema::new(
            keys.idx
                .iter()
                .map(|&i| schema.field(i).clone())
                .collect::<Vec<_>>(),
        ));
        let winner_rows = UInt32Array::from_iter_values(winners.iter().map(|e| e.row));
        Ok(Deduped {
            upserts,
            upsert_sources,
            keys: RecordBatch::try_new(key_schema, parsed)?,
            upserted: BooleanArray::from(winners.iter().map(|e| !e.delete).collect::<Vec<_>>()),
            order_values: order_columns
                .iter()
                .map(|c| arrow_select::take::take(c, &winner_rows, None))
                .collect::<std::result::Result<Vec<_>, _>>()?,
            from_load: winners
                .iter()
                .map(|e| self.metas[e.row as usize].kind == FileKind::Load)
                .collect(),
            from_table,
            upsert_keys,
            rows_read: self.metas.len(),
        })
    }
}

impl Deduped {
    /// What a lookup needs to leave rows newer than their change alone, for a table whose
    /// schema is `schema` (before this commit); `None` without ordering columns.
    pub(crate) fn stale_check(
        &self,
        schema: &iceberg::spec::Schema,
        order_columns: &[String],
    ) -> Option<crate::lookup::StaleCheck> {
        if order_columns.is_empty() || self.order_values.len() != order_columns.len() {
            return None;
        }
        Some(crate::lookup::StaleCheck {
            field_ids: order_columns
                .iter()
                .map(|c| schema.field_id_by_name(c))
                .collect(),
            values: self.order_values.clone(),
            from_load: self.from_load.clone(),
            newer_snapshots: Default::default(),
        })
    }
}

/// Row encoding of key columns: byte-comparable, so keys hash and sort without per-type code.
pub(crate) fn key_converter(key_arrays: &[ArrayRef]) -> Result<RowConverter> {
    Ok(RowConverter::new(
        key_arrays
            .iter()
            .map(|a| SortField::new(a.data_type().clone()))
            .collect(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
            Field::new("seq", DataType::Utf8, true),
        ]))
    }

    fn batch(
        rows: &[(i64, &str, Option<&str>, Op)],
        before: Option<Vec<Option<i64>>>,
    ) -> ChangeBatch {
        let s = schema();
        let data = RecordBatch::try_new(
            s,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap();
        ChangeBatch {
            data,
            ops: rows.iter().map(|r| r.3).collect(),
            positions: (2..2 + rows.len() as u64).collect(),
            rejected: vec![],
            unsupplied: vec![],
            before: before.map(|b| {
                RecordBatch::try_new(
                    Arc::new(Schema::new(vec![Field::new("key0", DataType::Int64, true)])),
                    vec![Arc::new(Int64Array::from(b))],
                )
                .unwrap()
            }),
        }
    }

    fn file(kind: FileKind, b: ChangeBatch) -> FileChanges {
        FileChanges {
            label: "f.csv".into(),
            kind,
            format: crate::locate::FileFormat::Csv,
            batches: vec![b],
        }
    }

    /// Unsupplied cells (column `v` = 1, `seq` = 2) take the latest earlier change's value in
    /// source order, the table's when no change in the commit supplied it, and nothing after a
    /// delete of the key.
    #[test]
    fn unsupplied_cells_take_the_latest_supplied_value() {
        use arrow_array::cast::AsArray;
        let mut b = batch(
            &[
                (1, "a", Some("s1"), Op::Update),
                (1, "x", Some("s2"), Op::Update), // v unsupplied
                (1, "b", Some("x"), Op::Update),  // seq unsupplied
                (2, "x", Some("x"), Op::Update),  // both unsupplied: the table's
                (3, "c", Some("s3"), Op::Insert),
                (3, "x", Some("x"), Op::Delete),
                (3, "x", Some("t3"), Op::Update), // v unsupplied after a delete
            ],
            None,
        );
        b.unsupplied = vec![(1, 1), (2, 2), (3, 1), (3, 2), (6, 1)];
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, b)],
            &["id".into()],
            &[],
            None,
        )
        .unwrap();
        let rows: Vec<(i64, Option<String>, Option<String>)> = (0..d.upserts.num_rows())
            .map(|r| {
                let s = |c: usize| {
                    let a = d.upserts.column(c).as_string::<i32>();
                    (!a.is_null(r)).then(|| a.value(r).to_string())
                };
                (
                    d.upserts
                        .column(0)
                        .as_primitive::<arrow_array::types::Int64Type>()
                        .value(r),
                    s(1),
                    s(2),
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (1, Some("b".into()), Some("s2".into())),
                (2, Some("x".into()), Some("x".into())),
                (3, Some("x".into()), Some("t3".into())),
            ]
        );
        // Key 2's cells wait for the table's row (its data is still the unsupplied text,
        // filled by the lookup); key 3's `v` is unknown after the delete: not from the table.
        assert_eq!(d.from_table, vec![(1, 1), (1, 2)]);
        assert_eq!(d.upsert_keys, vec![0, 1, 2]);
    }

    type Upserts = Vec<(i64, String)>;
    type Keys = Vec<(i64, bool)>;

    fn result(d: &Deduped) -> (Upserts, Keys) {
        let ids = d
            .upserts
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let vs = d
            .upserts
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let up = (0..ids.len())
            .map(|i| (ids.value(i), vs.value(i).to_string()))
            .collect();
        let ks = d
            .keys
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let keys = (0..ks.len())
            .map(|i| (ks.value(i), d.upserted.value(i)))
            .collect();
        (up, keys)
    }

    #[test]
    fn last_change_per_key_wins_in_row_order() {
        use Op::*;
        let b = batch(
            &[
                (2, "a", None, Insert),
                (1, "x", None, Insert),
                (2, "b", None, Update),
                (1, "x", None, Delete),
                (3, "c", None, Delete),
                (3, "d", None, Insert),
            ],
            None,
        );
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, b)],
            &["id".into()],
            &[],
            None,
        )
        .unwrap();
        let (up, keys) = result(&d);
        assert_eq!(up, vec![(2, "b".into()), (3, "d".into())]);
        assert_eq!(keys, vec![(1, false), (2, true), (3, true)]);
        assert_eq!(d.rows_read, 6);
    }

    #[test]
    fn change_sequence_beats_row_order() {
        use Op::*;
        let b = batch(
            &[
                (1, "new", Some("0002"), Update),
                (1, "old", Some("0001"), Update),
            ],
            None,
        );
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, b)],
            &["id".into()],
            &["seq".to_string()],
            None,
        )
        .unwrap();
        assert_eq!(result(&d).0, vec![(1, "new".into())]);
    }

    #[test]
    fn load_rows_come_before_changes_and_files_in_order() {
        use Op::*;
        let cdc = batch(&[(1, "cdc", Some("0001"), Update)], None);
        let load = batch(&[(1, "load", None, Insert)], None);
        // The LOAD file is listed second but is still older.
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, cdc), file(FileKind::Load, load)],
            &["id".into()],
            &["seq".to_string()],
            None,
        )
        .unwrap();
        assert_eq!(result(&d).0, vec![(1, "cdc".into())]);
        let f1 = batch(&[(1, "first", None, Update)], None);
        let f2 = batch(&[(1, "second", None, Update)], None);
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, f1), file(FileKind::Cdc, f2)],
            &["id".into()],
            &[],
            None,
        )
        .unwrap();
        assert_eq!(result(&d).0, vec![(1, "second".into())]);
    }

    #[test]
    fn late_file_rewrites_only_its_keys_in_source_order() {
        use Op::*;
        // The late file (index 0) touches 1 and 2; a later, already applied file touches 2 and 3.
        let late = batch(
            &[(1, "late", None, Update), (2, "late", None, Update)],
            None,
        );
        let later = batch(
            &[(2, "later", None, Delete), (3, "later", None, Insert)],
            None,
        );
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, late), file(FileKind::Cdc, later)],
            &["id".into()],
            &[],
            Some(&[0]),
        )
        .unwrap();
        let (up, keys) = result(&d);
        assert_eq!(up, vec![(1, "late".into())]);
        assert_eq!(keys, vec![(1, true), (2, false)]);
    }

    #[test]
    fn before_image_key_change_deletes_the_old_key() {
        use Op::*;
        let b = batch(
            &[
                (1, "a", None, Insert),
                (5, "moved", None, Update),
                (7, "b", None, Insert),
            ],
            Some(vec![None, Some(1), Some(7)]),
        );
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, b)],
            &["id".into()],
            &[],
            None,
        )
        .unwrap();
        let (up, keys) = result(&d);
        assert_eq!(up, vec![(5, "moved".into()), (7, "b".into())]);
        assert_eq!(keys, vec![(1, false), (5, true), (7, true)]);
        // The old key re-used later in the file wins over the move.
        let b = batch(
            &[(5, "moved", None, Update), (1, "again", None, Insert)],
            Some(vec![Some(1), None]),
        );
        let d = dedupe(
            schema(),
            vec![file(FileKind::Cdc, b)],
            &["id".into()],
            &[],
            None,
        )
        .unwrap();
        assert_eq!(result(&d).0, vec![(1, "again".into()), (5, "moved".into())]);
    }

    #[test]
    fn null_key_is_an_input_error() {
        let s = schema();
        let data = RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(StringArray::from(vec![None::<&str>, None])),
            ],
        )
        .unwrap();
        let b = ChangeBatch {
            data,
            ops: vec![Op::Insert; 2],
            positions: vec![2, 3],
            before: None,
            rejected: vec![],
            unsupplied: vec![],
        };
        let e = dedupe(s, vec![file(FileKind::Load, b)], &["id".into()], &[], None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 3") && e.contains("`id`") && e.contains("NULL"),
            "{e}"
        );
    }

    proptest::proptest! {
        /// Whatever the changes, files and ordering values, each key's winner is its last
        /// change in source order (kind, then the ordering column, then file and line), keys in
        /// order, for an integer key (its fast path) and a text key alike.
        #[test]
        fn the_last_change_of_each_key_wins(
            files in proptest::collection::vec(
                (
                    proptest::bool::ANY,
                    proptest::collection::vec((0i64..12, 0u8..3, proptest::option::of(0u8..6)), 1..40),
                ),
                1..4,
            ),
            ordered in proptest::bool::ANY,
        ) {
            let schema = Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("sid", DataType::Utf8, true),
                Field::new("v", DataType::Utf8, true),
                Field::new("seq", DataType::Utf8, true),
            ]));
            let ops = [Op::Insert, Op::Update, Op::Delete];
            // Load rows need no ordering value; change rows always have one when ordered.
            // Per key: the rank (kind, ordering value, file, line) of its latest change, and
            // its row's value unless it is a delete.
            type Rank = (FileKind, Option<String>, usize, u64);
            let mut model: std::collections::BTreeMap<i64, (Rank, Option<String>)> =
                Default::default();
            let mut inputs = Vec::new();
            for (fi, (load, rows)) in files.iter().enumerate() {
                let kind = if *load { FileKind::Load } else { FileKind::Cdc };
                let seq = |s: Option<u8>| match (ordered, kind, s) {
                    (false, _, _) => None,
                    (true, FileKind::Load, s) => s.map(|s| format!("s{s}")),
                    (true, _, s) => Some(format!("s{}", s.unwrap_or(0))),
                };
                let data = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| format!("{:03}", r.0)))),
                        Arc::new(StringArray::from_iter_values((0..rows.len()).map(|i| format!("{fi}.{i}")))),
                        Arc::new(StringArray::from_iter(rows.iter().map(|r| seq(r.2)))),
                    ],
                )
                .unwrap();
                for (i, r) in rows.iter().enumerate() {
                    let op = if *load { Op::Insert } else { ops[r.1 as usize] };
                    let rank = (kind, seq(r.2), fi, 2 + i as u64);
                    let value = (op != Op::Delete).then(|| format!("{fi}.{i}"));
                    if model.get(&r.0).is_none_or(|(best, _)| rank > *best) {
                        model.insert(r.0, (rank, value));
                    }
                }
                inputs.push(FileChanges {
                    label: format!("f{fi}.csv"),
                    kind,
                    format: crate::locate::FileFormat::Csv,
                    batches: vec![ChangeBatch {
                        data,
                        ops: rows
                            .iter()
                            .map(|r| if *load { Op::Insert } else { ops[r.1 as usize] })
                            .collect(),
                        positions: (2..2 + rows.len() as u64).collect(),
                        rejected: vec![],
                        unsupplied: vec![],
                        before: None,
                    }],
                });
            }
            let expected: Vec<(i64, Option<String>)> =
                model.into_iter().map(|(k, (_, v))| (k, v)).collect();
            let order: Vec<String> = if ordered { vec!["seq".into()] } else { vec![] };
            for key in ["id", "sid"] {
                let files = inputs
                    .iter()
                    .map(|f: &FileChanges| FileChanges {
                        label: f.label.clone(),
                        kind: f.kind,
                        format: f.format,
                        batches: f.batches.clone(),
                    })
                    .collect();
                let d = dedupe(schema.clone(), files, &[key.into()], &order, None).unwrap();
                let ks = arrow_cast::cast(d.keys.column(0), &DataType::Utf8).unwrap();
                let ks = ks.as_any().downcast_ref::<StringArray>().unwrap();
                let vs = d.upserts.column(2).as_any().downcast_ref::<StringArray>().unwrap();
                let mut upserts = (0..vs.len()).map(|i| vs.value(i).to_string());
                let got: Vec<(i64, Option<String>)> = (0..ks.len())
                    .map(|i| {
                        let k: i64 = ks.value(i).parse().unwrap();
                        (k, d.upserted.value(i).then(|| upserts.next().unwrap()))
                    })
                    .collect();
                proptest::prop_assert_eq!(&got, &expected, "key {}", key);
            }
        }
    }
}
