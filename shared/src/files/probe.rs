//! The keys a lookup probes for, or a commit touches, in the forms each check against table
//! files needs: a file's key bounds (manifest `lower_bounds`/`upper_bounds`), a row group's
//! statistics and bloom filter, and a file's key column. Lookup prunes with them; commit
//! validation asks whether another writer's new files may hold one of them.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::DataType;
use iceberg::spec::{Datum, PrimitiveLiteral};

use crate::error::{Error, Result};
use crate::files::keys::{key_signature, single_int_column};
use crate::types::int_values;

/// The keys being looked up, in the forms each pruning step needs.
pub(crate) struct ProbeKeys {
    /// Identifies the key types (cached encodings are only valid for the same types).
    pub(crate) sig: String,
    pub(crate) field_ids: Vec<i32>,
    pub(crate) types: Vec<DataType>,
    pub(crate) converter: RowConverter,
    /// The key columns as given.
    pub(crate) arrays: Vec<ArrayRef>,
    /// Row encodings, made on first use: a single integer key, the common case, is searched
    /// as integers and never needs them (making them was a quarter of a warm lookup).
    encoded: OnceLock<Encoded>,
    /// First key column as plain values, sorted (row-group statistics and bloom filters).
    pub(crate) first: FirstColumn,
    /// A single integer key (int or long): its values with their index in the key batch,
    /// sorted by value.
    pub(crate) ints: Option<Vec<(i64, usize)>>,
}

/// The keys in `arrow-row` form, for keys other than a single integer column.
pub(crate) struct Encoded {
    /// Encoded full keys, sorted, with their index in the key batch.
    pub(crate) sorted: Vec<(Vec<u8>, usize)>,
    /// Encoded full key → index in the key batch.
    pub(crate) index: HashMap<Vec<u8>, usize>,
    /// Per key column: single-column encodings, sorted, and their converter (bounds checks).
    pub(crate) columns: Vec<(RowConverter, Vec<Vec<u8>>)>,
}

pub(crate) enum FirstColumn {
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Other,
}

impl std::fmt::Debug for ProbeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeKeys")
            .field("field_ids", &self.field_ids)
            .field("keys", &self.arrays.first().map_or(0, |a| a.len()))
            .finish()
    }
}

impl ProbeKeys {
    pub(crate) fn new(keys: &RecordBatch, field_ids: Vec<i32>) -> Result<ProbeKeys> {
        let arrays: Vec<ArrayRef> = keys.columns().to_vec();
        let types: Vec<DataType> = arrays.iter().map(|a| a.data_type().clone()).collect();
        let converter =
            RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
        let first = match arrays.first() {
            Some(a) => first_values(a),
            None => FirstColumn::Other,
        };
        let ints = single_int_column(&arrays).map(|v| {
            let mut v: Vec<(i64, usize)> = v.into_iter().zip(0..).collect();
            v.sort_unstable();
            v.dedup_by_key(|(x, _)| *x);
            v
        });
        let sig = key_signature(&field_ids, &types, ints.is_some());
        Ok(ProbeKeys {
            sig,
            field_ids,
            types,
            converter,
            arrays,
            encoded: OnceLock::new(),
            first,
            ints,
        })
    }

    /// The row encodings of the keys, made by the first caller.
    pub(crate) fn encoded(&self) -> Result<&Encoded> {
        if let Some(e) = self.encoded.get() {
            return Ok(e);
        }
        let rows = self.converter.convert_columns(&self.arrays)?;
        let index: HashMap<Vec<u8>, usize> = (0..rows.num_rows())
            .map(|i| (rows.row(i).as_ref().to_vec(), i))
            .collect();
        let mut sorted: Vec<(Vec<u8>, usize)> =
            index.iter().map(|(k, v)| (k.clone(), *v)).collect();
        sorted.sort_unstable();
        let mut columns = Vec::new();
        for a in &self.arrays {
            let c = RowConverter::new(vec![SortField::new(a.data_type().clone())])?;
            let r = c.convert_columns(std::slice::from_ref(a))?;
            let mut v: Vec<Vec<u8>> = (0..r.num_rows())
                .map(|i| r.row(i).as_ref().to_vec())
                .collect();
            v.sort_unstable();
            v.dedup();
            columns.push((c, v));
        }
        // Another thread may have won the race; both made the same encodings.
        let _ = self.encoded.set(Encoded {
            sorted,
            index,
            columns,
        });
        self.encoded
            .get()
            .ok_or_else(|| Error::Internal("key encodings were not kept".into()))
    }

    /// Could a file whose key columns lie within these bounds hold one of the keys?
    pub(crate) fn may_contain(
        &self,
        lower: &HashMap<i32, Datum>,
        upper: &HashMap<i32, Datum>,
    ) -> Result<bool> {
        if let (Some(ints), [fid]) = (&self.ints, self.field_ids.as_slice())
            && let (Some(lo), Some(hi)) = (
                lower.get(fid).and_then(datum_i64),
                upper.get(fid).and_then(datum_i64),
            )
        {
            let at = ints.partition_point(|(v, _)| *v < lo);
            return Ok(at < ints.len() && ints[at].0 <= hi);
        }
        for (i, fid) in self.field_ids.iter().enumerate() {
            let (Some(lo), Some(hi)) = (lower.get(fid), upper.get(fid)) else {
                continue;
            };
            let (Some(lo), Some(hi)) = (self.encode_datum(i, lo)?, self.encode_datum(i, hi)?)
            else {
                continue;
            };
            let sorted = &self.encoded()?.columns[i].1;
            let at = sorted.partition_point(|v| v.as_slice() < lo.as_slice());
            if at == sorted.len() || sorted[at].as_slice() > hi.as_slice() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn encode_datum(&self, col: usize, d: &Datum) -> Result<Option<Vec<u8>>> {
        let Some(a) = datum_array(d) else {
            return Ok(None);
        };
        let Ok(a) = arrow_cast::cast(&a, &self.types[col]) else {
            return Ok(None);
        };
        let r = self.encoded()?.columns[col].0.convert_columns(&[a])?;
        Ok(Some(r.row(0).as_ref().to_vec()))
    }
}

/// An int or long bound as i64.
fn datum_i64(d: &Datum) -> Option<i64> {
    match d.literal() {
        PrimitiveLiteral::Int(v) => Some(i64::from(*v)),
        PrimitiveLiteral::Long(v) => Some(*v),
        _ => None,
    }
}

fn first_values(a: &ArrayRef) -> FirstColumn {
    let ints = match a.data_type() {
        DataType::Int64 | DataType::Int32 => int_values(a),
        DataType::Date32 => Some(
            a.as_primitive::<Date32Type>()
                .values()
                .iter()
                .map(|v| *v as i64)
                .collect(),
        ),
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => Some(
            a.as_primitive::<TimestampMicrosecondType>()
                .values()
                .to_vec(),
        ),
        _ => None,
    };
    if let Some(mut v) = ints {
        v.sort_unstable();
        v.dedup();
        return FirstColumn::Ints(v);
    }
    if let DataType::Utf8 = a.data_type() {
        let s = a.as_string::<i32>();
        let mut v: Vec<String> = (0..s.len()).map(|i| s.value(i).to_string()).collect();
        v.sort_unstable();
        v.dedup();
        return FirstColumn::Strings(v);
    }
    FirstColumn::Other
}

/// A one-element Arrow array holding a bound value.
fn datum_array(d: &Datum) -> Option<ArrayRef> {
    use arrow_array::*;
    use iceberg::spec::PrimitiveType as P;
    Some(match (d.data_type(), d.literal()) {
        (P::Int, PrimitiveLiteral::Int(v)) => Arc::new(Int32Array::from(vec![*v])),
        (P::Long, PrimitiveLiteral::Long(v)) => Arc::new(Int64Array::from(vec![*v])),
        (P::Date, PrimitiveLiteral::Int(v)) => Arc::new(Date32Array::from(vec![*v])),
        (P::Timestamp, PrimitiveLiteral::Long(v)) => {
            Arc::new(TimestampMicrosecondArray::from(vec![*v]))
        }
        (P::Timestamptz, PrimitiveLiteral::Long(v)) => {
            Arc::new(TimestampMicrosecondArray::from(vec![*v]).with_timezone("+00:00"))
        }
        (P::String, PrimitiveLiteral::String(v)) => Arc::new(StringArray::from(vec![v.as_str()])),
        (P::Decimal { precision, scale }, PrimitiveLiteral::Int128(v)) => Arc::new(
            Decimal128Array::from(vec![*v])
                .with_precision_and_scale(*precision as u8, *scale as i8)
                .ok()?,
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds of files written before the key was widened are 4-byte ints (decimals at the
    /// narrower precision): a lookup of keys of the wider type prunes by them as by bounds of
    /// its own type, for a single integer key and for a composite one.
    #[test]
    fn bounds_from_before_a_widened_key_prune_as_wide_ones() {
        use arrow_array::{Decimal128Array, Int64Array, StringArray};
        use iceberg::spec::PrimitiveType;
        let big = i64::from(i32::MAX) + 7;
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![5, 50, big]));
        let one = ProbeKeys::new(
            &RecordBatch::try_from_iter([("id", ids.clone())]).unwrap(),
            vec![1],
        )
        .unwrap();
        let range = |lo: Datum, hi: Datum| -> [HashMap<i32, Datum>; 2] {
            [[(1, lo)].into(), [(1, hi)].into()]
        };
        for (lo, hi, holds) in [
            (Datum::int(1), Datum::int(4), false),
            (Datum::int(1), Datum::int(5), true),
            (Datum::int(51), Datum::int(i32::MAX), false),
            (Datum::long(51), Datum::long(big), true),
        ] {
            let [l, u] = range(lo.clone(), hi.clone());
            assert_eq!(one.may_contain(&l, &u).unwrap(), holds, "{lo}..{hi}");
        }

        // id long, then a decimal(12,2) widened from decimal(9,2): a composite key.
        let amounts: ArrayRef = Arc::new(
            Decimal128Array::from(vec![100, 250, 123_456_789_012])
                .with_precision_and_scale(12, 2)
                .unwrap(),
        );
        let names: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        let keys = RecordBatch::try_from_iter([("id", ids), ("amount", amounts), ("n", names)]);
        let composite = ProbeKeys::new(&keys.unwrap(), vec![1, 2, 3]).unwrap();
        let narrow = |v: i32| {
            let ty = PrimitiveType::Decimal {
                precision: 9,
                scale: 2,
            };
            Datum::try_from_bytes(&v.to_be_bytes(), ty).unwrap()
        };
        let bounds = |id: (Datum, Datum), amount: (Datum, Datum)| -> [HashMap<i32, Datum>; 2] {
            [
                [(1, id.0), (2, amount.0)].into(),
                [(1, id.1), (2, amount.1)].into(),
            ]
        };
        let [l, u] = bounds((Datum::int(1), Datum::int(60)), (narrow(200), narrow(300)));
        assert!(composite.may_contain(&l, &u).unwrap(), "50 with 2.50");
        let [l, u] = bounds((Datum::int(1), Datum::int(60)), (narrow(300), narrow(400)));
        assert!(
            !composite.may_contain(&l, &u).unwrap(),
            "no amount in 3.00..4.00"
        );
        let [l, u] = bounds((Datum::int(6), Datum::int(49)), (narrow(0), narrow(999)));
        assert!(!composite.may_contain(&l, &u).unwrap(), "no id in 6..49");
    }

    #[test]
    fn the_key_signature_does_not_change() {
        // Stored key indexes carry it: a change would make every one of them unusable.
        assert_eq!(
            key_signature(&[1], &[DataType::Int64], true),
            "[1][Int64]i64"
        );
        assert_eq!(
            key_signature(&[1, 3], &[DataType::Int32, DataType::Utf8], false),
            "[1, 3][Int32, Utf8]rows"
        );
    }
}
