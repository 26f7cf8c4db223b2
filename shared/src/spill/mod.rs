//! Rows sorted by key in bounded memory: an external merge sort over the spool folder.
//!
//! A commit's input can be larger than memory (a 1 GB full-load file, a 1 GB change file), and
//! its rows must come out sorted by key: data files are written sorted (what makes lookups and
//! key indexes cheap), and duplicates of one key must meet to be settled. [`Sorter`] holds rows
//! up to half a byte budget, then sorts them and writes them to an unnamed file in the spool
//! folder as a *run* (Arrow IPC) on a thread of its own while the next half fills; [`Merge`]
//! then reads every run a batch at a time and merges them; split in two key ranges, the two
//! are merged apart ([`Sorter::finish_ranges`]). Memory: the budget while sorting, and one
//! batch of `RUN_BATCH_ROWS` and two read buffers of `RUN_READ_BUFFER` per run (per key
//! range) while merging. Run files bypass the page cache ([`file`]).
//!
//! Rows carry a sequence number column (their place in the input): rows are ordered by key,
//! then by sequence number, so the changes of one key come out in input order.
//!
//! Layout: `keys` is the one key codec ([`KeyCodec`], shared with the consumer of the sorted
//! rows), `runs` the sorting and spilling, `merge` the merge of the runs.

mod file;
mod keys;
mod merge;
mod runs;
#[cfg(test)]
mod tests;

pub(crate) use keys::{BatchKeys, KeyCodec, SortSpec};
pub(crate) use merge::Merge;
pub(crate) use runs::Sorter;
