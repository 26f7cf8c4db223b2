//! Key-order detection: whether the rows come in key order (then they go straight through,
//! unsorted), and for a single integer key nearly in order, the rows out of order set aside.
//!
//! Invariants: a row goes straight through only at or above the highest key passed before it,
//! so the rows that pass are in key order; every key passed is kept ([`PassedKeys`]), and the
//! rows set aside are written apart only if none shares a key with a row passed (checked by the
//! driver once they are sorted), else the input starts over through the sorter. Keys are
//! compared through the one key codec, [`crate::spill::KeyCodec`].

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{BooleanArray, RecordBatch};
use arrow_row::OwnedRow;
use arrow_schema::{DataType, SchemaRef};

use super::StreamSpec;
use crate::error::{Error, Result};
use crate::spill::{BatchKeys, KeyCodec, SortSpec, Sorter};

/// Rows out of key order in an input that is otherwise in order (a long-lived table unloaded
/// in its heap's order: most rows in key order, the updated ones wherever there was room).
/// The rows in order go straight through as before; a row whose key is below the highest key
/// passed so far is set aside, sorted apart (spilled past the sort budget) and written after
/// the others as data files of its own, so the cost follows the disorder, not the input. The
/// keys passed are kept (a byte or two each) to prove that no row set aside shares a key with
/// one passed: where one does (a key repeated across the disorder), or where too much is out of
/// order (random keys), the input starts over through the sorter as before. For a single
/// 64-bit integer key (serial keys, the ones that come nearly in order).
pub(super) struct SetAside {
    codec: KeyCodec,
    highest: Option<i64>,
    pub(super) passed: PassedKeys,
    pub(super) sorter: Sorter,
    /// Rows set aside.
    pub(super) rows: usize,
    /// The last rows read and their keys, undecided until the rows after them are read.
    held: Option<(RecordBatch, Vec<i64>)>,
}

/// Rows after a row that decide whether it was moved ahead of its place: most of them below it.
const LOOK_AHEAD: usize = 16;

/// Set aside more than one row in this many (after [`SET_ASIDE_AFTER`] rows): the input is not
/// nearly in order; sorting it whole costs less than passing part of it.
pub(super) const SET_ASIDE_LIMIT: usize = 4;
const SET_ASIDE_AFTER: usize = 64 * 1024;

impl SetAside {
    pub(super) fn new(
        spec: &StreamSpec,
        schema: &SchemaRef,
        key_idx: &[usize],
        seq: usize,
    ) -> Result<Option<SetAside>> {
        if !matches!(key_idx, [k] if schema.field(*k).data_type() == &DataType::Int64) {
            return Ok(None);
        }
        Ok(Some(SetAside {
            codec: KeyCodec::keys(schema, key_idx)?,
            highest: None,
            passed: PassedKeys::default(),
            sorter: Sorter::new(
                schema.clone(),
                SortSpec {
                    key: key_idx.to_vec(),
                    seq,
                },
                spec.sort_budget,
                &spec.spool,
            )?,
            rows: 0,
            held: None,
        }))
    }

    /// The rows decided so far that continue the key order (the others are set aside): all
    /// but the last [`LOOK_AHEAD`] rows, which wait for the rows after them.
    pub(super) fn split(&mut self, b: RecordBatch) -> Result<Vec<RecordBatch>> {
        let BatchKeys::Ints { keys: new_keys, .. } = self.codec.encode(&b)? else {
            return Err(Error::Internal("set-aside keys are not integers".into()));
        };
        let (held, mut keys) = match self.held.take() {
            Some((h, k)) => (Some(h), k),
            None => (None, Vec::new()),
        };
        keys.extend_from_slice(&new_keys);
        let rows = match held {
            // The held rows and this batch, as one (a copy only of rows a decision needs next to
            // each other: the held ones and a batch shorter than the look-ahead).
            Some(h) if b.num_rows() < LOOK_AHEAD => {
                vec![arrow_select::concat::concat_batches(&b.schema(), [&h, &b])?]
            }
            Some(h) => vec![h, b],
            None => vec![b],
        };
        let decided = keys.len().saturating_sub(LOOK_AHEAD);
        let pass = self.decide(&keys, decided);
        let mut out = Vec::new();
        let mut at = 0usize;
        let mut rest: Vec<RecordBatch> = Vec::new();
        for part in rows {
            let n = part.num_rows();
            let here = decided.saturating_sub(at).min(n);
            if here > 0 {
                out.extend(self.route(&part.slice(0, here), &pass[at..at + here])?);
            }
            if here < n {
                rest.push(part.slice(here, n - here));
            }
            at += n;
        }
        let rest = match rest.len() {
            0 => None,
            1 => rest.pop(),
            _ => Some(arrow_select::concat::concat_batches(
                &rest[0].schema(),
                &rest,
            )?),
        };
        self.held = rest.map(|r| (r, keys[decided..].to_vec()));
        Ok(out)
    }

    /// The held rows, decided with what follows them (nothing: the input ended).
    pub(super) fn finish_split(&mut self) -> Result<Vec<RecordBatch>> {
        let Some((rows, keys)) = self.held.take() else {
            return Ok(Vec::new());
        };
        let pass = self.decide(&keys, keys.len());
        self.route(&rows, &pass)
    }

    /// Whether each of the first `upto` of `keys` goes straight through: at or above the highest
    /// key passed, and not a row moved ahead of its place (most of the rows after it smaller).
    fn decide(&mut self, keys: &[i64], upto: usize) -> Vec<bool> {
        (0..upto)
            .map(|i| {
                let k = keys[i];
                let ahead = &keys[i + 1..(i + 1 + LOOK_AHEAD).min(keys.len())];
                let below = ahead.iter().filter(|&&x| x < k).count();
                let pass = self.highest.is_none_or(|h| k >= h) && below * 2 <= ahead.len();
                if pass {
                    self.highest = Some(k);
                    self.passed.push(k);
                }
                pass
            })
            .collect()
    }

    /// The rows of `b` that `pass`; the others to the sorter.
    fn route(&mut self, b: &RecordBatch, pass: &[bool]) -> Result<Vec<RecordBatch>> {
        if pass.iter().all(|p| *p) {
            return Ok(vec![b.clone()]);
        }
        let aside: BooleanArray = pass.iter().map(|p| Some(!p)).collect();
        let aside = arrow_select::filter::filter_record_batch(b, &aside)?;
        self.rows += aside.num_rows();
        self.sorter.push(aside)?;
        let passing =
            arrow_select::filter::filter_record_batch(b, &BooleanArray::from(pass.to_vec()))?;
        Ok(if passing.num_rows() > 0 {
            vec![passing]
        } else {
            Vec::new()
        })
    }

    pub(super) fn too_many(&self) -> bool {
        let seen = self.rows + self.passed.rows;
        seen >= SET_ASIDE_AFTER && self.rows * SET_ASIDE_LIMIT > seen
    }
}

/// Ascending keys as varint deltas: a byte for each key of a serial sequence.
#[derive(Default)]
pub(super) struct PassedKeys {
    bytes: Vec<u8>,
    last: i64,
    pub(super) rows: usize,
}

impl PassedKeys {
    pub(super) fn push(&mut self, k: i64) {
        let mut d = if self.rows == 0 {
            k as u64
        } else {
            k.wrapping_sub(self.last) as u64
        };
        loop {
            let byte = (d & 0x7f) as u8;
            d >>= 7;
            if d == 0 {
                self.bytes.push(byte);
                break;
            }
            self.bytes.push(byte | 0x80);
        }
        self.last = k;
        self.rows += 1;
    }

    pub(super) fn iter(&self) -> PassedIter<'_> {
        PassedIter {
            keys: self,
            at: 0,
            read: 0,
            current: None,
        }
    }
}

/// A walk over [`PassedKeys`] in ascending order.
pub(super) struct PassedIter<'a> {
    keys: &'a PassedKeys,
    at: usize,
    read: usize,
    current: Option<i64>,
}

impl PassedIter<'_> {
    pub(super) fn next_key(&mut self) -> Option<i64> {
        if self.read == self.keys.rows {
            return None;
        }
        let (mut d, mut shift) = (0u64, 0);
        while let Some(&byte) = self.keys.bytes.get(self.at) {
            self.at += 1;
            d |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        let k = match self.current {
            None => d as i64,
            Some(c) => c.wrapping_add(d as i64),
        };
        self.read += 1;
        self.current = Some(k);
        Some(k)
    }

    /// Whether a key of `b` (sorted by key, after every batch asked before) was passed.
    pub(super) fn holds_any(&mut self, b: &RecordBatch, key_idx: &[usize]) -> bool {
        // Anything but the one integer key SetAside takes: say so, and the input starts over.
        let [k] = key_idx else {
            return true;
        };
        let Some(keys) = b.column(*k).as_primitive_opt::<Int64Type>() else {
            return true;
        };
        for &key in keys.values() {
            while self.current.is_none_or(|c| c < key) {
                if self.next_key().is_none() {
                    return false;
                }
            }
            if self.current == Some(key) {
                return true;
            }
        }
        false
    }
}

/// Checks that rows arrive in key order (equal keys together), across batches.
pub(super) struct KeyOrder {
    codec: KeyCodec,
    last_int: Option<i64>,
    last_row: Option<OwnedRow>,
}

impl KeyOrder {
    pub(super) fn new(schema: &SchemaRef, idx: &[usize]) -> Result<KeyOrder> {
        Ok(KeyOrder {
            codec: KeyCodec::keys(schema, idx)?,
            last_int: None,
            last_row: None,
        })
    }

    /// Whether `b` continues the order so far (its rows and its first against the last seen).
    pub(super) fn continues(&mut self, b: &RecordBatch) -> Result<bool> {
        if b.num_rows() == 0 {
            return Ok(true);
        }
        match self.codec.encode(b)? {
            BatchKeys::Ints { keys: v, .. } => {
                let ordered = v.is_sorted() && self.last_int.is_none_or(|l| l <= v[0]);
                self.last_int = v.last().copied();
                Ok(ordered)
            }
            BatchKeys::Rows(rows) => {
                let first_ok = self
                    .last_row
                    .as_ref()
                    .is_none_or(|l| l.row() <= rows.row(0));
                let ordered =
                    first_ok && (1..rows.num_rows()).all(|i| rows.row(i - 1) <= rows.row(i));
                self.last_row = Some(rows.row(rows.num_rows() - 1).owned());
                Ok(ordered)
            }
        }
    }
}
