//! Configuration (TOML): where DMS writes, and per source table how to turn it into an Iceberg
//! table. Per-table settings are layered: `[defaults]`, then the most specific matching glob
//! under `[tables]`, then an exact `[tables."schema.table"]` entry.

use std::collections::BTreeMap;
use std::path::Path;

use iceberg::spec::PrimitiveType;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::types::parse_type;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub source: SourceSettings,
    #[serde(default)]
    pub defaults: TableSettings,
    #[serde(default)]
    pub tables: BTreeMap<String, TableSettings>,
    /// Put every table in this namespace (Glue database), whatever the config or DMS schema
    /// says (the functions' `DMS2ICEBERG_GLUE_DATABASE`).
    #[serde(skip)]
    pub namespace_override: Option<String>,
}

/// How DMS lays out objects (its S3 endpoint settings).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSettings {
    /// The endpoint's `BucketFolder`. When set, object keys are `<bucket_folder>/<schema>/<table>/…`
    /// and nothing outside it is read.
    pub bucket_folder: Option<String>,
    /// DMS parallel load (`partitions-auto`, `partitions-list`, `ranges` with segment names)
    /// writes LOAD files one folder deeper: `<schema>/<table>/<segment>/LOAD….csv`.
    #[serde(default)]
    pub parallel_load_folders: bool,
    /// The endpoint's `CdcPath` with `PreserveTransactions=true`: the changes of every table go
    /// to `[<bucket_folder>/]<cdc_path>/CDC_TXN-<yyyyMMddHHmmssSSS>.csv`, rows
    /// `op,TABLE,SCHEMA,field…` in transaction order (full loads stay in the table folders).
    pub cdc_path: Option<String>,
    /// The endpoint's `CsvDelimiter`, for the `CDC_TXN` files of `cdc_path` (a table's own
    /// `delimiter` is for its folder's files). Default `,`.
    pub cdc_delimiter: Option<String>,
}

/// Settings one source table can have; every field is optional so layers can merge.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSettings {
    /// Target `namespace.table`. Default: the DMS `<schema>.<table>`, lower-cased.
    pub target: Option<String>,
    pub primary_key: Option<Vec<String>>,
    /// Column holding `$AR_H_CHANGE_SEQ` (35-digit, fixed width, empty during full load).
    pub change_sequence_column: Option<String>,
    /// The endpoint's `TimestampColumnName` (commit time, `yyyy-MM-dd HH:mm:ss.SSSSSS`).
    pub commit_timestamp_column: Option<String>,
    /// A source column that orders the changes of a key (e.g. `last_update_time`): an older
    /// change never overwrites a newer row. Goes before the two columns above.
    pub ordering_column: Option<String>,
    /// How DMS `TIME` values are stored in a new column: `string` (`HH:MM:SS.ffffff`, the
    /// default: every engine reads it), `long` (microseconds since midnight) or `time`.
    pub time_type: Option<TimeType>,
    /// Partition spec as Iceberg transforms: `category`, `bucket(16, id)`, `day(ts)`, ...
    pub partition_by: Option<Vec<String>>,
    pub drop_columns: Option<Vec<String>>,
    /// Column names (in file order, after `Op`) and types: required for headerless CSV, optional
    /// type overrides otherwise.
    pub columns: Option<Vec<ColumnSetting>>,
    /// The endpoint's `CsvNullValue`. Default: an empty field is NULL.
    pub null_value: Option<String>,
    /// The endpoint's `CsvNoSupValue` (with `UseCsvNoSupValue=true`): the marker DMS writes in
    /// an update's columns the source did not log. Such a column keeps the row's current
    /// value; an insert carrying the marker is refused.
    pub no_sup_value: Option<String>,
    /// The endpoint's `AddColumnName`: files have a header (`true`) or not (`false`, names from
    /// `columns`). Default: a header unless `columns` is set and the first line does not name
    /// them.
    pub header: Option<bool>,
    /// The endpoint's `CsvDelimiter`. Default `,`.
    pub delimiter: Option<String>,
    /// Prefix of `add-before-image-columns` columns. Default `BI_`.
    pub before_image_prefix: Option<String>,
    /// Lower-case column names (Glue, Athena and Hive only know lower-case names). Default true.
    pub lowercase_names: Option<bool>,
    /// Infer the types of new CSV columns from the file that introduces them. Default true;
    /// false makes them strings.
    pub infer_types: Option<bool>,
    pub target_file_size_bytes: Option<u64>,
    /// Inputs of one commit larger than this (bytes as stored) are deduplicated on their key
    /// and ordering columns alone, then their winning rows are read a second time: memory
    /// follows the keys, not the rows. Default 128 MiB.
    pub large_input_bytes: Option<u64>,
    /// DMS objects (keys, or file names) never to apply: the operator's way past a file that
    /// cannot be applied. Listed files are reported as skipped; later files go on.
    pub skip_files: Option<Vec<String>>,
    /// What a row that cannot be read does: `fail` (default: the file fails, nothing is
    /// committed) or `quarantine` (the row goes to `<table>__rejected`, the rest applies).
    pub bad_rows: Option<BadRows>,
    /// Table properties set when the table is created.
    pub properties: Option<BTreeMap<String, String>>,
    /// Change files the table's applied-file record keeps (by DMS order): a change file older
    /// than all of them can no longer be merged in order. Default 2000.
    pub applied_record_files: Option<usize>,
    /// How rows apply: `upsert` (default: per primary key, the latest change wins), `append`
    /// (every row appended, for tables without a key and `CdcInsertsOnly`), `changelog` (every
    /// change row appended with its Op, DMS file and row: the history).
    pub mode: Option<TableMode>,
    /// The ingest function: when DMS deletes every object of a table that its applied-file
    /// record lists (S3 `Object Deleted` events, not lifecycle expirations: the source table
    /// was truncated or dropped, with the task's DDL handling on), empty the table once. Default
    /// true.
    pub truncate_on_source_delete: Option<bool>,
    /// Iceberg format version of a table this creates: 2 (the default: every engine reads it,
    /// Athena among them) or 3 (deletion vectors and row lineage; Athena cannot read it). An
    /// existing table keeps its version.
    pub format_version: Option<u8>,
}

pub use crate::types::TimeType;

/// How a table's rows apply ([`TableSettings::mode`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TableMode {
    /// Per primary key, the latest change wins: the table is a replica of the source table.
    #[default]
    Upsert,
    /// Every row is appended (no key, no lookup, no deletes); an update or delete row is
    /// refused. For keyless source tables (logs, audit tables) and `CdcInsertsOnly`.
    Append,
    /// Every change row is appended with its Op (`dms_op`), DMS file (`dms_file`) and row in
    /// that file (`dms_row`): the change history, for audit and slowly changing dimensions.
    Changelog,
}

impl TableMode {
    /// Rows are appended, never merged by key.
    pub fn appends(self) -> bool {
        self != TableMode::Upsert
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TableMode::Upsert => "upsert",
            TableMode::Append => "append",
            TableMode::Changelog => "changelog",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BadRows {
    #[default]
    Fail,
    Quarantine,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSetting {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: Option<String>,
}

impl TableSettings {
    /// `self` with unset fields taken from `base`.
    fn over(&self, base: &TableSettings) -> TableSettings {
        macro_rules! pick {
            ($($f:ident),*) => { TableSettings { $($f: self.$f.clone().or_else(|| base.$f.clone())),* } };
        }
        pick!(
            target,
            primary_key,
            change_sequence_column,
            commit_timestamp_column,
            ordering_column,
            time_type,
            partition_by,
            drop_columns,
            columns,
            null_value,
            no_sup_value,
            header,
            delimiter,
            before_image_prefix,
            lowercase_names,
            infer_types,
            target_file_size_bytes,
            large_input_bytes,
            skip_files,
            bad_rows,
            properties,
            applied_record_files,
            mode,
            truncate_on_source_delete,
            format_version
        )
    }
}

/// Fully resolved settings for one source table.
#[derive(Debug, Clone)]
pub struct TableConfig {
    /// `schema.table` as DMS names it (the config key that matched, for messages).
    pub source: String,
    pub namespace: String,
    pub table: String,
    pub primary_key: Option<Vec<String>>,
    pub change_sequence_column: Option<String>,
    pub commit_timestamp_column: Option<String>,
    pub ordering_column: Option<String>,
    pub time_type: TimeType,
    pub partition_by: Option<Vec<String>>,
    pub drop_columns: Vec<String>,
    pub columns: Option<Vec<(String, Option<PrimitiveType>)>>,
    pub null_value: String,
    /// [`TableSettings::no_sup_value`]; never empty.
    pub no_sup_value: Option<String>,
    pub header: Option<bool>,
    /// `[source] cdc_delimiter`: the delimiter of `CDC_TXN` files (`cdc_path`).
    pub cdc_delimiter: Vec<u8>,
    /// The endpoint's `CsvDelimiter`: one or more bytes.
    pub delimiter: Vec<u8>,
    pub before_image_prefix: String,
    pub lowercase_names: bool,
    pub infer_types: bool,
    pub target_file_size_bytes: u64,
    pub large_input_bytes: u64,
    pub skip_files: Vec<String>,
    pub bad_rows: BadRows,
    pub properties: BTreeMap<String, String>,
    pub applied_record_files: usize,
    pub mode: TableMode,
    pub truncate_on_source_delete: bool,
    pub format_version: iceberg::spec::FormatVersion,
}

impl TableConfig {
    /// `namespace.table`
    pub fn target(&self) -> String {
        format!("{}.{}", self.namespace, self.table)
    }

    /// Whether the operator listed this object under `skip_files` (by key or file name).
    pub fn is_skipped(&self, key: &str) -> bool {
        self.skip_files
            .iter()
            .any(|s| key == s || key.ends_with(&format!("/{}", s.trim_start_matches('/'))))
    }

    /// The columns that order changes of one key, first decides: `ordering_column`, then
    /// `change_sequence_column`, then `commit_timestamp_column` (each once). After them come
    /// DMS file order and the row's place in its file; full-load rows come before every change.
    pub fn ordering_columns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in [
            &self.ordering_column,
            &self.change_sequence_column,
            &self.commit_timestamp_column,
        ]
        .into_iter()
        .flatten()
        {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }

    /// A column name as the table stores it.
    pub fn column_name(&self, source_name: &str) -> String {
        if self.lowercase_names {
            source_name.to_lowercase()
        } else {
            source_name.to_string()
        }
    }
}

pub const DEFAULT_TARGET_FILE_SIZE: u64 = 512 * 1024 * 1024;
/// Above this, a commit's input is read twice rather than held (see `large_input_bytes`).
pub const DEFAULT_LARGE_INPUT_BYTES: u64 = 128 * 1024 * 1024;
/// Change files the applied-file record keeps by default (`applied_record_files`: about a day
/// and a half of one-minute files).
pub const DEFAULT_WINDOW: usize = 2_000;
/// Format version of a table created without `format_version` (by a config or
/// `DMS2ICEBERG_FORMAT_VERSION`): v2, position deletes, read by every engine (see
/// docs/how-it-works.md).
pub const DEFAULT_FORMAT_VERSION: iceberg::spec::FormatVersion = iceberg::spec::FormatVersion::V2;

impl Config {
    pub fn from_toml(text: &str) -> Result<Config> {
        let cfg: Config = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Tables this config does not give a `format_version` get `DMS2ICEBERG_FORMAT_VERSION`'s
    /// (2 or 3), if set: how the functions, and the CLI alike, take it from their environment.
    pub fn with_format_version_from_env(mut self) -> Result<Config> {
        let v = match std::env::var("DMS2ICEBERG_FORMAT_VERSION").ok().as_deref() {
            None | Some("") => None,
            Some("2") => Some(2),
            Some("3") => Some(3),
            Some(v) => {
                return Err(Error::Config(format!(
                    "DMS2ICEBERG_FORMAT_VERSION=`{v}`: use 2 or 3"
                )));
            }
        };
        if self.defaults.format_version.is_none() {
            self.defaults.format_version = v;
        }
        Ok(self)
    }

    pub fn load(path: &Path) -> Result<Config> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::io(path.display().to_string(), e))?;
        Self::from_toml(&text).map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Checks everything that can be checked without data, so a typo fails at start-up.
    fn validate(&self) -> Result<()> {
        for name in self.tables.keys() {
            if name.matches('.').count() != 1 {
                return Err(Error::Config(format!(
                    "[tables.\"{name}\"]: table keys are `<schema>.<table>` as DMS names them (globs allowed)"
                )));
            }
        }
        // Resolve each explicit entry once to surface bad values.
        for name in self.tables.keys() {
            if !name.contains('*') && !name.contains('?') {
                let (s, t) = name.split_once('.').unwrap_or((name, ""));
                self.table(s, t)?;
            }
        }
        Ok(())
    }

    /// The settings for DMS table `schema.table`.
    pub fn table(&self, schema: &str, table: &str) -> Result<TableConfig> {
        let source = format!("{schema}.{table}");
        let mut globs: Vec<(&String, &TableSettings)> = self
            .tables
            .iter()
            .filter(|(k, _)| (k.contains('*') || k.contains('?')) && glob_match(k, &source))
            .collect();
        // Most specific glob: the most literal characters.
        globs.sort_by_key(|(k, _)| {
            std::cmp::Reverse(k.chars().filter(|c| *c != '*' && *c != '?').count())
        });
        let mut s = self.defaults.clone();
        let mut matched = source.clone();
        if let Some((k, g)) = globs.first() {
            s = g.over(&s);
            matched = (*k).clone();
        }
        if let Some(exact) = self.tables.get(&source) {
            s = exact.over(&s);
            matched = source.clone();
        }
        let lowercase_names = s.lowercase_names.unwrap_or(true);
        let (namespace, name) = match &s.target {
            Some(t) => {
                let (n, t) = t.split_once('.').ok_or_else(|| {
                    Error::Config(format!(
                        "[tables.\"{matched}\"] target `{t}` must be `namespace.table`"
                    ))
                })?;
                (n.to_string(), t.to_string())
            }
            None => (schema.to_lowercase(), table.to_lowercase()),
        };
        let namespace = self.namespace_override.clone().unwrap_or(namespace);
        for part in [&namespace, &name] {
            if !is_identifier(part) {
                return Err(Error::Config(format!(
                    "table `{source}` would be named `{namespace}.{name}`, but `{part}` is not a valid \
                     name (lower-case letters, digits and `_`); set `target` under [tables.\"{source}\"]"
                )));
            }
        }
        let delimiter = parse_delimiter(s.delimiter.as_deref())
            .map_err(|d| Error::Config(format!("[tables.\"{matched}\"] {d}")))?;
        let cdc_delimiter = self.source.cdc_delimiter_bytes()?;
        let columns = match &s.columns {
            None => None,
            Some(cols) => Some(
                cols.iter()
                    .map(|c| Ok((c.name.clone(), c.ty.as_deref().map(parse_type).transpose()?)))
                    .collect::<Result<Vec<_>>>()
                    .map_err(|e| Error::Config(format!("[tables.\"{matched}\"] columns: {e}")))?,
            ),
        };
        if s.primary_key.as_ref().is_some_and(|k| k.is_empty()) {
            return Err(Error::Config(format!(
                "[tables.\"{matched}\"] primary_key is empty"
            )));
        }
        let norm = |c: &String| {
            if lowercase_names {
                c.to_lowercase()
            } else {
                c.clone()
            }
        };
        Ok(TableConfig {
            source,
            namespace,
            table: name,
            primary_key: s.primary_key.as_ref().map(|k| k.iter().map(norm).collect()),
            change_sequence_column: s.change_sequence_column.as_ref().map(norm),
            commit_timestamp_column: s.commit_timestamp_column.as_ref().map(norm),
            ordering_column: s.ordering_column.as_ref().map(norm),
            time_type: s.time_type.unwrap_or_default(),
            partition_by: s.partition_by.clone(),
            drop_columns: s
                .drop_columns
                .clone()
                .unwrap_or_default()
                .iter()
                .map(norm)
                .collect(),
            columns,
            null_value: s.null_value.clone().unwrap_or_default(),
            no_sup_value: match s.no_sup_value.as_deref() {
                Some("") => {
                    return Err(Error::Config(format!(
                        "[tables.\"{matched}\"] no_sup_value is empty: it must be the marker \
                         DMS writes (CsvNoSupValue), which an empty field cannot be told from"
                    )));
                }
                Some(v) if v == s.null_value.as_deref().unwrap_or_default() => {
                    return Err(Error::Config(format!(
                        "[tables.\"{matched}\"] no_sup_value `{v}` is also the null_value: a \
                         column the source did not supply could not be told from a NULL"
                    )));
                }
                v => v.map(str::to_string),
            },
            header: s.header,
            delimiter,
            cdc_delimiter,
            before_image_prefix: s
                .before_image_prefix
                .clone()
                .unwrap_or_else(|| "BI_".into()),
            lowercase_names,
            infer_types: s.infer_types.unwrap_or(true),
            target_file_size_bytes: s.target_file_size_bytes.unwrap_or(DEFAULT_TARGET_FILE_SIZE),
            large_input_bytes: s.large_input_bytes.unwrap_or(DEFAULT_LARGE_INPUT_BYTES),
            skip_files: s.skip_files.clone().unwrap_or_default(),
            bad_rows: s.bad_rows.unwrap_or_default(),
            properties: s.properties.clone().unwrap_or_default(),
            applied_record_files: s.applied_record_files.unwrap_or(DEFAULT_WINDOW).max(1),
            mode: s.mode.unwrap_or_default(),
            truncate_on_source_delete: s.truncate_on_source_delete.unwrap_or(true),
            format_version: match s.format_version {
                None => DEFAULT_FORMAT_VERSION,
                Some(2) => iceberg::spec::FormatVersion::V2,
                Some(3) => iceberg::spec::FormatVersion::V3,
                Some(v) => {
                    return Err(Error::Config(format!(
                        "[tables.\"{matched}\"] format_version = {v}: use 2 or 3"
                    )));
                }
            },
        })
    }
}

impl SourceSettings {
    /// The delimiter of `CDC_TXN` files.
    pub fn cdc_delimiter_bytes(&self) -> Result<Vec<u8>> {
        parse_delimiter(self.cdc_delimiter.as_deref())
            .map_err(|d| Error::Config(format!("[source] cdc_{d}")))
    }
}

/// A `delimiter` setting: `,` by default, `\t` for a tab, else the characters as given (not
/// empty, no quote or line break).
fn parse_delimiter(d: Option<&str>) -> std::result::Result<Vec<u8>, String> {
    match d {
        None => Ok(b",".to_vec()),
        Some("\\t") => Ok(b"\t".to_vec()),
        Some(d) if !d.is_empty() && !d.contains(['"', '\n', '\r']) => Ok(d.as_bytes().to_vec()),
        Some(d) => Err(format!(
            "delimiter `{d}` must be non-empty and contain no quote or newline"
        )),
    }
}

/// Iceberg/Glue-safe name: lower-case ASCII letters, digits, `_`; not empty.
pub fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `*` matches any run of characters, `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("sales.*", "sales.product"));
        assert!(glob_match("*.*", "a.b"));
        assert!(glob_match("s?les.p*t", "sales.product"));
        assert!(!glob_match("sales.*", "hr.people"));
        assert!(!glob_match("sales.prod", "sales.product"));
    }

    #[test]
    fn layers_defaults_glob_exact() {
        let cfg = Config::from_toml(
            r#"
            [defaults]
            primary_key = ["id"]
            null_value = "\\N"
            [tables."sales.*"]
            partition_by = ["category"]
            [tables."sales.product"]
            primary_key = ["Product_ID"]
            target = "shop.items"
            "#,
        )
        .unwrap();
        let p = cfg.table("sales", "product").unwrap();
        assert_eq!(p.primary_key, Some(vec!["product_id".to_string()]));
        assert_eq!(p.partition_by, Some(vec!["category".to_string()]));
        assert_eq!(p.null_value, "\\N");
        assert_eq!(p.target(), "shop.items");
        let o = cfg.table("sales", "orders").unwrap();
        assert_eq!(o.primary_key, Some(vec!["id".to_string()]));
        assert_eq!(o.target(), "sales.orders");
        let h = cfg.table("HR", "People").unwrap();
        assert_eq!(h.target(), "hr.people");
        assert_eq!(h.partition_by, None);
    }

    #[test]
    fn rejects_bad_names_and_keys() {
        let cfg = Config::default();
        let e = cfg.table("my-schema", "t").unwrap_err().to_string();
        assert!(e.contains("set `target`"), "{e}");
        assert!(Config::from_toml("[tables.\"justone\"]\n").is_err());
        assert!(Config::from_toml("[defaults]\nprimary_ky = [\"a\"]\n").is_err());
        assert!(
            Config::from_toml("[tables.\"a.b\"]\ncolumns = [{name=\"x\", type=\"nope\"}]\n")
                .is_err()
        );
    }
}
