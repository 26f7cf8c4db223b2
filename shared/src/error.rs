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
///
/// The offending value (row data, possibly personal) is carried apart from the message:
/// `reason` is a template that names the kind of problem and may hold [`VALUE`] where the value
/// goes. [`fmt::Display`] (what the CLI shows its user) puts the value there; [`Self::redacted`]
/// (what logs carry at the default level) leaves it out, whatever the value contains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub file: String,
    pub position: Option<Position>,
    pub column: Option<String>,
    pub reason: String,
    /// The input value the problem is about, if any.
    pub value: Option<String>,
}

/// Where an [`InputError`]'s value goes in its `reason`.
pub const VALUE: &str = "{value}";

impl InputError {
    pub fn new(file: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            position: None,
            column: None,
            reason: reason.into(),
            value: None,
        }
    }
    /// The value the problem is about (kept out of logs at the default level).
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
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

impl InputError {
    /// The reason with the value in place (quoted), as the user sees it.
    pub fn message(&self) -> String {
        self.fill(self.value.as_deref().map(|v| format!("`{v}`")))
    }

    /// The whole message without the value: file, line or row, column and the kind of problem.
    /// This is what logs carry at the default level.
    pub fn redacted(&self) -> String {
        format!("{}: {}", self.location(), self.fill(None))
    }

    fn location(&self) -> String {
        let mut s = self.file.clone();
        if let Some(p) = self.position {
            s.push_str(&format!(", {p}"));
        }
        if let Some(c) = &self.column {
            s.push_str(&format!(", column `{c}`"));
        }
        s
    }

    fn fill(&self, value: Option<String>) -> String {
        match (value, self.reason.contains(VALUE)) {
            (Some(v), true) => self.reason.replacen(VALUE, &v, 1),
            (Some(v), false) => format!("{} (value {v})", self.reason),
            (None, true) => self.reason.replacen(VALUE, "a value", 1),
            (None, false) => self.reason.clone(),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location(), self.message())
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
         it holds>`, or `--none` if it holds none (every DMS file then applies on top of its rows)"
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

    /// Object storage (S3) refused or failed a request; the message names the request and key.
    #[error("{0}")]
    Storage(String),

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

    /// An operation on a table (scan, history, compact, expire, orphans) that is not in the
    /// catalog.
    #[error("table {table} does not exist")]
    NoSuchTable { table: String },

    /// The table holds what dms2iceberg cannot read or write correctly (another engine's
    /// equality deletes): refused before anything is written.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// The table's own files disagree with its metadata (a data file with other row counts
    /// than its manifest says, a partition spec or sequence number missing, an unreadable
    /// applied-file record): written or damaged by something else; nothing is committed.
    #[error("table files: {0}")]
    Table(String),

    /// A DMS file that cannot be applied in DMS order now (older than what the table's record
    /// still lists, or a full-load file whose load cannot be merged): needs a reload or a
    /// later run, not a retry of the same invocation.
    #[error("{0}")]
    Order(String),

    /// The catalog swap may or may not have happened (a timeout, a lost connection) and could
    /// not be resolved: the next run finds out from the table's record.
    #[error(
        "commit to {table} may or may not have landed ({reason}); run it again: the table's record says what is applied"
    )]
    CommitUnknown { table: String, reason: String },

    /// The catalog names a metadata file that is not in storage, or that is not table
    /// metadata: the table cannot be read by any engine until the pointer is moved back to
    /// metadata that reads (`repair`).
    #[error(
        "table {table} is damaged: the catalog names metadata {location}, which {problem}; \
         `dms2iceberg repair {table}` (or the compaction function's next run) points it back at \
         the newest intact metadata, and the DMS files applied since are applied again"
    )]
    MetadataDamaged {
        table: String,
        location: String,
        problem: String,
    },

    /// A snapshot a time-travel read names that the table does not have.
    #[error("table {table} has no snapshot {what}")]
    NoSuchSnapshot { table: String, what: String },

    /// A broken invariant of dms2iceberg itself (a task that panicked, a lock poisoned, a
    /// state the code does not expect): a bug to report.
    #[error("{0}")]
    Internal(String),
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

impl Error {
    /// The kind of error as one word, for what counts and routes failures: the Lambda functions
    /// report it as `errorType` (alarms and dead-letter triage filter on it).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Input(_) | Error::Key { .. } => "InputError",
            Error::Schema { .. } => "SchemaError",
            Error::Config(_) | Error::NoPrimaryKey { .. } => "ConfigError",
            Error::NoRecord { .. } => "NoRecordError",
            Error::CommitFailed { .. } => "CommitConflict",
            Error::Catalog(_) | Error::Sqlite(_) => "CatalogError",
            Error::Storage(_) | Error::Io { .. } => "StorageError",
            Error::Iceberg(_) | Error::Parquet(_) | Error::Arrow(_) | Error::Table(_) => {
                "TableError"
            }
            Error::Order(_) => "OrderError",
            Error::CommitUnknown { .. } => "CommitUnknown",
            Error::MetadataDamaged { .. } => "TableDamaged",
            Error::NoSuchSnapshot { .. } => "NoSuchSnapshot",
            Error::Unsupported(_) => "Unsupported",
            Error::NoSuchTable { .. } => "NoSuchTable",
            Error::Internal(_) => "InternalError",
        }
    }
}

impl Error {
    /// The message fit for logs at the default level: an input error without the value it is
    /// about (see [`InputError::redacted`]). Other errors carry names (tables, columns, config
    /// keys, object keys), never row values.
    pub fn redacted(&self) -> String {
        match self {
            Error::Input(ie) => format!("bad input: {}", ie.redacted()),
            e => e.to_string(),
        }
    }

    /// The input value the error is about, if any: for debug-level logs only.
    pub fn value(&self) -> Option<&str> {
        match self {
            Error::Input(ie) => ie.value.as_deref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_users_meet_has_a_kind_of_its_own() {
        let errors = [
            Error::from(InputError::new("f.csv", "bad {value}").value("x")),
            Error::Key {
                key: "k".into(),
                reason: "r".into(),
            },
            Error::Config("c".into()),
            Error::NoPrimaryKey {
                table: "a.b".into(),
                source_table: "a.b".into(),
            },
            Error::Schema {
                table: "a.b".into(),
                reason: "column `x` changed type".into(),
            },
            Error::NoRecord {
                table: "a.b".into(),
            },
            Error::Unsupported("table has equality delete files (d.parquet)".into()),
            Error::NoSuchTable {
                table: "a.b".into(),
            },
            Error::CommitFailed {
                table: "a.b".into(),
                attempts: 3,
                reason: "r".into(),
            },
            Error::Catalog("c".into()),
            Error::Storage("S3 GetObject s3://b/k: denied".into()),
            Error::MetadataDamaged {
                table: "a.b".into(),
                location: "s3://w/a.b/metadata/00002-x.metadata.json".into(),
                problem: "does not exist".into(),
            },
        ];
        for e in &errors {
            assert_ne!(e.kind(), "Error", "{e:?}");
        }
        assert_eq!(Error::Internal("x".into()).kind(), "InternalError");
    }

    #[test]
    fn values_stay_out_of_the_redacted_form_however_quoted() {
        for secret in [
            "SSN-078-05-1120",
            "`SSN-078-05-1120`",
            "a`SSN-078-05-1120`b",
            "\"SSN\"",
        ] {
            let e = InputError::new("s/t/f.csv", format!("cannot parse {VALUE} as long"))
                .at(Position::Line(3))
                .column("n")
                .value(secret);
            assert_eq!(
                e.redacted(),
                "s/t/f.csv, line 3, column `n`: cannot parse a value as long"
            );
            assert!(e.to_string().contains(secret));
            let e = Error::from(e);
            assert!(!e.redacted().contains("SSN"), "{}", e.redacted());
            assert_eq!(e.value(), Some(secret));
        }
        let e = InputError::new("f.csv", "unknown operation (expected I, U or D)")
            .column("Op")
            .value("X");
        assert_eq!(
            e.to_string(),
            "f.csv, column `Op`: unknown operation (expected I, U or D) (value `X`)"
        );
        assert_eq!(
            e.redacted(),
            "f.csv, column `Op`: unknown operation (expected I, U or D)"
        );
    }
}
