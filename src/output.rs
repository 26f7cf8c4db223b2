//! Rendering scan results: an aligned table for people, CSV and JSON lines for programs.
//! JSON values are exact: decimals as strings with their scale, timestamps with microseconds.

use std::io::Write;

use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::DataType;

/// `scan --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// `history --format` (no CSV: refused rather than printed as a table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableOrJson {
    Table,
    Json,
}

/// `--format` of the commands that print a report (ingest, compact, expire, orphans, tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TextOrJson {
    Text,
    Json,
}

/// `--format` or its older spelling `--json` (still accepted).
pub fn json_or(format: TextOrJson, json: bool) -> bool {
    json || format == TextOrJson::Json
}

fn options() -> FormatOptions<'static> {
    FormatOptions::new()
        .with_null("")
        .with_date_format(Some("%Y-%m-%d"))
        .with_datetime_format(Some("%Y-%m-%d %H:%M:%S%.6f"))
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.6f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.6f%:z"))
        .with_time_format(Some("%H:%M:%S%.6f"))
}

/// Text of every cell, `None` for NULL.
fn cells(batch: &RecordBatch) -> anyhow::Result<Vec<Vec<Option<String>>>> {
    let opts = options();
    let fmts = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        rows.push(
            batch
                .columns()
                .iter()
                .zip(&fmts)
                .map(|(c, f)| (!c.is_null(r)).then(|| f.value(r).to_string()))
                .collect(),
        );
    }
    Ok(rows)
}

pub fn write(out: &mut impl Write, batch: &RecordBatch, format: Format) -> anyhow::Result<()> {
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let rows = cells(batch)?;
    match format {
        Format::Json => {
            // Keys in column order (a serde_json map would sort them).
            let keys: Vec<String> = names
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<_, _>>()?;
            for row in &rows {
                let fields: Vec<String> = keys
                    .iter()
                    .zip(row)
                    .zip(schema.fields())
                    .map(|((k, v), f)| format!("{k}:{}", json_value(v.as_deref(), f.data_type())))
                    .collect();
                writeln!(out, "{{{}}}", fields.join(","))?;
            }
        }
        Format::Csv => {
            writeln!(
                out,
                "{}",
                names
                    .iter()
                    .map(|n| csv_field(n))
                    .collect::<Vec<_>>()
                    .join(",")
            )?;
            for row in &rows {
                let line: Vec<String> = row
                    .iter()
                    .map(|v| v.as_deref().map(csv_field).unwrap_or_default())
                    .collect();
                writeln!(out, "{}", line.join(","))?;
            }
        }
        Format::Table => {
            let shown: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|v| {
                            v.clone()
                                .unwrap_or_else(|| "NULL".into())
                                .replace('\n', "\\n")
                                .replace('\r', "\\r")
                        })
                        .collect()
                })
                .collect();
            let mut widths: Vec<usize> = names.iter().map(|n| n.chars().count()).collect();
            for r in &shown {
                for (w, v) in widths.iter_mut().zip(r) {
                    *w = (*w).max(v.chars().count());
                }
            }
            let line = |vals: Vec<&str>| -> String {
                vals.iter()
                    .zip(&widths)
                    .map(|(v, w)| format!("{v:<w$}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
                    .trim_end()
                    .to_string()
            };
            writeln!(out, "{}", line(names.clone()))?;
            writeln!(
                out,
                "{}",
                widths
                    .iter()
                    .map(|w| "-".repeat(*w))
                    .collect::<Vec<_>>()
                    .join("-+-")
            )?;
            for r in &shown {
                writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
            }
            writeln!(out, "({} rows)", rows.len())?;
        }
    }
    Ok(())
}

fn json_value(v: Option<&str>, t: &DataType) -> serde_json::Value {
    let Some(v) = v else {
        return serde_json::Value::Null;
    };
    match t {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => v
            .parse::<i64>()
            .map(serde_json::Value::from)
            .unwrap_or_else(|_| serde_json::Value::String(v.into())),
        DataType::Float32 | DataType::Float64 => v
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(serde_json::Value::Number)
            .unwrap_or_else(|| serde_json::Value::String(v.into())),
        DataType::Boolean => serde_json::Value::Bool(v == "true"),
        _ => serde_json::Value::String(v.into()),
    }
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn json_keys_follow_the_columns() {
        let b = RecordBatch::try_from_iter([
            ("zeta", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            (
                "alpha",
                Arc::new(StringArray::from(vec!["a\"b"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let mut out = Vec::new();
        write(&mut out, &b, Format::Json).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"zeta\":1,\"alpha\":\"a\\\"b\"}\n"
        );
    }
}
