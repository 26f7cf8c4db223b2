//! One value of a type from its text, exactly: the digits, date or time the text says, or why
//! the type cannot hold it.

use chrono::NaiveDate;

use crate::error::VALUE;

pub(super) fn parse_bool(s: &str) -> Result<bool, String> {
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
pub(super) fn parse_integer(s: &str, what: &str) -> Result<i64, String> {
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
pub(super) fn plain_integer(s: &str) -> Option<i64> {
    plain_integer_bytes(s.as_bytes())
}

/// [`plain_integer`] on the value's bytes: a value it takes is ASCII, so it needs no UTF-8
/// check first (the path every value of an integer column takes).
pub(super) fn plain_integer_bytes(s: &[u8]) -> Option<i64> {
    let (neg, digits) = split_sign(s);
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
pub(super) fn parse_float<'a>(s: &'a str, what: &str) -> Result<&'a str, String> {
    if let Some(n) = parse_number(s)
        && n.leading_zeros
    {
        return Err(leading_zeros_reason(&format!("a {what} column")));
    }
    Ok(s)
}

/// `-123.45` (or `-1.2345e+02`) → unscaled i128 at `scale`; digits past `scale` are refused
/// unless they are zeros, and so are leading zeros.
pub(super) fn parse_decimal(s: &str, precision: u32, scale: u32) -> Result<i128, String> {
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
    if n.frac.len() > scale as usize && n.frac[scale as usize..].bytes().any(|b| b != b'0') {
        // DMS writes a double as `%.16e` (0.99 as `+9.8999999999999999e-01`): the value is
        // that double, and the decimal at this scale whose nearest double it is, is the one
        // the source held.
        return match s.parse::<f64>() {
            Ok(d) if d.is_finite() => decimal_of_float(d, precision, scale),
            _ => Err(too_many_places(scale)),
        };
    }
    unscaled(&n, precision, scale)
}

fn too_many_places(scale: u32) -> String {
    format!(
        "{VALUE} has more than {scale} decimal places (and is not a double whose nearest \
         decimal at that scale has the same double)"
    )
}

/// `n` at `scale` (its fraction no longer than that, or only zeros beyond), fitting
/// `precision`.
fn unscaled(n: &Number, precision: u32, scale: u32) -> Result<i128, String> {
    let frac_kept = &n.frac[..n.frac.len().min(scale as usize)];
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

/// A binary float as `decimal(precision, scale)`: the decimal at `scale` whose nearest float
/// (of the same width) is `v`, if there is one. `0.99` (stored as 0.98999999999999999112)
/// is 0.99; `0.125` is exact in binary, and neither 0.12 nor 0.13 is that float: refused.
pub(crate) fn decimal_of_float<F: Float>(v: F, precision: u32, scale: u32) -> Result<i128, String> {
    // The shortest digits that read back as `v`, rounded half-even at `scale`.
    let n = parse_number(&v.shortest()).ok_or_else(|| too_many_places(scale))?;
    let rounded = round_half_even(&n, scale);
    let m = unscaled(&rounded, precision, scale)?;
    let text = format!(
        "{}{}.{}",
        if rounded.neg { "-" } else { "" },
        if rounded.int.is_empty() {
            "0"
        } else {
            &rounded.int
        },
        &rounded.frac
    );
    match F::parse(&text) {
        Some(back) if back == v => Ok(m),
        _ => Err(too_many_places(scale)),
    }
}

/// `n` rounded half to even at `scale` fraction digits (its fraction then exactly that long).
fn round_half_even(n: &Number, scale: u32) -> Number {
    let scale = scale as usize;
    let mut frac = n.frac.clone();
    if frac.len() <= scale {
        frac.extend(std::iter::repeat_n('0', scale - frac.len()));
        return Number {
            frac,
            int: n.int.clone(),
            ..*n
        };
    }
    let rest = frac.split_off(scale);
    let mut digits: Vec<u8> = n.int.bytes().chain(frac.bytes()).collect();
    let first = rest.as_bytes()[0];
    let beyond = rest.bytes().skip(1).any(|b| b != b'0');
    let odd = digits.last().is_some_and(|d| (d - b'0') % 2 == 1);
    if first > b'5' || (first == b'5' && (beyond || odd)) {
        // Add one unit in the last kept place.
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, b'1');
                break;
            }
            i -= 1;
            if digits[i] == b'9' {
                digits[i] = b'0';
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let split = digits.len() - scale;
    let int = String::from_utf8_lossy(&digits[..split])
        .trim_start_matches('0')
        .to_string();
    let frac = String::from_utf8_lossy(&digits[split..]).into_owned();
    Number {
        neg: n.neg && (int.bytes().chain(frac.bytes()).any(|b| b != b'0')),
        int,
        frac,
        leading_zeros: false,
    }
}

/// `f32` and `f64`, for [`decimal_of_float`].
pub(crate) trait Float: Copy + PartialEq {
    /// The shortest text that reads back as this value (Rust's `{:e}`).
    fn shortest(self) -> String;
    fn parse(s: &str) -> Option<Self>;
}

impl Float for f64 {
    fn shortest(self) -> String {
        format!("{self:e}")
    }
    fn parse(s: &str) -> Option<f64> {
        s.parse().ok()
    }
}

impl Float for f32 {
    fn shortest(self) -> String {
        format!("{self:e}")
    }
    fn parse(s: &str) -> Option<f32> {
        s.parse().ok()
    }
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

pub(super) fn parse_date(s: &str) -> Result<i32, String> {
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
pub(super) fn parse_time(s: &str) -> Result<i64, String> {
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
pub(super) fn parse_timestamp(s: &str, with_zone: bool) -> Result<i64, String> {
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
        // DMS's doubles: the decimal whose nearest double is the value's.
        assert_eq!(parse_decimal("+9.8999999999999999e-01", 10, 2), Ok(99));
        assert_eq!(parse_decimal("-9.8999999999999999e-01", 10, 2), Ok(-99));
        // (Python's '%+.16e' % v of 19.99, 0.1, 0.3, 1234567.89, 0.07.)
        assert_eq!(parse_decimal("+1.9989999999999998e+01", 10, 2), Ok(1999));
        assert_eq!(parse_decimal("+1.0000000000000001e-01", 10, 1), Ok(1));
        assert_eq!(parse_decimal("+2.9999999999999999e-01", 10, 2), Ok(30));
        assert_eq!(
            parse_decimal("+1.2345678899999999e+06", 12, 2),
            Ok(123_456_789)
        );
        assert_eq!(parse_decimal("+7.0000000000000007e-02", 10, 2), Ok(7));
        for no in [
            "0.125",
            "+1.2500000000000000e-01",
            "1.234",
            "0.005",
            "1.2345678901234567",
        ] {
            let e = parse_decimal(no, 10, 2).unwrap_err();
            assert!(e.contains("more than 2 decimal places"), "{no}: {e}");
        }
        // 99.99999999999999 is its own double, not 100.0's: refused at scale 1.
        assert!(parse_decimal("+9.9999999999999986e+01", 4, 1).is_err());
        // A carry through every digit still fits the precision it needs (0.995 is not
        // exactly 0.995: its double is below it, and 1.00 is not its nearest decimal).
        assert!(parse_decimal("+9.9499999999999999e-01", 3, 2).is_err());
        assert_eq!(decimal_of_float(0.99f32, 10, 2), Ok(99));
        assert!(
            decimal_of_float(0.99f32 as f64, 10, 2).is_err(),
            "a float widened is not 0.99's double"
        );
        assert_eq!(decimal_of_float(-0.0f64, 10, 2), Ok(0));
        assert_eq!(decimal_of_float(1e20f64, 38, 2), Ok(10i128.pow(22)));
        assert!(decimal_of_float(1e20f64, 10, 2).is_err());
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
}
