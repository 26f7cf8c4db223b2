//! Text → typed values, for CSV fields (and DMS's string timestamp column in Parquet).
//! Strict: a value that does not fit its column type is an error, never silently rounded or
//! truncated.
//!
//! `parse` reads one value of a type from its text; `column` builds an Arrow column of a type
//! from text values with it; `guess` infers, from the text values of a column, the narrowest
//! type that holds them all (for columns whose type nothing declares).

mod column;
mod guess;
mod parse;

pub(crate) use self::column::{BadValue, ColumnBuilder};
pub(crate) use self::guess::TypeGuess;
pub(crate) use self::parse::{decimal_of_float, format_time};
