//! Everything the CLI prints on stdout. Scan results: an aligned table for people, CSV and
//! JSON lines for programs; reports (history, compact, expire, orphans): a summary for people,
//! one JSON object for programs.
//! JSON values are exact: decimals as strings with their scale, timestamps with microseconds.

use std::io::Write;

use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::DataType;
use dms2iceberg::ops::compact::CompactReport;
use dms2iceberg::ops::history::{RecordView, SnapshotInfo};
use dms2iceberg::ops::ingest::{CommitReport, TableReport};
use dms2iceberg::ops::maintain::{
    ExpireReport, OrphanReport, RepairReport, RewriteManifestsReport, VerifyReport,
};
use serde::Serialize;

/// `scan --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Table,
    Csv,
    Json,
}

/// `history --format` (no CSV: refused rather than printed as a table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TableOrJson {
    Table,
    Json,
}

/// `--format` of the commands that print a report (ingest, compact, expire, orphans, tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TextOrJson {
    Text,
    Json,
}

/// `--format` or its older spelling `--json` (still accepted).
pub(crate) fn json_or(format: TextOrJson, json: bool) -> bool {
    json || format == TextOrJson::Json
}

fn options() -> FormatOptions<'static> {
    FormatOptions::new()
        .with_null("")
        .with_date_format(Some("%Y-%m-%d"))
        .with_datetime_format(Some("%Y-%m-%d %H:%M:%S%.6f"))
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.6f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.6f%:z"))
        .with_time_format(Some("%H:%M:%S%.6f"))
}

/// Text of every cell, `None` for NULL.
fn cells(batch: &RecordBatch) -> anyhow::Result<Vec<Vec<Option<String>>>> {
    let opts = options();
    let fmts = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        rows.push(
            batch
                .columns()
                .iter()
                .zip(&fmts)
                .map(|(c, f)| (!c.is_null(r)).then(|| f.value(r).to_string()))
                .collect(),
        );
    }
    Ok(rows)
}

pub(crate) fn write(
    out: &mut impl Write,
    batch: &RecordBatch,
    format: Format,
) -> anyhow::Result<()> {
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let rows = cells(batch)?;
    match format {
        Format::Json => {
            // Keys in column order (a serde_json map would sort them).
            let keys: Vec<String> = names
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<_, _>>()?;
            for row in &rows {
                let fields: Vec<String> = keys
                    .iter()
                    .zip(row)
                    .zip(schema.fields())
                    .map(|((k, v), f)| format!("{k}:{}", json_value(v.as_deref(), f.data_type())))
                    .collect();
                writeln!(out, "{{{}}}", fields.join(","))?;
            }
        }
        Format::Csv => {
            writeln!(
                out,
                "{}",
                names
                    .iter()
                    .map(|n| csv_field(n))
                    .collect::<Vec<_>>()
                    .join(",")
            )?;
            for row in &rows {
                let line: Vec<String> = row
                    .iter()
                    .map(|v| v.as_deref().map(csv_field).unwrap_or_default())
                    .collect();
                writeln!(out, "{}", line.join(","))?;
            }
        }
        Format::Table => {
            let shown: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|v| {
                            v.clone()
                                .unwrap_or_else(|| "NULL".into())
                                .replace('\n', "\\n")
                                .replace('\r', "\\r")
                        })
                        .collect()
                })
                .collect();
            let mut widths: Vec<usize> = names.iter().map(|n| n.chars().count()).collect();
            for r in &shown {
                for (w, v) in widths.iter_mut().zip(r) {
                    *w = (*w).max(v.chars().count());
                }
            }
            let line = |vals: Vec<&str>| -> String {
                vals.iter()
                    .zip(&widths)
                    .map(|(v, w)| format!("{v:<w$}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
                    .trim_end()
                    .to_string()
            };
            writeln!(out, "{}", line(names.clone()))?;
            writeln!(
                out,
                "{}",
                widths
                    .iter()
                    .map(|w| "-".repeat(*w))
                    .collect::<Vec<_>>()
                    .join("-+-")
            )?;
            for r in &shown {
                writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
            }
            writeln!(out, "({} rows)", rows.len())?;
        }
    }
    Ok(())
}

fn json_value(v: Option<&str>, t: &DataType) -> serde_json::Value {
    let Some(v) = v else {
        return serde_json::Value::Null;
    };
    match t {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => v
            .parse::<i64>()
            .map(serde_json::Value::from)
            .unwrap_or_else(|_| serde_json::Value::String(v.into())),
        DataType::Float32 | DataType::Float64 => v
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(serde_json::Value::Number)
            .unwrap_or_else(|| serde_json::Value::String(v.into())),
        DataType::Boolean => serde_json::Value::Bool(v == "true"),
        _ => serde_json::Value::String(v.into()),
    }
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

/// A report as one JSON line, or through `text` for people.
pub(crate) fn report<R: Serialize>(
    r: &R,
    json: bool,
    text: impl FnOnce(&mut dyn Write, &R) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(r)?)?;
    } else {
        text(&mut out, r)?;
    }
    Ok(())
}

/// `history`: one row per snapshot, oldest first, or one JSON line per snapshot.
pub(crate) fn history(
    out: &mut impl Write,
    snapshots: &[SnapshotInfo],
    format: TableOrJson,
) -> anyhow::Result<()> {
    if format == TableOrJson::Json {
        for s in snapshots {
            writeln!(out, "{}", serde_json::to_string(s)?)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "{:<20} {:<24} {:<10} {:>9} {:>9} {:>9} {:>10}  files",
        "snapshot", "committed (UTC)", "operation", "inserted", "updated", "deleted", "rows"
    )?;
    let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    for s in snapshots {
        let when = chrono::DateTime::from_timestamp_millis(s.timestamp_ms)
            .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
            .unwrap_or_default();
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
            if s.truncate { "truncate" } else { &s.operation },
            n(s.rows_inserted),
            n(s.rows_updated),
            n(s.rows_deleted),
            n(s.live_rows),
            files.join(", ")
        )?;
    }
    Ok(())
}

/// The applied-file record in one line: what decides which DMS files the table holds.
pub(crate) fn record_line(record: Option<&RecordView>) -> String {
    let Some(r) = record else {
        return "no applied-file record (no DMS file applied by dms2iceberg)".into();
    };
    let through = r
        .last_file
        .as_deref()
        .map(|f| f.rsplit('/').next().unwrap_or(f).to_string())
        .or_else(|| r.watermark.clone())
        .unwrap_or_else(|| "(no change file)".into());
    let where_ = if r.in_property {
        format!(
            "table property dms2iceberg.applied, {} bytes",
            r.property_bytes
        )
    } else {
        "from snapshot summaries; the next commit writes the table property".into()
    };
    let horizon = match &r.horizon {
        Some(h) => format!("; older than {h} taken as applied"),
        None => String::new(),
    };
    format!(
        "applied through {through}; load {} ({} file(s)); {} change file(s) listed{horizon} ({where_})",
        r.load_generation,
        r.load_files.len(),
        r.files_in_window
    )
}

pub(crate) fn compact(out: &mut dyn Write, r: &CompactReport) -> std::io::Result<()> {
    writeln!(
        out,
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
    )?;
    if r.deletes_carried > 0 {
        writeln!(
            out,
            "  {} rows deleted by concurrent commits were carried over to the rewritten files",
            r.deletes_carried
        )?;
    }
    if let Some(c) = &r.read_cost {
        writeln!(
            out,
            "  read cost: {} manifests, {} data files ({} small in one partition at most), {} delete files (at most {} on one data file, {:.1}% of its rows)",
            c.manifests,
            c.data_files,
            c.max_small_files,
            c.delete_files,
            c.max_deletes_per_data_file,
            c.max_deleted_ratio * 100.0
        )?;
        match r.compacted_because.is_empty() {
            true => writeln!(out, "  within the thresholds: no file rewritten")?,
            false => writeln!(out, "  compacted: {}", r.compacted_because.join("; "))?,
        }
    }
    if let Some((before, after)) = r.manifests_rewritten {
        writeln!(out, "  manifests rewritten: {before} -> {after}")?;
    }
    Ok(())
}

/// A table's read cost in one line (`tables`).
pub(crate) fn read_cost_line(c: &dms2iceberg::ReadCost) -> String {
    format!(
        "read cost: {} manifests, {} data files, {} delete files (at most {} on one data file)",
        c.manifests, c.data_files, c.delete_files, c.max_deletes_per_data_file
    )
}

pub(crate) fn rewrite_manifests(
    out: &mut dyn Write,
    r: &RewriteManifestsReport,
) -> std::io::Result<()> {
    match r.snapshot_id {
        Some(id) => writeln!(
            out,
            "{}: manifests {} -> {} (snapshot {id})",
            r.table, r.manifests_before, r.manifests_after
        ),
        None => writeln!(
            out,
            "{}: {} manifests, nothing to merge",
            r.table, r.manifests_before
        ),
    }
}

pub(crate) fn expire(out: &mut dyn Write, r: &ExpireReport, dry_run: bool) -> std::io::Result<()> {
    let (verb, deleted) = if dry_run {
        ("would expire", "would be deleted")
    } else {
        ("expired", "deleted")
    };
    writeln!(
        out,
        "{}: {verb} {} snapshots ({} kept); {} files {deleted}",
        r.table,
        r.snapshots_expired.len(),
        r.snapshots_kept,
        r.files_deleted.len(),
    )?;
    for f in &r.files_deleted {
        writeln!(out, "  {f}")?;
    }
    Ok(())
}

pub(crate) fn orphans(
    out: &mut dyn Write,
    r: &OrphanReport,
    min_age_hours: f64,
    delete: bool,
) -> std::io::Result<()> {
    for o in &r.orphans {
        writeln!(
            out,
            "{}\t{} bytes\t{:.1} h old",
            o.path, o.size, o.age_hours
        )?;
    }
    let deleted = if delete {
        format!(", {} deleted", r.deleted)
    } else {
        String::new()
    };
    writeln!(
        out,
        "{}: {} orphan files{deleted}; {} unreferenced files younger than {min_age_hours} h left alone",
        r.table,
        r.orphans.len(),
        r.too_young
    )
}

pub(crate) fn verify(out: &mut dyn Write, r: &VerifyReport) -> std::io::Result<()> {
    for p in &r.problems {
        writeln!(out, "  {} (snapshots {:?})", p.what, p.snapshots)?;
    }
    let read = if r.snapshots_read > 0 {
        format!(", {} read whole", r.snapshots_read)
    } else {
        String::new()
    };
    let verdict = match r.problems.len() {
        0 => "ok".to_string(),
        n => format!("{n} problems"),
    };
    writeln!(
        out,
        "{}: {verdict}: {} snapshots{read}, {} files named ({})",
        r.table, r.snapshots, r.files, r.metadata_location
    )
}

pub(crate) fn repair(out: &mut dyn Write, r: &RepairReport) -> std::io::Result<()> {
    if !r.was_damaged() {
        writeln!(
            out,
            "{}: not damaged: {} and its current snapshot read; nothing to do",
            r.table, r.damaged
        )?;
        if !r.older_snapshots_broken.is_empty() {
            for p in &r.older_snapshots_broken {
                writeln!(out, "  older snapshot: {p}")?;
            }
            writeln!(
                out,
                "  older snapshots lost files: time travel to them fails; `dms2iceberg expire` \
                 drops them (the table itself reads)"
            )?;
        }
        return Ok(());
    }
    writeln!(out, "{}: damaged: the catalog names {}", r.table, r.damaged)?;
    for p in &r.problems {
        writeln!(out, "  {p}")?;
    }
    for (path, why) in &r.passed_over {
        writeln!(out, "  passed over {path}: {why}")?;
    }
    let restored = r.restored_from.as_deref().unwrap_or("-");
    let through = r.applied_through.as_deref().unwrap_or("no DMS file");
    match (&r.metadata_location, r.dry_run) {
        (_, true) => writeln!(
            out,
            "{}: would restore from {restored} (its record holds {through}; later DMS files \
             would be applied again by the next ingest)",
            r.table
        ),
        (Some(new), false) => writeln!(
            out,
            "{}: restored from {restored} as {new}; the record holds {through}: later DMS files \
             are applied again by the next ingest of the table",
            r.table
        ),
        (None, false) => writeln!(out, "{}: nothing changed", r.table),
    }
}

/// `ingest`: a table's summary line, then what else happened to it (stdout); its failures
/// (stderr, once each). Ok(false): the table failed or holds a file that cannot be applied.
pub(crate) fn ingest_table(
    out: &mut impl Write,
    report: &TableReport,
    elapsed: std::time::Duration,
    json: bool,
) -> anyhow::Result<bool> {
    let name = if report.table.is_empty() {
        report.source.clone()
    } else {
        format!("{} -> {}", report.source, report.table)
    };
    let counts = counts(report, elapsed);
    let mut ok = true;
    match &report.error {
        // Printed once, on stderr, with the table's counts: what was applied before the
        // failure stays applied.
        Some(e) => {
            ok = false;
            eprintln!(
                "error: {name}: FAILED: {}\n       {counts}",
                without_table_prefix(e, &report.table)
            );
        }
        None if !json => writeln!(out, "{name}: {counts}")?,
        None => {}
    }
    if !json {
        for line in details(report) {
            writeln!(out, "    {line}")?;
        }
    }
    let rejected: usize = report.commits.iter().map(|c| c.rows_rejected).sum();
    if rejected > 0 {
        eprintln!(
            "warning: {}: {rejected} rows could not be read and were set aside in {}__rejected",
            report.source, report.table
        );
    }
    for f in report.loud_files() {
        ok = false;
        eprintln!(
            "error: {}: {f} is older than the files the table's applied-file record lists and \
             changed after the record moved past it: it was not applied and cannot be merged \
             in order (reload the table from DMS if it is new; list it in `skip_files` if it \
             is a copy of an applied file)",
            report.source
        );
    }
    Ok(ok)
}

/// Files, rows and the snapshot a table's run ended at.
fn counts(report: &TableReport, elapsed: std::time::Duration) -> String {
    let sum = |f: fn(&CommitReport) -> usize| -> usize { report.commits.iter().map(f).sum() };
    let waiting = match report.files_waiting {
        0 => String::new(),
        n => format!(", {n} waiting (not applied: DMS order is kept)"),
    };
    let stale = match sum(|c| c.stale_changes) {
        0 => String::new(),
        n => format!(", {n} stale (older than the row the table holds: not applied)"),
    };
    let snapshot = report
        .commits
        .iter()
        .rev()
        .find_map(|c| c.snapshot_id)
        .map_or_else(|| "unchanged".into(), |s| s.to_string());
    format!(
        "{} files applied, {} skipped (already applied){waiting}; rows {} inserted, {} updated, {} deleted{stale}; snapshot {snapshot}; {:.2}s",
        report.applied_files(),
        report.skipped_files(),
        sum(|c| c.inserted),
        sum(|c| c.updated),
        sum(|c| c.deleted),
        elapsed.as_secs_f64()
    )
}

/// Reloads and files not applied for a reason other than having been applied.
fn details(report: &TableReport) -> Vec<String> {
    let mut lines = Vec::new();
    if report.reloads() > 0 {
        lines.push(format!(
            "{} reload(s): a new full load replaced the table's contents",
            report.reloads()
        ));
    }
    if report.superseded_files() > 0 {
        lines.push(format!(
            "{} file(s) superseded by a reload (from before it): not applied",
            report.superseded_files()
        ));
    }
    let beyond = report.beyond_record_files() - report.loud_files().len();
    if beyond > 0 {
        lines.push(format!(
            "{beyond} file(s) older than the table's applied-file record: taken as applied long ago"
        ));
    }
    lines
}

/// The summary line names the table already: `table x.y: reason` becomes `reason`.
pub(crate) fn without_table_prefix<'a>(message: &'a str, table: &str) -> &'a str {
    message
        .strip_prefix(&format!("table {table}: "))
        .unwrap_or(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn json_keys_follow_the_columns() {
        let b = RecordBatch::try_from_iter([
            ("zeta", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            (
                "alpha",
                Arc::new(StringArray::from(vec!["a\"b"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let mut out = Vec::new();
        write(&mut out, &b, Format::Json).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"zeta\":1,\"alpha\":\"a\\\"b\"}\n"
        );
    }
}
