//! `dms2iceberg ingest`: DMS files under local paths → their tables, a line (or JSON report) per table.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use std::time::Instant;

use anyhow::{Result, bail};
use dms2iceberg::catalog::Catalog;
use dms2iceberg::config::Config;
use dms2iceberg::ops::discover::discover_all;
use dms2iceberg::ops::ingest::{Ingest, local_inputs};

use super::{CatalogArgs, open_catalog};
use crate::output;

/// Apply DMS files (files or folders) to their tables, in DMS order, exactly once.
#[derive(clap::Args)]
pub(crate) struct IngestArgs {
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Put every table in this namespace (Glue database), as the functions do with
    /// `DMS2ICEBERG_GLUE_DATABASE`: to replay or backfill a table the functions write, with
    /// the same config.
    #[arg(long)]
    pub database: Option<String>,
    /// DMS files per snapshot (1 = one snapshot per file).
    #[arg(long, default_value_t = 1)]
    pub files_per_commit: usize,
    /// Full-load files of one table applied at once (each its own commit; change files after
    /// them still apply one by one). Memory grows with it: each holds one streamed input.
    #[arg(long, default_value_t = 1)]
    pub parallel: usize,
    /// `text`: a line per table; `json`: one JSON report per commit.
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
    /// Same as `--format json` (older spelling).
    #[arg(long, hide = true)]
    pub json: bool,
}

pub(crate) async fn run(catalog: &CatalogArgs, a: IngestArgs) -> Result<bool> {
    let IngestArgs {
        paths,
        warehouse,
        config,
        database,
        files_per_commit,
        parallel,
        format,
        json,
    } = a;
    let json = output::json_or(format, json);
    let mut config = match &config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    }
    .with_format_version_from_env()?;
    if let Some(db) = database {
        if !dms2iceberg::config::is_identifier(&db) {
            bail!("--database `{db}`: use lower-case letters, digits and `_`");
        }
        config.namespace_override = Some(db);
    }
    let catalog = open_catalog(catalog, &warehouse, false).await?;
    apply(
        catalog.as_ref(),
        &config,
        &paths,
        (files_per_commit, parallel),
        json,
    )
    .await
}

async fn apply(
    catalog: &dyn Catalog,
    config: &Config,
    paths: &[PathBuf],
    (files_per_commit, parallel): (usize, usize),
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
    let ingest = Ingest::new(catalog, config)
        .files_per_commit(files_per_commit)
        .parallel(parallel);
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
        all_ok &= output::ingest_table(&mut out, &report, started.elapsed(), json)?;
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

#[cfg(test)]
mod tests {
    use crate::output::without_table_prefix;

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
