//! The samples in `examples/` do what the README says: each ingested with its config, the whole
//! table equal to the state written next to it (worked out by hand from the files, see the
//! README), through our scan, PyIceberg and DuckDB; a second ingest changes nothing.

use crate::common::*;
use serde_json::json;

/// `examples/headerless`: DMS endpoint defaults (no header, no Op in the full load, Op first in
/// change files), DMS doubles in exponent form, leading-zero postal codes, a late update
/// ordered out by `ordering_column`.
#[test]
fn headerless_example() {
    let w = Work::new("example_headerless");
    let root = repo_root().join("examples/headerless");
    let expected_dir = w.dir.join("expected");
    std::fs::create_dir_all(&expected_dir).unwrap();
    std::fs::copy(
        root.join("expected.jsonl"),
        w.expected_path("shop.customers"),
    )
    .unwrap();
    let meta = json!({
        "table": "shop.customers",
        "dms_table": "shop.customers",
        "primary_key": ["customer_number"],
        "columns": {
            "customer_number": "long", "customer_name": "string",
            "contact_first_name": "string", "contact_last_name": "string", "address": "string",
            "city": "string", "postal_code": "string", "country": "string",
            "credit_limit": "decimal(10,2)", "discount_rate": "decimal(6,4)",
            "last_update_time": "timestamp"
        },
        "files": [], "pending_files": []
    });
    std::fs::write(w.meta_path("shop.customers"), meta.to_string()).unwrap();
    let wh = w.wh().display().to_string();
    let dms = root.join("dms").display().to_string();
    let cfg = root.join("dms2iceberg.toml").display().to_string();
    let args = ["ingest", &dms, "--config", &cfg, "--warehouse", &wh];
    let r = w.cli(&args).assert_success();
    assert!(
        r.stdout.contains("3 files applied")
            && r.stdout
                .contains("1 stale (older than the row the table holds"),
        "{}",
        r.describe()
    );
    w.assert_table("shop.customers");
    let again = w.cli(&args).assert_success();
    assert!(
        again.stdout.contains("0 files applied, 3 skipped"),
        "{}",
        again.describe()
    );
    w.assert_table("shop.customers");
}
