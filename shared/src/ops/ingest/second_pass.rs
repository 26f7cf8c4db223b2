//! The second read of a large input.
//!
//! Inputs larger than `large_input_bytes` are deduplicated on their key (and ordering) columns
//! alone; the winning rows are then read again from the files, in chunks sorted by key, each
//! written as its own data files. Memory follows the keys and the chunk, not the file.

use std::collections::{HashMap, HashSet};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use iceberg::spec::PrimitiveType;

use super::FileInput;
use super::read::align;
use crate::config::TableConfig;
use crate::error::{Error, Result};
use crate::read::SourceFile;

/// What reading a large input again needs.
#[derive(Clone)]
pub(super) struct SecondPass {
    pub(super) cfg: TableConfig,
    pub(super) files: Vec<FileInput>,
    pub(super) table_columns: Option<Vec<String>>,
    pub(super) types: Vec<Vec<PrimitiveType>>,
    pub(super) key_types: Vec<PrimitiveType>,
    pub(super) processing: SchemaRef,
    pub(super) key: Vec<String>,
}

impl SecondPass {
    /// Reads every file again and sends the rows at `keep` (file index → positions), sorted by
    /// key, in chunks of about `large_input_bytes` of Arrow memory (one set of data files each).
    pub(super) fn run(
        self,
        keep: HashMap<u32, HashSet<u64>>,
        tx: tokio::sync::mpsc::Sender<Result<RecordBatch>>,
    ) {
        let send = |b: Result<RecordBatch>| tx.blocking_send(b).is_ok();
        let mut chunk: Vec<RecordBatch> = Vec::new();
        let mut bytes = 0usize;
        let limit = usize::try_from(self.cfg.large_input_bytes).unwrap_or(usize::MAX);
        let flush =
            |chunk: &mut Vec<RecordBatch>, bytes: &mut usize| -> Result<Option<RecordBatch>> {
                if chunk.is_empty() {
                    return Ok(None);
                }
                let all = arrow_select::concat::concat_batches(&self.processing, chunk.iter())?;
                chunk.clear();
                *bytes = 0;
                Ok(Some(sort_by_key(&all, &self.key)?))
            };
        for (i, f) in self.files.iter().enumerate() {
            let Some(positions) = keep.get(&(i as u32)) else {
                continue;
            };
            let result = (|| -> Result<()> {
                let data = f
                    .data
                    .clone()
                    .ok_or_else(|| Error::Internal(format!("{} was not fetched", f.object.key)))?;
                let src =
                    SourceFile::open(&f.object, data, &self.cfg, self.table_columns.as_deref())?;
                for b in src.read(self.types[i].clone(), self.key_types.clone())? {
                    let b = align(b?, &self.processing)?;
                    let mask: arrow_array::BooleanArray = b
                        .positions
                        .iter()
                        .map(|p| Some(positions.contains(p)))
                        .collect();
                    let picked = arrow_select::filter::filter_record_batch(&b.data, &mask)?;
                    if picked.num_rows() == 0 {
                        continue;
                    }
                    bytes += picked.get_array_memory_size();
                    chunk.push(picked);
                    if bytes >= limit
                        && let Some(sorted) = flush(&mut chunk, &mut bytes)?
                        && !send(Ok(sorted))
                    {
                        return Ok(());
                    }
                }
                Ok(())
            })();
            if let Err(e) = result {
                send(Err(e));
                return;
            }
        }
        match flush(&mut chunk, &mut bytes) {
            Ok(Some(sorted)) => {
                send(Ok(sorted));
            }
            Ok(None) => {}
            Err(e) => {
                send(Err(e));
            }
        }
    }
}

/// Rows sorted by the key columns.
fn sort_by_key(b: &RecordBatch, key: &[String]) -> Result<RecordBatch> {
    let cols: Vec<arrow_ord::sort::SortColumn> = key
        .iter()
        .filter_map(|k| b.column_by_name(k))
        .map(|c| arrow_ord::sort::SortColumn {
            values: c.clone(),
            options: None,
        })
        .collect();
    if cols.is_empty() || b.num_rows() < 2 {
        return Ok(b.clone());
    }
    let idx = arrow_ord::sort::lexsort_to_indices(&cols, None)?;
    Ok(arrow_select::take::take_record_batch(b, &idx)?)
}
