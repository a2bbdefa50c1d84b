//! Enumeration of fusions (paper §4.2): sets of calls, connected through the arrays they share,
//! that the rules of [`crate::explore::rules`] allow in one kernel. Every single call is a
//! (trivial) fusion, so every script has at least one plan.
//!
//! Sets grow one call at a time, smallest first, so that when the limit on candidates stops
//! the enumeration on a large script, every small fusion has been seen.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::explore::callset::CallSet;
use crate::explore::context::Context;
use crate::explore::rules;
use crate::explore::Limits;
use crate::program::CallId;

/// A legal set of calls for one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fusion {
    /// The calls, in increasing order.
    pub calls: Vec<CallId>,
}

impl Fusion {
    /// Whether call `c` is one of the fusion's.
    pub fn holds(&self, c: CallId) -> bool {
        self.calls.binary_search(&c).is_ok()
    }
}

/// The fusions of a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fusions {
    /// Legal fusions, by size then calls.
    pub list: Vec<Fusion>,
    /// Whether the candidate limit stopped the enumeration early.
    pub truncated: bool,
}

/// Enumerates the fusions of `ctx`'s program within `limits`.
pub fn enumerate(ctx: &Context, limits: &Limits) -> Fusions {
    let n = ctx.calls();
    let mut conflicts = Conflicts::default();
    let mut level: BTreeSet<CallSet> = (0..n).map(|c| CallSet::of(&[c])).collect();
    let mut candidates: Vec<CallSet> = level.iter().cloned().collect();
    let mut truncated = false;
    for _size in 2..=limits.max_fusion_calls.max(1) {
        // The sets of this size: the only ones a grown set can equal.
        let mut next = BTreeSet::new();
        'grow: for set in &level {
            for w in extensions(ctx, set, &mut conflicts) {
                let mut grown = set.clone();
                grown.insert(w);
                if candidates.len() + next.len() >= limits.max_fusions {
                    truncated = true;
                    break 'grow;
                }
                next.insert(grown);
            }
        }
        candidates.extend(next.iter().cloned());
        level = next;
        if level.is_empty() || truncated {
            break;
        }
    }
    // Stopping at the size limit truncates too when some set could still grow.
    truncated |= level.iter().any(|s| !extensions(ctx, s, &mut conflicts).is_empty());
    // Every candidate grew one array neighbour at a time, each in conflict with no member:
    // the pairwise rules and saving traffic hold by construction, convexity is left to check.
    let list = candidates
        .into_iter()
        .filter(|s| s.len() == 1 || rules::convex(ctx, s).is_ok())
        .map(|s| Fusion {
            calls: s.as_slice().to_vec(),
        })
        .collect();
    Fusions { list, truncated }
}

/// Whether two calls may never share a kernel (the pairwise rules), asked only of calls that
/// share an array and remembered: checking every pair up front costs the square of the calls.
#[derive(Default)]
struct Conflicts {
    known: HashMap<(CallId, CallId), bool>,
}

impl Conflicts {
    fn between(&mut self, ctx: &Context, a: CallId, b: CallId) -> bool {
        let key = (a.min(b), a.max(b));
        *self
            .known
            .entry(key)
            .or_insert_with(|| rules::pair(ctx, key.0, key.1).is_err())
    }
}

/// Calls that share an array with `set` and conflict with none of its members.
fn extensions(ctx: &Context, set: &CallSet, conflicts: &mut Conflicts) -> Vec<CallId> {
    let mut around: Vec<CallId> = set.iter().flat_map(|m| ctx.array_neighbours(m)).collect();
    around.sort_unstable();
    around.dedup();
    around.retain(|&w| !set.contains(w) && set.iter().all(|m| !conflicts.between(ctx, m, w)));
    around
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{script, Library};

    fn fusions(path: &str, limits: Limits) -> Fusions {
        let program = script::load(std::path::Path::new(path), &Library::builtin().unwrap()).unwrap();
        enumerate(&Context::new(&program, &program.sizes), &limits)
    }

    fn calls(f: &Fusions) -> Vec<Vec<CallId>> {
        f.list.iter().map(|f| f.calls.clone()).collect()
    }

    #[test]
    fn gemver_fusions_respect_barrier_and_convexity() {
        let f = fusions("../../scripts/gemver.yaml", Limits::default());
        assert_eq!(
            calls(&f),
            [
                vec![0],
                vec![1],
                vec![2],
                vec![3],
                vec![0, 1],
                vec![1, 2],
                vec![0, 1, 2]
            ]
        );
        assert!(!f.truncated);
    }

    #[test]
    fn atax_fuses_where_a_block_holds_whole_rows() {
        let f = fusions("../../scripts/atax.yaml", Limits::default());
        assert_eq!(calls(&f), [vec![0], vec![1], vec![0, 1]]);
        let program = script::load(
            std::path::Path::new("../../scripts/atax.yaml"),
            &Library::builtin().unwrap(),
        )
        .unwrap();
        let wide = program.bind_sizes(&[("n".to_string(), 40000)]).unwrap();
        let f = enumerate(&Context::new(&program, &wide), &Limits::default());
        assert_eq!(calls(&f), [vec![0], vec![1]]);
    }

    #[test]
    fn axpydot_fuses_all_three() {
        let f = fusions("../../scripts/axpydot.yaml", Limits::default());
        assert!(calls(&f).contains(&vec![0, 1, 2]));
    }

    #[test]
    fn the_candidate_limit_truncates_but_keeps_singletons() {
        let limits = Limits {
            max_fusions: 5,
            ..Limits::default()
        };
        let f = fusions("../../scripts/gemver.yaml", limits);
        assert!(f.truncated);
        assert!(calls(&f).starts_with(&[vec![0], vec![1], vec![2], vec![3]]));
    }
}
