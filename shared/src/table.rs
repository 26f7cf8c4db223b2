//! A table as loaded from the catalog: its pointer, metadata and refs.

use std::sync::Arc;

use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;

use crate::catalog::{Catalog, Pointer};
use crate::error::{Error, Result};
use crate::files::metadata::Refs;

#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub ident: TableIdent,
    pub pointer: Pointer,
    pub metadata: Arc<TableMetadata>,
    /// The metadata's branches and tags (iceberg-rust keeps them private): what a commit on
    /// this metadata builds its own refs from.
    pub(crate) refs: Arc<Refs>,
}

impl LoadedTable {
    pub async fn load(catalog: &dyn Catalog, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let Some(pointer) = catalog.load(ident).await? else {
            return Ok(None);
        };
        let (metadata, refs) = match catalog.files().metadata(&pointer.metadata_location).await {
            Ok(m) => m,
            Err(e) => return Err(missing_or(catalog, ident, &pointer.metadata_location, e).await),
        };
        Ok(Some(LoadedTable {
            ident: ident.clone(),
            pointer,
            metadata,
            refs,
        }))
    }

    /// An iceberg-rust `Table` for reading (scans, manifests).
    pub fn table(&self, file_io: &FileIO) -> Result<Table> {
        Ok(Table::builder()
            .identifier(self.ident.clone())
            .metadata(self.metadata.clone())
            .metadata_location(self.pointer.metadata_location.clone())
            .file_io(file_io.clone())
            .readonly(true)
            .runtime(iceberg::Runtime::try_current()?)
            .build()?)
    }
}

/// [`Error::MetadataDamaged`] when storage says the file at `location` is not there, or its
/// bytes are not table metadata (a read that failed for another reason, or a check that failed
/// too, is `e` as it was: only a definite answer calls the table damaged).
async fn missing_or(catalog: &dyn Catalog, ident: &TableIdent, location: &str, e: Error) -> Error {
    let damaged = |problem: String| Error::MetadataDamaged {
        table: ident.to_string(),
        location: location.to_string(),
        problem,
    };
    if let Error::Iceberg(ie) = &e
        && ie.kind() == iceberg::ErrorKind::DataInvalid
    {
        return damaged(format!("does not read as table metadata ({ie})"));
    }
    match catalog.file_io().exists(location).await {
        Ok(false) => damaged(
            "does not exist (files of a commit were deleted while the catalog named them)".into(),
        ),
        _ => e,
    }
}
