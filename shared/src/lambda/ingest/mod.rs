//! The ingest function: an event means "this table has new files". For each table it names, list
//! the table's folder in S3 (date folders included) and apply every pending file in DMS order
//! from what the table has recorded, up to a cap per invocation. A late, lost or duplicated event
//! therefore never reorders or re-applies changes, and a backlog is applied in one go.
//!
//! A record (SQS message, or the whole direct event) fails when a file it names is not applied
//! by the end of the invocation: a bad file fails its record with the reason (and every later
//! file of that table waits behind it, so their records fail too until an operator acts), and a
//! file beyond the cap fails so that the retry continues the backlog.

mod log;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse};
use serde::Serialize;
use tracing::{error, info, warn};

use super::events::IngestEvent;
use super::metrics::emf_line;
use super::{FunctionEnv, FunctionError, Services};
use crate::catalog::Catalog;
use crate::commit::AppliedRecord;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::locate::ObjectMeta;
use crate::locate::{DmsObject, OrderKey, locate, locate_transaction_file, table_prefix};
use crate::ops::ingest::{FileInput, Ingest, TableReport, backlog};
use crate::read::SourceData;
use crate::storage::{ObjectInfo, ObjectStore};
use crate::table::LoadedTable;

pub struct IngestHandler {
    env: FunctionEnv,
    /// Config as loaded at start; an `s3://` config is re-read by every invocation, so an
    /// operator's `skip_files` change takes effect without a redeploy.
    config: Arc<Config>,
    /// The `s3://` config as the last invocation read it (text and parsed): the next one reads
    /// its tables with it while it reads the config again, and keeps those reads only if the
    /// text is unchanged.
    last_config: std::sync::Mutex<Option<(String, Arc<Config>)>>,
    catalog: Arc<dyn Catalog>,
    objects: Arc<dyn ObjectStore>,
    services: Services,
}

/// A table folder: (bucket, prefix).
type TableFolder = (String, String);
/// A table folder's listing and the table, read before the table is processed.
type TableReads = Result<(Vec<ObjectInfo>, Option<LoadedTable>)>;

/// An object URI an event names, its table folder (if it has one) and, for a deletion, when
/// it was deleted.
type NamedKey = (String, Option<TableFolder>, Option<i64>);

/// What an event names, grouped by table under one config.
struct Named {
    /// Table folder → (schema, table).
    tables: BTreeMap<TableFolder, (String, String)>,
    /// Per record: each object it names.
    record_keys: Vec<Vec<NamedKey>>,
    bad_keys: BTreeMap<String, Failure>,
    /// Objects that are not DMS data files.
    ignored: Vec<String>,
    /// CDC_TXN files (`cdc_path`), by record: which tables they hold is in their rows.
    transactions: Vec<(usize, String, OrderKey)>,
}

/// The CDC_TXN files (`cdc_path`) an invocation works with: the folder's listing and, per file
/// read, its bytes and the tables it has rows of (read once, whichever tables need it).
struct Transactions {
    /// Every CDC_TXN file of the folder: URI, place in DMS order, listing entry.
    listed: Vec<(String, OrderKey, ObjectInfo)>,
    read: tokio::sync::Mutex<BTreeMap<String, TransactionFile>>,
    /// Per table folder: the newest CDC_TXN file the event names with rows of that table.
    newest: BTreeMap<TableFolder, OrderKey>,
}

/// What an event says of one table: the objects it names as created, the deletions in its
/// folder (what they removed and when), and the CDC_TXN files it names.
struct TableEvent<'a> {
    named: &'a [&'a str],
    deleted: Option<(BTreeSet<String>, i64)>,
    transactions: Option<&'a Transactions>,
    /// When the invocation must have answered.
    deadline: Option<Instant>,
}

/// A CDC_TXN file's bytes and the tables (`schema`, `table`) it holds.
type TransactionFile = (SourceData, BTreeSet<(String, String)>);

impl Named {
    /// Logs what the event names that is not applied (once: [`named`] may run twice).
    fn log(&self) {
        for uri in &self.ignored {
            info!(object = %uri, "not a DMS data file; ignored");
        }
        for (uri, (_, why)) in &self.bad_keys {
            error!(object = %uri, error = %why, "rejected object key");
        }
    }

    /// The objects the event names as created in one table folder.
    fn in_folder(&self, folder: &TableFolder) -> Vec<&str> {
        self.record_keys
            .iter()
            .flatten()
            .filter(|(_, t, deleted)| t.as_ref() == Some(folder) && deleted.is_none())
            .map(|(uri, _, _)| uri.as_str())
            .collect()
    }

    /// The objects the event names as deleted in one table folder, and when the latest
    /// deletion happened (`None`: it names none there).
    fn deleted_in(&self, folder: &TableFolder) -> Option<(BTreeSet<String>, i64)> {
        let deleted: Vec<(&String, i64)> = self
            .record_keys
            .iter()
            .flatten()
            .filter(|(_, t, _)| t.as_ref() == Some(folder))
            .filter_map(|(uri, _, deleted)| deleted.map(|d| (uri, d)))
            .collect();
        let at = deleted.iter().map(|(_, d)| *d).max()?;
        Some((deleted.into_iter().map(|(u, _)| u.clone()).collect(), at))
    }
}

/// The answer to an invocation: SQS batches get the failed messages (partial batch response),
/// direct events the tables they named.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum IngestResponse {
    Batch(SqsBatchResponse),
    Tables { tables: Vec<String> },
}

/// Why a table or record failed: the kind (`errorType`) and the message.
type Failure = (&'static str, String);
/// Failures no retry can help: the file itself is bad, or the table's configuration (a table
/// without a primary key). Their records go to the dead-letter queue at once.
const PERMANENT: &[&str] = &["InputError", "SchemaError", "ConfigError"];
/// Objects of one table read ahead per invocation, at most: each is a spool file in /tmp.
const PREFETCH_MAX: usize = 4;

/// What happened to one table in an invocation.
struct TableOutcome {
    /// Object keys (`s3://bucket/key`) the table records as applied afterwards.
    applied: BTreeSet<String>,
    /// Files not started because the invocation's deadline was near.
    left_at_deadline: usize,
    /// The files `error` is about (empty: the table itself; every file of it waits).
    failed_files: BTreeSet<String>,
    /// Object keys the table folder held when listed (`None`: not listed).
    listed: Option<BTreeSet<String>>,
    error: Option<Failure>,
}

impl IngestHandler {
    /// `catalog`: where the tables are (Glue in AWS); `objects`: where the DMS files and an
    /// `s3://` config are (S3 in AWS).
    pub async fn new(
        env: FunctionEnv,
        catalog: Arc<dyn Catalog>,
        services: impl Into<Services>,
    ) -> Result<IngestHandler> {
        let services = services.into();
        let (config, text) = env.load_config_text(&services).await?;
        let config = Arc::new(config);
        Ok(IngestHandler {
            env,
            last_config: std::sync::Mutex::new(text.map(|t| (t, config.clone()))),
            config,
            catalog,
            objects: services.objects.clone(),
            services,
        })
    }

    /// The config of this invocation, and the tables' reads already done with it. An `s3://`
    /// config is read again every invocation; its tables' folders and metadata are read at the
    /// same time with the config the last invocation read (one round trip less on the critical
    /// path), and kept only if the config's text is unchanged.
    async fn current_config(
        &self,
        records: &[super::events::Record],
    ) -> Result<(Arc<Config>, BTreeMap<TableFolder, TableReads>)> {
        if !self.env.config_is_remote() {
            return Ok((self.config.clone(), BTreeMap::new()));
        }
        let last = self.last_config.lock().ok().and_then(|l| l.clone());
        let (fresh, reads) = match &last {
            Some((_, config)) => {
                let named = named(config, records, self.env.warehouse_prefix().as_deref());
                let reads = futures::future::join_all(named.tables.iter().map(
                    |(folder, (schema, table))| async {
                        let files = named.in_folder(folder);
                        let r = self
                            .read_table(config, folder, (schema.as_str(), table.as_str()), &files)
                            .await;
                        (folder.clone(), r)
                    },
                ));
                let (fresh, reads) =
                    futures::join!(self.env.load_config_text(&self.services), reads);
                (fresh?, reads)
            }
            None => (self.env.load_config_text(&self.services).await?, Vec::new()),
        };
        let (config, text) = fresh;
        if let (Some((old, config)), Some(text)) = (&last, &text)
            && old == text
        {
            return Ok((config.clone(), reads.into_iter().collect()));
        }
        let config = Arc::new(config);
        if let (Ok(mut l), Some(text)) = (self.last_config.lock(), text) {
            *l = Some((text, config.clone()));
        }
        Ok((config, BTreeMap::new()))
    }

    pub async fn handle(&self, event: IngestEvent) -> Result<IngestResponse, FunctionError> {
        self.handle_until(event, None).await
    }

    /// [`Self::handle`] with the time by which the invocation must have answered: no file is
    /// started that could not be finished by then; the files left fail their records as a
    /// backlog, for the retry, instead of a timeout failing every record of the batch.
    pub async fn handle_until(
        &self,
        event: IngestEvent,
        deadline: Option<Instant>,
    ) -> Result<IngestResponse, FunctionError> {
        let records = event.records()?;
        let (config, mut reads) = self.current_config(&records).await?;
        let config: &Config = &config;
        let mut named = named(config, &records, self.env.warehouse_prefix().as_deref());
        let transactions = self.transactions(config, &mut named).await;
        named.log();
        let (tables, record_keys, bad_keys) = (&named.tables, &named.record_keys, &named.bad_keys);
        let mut outcomes: BTreeMap<(String, String), TableOutcome> = BTreeMap::new();
        for ((bucket, prefix), (schema, table)) in tables {
            let folder = (bucket.clone(), prefix.clone());
            let outcome = self
                .process_table(
                    config,
                    (bucket.as_str(), prefix.as_str()),
                    (schema.as_str(), table.as_str()),
                    reads.remove(&folder),
                    TableEvent {
                        named: &named.in_folder(&folder),
                        deleted: named.deleted_in(&folder),
                        transactions: transactions.as_ref(),
                        deadline,
                    },
                )
                .await;
            self.objects.drop_prefetched().await;
            outcomes.insert((bucket.clone(), prefix.clone()), outcome);
        }
        // CDC_TXN files were downloaded once for every table: their spool files go now.
        if let Some(t) = &transactions {
            for (data, _) in t.read.lock().await.values() {
                self.objects.release(data).await;
            }
        }
        // A record succeeds when every DMS file it names is applied.
        let mut failures = Vec::new();
        let mut reasons = Vec::new();
        let mut dead_lettered = 0usize;
        for (r, keys) in records.iter().zip(record_keys) {
            let mut reason: Option<Failure> = r.invalid.clone().map(|i| ("InputError", i));
            let mut about: Option<(String, String)> = None;
            for (uri, table, deleted) in keys {
                let why = match table.as_ref().and_then(|t| outcomes.get(t)) {
                    None => bad_keys.get(uri).cloned(),
                    // A deletion is done when its table was processed (truncated or not).
                    Some(o) if deleted.is_some() => o.error.clone(),
                    Some(o) if o.applied.contains(uri) => None,
                    // A later file of a table stopped at another file's failure: it waits
                    // (delivered again), the failed file is the one to deal with. A config
                    // error is the table's, whichever file met it: every file waits on it.
                    Some(o)
                        if o.error.as_ref().is_some_and(|(k, _)| *k != "ConfigError")
                            && !o.failed_files.is_empty()
                            && !o.failed_files.contains(uri) =>
                    {
                        let (kind, _) = o.error.clone().unwrap_or_default();
                        let first = o.failed_files.iter().next().cloned().unwrap_or_default();
                        Some((
                            "Blocked",
                            format!("waiting behind {first}, which failed ({kind})"),
                        ))
                    }
                    // Gone from the folder (DMS empties it to reload the table): nothing to
                    // apply, and nothing a retry could change.
                    Some(o) if o.listed.as_ref().is_some_and(|l| !l.contains(uri)) => {
                        info!(object = %uri, "no longer in the table folder; nothing to apply");
                        None
                    }
                    Some(o) => Some(o.error.clone().unwrap_or_else(|| {
                        let why = match o.left_at_deadline {
                            0 => "not applied yet (beyond the per-invocation cap, or waiting \
                                  for the table's full load: its files are applied by their own \
                                  events)"
                                .to_string(),
                            n => format!(
                                "not started: the invocation's deadline was near ({n} file(s) \
                                 of the table left for the next invocation)"
                            ),
                        };
                        ("Backlog", why)
                    })),
                };
                if let Some((kind, w)) = why {
                    if reason.is_none() {
                        let table = table
                            .as_ref()
                            .and_then(|t| tables.get(t))
                            .map(|(s, t)| format!("{s}.{t}"))
                            .unwrap_or_default();
                        about = Some((table, uri.clone()));
                    }
                    reason.get_or_insert((kind, format!("{uri}: {w}")));
                }
            }
            if let Some(reason) = reason {
                // Built from redacted table errors and object keys: no input values.
                warn!(record = ?r.id, reason = %reason.1, kind = reason.0, "record failed");
                if self
                    .dead_letter(event.is_sqs(), r, &reason, about.as_ref())
                    .await
                {
                    dead_lettered += 1;
                    continue;
                }
                reasons.push(reason);
                if let Some(id) = &r.id {
                    let mut f = BatchItemFailure::default();
                    f.item_identifier = id.clone();
                    failures.push(f);
                }
            }
        }
        if dead_lettered > 0 {
            println!(
                "{}",
                emf_line(
                    &self.env.metric_function("ingest"),
                    "",
                    false,
                    &[("FilesDeadLettered", "Count", dead_lettered as f64)]
                )
            );
        }
        if event.is_sqs() {
            let mut response = SqsBatchResponse::default();
            response.batch_item_failures = failures;
            return Ok(IngestResponse::Batch(response));
        }
        if let Some((kind, _)) = reasons.first() {
            let message: Vec<&str> = reasons.iter().map(|(_, m)| m.as_str()).collect();
            return Err(FunctionError::new(*kind, message.join("; ")));
        }
        Ok(IngestResponse::Tables {
            tables: tables.values().map(|(s, t)| format!("{s}.{t}")).collect(),
        })
    }

    /// Moves a failed SQS record to the dead-letter queue at once when no retry can help it
    /// (its file is bad, or its table misconfigured: [`PERMANENT`]), so that it alarms within
    /// the invocation instead of after the queue's receive count. Whether it was moved (then
    /// the record counts as handled).
    async fn dead_letter(
        &self,
        sqs: bool,
        record: &super::events::Record,
        (kind, reason): &Failure,
        about: Option<&(String, String)>,
    ) -> bool {
        let (Some(queue), Some(body), true) = (&self.services.dead_letters, &record.body, sqs)
        else {
            return false;
        };
        if !PERMANENT.contains(kind) {
            return false;
        }
        let (table, file) = about.cloned().unwrap_or_default();
        let attributes = [
            ("errorType", *kind),
            ("reason", reason.as_str()),
            ("table", table.as_str()),
            ("file", file.as_str()),
        ];
        match queue.send(body, &attributes).await {
            Ok(()) => {
                error!(record = ?record.id, kind, %reason, %table, %file, "record moved to the dead-letter queue: no retry can apply it (fix the file or the config, or skip it, then re-drive)");
                true
            }
            Err(e) => {
                warn!(record = ?record.id, error = %e, "could not move the record to the dead-letter queue; it fails and is delivered again");
                false
            }
        }
    }

    /// The CDC_TXN files the event names: each read (its tables are in its rows), its tables
    /// added to what the event names, and the CDC folder listed (a table applies the CDC_TXN
    /// files before the named one in order). `None` when the event names none.
    async fn transactions(&self, config: &Config, named: &mut Named) -> Option<Transactions> {
        if named.transactions.is_empty() {
            return None;
        }
        let mut t = Transactions {
            listed: Vec::new(),
            read: Default::default(),
            newest: BTreeMap::new(),
        };
        let source = &config.source;
        let folder = |uri: &str| -> Option<(String, String)> {
            let (bucket, key) = crate::storage::split_s3_uri(uri).ok()?;
            Some((bucket.to_string(), key.rsplit_once('/')?.0.to_string()))
        };
        let mut listed_folders = BTreeSet::new();
        for (ri, uri, order) in std::mem::take(&mut named.transactions) {
            let tables = match t.file(self.objects.as_ref(), source, &uri).await {
                Ok((_, tables)) => tables,
                Err(e) => {
                    named.bad_keys.insert(uri.clone(), (e.kind(), e.redacted()));
                    named.record_keys[ri].push((uri, None, None));
                    continue;
                }
            };
            let Some((bucket, cdc_folder)) = folder(&uri) else {
                continue;
            };
            if listed_folders.insert((bucket.clone(), cdc_folder.clone())) {
                match self.objects.list(&bucket, &format!("{cdc_folder}/")).await {
                    Ok(listing) => {
                        for o in listing {
                            let u = format!("s3://{bucket}/{}", o.key);
                            if let Ok(Some(order)) = locate_transaction_file(&u, source) {
                                t.listed.push((u, order, o));
                            }
                        }
                    }
                    Err(e) => {
                        named.bad_keys.insert(uri.clone(), (e.kind(), e.redacted()));
                        named.record_keys[ri].push((uri, None, None));
                        continue;
                    }
                }
            }
            for (schema, table) in tables {
                let prefix = match source.bucket_folder.as_deref().map(|f| f.trim_matches('/')) {
                    Some(f) if !f.is_empty() => format!("{f}/{schema}/{table}/"),
                    _ => format!("{schema}/{table}/"),
                };
                let table_folder = (bucket.clone(), prefix);
                named
                    .tables
                    .insert(table_folder.clone(), (schema.clone(), table.clone()));
                named.record_keys[ri].push((uri.clone(), Some(table_folder.clone()), None));
                let newest = t
                    .newest
                    .entry(table_folder)
                    .or_insert_with(|| order.clone());
                if order > *newest {
                    *newest = order.clone();
                }
            }
        }
        t.listed.sort_by(|a, b| a.1.cmp(&b.1));
        Some(t)
    }

    /// Lists a table's folder and loads the table: independent round trips, in flight
    /// together; the named objects are downloaded as soon as the listing shows them (they are
    /// usually what is pending).
    async fn read_table(
        &self,
        config: &Config,
        (bucket, prefix): &TableFolder,
        (schema, table): (&str, &str),
        named: &[&str],
    ) -> TableReads {
        let cfg = config.table(schema, table)?;
        let ident = iceberg::TableIdent::from_strs([&cfg.namespace, &cfg.table])?;
        let list = async {
            let listing = self.objects.list(bucket, prefix).await?;
            let listed: BTreeSet<String> = listing
                .iter()
                .map(|o| format!("s3://{bucket}/{}", o.key))
                .collect();
            for uri in named
                .iter()
                .filter(|u| listed.contains(**u))
                .take(self.env.files_per_invocation.min(PREFETCH_MAX))
            {
                self.objects.prefetch(uri);
            }
            Ok::<_, Error>(listing)
        };
        futures::try_join!(list, LoadedTable::load(self.catalog.as_ref(), &ident))
    }

    /// Applies the pending files of one table.
    async fn process_table(
        &self,
        config: &Config,
        (bucket, prefix): (&str, &str),
        (schema, table): (&str, &str),
        reads: Option<TableReads>,
        event: TableEvent<'_>,
    ) -> TableOutcome {
        let TableEvent {
            named,
            deleted,
            transactions,
            deadline,
        } = event;
        let started = Instant::now();
        let mut outcome = TableOutcome {
            applied: BTreeSet::new(),
            left_at_deadline: 0,
            failed_files: BTreeSet::new(),
            listed: None,
            error: None,
        };
        type Files = Vec<(DmsObject, ObjectInfo)>;
        type Listed = Vec<backlog::Listed>;
        let result: Result<(TableReport, Files, Listed, Arc<AppliedRecord>)> = async {
            let cfg = config.table(schema, table)?;
            let (listing, mut loaded) = match reads {
                Some(r) => r?,
                None => {
                    let folder = (bucket.to_string(), prefix.to_string());
                    self.read_table(config, &folder, (schema, table), named)
                        .await?
                }
            };
            if let Some(t) = &loaded {
                crate::ops::ingest::check_source(&cfg, t)?;
            }
            if let (Some((gone, at_ms)), Some(t)) = (deleted, &loaded)
                && cfg.truncate_on_source_delete
                && self
                    .truncate_if_emptied(t, bucket, &listing, gone, at_ms)
                    .await?
            {
                loaded = LoadedTable::load(self.catalog.as_ref(), &t.ident).await?;
            }
            let applied = match &loaded {
                Some(t) => AppliedRecord::of_table(&t.metadata)?.unwrap_or_default(),
                None => Default::default(),
            };
            let folder = (bucket.to_string(), prefix.to_string());
            let (files, read_ahead) = self
                .table_files(
                    config,
                    (&folder, listing),
                    (schema, table),
                    &applied,
                    transactions,
                )
                .await?;
            // Files the record passes over quietly are not listed to the ingest; the rest are
            // (a loud one is reported by it). During a full load, an event for some of its
            // files applies those, and only those, while other files of the load are pending:
            // invocations for them run at the same time. Any other event applies the backlog
            // in DMS order (the load's pending files first, change files after them).
            // (The bytes read ahead are CDC_TXN files': never a full load's.)
            let listed = backlog_view(&files);
            let pending: Vec<FileInput> =
                backlog::to_apply(&listed, named, &applied, self.env.files_per_invocation)
                    .into_iter()
                    .map(|i| {
                        let (o, meta) = &listed[i];
                        FileInput::new(o.clone(), read_ahead.get(&o.key).cloned())
                            .with_meta(meta.clone())
                    })
                    .collect();
            let report = Ingest::new(self.catalog.as_ref(), config)
                .loaded(loaded)
                .objects(self.objects.clone())
                .spool(self.env.spool.clone())
                .files_per_commit(self.env.files_per_commit)
                .parallel(self.env.parallel_loads)
                .deadline(deadline)
                .execute(schema, table, pending, |_| {})
                .await;
            Ok((report, files, listed, applied))
        }
        .await;
        let (report, files, listed, applied_before) = match result {
            Ok(r) => r,
            Err(e) => {
                let (kind, e) = (e.kind(), e.redacted());
                let name = format!("{schema}.{table}");
                error!(table = %name, error = %e, kind, "table not processed");
                let blocked = [
                    ("FilesFailed", "Count", 1.0),
                    ("TablesBlocked", "Count", 1.0),
                ];
                println!(
                    "{}",
                    emf_line(
                        &self.env.metric_function("ingest"),
                        &name,
                        self.env.table_metrics,
                        &blocked
                    )
                );
                outcome.error = Some((kind, e));
                return outcome;
            }
        };
        outcome.listed = Some(files.iter().map(|(o, _)| o.key.clone()).collect());
        outcome.left_at_deadline = report.files_left_at_deadline;
        outcome.failed_files = report.failed_files.iter().cloned().collect();
        // What the table holds now. Without an error every pending file this run took was
        // applied, by this run or (reported as skipped) by a concurrent one: the table as
        // loaded before plus the commits' files. After an error, ask the catalog.
        if report.error.is_none()
            && let Ok(cfg) = config.table(schema, table)
        {
            outcome.applied =
                backlog::held_after_run(&listed, &applied_before, &report, |k| cfg.is_skipped(k));
            if let Some(loud) = report.loud_files().first() {
                outcome.error = Some((
                    "InputError",
                    format!(
                        "{loud}: older than the files the table's applied-file record lists, \
                         and changed since: not applied (see the function's log)"
                    ),
                ));
            }
        } else if let Ok(cfg) = config.table(schema, table)
            && let Ok(ident) = iceberg::TableIdent::from_strs([&cfg.namespace, &cfg.table])
            && let Ok(Some(t)) = LoadedTable::load(self.catalog.as_ref(), &ident).await
            && let Ok(record) = AppliedRecord::of_table(&t.metadata)
        {
            let record = record.unwrap_or_default();
            outcome.applied = backlog::held(&listed, &record, |k| cfg.is_skipped(k));
        }
        if let Some(log) = &report.error_log {
            outcome.error = Some((report.error_kind.unwrap_or("Error"), log.clone()));
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let backlog_age_s = backlog::backlog_age_s(&listed, &outcome.applied, now_ms);
        self.log_table(&report, &files, started, backlog_age_s);
        outcome
    }

    /// The table's DMS files in DMS order: those of its folder's listing, and its CDC_TXN files
    /// up to the newest the event names for it that it has not applied (with their bytes,
    /// read already).
    async fn table_files(
        &self,
        config: &Config,
        (folder, listing): (&TableFolder, Vec<ObjectInfo>),
        (schema, table): (&str, &str),
        applied: &AppliedRecord,
        transactions: Option<&Transactions>,
    ) -> Result<(Vec<(DmsObject, ObjectInfo)>, BTreeMap<String, SourceData>)> {
        let bucket = &folder.0;
        let mut files = Vec::new();
        for o in listing {
            let uri = format!("s3://{bucket}/{}", o.key);
            match locate(&uri, &config.source) {
                Ok(Some(obj)) if obj.schema == schema && obj.table == table => files.push((obj, o)),
                Ok(_) => {}
                Err(e) => {
                    warn!(object = %uri, error = %e, "ignoring a malformed key in the table folder")
                }
            }
        }
        let mut read_ahead = BTreeMap::new();
        if let Some(t) = transactions
            && let Some(newest) = t.newest.get(folder)
        {
            for (uri, order, info) in t.listed.iter().filter(|(_, o, _)| o <= newest) {
                let obj = DmsObject::in_transaction_file(uri, order.clone(), schema, table);
                if backlog::settled(applied, &obj, &info.meta()) {
                    continue;
                }
                let (data, tables) = t.file(self.objects.as_ref(), &config.source, uri).await?;
                if tables.contains(&(schema.to_string(), table.to_string())) {
                    read_ahead.insert(uri.clone(), data);
                    files.push((obj, info.clone()));
                }
            }
        }
        files.sort_by(|a, b| a.0.order.cmp(&b.0.order));
        Ok((files, read_ahead))
    }

    /// On a deletion in the table's folder: empties the table if DMS deleted every object its
    /// record lists (a truncate or drop of the source table); files written after the deletion
    /// are applied again on top by the ingest that follows. Whether it truncated.
    async fn truncate_if_emptied(
        &self,
        table: &LoadedTable,
        bucket: &str,
        listing: &[ObjectInfo],
        deleted: BTreeSet<String>,
        at_ms: i64,
    ) -> Result<bool> {
        let present = listing
            .iter()
            .map(|o| (format!("s3://{bucket}/{}", o.key), o.last_modified_ms))
            .collect();
        let r = crate::ops::truncate::Truncate::new(self.catalog.as_ref(), table.ident.clone())
            .if_emptied(present, at_ms, deleted)
            .execute()
            .await?;
        if let Some(note) = &r.note {
            info!(table = %r.table, %note, "a deletion in the table's folder; not truncating");
        }
        if r.truncated {
            warn!(table = %r.table, snapshot_id = ?r.snapshot_id, reapply = r.reapply.len(), "the source table was truncated (DMS deleted its files): every row removed");
            println!(
                "{}",
                emf_line(
                    &self.env.metric_function("ingest"),
                    &r.table,
                    self.env.table_metrics,
                    &[("Truncates", "Count", 1.0)]
                )
            );
        }
        Ok(r.truncated)
    }
}

/// The tables an event's records name, under `config` (its source settings place the keys).
/// Logs nothing: [`Named::log`].
/// `warehouse`: the warehouse's `s3://bucket/prefix/`: its own objects are never DMS files,
/// even where the landing bucket's event rule would match them (one bucket for both).
fn named(config: &Config, records: &[super::events::Record], warehouse: Option<&str>) -> Named {
    let mut n = Named {
        tables: BTreeMap::new(),
        record_keys: Vec::new(),
        bad_keys: BTreeMap::new(),
        ignored: Vec::new(),
        transactions: Vec::new(),
    };
    for (ri, r) in records.iter().enumerate() {
        let mut keys = Vec::new();
        for o in &r.objects {
            let uri = format!("s3://{}/{}", o.bucket, o.key);
            let deleted = o.deleted_ms;
            if warehouse.is_some_and(|w| uri.starts_with(w)) {
                n.ignored.push(uri);
                continue;
            }
            match locate_transaction_file(&uri, &config.source) {
                // Its tables are in its rows: read once the event is handled.
                Ok(Some(order)) if deleted.is_none() => {
                    n.transactions.push((ri, uri, order));
                    continue;
                }
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(e) => {
                    n.bad_keys.insert(uri.clone(), (e.kind(), e.to_string()));
                    keys.push((uri, None, deleted));
                    continue;
                }
            }
            match locate(&uri, &config.source) {
                Ok(Some(obj)) => match table_prefix(&obj) {
                    Some(prefix) => {
                        n.tables.insert(
                            (o.bucket.clone(), prefix.clone()),
                            (obj.schema.clone(), obj.table.clone()),
                        );
                        keys.push((uri, Some((o.bucket.clone(), prefix)), deleted));
                    }
                    None => {
                        n.bad_keys.insert(
                            uri.clone(),
                            (
                                "InputError",
                                "cannot find the table folder in the key".into(),
                            ),
                        );
                        keys.push((uri, None, deleted));
                    }
                },
                // A deleted object that is no DMS data file changes nothing.
                Ok(None) => n.ignored.push(uri),
                Err(e) if deleted.is_some() => {
                    info!(object = %uri, error = %e, "deleted object is not a DMS file; ignored");
                }
                Err(e) => {
                    n.bad_keys.insert(uri.clone(), (e.kind(), e.to_string()));
                    keys.push((uri, None, deleted));
                }
            }
        }
        n.record_keys.push(keys);
    }
    n
}

impl Transactions {
    /// A CDC_TXN file's bytes and tables, read once per invocation.
    async fn file(
        &self,
        objects: &dyn ObjectStore,
        source: &crate::config::SourceSettings,
        uri: &str,
    ) -> Result<TransactionFile> {
        let mut read = self.read.lock().await;
        if let Some(f) = read.get(uri) {
            return Ok(f.clone());
        }
        let data = objects.fetch(uri).await?;
        let delimiter = source.cdc_delimiter_bytes()?;
        let tables = crate::read::transaction::tables_in(&data, uri, &delimiter)?;
        read.insert(uri.to_string(), (data.clone(), tables.clone()));
        Ok((data, tables))
    }
}

/// A table's files as the backlog policy sees them.
fn backlog_view(files: &[(DmsObject, ObjectInfo)]) -> Vec<(DmsObject, ObjectMeta)> {
    files
        .iter()
        .map(|(o, info)| (o.clone(), info.meta()))
        .collect()
}

#[cfg(test)]
mod tests;
