//! A column of typed values built from text, and what is wrong with a value that does not fit.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, LargeBinaryBuilder, StringBuilder, Time64MicrosecondBuilder,
    TimestampMicrosecondBuilder,
};
use iceberg::spec::PrimitiveType;

use super::parse::{
    format_time, parse_bool, parse_date, parse_decimal, parse_float, parse_integer, parse_time,
    parse_timestamp, plain_integer_bytes,
};
use crate::error::{InputError, VALUE};

/// A value that does not fit its column: why (a template holding [`VALUE`] where the value
/// goes), and the value itself, kept apart so logs can leave it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadValue {
    pub reason: String,
    pub value: Option<String>,
}

impl BadValue {
    fn new(reason: impl Into<String>, value: &str) -> BadValue {
        BadValue {
            reason: reason.into(),
            value: Some(value.to_string()),
        }
    }

    /// The error for `file`, with the value in its own field.
    pub(crate) fn into_input_error(self, file: &str) -> InputError {
        let e = InputError::new(file, self.reason);
        match self.value {
            Some(v) => e.value(v),
            None => e,
        }
    }
}

impl std::fmt::Display for BadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.value.as_deref().map(|v| format!("`{v}`"));
        write!(
            f,
            "{}",
            self.reason
                .replacen(VALUE, v.as_deref().unwrap_or("a value"), 1)
        )
    }
}

/// How a column of DMS `TIME` values is stored (the `time_type` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeAs {
    /// `HH:MM:SS.ffffff` text.
    String,
    /// Microseconds since midnight.
    Long,
}

/// Accumulates one column of typed values from text.
pub(crate) enum ColumnBuilder {
    Bool(BooleanBuilder),
    Int(Int32Builder),
    Long(Int64Builder),
    Float(Float32Builder),
    Double(Float64Builder),
    Decimal(Decimal128Builder, u32, u32),
    Date(Date32Builder),
    Time(Time64MicrosecondBuilder),
    /// A time of day stored as text or as microseconds (validated either way).
    TimeAs(Box<ColumnBuilder>, TimeAs),
    Timestamp(TimestampMicrosecondBuilder, bool),
    String(StringBuilder),
    Binary(LargeBinaryBuilder),
}

impl ColumnBuilder {
    pub(crate) fn new(t: &PrimitiveType, capacity: usize) -> Result<ColumnBuilder, String> {
        Ok(match t {
            PrimitiveType::Boolean => ColumnBuilder::Bool(BooleanBuilder::with_capacity(capacity)),
            PrimitiveType::Int => ColumnBuilder::Int(Int32Builder::with_capacity(capacity)),
            PrimitiveType::Long => ColumnBuilder::Long(Int64Builder::with_capacity(capacity)),
            PrimitiveType::Float => ColumnBuilder::Float(Float32Builder::with_capacity(capacity)),
            PrimitiveType::Double => ColumnBuilder::Double(Float64Builder::with_capacity(capacity)),
            PrimitiveType::Decimal { precision, scale } => ColumnBuilder::Decimal(
                Decimal128Builder::with_capacity(capacity)
                    .with_precision_and_scale(*precision as u8, *scale as i8)
                    .map_err(|e| e.to_string())?,
                *precision,
                *scale,
            ),
            PrimitiveType::Date => ColumnBuilder::Date(Date32Builder::with_capacity(capacity)),
            PrimitiveType::Time => {
                ColumnBuilder::Time(Time64MicrosecondBuilder::with_capacity(capacity))
            }
            PrimitiveType::Timestamp => ColumnBuilder::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(capacity),
                false,
            ),
            PrimitiveType::Timestamptz => ColumnBuilder::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(capacity).with_timezone("+00:00"),
                true,
            ),
            PrimitiveType::String => {
                ColumnBuilder::String(StringBuilder::with_capacity(capacity, capacity * 16))
            }
            PrimitiveType::Binary => {
                ColumnBuilder::Binary(LargeBinaryBuilder::with_capacity(capacity, capacity * 16))
            }
            other => return Err(format!("columns of type {other} cannot be read from text")),
        })
    }

    /// A builder for values the source declares as `declared` (the config's `columns`), stored
    /// as `t`: a DMS `TIME` stored as text or microseconds is still read as a time of day.
    pub(crate) fn for_source(
        t: &PrimitiveType,
        declared: Option<&PrimitiveType>,
        capacity: usize,
    ) -> Result<ColumnBuilder, String> {
        let inner = ColumnBuilder::new(t, capacity)?;
        Ok(match (declared, t) {
            (Some(PrimitiveType::Time), PrimitiveType::String) => {
                ColumnBuilder::TimeAs(Box::new(inner), TimeAs::String)
            }
            (Some(PrimitiveType::Time), PrimitiveType::Long) => {
                ColumnBuilder::TimeAs(Box::new(inner), TimeAs::Long)
            }
            _ => inner,
        })
    }

    /// Appends `value` (`None` = NULL) if it converts exactly to the column's type: what is
    /// stored reads back as the same value (no leading zeros dropped, no digits rounded away,
    /// no spaces trimmed). On error nothing is appended.
    pub(crate) fn push(&mut self, value: Option<&[u8]>) -> Result<(), BadValue> {
        let Some(v) = value else {
            self.push_null();
            return Ok(());
        };
        if let ColumnBuilder::Long(b) = self
            && let Some(x) = plain_integer_bytes(v)
        {
            b.append_value(x);
            return Ok(());
        }
        match self {
            ColumnBuilder::String(b) => b.append_value(utf8(v)?),
            ColumnBuilder::Binary(b) => b.append_value(v),
            ColumnBuilder::TimeAs(inner, how) => {
                let s = utf8(v)?;
                let micros = parse_time(s).map_err(|r| BadValue::new(r, s))?;
                match (inner.as_mut(), how) {
                    (ColumnBuilder::String(b), TimeAs::String) => {
                        b.append_value(format_time(micros))
                    }
                    (ColumnBuilder::Long(b), TimeAs::Long) => b.append_value(micros),
                    _ => return Err(BadValue::new("cannot store a time here", s)),
                }
            }
            _ => {
                let s = utf8(v)?;
                if s.trim() != s || s.is_empty() {
                    return Err(BadValue::new(
                        format!(
                            "{VALUE} has surrounding spaces or is empty: it would not be stored \
                             exactly as {}",
                            self.type_name()
                        ),
                        s,
                    ));
                }
                let bad = |reason: String| BadValue::new(reason, s);
                match self {
                    ColumnBuilder::Bool(b) => b.append_value(parse_bool(s).map_err(bad)?),
                    ColumnBuilder::Int(b) => b.append_value(
                        i32::try_from(parse_integer(s, "int").map_err(bad)?).map_err(|_| {
                            BadValue::new(format!("{VALUE} is out of range for int"), s)
                        })?,
                    ),
                    ColumnBuilder::Long(b) => {
                        b.append_value(parse_integer(s, "long").map_err(bad)?)
                    }
                    ColumnBuilder::Float(b) => b.append_value(
                        parse_float(s, "float")
                            .map_err(bad)?
                            .parse::<f32>()
                            .map_err(|_| {
                                BadValue::new(format!("cannot parse {VALUE} as float"), s)
                            })?,
                    ),
                    ColumnBuilder::Double(b) => b.append_value(
                        parse_float(s, "double")
                            .map_err(bad)?
                            .parse::<f64>()
                            .map_err(|_| {
                                BadValue::new(format!("cannot parse {VALUE} as double"), s)
                            })?,
                    ),
                    ColumnBuilder::Decimal(b, p, sc) => {
                        b.append_value(parse_decimal(s, *p, *sc).map_err(bad)?)
                    }
                    ColumnBuilder::Date(b) => b.append_value(parse_date(s).map_err(bad)?),
                    ColumnBuilder::Time(b) => b.append_value(parse_time(s).map_err(bad)?),
                    ColumnBuilder::Timestamp(b, tz) => {
                        b.append_value(parse_timestamp(s, *tz).map_err(bad)?)
                    }
                    ColumnBuilder::String(_)
                    | ColumnBuilder::Binary(_)
                    | ColumnBuilder::TimeAs(..) => {}
                }
            }
        }
        Ok(())
    }

    fn type_name(&self) -> String {
        match self {
            ColumnBuilder::Bool(_) => "boolean".into(),
            ColumnBuilder::Int(_) => "int".into(),
            ColumnBuilder::Long(_) => "long".into(),
            ColumnBuilder::Float(_) => "float".into(),
            ColumnBuilder::Double(_) => "double".into(),
            ColumnBuilder::Decimal(_, p, s) => format!("decimal({p},{s})"),
            ColumnBuilder::Date(_) => "date".into(),
            ColumnBuilder::Time(_) | ColumnBuilder::TimeAs(..) => "time".into(),
            ColumnBuilder::Timestamp(_, false) => "timestamp".into(),
            ColumnBuilder::Timestamp(_, true) => "timestamptz".into(),
            ColumnBuilder::String(_) => "string".into(),
            ColumnBuilder::Binary(_) => "binary".into(),
        }
    }

    pub(crate) fn push_null(&mut self) {
        match self {
            ColumnBuilder::Bool(b) => b.append_null(),
            ColumnBuilder::Int(b) => b.append_null(),
            ColumnBuilder::Long(b) => b.append_null(),
            ColumnBuilder::Float(b) => b.append_null(),
            ColumnBuilder::Double(b) => b.append_null(),
            ColumnBuilder::Decimal(b, ..) => b.append_null(),
            ColumnBuilder::Date(b) => b.append_null(),
            ColumnBuilder::Time(b) => b.append_null(),
            ColumnBuilder::TimeAs(b, _) => b.push_null(),
            ColumnBuilder::Timestamp(b, _) => b.append_null(),
            ColumnBuilder::String(b) => b.append_null(),
            ColumnBuilder::Binary(b) => b.append_null(),
        }
    }

    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnBuilder::Bool(b) => Arc::new(b.finish()),
            ColumnBuilder::Int(b) => Arc::new(b.finish()),
            ColumnBuilder::Long(b) => Arc::new(b.finish()),
            ColumnBuilder::Float(b) => Arc::new(b.finish()),
            ColumnBuilder::Double(b) => Arc::new(b.finish()),
            ColumnBuilder::Decimal(b, ..) => Arc::new(b.finish()),
            ColumnBuilder::Date(b) => Arc::new(b.finish()),
            ColumnBuilder::Time(b) => Arc::new(b.finish()),
            ColumnBuilder::TimeAs(b, _) => b.finish(),
            ColumnBuilder::Timestamp(b, _) => Arc::new(b.finish()),
            ColumnBuilder::String(b) => Arc::new(b.finish()),
            ColumnBuilder::Binary(b) => Arc::new(b.finish()),
        }
    }
}

fn utf8(v: &[u8]) -> Result<&str, BadValue> {
    std::str::from_utf8(v).map_err(|e| BadValue {
        reason: format!("invalid UTF-8 at byte {}", e.valid_up_to()),
        value: None,
    })
}

#[cfg(test)]
mod tests {
    use iceberg::spec::PrimitiveType;

    use super::ColumnBuilder;
    use crate::read::text::parse::format_time;

    #[test]
    fn integers_are_exact() {
        let long = |v: &str| {
            let mut b = ColumnBuilder::new(&PrimitiveType::Long, 1).unwrap();
            b.push(Some(v.as_bytes())).map(|_| {
                let a = b.finish();
                a.as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
                    .unwrap()
                    .value(0)
            })
        };
        assert_eq!(long("51003"), Ok(51003));
        assert_eq!(long("+5.0656000000000000e+05"), Ok(506_560));
        assert_eq!(long("-1.0000000000000000e+00"), Ok(-1));
        assert_eq!(long("+0.0000000000000000e+00"), Ok(0));
        assert_eq!(long("0"), Ok(0));
        assert_eq!(long("7.0"), Ok(7));
        assert_eq!(long("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(long("-9223372036854775808"), Ok(i64::MIN));
        let e = long("01307").unwrap_err();
        assert!(e.reason.contains("leading zeros"), "{e}");
        assert_eq!(e.value.as_deref(), Some("01307"));
        assert!(
            long("5.0656500000000000e+00")
                .unwrap_err()
                .reason
                .contains("whole number")
        );
        assert!(
            long("9223372036854775808")
                .unwrap_err()
                .reason
                .contains("out of range")
        );
        assert!(long("1e30").unwrap_err().reason.contains("out of range"));
        assert!(long(" 12").unwrap_err().reason.contains("spaces"));
        assert!(long("12 ").is_err());
        assert!(long("1_000").is_err());
        let mut i = ColumnBuilder::new(&PrimitiveType::Int, 1).unwrap();
        assert!(
            i.push(Some(b"2147483648"))
                .unwrap_err()
                .reason
                .contains("out of range")
        );
        let mut d = ColumnBuilder::new(&PrimitiveType::Double, 1).unwrap();
        d.push(Some(b"+5.0656000000000000e+05")).unwrap();
        assert!(d.push(Some(b"00.5")).is_err());
    }

    #[test]
    fn times_stored_as_text_or_micros() {
        let t = Some(&PrimitiveType::Time);
        let mut s = ColumnBuilder::for_source(&PrimitiveType::String, t, 2).unwrap();
        s.push(Some(b"23:59:59.5")).unwrap();
        s.push(Some(b"00:00:01")).unwrap();
        assert!(s.push(Some(b"25:00:00")).is_err());
        let a = s.finish();
        let a = a
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        assert_eq!(
            (a.value(0), a.value(1)),
            ("23:59:59.500000", "00:00:01.000000")
        );
        let mut l = ColumnBuilder::for_source(&PrimitiveType::Long, t, 1).unwrap();
        l.push(Some(b"00:00:01.000002")).unwrap();
        let a = l.finish();
        let a = a
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        assert_eq!(a.value(0), 1_000_002);
        assert_eq!(format_time(86_399_999_999), "23:59:59.999999");
    }

    #[test]
    fn builder_reports_and_skips_bad_values() {
        let mut b = ColumnBuilder::new(&PrimitiveType::Long, 4).unwrap();
        b.push(Some(b"1")).unwrap();
        assert!(b.push(Some(b"x")).is_err());
        b.push(None).unwrap();
        assert_eq!(b.finish().len(), 2);
        let mut s = ColumnBuilder::new(&PrimitiveType::String, 1).unwrap();
        assert!(s.push(Some(&[0xff, 0xfe])).is_err());
    }
}
