//! AWS Glue Data Catalog, following Iceberg Java's GlueCatalog conventions so Athena, Redshift,
//! EMR and Glue jobs open the tables: `TableType=EXTERNAL_TABLE`, Parameters `table_type=ICEBERG`,
//! `metadata_location`, `previous_metadata_location` (other parameters kept), and the
//! StorageDescriptor's location and columns refreshed from the current schema (Hive types plus
//! `iceberg.field.*` parameters) so the console and crawlers show new columns.
//!
//! The pointer swap is `UpdateTable` with the `VersionId` read together with the base metadata:
//! Glue refuses it with `ConcurrentModificationException` if anyone updated the table since.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_glue::Client;
use aws_sdk_glue::error::SdkError;
use aws_sdk_glue::types::{Column, DatabaseInput, StorageDescriptor, TableInput};
use iceberg::io::FileIO;
use iceberg::spec::{PrimitiveType, TableMetadata, Type};
use iceberg::{NamespaceIdent, TableIdent};

use super::{Catalog, ListFiles, ListedFile, Pointer, SwapError, outcome};
use crate::error::{Error, Result};
use crate::files::{Files, TableCache};

pub struct GlueCatalog {
    client: Client,
    /// For listing table folders (orphan files).
    lister: std::sync::Arc<dyn ListFiles>,
    catalog_id: Option<String>,
    /// `s3://bucket/prefix`: new tables go to `<warehouse>/<database>.db/<table>`.
    warehouse: String,
    files: Files,
    /// List only this database (a function granted one database cannot call GetDatabases).
    only_database: Option<String>,
}

impl GlueCatalog {
    pub fn new(
        client: Client,
        lister: std::sync::Arc<dyn ListFiles>,
        catalog_id: Option<String>,
        warehouse: &str,
        file_io: FileIO,
    ) -> Self {
        GlueCatalog {
            client,
            lister,
            catalog_id,
            warehouse: warehouse.trim_end_matches('/').to_string(),
            files: Files::new(file_io, std::sync::Arc::new(TableCache::default())),
            only_database: None,
        }
    }

    /// Reads of table files go through `cache` (the owner's: a warm function's) instead of a
    /// cache of this catalog's own.
    pub fn with_cache(mut self, cache: std::sync::Arc<TableCache>) -> Self {
        self.files = Files::new(self.files.io().clone(), cache);
        self
    }

    /// Restrict `list_tables` to one database.
    pub fn only_database(mut self, database: Option<String>) -> Self {
        self.only_database = database;
        self
    }

    fn database(ident: &TableIdent) -> String {
        ident.namespace().clone().inner().join("_")
    }

    async fn ensure_database(&self, name: &str) -> std::result::Result<(), SwapError> {
        let input = DatabaseInput::builder()
            .name(name)
            .description("Iceberg tables written by dms2iceberg")
            .build()
            .map_err(|e| Error::Catalog(e.to_string()))?;
        match self
            .client
            .create_database()
            .set_catalog_id(self.catalog_id.clone())
            .database_input(input)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_already_exists_exception() => Ok(()),
            Err(e) => Err(failed(e, "CreateDatabase")),
        }
    }

    fn table_input(
        &self,
        name: &str,
        metadata: &TableMetadata,
        mut parameters: HashMap<String, String>,
    ) -> std::result::Result<TableInput, SwapError> {
        parameters.insert("table_type".into(), "ICEBERG".into());
        let columns = columns(metadata);
        TableInput::builder()
            .name(name)
            .table_type("EXTERNAL_TABLE")
            .set_parameters(Some(parameters))
            .storage_descriptor(
                StorageDescriptor::builder()
                    .location(metadata.location())
                    .set_columns(Some(columns))
                    .build(),
            )
            .build()
            .map_err(|e| SwapError::Failed(Error::Catalog(e.to_string())))
    }
}

/// A failed request of a swap that changes nothing (a read, an idempotent create): the SDK
/// retried it as it retries any request.
fn failed<E: std::fmt::Debug + std::error::Error + Send + Sync + 'static, R: std::fmt::Debug>(
    e: SdkError<E, R>,
    op: &str,
) -> SwapError {
    SwapError::Failed(Error::Catalog(format!(
        "Glue {op}: {}",
        aws_sdk_glue::error::DisplayErrorContext(&e)
    )))
}

/// Settings for the request that moves the pointer: sent once (see [`outcome`]).
fn one_attempt() -> aws_sdk_glue::config::Builder {
    aws_sdk_glue::config::Builder::default().retry_config(outcome::single_attempt())
}

/// Glue columns for the current schema, as Iceberg's GlueCatalog writes them.
fn columns(metadata: &TableMetadata) -> Vec<Column> {
    let schema = metadata.current_schema();
    schema
        .as_struct()
        .fields()
        .iter()
        .filter_map(|f| {
            Column::builder()
                .name(&f.name)
                .r#type(hive_type(&f.field_type))
                .parameters("iceberg.field.id", f.id.to_string())
                .parameters("iceberg.field.optional", (!f.required).to_string())
                .parameters("iceberg.field.current", "true")
                .build()
                .ok()
        })
        .collect()
}

/// Iceberg → Hive type names, as Athena and the Glue console expect them.
pub fn hive_type(t: &Type) -> String {
    match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Uuid => "string".into(),
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs => "timestamp".into(),
            PrimitiveType::Fixed(_) | PrimitiveType::Binary => "binary".into(),
        },
        Type::Struct(s) => format!(
            "struct<{}>",
            s.fields()
                .iter()
                .map(|f| format!("{}:{}", f.name, hive_type(&f.field_type)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Type::List(l) => format!("array<{}>", hive_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{},{}>",
            hive_type(&m.key_field.field_type),
            hive_type(&m.value_field.field_type)
        ),
    }
}

#[async_trait]
impl Catalog for GlueCatalog {
    fn files(&self) -> &Files {
        &self.files
    }

    async fn new_table_location(&self, ident: &TableIdent) -> Result<String> {
        Ok(format!(
            "{}/{}.db/{}",
            self.warehouse,
            Self::database(ident),
            ident.name()
        ))
    }

    async fn load(&self, ident: &TableIdent) -> Result<Option<Pointer>> {
        let r = self
            .client
            .get_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(Self::database(ident))
            .name(ident.name())
            .send()
            .await;
        let out = match r {
            Ok(o) => o,
            Err(SdkError::ServiceError(e)) if e.err().is_entity_not_found_exception() => {
                return Ok(None);
            }
            Err(e) => {
                return Err(Error::Catalog(format!(
                    "Glue GetTable {ident}: {}",
                    aws_sdk_glue::error::DisplayErrorContext(&e)
                )));
            }
        };
        let Some(table) = out.table() else {
            return Ok(None);
        };
        let params = table.parameters().cloned().unwrap_or_default();
        if !params
            .get("table_type")
            .is_some_and(|t| t.eq_ignore_ascii_case("ICEBERG"))
        {
            return Err(Error::Catalog(format!(
                "Glue table {ident} exists but is not an Iceberg table (table_type = {:?})",
                params.get("table_type")
            )));
        }
        let metadata_location = params.get("metadata_location").cloned().ok_or_else(|| {
            Error::Catalog(format!("Glue table {ident} has no metadata_location"))
        })?;
        Ok(Some(Pointer {
            metadata_location,
            version: table.version_id().map(str::to_string),
            parameters: Some(params),
        }))
    }

    async fn swap(
        &self,
        ident: &TableIdent,
        base: Option<&Pointer>,
        new_location: &str,
        metadata: &TableMetadata,
    ) -> std::result::Result<(), SwapError> {
        let database = Self::database(ident);
        match base {
            None => {
                self.ensure_database(&database).await?;
                let params =
                    HashMap::from([("metadata_location".to_string(), new_location.to_string())]);
                let input = self.table_input(ident.name(), metadata, params)?;
                self.client
                    .create_table()
                    .set_catalog_id(self.catalog_id.clone())
                    .database_name(&database)
                    .table_input(input)
                    .customize()
                    .config_override(one_attempt())
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| {
                        outcome::swap_error(e, "Glue CreateTable", |e| {
                            e.is_already_exists_exception()
                        })
                    })
            }
            Some(base) => {
                // Keep parameters others set. With a VersionId, those loaded with the base are
                // current (UpdateTable refuses a stale version); without one, read them again
                // and refuse early if the pointer already moved.
                let mut params = match (&base.version, &base.parameters) {
                    (Some(_), Some(p)) => p.clone(),
                    _ => {
                        let current = self
                            .client
                            .get_table()
                            .set_catalog_id(self.catalog_id.clone())
                            .database_name(&database)
                            .name(ident.name())
                            .send()
                            .await
                            .map_err(|e| failed(e, "GetTable"))?;
                        let params = current
                            .table()
                            .and_then(|t| t.parameters().cloned())
                            .unwrap_or_default();
                        if params.get("metadata_location") != Some(&base.metadata_location) {
                            return Err(SwapError::Conflict);
                        }
                        params
                    }
                };
                params.insert("metadata_location".into(), new_location.to_string());
                params.insert(
                    "previous_metadata_location".into(),
                    base.metadata_location.clone(),
                );
                let input = self.table_input(ident.name(), metadata, params)?;
                self.client
                    .update_table()
                    .set_catalog_id(self.catalog_id.clone())
                    .database_name(&database)
                    .table_input(input)
                    .set_version_id(base.version.clone())
                    .skip_archive(true)
                    .customize()
                    .config_override(one_attempt())
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| {
                        outcome::swap_error(e, "Glue UpdateTable", |e| {
                            e.is_concurrent_modification_exception()
                        })
                    })
            }
        }
    }

    async fn list_files(&self, location: &str) -> Result<Vec<ListedFile>> {
        self.lister.list_files(location).await
    }

    async fn list_tables(&self) -> Result<Vec<TableIdent>> {
        let mut out = Vec::new();
        let mut databases = Vec::new();
        let mut token = None;
        if let Some(db) = &self.only_database {
            databases.push(db.clone());
        }
        while self.only_database.is_none() {
            let r = self
                .client
                .get_databases()
                .set_catalog_id(self.catalog_id.clone())
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| {
                    Error::Catalog(format!(
                        "Glue GetDatabases: {}",
                        aws_sdk_glue::error::DisplayErrorContext(&e)
                    ))
                })?;
            databases.extend(r.database_list().iter().map(|d| d.name().to_string()));
            token = r.next_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        for db in databases {
            let mut token = None;
            loop {
                let r = match self
                    .client
                    .get_tables()
                    .set_catalog_id(self.catalog_id.clone())
                    .database_name(&db)
                    .set_next_token(token)
                    .send()
                    .await
                {
                    Ok(r) => r,
                    // Not created yet (ingest creates it with the first table), or gone since
                    // GetDatabases: it holds no tables.
                    Err(SdkError::ServiceError(e)) if e.err().is_entity_not_found_exception() => {
                        break;
                    }
                    Err(e) => {
                        return Err(Error::Catalog(format!(
                            "Glue GetTables {db}: {}",
                            aws_sdk_glue::error::DisplayErrorContext(&e)
                        )));
                    }
                };
                for t in r.table_list() {
                    let iceberg = t
                        .parameters()
                        .and_then(|p| p.get("table_type"))
                        .is_some_and(|v| v.eq_ignore_ascii_case("ICEBERG"));
                    if iceberg {
                        out.push(TableIdent::new(
                            NamespaceIdent::new(db.clone()),
                            t.name().to_string(),
                        ));
                    }
                }
                token = r.next_token().map(str::to_string);
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(out)
    }
}
