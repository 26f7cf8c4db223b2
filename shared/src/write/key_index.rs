//! The key indexes of the data files a stream writes ([`crate::files::index`]), built from the
//! rows as they are written: a full load or a compaction holds each file's keys in order
//! already, so the first change file after it finds an index instead of reading (and then
//! indexing) every file's key column. Each file's index is uploaded once the file is closed,
//! before the commit that adds the file.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, PrimitiveType, Schema, Type};
use tokio::task::JoinHandle;

use crate::error::Result;
use crate::files::index::{INDEX_MIN_ROWS, IndexWriter, index_path, pages_path, store_index};
use crate::files::keys::key_signature;
use crate::types::int_values;

/// Builds the key index of each file an open writer writes; one per stream.
pub(super) struct KeyIndexer {
    /// The key's column in the stream's batches.
    column: usize,
    /// The key types as a lookup names them (the table's current types).
    sig: Arc<str>,
    file_io: FileIO,
    /// Per open writer (partition): the file its rows go to now, and that file's index.
    open: Vec<Option<(String, IndexWriter)>>,
    uploads: Vec<JoinHandle<bool>>,
}

impl KeyIndexer {
    /// An indexer for a table whose key is one `int` or `long` column; `None` otherwise (such
    /// files are looked up by their key columns).
    pub(super) fn new(
        file_io: &FileIO,
        schema: &Schema,
        arrow_schema: &arrow_schema::Schema,
        key: &[String],
    ) -> Option<KeyIndexer> {
        let [name] = key else {
            return None;
        };
        let field = schema.field_by_name(name)?;
        if !matches!(
            field.field_type.as_ref(),
            Type::Primitive(PrimitiveType::Long | PrimitiveType::Int)
        ) {
            return None;
        }
        let column = arrow_schema.index_of(name).ok()?;
        let data_type = arrow_schema.field(column).data_type().clone();
        Some(KeyIndexer {
            column,
            sig: key_signature(&[field.id], &[data_type], true).into(),
            file_io: file_io.clone(),
            open: Vec::new(),
            uploads: Vec::new(),
        })
    }

    /// Writer `writer` wrote `batch` to the file at `path`: a file it wrote to before is
    /// complete, and its index is uploaded.
    pub(super) fn wrote(&mut self, writer: usize, path: String, batch: &RecordBatch) {
        if self.open.len() <= writer {
            self.open.resize_with(writer + 1, || None);
        }
        let slot = &mut self.open[writer];
        if slot.as_ref().is_some_and(|(p, _)| *p != path)
            && let Some((done, w)) = slot.take()
        {
            self.upload(done, w, None);
        }
        let slot = &mut self.open[writer];
        let (_, w) = slot.get_or_insert_with(|| (path, IndexWriter::default()));
        let values = batch
            .columns()
            .get(self.column)
            .filter(|c| c.null_count() == 0)
            .and_then(int_values);
        // Out of order or NULL keys (not what a sorted stream writes): that file gets no index.
        match values {
            Some(v) => {
                w.extend(&v);
            }
            None => w.give_up(),
        }
    }

    /// Builds and uploads the index of the complete file `path` in the background; `size`: its
    /// size if known (else it is asked of the storage, once the file is closed).
    fn upload(&mut self, path: String, w: IndexWriter, size: Option<u64>) {
        if w.rows() < INDEX_MIN_ROWS {
            return;
        }
        let (file_io, sig) = (self.file_io.clone(), self.sig.clone());
        self.uploads.push(tokio::spawn(async move {
            let result = async {
                let size = match size {
                    Some(s) => s,
                    None => file_io.new_input(&path)?.metadata().await?.size,
                };
                store_index(&file_io, &path, size, sig.to_string(), move || w).await
            }
            .await;
            match result {
                Ok(written) => written,
                Err(e) => {
                    tracing::warn!(file = %path, error = %e, "key index not written");
                    false
                }
            }
        }));
    }

    /// Uploads the index of every file still open (now closed, `files`) and waits for every
    /// upload. Returns how many indexes were written.
    pub(super) async fn finish(mut self, files: &[(i32, DataFile)]) -> usize {
        for (path, w) in std::mem::take(&mut self.open).into_iter().flatten() {
            let size = (files.iter())
                .find(|(_, f)| f.file_path() == path)
                .map(|(_, f)| f.file_size_in_bytes());
            self.upload(path, w, size);
        }
        let mut written = 0;
        for h in self.uploads {
            written += h.await.unwrap_or(false) as usize;
        }
        written
    }

    /// Waits for the uploads in flight and deletes the indexes of `paths` (an abandoned stream's
    /// files).
    pub(super) async fn abort(self, paths: &[String]) -> Result<()> {
        for h in self.uploads {
            let _ = h.await;
        }
        for p in paths {
            let _ = self.file_io.delete(index_path(p)).await;
            let _ = self.file_io.delete(pages_path(p)).await;
        }
        Ok(())
    }
}
