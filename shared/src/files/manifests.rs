//! Manifest lists and manifests, read once per process and shared (`Arc`) by every walk.

use std::sync::Arc;

use futures::{StreamExt as _, TryStreamExt as _};
use iceberg::spec::{
    Manifest, ManifestContentType, ManifestFile, ManifestList, ManifestStatus, Snapshot,
    TableMetadata,
};

use super::cache::{Kind, get, put};
use super::parquet::READ_CONCURRENCY;
use super::{Files, Fill};
use crate::error::Result;

impl Files {
    /// The manifests of `snapshot` (unencrypted tables; we never write encrypted ones).
    pub(crate) async fn manifest_list(
        &self,
        metadata: &TableMetadata,
        snapshot: &Snapshot,
    ) -> Result<Arc<Vec<ManifestFile>>> {
        let path = snapshot.manifest_list();
        if let Some(l) = get(&self.cache.lists, path) {
            return Ok(l);
        }
        let bytes = self.io.new_input(path)?.read().await?;
        self.cache.count_read(Kind::ManifestList);
        let list = ManifestList::parse_with_version(&bytes, metadata.format_version())?;
        let entries = Arc::new(list.consume_entries().into_iter().collect::<Vec<_>>());
        put(&self.cache.lists, path.to_string(), entries.clone());
        Ok(entries)
    }

    /// Remembers a manifest list this process wrote at `path` (its entries as a read would
    /// return them): the next commit of a warm process does not GET it back.
    pub(crate) fn remember_manifest_list(&self, path: &str, entries: Vec<ManifestFile>) {
        put(&self.cache.lists, path.to_string(), Arc::new(entries));
    }

    /// The manifest `file` names, its entries inheriting snapshot id and sequence numbers
    /// from the list entry (as [`ManifestFile::load_manifest`] gives them).
    pub(crate) async fn manifest(&self, file: &ManifestFile, fill: Fill) -> Result<Arc<Manifest>> {
        if let Some(m) = get(&self.cache.manifests, &file.manifest_path) {
            return Ok(m);
        }
        let loaded = match get(&self.cache.written, &file.manifest_path) {
            Some(written) => Arc::new(inherit(&written, file)),
            None => {
                let m = Arc::new(file.load_manifest(&self.io).await?);
                self.cache.count_read(Kind::Manifest);
                if fill == Fill::Pass {
                    return Ok(m);
                }
                m
            }
        };
        put(
            &self.cache.manifests,
            file.manifest_path.clone(),
            loaded.clone(),
        );
        Ok(loaded)
    }

    /// `list`'s manifests in list order, [`READ_CONCURRENCY`] reads in flight: on object
    /// storage each is a round trip, and a fresh process reads every one of a snapshot.
    pub(crate) async fn manifests(
        &self,
        list: &[ManifestFile],
        fill: Fill,
    ) -> Result<Vec<Arc<Manifest>>> {
        // By index: a closure over borrowed items trips rustc's higher-ranked Send check when
        // the caller's future is boxed as `Send` (the commit loop's planners are).
        futures::stream::iter(0..list.len())
            .map(|i| self.manifest(&list[i], fill))
            .buffered(READ_CONCURRENCY)
            .try_collect()
            .await
    }

    /// The manifests of `content` that snapshot `s` itself added (what a commit since a base
    /// brought in), read through without filling the cache.
    pub(crate) async fn added_by(
        &self,
        metadata: &TableMetadata,
        s: &Snapshot,
        content: ManifestContentType,
    ) -> Result<Vec<Arc<Manifest>>> {
        let list = self.manifest_list(metadata, s).await?;
        let added: Vec<ManifestFile> = list
            .iter()
            .filter(|m| m.content == content && m.added_snapshot_id == s.snapshot_id())
            .cloned()
            .collect();
        self.manifests(&added, Fill::Pass).await
    }

    /// Remembers a manifest this process wrote at `path`, as written (before the list it goes
    /// into assigns its sequence numbers).
    pub(crate) fn remember_manifest(&self, path: &str, as_written: Manifest) {
        put(&self.cache.written, path.to_string(), Arc::new(as_written));
    }

    /// A manifest this process wrote, as written (no inheritance), if it still remembers it.
    pub(crate) fn written_manifest(&self, path: &str) -> Option<Arc<Manifest>> {
        get(&self.cache.written, path)
    }
}

#[cfg(test)]
impl Files {
    /// A manifest this process remembers writing, as [`Files::manifest`] gives it.
    pub(crate) fn remembered_manifest(&self, file: &ManifestFile) -> Option<Manifest> {
        get(&self.cache.written, &file.manifest_path).map(|w| inherit(&w, file))
    }
}

/// A manifest as written, as a read through its list entry returns it: the rules of iceberg's
/// `ManifestEntry::inherit_data` (crate-private there).
fn inherit(written: &Manifest, file: &ManifestFile) -> Manifest {
    let entries = written
        .entries()
        .iter()
        .map(|e| {
            let mut e = e.as_ref().clone();
            // 0 is iceberg's INITIAL_SEQUENCE_NUMBER (private).
            let inherits = e.status == ManifestStatus::Added || file.sequence_number == 0;
            e.snapshot_id = e.snapshot_id.or(Some(file.added_snapshot_id));
            if inherits {
                e.sequence_number = e.sequence_number.or(Some(file.sequence_number));
                e.file_sequence_number = e.file_sequence_number.or(Some(file.sequence_number));
            }
            e
        })
        .collect();
    Manifest::new(written.metadata().clone(), entries)
}
