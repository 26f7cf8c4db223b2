//! Unsupplied cells (`no_sup_value`): a winning update that did not supply a column keeps the
//! key's current value: that of the latest earlier change of the key in the commit that
//! supplied it, else the table's (filled after the lookup), and nothing after a delete.
//!
//! Invariants: "earlier" is the rule's order ([`super::rule`]), the same that picked the
//! winner; an update that moved its row to another key cannot leave cells unsupplied (the row
//! it replaces is under the old key, which its lookup does not find): an input error.

use arrow_row::Rows;

use super::input::{Event, Input};
use crate::error::Result;

/// Where an unsupplied cell of a winning update takes its value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FillFrom {
    /// An earlier change of the key in this commit (its row).
    Row(u32),
    /// The key's live row in the table.
    Table,
    /// Nothing: the key was deleted before the update in this commit.
    Null,
}

/// An unsupplied cell of a winner (by index into the winners).
pub(super) struct Fill {
    pub(super) winner: usize,
    pub(super) column: usize,
    pub(super) from: FillFrom,
}

impl Input {
    /// For each of `columns` the winning update `w` did not supply: the latest earlier change
    /// of its key (`group`) that did, the table when none did, nothing after a delete.
    pub(super) fn fill_from(
        &self,
        group: &[&Event],
        w: &Event,
        columns: &[usize],
        order: Option<&Rows>,
        events: &[Event],
    ) -> Result<Vec<(usize, FillFrom)>> {
        // An update that moved the row to this key replaced the old key's row, which this
        // key's lookup does not find. (Moves are the events after one per row.)
        if events[self.metas.len()..].iter().any(|e| e.row == w.row) {
            return Err(self.error_at(
                w.row as usize,
                "Op",
                "an update that changes the key leaves columns unsupplied (the `no_sup_value` \
                 marker): the row it replaces is under the old key; log every column of the \
                 table at the source (full supplemental logging) for such updates",
            ));
        }
        let mut earlier: Vec<&Event> = group
            .iter()
            .copied()
            .filter(|e| e.row != w.row && self.later(order, w.row as usize, e.row as usize))
            .collect();
        // Latest first.
        earlier.sort_by(|a, b| {
            if self.later(order, a.row as usize, b.row as usize) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        });
        Ok(columns
            .iter()
            .map(|&c| {
                for e in &earlier {
                    if e.delete {
                        return (c, FillFrom::Null);
                    }
                    let unsupplied = self
                        .unsupplied
                        .get(&e.row)
                        .is_some_and(|cols| cols.contains(&c));
                    if !unsupplied {
                        return (c, FillFrom::Row(e.row));
                    }
                }
                (c, FillFrom::Table)
            })
            .collect())
    }
}
