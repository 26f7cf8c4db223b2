//! What dms2iceberg writes into a table beyond what the spec defines: the keys of its snapshot
//! summaries and table properties, and the names of its full-load data files. Every layer that
//! reads or writes them (lookup, write, compaction, commit, history) takes them from here, so
//! the words are defined once, below all of them.

use std::collections::HashMap;

use iceberg::spec::TableMetadata;

/// Snapshot summary and table property keys we write. Which files a table holds is in the
/// table property `dms2iceberg.applied` (commit's applied-file record); the summary keys
/// describe each snapshot for `history` (and, for tables written before that property existed,
/// are where the record is rebuilt from).
pub(crate) mod keys {
    /// JSON array of the DMS object keys this snapshot applied.
    pub(crate) const SOURCE_FILES: &str = "dms2iceberg.source-files";
    /// JSON array of the DMS order keys of those objects (same order as SOURCE_FILES).
    pub(crate) const SOURCE_ORDERS: &str = "dms2iceberg.source-orders";
    /// DMS order key of the last file applied to the table (cumulative).
    pub(crate) const WATERMARK: &str = "dms2iceberg.watermark";
    /// Table property: the DMS `schema.table` that feeds the table (two sources resolving to one
    /// table would silently mix their rows).
    pub(crate) const SOURCE_TABLE: &str = "dms2iceberg.source-table";
    /// Table property: files up to this DMS order count as applied (their snapshots expired).
    pub(crate) const EXPIRED_WATERMARK: &str = "dms2iceberg.expired-watermark";
    /// Greatest change sequence applied to the table (cumulative), when configured.
    pub(crate) const CHANGE_SEQ: &str = "dms2iceberg.change-seq";
    pub(crate) const ROWS_INSERTED: &str = "dms2iceberg.rows-inserted";
    pub(crate) const ROWS_UPDATED: &str = "dms2iceberg.rows-updated";
    pub(crate) const ROWS_DELETED: &str = "dms2iceberg.rows-deleted";
    /// The snapshot is a reload: it replaced the table's contents with a new full load.
    pub(crate) const RELOAD: &str = "dms2iceberg.reload";
    /// The snapshot is a truncate: the source table was truncated, every row removed.
    pub(crate) const TRUNCATE: &str = "dms2iceberg.truncate";
    pub(crate) const VERSION: &str = "dms2iceberg.version";
    /// Table property: how rows apply (`append`, `changelog`; absent: upsert), fixed when the
    /// table is created.
    pub(crate) const MODE: &str = "dms2iceberg.mode";
    /// Table property: the ordering columns ingest compares a change with the row it replaces
    /// by (JSON array), set by the first commit made with them configured. While it is set,
    /// compaction rewrites full-load files only with each other, so their rows keep their
    /// precedence over every change ([`super::FULL_LOAD_SUFFIX`]); without it a full-load
    /// row has none to keep, and its file may be merged with change rows into one.
    pub(crate) const ORDERING_COLUMNS: &str = "dms2iceberg.ordering-columns";
}

/// Name suffix of data files that hold only full-load rows (`<uuid>-00000-fullload.parquet`).
/// Full-load rows come before every change, whatever their ordering columns say (DMS stamps
/// them with the transfer time, and changes cached during the load can be older): a lookup
/// never takes a row of such a file for newer than a change. The name says it, so it survives
/// snapshot expiry and needs no extra read; a file rewritten by another engine loses it.
pub(crate) const FULL_LOAD_SUFFIX: &str = "fullload";

/// Whether a data file (by path) holds only full-load rows.
pub(crate) fn is_full_load_file(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.ends_with(&format!("-{FULL_LOAD_SUFFIX}.parquet")))
}

/// Whether compaction must rewrite a data file only with other full-load files: it holds only
/// full-load rows and the table's changes are ordered by columns
/// ([`keys::ORDERING_COLUMNS`]), against which those rows keep their precedence.
/// Without ordering columns nothing compares a full-load row with a change, and merging the
/// file with the change rows leaves readers one file instead of two.
pub(crate) fn keeps_apart(md: &TableMetadata, path: &str) -> bool {
    is_full_load_file(path) && md.properties().contains_key(keys::ORDERING_COLUMNS)
}

/// Our summary properties of a snapshot, for `history`.
pub(crate) fn source_files(props: &HashMap<String, String>) -> Vec<String> {
    props
        .get(keys::SOURCE_FILES)
        .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
        .unwrap_or_default()
}
