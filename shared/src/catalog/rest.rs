//! An Iceberg REST catalog (the spec's `/v1` routes): Polaris / Snowflake Open Catalog,
//! Lakekeeper, Unity Catalog, Nessie, Gravitino, rustberg, and the Iceberg REST endpoints of
//! AWS Glue and S3 Tables (SigV4).
//!
//! Unlike the pointer catalogs, the server writes each metadata file itself: a commit is sent
//! as its requirements and updates (`POST …/tables/{table}`), and the server applies the
//! updates to the table as it is if every requirement still holds. A `409` is a lost swap; a
//! `5xx`, a timeout or a broken connection leaves the outcome unknown, and the commit loop
//! looks for its snapshot id in the table, as for every catalog. A new table is staged
//! (`stage-create`) and created by its first commit (`assert-create`), so a table appears
//! with its first snapshot, never empty, as on the other catalogs.
//!
//! `/v1/config` is honoured: the server's `defaults` under the client's properties under its
//! `overrides`; `prefix` goes into every route; `s3.*` properties configure storage.
//! Storage credentials the server vends with a table (asked for with
//! `X-Iceberg-Access-Delegation: vended-credentials` when configured, used whenever sent)
//! serve that table's files (`vended`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iceberg::spec::{Schema, SortOrder, TableMetadata, UnboundPartitionSpec};
use iceberg::{NamespaceIdent, TableIdent, TableRequirement, TableUpdate};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{Catalog, Landed, ListedFile, Pointer, SwapError, TableCommit};
use crate::error::{Error, Result};
use crate::files::metadata::Refs;
use crate::files::{Files, TableCache};

/// How requests prove who sends them.
#[derive(Clone)]
pub enum RestAuth {
    None,
    /// `Authorization: Bearer <token>` (a token the server or its identity provider issued).
    Bearer(String),
    /// OAuth2 client credentials: a token fetched from `token_uri` (default
    /// `<uri>/v1/oauth/tokens`), refreshed before it expires and when the server refuses it.
    OAuth2 {
        client_id: String,
        client_secret: String,
        scope: String,
        token_uri: Option<String>,
    },
    /// AWS SigV4 with credentials from the standard chain: signing name `glue` for Glue's
    /// Iceberg endpoint, `s3tables` for S3 Tables'.
    #[cfg(feature = "aws")]
    SigV4(super::sigv4::Signer),
}

impl std::fmt::Debug for RestAuth {
    // Never the secret or the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RestAuth::None => "none",
            RestAuth::Bearer(_) => "bearer token",
            RestAuth::OAuth2 { .. } => "oauth2 client credentials",
            #[cfg(feature = "aws")]
            RestAuth::SigV4(_) => "sigv4",
        })
    }
}

/// Where the catalog is and how to reach it.
#[derive(Debug, Clone)]
pub struct RestConfig {
    /// The catalog's base URI (the part before `/v1`).
    pub uri: String,
    /// The `warehouse` sent to `/v1/config` (many servers serve several).
    pub warehouse: Option<String>,
    pub auth: RestAuth,
    /// Client properties, between the server's defaults and its overrides.
    pub properties: HashMap<String, String>,
    /// Ask the server for storage credentials scoped to each table it loads (the spec's
    /// `X-Iceberg-Access-Delegation: vended-credentials`). Credentials the server sends
    /// unasked are used too.
    pub vended_credentials: bool,
}

pub struct RestCatalog {
    http: reqwest::Client,
    /// `<uri>/v1/` plus the server's prefix, with a trailing `/`.
    routes: String,
    auth: Auth,
    files: Files,
    /// The merged properties (defaults < client < overrides).
    properties: HashMap<String, String>,
    /// Builds storage from properties (the catalog's, or the catalog's with a vended
    /// credential's over them).
    storage: StorageFor,
    /// The vended credentials of the tables loaded so far, which `files` routes by.
    vended: Arc<super::vended::Vended>,
    vended_credentials: bool,
    /// List this namespace's tables alone (a function granted one namespace).
    only_namespace: Option<String>,
}

/// An OAuth2 token and when to stop using it.
struct Token {
    value: String,
    renew_at: Instant,
}

struct Auth {
    how: RestAuth,
    token_uri: String,
    token: Mutex<Option<Token>>,
}

/// Requests that got no answer at all in this long are an unknown outcome.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Deserialize)]
struct ConfigResponse {
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    overrides: HashMap<String, String>,
}

#[derive(Deserialize)]
struct LoadTableResponse {
    #[serde(rename = "metadata-location")]
    metadata_location: Option<String>,
    /// Kept as JSON: parsed with its refs, as a metadata file is (`files::metadata`).
    metadata: Value,
    /// The table's own configuration: storage properties, a vended credential among them.
    #[serde(default)]
    config: HashMap<String, String>,
    /// Vended credentials, each for the files under its prefix (spec 1.7 and later).
    #[serde(default, rename = "storage-credentials")]
    storage_credentials: Vec<StorageCredential>,
}

#[derive(Deserialize)]
struct StorageCredential {
    prefix: String,
    #[serde(default)]
    config: HashMap<String, String>,
}

impl LoadTableResponse {
    /// The location and the metadata with its refs; `what` names the request in errors.
    fn into_parts(self, what: &str) -> Result<(String, TableMetadata, Refs)> {
        let location = self.metadata_location.ok_or_else(|| {
            Error::Catalog(format!("{what}: the server gave no metadata-location"))
        })?;
        let bytes = to_json(&self.metadata)?;
        let (metadata, refs) = crate::files::metadata::parse(&location, &bytes)?;
        Ok((location, metadata, refs))
    }
}

#[derive(Deserialize)]
struct ListTablesResponse {
    #[serde(default)]
    identifiers: Vec<Identifier>,
    #[serde(rename = "next-page-token")]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct ListNamespacesResponse {
    #[serde(default)]
    namespaces: Vec<Vec<String>>,
    #[serde(rename = "next-page-token")]
    next_page_token: Option<String>,
}

#[derive(Deserialize)]
struct Identifier {
    namespace: Vec<String>,
    name: String,
}

#[derive(Serialize)]
struct StageCreate<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    location: Option<&'a str>,
    schema: &'a Schema,
    #[serde(rename = "partition-spec", skip_serializing_if = "Option::is_none")]
    partition_spec: Option<UnboundPartitionSpec>,
    #[serde(rename = "write-order", skip_serializing_if = "Option::is_none")]
    write_order: Option<&'a SortOrder>,
    #[serde(rename = "stage-create")]
    stage_create: bool,
    properties: &'a HashMap<String, String>,
}

#[derive(Serialize)]
struct CommitRequest<'a> {
    identifier: Value,
    requirements: &'a [TableRequirement],
    updates: &'a [TableUpdate],
}

/// What went wrong with a request: whether it may have taken effect decides what follows.
enum Failure {
    /// The server answered with this status and body.
    Status(reqwest::StatusCode, String),
    /// No answer (timeout, connection): the request may have reached the server.
    NoAnswer(String),
    Other(Error),
}

impl RestCatalog {
    /// Lists the tables of `namespace` alone (`None`: every namespace the server lists).
    pub fn only_namespace(mut self, namespace: Option<String>) -> Self {
        self.only_namespace = namespace;
        self
    }

    /// Every namespace the server lists, page by page.
    async fn list_namespaces(&self) -> Result<Vec<Vec<String>>> {
        let mut namespaces = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let route = match &page {
                Some(p) => format!("namespaces?pageToken={}", encode(p)),
                None => "namespaces".to_string(),
            };
            let r: ListNamespacesResponse = self
                .send_retried(reqwest::Method::GET, &route, None)
                .await
                .map_err(|f| catalog_error(f, "list namespaces"))?
                .ok_or_else(|| Error::Catalog("list namespaces: empty answer".into()))?;
            namespaces.extend(r.namespaces);
            page = r.next_page_token.filter(|p| !p.is_empty());
            if page.is_none() {
                return Ok(namespaces);
            }
        }
    }

    /// Connects: the token (OAuth2) and `/v1/config`, whose prefix every route then carries.
    pub async fn connect(
        config: RestConfig,
        storage: StorageFor,
        cache: Arc<TableCache>,
    ) -> Result<RestCatalog> {
        let uri = config.uri.trim_end_matches('/').to_string();
        if !(uri.starts_with("http://") || uri.starts_with("https://")) {
            return Err(Error::Config(format!(
                "REST catalog URI `{uri}` must start with http:// or https://"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Error::Config(format!("REST client: {e}")))?;
        let token_uri = match &config.auth {
            RestAuth::OAuth2 {
                token_uri: Some(t), ..
            } => t.clone(),
            _ => format!("{uri}/v1/oauth/tokens"),
        };
        let vended = super::vended::Vended::new(super::local::file_io());
        let mut catalog = RestCatalog {
            http,
            routes: format!("{uri}/v1/"),
            auth: Auth {
                how: config.auth,
                token_uri,
                token: Mutex::new(None),
            },
            files: Files::new(vended.file_io(), cache.clone()),
            properties: HashMap::new(),
            storage,
            vended,
            vended_credentials: config.vended_credentials,
            only_namespace: None,
        };
        let query = match &config.warehouse {
            Some(w) => format!("config?warehouse={}", encode(w)),
            None => "config".to_string(),
        };
        let server: ConfigResponse = catalog
            .send_retried(reqwest::Method::GET, &query, None)
            .await
            .map_err(|f| catalog_error(f, "GET /v1/config"))?
            .ok_or_else(|| Error::Catalog("GET /v1/config: empty answer".into()))?;
        let mut properties = server.defaults;
        properties.extend(config.properties);
        properties.extend(server.overrides);
        if let Some(prefix) = properties.get("prefix").filter(|p| !p.is_empty()) {
            catalog.routes = format!("{uri}/v1/{}/", prefix.trim_matches('/'));
        }
        catalog.vended = super::vended::Vended::new((catalog.storage)(&properties));
        catalog.files = Files::new(catalog.vended.file_io(), cache);
        catalog.properties = properties;
        Ok(catalog)
    }

    /// The merged configuration (server defaults < client < server overrides).
    pub fn properties(&self) -> &HashMap<String, String> {
        &self.properties
    }

    fn table_route(ident: &TableIdent) -> String {
        format!(
            "namespaces/{}/tables/{}",
            namespace_path(ident.namespace()),
            encode(ident.name())
        )
    }

    /// The `Authorization` header's value, fetching or renewing an OAuth2 token if needed.
    async fn bearer(&self, renew: bool) -> Result<Option<String>> {
        let RestAuth::OAuth2 {
            client_id,
            client_secret,
            scope,
            ..
        } = &self.auth.how
        else {
            return Ok(match &self.auth.how {
                RestAuth::Bearer(t) => Some(format!("Bearer {t}")),
                _ => None,
            });
        };
        let mut token = self.auth.token.lock().await;
        if let Some(t) = token
            .as_ref()
            .filter(|t| !renew && t.renew_at > Instant::now())
        {
            return Ok(Some(format!("Bearer {}", t.value)));
        }
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", client_id.as_str()),
            ("client_secret", client_secret.as_str()),
            ("scope", scope.as_str()),
        ];
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let r = self
            .http
            .post(&self.auth.token_uri)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| {
                Error::Catalog(format!("OAuth2 token from {}: {e}", self.auth.token_uri))
            })?;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(Error::Config(format!(
                "OAuth2 token from {}: {status}: {}",
                self.auth.token_uri,
                error_message(&text)
            )));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            Error::Catalog(format!("OAuth2 token from {}: {e}", self.auth.token_uri))
        })?;
        let value = v["access_token"].as_str().ok_or_else(|| {
            Error::Catalog(format!(
                "OAuth2 token from {}: no access_token in the answer",
                self.auth.token_uri
            ))
        })?;
        // Renewed a minute early (or at half its life, if shorter), so no request carries a
        // token that expires on its way.
        let life = v["expires_in"].as_u64().unwrap_or(3600);
        let renew_in = life.saturating_sub(60).max(life / 2);
        *token = Some(Token {
            value: value.to_string(),
            renew_at: Instant::now() + Duration::from_secs(renew_in),
        });
        Ok(Some(format!("Bearer {value}")))
    }

    /// Sends a request to `route` (under `/v1/<prefix>/`, or `/v1/` for `config`); `Ok(None)`
    /// for a `204` or an empty body. A `401` with OAuth2 renews the token and tries once more.
    /// [`Self::send`] for a request that may be repeated (a read, creating a namespace, staging
    /// a table: none changes what a second one finds): a 5xx, a 429 or no answer is retried a
    /// few times with backoff, as the AWS SDKs retry. Never for a commit: a commit whose answer
    /// is lost is looked up (see `catalog::SwapError::Unknown`), not sent again.
    async fn send_retried<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        route: &str,
        body: Option<Vec<u8>>,
    ) -> std::result::Result<Option<T>, Failure> {
        const ATTEMPTS: u32 = 4;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = self.send(method.clone(), route, body.clone()).await;
            let transient = match &r {
                Err(Failure::NoAnswer(_)) => true,
                Err(Failure::Status(s, _)) => {
                    s.is_server_error() || *s == reqwest::StatusCode::TOO_MANY_REQUESTS
                }
                _ => false,
            };
            if !transient || attempt >= ATTEMPTS {
                return r;
            }
            let cap = 100u64 << (2 * (attempt - 1));
            tokio::time::sleep(std::time::Duration::from_millis(rand::random_range(
                cap / 2..=cap,
            )))
            .await;
        }
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        route: &str,
        body: Option<Vec<u8>>,
    ) -> std::result::Result<Option<T>, Failure> {
        let url = if route.starts_with("config") {
            let base = self.routes.split("/v1/").next().unwrap_or_default();
            format!("{base}/v1/{route}")
        } else {
            format!("{}{route}", self.routes)
        };
        let mut renew = false;
        loop {
            let mut req = self.http.request(method.clone(), &url);
            if let Some(b) = &body {
                req = req
                    .header("Content-Type", "application/json")
                    .body(b.clone());
            }
            if let Some(h) = self.bearer(renew).await.map_err(Failure::Other)? {
                req = req.header("Authorization", h);
            }
            if self.vended_credentials {
                req = req.header("X-Iceberg-Access-Delegation", "vended-credentials");
            }
            let req = self.sign(req).await.map_err(Failure::Other)?;
            let r = match self.http.execute(req).await {
                Ok(r) => r,
                Err(e) => return Err(Failure::NoAnswer(format!("{method} {url}: {e}"))),
            };
            let status = r.status();
            if status == reqwest::StatusCode::UNAUTHORIZED
                && !renew
                && matches!(self.auth.how, RestAuth::OAuth2 { .. })
            {
                renew = true;
                continue;
            }
            let text = match r.text().await {
                Ok(t) => t,
                Err(e) => return Err(Failure::NoAnswer(format!("{method} {url}: {e}"))),
            };
            if !status.is_success() {
                return Err(Failure::Status(status, error_message(&text)));
            }
            if text.trim().is_empty() {
                return Ok(None);
            }
            return serde_json::from_str(&text).map(Some).map_err(|e| {
                Failure::Other(Error::Catalog(format!(
                    "{method} {url}: an answer that is not the spec's: {e}"
                )))
            });
        }
    }

    #[cfg(feature = "aws")]
    async fn sign(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Request> {
        let mut req = req
            .build()
            .map_err(|e| Error::Catalog(format!("REST request: {e}")))?;
        if let RestAuth::SigV4(signer) = &self.auth.how {
            signer.sign(&mut req).await?;
        }
        Ok(req)
    }

    #[cfg(not(feature = "aws"))]
    async fn sign(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Request> {
        req.build()
            .map_err(|e| Error::Catalog(format!("REST request: {e}")))
    }

    async fn ensure_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let body = json!({ "namespace": namespace.clone().inner(), "properties": {} });
        match self
            .send_retried::<Value>(reqwest::Method::POST, "namespaces", Some(to_json(&body)?))
            .await
        {
            Ok(_) => Ok(()),
            Err(Failure::Status(s, _)) if s == reqwest::StatusCode::CONFLICT => Ok(()),
            Err(f) => Err(catalog_error(f, "create namespace")),
        }
    }

    /// Stages the table (nothing is created: the commit that asserts its creation does);
    /// `None` if a table of that name exists already.
    async fn stage(
        &self,
        ident: &TableIdent,
        schema: &Schema,
        location: Option<&str>,
        metadata: Option<&TableMetadata>,
    ) -> Result<Option<TableMetadata>> {
        self.ensure_namespace(ident.namespace()).await?;
        // The format version travels as a property (the spec's create request has no field).
        let mut properties = metadata.map(|m| m.properties().clone()).unwrap_or_default();
        properties.insert(
            "format-version".into(),
            (metadata.map_or(crate::config::DEFAULT_FORMAT_VERSION, |m| {
                m.format_version()
            }) as u8)
                .to_string(),
        );
        let request = StageCreate {
            name: ident.name(),
            location,
            schema,
            partition_spec: metadata
                .map(|m| m.default_partition_spec().as_ref().clone().into_unbound()),
            write_order: metadata.map(|m| m.default_sort_order().as_ref()),
            stage_create: true,
            properties: &properties,
        };
        let route = format!("namespaces/{}/tables", namespace_path(ident.namespace()));
        let staged: LoadTableResponse = match self
            .send_retried(reqwest::Method::POST, &route, Some(to_json(&request)?))
            .await
        {
            Ok(Some(t)) => t,
            Ok(None) => return Err(Error::Catalog(format!("stage {ident}: empty answer"))),
            Err(Failure::Status(s, _)) if s == reqwest::StatusCode::CONFLICT => return Ok(None),
            Err(f) => return Err(catalog_error(f, &format!("stage {ident}"))),
        };
        let metadata: TableMetadata = serde_json::from_value(staged.metadata).map_err(|e| {
            Error::Catalog(format!("stage {ident}: metadata not as the spec says: {e}"))
        })?;
        // The new table's first files are written before the commit that creates it.
        self.use_credentials(
            metadata.location(),
            &staged.config,
            &staged.storage_credentials,
        );
        Ok(Some(metadata))
    }

    /// Routes the table's files (under `location`) to the credentials the server vended with
    /// it: each `storage-credentials` entry for its prefix, or credentials in the table's
    /// `config` for the whole table. Without either, its files use the catalog's storage.
    fn use_credentials(
        &self,
        location: &str,
        config: &HashMap<String, String>,
        credentials: &[StorageCredential],
    ) {
        let with = |c: &HashMap<String, String>| {
            let mut props = self.properties.clone();
            props.extend(c.iter().map(|(k, v)| (k.clone(), v.clone())));
            (self.storage)(&props)
        };
        if credentials.is_empty() && super::vended::has_credentials(config) {
            self.vended.register(location, config, || with(config));
        }
        for c in credentials {
            // The table's config under the credential's own properties.
            let mut merged = config.clone();
            merged.extend(c.config.iter().map(|(k, v)| (k.clone(), v.clone())));
            self.vended.register(&c.prefix, &merged, || with(&merged));
        }
    }
}

/// Builds the storage for table files from the catalog's merged properties (`s3.*` and the
/// like): the wiring's, so the catalog holds no storage clients.
pub type StorageFor = Box<dyn Fn(&HashMap<String, String>) -> iceberg::io::FileIO + Send + Sync>;

#[async_trait]
impl Catalog for RestCatalog {
    fn files(&self) -> &Files {
        &self.files
    }

    /// The server assigns locations: a staged table (which creates nothing) tells where.
    async fn new_table_location(&self, ident: &TableIdent) -> Result<String> {
        let placeholder = Schema::builder()
            .build()
            .map_err(|e| Error::Internal(format!("empty schema: {e}")))?;
        // A table created meanwhile by another writer has its own location: the commit
        // will find the table there and plan again on it.
        let location = match self.stage(ident, &placeholder, None, None).await? {
            Some(staged) => staged.location().to_string(),
            None => {
                let pointer = self.load(ident).await?.ok_or_else(|| {
                    Error::Catalog(format!("{ident} exists and does not (dropped meanwhile?)"))
                })?;
                let (metadata, _) = self.files.metadata(&pointer.metadata_location).await?;
                metadata.location().to_string()
            }
        };
        Ok(location.trim_end_matches('/').to_string())
    }

    async fn load(&self, ident: &TableIdent) -> Result<Option<Pointer>> {
        let route = Self::table_route(ident);
        match self
            .send_retried::<LoadTableResponse>(reqwest::Method::GET, &route, None)
            .await
        {
            Ok(Some(mut t)) => {
                let config = std::mem::take(&mut t.config);
                let credentials = std::mem::take(&mut t.storage_credentials);
                let (location, metadata, refs) = t.into_parts(&format!("load {ident}"))?;
                self.use_credentials(metadata.location(), &config, &credentials);
                // The answer carries the metadata: no need to read the file again.
                self.files
                    .remember_metadata(&location, metadata, Some(refs));
                Ok(Some(Pointer {
                    metadata_location: location,
                    version: None,
                    parameters: None,
                }))
            }
            Ok(None) => Err(Error::Catalog(format!("load {ident}: empty answer"))),
            Err(Failure::Status(s, _)) if s == reqwest::StatusCode::NOT_FOUND => Ok(None),
            Err(f) => Err(catalog_error(f, &format!("load {ident}"))),
        }
    }

    fn writes_metadata(&self) -> bool {
        true
    }

    async fn swap(
        &self,
        ident: &TableIdent,
        _base: Option<&Pointer>,
        _new_location: &str,
        _metadata: &TableMetadata,
    ) -> std::result::Result<(), SwapError> {
        Err(SwapError::Failed(Error::Internal(format!(
            "{ident}: a REST catalog takes requirements and updates, not a metadata location"
        ))))
    }

    async fn commit(
        &self,
        ident: &TableIdent,
        _base: Option<&Pointer>,
        commit: &TableCommit<'_>,
    ) -> std::result::Result<Landed, SwapError> {
        let creates = commit.requirements.contains(&TableRequirement::NotExist);
        if creates {
            let md = commit.metadata;
            // Created by another writer first: a lost swap, planned again on its table.
            if self
                .stage(ident, md.current_schema(), Some(md.location()), Some(md))
                .await?
                .is_none()
            {
                return Err(SwapError::Conflict);
            }
        }
        let request = CommitRequest {
            identifier: json!({ "namespace": ident.namespace().clone().inner(), "name": ident.name() }),
            requirements: commit.requirements,
            updates: commit.updates,
        };
        let route = Self::table_route(ident);
        match self
            .send::<LoadTableResponse>(reqwest::Method::POST, &route, Some(to_json(&request)?))
            .await
        {
            // Landed: an answer we cannot read does not make it unlanded.
            Ok(Some(t)) => match t.into_parts(&format!("commit {ident}")) {
                Ok((metadata_location, metadata, refs)) => Ok(Landed {
                    metadata_location,
                    metadata: Some((metadata, refs)),
                }),
                Err(e) => Err(SwapError::Unknown(e.to_string())),
            },
            Ok(None) => Err(SwapError::Unknown(format!(
                "{ident}: empty answer to the commit"
            ))),
            Err(Failure::Status(s, _)) if s == reqwest::StatusCode::CONFLICT => {
                Err(SwapError::Conflict)
            }
            // A create whose staged table another writer's create took in between (rustberg
            // keeps one staging per name and answers "was not staged"): that writer created
            // the table, so this is a lost swap like a 409, planned again on its table.
            Err(Failure::Status(s, _)) if creates && s == reqwest::StatusCode::NOT_FOUND => {
                Err(SwapError::Conflict)
            }
            // The spec: 500, 502, 504 and other 5xx leave the commit's state unknown.
            Err(Failure::Status(s, m)) if s.is_server_error() => {
                Err(SwapError::Unknown(format!("commit {ident}: {s}: {m}")))
            }
            Err(Failure::NoAnswer(m)) => Err(SwapError::Unknown(m)),
            Err(f) => Err(SwapError::Failed(catalog_error(
                f,
                &format!("commit {ident}"),
            ))),
        }
    }

    async fn list_tables(&self) -> Result<Vec<TableIdent>> {
        let namespaces = match &self.only_namespace {
            Some(ns) => vec![vec![ns.clone()]],
            None => self.list_namespaces().await?,
        };
        let mut out = Vec::new();
        for ns in namespaces {
            let ns = NamespaceIdent::from_vec(ns)
                .map_err(|e| Error::Catalog(format!("list namespaces: {e}")))?;
            let mut page: Option<String> = None;
            loop {
                let mut route = format!("namespaces/{}/tables", namespace_path(&ns));
                if let Some(p) = &page {
                    route.push_str(&format!("?pageToken={}", encode(p)));
                }
                let r: ListTablesResponse = self
                    .send_retried(reqwest::Method::GET, &route, None)
                    .await
                    .map_err(|f| catalog_error(f, &format!("list tables of {ns:?}")))?
                    .ok_or_else(|| Error::Catalog("list tables: empty answer".into()))?;
                for id in r.identifiers {
                    let ns = NamespaceIdent::from_vec(id.namespace)
                        .map_err(|e| Error::Catalog(format!("list tables: {e}")))?;
                    out.push(TableIdent::new(ns, id.name));
                }
                page = r.next_page_token.filter(|p| !p.is_empty());
                if page.is_none() {
                    break;
                }
            }
        }
        out.sort_by_key(|t| t.to_string());
        Ok(out)
    }

    async fn list_files(&self, location: &str) -> Result<Vec<ListedFile>> {
        if location.starts_with("file:") || location.starts_with('/') {
            return super::list_local(location);
        }
        Err(Error::Unsupported(format!(
            "listing {location}: orphans on a REST catalog's object storage is not built yet \
             (the server's own maintenance, or `orphans` against the storage directly)"
        )))
    }
}

/// A namespace as a path segment: levels joined by the unit separator, percent-encoded.
fn namespace_path(ns: &NamespaceIdent) -> String {
    encode(&ns.clone().inner().join("\u{1f}"))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn to_json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::Internal(format!("REST request body: {e}")))
}

/// The spec's error model (`{"error": {"message", "type", "code"}}`), or the body as sent.
fn error_message(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v) if v["error"]["message"].is_string() => format!(
            "{} ({})",
            v["error"]["message"].as_str().unwrap_or_default(),
            v["error"]["type"].as_str().unwrap_or("error")
        ),
        _ => body.chars().take(500).collect(),
    }
}

fn catalog_error(f: Failure, what: &str) -> Error {
    match f {
        Failure::Status(s, m)
            if s == reqwest::StatusCode::UNAUTHORIZED || s == reqwest::StatusCode::FORBIDDEN =>
        {
            Error::Config(format!(
                "REST catalog {what}: {s}: {m} (check the credentials)"
            ))
        }
        Failure::Status(s, m) => Error::Catalog(format!("REST catalog {what}: {s}: {m}")),
        Failure::NoAnswer(m) => Error::Catalog(format!("REST catalog {what}: no answer: {m}")),
        Failure::Other(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_encode_namespaces_and_names() {
        let ident = TableIdent::new(
            NamespaceIdent::from_vec(vec!["a b".into(), "c".into()]).unwrap(),
            "t/1".into(),
        );
        assert_eq!(
            RestCatalog::table_route(&ident),
            "namespaces/a%20b%1Fc/tables/t%2F1"
        );
    }

    #[test]
    fn errors_read_the_spec_error_model() {
        let body = r#"{"error":{"message":"Requirement failed: ref main changed","type":"CommitFailedException","code":409}}"#;
        assert_eq!(
            error_message(body),
            "Requirement failed: ref main changed (CommitFailedException)"
        );
        assert_eq!(error_message("plain text"), "plain text");
    }

    #[test]
    fn requirements_and_updates_serialize_as_the_spec_says() {
        let r = serde_json::to_value(TableRequirement::RefSnapshotIdMatch {
            r#ref: "main".into(),
            snapshot_id: Some(7),
        })
        .unwrap();
        assert_eq!(
            r,
            json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 7})
        );
        let u = serde_json::to_value(TableUpdate::SetProperties {
            updates: [("k".to_string(), "v".to_string())].into(),
        })
        .unwrap();
        assert_eq!(
            u,
            json!({"action": "set-properties", "updates": {"k": "v"}})
        );
    }
}
