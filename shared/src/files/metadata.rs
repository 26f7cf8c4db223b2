//! metadata.json files: read with the table's refs alongside, written from borrowed parts; and
//! the walk from a metadata's current snapshot back through its parents.
//!
//! iceberg-rust serialises `TableMetadata` by cloning it whole and then cloning every snapshot
//! out of its `Arc` (summary map included) before a byte is written: at 10,000 snapshots that
//! copy and its drop were a third of a commit, and the frees it leaves behind slowed the rest of
//! the commit. [`to_json`] writes the same v2 document straight from the metadata's parts.
//!
//! One part is not public in iceberg-rust: the refs (branches and tags, with their retention).
//! So every metadata this process holds carries its [`Refs`] beside it: parsed from the file
//! when it is read, and for metadata a commit builds, the parent's refs with the builder's ref
//! changes applied ([`refs_after`]). Refs are checked against the metadata before each use
//! ([`consistent`]); where they cannot be known, iceberg-rust's own writer is used.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use iceberg::io::FileIO;

use iceberg::spec::{
    FormatVersion, MAIN_BRANCH, MetadataLog, PartitionSpec, PartitionStatisticsFile, Schema,
    Snapshot, SnapshotLog, SnapshotReference, SnapshotRetention, SortOrder, StatisticsFile,
    Summary, TableMetadata,
};
use iceberg::{MetadataLocation, TableUpdate};
use serde::{Deserialize, Serialize};

use crate::error::Result;

use super::Files;
use super::cache::{Kind, get, put};

/// A table's branches and tags by name.
pub(crate) type Refs = BTreeMap<String, SnapshotReference>;

/// Reads the metadata.json file at `location` (gzip'd or not, as iceberg-rust reads it).
pub(crate) async fn read(file_io: &FileIO, location: &str) -> Result<(TableMetadata, Refs)> {
    let bytes = file_io.new_input(location)?.read().await?;
    parse_bytes(location, &bytes)
}

/// A metadata file's bytes as read (gzip or plain JSON), parsed.
pub(crate) fn parse_bytes(location: &str, bytes: &[u8]) -> Result<(TableMetadata, Refs)> {
    if bytes.starts_with(&[0x1F, 0x8B]) {
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut json)
            .map_err(|e| invalid(location, "cannot be decompressed").with_source(e))?;
        parse(location, &json)
    } else {
        parse(location, bytes)
    }
}

/// Writes `metadata` to `location`: with [`to_json`] when its refs are known and it writes
/// this metadata, else with iceberg-rust's writer (which copies the whole metadata first).
pub(crate) async fn write(
    file_io: &FileIO,
    location: &str,
    metadata: &TableMetadata,
    refs: Option<&Refs>,
) -> Result<()> {
    let started = Instant::now();
    match refs.and_then(|refs| to_json(metadata, refs)) {
        Some(json) => file_io.new_output(location)?.write(json?.into()).await?,
        None => {
            metadata
                .write_to(file_io, &MetadataLocation::from_str(location)?)
                .await?
        }
    }
    count(&WRITES, started.elapsed());
    Ok(())
}

impl Files {
    /// The metadata at `location` with its refs, parsed once per process.
    pub(crate) async fn metadata(&self, location: &str) -> Result<(Arc<TableMetadata>, Arc<Refs>)> {
        if let Some(m) = get(&self.cache().metadata, location) {
            return Ok(m);
        }
        let started = Instant::now();
        let (metadata, refs) = read(self.io(), location).await?;
        count(&READS, started.elapsed());
        self.cache().count_read(Kind::Metadata);
        let parsed = (Arc::new(metadata), Arc::new(refs));
        put(&self.cache().metadata, location.to_string(), parsed.clone());
        Ok(parsed)
    }

    /// Remembers the metadata this process just wrote at `location` (after the catalog swap
    /// made it current), so that the next load of an unchanged table reads nothing but the
    /// catalog pointer. Without its refs it is not kept: a later commit on it needs them.
    pub(crate) fn remember_metadata(
        &self,
        location: &str,
        metadata: TableMetadata,
        refs: Option<Refs>,
    ) {
        if let Some(refs) = refs {
            let parsed = (Arc::new(metadata), Arc::new(refs));
            put(&self.cache().metadata, location.to_string(), parsed);
        }
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

/// Count and nanoseconds of one kind of metadata.json access: process-wide metrics (every
/// cache's), not a cache.
type IoCounter = (AtomicU64, AtomicU64);
static READS: IoCounter = (AtomicU64::new(0), AtomicU64::new(0));
static WRITES: IoCounter = (AtomicU64::new(0), AtomicU64::new(0));

fn count(counter: &IoCounter, elapsed: Duration) {
    counter.0.fetch_add(1, Ordering::Relaxed);
    counter
        .1
        .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
}

/// The metadata.json reads and writes of this process so far.
pub fn metadata_io() -> MetadataIo {
    let get = |c: &IoCounter| (c.0.load(Ordering::Relaxed), c.1.load(Ordering::Relaxed));
    let (reads, read_ns) = get(&READS);
    let (writes, write_ns) = get(&WRITES);
    MetadataIo {
        reads,
        read_ns,
        writes,
        write_ns,
    }
}

/// Parses a metadata.json document (already decompressed) into the metadata and its refs.
pub(crate) fn parse(location: &str, bytes: &[u8]) -> Result<(TableMetadata, Refs)> {
    let metadata: TableMetadata = serde_json::from_slice(bytes)
        .map_err(|e| invalid(location, "is not table metadata").with_source(e))?;
    let refs = refs_in(location, bytes, &metadata)?;
    Ok((metadata, refs))
}

fn invalid(location: &str, what: &str) -> iceberg::Error {
    iceberg::Error::new(
        iceberg::ErrorKind::DataInvalid,
        format!("metadata file {location} {what}"),
    )
}

/// The refs a metadata.json document holds, as iceberg-rust reads them: a document without
/// refs but with a current snapshot has a `main` branch at that snapshot.
fn refs_in(location: &str, bytes: &[u8], metadata: &TableMetadata) -> Result<Refs> {
    #[derive(Deserialize)]
    struct OnlyRefs {
        #[serde(default)]
        refs: Option<Refs>,
    }
    let parsed: OnlyRefs = serde_json::from_slice(bytes)
        .map_err(|e| invalid(location, "has unreadable refs").with_source(e))?;
    let mut refs = parsed.refs.unwrap_or_default();
    if let Some(id) = metadata.current_snapshot_id()
        && !refs.contains_key(MAIN_BRANCH)
    {
        refs.insert(MAIN_BRANCH.to_string(), main_branch(id));
    }
    if !consistent(metadata, &refs) {
        return Err(invalid(location, "has refs that do not match its snapshots").into());
    }
    Ok(refs)
}

fn main_branch(snapshot_id: i64) -> SnapshotReference {
    SnapshotReference::new(
        snapshot_id,
        SnapshotRetention::Branch {
            min_snapshots_to_keep: None,
            max_snapshot_age_ms: None,
            max_ref_age_ms: None,
        },
    )
}

/// The refs of metadata built from a parent whose refs were `parent`, by a builder that made
/// `changes`: the parent's refs with the ref changes applied, and refs to removed snapshots
/// dropped (as the builder drops them). `None` when the result does not match `new`.
pub(crate) fn refs_after(
    parent: &Refs,
    changes: &[TableUpdate],
    new: &TableMetadata,
) -> Option<Refs> {
    let mut refs = parent.clone();
    for change in changes {
        match change {
            TableUpdate::SetSnapshotRef {
                ref_name,
                reference,
            } => {
                refs.insert(ref_name.clone(), reference.clone());
            }
            TableUpdate::RemoveSnapshotRef { ref_name } => {
                refs.remove(ref_name);
            }
            TableUpdate::RemoveSnapshots { .. } => {
                refs.retain(|_, r| new.snapshot_by_id(r.snapshot_id).is_some());
            }
            _ => {}
        }
    }
    consistent(new, &refs).then_some(refs)
}

/// Whether `refs` can be the metadata's refs: each names a snapshot the metadata resolves the
/// same way, and `main` is the current snapshot.
pub(crate) fn consistent(metadata: &TableMetadata, refs: &Refs) -> bool {
    let resolves = refs.iter().all(|(name, r)| {
        metadata
            .snapshot_for_ref(name)
            .is_some_and(|s| s.snapshot_id() == r.snapshot_id)
    });
    let main = refs.get(MAIN_BRANCH).map(|r| r.snapshot_id);
    resolves && main == metadata.current_snapshot_id()
}

/// The metadata as a v2 metadata.json document, the document iceberg-rust's writer produces
/// (the same fields in the same order; maps and lists by id, where iceberg's follow its hash
/// maps). `None` for what this writer does not write: other format versions and compressed
/// metadata, which iceberg-rust's writer handles.
pub(crate) fn to_json(metadata: &TableMetadata, refs: &Refs) -> Option<Result<Vec<u8>>> {
    if metadata.format_version() != FormatVersion::V2
        || metadata
            .properties()
            .contains_key("write.metadata.compression-codec")
        || !consistent(metadata, refs)
    {
        return None;
    }
    let mut schemas: Vec<&Schema> = metadata.schemas_iter().map(|s| s.as_ref()).collect();
    schemas.sort_by_key(|s| s.schema_id());
    let mut specs: Vec<&PartitionSpec> = metadata
        .partition_specs_iter()
        .map(|s| s.as_ref())
        .collect();
    specs.sort_by_key(|s| s.spec_id());
    let mut sort_orders: Vec<&SortOrder> =
        metadata.sort_orders_iter().map(|s| s.as_ref()).collect();
    sort_orders.sort_by_key(|s| s.order_id);
    let mut statistics: Vec<&StatisticsFile> = metadata.statistics_iter().collect();
    statistics.sort_by_key(|s| s.snapshot_id);
    let mut partition_statistics: Vec<&PartitionStatisticsFile> =
        metadata.partition_statistics_iter().collect();
    partition_statistics.sort_by_key(|s| s.snapshot_id);
    let mut snapshots: Vec<SnapshotV2<'_>> = metadata
        .snapshots()
        .map(|s| SnapshotV2::of(s.as_ref()))
        .collect();
    snapshots.sort_by_key(|s| (s.sequence_number, s.snapshot_id));
    let properties: BTreeMap<&String, &String> = metadata.properties().iter().collect();
    let document = MetadataV2 {
        format_version: 2,
        table_uuid: metadata.uuid().to_string(),
        location: metadata.location(),
        last_sequence_number: metadata.last_sequence_number(),
        last_updated_ms: metadata.last_updated_ms(),
        last_column_id: metadata.last_column_id(),
        schemas,
        current_schema_id: metadata.current_schema_id(),
        partition_specs: specs,
        default_spec_id: metadata.default_partition_spec_id(),
        last_partition_id: metadata.last_partition_id(),
        properties: (!properties.is_empty()).then_some(properties),
        current_snapshot_id: metadata.current_snapshot_id(),
        snapshot_log: nonempty(metadata.history()),
        metadata_log: nonempty(metadata.metadata_log()),
        sort_orders,
        default_sort_order_id: metadata.default_sort_order_id(),
        refs,
        statistics,
        partition_statistics,
        snapshots: (!snapshots.is_empty()).then_some(snapshots),
    };
    Some(serde_json::to_vec(&document).map_err(|e| {
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, "serialising table metadata")
            .with_source(e)
            .into()
    }))
}

fn nonempty<T>(items: &[T]) -> Option<&[T]> {
    (!items.is_empty()).then_some(items)
}

/// iceberg-rust's `TableMetadataV2` (format version, then the fields v2 and v3 share, then the
/// snapshots), borrowing.
#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct MetadataV2<'a> {
    format_version: u8,
    table_uuid: String,
    location: &'a str,
    last_sequence_number: i64,
    last_updated_ms: i64,
    last_column_id: i32,
    schemas: Vec<&'a Schema>,
    current_schema_id: i32,
    partition_specs: Vec<&'a PartitionSpec>,
    default_spec_id: i32,
    last_partition_id: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<BTreeMap<&'a String, &'a String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_snapshot_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot_log: Option<&'a [SnapshotLog]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata_log: Option<&'a [MetadataLog]>,
    sort_orders: Vec<&'a SortOrder>,
    default_sort_order_id: i64,
    refs: &'a Refs,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statistics: Vec<&'a StatisticsFile>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    partition_statistics: Vec<&'a PartitionStatisticsFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshots: Option<Vec<SnapshotV2<'a>>>,
}

/// iceberg-rust's `SnapshotV2`, borrowing.
#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct SnapshotV2<'a> {
    snapshot_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_snapshot_id: Option<i64>,
    sequence_number: i64,
    timestamp_ms: i64,
    manifest_list: &'a str,
    summary: &'a Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema_id: Option<i32>,
}

impl<'a> SnapshotV2<'a> {
    fn of(s: &'a Snapshot) -> Self {
        SnapshotV2 {
            snapshot_id: s.snapshot_id(),
            parent_snapshot_id: s.parent_snapshot_id(),
            sequence_number: s.sequence_number(),
            timestamp_ms: s.timestamp_ms(),
            manifest_list: s.manifest_list(),
            summary: s.summary(),
            schema_id: s.schema_id(),
        }
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

#[cfg(test)]
mod tests {
    use iceberg::spec::{Operation, TableMetadataBuilder};
    use serde_json::{Value, json};

    use super::*;

    /// Metadata with a bit of everything a table written by several engines holds.
    fn rich() -> Value {
        let snapshot = |id: i64, parent: Option<i64>, seq: i64, op: &str| {
            let mut s = json!({
                "snapshot-id": id, "sequence-number": seq, "timestamp-ms": 1_700_000_000_000i64 + seq,
                "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro"), "schema-id": 1,
                "summary": {"operation": op, "added-data-files": "1", "dms2iceberg.source-files": "a\"b\\c",
                            "spark.app.id": "local-1", "total-records": seq.to_string()}
            });
            if let Some(p) = parent {
                s["parent-snapshot-id"] = json!(p);
            }
            s
        };
        json!({
            "format-version": 2,
            "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
            "location": "s3://b/t",
            "last-sequence-number": 3,
            "last-updated-ms": 1_700_000_000_003i64,
            "last-column-id": 3,
            "current-schema-id": 1,
            "schemas": [
                {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]},
                {"type": "struct", "schema-id": 1, "identifier-field-ids": [1], "fields": [
                    {"id": 1, "name": "id", "required": true, "type": "long"},
                    {"id": 2, "name": "name", "required": false, "type": "string", "doc": "ü \"quoted\""},
                    {"id": 3, "name": "price", "required": false, "type": "decimal(10, 2)"}]}
            ],
            "default-spec-id": 1,
            "partition-specs": [
                {"spec-id": 0, "fields": []},
                {"spec-id": 1, "fields": [{"name": "id_bucket", "transform": "bucket[16]", "source-id": 1, "field-id": 1000}]}
            ],
            "last-partition-id": 1000,
            "default-sort-order-id": 1,
            "sort-orders": [
                {"order-id": 0, "fields": []},
                {"order-id": 1, "fields": [{"transform": "identity", "source-id": 1, "direction": "asc", "null-order": "nulls-first"}]}
            ],
            "properties": {"write.format.default": "parquet", "owner": "spark", "dms2iceberg.record": "x\u{0}y"},
            "current-snapshot-id": 3,
            "snapshots": [snapshot(1, None, 1, "append"), snapshot(2, Some(1), 2, "overwrite"), snapshot(3, Some(2), 3, "delete")],
            "refs": {
                "main": {"snapshot-id": 3, "type": "branch", "min-snapshots-to-keep": 5},
                "v1": {"snapshot-id": 1, "type": "tag", "max-ref-age-ms": 86_400_000},
                "audit": {"snapshot-id": 2, "type": "branch", "max-snapshot-age-ms": 3_600_000, "max-ref-age-ms": 7_200_000}
            },
            "statistics": [{"snapshot-id": 3, "statistics-path": "s3://b/t/metadata/3.stats", "file-size-in-bytes": 413,
                            "file-footer-size-in-bytes": 42,
                            "blob-metadata": [{"type": "apache-datasketches-theta-v1", "snapshot-id": 3, "sequence-number": 3,
                                               "fields": [1], "properties": {"ndv": "3"}}]}],
            "partition-statistics": [{"snapshot-id": 2, "statistics-path": "s3://b/t/metadata/2.parquet", "file-size-in-bytes": 43}],
            "snapshot-log": [{"snapshot-id": 1, "timestamp-ms": 1_700_000_000_001i64},
                             {"snapshot-id": 2, "timestamp-ms": 1_700_000_000_002i64},
                             {"snapshot-id": 3, "timestamp-ms": 1_700_000_000_003i64}],
            "metadata-log": [{"metadata-file": "s3://b/t/metadata/00000-a.metadata.json", "timestamp-ms": 1_699_999_999_999i64}]
        })
    }

    fn parsed(v: &Value) -> (TableMetadata, Refs) {
        parse("m.json", &serde_json::to_vec(v).unwrap()).unwrap()
    }

    /// Arrays in a canonical order: the order of schemas, specs, snapshots, etc. carries
    /// nothing (iceberg-rust's own writer follows its hash maps).
    fn canonical(v: Value) -> Value {
        match v {
            Value::Array(items) => {
                let mut items: Vec<Value> = items.into_iter().map(canonical).collect();
                items.sort_by_key(|i| i.to_string());
                Value::Array(items)
            }
            Value::Object(m) => {
                Value::Object(m.into_iter().map(|(k, v)| (k, canonical(v))).collect())
            }
            v => v,
        }
    }

    #[test]
    fn writes_the_document_icebergs_own_writer_writes() {
        let (md, refs) = parsed(&rich());
        let ours = to_json(&md, &refs).unwrap().unwrap();
        let theirs = serde_json::to_vec(&md).unwrap();
        let (ours_v, theirs_v): (Value, Value) = (
            serde_json::from_slice(&ours).unwrap(),
            serde_json::from_slice(&theirs).unwrap(),
        );
        assert_eq!(canonical(ours_v), canonical(theirs_v));
        // And it reads back as the same table, refs and all.
        let (back, back_refs) = parse("m.json", &ours).unwrap();
        assert_eq!(back, md);
        assert_eq!(back_refs, refs);
        assert_eq!(refs.len(), 3);
        // The same fields in iceberg-rust's order (format version first, snapshots last).
        let keys = |b: &[u8]| {
            let text = std::str::from_utf8(b).unwrap().to_string();
            [
                "\"format-version\"",
                "\"table-uuid\"",
                "\"schemas\"",
                "\"refs\"",
                "\"statistics\"",
                "\"snapshots\"",
            ]
            .map(|k| text.find(k).unwrap())
        };
        let order = keys(&ours);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }

    #[test]
    fn a_document_without_refs_has_main_at_its_current_snapshot() {
        let mut v = rich();
        v.as_object_mut().unwrap().remove("refs");
        let (md, refs) = parsed(&v);
        assert_eq!(refs.keys().collect::<Vec<_>>(), ["main"]);
        assert_eq!(refs["main"].snapshot_id, 3);
        let (back, _) = parse("m.json", &to_json(&md, &refs).unwrap().unwrap()).unwrap();
        assert_eq!(back, md);
    }

    #[test]
    fn refs_follow_the_builders_changes() {
        let (md, refs) = parsed(&rich());
        // A commit: a new snapshot on main; the tag and the other branch stay as they were.
        let snapshot = Snapshot::builder()
            .with_snapshot_id(4)
            .with_parent_snapshot_id(Some(3))
            .with_sequence_number(4)
            .with_timestamp_ms(1_700_000_000_004)
            .with_manifest_list("s3://b/t/metadata/snap-4.avro")
            .with_schema_id(1)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: Default::default(),
            })
            .build();
        let built = md
            .clone()
            .into_builder(Some("s3://b/t/metadata/00001-b.metadata.json".into()))
            .set_branch_snapshot(snapshot, MAIN_BRANCH)
            .unwrap()
            .build()
            .unwrap();
        let after = refs_after(&refs, &built.changes, &built.metadata).unwrap();
        assert_eq!(after["main"].snapshot_id, 4);
        assert_eq!(after["main"].retention, refs["main"].retention);
        assert_eq!(
            (&after["v1"], &after["audit"]),
            (&refs["v1"], &refs["audit"])
        );
        let (back, back_refs) = parse(
            "m.json",
            &to_json(&built.metadata, &after).unwrap().unwrap(),
        )
        .unwrap();
        assert_eq!(back, built.metadata);
        assert_eq!(back_refs, after);

        // Expiring the tagged snapshot drops the tag, as the builder does.
        let expired = built
            .metadata
            .into_builder(None)
            .remove_snapshots(&[1])
            .build()
            .unwrap();
        let after_expiry = refs_after(&after, &expired.changes, &expired.metadata).unwrap();
        assert!(!after_expiry.contains_key("v1"));
        assert_eq!(after_expiry.len(), 2);
    }

    #[test]
    fn refs_that_do_not_match_the_metadata_are_not_used() {
        let (md, refs) = parsed(&rich());
        let mut wrong = refs.clone();
        wrong.insert(MAIN_BRANCH.into(), main_branch(2));
        assert!(!consistent(&md, &wrong));
        assert!(to_json(&md, &wrong).is_none());
        let mut unknown = refs.clone();
        unknown.insert("gone".into(), main_branch(99));
        assert!(to_json(&md, &unknown).is_none());
        // A builder change this module did not see (main moved) is caught, not written.
        assert!(refs_after(&wrong, &[], &md).is_none());
    }

    #[test]
    fn compressed_and_other_versions_are_left_to_icebergs_writer() {
        let mut v = rich();
        v["properties"]["write.metadata.compression-codec"] = json!("gzip");
        let (md, refs) = parsed(&v);
        assert!(to_json(&md, &refs).is_none());
        let v1 = json!({
            "format-version": 1, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
            "location": "s3://b/t", "last-updated-ms": 1, "last-column-id": 1,
            "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]},
            "partition-spec": []
        });
        let (md, refs) = parsed(&v1);
        assert!(to_json(&md, &refs).is_none());
    }

    #[test]
    fn a_new_tables_metadata_round_trips() {
        let schema = Schema::builder()
            .with_fields(vec![std::sync::Arc::new(
                iceberg::spec::NestedField::required(
                    1,
                    "id",
                    iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Long),
                ),
            )])
            .build()
            .unwrap();
        let md = TableMetadataBuilder::new(
            schema,
            iceberg::spec::PartitionSpec::unpartition_spec(),
            SortOrder::unsorted_order(),
            "file:///w/s/t".into(),
            FormatVersion::V2,
            Default::default(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        let json = to_json(&md, &Refs::new()).unwrap().unwrap();
        let (back, refs) = parse("m.json", &json).unwrap();
        assert_eq!(back, md);
        assert!(refs.is_empty());
    }
}
