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
    pub(crate) async fn abandon(&self, file_io: &FileIO) {
        use futures::StreamExt as _;
        // By index: a closure over borrowed items trips rustc's higher-ranked Send check when
        // the caller's future is boxed as `Send`.
        let files = &self.0;
        futures::stream::iter(0..files.len())
            .map(|i| async move { (i, file_io.delete(&files[i]).await) })
            .buffer_unordered(crate::write::SMALL_FILE_CONCURRENCY)
            .for_each(|(i, r)| async move {
                if let Err(e) = r {
                    let file = &files[i];
                    tracing::warn!(%file, error = %e, "could not delete an abandoned file");
                }
            })
            .await;
    }
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
