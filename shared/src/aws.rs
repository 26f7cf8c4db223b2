//! AWS wiring shared by the Lambda functions and the CLI's AWS catalogs: clients from the standard
//! AWS environment (region, credentials, `AWS_ENDPOINT_URL` for an emulator), the S3 `FileIO` for
//! the warehouse, and DMS objects in S3 (listing a table's folder, streaming objects to disk).
//! The catalog and the functions' handlers know none of this: they take the traits
//! ([`crate::catalog::ListFiles`], [`crate::storage::ObjectStore`]) implemented here.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use iceberg::io::{FileIO, FileIOBuilder};
use iceberg_storage_opendal::OpenDalStorageFactory;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

use crate::catalog::{Catalog, GlueCatalog, ListFiles, ListedFile, S3TablesCatalog};
use crate::error::{Error, Result};
use crate::files::{Files, TableCache};
use crate::read::SourceData;
use crate::storage::ObjectStore;
pub use crate::storage::{ObjectInfo, split_s3_uri};

/// Fails unless TLS can start: the HTTP clients under the AWS SDK and the S3 `FileIO` (reqwest
/// with the platform verifier) refuse to be built without a CA certificate, and the latter
/// panics, on first use, even for a plain-http endpoint. Checked before any client exists, so an
/// image without a CA store fails its initialisation with this message instead.
pub fn check_ca_store() -> Result<()> {
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        let detail = found
            .errors
            .first()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        return Err(Error::Config(format!(
            "no CA certificates found in the system store{detail}: the HTTPS clients cannot start \
             (even for a plain-http AWS_ENDPOINT_URL). Install the CA bundle in the image \
             (`ca-certificates`; Lambda's provided.al2023 has it) or point SSL_CERT_FILE at a \
             PEM bundle"
        )));
    }
    Ok(())
}

/// Settings read from the environment.
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (an emulator); `None` on AWS.
    pub s3_endpoint: Option<String>,
    /// `DMS2ICEBERG_S3_PATH_STYLE=true`: path-style addressing (emulators need it).
    pub path_style: bool,
    /// `DMS2ICEBERG_GLUE_CATALOG_ID`: another account's catalog.
    pub glue_catalog_id: Option<String>,
}

impl AwsSettings {
    pub fn from_env() -> AwsSettings {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        AwsSettings {
            s3_endpoint: var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL")),
            path_style: var("DMS2ICEBERG_S3_PATH_STYLE")
                .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "TRUE" | "yes")),
            glue_catalog_id: var("DMS2ICEBERG_GLUE_CATALOG_ID"),
        }
    }
}

/// Which AWS catalog holds the tables, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogTarget {
    /// The Glue Data Catalog, new tables under `warehouse` (`s3://bucket/prefix`).
    Glue { warehouse: String },
    /// An Amazon S3 Tables table bucket (`arn:aws:s3tables:<region>:<account>:bucket/<name>`).
    S3Tables { bucket_arn: String },
    /// An Iceberg REST catalog at `uri` (before `/v1`), its `warehouse` if given; authenticated
    /// as [`rest_auth_from_env`] says.
    Rest {
        uri: String,
        warehouse: Option<String>,
    },
}

/// Clients for one process.
#[derive(Clone)]
pub struct Aws {
    pub sdk: SdkConfig,
    pub settings: AwsSettings,
    pub s3: aws_sdk_s3::Client,
    pub glue: aws_sdk_glue::Client,
    pub s3tables: aws_sdk_s3tables::Client,
}

impl Aws {
    pub async fn from_env() -> Aws {
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        let settings = AwsSettings::from_env();
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .force_path_style(settings.path_style)
                .build(),
        );
        let glue = aws_sdk_glue::Client::new(&sdk);
        let s3tables = aws_sdk_s3tables::Client::new(&sdk);
        Aws {
            sdk,
            settings,
            s3,
            glue,
            s3tables,
        }
    }

    /// Storage properties for `s3://` table files from these settings.
    fn storage_props(&self) -> Vec<(String, String)> {
        storage_props(&self.settings, self.sdk.region().map(|r| r.to_string()))
    }

    /// Fails, in one line naming `AWS_REGION`, when the environment gives no region: every AWS
    /// client needs one, and the SDK's own error comes only at the first request.
    pub fn require_region(&self) -> Result<()> {
        match self.sdk.region() {
            Some(_) => Ok(()),
            None => Err(Error::Config(
                "no AWS region: set AWS_REGION (or a region in the AWS profile)".into(),
            )),
        }
    }

    /// `FileIO` for `s3://` table files.
    pub fn file_io(&self) -> FileIO {
        let props = self.storage_props();
        FileIOBuilder::new(Arc::new(OpenDalStorageFactory::S3 {
            customized_credential_load: None,
        }))
        .with_props(props)
        .build()
    }

    /// The Glue catalog with tables under `warehouse` (`s3://bucket/prefix`).
    pub fn glue_catalog(&self, warehouse: &str) -> Result<GlueCatalog> {
        if !warehouse.starts_with("s3://") {
            return Err(Error::Config(format!(
                "warehouse `{warehouse}` must be an s3:// URI for the Glue catalog"
            )));
        }
        Ok(GlueCatalog::new(
            self.glue.clone(),
            Arc::new(S3Objects::new(self.s3.clone(), std::env::temp_dir())),
            self.settings.glue_catalog_id.clone(),
            warehouse,
            self.file_io(),
        ))
    }
}

impl Aws {
    /// The S3 Tables catalog of table bucket `bucket_arn`.
    pub fn s3tables_catalog(&self, bucket_arn: &str) -> Result<S3TablesCatalog> {
        S3TablesCatalog::new(
            self.s3tables.clone(),
            bucket_arn,
            Arc::new(S3Objects::new(self.s3.clone(), std::env::temp_dir())),
            Files::new(self.file_io(), Arc::new(TableCache::default())),
        )
    }

    /// The catalog `target` names, its table files read through `cache` (the owner's: a warm
    /// function's); `only_database`: list that Glue database alone (a function granted one
    /// database cannot list the others).
    pub async fn catalog(
        &self,
        target: &CatalogTarget,
        cache: Option<Arc<TableCache>>,
        only_database: Option<String>,
    ) -> Result<Arc<dyn Catalog>> {
        Ok(match target {
            CatalogTarget::Glue { warehouse } => {
                let c = self.glue_catalog(warehouse)?.only_database(only_database);
                match cache {
                    Some(cache) => Arc::new(c.with_cache(cache)),
                    None => Arc::new(c),
                }
            }
            CatalogTarget::S3Tables { bucket_arn } => {
                let c = self.s3tables_catalog(bucket_arn)?;
                match cache {
                    Some(cache) => Arc::new(c.with_cache(cache)),
                    None => Arc::new(c),
                }
            }
            CatalogTarget::Rest { uri, warehouse } => Arc::new(
                rest_catalog(uri, warehouse.clone(), cache.unwrap_or_default())
                    .await?
                    .only_namespace(only_database),
            ),
        })
    }
}

/// Storage properties for `s3://` table files: the settings, and `region` when known.
fn storage_props(settings: &AwsSettings, region: Option<String>) -> Vec<(String, String)> {
    let mut props: Vec<(String, String)> = vec![(
        iceberg::io::S3_PATH_STYLE_ACCESS.into(),
        settings.path_style.to_string(),
    )];
    if let Some(region) = region {
        props.push((iceberg::io::S3_REGION.into(), region));
    }
    if let Some(e) = &settings.s3_endpoint {
        props.push((iceberg::io::S3_ENDPOINT.into(), e.clone()));
    }
    props
}

/// The REST catalog at `uri`, authenticated as the environment says ([`rest_auth_from_env`]);
/// its tables' files on S3 (the environment's S3 settings under the server's `s3.*`
/// properties) or a local `file://` warehouse.
///
/// The AWS environment is loaded only for SigV4 and for a secret: a REST catalog on a laptop (a
/// bearer token, a `file://` warehouse) must not wait for, or warn about, the instance metadata
/// service. Table files on S3 take the region from `AWS_REGION`/`AWS_DEFAULT_REGION` or the
/// server's properties, and credentials from the server (vended) or the standard chain, when
/// first read.
pub async fn rest_catalog(
    uri: &str,
    warehouse: Option<String>,
    cache: Arc<TableCache>,
) -> Result<crate::catalog::RestCatalog> {
    let auth = rest_auth_from_env().await?;
    let region = match &auth {
        crate::catalog::RestAuth::SigV4(s) => Some(s.region().to_string()),
        _ => env_region(),
    };
    let base: Vec<(String, String)> = storage_props(&AwsSettings::from_env(), region);
    let storage: crate::catalog::StorageFor = Box::new(move |props| {
        let mut all = base.clone();
        all.extend(
            props
                .iter()
                .filter(|(k, _)| k.starts_with("s3.") || k.starts_with("client."))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        FileIOBuilder::new(Arc::new(
            iceberg_storage_opendal::OpenDalResolvingStorageFactory::new(),
        ))
        .with_props(all)
        .build()
    });
    let config = crate::catalog::RestConfig {
        uri: uri.to_string(),
        warehouse,
        auth,
        properties: HashMap::new(),
        vended_credentials: env_flag("DMS2ICEBERG_REST_VENDED_CREDENTIALS")?,
    };
    crate::catalog::RestCatalog::connect(config, storage, cache).await
}

/// `AWS_REGION`, else `AWS_DEFAULT_REGION`.
fn env_region() -> Option<String> {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

/// How REST requests authenticate, from the environment (at most one of):
/// `DMS2ICEBERG_REST_TOKEN` (a bearer token); `DMS2ICEBERG_REST_CREDENTIAL`
/// (`client_id:client_secret`, OAuth2 client credentials, with `DMS2ICEBERG_REST_SCOPE`,
/// default `catalog`, and `DMS2ICEBERG_REST_OAUTH2_URI`, default `<uri>/v1/oauth/tokens`);
/// `DMS2ICEBERG_REST_TOKEN_SECRET` / `DMS2ICEBERG_REST_CREDENTIAL_SECRET` (the same, read once
/// from a Secrets Manager secret, its ARN or name, when the process starts: `secrets.rs`);
/// `DMS2ICEBERG_REST_SIGV4` (`glue` or `s3tables`: AWS SigV4 with the standard credential
/// chain and region, the AWS environment loaded for it). None: unauthenticated.
pub async fn rest_auth_from_env() -> Result<crate::catalog::RestAuth> {
    use crate::catalog::RestAuth;
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    const WAYS: [&str; 5] = [
        "DMS2ICEBERG_REST_TOKEN",
        "DMS2ICEBERG_REST_TOKEN_SECRET",
        "DMS2ICEBERG_REST_CREDENTIAL",
        "DMS2ICEBERG_REST_CREDENTIAL_SECRET",
        "DMS2ICEBERG_REST_SIGV4",
    ];
    let set: Vec<&str> = WAYS.into_iter().filter(|k| var(k).is_some()).collect();
    if set.len() > 1 {
        return Err(Error::Config(format!(
            "set one of {} (set: {})",
            WAYS.join(", "),
            set.join(", ")
        )));
    }
    let oauth2 = |client_id: String, client_secret: String| RestAuth::OAuth2 {
        client_id,
        client_secret,
        scope: var("DMS2ICEBERG_REST_SCOPE").unwrap_or_else(|| "catalog".into()),
        token_uri: var("DMS2ICEBERG_REST_OAUTH2_URI"),
    };
    if let Some(t) = var("DMS2ICEBERG_REST_TOKEN") {
        return Ok(RestAuth::Bearer(t));
    }
    if let Some(id) = var("DMS2ICEBERG_REST_TOKEN_SECRET") {
        let value = read_secret(&id).await?;
        return Ok(RestAuth::Bearer(crate::secrets::bearer_token(&id, &value)?));
    }
    if let Some(c) = var("DMS2ICEBERG_REST_CREDENTIAL") {
        let (client_id, client_secret) = c.split_once(':').ok_or_else(|| {
            Error::Config("DMS2ICEBERG_REST_CREDENTIAL must be client_id:client_secret".into())
        })?;
        return Ok(oauth2(client_id.to_string(), client_secret.to_string()));
    }
    if let Some(id) = var("DMS2ICEBERG_REST_CREDENTIAL_SECRET") {
        let value = read_secret(&id).await?;
        let (client_id, client_secret) = crate::secrets::client_credential(&id, &value)?;
        return Ok(oauth2(client_id, client_secret));
    }
    if let Some(service) = var("DMS2ICEBERG_REST_SIGV4") {
        if !matches!(service.as_str(), "glue" | "s3tables") {
            return Err(Error::Config(format!(
                "DMS2ICEBERG_REST_SIGV4=`{service}`: use `glue` (Glue's Iceberg endpoint) or `s3tables`"
            )));
        }
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        let credentials = sdk.credentials_provider().ok_or_else(|| {
            Error::Config("SigV4: no AWS credentials provider in this environment".into())
        })?;
        let region = sdk.region().ok_or_else(|| {
            Error::Config(
                "SigV4 needs an AWS region: set AWS_REGION (or a region in the AWS profile)".into(),
            )
        })?;
        return Ok(RestAuth::SigV4(crate::catalog::SigV4Signer::new(
            credentials,
            region.as_ref(),
            &service,
        )));
    }
    Ok(RestAuth::None)
}

/// The value of Secrets Manager secret `id` (an ARN or a name), read now; logged by its id
/// alone.
async fn read_secret(id: &str) -> Result<String> {
    let started = std::time::Instant::now();
    let value = crate::secrets::SecretsManager::for_secret(id)
        .await?
        .get_secret_value(id)
        .await?;
    tracing::info!(
        secret = %id,
        ms = started.elapsed().as_millis() as u64,
        "REST catalog credentials read from Secrets Manager"
    );
    Ok(value)
}

/// The ingest function's config in AWS Systems Manager Parameter Store (`ssm:<name>`).
pub struct SsmParameters(pub aws_sdk_ssm::Client);

#[async_trait]
impl crate::storage::ParameterStore for SsmParameters {
    async fn get(&self, name: &str) -> Result<String> {
        let out = self
            .0
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| {
                Error::Config(format!(
                    "SSM GetParameter {name}: {}",
                    aws_sdk_ssm::error::DisplayErrorContext(&e)
                ))
            })?;
        out.parameter()
            .and_then(|p| p.value())
            .map(str::to_string)
            .ok_or_else(|| Error::Config(format!("SSM parameter {name} has no value")))
    }
}

/// The ingest queue's dead-letter queue (`DMS2ICEBERG_DEAD_LETTER_QUEUE_URL`).
pub struct SqsDeadLetters {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
}

#[async_trait]
impl crate::storage::DeadLetters for SqsDeadLetters {
    async fn send(&self, body: &str, attributes: &[(&str, &str)]) -> Result<()> {
        let mut req = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body);
        for (k, v) in attributes.iter().filter(|(_, v)| !v.is_empty()) {
            // An attribute value is at most 256 KiB with the message; reasons are short, but
            // cut them to be sure the message is not refused for its attributes.
            let v: String = v.chars().take(4096).collect();
            let attr = aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(v)
                .build()
                .map_err(|e| Error::Internal(format!("SQS message attribute {k}: {e}")))?;
            req = req.message_attributes(*k, attr);
        }
        req.send().await.map_err(|e| {
            Error::Storage(format!(
                "SQS SendMessage to {}: {}",
                self.queue_url,
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            ))
        })?;
        Ok(())
    }
}

/// DMS objects in S3.
pub struct S3Objects {
    client: aws_sdk_s3::Client,
    /// Downloads land here (Lambda: /tmp); memory stays bounded whatever the object size.
    spool: PathBuf,
    /// Downloads started before they were known to be needed ([`S3Objects::prefetch`]), by
    /// `s3://` URI: a fetch takes its download from here.
    ahead: Mutex<HashMap<String, JoinHandle<Result<SourceData>>>>,
}

impl S3Objects {
    pub fn new(client: aws_sdk_s3::Client, spool: PathBuf) -> Self {
        S3Objects {
            client,
            spool,
            ahead: Mutex::default(),
        }
    }

    /// Starts downloading `uri` in the background, so that the read overlaps other requests
    /// (the table's catalog entry and metadata) instead of following them.
    pub fn prefetch(&self, uri: &str) {
        let Ok((bucket, key)) = split_s3_uri(uri) else {
            return;
        };
        let Ok(mut ahead) = self.ahead.lock() else {
            return;
        };
        if ahead.contains_key(uri) {
            return;
        }
        let this = S3Objects::new(self.client.clone(), self.spool.clone());
        let (bucket, key) = (bucket.to_string(), key.to_string());
        ahead.insert(
            uri.to_string(),
            tokio::spawn(async move { this.download(&bucket, &key).await }),
        );
    }

    /// The background download of `uri`, if one was started and not taken yet.
    async fn take_prefetched(&self, uri: &str) -> Option<Result<SourceData>> {
        let handle = self.ahead.lock().ok()?.remove(uri)?;
        Some(match handle.await {
            Ok(r) => r,
            Err(e) => Err(Error::Storage(format!("download of {uri} failed: {e}"))),
        })
    }

    /// Deletes the downloads started ahead that no fetch took (their files were not pending).
    pub async fn drop_prefetched(&self) {
        let handles: Vec<_> = match self.ahead.lock() {
            Ok(mut a) => a.drain().map(|(_, h)| h).collect(),
            Err(_) => return,
        };
        for h in handles {
            if let Ok(Ok(data)) = h.await {
                crate::ops::ingest::ObjectSource::release(self, &data).await;
            }
        }
    }

    /// Every object under `prefix`, in key order.
    pub async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let r = self
                .client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| {
                    Error::Storage(format!(
                        "S3 ListObjectsV2 s3://{bucket}/{prefix}: {}",
                        aws_sdk_s3::error::DisplayErrorContext(&e)
                    ))
                })?;
            for o in r.contents() {
                if let Some(k) = o.key() {
                    out.push(ObjectInfo {
                        key: k.to_string(),
                        size: o.size().unwrap_or_default().max(0) as u64,
                        last_modified_ms: o.last_modified().and_then(|t| t.to_millis().ok()),
                        etag: o.e_tag().map(|e| e.trim_matches('"').to_string()),
                    });
                }
            }
            token = r.next_continuation_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn get_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<aws_sdk_s3::operation::get_object::GetObjectOutput> {
        self.client
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                Error::Storage(format!(
                    "S3 GetObject s3://{bucket}/{key}: {}",
                    aws_sdk_s3::error::DisplayErrorContext(&e)
                ))
            })
    }

    /// Streams `s3://bucket/key` to a spool file.
    pub async fn download(&self, bucket: &str, key: &str) -> Result<SourceData> {
        let r = self.get_object(bucket, key).await?;
        tokio::fs::create_dir_all(&self.spool)
            .await
            .map_err(|e| Error::io(self.spool.display().to_string(), e))?;
        let path = self.spool.join(uuid::Uuid::new_v4().to_string());
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| Error::io(path.display().to_string(), e))?;
        let mut body = r.body;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| Error::Storage(format!("S3 GetObject s3://{bucket}/{key}: {e}")))?
        {
            file.write_all(&chunk)
                .await
                .map_err(|e| Error::io(path.display().to_string(), e))?;
        }
        file.flush()
            .await
            .map_err(|e| Error::io(path.display().to_string(), e))?;
        Ok(SourceData::Path(path))
    }
}

#[async_trait]
impl ObjectStore for S3Objects {
    async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        S3Objects::list(self, bucket, prefix).await
    }

    fn prefetch(&self, uri: &str) {
        S3Objects::prefetch(self, uri)
    }

    async fn drop_prefetched(&self) {
        S3Objects::drop_prefetched(self).await
    }

    async fn get(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        let obj = self.get_object(bucket, key).await?;
        let bytes = obj
            .body
            .collect()
            .await
            .map_err(|e| Error::Storage(format!("S3 GetObject s3://{bucket}/{key}: {e}")))?;
        Ok(bytes.into_bytes().to_vec())
    }
}

#[async_trait]
impl ListFiles for S3Objects {
    async fn list_files(&self, location: &str) -> Result<Vec<ListedFile>> {
        let (bucket, prefix) = split_s3_uri(location)?;
        let prefix = format!("{}/", prefix.trim_end_matches('/'));
        Ok(self
            .list(bucket, &prefix)
            .await?
            .into_iter()
            .map(|o| ListedFile {
                path: format!("s3://{bucket}/{}", o.key),
                size: o.size,
                modified_ms: o.last_modified_ms.unwrap_or(0),
            })
            .collect())
    }
}

#[async_trait]
impl crate::ops::ingest::ObjectSource for S3Objects {
    async fn fetch(&self, key: &str) -> Result<SourceData> {
        // A failed download ahead is tried again (its error may have been transient).
        if let Some(Ok(data)) = self.take_prefetched(key).await {
            return Ok(data);
        }
        let (bucket, key) = split_s3_uri(key)?;
        self.download(bucket, key).await
    }

    async fn fetch_if_present(&self, uri: &str) -> Result<Option<SourceData>> {
        // A failed download ahead may be a missing object: asked again below.
        if let Some(Ok(data)) = self.take_prefetched(uri).await {
            return Ok(Some(data));
        }
        let (bucket, key) = split_s3_uri(uri)?;
        match self
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => self.download(bucket, key).await.map(Some),
            Err(e) if e.as_service_error().is_some_and(|se| se.is_not_found()) => Ok(None),
            Err(e) => Err(Error::Storage(format!(
                "S3 HeadObject {uri}: {}",
                aws_sdk_s3::error::DisplayErrorContext(&e)
            ))),
        }
    }

    async fn release(&self, data: &SourceData) {
        if let SourceData::Path(p) = data
            && p.starts_with(&self.spool)
        {
            let _ = tokio::fs::remove_file(p).await;
        }
    }
}

/// A boolean environment variable: unset or empty is false; `1`/`true`/`yes` and
/// `0`/`false`/`no` (any case); anything else is refused, naming the variable.
fn env_flag(name: &str) -> Result<bool> {
    let Ok(v) = std::env::var(name) else {
        return Ok(false);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" => Ok(false),
        "1" | "true" | "yes" => Ok(true),
        _ => Err(Error::Config(format!("{name}=`{v}`: use true or false"))),
    }
}
