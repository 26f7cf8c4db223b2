//! The in-memory path of an input: read and deduped whole, its keys looked up, the outcome of
//! each key decided.

use std::sync::Arc;
use std::time::Instant;

use iceberg::spec::TableMetadata;

use crate::commit::{self, AppliedRecord, Staged, failpoint};
use crate::dedupe::Deduped;
use crate::error::{Error, Rejected, Result};
use crate::lookup::{Located, StaleCheck, locate_rows};
use crate::ops::ingest::FileInput;
use crate::ops::ingest::read::{ReadResult, read_files};
use crate::ops::ingest::report::{CommitReport, Status, Timings, micros};
use crate::table::LoadedTable;

use super::*;

/// What a commit does to one key: its last change (upsert or delete, from dedupe) against
/// what the table held for it (from the lookup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyOutcome {
    Insert,
    Update,
    Delete,
    /// A delete of a key the table did not hold.
    DeleteAbsent,
    /// The table's row is newer than the change (ordering columns): left as it is.
    Stale,
}

impl KeyOutcome {
    /// One per row of `deduped.keys`.
    pub(super) fn of(deduped: &crate::dedupe::Deduped, located: &Located) -> Vec<KeyOutcome> {
        (0..deduped.keys.num_rows())
            .map(|i| {
                let upsert = deduped.upserted.value(i);
                match (located.stale[i], upsert, located.found[i]) {
                    (true, _, _) => KeyOutcome::Stale,
                    (false, true, true) => KeyOutcome::Update,
                    (false, true, false) => KeyOutcome::Insert,
                    (false, false, true) => KeyOutcome::Delete,
                    (false, false, false) => KeyOutcome::DeleteAbsent,
                }
            })
            .collect()
    }

    /// Per upserted key (the rows of `deduped.upserts`, in key order): whether to write it.
    pub(super) fn upserts_to_write(
        outcomes: &[KeyOutcome],
        deduped: &crate::dedupe::Deduped,
    ) -> Vec<bool> {
        outcomes
            .iter()
            .enumerate()
            .filter(|(i, _)| deduped.upserted.value(*i))
            .map(|(_, o)| *o != KeyOutcome::Stale)
            .collect()
    }
}

pub(super) fn count_rows(report: &mut CommitReport, outcomes: &[KeyOutcome]) {
    for o in outcomes {
        match o {
            KeyOutcome::Insert => report.inserted += 1,
            KeyOutcome::Update => report.updated += 1,
            KeyOutcome::Delete => report.deleted += 1,
            KeyOutcome::DeleteAbsent => report.deletes_of_absent_keys += 1,
            KeyOutcome::Stale => report.stale_changes += 1,
        }
    }
}

impl IngestPlanner<'_> {
    pub(super) async fn read(
        &self,
        table: &Option<LoadedTable>,
        key: &[String],
        inputs: Vec<FileInput>,
        mode: Mode,
    ) -> Result<ReadResult> {
        let cfg = self.cfg.clone();
        let key = key.to_vec();
        let schema = table.as_ref().map(|t| {
            (
                t.metadata.current_schema().as_ref().clone(),
                t.metadata.last_column_id(),
            )
        });
        let only_keys_of = (mode == Mode::Changes { late: true }).then_some(self.planned.len());
        tokio::task::spawn_blocking(move || read_files(&cfg, &key, schema, inputs, only_keys_of))
            .await
            .map_err(|e| Error::Internal(format!("reader task failed: {e}")))?
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn stage_read(
        &self,
        table: Option<LoadedTable>,
        record: Arc<AppliedRecord>,
        carried: Vec<crate::commit::record::LoadFile>,
        mode: Mode,
        key: Vec<String>,
        read: ReadResult,
        timings: &mut Timings,
    ) -> Result<(Staged, CommitReport, Vec<Rejected>)> {
        let (base, changes, planned) = self
            .metadata_for(table.as_ref(), &read.schema, &read.change)
            .await?;
        let lookup_started = Instant::now();
        let speculative = self.speculate(&planned, &key, &read).await;
        let located = async {
            // A reload replaces every row: nothing to look up.
            let located = match (&table, mode) {
                (Some(t), Mode::Changes { .. }) => self.locate(&t.metadata, &key, &read).await?,
                _ => Located {
                    found: vec![false; read.deduped.keys.num_rows()],
                    stale: vec![false; read.deduped.keys.num_rows()],
                    ..Default::default()
                },
            };
            failpoint("after-lookup").await?;
            Ok::<_, Error>(located)
        }
        .await;
        let located = match located {
            Ok(l) => l,
            Err(e) => {
                self.discard(speculative).await;
                return Err(e);
            }
        };
        timings.lookup_us = micros(lookup_started);
        let mut read = read;
        if let Some(t) = &table
            && !read.deduped.from_table.is_empty()
            && let Err(e) = self.keep_unsupplied(&t.metadata, &mut read, &located).await
        {
            self.discard(speculative).await;
            return Err(e);
        }
        let write_started = Instant::now();
        let outcomes = KeyOutcome::of(&read.deduped, &located);
        let written = self
            .write(&planned, &key, &read, &located, &outcomes, speculative)
            .await?;
        timings.write_us = micros(write_started);
        let mut report = CommitReport::passed_over(&self.planned, Status::Applied, self.started);
        report.rows_read = read.deduped.rows_read;
        report.read_twice = read.second_pass.is_some();
        count_rows(&mut report, &outcomes);
        report.lookup = located.stats.clone();
        let referenced = located.deletes.keys().cloned().collect();
        let staged = self.staged(
            Staging {
                base,
                changes,
                planned,
                record,
                carried,
                mode,
                written,
                referenced,
                change: &read.change,
                rows_rejected: read.rejected.len(),
                max_seq: read.max_seq.clone(),
                keys: located
                    .keys
                    .clone()
                    .map_or(commit::KeyScope::Unknown, commit::KeyScope::Keys),
                kept: located.kept_in.clone(),
            },
            &mut report,
        )?;
        Ok((staged, report, read.rejected))
    }

    /// Columns updates did not supply (`no_sup_value`) keep the value of the row each update
    /// replaces: read from the live row the lookup found for its key (NULL for a key the table
    /// does not hold).
    async fn keep_unsupplied(
        &self,
        md: &TableMetadata,
        read: &mut ReadResult,
        located: &Located,
    ) -> Result<()> {
        let deduped = &mut read.deduped;
        let schema = deduped.upserts.schema();
        // Per (file, column): the cells to read, as (upsert row, position).
        let mut wanted: std::collections::BTreeMap<(u32, usize), Vec<(usize, i64)>> =
            Default::default();
        for &(row, column) in &deduped.from_table {
            let key = deduped.upsert_keys[row];
            if let Some(Some((file, pos))) = located.live.get(key) {
                wanted.entry((*file, column)).or_default().push((row, *pos));
            }
        }
        let mut columns = deduped.upserts.columns().to_vec();
        for ((file, column), cells) in wanted {
            let (path, size) = &located.live_files[file as usize];
            let name = schema.field(column).name();
            let Some(field_id) = md.current_schema().field_id_by_name(name) else {
                // A column this commit adds: the table's rows have none.
                continue;
            };
            let positions: Vec<i64> = cells.iter().map(|(_, p)| *p).collect();
            let at = crate::lookup::ValuesAt {
                path,
                size: *size,
                field_id,
                data_type: schema.field(column).data_type(),
            };
            let values =
                crate::lookup::read_values_at(self.ingest.catalog.files(), at, &positions).await?;
            // The column with these cells replaced by the table's values.
            let mut take: Vec<(usize, usize)> =
                (0..columns[column].len()).map(|r| (0, r)).collect();
            for (i, (row, _)) in cells.iter().enumerate() {
                take[*row] = (1, i);
            }
            columns[column] = arrow_select::interleave::interleave(
                &[columns[column].as_ref(), values.as_ref()],
                &take,
            )?;
        }
        deduped.upserts = arrow_array::RecordBatch::try_new(schema, columns)?;
        Ok(())
    }

    /// Where the live rows of the touched keys are.
    pub(super) async fn locate(
        &self,
        md: &TableMetadata,
        key: &[String],
        read: &ReadResult,
    ) -> Result<Located> {
        let ids = key
            .iter()
            .map(|k| {
                md.current_schema()
                    .field_id_by_name(k)
                    .ok_or_else(|| Error::Internal(format!("key column `{k}` not in table")))
            })
            .collect::<Result<Vec<_>>>()?;
        // With ordering columns, an older change never overwrites a newer row (a file applied
        // out of order, a replayed change).
        let order = stale_check(
            &read.deduped,
            md.current_schema(),
            &self.cfg.ordering_columns(),
        );
        locate_rows(
            self.ingest.catalog.files(),
            md,
            &read.deduped.keys,
            ids,
            order.as_ref(),
        )
        .await
    }
}

/// What a lookup needs to leave rows newer than their change alone, for a table whose schema is
/// `schema` (before this commit); `None` without ordering columns. Built here, where dedupe's
/// result meets the lookup (dedupe, the step before, knows nothing of lookups).
fn stale_check(
    deduped: &Deduped,
    schema: &iceberg::spec::Schema,
    order_columns: &[String],
) -> Option<StaleCheck> {
    if order_columns.is_empty() || deduped.order_values.len() != order_columns.len() {
        return None;
    }
    Some(StaleCheck {
        field_ids: order_columns
            .iter()
            .map(|c| schema.field_id_by_name(c))
            .collect(),
        values: deduped.order_values.clone(),
        from_load: deduped.from_load.clone(),
        newer_snapshots: Default::default(),
    })
}
