//! Why two calls that share data are, or are not, in one kernel of a plan: the rule that keeps
//! them apart, or the prediction that fusing them is slower.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::explore::callset::CallSet;
use crate::explore::plan::{Plan, Plans};
use crate::explore::rules::{self, Rule, Violation};
use crate::explore::Exploration;
use crate::program::{CallId, ValueId};

/// The verdict on one pair of calls that share data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairExplanation {
    /// The earlier call.
    pub first: CallId,
    /// The later call.
    pub second: CallId,
    /// The values they share (one passes to the other, or both read it).
    pub values: Vec<ValueId>,
    /// Fused or not, and why.
    pub verdict: Verdict,
}

/// Whether a pair is fused in the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// In the same kernel (1-based, in launch order; a pass on the CPU).
    Fused {
        /// The kernel.
        kernel: usize,
    },
    /// In different kernels.
    Apart {
        /// The reason, by kind.
        why: Why,
        /// The reason in words.
        message: String,
    },
}

/// What keeps two calls apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// A fusibility rule.
    Rule(Rule),
    /// They could be fused, but the best plan that fuses them is predicted slower.
    PredictedSlower {
        /// The best plan with them fused, µs.
        fused_us: f64,
        /// The best plan, µs.
        best_us: f64,
    },
    /// The exploration limits stopped before any fusion holding both.
    NotExplored,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Rule(rule) => write!(f, "{rule}"),
            Why::PredictedSlower { .. } => f.write_str("predicted-slower"),
            Why::NotExplored => f.write_str("not-explored"),
        }
    }
}

/// Explains every pair of calls of `ex` that share data, against plan `best`.
pub fn explain(ex: &Exploration, best: &Plan) -> Vec<PairExplanation> {
    let mut kernel_of = vec![0; ex.context.calls()];
    for (k, kernel) in best.kernels.iter().enumerate() {
        kernel.calls.iter().for_each(|&c| kernel_of[c] = k + 1);
    }
    sharing_pairs(ex)
        .into_iter()
        .map(|((first, second), values)| {
            let verdict = match kernel_of[first] == kernel_of[second] {
                true => Verdict::Fused {
                    kernel: kernel_of[first],
                },
                false => apart(ex, best, first, second),
            };
            PairExplanation {
                first,
                second,
                values,
                verdict,
            }
        })
        .collect()
}

/// Pairs of calls that pass or both read a value, with those values.
fn sharing_pairs(ex: &Exploration) -> BTreeMap<(CallId, CallId), Vec<ValueId>> {
    let program = ex.program();
    let mut pairs: BTreeMap<(CallId, CallId), Vec<ValueId>> = BTreeMap::new();
    for (v, readers) in ex.context.readers.iter().enumerate() {
        let touching: Vec<CallId> = program.values[v]
            .producer
            .into_iter()
            .chain(readers.iter().copied())
            .collect();
        for (k, &a) in touching.iter().enumerate() {
            for &b in &touching[k + 1..] {
                let values = pairs.entry((a.min(b), a.max(b))).or_default();
                if !values.contains(&v) {
                    values.push(v);
                }
            }
        }
    }
    pairs
}

fn apart(ex: &Exploration, best: &Plan, a: CallId, b: CallId) -> Verdict {
    let rule = |v: Violation| Verdict::Apart {
        why: Why::Rule(v.rule),
        message: v.message,
    };
    if let Err(v) = rules::pair(&ex.context, a, b) {
        return rule(v);
    }
    let holding: Vec<usize> = (0..ex.fusions.len())
        .filter(|&f| ex.fusions[f].calls.contains(&a) && ex.fusions[f].calls.contains(&b))
        .collect();
    if holding.iter().any(|&f| !ex.implementations[f].list.is_empty()) {
        return slower(ex, best, a, b);
    }
    if !holding.is_empty() {
        return Verdict::Apart {
            why: Why::Rule(Rule::ResourceLimit),
            message: format!(
                "no implementation of a {} holding `{}` and `{}` fits the device's limits on threads and shared memory",
                ex.context.words.kernel(),
                ex.context.text(a),
                ex.context.text(b)
            ),
        };
    }
    match rules::check(&ex.context, &between(ex, a, b)) {
        Err(v) if v.calls.iter().all(|&c| c == a || c == b) => rule(v),
        Err(v) => Verdict::Apart {
            why: Why::Rule(v.rule),
            message: format!(
                "a {} holding both must hold the calls between them, and {}",
                ex.context.words.kernel(),
                v.message
            ),
        },
        Ok(()) => Verdict::Apart {
            why: Why::NotExplored,
            message: "the exploration limits stopped before any fusion holding both".to_string(),
        },
    }
}

/// `a`, `b` and every call on a dependency path between them (`a` before `b`). Calls run in
/// a topological order, so no path from beyond `b` comes back to it: walks stop there.
fn between(ex: &Exploration, a: CallId, b: CallId) -> CallSet {
    let descendants = |from: CallId| {
        let mut seen = HashSet::new();
        let mut stack = vec![from];
        while let Some(c) = stack.pop() {
            for &d in ex.context.consumers(c).iter().filter(|&&d| d <= b) {
                if seen.insert(d) {
                    stack.push(d);
                }
            }
        }
        seen
    };
    let mut set = CallSet::of(&[a, b]);
    for &c in descendants(a).iter().filter(|&&c| c < b) {
        if descendants(c).contains(&b) {
            set.insert(c);
        }
    }
    set
}

/// The best plan that fuses `a` and `b`, against `best`.
fn slower(ex: &Exploration, best: &Plan, a: CallId, b: CallId) -> Verdict {
    let together = move |calls: &[CallId]| calls.contains(&a) == calls.contains(&b);
    let fused_us = Plans::new(ex, Some(Box::new(together)))
        .next()
        .map_or(f64::INFINITY, |p| p.predicted_us);
    Verdict::Apart {
        why: Why::PredictedSlower {
            fused_us,
            best_us: best.predicted_us,
        },
        message: format!(
            "they could share a {}, but the best plan doing so is predicted {fused_us:.2} µs against {:.2} µs",
            ex.context.words.kernel(),
            best.predicted_us
        ),
    }
}
