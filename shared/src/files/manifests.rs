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
                let m = match file.load_manifest(&self.io).await {
                    Ok(m) => m,
                    Err(e) => match self.load_widened(file).await {
                        Some(m) => m,
                        None => return Err(e.into()),
                    },
                };
                let m = Arc::new(m);
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

    /// The manifest `file` names, read with the `int` and `float` columns of its header's
    /// schema taken as `long` and `double`; `None` if that does not read it either.
    ///
    /// dms2iceberg before the fix of issue 48 wrote the manifests of a commit that widened a
    /// column (int → long, float → double) under the schema before the widening, while the
    /// bounds of the commit's new files are 8 bytes wide: iceberg-rust decodes bounds by the
    /// header and fails on the whole manifest, which blocked every later commit and read of the
    /// table (Java and PyIceberg decode by the table's schema and read it). Read as the wider
    /// types, every bound decodes as what it is (a reader takes a 4-byte bound of a `long`
    /// column as the `int` it was written as), and the next commit writes the manifest again
    /// in the table's schema ([`Files::was_widened`]).
    async fn load_widened(&self, file: &ManifestFile) -> Option<Manifest> {
        if file.key_metadata.is_some() {
            return None;
        }
        let bytes = self
            .io
            .new_input(&file.manifest_path)
            .ok()?
            .read()
            .await
            .ok()?;
        let m = Manifest::parse_avro(&widened_header(&bytes)?).ok()?;
        tracing::warn!(
            manifest = %file.manifest_path,
            "manifest declares a narrower schema than its bounds (written by a commit that widened \
             a column, before dms2iceberg's fix of issue 48): read with its int and float columns \
             as long and double; the next commit writes it again"
        );
        put(&self.cache.widened, file.manifest_path.clone(), ());
        Some(inherit(&m, file))
    }

    /// Whether this process read the manifest at `path` only through [`Files::load_widened`].
    pub(crate) fn was_widened(&self, path: &str) -> bool {
        get(&self.cache.widened, path).is_some()
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

/// The Avro container's magic bytes.
const AVRO_MAGIC: &[u8] = b"Obj\x01";

/// A manifest's bytes with the `int` and `float` columns of the Iceberg schema in its header
/// (the `schema` metadata entry) made `long` and `double`; everything else, the Avro schema and
/// the entries included, as it is. `None` if the bytes are not an Avro container or the schema
/// has no such column.
fn widened_header(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut r = AvroReader(bytes.strip_prefix(AVRO_MAGIC)?);
    // The file metadata: a map of bytes, in blocks (a negative count is followed by the
    // block's size), ended by an empty block.
    let mut meta: Vec<(&[u8], Vec<u8>)> = Vec::new();
    loop {
        let n = r.long()?;
        if n == 0 {
            break;
        }
        if n < 0 {
            r.long()?;
        }
        for _ in 0..n.unsigned_abs() {
            let k = r.bytes()?;
            meta.push((k, r.bytes()?.to_vec()));
        }
    }
    let (_, schema) = meta.iter_mut().find(|(k, _)| *k == b"schema")?;
    let mut json: serde_json::Value = serde_json::from_slice(schema).ok()?;
    if !widen_types(&mut json) {
        return None;
    }
    *schema = serde_json::to_vec(&json).ok()?;
    let mut out = AVRO_MAGIC.to_vec();
    avro_long(&mut out, i64::try_from(meta.len()).ok()?);
    for (k, v) in &meta {
        avro_long(&mut out, i64::try_from(k.len()).ok()?);
        out.extend_from_slice(k);
        avro_long(&mut out, i64::try_from(v.len()).ok()?);
        out.extend_from_slice(v);
    }
    avro_long(&mut out, 0);
    // The sync marker and the blocks of entries.
    out.extend_from_slice(r.0);
    Some(out)
}

/// Makes every `int` type of an Iceberg schema in JSON `long` and every `float` `double`
/// (field, list element, map key and value types); whether it changed any.
fn widen_types(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    let mut changed = false;
    match v {
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                let typed = matches!(k.as_str(), "type" | "element" | "key" | "value");
                match x {
                    Value::String(t) if typed && (t == "int" || t == "float") => {
                        *t = if t == "int" { "long" } else { "double" }.to_string();
                        changed = true;
                    }
                    _ => changed |= widen_types(x),
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                changed |= widen_types(x);
            }
        }
        _ => {}
    }
    changed
}

/// Reads Avro's zigzag varints and length-prefixed bytes.
struct AvroReader<'a>(&'a [u8]);

impl<'a> AvroReader<'a> {
    fn long(&mut self) -> Option<i64> {
        let mut z: u64 = 0;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first()?;
            self.0 = rest;
            z |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Some((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.long()?).ok()?;
        if n > self.0.len() {
            return None;
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(b)
    }
}

/// Avro `long`: zigzag varint.
fn avro_long(b: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        b.push((z as u8) | 0x80);
        z >>= 7;
    }
    b.push(z as u8);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_int_and_float_types_are_widened() {
        let mut schema = serde_json::json!({
        "type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "int", "required": true, "type": "int"},
            {"id": 2, "name": "f", "required": false, "type": "float"},
            {"id": 3, "name": "l", "required": false,
             "type": {"type": "list", "element-id": 4, "element": "int", "element-required": false}},
            {"id": 5, "name": "m", "required": false,
             "type": {"type": "map", "key-id": 6, "key": "string", "value-id": 7, "value": "float", "value-required": false}},
            {"id": 8, "name": "d", "required": false, "type": "decimal(9,2)"}
        ]});
        assert!(widen_types(&mut schema));
        let f = &schema["fields"];
        assert_eq!(f[0]["type"], "long");
        assert_eq!(f[0]["name"], "int", "names are names");
        assert_eq!(f[1]["type"], "double");
        assert_eq!(f[2]["type"]["element"], "long");
        assert_eq!(f[3]["type"]["key"], "string");
        assert_eq!(f[3]["type"]["value"], "double");
        assert_eq!(f[4]["type"], "decimal(9,2)");
        assert!(!widen_types(&mut schema), "nothing left to widen");
    }

    #[test]
    fn a_header_is_rewritten_only_when_there_is_something_to_widen() {
        assert_eq!(widened_header(b"not avro"), None);
        // Magic, a map of one block of two entries, the sync marker, a block.
        let container = |schema: &str| {
            let mut b = AVRO_MAGIC.to_vec();
            avro_long(&mut b, -2);
            avro_long(&mut b, 99); // the block's size, which a reader may skip by
            for (k, v) in [("schema", schema), ("format-version", "2")] {
                avro_long(&mut b, k.len() as i64);
                b.extend_from_slice(k.as_bytes());
                avro_long(&mut b, v.len() as i64);
                b.extend_from_slice(v.as_bytes());
            }
            avro_long(&mut b, 0);
            b.extend_from_slice(&[7; 16]);
            b.extend_from_slice(b"entries");
            b
        };
        let long =
            r#"{"type":"struct","fields":[{"id":1,"name":"a","required":true,"type":"long"}]}"#;
        assert_eq!(widened_header(&container(long)), None);
        let int = long.replace("\"long\"", "\"int\"");
        let widened = widened_header(&container(&int)).unwrap();
        let mut r = AvroReader(widened.strip_prefix(AVRO_MAGIC).unwrap());
        assert_eq!(r.long(), Some(2));
        assert_eq!(r.bytes(), Some(&b"schema"[..]));
        let schema: serde_json::Value = serde_json::from_slice(r.bytes().unwrap()).unwrap();
        assert_eq!(schema["fields"][0]["type"], "long");
        assert_eq!(r.bytes(), Some(&b"format-version"[..]));
        assert_eq!(r.bytes(), Some(&b"2"[..]));
        assert_eq!(r.long(), Some(0));
        assert_eq!(r.0, [&[7; 16][..], b"entries"].concat());
        // Cut short anywhere: not a container.
        let whole = container(&int);
        for n in [4, 6, 20, 40] {
            assert_eq!(widened_header(&whole[..n]), None, "{n} bytes");
        }
    }
}
