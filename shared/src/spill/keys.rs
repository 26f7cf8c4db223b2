//! The one key codec of the streamed pipeline: a batch's key columns in a form comparable
//! across batches, for the sort ([`super::Sorter`], [`super::Merge`]) and for the consumer of
//! its rows (key-order detection and settling in `ops::ingest::stream`).
//!
//! Two encodings behind one type: a single `Int64` key (the common key: serial ids) is kept as
//! plain integers, compared without encoding and several times faster to sort; any other key
//! is row-encoded (`arrow_row`), byte-comparable whatever its types.
//!
//! Invariants: every batch of one codec is encoded the same way (the variant depends only on
//! the schema), so two [`BatchKeys`] of one codec always compare; a sort codec
//! ([`KeyCodec::sort`]) appends the sequence number, so rows of one key order by their place
//! in the input; a key codec ([`KeyCodec::keys`]) encodes the key alone, so rows of one key
//! compare equal.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::{DataType, SchemaRef};

use crate::error::Result;

/// How rows are compared: by the key columns, then by the sequence number column.
#[derive(Clone)]
pub(crate) struct SortSpec {
    pub(crate) key: Vec<usize>,
    pub(crate) seq: usize,
}

/// The keys of one batch, comparable across batches of one codec.
pub(crate) enum BatchKeys {
    /// A single 64-bit integer key; `seq` holds the rows' sequence numbers for a sort codec and
    /// is empty for a key codec.
    Ints { keys: Vec<i64>, seq: Vec<u64> },
    /// Row-encoded key columns (then the sequence number, for a sort codec).
    Rows(Rows),
}

impl BatchKeys {
    /// The order of row `i` of these keys and row `j` of `other` (keys of the same codec).
    pub(crate) fn cmp(&self, i: usize, other: &BatchKeys, j: usize) -> Ordering {
        match (self, other) {
            (BatchKeys::Ints { keys: a, seq: sa }, BatchKeys::Ints { keys: b, seq: sb }) => {
                a[i].cmp(&b[j]).then_with(|| sa.get(i).cmp(&sb.get(j)))
            }
            (BatchKeys::Rows(a), BatchKeys::Rows(b)) => a.row(i).cmp(&b.row(j)),
            // One codec encodes every batch the same way.
            _ => Ordering::Equal,
        }
    }

    /// Whether rows `i` and `j` of these keys have the same key (a key codec: the sequence
    /// number of a sort codec tells every row apart).
    pub(crate) fn same(&self, i: usize, j: usize) -> bool {
        match self {
            BatchKeys::Ints { keys, .. } => keys[i] == keys[j],
            BatchKeys::Rows(r) => r.row(i) == r.row(j),
        }
    }
}

/// Converts batches to [`BatchKeys`], the same way for every batch.
#[derive(Clone)]
pub(crate) struct KeyCodec {
    key: Vec<usize>,
    /// The sequence number column, for a sort codec.
    seq: Option<usize>,
    /// `None`: a single Int64 key.
    rows: Option<Arc<RowConverter>>,
}

impl KeyCodec {
    /// The codec of a sort: by key, then sequence number.
    pub(crate) fn sort(schema: &SchemaRef, spec: &SortSpec) -> Result<KeyCodec> {
        KeyCodec::new(schema, &spec.key, Some(spec.seq))
    }

    /// The codec of the key alone: rows of one key compare equal.
    pub(crate) fn keys(schema: &SchemaRef, key: &[usize]) -> Result<KeyCodec> {
        KeyCodec::new(schema, key, None)
    }

    fn new(schema: &SchemaRef, key: &[usize], seq: Option<usize>) -> Result<KeyCodec> {
        let single_int = matches!(key, [k] if schema.field(*k).data_type() == &DataType::Int64);
        let rows = if single_int {
            None
        } else {
            let mut fields: Vec<SortField> = key
                .iter()
                .map(|&k| SortField::new(schema.field(k).data_type().clone()))
                .collect();
            if seq.is_some() {
                fields.push(SortField::new(DataType::UInt64));
            }
            Some(Arc::new(RowConverter::new(fields)?))
        };
        Ok(KeyCodec {
            key: key.to_vec(),
            seq,
            rows,
        })
    }

    /// Whether the key is a single Int64 ([`BatchKeys::Ints`]).
    pub(crate) fn is_int(&self) -> bool {
        self.rows.is_none()
    }

    /// The key columns' indices.
    pub(crate) fn key(&self) -> &[usize] {
        &self.key
    }

    /// The sequence number column (a sort codec).
    pub(crate) fn seq(&self) -> Option<usize> {
        self.seq
    }

    pub(crate) fn encode(&self, b: &RecordBatch) -> Result<BatchKeys> {
        let keys: Vec<ArrayRef> = self.key.iter().map(|&k| b.column(k).clone()).collect();
        self.encode_columns(keys, self.seq.map(|s| b.column(s).clone()))
    }

    /// Encodes key columns (and, for a sort codec, the sequence number column `seq`; without
    /// it, a sort codec's keys are not comparable with others).
    pub(crate) fn encode_columns(
        &self,
        mut keys: Vec<ArrayRef>,
        seq: Option<ArrayRef>,
    ) -> Result<BatchKeys> {
        match &self.rows {
            None => Ok(BatchKeys::Ints {
                keys: keys[0].as_primitive::<Int64Type>().values().to_vec(),
                seq: match &seq {
                    Some(s) => s.as_primitive::<UInt64Type>().values().to_vec(),
                    None => Vec::new(),
                },
            }),
            Some(conv) => {
                keys.extend(seq);
                Ok(BatchKeys::Rows(conv.convert_columns(&keys)?))
            }
        }
    }

    /// Indices that sort rows by key, then sequence number, given their key and sequence
    /// columns.
    pub(crate) fn sort_indices(&self, keys: Vec<ArrayRef>, seq: ArrayRef) -> Result<Vec<u32>> {
        let n = seq.len();
        let mut idx: Vec<u32> = (0..n as u32).collect();
        match self.encode_columns(keys, Some(seq))? {
            BatchKeys::Ints { keys, seq } => {
                let mut pairs: Vec<(i64, u64, u32)> = keys
                    .iter()
                    .zip(&seq)
                    .zip(0u32..)
                    .map(|((k, s), i)| (*k, *s, i))
                    .collect();
                pairs.sort_unstable();
                idx = pairs.into_iter().map(|(_, _, i)| i).collect();
            }
            BatchKeys::Rows(rows) => {
                idx.sort_unstable_by(|a, b| rows.row(*a as usize).cmp(&rows.row(*b as usize)));
            }
        }
        Ok(idx)
    }
}
