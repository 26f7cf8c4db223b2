//! Table maintenance: `compact`, `rewrite-manifests`, `expire`, `orphans`, `mark-applied`,
//! `truncate`, `upgrade`, `verify`, `repair`.

use anyhow::Result;
use dms2iceberg::ops::compact::{Compact, CompactOptions, Thresholds};
use dms2iceberg::ops::maintain::{ExpireSnapshots, Orphans, Repair, RewriteManifests, Verify};
use dms2iceberg::ops::mark_applied::MarkApplied;
use dms2iceberg::ops::parse_ident;
use dms2iceberg::ops::truncate::Truncate;
use dms2iceberg::ops::upgrade::Upgrade;

use super::{CatalogArgs, open_catalog};
use crate::output;

/// Rewrite small files and files with many deleted rows into target-size files sorted by
/// key (deletes applied); drop delete files nothing live needs.
#[derive(clap::Args)]
pub(crate) struct CompactArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// Output file size in bytes (default: the table's write.target-file-size-bytes).
    #[arg(long)]
    pub target_file_size: Option<u64>,
    /// Input bytes to rewrite in this run (the next run continues).
    #[arg(long, default_value_t = 1 << 30)]
    pub max_bytes: u64,
    /// Input bytes per rewrite group (one snapshot each). Groups are streamed: memory does not
    /// grow with this.
    #[arg(long, default_value_t = 256 << 20)]
    pub max_group_bytes: u64,
    /// Compact by read cost, as the compaction function does: only when the table's metadata
    /// shows `--small-files` small files in a partition, `--deletes-per-data-file` delete files
    /// on a data file, or `--deleted-ratio` of a file's rows deleted, and then only what they
    /// count (a file with few deleted rows keeps its delete file); manifests are rewritten when
    /// there are more than `--max-manifests`.
    #[arg(long)]
    pub if_needed: bool,
    #[arg(long, default_value_t = Thresholds::default().small_files)]
    pub small_files: usize,
    #[arg(long, default_value_t = Thresholds::default().deletes_per_data_file)]
    pub deletes_per_data_file: usize,
    #[arg(long, default_value_t = Thresholds::default().deleted_ratio)]
    pub deleted_ratio: f64,
    #[arg(long, default_value_t = Thresholds::default().manifests)]
    pub max_manifests: usize,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
    /// Same as `--format json` (older spelling).
    #[arg(long, hide = true)]
    pub json: bool,
}

pub(crate) async fn compact(catalog: &CatalogArgs, a: CompactArgs) -> Result<bool> {
    let CompactArgs {
        table,
        warehouse,
        target_file_size,
        max_bytes,
        max_group_bytes,
        if_needed,
        small_files,
        deletes_per_data_file,
        deleted_ratio,
        max_manifests,
        format,
        json,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let options = CompactOptions {
        target_file_size,
        max_bytes,
        max_group_bytes,
        ..Default::default()
    };
    let mut compact = Compact::new(catalog.as_ref(), parse_ident(&table)?).options(options);
    if if_needed {
        compact = compact.by_read_cost(Thresholds {
            small_files,
            deletes_per_data_file,
            deleted_ratio,
            manifests: max_manifests,
        });
    }
    let r = compact.execute().await?;
    output::report(&r, output::json_or(format, json), output::compact)?;
    Ok(true)
}

/// Merge a table's manifests into as few as the table's commit.manifest.target-size-bytes
/// allows (one per content and partition spec below it), dropping those without a live file.
#[derive(clap::Args)]
pub(crate) struct RewriteManifestsArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
}

pub(crate) async fn rewrite_manifests(
    catalog: &CatalogArgs,
    a: RewriteManifestsArgs,
) -> Result<bool> {
    let catalog = open_catalog(catalog, &a.warehouse, true).await?;
    let r = RewriteManifests::new(catalog.as_ref(), parse_ident(&a.table)?)
        .execute()
        .await?;
    output::report(
        &r,
        output::json_or(a.format, false),
        output::rewrite_manifests,
    )?;
    Ok(true)
}

/// Expire snapshots older than a retention (and delete the files only they referenced).
#[derive(clap::Args)]
pub(crate) struct ExpireArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// Expire snapshots older than this many hours.
    #[arg(long, default_value_t = 168.0)]
    pub older_than_hours: f64,
    /// Always keep this many of the newest snapshots.
    #[arg(long, default_value_t = 1)]
    pub retain_last: usize,
    /// Keep at most this many snapshots, however young (the oldest beyond them expire):
    /// metadata.json, which every reader parses on every query, grows with them.
    #[arg(long)]
    pub retain_max: Option<usize>,
    /// List what would be expired and deleted, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
    /// Same as `--format json` (older spelling).
    #[arg(long, hide = true)]
    pub json: bool,
}

pub(crate) async fn expire(catalog: &CatalogArgs, a: ExpireArgs) -> Result<bool> {
    let ExpireArgs {
        table,
        warehouse,
        older_than_hours,
        retain_last,
        retain_max,
        dry_run,
        format,
        json,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let cutoff = chrono::Utc::now().timestamp_millis() - (older_than_hours * 3_600_000.0) as i64;
    let r = ExpireSnapshots::new(catalog.as_ref(), parse_ident(&table)?, cutoff, retain_last)
        .retain_max(retain_max)
        .dry_run(dry_run)
        .execute()
        .await?;
    output::report(&r, output::json_or(format, json), |out, r| {
        output::expire(out, r, dry_run)
    })?;
    Ok(true)
}

/// List files in the table's folder that no snapshot or metadata references (`--delete`
/// removes them). Files younger than --min-age-hours are never touched.
#[derive(clap::Args)]
pub(crate) struct OrphansArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    #[arg(long, default_value_t = 72.0)]
    pub min_age_hours: f64,
    #[arg(long)]
    pub delete: bool,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
    /// Same as `--format json` (older spelling).
    #[arg(long, hide = true)]
    pub json: bool,
}

pub(crate) async fn orphans(catalog: &CatalogArgs, a: OrphansArgs) -> Result<bool> {
    let OrphansArgs {
        table,
        warehouse,
        min_age_hours,
        delete,
        format,
        json,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let r = Orphans::new(
        catalog.as_ref(),
        parse_ident(&table)?,
        (min_age_hours * 3_600_000.0) as i64,
    )
    .delete(delete)
    .execute()
    .await?;
    output::report(&r, output::json_or(format, json), |out, r| {
        output::orphans(out, r, min_age_hours, delete)
    })?;
    if let Some(why) = &r.refused {
        if delete {
            eprintln!("error: {}: refusing to delete orphan files: {why}", r.table);
            return Ok(false);
        }
        eprintln!("warning: {}: these files may be in use: {why}", r.table);
    }
    Ok(true)
}

/// Declare which DMS files a table holds, for a table with data but no record of them
/// (created or rewritten by another engine): every file up to `--through` counts as applied,
/// or, with `--none`, none does.
#[derive(clap::Args)]
pub(crate) struct MarkAppliedArgs {
    pub table: String,
    /// The last DMS file the table holds (file name, path or S3 key).
    #[arg(long, conflicts_with = "none", required_unless_present = "none")]
    pub through: Option<String>,
    /// The table holds no DMS file (filled another way before DMS wrote anything for it):
    /// every DMS file, full load included, applies on top of its rows.
    #[arg(long)]
    pub none: bool,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// Replace the record the table already has.
    #[arg(long)]
    pub force: bool,
}

pub(crate) async fn mark_applied(catalog: &CatalogArgs, a: MarkAppliedArgs) -> Result<bool> {
    let MarkAppliedArgs {
        table,
        through,
        none: _,
        warehouse,
        force,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let ident = parse_ident(&table)?;
    let op = match through {
        Some(file) => MarkApplied::new(catalog.as_ref(), ident, file),
        None => MarkApplied::none(catalog.as_ref(), ident),
    };
    let r = op.force(force).execute().await?;
    let replaced = if r.replaced {
        " (the previous record was replaced)"
    } else {
        ""
    };
    match &r.through {
        Some(file) => println!(
            "{}: {file} and every DMS file before it now count as applied{replaced}",
            r.table
        ),
        None => println!(
            "{}: the table holds no DMS file; every DMS file applies on top of its rows{replaced}",
            r.table
        ),
    }
    Ok(true)
}

/// Move a table to a later Iceberg format version (one-way).
#[derive(clap::Args)]
pub(crate) struct UpgradeArgs {
    pub table: String,
    /// The format version to move to: 3 (deletion vectors, row lineage; not read by Athena).
    #[arg(long)]
    pub format_version: u8,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
}

pub(crate) async fn upgrade(catalog: &CatalogArgs, a: UpgradeArgs) -> Result<bool> {
    let catalog = open_catalog(catalog, &a.warehouse, true).await?;
    let r = Upgrade::new(catalog.as_ref(), parse_ident(&a.table)?, a.format_version)?
        .execute()
        .await?;
    if r.unchanged {
        println!("{}: already format version {}", r.table, r.to);
    } else {
        println!(
            "{}: format version {} -> {} (one-way; the next commit gives every row its id)",
            r.table, r.from, r.to
        );
    }
    Ok(true)
}

/// Empty a table whose source table was truncated (or dropped and created again): one
/// snapshot removes every row (time travel to before it stays); files applied so far, and
/// change files written before now, count as superseded; later files apply on top.
#[derive(clap::Args)]
pub(crate) struct TruncateArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
}

pub(crate) async fn truncate(catalog: &CatalogArgs, a: TruncateArgs) -> Result<bool> {
    let TruncateArgs {
        table,
        warehouse,
        format,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let r = Truncate::new(catalog.as_ref(), parse_ident(&table)?)
        .execute()
        .await?;
    output::report(&r, output::json_or(format, false), |out, r| {
        match r.snapshot_id {
            Some(id) => writeln!(
                out,
                "{}: truncated (snapshot {id}); every row removed",
                r.table
            ),
            None => writeln!(
                out,
                "{}: not truncated: {}",
                r.table,
                r.note.as_deref().unwrap_or("nothing to do")
            ),
        }
    })?;
    Ok(true)
}

/// Check that every snapshot of a table reads: its manifest list and manifests decode and every
/// file they name as live exists (`--read`: and each snapshot reads whole in our scan).
#[derive(clap::Args)]
pub(crate) struct VerifyArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// Also read every snapshot's rows (through its deletes), as a query would.
    #[arg(long)]
    pub read: bool,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
}

pub(crate) async fn verify(catalog: &CatalogArgs, a: VerifyArgs) -> Result<bool> {
    let catalog = open_catalog(catalog, &a.warehouse, true).await?;
    let r = Verify::new(catalog.as_ref(), parse_ident(&a.table)?)
        .read_snapshots(a.read)
        .execute()
        .await?;
    output::report(&r, output::json_or(a.format, false), output::verify)?;
    Ok(r.is_ok())
}

/// Point a damaged table (its catalog names metadata that is missing, or that names missing
/// files) back at the newest metadata of its history that reads whole. DMS files applied since
/// then are applied again by the next ingest.
#[derive(clap::Args)]
pub(crate) struct RepairArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// Say what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
}

pub(crate) async fn repair(catalog: &CatalogArgs, a: RepairArgs) -> Result<bool> {
    let catalog = open_catalog(catalog, &a.warehouse, true).await?;
    let r = Repair::new(catalog.as_ref(), parse_ident(&a.table)?)
        .dry_run(a.dry_run)
        .execute()
        .await?;
    output::report(&r, output::json_or(a.format, false), output::repair)?;
    Ok(true)
}
