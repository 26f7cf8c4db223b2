//! dedupe against worked examples and a plain model of the rule.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;

use super::*;
use crate::locate::FileKind;
use crate::read::{ChangeBatch, Op};
use arrow_array::{Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("v", DataType::Utf8, true),
        Field::new("seq", DataType::Utf8, true),
    ]))
}

fn batch(rows: &[(i64, &str, Option<&str>, Op)], before: Option<Vec<Option<i64>>>) -> ChangeBatch {
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
