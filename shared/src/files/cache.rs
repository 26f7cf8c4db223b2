//! The cache of a table's files, owned by whoever keeps a process warm (the CLI process, a
//! Lambda function between invocations) and handed to the catalog it opens, and the one
//! eviction rule of every part of it: insertion order with a second chance (CLOCK: an entry
//! used since it was last passed over goes to the back once instead of out), bounded by a
//! total weight (one per entry, or bytes). What is used again stays; a sweep through more
//! than the cache holds (a table's key index pages at a billion rows) evicts only what it
//! does not come back to. Table files are immutable by path (a commit writes new files under new
//! names), so an entry never goes stale and a key present is never replaced.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use iceberg::spec::{Manifest, ManifestFile, TableMetadata};

use super::deletes::{DeleteId, DeletedPositions};
use super::keys::Cached;
use super::metadata::Refs;

/// What the cache may hold. Metadata files and manifest lists are few and re-read by every
/// commit attempt; manifests and delete files are many and small; key columns are the bulk,
/// so they have a byte budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Bytes of decoded key columns (and ordering columns) of data files; 0 keeps none.
    pub key_bytes: usize,
}

/// Default memory for cached key columns and key index pages (each entry's bookkeeping
/// counted): about 70% of the index pages of a billion-row table of ids with small gaps
/// (~400 MB in all), and a warm process applying change files to it stays under 512 MiB.
pub const DEFAULT_KEY_CACHE_BYTES: usize = 288 << 20;

impl Default for CacheLimits {
    /// [`DEFAULT_KEY_CACHE_BYTES`], or `DMS2ICEBERG_KEY_CACHE_MB` if set (the CLI and the
    /// functions read the same variable).
    fn default() -> Self {
        let key_bytes = match std::env::var("DMS2ICEBERG_KEY_CACHE_MB") {
            Ok(v) => v.trim().parse::<usize>().map(|mb| mb << 20).unwrap_or_else(|_| {
                tracing::warn!(value = %v, "DMS2ICEBERG_KEY_CACHE_MB is not a number of MiB; the default applies");
                DEFAULT_KEY_CACHE_BYTES
            }),
            Err(_) => DEFAULT_KEY_CACHE_BYTES,
        };
        CacheLimits { key_bytes }
    }
}

/// Parsed metadata files (each commit writes a new one under a new name, so the location
/// identifies the content; one commit loads its table several times).
const METADATA_ENTRIES: usize = 8;
/// Manifest lists: read by the plan and every attempt of a commit, and the next commit.
const LIST_ENTRIES: usize = 8;
/// Manifests this process wrote, as written: the next lookup inherits them from the list.
const WRITTEN_ENTRIES: usize = 64;
/// Manifests, each.
const FILE_ENTRIES: usize = 20_000;
/// Bytes of position-delete contents: the live delete files of a table are a few MB (one per
/// data file, compacted away), but every commit replaces the delete file of each data file it
/// touches, and the versions it replaced are never read again (by count, 20,000 of them held
/// ~80 MB at a billion rows).
const DELETE_BYTES: usize = 64 << 20;

/// Memory of a position-delete file's content.
fn deleted_bytes(d: &Arc<DeletedPositions>) -> usize {
    d.iter()
        .map(|(path, positions)| path.capacity() + positions.capacity() * 8 + 64)
        .sum::<usize>()
        + 64
}

/// How many table files this cache had to read from storage (a miss each), by kind: a warm
/// process's commit of one change file reads none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileReads {
    pub metadata: u64,
    pub manifest_lists: u64,
    pub manifests: u64,
    pub position_deletes: u64,
}

/// A metadata file as parsed, with its refs.
pub(super) type Parsed = (Arc<TableMetadata>, Arc<Refs>);

/// The table files a process has read or written, kept by path. One per owner: share it
/// (an `Arc`) between the operations of one process so that what one wrote the next reads
/// from memory.
pub struct TableCache {
    pub(super) metadata: Mutex<Fifo<String, Parsed>>,
    pub(super) lists: Mutex<Fifo<String, Arc<Vec<ManifestFile>>>>,
    pub(super) written: Mutex<Fifo<String, Arc<Manifest>>>,
    pub(super) manifests: Mutex<Fifo<String, Arc<Manifest>>>,
    pub(super) deletes: Mutex<Fifo<DeleteId, Arc<DeletedPositions>>>,
    /// Manifests read only with their header's columns widened (see `files::manifests`): the
    /// next commit writes them again, in the table's schema.
    pub(super) widened: Mutex<Fifo<String, ()>>,
    /// Key columns of data files, in file order, for the key types they were read as; and the
    /// ordering-column values of the same files (a warm lookup compares every live hit's
    /// ordering values with the change's from memory). One byte budget for both.
    pub(crate) keys: Mutex<Fifo<(String, String), Cached>>,
    /// Key index uploads in flight: they overlap the rest of the commit, and
    /// [`TableCache::finish_uploads`] waits for them before an invocation ends.
    uploads: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    reads: [AtomicU64; 4],
}

pub(super) enum Kind {
    Metadata = 0,
    ManifestList = 1,
    Manifest = 2,
    PositionDeletes = 3,
}

impl Default for TableCache {
    fn default() -> Self {
        TableCache::new(CacheLimits::default())
    }
}

impl TableCache {
    pub fn new(limits: CacheLimits) -> TableCache {
        TableCache {
            metadata: Mutex::new(Fifo::entries(METADATA_ENTRIES)),
            lists: Mutex::new(Fifo::entries(LIST_ENTRIES)),
            written: Mutex::new(Fifo::entries(WRITTEN_ENTRIES)),
            manifests: Mutex::new(Fifo::entries(FILE_ENTRIES)),
            deletes: Mutex::new(Fifo::weighed(DELETE_BYTES, deleted_bytes)),
            widened: Mutex::new(Fifo::entries(FILE_ENTRIES)),
            keys: Mutex::new(Fifo::weighed(limits.key_bytes, Cached::size)),
            uploads: Mutex::default(),
            reads: Default::default(),
        }
    }

    /// What this cache read from storage so far.
    pub fn reads(&self) -> FileReads {
        let r = |k: Kind| self.reads[k as usize].load(Ordering::Relaxed);
        FileReads {
            metadata: r(Kind::Metadata),
            manifest_lists: r(Kind::ManifestList),
            manifests: r(Kind::Manifest),
            position_deletes: r(Kind::PositionDeletes),
        }
    }

    pub(super) fn count_read(&self, kind: Kind) {
        self.reads[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps a background upload (a key index) to wait for in [`TableCache::finish_uploads`].
    pub(crate) fn track_upload(&self, task: tokio::task::JoinHandle<()>) {
        if let Ok(mut w) = self.uploads.lock() {
            w.retain(|h| !h.is_finished());
            w.push(task);
        }
    }

    /// Waits for the uploads this process started (a failed one is logged: a key index is only
    /// a cache). Call before an invocation returns: a Lambda is frozen after it.
    pub async fn finish_uploads(&self) {
        let pending: Vec<_> = match self.uploads.lock() {
            Ok(mut w) => w.drain(..).collect(),
            Err(_) => return,
        };
        for h in pending {
            if let Err(e) = h.await {
                tracing::warn!(error = %e, "key index upload task failed");
            }
        }
    }
}

/// The value under `key` in a part of the cache (a poisoned lock is a miss: the cache only
/// saves reads).
pub(super) fn get<K, Q, V>(part: &Mutex<Fifo<K, V>>, key: &Q) -> Option<V>
where
    K: Eq + Hash + Clone + Borrow<Q>,
    Q: Hash + Eq + ?Sized,
    V: Clone,
{
    part.lock().ok()?.get(key).cloned()
}

pub(super) fn put<K: Eq + Hash + Clone, V>(part: &Mutex<Fifo<K, V>>, key: K, value: V) {
    if let Ok(mut p) = part.lock() {
        p.insert(key, value);
    }
}

pub(crate) struct Fifo<K, V> {
    /// Each value with its mark: used since it was inserted or last passed over.
    map: HashMap<K, (V, bool)>,
    order: VecDeque<K>,
    used: usize,
    limit: usize,
    weigh: fn(&V) -> usize,
}

impl<K: Eq + Hash + Clone, V> Fifo<K, V> {
    /// At most `limit` entries.
    pub(crate) fn entries(limit: usize) -> Self {
        Self::weighed(limit, |_| 1)
    }

    /// Entries whose `weigh`ts add up to `limit` at most (bytes, for key columns).
    pub(crate) fn weighed(limit: usize, weigh: fn(&V) -> usize) -> Self {
        Fifo {
            map: HashMap::new(),
            order: VecDeque::new(),
            used: 0,
            limit,
            weigh,
        }
    }

    /// The value under `key`, marked as used.
    pub(crate) fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (v, used) = self.map.get_mut(key)?;
        *used = true;
        Some(v)
    }

    /// Keeps `value` under `key`, evicting the oldest entries not used since they were last
    /// passed over until it fits (a used one is passed over once: it goes to the back, unmarked).
    /// A key already present keeps its value (and its weight is not counted twice); a value
    /// heavier than the whole limit is not kept.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        let weight = (self.weigh)(&value);
        if self.map.contains_key(&key) || weight > self.limit {
            return;
        }
        while self.used + weight > self.limit {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            match self.map.get_mut(&old) {
                Some((_, used)) if *used => {
                    *used = false;
                    self.order.push_back(old);
                }
                Some(_) => {
                    if let Some((v, _)) = self.map.remove(&old) {
                        self.used -= (self.weigh)(&v);
                    }
                }
                None => {}
            }
        }
        self.used += weight;
        self.order.push_back(key.clone());
        self.map.insert(key, (value, false));
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_go_first_and_the_weight_stays_exact() {
        let mut c: Fifo<String, Vec<u8>> = Fifo::weighed(10, |v| v.len());
        c.insert("a".into(), vec![0; 4]);
        c.insert("b".into(), vec![0; 4]);
        // Inserting a present key again (two lookups racing to cache one file) changes nothing.
        c.insert("a".into(), vec![0; 4]);
        assert_eq!((c.len(), c.used()), (2, 8));
        c.insert("c".into(), vec![0; 4]);
        assert!(c.get("a").is_none(), "the oldest made room");
        assert_eq!((c.len(), c.used()), (2, 8));
        // Heavier than the whole limit: not kept, nothing evicted for it.
        c.insert("d".into(), vec![0; 11]);
        assert_eq!((c.len(), c.used()), (2, 8));
        assert!(c.get("b").is_some() && c.get("c").is_some());
        // Zero limit: nothing is kept.
        let mut none: Fifo<String, Vec<u8>> = Fifo::weighed(0, |v| v.len());
        none.insert("a".into(), vec![0; 1]);
        assert_eq!(none.len(), 0);
    }

    #[test]
    fn what_is_used_again_gets_a_second_chance_and_a_sweep_does_not_evict_it() {
        let mut c: Fifo<u32, ()> = Fifo::entries(4);
        for i in 0..4 {
            c.insert(i, ());
        }
        // 0 is hot: used between every insert of a sweep through ten times the cache.
        for i in 4..40 {
            assert!(c.get(&0).is_some(), "evicted at {i}");
            c.insert(i, ());
            assert_eq!(c.len(), 4);
        }
        // Not used any more: it goes within one pass.
        for i in 40..48 {
            c.insert(i, ());
        }
        assert!(c.get(&0).is_none());
    }

    #[test]
    fn entries_are_counted_one_each() {
        let mut c: Fifo<u32, ()> = Fifo::entries(3);
        for i in 0..5 {
            c.insert(i, ());
        }
        assert_eq!(c.len(), 3);
        assert!(c.get(&1).is_none() && c.get(&2).is_some() && c.get(&4).is_some());
    }
}
