//! Rewrite a table's manifests: the same live files, listed by as few manifests as the table's
//! `commit.manifest.target-size-bytes` allows (one per content and partition spec below it),
//! manifests without a live file dropped. Our own commits keep this shape as they go (see
//! `commit::manifests`); this repairs a table another engine, or an earlier version of
//! dms2iceberg, left with hundreds of small manifests, each of which every query plan opens.

use iceberg::TableIdent;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::commit::{self, Added, Base, Change, MetadataChanges, Outcome, Plan, Planner, Staged};
use crate::error::{Error, Result};
use crate::table::LoadedTable;

#[derive(Debug, Clone, Default, Serialize)]
pub struct RewriteManifestsReport {
    pub table: String,
    pub manifests_before: usize,
    pub manifests_after: usize,
    /// The `replace` snapshot that lists them; `None` when there was nothing to merge.
    pub snapshot_id: Option<i64>,
}

pub struct RewriteManifests<'a> {
    catalog: &'a dyn Catalog,
    ident: TableIdent,
    /// Rewrite only if the current snapshot lists more manifests than this.
    above: usize,
}

impl<'a> RewriteManifests<'a> {
    pub fn new(catalog: &'a dyn Catalog, ident: TableIdent) -> Self {
        RewriteManifests {
            catalog,
            ident,
            above: 1,
        }
    }

    /// Leaves a table that lists at most `n` manifests as it is.
    pub fn above(mut self, n: usize) -> Self {
        self.above = n.max(1);
        self
    }

    pub async fn execute(self) -> Result<RewriteManifestsReport> {
        let mut planner = ManifestsPlanner {
            rewrite: &self,
            before: 0,
        };
        let finished = commit::run(self.catalog, &self.ident, None, &mut planner).await?;
        let mut report = RewriteManifestsReport {
            table: self.ident.to_string(),
            manifests_before: planner.before,
            manifests_after: planner.before,
            snapshot_id: None,
        };
        if let Some(Outcome::Committed { snapshot_id, .. }) = finished.outcome {
            report.snapshot_id = Some(snapshot_id);
            if let Some(t) = LoadedTable::load(self.catalog, &self.ident).await?
                && let Some(s) = t.metadata.current_snapshot()
            {
                report.manifests_after = self
                    .catalog
                    .files()
                    .manifest_list(&t.metadata, s)
                    .await?
                    .len();
            }
        }
        Ok(report)
    }
}

struct ManifestsPlanner<'a, 'b> {
    rewrite: &'b RewriteManifests<'a>,
    before: usize,
}

#[async_trait::async_trait]
impl Planner for ManifestsPlanner<'_, '_> {
    type Report = ();

    async fn plan(&mut self, table: Option<LoadedTable>) -> Result<Plan<()>> {
        let r = self.rewrite;
        let Some(table) = table else {
            return Err(Error::NoSuchTable {
                table: r.ident.to_string(),
            });
        };
        commit::writable_version(&table.metadata, &r.ident.to_string())?;
        let Some(snapshot) = table.metadata.current_snapshot() else {
            return Ok(Plan::Nothing(()));
        };
        self.before = r
            .catalog
            .files()
            .manifest_list(&table.metadata, snapshot)
            .await?
            .len();
        if self.before <= r.above {
            return Ok(Plan::Nothing(()));
        }
        let md = table.metadata.clone();
        let mut summary = std::collections::BTreeMap::new();
        summary.insert(
            "dms2iceberg.rewrite-manifests".to_string(),
            format!("{} manifests", self.before),
        );
        Ok(Plan::Commit(
            Box::new(Staged {
                ident: r.ident.clone(),
                base: Base::Existing(table),
                changes: MetadataChanges::default(),
                schema_id: md.current_schema_id(),
                snapshot_id: commit::new_snapshot_id(Some(&md)),
                change: Change::RewriteManifests,
                manifests: Vec::new(),
                held: Vec::new(),
                files: Default::default(),
                added: Added::default(),
                summary,
                record: None,
            }),
            (),
        ))
    }
}
