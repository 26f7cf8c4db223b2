//! Column types: the names users write in the config, the Arrow type each Iceberg type is held in
//! while we process it, and which type changes Iceberg allows (promotions).

use arrow_schema::DataType;
use iceberg::spec::{Datum, Literal, PrimitiveLiteral, PrimitiveType, Struct, StructType, Type};

use crate::error::{Error, Result};

/// Storage of DMS `TIME` values (Spark cannot read an Iceberg `time` column at all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeType {
    #[default]
    String,
    Long,
    Time,
}

impl TimeType {
    /// The Iceberg type a new column of DMS `TIME` values gets.
    pub fn iceberg_type(self) -> PrimitiveType {
        match self {
            TimeType::String => PrimitiveType::String,
            TimeType::Long => PrimitiveType::Long,
            TimeType::Time => PrimitiveType::Time,
        }
    }
}

/// Parses a type name as written in the config (`long`, `decimal(12,2)`, `timestamp`, ...).
pub(crate) fn parse_type(name: &str) -> Result<PrimitiveType> {
    let n = name.trim().to_ascii_lowercase();
    let t = match n.as_str() {
        "boolean" | "bool" => PrimitiveType::Boolean,
        "int" | "integer" | "int32" => PrimitiveType::Int,
        "long" | "bigint" | "int64" => PrimitiveType::Long,
        "float" | "real" => PrimitiveType::Float,
        "double" => PrimitiveType::Double,
        "date" => PrimitiveType::Date,
        "time" => PrimitiveType::Time,
        "timestamp" => PrimitiveType::Timestamp,
        "timestamptz" => PrimitiveType::Timestamptz,
        "string" | "varchar" | "text" => PrimitiveType::String,
        "binary" => PrimitiveType::Binary,
        _ => {
            let inner = n
                .strip_prefix("decimal(")
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| Error::Config(format!("unknown column type `{name}`")))?;
            let (p, s) = inner
                .split_once(',')
                .ok_or_else(|| Error::Config(format!("decimal type `{name}` needs (P,S)")))?;
            let precision: u32 = p
                .trim()
                .parse()
                .map_err(|_| Error::Config(format!("bad decimal precision in `{name}`")))?;
            let scale: u32 = s
                .trim()
                .parse()
                .map_err(|_| Error::Config(format!("bad decimal scale in `{name}`")))?;
            if precision == 0 || precision > 38 || scale > precision {
                return Err(Error::Config(format!(
                    "decimal `{name}`: precision must be 1..=38 and scale <= precision"
                )));
            }
            PrimitiveType::Decimal { precision, scale }
        }
    };
    Ok(t)
}

/// The Arrow type a column of this Iceberg type is held in (the same mapping iceberg-rust's
/// writer and reader use, so batches we build can be written without casts).
pub(crate) fn arrow_type(t: &PrimitiveType) -> Result<DataType> {
    Ok(iceberg::arrow::type_to_arrow_type(&Type::Primitive(
        t.clone(),
    ))?)
}

/// Whether Iceberg allows changing a column from `from` to `to` (spec: "Schema Evolution").
pub(crate) fn can_promote(from: &PrimitiveType, to: &PrimitiveType) -> bool {
    use PrimitiveType::*;
    match (from, to) {
        (a, b) if a == b => true,
        (Int, Long) | (Float, Double) => true,
        (
            Decimal {
                precision: p1,
                scale: s1,
            },
            Decimal {
                precision: p2,
                scale: s2,
            },
        ) => s1 == s2 && p2 >= p1,
        _ => false,
    }
}

/// A bound or partition value of a column, as the column's type `to` reads it after the
/// promotion from the type it was written with: what every reader gets from the bytes (Iceberg
/// does not rewrite bounds when it promotes a column, and a reader takes a 4-byte bound of a
/// `long` column as an `int`, of a `double` column as a `float`; a decimal's bytes are its
/// unscaled value at any precision). `None` if `to` is not the value's type or a promotion of it.
pub(crate) fn promote_datum(d: &Datum, to: &PrimitiveType) -> Option<Datum> {
    if d.data_type() == to {
        return Some(d.clone());
    }
    if !can_promote(d.data_type(), to) {
        return None;
    }
    // Through the serialized form, as a reader of a bound written before the promotion reads
    // it (iceberg-rust has no public constructor of a 38-digit decimal at another precision).
    let bytes = match d.literal() {
        // Not `to_bytes`: it cuts a decimal to its type's width, and a value read under a
        // narrower decimal than it was written with (a manifest whose header predates the
        // widening) would lose its high bytes.
        PrimitiveLiteral::Int128(v) => decimal_bytes(*v),
        _ => d.to_bytes().ok()?.to_vec(),
    };
    Datum::try_from_bytes(&bytes, to.clone()).ok()
}

/// `partition` (a file's partition values as a manifest written before a column was widened
/// holds them) in `partition_type`, the spec's partition type under the current schema: values
/// of an identity or truncate field of a widened column (int → long, float → double) in the
/// wider type. `None` when every value is of its field's type already (a decimal literal is its
/// unscaled value at any precision), as for every table that never widened a partition source.
///
/// iceberg-rust matches position deletes to data files by partition value (`Int(3)` is not
/// `Long(3)`), and a partition key whose value is not of its field's type panics where it is
/// rendered into a file's path.
pub(crate) fn conform_partition(partition: &Struct, partition_type: &StructType) -> Option<Struct> {
    let widened = |v: Option<&Literal>, ty: &Type| -> Option<Literal> {
        let Some(Literal::Primitive(p)) = v else {
            return None;
        };
        match (p, ty.as_primitive_type()?) {
            (PrimitiveLiteral::Int(i), PrimitiveType::Long) => Some(Literal::long(*i)),
            (PrimitiveLiteral::Float(x), PrimitiveType::Double) => {
                Some(Literal::double(f64::from(x.0)))
            }
            _ => None,
        }
    };
    let fields = partition_type.fields();
    if (partition.iter().zip(fields)).all(|(v, f)| widened(v, &f.field_type).is_none()) {
        return None;
    }
    Some(
        (partition.iter().zip(fields))
            .map(|(v, f)| widened(v, &f.field_type).or_else(|| v.cloned()))
            .collect(),
    )
}

/// A decimal's unscaled value as Iceberg serializes it: big-endian two's complement in the
/// fewest bytes that keep its sign.
fn decimal_bytes(v: i128) -> Vec<u8> {
    let b = v.to_be_bytes();
    let sign = if v < 0 { 0xFF } else { 0x00 };
    let mut start = 0;
    while start < b.len() - 1 && b[start] == sign && (b[start + 1] & 0x80) == (sign & 0x80) {
        start += 1;
    }
    b[start..].to_vec()
}

/// Orders two values of one column, of the same type or one a promotion of the other (a bound
/// read from a manifest written before the column was widened): `Datum`'s own order has none
/// between an `int` and a `long`.
pub(crate) fn cmp_datums(a: &Datum, b: &Datum) -> Option<std::cmp::Ordering> {
    if a.data_type() == b.data_type() {
        return a.partial_cmp(b);
    }
    if let Some(a) = promote_datum(a, b.data_type()) {
        return a.partial_cmp(b);
    }
    promote_datum(b, a.data_type()).and_then(|b| a.partial_cmp(&b))
}

/// The type a column must have to hold values of both types, if Iceberg can get there by
/// promoting `table` (the incoming side may be narrower: it is cast up when read).
pub(crate) fn unify(table: &PrimitiveType, incoming: &PrimitiveType) -> Option<PrimitiveType> {
    if can_promote(incoming, table) {
        Some(table.clone())
    } else if can_promote(table, incoming) {
        Some(incoming.clone())
    } else {
        None
    }
}

/// Maps a Parquet/Arrow source type to the Iceberg type we store it as. DMS writes unsigned
/// integers, which Iceberg lacks: they widen losslessly (uint64 needs decimal(20,0)).
pub(crate) fn iceberg_type_for_arrow(dt: &DataType) -> Option<PrimitiveType> {
    Some(match dt {
        DataType::Boolean => PrimitiveType::Boolean,
        DataType::Int8 | DataType::Int16 | DataType::Int32 => PrimitiveType::Int,
        DataType::UInt8 | DataType::UInt16 => PrimitiveType::Int,
        DataType::Int64 | DataType::UInt32 => PrimitiveType::Long,
        DataType::UInt64 => PrimitiveType::Decimal {
            precision: 20,
            scale: 0,
        },
        DataType::Float16 | DataType::Float32 => PrimitiveType::Float,
        DataType::Float64 => PrimitiveType::Double,
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s)
            if *s >= 0 && *p <= 38 =>
        {
            PrimitiveType::Decimal {
                precision: *p as u32,
                scale: *s as u32,
            }
        }
        DataType::Date32 | DataType::Date64 => PrimitiveType::Date,
        DataType::Time32(_) | DataType::Time64(_) => PrimitiveType::Time,
        DataType::Timestamp(_, None) => PrimitiveType::Timestamp,
        DataType::Timestamp(_, Some(_)) => PrimitiveType::Timestamptz,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => PrimitiveType::String,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => PrimitiveType::Binary,
        DataType::FixedSizeBinary(_) => PrimitiveType::Binary,
        DataType::Dictionary(_, v) => return iceberg_type_for_arrow(v),
        DataType::Null => PrimitiveType::String,
        _ => return None,
    })
}

/// The type a file's column is stored as: what the file (or config) declares, except that DMS
/// `TIME` values go to a new column as `time_type` says and to an existing column in the type
/// it has (time, string or long), so a table keeps its type when the setting changes.
pub(crate) fn stored_type(
    declared: &PrimitiveType,
    existing: Option<&PrimitiveType>,
    time_type: TimeType,
) -> PrimitiveType {
    if *declared != PrimitiveType::Time {
        return declared.clone();
    }
    match existing {
        Some(t @ (PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Long)) => t.clone(),
        _ => time_type.iceberg_type(),
    }
}

/// An int or long column's values as i64.
pub(crate) fn int_values(a: &arrow_array::ArrayRef) -> Option<Vec<i64>> {
    use arrow_array::cast::AsArray as _;
    use arrow_array::types::{Int32Type, Int64Type};
    match a.data_type() {
        arrow_schema::DataType::Int64 => Some(a.as_primitive::<Int64Type>().values().to_vec()),
        arrow_schema::DataType::Int32 => Some(
            a.as_primitive::<Int32Type>()
                .values()
                .iter()
                .map(|v| i64::from(*v))
                .collect(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!(parse_type("LONG").unwrap(), PrimitiveType::Long);
        assert_eq!(
            parse_type("decimal(12, 2)").unwrap(),
            PrimitiveType::Decimal {
                precision: 12,
                scale: 2
            }
        );
        assert!(parse_type("decimal(40,2)").is_err());
        assert!(parse_type("decimal(4,5)").is_err());
        assert!(parse_type("varchar2").is_err());
    }

    #[test]
    fn promotions_follow_the_spec() {
        use PrimitiveType::*;
        assert!(can_promote(&Int, &Long));
        assert!(!can_promote(&Long, &Int));
        assert!(can_promote(&Float, &Double));
        assert!(!can_promote(&Int, &Double));
        assert!(!can_promote(&Long, &String));
        let d = |p, s| Decimal {
            precision: p,
            scale: s,
        };
        assert!(can_promote(&d(10, 2), &d(12, 2)));
        assert!(!can_promote(&d(10, 2), &d(12, 3)));
        assert_eq!(unify(&Long, &Int), Some(Long));
        assert_eq!(unify(&Int, &Long), Some(Long));
        assert_eq!(unify(&Long, &String), None);
    }

    #[test]
    fn values_written_before_a_promotion_read_as_the_wider_type() {
        use PrimitiveType::*;
        let d = |p, s| Decimal {
            precision: p,
            scale: s,
        };
        assert_eq!(promote_datum(&Datum::int(-7), &Long), Some(Datum::long(-7)));
        assert_eq!(
            promote_datum(&Datum::float(0.1), &Double),
            Some(Datum::double(f64::from(0.1f32)))
        );
        // The largest decimal(9,2), at precision 38: the same unscaled value.
        let narrow = Datum::try_from_bytes(&999_999_999i128.to_be_bytes()[12..], d(9, 2)).unwrap();
        let wide = promote_datum(&narrow, &d(38, 2)).unwrap();
        assert_eq!(wide.data_type(), &d(38, 2));
        assert_eq!(wide.literal(), narrow.literal());
        // A value read under a header narrower than it was written with keeps its high bytes.
        let over = Datum::try_from_bytes(&decimal_bytes(123_456_789_012), d(9, 2)).unwrap();
        assert_ne!(
            over.to_bytes().unwrap().to_vec(),
            decimal_bytes(123_456_789_012),
            "iceberg-rust cuts it to decimal(9,2)'s four bytes"
        );
        let fixed = promote_datum(&over, &d(12, 2)).unwrap();
        assert_eq!(fixed.literal(), &PrimitiveLiteral::Int128(123_456_789_012));
        assert_eq!(
            fixed.to_bytes().unwrap().to_vec(),
            decimal_bytes(123_456_789_012)
        );
        for v in [
            0,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            i128::from(i64::MIN),
            i128::MAX,
            i128::MIN,
        ] {
            let b = decimal_bytes(v);
            let back = Datum::try_from_bytes(&b, d(38, 0)).unwrap();
            assert_eq!(back.literal(), &PrimitiveLiteral::Int128(v), "{v}: {b:?}");
            assert!(
                b.len() == 1
                    || b[0] != if v < 0 { 0xFF } else { 0 }
                    || (b[1] & 0x80 != 0) != (v < 0),
                "{v}: {b:?} is not minimal"
            );
        }
        assert_eq!(promote_datum(&Datum::long(1), &Int), None);
        assert_eq!(promote_datum(&Datum::int(1), &String), None);
        assert_eq!(promote_datum(&Datum::date(1), &Timestamp), None);
        assert_eq!(promote_datum(&narrow, &d(12, 3)), None);

        // Across widths, in both directions; `Datum` alone does not order them.
        let (small, big) = (Datum::int(i32::MAX), Datum::long(i64::from(i32::MAX) + 1));
        assert_eq!(small.partial_cmp(&big), None);
        assert_eq!(cmp_datums(&small, &big), Some(std::cmp::Ordering::Less));
        assert_eq!(cmp_datums(&big, &small), Some(std::cmp::Ordering::Greater));
        assert_eq!(
            cmp_datums(&Datum::float(1.5), &Datum::double(1.5)),
            Some(std::cmp::Ordering::Equal)
        );
        assert_eq!(cmp_datums(&Datum::int(1), &Datum::string("1")), None);
    }

    #[test]
    fn partition_values_follow_a_widened_source() {
        use iceberg::spec::NestedField;
        use std::sync::Arc;
        let field =
            |id, t: PrimitiveType| Arc::new(NestedField::optional(id, "p", Type::Primitive(t)));
        let wide = StructType::new(vec![
            field(1000, PrimitiveType::Long),
            field(1001, PrimitiveType::Double),
            field(1002, PrimitiveType::Int),
            field(1003, PrimitiveType::Long),
        ]);
        let old = Struct::from_iter([
            Some(Literal::int(3)),
            Some(Literal::float(0.5)),
            Some(Literal::int(7)),
            None,
        ]);
        let now = conform_partition(&old, &wide).unwrap();
        assert_eq!(
            now,
            Struct::from_iter([
                Some(Literal::long(3)),
                Some(Literal::double(0.5)),
                Some(Literal::int(7)),
                None,
            ])
        );
        assert_eq!(conform_partition(&now, &wide), None, "already of the types");
    }

    #[test]
    fn unsigned_widen() {
        assert_eq!(
            iceberg_type_for_arrow(&DataType::UInt64),
            Some(PrimitiveType::Decimal {
                precision: 20,
                scale: 0
            })
        );
        assert_eq!(
            iceberg_type_for_arrow(&DataType::UInt32),
            Some(PrimitiveType::Long)
        );
    }
}
