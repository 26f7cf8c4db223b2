//! Reading tables: `scan` (time travel included), `history`, `tables`.

use std::io::Write;

use anyhow::Result;
use dms2iceberg::ops::{history as ops_history, parse_ident, scan::Scan};

use super::{CatalogArgs, open_catalog, parse_time};
use crate::output;

/// Print a table's rows, sorted by primary key.
#[derive(clap::Args)]
pub(crate) struct ScanArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// The table as it was at this time: RFC 3339, "YYYY-MM-DD HH:MM:SS[.fff]" (UTC) or epoch milliseconds.
    #[arg(long, conflicts_with = "snapshot")]
    pub as_of: Option<String>,
    #[arg(long)]
    pub snapshot: Option<i64>,
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: output::Format,
}

pub(crate) async fn scan(catalog: &CatalogArgs, a: ScanArgs) -> Result<bool> {
    let ScanArgs {
        table,
        warehouse,
        as_of,
        snapshot,
        limit,
        format,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let as_of_ms = as_of.as_deref().map(parse_time).transpose()?;
    let r = Scan::new(catalog.as_ref(), parse_ident(&table)?)
        .snapshot_id(snapshot)
        .as_of_ms(as_of_ms)
        .limit(limit)
        .execute()
        .await?;
    output::write(&mut std::io::stdout().lock(), &r.batch, format)?;
    Ok(true)
}

/// List a table's snapshots, oldest first, with the DMS files each applied.
#[derive(clap::Args)]
pub(crate) struct HistoryArgs {
    pub table: String,
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    #[arg(long, value_enum, default_value = "table")]
    pub format: output::TableOrJson,
    /// Same as `--format json` (older spelling).
    #[arg(long, hide = true)]
    pub json: bool,
}

pub(crate) async fn history(catalog: &CatalogArgs, a: HistoryArgs) -> Result<bool> {
    let HistoryArgs {
        table,
        warehouse,
        format,
        json,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let ident = parse_ident(&table)?;
    let snapshots = ops_history::history(catalog.as_ref(), &ident).await?;
    let format = if json {
        output::TableOrJson::Json
    } else {
        format
    };
    let mut out = std::io::stdout().lock();
    output::history(&mut out, &snapshots, format)?;
    // The record outlives expired snapshots: it, not the list above, says what the table holds.
    if format == output::TableOrJson::Table {
        let record = ops_history::applied_record(catalog.as_ref(), &ident).await?;
        writeln!(out, "{}", output::record_line(record.as_ref()))?;
    }
    Ok(true)
}

/// List the tables in the warehouse.
#[derive(clap::Args)]
pub(crate) struct TablesArgs {
    #[arg(long, default_value = super::DEFAULT_WAREHOUSE)]
    pub warehouse: String,
    /// `text` (a summary) or `json` (machine-readable).
    #[arg(long, value_enum, default_value = "text")]
    pub format: output::TextOrJson,
    /// Same as `--format json` (older spelling).
    #[arg(long, hide = true)]
    pub json: bool,
}

pub(crate) async fn tables(catalog: &CatalogArgs, a: TablesArgs) -> Result<bool> {
    let TablesArgs {
        warehouse,
        format,
        json,
    } = a;
    let catalog = open_catalog(catalog, &warehouse, true).await?;
    let tables = catalog.list_tables().await?;
    let json = output::json_or(format, json);
    let mut out = std::io::stdout().lock();
    let mut all_read = true;
    for t in tables {
        // One table that cannot be read is listed with why; the others are listed as usual
        // (the listing is how an operator finds the damaged one).
        let read = async {
            // Rejected-rows side tables and tables of other writers have no record.
            let record = ops_history::applied_record(catalog.as_ref(), &t).await?;
            // What a reader's scan plan opens, from the metadata alone (see `compact
            // --if-needed`).
            let cost = dms2iceberg::ops::compact::Compact::new(catalog.as_ref(), t.clone())
                .read_cost()
                .await?;
            Ok::<_, dms2iceberg::Error>((record, cost))
        }
        .await;
        let (record, cost) = match read {
            Ok(r) => r,
            Err(e) => {
                all_read = false;
                if json {
                    let line = serde_json::json!({"table": t.to_string(), "error": e.to_string(), "kind": e.kind()});
                    writeln!(out, "{line}")?;
                } else {
                    writeln!(out, "{t}\terror ({}): {e}", e.kind())?;
                }
                continue;
            }
        };
        if json {
            #[derive(serde::Serialize)]
            struct Line<'a> {
                table: String,
                applied: Option<&'a ops_history::RecordView>,
                read_cost: &'a dms2iceberg::ReadCost,
            }
            let line = Line {
                table: t.to_string(),
                applied: record.as_ref(),
                read_cost: &cost,
            };
            writeln!(out, "{}", serde_json::to_string(&line)?)?;
        } else {
            writeln!(
                out,
                "{t}\t{}; {}",
                output::record_line(record.as_ref()),
                output::read_cost_line(&cost)
            )?;
        }
    }
    if !all_read {
        return Ok(false);
    }
    Ok(true)
}
