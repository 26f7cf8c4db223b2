//! The type of a column of text no one declared: the narrowest that holds every value seen.

use iceberg::spec::PrimitiveType;

use super::parse::{parse_date, parse_timestamp, plain_integer_bytes};

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

/// The significant digits of a plain integer ([`plain_integer_bytes`]'s, without a `+`): the
/// path every value of an integer column of a full load takes.
fn integer_digits(v: &[u8]) -> Option<u32> {
    if v.first() == Some(&b'+') {
        return None;
    }
    let x = plain_integer_bytes(v)?;
    Some(x.unsigned_abs().checked_ilog10().map_or(0, |d| d + 1))
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
            && let Some(digits) = integer_digits(v)
        {
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
        /// A plain integer's significant digits are counted on its text; anything else (a
        /// `+`, leading zeros, more than 18 digits) takes the general path.
        #[test]
        fn integer_digits_are_the_significant_ones(s in "[+-]?[0-9]{1,20}") {
            let body = s.strip_prefix('-').unwrap_or(&s);
            let plain = !s.starts_with('+')
                && body.len() <= 18
                && (body.len() == 1 || !body.starts_with('0'));
            let expected = plain.then(|| body.trim_start_matches('0').len() as u32);
            prop_assert_eq!(integer_digits(s.as_bytes()), expected);
        }

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
}
