//! The rule: of the changes to one key, which is the latest (the one a commit applies).
//!
//! Changes rank by, in order: their kind (full-load rows before change rows); the values of
//! the ordering columns, row-encoded by [`order_converter`] (the first column decides, NULL
//! before any value); their place in the input (file in DMS order, then position in the file,
//! or a sequence number that numbers the rows so). Of two changes, the one of higher [`Rank`]
//! is the later.
//!
//! Invariants: this is the only place changes of one key are ordered; the in-memory dedupe
//! (`super::winners`, `super::fill`) and the streamed settling (`ops::ingest::stream`) both
//! decide through [`Rank`]. Places are unique within an input, so no two changes tie.

use arrow_row::{Row, RowConverter, SortField};
use arrow_schema::DataType;

use crate::error::Result;
use crate::locate::FileKind;

/// Where a change stands among the changes of its key, compared field by field in this order
/// (the derived order is the rule): `place` is any position that rises through the input, a
/// `(file, position)` pair or a sequence number.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rank<'o, P> {
    pub(crate) kind: FileKind,
    /// The change's ordering values (`None`: the table has no ordering columns).
    pub(crate) order: Option<Row<'o>>,
    pub(crate) place: P,
}

/// The row encoding ordering values are compared in, for columns of `types`.
pub(crate) fn order_converter(types: impl IntoIterator<Item = DataType>) -> Result<RowConverter> {
    Ok(RowConverter::new(
        types.into_iter().map(SortField::new).collect(),
    )?)
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array};
    use proptest::prelude::*;

    use super::*;

    /// The two rules this one replaced, as they were written: dedupe's `Input::later` ...
    fn dedupe_later(
        a: &(FileKind, Option<i64>, u32, u64),
        b: &(FileKind, Option<i64>, u32, u64),
        ordered: bool,
    ) -> bool {
        if a.0 != b.0 {
            return a.0 > b.0;
        }
        if ordered && a.1 != b.1 {
            // Row encoding: NULL first.
            return a.1 > b.1;
        }
        (a.2, a.3) > (b.2, b.3)
    }

    /// ... and the streamed settling's pick: the maximum by ordering values, then input order
    /// (rows of one kind).
    fn settle_cmp(a: &(Option<i64>, usize), b: &(Option<i64>, usize), ordered: bool) -> Ordering {
        let o = if ordered {
            a.0.cmp(&b.0)
        } else {
            Ordering::Equal
        };
        o.then(a.1.cmp(&b.1))
    }

    proptest! {
        /// Whatever the changes, the one rule orders every pair as both former rules did.
        #[test]
        fn the_rule_decides_as_both_former_rules(
            changes in proptest::collection::vec(
                (any::<bool>(), proptest::option::of(-3i64..3), 0u32..3, 0u64..6),
                1..40,
            ),
            ordered in any::<bool>(),
        ) {
            let kinds = |load: bool| if load { FileKind::Load } else { FileKind::Cdc };
            let values: ArrayRef = Arc::new(Int64Array::from(
                changes.iter().map(|c| c.1).collect::<Vec<_>>(),
            ));
            let conv = order_converter([DataType::Int64]).expect("converter");
            let rows = conv.convert_columns(&[values]).expect("rows");
            let rank = |i: usize| Rank {
                kind: kinds(changes[i].0),
                order: ordered.then(|| rows.row(i)),
                place: (changes[i].2, changes[i].3, i),
            };
            for a in 0..changes.len() {
                for b in 0..changes.len() {
                    let (x, y) = (&changes[a], &changes[b]);
                    if (x.2, x.3) == (y.2, y.3) && a != b {
                        // Two changes never share a place.
                        continue;
                    }
                    let old = dedupe_later(
                        &(kinds(x.0), x.1, x.2, x.3),
                        &(kinds(y.0), y.1, y.2, y.3),
                        ordered,
                    );
                    prop_assert_eq!(rank(a) > rank(b), old, "dedupe: {:?} {:?}", x, y);
                    if x.0 == y.0 {
                        let settle = settle_cmp(&(x.1, a), &(y.1, b), ordered);
                        let ours = Rank {
                            kind: kinds(x.0),
                            order: ordered.then(|| rows.row(a)),
                            place: a,
                        }
                        .cmp(&Rank {
                            kind: kinds(y.0),
                            order: ordered.then(|| rows.row(b)),
                            place: b,
                        });
                        prop_assert_eq!(ours, settle, "settle: {:?} {:?}", x, y);
                    }
                }
            }
        }
    }
}
