//! Commit cost as the table's snapshot history grows (issue 24, item 5).
//!
//! `cargo bench --bench history -- [--points 100,1000,10000] [--commits 20] [--rows 50]
//!  [--real-history 2000] [--compact-every 60] [--json out.json] [--md out.md] [--label text]`
//!
//! One table fed as a DMS table is: a full load, then change files of `--rows` rows (70%
//! updates, 20% inserts, 10% deletes), one snapshot per file, through `Ingest` (the library code
//! the CLI and the Lambda run; one warm process, as a warm Lambda), compacted every
//! `--compact-every` files as the hourly compaction function keeps a table fed one file a
//! minute. The history is built by real commits up to `--real-history` snapshots (by then the
//! applied-file record is full: it keeps 2,000 change files by default); beyond that it is
//! padded quickly: the bench appends snapshots to the table's metadata.json (copies of the
//! current snapshot, so ~1 KB each like a real one, chained by parent id with increasing
//! sequence numbers and snapshot-log entries, all naming the current manifest list) and swaps
//! the catalog pointer to it. At each point: one compaction, one warm-up commit, then
//! `--commits` measured commits, each a real change file through a real commit.
//!
//! Reported per point: medians of the whole `Ingest::execute` and of its commit step, with the
//! metadata.json serialise+write and read+parse inside them apart (the library's counters,
//! `dms2iceberg::metadata_io`), the rest, the cost of loading the last metadata.json in a process
//! that does not have it cached, and its size. The table's row count is checked against the
//! generator's bookkeeping at the end.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use dms2iceberg::catalog::{Catalog, SqliteCatalog};
use dms2iceberg::config::Config;
use dms2iceberg::ops::compact::Compact;
use dms2iceberg::ops::discover::discover;
use dms2iceberg::ops::ingest::{Ingest, local_inputs};
use dms2iceberg::ops::maintain::ExpireSnapshots;
use dms2iceberg::ops::parse_ident;
use dms2iceberg::ops::scan::Scan;
use iceberg::spec::TableMetadata;
use serde_json::{Value, json};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const HEADER: &str = "Op,order_id,customer_id,status,amount,updated_at\n";
const LOAD_ROWS: u64 = 1_000;

fn row(out: &mut String, op: char, id: u64, rng: &mut Rng, f: u64) {
    let _ = writeln!(
        out,
        "{op},{id},{},NEW,{}.{:02},2022-03-02 {:02}:{:02}:{:02}.000000",
        rng.below(100_000),
        rng.below(10_000),
        rng.below(100),
        10 + f / 3600,
        (f / 60) % 60,
        f % 60
    );
}

/// Writes a full load and `files` change files; returns the live row count after each file
/// (the load first).
fn generate(dms: &Path, files: u64, rows: u64) -> std::io::Result<Vec<usize>> {
    let table = dms.join("shop/orders");
    std::fs::create_dir_all(&table)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut s = String::from(HEADER);
    let mut live: BTreeSet<u64> = BTreeSet::new();
    for i in 0..LOAD_ROWS {
        row(&mut s, 'I', i * 2, &mut rng, 0);
        live.insert(i * 2);
    }
    std::fs::write(table.join("LOAD00000001.csv"), s)?;
    let mut counts = vec![live.len()];
    let mut next_odd = 1u64;
    for f in 0..files {
        let mut s = String::from(HEADER);
        let mut touched = BTreeSet::new();
        for _ in 0..rows {
            let p = rng.below(100);
            if p < 20 {
                row(&mut s, 'I', next_odd, &mut rng, f + 1);
                live.insert(next_odd);
                next_odd += 2;
                continue;
            }
            let id = rng.below(LOAD_ROWS) * 2;
            if !live.contains(&id) || !touched.insert(id) {
                continue;
            }
            if p < 90 {
                row(&mut s, 'U', id, &mut rng, f + 1);
            } else {
                row(&mut s, 'D', id, &mut rng, f + 1);
                live.remove(&id);
            }
        }
        let sec = f + 1;
        std::fs::write(
            table.join(format!(
                "20220302-{:02}{:02}{:02}000.csv",
                10 + sec / 3600,
                (sec / 60) % 60,
                sec % 60
            )),
            s,
        )?;
        counts.push(live.len());
    }
    Ok(counts)
}

fn local_path(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file://").unwrap_or(location))
}

/// Appends snapshots to the current metadata until the table has `target`, as one new
/// metadata.json that the catalog pointer is swapped to.
async fn pad(
    catalog: &SqliteCatalog,
    ident: &iceberg::TableIdent,
    target: usize,
) -> anyhow::Result<()> {
    let pointer = catalog
        .load(ident)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no table"))?;
    let old = local_path(&pointer.metadata_location);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&old)?)?;
    let have = v["snapshots"].as_array().map_or(0, Vec::len);
    if have >= target {
        return Ok(());
    }
    let current = v["current-snapshot-id"].clone();
    let template = v["snapshots"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["snapshot-id"] == current))
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no current snapshot"))?;
    let mut seq = v["last-sequence-number"].as_i64().unwrap_or(0);
    let last_ts = v["last-updated-ms"].as_i64().unwrap_or(0);
    let now = chrono::Utc::now().timestamp_millis().max(last_ts);
    let n = target - have;
    let mut parent = current.as_i64().unwrap_or(0);
    let mut rng = Rng(parent as u64 | 1);
    let mut new_snapshots = Vec::with_capacity(n);
    let mut new_log = Vec::with_capacity(n);
    for i in 0..n {
        let id = (rng.next() >> 2) as i64 + 1;
        seq += 1;
        let ts = last_ts + (now - last_ts) * (i as i64 + 1) / n as i64;
        let mut s = template.clone();
        s["snapshot-id"] = json!(id);
        s["parent-snapshot-id"] = json!(parent);
        s["sequence-number"] = json!(seq);
        s["timestamp-ms"] = json!(ts);
        new_snapshots.push(s);
        new_log.push(json!({"snapshot-id": id, "timestamp-ms": ts}));
        parent = id;
    }
    let end_ts = now;
    if let Some(a) = v["snapshots"].as_array_mut() {
        a.extend(new_snapshots);
    }
    if let Some(a) = v["snapshot-log"].as_array_mut() {
        a.extend(new_log);
    }
    if let Some(a) = v["metadata-log"].as_array_mut() {
        a.push(json!({"metadata-file": pointer.metadata_location, "timestamp-ms": last_ts}));
    }
    v["current-snapshot-id"] = json!(parent);
    v["refs"]["main"]["snapshot-id"] = json!(parent);
    v["last-sequence-number"] = json!(seq);
    v["last-updated-ms"] = json!(end_ts);
    let name = old
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow::anyhow!("bad metadata name"))?;
    let version: u64 = name
        .split('-')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("bad metadata name {name}"))?;
    let new_name = format!("{:05}-{}.metadata.json", version + 1, uuid_like(&mut rng));
    let new_path = old.with_file_name(new_name);
    let bytes = serde_json::to_vec(&v)?;
    let md: TableMetadata = serde_json::from_slice(&bytes)?;
    std::fs::write(&new_path, &bytes)?;
    let location = format!("file://{}", new_path.display());
    catalog
        .swap(ident, Some(&pointer), &location, &md)
        .await
        .map_err(|e| anyhow::anyhow!("swap: {e}"))?;
    Ok(())
}

fn uuid_like(rng: &mut Rng) -> String {
    let (a, b) = (rng.next(), rng.next());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

struct Point {
    snapshots: usize,
    record_files: usize,
    total_ms: f64,
    commit_ms: f64,
    write_ms: f64,
    read_ms: f64,
    rest_ms: f64,
    cold_read_ms: f64,
    bytes: u64,
}

/// One commit's figures: wall ms of `Ingest::execute`, of its commit step, and of the
/// metadata.json writes and reads inside it (the library's own counters).
struct Measured {
    total_ms: f64,
    commit_ms: f64,
    write_ms: f64,
    read_ms: f64,
}

struct Bench<'a> {
    catalog: &'a SqliteCatalog,
    ingest: Ingest<'a>,
    ident: iceberg::TableIdent,
    schema: String,
    table: String,
    files: std::vec::IntoIter<(dms2iceberg::locate::DmsObject, PathBuf)>,
    applied: usize,
}

impl Bench<'_> {
    async fn apply(&mut self) -> anyhow::Result<Measured> {
        let f = self
            .files
            .next()
            .ok_or_else(|| anyhow::anyhow!("out of change files"))?;
        let io = dms2iceberg::metadata_io();
        let started = Instant::now();
        let r = self
            .ingest
            .execute(&self.schema, &self.table, local_inputs(vec![f]), |_| {})
            .await;
        let total_ms = started.elapsed().as_secs_f64() * 1e3;
        let after = dms2iceberg::metadata_io();
        if let Some(e) = r.error {
            anyhow::bail!("ingest failed: {e}");
        }
        let c = r
            .commits
            .last()
            .ok_or_else(|| anyhow::anyhow!("no commit"))?;
        anyhow::ensure!(
            c.snapshot_id.is_some(),
            "file not committed: {:?}",
            c.status
        );
        self.applied += 1;
        Ok(Measured {
            total_ms,
            commit_ms: c.timings.commit_us as f64 / 1e3,
            write_ms: (after.write_ns - io.write_ns) as f64 / 1e6,
            read_ms: (after.read_ns - io.read_ns) as f64 / 1e6,
        })
    }

    async fn compact(&self) -> anyhow::Result<()> {
        Compact::new(self.catalog, self.ident.clone())
            .execute()
            .await?;
        Ok(())
    }

    /// The current metadata.json: its path and parsed JSON.
    async fn current(&self) -> anyhow::Result<(PathBuf, Value)> {
        let pointer = self
            .catalog
            .load(&self.ident)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no table"))?;
        let path = local_path(&pointer.metadata_location);
        let v = serde_json::from_slice(&std::fs::read(&path)?)?;
        Ok((path, v))
    }

    async fn snapshots(&self) -> anyhow::Result<usize> {
        Ok(self.current().await?.1["snapshots"]
            .as_array()
            .map_or(0, Vec::len))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: &str| -> String {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| default.to_string())
    };
    let points: Vec<usize> = arg("--points", "100,1000,10000")
        .split(',')
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let commits: usize = arg("--commits", "20").parse()?;
    let rows: u64 = arg("--rows", "50").parse()?;
    // Snapshots made by real commits (one change file each) before padding takes over: the
    // applied-file record keeps 2,000 change files by default, so beyond that a real history
    // and a padded one differ only in the snapshots themselves.
    let real: usize = arg("--real-history", "2000").parse()?;
    // Compaction every so many real commits (the compaction function runs hourly: a table fed
    // one file a minute has some 60 files between two runs), so the live files stay few.
    let compact_every: usize = arg("--compact-every", "60").parse()?;
    // Every point with the record full (the real history built first, points below it reached
    // by expiring snapshots, as the compaction function's retention does): the record's size is
    // bounded by its window, not by the history, so points that differ only in the history
    // compare the history alone. Without it a young table's record (a point below
    // `--real-history`) is smaller, and the comparison mixes the two.
    let full_record = args.iter().any(|a| a == "--full-record");
    let label = arg("--label", "");
    let root = PathBuf::from(arg(
        "--dir",
        &std::env::temp_dir()
            .join("dms2iceberg-history-bench")
            .display()
            .to_string(),
    ));
    let _ = std::fs::remove_dir_all(&root);
    let dms = root.join("dms");
    let max_point = points.iter().copied().max().unwrap_or(0);
    let built = if full_record {
        real
    } else {
        real.min(max_point)
    };
    let files = (built + points.len() * (commits + 2) + 10) as u64;
    let expected = generate(&dms, files, rows)?;

    let config = Config::from_toml("[tables.\"shop.orders\"]\nprimary_key = [\"order_id\"]\n")?;
    let wh = root.join("wh");
    std::fs::create_dir_all(&wh)?;
    let catalog = SqliteCatalog::open(&wh)?;
    let tables = discover(std::slice::from_ref(&dms), &config.source)?;
    let t = &tables[0];
    let mut b = Bench {
        catalog: &catalog,
        ingest: Ingest::new(&catalog, &config),
        ident: parse_ident("shop.orders")?,
        schema: t.schema.clone(),
        table: t.table.clone(),
        files: t.files.clone().into_iter(),
        applied: 0,
    };
    let build_started = Instant::now();
    b.apply().await?; // the full load
    let mut snapshots = 1;

    let mut out = Vec::new();
    for &p in &points {
        // Real commits up to the point (or to `real`), compacted as the function would; then
        // padding; then one compaction, so every point starts from the same few live files.
        let target = p.saturating_sub(1);
        let mut since_compaction = 0;
        // Full record: `real` change files applied whatever the point (the load is one more).
        let building = |snapshots: usize, applied: usize| {
            if full_record {
                applied <= real
            } else {
                snapshots < target.min(real)
            }
        };
        while building(snapshots, b.applied) {
            b.apply().await?;
            snapshots += 1;
            since_compaction += 1;
            if since_compaction == compact_every {
                b.compact().await?;
                snapshots = b.snapshots().await?;
                since_compaction = 0;
            }
        }
        if snapshots > target {
            // Retention down to the point: every snapshot but the newest `target` expired.
            ExpireSnapshots::new(
                &catalog,
                b.ident.clone(),
                chrono::Utc::now().timestamp_millis() + 1,
                target,
            )
            .execute()
            .await?;
        }
        pad(&catalog, &b.ident, target).await?;
        b.compact().await?;
        b.apply().await?; // warm-up
        // A mark for a profiler to attach to the measured commits alone (`perf record -p`).
        eprintln!(
            "measuring at {target} snapshots (pid {})",
            std::process::id()
        );
        let (mut total, mut commit, mut write, mut read, mut rest, mut cold) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..commits {
            let m = b.apply().await?;
            total.push(m.total_ms);
            commit.push(m.commit_ms);
            write.push(m.write_ms);
            read.push(m.read_ms);
            rest.push(m.commit_ms - m.write_ms - m.read_ms);
        }
        let (path, v) = b.current().await?;
        snapshots = v["snapshots"].as_array().map_or(0, Vec::len);
        // What a process without the metadata cached (a cold Lambda) pays once to load it.
        for _ in 0..3 {
            let started = Instant::now();
            let md: TableMetadata = serde_json::from_slice(&std::fs::read(&path)?)?;
            cold.push(started.elapsed().as_secs_f64() * 1e3);
            drop(md);
        }
        let record_files = v["properties"]["dms2iceberg.applied"]
            .as_str()
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
            .and_then(|r| r["count"].as_u64())
            .unwrap_or(0) as usize;
        let point = Point {
            snapshots,
            record_files,
            total_ms: median(&mut total),
            commit_ms: median(&mut commit),
            write_ms: median(&mut write),
            read_ms: median(&mut read),
            rest_ms: median(&mut rest),
            cold_read_ms: median(&mut cold),
            bytes: std::fs::metadata(&path)?.len(),
        };
        eprintln!(
            "at {p} ({} at the end, record of {} files; built in {:.0} s): total {:.2} ms, commit {:.2}, metadata write {:.2}, read {:.2}, rest {:.2}, cold read {:.2}, {} bytes",
            point.snapshots,
            point.record_files,
            build_started.elapsed().as_secs_f64(),
            point.total_ms,
            point.commit_ms,
            point.write_ms,
            point.read_ms,
            point.rest_ms,
            point.cold_read_ms,
            point.bytes
        );
        out.push((p, point));
    }

    let got = Scan::new(&catalog, b.ident.clone())
        .execute()
        .await?
        .batch
        .num_rows();
    let expected = expected.get(b.applied - 1).copied().unwrap_or(0);
    anyhow::ensure!(got == expected, "{got} rows, expected {expected}");

    let first = &out[0].1;
    let mut md = String::new();
    let _ = writeln!(md, "# History benchmark {label}\n");
    let _ = writeln!(
        md,
        "`cargo bench --bench history -- --points {} --commits {commits} --rows {rows} --real-history {real} --compact-every {compact_every}{}`; git {}; load average at end {}; {} files applied in {:.0} s; table rows verified ({got}).\n",
        points
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(","),
        if full_record { " --full-record" } else { "" },
        git_head(),
        load_avg(),
        b.applied,
        build_started.elapsed().as_secs_f64()
    );
    let _ = writeln!(
        md,
        "| snapshots | record files | ms/commit (ingest) | commit step ms | metadata.json serialise+write ms | metadata.json read+parse ms (in the commit) | rest of commit step ms | ingest without metadata.json ms | metadata.json read+parse ms (cold load) | metadata.json bytes | ingest without metadata.json vs first | rest vs first |"
    );
    let _ = writeln!(
        md,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut rows_json = Vec::new();
    for (p, x) in &out {
        let without = x.total_ms - x.write_ms - x.read_ms;
        let first_without = first.total_ms - first.write_ms - first.read_ms;
        let _ = writeln!(
            md,
            "| {p} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2}x | {:.2}x |",
            x.record_files,
            x.total_ms,
            x.commit_ms,
            x.write_ms,
            x.read_ms,
            x.rest_ms,
            without,
            x.cold_read_ms,
            x.bytes,
            without / first_without,
            x.rest_ms / first.rest_ms
        );
        rows_json.push(json!({
            "snapshots": p, "snapshots_at_end": x.snapshots, "record_files": x.record_files,
            "median_ms_per_commit": x.total_ms, "median_commit_step_ms": x.commit_ms,
            "median_metadata_write_ms": x.write_ms, "median_metadata_read_ms": x.read_ms,
            "median_rest_of_commit_ms": x.rest_ms, "ms_per_commit_without_metadata": without,
            "cold_metadata_read_ms": x.cold_read_ms, "metadata_bytes": x.bytes,
        }));
    }
    let _ = writeln!(
        md,
        "\nms/commit: the whole `Ingest::execute` of one {rows}-row change file (read, lookup, write, commit), median of {commits}, one warm process; commit step: `Timings::commit_us` (validation, manifest list, metadata.json, catalog swap); metadata.json serialise+write and read+parse: the library's own counters (`dms2iceberg::metadata_io`) over each commit (medians; a warm process reads nothing: it keeps the metadata it wrote); rest = commit step − metadata.json; cold load: reading and parsing the last metadata.json apart, as a process without it cached does once."
    );
    print!("{md}");
    let doc = json!({"label": label, "git": git_head(), "load_at_end": load_avg(), "commits_per_point": commits,
        "rows_per_file": rows, "real_history": real, "compact_every": compact_every, "full_record": full_record,
        "files_applied": b.applied, "rows_verified": got, "points": rows_json});
    let json_path = arg("--json", "");
    if !json_path.is_empty() {
        std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
    }
    let md_path = arg("--md", "");
    if !md_path.is_empty() {
        std::fs::write(&md_path, &md)?;
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

fn git_head() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}
