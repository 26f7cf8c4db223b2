//! `CDC_TXN` files (`PreserveTransactions=true` with `CdcPath`): the changes of every table in
//! transaction order, one row `op,TABLE,SCHEMA,field…` each (table before schema), never a
//! header. One table's rows are read as a headerless change file of that table: the file with
//! the other tables' records replaced by as many line breaks (so that every line keeps its
//! number in messages) and its own records without the table and schema fields.

use std::collections::BTreeSet;
use std::io::Read;

use crate::error::{InputError, Position, Result};
use crate::read::SourceData;

/// The largest CDC_TXN file read (decompressed): DMS writes one per transaction batch.
const MAX_BYTES: u64 = 1 << 30;

/// One record's bytes: where it is, where its fields 2–3 (table, schema) and 4 start, and
/// how many line breaks it spans (its own end included).
struct Record {
    start: usize,
    /// End of the op field (where the delimiter after it starts).
    op_end: usize,
    /// Start of the first data field, if the record has one.
    data_start: Option<usize>,
    table: Vec<u8>,
    schema: Vec<u8>,
    end: usize,
    breaks: u64,
    line: u64,
    fields: usize,
}

/// The file's bytes, decompressed.
fn bytes_of(data: &SourceData, label: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    data.open(label, MAX_BYTES)?
        .read_to_end(&mut out)
        .map_err(|e| crate::error::Error::io(label.to_string(), e))?;
    Ok(out)
}

/// Splits `data` into records, RFC 4180 quoting (a quote opens a field, `""` inside it is a
/// quote), any delimiter, LF, CRLF or CR line ends.
fn records(data: &[u8], delimiter: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut line = 1u64;
    while pos < data.len() {
        let start = pos;
        let mut fields: Vec<(usize, usize)> = Vec::new();
        let mut field_start = pos;
        let mut quoted = false;
        let mut breaks = 0u64;
        let end;
        loop {
            if pos >= data.len() {
                end = pos;
                break;
            }
            let b = data[pos];
            if quoted {
                match b {
                    b'"' if data.get(pos + 1) == Some(&b'"') => pos += 2,
                    b'"' => {
                        quoted = false;
                        pos += 1;
                    }
                    b'\r' if data.get(pos + 1) == Some(&b'\n') => {
                        breaks += 1;
                        pos += 2;
                    }
                    b'\n' | b'\r' => {
                        breaks += 1;
                        pos += 1;
                    }
                    _ => pos += 1,
                }
                continue;
            }
            if b == b'"' && pos == field_start {
                quoted = true;
                pos += 1;
            } else if data[pos..].starts_with(delimiter) {
                fields.push((field_start, pos));
                pos += delimiter.len();
                field_start = pos;
            } else if b == b'\n' || b == b'\r' {
                end = pos;
                pos += if b == b'\r' && data.get(pos + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                breaks += 1;
                break;
            } else {
                pos += 1;
            }
        }
        fields.push((field_start, end));
        let unquote = |(a, b): (usize, usize)| -> Vec<u8> {
            let f = &data[a..b];
            match f.strip_prefix(b"\"").and_then(|f| f.strip_suffix(b"\"")) {
                Some(inner) => {
                    let mut v = Vec::with_capacity(inner.len());
                    let mut i = 0;
                    while i < inner.len() {
                        v.push(inner[i]);
                        i += if inner[i] == b'"' && inner.get(i + 1) == Some(&b'"') {
                            2
                        } else {
                            1
                        };
                    }
                    v
                }
                None => f.to_vec(),
            }
        };
        out.push(Record {
            start,
            op_end: fields[0].1,
            data_start: fields.get(3).map(|f| f.0),
            table: fields.get(1).copied().map(unquote).unwrap_or_default(),
            schema: fields.get(2).copied().map(unquote).unwrap_or_default(),
            end,
            breaks,
            line,
            fields: if end == start { 0 } else { fields.len() },
        });
        line += breaks;
    }
    out
}

fn check(r: &Record, label: &str) -> Result<()> {
    if r.fields > 0 && r.fields < 4 {
        return Err(InputError::new(
            label,
            format!(
                "a CDC_TXN row has {} field(s); DMS writes `op,table,schema,field…` (at least \
                 one data field)",
                r.fields
            ),
        )
        .at(Position::Line(r.line))
        .into());
    }
    Ok(())
}

/// The tables (`schema`, `table`, as DMS names them) that `data` holds rows of.
pub fn tables_in(
    data: &SourceData,
    label: &str,
    delimiter: &[u8],
) -> Result<BTreeSet<(String, String)>> {
    let bytes = bytes_of(data, label)?;
    let mut out = BTreeSet::new();
    for r in records(&bytes, delimiter) {
        check(&r, label)?;
        if r.fields == 0 {
            continue;
        }
        let name = |v: &[u8], what: &str| -> Result<String> {
            String::from_utf8(v.to_vec()).map_err(|_| {
                InputError::new(label, format!("the {what} name is not UTF-8"))
                    .at(Position::Line(r.line))
                    .into()
            })
        };
        out.insert((name(&r.schema, "schema")?, name(&r.table, "table")?));
    }
    Ok(out)
}

/// Table `schema.table`'s rows of `data`, as a headerless change file (`Op,field…`) whose
/// lines are the lines of `data` (other tables' records become empty lines).
pub fn rows_of(
    data: &SourceData,
    label: &str,
    delimiter: &[u8],
    schema: &str,
    table: &str,
) -> Result<Vec<u8>> {
    let bytes = bytes_of(data, label)?;
    let mut out = Vec::with_capacity(bytes.len());
    for r in records(&bytes, delimiter) {
        check(&r, label)?;
        let ours = r.fields > 0 && r.schema == schema.as_bytes() && r.table == table.as_bytes();
        match (ours, r.data_start) {
            (true, Some(data_start)) => {
                out.extend_from_slice(&bytes[r.start..r.op_end]);
                out.extend_from_slice(delimiter);
                out.extend_from_slice(&bytes[data_start..r.end]);
                out.push(b'\n');
            }
            _ => out.extend(std::iter::repeat_n(b'\n', r.breaks.max(1) as usize)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(s: &str) -> SourceData {
        SourceData::Bytes(bytes::Bytes::copy_from_slice(s.as_bytes()))
    }

    /// The doc's example, with a quoted line break and a quoted delimiter: each table's rows
    /// keep their lines, fields and quoting.
    #[test]
    fn each_table_reads_its_rows_on_their_lines() {
        let f = data(
            "I,Names_03,rdsTempsdb,13,Daniel\n\
             U,Names_03,rdsTempsdb,23,\"Kathy, K\"\n\
             I,\"Names_6d\",rdsTempsdb,15,\"Jane\nSmith\"\r\n\
             D,Names_03,rdsTempsdb,13,Cathy\n\
             I,Names_6d,rdsTempsdb,24,Chris\n",
        );
        let tables = tables_in(&f, "t.csv", b",").unwrap();
        assert_eq!(
            tables.into_iter().collect::<Vec<_>>(),
            vec![
                ("rdsTempsdb".to_string(), "Names_03".to_string()),
                ("rdsTempsdb".to_string(), "Names_6d".to_string())
            ]
        );
        let a = rows_of(&f, "t.csv", b",", "rdsTempsdb", "Names_03").unwrap();
        assert_eq!(
            String::from_utf8(a).unwrap(),
            "I,13,Daniel\nU,23,\"Kathy, K\"\n\n\nD,13,Cathy\n\n"
        );
        let b = rows_of(&f, "t.csv", b",", "rdsTempsdb", "Names_6d").unwrap();
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "\n\nI,15,\"Jane\nSmith\"\n\nI,24,Chris\n"
        );
        // Other delimiters, and a file without a final line break.
        let t = data("I|a|s|1|x\nI|b|s|2|y");
        assert_eq!(
            rows_of(&t, "t.csv", b"|", "s", "b").unwrap(),
            b"\nI|2|y\n".to_vec()
        );
    }

    #[test]
    fn a_row_without_data_fields_names_its_line() {
        let e = tables_in(&data("I,a,s,1\nI,a,s\n"), "CDC_TXN-1.csv", b",")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("CDC_TXN-1.csv, line 2") && e.contains("3 field(s)"),
            "{e}"
        );
    }
}
