//! Why two calls that share data are, or are not, in one kernel of a plan: the rule that keeps
//! them apart, or the prediction that fusing them is slower.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::explore::callset::CallSet;
use crate::explore::context::Context;
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
    let held = held_pairs(ex);
    sharing_pairs(ex)
        .into_iter()
        .map(|((first, second), values)| {
            let verdict = match kernel_of[first] == kernel_of[second] {
                true => Verdict::Fused {
                    kernel: kernel_of[first],
                },
                false => apart(ex, &held, best, first, second),
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
pub(super) fn sharing_pairs(ex: &Exploration) -> BTreeMap<(CallId, CallId), Vec<ValueId>> {
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

/// For each pair of calls that some fusion holds, whether one such fusion has an
/// implementation. Indexed once: scanning the fusions for every pair costs their product.
fn held_pairs(ex: &Exploration) -> HashMap<(CallId, CallId), bool> {
    let mut held = HashMap::new();
    for (fusion, implemented) in ex.fusions.iter().zip(&ex.implementations) {
        for (k, &a) in fusion.calls.iter().enumerate() {
            for &b in &fusion.calls[k + 1..] {
                *held.entry((a, b)).or_insert(false) |= !implemented.list.is_empty();
            }
        }
    }
    held
}

/// Why `a` and `b` (`a` first) are apart; `held` as from [`held_pairs`].
fn apart(ex: &Exploration, held: &HashMap<(CallId, CallId), bool>, best: &Plan, a: CallId, b: CallId) -> Verdict {
    if let Err(v) = rules::pair(&ex.context, a, b) {
        return ruled(v);
    }
    match held.get(&(a, b)) {
        Some(true) => slower(ex, best, a, b),
        Some(false) => unimplemented(ex, a, b),
        None => unheld(ex, a, b, rules::check(&ex.context, &between(&ex.context, a, b))),
    }
}

fn ruled(v: Violation) -> Verdict {
    Verdict::Apart {
        why: Why::Rule(v.rule),
        message: v.message,
    }
}

/// Fusions hold `a` and `b`, but none has an implementation.
fn unimplemented(ex: &Exploration, a: CallId, b: CallId) -> Verdict {
    Verdict::Apart {
        why: Why::Rule(Rule::ResourceLimit),
        message: format!(
            "no implementation of a {} holding `{}` and `{}` fits the device's limits on threads and shared memory",
            ex.context.words.kernel(),
            ex.context.text(a),
            ex.context.text(b)
        ),
    }
}

/// No fusion holds `a` and `b`; `check` is the rules checked on them with the calls between.
fn unheld(ex: &Exploration, a: CallId, b: CallId, check: Result<(), Violation>) -> Verdict {
    match check {
        Err(v) if v.calls.iter().all(|&c| c == a || c == b) => ruled(v),
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

/// `a`, `b` and every call on a dependency path between them (`a` before `b`): those reached
/// from `a` that reach `b`. Calls run in a topological order, so every such path stays within
/// `a..=b`, and one sweep each way over that span finds them.
fn between(ctx: &Context, a: CallId, b: CallId) -> CallSet {
    let within = |c: CallId| ctx.consumers(c).iter().copied().take_while(move |&d| d <= b);
    let mut from_a = vec![false; b - a + 1];
    from_a[0] = true;
    for c in a..b {
        if from_a[c - a] {
            within(c).for_each(|d| from_a[d - a] = true);
        }
    }
    let mut to_b = vec![false; b - a + 1];
    to_b[b - a] = true;
    for c in (a..b).rev() {
        to_b[c - a] = within(c).any(|d| to_b[d - a]);
    }
    let inner = (a + 1..b).filter(|&c| from_a[c - a] && to_b[c - a]);
    CallSet::of(&std::iter::once(a).chain(inner).chain([b]).collect::<Vec<_>>())
}

/// The best plan that fuses `a` and `b`, against `best`.
pub(super) fn slower(ex: &Exploration, best: &Plan, a: CallId, b: CallId) -> Verdict {
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
