//! Row lineage (Iceberg v3): every row has an id, `_row_id`, assigned once and kept for as long
//! as the row lives. Rows are not written with their ids; ids are handed out in ranges:
//!
//! - a snapshot takes the table's `next-row-id` as its `first-row-id` and adds `added-rows`;
//! - its manifest list gives each data manifest that has none a `first_row_id`, in list order,
//!   each range as long as the manifest's existing and added rows;
//! - a data file with no `first_row_id` of its own inherits one from its manifest: the
//!   manifest's plus the rows of the earlier such files in it (DELETED entries skipped);
//! - a row's `_row_id` is its file's `first_row_id` plus its position, unless the file stores
//!   one.
//!
//! So a commit that writes an earlier snapshot's entries into a manifest of its own (filtered
//! or merged manifests get a new `first_row_id`) must write what each entry inherited into the
//! entry itself, or every row of that file would get a new id. iceberg-rust 0.10 neither
//! inherits on read nor assigns ranges before it writes the list: both are here, as Iceberg
//! Java does them (`ManifestReader.idAssigner`, `SnapshotProducer`).

use std::sync::Arc;

use iceberg::metadata_columns::{
    RESERVED_COL_NAME_LAST_UPDATED_SEQUENCE_NUMBER, RESERVED_COL_NAME_ROW_ID,
    RESERVED_FIELD_ID_LAST_UPDATED_SEQUENCE_NUMBER, RESERVED_FIELD_ID_ROW_ID,
};
use iceberg::spec::{
    DataFile, DataFileBuilder, FormatVersion, ManifestContentType, ManifestEntryRef, ManifestFile,
    ManifestStatus, NestedField, PrimitiveType, Schema, TableMetadata, Type,
};

use crate::error::{Error, Result};

/// `schema` with the two lineage columns after its own (`_row_id`, stored when a row moves to
/// another file, and `_last_updated_sequence_number`, the commit that last changed the row):
/// what a rewrite of a v3 table's rows writes, so that every row keeps its id and its last
/// change (the spec's rules for rows moved to another file). Both optional, as the spec has them
/// in data files (a null is inherited), where iceberg-rust's metadata fields are required.
pub(crate) fn write_schema(schema: &Schema) -> Result<Schema> {
    let mut fields: Vec<Arc<NestedField>> = schema.as_struct().fields().to_vec();
    for (id, name) in [
        (RESERVED_FIELD_ID_ROW_ID, RESERVED_COL_NAME_ROW_ID),
        (
            RESERVED_FIELD_ID_LAST_UPDATED_SEQUENCE_NUMBER,
            RESERVED_COL_NAME_LAST_UPDATED_SEQUENCE_NUMBER,
        ),
    ] {
        fields.push(Arc::new(NestedField::optional(
            id,
            name,
            Type::Primitive(PrimitiveType::Long),
        )));
    }
    Ok(Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()?)
}

/// Whether `md` tracks row lineage (format version 3 or later).
pub(crate) fn tracks(md: &TableMetadata) -> bool {
    md.format_version() >= FormatVersion::V3
}

/// Each entry's `first_row_id` as a reader derives it, in entry order (`None` for delete
/// files, DELETED entries that never inherited one, and every entry of a manifest that has
/// none: a manifest from before the table was v3, whose files get ids when a list assigns its
/// rewritten manifest a range).
pub(crate) fn inherited(m: &ManifestFile, entries: &[ManifestEntryRef]) -> Vec<Option<i64>> {
    let Some(first) = m
        .first_row_id
        .filter(|_| m.content == ManifestContentType::Data)
    else {
        return vec![None; entries.len()];
    };
    let mut next = first as i64;
    entries
        .iter()
        .map(|e| {
            let f = e.data_file();
            match f.first_row_id() {
                Some(id) => Some(id),
                None if e.status() == ManifestStatus::Deleted => None,
                None => {
                    let id = next;
                    next += f.record_count() as i64;
                    Some(id)
                }
            }
        })
        .collect()
}

/// `f` with `first_row_id` set.
pub(crate) fn with_first_row_id(
    f: &DataFile,
    spec_id: i32,
    first_row_id: Option<i64>,
) -> Result<DataFile> {
    if f.first_row_id() == first_row_id {
        return Ok(f.clone());
    }
    let mut b = builder_of(f, spec_id);
    b.first_row_id(first_row_id);
    b.build()
        .map_err(|e| Error::Internal(format!("rebuilding {}: {e}", f.file_path())))
}

/// A builder holding every field of `f` (of partition spec `spec_id`): iceberg-rust 0.10's
/// `DataFile` has no setters, so a changed entry is rebuilt field by field.
pub(crate) fn builder_of(f: &DataFile, spec_id: i32) -> DataFileBuilder {
    let mut b = DataFileBuilder::default();
    b.content(f.content_type())
        .file_path(f.file_path().to_string())
        .file_format(f.file_format())
        .partition(f.partition().clone())
        .record_count(f.record_count())
        .file_size_in_bytes(f.file_size_in_bytes())
        .column_sizes(f.column_sizes().clone())
        .value_counts(f.value_counts().clone())
        .null_value_counts(f.null_value_counts().clone())
        .nan_value_counts(f.nan_value_counts().clone())
        .lower_bounds(f.lower_bounds().clone())
        .upper_bounds(f.upper_bounds().clone())
        .key_metadata(f.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(f.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(f.equality_ids())
        .first_row_id(f.first_row_id())
        .partition_spec_id(spec_id)
        .referenced_data_file(f.referenced_data_file())
        .content_offset(f.content_offset())
        .content_size_in_bytes(f.content_size_in_bytes());
    if let Some(id) = f.sort_order_id() {
        b.sort_order_id(id);
    }
    b
}

/// A snapshot's row ids on `md` (v3; `None` before): `(first-row-id, added-rows)`, the table's
/// `next-row-id` and the ids [`assign`] gives `list`'s data manifests from it.
pub(crate) fn row_range(
    md: &TableMetadata,
    list: &mut [ManifestFile],
) -> Result<Option<(u64, u64)>> {
    if !tracks(md) {
        return Ok(None);
    }
    let first = md.next_row_id();
    Ok(Some((first, assign(list, first)?)))
}

/// Assigns each data manifest of `list` without a `first_row_id` the next range from
/// `next_row_id`, as the v3 manifest list writer would (so the list as cached equals the list
/// as written), and returns how many ids the snapshot assigned: its `added-rows`.
pub(crate) fn assign(list: &mut [ManifestFile], next_row_id: u64) -> Result<u64> {
    let mut next = next_row_id;
    for m in list.iter_mut() {
        if m.content != ManifestContentType::Data {
            m.first_row_id = None;
            continue;
        }
        if m.first_row_id.is_some() {
            continue;
        }
        let (Some(existing), Some(added)) = (m.existing_rows_count, m.added_rows_count) else {
            return Err(Error::Table(format!(
                "manifest {} lacks its row counts, which a v3 table's row ids are assigned by",
                m.manifest_path
            )));
        };
        m.first_row_id = Some(next);
        next = next
            .checked_add(existing)
            .and_then(|n| n.checked_add(added))
            .ok_or_else(|| Error::Table("row ids overflow".into()))?;
    }
    Ok(next - next_row_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{DataContentType, DataFileFormat, ManifestEntry, Struct};

    fn file(path: &str, rows: u64, first_row_id: Option<i64>) -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path.into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(rows)
            .file_size_in_bytes(100)
            .first_row_id(first_row_id)
            .partition_spec_id(0)
            .build()
            .unwrap()
    }

    fn entry(status: ManifestStatus, f: DataFile) -> ManifestEntryRef {
        Arc::new(
            ManifestEntry::builder()
                .status(status)
                .snapshot_id(1)
                .sequence_number(1)
                .file_sequence_number(1)
                .data_file(f)
                .build(),
        )
    }

    fn manifest(first_row_id: Option<u64>, content: ManifestContentType) -> ManifestFile {
        ManifestFile {
            manifest_path: "m.avro".into(),
            manifest_length: 1,
            partition_spec_id: 0,
            content,
            sequence_number: 1,
            min_sequence_number: 1,
            added_snapshot_id: 1,
            added_files_count: Some(1),
            existing_files_count: Some(0),
            deleted_files_count: Some(0),
            added_rows_count: Some(10),
            existing_rows_count: Some(5),
            deleted_rows_count: Some(0),
            partitions: None,
            key_metadata: None,
            first_row_id,
        }
    }

    /// The spec's example: files without an id take the manifest's plus the rows of the
    /// earlier ones without; a stored id stands; DELETED entries neither take nor advance.
    #[test]
    fn files_inherit_their_manifests_range_in_order() {
        let entries = vec![
            entry(ManifestStatus::Added, file("a", 10, None)),
            entry(ManifestStatus::Deleted, file("b", 7, None)),
            entry(ManifestStatus::Existing, file("c", 3, Some(500))),
            entry(ManifestStatus::Existing, file("d", 4, None)),
        ];
        let m = manifest(Some(1_000), ManifestContentType::Data);
        assert_eq!(
            inherited(&m, &entries),
            vec![Some(1_000), None, Some(500), Some(1_010)]
        );
        // A manifest without a range (pre-v3): no entry has an id.
        let m = manifest(None, ManifestContentType::Data);
        assert_eq!(inherited(&m, &entries), vec![None; 4]);
    }

    #[test]
    fn a_list_assigns_ranges_to_data_manifests_without_one() {
        let mut list = vec![
            manifest(None, ManifestContentType::Data),
            manifest(Some(3), ManifestContentType::Data),
            manifest(Some(9), ManifestContentType::Deletes),
            manifest(None, ManifestContentType::Data),
        ];
        assert_eq!(assign(&mut list, 100).unwrap(), 30);
        let ids: Vec<Option<u64>> = list.iter().map(|m| m.first_row_id).collect();
        assert_eq!(ids, vec![Some(100), Some(3), None, Some(115)]);
        let mut uncounted = vec![ManifestFile {
            existing_rows_count: None,
            ..manifest(None, ManifestContentType::Data)
        }];
        assert!(assign(&mut uncounted, 0).is_err());
    }

    #[test]
    fn a_rebuilt_file_differs_only_in_its_first_row_id() {
        let f = file("a", 10, None);
        let g = with_first_row_id(&f, 0, Some(42)).unwrap();
        assert_eq!(g.first_row_id(), Some(42));
        assert_eq!(with_first_row_id(&g, 0, None).unwrap(), f);
    }
}
