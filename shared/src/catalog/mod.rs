//! The catalog holds one pointer per table: the location of its current metadata file. Moving
//! it is the commit point, so the one operation that matters is a compare-and-swap.
//!
//! - [`SqliteCatalog`]: the embedded default, `<warehouse>/catalog.db`, in the schema Iceberg's
//!   JDBC catalog and PyIceberg's `SqlCatalog` use (catalog name `default`), so both open our
//!   tables.
//! - [`GlueCatalog`] (feature `aws`): the AWS Glue Data Catalog, compare-and-swap through
//!   `UpdateTable`'s `VersionId`.

#[cfg(feature = "aws")]
mod glue;
mod sqlite;

use async_trait::async_trait;
use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;

#[cfg(feature = "aws")]
pub use glue::{GlueCatalog, hive_type};
pub use sqlite::SqliteCatalog;

use crate::error::Result;

/// What the catalog says a table's current metadata is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    pub metadata_location: String,
    /// Opaque version the swap must present (Glue's `VersionId`); `None` where the location
    /// itself is the version (SQLite).
    pub version: Option<String>,
}

/// Why a swap did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// Someone else moved the pointer first: rebuild on the new state and retry.
    #[error("the table changed since it was read (concurrent commit)")]
    Conflict,
    /// The request may or may not have taken effect (timeout, lost connection).
    #[error("commit outcome unknown: {0}")]
    Unknown(String),
    #[error(transparent)]
    Failed(#[from] crate::Error),
}

#[async_trait]
pub trait Catalog: Send + Sync {
    /// Storage for table files.
    fn file_io(&self) -> &FileIO;

    /// Location for a new table's files.
    fn default_location(&self, ident: &TableIdent) -> String;

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

    async fn list_tables(&self) -> Result<Vec<TableIdent>>;
}
