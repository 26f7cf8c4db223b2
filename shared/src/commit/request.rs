//! A commit as Iceberg's REST spec states it: the requirements the table must still meet and
//! the updates that make the new metadata from it. Every catalog receives commits in this
//! form; a pointer catalog (SQLite, Glue, S3 Tables) also receives the metadata the updates
//! make, written where its pointer will move, and a REST catalog sends the requirements and
//! updates for the server to apply.
//!
//! The requirements are what our compare-and-swap relied on: the same table (uuid), `main`
//! where it was (every writer of ours moves it, so a concurrent commit of ours is a conflict),
//! and, when the commit changes the schema, the partition spec or the sort order, those as
//! they were.

use std::collections::HashMap;

use iceberg::spec::{MAIN_BRANCH, SnapshotReference, TableMetadata};
use iceberg::{TableRequirement, TableUpdate};

use super::MetadataChanges;
use crate::error::{Error, Result};
use crate::files::metadata::Refs;

/// What must still hold of the table for a commit built on `base` (`None`: one that creates
/// the table) to apply.
pub(crate) fn requirements(
    base: Option<&TableMetadata>,
    changes: &MetadataChanges,
) -> Vec<TableRequirement> {
    let Some(base) = base else {
        return vec![TableRequirement::NotExist];
    };
    let mut out = vec![
        TableRequirement::UuidMatch { uuid: base.uuid() },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: base.snapshot_for_ref(MAIN_BRANCH).map(|s| s.snapshot_id()),
        },
    ];
    if changes.schema.is_some() {
        out.push(TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: base.current_schema_id(),
        });
        out.push(TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id: base.last_column_id(),
        });
    }
    if changes.spec.is_some() {
        out.push(TableRequirement::DefaultSpecIdMatch {
            default_spec_id: base.default_partition_spec_id(),
        });
        out.push(TableRequirement::LastAssignedPartitionIdMatch {
            last_assigned_partition_id: base.last_partition_id(),
        });
    }
    if changes.sort_order.is_some() {
        out.push(TableRequirement::DefaultSortOrderIdMatch {
            default_sort_order_id: base.default_sort_order_id(),
        });
    }
    out
}

/// The updates that create `md` (before any snapshot): what a staged create's commit carries,
/// in the order Iceberg's builder records them for a new table.
pub(crate) fn creation_updates(md: &TableMetadata) -> Vec<TableUpdate> {
    vec![
        TableUpdate::AssignUuid { uuid: md.uuid() },
        TableUpdate::UpgradeFormatVersion {
            format_version: md.format_version(),
        },
        TableUpdate::AddSchema {
            schema: md.current_schema().as_ref().clone(),
        },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
        TableUpdate::AddSpec {
            spec: md.default_partition_spec().as_ref().clone().into_unbound(),
        },
        TableUpdate::SetDefaultSpec { spec_id: -1 },
        TableUpdate::AddSortOrder {
            sort_order: md.default_sort_order().as_ref().clone(),
        },
        TableUpdate::SetDefaultSortOrder { sort_order_id: -1 },
        TableUpdate::SetLocation {
            location: md.location().to_string(),
        },
        TableUpdate::SetProperties {
            updates: md.properties().clone(),
        },
    ]
}

/// The updates that turn `old` into `new` for a metadata-only commit (expiry, the
/// applied-file record, a format upgrade): the format version raised, snapshots and refs
/// removed or moved, statistics dropped, properties set or removed. Anything else changing is
/// refused, not silently left out.
pub(crate) fn metadata_updates(
    old: &TableMetadata,
    old_refs: &Refs,
    new: &TableMetadata,
) -> Result<Vec<TableUpdate>> {
    let same = old.uuid() == new.uuid()
        && old.format_version() <= new.format_version()
        && old.location() == new.location()
        && old.current_schema_id() == new.current_schema_id()
        && old.schemas_iter().count() == new.schemas_iter().count()
        && old.default_partition_spec_id() == new.default_partition_spec_id()
        && old.partition_specs_iter().count() == new.partition_specs_iter().count()
        && old.default_sort_order_id() == new.default_sort_order_id();
    if !same {
        return Err(Error::Internal(
            "a metadata-only commit changed the schema, spec, sort order or location".into(),
        ));
    }
    if let Some(s) = new
        .snapshots()
        .find(|s| old.snapshot_by_id(s.snapshot_id()).is_none())
    {
        return Err(Error::Internal(format!(
            "a metadata-only commit added snapshot {}",
            s.snapshot_id()
        )));
    }
    let mut out = Vec::new();
    if new.format_version() > old.format_version() {
        out.push(TableUpdate::UpgradeFormatVersion {
            format_version: new.format_version(),
        });
    }
    let removed: Vec<i64> = old
        .snapshots()
        .map(|s| s.snapshot_id())
        .filter(|id| new.snapshot_by_id(*id).is_none())
        .collect();
    // The refs as the table had them (a metadata-only commit adds none): each one whose
    // snapshot is gone is removed, each that moved is set.
    for (name, r) in old_refs {
        match new.snapshot_for_ref(name) {
            None => out.push(TableUpdate::RemoveSnapshotRef {
                ref_name: name.clone(),
            }),
            Some(s) if s.snapshot_id() != r.snapshot_id => out.push(TableUpdate::SetSnapshotRef {
                ref_name: name.clone(),
                reference: SnapshotReference {
                    snapshot_id: s.snapshot_id(),
                    retention: r.retention.clone(),
                },
            }),
            Some(_) => {}
        }
    }
    for id in old.statistics_iter().map(|s| s.snapshot_id) {
        if new.statistics_for_snapshot(id).is_none() {
            out.push(TableUpdate::RemoveStatistics { snapshot_id: id });
        }
    }
    for id in old.partition_statistics_iter().map(|s| s.snapshot_id) {
        if new.partition_statistics_for_snapshot(id).is_none() {
            out.push(TableUpdate::RemovePartitionStatistics { snapshot_id: id });
        }
    }
    if !removed.is_empty() {
        out.push(TableUpdate::RemoveSnapshots {
            snapshot_ids: removed,
        });
    }
    let set: HashMap<String, String> = new
        .properties()
        .iter()
        .filter(|(k, v)| old.properties().get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !set.is_empty() {
        out.push(TableUpdate::SetProperties { updates: set });
    }
    let removals: Vec<String> = old
        .properties()
        .keys()
        .filter(|k| !new.properties().contains_key(*k))
        .cloned()
        .collect();
    if !removals.is_empty() {
        out.push(TableUpdate::RemoveProperties { removals });
    }
    Ok(out)
}

/// `updates` applied to `base` by Iceberg's own builder, as a REST server applies them.
#[cfg(test)]
pub(crate) fn applied(base: &TableMetadata, updates: &[TableUpdate]) -> TableMetadata {
    let mut b = base
        .clone()
        .into_builder(Some("s3://x/metadata/prev.metadata.json".into()));
    for u in updates {
        b = u.clone().apply(b).expect("update applies");
    }
    b.build().expect("metadata builds").metadata
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{
        FormatVersion, NestedField, Operation, PrimitiveType, Schema, Snapshot, SortOrder, Summary,
        TableMetadataBuilder, Type, UnboundPartitionSpec,
    };

    fn created(uuid: uuid::Uuid) -> TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .with_identifier_field_ids(vec![1])
            .build()
            .unwrap();
        let props = [("write.parquet.compression-codec".into(), "zstd".into())].into();
        let md = TableMetadataBuilder::new(
            schema,
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "s3://b/w/sales.db/orders".into(),
            FormatVersion::V2,
            props,
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        md.into_builder(None)
            .assign_uuid(uuid)
            .build()
            .unwrap()
            .metadata
    }

    fn with_snapshot(md: &TableMetadata, id: i64, record: &str) -> TableMetadata {
        let snapshot = Snapshot::builder()
            .with_snapshot_id(id)
            .with_parent_snapshot_id(md.current_snapshot_id())
            .with_sequence_number(md.last_sequence_number() + 1)
            .with_timestamp_ms(chrono::Utc::now().timestamp_millis() + id)
            .with_manifest_list(format!("s3://b/w/sales.db/orders/metadata/snap-{id}.avro"))
            .with_schema_id(md.current_schema_id())
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: Default::default(),
            })
            .build();
        md.clone()
            .into_builder(Some("s3://b/w/prev.metadata.json".into()))
            .set_branch_snapshot(snapshot, MAIN_BRANCH)
            .unwrap()
            .set_properties([("dms2iceberg.applied".to_string(), record.to_string())].into())
            .unwrap()
            .build()
            .unwrap()
            .metadata
    }

    fn refs_of(md: &TableMetadata) -> Refs {
        let mut refs = Refs::new();
        if let Some(r) = md.snapshot_for_ref(MAIN_BRANCH) {
            refs.insert(
                MAIN_BRANCH.into(),
                SnapshotReference::new(
                    r.snapshot_id(),
                    iceberg::spec::SnapshotRetention::branch(None, None, None),
                ),
            );
        }
        refs
    }

    /// A create's commit on the table a REST server staged (its own uuid, same schema) makes
    /// our table: the server's builder applying our updates gives the metadata we built.
    #[test]
    fn a_staged_table_plus_the_creation_updates_is_our_table() {
        let ours = created(uuid::Uuid::from_u128(1));
        let staged = created(uuid::Uuid::from_u128(2));
        let mut updates = creation_updates(&ours);
        let first = with_snapshot(&ours, 11, "r1");
        updates.extend(
            ours.clone()
                .into_builder(None)
                .set_branch_snapshot(
                    first.snapshot_by_id(11).unwrap().as_ref().clone(),
                    MAIN_BRANCH,
                )
                .unwrap()
                .set_properties([("dms2iceberg.applied".to_string(), "r1".to_string())].into())
                .unwrap()
                .build()
                .unwrap()
                .changes,
        );
        let got = applied(&staged, &updates);
        assert_eq!(got.uuid(), ours.uuid());
        assert_eq!(got.current_schema(), ours.current_schema());
        assert_eq!(
            got.schemas_iter().count(),
            1,
            "an identical schema is not added twice"
        );
        assert_eq!(got.default_partition_spec(), ours.default_partition_spec());
        assert_eq!(got.location(), ours.location());
        assert_eq!(got.current_snapshot_id(), Some(11));
        assert_eq!(got.properties()["dms2iceberg.applied"], "r1");
        assert_eq!(got.properties()["write.parquet.compression-codec"], "zstd");
    }

    #[test]
    fn requirements_hold_on_the_base_and_fail_once_main_moved() {
        let base = with_snapshot(&created(uuid::Uuid::from_u128(1)), 11, "r1");
        let reqs = requirements(Some(&base), &MetadataChanges::default());
        assert_eq!(reqs.len(), 2);
        for r in &reqs {
            r.check(Some(&base)).unwrap();
        }
        let moved = with_snapshot(&base, 12, "r2");
        assert!(
            reqs.iter().any(|r| r.check(Some(&moved)).is_err()),
            "main moved"
        );
        let other = created(uuid::Uuid::from_u128(9));
        assert!(
            reqs.iter().any(|r| r.check(Some(&other)).is_err()),
            "another table"
        );
        // A create asserts there is no table.
        let create = requirements(None, &MetadataChanges::default());
        assert_eq!(create, vec![TableRequirement::NotExist]);
        assert!(create[0].check(Some(&base)).is_err());
        create[0].check(None).unwrap();
        // A schema change also asserts the schema it was made on.
        let changes = MetadataChanges {
            schema: Some(base.current_schema().as_ref().clone()),
            ..Default::default()
        };
        let r = requirements(Some(&base), &changes);
        assert!(r.contains(&TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: base.current_schema_id()
        }));
    }

    /// Expiry and the applied-file record as updates: applied to the table they were made
    /// on, they give the metadata the change made.
    #[test]
    fn a_metadata_change_as_updates_makes_the_same_metadata() {
        let md = with_snapshot(&created(uuid::Uuid::from_u128(1)), 11, "r1");
        let md = with_snapshot(&md, 12, "r2");
        let md = with_snapshot(&md, 13, "r3");
        let new = md
            .clone()
            .into_builder(Some("s3://b/w/prev.metadata.json".into()))
            .remove_snapshots(&[11, 12])
            .set_properties([("dms2iceberg.applied".to_string(), "r3-marked".to_string())].into())
            .unwrap()
            .remove_properties(&["write.parquet.compression-codec".to_string()])
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        let updates = metadata_updates(&md, &refs_of(&md), &new).unwrap();
        let got = applied(&md, &updates);
        let ids = |m: &TableMetadata| {
            let mut v: Vec<i64> = m.snapshots().map(|s| s.snapshot_id()).collect();
            v.sort();
            v
        };
        assert_eq!(ids(&got), vec![13]);
        assert_eq!(got.current_snapshot_id(), Some(13));
        assert_eq!(got.properties(), new.properties());
        // Nothing changed: nothing to send.
        assert!(
            metadata_updates(&md, &refs_of(&md), &md)
                .unwrap()
                .is_empty()
        );
        // A change the updates cannot carry is refused.
        let moved = with_snapshot(&md, 14, "r4");
        assert!(metadata_updates(&md, &refs_of(&md), &moved).is_err());
    }
}
