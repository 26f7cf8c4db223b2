//! How our Parquet files are encoded: compression, dictionaries and row groups, the properties
//! every data and delete file we write starts from (iceberg-rust's writers take them as given).

use arrow_array::RecordBatch;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

use crate::files::parquet::ROW_GROUP_ROWS;

/// A change's rows for one partition below this (in memory) are written uncompressed: the
/// Parquet writer makes a zstd context per column chunk (about a megabyte to set up, even for a
/// few rows), so a commit spread over 200 partitions made ~1,200 of them for files of a few KB
/// whose compression saves less than it costs. Compaction rewrites them with zstd.
pub(super) const SMALL_FILE_BYTES: usize = 64 << 10;

/// How a file's columns are encoded. zstd level 1 everywhere: it encodes in about two thirds
/// of level 3's time for about 1% more bytes (a 1 GB full load: 2.99 against 4.30 s on one
/// core, 193 against 191 MB; see bench/RESULTS.md).
#[derive(Debug, Clone)]
pub(super) enum Encoding {
    /// No dictionary pages: the files one change file's commit writes (compaction rewrites
    /// them). A dictionary costs a hash of every value, and zstd finds the repeats of a
    /// low-cardinality column by itself (a 10,000-row change: 166.8 KB against 218.6 KB).
    Change,
    /// Dictionary pages (readers filter dictionary-encoded columns without decoding them):
    /// full loads, compaction's output and other streamed inputs, the files that stay. Except
    /// for the columns listed ([`varied_columns`]): building a dictionary of nearly unique
    /// values was a tenth of a full load's CPU for nothing.
    Kept { plain: Vec<String> },
    /// [`Encoding::Kept`], the plain columns picked from the first rows written: compaction's
    /// output, whose rows are not seen before it writes (a dictionary of a key column costs a
    /// reader more than it saves: DuckDB scanned a compacted 1M-row file in 35.6 ms with one,
    /// 32.6 ms without).
    Sampled,
}

/// Columns of `sample` (a first batch of rows) whose values are so varied that a dictionary
/// does not pay: most values distinct (a key, a sequence, a measure), or a dictionary of a whole
/// row group that would overflow its page (long, nearly unique text). Written without one.
pub(crate) fn varied_columns(sample: &RecordBatch) -> Vec<String> {
    const DICTIONARY_PAGE_BYTES: usize = 1 << 20;
    let rows = sample.num_rows();
    if rows == 0 {
        return Vec::new();
    }
    sample
        .schema()
        .fields()
        .iter()
        .zip(sample.columns())
        .filter_map(|(f, c)| {
            let conv = arrow_row::RowConverter::new(vec![arrow_row::SortField::new(
                c.data_type().clone(),
            )])
            .ok()?;
            let encoded = conv.convert_columns(std::slice::from_ref(c)).ok()?;
            let distinct: std::collections::HashSet<&[u8]> =
                (0..rows).map(|i| encoded.row(i).data()).collect();
            let bytes: usize = distinct.iter().map(|v| v.len()).sum();
            // The dictionary one row group would build, at this sample's rate.
            let expected = bytes.saturating_mul(ROW_GROUP_ROWS) / rows;
            (distinct.len() * 2 > rows || expected > DICTIONARY_PAGE_BYTES)
                .then(|| f.name().clone())
        })
        .collect()
}

pub(super) fn base_properties(encoding: Encoding) -> WriterPropertiesBuilder {
    let (level, dictionary, plain) = match encoding {
        Encoding::Change => (1, false, Vec::new()),
        Encoding::Kept { plain } => (1, true, plain),
        Encoding::Sampled => (1, true, Vec::new()),
    };
    let mut b = WriterProperties::builder();
    for c in plain {
        b = b.set_column_dictionary_enabled(ColumnPath::from(c.as_str()), false);
    }
    b.set_compression(Compression::ZSTD(
        ZstdLevel::try_new(level).unwrap_or_default(),
    ))
    .set_dictionary_enabled(dictionary)
    .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
    .set_created_by(format!("dms2iceberg {}", env!("CARGO_PKG_VERSION")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn nearly_unique_columns_get_no_dictionary() {
        let n = 8192i64;
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("id", arrow_schema::DataType::Int64, false),
            arrow_schema::Field::new("status", arrow_schema::DataType::Utf8, false),
            arrow_schema::Field::new("note", arrow_schema::DataType::Utf8, false),
            arrow_schema::Field::new("bucket", arrow_schema::DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| ["NEW", "PAID", "SHIPPED"][i as usize % 3]),
                )),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("order {i} of a customer, shipped on time")),
                )),
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 100))),
            ],
        )
        .expect("batch");
        assert_eq!(varied_columns(&batch), ["id", "note"]);
    }
}
