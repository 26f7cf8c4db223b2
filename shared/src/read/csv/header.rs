//! Opening a CSV file: whether its first record is a header, and the columns its fields are
//! (the header's names, else a known column list, with a leading Op when the record has one).

use iceberg::spec::PrimitiveType;

use super::CsvFile;
use super::records::{csv_error, reader};
use crate::config::TableConfig;
use crate::error::{Error, InputError, Position, Result, VALUE};
use crate::locate::DmsObject;
use crate::read::layout::Layout;
use crate::read::{Op, SourceData};

impl CsvFile {
    pub fn open(
        obj: &DmsObject,
        data: SourceData,
        cfg: &TableConfig,
        table_columns: Option<&[String]>,
    ) -> Result<CsvFile> {
        let label = obj.key.clone();
        let (mut reader, lines) = reader(&data, &label, &cfg.delimiter)?;
        let mut first = csv::ByteRecord::new();
        let got = reader
            .read_byte_record(&mut first)
            .map_err(|e| csv_error(&label, e))?;
        if !got {
            return Err(InputError::new(&label, "the file has no records").into());
        }
        let first_fields: Vec<String> = first
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect();
        let configured: Option<Vec<String>> = cfg
            .columns
            .as_ref()
            .map(|c| c.iter().map(|(n, _)| n.clone()).collect());
        // A column list a headerless file could be read with: the configured one if it names
        // every field, else the table's. A shorter `columns` list only pins types.
        // A headerless change file always starts with its Op (DMS writes it whenever rows can
        // be updates or deletes): an extra leading field there is the Op even when it is not a
        // valid one, so that the row fails on its Op rather than on a field count.
        let op_first =
            first.get(0).and_then(Op::parse).is_some() || obj.kind == crate::locate::FileKind::Cdc;
        let fits = |names: &[String]| {
            names.len() == first_fields.len() || (op_first && names.len() + 1 == first_fields.len())
        };
        let table_names: Option<Vec<String>> = table_columns.map(<[String]>::to_vec);
        let headerless: Option<Vec<String>> = configured
            .clone()
            .filter(|c| fits(c))
            .or_else(|| table_names.clone().filter(|t| fits(t)));
        let has_header = match cfg.header {
            Some(h) => h,
            None => {
                let known: Vec<String> = configured
                    .iter()
                    .chain(table_names.iter())
                    .flatten()
                    .map(|n| cfg.column_name(n))
                    .collect();
                looks_like_header(&first_fields, &known, headerless.is_some(), cfg)
            }
        };
        let names: Vec<String> = if has_header {
            check_header(&first_fields, &label, cfg)?;
            first_fields.clone()
        } else {
            let names: Vec<String> = match (headerless, configured, table_names) {
                (Some(n), _, _) | (None, Some(n), _) | (None, None, Some(n)) => n,
                (None, None, None) => return Err(no_column_list(&first_fields, &label, cfg)),
            };
            // Headerless: an extra leading field is the Op column.
            if first_fields.len() == names.len() + 1 && op_first {
                std::iter::once("Op".to_string()).chain(names).collect()
            } else {
                names
            }
        };
        let declared = declared_types(cfg, &names);
        let layout = Layout::classify(&names, &declared, cfg);
        let key_len = cfg.primary_key.as_ref().map_or(0, |k| k.len());
        Ok(CsvFile {
            label,
            data,
            delimiter: cfg.delimiter.clone(),
            null_value: cfg.null_value.as_bytes().to_vec(),
            no_sup_value: cfg.no_sup_value.as_ref().map(|m| m.as_bytes().to_vec()),
            fields: names.len(),
            quarantine: cfg.bad_rows == crate::config::BadRows::Quarantine,
            layout,
            has_header,
            header_line: lines.lock().map_or(1, |mut l| {
                l.line_of(first.position().map_or(0, |p| p.byte()))
            }),
            key_len,
            source: cfg.source.clone(),
            split: None,
            observe: None,
        })
    }
}

/// The types `cfg`'s `columns` declares for `names` (matched as the table names columns).
fn declared_types(cfg: &TableConfig, names: &[String]) -> Vec<Option<PrimitiveType>> {
    names
        .iter()
        .map(|n| {
            let n = cfg.column_name(n);
            cfg.columns.as_ref().and_then(|cols| {
                cols.iter()
                    .find(|(c, _)| cfg.column_name(c) == n)
                    .and_then(|(_, t)| t.clone())
            })
        })
        .collect()
}

/// Refuses a header (`first`) whose names cannot be columns: too long, or not names at all (the
/// file then likely has no header, though the config says it has one).
fn check_header(first: &[String], label: &str, cfg: &TableConfig) -> Result<()> {
    if let Some(long) = first.iter().find(|f| f.len() > MAX_COLUMN_NAME) {
        return Err(InputError::new(
            label,
            format!(
                "the header has a column name of {} bytes (at most {MAX_COLUMN_NAME})",
                long.len()
            ),
        )
        .at(Position::Line(1))
        .into());
    }
    if let Some(bad) = first.iter().find(|f| !is_column_name(f)) {
        return Err(InputError::new(
            label,
            format!(
                "`header = true` but the first line is not a header ({VALUE} is not a \
                 column name): for files without a header (AddColumnName=false) set \
                 `header = false` and list every column, in file order, under `columns` \
                 under [tables.\"{}\"]",
                cfg.source
            ),
        )
        .value(bad.as_str())
        .at(Position::Line(1))
        .into());
    }
    Ok(())
}

/// The error for a headerless file (`first` its first record) that no column list can read.
fn no_column_list(first: &[String], label: &str, cfg: &TableConfig) -> Error {
    let detail = match first.iter().find(|f| !is_column_name(f)) {
        Some(bad) => InputError::new(
            label,
            format!(
                "the first line is not a header ({VALUE} is not a column name) \
                 and no column list is known: for files without a header \
                 (AddColumnName=false) list every column, in file order, under \
                 `columns` under [tables.\"{}\"]",
                cfg.source
            ),
        )
        .value(bad.as_str()),
        None => InputError::new(
            label,
            format!(
                "`header = false` and no column list is known: list every \
                 column, in file order, under `columns` under [tables.\"{}\"]",
                cfg.source
            ),
        ),
    };
    detail.at(Position::Line(1)).into()
}

/// Longest column name accepted in a header (Glue's limit is 255 characters).
const MAX_COLUMN_NAME: usize = 1024;

/// Plausible column name: what databases allow unquoted, as DMS writes them.
fn is_column_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == '#')
}

/// Whether the first record is a header (the endpoint's `AddColumnName` unset in the config).
/// It is when it starts with `Op`; it is not when a field cannot be a column name, or when it
/// starts like a change row (`I`, `U`, `D`) and a column list can read it. Otherwise it is when
/// every field names a known column (configured, the table's, a before-image of one, an ordering
/// column), or when no column list could read the file without a header. How many columns
/// `columns` lists does not decide it: a short list only pins types.
fn looks_like_header(
    first: &[String],
    known: &[String],
    headerless: bool,
    cfg: &TableConfig,
) -> bool {
    if first.first().is_some_and(|f| f.eq_ignore_ascii_case("op")) {
        return true;
    }
    if first.is_empty() || first.iter().any(|f| !is_column_name(f)) {
        return false;
    }
    if headerless
        && first
            .first()
            .is_some_and(|f| Op::parse(f.as_bytes()).is_some())
    {
        return false;
    }
    let prefix = cfg.column_name(&cfg.before_image_prefix);
    let special = [
        cfg.change_sequence_column.as_ref(),
        cfg.commit_timestamp_column.as_ref(),
        cfg.ordering_column.as_ref(),
    ];
    let all_known = first.iter().map(|f| cfg.column_name(f)).all(|f| {
        known.contains(&f)
            || (!prefix.is_empty()
                && f.strip_prefix(prefix.as_str())
                    .is_some_and(|b| known.iter().any(|n| n == b)))
            || special.contains(&Some(&f))
    });
    all_known || !headerless
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use iceberg::spec::PrimitiveType;

    use super::super::testing::{cfg, obj, open, read_all};
    use crate::locate::FileKind;
    use crate::read::{Op, SourceData, SourceFile};

    #[test]
    fn headerless_with_and_without_op() {
        let mut c = cfg();
        c.columns = Some(vec![
            ("id".into(), Some(PrimitiveType::Long)),
            ("v".into(), None),
        ]);
        let with_op = open(b"I,1,a\nU,1,b\n", &c).unwrap();
        assert!(with_op.layout().has_op());
        assert_eq!(
            read_all(with_op, &[("id", PrimitiveType::Long)]).unwrap()[0].ops,
            vec![Op::Insert, Op::Update]
        );
        let load = open(b"1,a\n2,b\n", &c).unwrap();
        assert!(!load.layout().has_op());
        let b = &read_all(load, &[("id", PrimitiveType::Long)]).unwrap()[0];
        assert_eq!(b.ops, vec![Op::Insert, Op::Insert]);
        assert_eq!(b.data.column(0).as_primitive::<Int64Type>().value(1), 2);
        // A header is still recognised when columns are configured.
        let header = open(b"Op,id,v\nI,1,a\n", &c).unwrap();
        assert_eq!(
            read_all(header, &[("id", PrimitiveType::Long)]).unwrap()[0].positions,
            vec![2]
        );
    }

    #[test]
    fn a_headerless_change_row_with_an_unknown_op_fails_on_its_op() {
        // The table's columns are known (id, v); the change file's extra leading field is its
        // Op even when the Op is not I, U or D: the error is about the Op, not the field count.
        let c = cfg();
        let cols = ["id".to_string(), "v".to_string()];
        let src = SourceFile::open(
            &obj(FileKind::Cdc),
            SourceData::Bytes(b"X,1,b\n".to_vec().into()),
            &c,
            Some(&cols),
        )
        .unwrap();
        let e = read_all(src, &[("id", PrimitiveType::Long)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1, column `Op`"), "{e}");
        assert!(!e.contains("fields"), "{e}");
    }

    #[test]
    fn a_short_columns_list_only_pins_types() {
        // With a header, `columns` naming fewer columns than the file pins their types; header
        // detection does not count them.
        let mut c = cfg();
        c.columns = Some(vec![(
            "salary".into(),
            Some(PrimitiveType::Decimal {
                precision: 8,
                scale: 2,
            }),
        )]);
        for text in [
            &b"id,name,salary,dept\n1,Ada,5200.50,7\n"[..],
            &b"Op,id,name,salary,dept\nI,1,Ada,5200.50,7\n"[..],
        ] {
            let src = open(text, &c).unwrap();
            let cols = src.columns();
            let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, vec!["id", "name", "salary", "dept"]);
            assert_eq!(
                cols[2].declared,
                Some(PrimitiveType::Decimal {
                    precision: 8,
                    scale: 2
                })
            );
            assert_eq!(cols[0].declared, None);
        }
        // Headerless with the full list: a first row of name-like values is data.
        c.columns = Some(vec![
            ("last".into(), None),
            ("first".into(), None),
            ("city".into(), None),
        ]);
        let src = open(b"Smith,Bob,Dallas\nKing,Jean,Nantes\n", &c).unwrap();
        assert_eq!(read_all(src, &[]).unwrap()[0].positions, vec![1, 2]);
        // The same with a header naming the listed columns in another order.
        let src = open(b"city,last,first\nDallas,Smith,Bob\n", &c).unwrap();
        let names: Vec<String> = src.columns().into_iter().map(|c| c.name).collect();
        assert_eq!(names, vec!["city", "last", "first"]);
        // Headerless, the table's columns when the list is short.
        c.columns = Some(vec![("v".into(), Some(PrimitiveType::Long))]);
        let table = vec!["id".to_string(), "v".to_string()];
        let src = SourceFile::open(
            &obj(FileKind::Cdc),
            SourceData::Bytes(b"I,1,5\n".to_vec().into()),
            &c,
            Some(&table),
        )
        .unwrap();
        assert!(src.layout().has_op());
        assert_eq!(src.columns()[1].declared, Some(PrimitiveType::Long));
    }

    #[test]
    fn headerless_without_configured_columns_is_a_clear_error() {
        let e = open(b"I,1,a\n", &cfg()).err().unwrap().to_string();
        assert!(e.contains("line 1") && e.contains("columns"), "{e}");
    }
}
