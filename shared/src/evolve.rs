//! evolve: reconcile the columns a file brings with the table's schema.
//!
//! Columns match by name, in any order. A column the table lacks is added as an optional field;
//! a column the file lacks is NULL for that file's rows. A type may only change the ways Iceberg
//! allows (int→long, float→double, decimal precision widening); anything else is refused before
//! anything is written, so the table is never left half-changed. The new schema is committed
//! in the same snapshot as the data that needs it.

use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

use crate::error::{Error, Result};
use crate::types::unify;

/// What changes, for the summary and logs.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SchemaChange {
    pub added: Vec<String>,
    pub promoted: Vec<(String, PrimitiveType, PrimitiveType)>,
}

impl SchemaChange {
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.promoted.is_empty()
    }
}

/// Schema of a new table: columns in file order, the key columns required and marked as
/// identifier fields (Iceberg's primary key).
pub(crate) fn initial_schema(
    columns: &[(String, PrimitiveType)],
    key: &[String],
    table: &str,
) -> Result<Schema> {
    let mut fields = Vec::with_capacity(columns.len());
    for (i, (name, t)) in columns.iter().enumerate() {
        let id = i as i32 + 1;
        let f = if key.contains(name) {
            NestedField::required(id, name, Type::Primitive(t.clone()))
        } else {
            NestedField::optional(id, name, Type::Primitive(t.clone()))
        };
        fields.push(Arc::new(f));
    }
    let mut ids = Vec::with_capacity(key.len());
    for k in key {
        let Some(pos) = columns.iter().position(|(n, _)| n == k) else {
            return Err(Error::Schema {
                table: table.to_string(),
                reason: format!("primary key column `{k}` is not a column of the file"),
            });
        };
        check_key_type(k, &columns[pos].1, table)?;
        ids.push(pos as i32 + 1);
    }
    Ok(Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .with_identifier_field_ids(ids)
        .build()?)
}

fn check_key_type(name: &str, t: &PrimitiveType, table: &str) -> Result<()> {
    if matches!(t, PrimitiveType::Float | PrimitiveType::Double) {
        return Err(Error::Schema {
            table: table.to_string(),
            reason: format!(
                "primary key column `{name}` is {t}; Iceberg does not allow floating-point identifier fields"
            ),
        });
    }
    Ok(())
}

/// The schema that holds both the table's columns and `incoming` (from `file`), or `None`
/// when the current schema already does. New field ids start above `last_column_id`.
pub(crate) fn evolve(
    current: &Schema,
    last_column_id: i32,
    incoming: &[(String, PrimitiveType)],
    table: &str,
    file: &str,
) -> Result<Option<(Schema, SchemaChange)>> {
    let mut fields: Vec<NestedField> = current
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut change = SchemaChange::default();
    let mut next_id = last_column_id.max(current.highest_field_id()) + 1;
    for (name, t) in incoming {
        match fields.iter_mut().find(|f| &f.name == name) {
            Some(f) => {
                let Type::Primitive(have) = f.field_type.as_ref() else {
                    return Err(Error::Schema {
                        table: table.to_string(),
                        reason: format!(
                            "column `{name}` is a nested type in the table; {file} has {t}"
                        ),
                    });
                };
                match unify(have, t) {
                    Some(u) if &u == have => {}
                    Some(u) => {
                        change
                            .promoted
                            .push((name.clone(), have.clone(), u.clone()));
                        *f.field_type = Type::Primitive(u);
                    }
                    None => {
                        return Err(Error::Schema {
                            table: table.to_string(),
                            reason: format!(
                                "{file}: column `{name}` is {t} but the table has {have}; Iceberg can only \
                                 widen int→long, float→double and decimal precision. Nothing was committed. \
                                 Cast the column at the source, drop it with `drop_columns`, or load into a new table"
                            ),
                        });
                    }
                }
            }
            None => {
                fields.push(NestedField::optional(
                    next_id,
                    name,
                    Type::Primitive(t.clone()),
                ));
                change.added.push(name.clone());
                next_id += 1;
            }
        }
    }
    if change.is_empty() {
        return Ok(None);
    }
    if fields.len() > crate::read::MAX_COLUMNS {
        return Err(Error::Schema {
            table: table.to_string(),
            reason: format!(
                "{file} would give the table {} columns; at most {} are supported",
                fields.len(),
                crate::read::MAX_COLUMNS
            ),
        });
    }
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_fields(fields.into_iter().map(Arc::new))
        .with_identifier_field_ids(current.identifier_field_ids())
        .build()?;
    Ok(Some((schema, change)))
}

/// The table's primary key: its identifier fields, by name.
pub(crate) fn key_columns(schema: &Schema) -> Vec<String> {
    key_field_ids(schema)
        .into_iter()
        .filter_map(|id| schema.name_by_field_id(id).map(str::to_string))
        .collect()
}

/// The key's field ids in field-id order. iceberg-rust keeps them in a `HashSet`, whose order
/// differs between processes: the order files are sorted in (a composite key) must not.
pub(crate) fn key_field_ids(schema: &Schema) -> Vec<i32> {
    let mut ids: Vec<i32> = schema.identifier_field_ids().collect();
    ids.sort_unstable();
    ids
}

/// Parses the config's `partition_by` (`category`, `bucket(16, id)`, `truncate(4, name)`,
/// `day(ts)`, `month(ts)`, `year(ts)`, `hour(ts)`, `identity(x)`) against `schema`.
pub(crate) fn partition_spec(
    partition_by: &[String],
    schema: &Schema,
    table: &str,
) -> Result<iceberg::spec::UnboundPartitionSpec> {
    use iceberg::spec::{Transform, UnboundPartitionSpec};
    let bad = |reason: String| Error::Schema {
        table: table.to_string(),
        reason: format!("partition_by: {reason}"),
    };
    let mut b = UnboundPartitionSpec::builder();
    for expr in partition_by {
        let e = expr.trim();
        let (transform, column) = match e.split_once('(') {
            None => (Transform::Identity, e.to_string()),
            Some((name, rest)) => {
                let args: Vec<&str> = rest
                    .strip_suffix(')')
                    .ok_or_else(|| bad(format!("`{e}`: missing `)`")))?
                    .split(',')
                    .map(str::trim)
                    .collect();
                let num = |s: &str| {
                    s.parse::<u32>()
                        .map_err(|_| bad(format!("`{e}`: `{s}` is not a number")))
                };
                match (name.trim().to_ascii_lowercase().as_str(), args.as_slice()) {
                    ("bucket", [n, c]) => (Transform::Bucket(num(n)?), c.to_string()),
                    ("truncate", [w, c]) => (Transform::Truncate(num(w)?), c.to_string()),
                    ("year" | "years", [c]) => (Transform::Year, c.to_string()),
                    ("month" | "months", [c]) => (Transform::Month, c.to_string()),
                    ("day" | "days", [c]) => (Transform::Day, c.to_string()),
                    ("hour" | "hours", [c]) => (Transform::Hour, c.to_string()),
                    ("identity", [c]) => (Transform::Identity, c.to_string()),
                    _ => return Err(bad(format!("`{e}` is not a known transform"))),
                }
            }
        };
        let column = column.to_lowercase();
        let field = schema
            .field_by_name(&column)
            .or_else(|| schema.field_by_name_case_insensitive(&column))
            .ok_or_else(|| bad(format!("`{e}`: no column `{column}`")))?;
        if transform.result_type(&field.field_type).is_err() {
            return Err(bad(format!(
                "`{e}`: {transform} does not apply to {}",
                field.field_type
            )));
        }
        let name = match transform {
            Transform::Identity => field.name.clone(),
            Transform::Bucket(_) => format!("{}_bucket", field.name),
            Transform::Truncate(_) => format!("{}_trunc", field.name),
            t => format!("{}_{t}", field.name),
        };
        b = b
            .add_partition_field(field.id, name, transform)
            .map_err(|err| bad(format!("`{e}`: {err}")))?;
    }
    Ok(b.build())
}

/// Whether `spec` partitions the same way as `current` (same sources and transforms).
pub(crate) fn same_partitioning(
    spec: &iceberg::spec::UnboundPartitionSpec,
    current: &iceberg::spec::PartitionSpec,
) -> bool {
    spec.fields().len() == current.fields().len()
        && spec
            .fields()
            .iter()
            .zip(current.fields())
            .all(|(a, b)| a.source_id == b.source_id && a.transform == b.transform)
}

/// Sort order of our data files: the key, ascending.
pub(crate) fn key_sort_order(schema: &Schema) -> Result<iceberg::spec::SortOrder> {
    use iceberg::spec::{NullOrder, SortDirection, SortField, SortOrder, Transform};
    if key_field_ids(schema).is_empty() {
        // A table without a key (`mode = "append"`) keeps rows in the order they came.
        return Ok(SortOrder::unsorted_order());
    }
    let mut b = SortOrder::builder();
    b.with_order_id(1);
    for id in key_field_ids(schema) {
        b.with_sort_field(
            SortField::builder()
                .source_id(id)
                .transform(Transform::Identity)
                .direction(SortDirection::Ascending)
                .null_order(NullOrder::First)
                .build(),
        );
    }
    Ok(b.build(schema)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PrimitiveType::*;

    fn cols(c: &[(&str, PrimitiveType)]) -> Vec<(std::string::String, PrimitiveType)> {
        c.iter().map(|(n, t)| (n.to_string(), t.clone())).collect()
    }

    #[test]
    fn new_table_marks_the_key() {
        let s = initial_schema(
            &cols(&[("id", Long), ("name", String)]),
            &["id".into()],
            "t",
        )
        .unwrap();
        assert_eq!(key_columns(&s), vec!["id"]);
        assert!(s.field_by_name("id").unwrap().required);
        assert!(!s.field_by_name("name").unwrap().required);
        assert!(initial_schema(&cols(&[("id", Long)]), &["nope".into()], "t").is_err());
        assert!(initial_schema(&cols(&[("id", Double)]), &["id".into()], "t").is_err());
    }

    #[test]
    fn reordered_and_new_columns() {
        let s = initial_schema(&cols(&[("id", Long), ("a", Int)]), &["id".into()], "t").unwrap();
        assert!(
            evolve(&s, 2, &cols(&[("a", Int), ("id", Long)]), "t", "f")
                .unwrap()
                .is_none()
        );
        let (n, ch) = evolve(
            &s,
            2,
            &cols(&[("b", String), ("a", Long), ("id", Long)]),
            "t",
            "f",
        )
        .unwrap()
        .unwrap();
        assert_eq!(ch.added, vec!["b"]);
        assert_eq!(ch.promoted, vec![("a".to_string(), Int, Long)]);
        assert_eq!(n.field_by_name("b").unwrap().id, 3);
        assert_eq!(n.field_by_name("a").unwrap().id, 2);
        assert_eq!(key_columns(&n), vec!["id"]);
        assert_eq!(n.schema_id(), 1);
        // narrower incoming is fine: cast up on read
        assert!(
            evolve(&n, 3, &cols(&[("a", Int)]), "t", "f")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn refuses_illegal_changes() {
        let s = initial_schema(&cols(&[("id", Long), ("a", Long)]), &["id".into()], "t").unwrap();
        let e = evolve(&s, 2, &cols(&[("a", String)]), "t", "f.parquet")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`a`") && e.contains("f.parquet"), "{e}");
        assert!(evolve(&s, 2, &cols(&[("a", Int), ("id", Double)]), "t", "f").is_err());
    }

    #[test]
    fn a_table_never_grows_past_the_column_limit() {
        let max = crate::read::MAX_COLUMNS;
        let first: Vec<_> = (0..max).map(|i| (format!("c{i}"), Long)).collect();
        let s = initial_schema(&first, &["c0".into()], "t").unwrap();
        let more = cols(&[("one_more", Long)]);
        let e = evolve(&s, max as i32, &more, "t", "f.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.csv") && e.contains(&max.to_string()), "{e}");
    }
}
