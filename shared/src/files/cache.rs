//! The one eviction rule of every cache of table files: insertion order, bounded by a total
//! weight (one per entry, or bytes). Table files are immutable by path (a commit writes new
//! files under new names), so an entry never goes stale and a key present is never replaced.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

pub(crate) struct Fifo<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    used: usize,
    limit: usize,
    weigh: fn(&V) -> usize,
}

impl<K: Eq + Hash + Clone, V> Fifo<K, V> {
    /// At most `limit` entries.
    pub(crate) fn entries(limit: usize) -> Self {
        Self::weighed(limit, |_| 1)
    }

    /// Entries whose `weigh`ts add up to `limit` at most (bytes, for key columns).
    pub(crate) fn weighed(limit: usize, weigh: fn(&V) -> usize) -> Self {
        Fifo {
            map: HashMap::new(),
            order: VecDeque::new(),
            used: 0,
            limit,
            weigh,
        }
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key)
    }

    /// Keeps `value` under `key`, evicting the oldest entries until it fits. A key already
    /// present keeps its value (and its weight is not counted twice); a value heavier than the
    /// whole limit is not kept.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        let weight = (self.weigh)(&value);
        if self.map.contains_key(&key) || weight > self.limit {
            return;
        }
        while self.used + weight > self.limit {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(v) = self.map.remove(&old) {
                self.used -= (self.weigh)(&v);
            }
        }
        self.used += weight;
        self.order.push_back(key.clone());
        self.map.insert(key, value);
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_go_first_and_the_weight_stays_exact() {
        let mut c: Fifo<String, Vec<u8>> = Fifo::weighed(10, |v| v.len());
        c.insert("a".into(), vec![0; 4]);
        c.insert("b".into(), vec![0; 4]);
        // Inserting a present key again (two lookups racing to cache one file) changes nothing.
        c.insert("a".into(), vec![0; 4]);
        assert_eq!((c.len(), c.used()), (2, 8));
        c.insert("c".into(), vec![0; 4]);
        assert!(c.get("a").is_none(), "the oldest made room");
        assert_eq!((c.len(), c.used()), (2, 8));
        // Heavier than the whole limit: not kept, nothing evicted for it.
        c.insert("d".into(), vec![0; 11]);
        assert_eq!((c.len(), c.used()), (2, 8));
        assert!(c.get("b").is_some() && c.get("c").is_some());
        // Zero limit: nothing is kept.
        let mut none: Fifo<String, Vec<u8>> = Fifo::weighed(0, |v| v.len());
        none.insert("a".into(), vec![0; 1]);
        assert_eq!(none.len(), 0);
    }

    #[test]
    fn entries_are_counted_one_each() {
        let mut c: Fifo<u32, ()> = Fifo::entries(3);
        for i in 0..5 {
            c.insert(i, ());
        }
        assert_eq!(c.len(), 3);
        assert!(c.get(&1).is_none() && c.get(&2).is_some() && c.get(&4).is_some());
    }
}
