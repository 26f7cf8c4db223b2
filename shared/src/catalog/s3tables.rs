//! Amazon S3 Tables: AWS's managed Iceberg table buckets. The service holds one pointer per
//! table (its metadata location) with a version token; `UpdateTableMetadataLocation` with the
//! token read together with the base metadata is the compare-and-swap (a stale token is
//! refused with `ConflictException`).
//!
//! The service assigns each table its storage (the "warehouse location", a bucket of its own)
//! when the table is created, so a new table is created in two steps: `CreateTable` (no
//! metadata yet) gives the location the first metadata is written under, and the first swap
//! sets the metadata location on the version token of the empty table. A table left empty (a
//! process that died between the two) is taken over by the next creator, which finds it there.
//!
//! Namespaces and table names follow the service's rules (lowercase letters, digits and `_`,
//! starting and ending with a letter or digit, at most 255 characters): a DMS schema or table
//! whose name does not is refused with its name, never silently renamed. The service also runs
//! snapshot expiry and unreferenced-file removal itself ([`Catalog::maintained_by_service`]).

use async_trait::async_trait;
use aws_sdk_s3tables::Client;
use aws_sdk_s3tables::error::SdkError;
use aws_sdk_s3tables::types::OpenTableFormat;
use iceberg::spec::TableMetadata;
use iceberg::{NamespaceIdent, TableIdent};

use super::{Catalog, ListFiles, ListedFile, Pointer, SwapError, outcome};
use crate::error::{Error, Result};
use crate::files::{Files, TableCache};

/// Why `expire` and `orphans` leave an S3 Tables table alone.
pub const SERVICE_MAINTENANCE: &str = "Amazon S3 Tables expires snapshots and removes \
     unreferenced files of its tables itself (the table bucket's maintenance configuration: \
     `aws s3tables put-table-maintenance-configuration`), and table buckets do not let clients \
     delete objects";

pub struct S3TablesCatalog {
    client: Client,
    /// `arn:aws:s3tables:<region>:<account>:bucket/<name>`
    bucket_arn: String,
    /// For listing a table's storage (the service removes orphan files itself; the listing
    /// is there for any command that asks what a table's storage holds).
    lister: std::sync::Arc<dyn ListFiles>,
    files: Files,
}

impl S3TablesCatalog {
    pub fn new(
        client: Client,
        bucket_arn: &str,
        lister: std::sync::Arc<dyn ListFiles>,
        files: Files,
    ) -> Result<Self> {
        check_bucket_arn(bucket_arn)?;
        Ok(S3TablesCatalog {
            client,
            bucket_arn: bucket_arn.to_string(),
            lister,
            files,
        })
    }

    /// Reads of table files go through `cache` (the owner's: a warm function's).
    pub fn with_cache(mut self, cache: std::sync::Arc<TableCache>) -> Self {
        self.files = Files::new(self.files.io().clone(), cache);
        self
    }

    /// The table's namespace and name as the service names them, or why it cannot.
    fn names(ident: &TableIdent) -> Result<(String, String)> {
        let namespace = ident.namespace().clone().inner().join("_");
        let table = ident.name().to_string();
        for (what, name) in [("namespace", &namespace), ("table name", &table)] {
            if !valid_name(name) {
                return Err(Error::Config(format!(
                    "{ident}: `{name}` is not a valid S3 Tables {what} (lowercase letters, \
                     digits and `_`, starting and ending with a letter or digit, at most 255 \
                     characters); map the DMS name with the table's `target` setting"
                )));
            }
        }
        Ok((namespace, table))
    }

    /// The table's pointer as the service has it: `(version token, metadata location,
    /// warehouse location)`; `None` if there is no such table.
    async fn pointer(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<(String, Option<String>, String)>> {
        match self
            .client
            .get_table_metadata_location()
            .table_bucket_arn(&self.bucket_arn)
            .namespace(namespace)
            .name(name)
            .send()
            .await
        {
            Ok(o) => Ok(Some((
                o.version_token().to_string(),
                o.metadata_location().map(str::to_string),
                o.warehouse_location().to_string(),
            ))),
            Err(SdkError::ServiceError(e)) if e.err().is_not_found_exception() => Ok(None),
            Err(e) => Err(failed(e, "GetTableMetadataLocation")),
        }
    }

    async fn ensure_namespace(&self, namespace: &str) -> Result<()> {
        match self
            .client
            .create_namespace()
            .table_bucket_arn(&self.bucket_arn)
            .namespace(namespace)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_conflict_exception() => Ok(()),
            Err(e) => Err(failed(e, "CreateNamespace")),
        }
    }
}

/// `arn:aws[-partition]:s3tables:<region>:<account>:bucket/<name>`, as the service requires.
fn check_bucket_arn(arn: &str) -> Result<()> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ok = matches!(parts.as_slice(), [arn, partition, "s3tables", region, account, res]
        if *arn == "arn"
            && partition.starts_with("aws")
            && !region.is_empty()
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && res.strip_prefix("bucket/").is_some_and(|b| (3..=63).contains(&b.len())));
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "`{arn}` is not a table bucket ARN (arn:aws:s3tables:<region>:<account>:bucket/<name>)"
        )))
    }
}

/// S3 Tables' naming rule for namespaces and tables.
fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    let allowed = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_';
    let edge = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=255).contains(&b.len()) && b.iter().all(allowed) && edge(b.first()) && edge(b.last())
}

fn failed<E: std::fmt::Debug + std::error::Error + Send + Sync + 'static, R: std::fmt::Debug>(
    e: SdkError<E, R>,
    op: &str,
) -> Error {
    Error::Catalog(format!(
        "S3 Tables {op}: {}",
        aws_sdk_s3tables::error::DisplayErrorContext(&e)
    ))
}

#[async_trait]
impl Catalog for S3TablesCatalog {
    fn files(&self) -> &Files {
        &self.files
    }

    /// Creates the (empty) table, which gives its location; a table that exists without
    /// metadata (a creator that stopped before its first commit) is taken over.
    async fn new_table_location(&self, ident: &TableIdent) -> Result<String> {
        let (namespace, name) = Self::names(ident)?;
        self.ensure_namespace(&namespace).await?;
        match self
            .client
            .create_table()
            .table_bucket_arn(&self.bucket_arn)
            .namespace(&namespace)
            .name(&name)
            .format(OpenTableFormat::Iceberg)
            .send()
            .await
        {
            Ok(_) => {}
            // Created by a concurrent creator (or earlier): its location is the table's.
            Err(SdkError::ServiceError(e)) if e.err().is_conflict_exception() => {}
            Err(e) => return Err(failed(e, "CreateTable")),
        }
        match self.pointer(&namespace, &name).await? {
            Some((_, _, warehouse)) => Ok(warehouse.trim_end_matches('/').to_string()),
            None => Err(Error::Catalog(format!(
                "S3 Tables table {ident} was created but is not there (deleted concurrently?)"
            ))),
        }
    }

    async fn load(&self, ident: &TableIdent) -> Result<Option<Pointer>> {
        let (namespace, name) = Self::names(ident)?;
        Ok(match self.pointer(&namespace, &name).await? {
            Some((token, Some(location), _)) => Some(Pointer {
                metadata_location: location,
                version: Some(token),
                parameters: None,
            }),
            // No table, or one created without metadata yet: nothing to read.
            _ => None,
        })
    }

    async fn swap(
        &self,
        ident: &TableIdent,
        base: Option<&Pointer>,
        new_location: &str,
        _metadata: &TableMetadata,
    ) -> std::result::Result<(), SwapError> {
        let (namespace, name) = Self::names(ident).map_err(SwapError::Failed)?;
        let token = match base {
            Some(b) => b.version.clone().ok_or_else(|| {
                SwapError::Failed(Error::Internal(format!(
                    "{ident}: an S3 Tables pointer without its version token"
                )))
            })?,
            // The first metadata: on the token of the empty table our location came from. A
            // table that has metadata already, or is gone (its storage with it), is a lost
            // creation: plan again.
            None => match self
                .pointer(&namespace, &name)
                .await
                .map_err(SwapError::Failed)?
            {
                Some((token, None, warehouse))
                    if new_location.starts_with(warehouse.trim_end_matches('/')) =>
                {
                    token
                }
                _ => return Err(SwapError::Conflict),
            },
        };
        // Sent once (see [`outcome`]): a stale token is a certain refusal only as the answer
        // to the request's one attempt.
        self.client
            .update_table_metadata_location()
            .table_bucket_arn(&self.bucket_arn)
            .namespace(&namespace)
            .name(&name)
            .version_token(token)
            .metadata_location(new_location)
            .customize()
            .config_override(
                aws_sdk_s3tables::config::Builder::default()
                    .retry_config(outcome::single_attempt()),
            )
            .send()
            .await
            .map(|_| ())
            .map_err(|e| {
                outcome::swap_error(e, "S3 Tables UpdateTableMetadataLocation", |e| {
                    e.is_conflict_exception() || e.is_not_found_exception()
                })
            })
    }

    async fn list_tables(&self) -> Result<Vec<TableIdent>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let r = self
                .client
                .list_tables()
                .table_bucket_arn(&self.bucket_arn)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| failed(e, "ListTables"))?;
            for t in r.tables() {
                let ns = NamespaceIdent::from_vec(t.namespace().to_vec())
                    .map_err(|e| Error::Catalog(format!("S3 Tables ListTables: {e}")))?;
                out.push(TableIdent::new(ns, t.name().to_string()));
            }
            token = r.continuation_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        Ok(out)
    }

    async fn list_files(&self, location: &str) -> Result<Vec<ListedFile>> {
        self.lister.list_files(location).await
    }

    fn maintained_by_service(&self) -> Option<&'static str> {
        Some(SERVICE_MAINTENANCE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_service_rules() {
        for ok in ["sales", "dbo", "order_items", "t1", "a"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "Sales",
            "_x",
            "x_",
            "order-items",
            "",
            "a.b",
            &"a".repeat(256),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
        let ident = TableIdent::from_strs(["Dbo", "orders"]).expect("ident");
        let e = S3TablesCatalog::names(&ident).expect_err("refused");
        assert!(e.to_string().contains("`Dbo`"), "{e}");
    }

    #[test]
    fn bucket_arns_are_checked() {
        check_bucket_arn("arn:aws:s3tables:us-east-1:123456789012:bucket/my-tables").expect("ok");
        for bad in [
            "s3://bucket/prefix",
            "arn:aws:s3:::bucket",
            "arn:aws:s3tables:us-east-1:1234:bucket/b",
            "arn:aws:s3tables:us-east-1:123456789012:bucket/",
        ] {
            assert!(check_bucket_arn(bad).is_err(), "{bad}");
        }
    }
}
