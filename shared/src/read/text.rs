//! Text → typed values, for CSV fields (and DMS's string timestamp column in Parquet).
//! Strict: a value that does not fit its column type is an error, never silently rounded or
//! truncated.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, LargeBinaryBuilder, StringBuilder, Time64MicrosecondBuilder,
    TimestampMicrosecondBuilder,
};
use chrono::NaiveDate;
use iceberg::spec::PrimitiveType;

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

pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "t" | "1" | "yes" | "y" => Ok(true),
        "false" | "f" | "0" | "no" | "n" => Ok(false),
        _ => Err(format!("cannot parse {VALUE} as boolean")),
    }
}

/// A number as text: `[+-]digits[.digits][(e|E)[+-]digits]` (DMS writes doubles as
/// `+5.0656000000000000e+05`), as its exact decimal digits.
#[derive(Debug, PartialEq)]
struct Number {
    neg: bool,
    /// Integer digits, without leading zeros.
    int: String,
    /// Fraction digits, trailing zeros kept.
    frac: String,
    /// The integer part was written with leading zeros (`007`, `01307`): a value that is an
    /// identifier more often than a number, and that a numeric column would change.
    leading_zeros: bool,
}

/// Larger exponents cannot be exact in 38 digits, and would make long strings.
const MAX_EXPONENT: i64 = 400;

fn parse_number(s: &str) -> Option<Number> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => {
            let e = &body[i + 1..];
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 6
            {
                return None;
            }
            let v: i64 = digits.parse().ok()?;
            (&body[..i], if e.starts_with('-') { -v } else { v })
        }
        None => (body, 0),
    };
    if exp.abs() > MAX_EXPONENT {
        return None;
    }
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let leading_zeros = int.len() > 1 && int.starts_with('0');
    // Move the decimal point by the exponent.
    let digits = format!("{int}{frac}");
    let point = int.len() as i64 + exp;
    let (int, frac) = if point <= 0 {
        (
            String::new(),
            format!("{}{digits}", "0".repeat((-point) as usize)),
        )
    } else if point as usize >= digits.len() {
        (
            format!("{digits}{}", "0".repeat(point as usize - digits.len())),
            String::new(),
        )
    } else {
        let (a, b) = digits.split_at(point as usize);
        (a.to_string(), b.to_string())
    };
    Some(Number {
        neg,
        int: int.trim_start_matches('0').to_string(),
        frac,
        leading_zeros,
    })
}

fn leading_zeros_reason(what: &str) -> String {
    format!("{VALUE} has leading zeros, which {what} would not keep")
}

/// An integer, exactly: `12`, `+12`, `-0`, `1.0`, `+5.0656000000000000e+05`; not `007` (the
/// zeros would be lost), not `1.5` (the fraction would be).
fn parse_integer(s: &str, what: &str) -> Result<i64, String> {
    match plain_integer(s) {
        Some(v) => Ok(v),
        None => general_integer(s, what),
    }
}

fn general_integer(s: &str, what: &str) -> Result<i64, String> {
    let n = parse_number(s).ok_or_else(|| format!("cannot parse {VALUE} as {what}"))?;
    if n.leading_zeros {
        return Err(leading_zeros_reason(&format!("a {what} column")));
    }
    if n.frac.bytes().any(|b| b != b'0') {
        return Err(format!(
            "{VALUE} is not a whole number: a {what} column would drop its fraction"
        ));
    }
    let out_of_range = || format!("{VALUE} is out of range for {what}");
    if n.int.len() > 19 {
        return Err(out_of_range());
    }
    let v: i128 = if n.int.is_empty() {
        0
    } else {
        n.int.parse().map_err(|_| out_of_range())?
    };
    i64::try_from(if n.neg { -v } else { v }).map_err(|_| out_of_range())
}

/// The sign and digits of `[+-]digits`, if `s` is written so.
fn split_sign(s: &[u8]) -> (bool, &[u8]) {
    match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    }
}

/// [`parse_integer`] for the common case, without allocating: `[+-]digits`, at most 18 digits
/// (always in range), no leading zeros. `None` means "take the general path", which also
/// produces the errors; the two agree on every value this accepts.
fn plain_integer(s: &str) -> Option<i64> {
    let (neg, digits) = split_sign(s.as_bytes());
    if digits.is_empty() || digits.len() > 18 || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(b - b'0');
    }
    Some(if neg { -v } else { v })
}

/// [`parse_decimal`] for the common case, without allocating: `[+-]int[.frac]` with an
/// integer part of at least one digit and no leading zeros, and at most `scale` fraction
/// digits, fitting `precision`. `None` means "take the general path".
fn plain_decimal(s: &str, precision: u32, scale: u32) -> Option<i128> {
    let (neg, body) = split_sign(s.as_bytes());
    let (int, frac) = match body.iter().position(|&b| b == b'.') {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => (body, &body[body.len()..]),
    };
    if int.is_empty() || (int.len() > 1 && int[0] == b'0') || frac.len() > scale as usize {
        return None;
    }
    // `0.5`: the integer part holds no significant digit.
    let int_digits = if int == b"0" { 0 } else { int.len() };
    if int_digits + scale as usize > precision as usize {
        return None;
    }
    let mut v: i128 = 0;
    for &b in int.iter().chain(frac) {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(b - b'0');
    }
    for _ in frac.len()..scale as usize {
        v *= 10;
    }
    Some(if neg { -v } else { v })
}

/// A float or double: any decimal number (the nearest binary value is what the type holds),
/// `NaN` and infinities; not written with leading zeros. Returns the text to parse.
fn parse_float<'a>(s: &'a str, what: &str) -> Result<&'a str, String> {
    if let Some(n) = parse_number(s)
        && n.leading_zeros
    {
        return Err(leading_zeros_reason(&format!("a {what} column")));
    }
    Ok(s)
}

/// `-123.45` (or `-1.2345e+02`) → unscaled i128 at `scale`; digits past `scale` are refused
/// unless they are zeros, and so are leading zeros.
pub(crate) fn parse_decimal(s: &str, precision: u32, scale: u32) -> Result<i128, String> {
    match plain_decimal(s, precision, scale) {
        Some(v) => Ok(v),
        None => general_decimal(s, precision, scale),
    }
}

fn general_decimal(s: &str, precision: u32, scale: u32) -> Result<i128, String> {
    let n = parse_number(s)
        .ok_or_else(|| format!("cannot parse {VALUE} as decimal({precision},{scale})"))?;
    if n.leading_zeros {
        return Err(leading_zeros_reason("a decimal column"));
    }
    let frac_kept = if n.frac.len() > scale as usize {
        let (kept, extra) = n.frac.split_at(scale as usize);
        if extra.bytes().any(|b| b != b'0') {
            return Err(format!("{VALUE} has more than {scale} decimal places"));
        }
        kept
    } else {
        n.frac.as_str()
    };
    if n.int.len() + scale as usize > precision as usize {
        return Err(format!("{VALUE} does not fit decimal({precision},{scale})"));
    }
    let mut v: i128 = 0;
    for b in n.int.bytes().chain(frac_kept.bytes()) {
        v = v * 10 + (b - b'0') as i128;
    }
    for _ in frac_kept.len()..scale as usize {
        v *= 10;
    }
    Ok(if n.neg { -v } else { v })
}

/// Microseconds since midnight → `HH:MM:SS.ffffff`.
pub(crate) fn format_time(micros: i64) -> String {
    let (secs, us) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    format!(
        "{:02}:{:02}:{:02}.{us:06}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

pub(crate) fn parse_date(s: &str) -> Result<i32, String> {
    // `yyyy-MM-dd` exactly, the form DMS writes, without chrono's format interpreter (the
    // largest cost of a timestamp column); anything else takes chrono's parser.
    let b = s.as_bytes();
    if b.len() == 10 && b[4] == b'-' && b[7] == b'-' {
        let (y, m, d) = (digits(&b[0..4]), digits(&b[5..7]), digits(&b[8..10]));
        if let (Some(y), Some(m), Some(d)) = (y, m, d) {
            return NaiveDate::from_ymd_opt(y as i32, m as u32, d as u32)
                .map(|d| chrono::Datelike::num_days_from_ce(&d) - UNIX_EPOCH_DAYS_FROM_CE)
                .ok_or_else(|| format!("cannot parse {VALUE} as date (yyyy-MM-dd)"));
        }
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| format!("cannot parse {VALUE} as date (yyyy-MM-dd)"))?;
    Ok(chrono::Datelike::num_days_from_ce(&d) - UNIX_EPOCH_DAYS_FROM_CE)
}

/// The value of ASCII decimal digits (at most 18), if `b` is only digits.
fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 18 {
        return None;
    }
    b.iter().try_fold(0i64, |v, &c| {
        c.is_ascii_digit().then(|| v * 10 + i64::from(c - b'0'))
    })
}

/// `HH:MM:SS[.fraction]` → microseconds since midnight.
pub(crate) fn parse_time(s: &str) -> Result<i64, String> {
    let err = || format!("cannot parse {VALUE} as time (HH:mm:ss[.ffffff])");
    let b = s.as_bytes();
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return Err(err());
    }
    let num = |r: std::ops::Range<usize>| digits(&b[r]).ok_or_else(err);
    let (h, m, sec) = (num(0..2)?, num(3..5)?, num(6..8)?);
    if h > 23 || m > 59 || sec > 59 {
        return Err(err());
    }
    let micros = fraction_micros(&s[8..]).ok_or_else(err)?;
    Ok(((h * 60 + m) * 60 + sec) * 1_000_000 + micros)
}

/// `.ffffff` (0–9 digits) → microseconds; digits past microseconds must be zeros.
fn fraction_micros(f: &str) -> Option<i64> {
    if f.is_empty() {
        return Some(0);
    }
    let frac = f.strip_prefix('.')?.as_bytes();
    if frac.is_empty() || frac.len() > 9 || !frac.iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if frac.len() > 6 && frac[6..].iter().any(|&b| b != b'0') {
        return None;
    }
    let d = &frac[..frac.len().min(6)];
    let mut v: i64 = digits(d)?;
    for _ in d.len()..6 {
        v *= 10;
    }
    Some(v)
}

/// `yyyy-MM-dd[ T]HH:mm:ss[.f{0,9}]`, for timestamptz optionally followed by `Z` or `±HH:MM`
/// (no zone = UTC, which is what DMS writes) → microseconds since the epoch.
pub(crate) fn parse_timestamp(s: &str, with_zone: bool) -> Result<i64, String> {
    let err = || format!("cannot parse {VALUE} as timestamp (yyyy-MM-dd HH:mm:ss[.ffffff])");
    if s.len() < 19 {
        return Err(err());
    }
    let sep = s.as_bytes()[10];
    if sep != b' ' && sep != b'T' {
        return Err(err());
    }
    let days = parse_date(&s[..10]).map_err(|_| err())? as i64;
    let (rest, offset_secs) = if with_zone {
        split_zone(&s[11..]).ok_or_else(err)?
    } else {
        (&s[11..], 0)
    };
    let t = parse_time(rest).map_err(|_| err())?;
    Ok(days * 86_400_000_000 + t - offset_secs * 1_000_000)
}

fn split_zone(s: &str) -> Option<(&str, i64)> {
    if let Some(r) = s.strip_suffix('Z') {
        return Some((r, 0));
    }
    if s.len() >= 6 && s.is_char_boundary(s.len() - 6) {
        let (time, zone) = s.split_at(s.len() - 6);
        let zb = zone.as_bytes();
        if (zb[0] == b'+' || zb[0] == b'-') && zb[3] == b':' {
            let h: i64 = zone[1..3].parse().ok()?;
            let m: i64 = zone[4..6].parse().ok()?;
            let sign = if zb[0] == b'-' { -1 } else { 1 };
            return Some((time, sign * (h * 3600 + m * 60)));
        }
    }
    Some((s, 0))
}

/// What a column of text looks like, accumulated over its values: the narrowest type that
/// holds every value seen.
#[derive(Debug, Clone, Default)]
pub struct TypeGuess {
    seen: bool,
    not_bool: bool,
    not_long: bool,
    not_decimal: bool,
    not_double: bool,
    not_timestamp: bool,
    not_date: bool,
    max_scale: u32,
    max_int_digits: u32,
}

impl TypeGuess {
    pub fn observe(&mut self, v: &[u8]) {
        // Only text fits any more: no value can change the guess.
        if self.only_text() {
            self.seen = true;
            return;
        }
        // A plain integer after the first value (the common column) can only widen the
        // decimal digits: every other check would give what it gave before. Inference
        // runs over every value of a full load, so this path is most of its time.
        if self.seen
            && self.not_bool
            && self.not_timestamp
            && self.not_date
            && !(self.not_long || self.not_decimal || self.not_double)
            && v.first() != Some(&b'+')
            && let Ok(s) = std::str::from_utf8(v)
            && plain_integer(s).is_some()
        {
            let digits = s
                .strip_prefix('-')
                .unwrap_or(s)
                .trim_start_matches('0')
                .len() as u32;
            self.max_int_digits = self.max_int_digits.max(digits);
            if self.max_scale + self.max_int_digits > 38 {
                self.not_decimal = true;
            }
            return;
        }
        self.observe_general(v);
    }

    fn only_text(&self) -> bool {
        self.not_bool
            && self.not_long
            && self.not_decimal
            && self.not_double
            && self.not_timestamp
            && self.not_date
    }

    /// What the values of two parts of one column fit together.
    pub fn merge(&mut self, other: &TypeGuess) {
        self.seen |= other.seen;
        self.not_bool |= other.not_bool;
        self.not_long |= other.not_long;
        self.not_decimal |= other.not_decimal;
        self.not_double |= other.not_double;
        self.not_timestamp |= other.not_timestamp;
        self.not_date |= other.not_date;
        self.max_scale = self.max_scale.max(other.max_scale);
        self.max_int_digits = self.max_int_digits.max(other.max_int_digits);
        if self.max_scale + self.max_int_digits > 38 {
            self.not_decimal = true;
        }
    }

    fn observe_general(&mut self, v: &[u8]) {
        let Ok(s) = std::str::from_utf8(v) else {
            self.seen = true;
            self.not_bool = true;
            self.not_long = true;
            self.not_decimal = true;
            self.not_double = true;
            self.not_timestamp = true;
            self.not_date = true;
            return;
        };
        self.seen = true;
        // Leading zeros (zip codes, account numbers) and surrounding spaces mean text.
        let numeric_ok = !s.is_empty() && s.trim() == s && !has_leading_zero(s);
        if !self.not_bool && !matches!(s, "true" | "false" | "TRUE" | "FALSE" | "True" | "False") {
            self.not_bool = true;
        }
        if !(self.not_long || numeric_ok && s.parse::<i64>().is_ok()) {
            self.not_long = true;
        }
        if !self.not_decimal {
            match decimal_shape(s) {
                Some((int_digits, scale)) if numeric_ok => {
                    self.max_scale = self.max_scale.max(scale);
                    self.max_int_digits = self.max_int_digits.max(int_digits);
                    if self.max_scale + self.max_int_digits > 38 {
                        self.not_decimal = true;
                    }
                }
                _ => self.not_decimal = true,
            }
        }
        if !(self.not_double || numeric_ok && s.parse::<f64>().is_ok_and(|f| f.is_finite())) {
            self.not_double = true;
        }
        if !self.not_timestamp && parse_timestamp(s, false).is_err() {
            self.not_timestamp = true;
        }
        if !self.not_date && (s.len() != 10 || parse_date(s).is_err()) {
            self.not_date = true;
        }
    }

    pub fn result(&self) -> PrimitiveType {
        if !self.seen {
            return PrimitiveType::String;
        }
        if !self.not_bool {
            PrimitiveType::Boolean
        } else if !self.not_long {
            PrimitiveType::Long
        } else if !self.not_decimal {
            PrimitiveType::Decimal {
                precision: 38,
                scale: self.max_scale,
            }
        } else if !self.not_double {
            PrimitiveType::Double
        } else if !self.not_date {
            PrimitiveType::Date
        } else if !self.not_timestamp {
            PrimitiveType::Timestamp
        } else {
            PrimitiveType::String
        }
    }
}

fn has_leading_zero(s: &str) -> bool {
    let d = s.strip_prefix('-').unwrap_or(s);
    d.len() > 1 && d.starts_with('0') && !d.starts_with("0.")
}

/// `[-]digits[.digits]` → (integer digits without leading zeros, fraction digits).
fn decimal_shape(s: &str) -> Option<(u32, u32)> {
    let body = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some((int.trim_start_matches('0').len() as u32, frac.len() as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The allocation-free paths agree with the general ones on every value they take.
        #[test]
        fn fast_number_paths_agree_with_the_general_ones(
            s in "[+-]?[0-9]{0,22}(\\.[0-9]{0,6})?",
            precision in 1u32..=38,
            scale in 0u32..=6,
        ) {
            if let Some(v) = plain_integer(&s) {
                prop_assert_eq!(Ok(v), general_integer(&s, "long"));
            }
            if let Some(v) = plain_decimal(&s, precision, scale.min(precision)) {
                prop_assert_eq!(Ok(v), general_decimal(&s, precision, scale.min(precision)));
            }
        }

        #[test]
        fn fast_dates_agree_with_chrono(y in 0i32..10000, m in 0u32..14, d in 0u32..33) {
            let s = format!("{y:04}-{m:02}-{d:02}");
            let chrono = NaiveDate::parse_from_str(&s, "%Y-%m-%d")
                .map(|d| chrono::Datelike::num_days_from_ce(&d) - UNIX_EPOCH_DAYS_FROM_CE)
                .ok();
            prop_assert_eq!(parse_date(&s).ok(), chrono);
        }
    }

    proptest! {
        /// Observing values one by one gives the guess the general path gives, whichever
        /// shortcut a value takes, and a guess over two parts merged is the guess over all.
        #[test]
        fn type_guess_shortcuts_and_merges_agree(
            values in proptest::collection::vec(
                prop_oneof![
                    "[+-]?[0-9]{1,20}",
                    "[+-]?[0-9]{1,5}\\.[0-9]{0,4}",
                    "(true|false|TRUE)",
                    "2022-0[1-9]-[0-2][1-9]( 1[0-9]:[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?)?",
                    "[ a-z0-9.]{0,6}",
                ],
                0..40,
            ),
            cut in 0usize..40,
        ) {
            let mut fast = TypeGuess::default();
            let mut general = TypeGuess::default();
            for v in &values {
                fast.observe(v.as_bytes());
                general.observe_general(v.as_bytes());
            }
            prop_assert_eq!(fast.result(), general.result());
            let cut = cut.min(values.len());
            let (mut a, mut b) = (TypeGuess::default(), TypeGuess::default());
            values[..cut].iter().for_each(|v| a.observe(v.as_bytes()));
            values[cut..].iter().for_each(|v| b.observe(v.as_bytes()));
            a.merge(&b);
            prop_assert_eq!(a.result(), general.result());
        }
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_decimal("12.5", 12, 2), Ok(1250));
        assert_eq!(parse_decimal("-0.01", 12, 2), Ok(-1));
        assert_eq!(parse_decimal("7", 12, 2), Ok(700));
        assert_eq!(parse_decimal("1.230", 12, 2), Ok(123));
        assert!(parse_decimal("1.234", 12, 2).is_err());
        assert!(parse_decimal("12345678901.00", 12, 2).is_err());
        assert_eq!(parse_decimal("1e3", 12, 2), Ok(100_000));
        assert_eq!(
            parse_decimal("+5.0656000000000000e+05", 20, 2),
            Ok(50_656_000)
        );
        assert_eq!(parse_decimal("-1.25E-1", 12, 3), Ok(-125));
        assert!(
            parse_decimal("1.25e-3", 12, 2).is_err(),
            "0.00125 has 5 places"
        );
        assert!(parse_decimal("007.5", 12, 2).is_err(), "leading zeros");
        assert_eq!(parse_decimal("0.5", 12, 2), Ok(50));
        assert!(parse_decimal("1e", 12, 2).is_err());
        assert!(parse_decimal("1e99999", 12, 2).is_err());
        assert!(parse_decimal(".", 12, 2).is_err());
        assert!(parse_decimal("", 12, 2).is_err());
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:01", false), Ok(1_000_000));
        assert_eq!(parse_timestamp("1970-01-01 00:00:00.5", false), Ok(500_000));
        assert_eq!(parse_timestamp("1970-01-01T00:00:00.000001", false), Ok(1));
        assert_eq!(
            parse_timestamp("2022-03-02 11:30:01.000000", false),
            Ok(1_646_220_601_000_000)
        );
        assert_eq!(parse_timestamp("1970-01-01 01:00:00+01:00", true), Ok(0));
        assert!(parse_timestamp("1970-01-01 00:00:00.000000123", false).is_err());
        assert_eq!(
            parse_timestamp("1970-01-01 00:00:00.123000000", false),
            Ok(123_000)
        );
        assert!(parse_timestamp("2022-13-02 11:30:01", false).is_err());
        assert!(parse_timestamp("2022-03-02", false).is_err());
        assert_eq!(parse_date("1969-12-31"), Ok(-1));
        assert_eq!(parse_time("23:59:59.999999"), Ok(86_399_999_999));
    }

    #[test]
    fn guesses() {
        let guess = |vals: &[&str]| {
            let mut g = TypeGuess::default();
            vals.iter().for_each(|v| g.observe(v.as_bytes()));
            g.result()
        };
        assert_eq!(guess(&["1", "-20"]), PrimitiveType::Long);
        assert_eq!(
            guess(&["1", "2.50"]),
            PrimitiveType::Decimal {
                precision: 38,
                scale: 2
            }
        );
        assert_eq!(guess(&["1e3", "2.5"]), PrimitiveType::Double);
        assert_eq!(guess(&["007", "12"]), PrimitiveType::String);
        assert_eq!(
            guess(&["2022-03-02 11:30:01.000000"]),
            PrimitiveType::Timestamp
        );
        assert_eq!(guess(&["2022-03-02"]), PrimitiveType::Date);
        assert_eq!(guess(&["true", "False"]), PrimitiveType::Boolean);
        assert_eq!(guess(&["1", "x"]), PrimitiveType::String);
        assert_eq!(guess(&[]), PrimitiveType::String);
        assert_eq!(
            guess(&["99999999999999999999"]),
            PrimitiveType::Decimal {
                precision: 38,
                scale: 0
            }
        );
    }

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
