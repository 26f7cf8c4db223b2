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
//!
//! Layout: [`rule`] is the one rule (shared with the streamed pipeline), `input` gathers the
//! rows and their events, `winners` sorts them and keeps the latest of each key, `fill` fills
//! unsupplied cells; this file assembles the result ([`Deduped`]).

mod fill;
mod input;
pub(crate) mod rule;
#[cfg(test)]
mod tests;
mod winners;

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;

use self::fill::{Fill, FillFrom};
use self::input::{Event, Input, Keys};
use crate::error::Result;
use crate::locate::FileKind;
use crate::read::ChangeBatch;

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

impl Input {
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
