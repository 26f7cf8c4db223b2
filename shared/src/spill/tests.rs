//! The sort's properties: a stable sort whatever the budget, key type and split.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;

use super::merge::int_order;
use super::*;
use arrow_array::{Int64Array, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use proptest::prelude::*;

fn schema(string_key: bool) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "k",
            if string_key {
                DataType::Utf8
            } else {
                DataType::Int64
            },
            false,
        ),
        Field::new("v", DataType::Int64, true),
        Field::new("seq", DataType::UInt64, false),
    ]))
}

fn batch(schema: &SchemaRef, rows: &[(i64, i64, u64)], string_key: bool) -> RecordBatch {
    let k: ArrayRef = if string_key {
        Arc::new(StringArray::from_iter_values(
            // Offset so that text orders as the numbers do.
            rows.iter().map(|r| format!("{:08}", r.0 + 1_000_000)),
        ))
    } else {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)))
    };
    RecordBatch::try_new(
        schema.clone(),
        vec![
            k,
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.2))),
        ],
    )
    .expect("batch")
}

/// A sorter on `schema(string_key)` with `budget`, and `rows` (key, value) pushed in
/// batches of `chunk`, each row's sequence number its place.
fn sorter_of(
    rows: &[(i64, i64)],
    chunk: usize,
    budget: usize,
    string_key: bool,
    split: bool,
) -> Sorter {
    let s = schema(string_key);
    let dir = std::env::temp_dir().join("dms2iceberg-spill-tests");
    let mut sorter = Sorter::new(
        s.clone(),
        SortSpec {
            key: vec![0],
            seq: 2,
        },
        budget,
        &dir,
    )
    .expect("sorter");
    if split {
        sorter = sorter.split_in_two();
    }
    let with_seq: Vec<(i64, i64, u64)> = rows
        .iter()
        .enumerate()
        .map(|(i, (k, v))| (*k, *v, i as u64))
        .collect();
    for c in with_seq.chunks(chunk.max(1)) {
        sorter.push(batch(&s, c, string_key)).expect("push");
    }
    sorter
}

/// A merge's rows as (value, seq).
fn values(merge: Merge) -> Vec<(i64, u64)> {
    let mut out = Vec::new();
    for b in merge {
        let b = b.expect("batch");
        let seq = b.column(2).as_primitive::<UInt64Type>();
        let v = b.column(1).as_primitive::<arrow_array::types::Int64Type>();
        for i in 0..b.num_rows() {
            out.push((v.value(i), seq.value(i)));
        }
    }
    out
}

fn sort_all(
    rows: &[(i64, i64)],
    chunk: usize,
    budget: usize,
    string_key: bool,
) -> (Vec<(i64, u64)>, usize) {
    let sorter = sorter_of(rows, chunk, budget, string_key, false);
    let runs = sorter.runs();
    (values(sorter.finish().expect("finish")), runs)
}

/// Sorts with the runs split in two key ranges: per range, the rows' (value, seq).
fn sort_ranges(rows: &[(i64, i64)], chunk: usize, string_key: bool) -> Vec<Vec<(i64, u64)>> {
    sorter_of(rows, chunk, 0, string_key, true)
        .finish_ranges()
        .expect("finish")
        .into_iter()
        .map(values)
        .collect()
}

proptest! {
    /// Split in two key ranges, the ranges one after the other are a stable sort of the
    /// rows, and every row of a key is in one range.
    #[test]
    fn ranges_are_a_stable_sort_split_between_keys(
        keys in proptest::collection::vec(0i64..40, 1..2000),
        chunk in 1usize..500,
        string_key in any::<bool>(),
    ) {
        let rows: Vec<(i64, i64)> = keys.iter().enumerate().map(|(i, k)| (*k, i as i64)).collect();
        let ranges = sort_ranges(&rows, chunk, string_key);
        prop_assert_eq!(ranges.len(), 2);
        let mut expected = rows.clone();
        expected.sort_by_key(|r| r.0);
        let got: Vec<(i64, i64)> = ranges
            .iter()
            .flatten()
            .map(|(v, _)| (keys[*v as usize], *v))
            .collect();
        prop_assert_eq!(got, expected);
        let lower: std::collections::BTreeSet<i64> =
            ranges[0].iter().map(|(v, _)| keys[*v as usize]).collect();
        prop_assert!(ranges[1].iter().all(|(v, _)| !lower.contains(&keys[*v as usize])));
    }

    /// Whatever the budget (a run per batch, or none) and the key type, the merge yields
    /// every row once, ordered by key and then input order.
    #[test]
    fn merge_equals_a_stable_sort(
        keys in proptest::collection::vec(-25i64..25, 0..3000),
        chunk in 1usize..700,
        spill_every_batch in any::<bool>(),
        string_key in any::<bool>(),
    ) {
        let rows: Vec<(i64, i64)> = keys.iter().enumerate().map(|(i, k)| (*k, i as i64)).collect();
        let budget = if spill_every_batch { 0 } else { usize::MAX / 2 };
        let (out, runs) = sort_all(&rows, chunk, budget, string_key);
        if spill_every_batch {
            prop_assert_eq!(runs, rows.len().div_ceil(chunk));
        } else {
            prop_assert_eq!(runs, 0);
        }
        let mut expected: Vec<(i64, i64)> = rows.clone();
        expected.sort_by_key(|r| r.0); // stable: input order within a key
        let got: Vec<(i64, i64)> = out.iter().map(|(v, _)| (keys[*v as usize], *v)).collect();
        prop_assert_eq!(got, expected);
        prop_assert!(out.iter().all(|(v, seq)| *v as u64 == *seq));
    }
}

#[test]
fn a_run_that_cannot_be_written_fails_the_sort() {
    // The spool folder is a path under a regular file: the spilling thread cannot create
    // its run, and the error reaches the caller (at a later push or at finish).
    let file = std::env::temp_dir().join(format!("dms2iceberg-spill-{}", uuid::Uuid::new_v4()));
    std::fs::write(&file, b"not a folder").expect("file");
    let s = schema(false);
    let mut sorter = Sorter::new(
        s.clone(),
        SortSpec {
            key: vec![0],
            seq: 2,
        },
        0,
        &file.join("spool"),
    )
    .expect("sorter");
    let mut failed = None;
    for i in 0..4u64 {
        if let Err(e) = sorter.push(batch(&s, &[(i as i64, 0, i)], false)) {
            failed = Some(e);
            break;
        }
    }
    let err = match failed {
        Some(e) => e,
        None => match sorter.finish() {
            Err(e) => e,
            Ok(_) => panic!("a sort whose runs cannot be written succeeded"),
        },
    };
    assert!(err.to_string().contains("spool"), "{err}");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn integer_keys_order_as_their_pairs() {
    let pairs = [
        (i64::MIN, 0),
        (i64::MIN, u64::MAX - 1),
        (-1, 5),
        (0, 0),
        (0, 1),
        (1, 0),
        (i64::MAX, 0),
        (i64::MAX, u64::MAX - 1),
    ];
    for a in pairs {
        for b in pairs {
            assert_eq!(int_order(a.0, a.1).cmp(&int_order(b.0, b.1)), a.cmp(&b));
        }
        // An input with no rows left comes after every row.
        assert!(int_order(a.0, a.1) < u128::MAX);
    }
}

#[test]
fn runs_spill_and_merge_in_order() {
    // 200k rows in batches of 10k with a 1 MiB budget: several runs.
    let n = 200_000i64;
    let rows: Vec<(i64, i64)> = (0..n).map(|i| ((i * 7919) % 1000, i)).collect();
    let (out, runs) = sort_all(&rows, 10_000, 0, false);
    assert!(runs >= 2, "expected spilled runs, got {runs}");
    assert_eq!(out.len(), n as usize);
    for w in out.windows(2) {
        let (a, b) = (rows[w[0].0 as usize].0, rows[w[1].0 as usize].0);
        assert!(a < b || (a == b && w[0].1 < w[1].1));
    }
}

proptest! {
    /// The key codec's integer specialisation decides as its row encoding does: a single Int64
    /// key (plain integers) and the same key with a constant second column (row-encoded) order,
    /// group and sort every pair of rows alike, with and without sequence numbers.
    #[test]
    fn integer_keys_decide_as_row_encoded_keys(
        rows in proptest::collection::vec((-3i64..3, any::<i64>()), 1..60),
    ) {
        let s = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("c", DataType::Int64, false),
            Field::new("seq", DataType::UInt64, false),
        ]));
        // Small keys repeat (equal keys), large ones reach the ends of the range.
        let keys: Vec<i64> = rows.iter().map(|r| if r.1 % 2 == 0 { r.0 } else { r.1 }).collect();
        let b = RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(Int64Array::from(keys.clone())),
                Arc::new(Int64Array::from(vec![7; rows.len()])),
                // Unique sequence numbers (as a sort's are), against the keys' order.
                Arc::new(UInt64Array::from_iter_values((0..rows.len() as u64).rev())),
            ],
        )
        .expect("batch");
        for sort in [false, true] {
            let codec = |key: Vec<usize>| {
                if sort {
                    KeyCodec::sort(&s, &SortSpec { key, seq: 2 })
                } else {
                    KeyCodec::keys(&s, &key)
                }
                .expect("codec")
            };
            let (ints, encoded) = (codec(vec![0]), codec(vec![0, 1]));
            prop_assert!(ints.is_int() && !encoded.is_int());
            let (a, r) = (ints.encode(&b).expect("ints"), encoded.encode(&b).expect("rows"));
            for i in 0..rows.len() {
                for j in 0..rows.len() {
                    prop_assert_eq!(a.cmp(i, &a, j), r.cmp(i, &r, j));
                    if !sort {
                        prop_assert_eq!(a.same(i, j), r.same(i, j));
                        prop_assert_eq!(a.same(i, j), keys[i] == keys[j]);
                    }
                }
            }
            if sort {
                let cols = |c: &KeyCodec| -> Vec<ArrayRef> {
                    c.key().iter().map(|&k| b.column(k).clone()).collect()
                };
                let seq = b.column(2).clone();
                prop_assert_eq!(
                    ints.sort_indices(cols(&ints), seq.clone()).expect("sort"),
                    encoded.sort_indices(cols(&encoded), seq).expect("sort")
                );
            }
        }
    }
}
