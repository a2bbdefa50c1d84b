//! `fuse explain` and the structural rules as first written — every fusion scanned for each
//! pair, a walk from every call between two, every two members checked — kept as the
//! reference that the indexed and linear versions must agree with, message for message.

use std::collections::HashSet;

use proptest::prelude::*;

use crate::explore::callset::CallSet;
use crate::explore::context::Context;
use crate::explore::explain::{self, sharing_pairs, Neighbourhood, PairExplanation, Verdict, Why};
use crate::explore::plan::Plans;
use crate::explore::rules::{self, Rule, Violation};
use crate::explore::tests::{chain, explored, kind, library, load, rounds};
use crate::explore::{explore, Exploration, Limits, Plan, TimingTable};
use crate::program::CallId;
use crate::testing::{programs, SEQUENCES};
use crate::{script, Program};

fn reference_explain(ex: &Exploration, best: &Plan) -> Vec<PairExplanation> {
    (sharing_pairs(ex).into_iter())
        .map(|((first, second), values)| PairExplanation {
            first,
            second,
            values,
            verdict: verdict(ex, best, first, second),
        })
        .collect()
}

fn verdict(ex: &Exploration, best: &Plan, a: CallId, b: CallId) -> Verdict {
    let kernel = |c: CallId| best.kernels.iter().position(|k| k.calls.contains(&c));
    match kernel(a) == kernel(b) {
        true => Verdict::Fused {
            kernel: kernel(a).unwrap() + 1,
        },
        false => apart(ex, best, a, b),
    }
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
        return Neighbourhood::new(ex, best).slower(a, b);
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
    let hull = between(ex, a, b);
    if hull.len() > ex.limits.max_fusion_calls {
        return explain::hull_too_long(ex);
    }
    match check(&ex.context, &hull) {
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

fn check(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    let calls: Vec<CallId> = members.iter().collect();
    for (k, &a) in calls.iter().enumerate() {
        for &b in &calls[k + 1..] {
            rules::pair(ctx, a, b)?;
        }
    }
    saves_traffic(ctx, members)?;
    convex(ctx, members)
}

fn saves_traffic(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    let Some(first) = members.first() else { return Ok(()) };
    let mut reached = CallSet::of(&[first]);
    let mut stack = vec![first];
    while let Some(c) = stack.pop() {
        for d in ctx.array_neighbours(c) {
            if members.contains(d) && !reached.contains(d) {
                reached.insert(d);
                stack.push(d);
            }
        }
    }
    let Some(alone) = members.iter().find(|&m| !reached.contains(m)) else {
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

fn convex(ctx: &Context, members: &CallSet) -> Result<(), Violation> {
    let last = members.last().unwrap_or(0);
    for m in members.iter() {
        for outside in ctx
            .consumers(m)
            .iter()
            .copied()
            .filter(|&x| !members.contains(x) && x < last)
        {
            if let Some(back) = reaches(ctx, outside, members, last) {
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

fn reaches(ctx: &Context, start: CallId, members: &CallSet, last: CallId) -> Option<CallId> {
    let mut seen = HashSet::from([start]);
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

/// The explanations of `ex`'s best plan, checked against the reference; returned for tallies.
fn check_explain(ex: &Exploration) -> Vec<PairExplanation> {
    let best = ex.best();
    let got = explain::explain(ex, &best);
    assert_eq!(got, reference_explain(ex, &best), "{}", ex.program().name);
    got
}

/// The built-in table, the same for a target with a row barrier (the CPU's), and tables whose
/// small shared memory makes some fusions slower or unimplementable.
fn tables() -> Vec<TimingTable> {
    let gpu = TimingTable::builtin().unwrap();
    let mut cpu = gpu.clone();
    cpu.device.row_barrier = true;
    let builtin = std::fs::read_to_string("../../library/timings/h100-analytic.yaml").unwrap();
    let small = |block: &str, sm: &str| {
        let text = builtin
            .replace(
                "max_shared_per_block: 232448",
                &format!("max_shared_per_block: {block}"),
            )
            .replace("shared_per_sm: 233472", &format!("shared_per_sm: {sm}"));
        TimingTable::parse("small.yaml", &text).unwrap()
    };
    vec![gpu, cpu, small("1000", "1000"), small("400", "233472")]
}

#[test]
fn explanations_match_the_reference() {
    let parse = |name: &str, text: String| script::parse(name, &text, &library()).unwrap();
    let mut programs: Vec<Program> = SEQUENCES.map(load).into();
    programs.extend([chain(24, "y24"), parse("rounds.yaml", rounds(48))]);
    // Calls that all read `x`: far pairs need every call between them and were not explored.
    let reads_x: String = (2..=30)
        .map(|k| format!("  - y{k} = saxpy(2.0, y{}, x)\n", k - 1))
        .collect();
    let text =
        format!("sizes: {{n: 4096}}\ninputs: {{x: [n]}}\noutputs: [y30]\ncalls:\n  - y1 = saxpy(2.0, x, x)\n{reads_x}");
    programs.push(parse("reads-x.yaml", text));
    // Calls sharing only a scalar, or a vector read along rows by one and columns by the other.
    let text = "sizes: {n: 64}\ninputs: {x: [n], y: [n], a: scalar}\noutputs: [u, v]\ncalls:\n  - u = sscal(a, x)\n  - v = sscal(a, y)\n";
    programs.push(parse("scalar.yaml", text.to_string()));
    let text = "sizes: {m: 64, n: 64}\ninputs: {A: [m, n], B: [n, m], p: [n], r: [m]}\noutputs: [q, s, u]\ncalls:\n  - q = sgemv(A, p)\n  - s = sgemtv(A, r)\n  - u = sgemv(B, r)\n";
    programs.push(parse("mappings.yaml", text.to_string()));
    // The resource-limit and predicted-slower cases of the tests of `explain`.
    let text = "sizes: {n: 4096}\ninputs: {x: [n], y: [n], z: [n]}\noutputs: [c]\ncalls:\n  - a = sadd(x, y)\n  - b = sadd(a, z)\n  - c = sadd(b, x)\n";
    programs.push(parse("t.yaml", text.to_string()));
    let text = "sizes: {n: 1048576}\ninputs: {x: [n], y: [n], z: [n], w: [n]}\noutputs: [c]\ncalls:\n  - a = sadd(x, y)\n  - b = sadd(z, w)\n  - c = sadd(a, b)\n";
    programs.push(parse("tree.yaml", text.to_string()));
    let mut kinds = HashSet::new();
    for table in &tables() {
        for program in &programs {
            let Ok(ex) = explore(program, &program.sizes, table, &library(), Limits::default()) else {
                continue;
            };
            kinds.extend(check_explain(&ex).iter().map(|p| kind(&p.verdict)));
        }
    }
    let mut kinds: Vec<String> = kinds.into_iter().collect();
    kinds.sort();
    let every = [
        "fused",
        "global-barrier",
        "not-explored",
        "predicted-slower",
        "resource-limit",
        "same-block-mapping",
        "same-nesting-level",
        "saves-traffic",
    ];
    assert_eq!(kinds, every);
}

#[test]
fn a_script_of_300_calls_sharing_an_input_is_explained_quickly() {
    // Half the calls read `x`: 14 399 pairs, most with long runs of calls between them.
    // Scanning every fusion, walking from every call between and checking every two of them,
    // pair by pair, took the fourth power of the calls: 50 s at 500 calls. Every call of this
    // script reaches every later one, so a pair `max_fusion_calls` or more apart has more calls
    // on its paths than a fusion holds; the reference, too slow for all pairs, checks the rest.
    let program = script::parse("rounds.yaml", &rounds(300), &library()).unwrap();
    let ex = explored(&program, Limits::default());
    let best = ex.best();
    let pairs = explain::explain(&ex, &best);
    assert_eq!(pairs.len(), 14_399);
    let mut near = HashSet::new();
    for pair in &pairs {
        let (a, b) = (pair.first, pair.second);
        if b - a >= ex.limits.max_fusion_calls {
            assert_eq!(kind(&pair.verdict), "not-explored", "{a} {b}: {:?}", pair.verdict);
        } else {
            assert_eq!(pair.verdict, verdict(&ex, &best, a, b), "{a} {b}");
            near.insert(kind(&pair.verdict));
        }
    }
    assert_eq!(near.len(), 4, "{near:?}");
}

#[test]
fn a_pair_of_a_long_chain_is_searched_near_it() {
    // Every pair of neighbours in a chain is fusible; those apart in the best plan were each
    // searched over the whole chain, which took the cube of its length.
    let program = chain(2000, "y2000");
    let ex = explored(&program, Limits::default());
    let best = ex.best();
    let near = Neighbourhood::new(&ex, &best);
    let mut slower = 0;
    for pair in explain::explain(&ex, &best) {
        if let Verdict::Apart {
            why: Why::PredictedSlower { fused_us, best_us },
            ..
        } = pair.verdict
        {
            slower += 1;
            assert!(fused_us >= best_us, "{pair:?}");
            let span = near.near(pair.first, pair.second).searched.len();
            assert!(
                span <= 4 * ex.limits.max_fusion_calls,
                "{pair:?}: {span} calls searched"
            );
        }
    }
    assert!(slower > 100, "{slower} pairs predicted slower fused");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_explanations_match_the_reference(program in programs(12)) {
        let limits = Limits { max_fusion_calls: 3, ..Limits::default() };
        check_explain(&explored(&program, Limits::default()));
        check_explain(&explored(&program, limits));
    }

    #[test]
    fn a_plan_fusing_a_pair_near_it_is_no_faster_than_any_fusing_it(program in programs(12)) {
        // `explain` searches only the kernels near a pair predicted slower fused: never below
        // the best plan of all that fuse the pair, which is never below the best.
        let ex = explored(&program, Limits::default());
        let best = ex.best();
        let near = Neighbourhood::new(&ex, &best);
        for pair in explain::explain(&ex, &best) {
            if let Verdict::Apart { why: Why::PredictedSlower { fused_us, best_us }, .. } = pair.verdict {
                let anywhere = Plans::among(&ex, near.either(pair.first, pair.second)).next().unwrap();
                let slack = 1e-9 * fused_us;
                prop_assert!(best_us <= anywhere.predicted_us + slack && anywhere.predicted_us <= fused_us + slack);
            }
        }
    }

    #[test]
    fn the_rules_match_the_reference_on_any_set(program in programs(12), bits in any::<u16>()) {
        let ctx = Context::new(&program, &program.sizes);
        let calls: Vec<CallId> = (0..ctx.calls()).filter(|&c| bits & (1 << c) != 0).collect();
        let members = CallSet::of(&calls);
        prop_assert_eq!(rules::check(&ctx, &members), check(&ctx, &members));
    }
}
