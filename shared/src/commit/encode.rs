//! Manifest entries encoded straight to Avro, the manifest's header and list entry from
//! iceberg-rust's own writer.
//!
//! iceberg-rust's `ManifestWriter` turns each entry into a serde struct, then an `apache_avro`
//! `Value`, resolves it against the schema and resolves it again as it appends it: ~16 µs an
//! entry, most of it allocation. A commit to a partitioned table encodes thousands (its own
//! manifests, the parent's it filters, the bin it merges; a 200-partition change file ~5,800),
//! and that ran after every upload, with no request in flight: ~100 ms of a ~600 ms commit.
//!
//! Here the writer encodes a manifest with no entries (its header: magic, the Avro schema and
//! Iceberg's metadata, the sync marker) and the list entry's constant fields; the entries are
//! then written as the schema (`manifest_schema_v2`, the one iceberg-rust writes for v2 and v3)
//! lays them out, in blocks of the size `apache_avro` cuts, and the list entry's counts and
//! partition summaries computed as the writer computes them. A partition field of a type this
//! encoder does not write (decimal, uuid, fixed) returns `None`: the caller uses the writer.
//! Tests decode both encodings of the same entries with iceberg-rust's reader and compare.

use bytes::Bytes;
use iceberg::spec::{
    DataContentType, Datum, FieldSummary, Literal, ManifestContentType, ManifestEntry,
    ManifestFile, ManifestStatus, PrimitiveLiteral, PrimitiveType, StructType,
};

use crate::error::{Error, Result};

/// Bytes of encoded entries per Avro block: `apache_avro`'s `DEFAULT_BLOCK_SIZE`.
const BLOCK_BYTES: usize = 16_000;
/// Avro's sync marker: the last 16 bytes of a container file's header.
const SYNC_BYTES: usize = 16;

/// A partition field as this encoder writes it.
struct PartitionField {
    required: bool,
    ty: PrimitiveType,
}

/// The partition type's fields, or `None` if one has a type this encoder does not write.
fn partition_fields(partition_type: &StructType) -> Option<Vec<PartitionField>> {
    (partition_type.fields().iter())
        .map(|f| {
            let ty = f.field_type.as_primitive_type()?.clone();
            use PrimitiveType as P;
            match ty {
                P::Boolean | P::Int | P::Long | P::Float | P::Double | P::Date | P::Time => {}
                P::Timestamp | P::Timestamptz | P::TimestampNs | P::TimestamptzNs => {}
                P::String | P::Binary => {}
                P::Decimal { .. } | P::Uuid | P::Fixed(_) => return None,
            }
            Some(PartitionField {
                required: f.required,
                ty,
            })
        })
        .collect()
}

/// A manifest's bytes and list entry: `header` and `template` are what iceberg-rust's writer
/// made of the same manifest with no entries. `None` if a partition value is one this encoder
/// does not write.
pub(crate) fn manifest(
    header: &[u8],
    template: ManifestFile,
    partition_type: &StructType,
    content: ManifestContentType,
    entries: &[ManifestEntry],
) -> Result<Option<(ManifestFile, Bytes)>> {
    let Some(fields) = partition_fields(partition_type) else {
        return Ok(None);
    };
    let sync = header
        .len()
        .checked_sub(SYNC_BYTES)
        .map(|at| &header[at..])
        .ok_or_else(|| Error::Internal("a manifest header without its sync marker".into()))?;
    let mut out = Vec::with_capacity(header.len() + entries.len() * 256);
    out.extend_from_slice(header);
    let mut block = Vec::with_capacity(BLOCK_BYTES + 1024);
    let mut in_block = 0i64;
    let mut summary = Summary::new(&fields);
    for e in entries {
        check_content(content, e)?;
        if !entry(&mut block, &fields, e)? {
            return Ok(None);
        }
        summary.add(e)?;
        in_block += 1;
        if block.len() >= BLOCK_BYTES {
            flush(&mut out, &mut block, &mut in_block, sync);
        }
    }
    flush(&mut out, &mut block, &mut in_block, sync);
    let file = summary.finish(template, out.len())?;
    Ok(Some((file, Bytes::from(out))))
}

/// Appends the block of `n` entries, if any, and starts the next.
fn flush(out: &mut Vec<u8>, block: &mut Vec<u8>, n: &mut i64, sync: &[u8]) {
    if *n == 0 {
        return;
    }
    long(out, *n);
    long(out, block.len() as i64);
    out.extend_from_slice(block);
    out.extend_from_slice(sync);
    block.clear();
    *n = 0;
}

/// The writer's check: a data manifest lists data files, a delete manifest delete files.
fn check_content(content: ManifestContentType, e: &ManifestEntry) -> Result<()> {
    let ok = match content {
        ManifestContentType::Data => e.content_type() == DataContentType::Data,
        ManifestContentType::Deletes => e.content_type() != DataContentType::Data,
    };
    match ok {
        true => Ok(()),
        false => Err(Error::Internal(format!(
            "{} ({:?}) in a {content} manifest",
            e.file_path(),
            e.content_type()
        ))),
    }
}

/// One `manifest_entry` record; false if a partition value does not match its field's type.
fn entry(b: &mut Vec<u8>, fields: &[PartitionField], e: &ManifestEntry) -> Result<bool> {
    let f = e.data_file();
    long(b, e.status() as i64);
    opt_long(b, e.snapshot_id());
    opt_long(b, e.sequence_number());
    opt_long(b, e.file_sequence_number);
    // data_file
    long(b, f.content_type() as i64);
    string(b, f.file_path().as_bytes());
    string(
        b,
        f.file_format().to_string().to_ascii_uppercase().as_bytes(),
    );
    let partition = f.partition();
    if partition.fields().len() != fields.len() {
        return Ok(false);
    }
    for (value, field) in partition.iter().zip(fields) {
        if !partition_value(b, field, value) {
            return Ok(false);
        }
    }
    long(b, i64::try_from(f.record_count()).map_err(too_large)?);
    long(b, i64::try_from(f.file_size_in_bytes()).map_err(too_large)?);
    for counts in [
        f.column_sizes(),
        f.value_counts(),
        f.null_value_counts(),
        f.nan_value_counts(),
    ] {
        let mut counts: Vec<(i32, u64)> = counts.iter().map(|(k, v)| (*k, *v)).collect();
        counts.sort_unstable();
        long(b, 1);
        array(b, &counts, |b, (k, v)| {
            long(b, i64::from(*k));
            long(b, i64::try_from(*v).map_err(too_large)?);
            Ok(())
        })?;
    }
    for bounds in [f.lower_bounds(), f.upper_bounds()] {
        let mut bounds: Vec<(i32, &Datum)> = bounds.iter().map(|(k, v)| (*k, v)).collect();
        bounds.sort_unstable_by_key(|(k, _)| *k);
        long(b, 1);
        array(b, &bounds, |b, (k, v)| {
            long(b, i64::from(*k));
            string(b, &v.to_bytes()?);
            Ok(())
        })?;
    }
    match f.key_metadata() {
        Some(k) => {
            long(b, 1);
            string(b, k);
        }
        None => long(b, 0),
    }
    match f.split_offsets() {
        Some(offsets) => {
            long(b, 1);
            array(b, offsets, |b, o| {
                long(b, *o);
                Ok(())
            })?;
        }
        None => long(b, 0),
    }
    match f.equality_ids() {
        Some(ids) => {
            long(b, 1);
            array(b, &ids, |b, id| {
                long(b, i64::from(*id));
                Ok(())
            })?;
        }
        None => long(b, 0),
    }
    opt_long(b, f.sort_order_id().map(i64::from));
    opt_long(b, f.first_row_id());
    match f.referenced_data_file() {
        Some(p) => {
            long(b, 1);
            string(b, p.as_bytes());
        }
        None => long(b, 0),
    }
    opt_long(b, f.content_offset());
    opt_long(b, f.content_size_in_bytes());
    Ok(true)
}

fn too_large(e: std::num::TryFromIntError) -> Error {
    Error::Internal(format!("a manifest count or size out of range: {e}"))
}

/// A partition field's value; false if it does not match the field's type.
fn partition_value(b: &mut Vec<u8>, field: &PartitionField, value: Option<&Literal>) -> bool {
    let value = match value {
        None if field.required => return false,
        None => {
            long(b, 0);
            return true;
        }
        Some(Literal::Primitive(p)) => p,
        Some(_) => return false,
    };
    if !field.required {
        long(b, 1);
    }
    use PrimitiveLiteral as L;
    use PrimitiveType as P;
    match (&field.ty, value) {
        (P::Boolean, L::Boolean(v)) => b.push(u8::from(*v)),
        (P::Int | P::Date, L::Int(v)) => long(b, i64::from(*v)),
        (P::Long | P::Time | P::Timestamp | P::Timestamptz, L::Long(v)) => long(b, *v),
        (P::TimestampNs | P::TimestamptzNs, L::Long(v)) => long(b, *v),
        (P::Float, L::Float(v)) => b.extend_from_slice(&v.0.to_le_bytes()),
        (P::Double, L::Double(v)) => b.extend_from_slice(&v.0.to_le_bytes()),
        (P::String, L::String(v)) => string(b, v.as_bytes()),
        (P::Binary, L::Binary(v)) => string(b, v),
        _ => return false,
    }
    true
}

/// The list entry's counts, lowest live sequence number and partition summaries, as
/// iceberg-rust's writer computes them.
struct Summary<'a> {
    fields: &'a [PartitionField],
    added: (u32, u64),
    existing: (u32, u64),
    deleted: (u32, u64),
    min_sequence_number: Option<i64>,
    partitions: Vec<FieldStats>,
}

struct FieldStats {
    contains_null: bool,
    contains_nan: bool,
    lower: Option<Datum>,
    upper: Option<Datum>,
}

impl<'a> Summary<'a> {
    fn new(fields: &'a [PartitionField]) -> Summary<'a> {
        Summary {
            fields,
            added: (0, 0),
            existing: (0, 0),
            deleted: (0, 0),
            min_sequence_number: None,
            partitions: (fields.iter())
                .map(|_| FieldStats {
                    contains_null: false,
                    contains_nan: false,
                    lower: None,
                    upper: None,
                })
                .collect(),
        }
    }

    fn add(&mut self, e: &ManifestEntry) -> Result<()> {
        let count = match e.status() {
            ManifestStatus::Added => &mut self.added,
            ManifestStatus::Existing => &mut self.existing,
            ManifestStatus::Deleted => &mut self.deleted,
        };
        count.0 += 1;
        count.1 += e.data_file().record_count();
        if e.is_alive()
            && let Some(seq) = e.sequence_number()
        {
            self.min_sequence_number = Some(self.min_sequence_number.map_or(seq, |m| m.min(seq)));
        }
        let partition = e.data_file().partition();
        for ((value, field), stats) in partition.iter().zip(self.fields).zip(&mut self.partitions) {
            let Some(Literal::Primitive(p)) = value else {
                stats.contains_null = true;
                continue;
            };
            let d = datum(&field.ty, p)?;
            if d.is_nan() {
                stats.contains_nan = true;
                continue;
            }
            if stats.lower.as_ref().is_none_or(|l| d < *l) {
                stats.lower = Some(d.clone());
            }
            if stats.upper.as_ref().is_none_or(|u| d > *u) {
                stats.upper = Some(d);
            }
        }
        Ok(())
    }

    fn finish(self, mut file: ManifestFile, length: usize) -> Result<ManifestFile> {
        file.manifest_length = i64::try_from(length).map_err(too_large)?;
        file.added_files_count = Some(self.added.0);
        file.added_rows_count = Some(self.added.1);
        file.existing_files_count = Some(self.existing.0);
        file.existing_rows_count = Some(self.existing.1);
        file.deleted_files_count = Some(self.deleted.0);
        file.deleted_rows_count = Some(self.deleted.1);
        file.min_sequence_number = self
            .min_sequence_number
            .unwrap_or(iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER);
        let mut partitions = Vec::with_capacity(self.partitions.len());
        for s in self.partitions {
            partitions.push(FieldSummary {
                contains_null: s.contains_null,
                contains_nan: Some(s.contains_nan),
                lower_bound: s.lower.map(|d| d.to_bytes()).transpose()?,
                upper_bound: s.upper.map(|d| d.to_bytes()).transpose()?,
            });
        }
        file.partitions = Some(partitions);
        Ok(file)
    }
}

/// A partition value as a `Datum` of its field's type (for ordering and bounds).
fn datum(ty: &PrimitiveType, p: &PrimitiveLiteral) -> Result<Datum> {
    use PrimitiveLiteral as L;
    use PrimitiveType as P;
    Ok(match (ty, p) {
        (P::Boolean, L::Boolean(v)) => Datum::bool(*v),
        (P::Int, L::Int(v)) => Datum::int(*v),
        (P::Date, L::Int(v)) => Datum::date(*v),
        (P::Long, L::Long(v)) => Datum::long(*v),
        (P::Time, L::Long(v)) => Datum::time_micros(*v)?,
        (P::Timestamp, L::Long(v)) => Datum::timestamp_micros(*v),
        (P::Timestamptz, L::Long(v)) => Datum::timestamptz_micros(*v),
        (P::TimestampNs, L::Long(v)) => Datum::timestamp_nanos(*v),
        (P::TimestamptzNs, L::Long(v)) => Datum::timestamptz_nanos(*v),
        (P::Float, L::Float(v)) => Datum::float(v.0),
        (P::Double, L::Double(v)) => Datum::double(v.0),
        (P::String, L::String(v)) => Datum::string(v),
        (P::Binary, L::Binary(v)) => Datum::binary(v.iter().copied()),
        _ => {
            return Err(Error::Internal(format!(
                "partition value {p:?} is not a {ty}"
            )));
        }
    })
}

/// Avro `int`/`long`: zigzag varint.
fn long(b: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        b.push((z as u8) | 0x80);
        z >>= 7;
    }
    b.push(z as u8);
}

/// Avro `string`/`bytes`: length, then the bytes.
fn string(b: &mut Vec<u8>, s: &[u8]) {
    long(b, s.len() as i64);
    b.extend_from_slice(s);
}

/// Avro `long` behind a `["null", "long"]` union.
fn opt_long(b: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => {
            long(b, 1);
            long(b, v);
        }
        None => long(b, 0),
    }
}

/// Avro array: one block of all items (none for an empty array), then the end block.
fn array<T>(
    b: &mut Vec<u8>,
    items: &[T],
    mut item: impl FnMut(&mut Vec<u8>, &T) -> Result<()>,
) -> Result<()> {
    if !items.is_empty() {
        long(b, items.len() as i64);
        for i in items {
            item(b, i)?;
        }
    }
    long(b, 0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::io::FileIO;
    use iceberg::spec::{
        DataFile, DataFileBuilder, DataFileFormat, FormatVersion, Manifest, ManifestWriter,
        ManifestWriterBuilder, NestedField, Schema, SortOrder, Struct, TableMetadata,
        TableMetadataBuilder, Transform, Type, UnboundPartitionSpec,
    };

    use super::*;

    /// A table whose partition spec has a field of every type [`manifest`] writes.
    fn table(version: FormatVersion) -> TableMetadata {
        use PrimitiveType as P;
        let columns = [
            ("id", P::Long),
            ("name", P::String),
            ("day", P::Date),
            ("flag", P::Boolean),
            ("x", P::Double),
            ("f", P::Float),
            ("ts", P::Timestamp),
            ("raw", P::Binary),
            ("n", P::Int),
        ];
        let schema = Schema::builder()
            .with_fields(
                (columns.iter().enumerate())
                    .map(|(i, (name, ty))| {
                        Arc::new(NestedField::optional(
                            i as i32 + 1,
                            *name,
                            Type::Primitive(ty.clone()),
                        ))
                    })
                    .collect::<Vec<_>>(),
            )
            .build()
            .unwrap();
        let mut spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "id_bucket", Transform::Bucket(16))
            .unwrap();
        for (i, (name, _)) in columns.iter().enumerate().skip(1) {
            spec = spec
                .add_partition_field(i as i32 + 1, *name, Transform::Identity)
                .unwrap();
        }
        spec = spec
            .add_partition_field(7, "ts_day", Transform::Day)
            .unwrap();
        metadata(schema, spec.build(), version)
    }

    fn metadata(
        schema: Schema,
        spec: UnboundPartitionSpec,
        version: FormatVersion,
    ) -> TableMetadata {
        TableMetadataBuilder::new(
            schema,
            spec,
            SortOrder::unsorted_order(),
            "memory:///t".into(),
            version,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn partition(i: i64) -> Struct {
        use iceberg::spec::Literal as L;
        let v = |l: L| (i % 5 != 3).then_some(l);
        Struct::from_iter([
            Some(L::int((i % 16) as i32)),
            v(L::string(format!("name-{i}"))),
            v(L::date(19_000 + i as i32)),
            v(L::bool(i % 2 == 0)),
            Some(L::double(match i % 7 {
                6 => f64::NAN,
                k => k as f64 - 2.5,
            })),
            v(L::float(i as f32 * -0.5)),
            v(L::timestamp(1_700_000_000_000_000 + i)),
            v(L::binary(vec![i as u8, 0, 255])),
            v(L::int(-(i as i32))),
            v(L::date(19_000 - i as i32)),
        ])
    }

    fn data_file(i: i64, content: DataContentType, spec_id: i32) -> DataFile {
        let mut b = DataFileBuilder::default();
        b.content(content)
            .file_path(format!("memory:///t/data/{i}-é.parquet"))
            .file_format(DataFileFormat::Parquet)
            .partition(partition(i))
            .partition_spec_id(spec_id)
            .record_count(1000 + i as u64)
            .file_size_in_bytes(4096 * (i as u64 + 1))
            .column_sizes(HashMap::from([(1, 10 + i as u64), (2, 1 << 40)]))
            .value_counts(HashMap::from([(1, 1000), (2, 1000), (3, 7)]))
            .null_value_counts(HashMap::from([(2, i as u64)]))
            .nan_value_counts(HashMap::new())
            .lower_bounds(HashMap::from([
                (1, Datum::long(-i)),
                (2, Datum::string("a")),
            ]))
            .upper_bounds(HashMap::from([(1, Datum::long(i << 33))]))
            .split_offsets(Some(vec![4, 4000 + i]));
        match content {
            DataContentType::EqualityDeletes => {
                b.equality_ids(Some(vec![1, 2]));
            }
            DataContentType::PositionDeletes => {
                b.referenced_data_file(Some(format!("memory:///t/data/{i}.parquet")));
                if i % 2 == 0 {
                    b.content_offset(Some(4 + i))
                        .content_size_in_bytes(Some(40));
                }
            }
            DataContentType::Data => {
                b.key_metadata((i % 3 == 0).then(|| vec![1, 2, 3]))
                    .sort_order_id(0);
                if i % 2 == 0 {
                    b.first_row_id(Some(i * 1000));
                }
            }
        }
        b.build().unwrap()
    }

    fn writer(md: &TableMetadata, content: ManifestContentType, io: &FileIO) -> ManifestWriter {
        let b = ManifestWriterBuilder::new(
            io.new_output("memory:///t/metadata/m.avro").unwrap(),
            Some(77),
            md.current_schema().clone(),
            md.default_partition_spec().as_ref().clone(),
        );
        match (content, md.format_version()) {
            (ManifestContentType::Data, FormatVersion::V3) => b.build_v3_data(),
            (ManifestContentType::Deletes, FormatVersion::V3) => b.build_v3_deletes(),
            (ManifestContentType::Data, _) => b.build_v2_data(),
            (ManifestContentType::Deletes, _) => b.build_v2_deletes(),
        }
    }

    async fn bytes(io: &FileIO) -> Bytes {
        io.new_input("memory:///t/metadata/m.avro")
            .unwrap()
            .read()
            .await
            .unwrap()
    }

    /// `entries` encoded by [`manifest`], with the header and template of `md`'s writer.
    async fn encoded(
        md: &TableMetadata,
        kind: ManifestContentType,
        entries: &[ManifestEntry],
    ) -> Result<Option<(ManifestFile, Bytes)>> {
        let io = FileIO::new_with_memory();
        let template = writer(md, kind, &io).write_manifest_file().await.unwrap();
        let header = bytes(&io).await;
        let partition_type = md
            .default_partition_spec()
            .partition_type(md.current_schema())
            .unwrap();
        manifest(&header, template, &partition_type, kind, entries)
    }

    /// `n` entries of every status, written by iceberg-rust's writer and by [`manifest`]: the
    /// list entries are equal (length included) and iceberg-rust reads the same entries back
    /// from both.
    async fn same_as_iceberg(version: FormatVersion, content: DataContentType, n: i64) {
        let md = table(version);
        let spec_id = md.default_partition_spec_id();
        let kind = match content {
            DataContentType::Data => ManifestContentType::Data,
            _ => ManifestContentType::Deletes,
        };
        let io = FileIO::new_with_memory();
        let mut theirs = writer(&md, kind, &io);
        let mut entries = Vec::new();
        for i in 0..n {
            let f = data_file(i, content, spec_id);
            let e = ManifestEntry::builder().data_file(f.clone());
            match i % 4 {
                0 => {
                    theirs.add_file(f, -1).unwrap();
                    entries.push(e.status(ManifestStatus::Added).snapshot_id(77).build());
                }
                1 => {
                    theirs.add_file(f, 5).unwrap();
                    let e = e.status(ManifestStatus::Added).snapshot_id(77);
                    entries.push(e.sequence_number(5).build());
                }
                2 => {
                    theirs.add_existing_file(f, 12, 3 + i, Some(4 + i)).unwrap();
                    let e = e.status(ManifestStatus::Existing).snapshot_id(12);
                    let e = e.sequence_number(3 + i).file_sequence_number(4 + i);
                    entries.push(e.build());
                }
                _ => {
                    theirs.add_delete_file(f, 2, Some(1)).unwrap();
                    let e = e.status(ManifestStatus::Deleted).snapshot_id(77);
                    entries.push(e.sequence_number(2).file_sequence_number(1).build());
                }
            }
        }
        let their_file = theirs.write_manifest_file().await.unwrap();
        let their_bytes = bytes(&io).await;

        let (our_file, our_bytes) = (encoded(&md, kind, &entries).await)
            .unwrap()
            .expect("every partition type is written");

        assert_eq!(our_file, their_file);
        assert_eq!(our_bytes.len(), their_bytes.len());
        let ours = Manifest::parse_avro(&our_bytes).unwrap();
        let theirs = Manifest::parse_avro(&their_bytes).unwrap();
        assert_eq!(ours.entries().len(), n as usize);
        assert_eq!(ours, theirs);
    }

    #[tokio::test]
    async fn entries_read_back_as_iceberg_rust_writes_them() {
        for version in [FormatVersion::V2, FormatVersion::V3] {
            for content in [
                DataContentType::Data,
                DataContentType::PositionDeletes,
                DataContentType::EqualityDeletes,
            ] {
                // None, one block, several blocks.
                for n in [0, 9, 400] {
                    same_as_iceberg(version, content, n).await;
                }
            }
        }
    }

    #[tokio::test]
    async fn a_partition_type_it_does_not_write_is_left_to_iceberg_rust() {
        let schema = Schema::builder()
            .with_fields(vec![Arc::new(NestedField::required(
                1,
                "amount",
                Type::Primitive(PrimitiveType::Decimal {
                    precision: 10,
                    scale: 2,
                }),
            ))])
            .build()
            .unwrap();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "amount", Transform::Identity)
            .unwrap()
            .build();
        let md = metadata(schema, spec, FormatVersion::V2);
        let out = encoded(&md, ManifestContentType::Data, &[]).await.unwrap();
        assert!(out.is_none());
    }

    #[tokio::test]
    async fn a_delete_file_in_a_data_manifest_is_refused() {
        let md = table(FormatVersion::V2);
        let f = data_file(1, DataContentType::PositionDeletes, 0);
        let e = ManifestEntry::builder()
            .status(ManifestStatus::Added)
            .snapshot_id(1)
            .data_file(f)
            .build();
        let err = (encoded(&md, ManifestContentType::Data, &[e]).await).unwrap_err();
        assert!(err.to_string().contains("data manifest"), "{err}");
    }
}
