//! The Lambda functions' logic, their process ([`serve`]: the binaries' `main` is one call),
//! and the environment they are configured by. See README "Run on AWS".
//!
//! Handlers take typed events ([`events`]) and the catalog and object store as traits
//! ([`crate::catalog::Catalog`], [`crate::storage::ObjectStore`]): the functions pass Glue and S3, tests
//! pass a SQLite catalog and [`crate::storage::LocalObjects`] and call the handlers in-process.

pub mod compact;
pub mod events;
pub mod ingest;
pub mod metrics;
pub mod runtime;
pub mod serve;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::storage::{DeadLetters, ObjectStore, ParameterStore, split_s3_uri};

/// A failed invocation as Lambda gets it: `kind` is the `errorType` (see [`Error::kind`];
/// `Panic` for a panic), `message` the `errorMessage` (input values left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionError {
    pub kind: String,
    pub message: String,
}

impl FunctionError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> FunctionError {
        FunctionError {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

impl From<Error> for FunctionError {
    fn from(e: Error) -> FunctionError {
        FunctionError::new(e.kind(), e.redacted())
    }
}

impl std::fmt::Display for FunctionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for FunctionError {}

/// Runs a handler's future, turning a panic into a [`FunctionError`] of kind `Panic` (Lambda's
/// runtime would report it with the Rust type name of the panic payload as `errorType`).
pub async fn guarded<T, F>(fut: F) -> std::result::Result<T, FunctionError>
where
    F: std::future::Future<Output = std::result::Result<T, FunctionError>>,
{
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            tracing::error!(panic = %msg, "the handler panicked");
            Err(FunctionError::new(
                "Panic",
                format!("the handler panicked: {msg}"),
            ))
        }
    }
}

/// What the ingest function reads from and writes to besides its catalog.
#[derive(Clone)]
pub struct Services {
    pub objects: std::sync::Arc<dyn ObjectStore>,
    /// For an `ssm:` config.
    pub parameters: Option<std::sync::Arc<dyn ParameterStore>>,
    /// With `DMS2ICEBERG_DEAD_LETTER_QUEUE_URL`: records no retry can help go there at once.
    pub dead_letters: Option<std::sync::Arc<dyn DeadLetters>>,
}

impl<T: ObjectStore + 'static> From<std::sync::Arc<T>> for Services {
    fn from(objects: std::sync::Arc<T>) -> Services {
        Services {
            objects,
            parameters: None,
            dead_letters: None,
        }
    }
}

/// Environment of both functions.
#[derive(Debug, Clone)]
pub struct FunctionEnv {
    /// `DMS2ICEBERG_CATALOG`: `glue` (the default; `DMS2ICEBERG_WAREHOUSE`, `s3://bucket/prefix`,
    /// holds new tables), `s3tables` (`DMS2ICEBERG_TABLE_BUCKET_ARN`) or `rest`
    /// (`DMS2ICEBERG_REST_URI`, `DMS2ICEBERG_REST_WAREHOUSE`, auth as the CLI's).
    pub catalog: crate::aws::CatalogTarget,
    /// `DMS2ICEBERG_GLUE_DATABASE`: every table goes to this Glue database (S3 Tables: this
    /// namespace).
    pub database: Option<String>,
    /// `DMS2ICEBERG_CONFIG`: a bundled path, an `s3://` URI or `ssm:<parameter name>` (the
    /// last two read again by every invocation).
    pub config: Option<String>,
    /// `DMS2ICEBERG_DEAD_LETTER_QUEUE_URL`: records no retry can help are moved there at once.
    pub dead_letter_queue: Option<String>,
    /// `DMS2ICEBERG_TABLE_METRICS=on`: metrics per table besides the function's aggregates
    /// (each table's metrics are custom metrics of their own, billed as such).
    pub table_metrics: bool,
    /// `DMS2ICEBERG_MAX_FILES_PER_COMMIT` (default 1).
    pub files_per_commit: usize,
    /// `DMS2ICEBERG_MAX_FILES_PER_INVOCATION` (default 100).
    pub files_per_invocation: usize,
    /// `DMS2ICEBERG_SPOOL_DIR` (default `/tmp/dms2iceberg`): downloads land here.
    pub spool: PathBuf,
    /// `DMS2ICEBERG_KEY_CACHE_MB` (default 384): memory for cached key columns and key index
    /// pages.
    pub key_cache_bytes: usize,
    /// `DMS2ICEBERG_PARALLEL_LOADS` (default 1): full-load files of a backlog one invocation
    /// applies at once (each a streamed input's memory).
    pub parallel_loads: usize,
}

impl FunctionEnv {
    pub fn from_env() -> Result<FunctionEnv> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let num = |k: &str, d: usize| -> Result<usize> {
            match var(k) {
                None => Ok(d),
                Some(v) => v
                    .parse()
                    .map_err(|_| Error::Config(format!("{k}=`{v}` is not a number"))),
            }
        };
        let catalog = match var("DMS2ICEBERG_CATALOG").as_deref() {
            None | Some("glue") => crate::aws::CatalogTarget::Glue {
                warehouse: var("DMS2ICEBERG_WAREHOUSE").ok_or_else(|| {
                    Error::Config("DMS2ICEBERG_WAREHOUSE (s3://bucket/prefix) is not set".into())
                })?,
            },
            Some("s3tables") => crate::aws::CatalogTarget::S3Tables {
                bucket_arn: var("DMS2ICEBERG_TABLE_BUCKET_ARN").ok_or_else(|| {
                    Error::Config(
                        "DMS2ICEBERG_TABLE_BUCKET_ARN (arn:aws:s3tables:<region>:<account>:bucket/<name>) is not set (DMS2ICEBERG_CATALOG=s3tables)".into(),
                    )
                })?,
            },
            Some("rest") => crate::aws::CatalogTarget::Rest {
                uri: var("DMS2ICEBERG_REST_URI").ok_or_else(|| {
                    Error::Config(
                        "DMS2ICEBERG_REST_URI (the catalog's base URI, before /v1) is not set (DMS2ICEBERG_CATALOG=rest)".into(),
                    )
                })?,
                warehouse: var("DMS2ICEBERG_REST_WAREHOUSE"),
            },
            Some(other) => {
                return Err(Error::Config(format!(
                    "DMS2ICEBERG_CATALOG=`{other}`: use `glue`, `s3tables` or `rest`"
                )));
            }
        };
        Ok(FunctionEnv {
            catalog,
            database: var("DMS2ICEBERG_GLUE_DATABASE"),
            config: var("DMS2ICEBERG_CONFIG"),
            dead_letter_queue: var("DMS2ICEBERG_DEAD_LETTER_QUEUE_URL"),
            table_metrics: match var("DMS2ICEBERG_TABLE_METRICS").as_deref() {
                None | Some("off" | "false" | "0") => false,
                Some("on" | "true" | "1") => true,
                Some(other) => {
                    return Err(Error::Config(format!(
                        "DMS2ICEBERG_TABLE_METRICS=`{other}`: use `on` or `off`"
                    )));
                }
            },
            files_per_commit: num("DMS2ICEBERG_MAX_FILES_PER_COMMIT", 1)?.max(1),
            files_per_invocation: num("DMS2ICEBERG_MAX_FILES_PER_INVOCATION", 100)?.max(1),
            spool: var("DMS2ICEBERG_SPOOL_DIR")
                .map_or_else(|| std::env::temp_dir().join("dms2iceberg"), PathBuf::from),
            key_cache_bytes: num(
                "DMS2ICEBERG_KEY_CACHE_MB",
                crate::DEFAULT_KEY_CACHE_BYTES >> 20,
            )? << 20,
            parallel_loads: num("DMS2ICEBERG_PARALLEL_LOADS", 1)?.max(1),
        })
    }

    /// The `Function` dimension of the metrics: the deployed function's name
    /// (`AWS_LAMBDA_FUNCTION_NAME`), so that two stacks in one account and region keep their
    /// metrics (and alarms) apart; `role` where there is none (tests, a local run).
    pub fn metric_function(&self, role: &str) -> String {
        std::env::var("AWS_LAMBDA_FUNCTION_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| role.to_string())
    }

    /// The warehouse's `s3://bucket/prefix/` (Glue): objects there are the tables' own files,
    /// never DMS files, whatever an event rule matched.
    pub fn warehouse_prefix(&self) -> Option<String> {
        match &self.catalog {
            crate::aws::CatalogTarget::Glue { warehouse } => {
                Some(format!("{}/", warehouse.trim_end_matches('/')))
            }
            _ => None,
        }
    }

    /// The TOML config (if any), with the database override applied.
    pub async fn load_config(&self, services: &Services) -> Result<Config> {
        Ok(self.load_config_text(services).await?.0)
    }

    /// Whether the config is read again by every invocation (`s3://`, `ssm:`): an operator's
    /// change (`skip_files`, a new table) takes effect without a redeploy.
    pub fn config_is_remote(&self) -> bool {
        self.config
            .as_deref()
            .is_some_and(|c| c.starts_with("s3://") || c.starts_with("ssm:"))
    }

    /// [`FunctionEnv::load_config`], and the text of a remote config as read.
    pub async fn load_config_text(&self, services: &Services) -> Result<(Config, Option<String>)> {
        let parse = |what: &str, text: String| -> Result<(Config, Option<String>)> {
            let cfg =
                Config::from_toml(&text).map_err(|e| Error::Config(format!("{what}: {e}")))?;
            Ok((cfg, Some(text)))
        };
        let (mut cfg, text_read) = match &self.config {
            None => (Config::default(), None),
            Some(uri) if uri.starts_with("s3://") => {
                let (bucket, key) = split_s3_uri(uri)?;
                let bytes = services
                    .objects
                    .get(bucket, key)
                    .await
                    .map_err(|e| Error::Config(format!("reading {uri}: {e}")))?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| Error::Config(format!("{uri} is not UTF-8")))?;
                parse(uri, text)?
            }
            Some(uri) if uri.starts_with("ssm:") => {
                let name = &uri["ssm:".len()..];
                let store = services.parameters.as_ref().ok_or_else(|| {
                    Error::Config(format!("{uri}: no Parameter Store client in this process"))
                })?;
                let text = store
                    .get(name)
                    .await
                    .map_err(|e| Error::Config(format!("reading {uri}: {e}")))?;
                parse(uri, text)?
            }
            Some(path) => (Config::load(std::path::Path::new(path))?, None),
        };
        if let Some(db) = &self.database {
            if !crate::config::is_identifier(db) {
                return Err(Error::Config(format!(
                    "DMS2ICEBERG_GLUE_DATABASE=`{db}`: use lower-case letters, digits and `_`"
                )));
            }
            cfg.namespace_override = Some(db.clone());
        }
        // `DMS2ICEBERG_FORMAT_VERSION` (2 or 3): the format version of tables the function
        // creates, unless the config sets `format_version`.
        Ok((cfg.with_format_version_from_env()?, text_read))
    }
}
