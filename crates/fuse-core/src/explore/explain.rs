//! Why two calls that share data are, or are not, in one kernel of a plan: the rule that keeps
//! them apart, or the prediction that fusing them is slower.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::explore::callset::CallSet;
use crate::explore::context::Context;
use crate::explore::plan::{best_us_within, Plan};
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
    let held = held_pairs(ex);
    let near = Neighbourhood::new(ex, best);
    let mut reached = Reached::default();
    sharing_pairs(ex)
        .into_iter()
        .map(|((first, second), values)| {
            let kernel = near.kernel_of[first];
            let verdict = match kernel == near.kernel_of[second] {
                true => Verdict::Fused { kernel: kernel + 1 },
                false => apart(ex, &held, &near, &mut reached, first, second),
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

/// Why `a` and `b` (`a` first) are apart; `held` as from [`held_pairs`], `reached` the calls
/// reached from the first call of the pair before, if any.
fn apart(
    ex: &Exploration,
    held: &HashMap<(CallId, CallId), bool>,
    near: &Neighbourhood,
    reached: &mut Reached,
    a: CallId,
    b: CallId,
) -> Verdict {
    if let Err(v) = rules::pair(&ex.context, a, b) {
        return ruled(v);
    }
    match held.get(&(a, b)) {
        Some(true) => near.slower(a, b),
        Some(false) => unimplemented(ex, a, b),
        None => unheld(ex, a, b, reached.sweep(&ex.context, a, b).hull(ex, b)),
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

/// The verdict on a pair whose calls and the paths between them are more than a fusion may hold.
pub(super) fn hull_too_long(ex: &Exploration) -> Verdict {
    Verdict::Apart {
        why: Why::NotExplored,
        message: format!(
            "a {} holding both must hold the calls on the paths between them, more than the {} the exploration puts in one",
            ex.context.words.kernel(),
            ex.limits.max_fusion_calls
        ),
    }
}

/// No fusion holds `a` and `b`; `hull` is them with the calls on the paths between them, or
/// `None` if those are more than the exploration puts in one fusion: then the rules are not
/// checked, as finding or checking a long hull costs its length, for each of the square of the
/// calls' pairs on a script whose calls share an input.
fn unheld(ex: &Exploration, a: CallId, b: CallId, hull: Option<Vec<CallId>>) -> Verdict {
    let Some(hull) = hull else {
        return hull_too_long(ex);
    };
    match rules::check_convex(&ex.context, &CallSet::of(&hull)) {
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

/// The calls reached from one call `from` by dependency paths, swept as far as asked: the first
/// half of the hull of every pair that `from` begins. Pairs come in order of their first call,
/// so the calls after each are swept once for all its pairs.
#[derive(Default)]
struct Reached {
    from: CallId,
    /// Whether `from + i` is reached, for the calls swept and their consumers.
    marks: Vec<bool>,
    /// The calls below `from + swept` have marked their consumers.
    swept: usize,
}

impl Reached {
    /// The calls reached from `a`, swept up to `b`.
    fn sweep(&mut self, ctx: &Context, a: CallId, b: CallId) -> &Self {
        if self.marks.is_empty() || self.from != a {
            *self = Reached {
                from: a,
                marks: vec![false; ctx.calls() - a],
                swept: 0,
            };
            self.marks[0] = true;
        }
        for c in a + self.swept..b {
            if self.marks[c - a] {
                ctx.consumers(c).iter().for_each(|&d| self.marks[d - a] = true);
            }
        }
        self.swept = self.swept.max(b - a);
        self
    }

    /// The hull of `from` and `b`: them and every call on a path between, in increasing order —
    /// the calls reached from `from` that reach `b`, found walking back from `b` through
    /// reached calls only. `None` once it has more calls than the exploration's fusions.
    fn hull(&self, ex: &Exploration, b: CallId) -> Option<Vec<CallId>> {
        let program = ex.program();
        let reached = |c: CallId| c >= self.from && self.marks[c - self.from];
        let mut hull = vec![self.from, b];
        let mut stack = vec![b];
        while let Some(c) = stack.pop() {
            for v in program.calls[c].reads() {
                let Some(p) = program.values[v].producer.filter(|&p| reached(p) && !hull.contains(&p)) else {
                    continue;
                };
                hull.push(p);
                stack.push(p);
                if hull.len() > ex.limits.max_fusion_calls {
                    return None;
                }
            }
        }
        hull.sort_unstable();
        Some(hull)
    }
}

/// The share of the exploration's search budget that the search for a plan fusing a pair
/// predicted slower fused may use: a script has about as many such pairs as calls, and a search
/// each as long as the exploration's made `explain` that many times slower than `explore`.
const PAIR_SEARCH_SHARE: usize = 64;

/// Where to search for a plan fusing two calls: the calls near them and the fusions that may
/// cover those; the kernels of the best plan cover the rest, in `others_us`.
pub(super) struct Near {
    pub(super) searched: Range<CallId>,
    fusions: Vec<usize>,
    others_us: f64,
}

/// Where fusing two calls could change `best`: the fusions holding each call, and the kernel
/// of `best` covering it. Built once for all pairs.
pub(super) struct Neighbourhood<'x> {
    ex: &'x Exploration<'x>,
    best: &'x Plan,
    /// For each call, the fusions holding it (indices into `ex.fusions`, increasing).
    holding: Vec<Vec<usize>>,
    /// For each call, its kernel in `best` (from 0).
    pub(super) kernel_of: Vec<usize>,
    /// For each kernel of `best`, its fusion.
    fusion_of: Vec<usize>,
    /// For each call `c`, one past the last call of the kernels of `best` whose first call is at
    /// most `c`: no more than increasing.
    reach_from: Vec<CallId>,
}

impl<'x> Neighbourhood<'x> {
    pub(super) fn new(ex: &'x Exploration<'x>, best: &'x Plan) -> Self {
        let mut holding = vec![Vec::new(); ex.context.calls()];
        for (f, fusion) in ex.fusions.iter().enumerate() {
            fusion.calls.iter().for_each(|&c| holding[c].push(f));
        }
        let mut kernel_of = vec![0; ex.context.calls()];
        let fusion_of = (best.kernels.iter().enumerate())
            .map(|(k, kernel)| {
                kernel.calls.iter().for_each(|&c| kernel_of[c] = k);
                let mut calls = kernel.calls.clone();
                calls.sort_unstable();
                *(holding[calls[0]].iter())
                    .find(|&&f| ex.fusions[f].calls == calls)
                    .expect("every kernel of a plan is one of the exploration's fusions")
            })
            .collect::<Vec<usize>>();
        let mut reach_from = vec![0; ex.context.calls()];
        for &f in &fusion_of {
            let calls = &ex.fusions[f].calls;
            reach_from[calls[0]] = reach_from[calls[0]].max(calls[calls.len() - 1] + 1);
        }
        for c in 1..reach_from.len() {
            reach_from[c] = reach_from[c].max(reach_from[c - 1]);
        }
        Neighbourhood {
            ex,
            best,
            holding,
            kernel_of,
            fusion_of,
            reach_from,
        }
    }

    /// The calls near `a` and `b` and the fusions a plan fusing them may cover those with: in
    /// the window — the kernels of `best` that some implemented fusion of both touches — every
    /// fusion that holds both or neither; elsewhere the kernels of `best` as they are. The calls
    /// span the window and every kernel of `best` with a call in the span or calls on both sides
    /// of it, so that no path leaves them through a kernel kept and comes back (calls run in a
    /// topological order: a kernel wholly before the span is never reached from it, and one
    /// wholly after never leads back).
    pub(super) fn near(&self, a: CallId, b: CallId) -> Near {
        let ex = self.ex;
        let mut window: Vec<usize> = (self.holding[a].iter())
            .filter(|&&f| ex.fusions[f].holds(b) && !ex.implementations[f].list.is_empty())
            .flat_map(|&f| ex.fusions[f].calls.iter().map(|&c| self.kernel_of[c]))
            .collect();
        window.sort_unstable();
        window.dedup();
        let span = |kernels: &mut dyn Iterator<Item = usize>| {
            kernels.fold((CallId::MAX, 0), |(lo, hi), k| {
                let calls = &ex.fusions[self.fusion_of[k]].calls;
                (lo.min(calls[0]), hi.max(calls[calls.len() - 1] + 1))
            })
        };
        let mut searched = span(&mut window.iter().copied());
        loop {
            let mut wider = span(&mut (searched.0..searched.1).map(|c| self.kernel_of[c]));
            // The first call of the first kernel that starts before the span and ends after it.
            wider.0 = wider.0.min(self.reach_from.partition_point(|&end| end <= wider.1));
            if wider == searched {
                break;
            }
            searched = wider;
        }
        let inside = |c: &CallId| window.binary_search(&self.kernel_of[*c]).is_ok();
        let free = |f: &usize| {
            let calls = &ex.fusions[*f].calls;
            calls.iter().all(inside) && calls.contains(&a) == calls.contains(&b)
        };
        let mut kept: Vec<usize> = (searched.0..searched.1)
            .map(|c| self.kernel_of[c])
            .filter(|k| window.binary_search(k).is_err())
            .collect();
        kept.sort_unstable();
        kept.dedup();
        let starting_inside = window.iter().flat_map(|&k| &ex.fusions[self.fusion_of[k]].calls);
        let fusions = (kept.iter().map(|&k| self.fusion_of[k]))
            .chain(
                starting_inside
                    .flat_map(|&c| (self.holding[c].iter().copied()).filter(move |&f| ex.fusions[f].calls[0] == c))
                    .filter(free),
            )
            .collect();
        let inside_us: f64 = (window.iter().chain(&kept))
            .map(|&k| self.best.kernels[k].predicted.total_us)
            .sum();
        Near {
            searched: searched.0..searched.1,
            fusions,
            others_us: self.best.predicted_us - inside_us,
        }
    }

    /// Every fusion that holds both `a` and `b` or neither.
    pub(super) fn either(&self, a: CallId, b: CallId) -> impl Iterator<Item = usize> + '_ {
        let fusions = &self.ex.fusions;
        (0..fusions.len()).filter(move |&f| fusions[f].holds(a) == fusions[f].holds(b))
    }

    /// The best plan that fuses `a` and `b` and changes only the kernels near them, against
    /// `best`. Searching every plan fusing them, pair after pair, took the cube of the calls.
    /// Where the kernels kept close a cycle with every fusion of both, the search covers every
    /// call, on the same budget.
    pub(super) fn slower(&self, a: CallId, b: CallId) -> Verdict {
        let (ex, best) = (self.ex, self.best);
        let near = self.near(a, b);
        let nodes = ex.limits.max_search_nodes / PAIR_SEARCH_SHARE;
        let fused_us = (best_us_within(ex, near.fusions, near.searched, nodes).map(|us| us + near.others_us))
            .or_else(|| best_us_within(ex, self.either(a, b), 0..ex.context.calls(), nodes))
            .unwrap_or(f64::INFINITY);
        Verdict::Apart {
            why: Why::PredictedSlower {
                fused_us,
                best_us: best.predicted_us,
            },
            message: format!(
                "they could share a {}, but the best plan found that does so near them is predicted {fused_us:.2} µs against {:.2} µs",
                ex.context.words.kernel(),
                best.predicted_us
            ),
        }
    }
}
