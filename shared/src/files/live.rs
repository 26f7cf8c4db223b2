//! The live files of a snapshot: the one walk over its manifests that lookup, compaction,
//! validation and history share, and the one place a table with equality deletes is refused.

use std::sync::Arc;

use futures::{StreamExt as _, TryStreamExt as _};
use iceberg::spec::{
    DataContentType, DataFile, Manifest, ManifestContentType, ManifestEntry, ManifestFile,
    Snapshot, TableMetadata,
};

use super::deletes::{DeleteSource, DeletedPositions};
use super::parquet::{READ_CONCURRENCY, SMALL_READ_CONCURRENCY, large_read_permit};
use super::{Files, Fill, equality_deletes_refused};
use crate::error::Result;

/// Which manifests a walk reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Data manifests only: the delete manifests are not read at all.
    Data,
    /// Data and delete manifests.
    All,
}

/// A snapshot's manifests as read (shared with the cache: nothing is copied).
pub(crate) struct LiveFiles {
    manifests: Vec<(ManifestFile, Arc<Manifest>)>,
    /// The first live equality-delete file seen, if any.
    equality: Option<String>,
}

/// A live file, with the partition spec its manifest was written for.
#[derive(Clone, Copy)]
pub(crate) struct LiveFile<'a> {
    pub(crate) entry: &'a ManifestEntry,
    pub(crate) spec_id: i32,
}

impl<'a> LiveFile<'a> {
    pub(crate) fn file(&self) -> &'a DataFile {
        self.entry.data_file()
    }
}

impl Files {
    /// The live files of the current snapshot. Refuses a table with equality deletes (when the
    /// delete manifests are read): every reader here applies position deletes only.
    pub(crate) async fn live(
        &self,
        md: &TableMetadata,
        scope: Scope,
        fill: Fill,
    ) -> Result<LiveFiles> {
        let Some(snapshot) = md.current_snapshot() else {
            return Ok(LiveFiles {
                manifests: Vec::new(),
                equality: None,
            });
        };
        let live = self.live_in(md, snapshot, scope, fill).await?;
        match &live.equality {
            Some(path) => Err(equality_deletes_refused(path)),
            None => Ok(live),
        }
    }

    /// The live files of any snapshot, equality deletes included (counting rows, not writing).
    pub(crate) async fn live_in(
        &self,
        md: &TableMetadata,
        snapshot: &Snapshot,
        scope: Scope,
        fill: Fill,
    ) -> Result<LiveFiles> {
        let list = self.manifest_list(md, snapshot).await?;
        let wanted: Vec<ManifestFile> = list
            .iter()
            .filter(|m| scope == Scope::All || m.content == ManifestContentType::Data)
            .cloned()
            .collect();
        let read = self.manifests(&wanted, fill).await?;
        let manifests: Vec<(ManifestFile, Arc<Manifest>)> = wanted.into_iter().zip(read).collect();
        let equality = manifests
            .iter()
            .filter(|(m, _)| m.content == ManifestContentType::Deletes)
            .flat_map(|(_, manifest)| manifest.entries())
            .find(|e| e.is_alive() && e.content_type() == DataContentType::EqualityDeletes)
            .map(|e| e.file_path().to_string());
        Ok(LiveFiles {
            manifests,
            equality,
        })
    }

    /// The positions of `sources`, in their order, with whether each was read from storage.
    /// Many small files on object storage, so read concurrently: up to
    /// [`SMALL_READ_CONCURRENCY`] whole small files or vectors, of which at most
    /// [`READ_CONCURRENCY`] larger ones reading ranges.
    pub(crate) async fn position_deletes_of(
        &self,
        sources: &[&DeleteSource],
        fill: Fill,
    ) -> Result<Vec<(Arc<DeletedPositions>, bool)>> {
        let large = &tokio::sync::Semaphore::new(READ_CONCURRENCY);
        futures::stream::iter(0..sources.len())
            .map(|i| async move {
                let source = sources[i];
                let _permit = large_read_permit(large, source.read_size()).await?;
                self.position_deletes(source, fill).await
            })
            .buffered(SMALL_READ_CONCURRENCY)
            .try_collect()
            .await
    }
}

impl LiveFiles {
    fn entries(&self, content: DataContentType) -> impl Iterator<Item = LiveFile<'_>> {
        self.manifests.iter().flat_map(move |(m, manifest)| {
            manifest
                .entries()
                .iter()
                .filter(move |e| e.is_alive() && e.content_type() == content)
                .map(|e| LiveFile {
                    entry: e.as_ref(),
                    spec_id: m.partition_spec_id,
                })
        })
    }

    /// Live data files, in manifest-list order.
    pub(crate) fn data(&self) -> impl Iterator<Item = LiveFile<'_>> {
        self.entries(DataContentType::Data)
    }

    /// Live data files, each with the `first_row_id` it inherits (v3: row lineage; `None` for a
    /// file that has no row ids yet).
    pub(crate) fn data_with_row_ids(&self) -> impl Iterator<Item = (LiveFile<'_>, Option<i64>)> {
        self.manifests
            .iter()
            .filter(|(m, _)| m.content == ManifestContentType::Data)
            .flat_map(|(m, manifest)| {
                let ids = super::lineage::inherited(m, manifest.entries());
                manifest
                    .entries()
                    .iter()
                    .zip(ids)
                    .filter(|(e, _)| e.is_alive() && e.content_type() == DataContentType::Data)
                    .map(|(e, id)| {
                        let file = LiveFile {
                            entry: e.as_ref(),
                            spec_id: m.partition_spec_id,
                        };
                        (file, id)
                    })
            })
    }

    /// Live position-delete files (none under [`Scope::Data`]).
    pub(crate) fn position_deletes(&self) -> impl Iterator<Item = LiveFile<'_>> {
        self.entries(DataContentType::PositionDeletes)
    }

    /// The first live equality-delete file, for readers that count instead of refusing.
    pub(crate) fn equality_deletes(&self) -> Option<&str> {
        self.equality.as_deref()
    }
}
