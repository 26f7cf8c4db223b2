//! Typed errors of the pipeline. Every error that comes from input names the file, and where it
//! can the line (CSV) or row (Parquet) and the column, so an operator can find the bad record.

use std::fmt;

/// Where in a source file a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// 1-based line where the CSV record starts (records may span lines).
    Line(u64),
    /// 1-based row number in a Parquet file (the first row is row 1).
    Row(u64),
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Line(l) => write!(f, "line {l}"),
            Position::Row(r) => write!(f, "row {r}"),
        }
    }
}

/// A problem with one input file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub file: String,
    pub position: Option<Position>,
    pub column: Option<String>,
    pub reason: String,
}

impl InputError {
    pub fn new(file: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            position: None,
            column: None,
            reason: reason.into(),
        }
    }
    pub fn at(mut self, position: Position) -> Self {
        self.position = Some(position);
        self
    }
    pub fn column(mut self, column: impl Into<String>) -> Self {
        self.column = Some(column.into());
        self
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(p) = self.position {
            write!(f, ", {p}")?;
        }
        if let Some(c) = &self.column {
            write!(f, ", column `{c}`")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// A row set aside under the `quarantine` bad-row policy: why, and the row as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub error: InputError,
    /// The record's fields as text (CSV), when it could be read.
    pub record: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("bad input: {0}")]
    Input(Box<InputError>),

    #[error("config: {0}")]
    Config(String),

    #[error(
        "table {table}: no primary key is known (the table does not exist yet or has no identifier \
         fields); set `primary_key = [\"...\"]` under [tables.\"{source_table}\"] (or [defaults]) in the config"
    )]
    NoPrimaryKey { table: String, source_table: String },

    #[error("table {table}: {reason}")]
    Schema { table: String, reason: String },

    #[error(
        "table {table} holds data but no record of which DMS files it holds (it was created or \
         rewritten by another engine, or its history was expired before dms2iceberg kept the \
         record in a table property); applying the DMS files again would revert newer rows. \
         Declare what it holds: `dms2iceberg mark-applied {table} --through <the last DMS file \
         it holds>`"
    )]
    NoRecord { table: String },

    #[error("object key `{key}`: {reason}")]
    Key { key: String, reason: String },

    #[error("commit to {table} failed after {attempts} attempts: {reason}")]
    CommitFailed {
        table: String,
        attempts: u32,
        reason: String,
    },

    #[error("catalog: {0}")]
    Catalog(String),

    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Iceberg(#[from] iceberg::Error),

    #[error(transparent)]
    Parquet(#[from] parquet::errors::ParquetError),

    #[error(transparent)]
    Arrow(#[from] arrow_schema::ArrowError),

    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),

    #[error("{0}")]
    Other(String),
}

impl From<InputError> for Error {
    fn from(e: InputError) -> Self {
        Error::Input(Box::new(e))
    }
}

impl Error {
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// True when the error is about the input file itself (retrying cannot help).
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Error::Input(_) | Error::Schema { .. } | Error::NoPrimaryKey { .. } | Error::Key { .. }
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A message fit for logs at the default level: values quoted in backticks (row values, which
/// may be personal data) are replaced by `…`; file, line, column and the kind of problem stay.
/// Column names are quoted too and lost with them, but `InputError` carries the column apart.
pub fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut parts = message.split('`');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    // Odd parts are quoted. Names (columns, config keys) are kept: they follow `column `,
    // `key `, `set ` or `columns `; anything else quoted is a value.
    let mut prev_plain = out.clone();
    for (i, part) in parts.enumerate() {
        out.push('`');
        if i % 2 == 0 {
            let names_follow = ["column ", "columns ", "key ", "set ", "Op "]
                .iter()
                .any(|w| prev_plain.ends_with(w));
            out.push_str(if names_follow { part } else { "…" });
        } else {
            out.push_str(part);
            prev_plain = part.to_string();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_quoted_values() {
        assert_eq!(
            super::redact("f.csv, line 3, column `n`: cannot parse `4111 1111` as long"),
            "f.csv, line 3, column `n`: cannot parse `…` as long"
        );
        assert_eq!(
            super::redact("unknown operation `X` (expected I, U or D); set `target` under"),
            "unknown operation `…` (expected I, U or D); set `target` under"
        );
        assert_eq!(super::redact("no quotes"), "no quotes");
    }
}
