//! Embedded catalog: a SQLite file in the JDBC/PyIceberg `SqlCatalog` schema.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use iceberg::spec::TableMetadata;
use iceberg::{NamespaceIdent, TableIdent};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Catalog, ListedFile, Pointer, SwapError, list_local};
use crate::error::{Error, Result};
use crate::files::{Files, TableCache};

/// The default catalog name: what PyIceberg's `SqlCatalog("default", ...)` uses. Iceberg
/// Java's JdbcCatalog uses the name of the catalog it is configured as (a Spark catalog's
/// name), so sharing with it means the same name on both sides.
pub const CATALOG_NAME: &str = "default";

pub struct SqliteCatalog {
    conn: Mutex<Connection>,
    /// The `catalog_name` column of every row this catalog reads or writes.
    name: String,
    warehouse_uri: String,
    files: Files,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255) NOT NULL,
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
);";

impl SqliteCatalog {
    /// Opens (creating if needed) `<warehouse>/catalog.db`; table files go under `warehouse`.
    pub fn open(warehouse: &Path) -> Result<SqliteCatalog> {
        std::fs::create_dir_all(warehouse)
            .map_err(|e| Error::io(warehouse.display().to_string(), e))?;
        let warehouse = warehouse
            .canonicalize()
            .map_err(|e| Error::io(warehouse.display().to_string(), e))?;
        let path = warehouse.join("catalog.db");
        let conn = Connection::open(&path)?;
        // Several processes may commit to one warehouse: wait for the lock rather than fail.
        conn.busy_timeout(Duration::from_secs(60))?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| locked_hint(e, &path))?;
        Ok(SqliteCatalog {
            conn: Mutex::new(conn),
            name: CATALOG_NAME.to_string(),
            warehouse_uri: format!("file://{}", warehouse.display()),
            files: Files::new(super::local::file_io(), Arc::new(TableCache::default())),
            path,
        })
    }

    /// Use another catalog name than `default` (the rows of `catalog.db` it owns).
    pub fn with_name(mut self, name: &str) -> Result<SqliteCatalog> {
        if name.is_empty() || name.len() > 255 {
            return Err(Error::Config(format!(
                "catalog name `{name}` must be 1 to 255 characters"
            )));
        }
        self.name = name.to_string();
        Ok(self)
    }

    /// Reads of table files go through `cache` (the owner's, shared by every operation of
    /// the process) instead of a cache of this catalog's own.
    pub fn with_cache(mut self, cache: Arc<TableCache>) -> SqliteCatalog {
        self.files = Files::new(self.files.io().clone(), cache);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        self.conn
            .lock()
            .map_err(|_| Error::Catalog("catalog connection poisoned".into()))
    }
}

/// A write that waited the whole busy timeout says who usually holds the lock.
fn locked_hint(e: rusqlite::Error, path: &Path) -> Error {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            Error::Catalog(format!(
                "{} stayed locked by another process for 60 s ({e}); Iceberg's JdbcCatalog \
                 (Spark) holds it unless configured with jdbc.init-catalog-tables=false",
                path.display()
            ))
        }
        _ => Error::from(e),
    }
}

fn ns_string(ns: &NamespaceIdent) -> String {
    ns.clone().inner().join(".")
}

#[async_trait]
impl Catalog for SqliteCatalog {
    fn files(&self) -> &Files {
        &self.files
    }

    async fn new_table_location(&self, ident: &TableIdent) -> Result<String> {
        let ns = ns_string(ident.namespace());
        // `<warehouse>/catalog.db` is the catalog itself: a namespace `catalog` gets a folder
        // name no namespace can have (names are letters, digits and `_`).
        let folder = if ns.eq_ignore_ascii_case("catalog") {
            format!("{ns}-namespace.db")
        } else {
            format!("{ns}.db")
        };
        Ok(format!("{}/{folder}/{}", self.warehouse_uri, ident.name()))
    }

    async fn load(&self, ident: &TableIdent) -> Result<Option<Pointer>> {
        let conn = self.conn()?;
        let ns = ns_string(ident.namespace());
        let loc: Option<Option<String>> = conn
            .query_row(
                "SELECT metadata_location FROM iceberg_tables
                 WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3",
                params![self.name, ns, ident.name()],
                |r| r.get(0),
            )
            .optional()?;
        if loc.is_none() {
            // Every catalog name puts a table in the same folder: a second one would share (and
            // its maintenance delete) the first one's files.
            let other: Option<String> = conn
                .query_row(
                    "SELECT catalog_name FROM iceberg_tables
                     WHERE catalog_name <> ?1 AND table_namespace = ?2 AND table_name = ?3",
                    params![self.name, ns, ident.name()],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(other) = other {
                return Err(Error::Catalog(format!(
                    "table {ident} is in {} under catalog name `{other}`, not `{}`: pass \
                     --catalog-name {other} (tables of every catalog name share the warehouse's folders)",
                    self.path.display(),
                    self.name
                )));
            }
        }
        Ok(loc.flatten().map(|metadata_location| Pointer {
            metadata_location,
            version: None,
            parameters: None,
        }))
    }

    async fn swap(
        &self,
        ident: &TableIdent,
        base: Option<&Pointer>,
        new_location: &str,
        _metadata: &TableMetadata,
    ) -> std::result::Result<(), SwapError> {
        let conn = self.conn()?;
        let ns = ns_string(ident.namespace());
        let changed = match base {
            Some(b) => conn
                .execute(
                    "UPDATE iceberg_tables
                     SET metadata_location = ?1, previous_metadata_location = ?2
                     WHERE catalog_name = ?3 AND table_namespace = ?4 AND table_name = ?5
                       AND metadata_location = ?2",
                    params![
                        new_location,
                        b.metadata_location,
                        self.name,
                        ns,
                        ident.name()
                    ],
                )
                .map_err(|e| locked_hint(e, &self.path))?,
            None => {
                conn.execute(
                    "INSERT OR IGNORE INTO iceberg_namespace_properties
                     (catalog_name, namespace, property_key, property_value) VALUES (?1, ?2, 'exists', 'true')",
                    params![self.name, ns],
                )
                .map_err(|e| locked_hint(e, &self.path))?;
                conn.execute(
                    "INSERT OR IGNORE INTO iceberg_tables
                     (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location, iceberg_type)
                     VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')",
                    params![self.name, ns, ident.name(), new_location],
                )
                .map_err(|e| locked_hint(e, &self.path))?
            }
        };
        if changed == 1 {
            Ok(())
        } else {
            Err(SwapError::Conflict)
        }
    }

    async fn list_files(&self, location: &str) -> Result<Vec<ListedFile>> {
        list_local(location)
    }

    async fn list_tables(&self) -> Result<Vec<TableIdent>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT table_namespace, table_name FROM iceberg_tables
             WHERE catalog_name = ?1 AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)
             ORDER BY table_namespace, table_name",
        )?;
        let rows = stmt.query_map(params![self.name], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (ns, t) = r?;
            let ns = NamespaceIdent::from_vec(ns.split('.').map(str::to_string).collect())?;
            out.push(TableIdent::new(ns, t));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn swap_is_compare_and_swap() {
        let dir = std::env::temp_dir().join(format!("d2i-cat-{}", uuid::Uuid::new_v4()));
        let cat = SqliteCatalog::open(&dir).unwrap();
        let id = TableIdent::from_strs(["sales", "product"]).unwrap();
        let md = test_metadata();
        assert!(cat.load(&id).await.unwrap().is_none());
        cat.swap(&id, None, "loc1", &md).await.unwrap();
        assert!(matches!(
            cat.swap(&id, None, "locX", &md).await,
            Err(SwapError::Conflict)
        ));
        let p1 = cat.load(&id).await.unwrap().unwrap();
        assert_eq!(p1.metadata_location, "loc1");
        cat.swap(&id, Some(&p1), "loc2", &md).await.unwrap();
        // A writer still holding loc1 loses.
        assert!(matches!(
            cat.swap(&id, Some(&p1), "loc3", &md).await,
            Err(SwapError::Conflict)
        ));
        assert_eq!(
            cat.load(&id).await.unwrap().unwrap().metadata_location,
            "loc2"
        );
        assert_eq!(cat.list_tables().await.unwrap(), vec![id]);
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn a_held_lock_names_the_likely_holder() {
        let dir = std::env::temp_dir().join(format!("d2i-cat-{}", uuid::Uuid::new_v4()));
        let cat = SqliteCatalog::open(&dir).unwrap();
        cat.conn()
            .unwrap()
            .busy_timeout(Duration::from_millis(50))
            .unwrap();
        let holder = Connection::open(dir.join("catalog.db")).unwrap();
        holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let id = TableIdent::from_strs(["sales", "product"]).unwrap();
        let e = match cat.swap(&id, None, "loc", &test_metadata()).await {
            Err(SwapError::Failed(e)) => e.to_string(),
            other => panic!("{other:?}"),
        };
        assert!(
            e.contains("stayed locked by another process")
                && e.contains("jdbc.init-catalog-tables=false"),
            "{e}"
        );
        holder.execute_batch("ROLLBACK").unwrap();
        cat.swap(&id, None, "loc", &test_metadata()).await.unwrap();
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn catalog_names_keep_their_own_rows() {
        let dir = std::env::temp_dir().join(format!("d2i-cat-{}", uuid::Uuid::new_v4()));
        let md = test_metadata();
        let id = TableIdent::from_strs(["sales", "product"]).unwrap();
        let other = TableIdent::from_strs(["sales", "orders"]).unwrap();
        let spark = SqliteCatalog::open(&dir)
            .unwrap()
            .with_name("spark")
            .unwrap();
        spark.swap(&id, None, "loc-spark", &md).await.unwrap();
        let default = SqliteCatalog::open(&dir).unwrap();
        assert_eq!(default.name(), "default");
        default
            .swap(&other, None, "loc-default", &md)
            .await
            .unwrap();
        assert_eq!(spark.list_tables().await.unwrap(), vec![id.clone()]);
        assert_eq!(default.list_tables().await.unwrap(), vec![other.clone()]);
        assert_eq!(
            spark.load(&id).await.unwrap().unwrap().metadata_location,
            "loc-spark"
        );
        assert!(
            spark
                .load(&other)
                .await
                .unwrap_err()
                .to_string()
                .contains("table sales.orders is in")
        );
        let e = default.load(&id).await.unwrap_err().to_string();
        assert!(
            e.contains("under catalog name `spark`, not `default`")
                && e.contains("--catalog-name spark"),
            "{e}"
        );
        // The rows as Iceberg's JdbcCatalog reads them.
        let conn = Connection::open(dir.join("catalog.db")).unwrap();
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM iceberg_tables WHERE catalog_name = 'spark' AND table_namespace = 'sales' AND table_name = 'product' AND iceberg_type = 'TABLE'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1);
        assert!(SqliteCatalog::open(&dir).unwrap().with_name("").is_err());
        std::fs::remove_dir_all(dir).ok();
    }

    fn test_metadata() -> TableMetadata {
        use iceberg::spec::*;
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        TableMetadataBuilder::new(
            schema,
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "file:///tmp/x".into(),
            FormatVersion::V2,
            Default::default(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }
}
