//! The decoded key columns of data files, as lookups search them and the cache keeps them.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use arrow_row::{RowConverter, Rows, SortField};
use arrow_schema::DataType;

use super::index::{PackedBuilder, PackedKeys, PageDir};

/// A cached decoded column of a data file.
#[derive(Clone)]
pub(crate) enum Cached {
    Keys(Arc<FileKeys>),
    /// A whole column of the file, cast to the type it is compared as.
    Values(ArrayRef),
    /// The directory of a file's stored key index.
    Dir(Arc<PageDir>),
    /// One page of a file's stored key index.
    Page(Arc<PackedKeys>),
}

/// Memory a cache entry takes besides its value (measured: RSS of a warm process holding
/// ~190,000 index pages, against the pages' own bytes).
const ENTRY_OVERHEAD: usize = 400;

impl Cached {
    pub(crate) fn size(&self) -> usize {
        match self {
            Cached::Keys(k) => k.size(),
            Cached::Values(v) => v.get_array_memory_size(),
            Cached::Dir(d) => d.size() + ENTRY_OVERHEAD,
            // A page is small: what holds it (its name twice, map and queue slots, the `Arc`,
            // four allocations) is a fifth of it, and a billion-row table has ~250,000.
            Cached::Page(p) => p.size() + ENTRY_OVERHEAD,
        }
    }
}

pub(crate) struct FileKeys {
    pub(crate) values: KeyValues,
    /// Values in key order (files we write are): lookups gallop through them.
    pub(crate) sorted: bool,
}

/// A data file's key column(s), in file order.
pub(crate) enum KeyValues {
    /// Row-encoded (any key types, composite keys).
    Rows(Rows),
    /// A single integer key column out of order (not written by us): 8 bytes a row instead of
    /// a row encoding's 17, and no encoding pass when the column is read.
    Ints(Vec<i64>),
    /// A single integer key column in order (every file we write): 1–2 bytes a row, searched
    /// block by block; what a stored key index holds.
    Packed(PackedKeys),
}

/// An integer key column: packed if it ascends, as it is in every file we write.
pub(crate) fn pack(v: Vec<i64>) -> KeyValues {
    let mut b = PackedBuilder::default();
    if b.extend(&v) {
        KeyValues::Packed(b.finish())
    } else {
        KeyValues::Ints(v)
    }
}

impl KeyValues {
    pub(crate) fn sorted(&self) -> bool {
        match self {
            KeyValues::Rows(rows) => (1..rows.num_rows()).all(|i| rows.row(i - 1) <= rows.row(i)),
            KeyValues::Ints(v) => v.windows(2).all(|w| w[0] <= w[1]),
            KeyValues::Packed(_) => true,
        }
    }
}

impl FileKeys {
    pub(crate) fn size(&self) -> usize {
        match &self.values {
            KeyValues::Rows(r) => r.size(),
            KeyValues::Ints(v) => v.capacity() * std::mem::size_of::<i64>(),
            KeyValues::Packed(p) => p.size(),
        }
    }
}

/// The name of a key column's cached (and indexed) form: cached key columns are only valid for
/// the same key types and the same form (integers or rows). The one place it is built: the
/// writer's side ([`super::TableCache::remember_keys`]) and the lookup's side must agree, and
/// stored key indexes carry it, so it must not change (a pin test holds it).
pub(crate) fn key_signature(field_ids: &[i32], types: &[DataType], ints: bool) -> String {
    format!(
        "{field_ids:?}{types:?}{}",
        if ints { "i64" } else { "rows" }
    )
}

/// A key of one integer column without NULLs: its values, the form searched fastest.
pub(crate) fn single_int_column(columns: &[ArrayRef]) -> Option<Vec<i64>> {
    match columns {
        [a] if a.null_count() == 0 => crate::types::int_values(a),
        _ => None,
    }
}

/// The cache's name for page `page` of the key index whose directory this process numbered
/// `dir` ([`PageDir::id`]): short, so a billion-row table's ~250,000 pages do not each carry
/// their data file's path twice (map and eviction queue) or hash it on every lookup.
fn page_name(dir: u64, page: usize) -> (String, String) {
    (format!("#{dir}#{page}"), String::new())
}

impl super::TableCache {
    pub(crate) fn key_budget(&self) -> usize {
        self.keys.lock().map(|k| k.limit()).unwrap_or(0)
    }

    fn cached(&self, path: &str, sig: &str) -> Option<Cached> {
        super::cache::get(&self.keys, &(path.to_string(), sig.to_string()))
    }

    fn cache(&self, path: &str, sig: &str, value: Cached) {
        super::cache::put(&self.keys, (path.to_string(), sig.to_string()), value);
    }

    pub(crate) fn cached_keys(&self, path: &str, sig: &str) -> Option<Arc<FileKeys>> {
        match self.cached(path, sig)? {
            Cached::Keys(k) => Some(k),
            _ => None,
        }
    }

    /// The key index directory of a data file.
    pub(crate) fn cached_dir(&self, path: &str, sig: &str) -> Option<Arc<PageDir>> {
        match self.cached(&format!("{path}#dir"), sig)? {
            Cached::Dir(d) => Some(d),
            _ => None,
        }
    }

    pub(crate) fn cache_dir(&self, path: &str, sig: &str, dir: Arc<PageDir>) {
        self.cache(&format!("{path}#dir"), sig, Cached::Dir(dir));
    }

    /// Page `page` of the key index whose directory is `dir` (a directory is decoded for one
    /// data file and key signature, so its number names both).
    pub(crate) fn cached_page(&self, dir: &PageDir, page: usize) -> Option<Arc<PackedKeys>> {
        match super::cache::get(&self.keys, &page_name(dir.id(), page))? {
            Cached::Page(p) => Some(p),
            _ => None,
        }
    }

    pub(crate) fn cache_page(&self, dir: &PageDir, page: usize, keys: Arc<PackedKeys>) {
        super::cache::put(&self.keys, page_name(dir.id(), page), Cached::Page(keys));
    }

    pub(crate) fn cache_keys(&self, path: &str, sig: &str, keys: Arc<FileKeys>) {
        self.cache(path, sig, Cached::Keys(keys));
    }

    /// `sig` names the column and the type it was cast to.
    pub(crate) fn cached_values(&self, path: &str, sig: &str) -> Option<ArrayRef> {
        match self.cached(path, sig)? {
            Cached::Values(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn cache_values(&self, path: &str, sig: &str, values: ArrayRef) {
        self.cache(path, sig, Cached::Values(values));
    }

    /// Keeps the key columns of a data file this process just wrote (all its rows, in file
    /// order): the next lookup of a warm process finds them here instead of reading the file
    /// back. Cached under the name a lookup with keys of the same types looks for.
    pub(crate) fn remember_keys(&self, path: &str, field_ids: &[i32], columns: &[ArrayRef]) {
        if self.key_budget() == 0 || columns.is_empty() {
            return;
        }
        let types: Vec<DataType> = columns.iter().map(|a| a.data_type().clone()).collect();
        let ints = single_int_column(columns);
        let sig = key_signature(field_ids, &types, ints.is_some());
        let values = match ints {
            Some(v) => pack(v),
            None => {
                let fields = types.iter().map(|t| SortField::new(t.clone())).collect();
                let Ok(conv) = RowConverter::new(fields) else {
                    return;
                };
                let Ok(rows) = conv.convert_columns(columns) else {
                    return;
                };
                KeyValues::Rows(rows)
            }
        };
        let sorted = values.sorted();
        self.cache_keys(path, &sig, Arc::new(FileKeys { values, sorted }));
    }
}
