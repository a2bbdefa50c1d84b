//! Plans (paper §4.2, "combinations of fusion implementations"): kernels that cover every call
//! exactly once, in an order that respects every dependency, predicted best first.
//!
//! Plans are produced lazily by a best-first (A*) search over partial plans. A partial plan
//! always extends the lowest uncovered call (in script order, which is topological) with a
//! fusion whose calls are all uncovered, so every plan is reached exactly once. A fusion that
//! would close a cycle between kernels (through covered kernels or uncovered calls) is never
//! added, so every partial plan can be completed — leaving the rest unfused always works. The
//! heuristic charges each uncovered call the least share of a kernel's time it can still have
//! (kernel time over calls, among fusions free of covered calls), a lower bound, so complete
//! plans come out in predicted order. The search chooses fusions only, each at its fastest
//! implementation; a complete choice then yields its plans with slower implementations through
//! the same queue, so implementations never multiply the partial plans searched.
//! Deterministic node budgets, not clocks, bound the search on large scripts.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt::Write;
use std::ops::Range;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::explore::chunked::ChunkedVec;
use crate::explore::implementation::{dataflow, Implementation, Launch, Reduction};
use crate::explore::predict::KernelTime;
use crate::explore::vocabulary::Vocabulary;
use crate::explore::Exploration;
use crate::program::{CallId, Program, ValueId};

/// One kernel of a plan: the calls it fuses and everything the generator needs to emit it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// The calls it fuses, in the order they run.
    pub calls: Vec<CallId>,
    /// The routine variant of each call, by position in `calls`.
    pub variants: Vec<String>,
    /// Values loaded from global memory.
    pub loads: Vec<ValueId>,
    /// Values stored to global memory.
    pub stores: Vec<ValueId>,
    /// Results passed between its calls on chip.
    pub on_chip: Vec<ValueId>,
    /// Run-time scalar inputs passed as kernel arguments.
    pub parameters: Vec<ValueId>,
    /// How it launches: its implementation's launch configuration.
    #[serde(flatten)]
    pub launch: Launch,
    /// Predicted times.
    pub predicted: KernelTime,
}

impl Kernel {
    fn new(ctx: &crate::explore::Context, imp: &Implementation) -> Kernel {
        let flow = dataflow(ctx, &imp.order);
        Kernel {
            calls: imp.order.clone(),
            variants: imp.variants.to_vec(),
            loads: flow.loads,
            stores: flow.stores,
            on_chip: flow.on_chip,
            parameters: flow.parameters,
            launch: imp.launch.clone(),
            predicted: imp.time,
        }
    }
}

/// A whole program as kernels in launch order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// 1 for the best predicted plan.
    pub rank: usize,
    /// Predicted time of all kernels, µs.
    pub predicted_us: f64,
    /// Kernels in launch order.
    pub kernels: Vec<Kernel>,
}

impl Plan {
    /// Bytes of every value the plan stores to memory — outputs, and temporaries passed
    /// between kernels — at `sizes`: what running it allocates beside its inputs.
    pub fn stored_bytes(&self, program: &Program, sizes: &crate::shape::Sizes) -> u64 {
        let stored: BTreeSet<ValueId> = self.kernels.iter().flat_map(|k| k.stores.iter().copied()).collect();
        let bytes = |v: ValueId| {
            sizes
                .array_bytes(&program.values[v].shape, program.precision)
                .unwrap_or(0)
        };
        stored.into_iter().map(bytes).sum()
    }

    /// The plan as text in the words of the machine `layout` describes, calls and values named
    /// as in `program`.
    pub fn describe(&self, program: &Program, layout: &dyn Layout) -> String {
        let words = layout.words();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "plan {}: {:.2} µs, {}",
            self.rank,
            self.predicted_us,
            words.kernels(self.kernels.len())
        );
        for (k, kernel) in self.kernels.iter().enumerate() {
            describe_kernel(&mut out, program, k, kernel, layout);
        }
        out
    }
}

fn describe_kernel(out: &mut String, program: &Program, index: usize, k: &Kernel, layout: &dyn Layout) {
    let (t, words) = (&k.predicted, layout.words());
    let names = |ids: &[ValueId]| match ids {
        [] => "—".to_string(),
        _ => ids
            .iter()
            .map(|&v| program.values[v].variable.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    };
    let issue = match t.issue_us > 0.0 {
        true => format!(" ⊕ issue {:.2}", t.issue_us),
        false => String::new(),
    };
    let _ = writeln!(
        out,
        "  {} {}: {:.2} µs = max(transfer {:.2}, compute {:.2}){issue} + {} {:.2} + finish {:.2}",
        words.kernel(),
        index + 1,
        t.total_us,
        t.transfer_us,
        t.compute_us,
        words.launch(),
        t.launch_us,
        t.finish_us
    );
    let _ = writeln!(out, "    {}", layout.layout(index, k));
    for (c, variant) in k.calls.iter().zip(&k.variants) {
        let finish = k
            .launch
            .reductions
            .iter()
            .find(|r| r.call == *c)
            .map(|r| format!("; {}", layout.finish(index, r)));
        let _ = writeln!(
            out,
            "    {}  [{variant}{}]",
            program.calls[*c].text,
            finish.unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "    loads {} · stores {} · {} {}",
        names(&k.loads),
        names(&k.stores),
        words.on_chip(),
        names(&k.on_chip)
    );
}

/// How a machine runs the kernels of a plan, in its words: what
/// [`Plan::describe`] prints under each kernel.
pub trait Layout {
    /// The words.
    fn words(&self) -> Vocabulary;
    /// One line: how the plan's kernel `index` (from 0) runs.
    fn layout(&self, index: usize, kernel: &Kernel) -> String;
    /// How `reduction` of kernel `index` is finished.
    fn finish(&self, index: usize, reduction: &Reduction) -> String;
}

/// A GPU's layout: the launch configuration the explorer chose (blocks, threads, strips or
/// instances, serial iterations, shared memory).
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuLayout;

impl Layout for GpuLayout {
    fn words(&self) -> Vocabulary {
        Vocabulary::Gpu
    }

    fn finish(&self, _: usize, reduction: &Reduction) -> String {
        reduction.finish.to_string()
    }

    fn layout(&self, _: usize, kernel: &Kernel) -> String {
        let launch = &kernel.launch;
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        let (instances, serial) = (launch.block.instances, launch.serial_iterations);
        let arrangement = match launch.walk {
            None => format!(
                "{instances} instance{}, {serial} serial iteration{}",
                plural(instances),
                plural(serial)
            ),
            Some(walk) => {
                let shape = match launch.block.whole_rows {
                    true => "whole rows",
                    false => "strips",
                };
                let steps = match launch.block_rows {
                    Some(rows) => format!("{rows} rows each"),
                    None => format!("{serial} serial iteration{} {}", plural(serial), walk.walk()),
                };
                format!("{shape} of {} columns, {steps}", 32 * instances)
            }
        };
        format!(
            "{} blocks × {} threads ({arrangement}), {} B shared",
            launch.blocks, launch.block.threads, launch.shared_bytes
        )
    }
}

/// How many plans exist; `exact` is false when counting stopped at its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCount {
    /// Plans counted.
    pub count: u128,
    /// Whether that is all of them.
    pub exact: bool,
}

impl PlanCount {
    /// `count` plans, all of them if the search stayed `within_budget` — unless the count
    /// saturated, which makes it a lower bound.
    fn new(count: u128, within_budget: bool) -> Self {
        PlanCount {
            count,
            exact: within_budget && count < u128::MAX,
        }
    }
}

impl std::fmt::Display for PlanCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.exact, self.count) {
            (true, n) => write!(f, "{n}"),
            (false, u128::MAX) => f.write_str("more than 10^38"),
            (false, n) => write!(f, "more than {n}"),
        }
    }
}

/// Which kernel covers each call: the part of a partial plan that decides which fusions may
/// come next. Counting plans walks it in place, adding and removing kernels.
#[derive(Debug, Clone)]
struct Cover {
    /// For each call, the index in `kernels` of the kernel covering it, or `NONE`.
    kernel_of: ChunkedVec,
    /// The fusion of each kernel, in the order chosen.
    kernels: ChunkedVec,
    /// The lowest uncovered call (`end` once all are covered).
    first: CallId,
    /// One past the last call searched: those beyond it, and those below the first searched,
    /// are [`OUTSIDE`].
    end: CallId,
    /// One past the highest covered call: no path from an uncovered call beyond it (and
    /// beyond a new fusion) can come back (see [`Search::closes_cycle`]).
    reach: CallId,
    /// Calls covered.
    size: usize,
}

const NONE: u32 = u32::MAX;

/// The kernel of a call outside the calls searched: covered by a kernel fixed beforehand, which
/// no path from a call searched leaves and comes back through (see [`best_us_within`]).
const OUTSIDE: u32 = u32::MAX - 1;

impl Cover {
    fn empty(calls: usize) -> Self {
        Cover::within(calls, 0..calls)
    }

    /// No call of `searched` covered; every other call of the `calls` [`OUTSIDE`].
    fn within(calls: usize, searched: Range<CallId>) -> Self {
        let whole = searched == (0..calls);
        let mut kernel_of = ChunkedVec::filled(calls, if whole { NONE } else { OUTSIDE });
        if !whole {
            searched.clone().for_each(|c| kernel_of.set(c, NONE));
        }
        Cover {
            kernel_of,
            kernels: ChunkedVec::default(),
            first: searched.start,
            end: searched.end,
            reach: searched.start,
            size: 0,
        }
    }

    fn covers(&self, c: CallId) -> bool {
        self.kernel_of.get(c) != NONE
    }

    fn first_uncovered(&self) -> Option<CallId> {
        (self.first < self.end).then_some(self.first)
    }

    /// Covers `calls` (fusion `f`, free of covered calls) with a new kernel.
    fn add(&mut self, f: usize, calls: &[CallId]) {
        let k = self.kernels.len() as u32;
        for &c in calls {
            self.kernel_of.set(c, k);
        }
        self.kernels.push(f as u32);
        self.size += calls.len();
        self.reach = self.reach.max(calls[calls.len() - 1] + 1);
        while self.first < self.end && self.covers(self.first) {
            self.first += 1;
        }
    }

    /// Undoes [`Cover::add`] of the last kernel, `calls`, added when the reach was `reach`.
    fn remove_last(&mut self, calls: &[CallId], reach: CallId) {
        for &c in calls {
            self.kernel_of.set(c, NONE);
        }
        self.kernels.pop();
        self.size -= calls.len();
        self.reach = reach;
        // The removed kernel held the lowest uncovered call when it was added.
        self.first = calls[0];
    }
}

/// A partial plan: the fusions chosen so far, one kernel each. Which implementation each
/// kernel gets is chosen only once the plan is complete.
#[derive(Debug, Clone)]
struct Partial {
    cover: Cover,
    /// For each uncovered call, the index in `Search::shares` of its first entry free of
    /// covered calls (the list's length if none is): covering more only moves it on.
    picks: ChunkedVec,
    /// The heuristic: the picked shares of the uncovered calls summed in [`Units`], kept up to
    /// date as calls are covered — exactly, since the units are integers.
    bound: Units,
    /// Uncovered calls left with no fusion free of covered calls: nothing completes the plan.
    stranded: usize,
}

/// A time in fixed point, [`UNITS_PER_US`] to the microsecond.
type Units = u128;

/// Fixed-point units per µs of the heuristic. Each share is rounded down, so the sum stays a
/// lower bound; 1e6 loses at most a picosecond per call.
const UNITS_PER_US: f64 = 1e6;

fn units(us: f64) -> Units {
    (us * UNITS_PER_US).floor().max(0.0) as Units
}

/// The search over an exploration's fusions.
struct Search<'e, 'p> {
    ex: &'e Exploration<'p>,
    /// The calls to cover.
    searched: Range<CallId>,
    /// Allowed fusions by their lowest call.
    by_first: Vec<Vec<usize>>,
    /// For each call, the shares of a kernel's time it can carry, least first: (the fastest
    /// implementation of an allowed fusion holding it over that fusion's calls, the fusion).
    /// A fusion whose calls include those of one listed before it is left out: it is free of
    /// covered calls only when that one is too, and its share is no less.
    shares: Vec<Vec<(f64, u32)>>,
    /// For each call `d`, the calls `c` (increasing) with an entry of `shares` whose fusion
    /// holds `d`: those whose pick covering `d` can move on. Only the picked entry of each
    /// matters, so listing calls rather than entries spares checking every other entry.
    sharers: Vec<Vec<u32>>,
}

impl<'e, 'p> Search<'e, 'p> {
    /// The search covering the calls `searched` with `fusions` (indices into `ex.fusions`, each
    /// once, their calls among those searched).
    fn new(ex: &'e Exploration<'p>, fusions: impl IntoIterator<Item = usize>, searched: Range<CallId>) -> Self {
        let n = ex.context.calls();
        let mut by_first = vec![Vec::new(); n];
        let mut candidates = vec![Vec::new(); n];
        for f in fusions {
            let (fusion, Some(best)) = (&ex.fusions[f], ex.implementations[f].list.first()) else {
                continue;
            };
            by_first[fusion.calls[0]].push(f);
            let per_call = best.time.total_us / fusion.calls.len() as f64;
            for &c in &fusion.calls {
                candidates[c].push((per_call, f as u32));
            }
        }
        let shares: Vec<Vec<(f64, u32)>> = candidates
            .into_iter()
            .map(|mut list| {
                list.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let mut kept: Vec<(f64, u32)> = Vec::new();
                for (share, f) in list {
                    let holds = |k: u32| {
                        let (inner, outer) = (&ex.fusions[k as usize].calls, &ex.fusions[f as usize]);
                        // Calls are increasing: a fusion reaching past the other's ends is not
                        // inside it, and most are told so without a search.
                        let within = inner.len() <= outer.calls.len()
                            && inner[0] >= outer.calls[0]
                            && inner.last() <= outer.calls.last();
                        within && inner.iter().all(|c| outer.holds(*c))
                    };
                    if !kept.iter().any(|&(_, k)| holds(k)) {
                        kept.push((share, f));
                    }
                }
                kept
            })
            .collect();
        let mut sharers: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (c, list) in shares.iter().enumerate() {
            for &(_, f) in list {
                for &d in &ex.fusions[f as usize].calls {
                    if sharers[d].last() != Some(&(c as u32)) {
                        sharers[d].push(c as u32);
                    }
                }
            }
        }
        Search {
            ex,
            searched,
            by_first,
            shares,
            sharers,
        }
    }

    /// The calls of fusion `f`.
    fn calls(&self, f: usize) -> &'e [CallId] {
        &self.ex.fusions[f].calls
    }

    /// The predicted time of the fastest implementation of fusion `f`.
    fn best_us(&self, f: usize) -> f64 {
        self.ex.implementations[f].list[0].time.total_us
    }

    /// The empty partial plan: every call at its least share.
    fn root(&self) -> Partial {
        let n = self.ex.context.calls();
        let mut p = Partial {
            cover: Cover::within(n, self.searched.clone()),
            picks: ChunkedVec::filled(n, 0),
            bound: 0,
            stranded: 0,
        };
        for shares in &self.shares[self.searched.clone()] {
            match shares.first() {
                Some(&(share, _)) => p.bound += units(share),
                None => p.stranded += 1,
            }
        }
        p
    }

    /// Whether fusion `g` has no call in `cover` nor in fusion `also`.
    fn free(&self, g: usize, cover: &Cover, also: usize) -> bool {
        let also = &self.ex.fusions[also];
        self.calls(g).iter().all(|&x| !cover.covers(x) && !also.holds(x))
    }

    /// The picks of `p` that covering fusion `f` moves on: for each uncovered call outside `f`
    /// whose picked fusion shares a call with `f`, its new pick — the first entry free of
    /// covered calls and of `f`, or the list's length if there is none.
    fn moved_picks(&self, p: &Partial, f: usize) -> Vec<(CallId, u32)> {
        let fusion = &self.ex.fusions[f];
        let mut moved: Vec<(CallId, u32)> = Vec::new();
        for &d in self.calls(f) {
            for &c in &self.sharers[d] {
                let (c, i) = (c as usize, p.picks.get(c as usize));
                let picked = |&(_, g): &(f64, u32)| self.ex.fusions[g as usize].holds(d);
                let affected =
                    !p.cover.covers(c) && !fusion.holds(c) && self.shares[c].get(i as usize).is_some_and(picked);
                if affected && !moved.iter().any(|&(m, _)| m == c) {
                    let shares = &self.shares[c];
                    let next = (i as usize + 1..shares.len())
                        .find(|&j| self.free(shares[j].1 as usize, &p.cover, f))
                        .unwrap_or(shares.len());
                    moved.push((c, next as u32));
                }
            }
        }
        moved
    }

    /// The units call `c` carries at pick `i` (none past the end of its list).
    fn share_units(&self, c: CallId, i: u32) -> Units {
        self.shares[c].get(i as usize).map_or(0, |&(share, _)| units(share))
    }

    /// The bound of `p` with fusion `f` covered too, or `None` if that strands a call.
    fn bound_with(&self, p: &Partial, f: usize) -> Option<Units> {
        if p.stranded > 0 {
            return None;
        }
        // The calls of f are uncovered and f is free of covered calls: each has a pick.
        let mut bound = p.bound;
        for &c in self.calls(f) {
            bound -= self.share_units(c, p.picks.get(c));
        }
        for (c, next) in self.moved_picks(p, f) {
            if next as usize == self.shares[c].len() {
                return None;
            }
            bound = bound - self.share_units(c, p.picks.get(c)) + self.share_units(c, next);
        }
        Some(bound)
    }

    /// The heuristic of a bound: a lower bound on the time of the kernels covering the
    /// uncovered calls, since every completion covers each with a fusion free of covered calls
    /// and that kernel's time is at least the call's least share of it. Shaved by a relative
    /// 1e-9 so that converting from units never makes it exceed the true cost.
    fn heuristic(bound: Units) -> f64 {
        bound as f64 / UNITS_PER_US * (1.0 - 1e-9)
    }

    /// Adds fusion `f` to `p` as its next kernel.
    fn apply(&self, p: &mut Partial, f: usize) {
        let moved = self.moved_picks(p, f);
        for &c in self.calls(f) {
            p.bound -= self.share_units(c, p.picks.get(c));
        }
        for (c, next) in moved {
            p.bound = p.bound - self.share_units(c, p.picks.get(c)) + self.share_units(c, next);
            p.stranded += (next as usize == self.shares[c].len()) as usize;
            p.picks.set(c, next);
        }
        p.cover.add(f, self.calls(f));
    }

    /// `p` with fusion `f` as its next kernel.
    fn with(&self, p: &Partial, f: usize) -> Partial {
        let mut next = p.clone();
        self.apply(&mut next, f);
        next
    }

    /// The fusions that may extend `cover`.
    fn extensions<'s>(&'s self, cover: &'s Cover) -> impl Iterator<Item = usize> + 's {
        let first = cover.first_uncovered();
        first.into_iter().flat_map(move |c| {
            self.by_first[c]
                .iter()
                .copied()
                .filter(move |&f| !self.calls(f).iter().any(|&x| cover.covers(x)) && !self.closes_cycle(cover, f))
        })
    }

    /// Whether adding fusion `f` as one kernel makes some path leave it and come back, through
    /// chosen kernels (each one node) and uncovered calls. Calls run in a topological order,
    /// so a path at an uncovered call beyond every covered call and every call of `f` only
    /// goes on to such calls: it is not followed.
    fn closes_cycle(&self, cover: &Cover, f: usize) -> bool {
        let ctx = &self.ex.context;
        let (calls, members) = (self.calls(f), &self.ex.fusions[f]);
        let horizon = cover.reach.max(calls[calls.len() - 1] + 1);
        // FxHash: every candidate kernel of every partial plan fills one of these, and SipHash,
        // which guards against keys chosen to collide, took half the search's time.
        let mut seen = rustc_hash::FxHashSet::default();
        let mut stack: Vec<CallId> = calls
            .iter()
            .flat_map(|&c| ctx.consumers(c).iter().copied())
            .filter(|&x| !members.holds(x))
            .collect();
        while let Some(x) = stack.pop() {
            if members.holds(x) {
                return true;
            }
            if (x >= horizon && !cover.covers(x)) || !seen.insert(x) {
                continue;
            }
            let group = match cover.kernel_of.get(x) {
                NONE => std::slice::from_ref(&x),
                OUTSIDE => continue,
                k => self.calls(cover.kernels.get(k as usize) as usize),
            };
            for &y in group {
                seen.insert(y);
                stack.extend(ctx.consumers(y));
            }
        }
        false
    }

    fn plan(&self, p: &Partial, choice: &[u32], rank: usize, cost: f64) -> Plan {
        let ctx = &self.ex.context;
        let order = launch_order(self.ex, &p.cover);
        let kernels = order
            .iter()
            .map(|&k| {
                let (f, i) = (p.cover.kernels.get(k) as usize, choice[k] as usize);
                Kernel::new(ctx, &self.ex.implementations[f].list[i])
            })
            .collect();
        Plan {
            rank,
            predicted_us: cost,
            kernels,
        }
    }
}

/// Kernels in launch order: repeatedly the ready kernel with the lowest call.
fn launch_order(ex: &Exploration, p: &Cover) -> Vec<usize> {
    let first_call = |k: usize| ex.fusions[p.kernels.get(k) as usize].calls[0];
    let next = kernel_successors(ex, p);
    let mut waiting = vec![0usize; next.len()];
    next.iter().flatten().for_each(|&j| waiting[j] += 1);
    let mut ready: BTreeSet<(CallId, usize)> = (0..next.len())
        .filter(|&k| waiting[k] == 0)
        .map(|k| (first_call(k), k))
        .collect();
    let mut order = Vec::with_capacity(next.len());
    while let Some((_, k)) = ready.pop_first() {
        order.push(k);
        for &j in &next[k] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert((first_call(j), j));
            }
        }
    }
    order
}

/// For each kernel of `p`, the other kernels that read its results.
fn kernel_successors(ex: &Exploration, p: &Cover) -> Vec<Vec<usize>> {
    (0..p.kernels.len())
        .map(|k| {
            let calls = &ex.fusions[p.kernels.get(k) as usize].calls;
            let mut successors: Vec<usize> = calls
                .iter()
                .flat_map(|&c| ex.context.consumers(c))
                .map(|&d| p.kernel_of.get(d) as usize)
                .filter(|&j| j != k)
                .collect();
            successors.sort_unstable();
            successors.dedup();
            successors
        })
        .collect()
}

/// A partial plan whose children have been generated, cheapest first.
struct Expanded {
    partial: Partial,
    /// Time of its kernels, each at its fastest implementation.
    g: f64,
    /// (f, fusion) of each child that can be completed, by increasing f.
    children: Vec<(f64, u32)>,
}

/// What a heap entry stands for.
enum Node {
    /// Child `k` of an expanded partial plan, its kernels at their fastest implementations.
    /// Only the cheapest unvisited child of each expanded plan is in the heap; popping it
    /// pushes its next sibling.
    Child { parent: Rc<Expanded>, k: usize },
    /// A complete plan with implementation `choice[k]` of kernel `k`, where `choice` is `base`
    /// with index `raise` raised by one. Implementations are listed fastest first, so raising
    /// one index never makes a plan faster. Every choice is reached once, from the choice with
    /// its last raised index one lower: popping a choice pushes those raising one index at
    /// `raise` or after.
    Choice {
        plan: Rc<Partial>,
        base: Rc<Vec<u32>>,
        raise: Option<usize>,
    },
}

/// A heap entry: `f` is a lower bound on the time of every plan reached from it, exact for a
/// choice.
struct Entry {
    f: f64,
    depth: usize,
    seq: u64,
    node: Node,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// The heap pops the greatest: least f, then the deeper plan, then the older entry.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .f
            .total_cmp(&self.f)
            .then(self.depth.cmp(&other.depth))
            .then(other.seq.cmp(&self.seq))
    }
}

/// Plans best predicted first, produced lazily. Iterating to the end enumerates every plan.
///
/// The search runs over choices of fusions, each kernel at its fastest implementation; a
/// complete one then yields its plans with other implementations, in order of their times,
/// interleaved with the rest through the same heap. Partial plans that differ only in the
/// implementations of their kernels are thus never expanded twice.
pub struct Plans<'e, 'p> {
    search: Search<'e, 'p>,
    /// Partial plans expanded before plans are completed greedily.
    nodes: usize,
    /// Greedy completions that may still fail before the search gives up: on a program where
    /// few plans are free of cycles, each tries as long as a search.
    failures_left: usize,
    heap: BinaryHeap<Entry>,
    seq: u64,
    expanded: usize,
    rank: usize,
    budget_hit: bool,
}

impl<'e, 'p> Plans<'e, 'p> {
    /// The plans of `ex`.
    pub(crate) fn new(ex: &'e Exploration<'p>) -> Self {
        Plans::among(ex, 0..ex.fusions.len())
    }

    /// The plans of `ex` whose kernels are all among `fusions` (indices into `ex.fusions`,
    /// each once).
    pub(crate) fn among(ex: &'e Exploration<'p>, fusions: impl IntoIterator<Item = usize>) -> Self {
        Plans::searching(
            Search::new(ex, fusions, 0..ex.context.calls()),
            ex.limits.max_search_nodes,
            usize::MAX,
        )
    }

    /// Plans of `search`, best first while at most `nodes` partial plans are expanded; past
    /// those, greedy completions until `failures` of them have failed.
    fn searching(search: Search<'e, 'p>, nodes: usize, failures: usize) -> Self {
        let mut plans = Plans {
            search,
            nodes,
            failures_left: failures,
            heap: BinaryHeap::new(),
            seq: 0,
            expanded: 0,
            rank: 0,
            budget_hit: false,
        };
        let root = plans.search.root();
        let root = plans.expand(root, 0.0);
        plans.push_child(Rc::new(root), 0);
        plans
    }

    /// The partial plans beyond which the search completes plans greedily: the node budget,
    /// less on long programs so that the partial plans held (each as long as the program)
    /// stay within the cell budget.
    fn node_budget(&self) -> usize {
        let limits = &self.search.ex.limits;
        let calls = self.search.ex.context.calls().max(1);
        self.nodes.min(limits.max_search_cells / calls)
    }

    /// Whether the node budget ran out: plans from then on are greedy completions, the best
    /// found rather than guaranteed in order.
    pub fn budget_exhausted(&self) -> bool {
        self.budget_hit
    }

    /// `partial` with its children generated and sorted.
    fn expand(&self, partial: Partial, g: f64) -> Expanded {
        let children = self.children(&partial, g);
        Expanded { partial, g, children }
    }

    /// (f, fusion) of each child of `partial` that can be completed, by increasing f.
    fn children(&self, partial: &Partial, g: f64) -> Vec<(f64, u32)> {
        let mut children: Vec<(f64, u32)> = self
            .search
            .extensions(&partial.cover)
            .filter_map(|f| {
                let bound = self.search.bound_with(partial, f)?;
                Some((g + self.search.best_us(f) + Search::heuristic(bound), f as u32))
            })
            .collect();
        children.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        children
    }

    fn push(&mut self, f: f64, depth: usize, node: Node) {
        self.seq += 1;
        self.heap.push(Entry {
            f,
            depth,
            seq: self.seq,
            node,
        });
    }

    fn push_child(&mut self, parent: Rc<Expanded>, k: usize) {
        if let Some(&(f, _)) = parent.children.get(k) {
            let depth = parent.partial.cover.size;
            self.push(f, depth, Node::Child { parent, k });
        }
    }

    /// Plan `plan` with implementations `choice`, its successor choices pushed: the last
    /// kernel's first, so that of plans predicted equal, the one keeping the earlier kernels'
    /// fastest implementations comes first. A successor shares `choice` and names the one
    /// index it raises, and its cost is this one's changed by difference (never below it):
    /// summed afresh, or copied, each would cost as much as the plan is long.
    fn emit(&mut self, plan: Rc<Partial>, choice: Vec<u32>, pivot: usize, cost: f64) -> Emitted {
        let depth = plan.cover.size;
        let choice = Rc::new(choice);
        for k in (pivot..choice.len()).rev() {
            let list = &self.search.ex.implementations[plan.cover.kernels.get(k) as usize].list;
            let i = choice[k] as usize;
            if i + 1 < list.len() {
                let raised = (cost - list[i].time.total_us + list[i + 1].time.total_us).max(cost);
                let node = Node::Choice {
                    plan: plan.clone(),
                    base: choice.clone(),
                    raise: Some(k),
                };
                self.push(raised, depth, node);
            }
        }
        self.rank += 1;
        Emitted { plan, choice, cost }
    }

    /// The plan of child `k` of `parent`, and its cost so far.
    fn child(&self, parent: &Expanded, k: usize) -> (Partial, f64) {
        let f = parent.children[k].1 as usize;
        (self.search.with(&parent.partial, f), parent.g + self.search.best_us(f))
    }

    /// Completes `partial` by always taking its cheapest child, in place.
    fn greedy(&self, mut partial: Partial, mut g: f64) -> (Partial, f64) {
        while partial.cover.first_uncovered().is_some() {
            let Some(&(_, f)) = self.children(&partial, g).first() else {
                return (partial, f64::INFINITY);
            };
            g += self.search.best_us(f as usize);
            self.search.apply(&mut partial, f as usize);
        }
        (partial, g)
    }
}

/// The predicted time of the best cover of the calls `searched` with `fusions` (indices into
/// `ex.fusions`, each once, their calls among those searched) found expanding at most `nodes`
/// partial plans and as many greedy completions, or `None` if none of those is free of cycles.
/// The other calls count as covered by kernels fixed beforehand, which must leave no path from
/// a call searched that comes back to one: then no cycle passes through them, and the search
/// stays within the calls searched, however long the program.
pub(crate) fn best_us_within(
    ex: &Exploration,
    fusions: impl IntoIterator<Item = usize>,
    searched: Range<CallId>,
    nodes: usize,
) -> Option<f64> {
    Plans::searching(Search::new(ex, fusions, searched), nodes, nodes)
        .next_emitted()
        .map(|e| e.cost)
}

/// A complete plan taken from the heap: its kernels, their implementations and its cost.
struct Emitted {
    plan: Rc<Partial>,
    choice: Rc<Vec<u32>>,
    cost: f64,
}

impl Iterator for Plans<'_, '_> {
    type Item = Plan;

    fn next(&mut self) -> Option<Plan> {
        let e = self.next_emitted()?;
        Some(self.search.plan(&e.plan, &e.choice, self.rank, e.cost))
    }
}

impl Plans<'_, '_> {
    fn next_emitted(&mut self) -> Option<Emitted> {
        while let Some(entry) = self.heap.pop() {
            let (parent, k) = match entry.node {
                Node::Choice { plan, base, raise } => {
                    let mut choice = (*base).clone();
                    raise.inspect(|&k| choice[k] += 1);
                    return Some(self.emit(plan, choice, raise.unwrap_or(0), entry.f));
                }
                Node::Child { parent, k } => (parent, k),
            };
            self.push_child(parent.clone(), k + 1);
            let (partial, g) = self.child(&parent, k);
            if partial.cover.first_uncovered().is_none() {
                // Its fastest implementations: no plan from it is faster, and `g` is its cost.
                let depth = partial.cover.size;
                let choice = vec![0; partial.cover.kernels.len()];
                let node = Node::Choice {
                    plan: Rc::new(partial),
                    base: Rc::new(choice),
                    raise: None,
                };
                self.push(g, depth, node);
            } else if self.expanded < self.node_budget() {
                self.expanded += 1;
                let expanded = self.expand(partial, g);
                self.push_child(Rc::new(expanded), 0);
            } else {
                self.budget_hit = true;
                let (partial, g) = self.greedy(partial, g);
                if g.is_finite() {
                    let choice = vec![0; partial.cover.kernels.len()];
                    return Some(self.emit(Rc::new(partial), choice, 0, g));
                }
                if self.failures_left == 0 {
                    return None;
                }
                self.failures_left -= 1;
            }
        }
        None
    }
}

/// Counts plans by depth-first search over partial plans, up to `budget` partial plans. The
/// search walks one [`Cover`] in place, with a stack of its own, so neither memory nor the
/// call stack grows with the program beyond one partial plan.
pub(crate) fn count(ex: &Exploration, budget: usize) -> PlanCount {
    let search = Search::new(ex, 0..ex.fusions.len(), 0..ex.context.calls());
    let mut cover = Cover::empty(ex.context.calls());
    let mut visited = 1usize;
    if cover.first_uncovered().is_none() {
        return PlanCount::new(1, true);
    }
    let frame = |cover: &Cover, fusion: usize, reach: CallId| CountFrame {
        options: search.extensions(cover).collect(),
        next: 0,
        total: 0,
        fusion,
        reach,
    };
    let mut stack = vec![frame(&cover, usize::MAX, 0)];
    loop {
        let top = stack.last_mut().expect("the root frame stays until the end");
        if top.next < top.options.len() && visited <= budget {
            let f = top.options[top.next];
            top.next += 1;
            visited += 1;
            let reach = cover.reach;
            cover.add(f, search.calls(f));
            if cover.first_uncovered().is_none() {
                cover.remove_last(search.calls(f), reach);
                top.total = top.total.saturating_add(implementations(ex, f));
            } else {
                let next = frame(&cover, f, reach);
                stack.push(next);
            }
            continue;
        }
        let done = stack.pop().expect("the loop ends with the root frame");
        let Some(parent) = stack.last_mut() else {
            return PlanCount::new(done.total, visited <= budget);
        };
        cover.remove_last(search.calls(done.fusion), done.reach);
        let plans = implementations(ex, done.fusion).saturating_mul(done.total);
        parent.total = parent.total.saturating_add(plans);
    }
}

/// A partial plan being counted: the fusions that may extend it and the plans counted so far.
struct CountFrame {
    options: Vec<usize>,
    next: usize,
    total: u128,
    /// The fusion whose kernel made this partial plan, and the reach before it.
    fusion: usize,
    reach: CallId,
}

/// The implementations of fusion `f`.
fn implementations(ex: &Exploration, f: usize) -> u128 {
    ex.implementations[f].list.len() as u128
}

#[cfg(test)]
mod tests {
    use super::PlanCount;

    #[test]
    fn a_saturated_count_is_a_lower_bound() {
        assert_eq!(PlanCount::new(u128::MAX, true).to_string(), "more than 10^38");
        assert_eq!(PlanCount::new(12, true).to_string(), "12");
        assert_eq!(PlanCount::new(12, false).to_string(), "more than 12");
    }
}
