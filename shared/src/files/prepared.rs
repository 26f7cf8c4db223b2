//! Files written for a commit that no snapshot references yet.

use iceberg::io::FileIO;

/// The files a plan or a commit attempt wrote before its swap: until a snapshot references
/// them they are the writer's alone, so a plan or attempt that is abandoned (replanned, already
/// applied, failed) deletes them. Best effort: what a crash leaves behind is what `orphans`
/// finds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Prepared(Vec<String>);

impl Prepared {
    pub(crate) fn push(&mut self, path: impl Into<String>) {
        self.0.push(path.into());
    }

    /// Deletes every file (a failure is logged: the file is an orphan then, never wrong data),
    /// many at once: an attempt on a partitioned table can leave hundreds (a data and a delete
    /// file per partition and data file it touched), one round trip each on object storage.
    /// Files in S3 Tables storage are left to the service (see [`refuses_deletes`]): one INFO
    /// line says how many.
    pub(crate) async fn abandon(&self, file_io: &FileIO) {
        use futures::StreamExt as _;
        let (left, files): (Vec<&String>, Vec<&String>) =
            self.0.iter().partition(|f| refuses_deletes(f));
        if !left.is_empty() {
            tracing::info!(
                files = left.len(),
                "abandoned files left to S3 Tables, which removes unreferenced files itself"
            );
        }
        // By index: a closure over borrowed items trips rustc's higher-ranked Send check when
        // the caller's future is boxed as `Send`.
        let files = &files;
        futures::stream::iter(0..files.len())
            .map(|i| async move { (i, file_io.delete(files[i]).await) })
            .buffer_unordered(super::parquet::SMALL_FILE_CONCURRENCY)
            .for_each(|(i, r)| async move {
                if let Err(e) = r {
                    let file = files[i];
                    tracing::warn!(%file, error = %e, "could not delete an abandoned file");
                }
            })
            .await;
    }
}

/// Whether `path` is in the storage of an Amazon S3 Tables table, which refuses DeleteObject
/// (`MethodNotAllowed`) and removes unreferenced files itself: every such table's files live in
/// a bucket of its own named `<id>--table-s3`. Deleting there only fails and logs noise.
pub(crate) fn refuses_deletes(path: &str) -> bool {
    ["s3://", "s3a://"]
        .iter()
        .find_map(|scheme| path.strip_prefix(scheme))
        .and_then(|rest| rest.split('/').next())
        .is_some_and(|bucket| bucket.ends_with("--table-s3"))
}

impl Extend<String> for Prepared {
    fn extend<I: IntoIterator<Item = String>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl FromIterator<String> for Prepared {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Prepared {
        Prepared(iter.into_iter().collect())
    }
}

impl IntoIterator for Prepared {
    type Item = String;
    type IntoIter = std::vec::IntoIter<String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn s3_tables_storage_refuses_deletes_and_nothing_else_does() {
        for p in [
            "s3://0d8f1c2a-7e3b-4f5a-9c1d-2b3e4f5a6b7c--table-s3/metadata/x.avro",
            "s3a://abc--table-s3/data/y.parquet",
        ] {
            assert!(super::refuses_deletes(p), "{p}");
        }
        for p in [
            "s3://warehouse/db/t/metadata/x.avro",
            "s3://my--table-s3-archive/x",
            "file:///tmp/abc--table-s3/x",
            "/abc--table-s3/x",
        ] {
            assert!(!super::refuses_deletes(p), "{p}");
        }
    }
}
