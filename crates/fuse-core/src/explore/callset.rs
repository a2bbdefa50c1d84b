//! A set of calls as a bitset: fusions and search states are sets of calls, compared and hashed
//! often, so they must be cheap and have a deterministic order.

use crate::program::CallId;

/// A set of call ids of one program.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallSet {
    words: Vec<u64>,
}

impl CallSet {
    /// The empty set over a program of `calls` calls.
    pub fn empty(calls: usize) -> Self {
        CallSet {
            words: vec![0; calls.div_ceil(64)],
        }
    }

    /// The set holding exactly `ids`.
    pub fn of(calls: usize, ids: &[CallId]) -> Self {
        let mut set = CallSet::empty(calls);
        for &id in ids {
            set.insert(id);
        }
        set
    }

    /// Adds `id`.
    pub fn insert(&mut self, id: CallId) {
        self.words[id / 64] |= 1 << (id % 64);
    }

    /// Removes `id`.
    pub fn remove(&mut self, id: CallId) {
        self.words[id / 64] &= !(1 << (id % 64));
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: CallId) -> bool {
        self.words.get(id / 64).is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    /// Number of calls in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Whether the two sets share a call.
    pub fn intersects(&self, other: &CallSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// Whether every call of `self` is in `other`.
    pub fn is_subset(&self, other: &CallSet) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & !b == 0)
    }

    /// Adds every call of `other`.
    pub fn union_with(&mut self, other: &CallSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// The calls of `self` not in `other`.
    pub fn difference(&self, other: &CallSet) -> CallSet {
        CallSet {
            words: self.words.iter().zip(&other.words).map(|(a, b)| a & !b).collect(),
        }
    }

    /// The smallest call id, if any.
    pub fn first(&self) -> Option<CallId> {
        self.iter().next()
    }

    /// The calls in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = CallId> + '_ {
        self.words.iter().enumerate().flat_map(|(k, &w)| {
            let mut rest = w;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    k * 64 + bit
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations_over_word_boundaries() {
        let a = CallSet::of(130, &[0, 63, 64, 129]);
        assert_eq!(a.iter().collect::<Vec<_>>(), [0, 63, 64, 129]);
        assert_eq!(a.len(), 4);
        assert!(a.contains(64) && !a.contains(65));
        let mut d = a.clone();
        d.remove(64);
        assert!(!d.contains(64) && d.contains(63));
        let b = CallSet::of(130, &[64, 100]);
        assert!(a.intersects(&b));
        assert!(CallSet::of(130, &[0, 129]).is_subset(&a) && !b.is_subset(&a));
        assert_eq!(a.difference(&b).iter().collect::<Vec<_>>(), [0, 63, 129]);
        let mut c = a.clone();
        c.union_with(&b);
        assert_eq!(c.len(), 5);
        assert_eq!(CallSet::empty(3).first(), None);
    }
}
