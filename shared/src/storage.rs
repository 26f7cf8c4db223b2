//! What the functions read from and write to besides their catalog, as traits the handlers
//! take: an object store of buckets and keys (DMS files and their config), a parameter store
//! and a dead-letter queue. In AWS they are S3, Systems Manager and SQS (`aws` implements them);
//! [`LocalObjects`] is a folder per bucket, so the handlers run in-process in tests (and on a
//! laptop) with the same code paths.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::ops::ingest::ObjectSource;
use crate::read::SourceData;

/// An object in a DMS folder.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    pub last_modified_ms: Option<i64>,
    /// Quotes removed.
    pub etag: Option<String>,
}

impl ObjectInfo {
    /// What the listing tells of the object's content.
    pub fn meta(&self) -> crate::locate::ObjectMeta {
        crate::locate::ObjectMeta {
            size: Some(self.size),
            modified_ms: self.last_modified_ms,
            etag: self.etag.clone(),
            md5: None,
            xxh3: None,
        }
    }
}

/// Buckets of objects. As an [`ObjectSource`] it fetches `s3://bucket/key` URIs (the keys the
/// ingest records).
#[async_trait]
pub trait ObjectStore: ObjectSource {
    /// Every object under `prefix` of `bucket`, in key order.
    async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>>;

    /// A small object's bytes (the config file).
    async fn get(&self, bucket: &str, key: &str) -> Result<Vec<u8>>;

    /// Starts reading `uri` ahead, so that its download overlaps other requests (stores where
    /// a read is cheap ignore it).
    fn prefetch(&self, _uri: &str) {}

    /// Drops what was read ahead and not used (its spool files).
    async fn drop_prefetched(&self) {}
}

/// A parameter store: the ingest function's config when `DMS2ICEBERG_CONFIG=ssm:<name>` (AWS
/// Systems Manager Parameter Store, `aws::SsmParameters`).
#[async_trait]
pub trait ParameterStore: Send + Sync {
    /// The parameter's value.
    async fn get(&self, name: &str) -> Result<String>;
}

/// Where the ingest function moves a record that no retry can help (a bad file, a table
/// without a key): its queue's dead-letter queue, at once, instead of after the queue's
/// receive count (`aws::SqsDeadLetters`).
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// Sends `body` (the record as it was received) with `attributes` (why, which table and
    /// file) to the dead-letter queue.
    async fn send(&self, body: &str, attributes: &[(&str, &str)]) -> Result<()>;
}

/// `s3://bucket/key` → (bucket, key).
pub fn split_s3_uri(uri: &str) -> Result<(&str, &str)> {
    uri.strip_prefix("s3://")
        .and_then(|r| r.split_once('/'))
        .filter(|(b, _)| !b.is_empty())
        .ok_or_else(|| Error::Config(format!("`{uri}` is not an s3://bucket/key URI")))
}

/// Buckets as folders: object `s3://b/k` is the file `<root>/b/k`. Keys are taken as they are
/// (no `..` can reach them: [`crate::locate`] refuses such keys before anything is fetched, and
/// the config's location comes from the function's environment).
pub struct LocalObjects {
    root: PathBuf,
}

impl LocalObjects {
    pub fn new(root: impl Into<PathBuf>) -> LocalObjects {
        LocalObjects { root: root.into() }
    }

    fn path(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.join(bucket).join(key)
    }

    fn path_of_uri(&self, uri: &str) -> Result<PathBuf> {
        let (bucket, key) = split_s3_uri(uri)?;
        Ok(self.path(bucket, key))
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir.display().to_string(), e)),
    };
    for e in entries {
        let p = e
            .map_err(|e| Error::io(dir.display().to_string(), e))?
            .path();
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

#[async_trait]
impl ObjectStore for LocalObjects {
    async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let base = self.root.join(bucket);
        // Walk the folder the prefix names (or its parent, when it ends inside a name).
        let start = match prefix.rsplit_once('/') {
            Some((dir, _)) => base.join(dir),
            None => base.clone(),
        };
        let mut files = Vec::new();
        walk(&start, &mut files)?;
        let mut out = Vec::new();
        for p in files {
            let Some(key) = p
                .strip_prefix(&base)
                .ok()
                .and_then(|k| k.to_str())
                .map(|k| k.replace(std::path::MAIN_SEPARATOR, "/"))
            else {
                continue;
            };
            if !key.starts_with(prefix) {
                continue;
            }
            let md = std::fs::metadata(&p).map_err(|e| Error::io(p.display().to_string(), e))?;
            let modified_ms = md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64);
            out.push(ObjectInfo {
                key,
                size: md.len(),
                last_modified_ms: modified_ms,
                etag: None,
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn get(&self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        let p = self.path(bucket, key);
        std::fs::read(&p).map_err(|e| Error::io(format!("s3://{bucket}/{key}"), e))
    }
}

#[async_trait]
impl ObjectSource for LocalObjects {
    async fn fetch(&self, uri: &str) -> Result<SourceData> {
        let p = self.path_of_uri(uri)?;
        if !p.is_file() {
            return Err(Error::Storage(format!("{uri}: no such object")));
        }
        Ok(SourceData::Path(p))
    }

    async fn fetch_if_present(&self, uri: &str) -> Result<Option<SourceData>> {
        let p = self.path_of_uri(uri)?;
        Ok(p.is_file().then_some(SourceData::Path(p)))
    }
}
