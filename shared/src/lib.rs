//! dms2iceberg: apply AWS DMS output (full-load and change files) to Apache Iceberg tables.
//!
//! The pipeline, one module per step:
//!
//! 1. [`locate`]: object key → source table, file kind, place in DMS order.
//! 2. [`read`]: file bytes → Arrow batches of typed rows with their `Op`.
//! 3. [`dedupe`]: per primary key keep the last change.
//! 4. [`evolve`]: new columns and type promotions, as one schema change.
//! 5. [`write`]: Parquet data files for upserts, position-delete files for replaced rows
//!    (found by [`lookup`] without scanning the table).
//! 6. [`commit`]: one atomic snapshot per input through a catalog compare-and-swap.
//!
//! [`ops`] strings them together (`ingest`, `scan`, `history`); handlers only wire config.

#[cfg(feature = "aws")]
pub mod aws;
pub mod catalog;
pub mod commit;
pub mod config;
pub mod dedupe;
pub mod error;
pub mod evolve;
#[cfg(feature = "aws")]
pub mod lambda;
pub mod locate;
pub mod lookup;
pub mod ops;
pub mod read;
pub mod table;
pub mod types;
pub mod write;

pub use error::{Error, Result};
