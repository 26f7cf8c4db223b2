//! truncate: the source table was truncated (or dropped and created again). DMS writes no row
//! for that: with DDL handling on, it deletes the table's objects in S3, and new changes follow.
//! The table is emptied by one `overwrite` snapshot that removes every live file (time travel to
//! before it stays), and its applied-file record starts a new generation, so that the truncate
//! happens once and later files apply on top.
//!
//! Two ways in: an operator's `dms2iceberg truncate TABLE` (everything applied so far is
//! superseded), and the ingest function on S3 `Object Deleted` events, which truncates only when
//! every DMS object the record lists is gone from the table's folder, except files written
//! after the deletion (a file DMS wrote after the truncate, applied before the deletion was
//! seen: it is applied again, in order, on the emptied table). Lifecycle expiry never comes here.

use std::collections::{BTreeMap, BTreeSet};

use iceberg::TableIdent;
use serde::Serialize;
use tracing::info;

use crate::catalog::Catalog;
use crate::commit::record::Truncation;
use crate::commit::{
    self, Added, AppliedRecord, Base, Change, MetadataChanges, Outcome, Plan, Planner,
    RecordUpdate, Staged,
};
use crate::error::{Error, Result};
use crate::files::vocabulary::keys;
use crate::table::LoadedTable;

#[derive(Debug, Clone, Default, Serialize)]
pub struct TruncateReport {
    pub table: String,
    /// Whether this run emptied the table.
    pub truncated: bool,
    pub snapshot_id: Option<i64>,
    /// Why the table was not truncated, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Files written after the truncate that the table held: they apply again on top.
    pub reapply: Vec<String>,
}

/// The objects in a table's folder now: key (as the record names it) → last modified (ms).
pub type Present = BTreeMap<String, Option<i64>>;

pub struct Truncate<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    at_ms: i64,
    /// `Some`: truncate only if the record's objects are gone from this listing (the function,
    /// on a deletion event); `None`: the operator says so.
    present: Option<Present>,
    /// The objects the deletion events named (keys as the record names them).
    deleted: BTreeSet<String>,
}

impl<'a> Truncate<'a> {
    /// An operator's truncate, at the current time.
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        Truncate {
            catalog,
            ident,
            at_ms: chrono::Utc::now().timestamp_millis(),
            present: None,
            deleted: BTreeSet::new(),
        }
    }

    /// Truncate only if DMS emptied the table's folder at `at_ms` (the deletion events' time):
    /// one of the `deleted` objects is a file the table holds now, and every object the record
    /// lists is gone from `present`, but for files written after `at_ms`. (A deletion event
    /// delivered again long after, or a file removed by hand while the others remain, is no
    /// truncate.)
    pub fn if_emptied(mut self, present: Present, at_ms: i64, deleted: BTreeSet<String>) -> Self {
        self.present = Some(present);
        self.at_ms = at_ms;
        self.deleted = deleted;
        self
    }

    pub async fn execute(self) -> Result<TruncateReport> {
        let mut planner = TruncatePlanner {
            ident: &self.ident,
            at_ms: self.at_ms,
            present: self.present.as_ref(),
            deleted: &self.deleted,
            report: TruncateReport {
                table: self.ident.to_string(),
                ..Default::default()
            },
        };
        let finished = commit::run(self.catalog, &self.ident, None, &mut planner).await?;
        let mut report = finished.report;
        if let Some(Outcome::Committed { snapshot_id, .. }) = finished.outcome {
            report.truncated = true;
            report.snapshot_id = Some(snapshot_id);
            info!(table = %self.ident, snapshot_id, reapply = report.reapply.len(), "truncated");
        }
        Ok(report)
    }
}

struct TruncatePlanner<'a> {
    ident: &'a TableIdent,
    at_ms: i64,
    present: Option<&'a Present>,
    deleted: &'a BTreeSet<String>,
    report: TruncateReport,
}

impl TruncatePlanner<'_> {
    /// The files written after the truncate, or why this is no truncate.
    fn written_after(
        &self,
        record: &AppliedRecord,
    ) -> std::result::Result<Vec<(crate::locate::OrderKey, String)>, String> {
        let Some(present) = self.present else {
            return Ok(Vec::new());
        };
        let listed = record.current_objects();
        if listed.is_empty() {
            return Err(
                "the table's applied-file record lists no object of the current \
                        generation (already truncated, or nothing applied)"
                    .into(),
            );
        }
        if !listed
            .iter()
            .any(|(_, k)| self.deleted.contains(*k) && !present.contains_key(*k))
        {
            return Err("the deletion removed no file the table holds now".into());
        }
        let mut after = Vec::new();
        let mut remain = 0;
        for (order, key) in listed {
            match present.get(key) {
                None => {}
                Some(Some(m)) if *m > self.at_ms => after.push((order.clone(), key.to_string())),
                Some(_) => remain += 1,
            }
        }
        if remain > 0 {
            return Err(format!(
                "{remain} of the files its record lists are still in its folder (DMS deletes \
                 every object of a table it truncates)"
            ));
        }
        Ok(after)
    }
}

#[async_trait::async_trait]
impl Planner for TruncatePlanner<'_> {
    type Report = TruncateReport;

    async fn plan(&mut self, table: Option<LoadedTable>) -> Result<Plan<TruncateReport>> {
        let Some(table) = table else {
            return Err(Error::NoSuchTable {
                table: self.ident.to_string(),
            });
        };
        let record = AppliedRecord::of_table(&table.metadata)?.unwrap_or_default();
        let after = match self.written_after(&record) {
            Ok(a) => a,
            Err(note) => {
                info!(table = %self.ident, %note, "not truncating");
                let mut report = self.report.clone();
                report.note = Some(note);
                return Ok(Plan::Nothing(report));
            }
        };
        let md = table.metadata.clone();
        let snapshot_id = commit::new_snapshot_id(Some(&md));
        let mut summary = BTreeMap::new();
        summary.insert(keys::SOURCE_FILES.to_string(), "[]".to_string());
        summary.insert(keys::SOURCE_ORDERS.to_string(), "[]".to_string());
        summary.insert(keys::TRUNCATE.to_string(), "true".to_string());
        summary.insert(
            keys::VERSION.to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        let mut report = self.report.clone();
        report.reapply = after.iter().map(|(_, k)| k.clone()).collect();
        let staged = Staged {
            ident: self.ident.clone(),
            base: Base::Existing(table.clone()),
            changes: MetadataChanges::default(),
            schema_id: md.current_schema_id(),
            snapshot_id,
            change: Change::Reload,
            manifests: Vec::new(),
            held: Vec::new(),
            files: Default::default(),
            added: Added::default(),
            summary,
            record: Some(RecordUpdate {
                base_record: record,
                truncate: Some(Truncation {
                    at_ms: self.at_ms,
                    written_after: after.into_iter().map(|(o, _)| o).collect::<BTreeSet<_>>(),
                }),
                ..Default::default()
            }),
        };
        // Files applied meanwhile make the swap a conflict, and this plan is made again with
        // them (`validate::input_not_applied`).
        Ok(Plan::Commit(Box::new(staged), report))
    }
}
