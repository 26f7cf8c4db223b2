//! The catalog holds one pointer per table: the location of its current metadata file. Moving
//! it is the commit point, so the one operation that matters is a compare-and-swap.
//!
//! - [`SqliteCatalog`]: the embedded default, `<warehouse>/catalog.db`, in the schema Iceberg's
//!   JDBC catalog and PyIceberg's `SqlCatalog` use (catalog name `default` unless configured),
//!   so both open our tables.
//! - [`GlueCatalog`] (feature `aws`): the AWS Glue Data Catalog, compare-and-swap through
//!   `UpdateTable`'s `VersionId`.
//! - [`S3TablesCatalog`] (feature `aws`): Amazon S3 Tables, compare-and-swap through
//!   `UpdateTableMetadataLocation`'s version token; the service assigns each table's storage.
//! - [`RestCatalog`]: an Iceberg REST catalog, which takes a commit as its requirements and
//!   updates and writes the metadata file itself.
//!
//! Every catalog receives a commit as a [`TableCommit`]: Iceberg's requirements and updates
//! (built by `commit::request`), and the metadata they make. A pointer catalog swaps to that
//! metadata, written by the commit loop; a REST catalog sends the requirements and updates.

#[cfg(feature = "aws")]
mod glue;
mod local;
#[cfg(feature = "aws")]
mod outcome;
mod rest;
#[cfg(feature = "aws")]
mod s3tables;
#[cfg(feature = "aws")]
mod sigv4;
mod sqlite;
mod vended;

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::{TableIdent, TableRequirement, TableUpdate};

#[cfg(feature = "aws")]
pub use glue::{GlueCatalog, hive_type};
pub use rest::{RestAuth, RestCatalog, RestConfig, StorageFor};
#[cfg(feature = "aws")]
pub use s3tables::{S3TablesCatalog, SERVICE_MAINTENANCE};
#[cfg(feature = "aws")]
pub use sigv4::Signer as SigV4Signer;
pub use sqlite::{CATALOG_NAME as SQLITE_CATALOG_NAME, SqliteCatalog};

use crate::error::{Error, Result};
use crate::files::Files;
use crate::files::metadata::Refs;

/// A commit as the catalog receives it: what must still hold of the table, what changes, and
/// the metadata that makes (at `location`, where the commit loop wrote it unless the catalog
/// [writes its metadata itself](Catalog::writes_metadata)).
#[derive(Debug, Clone, Copy)]
pub struct TableCommit<'a> {
    pub requirements: &'a [TableRequirement],
    pub updates: &'a [TableUpdate],
    pub metadata: &'a TableMetadata,
    pub location: &'a str,
}

/// A commit that landed: the table's metadata location now, and the metadata there when the
/// catalog wrote it (REST) rather than us.
#[derive(Debug)]
pub struct Landed {
    pub metadata_location: String,
    pub metadata: Option<(TableMetadata, Refs)>,
}

/// What the catalog says a table's current metadata is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    pub metadata_location: String,
    /// Opaque version the swap must present (Glue's `VersionId`); `None` where the location
    /// itself is the version (SQLite).
    pub version: Option<String>,
    /// The catalog entry's parameters as loaded (Glue), kept by the swap. With `version` the
    /// swap cannot overwrite parameters changed since: the catalog refuses a stale version.
    pub parameters: Option<std::collections::HashMap<String, String>>,
}

/// Why a swap did not happen, as far as the catalog can know it.
///
/// The commit loop may delete what an attempt wrote only after a *certain* refusal
/// ([`Conflict`](SwapError::Conflict), [`Refused`](SwapError::Refused),
/// [`Failed`](SwapError::Failed)): the attempt's metadata file is then named by no catalog,
/// now or later. Anything that may have taken effect is [`Unknown`](SwapError::Unknown), and
/// its files are kept, because the catalog may name them. A catalog makes each swap a single
/// request (no client-side retries of it), since a refusal that answers the retry of a request
/// whose first answer was lost is not certain: the first one may be what moved the version
/// (Iceberg Java's `CommitStateUnknownException`).
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// Someone else moved the pointer first (certain: our request did not take effect):
    /// rebuild on the new state and retry.
    #[error("the table changed since it was read (concurrent commit)")]
    Conflict,
    /// Refused before taking effect for a passing reason (throttled): retry after a while.
    #[error("the catalog refused the commit for now: {0}")]
    Refused(String),
    /// The request may or may not have taken effect (a 5xx, a timeout, a lost connection):
    /// look before doing anything else.
    #[error("commit outcome unknown: {0}")]
    Unknown(String),
    /// Refused before taking effect, for good (access denied, invalid input, no such table).
    #[error(transparent)]
    Failed(#[from] Error),
}

#[async_trait]
pub trait Catalog: Send + Sync {
    /// Storage for table files, with the cache their reads go through.
    fn files(&self) -> &Files;

    /// Storage for table files.
    fn file_io(&self) -> &FileIO {
        self.files().io()
    }

    /// Location for a new table's files. S3 Tables assigns it: there the table is created
    /// (empty) to learn it.
    async fn new_table_location(&self, ident: &TableIdent) -> Result<String>;

    async fn load(&self, ident: &TableIdent) -> Result<Option<Pointer>>;

    /// Makes `new_location` the table's metadata if the pointer still is `base`; `base = None`
    /// creates the table (conflict if it exists). `metadata` is the content at `new_location`,
    /// for catalogs that mirror the schema (Glue).
    async fn swap(
        &self,
        ident: &TableIdent,
        base: Option<&Pointer>,
        new_location: &str,
        metadata: &TableMetadata,
    ) -> std::result::Result<(), SwapError>;

    /// Commits `commit` on the table as `base` (`None`: the commit creates it). A pointer
    /// catalog swaps to the written metadata; a REST catalog sends requirements and updates.
    async fn commit(
        &self,
        ident: &TableIdent,
        base: Option<&Pointer>,
        commit: &TableCommit<'_>,
    ) -> std::result::Result<Landed, SwapError> {
        self.swap(ident, base, commit.location, commit.metadata)
            .await?;
        Ok(Landed {
            metadata_location: commit.location.to_string(),
            metadata: None,
        })
    }

    /// True where the catalog writes each metadata file from the updates (REST): the commit
    /// loop writes none, and checks an unknown outcome by the snapshot, not the file.
    fn writes_metadata(&self) -> bool {
        false
    }

    async fn list_tables(&self) -> Result<Vec<TableIdent>>;

    /// Every file under `location` (a table's folder), for finding orphans.
    async fn list_files(&self, location: &str) -> Result<Vec<ListedFile>>;

    /// Why snapshot expiry and orphan removal are the catalog's own (S3 Tables runs both
    /// itself); `None`: they are ours to run.
    fn maintained_by_service(&self) -> Option<&'static str> {
        None
    }
}

/// Lists a table's folder in storage, for a catalog that cannot list its own files (Glue's
/// tables are on S3: the AWS wiring lists them). Keeps the catalog free of storage clients.
#[async_trait]
pub trait ListFiles: Send + Sync {
    async fn list_files(&self, location: &str) -> Result<Vec<ListedFile>>;
}

/// A file found by listing storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// As table metadata would reference it (`file:///…`, `s3://…`).
    pub path: String,
    pub size: u64,
    pub modified_ms: i64,
}

/// Lists a local folder recursively. The folder as any writer spells it: `file:///abs` (ours),
/// `file:/abs` (Iceberg Java), `file://abs`, or `/abs`. A folder that is not there is an error,
/// not an empty listing: a table's own location always holds its metadata, so a missing one
/// means the location names another machine's disk (and an orphan listing would find nothing
/// while files sit where the table really is).
pub fn list_local(location: &str) -> Result<Vec<ListedFile>> {
    let (prefix, root) = match location.strip_prefix("file:") {
        Some(rest) => ("file://", format!("/{}", rest.trim_start_matches('/'))),
        None if location.starts_with('/') => ("", location.to_string()),
        None => {
            return Err(Error::Storage(format!(
                "{location}: not a local folder (file:/… or an absolute path)"
            )));
        }
    };
    if !std::path::Path::new(&root).is_dir() {
        return Err(Error::Storage(format!(
            "{location}: the table's folder {root} is not on this machine; nothing listed"
        )));
    }
    let mut out = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(&root)];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(dir.display().to_string(), e)),
        };
        for e in entries {
            let e = e.map_err(|e| Error::io(dir.display().to_string(), e))?;
            let meta = e
                .metadata()
                .map_err(|err| Error::io(e.path().display().to_string(), err))?;
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                let modified_ms = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as i64);
                out.push(ListedFile {
                    path: format!("{prefix}{}", e.path().display()),
                    size: meta.len(),
                    modified_ms,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod list_tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_local_folder_lists_its_files() {
        let dir = std::env::temp_dir().join(format!("d2i-list-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("data/stray.parquet"), b"x").unwrap();
        let d = dir.display().to_string();
        for location in [format!("file://{d}"), format!("file:{d}"), d.clone()] {
            let listed = list_local(&location).unwrap();
            assert_eq!(listed.len(), 1, "{location}");
            assert!(
                listed[0].path.ends_with("/data/stray.parquet"),
                "{location}"
            );
        }
        // Iceberg Java's spelling lists as ours does: paths that metadata would reference.
        assert_eq!(
            list_local(&format!("file:{d}")).unwrap()[0].path,
            format!("file://{d}/data/stray.parquet")
        );
        let gone = list_local(&format!("file:{d}/missing")).unwrap_err();
        assert!(gone.to_string().contains("not on this machine"), "{gone}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
