//! A table as loaded from the catalog, and the keys of what we write into its metadata.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use iceberg::TableIdent;
use iceberg::io::FileIO;
use iceberg::spec::{Snapshot, TableMetadata};
use iceberg::table::Table;

use crate::catalog::{Catalog, Pointer};
use crate::error::Result;
use crate::files::cache::Fifo;
use crate::files::metadata::Refs;

/// Snapshot summary and table property keys we write. Which files a table holds is in the
/// table property [`crate::commit::record::PROPERTY`]; the summary keys describe each snapshot
/// for `history` (and, for tables written before that property existed, are where the record
/// is rebuilt from).
pub(crate) mod keys {
    /// JSON array of the DMS object keys this snapshot applied.
    pub(crate) const SOURCE_FILES: &str = "dms2iceberg.source-files";
    /// JSON array of the DMS order keys of those objects (same order as SOURCE_FILES).
    pub(crate) const SOURCE_ORDERS: &str = "dms2iceberg.source-orders";
    /// DMS order key of the last file applied to the table (cumulative).
    pub(crate) const WATERMARK: &str = "dms2iceberg.watermark";
    /// Table property: the DMS `schema.table` that feeds the table (two sources resolving to one
    /// table would silently mix their rows).
    pub(crate) const SOURCE_TABLE: &str = "dms2iceberg.source-table";
    /// Table property: files up to this DMS order count as applied (their snapshots expired).
    pub(crate) const EXPIRED_WATERMARK: &str = "dms2iceberg.expired-watermark";
    /// Greatest change sequence applied to the table (cumulative), when configured.
    pub(crate) const CHANGE_SEQ: &str = "dms2iceberg.change-seq";
    pub(crate) const ROWS_INSERTED: &str = "dms2iceberg.rows-inserted";
    pub(crate) const ROWS_UPDATED: &str = "dms2iceberg.rows-updated";
    pub(crate) const ROWS_DELETED: &str = "dms2iceberg.rows-deleted";
    /// The snapshot is a reload: it replaced the table's contents with a new full load.
    pub(crate) const RELOAD: &str = "dms2iceberg.reload";
    pub(crate) const VERSION: &str = "dms2iceberg.version";
}

/// Parsed metadata files with their refs. A metadata file is never rewritten (each
/// commit writes a new one under a new name), so its location identifies its content: one
/// commit loads its table several times (plan, validation, the function's checks), and a long
/// snapshot history makes every parse cost more.
type ParsedMetadata = (Arc<TableMetadata>, Arc<Refs>);
static METADATA: LazyLock<Mutex<Fifo<String, ParsedMetadata>>> =
    LazyLock::new(|| Mutex::new(Fifo::entries(8)));

async fn read_metadata(
    file_io: &FileIO,
    location: &str,
) -> Result<(Arc<TableMetadata>, Arc<Refs>)> {
    if let Ok(m) = METADATA.lock()
        && let Some(t) = m.get(location)
    {
        return Ok(t.clone());
    }
    let started = Instant::now();
    let (metadata, refs) = crate::files::metadata::read(file_io, location).await?;
    let (metadata, refs) = (Arc::new(metadata), Arc::new(refs));
    count_metadata_io(&METADATA_READS, started.elapsed());
    remember(location, metadata.clone(), refs.clone());
    Ok((metadata, refs))
}

fn remember(location: &str, metadata: Arc<TableMetadata>, refs: Arc<Refs>) {
    if let Ok(mut m) = METADATA.lock() {
        m.insert(location.to_string(), (metadata, refs));
    }
}

/// What this process spent on metadata.json files since it started: reads (fetch and parse, on
/// a cache miss) and writes (serialise and write). Cumulative, for benchmarks and profiling: the
/// one cost of a commit that grows with the table's snapshot history (about 1 KB per snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetadataIo {
    pub reads: u64,
    pub read_ns: u64,
    pub writes: u64,
    pub write_ns: u64,
}

/// Count and nanoseconds of one kind of metadata.json access.
type IoCounter = (AtomicU64, AtomicU64);
static METADATA_READS: IoCounter = (AtomicU64::new(0), AtomicU64::new(0));
static METADATA_WRITES: IoCounter = (AtomicU64::new(0), AtomicU64::new(0));

fn count_metadata_io(counter: &IoCounter, elapsed: Duration) {
    counter.0.fetch_add(1, Ordering::Relaxed);
    counter
        .1
        .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
}

/// Counts one metadata.json write (serialising and writing it) that took `elapsed`.
pub(crate) fn count_metadata_write(elapsed: Duration) {
    count_metadata_io(&METADATA_WRITES, elapsed);
}

/// The metadata.json reads and writes of this process so far.
pub fn metadata_io() -> MetadataIo {
    let get = |c: &IoCounter| (c.0.load(Ordering::Relaxed), c.1.load(Ordering::Relaxed));
    let (reads, read_ns) = get(&METADATA_READS);
    let (writes, write_ns) = get(&METADATA_WRITES);
    MetadataIo {
        reads,
        read_ns,
        writes,
        write_ns,
    }
}

/// Remembers the metadata this process just wrote at `location` (after the catalog swap made
/// it current), so that the next load of an unchanged table reads nothing but the catalog
/// pointer: a warm function does not GET back its own metadata.json. Without its refs it is
/// not kept: a later commit on it needs them.
pub(crate) fn remember_metadata(location: &str, metadata: TableMetadata, refs: Option<Refs>) {
    if let Some(refs) = refs {
        remember(location, Arc::new(metadata), Arc::new(refs));
    }
}

/// Parsed manifest lists by path: immutable like metadata files, and read by both
/// the plan and every commit attempt of one commit (and by the next commit of a warm process).
type ManifestLists = Fifo<String, Arc<Vec<iceberg::spec::ManifestFile>>>;
static MANIFEST_LISTS: LazyLock<Mutex<ManifestLists>> =
    LazyLock::new(|| Mutex::new(Fifo::entries(8)));

/// Remembers a manifest list this process wrote at `path` (its entries as a read would return
/// them): the next commit of a warm process does not GET it back.
pub(crate) fn remember_manifest_list(path: &str, entries: Vec<iceberg::spec::ManifestFile>) {
    if let Ok(mut m) = MANIFEST_LISTS.lock() {
        m.insert(path.to_string(), Arc::new(entries));
    }
}

#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub ident: TableIdent,
    pub pointer: Pointer,
    pub metadata: Arc<TableMetadata>,
    /// The metadata's branches and tags (iceberg-rust keeps them private): what a commit on
    /// this metadata builds its own refs from.
    pub(crate) refs: Arc<Refs>,
}

impl LoadedTable {
    pub async fn load(catalog: &dyn Catalog, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let Some(pointer) = catalog.load(ident).await? else {
            return Ok(None);
        };
        let (metadata, refs) = read_metadata(catalog.file_io(), &pointer.metadata_location).await?;
        Ok(Some(LoadedTable {
            ident: ident.clone(),
            pointer,
            metadata,
            refs,
        }))
    }

    /// An iceberg-rust `Table` for reading (scans, manifests).
    pub fn table(&self, file_io: &FileIO) -> Result<Table> {
        Ok(Table::builder()
            .identifier(self.ident.clone())
            .metadata(self.metadata.clone())
            .metadata_location(self.pointer.metadata_location.clone())
            .file_io(file_io.clone())
            .readonly(true)
            .runtime(iceberg::Runtime::try_current()?)
            .build()?)
    }
}

/// Snapshots from the current one back to the first, following parents (the `snapshots` list
/// in metadata is unordered).
pub(crate) fn ancestry(metadata: &TableMetadata) -> Vec<&Arc<Snapshot>> {
    ancestors(metadata).collect()
}

/// [`ancestry`], lazily: a walk that stops early (at a base snapshot, at our own) costs what it
/// visits, not the whole history. Bounded by the snapshot count, so a parent cycle in damaged
/// metadata ends.
pub(crate) fn ancestors(metadata: &TableMetadata) -> impl Iterator<Item = &Arc<Snapshot>> {
    let mut next = metadata.current_snapshot_id();
    std::iter::from_fn(move || {
        let s = metadata.snapshot_by_id(next?)?;
        next = s.parent_snapshot_id();
        Some(s)
    })
    .take(metadata.snapshots().len())
}

/// Our summary properties of a snapshot, for `history`.
pub(crate) fn source_files(props: &std::collections::HashMap<String, String>) -> Vec<String> {
    props
        .get(keys::SOURCE_FILES)
        .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
        .unwrap_or_default()
}

/// Manifests this process wrote, by path, as written (entries whose sequence
/// numbers the manifest list assigns): a warm process's next lookup does not GET them back.
type WrittenManifests = Fifo<String, Arc<iceberg::spec::Manifest>>;
static WRITTEN_MANIFESTS: LazyLock<Mutex<WrittenManifests>> =
    LazyLock::new(|| Mutex::new(Fifo::entries(64)));

/// Remembers a manifest this process wrote at `path`.
pub(crate) fn remember_manifest(path: &str, manifest: iceberg::spec::Manifest) {
    if let Ok(mut m) = WRITTEN_MANIFESTS.lock() {
        m.insert(path.to_string(), Arc::new(manifest));
    }
}

/// A manifest this process wrote, as [`iceberg::spec::ManifestFile::load_manifest`] would
/// return it: entries inherit the snapshot id and sequence numbers the manifest list gives.
pub(crate) fn written_manifest(
    file: &iceberg::spec::ManifestFile,
) -> Option<iceberg::spec::Manifest> {
    use iceberg::spec::{Manifest, ManifestStatus};
    let written = WRITTEN_MANIFESTS
        .lock()
        .ok()?
        .get(&file.manifest_path)
        .cloned()?;
    let entries = written
        .entries()
        .iter()
        .map(|e| {
            let mut e = e.as_ref().clone();
            // The rules of iceberg's `ManifestEntry::inherit_data` (crate-private).
            let inherits = e.status == ManifestStatus::Added || file.sequence_number == 0; // iceberg's INITIAL_SEQUENCE_NUMBER (private)
            e.snapshot_id = e.snapshot_id.or(Some(file.added_snapshot_id));
            if inherits {
                e.sequence_number = e.sequence_number.or(Some(file.sequence_number));
                e.file_sequence_number = e.file_sequence_number.or(Some(file.sequence_number));
            }
            e
        })
        .collect();
    Some(Manifest::new(written.metadata().clone(), entries))
}

/// The manifests of `snapshot` (unencrypted tables; we never write encrypted ones).
pub(crate) async fn manifest_list(
    file_io: &FileIO,
    metadata: &TableMetadata,
    snapshot: &Snapshot,
) -> Result<Vec<iceberg::spec::ManifestFile>> {
    let path = snapshot.manifest_list();
    if let Ok(m) = MANIFEST_LISTS.lock()
        && let Some(l) = m.get(path)
    {
        return Ok(l.as_ref().clone());
    }
    let bytes = file_io.new_input(path)?.read().await?;
    let list = iceberg::spec::ManifestList::parse_with_version(&bytes, metadata.format_version())?;
    let entries: Vec<iceberg::spec::ManifestFile> = list.consume_entries().into_iter().collect();
    if let Ok(mut m) = MANIFEST_LISTS.lock() {
        m.insert(path.to_string(), Arc::new(entries.clone()));
    }
    Ok(entries)
}
