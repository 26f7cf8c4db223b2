//! The CLI's commands: `run` dispatches to one module per group of commands; each parses
//! nothing itself (clap does), calls the library, and renders through `crate::output`.

pub(crate) mod ingest;
pub(crate) mod maintain;
pub(crate) mod read;

use anyhow::{Context, Result, bail};
use dms2iceberg::catalog::{Catalog, SqliteCatalog};

/// The subcommands, one module each (argument structs and what they run).
#[derive(clap::Subcommand)]
pub(crate) enum Command {
    /// Apply DMS files (files or folders) to their tables, in DMS order, exactly once.
    Ingest(ingest::IngestArgs),
    /// Print a table's rows, sorted by primary key.
    Scan(read::ScanArgs),
    /// List a table's snapshots, oldest first, with the DMS files each applied.
    History(read::HistoryArgs),
    /// Rewrite small files and files with many deleted rows into target-size files sorted by
    /// key (deletes applied); drop delete files nothing live needs.
    Compact(maintain::CompactArgs),
    /// Merge a table's manifests into few (as every commit of ours keeps them), dropping those
    /// without a live file: repairs a table an older version or another engine left with many.
    RewriteManifests(maintain::RewriteManifestsArgs),
    /// Expire snapshots older than a retention (and delete the files only they referenced).
    Expire(maintain::ExpireArgs),
    /// List files in the table's folder that no snapshot or metadata references (`--delete`
    /// removes them). Files younger than --min-age-hours are never touched.
    Orphans(maintain::OrphansArgs),
    /// Declare which DMS files a table holds, for a table with data but no record of them
    /// (created or rewritten by another engine): every file up to `--through` counts as applied.
    MarkApplied(maintain::MarkAppliedArgs),
    /// Empty a table whose source table was truncated (or dropped and created again): one
    /// snapshot removes every row; files delivered so far count as superseded, later ones apply.
    Truncate(maintain::TruncateArgs),
    /// Move a table to a later Iceberg format version (one-way): `--format-version 3` gives it
    /// deletion vectors and row lineage, which Athena cannot read.
    Upgrade(maintain::UpgradeArgs),
    /// List the tables in the warehouse.
    Tables(read::TablesArgs),
    /// Check that every snapshot of a table reads: manifests decode, every file they name
    /// exists (`--read`: every snapshot's rows read). Exits 1 if anything is wrong.
    Verify(maintain::VerifyArgs),
    /// Point a damaged table (the catalog names metadata that is missing or names missing
    /// files) back at its newest intact metadata; DMS files applied since are applied again by
    /// the next ingest.
    Repair(maintain::RepairArgs),
}

/// Ok(false): ran, but some table failed.
pub(crate) async fn run(catalog: &CatalogArgs, command: Command) -> Result<bool> {
    match command {
        Command::Ingest(a) => ingest::run(catalog, a).await,
        Command::Scan(a) => read::scan(catalog, a).await,
        Command::History(a) => read::history(catalog, a).await,
        Command::Compact(a) => maintain::compact(catalog, a).await,
        Command::RewriteManifests(a) => maintain::rewrite_manifests(catalog, a).await,
        Command::Expire(a) => maintain::expire(catalog, a).await,
        Command::Orphans(a) => maintain::orphans(catalog, a).await,
        Command::MarkApplied(a) => maintain::mark_applied(catalog, a).await,
        Command::Truncate(a) => maintain::truncate(catalog, a).await,
        Command::Upgrade(a) => maintain::upgrade(catalog, a).await,
        Command::Tables(a) => read::tables(catalog, a).await,
        Command::Verify(a) => maintain::verify(catalog, a).await,
        Command::Repair(a) => maintain::repair(catalog, a).await,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CatalogKind {
    Sqlite,
    Glue,
    /// Amazon S3 Tables (`--warehouse arn:aws:s3tables:<region>:<account>:bucket/<name>`).
    S3tables,
    /// An Iceberg REST catalog (`--uri`).
    Rest,
}

/// Which catalog, from the global flags.
pub(crate) struct CatalogArgs {
    pub kind: CatalogKind,
    pub name: String,
    /// `--uri` (REST).
    pub uri: Option<String>,
}

/// `--warehouse` when not given: the SQLite catalog's folder.
pub(crate) const DEFAULT_WAREHOUSE: &str = "warehouse";

/// The catalog a command works on.
pub(crate) async fn open_catalog(
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
            aws.require_region()?;
            Ok(Box::new(aws.glue_catalog(warehouse)?))
        }
        CatalogKind::S3tables => {
            if args.name != dms2iceberg::catalog::SQLITE_CATALOG_NAME {
                bail!(
                    "--catalog-name is for the SQLite catalog; an S3 Tables catalog is its table bucket (--warehouse ARN)"
                );
            }
            let aws = dms2iceberg::aws::Aws::from_env().await;
            aws.require_region()?;
            Ok(Box::new(aws.s3tables_catalog(warehouse)?))
        }
        CatalogKind::Rest => {
            let Some(uri) = &args.uri else {
                bail!("--catalog rest needs --uri (the catalog's base URI, before /v1)");
            };
            if args.name != dms2iceberg::catalog::SQLITE_CATALOG_NAME {
                bail!(
                    "--catalog-name is for the SQLite catalog; a REST catalog is chosen by --uri and --warehouse"
                );
            }
            // `--warehouse` defaults to the SQLite folder `warehouse`: left at that, the
            // server's default warehouse is used.
            let warehouse = (warehouse != DEFAULT_WAREHOUSE).then(|| warehouse.to_string());
            let catalog = dms2iceberg::aws::rest_catalog(uri, warehouse, Default::default())
                .await
                .with_context(|| format!("connecting to the REST catalog at {uri}"))?;
            Ok(Box::new(catalog))
        }
    }
}

/// RFC 3339, `YYYY-MM-DD HH:MM:SS[.fff]` (UTC), or epoch milliseconds.
pub(crate) fn parse_time(s: &str) -> Result<i64> {
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
