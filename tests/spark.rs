//! Iceberg Java (Spark 3.5 + iceberg-spark-runtime 1.10, as Glue, EMR and Athena's writers run
//! it) on the same tables as dms2iceberg, through Iceberg's JdbcCatalog on our catalog.db:
//!
//! - Spark reads every table value for value as the independently computed expected state
//!   (types, partition transforms, position deletes, schema evolution), and every snapshot
//!   as `scan --snapshot` and the generator's state after that file;
//! - Spark rewrites, merges (copy-on-write and merge-on-read), expires and removes orphans,
//!   then our compaction, `orphans --delete` and `expire` run: the table equals the expected
//!   state in Spark, PyIceberg, DuckDB and our scan, and nothing Spark's metadata references
//!   is deleted; files Spark imports from outside the table make `orphans` refuse to delete;
//! - (needs the durable applied-file record) our ingest of more DMS files goes on after all that.
//!
//! One JVM for the whole file (`tests/common/spark.rs`), one request at a time. Run through
//! `scripts/test` (it builds `.venv-spark`); `-- --nocapture` prints `spark-measure:` lines.

mod common;
#[path = "common/spark.rs"]
mod spark_session;
#[path = "common/widen.rs"]
mod widen_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use common::*;
use serde_json::{Value, json};
use spark_session::{Spark, spark};

/// DMS TIME columns land as Iceberg `time`, which Spark cannot read ("Spark does not support
/// time fields"): the generated Parquet tables' `time` column is not stored here.
const TIME_COLUMN: &str = "ship_time";

fn without(rows: &[Value], column: &str) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            if let Some(o) = r.as_object_mut() {
                o.remove(column);
            }
            r
        })
        .collect()
}

/// Spark's read of `source` equals `rows`.
#[track_caller]
fn assert_spark(sp: &mut Spark, w: &Work, table: &str, source: Value, rows: &[Value], label: &str) {
    let p = w.write_jsonl(&format!("{table}.{label}.spark-expected.jsonl"), rows);
    let d = sp.diff(source.clone(), &p, &w.meta_path(table));
    assert!(
        d.is_empty(),
        "Spark read of {source} ({label}) differs (work dir {}):\n    {}",
        w.dir.display(),
        d.join("\n    ")
    );
}

/// `dms2iceberg ARGS… --warehouse wh --catalog-name CAT`.
fn cli(w: &Work, catalog: &str, args: &[&str]) -> Run {
    let wh = w.wh().display().to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--warehouse", &wh, "--catalog-name", catalog]);
    w.cli(&a)
}

fn ingest(w: &Work, catalog: &str) -> Run {
    let dms = w.dms().display().to_string();
    let cfg = w.config().display().to_string();
    cli(w, catalog, &["ingest", &dms, "--config", &cfg])
}

fn scan(w: &Work, catalog: &str, table: &str, extra: &[&str]) -> Vec<Value> {
    let mut a = vec!["scan", table, "--format", "json"];
    a.extend_from_slice(extra);
    let r = cli(w, catalog, &a).assert_success();
    parse_json_lines(&r.stdout, &format!("scan {table}"))
}

/// `maintenance --json` report.
fn maintain(w: &Work, catalog: &str, cmd: &str, table: &str, extra: &[&str]) -> (Run, Value) {
    let mut a = vec![cmd, table, "--json"];
    a.extend_from_slice(extra);
    let r = cli(w, catalog, &a);
    let rep = r
        .stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (r, rep)
}

/// PyIceberg and DuckDB (check_readers.py) read `rows`.
fn assert_readers(w: &Work, catalog: &str, table: &str, rows: &[Value], label: &str) {
    let p = w.write_jsonl(&format!("{table}.{label}.readers-expected.jsonl"), rows);
    let r = run(
        &python(),
        [
            support("check_readers.py").display().to_string(),
            "--warehouse".into(),
            w.wh().display().to_string(),
            "--table".into(),
            table.into(),
            "--expected".into(),
            p.display().to_string(),
            "--meta".into(),
            w.meta_path(table).display().to_string(),
            "--catalog-name".into(),
            catalog.into(),
        ],
    );
    assert!(
        r.status.success(),
        "PyIceberg/DuckDB disagree with the expected state of {table} ({label}):\n{}",
        r.describe()
    );
}

#[test]
fn spark_reads_every_table_and_snapshot() {
    let started = Instant::now();
    let w = Work::new("spark_read");
    // Typed Parquet (uint64, decimals, binary, NaN-free floats, far dates), key changes through
    // before-images, bucket and day partitions.
    w.generate(
        "synthetic",
        &[
            "--format",
            "parquet",
            "--before-image",
            "--pk-update-ratio",
            "0.2",
            "--partition-by",
            "bucket(8, order_id)",
            "--partition-by",
            "day(updated_at)",
            "--asof",
            "--rows",
            "300",
            "--cdc-files",
            "4",
            "--cdc-rows",
            "60",
            "--seed",
            "81",
        ],
    );
    // CSV with inferred types, a column added by a later file, rows moving between identity
    // partitions, month partitions.
    w.generate(
        "synthetic",
        &[
            "--schema",
            "shop",
            "--table",
            "events",
            "--partition-move",
            "--add-column-at-file",
            "2",
            "--null-value",
            "NULL",
            "--partition-by",
            "status",
            "--partition-by",
            "month(updated_at)",
            "--asof",
            "--rows",
            "300",
            "--cdc-files",
            "4",
            "--cdc-rows",
            "60",
            "--seed",
            "82",
        ],
    );
    w.generate("product", &[]);
    w.set_default(&format!("drop_columns = [\"{TIME_COLUMN}\"]"));
    w.ingest().assert_success();

    let mut sp = spark();
    // The catalog name JdbcCatalog looks up is the Spark catalog's: `default` is ours.
    sp.catalog("default", &w.wh());
    let tables = ["shop.orders", "shop.events", "sales.product"];
    for table in tables {
        let expected = without(&w.expected(table), TIME_COLUMN);
        w.assert_table_rows(table, &expected, "final");
        let src = json!({"table": format!("`default`.{table}")});
        assert_spark(&mut sp, &w, table, src, &expected, "final");
    }
    // Without a catalog: the metadata file itself.
    let (ns, t) = ("shop", "orders");
    let loc = sp.sql(&[&format!(
        "SELECT file FROM `default`.{ns}.{t}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    )])[0][0]["file"]
        .as_str()
        .unwrap()
        .to_string();
    let expected = without(&w.expected("shop.orders"), TIME_COLUMN);
    assert_spark(
        &mut sp,
        &w,
        "shop.orders",
        json!({"metadata": loc}),
        &expected,
        "by-path",
    );

    // Time travel: every snapshot, in Spark as in our scan and the generator's state.
    let mut snapshots = 0;
    for table in ["shop.orders", "shop.events"] {
        let meta = w.meta(table);
        let steps = w.asof(table);
        let hist = w.history(table);
        assert_eq!(hist.len(), steps.len(), "one snapshot per file: {hist:?}");
        for snap in &hist {
            let (_, step) = step_of_snapshot(snap, &steps);
            let id = snap["snapshot_id"].as_i64().unwrap();
            let expected = without(&step.rows, TIME_COLUMN);
            let ours = w.scan(table, &["--snapshot", &id.to_string()]);
            assert_rows(&format!("scan --snapshot {id}"), &meta, &expected, &ours);
            let src = json!({"table": format!("`default`.{table}"), "snapshot_id": id});
            assert_spark(
                &mut sp,
                &w,
                table,
                src,
                &expected,
                &format!("snapshot-{id}"),
            );
            snapshots += 1;
        }
    }
    eprintln!(
        "spark-measure: read {} tables and {snapshots} snapshots, every one as expected; {:.1}s (Spark busy {:.1}s in total so far)",
        tables.len(),
        started.elapsed().as_secs_f64(),
        sp.busy_secs
    );
}

/// A table whose columns widen as DMS files arrive (`tests/common/widen.rs`: int → long, its
/// key too, float → double, decimal(9,2) → decimal(12,2), partitioned by a truncate of a
/// widened column, manifests unmerged; then `rewrite-manifests`, `compact` and one more file):
/// Spark reads every snapshot, before the widening and after, as the model and our scan do.
#[test]
fn spark_reads_every_snapshot_of_a_widened_table() {
    use widen_support::{Calls, Case, Format, TABLE, build_in};
    // The file's tests share one Spark session: a catalog name of its own.
    const CATALOG: &str = "widen";
    let started = Instant::now();
    let w = Work::new("spark_widen");
    let case = Case {
        name: "spark",
        format: Format::Parquet,
        calls: Calls::Separate,
        key_widens: true,
        merge: false,
        partition_by: Some("truncate(1000000, customer_id)"),
    };
    let snapshots = build_in(&w, CATALOG, &case, &mut |rows, label| {
        let meta = w.meta(TABLE);
        let ours = scan(&w, CATALOG, TABLE, &[]);
        assert_rows(&format!("scan ({label})"), &meta, rows, &ours);
    });
    let meta = w.meta(TABLE);
    let mut sp = spark();
    sp.catalog(CATALOG, &w.wh());
    for s in &snapshots {
        let id = s.id.to_string();
        let ours = scan(&w, CATALOG, TABLE, &["--snapshot", &id]);
        assert_rows(&format!("scan --snapshot {id}"), &meta, &s.rows, &ours);
        let src = json!({"table": format!("{CATALOG}.{TABLE}"), "snapshot_id": s.id});
        assert_spark(&mut sp, &w, TABLE, src, &s.rows, &format!("snapshot-{id}"));
    }
    let last = &snapshots[snapshots.len() - 1].rows;
    let src = json!({"table": format!("{CATALOG}.{TABLE}")});
    assert_spark(&mut sp, &w, TABLE, src, last, "current");
    eprintln!(
        "spark-measure: read {} snapshots of a widened table, every one as expected; {:.1}s",
        snapshots.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The rows after Spark's merges, from the rows before them (the merges' own semantics,
/// computed here, not read back from Spark).
struct Merges {
    /// copy-on-write: matched keys get `note` and `version + 1000`; an unmatched key is
    /// inserted with only `order_id`, `note`, `version = 1`.
    cow: Vec<(i64, &'static str)>,
    /// merge-on-read: matched keys get `amount`, or are deleted where it is NULL.
    mor: Vec<(i64, Option<&'static str>)>,
}

const SPARK_INSERTED_KEY: i64 = 900_000_001;

impl Merges {
    fn pick(rows: &[Value]) -> Merges {
        let key = |i: usize| rows[i * rows.len() / 9]["order_id"].as_i64().unwrap();
        Merges {
            cow: vec![
                (key(0), "spark cow 1"),
                (key(1), "spark cow 2"),
                (key(2), "spark, \"cow\" 3"),
                (SPARK_INSERTED_KEY, "spark insert"),
            ],
            mor: vec![
                (key(3), Some("1.23")),
                (key(4), Some("99999.99")),
                (key(5), None),
                (key(6), None),
            ],
        }
    }

    fn statements(&self, t: &str) -> Vec<String> {
        let cow: Vec<String> = self
            .cow
            .iter()
            .map(|(k, n)| format!("({k}L, '{}')", n.replace('\'', "\\'")))
            .collect();
        let mor: Vec<String> = self
            .mor
            .iter()
            .map(|(k, a)| match a {
                Some(a) => format!("({k}L, CAST({a} AS DECIMAL(12,2)))"),
                None => format!("({k}L, CAST(NULL AS DECIMAL(12,2)))"),
            })
            .collect();
        vec![
            format!(
                "ALTER TABLE {t} SET TBLPROPERTIES ('write.merge.mode'='copy-on-write', \
                 'write.update.mode'='copy-on-write', 'write.delete.mode'='copy-on-write')"
            ),
            format!(
                "MERGE INTO {t} t USING (SELECT * FROM VALUES {} AS s(order_id, note)) s \
                 ON t.order_id = s.order_id \
                 WHEN MATCHED THEN UPDATE SET t.note = s.note, t.version = t.version + 1000 \
                 WHEN NOT MATCHED THEN INSERT (order_id, note, version) VALUES (s.order_id, s.note, 1L)",
                cow.join(", ")
            ),
            format!(
                "ALTER TABLE {t} SET TBLPROPERTIES ('write.merge.mode'='merge-on-read', \
                 'write.update.mode'='merge-on-read', 'write.delete.mode'='merge-on-read')"
            ),
            format!(
                "MERGE INTO {t} t USING (SELECT * FROM VALUES {} AS s(order_id, amount)) s \
                 ON t.order_id = s.order_id \
                 WHEN MATCHED AND s.amount IS NULL THEN DELETE \
                 WHEN MATCHED THEN UPDATE SET t.amount = s.amount",
                mor.join(", ")
            ),
        ]
    }

    fn apply(&self, rows: &[Value], columns: &[String]) -> Vec<Value> {
        let mut by_key: BTreeMap<i64, Value> = rows
            .iter()
            .map(|r| (r["order_id"].as_i64().unwrap(), r.clone()))
            .collect();
        for (k, note) in &self.cow {
            match by_key.get_mut(k) {
                Some(r) => {
                    r["note"] = json!(note);
                    r["version"] = json!(r["version"].as_i64().unwrap() + 1000);
                }
                None => {
                    let mut r: serde_json::Map<String, Value> =
                        columns.iter().map(|c| (c.clone(), Value::Null)).collect();
                    r.insert("order_id".into(), json!(k));
                    r.insert("note".into(), json!(note));
                    r.insert("version".into(), json!(1));
                    by_key.insert(*k, Value::Object(r));
                }
            }
        }
        for (k, amount) in &self.mor {
            match amount {
                None => {
                    by_key.remove(k);
                }
                Some(a) => {
                    if let Some(r) = by_key.get_mut(k) {
                        r["amount"] = json!(a);
                    }
                }
            }
        }
        by_key.into_values().collect()
    }
}

/// Keys whose row the given steps change (inserted, updated, deleted, moved): a DMS row image
/// replaces whatever another writer made of that key.
fn keys_changed(before: &[Value], steps: &[Vec<Value>]) -> BTreeSet<i64> {
    let index = |rows: &[Value]| -> BTreeMap<i64, Value> {
        rows.iter()
            .map(|r| (r["order_id"].as_i64().unwrap(), r.clone()))
            .collect()
    };
    let mut prev = index(before);
    let mut out = BTreeSet::new();
    for s in steps {
        let next = index(s);
        for k in prev.keys().chain(next.keys()) {
            if prev.get(k) != next.get(k) {
                out.insert(*k);
            }
        }
        prev = next;
    }
    out
}

/// The table after the pending DMS files on top of `after_spark`: their row images replace
/// what Spark made of their keys, every other key keeps Spark's values.
fn after_new_dms(w: &Work, table: &str, initial: &[Value], after_spark: &[Value]) -> Vec<Value> {
    let pending: Vec<Vec<Value>> = w
        .asof(table)
        .iter()
        .filter(|s| s.pending)
        .map(|s| without(&s.rows, TIME_COLUMN))
        .collect();
    let changed = keys_changed(initial, &pending);
    let dms_final: BTreeMap<i64, &Value> = pending
        .last()
        .unwrap()
        .iter()
        .map(|r| (r["order_id"].as_i64().unwrap(), r))
        .collect();
    let mut by_key: BTreeMap<i64, Value> = after_spark
        .iter()
        .map(|r| (r["order_id"].as_i64().unwrap(), r.clone()))
        .filter(|(k, _)| !changed.contains(k))
        .collect();
    for k in &changed {
        if let Some(r) = dms_final.get(k) {
            by_key.insert(*k, (*r).clone());
        }
    }
    by_key.into_values().collect()
}

/// Every location Spark's view of the table references: data and delete files of every
/// snapshot, manifests, manifest lists, the metadata log.
fn spark_references(sp: &mut Spark, t: &str) -> BTreeSet<String> {
    let r = sp.sql(&[
        &format!("SELECT file_path AS p FROM {t}.all_files"),
        &format!("SELECT path AS p FROM {t}.all_manifests"),
        &format!("SELECT manifest_list AS p FROM {t}.snapshots"),
        &format!("SELECT file AS p FROM {t}.metadata_log_entries"),
    ]);
    r.iter()
        .flatten()
        .map(|v| v["p"].as_str().unwrap().to_string())
        .collect()
}

fn local_path(location: &str) -> PathBuf {
    let p = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location);
    PathBuf::from(p)
}

#[track_caller]
fn assert_all_exist(locations: &BTreeSet<String>, what: &str) {
    let missing: Vec<&String> = locations
        .iter()
        .filter(|l| !local_path(l).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} locations {what} were deleted: {missing:?}",
        missing.len(),
        locations.len()
    );
}

/// Spark rewrites, merges, expires and removes orphans on our table; then (with `more_dms`)
/// our ingest applies the DMS files that came since; then our compaction, `orphans --delete`
/// and `expire` run. After each step the table equals the expected state.
fn foreign_then_ours(name: &str, catalog: &str, more_dms: bool, format_version: u8) {
    let started = Instant::now();
    let table = "shop.orders";
    let w = Work::new(name);
    w.generate(
        "synthetic",
        &[
            "--format",
            "parquet",
            "--before-image",
            "--pk-update-ratio",
            "0.1",
            "--partition-by",
            "bucket(4, order_id)",
            "--rows",
            "400",
            "--cdc-files",
            "6",
            "--cdc-rows",
            "60",
            "--pending-from-file",
            "4",
            "--asof",
            "--seed",
            "83",
        ],
    );
    w.set_default(&format!("drop_columns = [\"{TIME_COLUMN}\"]"));
    w.set_default(&format!("format_version = {format_version}"));
    ingest(&w, catalog).assert_success();
    let meta = w.meta(table);
    let columns: Vec<String> = meta
        .columns
        .keys()
        .filter(|c| *c != TIME_COLUMN)
        .cloned()
        .collect();
    let initial = without(&w.expected_initial(table), TIME_COLUMN);
    assert_rows(
        "scan after our ingest",
        &meta,
        &initial,
        &scan(&w, catalog, table, &[]),
    );

    // Iceberg Java's writers and maintenance.
    let mut sp = spark();
    sp.catalog(catalog, &w.wh());
    let t = format!("{catalog}.{table}");
    let merges = Merges::pick(&initial);
    let spark_started = Instant::now();
    let calls = [
        format!(
            "CALL {catalog}.system.rewrite_position_delete_files(table => '{table}', options => map('rewrite-all', 'true'))"
        ),
        format!(
            "CALL {catalog}.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))"
        ),
    ];
    let mut statements: Vec<String> = calls.to_vec();
    statements.extend(merges.statements(&t));
    statements.push(format!(
        "CALL {catalog}.system.expire_snapshots(table => '{table}', \
         older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    ));
    let refs: Vec<&str> = statements.iter().map(String::as_str).collect();
    let results = sp.sql(&refs);
    let removed_by_spark = sp.remove_orphans(&t);
    let spark_secs = spark_started.elapsed().as_secs_f64();
    eprintln!(
        "spark-measure: {name}: {} (rewrite deletes), {} (rewrite data), 2 merges, {} (expire), {} orphans removed by Spark; {spark_secs:.1}s",
        results[0].first().cloned().unwrap_or_default(),
        results[1].first().cloned().unwrap_or_default(),
        results
            .last()
            .and_then(|r| r.first())
            .cloned()
            .unwrap_or_default(),
        removed_by_spark.len()
    );
    let after_spark = merges.apply(&initial, &columns);
    assert_spark(
        &mut sp,
        &w,
        table,
        json!({"table": t}),
        &after_spark,
        "after-spark",
    );
    assert_rows(
        "scan after Spark's writes",
        &meta,
        &after_spark,
        &scan(&w, catalog, table, &[]),
    );
    assert_readers(&w, catalog, table, &after_spark, "after-spark");
    let spark_refs = spark_references(&mut sp, &t);
    drop(sp);

    let mut expected = after_spark.clone();
    if more_dms {
        let pending = w.asof(table).iter().filter(|s| s.pending).count();
        expected = after_new_dms(&w, table, &initial, &after_spark);
        let ids_before_ingest = (format_version >= 3).then(|| spark_row_ids(&mut spark(), &t));
        w.promote_pending();
        let r = ingest(&w, catalog).assert_success();
        if let Some(before) = ids_before_ingest {
            // A row our ingest did not change keeps its id (the files it is in were filtered
            // and merged into new manifests by our commits).
            let now = spark_row_ids(&mut spark(), &t);
            let key = |r: &Value| r["order_id"].as_i64().unwrap();
            let untouched: Vec<i64> = after_spark
                .iter()
                .filter(|r| expected.iter().any(|e| key(e) == key(r) && e == *r))
                .map(key)
                .collect();
            assert!(!untouched.is_empty());
            for k in untouched {
                assert_eq!(now.get(&k), before.get(&k), "_row_id of untouched key {k}");
            }
        }
        let applied_before = meta.files.len() - pending;
        let want = format!("{pending} files applied, {applied_before} skipped (already applied)");
        assert!(
            r.stdout.contains(&want),
            "after Spark's expire_snapshots left none of our snapshots, our ingest must apply \
             only the {} new DMS files and skip the {applied_before} applied before (`{want}`): \
             re-applying history reverts the rows Spark changed\n{}",
            pending,
            r.describe()
        );
        assert_rows(
            "scan after our ingest of new files",
            &meta,
            &expected,
            &scan(&w, catalog, table, &[]),
        );
        // Spark's merge-on-read deletes and ours: a data file our ingest deleted rows of keeps
        // one delete file, holding both.
        let tables = cli(&w, catalog, &["tables", "--format", "json"]).assert_success();
        let cost = parse_json_lines(&tables.stdout, "tables")
            .into_iter()
            .find(|l| l["table"] == table)
            .map(|l| l["read_cost"].clone())
            .unwrap_or_default();
        assert!(
            cost["max_deletes_per_data_file"]
                .as_u64()
                .is_some_and(|n| n <= 1),
            "{cost}"
        );
    }
    let mut sp = spark();
    assert_eq!(
        sp.sql(&[&format!("SHOW TBLPROPERTIES {t} ('format-version')")])[0][0]["value"],
        format_version.to_string()
    );
    // v3: Spark's deletion vectors and ours (never a position-delete file), at most one per
    // data file; and every row's id, which our compaction must keep.
    let row_ids_before = (format_version >= 3).then(|| {
        assert_one_vector_per_data_file(&mut sp, &t);
        spark_row_ids(&mut sp, &t)
    });
    drop(sp);

    // Our maintenance.
    let (r, c) = maintain(&w, catalog, "compact", table, &[]);
    r.assert_success();
    if let Some(before) = &row_ids_before {
        let mut sp = spark();
        assert_eq!(
            &spark_row_ids(&mut sp, &t),
            before,
            "our compaction keeps every row's _row_id"
        );
    }
    assert_rows(
        "scan after our compact",
        &meta,
        &expected,
        &scan(&w, catalog, table, &[]),
    );
    let (r, o) = maintain(
        &w,
        catalog,
        "orphans",
        table,
        &["--min-age-hours", "0", "--delete"],
    );
    let r = r.assert_success();
    assert!(o["refused"].is_null(), "{o}\n{}", r.describe());
    assert_all_exist(&spark_refs, "Spark's metadata references after its expiry");
    let (r, e) = maintain(
        &w,
        catalog,
        "expire",
        table,
        &["--older-than-hours", "0", "--retain-last", "1"],
    );
    r.assert_success();

    // Everyone reads the same table, and nothing referenced is missing.
    assert_rows(
        "scan at the end",
        &meta,
        &expected,
        &scan(&w, catalog, table, &[]),
    );
    assert_readers(&w, catalog, table, &expected, "end");
    let mut sp = spark();
    assert_spark(&mut sp, &w, table, json!({"table": t}), &expected, "end");
    let now_refs = spark_references(&mut sp, &t);
    assert_all_exist(&now_refs, "the table's metadata references at the end");
    let snaps = sp.sql(&[&format!("SELECT snapshot_id FROM {t}.snapshots")]);
    for s in &snaps[0] {
        let id = s["snapshot_id"].as_i64().unwrap();
        let ours = scan(&w, catalog, table, &["--snapshot", &id.to_string()]);
        let src = json!({"table": t, "snapshot_id": id});
        assert_spark(&mut sp, &w, table, src, &ours, &format!("snapshot-{id}"));
    }
    eprintln!(
        "spark-measure: {name}: after Spark's writes and expiry{} our compact ({} -> {} data files), orphans ({} deleted), expire ({} snapshots): {} rows equal in Spark, PyIceberg, DuckDB and our scan; {} locations Spark referenced all kept; {:.1}s",
        if more_dms {
            ", our ingest of new files,"
        } else {
            ","
        },
        c["data_files_before"],
        c["data_files_after"],
        o["deleted"],
        e["snapshots_expired"].as_array().map_or(0, Vec::len),
        expected.len(),
        spark_refs.len(),
        started.elapsed().as_secs_f64()
    );
}

/// A v3 table's live deletes as Spark lists them: deletion vectors only (never a
/// position-delete file), at most one per data file.
fn assert_one_vector_per_data_file(sp: &mut Spark, t: &str) {
    let formats = sp.sql(&[&format!(
        "SELECT DISTINCT file_format AS f FROM {t}.delete_files"
    )]);
    let formats: Vec<&str> = formats[0].iter().filter_map(|r| r["f"].as_str()).collect();
    assert!(
        formats.iter().all(|f| *f == "PUFFIN"),
        "deletion vectors only: {formats:?}"
    );
    let per_file = sp.sql(&[&format!(
        "SELECT max(n) AS n FROM (SELECT referenced_data_file, count(*) AS n \
         FROM {t}.delete_files GROUP BY referenced_data_file)"
    )]);
    assert!(
        per_file[0][0]["n"].as_i64().unwrap_or(0) <= 1,
        "{per_file:?}"
    );
}

/// Each row's `_row_id` as Spark reads it (v3), by key; every id unique.
fn spark_row_ids(sp: &mut Spark, t: &str) -> BTreeMap<i64, i64> {
    let rows = sp.sql(&[&format!("SELECT order_id, _row_id FROM {t}")]);
    let ids: BTreeMap<i64, i64> = rows[0]
        .iter()
        .map(|r| {
            let id = r["_row_id"]
                .as_i64()
                .unwrap_or_else(|| panic!("no _row_id: {r}"));
            (r["order_id"].as_i64().unwrap(), id)
        })
        .collect();
    let unique: BTreeSet<i64> = ids.values().copied().collect();
    assert_eq!(unique.len(), rows[0].len(), "_row_id values repeat");
    ids
}

#[test]
fn spark_writes_and_expiry_then_our_maintenance() {
    foreign_then_ours("spark_maintain", "spark_maint", false, 2);
}

#[test]
fn spark_writes_and_expiry_then_our_ingest_goes_on() {
    foreign_then_ours("spark_ingest", "spark_ingest", true, 2);
}

/// The same on a v3 table (ours, `format_version = 3`): Spark's merge-on-read writes deletion
/// vectors into it, its maintenance rewrites it, our ingest goes on (merging Spark's vectors
/// with ours), our compaction keeps every row's `_row_id`.
#[test]
fn v3_spark_writes_and_expiry_then_our_ingest_goes_on() {
    foreign_then_ours("spark_v3_ingest", "spark_v3", true, 3);
}

#[test]
fn files_spark_imports_from_elsewhere_are_never_deleted() {
    // Spark's add_files imports Parquet files where they are, outside the table's folder: our
    // `orphans` cannot match such a location to its listing, so it refuses to delete; `expire`
    // keeps them once no snapshot needs them.
    let catalog = "imports";
    let table = "sales.product";
    let w = Work::new("spark_imports");
    w.generate("product", &[]);
    ingest(&w, catalog).assert_success();
    let mut sp = spark();
    sp.catalog(catalog, &w.wh());
    let t = format!("{catalog}.{table}");
    let outside = w.dir.join("imported");
    sp.sql(&[
        &format!(
            "INSERT OVERWRITE DIRECTORY '{}' USING parquet \
             SELECT 900 AS product_id, 'Imported' AS category, 'From elsewhere' AS product_name, \
             CAST(1 AS BIGINT) AS quantity_available, \
             TIMESTAMP_NTZ'2022-03-03 00:00:00' AS last_update_time",
            outside.display()
        ),
        &format!(
            "CALL {catalog}.system.add_files(table => '{table}', source_table => '`parquet`.`{}`')",
            outside.display()
        ),
    ]);
    let imported: Vec<PathBuf> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    assert!(!imported.is_empty());
    let expected = w.expected(table);
    let (r, o) = maintain(
        &w,
        catalog,
        "orphans",
        table,
        &["--min-age-hours", "0", "--delete"],
    );
    assert!(
        !r.status.success(),
        "orphans --delete did not refuse:\n{}",
        r.describe()
    );
    let why = o["refused"].as_str().unwrap_or_default();
    assert!(
        why.contains("outside its folder") && why.contains("imported"),
        "{o}"
    );
    assert!(
        r.stderr.contains("refusing to delete orphan files"),
        "{}",
        r.describe()
    );
    assert_eq!(o["deleted"], 0, "{o}");
    // Spark deletes the imported row (copy-on-write: the file leaves the table); expiring the
    // snapshots that had it keeps the file, which is not the table's. A tag Spark puts on our
    // first snapshot keeps that snapshot.
    let hist = parse_json_lines(
        &cli(&w, catalog, &["history", table, "--format", "json"])
            .assert_success()
            .stdout,
        "history",
    );
    let first = hist[0]["snapshot_id"].as_i64().unwrap();
    sp.sql(&[
        &format!("ALTER TABLE {t} SET TBLPROPERTIES ('write.delete.mode'='copy-on-write')"),
        &format!("DELETE FROM {t} WHERE product_id = 900"),
        &format!("ALTER TABLE {t} CREATE TAG first_load AS OF VERSION {first}"),
    ]);
    drop(sp);
    let (r, e) = maintain(
        &w,
        catalog,
        "expire",
        table,
        &["--older-than-hours", "0", "--retain-last", "1"],
    );
    r.assert_success();
    for p in &imported {
        assert!(p.exists(), "{} was deleted: {e}", p.display());
    }
    let outside_listed = e["files_outside_table"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        outside_listed
            .iter()
            .any(|f| f.as_str().unwrap_or("").contains("imported")),
        "{e}"
    );
    assert_rows(
        "scan",
        &w.meta(table),
        &expected,
        &scan(&w, catalog, table, &[]),
    );
    let expired: Vec<i64> = e["snapshots_expired"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_i64().unwrap())
        .collect();
    assert!(!expired.is_empty() && !expired.contains(&first), "{e}");
    let mut sp = spark();
    assert_spark(&mut sp, &w, table, json!({"table": t}), &expected, "end");
    let src = json!({"table": t, "snapshot_id": first});
    assert_spark(&mut sp, &w, table, src, &w.asof(table)[0].rows, "tagged");
}

/// The product table as Spark creates it, in format version `v` (JdbcCatalog `catalog` on our
/// catalog.db, which Spark creates).
fn spark_made_product(sp: &mut Spark, w: &Work, catalog: &str, v: u8) {
    std::fs::create_dir_all(w.wh()).unwrap();
    sp.ok(
        json!({"op": "catalog", "name": catalog, "warehouse": w.wh(),
                 "options": {"jdbc.init-catalog-tables": "true"}}),
    );
    sp.sql(&[
        &format!("CREATE NAMESPACE IF NOT EXISTS {catalog}.sales"),
        &format!(
            "CREATE TABLE {catalog}.sales.product (product_id BIGINT, category STRING, \
             product_name STRING, quantity_available BIGINT, last_update_time TIMESTAMP_NTZ) \
             USING iceberg TBLPROPERTIES ('format-version'='{v}')"
        ),
    ]);
}

fn format_version(sp: &mut Spark, catalog: &str) -> String {
    let q = format!("SHOW TBLPROPERTIES {catalog}.sales.product ('format-version')");
    let rows = sp.sql(&[&q]);
    rows[0][0]["value"].as_str().unwrap_or_default().to_string()
}

/// Tables other engines made in other format versions (issues 25 and 36): a v1 table Spark
/// created is upgraded to v2 by our first commit, a v3 table Spark wrote deletion vectors into
/// stays v3 and gets ours; each reads as the DMS files say in Spark, our scan, PyIceberg and
/// DuckDB.
#[test]
fn spark_made_v1_and_v3_tables_are_continued() {
    let mut sp = spark();
    let table = "sales.product";

    let (w, catalog) = (Work::new("spark_v1"), "made_v1");
    w.generate("product", &[]);
    spark_made_product(&mut sp, &w, catalog, 1);
    assert_eq!(format_version(&mut sp, catalog), "1");
    ingest(&w, catalog).assert_success();
    assert_eq!(
        format_version(&mut sp, catalog),
        "2",
        "our first commit upgrades the table"
    );
    let expected = w.expected(table);
    // Spark's columns are optional, so they cannot be the table's identifier fields: the key
    // lives in our config, and `scan` (which sorts by identifier fields) leaves rows unsorted.
    let mut actual = scan(&w, catalog, table, &[]);
    actual.sort_by_key(|r| r["product_id"].as_i64());
    assert_rows("scan (v1 upgraded)", &w.meta(table), &expected, &actual);
    assert_readers(&w, catalog, table, &expected, "v1-upgraded");
    let src = json!({"table": format!("{catalog}.{table}")});
    assert_spark(&mut sp, &w, table, src, &expected, "v1-upgraded");

    // Spark wrote the table's location as `file:/…` (one slash): maintenance must still see
    // its files. Expire deletes what only expired snapshots held, really (not just listed) ...
    let location = sp.sql(&[&format!("DESCRIBE TABLE EXTENDED {catalog}.{table}")])[0]
        .iter()
        .find(|r| r["col_name"] == "Location")
        .and_then(|r| r["data_type"].as_str())
        .unwrap()
        .to_string();
    assert!(
        location.starts_with("file:/") && !location.starts_with("file://"),
        "{location}"
    );
    // Compaction rewrites the table's files, so the snapshots expire leaves them to.
    maintain(&w, catalog, "compact", table, &[])
        .0
        .assert_success();
    let (r, e) = maintain(
        &w,
        catalog,
        "expire",
        table,
        &["--older-than-hours", "0", "--retain-last", "1"],
    );
    r.assert_success();
    let deleted: Vec<&str> = e["files_deleted"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    assert!(deleted.iter().any(|f| f.ends_with(".parquet")), "{e}");
    for f in &deleted {
        let path = f.trim_start_matches("file:");
        assert!(
            !std::path::Path::new(path).exists(),
            "{f} is still there: {e}"
        );
    }
    assert_readers(&w, catalog, table, &expected, "v1-expired");
    // ... and orphans finds a stray file in its data folder and deletes it.
    let stray =
        std::path::Path::new(location.trim_start_matches("file:")).join("data/stray.parquet");
    std::fs::write(&stray, b"not referenced").unwrap();
    let (r, o) = maintain(
        &w,
        catalog,
        "orphans",
        table,
        &["--min-age-hours", "0", "--delete"],
    );
    r.assert_success();
    let listed: Vec<&str> = o["orphans"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(
        listed.iter().any(|p| p.ends_with("data/stray.parquet")),
        "{o}"
    );
    assert!(!stray.exists(), "{o}");
    assert_readers(&w, catalog, table, &expected, "v1-orphans");

    // A v3 table Spark made and wrote deletion vectors into: our ingest continues it (its
    // vectors merged into ours, one per data file), and every reader reads the same rows.
    let (w, catalog) = (Work::new("spark_v3"), "made_v3");
    w.generate("product", &[]);
    spark_made_product(&mut sp, &w, catalog, 3);
    let t = format!("{catalog}.{table}");
    sp.sql(&[
        &format!(
            "ALTER TABLE {t} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read', \
             'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"
        ),
        &format!(
            "INSERT INTO {t} VALUES (1, 'spark', 'kept', 1, TIMESTAMP_NTZ '2022-03-02 11:00:00'), \
             (2, 'spark', 'deleted', 2, TIMESTAMP_NTZ '2022-03-02 11:00:00'), \
             (3, 'spark', 'updated', 3, TIMESTAMP_NTZ '2022-03-02 11:00:00')"
        ),
        &format!("DELETE FROM {t} WHERE product_id = 2"),
        &format!("UPDATE {t} SET quantity_available = 30 WHERE product_id = 3"),
    ]);
    let spark_dvs = sp.sql(&[&format!(
        "SELECT count(*) AS n FROM {t}.delete_files WHERE file_format = 'PUFFIN'"
    )]);
    assert!(spark_dvs[0][0]["n"].as_i64().unwrap() >= 1, "{spark_dvs:?}");
    // Its rows are Spark's, none from a DMS file: every DMS file applies on top of them.
    cli(&w, catalog, &["mark-applied", table, "--none"]).assert_success();
    ingest(&w, catalog).assert_success();
    assert_eq!(format_version(&mut sp, catalog), "3");
    let row = |id: i64, name: &str, qty: i64| {
        json!({"product_id": id, "category": "spark", "product_name": name,
               "quantity_available": qty, "last_update_time": "2022-03-02 11:00:00.000000"})
    };
    let mut expected = vec![row(1, "kept", 1), row(3, "updated", 30)];
    expected.extend(w.expected(table));
    let mut actual = scan(&w, catalog, table, &[]);
    actual.sort_by_key(|r| r["product_id"].as_i64());
    assert_rows("scan (v3 Spark made)", &w.meta(table), &expected, &actual);
    assert_readers(&w, catalog, table, &expected, "v3-spark-made");
    assert_spark(
        &mut sp,
        &w,
        table,
        json!({"table": t}),
        &expected,
        "v3-spark-made",
    );
    assert_one_vector_per_data_file(&mut sp, &t);
}

/// Iceberg Java's RESTCatalog on a table we commit through an Iceberg REST catalog written by
/// others (rustberg, `tests/common/rest.rs`): Spark reads the final table and the first
/// snapshot as the DMS files say; Spark's own rewrite commits through the same server, and
/// our scan, PyIceberg's RestCatalog and DuckDB's REST client still read the same rows.
#[test]
fn spark_reads_and_rewrites_a_table_we_commit_through_a_rest_catalog() {
    let table = "shop.orders";
    let w = Work::new("spark_rest");
    w.generate(
        "synthetic",
        &[
            "--rows",
            "200",
            "--cdc-files",
            "4",
            "--cdc-rows",
            "60",
            "--seed",
            "912",
        ],
    );
    let server = common::rest::Rustberg::start(&w);
    server.ingest(&w, &[w.dms()]).assert_success();
    let expected = w.expected(table);
    server.assert_table(&w, table, &expected);

    let mut sp = spark();
    let catalog = "rest_rb";
    sp.ok(json!({"op": "rest_catalog", "name": catalog, "uri": server.uri, "token": server.token}));
    let t = format!("{catalog}.{table}");
    assert_spark(
        &mut sp,
        &w,
        table,
        json!({"table": t}),
        &expected,
        "rest-final",
    );
    let history = parse_json_lines(
        &server
            .cli(&["history", table, "--format", "json"])
            .assert_success()
            .stdout,
        "history",
    );
    let first = history[0]["snapshot_id"].as_i64().unwrap();
    let src = json!({"table": t, "snapshot_id": first});
    assert_spark(
        &mut sp,
        &w,
        table,
        src,
        &w.asof(table)[0].rows,
        "rest-first",
    );

    sp.sql(&[&format!(
        "CALL {catalog}.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))"
    )]);
    let after = server
        .cli(&["history", table, "--format", "json"])
        .assert_success();
    assert_eq!(
        parse_json_lines(&after.stdout, "history").len(),
        history.len() + 1,
        "Spark's rewrite is one more snapshot, committed through the server"
    );
    server.assert_table(&w, table, &expected);
    assert_spark(
        &mut sp,
        &w,
        table,
        json!({"table": t}),
        &expected,
        "rest-rewritten",
    );
}
