//! Per-file ingest cost as the table grows.
//!
//! `cargo bench --bench ingest -- [--sizes 100000,1000000] [--changes 10000] [--files 5]`
//!
//! For each table size N: load N rows (full-load CSV files of up to 1M rows, as DMS splits them),
//! then apply `--files` change files of `--changes` rows each (70% updates of existing keys, 20%
//! inserts, 10% deletes), one snapshot per file, through the same library code the CLI uses.
//! Reported per N: median seconds per change file with a warm process (key cache on) and cold
//! (cache off: every lookup reads from storage, as a fresh Lambda does), rows/s, peak RSS of the
//! change phase, and the data/delete files each lookup read. The final row count is checked
//! against the generator's own bookkeeping before any figure is printed.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use dms2iceberg::catalog::SqliteCatalog;
use dms2iceberg::config::Config;
use dms2iceberg::ops::discover::discover;
use dms2iceberg::ops::ingest::{CommitReport, Ingest, local_inputs};
use dms2iceberg::ops::parse_ident;
use dms2iceberg::ops::scan::Scan;
use dms2iceberg::{CacheLimits, TableCache};

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

const HEADER: &str = "Op,order_id,customer_id,status,amount,note,updated_at\n";
const STATUS: [&str; 4] = ["NEW", "PAID", "SHIPPED", "DELIVERED"];

fn row(out: &mut String, op: char, id: u64, rng: &mut Rng, minute: u64) {
    let _ = writeln!(
        out,
        "{op},{id},{},{},{}.{:02},\"note, {id}\",2022-03-02 {:02}:{:02}:01.000000",
        rng.below(100_000),
        STATUS[rng.below(4) as usize],
        rng.below(10_000),
        rng.below(100),
        10 + (minute / 60) % 12,
        minute % 60
    );
}

/// Writes the DMS tree; returns the live keys afterwards (the expected row count).
fn generate(dir: &Path, n: u64, changes: u64, files: u64, seed: u64) -> std::io::Result<usize> {
    let table = dir.join("dms/shop/orders");
    std::fs::create_dir_all(&table)?;
    let mut rng = Rng(seed | 1);
    // Even keys in the full load; inserts take odd keys so they are new.
    let per_file = 1_000_000u64;
    let mut start = 0;
    let mut file_no = 1;
    while start < n {
        let end = (start + per_file).min(n);
        let mut s = String::with_capacity(((end - start) * 80) as usize);
        s.push_str(HEADER);
        for i in start..end {
            row(&mut s, 'I', i * 2, &mut rng, 0);
        }
        std::fs::write(table.join(format!("LOAD{file_no:08X}.csv")), s)?;
        start = end;
        file_no += 1;
    }
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut deleted: BTreeSet<u64> = BTreeSet::new();
    let mut next_odd = 1u64;
    for f in 0..files {
        let mut s = String::with_capacity((changes * 80) as usize);
        s.push_str(HEADER);
        for _ in 0..changes {
            let p = rng.below(100);
            let minute = f + 1;
            if p < 20 {
                row(&mut s, 'I', next_odd, &mut rng, minute);
                live.insert(next_odd);
                next_odd += 2;
            } else {
                let id = rng.below(n) * 2;
                if p < 90 {
                    if !deleted.contains(&id) {
                        row(&mut s, 'U', id, &mut rng, minute);
                    }
                } else {
                    row(&mut s, 'D', id, &mut rng, minute);
                    deleted.insert(id);
                }
            }
        }
        std::fs::write(
            table.join(format!(
                "20220302-{:02}{:02}010000.csv",
                10 + f / 60,
                f % 60
            )),
            s,
        )?;
    }
    Ok(n as usize - deleted.len() + live.len())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

struct Phase {
    per_file: Vec<f64>,
    reports: Vec<CommitReport>,
    peak_rss_kib: u64,
}

async fn apply_changes(
    wh: &Path,
    dms: &Path,
    config: &Config,
    cache_bytes: usize,
    load_files: usize,
) -> anyhow::Result<Phase> {
    let cache = TableCache::new(CacheLimits {
        key_bytes: cache_bytes,
    });
    let catalog = SqliteCatalog::open(wh)?.with_cache(Arc::new(cache));
    let tables = discover(&[dms.to_path_buf()], &config.source)?;
    let t = &tables[0];
    let ingest = Ingest::new(&catalog, config);
    let changes: Vec<_> = t.files.iter().skip(load_files).cloned().collect();
    reset_peak_rss();
    let mut per_file = Vec::new();
    let mut reports = Vec::new();
    for f in changes {
        let started = Instant::now();
        let r = ingest
            .execute(&t.schema, &t.table, local_inputs(vec![f]), |_| {})
            .await;
        if let Some(e) = r.error {
            anyhow::bail!("change file failed: {e}");
        }
        per_file.push(started.elapsed().as_secs_f64());
        reports.extend(r.commits);
    }
    Ok(Phase {
        per_file,
        reports,
        peak_rss_kib: peak_rss_kib(),
    })
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
    let sizes: Vec<u64> = arg("--sizes", "100000,1000000")
        .split(',')
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let changes: u64 = arg("--changes", "10000").parse()?;
    let files: u64 = arg("--files", "5").parse()?;
    let root = PathBuf::from(arg(
        "--dir",
        &std::env::temp_dir()
            .join("dms2iceberg-bench")
            .display()
            .to_string(),
    ));
    let config = Config::from_toml("[tables.\"shop.orders\"]\nprimary_key = [\"order_id\"]\n")?;
    let mut rows_md = String::new();
    let mut baseline: Option<f64> = None;
    println!(
        "| table rows | load s | median s/file warm | median s/file cold | rows/s warm | peak RSS MiB (changes) | data files read per file (cold) | delete files read per file (cold) | warm vs 100k |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &sizes {
        let dir = root.join(format!("n{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let expected = generate(&dir, n, changes, files, 42 + n)?;
        let load_files = n.div_ceil(1_000_000) as usize;
        // Load once; warm and cold runs each get a copy of the catalog (the pointer), so both
        // start from the same snapshot. Table files are immutable and uniquely named, so the two
        // runs can share the table's folders without touching each other's commits.
        let loaded = dir.join("wh-loaded");
        let catalog = SqliteCatalog::open(&loaded)?;
        let tables = discover(&[dir.join("dms")], &config.source)?;
        let t = &tables[0];
        let started = Instant::now();
        let load: Vec<_> = t.files.iter().take(load_files).cloned().collect();
        let r = Ingest::new(&catalog, &config)
            .execute(&t.schema, &t.table, local_inputs(load), |_| {})
            .await;
        if let Some(e) = r.error {
            anyhow::bail!("load failed: {e}");
        }
        let load_s = started.elapsed().as_secs_f64();
        drop(catalog);
        let warm_wh = dir.join("wh-warm");
        let cold_wh = dir.join("wh-cold");
        for wh in [&warm_wh, &cold_wh] {
            std::fs::create_dir_all(wh)?;
            std::fs::copy(loaded.join("catalog.db"), wh.join("catalog.db"))?;
        }
        let mut warm =
            apply_changes(&warm_wh, &dir.join("dms"), &config, 1 << 30, load_files).await?;
        let mut cold = apply_changes(&cold_wh, &dir.join("dms"), &config, 0, load_files).await?;
        for wh in [&warm_wh, &cold_wh] {
            let catalog = SqliteCatalog::open(wh)?;
            let got = Scan::new(&catalog, parse_ident("shop.orders")?)
                .execute()
                .await?
                .batch
                .num_rows();
            anyhow::ensure!(
                got == expected,
                "{}: {got} rows, expected {expected}",
                wh.display()
            );
        }
        let warm_med = median(&mut warm.per_file);
        let cold_med = median(&mut cold.per_file);
        let reads = |p: &Phase, f: fn(&CommitReport) -> usize| {
            p.reports.iter().map(f).sum::<usize>() as f64 / p.reports.len().max(1) as f64
        };
        let base = *baseline.get_or_insert(warm_med);
        println!(
            "| {n} | {load_s:.2} | {warm_med:.3} | {cold_med:.3} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2}x |",
            changes as f64 / warm_med,
            warm.peak_rss_kib.max(cold.peak_rss_kib) as f64 / 1024.0,
            reads(&cold, |c| c.lookup.data_files_read),
            reads(&cold, |c| c.lookup.delete_files_read),
            warm_med / base
        );
        let _ = writeln!(
            rows_md,
            "{{\"rows\":{n},\"changes\":{changes},\"files\":{files},\"load_s\":{load_s:.3},\"median_s_warm\":{warm_med:.4},\"median_s_cold\":{cold_med:.4},\"peak_rss_mib\":{:.0},\"data_files_read_cold\":{:.2},\"delete_files_read_cold\":{:.2},\"key_cache_hits_warm\":{:.2}}}",
            warm.peak_rss_kib.max(cold.peak_rss_kib) as f64 / 1024.0,
            reads(&cold, |c| c.lookup.data_files_read),
            reads(&cold, |c| c.lookup.delete_files_read),
            reads(&warm, |c| c.lookup.key_cache_hits),
        );
        std::io::stdout().flush()?;
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("\n{rows_md}");
    Ok(())
}
