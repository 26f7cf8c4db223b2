//! The streamed pipeline's parts against plain models: settling, key order, the keys passed,
//! and settling against the in-memory dedupe (one rule, the same winners).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, UInt8Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use proptest::prelude::*;

use super::order::{KeyOrder, PassedKeys};
use super::settle::Winners;
use super::source::row_schema;
use crate::dedupe::{FileChanges, dedupe};
use crate::locate::{FileFormat, FileKind};
use crate::read::{ChangeBatch, Op};

/// Rows `(key, order value, op)` with their sequence numbers, in the pipeline's schema.
fn rows(data: &[(i64, i64, u8, u64)], string_key: bool) -> RecordBatch {
    let processing = Arc::new(ArrowSchema::new(vec![
        Field::new(
            "k",
            if string_key {
                DataType::Utf8
            } else {
                DataType::Int64
            },
            true,
        ),
        Field::new("o", DataType::Int64, true),
    ]));
    let schema = row_schema(&processing);
    let k: ArrayRef = if string_key {
        Arc::new(StringArray::from_iter_values(
            data.iter().map(|r| format!("{:05}", r.0)),
        ))
    } else {
        Arc::new(Int64Array::from_iter_values(data.iter().map(|r| r.0)))
    };
    RecordBatch::try_new(
        schema,
        vec![
            k,
            Arc::new(Int64Array::from_iter_values(data.iter().map(|r| r.1))),
            Arc::new(UInt8Array::from_iter_values(data.iter().map(|r| r.2))),
            Arc::new(UInt64Array::from_iter_values(data.iter().map(|r| r.3))),
        ],
    )
    .expect("rows")
}

proptest! {
    /// Sorted rows cut into batches anywhere: one winner per key, the last change (by the
    /// ordering column when there is one, then input order), and a count of the others.
    #[test]
    fn winners_are_the_last_change_of_each_key(
        changes in proptest::collection::vec((0i64..40, 0i64..4, any::<bool>()), 1..400),
        cuts in proptest::collection::vec(1usize..60, 1..20),
        ordered in any::<bool>(),
        string_key in any::<bool>(),
    ) {
        // Rows in input order get sequence numbers; then they are sorted by (key, seq).
        let mut input: Vec<(i64, i64, u8, u64)> = changes
            .iter()
            .enumerate()
            .map(|(i, (k, o, d))| (*k, *o, if *d { Op::Delete as u8 } else { Op::Insert as u8 }, i as u64))
            .collect();
        input.sort_by_key(|r| (r.0, r.3));
        let all = rows(&input, string_key);
        let order_idx: Vec<usize> = if ordered { vec![1] } else { vec![] };
        let mut w = Winners::new(&all.schema(), &[0], &order_idx, FileKind::Cdc).expect("winners");
        let mut out: Vec<RecordBatch> = Vec::new();
        let (mut at, mut c) = (0usize, 0usize);
        while at < input.len() {
            let len = cuts[c % cuts.len()].min(input.len() - at);
            c += 1;
            out.extend(w.push(all.slice(at, len)).expect("push"));
            at += len;
        }
        out.extend(w.finish().expect("finish"));
        let got: Vec<u64> = out
            .iter()
            .flat_map(|b| b.column(3).as_primitive::<arrow_array::types::UInt64Type>().values().to_vec())
            .collect();
        // The model: per key, the maximum of (order value if ordered, seq).
        let mut expected: BTreeMap<i64, (i64, u64)> = BTreeMap::new();
        for r in &input {
            let rank = (if ordered { r.1 } else { 0 }, r.3);
            let e = expected.entry(r.0).or_insert(rank);
            if rank > *e {
                *e = rank;
            }
        }
        let want: Vec<u64> = expected.values().map(|(_, s)| *s).collect();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(w.duplicates, input.len() - want.len());
    }

    /// The order check accepts exactly the inputs whose keys never go down, however cut.
    #[test]
    fn key_order_is_checked_across_batches(
        keys in proptest::collection::vec(0i64..30, 1..200),
        cut in 1usize..50,
        string_key in any::<bool>(),
    ) {
        let input: Vec<(i64, i64, u8, u64)> =
            keys.iter().enumerate().map(|(i, k)| (*k, 0, b'I', i as u64)).collect();
        let all = rows(&input, string_key);
        let mut order = KeyOrder::new(&all.schema(), &[0]).expect("order");
        let mut ok = true;
        let mut at = 0;
        while at < input.len() {
            let len = cut.min(input.len() - at);
            ok &= order.continues(&all.slice(at, len)).expect("check");
            at += len;
        }
        prop_assert_eq!(ok, keys.is_sorted());
    }

    /// The keys passed read back as pushed, and a sorted walk finds exactly the keys that
    /// were passed (whatever the gaps: varint deltas of any size).
    #[test]
    fn passed_keys_are_found_and_nothing_else(
        mut passed in proptest::collection::vec(-1_000_000_000_000i64..1_000_000_000_000, 0..300),
        mut asked in proptest::collection::vec(-1_000_000_000_000i64..1_000_000_000_000, 1..50),
        near in any::<bool>(),
    ) {
        passed.sort_unstable();
        if near {
            // Keys close to those passed, some equal.
            asked = asked.iter().enumerate().map(|(i, a)| {
                passed.get(i % passed.len().max(1)).map_or(*a, |p| p + (a % 2))
            }).collect();
        }
        asked.sort_unstable();
        let mut keys = PassedKeys::default();
        for &k in &passed {
            keys.push(k);
        }
        let mut walk = keys.iter();
        let mut read = Vec::new();
        while let Some(k) = walk.next_key() {
            read.push(k);
        }
        prop_assert_eq!(&read, &passed);
        let batch = rows(&asked.iter().map(|k| (*k, 0, b'I', 0)).collect::<Vec<_>>(), false);
        let holds = keys.iter().holds_any(&batch, &[0]);
        prop_assert_eq!(holds, asked.iter().any(|a| passed.binary_search(a).is_ok()));
    }
}

proptest! {
    /// The streamed settling and the in-memory dedupe, given the same changes (any keys, ops,
    /// ordering values, cuts into batches), pick the same winner for every key: one rule.
    #[test]
    fn settling_decides_as_dedupe_does(
        changes in proptest::collection::vec((0i64..30, 0i64..4, 0usize..3), 1..300),
        cuts in proptest::collection::vec(1usize..50, 1..10),
        ordered in any::<bool>(),
        string_key in any::<bool>(),
    ) {
        let ops = [Op::Insert, Op::Update, Op::Delete];
        let input: Vec<(i64, i64, u8, u64)> = changes
            .iter()
            .enumerate()
            .map(|(i, (k, o, op))| (*k, *o, ops[*op] as u8, i as u64))
            .collect();
        // In-memory: the rows in input order, positions their sequence numbers.
        let all = rows(&input, string_key);
        let data = all.project(&[0, 1]).expect("data");
        let order: Vec<String> = if ordered { vec!["o".into()] } else { vec![] };
        let d = dedupe(
            data.schema(),
            vec![FileChanges {
                label: "f.csv".into(),
                kind: FileKind::Cdc,
                format: FileFormat::Csv,
                batches: vec![ChangeBatch {
                    data,
                    ops: changes.iter().map(|c| ops[c.2]).collect(),
                    positions: (0..input.len() as u64).collect(),
                    before: None,
                    rejected: vec![],
                    unsupplied: vec![],
                }],
            }],
            &["k".into()],
            &order,
            None,
        )
        .expect("dedupe");
        let keys = arrow_cast::cast(d.keys.column(0), &DataType::Utf8).expect("cast");
        let keys = keys.as_string::<i32>();
        let mut sources = d.upsert_sources.iter();
        let in_memory: Vec<(String, Option<u64>)> = (0..keys.len())
            .map(|i| {
                let upsert = d.upserted.value(i).then(|| sources.next().map(|s| s.1));
                (keys.value(i).to_string(), upsert.flatten())
            })
            .collect();
        // Streamed: the same rows sorted by (key, seq), cut into batches.
        let mut sorted = input.clone();
        sorted.sort_by_key(|r| (r.0, r.3));
        let all = rows(&sorted, string_key);
        let order_idx: Vec<usize> = if ordered { vec![1] } else { vec![] };
        let mut w = Winners::new(&all.schema(), &[0], &order_idx, FileKind::Cdc).expect("winners");
        let mut out: Vec<RecordBatch> = Vec::new();
        let (mut at, mut c) = (0usize, 0usize);
        while at < sorted.len() {
            let len = cuts[c % cuts.len()].min(sorted.len() - at);
            c += 1;
            out.extend(w.push(all.slice(at, len)).expect("push"));
            at += len;
        }
        out.extend(w.finish().expect("finish"));
        let mut streamed: Vec<(String, Option<u64>)> = Vec::new();
        for b in &out {
            let k = arrow_cast::cast(b.column(0), &DataType::Utf8).expect("cast");
            let k = k.as_string::<i32>();
            let op = b.column(2).as_primitive::<arrow_array::types::UInt8Type>();
            let seq = b.column(3).as_primitive::<arrow_array::types::UInt64Type>();
            for i in 0..b.num_rows() {
                let upsert = op.value(i) != Op::Delete as u8;
                streamed.push((k.value(i).to_string(), upsert.then(|| seq.value(i))));
            }
        }
        prop_assert_eq!(streamed, in_memory);
    }
}
