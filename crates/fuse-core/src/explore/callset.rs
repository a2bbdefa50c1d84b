//! A small set of calls: fusions and fusion candidates hold a few calls (at most
//! [`Limits::max_fusion_calls`](crate::explore::Limits::max_fusion_calls)) of programs that may
//! have tens of thousands, so a set is its calls in increasing order, not a bitset as long as
//! the program — thousands of those cost hundreds of megabytes on a long script.

use std::cmp::Ordering;

use crate::program::CallId;

/// A set of call ids, in increasing order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CallSet {
    calls: Vec<CallId>,
}

impl CallSet {
    /// The set holding exactly `ids`.
    pub fn of(ids: &[CallId]) -> Self {
        let mut calls = ids.to_vec();
        calls.sort_unstable();
        calls.dedup();
        CallSet { calls }
    }

    /// Adds `id`.
    pub fn insert(&mut self, id: CallId) {
        if let Err(at) = self.calls.binary_search(&id) {
            self.calls.insert(at, id);
        }
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: CallId) -> bool {
        self.calls.binary_search(&id).is_ok()
    }

    /// Number of calls in the set.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Whether every call of `self` is in `other`.
    pub fn is_subset(&self, other: &CallSet) -> bool {
        self.calls.iter().all(|&c| other.contains(c))
    }

    /// The smallest call id, if any.
    pub fn first(&self) -> Option<CallId> {
        self.calls.first().copied()
    }

    /// The largest call id, if any.
    pub fn last(&self) -> Option<CallId> {
        self.calls.last().copied()
    }

    /// The calls in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = CallId> + '_ {
        self.calls.iter().copied()
    }

    /// The calls in increasing order, as a slice.
    pub fn as_slice(&self) -> &[CallId] {
        &self.calls
    }
}

impl Ord for CallSet {
    /// By the largest call in one set but not the other (colexicographic): sets of earlier
    /// calls first, and on programs of up to 64 calls the order of the sets' bitsets as
    /// numbers, which fusion enumeration and the search's tie-breaks have always followed.
    fn cmp(&self, other: &Self) -> Ordering {
        let (mut a, mut b) = (self.calls.iter().rev().peekable(), other.calls.iter().rev().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x == y => {
                    a.next();
                    b.next();
                }
                (Some(x), Some(y)) => return x.cmp(y),
                (Some(_), None) => return Ordering::Greater,
                (None, Some(_)) => return Ordering::Less,
                (None, None) => return Ordering::Equal,
            }
        }
    }
}

impl PartialOrd for CallSet {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let mut a = CallSet::of(&[129, 0, 64, 63, 0]);
        assert_eq!(a.iter().collect::<Vec<_>>(), [0, 63, 64, 129]);
        assert_eq!((a.len(), a.first(), a.last()), (4, Some(0), Some(129)));
        assert!(a.contains(64) && !a.contains(65));
        a.insert(65);
        a.insert(65);
        assert_eq!(a.as_slice(), [0, 63, 64, 65, 129]);
        assert!(CallSet::of(&[0, 129]).is_subset(&a) && !CallSet::of(&[64, 100]).is_subset(&a));
        assert!(CallSet::default().is_empty() && CallSet::default().first().is_none());
    }

    #[test]
    fn ordered_as_bitsets_read_as_numbers() {
        let number = |s: &CallSet| s.iter().map(|c| 1u64 << c).sum::<u64>();
        let sets: Vec<CallSet> = (1u64..512)
            .map(|bits| CallSet::of(&(0..9).filter(|&c| bits & (1 << c) != 0).collect::<Vec<_>>()))
            .collect();
        for a in &sets {
            for b in &sets {
                assert_eq!(a.cmp(b), number(a).cmp(&number(b)), "{a:?} against {b:?}");
            }
        }
    }
}
