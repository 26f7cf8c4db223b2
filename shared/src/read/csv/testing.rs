//! What the CSV tests share: a table config, a DMS object, and reads that say what they yield.

use iceberg::spec::PrimitiveType;

use super::split::SplitLimits;
use crate::config::{Config, TableConfig};
use crate::error::Result;
use crate::locate::{DmsObject, FileFormat, FileKind, OrderKey};
use crate::read::{ChangeBatch, SourceData, SourceFile};

pub(super) fn cfg() -> TableConfig {
    let mut c = Config::default().table("s", "t").unwrap();
    c.primary_key = Some(vec!["id".into()]);
    c
}

pub(super) fn obj(kind: FileKind) -> DmsObject {
    DmsObject {
        key: "s/t/f.csv".into(),
        schema: "s".into(),
        table: "t".into(),
        kind,
        format: FileFormat::Csv,
        order: OrderKey::parse("1/x").unwrap(),
        transaction: false,
    }
}

pub(super) fn open(text: &[u8], cfg: &TableConfig) -> Result<SourceFile> {
    SourceFile::open(
        &obj(FileKind::Cdc),
        SourceData::Bytes(text.to_vec().into()),
        cfg,
        None,
    )
}

/// Reads with all columns typed as given (by name), keys as long.
pub(super) fn read_all(
    src: SourceFile,
    types: &[(&str, PrimitiveType)],
) -> Result<Vec<ChangeBatch>> {
    let t = column_types(&src, types);
    src.read(t, vec![PrimitiveType::Long])?.collect()
}

/// The type of each of `src`'s columns: as given by name, else string.
fn column_types(src: &SourceFile, types: &[(&str, PrimitiveType)]) -> Vec<PrimitiveType> {
    src.columns()
        .iter()
        .map(|c| {
            types
                .iter()
                .find(|(n, _)| *n == c.name)
                .map_or(PrimitiveType::String, |(_, t)| t.clone())
        })
        .collect()
}

/// Everything a read yields, as text: the error it ends with (a reader stops there, so
/// that is all), or per row its op, line and values, then the rows set aside; and how many
/// batches it took.
pub(super) fn outcome(
    text: &[u8],
    cfg: &TableConfig,
    parts: Option<usize>,
) -> (Vec<String>, usize) {
    let mut src = match open(text, cfg) {
        Ok(s) => s,
        Err(e) => return (vec![format!("open: {e}")], 0),
    };
    if let (SourceFile::Csv(c), Some(parts)) = (&mut src, parts) {
        c.split = Some(SplitLimits {
            parts,
            min_part_bytes: 1,
        });
    }
    let t = column_types(&src, &[("id", PrimitiveType::Long)]);
    let (mut out, mut set_aside) = (Vec::new(), Vec::new());
    let mut batches = 0;
    let iter = match src.read(t, vec![PrimitiveType::Long]) {
        Ok(i) => i,
        Err(e) => return (vec![format!("read: {e}")], 0),
    };
    for b in iter {
        let b = match b {
            Ok(b) => b,
            Err(e) => return (vec![format!("error: {e}")], batches),
        };
        batches += 1;
        for r in &b.rejected {
            set_aside.push(format!("rejected: {} {:?}", r.error, r.record));
        }
        for row in 0..b.data.num_rows() {
            let values: Vec<String> = b
                .data
                .columns()
                .iter()
                .map(|c| {
                    arrow_cast::display::array_value_to_string(c, row)
                        .unwrap_or_else(|e| e.to_string())
                })
                .collect();
            out.push(format!(
                "{:?} line {} {values:?}",
                b.ops[row], b.positions[row]
            ));
        }
    }
    out.extend(set_aside);
    (out, batches)
}
