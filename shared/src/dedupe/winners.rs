//! The sorted pick: every event sorted by key, and the latest of each key (by the rule,
//! [`super::rule`]) kept, with where its unsupplied cells take their values from.
//!
//! Invariants: sorting (rather than hashing) keeps memory to one small entry per change; the
//! winners come out in key order, the order data files are written in; with `only_keys_of`
//! (a late file re-merged), only keys those files touch are kept, decided by every change.

use arrow_row::Rows;

use super::fill::Fill;
use super::input::{Event, Input, Keys, int_key};
use crate::error::Result;

impl Input {
    /// The last event of each key (restricted to keys `only_keys_of` touch), in key order, and
    /// where the unsupplied cells of those that have some take their values from.
    pub(super) fn winners<'e>(
        &self,
        events: &'e [Event],
        keys: &Keys,
        order: Option<&Rows>,
        only_keys_of: Option<&[usize]>,
    ) -> Result<(Vec<&'e Event>, Vec<Fill>)> {
        // Sort by key; the last change in source order wins each key. Sorting (rather than
        // hashing) keeps memory to one small entry per change.
        let sorted: Vec<&Event> = match &keys.ints {
            // A single integer key: sorting plain (value, index) pairs is several times faster
            // than comparing through the events.
            Some(ints) => {
                let mut pairs: Vec<(i64, u32)> = events
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (int_key(ints, e), i as u32))
                    .collect();
                pairs.sort_unstable();
                pairs.iter().map(|&(_, i)| &events[i as usize]).collect()
            }
            None => {
                let mut sorted: Vec<&Event> = events.iter().collect();
                sorted.sort_unstable_by(|a, b| keys.cmp(a, b));
                sorted
            }
        };
        let mut winners = Vec::new();
        let mut fills = Vec::new();
        let mut group_start = 0;
        for (i, e) in sorted.iter().enumerate() {
            if sorted
                .get(i + 1)
                .is_some_and(|n| keys.cmp(n, e) == std::cmp::Ordering::Equal)
            {
                continue;
            }
            let group = &sorted[group_start..=i];
            group_start = i + 1;
            let wanted = only_keys_of.is_none_or(|files| {
                group
                    .iter()
                    .any(|g| files.contains(&(self.metas[g.row as usize].file as usize)))
            });
            if !wanted {
                continue;
            }
            // Rows differ in (file, position): one of any two is later.
            let last = group.iter().copied().reduce(|w, g| {
                if self.later(order, g.row as usize, w.row as usize) {
                    g
                } else {
                    w
                }
            });
            if let Some(w) = last
                && !w.delete
                && let Some(columns) = self.unsupplied.get(&w.row)
            {
                for (column, from) in self.fill_from(group, w, columns, order, events)? {
                    fills.push(Fill {
                        winner: winners.len(),
                        column,
                        from,
                    });
                }
            }
            winners.extend(last);
        }
        Ok((winners, fills))
    }
}
