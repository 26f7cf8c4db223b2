//! Manifest writing against small cases: bin packing, and the manifests of a widened table.

use super::*;

#[test]
fn packing_from_the_end_leaves_the_first_bin_under_filled() {
    assert_eq!(
        pack_end(&[1, 1, 1, 1, 1], 2),
        vec![vec![0], vec![1, 2], vec![3, 4]]
    );
    assert_eq!(pack_end(&[5, 1, 1], 2), vec![vec![0], vec![1, 2]]);
    // An item over the target gets a bin of its own.
    assert_eq!(pack_end(&[1, 9, 1], 2), vec![vec![0], vec![1], vec![2]]);
    assert_eq!(pack_end(&[], 2), Vec::<Vec<usize>>::new());
    assert_eq!(pack_end(&[3, 3, 3], 100), vec![vec![0, 1, 2]]);
}

/// Manifests of a table whose columns were widened: what the commit that widens them and every
/// later one writes.
mod widened {
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::io::FileIO;
    use iceberg::spec::{
        DataFileBuilder, DataFileFormat, Literal, NestedField, Schema, SortOrder, Struct,
        TableMetadataBuilder, Transform, Type, UnboundPartitionSpec,
    };

    use super::super::*;
    use crate::commit::MetadataChanges;
    use crate::files::TableCache;

    fn decimal(v: i128, precision: u32) -> Datum {
        let bytes = v.to_be_bytes();
        let ty = PrimitiveType::Decimal {
            precision,
            scale: 2,
        };
        // Four bytes hold every value these tests use at precision 9, eight at 12.
        let width = if precision <= 9 { 4 } else { 8 };
        Datum::try_from_bytes(&bytes[16 - width..], ty).unwrap()
    }

    /// id int (the key), x float, d decimal(9,2), n int; and the same widened (long, double,
    /// decimal(12,2), long). Partitioned by the identity of `partition`'s fields (a decimal
    /// partition value the direct encoder leaves to iceberg-rust's writer).
    fn tables(partition: &[(i32, &str)]) -> (TableMetadata, TableMetadata) {
        let schema = |int: PrimitiveType, float, precision| {
            let d = PrimitiveType::Decimal {
                precision,
                scale: 2,
            };
            Schema::builder()
                .with_fields(vec![
                    Arc::new(NestedField::required(1, "id", Type::Primitive(int.clone()))),
                    Arc::new(NestedField::optional(2, "x", Type::Primitive(float))),
                    Arc::new(NestedField::optional(3, "d", Type::Primitive(d))),
                    Arc::new(NestedField::optional(4, "n", Type::Primitive(int))),
                ])
                .with_identifier_field_ids([1])
                .build()
                .unwrap()
        };
        let narrow = schema(PrimitiveType::Int, PrimitiveType::Float, 9);
        let mut spec = UnboundPartitionSpec::builder();
        for (id, name) in partition {
            spec = spec
                .add_partition_field(*id, *name, Transform::Identity)
                .unwrap();
        }
        let md = TableMetadataBuilder::new(
            narrow,
            spec.build(),
            SortOrder::unsorted_order(),
            "memory:///t".into(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        let wide = MetadataChanges {
            schema: Some(schema(PrimitiveType::Long, PrimitiveType::Double, 12)),
            ..Default::default()
        }
        .apply(&Arc::new(md.clone()))
        .unwrap();
        (md, wide.as_ref().clone())
    }

    fn file(name: &str, decimal_partition: bool, bounds: [Datum; 4], n: Literal) -> DataFile {
        let mut partition = vec![Some(n)];
        if decimal_partition {
            partition.push(Some(Literal::decimal(1234)));
        }
        let bounds: HashMap<i32, Datum> = (1..).zip(bounds).collect();
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("memory:///t/data/{name}.parquet"))
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::from_iter(partition))
            .partition_spec_id(0)
            .record_count(10)
            .file_size_in_bytes(100)
            .lower_bounds(bounds.clone())
            .upper_bounds(bounds)
            .build()
            .unwrap()
    }

    /// A file listed before the widening (4-byte bounds, an int partition value) and one the
    /// widening commit adds (8-byte bounds, values past the int range), in one manifest of
    /// that commit: it declares the widened schema, and iceberg-rust reads back both entries
    /// in the widened types, through the direct encoder and through iceberg-rust's writer.
    #[tokio::test]
    async fn a_widening_commit_writes_its_manifests_in_the_wider_schema() {
        for decimal_partition in [false, true] {
            let partition: &[(i32, &str)] = match decimal_partition {
                false => &[(4, "n")],
                true => &[(4, "n"), (3, "d")],
            };
            let (_, wide) = tables(partition);
            let old = file(
                "old",
                decimal_partition,
                [
                    Datum::int(-5),
                    Datum::float(0.1),
                    decimal(1234, 9),
                    Datum::int(3),
                ],
                Literal::int(3),
            );
            let big = 5_000_000_000i64;
            let new = file(
                "new",
                decimal_partition,
                [
                    Datum::long(big),
                    Datum::double(0.1),
                    decimal(123_456_789_012, 12),
                    Datum::long(big),
                ],
                Literal::long(big),
            );
            let listed = ManifestEntry::builder()
                .status(ManifestStatus::Added)
                .snapshot_id(1)
                .sequence_number(1)
                .file_sequence_number(1)
                .data_file(old)
                .build();
            let files = Files::new(FileIO::new_with_memory(), Arc::new(TableCache::default()));
            let mut out = Out::new(&wide, 7, 0, ManifestContentType::Data).unwrap();
            out.existing(&listed, None).unwrap();
            out.added(7, new.clone(), UNASSIGNED_SEQUENCE_NUMBER);
            let (_, (path, bytes)) = out.finish(&files, &wide).await.unwrap();

            let m = Manifest::parse_avro(&bytes).unwrap();
            assert_eq!(m.metadata().schema.as_ref(), wide.current_schema().as_ref());
            let [was, added] = m.entries() else {
                panic!("two entries: {:?}", m.entries());
            };
            let was = was.data_file();
            for bounds in [was.lower_bounds(), was.upper_bounds()] {
                assert_eq!(bounds[&1], Datum::long(-5));
                assert_eq!(bounds[&2], Datum::double(f64::from(0.1f32)));
                assert_eq!(bounds[&3], decimal(1234, 12));
                assert_eq!(bounds[&4], Datum::long(3));
            }
            assert_eq!(was.partition().fields()[0], Some(Literal::long(3)));
            assert_eq!(added.data_file(), &new);
            // What a warm process remembers is what it wrote.
            let remembered = files.written_manifest(&path).unwrap();
            assert_eq!(remembered.entries(), m.entries());
        }
    }

    /// A manifest listed before a partition source was widened holds its partition values in
    /// the narrower type: a commit on the widened table writes it again, so that every manifest
    /// of the snapshot holds them in one type (iceberg-rust matches deletes to data files by
    /// partition value); a table whose partition sources never widened rewrites nothing.
    #[tokio::test]
    async fn manifests_with_partition_values_of_the_narrower_type_are_written_again() {
        let (narrow, wide) = tables(&[(4, "n")]);
        assert!(widened_partition_specs(&narrow).is_empty());
        assert_eq!(
            widened_partition_specs(&wide).keys().collect::<Vec<_>>(),
            vec![&0]
        );
        let io = FileIO::new_with_memory();
        let files = Files::new(io.clone(), Arc::new(TableCache::default()));
        let old = file(
            "old",
            false,
            [
                Datum::int(1),
                Datum::float(0.5),
                decimal(1, 9),
                Datum::int(3),
            ],
            Literal::int(3),
        );
        let mut out = Out::new(&narrow, 1, 0, ManifestContentType::Data).unwrap();
        out.added(1, old, UNASSIGNED_SEQUENCE_NUMBER);
        let (mut listed, (path, bytes)) = out.finish(&files, &narrow).await.unwrap();
        listed.sequence_number = 1;
        listed.min_sequence_number = 1;
        io.new_output(&path).unwrap().write(bytes).await.unwrap();
        // A fresh process: nothing remembered.
        let files = Files::new(io, Arc::new(TableCache::default()));

        let parent = [listed.clone()];
        let nothing = Removing::nothing();
        let same = filter(&files, &narrow, &parent, 2, &nothing).await.unwrap();
        assert!(same.written.is_empty(), "nothing widened: kept as it is");
        assert_eq!(same.manifests, vec![listed]);

        let kept = filter(&files, &wide, &parent, 2, &nothing).await.unwrap();
        let [(_, rewritten)] = kept.written.as_slice() else {
            panic!("one manifest rewritten: {:?}", kept.manifests);
        };
        let m = Manifest::parse_avro(rewritten).unwrap();
        let f = m.entries()[0].data_file();
        assert_eq!(f.partition().fields()[0], Some(Literal::long(3)));
        assert_eq!(f.lower_bounds()[&4], Datum::long(3));
    }

    /// What dms2iceberg wrote before the fix: the widening commit's merged manifest under the
    /// schema before the widening, holding the commit's 8-byte bounds. iceberg-rust cannot read
    /// it; we read it widened, and the next commit writes it again in the table's schema,
    /// though it removes nothing from it.
    #[tokio::test]
    async fn a_manifest_written_under_the_schema_before_the_widening_is_read_and_rewritten() {
        let (narrow, wide) = tables(&[]);
        let unpartitioned = narrow.default_partition_spec().as_ref().clone();
        let big = 5_000_000_000i64;
        let bounds = |id: Datum, x: Datum| -> HashMap<i32, Datum> { [(1, id), (2, x)].into() };
        let data_file = |name: &str, lo: HashMap<i32, Datum>, hi: HashMap<i32, Datum>| {
            DataFileBuilder::default()
                .content(DataContentType::Data)
                .file_path(format!("memory:///t/data/{name}.parquet"))
                .file_format(DataFileFormat::Parquet)
                .partition(Struct::empty())
                .record_count(10)
                .file_size_in_bytes(100)
                .lower_bounds(lo)
                .upper_bounds(hi)
                .build()
                .unwrap()
        };
        let old = data_file(
            "old",
            bounds(Datum::int(1), Datum::float(0.5)),
            bounds(Datum::int(9), Datum::float(1.5)),
        );
        let new = data_file(
            "new",
            bounds(Datum::long(big), Datum::double(0.1)),
            bounds(Datum::long(big + 9), Datum::double(0.2)),
        );
        let io = FileIO::new_with_memory();
        let path = "memory:///t/metadata/broken-m0.avro";
        let mut w = ManifestWriterBuilder::new(
            io.new_output(path).unwrap(),
            Some(7),
            narrow.current_schema().clone(),
            unpartitioned,
        )
        .build_v2_data();
        w.add_existing_file(old, 1, 1, Some(1)).unwrap();
        w.add_file(new, 2).unwrap();
        let mut listed = w.write_manifest_file().await.unwrap();
        listed.sequence_number = 2;
        let bytes = io.new_input(path).unwrap().read().await.unwrap();
        let err = Manifest::parse_avro(&bytes).unwrap_err().to_string();
        assert!(
            err.contains("failed to convert byte slice to array"),
            "{err}"
        );

        let files = Files::new(io, Arc::new(TableCache::default()));
        let read = files.manifest(&listed, Fill::Keep).await.unwrap();
        let [old, new] = read.entries() else {
            panic!("two entries: {:?}", read.entries());
        };
        assert_eq!(old.data_file().lower_bounds()[&1], Datum::long(1));
        assert_eq!(old.data_file().upper_bounds()[&2], Datum::double(1.5));
        assert_eq!(new.data_file().lower_bounds()[&1], Datum::long(big));
        assert_eq!(new.data_file().upper_bounds()[&2], Datum::double(0.2));
        assert_eq!(new.sequence_number(), Some(2), "inherited from the list");
        assert!(files.was_widened(path));

        // A commit that removes nothing from it writes it again, in the widened schema.
        let kept = filter(&files, &wide, &[listed.clone()], 8, &Removing::nothing())
            .await
            .unwrap();
        let [(rewritten_path, rewritten)] = kept.written.as_slice() else {
            panic!("one manifest rewritten: {:?}", kept.manifests);
        };
        assert_eq!(kept.manifests.len(), 1);
        assert_ne!(rewritten_path, path);
        let again = Manifest::parse_avro(rewritten).unwrap();
        assert_eq!(
            again.metadata().schema.as_ref(),
            wide.current_schema().as_ref()
        );
        let entries: Vec<_> = again.entries().iter().map(|e| e.data_file()).collect();
        assert_eq!(entries[0].lower_bounds()[&1], Datum::long(1));
        assert_eq!(entries[1].upper_bounds()[&1], Datum::long(big + 9));
        assert!(
            again
                .entries()
                .iter()
                .all(|e| e.status() == ManifestStatus::Existing)
        );
    }
}
