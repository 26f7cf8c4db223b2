//! write: Parquet data files for the rows a commit upserts, and position-delete files (or
//! deletion vectors) for the rows it replaces or removes. Layered as iceberg-rust's
//! `base_writer`: [`properties`] (how every file we write is encoded), [`data`] (data files),
//! [`key_index`] (the key index of each large data file, built as its rows are written),
//! [`deletes`] (delete files).
//!
//! Data files are sorted by key (rows arrive sorted from dedupe), carry column statistics and a
//! bloom filter on each key column, and roll over at the target size; a partitioned table gets
//! one set of files per partition. Those are what make [`crate::lookup`] cheap later: sorted
//! files have narrow key bounds, and row groups can be skipped by statistics and bloom filters.

pub(crate) mod data;
pub(crate) mod deletes;
pub(crate) mod key_index;
pub(crate) mod properties;
