//! `dms2iceberg`: apply AWS DMS output to Iceberg tables in a local warehouse (embedded SQLite
//! catalog). `main` only parses arguments, wires the catalog and calls the library.

mod output;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use dms2iceberg::catalog::{Catalog, SqliteCatalog};
use dms2iceberg::config::Config;
use dms2iceberg::ops::discover::discover_all;
use dms2iceberg::ops::ingest::{Ingest, local_inputs};
use dms2iceberg::ops::{history::history, parse_ident, scan::Scan};

#[derive(Parser)]
#[command(
    name = "dms2iceberg",
    version,
    about = "Apply AWS DMS full-load and change files to Apache Iceberg tables"
)]
struct Cli {
    /// Log more (repeat for debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// `sqlite`: the embedded catalog `<warehouse>/catalog.db`; `glue`: the AWS Glue Data
    /// Catalog, with `--warehouse s3://bucket/prefix` (AWS settings from the environment).
    #[arg(long, global = true, value_enum, default_value = "sqlite")]
    catalog: CatalogKind,
    /// The SQLite catalog's name: the `catalog_name` of its rows in catalog.db. Iceberg's
    /// JdbcCatalog (Spark, Flink, Trino) uses its own configured name there: use the same.
    #[arg(long, global = true, default_value = "default")]
    catalog_name: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CatalogKind {
    Sqlite,
    Glue,
}

#[derive(Subcommand)]
enum Command {
    /// Apply DMS files (files or folders) to their tables, in DMS order, exactly once.
    Ingest {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        #[arg(long)]
        config: Option<PathBuf>,
        /// DMS files per snapshot (1 = one snapshot per file).
        #[arg(long, default_value_t = 1)]
        files_per_commit: usize,
        /// `text`: a line per table; `json`: one JSON report per commit.
        #[arg(long, value_enum, default_value = "text")]
        format: output::TextOrJson,
        /// Same as `--format json` (older spelling).
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Print a table's rows, sorted by primary key.
    Scan {
        table: String,
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        /// The table as it was at this time: RFC 3339, "YYYY-MM-DD HH:MM:SS[.fff]" (UTC) or epoch milliseconds.
        #[arg(long, conflicts_with = "snapshot")]
        as_of: Option<String>,
        #[arg(long)]
        snapshot: Option<i64>,
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long, value_enum, default_value = "table")]
        format: output::Format,
    },
    /// List a table's snapshots, oldest first, with the DMS files each applied.
    History {
        table: String,
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        #[arg(long, value_enum, default_value = "table")]
        format: output::TableOrJson,
        /// Same as `--format json` (older spelling).
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Rewrite small files and files with many deleted rows into target-size files sorted by
    /// key (deletes applied); drop delete files nothing live needs.
    Compact {
        table: String,
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        /// Output file size in bytes (default: the table's write.target-file-size-bytes).
        #[arg(long)]
        target_file_size: Option<u64>,
        /// Input bytes to rewrite in this run (the next run continues).
        #[arg(long, default_value_t = 1 << 30)]
        max_bytes: u64,
        /// `text` (a summary) or `json` (machine-readable).
        #[arg(long, value_enum, default_value = "text")]
        format: output::TextOrJson,
        /// Same as `--format json` (older spelling).
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Expire snapshots older than a retention (and delete the files only they referenced).
    Expire {
        table: String,
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        /// Expire snapshots older than this many hours.
        #[arg(long, default_value_t = 168.0)]
        older_than_hours: f64,
        /// Always keep this many of the newest snapshots.
        #[arg(long, default_value_t = 1)]
        retain_last: usize,
        /// List what would be expired and deleted, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// `text` (a summary) or `json` (machine-readable).
        #[arg(long, value_enum, default_value = "text")]
        format: output::TextOrJson,
        /// Same as `--format json` (older spelling).
        #[arg(long, hide = true)]
        json: bool,
    },
    /// List files in the table's folder that no snapshot or metadata references (`--delete`
    /// removes them). Files younger than --min-age-hours are never touched.
    Orphans {
        table: String,
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        #[arg(long, default_value_t = 72.0)]
        min_age_hours: f64,
        #[arg(long)]
        delete: bool,
        /// `text` (a summary) or `json` (machine-readable).
        #[arg(long, value_enum, default_value = "text")]
        format: output::TextOrJson,
        /// Same as `--format json` (older spelling).
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Declare which DMS files a table holds, for a table with data but no record of them
    /// (created or rewritten by another engine): every file up to `--through` counts as applied.
    MarkApplied {
        table: String,
        /// The last DMS file the table holds (file name, path or S3 key).
        #[arg(long)]
        through: String,
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        /// Replace the record the table already has.
        #[arg(long)]
        force: bool,
    },
    /// List the tables in the warehouse.
    Tables {
        #[arg(long, default_value = "warehouse")]
        warehouse: String,
        /// `text` (a summary) or `json` (machine-readable).
        #[arg(long, value_enum, default_value = "text")]
        format: output::TextOrJson,
        /// Same as `--format json` (older spelling).
        #[arg(long, hide = true)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let colour = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    tracing_subscriber::fmt()
        .with_ansi(colour)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    let catalog = CatalogArgs {
        kind: cli.catalog,
        name: cli.catalog_name,
    };
    match runtime.block_on(run(&catalog, cli.command)) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            // `dms2iceberg scan ... | head` closes the pipe early: not an error.
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if !broken_pipe {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
        }
    }
}

/// Which catalog, from the global flags.
struct CatalogArgs {
    kind: CatalogKind,
    name: String,
}

/// Colour only for a person at a terminal who has not asked for none (no-color.org: `NO_COLOR`
/// set to anything but the empty string).
fn use_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The catalog a command works on.
async fn open_catalog(
    args: &CatalogArgs,
    warehouse: &str,
    must_exist: bool,
) -> Result<Box<dyn Catalog>> {
    match args.kind {
        CatalogKind::Sqlite => {
            let path = std::path::Path::new(warehouse);
            if must_exist && !path.join("catalog.db").exists() {
                bail!(
                    "no warehouse at {warehouse} (run `dms2iceberg ingest` first, or pass --warehouse)"
                );
            }
            let catalog = SqliteCatalog::open(path)
                .and_then(|c| c.with_name(&args.name))
                .with_context(|| format!("opening warehouse {warehouse}"))?;
            Ok(Box::new(catalog))
        }
        CatalogKind::Glue => {
            if args.name != dms2iceberg::catalog::SQLITE_CATALOG_NAME {
                bail!(
                    "--catalog-name is for the SQLite catalog; Glue's catalog is the account's (DMS2ICEBERG_GLUE_CATALOG_ID)"
                );
            }
            let aws = dms2iceberg::aws::Aws::from_env().await;
            Ok(Box::new(aws.glue_catalog(warehouse)?))
        }
    }
}

/// Ok(false): ran, but some table failed.
async fn run(kind: &CatalogArgs, command: Command) -> Result<bool> {
    match command {
        Command::Ingest {
            paths,
            warehouse,
            config,
            files_per_commit,
            format,
            json,
        } => {
            let json = output::json_or(format, json);
            let config = match &config {
                Some(p) => Config::load(p)?,
                None => Config::default(),
            };
            let catalog = open_catalog(kind, &warehouse, false).await?;
            ingest(catalog.as_ref(), &config, &paths, files_per_commit, json).await
        }
        Command::Scan {
            table,
            warehouse,
            as_of,
            snapshot,
            limit,
            format,
        } => {
            let catalog = open_catalog(kind, &warehouse, true).await?;
            let as_of_ms = as_of.as_deref().map(parse_time).transpose()?;
            let r = Scan::new(catalog.as_ref(), parse_ident(&table)?)
                .snapshot_id(snapshot)
                .as_of_ms(as_of_ms)
                .limit(limit)
                .execute()
                .await?;
            let mut out = std::io::stdout().lock();
            output::write(&mut out, &r.batch, format)?;
            Ok(true)
        }
        Command::History {
            table,
            warehouse,
            format,
            json,
        } => {
            let catalog = open_catalog(kind, &warehouse, true).await?;
            let snaps = history(catalog.as_ref(), &parse_ident(&table)?).await?;
            let mut out = std::io::stdout().lock();
            let format = if json {
                output::TableOrJson::Json
            } else {
                format
            };
            match format {
                output::TableOrJson::Json => {
                    for s in &snaps {
                        writeln!(out, "{}", serde_json::to_string(s)?)?;
                    }
                }
                _ => {
                    writeln!(
                        out,
                        "{:<20} {:<24} {:<10} {:>9} {:>9} {:>9} {:>10}  files",
                        "snapshot",
                        "committed (UTC)",
                        "operation",
                        "inserted",
                        "updated",
                        "deleted",
                        "rows"
                    )?;
                    for s in &snaps {
                        let when = chrono::DateTime::from_timestamp_millis(s.timestamp_ms)
                            .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
                            .unwrap_or_default();
                        let n =
                            |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
                        let files: Vec<&str> = s
                            .source_files
                            .iter()
                            .map(|f| f.rsplit('/').next().unwrap_or(f))
                            .collect();
                        writeln!(
                            out,
                            "{:<20} {:<24} {:<10} {:>9} {:>9} {:>9} {:>10}  {}",
                            s.snapshot_id,
                            when,
                            s.operation,
                            n(s.rows_inserted),
                            n(s.rows_updated),
                            n(s.rows_deleted),
                            n(s.live_rows),
                            files.join(", ")
                        )?;
                    }
                }
            }
            Ok(true)
        }
        Command::Compact {
            table,
            warehouse,
            target_file_size,
            max_bytes,
            format,
            json,
        } => {
            let json = output::json_or(format, json);
            let catalog = open_catalog(kind, &warehouse, true).await?;
            let options = dms2iceberg::ops::compact::CompactOptions {
                target_file_size,
                max_bytes,
                ..Default::default()
            };
            let r = dms2iceberg::ops::compact::Compact::new(catalog.as_ref(), parse_ident(&table)?)
                .options(options)
                .execute()
                .await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{}: data files {} -> {}, delete files {} -> {}; rewrote {} files ({} bytes) into {} in {} commits; {} groups left; {:.2}s",
                    r.table,
                    r.data_files_before,
                    r.data_files_after,
                    r.delete_files_before,
                    r.delete_files_after,
                    r.data_files_rewritten,
                    r.bytes_rewritten,
                    r.data_files_written,
                    r.commits,
                    r.groups_left,
                    r.elapsed_ms as f64 / 1000.0
                );
            }
            Ok(true)
        }
        Command::Expire {
            table,
            warehouse,
            older_than_hours,
            retain_last,
            dry_run,
            format,
            json,
        } => {
            let json = output::json_or(format, json);
            let catalog = open_catalog(kind, &warehouse, true).await?;
            let cutoff =
                chrono::Utc::now().timestamp_millis() - (older_than_hours * 3_600_000.0) as i64;
            let r = dms2iceberg::ops::maintain::ExpireSnapshots::new(
                catalog.as_ref(),
                parse_ident(&table)?,
                cutoff,
                retain_last,
            )
            .dry_run(dry_run)
            .execute()
            .await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                let verb = if dry_run { "would expire" } else { "expired" };
                println!(
                    "{}: {verb} {} snapshots ({} kept); {} files {}",
                    r.table,
                    r.snapshots_expired.len(),
                    r.snapshots_kept,
                    r.files_deleted.len(),
                    if dry_run {
                        "would be deleted"
                    } else {
                        "deleted"
                    }
                );
                for f in &r.files_deleted {
                    println!("  {f}");
                }
            }
            Ok(true)
        }
        Command::Orphans {
            table,
            warehouse,
            min_age_hours,
            delete,
            format,
            json,
        } => {
            let json = output::json_or(format, json);
            let catalog = open_catalog(kind, &warehouse, true).await?;
            let r = dms2iceberg::ops::maintain::Orphans::new(
                catalog.as_ref(),
                parse_ident(&table)?,
                (min_age_hours * 3_600_000.0) as i64,
            )
            .delete(delete)
            .execute()
            .await?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                for o in &r.orphans {
                    println!("{}\t{} bytes\t{:.1} h old", o.path, o.size, o.age_hours);
                }
                println!(
                    "{}: {} orphan files{}; {} unreferenced files younger than {min_age_hours} h left alone",
                    r.table,
                    r.orphans.len(),
                    if delete {
                        format!(", {} deleted", r.deleted)
                    } else {
                        String::new()
                    },
                    r.too_young
                );
            }
            if let Some(why) = &r.refused {
                if delete {
                    eprintln!("error: {}: refusing to delete orphan files: {why}", r.table);
                    return Ok(false);
                }
                eprintln!("warning: {}: these files may be in use: {why}", r.table);
            }
            Ok(true)
        }
        Command::MarkApplied {
            table,
            through,
            warehouse,
            force,
        } => {
            let catalog = open_catalog(kind, &warehouse, true).await?;
            let r = dms2iceberg::ops::mark_applied::MarkApplied::new(
                catalog.as_ref(),
                parse_ident(&table)?,
                through,
            )
            .force(force)
            .execute()
            .await?;
            println!(
                "{}: every DMS file up to {} now counts as applied{}",
                r.table,
                r.through,
                if r.replaced.is_some() {
                    " (the previous record was replaced)"
                } else {
                    ""
                }
            );
            Ok(true)
        }
        Command::Tables {
            warehouse,
            format,
            json,
        } => {
            let catalog = open_catalog(kind, &warehouse, true).await?;
            let tables = catalog.list_tables().await?;
            if output::json_or(format, json) {
                for t in tables {
                    println!("{}", serde_json::json!({ "table": t.to_string() }));
                }
            } else {
                for t in tables {
                    println!("{t}");
                }
            }
            Ok(true)
        }
    }
}

async fn ingest(
    catalog: &dyn Catalog,
    config: &Config,
    paths: &[PathBuf],
    files_per_commit: usize,
    json: bool,
) -> Result<bool> {
    let found = discover_all(paths, &config.source)?;
    let tables = found.tables;
    if tables.is_empty() {
        bail!(
            "no DMS files (LOAD*.csv|parquet or YYYYMMDD-HHMMSS*.csv|parquet under <schema>/<table>/) found under the given paths{}",
            match found.skipped.len() {
                0 => String::new(),
                n => format!(" ({n} other path(s) skipped)"),
            }
        );
    }
    let total: usize = tables.iter().map(|t| t.files.len()).sum();
    let progress = std::io::stderr().is_terminal() && !json;
    let ingest = Ingest::new(catalog, config).files_per_commit(files_per_commit);
    let mut done = 0usize;
    let mut all_ok = true;
    let mut out = std::io::stdout();
    for t in tables {
        if !unplaced_ok(config, &t, json) {
            all_ok = false;
            continue;
        }
        let started = Instant::now();
        let report = ingest
            .execute(&t.schema, &t.table, local_inputs(t.files), |c| {
                done += c.files.len();
                if json {
                    if let Ok(line) = serde_json::to_string(c) {
                        println!("{line}");
                    }
                } else if progress {
                    let width = 30;
                    let filled = done * width / total.max(1);
                    eprint!(
                        "\r[{}{}] {done}/{total} files",
                        "#".repeat(filled),
                        " ".repeat(width - filled)
                    );
                    let _ = std::io::stderr().flush();
                }
            })
            .await;
        if progress {
            eprint!("\r{}\r", " ".repeat(60));
        }
        let sum = |f: fn(&dms2iceberg::ops::ingest::CommitReport) -> usize| -> usize {
            report.commits.iter().map(f).sum()
        };
        let last_snapshot = report.commits.iter().rev().find_map(|c| c.snapshot_id);
        let stale = sum(|c| c.stale_changes);
        let counts = format!(
            "{} files applied, {} skipped (already applied){}; rows {} inserted, {} updated, {} deleted{}; snapshot {}; {:.2}s",
            report.applied_files(),
            report.skipped_files(),
            if report.files_waiting > 0 {
                format!(
                    ", {} waiting (not applied: DMS order is kept)",
                    report.files_waiting
                )
            } else {
                String::new()
            },
            sum(|c| c.inserted),
            sum(|c| c.updated),
            sum(|c| c.deleted),
            if stale > 0 {
                format!(", {stale} stale (older than the row the table holds: not applied)")
            } else {
                String::new()
            },
            last_snapshot
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unchanged".into()),
            started.elapsed().as_secs_f64()
        );
        let rejected = sum(|c| c.rows_rejected);
        if rejected > 0 {
            eprintln!(
                "warning: {}: {rejected} rows could not be read and were set aside in {}__rejected",
                report.source, report.table
            );
        }
        if !json && report.reloads() > 0 {
            println!(
                "    {} reload(s): a new full load replaced the table's contents",
                report.reloads()
            );
        }
        if !json && report.superseded_files() > 0 {
            println!(
                "    {} file(s) superseded by a reload (from before it): not applied",
                report.superseded_files()
            );
        }
        let beyond = report.beyond_record_files() - report.loud_files().len();
        if !json && beyond > 0 {
            println!(
                "    {beyond} file(s) older than the table's applied-file record: taken as applied long ago"
            );
        }
        for f in report.loud_files() {
            all_ok = false;
            eprintln!(
                "error: {}: {f} is older than the files the table's applied-file record lists and \
                 changed after the record moved past it: it was not applied and cannot be merged \
                 in order (reload the table from DMS if it is new; list it in `skip_files` if it \
                 is a copy of an applied file)",
                report.source
            );
        }
        let name = if report.table.is_empty() {
            report.source.clone()
        } else {
            format!("{} -> {}", report.source, report.table)
        };
        match &report.error {
            // Printed once, on stderr, with the table's counts: what was applied before the
            // failure stays applied.
            Some(e) => {
                all_ok = false;
                eprintln!(
                    "error: {name}: FAILED: {}\n       {counts}",
                    without_table_prefix(e, &report.table)
                );
            }
            None if !json => {
                writeln!(out, "{name}: {counts}")?;
            }
            None => {}
        }
    }
    // Paths that are not DMS files of a table are passed over, never an error: listed so
    // that nothing is dropped unseen.
    if !found.skipped.is_empty() {
        let mut lines = vec![format!(
            "skipped {} path(s) that are not DMS files of a table:",
            found.skipped.len()
        )];
        lines.extend(
            found
                .skipped
                .iter()
                .map(|s| format!("  {}: {}", s.path.display(), s.reason)),
        );
        if json {
            eprintln!("{}", lines.join("\n"));
        } else {
            writeln!(out, "{}", lines.join("\n"))?;
        }
    }
    Ok(all_ok)
}

/// A DMS file in a table's folder that cannot be placed in DMS order stops that table (unless
/// the operator lists it under `skip_files`). Ok(false): the table stops.
fn unplaced_ok(config: &Config, t: &dms2iceberg::ops::discover::TableFiles, json: bool) -> bool {
    let source = format!("{}.{}", t.schema, t.table);
    let skip = |p: &std::path::Path| {
        config
            .table(&t.schema, &t.table)
            .is_ok_and(|c| c.is_skipped(&p.to_string_lossy()))
    };
    let blocking: Vec<_> = t.unplaced.iter().filter(|(p, _)| !skip(p)).collect();
    if blocking.is_empty() {
        return true;
    }
    for (_, reason) in &blocking {
        eprintln!("error: {source}: {reason}");
    }
    eprintln!(
        "       {} file(s) of {source} were not applied: the file(s) above belong to it but \
         cannot be placed in DMS order (move them, or list them under `skip_files`)",
        t.files.len()
    );
    if !json {
        println!("{source}: not applied ({} file(s) waiting)", t.files.len());
    }
    false
}

/// The summary line names the table already: `table x.y: reason` becomes `reason`.
fn without_table_prefix<'a>(message: &'a str, table: &str) -> &'a str {
    message
        .strip_prefix(&format!("table {table}: "))
        .unwrap_or(message)
}

/// RFC 3339, `YYYY-MM-DD HH:MM:SS[.fff]` (UTC), or epoch milliseconds.
fn parse_time(s: &str) -> Result<i64> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis());
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, f) {
            return Ok(t.and_utc().timestamp_millis());
        }
        if let Ok(d) = chrono::NaiveDate::parse_from_str(s, f) {
            return Ok(d
                .and_hms_opt(0, 0, 0)
                .map(|t| t.and_utc().timestamp_millis())
                .unwrap_or_default());
        }
    }
    bail!(
        "cannot read `{s}` as a time: use RFC 3339, \"YYYY-MM-DD HH:MM:SS\" (UTC) or epoch milliseconds"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
    }

    #[test]
    fn the_summary_names_the_table_once() {
        assert_eq!(
            without_table_prefix("table s.t: primary key column `x` is missing", "s.t"),
            "primary key column `x` is missing"
        );
        assert_eq!(
            without_table_prefix("bad input: f.csv: x", "s.t"),
            "bad input: f.csv: x"
        );
    }
}
