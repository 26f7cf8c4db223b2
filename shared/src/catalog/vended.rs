//! Storage credentials a REST catalog vends per table (`storage-credentials` and a loaded
//! table's `config`, the spec's credential delegation): every file of the table is read and
//! written with them, everything else with the catalog's own storage settings.
//!
//! One [`FileIO`] serves every table, as for the other catalogs: its storage sends each path
//! to the storage of the longest credential prefix the path lies under. The catalog registers
//! a table's credentials each time it loads the table (every commit attempt does), so a
//! credential that expires is replaced by the next load's.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage,
    StorageConfig, StorageFactory,
};

/// Properties that carry credentials (the spec's and Iceberg Java's S3 names): a loaded
/// table's `config` holding one of these is a vended credential for the table's location.
const CREDENTIAL_KEYS: &[&str] = &[
    "s3.access-key-id",
    "s3.session-token",
    "s3.secret-access-key",
];

/// Whether `config` carries storage credentials.
pub(super) fn has_credentials(config: &HashMap<String, String>) -> bool {
    CREDENTIAL_KEYS.iter().any(|k| config.contains_key(*k))
}

/// The routes of every table the process loaded, shared by the catalog (which registers
/// them) and its [`FileIO`]'s storage (which follows them).
pub(super) struct Vended {
    base: FileIO,
    routes: RwLock<Vec<Route>>,
}

struct Route {
    /// Without a trailing `/`: a path is under it if it equals it or continues with `/`.
    prefix: String,
    /// The credential's properties, to rebuild only when they change.
    config: HashMap<String, String>,
    io: FileIO,
}

impl Vended {
    /// `base` serves every path no vended credential covers.
    pub(super) fn new(base: FileIO) -> Arc<Vended> {
        Arc::new(Vended {
            base,
            routes: RwLock::new(Vec::new()),
        })
    }

    /// The one [`FileIO`] of the catalog, routing by path.
    pub(super) fn file_io(self: &Arc<Vended>) -> FileIO {
        FileIOBuilder::new(Arc::new(VendedFactory(self.clone()))).build()
    }

    /// Paths under `prefix` go to storage built by `build` from `config` (kept if the same
    /// credential is registered again).
    pub(super) fn register(
        &self,
        prefix: &str,
        config: &HashMap<String, String>,
        build: impl FnOnce() -> FileIO,
    ) {
        let prefix = prefix.trim_end_matches('/').to_string();
        let Ok(mut routes) = self.routes.write() else {
            return;
        };
        match routes.iter_mut().find(|r| r.prefix == prefix) {
            Some(r) if &r.config == config => {}
            Some(r) => {
                r.config = config.clone();
                r.io = build();
            }
            None => routes.push(Route {
                prefix,
                config: config.clone(),
                io: build(),
            }),
        }
    }

    /// The storage for `path`: the longest registered prefix it lies under, else the base.
    fn io_for(&self, path: &str) -> FileIO {
        self.route_of(path).1
    }

    /// The prefix that serves `path` (`None`: the base) and its storage.
    fn route_of(&self, path: &str) -> (Option<String>, FileIO) {
        let routes = match self.routes.read() {
            Ok(r) => r,
            // A poisoned lock only lost a registration: the base is what a catalog without
            // vended credentials uses.
            Err(_) => return (None, self.base.clone()),
        };
        routes
            .iter()
            .filter(|r| under(path, &r.prefix))
            .max_by_key(|r| r.prefix.len())
            .map_or_else(
                || (None, self.base.clone()),
                |r| (Some(r.prefix.clone()), r.io.clone()),
            )
    }
}

fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Builds the routing storage (the routes are the catalog's, not the configuration's).
#[derive(Clone)]
struct VendedFactory(Arc<Vended>);

/// The routing storage of one catalog.
#[derive(Clone)]
struct VendedStorage(Arc<Vended>);

impl std::fmt::Debug for VendedFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VendedFactory")
    }
}

impl std::fmt::Debug for VendedStorage {
    // Never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.routes.read().map_or(0, |r| r.len());
        write!(f, "VendedStorage({n} routes)")
    }
}

/// `Storage` and `StorageFactory` are serde traits (for engines that ship a FileIO to other
/// processes). These hold live routes and credentials that only this process may use: they
/// refuse to be serialized, and nothing deserializes into them.
macro_rules! process_bound_serde {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom(
                    "vended-credential storage is bound to its process",
                ))
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
                Err(serde::de::Error::custom(
                    "vended-credential storage is bound to its process",
                ))
            }
        }
    };
}
process_bound_serde!(VendedFactory);
process_bound_serde!(VendedStorage);

#[typetag::serde(name = "dms2iceberg-vended")]
impl StorageFactory for VendedFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(VendedStorage(self.0.clone())))
    }
}

#[async_trait]
#[typetag::serde(name = "dms2iceberg-vended")]
impl Storage for VendedStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.0.io_for(path).exists(path).await
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        self.0.io_for(path).new_input(path)?.metadata().await
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.0.io_for(path).new_input(path)?.read().await
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        self.0.io_for(path).new_input(path)?.reader().await
    }

    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.0.io_for(path).new_output(path)?.write(bs).await
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        self.0.io_for(path).new_output(path)?.writer().await
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.0.io_for(path).delete(path).await
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.0.io_for(path).delete_prefix(path).await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        // Each path with its own storage's credentials, a batch per storage.
        let paths: Vec<String> = paths.collect().await;
        let mut batches: Vec<(Option<String>, FileIO, Vec<String>)> = Vec::new();
        for p in paths {
            let (route, io) = self.0.route_of(&p);
            match batches.iter_mut().find(|(r, _, _)| *r == route) {
                Some((_, _, v)) => v.push(p),
                None => batches.push((route, io, vec![p])),
            }
        }
        for (_, io, batch) in batches {
            io.delete_stream(futures::stream::iter(batch)).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        self.0.io_for(path).new_input(path)
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        self.0.io_for(path).new_output(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(key: &str) -> HashMap<String, String> {
        HashMap::from([("s3.access-key-id".to_string(), key.to_string())])
    }

    /// Each path reaches the storage of the longest prefix it lies under (whole segments),
    /// the base otherwise; a re-registered credential replaces the old one.
    #[tokio::test]
    async fn paths_follow_the_longest_credential_prefix() {
        let dir = tempfile_dir();
        let base = FileIO::new_with_fs();
        let v = Vended::new(base.clone());
        let io = v.file_io();
        let built = std::sync::atomic::AtomicUsize::new(0);
        let mem_a = FileIO::new_with_memory();
        let mem_b = FileIO::new_with_memory();
        v.register("memory://wh/ns/t/", &cfg("a"), || {
            built.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            mem_a.clone()
        });
        v.register("memory://wh/ns/t/data", &cfg("b"), || mem_b.clone());
        // The same credential again: nothing rebuilt.
        v.register("memory://wh/ns/t", &cfg("a"), || {
            built.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            mem_a.clone()
        });
        assert_eq!(built.load(std::sync::atomic::Ordering::Relaxed), 1);

        io.new_output("memory://wh/ns/t/metadata/m.json")
            .unwrap()
            .write(Bytes::from_static(b"m"))
            .await
            .unwrap();
        io.new_output("memory://wh/ns/t/data/d.parquet")
            .unwrap()
            .write(Bytes::from_static(b"d"))
            .await
            .unwrap();
        assert!(
            mem_a
                .exists("memory://wh/ns/t/metadata/m.json")
                .await
                .unwrap()
        );
        assert!(
            !mem_b
                .exists("memory://wh/ns/t/metadata/m.json")
                .await
                .unwrap()
        );
        assert!(
            mem_b
                .exists("memory://wh/ns/t/data/d.parquet")
                .await
                .unwrap()
        );
        assert!(
            !mem_a
                .exists("memory://wh/ns/t/data/d.parquet")
                .await
                .unwrap()
        );
        // `{dir}/t2.txt` only spells like it lies under `{dir}/t`: the base serves it.
        let local = format!("{}/t2.txt", dir.display());
        v.register(
            &format!("{}/t", dir.display()),
            &cfg("c"),
            FileIO::new_with_memory,
        );
        io.new_output(&local)
            .unwrap()
            .write(Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert!(base.exists(&local).await.unwrap(), "the base wrote {local}");
        // Deleting a mixed batch reaches each storage.
        io.delete_stream(futures::stream::iter(vec![
            "memory://wh/ns/t/metadata/m.json".to_string(),
            "memory://wh/ns/t/data/d.parquet".to_string(),
            local.clone(),
        ]))
        .await
        .unwrap();
        assert!(
            !mem_a
                .exists("memory://wh/ns/t/metadata/m.json")
                .await
                .unwrap()
        );
        assert!(
            !mem_b
                .exists("memory://wh/ns/t/data/d.parquet")
                .await
                .unwrap()
        );
        assert!(!base.exists(&local).await.unwrap());
        // A new credential for a prefix replaces the old storage.
        let mem_c = FileIO::new_with_memory();
        v.register("memory://wh/ns/t", &cfg("a2"), || mem_c.clone());
        io.new_output("memory://wh/ns/t/x")
            .unwrap()
            .write(Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert!(mem_c.exists("memory://wh/ns/t/x").await.unwrap());
        assert!(!mem_a.exists("memory://wh/ns/t/x").await.unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("dms2iceberg-vended-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn credentials_are_recognised_by_their_keys() {
        assert!(has_credentials(&cfg("k")));
        assert!(!has_credentials(&HashMap::from([(
            "s3.endpoint".to_string(),
            "http://x".to_string()
        )])));
    }
}
