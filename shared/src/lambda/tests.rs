//! The handlers in-process: the sample events of `infra/events/` against a SQLite catalog and
//! a folder of buckets ([`LocalObjects`]), the same code the functions run on Glue and S3. No
//! Python, no emulator, seconds: `cargo test -p dms2iceberg --features aws --lib lambda`.
//! (tests/lambda.rs runs the binaries on an S3 + Glue emulator; tests/sam_local.rs runs them in
//! `sam local invoke`.)

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_cast::display::{ArrayFormatter, FormatOptions};
use iceberg::TableIdent;
use serde_json::Value;

use super::compact::{CompactEnv, CompactHandler};
use super::events::{CompactEvent, IngestEvent};
use super::ingest::{IngestHandler, IngestResponse};
use super::{FunctionEnv, FunctionError, guarded};
use crate::catalog::{Catalog, SqliteCatalog};
use crate::ops::scan::Scan;
use crate::storage::LocalObjects;

const LANDING: &str = "dms2iceberg-landing";
const CONFIG_URI: &str = "s3://dms2iceberg-landing/config/dms2iceberg.toml";
const DB: &str = "dms2iceberg";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn event(name: &str) -> Value {
    let p = repo(&format!("infra/events/{name}"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

static N: AtomicUsize = AtomicUsize::new(0);

/// A landing bucket as the local-testing recipe of infra/README.md fills it: examples/dms under
/// `dms/`, the product's first change file also under `dms/sales/order line$items/`, and a
/// config at [`CONFIG_URI`]; a SQLite catalog as the warehouse.
struct Lab {
    dir: PathBuf,
    objects: Arc<LocalObjects>,
    catalog: Arc<SqliteCatalog>,
}

impl Lab {
    fn new(name: &str, config: &str) -> Lab {
        let dir = std::env::temp_dir().join(format!(
            "d2i-lambda-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let landing = dir.join("buckets").join(LANDING);
        copy_tree(&repo("examples/dms"), &landing.join("dms"));
        let quoted = landing.join("dms/sales/order line$items");
        std::fs::create_dir_all(&quoted).unwrap();
        std::fs::copy(
            repo("examples/dms/sales/product/20220302-1134010000.csv"),
            quoted.join("20220302-1134010000.csv"),
        )
        .unwrap();
        std::fs::create_dir_all(landing.join("config")).unwrap();
        std::fs::write(landing.join("config/dms2iceberg.toml"), config).unwrap();
        Lab {
            objects: Arc::new(LocalObjects::new(dir.join("buckets"))),
            catalog: Arc::new(SqliteCatalog::open(&dir.join("warehouse")).unwrap()),
            dir,
        }
    }

    fn env(&self) -> FunctionEnv {
        FunctionEnv {
            catalog: crate::aws::CatalogTarget::Glue {
                warehouse: "s3://dms2iceberg-warehouse/warehouse".into(),
            },
            database: Some(DB.into()),
            config: Some(CONFIG_URI.into()),
            dead_letter_queue: None,
            table_metrics: false,
            files_per_commit: 1,
            files_per_invocation: 100,
            spool: self.dir.join("spool"),
            key_cache_bytes: 64 << 20,
            parallel_loads: 1,
        }
    }

    async fn ingest(&self) -> IngestHandler {
        IngestHandler::new(self.env(), self.catalog.clone(), self.objects.clone())
            .await
            .unwrap()
    }

    fn compact(&self) -> CompactHandler {
        let settings = CompactEnv {
            max_bytes: 1 << 30,
            thresholds: Default::default(),
            concurrency: 2,
            retention_hours: 168.0,
            retain_last: 10,
            retain_max: None,
            orphan_min_age_hours: 72.0,
            compaction: None,
        };
        CompactHandler::new(self.catalog.clone(), &self.env(), settings)
    }

    /// The table's rows as `a|b|c` lines, in key order (what `scan` prints).
    async fn rows(&self, table: &str) -> Vec<String> {
        let ident = TableIdent::from_strs([DB, table]).unwrap();
        let r = Scan::new(self.catalog.as_ref(), ident)
            .execute()
            .await
            .unwrap();
        let opts = FormatOptions::default();
        let cols: Vec<ArrayFormatter> = r
            .batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        (0..r.batch.num_rows())
            .map(|i| {
                cols.iter()
                    .map(|c| c.value(i).to_string())
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

fn config() -> String {
    std::fs::read_to_string(repo("infra/local/dms2iceberg.toml")).unwrap()
}

fn parse(v: Value) -> IngestEvent {
    serde_json::from_value(v).unwrap()
}

/// The product table after its full load and both change files (README's quick start).
const PRODUCT: [&str; 6] = [
    "100|Smartphone|Apple iPhone 12|30|2022-03-02T11:30:01",
    "101|Smartphone|Samsung Galaxy S21|25|2022-03-02T11:30:01",
    "102|Laptop|Dell XPS 13|11|2022-03-02T11:35:01",
    "104|Tablet|Samsung Galaxy Tab S7|20|2022-03-02T11:30:01",
    "105|Headphones|Sony WH-1000XM4|50|2022-03-02T11:30:01",
    "106|Tablet|Apple iPad Air|40|2022-03-02T11:34:01",
];

/// Every sample event, in the order infra/README.md invokes them, with the tables they leave.
#[tokio::test]
async fn sample_events_apply_and_compact_in_process() {
    let lab = Lab::new("samples", &config());
    let ingest = lab.ingest().await;

    // s3-put.json: both records, the second a quoted source name (`order+line%24items`).
    let r = ingest.handle(parse(event("s3-put.json"))).await.unwrap();
    let IngestResponse::Tables { tables } = r else {
        panic!("a direct S3 event answers with its tables: {r:?}")
    };
    assert_eq!(tables, ["sales.order line$items", "sales.product"]);
    assert_eq!(lab.rows("product").await, PRODUCT);
    assert_eq!(
        lab.rows("order_line_items").await,
        [
            "102|Laptop|Dell XPS 13|16|2022-03-02T11:34:01",
            "106|Tablet|Apple iPad Air|40|2022-03-02T11:34:01"
        ]
    );

    // sqs.json: an S3 notification and an EventBridge event of applied files: no failures.
    let r = ingest.handle(parse(event("sqs.json"))).await.unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v, serde_json::json!({"batchItemFailures": []}));

    // eventbridge.json: the product's last change file, applied already: nothing changes.
    let r = ingest
        .handle(parse(event("eventbridge.json")))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::json!({"tables": ["sales.product"]})
    );
    assert_eq!(lab.rows("product").await, PRODUCT);

    // schedule.json: the delete files go, the rows stay.
    let compact = lab.compact();
    let ev: CompactEvent = serde_json::from_value(event("schedule.json")).unwrap();
    assert!(ev.schedule.is_some());
    let reports = compact.handle(ev, None).await.unwrap();
    let product = reports
        .iter()
        .find(|r| r.table == "dms2iceberg.product")
        .unwrap_or_else(|| panic!("no report for the product table: {reports:?}"));
    assert!(product.error.is_none(), "{product:?}");
    let c = product
        .compaction
        .as_ref()
        .expect("the product table has deletes");
    assert!(c.delete_files_before > 0, "{c:?}");
    assert_eq!(c.delete_files_after, 0, "{c:?}");
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert_eq!(lab.rows("product").await, PRODUCT);
}

/// A quoted source name with no `target`. Named in the config: the function's initialisation
/// fails with a ConfigError saying what to write. Matched by a glob only: that record fails with
/// the same advice, and the other record of the event is applied.
#[tokio::test]
async fn a_quoted_name_without_target_says_to_set_one() {
    let text = config().replace("target = \"sales.order_line_items\"\n", "");
    let lab = Lab::new("no-target", &text);
    let e = IngestHandler::new(lab.env(), lab.catalog.clone(), lab.objects.clone())
        .await
        .err()
        .map(FunctionError::from)
        .expect("a config naming a table it cannot name is refused");
    assert_eq!(e.kind, "ConfigError", "{e}");
    let advice = "set `target` under [tables.\"sales.order line$items\"]";
    assert!(
        e.message.contains("`order line$items` is not a valid name") && e.message.contains(advice),
        "{e}"
    );

    let text = config().replace(
        "[tables.\"sales.order line$items\"]\nprimary_key = [\"product_id\"]\ntarget = \"sales.order_line_items\"\n",
        "[tables.\"sales.order*\"]\nprimary_key = [\"product_id\"]\n",
    );
    assert!(text.contains("sales.order*"), "{text}");
    let lab = Lab::new("glob-no-target", &text);
    let e = lab
        .ingest()
        .await
        .handle(parse(event("s3-put.json")))
        .await
        .unwrap_err();
    assert_eq!(e.kind, "ConfigError", "{e}");
    assert!(e.message.contains(advice), "{e}");
    assert_eq!(lab.rows("product").await, PRODUCT);
}

/// errorType: an event of no known shape is an InputError, a bad file an InputError naming
/// the file, a missing table key a ConfigError, a panic `Panic`.
#[tokio::test]
async fn errors_have_meaningful_types() {
    let lab = Lab::new("errors", &config());
    let ingest = lab.ingest().await;
    let e = ingest
        .handle(parse(serde_json::json!({"hello": "world"})))
        .await
        .unwrap_err();
    assert_eq!(e.kind, "InputError", "{e}");
    assert!(e.message.contains("unrecognised event"), "{e}");

    // A change file with an unknown operation: the file fails, its table waits.
    let bad = lab
        .dir
        .join("buckets")
        .join(LANDING)
        .join("dms/sales/product/20220302-1136010000.csv");
    std::fs::write(
        &bad,
        "Op,product_id,category,product_name,quantity_available,last_update_time\n\
         X,107,Phone,Pixel,1,2022-03-02 11:36:01.000000\n",
    )
    .unwrap();
    let mut ev = event("eventbridge.json");
    ev["detail"]["object"]["key"] = "dms/sales/product/20220302-1136010000.csv".into();
    let e = ingest.handle(parse(ev)).await.unwrap_err();
    assert_eq!(e.kind, "InputError", "{e}");
    assert!(
        e.message.contains("20220302-1136010000.csv") && e.message.contains("`Op`"),
        "{e}"
    );

    // A table nobody configured a key for.
    let other = lab.dir.join("buckets").join(LANDING).join("dms/hr/people");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("LOAD00000001.csv"), "id,name\n1,a\n").unwrap();
    let mut ev = event("eventbridge.json");
    ev["detail"]["object"]["key"] = "dms/hr/people/LOAD00000001.csv".into();
    let e = ingest.handle(parse(ev)).await.unwrap_err();
    assert_eq!(e.kind, "ConfigError", "{e}");

    let p = guarded(async {
        if e.kind.is_empty() {
            return Ok(());
        }
        panic!("boom {}", 42)
    })
    .await
    .unwrap_err();
    assert_eq!(
        p,
        FunctionError::new("Panic", "the handler panicked: boom 42")
    );
}

/// The compaction function before the first ingest: no tables (the Glue database may not exist
/// yet), nothing to do, no error.
#[tokio::test]
async fn compaction_before_any_table_is_nothing_to_do() {
    let lab = Lab::new("empty", &config());
    assert!(lab.catalog.list_tables().await.unwrap().is_empty());
    let reports = lab
        .compact()
        .handle(serde_json::from_str("{}").unwrap(), None)
        .await
        .unwrap();
    assert!(reports.is_empty(), "{reports:?}");
}
