//! The fusibility rules (paper §3.2), each a named function that either lets a set of calls
//! share a kernel or says why not. The fusion enumerator applies them; `fuse explain` reports
//! them.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::explore::callset::CallSet;
use crate::explore::context::Context;
use crate::program::{CallId, ValueId};

/// A named fusibility rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// BLAS-1 fuses with BLAS-1, BLAS-2 with BLAS-2: mixing levels repeats the BLAS-1 work per
    /// tile and saves no traffic (paper §3.2.3).
    SameNestingLevel,
    /// A reduce's final result exists only after a global barrier, so no call of the kernel
    /// that computes it may read it (partial reductions are fine). On a target with a row
    /// barrier, row sums may be read in the rows they are finished for.
    GlobalBarrier,
    /// The calls must map blocks to the same data: the same sub-vectors, or the same 2D grid of
    /// tiles.
    SameBlockMapping,
    /// Every call must share an array with the rest of the fusion (an input read once, or a
    /// temporary that never goes to memory); scalars alone save nothing.
    SavesTraffic,
    /// No call outside the fusion may both read from it and feed it: it would have to run in
    /// the middle of the kernel.
    Convex,
    /// Some implementation must fit the device's shared memory and threads per block.
    ResourceLimit,
}

impl Rule {
    /// The rule's name as printed: `global-barrier`.
    pub fn name(self) -> &'static str {
        match self {
            Rule::SameNestingLevel => "same-nesting-level",
            Rule::GlobalBarrier => "global-barrier",
            Rule::SameBlockMapping => "same-block-mapping",
            Rule::SavesTraffic => "saves-traffic",
            Rule::Convex => "convex",
            Rule::ResourceLimit => "resource-limit",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a set of calls cannot be one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The rule broken.
    pub rule: Rule,
    /// The calls involved.
    pub calls: Vec<CallId>,
    /// The value involved, where one is.
    pub value: Option<ValueId>,
    /// One line for people.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.message)
    }
}

/// Rule [`Rule::SameNestingLevel`] for two calls.
pub fn same_nesting_level(ctx: &Context, a: CallId, b: CallId) -> Result<(), Violation> {
    let (ka, kb) = (ctx.program.calls[a].kind, ctx.program.calls[b].kind);
    if ka.nesting_level() == kb.nesting_level() {
        return Ok(());
    }
    Err(Violation {
        rule: Rule::SameNestingLevel,
        calls: vec![a, b],
        value: None,
        message: format!(
            "`{}` is {ka} (BLAS-{}) and `{}` is {kb} (BLAS-{}): different nesting levels",
            ctx.text(a),
            ka.nesting_level(),
            ctx.text(b),
            kb.nesting_level()
        ),
    })
}

/// Rule [`Rule::GlobalBarrier`] for two calls, in either order.
pub fn global_barrier(ctx: &Context, a: CallId, b: CallId) -> Result<(), Violation> {
    for (producer, consumer) in [(a, b), (b, a)] {
        let value = ctx.program.calls[producer].result;
        if ctx.is_reduce(producer)
            && ctx.consumes(producer, consumer)
            && !ctx.reads_finished_row_sums(producer, consumer)
        {
            return Err(Violation {
                rule: Rule::GlobalBarrier,
                calls: vec![producer, consumer],
                value: Some(value),
                message: format!(
                    "`{}` reduces: `{}` is complete only {}, so `{}` must run in a later {}",
                    ctx.text(producer),
                    ctx.name(value),
                    ctx.words.barrier(),
                    ctx.text(consumer),
                    ctx.words.kernel()
                ),
            });
        }
    }
    Ok(())
}

/// Rule [`Rule::SameBlockMapping`] for two calls.
pub fn same_block_mapping(ctx: &Context, a: CallId, b: CallId) -> Result<(), Violation> {
    let (sa, sb) = (&ctx.mappings[a].space, &ctx.mappings[b].space);
    if sa == sb {
        return Ok(());
    }
    Err(Violation {
        rule: Rule::SameBlockMapping,
        calls: vec![a, b],
        value: None,
        message: format!(
            "`{}` runs on {sa} but `{}` on {sb}: {} would not hold the same data",
            ctx.text(a),
            ctx.text(b),
            ctx.words.workers()
        ),
    })
}

/// The pairwise rules, in the order they are reported.
pub fn pair(ctx: &Context, a: CallId, b: CallId) -> Result<(), Violation> {
    same_nesting_level(ctx, a, b)?;
    global_barrier(ctx, a, b)?;
    same_block_mapping(ctx, a, b)
}

/// Rule [`Rule::SavesTraffic`]: the members are connected through arrays they share.
pub fn saves_traffic(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    let calls = members.as_slice();
    let (Some(&first), Some(&last)) = (calls.first(), calls.last()) else {
        return Ok(());
    };
    // Walked through each array once, not from each member to each call sharing it: an input
    // that every call reads would cost the square of the members. Calls are looked up by
    // their offset from `first`, as the arrays of a long run of members touch most of them.
    let mut walked = vec![false; ctx.program.values.len()];
    let mut member = vec![false; last - first + 1];
    calls.iter().for_each(|&c| member[c - first] = true);
    let mut reached = vec![false; last - first + 1];
    reached[0] = true;
    let mut stack = vec![first];
    while let Some(c) = stack.pop() {
        for v in ctx.arrays(c) {
            if std::mem::replace(&mut walked[v], true) {
                continue;
            }
            for d in ctx.touching(v, first..=last) {
                if member[d - first] && !reached[d - first] {
                    reached[d - first] = true;
                    stack.push(d);
                }
            }
        }
    }
    let Some(&alone) = calls.iter().find(|&&c| !reached[c - first]) else {
        return Ok(());
    };
    Err(Violation {
        rule: Rule::SavesTraffic,
        calls: vec![first, alone],
        value: None,
        message: format!(
            "`{}` shares no vector or matrix with `{}`: fusing them saves no memory traffic",
            ctx.text(alone),
            ctx.text(first)
        ),
    })
}

/// Rule [`Rule::Convex`]: no path leaves the members and comes back.
pub fn convex(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    let last = members.last().unwrap_or(0);
    // A call walked from an earlier start leads to no member (that walk would have stopped),
    // so later walks skip it and still find the same first member: together they cost one.
    let mut seen = HashSet::new();
    for m in members.iter() {
        for outside in ctx
            .consumers(m)
            .iter()
            .copied()
            .filter(|&x| !members.contains(x) && x < last)
        {
            if let Some(back) = reaches(ctx, outside, members, last, &mut seen) {
                return Err(Violation {
                    rule: Rule::Convex,
                    calls: vec![m, outside, back],
                    value: None,
                    message: format!(
                        "`{}` reads `{}` and feeds `{}`: it would have to run inside the {}",
                        ctx.text(outside),
                        ctx.text(m),
                        ctx.text(back),
                        ctx.words.kernel()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The first member reachable from `start` through non-members and calls not in `seen`
/// (calls are in topological order, so nothing after `last` can lead back).
fn reaches(
    ctx: &Context,
    start: CallId,
    members: &CallSet,
    last: CallId,
    seen: &mut HashSet<CallId>,
) -> Option<CallId> {
    if !seen.insert(start) {
        return None;
    }
    let mut stack = vec![start];
    while let Some(c) = stack.pop() {
        for &d in ctx.consumers(c).iter().filter(|&&d| d <= last) {
            if members.contains(d) {
                return Some(d);
            }
            if seen.insert(d) {
                stack.push(d);
            }
        }
    }
    None
}

/// Every structural rule for a candidate fusion (resources are checked per implementation).
pub fn check(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    check_convex(ctx, members)?;
    convex(ctx, members)
}

/// [`check`] for members known to be convex, as the calls on the paths between two calls are.
pub fn check_convex(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    pairs(ctx, members)?;
    saves_traffic(ctx, members)
}

/// The pairwise rules for every two members: the first pair in call order that breaks one.
/// Two calls of one nesting level and block mapping conflict only where a reduce feeds the
/// other, so each member is checked against the members it feeds and the first later member
/// of another level or mapping, not against every member.
fn pairs(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    let calls = members.as_slice();
    let class = |c: CallId| (ctx.program.calls[c].kind.nesting_level(), &ctx.mappings[c].space);
    // For each member, the first later member of another class, if any.
    let mut other = vec![None; calls.len()];
    for k in (1..calls.len()).rev() {
        other[k - 1] = match class(calls[k]) != class(calls[k - 1]) {
            true => Some(calls[k]),
            false => other[k],
        };
    }
    for (&a, other) in calls.iter().zip(other) {
        let before_other = |&&d: &&CallId| other.is_none_or(|o| d < o);
        if ctx.is_reduce(a) {
            for &d in ctx.consumers(a).iter().take_while(before_other) {
                if members.contains(d) {
                    pair(ctx, a, d)?;
                }
            }
        }
        if let Some(o) = other {
            pair(ctx, a, o)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{script, Library, Program};

    fn program(inputs: &str, calls: &str, outputs: &str) -> Program {
        let text =
            format!("sizes: {{m: 64, n: 64, k: 32}}\ninputs: {{{inputs}}}\noutputs: [{outputs}]\ncalls:\n{calls}");
        script::parse("t.yaml", &text, &Library::builtin().unwrap()).unwrap()
    }

    fn with<T>(p: &Program, f: impl FnOnce(&Context) -> T) -> T {
        f(&Context::new(p, &p.sizes))
    }

    #[test]
    fn nesting_levels_must_match() {
        let p = program(
            "A: [m, n], x: [n]",
            "  - y = sgemv(A, x)\n  - z = sscal(2.0, x)\n",
            "y, z",
        );
        let v = with(&p, |c| same_nesting_level(c, 0, 1)).unwrap_err();
        assert_eq!(v.rule, Rule::SameNestingLevel);
        assert!(v.message.contains("different nesting levels"), "{v}");
        with(&p, |c| same_nesting_level(c, 0, 0)).unwrap();
    }

    #[test]
    fn a_reduce_result_is_never_read_in_its_own_kernel() {
        let p = program(
            "x: [n], y: [n]",
            "  - r = sdot(x, y)\n  - z = sscal(r, x)\n  - w = saxpy(2.0, x, y)\n",
            "z, w",
        );
        let v = with(&p, |c| global_barrier(c, 1, 0)).unwrap_err();
        assert_eq!(
            (v.rule, v.calls.clone(), v.value),
            (Rule::GlobalBarrier, vec![0, 1], p.value("r"))
        );
        // A partial reduction may share a kernel with calls that do not read its result.
        with(&p, |c| global_barrier(c, 0, 2)).unwrap();
    }

    #[test]
    fn a_nested_reduce_result_needs_the_barrier_too() {
        // Rows of 40000 f32 do not fit a whole-row block's registers.
        let p = program("A: [m, n], x: [n]", "  - t = sgemv(A, x)\n  - y = sgemtv(A, t)\n", "y");
        let wide = p.bind_sizes(&[("n".to_string(), 40000)]).unwrap();
        assert_eq!(
            pair(&Context::new(&p, &wide), 0, 1).unwrap_err().rule,
            Rule::GlobalBarrier
        );
    }

    #[test]
    fn a_row_barrier_lets_row_sums_feed_their_own_rows_only() {
        let p = program(
            "A: [m, n], x: [n], y: [m]",
            "  - t = sgemv(A, x)\n  - u = sgemtv(A, t)\n  - s = sgemtv(A, y)\n  - w = sgemv(A, s)\n  - d = sdot(t, t)\n  - v = sscal(d, y)\n",
            "u, w, v",
        );
        let rows = |a, b| pair(&Context::new(&p, &p.sizes).with_row_barrier(true), a, b);
        // `t[i]` is finished in the rows that read it; ATAX's pair shares a kernel — on a GPU
        // only while a block holds whole rows (rows of 40000 f32 it does not).
        rows(0, 1).unwrap();
        with(&p, |c| pair(c, 0, 1)).unwrap();
        let wide = p.bind_sizes(&[("n".to_string(), 40000)]).unwrap();
        assert_eq!(
            pair(&Context::new(&p, &wide), 0, 1).unwrap_err().rule,
            Rule::GlobalBarrier
        );
        pair(&Context::new(&p, &wide).with_row_barrier(true), 0, 1).unwrap();
        // A column sum needs every row, and a BLAS-1 reduce every block: barriers still.
        assert_eq!(rows(2, 3).unwrap_err().rule, Rule::GlobalBarrier);
        assert_eq!(rows(4, 5).unwrap_err().rule, Rule::GlobalBarrier);
        // Only where every element read is of its own row: a unit triangle's `t[i] +
        // Σ_{j<i} S[i,j]·t[j]` also reads the rows before.
        let unit = program(
            "S: [n, n], x: [n]",
            "  - t = strmv_lower(S, x)\n  - z = strmv_lower_unit(S, t)\n",
            "z",
        );
        let barrier = pair(&Context::new(&unit, &unit.sizes).with_row_barrier(true), 0, 1);
        assert_eq!(barrier.unwrap_err().rule, Rule::GlobalBarrier);
    }

    #[test]
    fn gemv_and_gemtv_over_the_same_tiles_agree_on_the_mapping() {
        let p = program(
            "A: [m, n], B: [n, m], p: [n], r: [m]",
            "  - q = sgemv(A, p)\n  - s = sgemtv(A, r)\n  - u = sgemv(B, r)\n",
            "q, s, u",
        );
        with(&p, |c| same_block_mapping(c, 0, 1)).unwrap();
        assert_eq!(
            with(&p, |c| same_block_mapping(c, 0, 2)).unwrap_err().rule,
            Rule::SameBlockMapping
        );
        let q = program(
            "x: [n], y: [k]",
            "  - a = sscal(2.0, x)\n  - b = sscal(2.0, y)\n",
            "a, b",
        );
        assert_eq!(
            with(&q, |c| same_block_mapping(c, 0, 1)).unwrap_err().rule,
            Rule::SameBlockMapping
        );
    }

    #[test]
    fn sharing_only_a_scalar_saves_no_traffic() {
        let p = program(
            "x: [n], y: [n], a: scalar",
            "  - u = sscal(a, x)\n  - v = sscal(a, y)\n  - w = sadd(u, y)\n",
            "v, w",
        );
        let v = with(&p, |c| saves_traffic(c, &CallSet::of(&[0, 1]))).unwrap_err();
        assert_eq!(v.rule, Rule::SavesTraffic);
        with(&p, |c| saves_traffic(c, &CallSet::of(&[0, 1, 2]))).unwrap();
        with(&p, |c| saves_traffic(c, &CallSet::of(&[0, 2]))).unwrap();
    }

    #[test]
    fn a_path_leaving_and_reentering_the_fusion_is_rejected() {
        // GEMVER's shape: B feeds gemtv, whose result feeds gemv, which also reads B.
        let p = program(
            "A: [m, n], y: [m]",
            "  - B = smadd(A, A)\n  - x = sgemtv(B, y)\n  - w = sgemv(B, x)\n",
            "w",
        );
        let v = with(&p, |c| convex(c, &CallSet::of(&[0, 2]))).unwrap_err();
        assert_eq!((v.rule, v.calls.clone()), (Rule::Convex, vec![0, 1, 2]));
        with(&p, |c| convex(c, &CallSet::of(&[0, 1]))).unwrap();
        assert_eq!(
            with(&p, |c| check(c, &CallSet::of(&[0, 1, 2]))).unwrap_err().rule,
            Rule::GlobalBarrier
        );
    }
}
