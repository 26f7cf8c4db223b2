//! A change file's cost as the table grows to a billion rows, through the CLI binary as a user
//! runs it (issue 52).
//!
//! `cargo bench --bench scale -- --bins after=target/fast/dms2iceberg[,before=OTHER]
//!      [--rows 1000000,10000000,100000000,1000000000] [--changes 10000] [--cold 3] [--warm 48]
//!      [--dir /var/tmp/dms2iceberg-scale] [--load-rows 12500000]`
//!
//! For each table size N: full-load CSV files of `--load-rows` rows each (`Op,id,qty,status`,
//! ids ascending with random gaps of 1 to 3, as a table's ids after deletes), loaded by each
//! binary into a warehouse of its own (one process, every LOAD file); then the same change
//! files, `--changes` rows each (70% updates and 10% deletes of random live keys, 20% inserts
//! of new keys), applied by each binary:
//! - first: the first change file after the load, in a fresh process;
//! - cold: `--cold` more files, a fresh process each (a Lambda cold start);
//! - warm: `--warm` files (48) in one process (a warm Lambda): "warming", the median of its
//!   files 2 to 9, while its cache fills; "warm", the median of its last 8.
//!
//! Reported per N and binary: seconds and peak RSS of each (GNU time, the whole process), the
//! lookup's share (the commit's `lookup_us`), key index directories and pages read, range
//! requests. The table's live rows (`history --format json`) must equal the generator's count
//! before any figure is printed. Binaries run one after another per N, in the order given.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// splitmix64: the generator's randomness, a function of a counter (reproducible).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The id of full-load row `r`: `2r + bit`, so ids ascend with gaps of 1, 2 or 3.
fn id_of(r: u64) -> u64 {
    2 * r + (mix(r) & 1)
}

const STATUS: [&str; 4] = ["NEW", "PAID", "SHIPPED", "DELIVERED"];
const TABLE: &str = "dms/shop/orders";

fn row(out: &mut Vec<u8>, op: char, id: u64, salt: u64) {
    let h = mix(id ^ salt);
    let _ = writeln!(
        out,
        "{op},{id},{},{}",
        h % 1000,
        STATUS[(h >> 20) as usize % 4]
    );
}

/// Writes the full load of `n` rows (files of `per_file` rows); returns the files.
fn generate_load(dir: &Path, n: u64, per_file: u64) -> Result<Vec<PathBuf>> {
    let table = dir.join(TABLE);
    std::fs::create_dir_all(&table)?;
    let mut files = Vec::new();
    let (mut start, mut no) = (0u64, 1u32);
    while start < n {
        let end = (start + per_file).min(n);
        let path = table.join(format!("LOAD{no:08X}.csv"));
        if !path.exists() {
            let tmp = path.with_extension("tmp");
            let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(&tmp)?);
            f.write_all(b"Op,id,qty,status\n")?;
            let mut buf = Vec::with_capacity(4 << 20);
            for r in start..end {
                row(&mut buf, 'I', id_of(r), 0);
                if buf.len() > (4 << 20) - 64 {
                    f.write_all(&buf)?;
                    buf.clear();
                }
            }
            f.write_all(&buf)?;
            f.flush()?;
            drop(f);
            std::fs::rename(&tmp, &path)?;
        }
        files.push(path);
        start = end;
        no += 1;
    }
    Ok(files)
}

/// Writes `count` change files of `changes` rows; returns them and the live rows after all.
fn generate_changes(dir: &Path, n: u64, changes: u64, count: usize) -> Result<(Vec<PathBuf>, u64)> {
    let table = dir.join(TABLE);
    let mut gone = std::collections::HashSet::new();
    let mut live = n;
    let mut next_new = 2 * n + 2;
    let mut files = Vec::new();
    let mut counter = 1u64;
    for f in 0..count {
        let path = table.join(format!(
            "20220302-{:02}{:02}{:02}0000.csv",
            12 + f / 3600,
            (f / 60) % 60,
            f % 60
        ));
        let mut buf = b"Op,id,qty,status\n".to_vec();
        let mut touched = std::collections::HashSet::new();
        for i in 0..changes {
            let pick = i * 10 / changes; // 0-6 update, 7 delete, 8-9 insert
            if pick >= 8 {
                row(&mut buf, 'I', next_new, f as u64);
                next_new += 1;
                live += 1;
                continue;
            }
            // A random full-load key still live and not yet changed in this file.
            let id = loop {
                counter += 1;
                let id = id_of(mix(counter) % n);
                if !gone.contains(&id) && touched.insert(id) {
                    break id;
                }
            };
            if pick == 7 {
                row(&mut buf, 'D', id, f as u64);
                gone.insert(id);
                live -= 1;
            } else {
                row(&mut buf, 'U', id, f as u64 + 1);
            }
        }
        std::fs::write(&path, buf)?;
        files.push(path);
    }
    Ok((files, live))
}

/// One CLI run under GNU time: wall seconds, peak RSS in MiB, stdout.
struct Run {
    secs: f64,
    rss_mib: f64,
    stdout: String,
}

fn run(bin: &Path, args: &[String]) -> Result<Run> {
    let tf = std::env::temp_dir().join(format!("scale-time-{}", std::process::id()));
    let started = std::time::Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&tf)
        .args(["-f", "%e %M"])
        .arg(bin)
        .args(args)
        .output()
        .context("running /usr/bin/time")?;
    // Wall time here (GNU time's is in hundredths); the peak RSS from GNU time.
    let secs = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{} {:?} failed: {}",
            bin.display(),
            args,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let t = std::fs::read_to_string(&tf)?;
    let mut parts = t.split_whitespace();
    parts.next();
    let kib: f64 = parts.next().unwrap_or("0").parse()?;
    Ok(Run {
        secs,
        rss_mib: kib / 1024.0,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    })
}

/// The commit reports of an `ingest --format json` run.
fn reports(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("lookup").is_some())
        .collect()
}

fn ingest_args(wh: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut a = vec![
        "ingest".to_string(),
        "--warehouse".into(),
        wh.display().to_string(),
        "--config".into(),
        wh.with_extension("toml").display().to_string(),
        "--format".into(),
        "json".into(),
    ];
    a.extend(files.iter().map(|f| f.display().to_string()));
    a
}

#[derive(Default, Clone)]
struct Figures {
    secs: f64,
    rss_mib: f64,
    lookup_s: f64,
    indexes: f64,
    pages: f64,
    requests: f64,
    data_files_read: f64,
    write_s: f64,
    delete_files: f64,
}

fn figures(run: &Run, r: &serde_json::Value) -> Figures {
    let n = |k: &str| r["lookup"][k].as_f64().unwrap_or(0.0);
    Figures {
        secs: run.secs,
        rss_mib: run.rss_mib,
        lookup_s: r["timings"]["lookup_us"].as_f64().unwrap_or(0.0) / 1e6,
        indexes: n("key_indexes_read"),
        pages: n("key_pages_read"),
        requests: n("key_page_requests"),
        data_files_read: n("data_files_read"),
        write_s: r["timings"]["write_us"].as_f64().unwrap_or(0.0) / 1e6,
        delete_files: r["delete_files"].as_f64().unwrap_or(0.0),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bins: Vec<(String, PathBuf)> = arg(&args, "--bins", "after=target/fast/dms2iceberg")
        .split(',')
        .map(|b| match b.split_once('=') {
            Some((name, path)) => (name.to_string(), PathBuf::from(path)),
            None => (b.to_string(), PathBuf::from(b)),
        })
        .collect();
    let sizes: Vec<u64> = arg(&args, "--rows", "1000000,10000000")
        .split(',')
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let changes: u64 = arg(&args, "--changes", "10000").parse()?;
    let cold: usize = arg(&args, "--cold", "3").parse()?;
    let warm: usize = arg(&args, "--warm", "48").parse()?;
    let per_file: u64 = arg(&args, "--load-rows", "12500000").parse()?;
    let root = PathBuf::from(arg(&args, "--dir", "/var/tmp/dms2iceberg-scale"));
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| rows | binary | load s | load MiB | first s | first MiB | cold s | cold MiB | warming s | warm s | warm MiB | lookup share warm | pages read warm | requests warm | pages read cold |"
    );
    let _ = writeln!(
        md,
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &n in &sizes {
        let dir = root.join(format!("n{n}"));
        let t0 = std::time::Instant::now();
        let load = generate_load(&dir, n, per_file)?;
        let (change_files, live) = generate_changes(&dir, n, changes, 1 + cold + warm)?;
        eprintln!(
            "scale: {n} rows generated in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        for (name, bin) in &bins {
            let wh = dir.join(format!("wh-{name}"));
            if wh.exists() {
                std::fs::remove_dir_all(&wh)?;
            }
            std::fs::create_dir_all(&wh)?;
            std::fs::write(
                wh.with_extension("toml"),
                "[tables.\"shop.orders\"]\nprimary_key = [\"id\"]\n",
            )?;
            let l = run(bin, &ingest_args(&wh, &load))?;
            eprintln!(
                "scale: {n} {name}: load {:.1} s, {:.0} MiB",
                l.secs, l.rss_mib
            );
            // The load's writes flushed first: a local disk still writing back gigabytes of
            // data files would slow the first file (object storage has no such thing).
            let _ = Command::new("sync").status();
            let first_run = run(bin, &ingest_args(&wh, &change_files[..1]))?;
            let first = figures(
                &first_run,
                reports(&first_run.stdout).first().context("no report")?,
            );
            let mut colds = Vec::new();
            for f in &change_files[1..=cold] {
                let r = run(bin, &ingest_args(&wh, std::slice::from_ref(f)))?;
                colds.push(figures(
                    &r,
                    reports(&r.stdout).first().context("no report")?,
                ));
            }
            let w = run(bin, &ingest_args(&wh, &change_files[1 + cold..]))?;
            let reps = reports(&w.stdout);
            if reps.len() != warm {
                bail!("{} reports from the warm run, {warm} files", reps.len());
            }
            let per_file: Vec<Figures> = reps
                .iter()
                .map(|r| {
                    let mut f = figures(&w, r);
                    f.secs = r["timings"]["total_us"].as_f64().unwrap_or(0.0) / 1e6;
                    f
                })
                .collect();
            // Warming: the files after the process's first, while its cache fills. Warm: the
            // last 8 files (of `--warm`, 48 by default), with the cache holding what earlier
            // files read (at a billion rows a change file touches 3% of the index pages).
            let warming: Vec<Figures> = per_file.iter().skip(1).take(8).cloned().collect();
            let warm_f: Vec<Figures> = per_file[per_file.len().saturating_sub(8).max(1)..].to_vec();
            // The table holds what the changes say.
            let h = run(
                bin,
                &[
                    "history".into(),
                    "--warehouse".into(),
                    wh.display().to_string(),
                    "shop.orders".into(),
                    "--format".into(),
                    "json".into(),
                ],
            )?;
            // One JSON line per snapshot, oldest first.
            let last = h.stdout.lines().last().context("no snapshot")?;
            let hv: serde_json::Value = serde_json::from_str(last).context("history json")?;
            let got = hv["live_rows"].as_u64();
            if got != Some(live) {
                bail!(
                    "{n} rows, {name}: the table holds {got:?} live rows, the changes leave {live}"
                );
            }
            let cold_s = median(colds.iter().map(|f| f.secs).collect());
            let cold_mib = colds.iter().map(|f| f.rss_mib).fold(0.0, f64::max);
            let warm_s = median(warm_f.iter().map(|f| f.secs).collect());
            let share = median(
                warm_f
                    .iter()
                    .map(|f| f.lookup_s / f.secs.max(1e-9))
                    .collect(),
            );
            let pages_w = median(warm_f.iter().map(|f| f.pages).collect());
            let req_w = median(warm_f.iter().map(|f| f.requests).collect());
            let pages_c = median(colds.iter().map(|f| f.pages).collect());
            let write_w = median(warm_f.iter().map(|f| f.write_s).collect());
            let deletes_w = median(warm_f.iter().map(|f| f.delete_files).collect());
            let lookup_w = median(warm_f.iter().map(|f| f.lookup_s).collect());
            let lookup_c = median(colds.iter().map(|f| f.lookup_s).collect());
            let warming_s = median(warming.iter().map(|f| f.secs).collect());
            let warming_pages = median(warming.iter().map(|f| f.pages).collect());
            let _ = writeln!(
                md,
                "| {n} | {name} | {:.1} | {:.0} | {:.3} | {:.0} | {:.3} | {:.0} | {warming_s:.3} | {:.3} | {:.0} | {:.0}% | {pages_w:.0} | {req_w:.0} | {pages_c:.0} |",
                l.secs,
                l.rss_mib,
                first.secs,
                first.rss_mib,
                cold_s,
                cold_mib,
                warm_s,
                w.rss_mib,
                share * 100.0
            );
            println!(
                "{{\"rows\":{n},\"binary\":\"{name}\",\"load_s\":{:.2},\"load_mib\":{:.0},\"first_s\":{:.4},\"first_mib\":{:.0},\"first_lookup_s\":{:.4},\"first_indexes\":{},\"first_pages\":{},\"first_requests\":{},\"first_data_files_read\":{},\"cold_s\":{cold_s:.4},\"cold_mib\":{cold_mib:.0},\"cold_pages\":{pages_c},\"warm_s\":{warm_s:.4},\"warm_mib\":{:.0},\"warm_lookup_share\":{share:.3},\"warm_pages\":{pages_w},\"warm_requests\":{req_w},\"warm_lookup_s\":{lookup_w:.4},\"cold_lookup_s\":{lookup_c:.4},\"warm_write_s\":{write_w:.4},\"warm_delete_files\":{deletes_w},\"warming_s\":{warming_s:.4},\"warming_pages\":{warming_pages}}}",
                l.secs,
                l.rss_mib,
                first.secs,
                first.rss_mib,
                first.lookup_s,
                first.indexes,
                first.pages,
                first.requests,
                first.data_files_read,
                w.rss_mib
            );
            let _ = std::io::stdout().flush();
        }
        if !args.iter().any(|a| a == "--keep") {
            for f in &load {
                let _ = std::fs::remove_file(f);
            }
        }
    }
    eprintln!("{md}");
    Ok(())
}
