//! Deletion vectors: how Iceberg v3 deletes rows of a data file (the spec's
//! `deletion-vector-v1` Puffin blob), and the Puffin file that holds a commit's vectors.
//!
//! A blob is the data file's deleted positions as a 64-bit roaring bitmap in the portable
//! format (an 8-byte little-endian count of 32-bit bitmaps, then each as a 4-byte
//! little-endian key and a standard 32-bit roaring bitmap), framed as
//! `length (u32 BE) | magic D1 D3 39 64 | bitmap | CRC-32 (u32 BE) of magic and bitmap`, where
//! length counts the magic and the bitmap. Bitmaps are run-length optimised before writing, as
//! Iceberg Java writes them: the blobs of `testdata/dv` (Java's own golden files) encode to the
//! same bytes.
//!
//! A Puffin file is `PFA1`, the blobs, then the footer `PFA1 | JSON | JSON length (u32 LE) |
//! flags (4 zero bytes: the JSON is not compressed) | PFA1`; the JSON lists each blob's type,
//! fields, offset, length and properties (`referenced-data-file`, `cardinality`).

use std::collections::HashMap;

use roaring::RoaringTreemap;
use serde::Serialize;

use crate::error::{Error, Result};

const DV_MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];
const PUFFIN_MAGIC: [u8; 4] = *b"PFA1";
/// The `_pos` metadata column: a deletion vector's `fields` (Java's `ROW_POSITION`).
const ROW_POSITION_FIELD_ID: i32 = i32::MAX - 2;
const BLOB_TYPE: &str = "deletion-vector-v1";

/// The blob holding `positions` (any order, duplicates allowed; none negative).
pub(crate) fn encode(positions: &[i64]) -> Result<Vec<u8>> {
    let mut bitmap = RoaringTreemap::new();
    for &p in positions {
        let p = u64::try_from(p)
            .map_err(|_| Error::Internal(format!("deletion vector: negative position {p}")))?;
        bitmap.insert(p);
    }
    bitmap.optimize();
    let mut body = DV_MAGIC.to_vec();
    bitmap
        .serialize_into(&mut body)
        .map_err(|e| Error::Internal(format!("deletion vector: {e}")))?;
    let length = u32::try_from(body.len())
        .map_err(|_| Error::Internal("deletion vector over 4 GiB".into()))?;
    let mut blob = Vec::with_capacity(body.len() + 8);
    blob.extend_from_slice(&length.to_be_bytes());
    blob.extend_from_slice(&body);
    blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    Ok(blob)
}

/// The positions of the blob `blob` (ascending), checked as Iceberg Java checks them: its
/// length, magic and CRC, no byte left over, and `cardinality` (the manifest entry's record
/// count) if given. `what` names the blob in errors (file and offset).
pub(crate) fn decode(blob: &[u8], cardinality: Option<u64>, what: &str) -> Result<Vec<i64>> {
    let bad = |why: String| Error::Table(format!("deletion vector {what}: {why}"));
    if blob.len() < 12 {
        return Err(bad(format!("{} bytes, too short", blob.len())));
    }
    let length = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    if length + 8 != blob.len() {
        return Err(bad(format!(
            "its length field says {length} bytes of magic and bitmap, the blob holds {}",
            blob.len() - 8
        )));
    }
    let body = &blob[4..4 + length];
    if body[..4] != DV_MAGIC {
        return Err(bad("wrong magic (not a deletion-vector-v1 blob)".into()));
    }
    let tail = &blob[4 + length..];
    let crc = u32::from_be_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if crc32fast::hash(body) != crc {
        return Err(bad("CRC-32 mismatch (the blob is corrupt)".into()));
    }
    let mut bitmap_bytes = &body[4..];
    let bitmap = RoaringTreemap::deserialize_from(&mut bitmap_bytes)
        .map_err(|e| bad(format!("bitmap: {e}")))?;
    if !bitmap_bytes.is_empty() {
        return Err(bad(format!(
            "{} bytes after the bitmap",
            bitmap_bytes.len()
        )));
    }
    if let Some(expected) = cardinality
        && bitmap.len() != expected
    {
        return Err(bad(format!(
            "holds {} positions, its manifest entry says {expected}",
            bitmap.len()
        )));
    }
    bitmap
        .iter()
        .map(|p| i64::try_from(p).map_err(|_| bad(format!("position {p} is out of range"))))
        .collect()
}

/// Where one data file's vector is in a Puffin file (what its manifest entry records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placed {
    pub referenced_data_file: String,
    pub cardinality: u64,
    /// `content_offset` and `content_size_in_bytes`.
    pub offset: u64,
    pub length: u64,
}

impl Placed {
    /// The vector's manifest entry: a position delete in Puffin format, its record count the
    /// cardinality, `file_size_in_bytes` the whole Puffin file's (`size`).
    pub(crate) fn entry(
        self,
        puffin: String,
        size: u64,
        spec_id: i32,
        partition: iceberg::spec::Struct,
    ) -> Result<iceberg::spec::DataFile> {
        use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat};
        DataFileBuilder::default()
            .content(DataContentType::PositionDeletes)
            .file_path(puffin)
            .file_format(DataFileFormat::Puffin)
            .partition(partition)
            .partition_spec_id(spec_id)
            .record_count(self.cardinality)
            .file_size_in_bytes(size)
            .referenced_data_file(Some(self.referenced_data_file))
            .content_offset(Some(self.offset as i64))
            .content_size_in_bytes(Some(self.length as i64))
            .build()
            .map_err(|e| Error::Internal(format!("deletion vector entry: {e}")))
    }
}

#[derive(Serialize)]
struct Footer<'a> {
    blobs: Vec<FooterBlob>,
    properties: HashMap<&'static str, &'a str>,
}

#[derive(Serialize)]
struct FooterBlob {
    #[serde(rename = "type")]
    blob_type: &'static str,
    fields: [i32; 1],
    #[serde(rename = "snapshot-id")]
    snapshot_id: i64,
    #[serde(rename = "sequence-number")]
    sequence_number: i64,
    offset: u64,
    length: u64,
    properties: HashMap<&'static str, String>,
}

/// A Puffin file holding one deletion vector per `(data file, positions)`, in that order, and
/// where each is. Snapshot id and sequence number are -1 (the manifest entry's are inherited),
/// as the spec asks of deletion vectors.
pub(crate) fn puffin(
    vectors: &[(&str, &[i64])],
    created_by: &str,
) -> Result<(Vec<u8>, Vec<Placed>)> {
    let mut bytes = PUFFIN_MAGIC.to_vec();
    let mut placed = Vec::with_capacity(vectors.len());
    let mut blobs = Vec::with_capacity(vectors.len());
    for (data_file, positions) in vectors {
        let blob = encode(positions)?;
        let mut unique = positions.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let p = Placed {
            referenced_data_file: data_file.to_string(),
            cardinality: unique.len() as u64,
            offset: bytes.len() as u64,
            length: blob.len() as u64,
        };
        blobs.push(FooterBlob {
            blob_type: BLOB_TYPE,
            fields: [ROW_POSITION_FIELD_ID],
            snapshot_id: -1,
            sequence_number: -1,
            offset: p.offset,
            length: p.length,
            properties: HashMap::from([
                ("referenced-data-file", p.referenced_data_file.clone()),
                ("cardinality", p.cardinality.to_string()),
            ]),
        });
        bytes.extend_from_slice(&blob);
        placed.push(p);
    }
    let footer = Footer {
        blobs,
        properties: HashMap::from([("created-by", created_by)]),
    };
    let json = serde_json::to_vec(&footer).map_err(|e| Error::Internal(e.to_string()))?;
    let json_length = u32::try_from(json.len())
        .map_err(|_| Error::Internal("Puffin footer over 4 GiB".into()))?;
    bytes.extend_from_slice(&PUFFIN_MAGIC);
    bytes.extend_from_slice(&json);
    bytes.extend_from_slice(&json_length.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(&PUFFIN_MAGIC);
    Ok((bytes, placed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/src/files/testdata/dv/{name}-position-index.bin",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn javas_golden_vectors_decode_and_encode_to_the_same_bytes() {
        let big = i32::MAX as i64;
        for (name, positions) in [
            ("empty", vec![]),
            ("small-alternating-values", vec![1, 3, 5, 7, 9]),
            (
                "small-and-large-values",
                vec![100, 101, big + 100, big + 101],
            ),
        ] {
            let blob = golden(name);
            let n = positions.len() as u64;
            assert_eq!(decode(&blob, Some(n), name).unwrap(), positions, "{name}");
            assert_eq!(encode(&positions).unwrap(), blob, "{name}");
        }
        // Array, bitset and run containers in two 32-bit buckets.
        let blob = golden("all-container-types");
        let positions = decode(&blob, Some(132_561), "all").unwrap();
        let high = 1i64 << 32;
        for p in [
            5,
            7,
            131_073,
            196_606,
            high + 10,
            high + 20,
            high + 65_546,
            high + 131_073,
        ] {
            assert!(positions.binary_search(&p).is_ok(), "{p}");
        }
        assert!(positions.binary_search(&131_072).is_err());
        assert_eq!(encode(&positions).unwrap(), blob);
    }

    #[test]
    fn positions_round_trip_in_any_order() {
        let mut positions: Vec<i64> = (0..5_000).map(|i| (i * 7_919) % 100_003).collect();
        positions.extend([0, 1 << 40, (1 << 40) + 1, 3]);
        let blob = encode(&positions).unwrap();
        positions.sort_unstable();
        positions.dedup();
        let n = positions.len() as u64;
        assert_eq!(decode(&blob, Some(n), "t").unwrap(), positions);
        assert!(encode(&[-1]).is_err());
    }

    #[test]
    fn a_damaged_blob_is_refused_with_the_reason() {
        let blob = encode(&[1, 2, 3]).unwrap();
        let why = |b: &[u8], n: Option<u64>| decode(b, n, "f.puffin@4").unwrap_err().to_string();
        let e = why(&blob, Some(4));
        assert!(
            e.contains("its manifest entry says 4") && e.contains("f.puffin@4"),
            "{e}"
        );
        let mut corrupt = blob.clone();
        let last_bitmap_byte = corrupt.len() - 5;
        corrupt[last_bitmap_byte] ^= 1;
        assert!(why(&corrupt, None).contains("CRC-32"));
        assert!(why(&blob[..blob.len() - 1], None).contains("length"));
        let mut magic = blob.clone();
        magic[4] = 0;
        assert!(why(&magic, None).contains("magic"));
        assert!(why(&blob[..5], None).contains("too short"));
    }

    /// iceberg-rust's Puffin reader (an independent implementation of the format) reads the
    /// file: blob metadata as a v3 reader needs it, and each blob's bytes.
    #[tokio::test]
    async fn a_puffin_file_reads_back_with_iceberg_rusts_reader() {
        let vectors: Vec<(&str, Vec<i64>)> = vec![
            ("s3://b/t/data/a.parquet", vec![3, 1, 2]),
            ("s3://b/t/data/b.parquet", vec![]),
            ("s3://b/t/data/c.parquet", (0..70_000).collect()),
        ];
        let refs: Vec<(&str, &[i64])> = vectors.iter().map(|(f, p)| (*f, p.as_slice())).collect();
        let (bytes, placed) = puffin(&refs, "dms2iceberg test").unwrap();
        let io = iceberg::io::FileIO::new_with_memory();
        let path = "memory:///t/data/x-deletes.puffin";
        io.new_output(path)
            .unwrap()
            .write(bytes.clone().into())
            .await
            .unwrap();
        let reader = iceberg::puffin::PuffinReader::new(io.new_input(path).unwrap());
        let meta = reader.file_metadata().await.unwrap().clone();
        assert_eq!(meta.properties()["created-by"], "dms2iceberg test");
        assert_eq!(meta.blobs().len(), 3);
        for ((blob_meta, p), (file, positions)) in meta.blobs().iter().zip(&placed).zip(&vectors) {
            assert_eq!(blob_meta.blob_type(), iceberg::puffin::DELETION_VECTOR_V1);
            assert_eq!(blob_meta.fields(), &[2_147_483_645]);
            assert_eq!(
                (blob_meta.snapshot_id(), blob_meta.sequence_number()),
                (-1, -1)
            );
            assert_eq!(
                (blob_meta.offset(), blob_meta.length()),
                (p.offset, p.length)
            );
            assert_eq!(blob_meta.properties()["referenced-data-file"], *file);
            assert_eq!(p.referenced_data_file, *file);
            assert_eq!(
                blob_meta.properties()["cardinality"],
                p.cardinality.to_string()
            );
            let blob = reader.blob(blob_meta).await.unwrap();
            let start = p.offset as usize;
            assert_eq!(blob.data(), &bytes[start..start + p.length as usize]);
            let mut expected = positions.clone();
            expected.sort_unstable();
            assert_eq!(
                decode(blob.data(), Some(p.cardinality), file).unwrap(),
                expected
            );
        }
    }
}
