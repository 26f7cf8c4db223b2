//! Reading a commit's input: open every file, settle the table schema (new columns, type
//! promotions), read the rows aligned to it, and deduplicate per key (blocking I/O and CPU).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, new_null_array};
use arrow_schema::{Field, Schema as ArrowSchema, SchemaRef};
use iceberg::spec::{PrimitiveType, Schema, Type};

use super::FileInput;
use super::second_pass::SecondPass;
use crate::config::{BadRows, TableConfig};
use crate::dedupe::{Deduped, FileChanges, dedupe};
use crate::error::{Error, InputError, Rejected, Result};
use crate::evolve::{self, SchemaChange};
use crate::locate::OrderKey;
use crate::read::{ChangeBatch, SourceFile};
use crate::types::{arrow_type, can_promote};

pub(super) struct ReadResult {
    /// The table schema after this commit.
    pub(super) schema: Schema,
    pub(super) change: SchemaChange,
    pub(super) deduped: Deduped,
    pub(super) max_seq: Option<String>,
    /// Rows set aside (bad-row policy `quarantine`).
    pub(super) rejected: Vec<Rejected>,
    /// A large input was deduplicated on its key columns only: its rows are read again.
    pub(super) second_pass: Option<SecondPass>,
}

/// Opens every file, settles the schema, reads and dedupes (blocking I/O and CPU).
pub(super) fn read_files(
    cfg: &TableConfig,
    key: &[String],
    current: Option<(Schema, i32)>,
    mut files: Vec<FileInput>,
    only_keys_of_first: Option<usize>,
) -> Result<ReadResult> {
    // Which `BI_` columns are before-images depends on the key, which may be the table's
    // (identifier fields) rather than the config's.
    let cfg = &TableConfig {
        primary_key: Some(key.to_vec()),
        ..cfg.clone()
    };
    // `only_keys_of_first = Some(n)`: only keys the first n inputs touch are rewritten (a late
    // input re-merged with files applied after it). Source order across files is DMS order.
    let restrict: Option<Vec<OrderKey>> =
        only_keys_of_first.map(|n| files[..n].iter().map(|f| f.object.order.clone()).collect());
    files.sort_by(|a, b| a.object.order.cmp(&b.object.order));
    let only_keys_of: Option<Vec<usize>> = restrict.map(|r| {
        files
            .iter()
            .enumerate()
            .filter(|(_, f)| r.contains(&f.object.order))
            .map(|(i, _)| i)
            .collect()
    });
    let Prepared {
        schema,
        change,
        opened,
        table_columns,
        types: all_types,
        key_types,
        processing,
        order_columns,
        ..
    } = prepare(cfg, key, current, &files, &Inference::Whole)?;
    let mut changes = Vec::with_capacity(opened.len());
    let mut max_seq: Option<String> = None;
    let mut rejected: Vec<Rejected> = Vec::new();
    let input_bytes: u64 = files
        .iter()
        .map(|f| f.data.as_ref().map_or(Ok(0), |d| d.len()))
        .sum::<Result<u64>>()?;
    // Unsupplied columns (`no_sup_value`) take earlier changes' values: every row is held.
    let large = input_bytes > cfg.large_input_bytes && cfg.no_sup_value.is_none();
    // A large input keeps only the key and ordering columns in memory.
    let slim: Option<(SchemaRef, Vec<usize>)> = if large {
        let keep: Vec<usize> = processing
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| key.contains(f.name()) || order_columns.contains(f.name()))
            .map(|(i, _)| i)
            .collect();
        Some((Arc::new(processing.project(&keep)?), keep))
    } else {
        None
    };
    for ((mut src, f), types) in opened.into_iter().zip(&files).zip(&all_types) {
        let types = types.clone();
        // Every row is held until the dedupe anyway: the input may be too.
        if !large {
            src.allow_split();
        }
        let mut batches = Vec::new();
        for b in src.read(types, key_types.clone())? {
            let mut b = align(b?, &processing)?;
            rejected.append(&mut b.rejected);
            if cfg.bad_rows == BadRows::Quarantine {
                b = reject_null_keys(b, key, f, &mut rejected, "primary key value is NULL")?;
                // A change row must be placed among its key's changes.
                if f.object.kind == crate::locate::FileKind::Cdc {
                    let why = "a change row has no value in an ordering column";
                    b = reject_null_keys(b, &order_columns, f, &mut rejected, why)?;
                }
            }
            if let Some(seq) = &cfg.change_sequence_column
                && let Some(col) = b.data.column_by_name(seq)
                && let Some(m) = col.as_string::<i32>().iter().flatten().max()
                && max_seq.as_deref().is_none_or(|x| m > x)
            {
                max_seq = Some(m.to_string());
            }
            if let Some((_, cols)) = &slim {
                b.data = b.data.project(cols)?;
            }
            batches.push(b);
        }
        changes.push(FileChanges {
            label: f.object.key.clone(),
            kind: f.object.kind,
            format: f.object.format,
            batches,
        });
    }
    let dedupe_schema = slim.as_ref().map_or(processing.clone(), |(s, _)| s.clone());
    let deduped = dedupe(
        dedupe_schema,
        changes,
        key,
        &order_columns,
        only_keys_of.as_deref(),
    )?;
    let second_pass = large.then(|| SecondPass {
        cfg: cfg.clone(),
        files,
        table_columns,
        types: all_types,
        key_types,
        processing,
        key: key.to_vec(),
    });
    Ok(ReadResult {
        schema,
        change,
        deduped,
        max_seq,
        rejected,
        second_pass,
    })
}

/// How the types of new CSV columns (a new table's, or columns a file adds) are inferred.
#[derive(Debug, Clone)]
pub(super) enum Inference {
    /// From every value of the file that introduces the column (a pass over the file).
    Whole,
    /// From the first `records` records; the rest is observed while the file is read, and a
    /// file that turns out not to fit is read again with [`Inference::Given`].
    Start { records: usize },
    /// As a whole-file inference found them: per file (index in DMS order), column → type.
    /// Columns not listed are inferred from the start, as with `Start`.
    Given {
        records: usize,
        types: BTreeMap<(usize, String), PrimitiveType>,
    },
}

/// What reading a commit's input needs once its schema is settled.
pub(super) struct Prepared {
    /// The table schema after this commit.
    pub(super) schema: Schema,
    pub(super) change: SchemaChange,
    pub(super) opened: Vec<SourceFile>,
    /// The table's columns before this input (names for headerless files).
    pub(super) table_columns: Option<Vec<String>>,
    /// Per file, per column: the type it is read as.
    pub(super) types: Vec<Vec<PrimitiveType>>,
    pub(super) key_types: Vec<PrimitiveType>,
    /// The table schema as plain nullable Arrow fields: what batches are aligned to.
    pub(super) processing: SchemaRef,
    pub(super) order_columns: Vec<String>,
    /// Per file: the columns (positions) whose type was inferred from the file's first records.
    pub(super) inferred: Vec<Vec<usize>>,
}

/// Opens every file, settles the schema and checks the key and ordering columns are in it.
/// `cfg` has the table's key as `primary_key`.
pub(super) fn prepare(
    cfg: &TableConfig,
    key: &[String],
    current: Option<(Schema, i32)>,
    files: &[FileInput],
    inference: &Inference,
) -> Result<Prepared> {
    let table_name = cfg.target();
    let Settled {
        schema,
        change,
        opened,
        table_columns,
        inferred,
    } = settle_schema(cfg, key, current, files, inference)?;
    for k in key {
        if schema.field_by_name(k).is_none() {
            return Err(Error::Schema {
                table: table_name.clone(),
                reason: format!(
                    "primary key column `{k}` is not in the file (check `primary_key` in the config)"
                ),
            });
        }
    }
    let processing = processing_schema(&schema)?;
    let key_types: Vec<PrimitiveType> = key
        .iter()
        .map(|k| primitive(&schema, k))
        .collect::<Result<_>>()?;
    let order_columns = cfg.ordering_columns();
    if let Some(c) = order_columns
        .iter()
        .find(|c| schema.field_by_name(c).is_none())
    {
        return Err(Error::Config(format!(
            "table {table_name}: ordering column `{c}` (ordering_column / change_sequence_column / \
             commit_timestamp_column under [tables.\"{}\"]) is not in the files",
            cfg.source
        )));
    }
    let types = opened
        .iter()
        .map(|src| {
            src.columns()
                .iter()
                .map(|c| primitive(&schema, &c.name))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    Ok(Prepared {
        schema,
        change,
        opened,
        table_columns,
        types,
        key_types,
        processing,
        order_columns,
        inferred,
    })
}

/// The files opened, and the table schema once every file's columns are in it.
struct Settled {
    schema: Schema,
    change: SchemaChange,
    opened: Vec<SourceFile>,
    /// The table's columns before this input (names for headerless files).
    table_columns: Option<Vec<String>>,
    /// Per file: columns whose type was inferred from the file's first records.
    inferred: Vec<Vec<usize>>,
}

/// Opens every file and evolves the schema by its columns, in DMS order.
fn settle_schema(
    cfg: &TableConfig,
    key: &[String],
    current: Option<(Schema, i32)>,
    files: &[FileInput],
    inference: &Inference,
) -> Result<Settled> {
    let table_name = cfg.target();
    let mut schema: Option<Schema> = current.as_ref().map(|(s, _)| s.clone());
    let mut last_column_id = current.as_ref().map_or(0, |(_, l)| *l);
    let mut change = SchemaChange::default();
    let table_columns: Option<Vec<String>> = schema.as_ref().map(|s| {
        s.as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect()
    });
    let mut opened = Vec::with_capacity(files.len());
    let mut inferred = Vec::with_capacity(files.len());
    for (fi, f) in files.iter().enumerate() {
        let data = f
            .data
            .clone()
            .ok_or_else(|| Error::Internal(format!("{} was not fetched", f.object.key)))?;
        let src = SourceFile::open(&f.object, data, cfg, table_columns.as_deref())?;
        if let Some(dup) = src.layout().duplicate_column() {
            return Err(InputError::new(&f.object.key, "the column appears twice")
                .column(dup)
                .into());
        }
        let (typed, from_start) = column_types(&src, schema.as_ref(), cfg, fi, inference)?;
        inferred.push(from_start);
        match &schema {
            None => {
                let s = evolve::initial_schema(&typed, key, &table_name)?;
                last_column_id = s.highest_field_id();
                schema = Some(s);
            }
            Some(s) => {
                if let Some((next, ch)) =
                    evolve::evolve(s, last_column_id, &typed, &table_name, &f.object.key)?
                {
                    // A promotion alone adds no id: the table's last one still stands.
                    last_column_id = last_column_id.max(next.highest_field_id());
                    change.added.extend(ch.added);
                    change.promoted.extend(ch.promoted);
                    schema = Some(next);
                }
            }
        }
        opened.push(src);
    }
    let schema = schema.ok_or_else(|| Error::Internal("no files to read".into()))?;
    Ok(Settled {
        schema,
        change,
        opened,
        table_columns,
        inferred,
    })
}

/// Every column of a file with its type, and the columns whose type was guessed from the
/// file's first records.
type Typed = (Vec<(String, PrimitiveType)>, Vec<usize>);

/// The type of every column of `src`: the table's where the column exists (text), else the
/// file's declared type, a configured one, or inferred from the file (as `inference` says).
/// Also: the columns whose type was guessed from the file's first records.
fn column_types(
    src: &SourceFile,
    schema: Option<&Schema>,
    cfg: &TableConfig,
    file: usize,
    inference: &Inference,
) -> Result<Typed> {
    let cols = src.columns();
    let mut typed: Vec<(String, Option<PrimitiveType>)> = Vec::with_capacity(cols.len());
    for c in &cols {
        let existing = schema.and_then(|s| s.field_by_name(&c.name)).and_then(|f| {
            match f.field_type.as_ref() {
                Type::Primitive(p) => Some(p.clone()),
                _ => None,
            }
        });
        // A DMS TIME column is stored as `time_type` says (an existing column keeps its type).
        let declared = c
            .declared
            .as_ref()
            .map(|d| crate::types::stored_type(d, existing.as_ref(), cfg.time_type));
        let t = if Some(&c.name) == cfg.change_sequence_column.as_ref() {
            Some(c.declared.clone().unwrap_or(PrimitiveType::String))
        } else if matches!(src, SourceFile::Csv(_)) {
            // Text takes the table's type when the column exists, unless `columns` pins a type
            // it widens to (the source's INT became BIGINT: text says nothing of it, the
            // operator's pin does); else declared or inferred.
            match (existing, declared) {
                (Some(have), Some(pin)) if can_promote(&have, &pin) => Some(pin),
                (Some(have), _) => Some(have),
                (None, declared) => declared.or_else(|| {
                    (Some(&c.name) == cfg.commit_timestamp_column.as_ref())
                        .then_some(PrimitiveType::Timestamp)
                }),
            }
        } else {
            declared
        };
        typed.push((c.name.clone(), t));
    }
    let given = |name: &String| match inference {
        Inference::Given { types, .. } => types.get(&(file, name.clone())).cloned(),
        _ => None,
    };
    for (n, t) in typed.iter_mut() {
        if t.is_none() && cfg.infer_types {
            *t = given(n);
        }
    }
    let unknown: Vec<usize> = (0..typed.len()).filter(|&i| typed[i].1.is_none()).collect();
    let names: Vec<String> = unknown.iter().map(|&i| typed[i].0.clone()).collect();
    let (inferred, from_start) = if unknown.is_empty() {
        (vec![], vec![])
    } else if !cfg.infer_types {
        (vec![PrimitiveType::String; unknown.len()], vec![])
    } else {
        match (inference, src) {
            (
                Inference::Start { records } | Inference::Given { records, .. },
                SourceFile::Csv(c),
            ) => (c.infer_types_from_start(&names, *records)?, unknown.clone()),
            _ => (src.infer_types(&names)?, vec![]),
        }
    };
    for (&i, t) in unknown.iter().zip(inferred) {
        typed[i].1 = Some(t);
    }
    let typed = typed
        .into_iter()
        .map(|(n, t)| (n, t.unwrap_or(PrimitiveType::String)))
        .collect();
    Ok((typed, from_start))
}

/// Quarantine: rows whose key (or, in a change file, ordering column) is NULL cannot be
/// applied; set them aside with `reason`.
pub(super) fn reject_null_keys(
    b: ChangeBatch,
    key: &[String],
    f: &FileInput,
    rejected: &mut Vec<Rejected>,
    reason: &str,
) -> Result<ChangeBatch> {
    let cols: Vec<(&String, &ArrayRef)> = key
        .iter()
        .filter_map(|k| b.data.column_by_name(k).map(|c| (k, c)))
        .collect();
    if cols.iter().all(|(_, c)| c.null_count() == 0) {
        return Ok(b);
    }
    let mut keep = Vec::with_capacity(b.data.num_rows());
    for r in 0..b.data.num_rows() {
        match cols.iter().find(|(_, c)| c.is_null(r)) {
            Some((k, _)) => {
                rejected.push(Rejected {
                    error: InputError::new(&f.object.key, reason)
                        .at(crate::read::position(f.object.format, b.positions[r]))
                        .column(k.as_str()),
                    record: None,
                });
                keep.push(Some(false));
            }
            None => keep.push(Some(true)),
        }
    }
    b.filter(&arrow_array::BooleanArray::from(keep))
}

fn primitive(schema: &Schema, name: &str) -> Result<PrimitiveType> {
    match schema.field_by_name(name).map(|f| f.field_type.as_ref()) {
        Some(Type::Primitive(p)) => Ok(p.clone()),
        _ => Err(Error::Internal(format!(
            "column `{name}` is not a primitive column of the table"
        ))),
    }
}

/// The table schema as plain nullable Arrow fields: what batches are aligned to.
pub(super) fn processing_schema(schema: &Schema) -> Result<SchemaRef> {
    let fields = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| match f.field_type.as_ref() {
            Type::Primitive(p) => Ok(Field::new(&f.name, arrow_type(p)?, true)),
            other => Err(Error::Internal(format!(
                "column `{}` has nested type {other}",
                f.name
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(ArrowSchema::new(fields)))
}

/// Reorders a file's batch into the table's column order; columns the file lacks are NULL.
pub(super) fn align(b: ChangeBatch, schema: &SchemaRef) -> Result<ChangeBatch> {
    let n = b.data.num_rows();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match b.data.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => Ok(arrow_cast::cast(c, f.data_type())?),
            None => Ok(new_null_array(f.data_type(), n)),
        })
        .collect::<Result<_>>()?;
    // Unsupplied cells follow their column to its place in the table's order.
    let unsupplied = b
        .unsupplied
        .iter()
        .map(|(r, c)| {
            let name = b.data.schema().field(*c).name().clone();
            schema
                .index_of(&name)
                .map(|i| (*r, i))
                .map_err(|_| Error::Internal(format!("column `{name}` is not the table's")))
        })
        .collect::<Result<_>>()?;
    Ok(ChangeBatch {
        data: RecordBatch::try_new(schema.clone(), columns)?,
        unsupplied,
        ..b
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::NestedField;

    /// Writes a DMS Parquet change file of `columns` (one row) and returns it as an input.
    fn parquet_input(
        dir: &std::path::Path,
        name: &str,
        columns: Vec<(&str, ArrayRef)>,
    ) -> FileInput {
        let path = dir.join(name);
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            batch.schema(),
            None,
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let object = crate::locate::locate(
            &path.to_string_lossy(),
            &crate::config::SourceSettings::default(),
        )
        .unwrap()
        .unwrap();
        super::super::local_inputs(vec![(object, path)]).remove(0)
    }

    /// Another engine dropped columns 4 and 5 (the table's last column id stays 5). A file that
    /// only widens a column, then one that adds a column, in one commit: the new column gets
    /// id 6, not the id of a dropped column whose values old data files still carry.
    #[test]
    fn a_promotion_does_not_lower_the_last_column_id() {
        let dir = std::env::temp_dir().join(format!("d2i-read-ids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("s/t")).unwrap();
        let table = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "n", Type::Primitive(PrimitiveType::Int)).into(),
            ])
            .with_identifier_field_ids([1])
            .build()
            .unwrap();
        let op = |v: &str| -> ArrayRef { Arc::new(arrow_array::StringArray::from(vec![v])) };
        let long = |v: i64| -> ArrayRef { Arc::new(arrow_array::Int64Array::from(vec![v])) };
        let files = vec![
            parquet_input(
                &dir.join("s/t"),
                "20220302-1134010000.parquet",
                vec![("Op", op("U")), ("id", long(1)), ("n", long(5_000_000_000))],
            ),
            parquet_input(
                &dir.join("s/t"),
                "20220302-1134020000.parquet",
                vec![("Op", op("U")), ("id", long(1)), ("w", op("new"))],
            ),
        ];
        let cfg = crate::config::Config::from_toml("[tables.\"s.t\"]\nprimary_key = [\"id\"]\n")
            .unwrap()
            .table("s", "t")
            .unwrap();
        let settled = settle_schema(
            &cfg,
            &["id".to_string()],
            Some((table, 5)),
            &files,
            &Inference::Whole,
        )
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let n = settled.schema.field_by_name("n").unwrap();
        assert_eq!(*n.field_type, Type::Primitive(PrimitiveType::Long));
        assert_eq!(settled.schema.field_id_by_name("w"), Some(6));
    }
}
