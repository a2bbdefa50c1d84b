//! Plans (paper §4.2, "combinations of fusion implementations"): kernels that cover every call
//! exactly once, in an order that respects every dependency, predicted best first.
//!
//! Plans are produced lazily by a best-first (A*) search over partial plans. A partial plan
//! always extends the lowest uncovered call (in script order, which is topological) with a
//! fusion whose calls are all uncovered, so every plan is reached exactly once. A fusion that
//! would close a cycle between kernels (through covered kernels or uncovered calls) is never
//! added, so every partial plan can be completed — leaving the rest unfused always works. The
//! heuristic charges each uncovered call the least share of a kernel's time it can have
//! (kernel time over calls), a lower bound, so complete plans come out in predicted order.
//! Deterministic node budgets, not clocks, bound the search on large scripts.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt::Write;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::explore::callset::CallSet;
use crate::explore::implementation::{dataflow, Block, Implementation, Reduction};
use crate::explore::mapping::Axis;
use crate::explore::predict::KernelTime;
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
    /// Block shape.
    pub block: Block,
    /// Serial iterations per block.
    pub serial_iterations: u32,
    /// For tile grids, the direction each block walks its iterations in.
    pub walk: Option<Axis>,
    /// Blocks in the grid.
    pub blocks: u64,
    /// Shared memory per block, bytes.
    pub shared_bytes: u64,
    /// How each partial reduction is finished.
    pub reductions: Vec<Reduction>,
    /// Predicted times.
    pub predicted: KernelTime,
}

impl Kernel {
    fn new(ctx: &crate::explore::Context, imp: &Implementation) -> Kernel {
        let flow = dataflow(ctx, &imp.order);
        Kernel {
            calls: imp.order.clone(),
            variants: imp.variants.clone(),
            loads: flow.loads,
            stores: flow.stores,
            on_chip: flow.on_chip,
            parameters: flow.parameters,
            block: imp.block,
            serial_iterations: imp.serial_iterations,
            walk: imp.walk,
            blocks: imp.blocks,
            shared_bytes: imp.shared_bytes,
            reductions: imp.reductions.clone(),
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
    /// The plan as text, calls and values named as in `program`.
    pub fn describe(&self, program: &Program) -> String {
        let mut out = String::new();
        let kernels = self.kernels.len();
        let s = if kernels == 1 { "" } else { "s" };
        let _ = writeln!(
            out,
            "plan {}: {:.2} µs, {kernels} kernel{s}",
            self.rank, self.predicted_us
        );
        for (k, kernel) in self.kernels.iter().enumerate() {
            describe_kernel(&mut out, program, k + 1, kernel);
        }
        out
    }
}

fn describe_kernel(out: &mut String, program: &Program, number: usize, k: &Kernel) {
    let t = &k.predicted;
    let names = |ids: &[ValueId]| match ids {
        [] => "—".to_string(),
        _ => ids
            .iter()
            .map(|&v| program.values[v].variable.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    };
    let _ = writeln!(
        out,
        "  kernel {number}: {:.2} µs = max(transfer {:.2}, compute {:.2}) + launch {:.2} + finish {:.2}",
        t.total_us, t.transfer_us, t.compute_us, t.launch_us, t.finish_us
    );
    let walk = k.walk.map(|w| format!(" {}", w.walk())).unwrap_or_default();
    let _ = writeln!(
        out,
        "    {} blocks × {} threads ({} instance{}), {} serial iteration{}{walk}, {} B shared",
        k.blocks,
        k.block.threads,
        k.block.instances,
        if k.block.instances == 1 { "" } else { "s" },
        k.serial_iterations,
        if k.serial_iterations == 1 { "" } else { "s" },
        k.shared_bytes
    );
    for (c, variant) in k.calls.iter().zip(&k.variants) {
        let finish = k
            .reductions
            .iter()
            .find(|r| r.call == *c)
            .map(|r| format!("; {}", r.finish));
        let _ = writeln!(
            out,
            "    {}  [{variant}{}]",
            program.calls[*c].text,
            finish.unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "    loads {} · stores {} · on chip {}",
        names(&k.loads),
        names(&k.stores),
        names(&k.on_chip)
    );
}

/// How many plans exist; `exact` is false when counting stopped at its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanCount {
    /// Plans counted.
    pub count: u128,
    /// Whether that is all of them.
    pub exact: bool,
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

/// Which fusions a search may use.
pub type FusionFilter<'e> = Box<dyn Fn(&[CallId]) -> bool + 'e>;

/// A partial plan: the kernels chosen so far.
#[derive(Debug, Clone)]
struct Partial {
    covered: CallSet,
    /// For each call, the index in `kernels` of the kernel covering it, or `NONE`.
    kernel_of: Vec<u32>,
    /// (fusion, implementation) of each kernel, in the order chosen.
    kernels: Vec<(u32, u32)>,
}

const NONE: u32 = u32::MAX;

impl Partial {
    fn empty(calls: usize) -> Self {
        Partial {
            covered: CallSet::empty(calls),
            kernel_of: vec![NONE; calls],
            kernels: Vec::new(),
        }
    }

    fn first_uncovered(&self) -> Option<CallId> {
        self.kernel_of.iter().position(|&k| k == NONE)
    }

    fn with(&self, calls: &[CallId], fusion: usize, implementation: usize) -> Partial {
        let mut next = self.clone();
        let k = next.kernels.len() as u32;
        for &c in calls {
            next.covered.insert(c);
            next.kernel_of[c] = k;
        }
        next.kernels.push((fusion as u32, implementation as u32));
        next
    }
}

/// The search over an exploration's fusions.
struct Search<'e, 'p> {
    ex: &'e Exploration<'p>,
    /// Fusions by their lowest call.
    by_first: Vec<Vec<usize>>,
    /// Least share of a kernel's time each call can carry.
    share: Vec<f64>,
}

impl<'e, 'p> Search<'e, 'p> {
    fn new(ex: &'e Exploration<'p>, filter: Option<FusionFilter<'e>>) -> Self {
        let n = ex.context.calls();
        let mut by_first = vec![Vec::new(); n];
        let mut share = vec![f64::INFINITY; n];
        for (f, fusion) in ex.fusions.iter().enumerate() {
            let allowed = filter.as_ref().is_none_or(|keep| keep(&fusion.calls));
            let Some(best) = ex.implementations[f].list.first().filter(|_| allowed) else {
                continue;
            };
            by_first[fusion.calls[0]].push(f);
            let per_call = best.time.total_us / fusion.calls.len() as f64;
            for &c in &fusion.calls {
                share[c] = share[c].min(per_call);
            }
        }
        Search { ex, by_first, share }
    }

    /// A lower bound on the time of the kernels still to choose; shaved by a relative 1e-9
    /// so that rounding never makes it exceed the true cost.
    fn heuristic(&self, p: &Partial) -> f64 {
        let h: f64 = (0..self.share.len())
            .filter(|&c| !p.covered.contains(c))
            .map(|c| self.share[c])
            .sum();
        h * (1.0 - 1e-9)
    }

    /// The fusions that may extend `p`.
    fn extensions<'s>(&'s self, p: &'s Partial) -> impl Iterator<Item = usize> + 's {
        let first = p.first_uncovered();
        first.into_iter().flat_map(move |c| {
            self.by_first[c].iter().copied().filter(move |&f| {
                let calls = &self.ex.fusions[f].calls;
                calls.iter().all(|&d| !p.covered.contains(d)) && !self.closes_cycle(p, calls)
            })
        })
    }

    /// Whether adding `calls` as one kernel makes some path leave it and come back, through
    /// chosen kernels (each one node) and uncovered calls.
    fn closes_cycle(&self, p: &Partial, calls: &[CallId]) -> bool {
        let ctx = &self.ex.context;
        let members = CallSet::of(ctx.calls(), calls);
        let mut seen = CallSet::empty(ctx.calls());
        let mut stack: Vec<CallId> = calls
            .iter()
            .flat_map(|&c| ctx.consumers[c].iter())
            .filter(|&x| !members.contains(x))
            .collect();
        while let Some(x) = stack.pop() {
            if members.contains(x) {
                return true;
            }
            if seen.contains(x) {
                continue;
            }
            let group = match p.kernel_of[x] {
                NONE => vec![x],
                k => self.ex.fusions[p.kernels[k as usize].0 as usize].calls.clone(),
            };
            for y in group {
                seen.insert(y);
                stack.extend(ctx.consumers[y].iter());
            }
        }
        false
    }

    fn plan(&self, p: &Partial, rank: usize, cost: f64) -> Plan {
        let ctx = &self.ex.context;
        let order = launch_order(self.ex, p);
        let kernels = order
            .iter()
            .map(|&k| {
                let (f, i) = p.kernels[k];
                Kernel::new(ctx, &self.ex.implementations[f as usize].list[i as usize])
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
fn launch_order(ex: &Exploration, p: &Partial) -> Vec<usize> {
    let first_call = |k: usize| ex.fusions[p.kernels[k].0 as usize].calls[0];
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
fn kernel_successors(ex: &Exploration, p: &Partial) -> Vec<Vec<usize>> {
    let count = p.kernels.len();
    let mut next = vec![Vec::new(); count];
    for (k, successors) in next.iter_mut().enumerate() {
        let mut seen = CallSet::empty(count);
        seen.insert(k);
        for &c in &ex.fusions[p.kernels[k].0 as usize].calls {
            for d in ex.context.consumers[c].iter() {
                let j = p.kernel_of[d] as usize;
                if !seen.contains(j) {
                    seen.insert(j);
                    successors.push(j);
                }
            }
        }
    }
    next
}

/// A partial plan whose children have been generated, cheapest first.
struct Expanded {
    partial: Partial,
    g: f64,
    /// (f, fusion, implementation) of each child, by increasing f.
    children: Vec<(f64, u32, u32)>,
}

/// A heap entry: child `k` of an expanded partial plan. Only the cheapest unvisited child of
/// each expanded plan is in the heap; popping it pushes its next sibling, so the heap grows by
/// at most two entries per pop.
struct Entry {
    f: f64,
    depth: usize,
    seq: u64,
    parent: Rc<Expanded>,
    k: usize,
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
pub struct Plans<'e, 'p> {
    search: Search<'e, 'p>,
    heap: BinaryHeap<Entry>,
    seq: u64,
    expanded: usize,
    rank: usize,
    budget_hit: bool,
}

impl<'e, 'p> Plans<'e, 'p> {
    pub(crate) fn new(ex: &'e Exploration<'p>, filter: Option<FusionFilter<'e>>) -> Self {
        let search = Search::new(ex, filter);
        let mut plans = Plans {
            search,
            heap: BinaryHeap::new(),
            seq: 0,
            expanded: 0,
            rank: 0,
            budget_hit: false,
        };
        let root = plans.expand(Partial::empty(ex.context.calls()), 0.0);
        plans.push(Rc::new(root), 0);
        plans
    }

    /// Whether the node budget ran out: plans from then on are greedy completions, the best
    /// found rather than guaranteed in order.
    pub fn budget_exhausted(&self) -> bool {
        self.budget_hit
    }

    /// `partial` with its children generated and sorted.
    fn expand(&self, partial: Partial, g: f64) -> Expanded {
        let h = self.search.heuristic(&partial);
        let mut children = Vec::new();
        for f in self.search.extensions(&partial) {
            let calls = &self.search.ex.fusions[f].calls;
            let h_child = h - calls.iter().map(|&c| self.search.share[c]).sum::<f64>() * (1.0 - 1e-9);
            for (i, imp) in self.search.ex.implementations[f].list.iter().enumerate() {
                children.push((g + imp.time.total_us + h_child.max(0.0), f as u32, i as u32));
            }
        }
        children.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        Expanded { partial, g, children }
    }

    fn push(&mut self, parent: Rc<Expanded>, k: usize) {
        if let Some(&(f, _, _)) = parent.children.get(k) {
            let depth = parent.partial.covered.len();
            self.seq += 1;
            self.heap.push(Entry {
                f,
                depth,
                seq: self.seq,
                parent,
                k,
            });
        }
    }

    /// The plan of child `k` of `parent`, and its cost so far.
    fn child(&self, parent: &Expanded, k: usize) -> (Partial, f64) {
        let (_, f, i) = parent.children[k];
        let calls = &self.search.ex.fusions[f as usize].calls;
        let time = self.search.ex.implementations[f as usize].list[i as usize]
            .time
            .total_us;
        (parent.partial.with(calls, f as usize, i as usize), parent.g + time)
    }

    /// Completes `partial` by always taking its cheapest child.
    fn greedy(&self, mut partial: Partial, mut g: f64) -> (Partial, f64) {
        while partial.first_uncovered().is_some() {
            let expanded = self.expand(partial, g);
            if expanded.children.is_empty() {
                return (expanded.partial, f64::INFINITY);
            }
            (partial, g) = self.child(&expanded, 0);
        }
        (partial, g)
    }
}

impl Iterator for Plans<'_, '_> {
    type Item = Plan;

    fn next(&mut self) -> Option<Plan> {
        while let Some(entry) = self.heap.pop() {
            self.push(entry.parent.clone(), entry.k + 1);
            let (partial, g) = self.child(&entry.parent, entry.k);
            let (partial, g) = if partial.first_uncovered().is_none() {
                (partial, g)
            } else if self.expanded >= self.search.ex.limits.max_search_nodes {
                self.budget_hit = true;
                self.greedy(partial, g)
            } else {
                self.expanded += 1;
                let expanded = self.expand(partial, g);
                self.push(Rc::new(expanded), 0);
                continue;
            };
            if g.is_finite() {
                self.rank += 1;
                return Some(self.search.plan(&partial, self.rank, g));
            }
        }
        None
    }
}

/// Counts plans by depth-first search over partial plans, up to `budget` partial plans.
pub(crate) fn count(ex: &Exploration, budget: usize) -> PlanCount {
    let search = Search::new(ex, None);
    let mut visited = 0usize;
    let root = Partial::empty(ex.context.calls());
    let count = count_from(&search, &root, budget, &mut visited);
    PlanCount {
        count,
        exact: visited <= budget,
    }
}

fn count_from(search: &Search, p: &Partial, budget: usize, visited: &mut usize) -> u128 {
    *visited += 1;
    if p.first_uncovered().is_none() {
        return 1;
    }
    let mut total: u128 = 0;
    for f in search.extensions(p).collect::<Vec<_>>() {
        if *visited > budget {
            break;
        }
        let options = search.ex.implementations[f].list.len() as u128;
        let next = p.with(&search.ex.fusions[f].calls, f, 0);
        total = total.saturating_add(options.saturating_mul(count_from(search, &next, budget, visited)));
    }
    total
}
