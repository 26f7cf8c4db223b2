//! dms2iceberg: apply AWS DMS output (full-load and change files) to Apache Iceberg tables,
//! exactly once and in source order.
//!
//! The pipeline, one module per step (in the order a DMS file goes through them):
//!
//! 1. [`locate`]: object key → source table, file kind, place in DMS order.
//! 2. `evolve`: the table's schema for the files (new columns, type promotions), settled from
//!    their headers or Parquet schemas before any row is read, so that every batch is read in
//!    the table's types; committed as one schema change with the data.
//! 3. [`read`]: file bytes → Arrow batches of typed rows with their `Op`.
//! 4. `dedupe`: per primary key keep the last change.
//! 5. [`lookup`]: where the table holds each changed key (file, position), without a scan.
//! 6. [`write`]: Parquet data files for upserts, position-delete files for replaced rows.
//! 7. [`commit`]: one atomic snapshot per input: every table change is a typed `Change`
//!    landed by one plan → commit → replan loop, with the exactly-once record in the same
//!    metadata commit (the protocol's invariants are written at the top of `commit`).
//!
//! Beneath the steps, `files` reads and writes the table's own files for every step that needs
//! them: metadata.json with its refs, manifest lists and manifests, a snapshot's live files
//! (the one walk lookup, compaction, validation and history share), position-delete content,
//! small Parquet files read whole, key columns and key indexes; all through the process's one
//! [`TableCache`]. The rules of the format every step shares are there too: row lineage, and
//! what we write into a table beyond the spec (summary and property keys, full-load file
//! names). Modules import only modules below them: docs/repository.md ("Layers") draws the
//! order, and `shared/tests/layers.rs` keeps it.
//!
//! [`ops`] strings the steps together as table operations; the Lambda handlers ([`lambda`],
//! feature `aws`) and the CLI only wire configuration, clients and output.
//!
//! # Public API
//! What the CLI, the two Lambda functions, the benchmarks and the tests use; everything else is
//! `pub(crate)`:
//! - operations: [`ops::ingest::Ingest`] (with [`ops::ingest::local_inputs`] and
//!   [`ops::discover::discover_all`]), [`ops::scan::Scan`], [`ops::history::history`],
//!   [`ops::compact::Compact`], [`ops::maintain::ExpireSnapshots`], [`ops::maintain::Orphans`],
//!   [`ops::mark_applied::MarkApplied`]; each returns a serialisable report;
//! - catalogs: [`catalog::Catalog`] (the compare-and-swap contract), [`catalog::SqliteCatalog`]
//!   (embedded default) and, with feature `aws`, the Glue catalog and S3 clients in [`aws`];
//! - configuration: [`config::Config`] (the TOML file; per-table settings);
//! - errors: [`Error`] with [`error::InputError`] naming file, line/row and column;
//! - the cache of table files: [`TableCache`] (with [`CacheLimits`]), one per process, handed
//!   to the catalog it opens (`with_cache`) so that every operation of the process shares it;
//! - the reader ([`read`], [`locate`]), public for the hostile-input tests and the benchmarks
//!   that drive them directly.
//! - [`metadata_io`]: what the process spent reading and writing metadata.json files (the part
//!   of a commit that grows with the snapshot history), for the benchmarks.

#[cfg(feature = "aws")]
pub mod aws;
pub mod catalog;
pub(crate) mod commit;
pub mod config;
pub(crate) mod dedupe;
pub(crate) mod direct_io;
pub mod error;
pub(crate) mod evolve;
pub(crate) mod files;
#[cfg(feature = "aws")]
pub mod lambda;
pub mod locate;
pub mod lookup;
pub mod ops;
pub mod process;
pub mod read;
/// Secrets Manager values read at start (a REST catalog's token or OAuth2 credential).
#[cfg(feature = "aws")]
pub(crate) mod secrets;
pub(crate) mod spill;
/// What the functions read from and write to besides their catalog (objects, parameters, dead
/// letters), as traits [`aws`] implements; and a local folder of buckets.
#[cfg(feature = "aws")]
pub mod storage;
pub(crate) mod table;
pub(crate) mod types;
pub(crate) mod write;

pub use error::{Error, Result};
pub use files::metadata::{MetadataIo, metadata_io};
pub use files::{CacheLimits, DEFAULT_KEY_CACHE_BYTES, FileReads, Files, ReadCost, TableCache};
