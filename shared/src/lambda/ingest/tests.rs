//! What an event names: tables located, the warehouse's own files never taken for DMS files.

use super::*;
use crate::lambda::events::{Record, S3Ref};

fn record(bucket: &str, key: &str) -> Record {
    Record {
        id: Some("m".into()),
        body: None,
        objects: vec![S3Ref {
            bucket: bucket.into(),
            key: key.into(),
            deleted_ms: None,
        }],
        invalid: None,
    }
}

/// One bucket for landing and warehouse: the warehouse's own Parquet files, which an
/// event rule on the DMS prefix may match, are ignored, never taken for DMS files.
#[test]
fn the_warehouses_own_files_are_never_dms_files() {
    let config = Config::from_toml("[tables.\"sales.product\"]\nprimary_key = [\"id\"]\n").unwrap();
    let records = [
        // Named as a DMS file would be: only its place says it is not one.
        record(
            "shared",
            "iceberg/sales/product/20220302-1134010000.parquet",
        ),
        record("shared", "sales/product/20220302-1134010000.parquet"),
    ];
    let n = named(&config, &records, Some("s3://shared/iceberg/"));
    assert_eq!(
        n.ignored,
        vec!["s3://shared/iceberg/sales/product/20220302-1134010000.parquet".to_string()]
    );
    assert_eq!(n.tables.len(), 1, "the DMS file is located: {:?}", n.tables);
    // Without a warehouse prefix (S3 Tables, REST) nothing is set aside by location.
    let n = named(&config, &records[1..], None);
    assert!(n.ignored.is_empty());
}
