//! The rewrite stage: each rule on the phrasings it exists for and ones it must leave alone,
//! plans that no longer depend on phrasing, and rewritten random programs computing what they
//! computed as written.

use std::path::Path;

use proptest::prelude::*;

use crate::data::{fill_random_inputs, relative_error, Bindings};
use crate::explore::{explore, Limits, TimingTable};
use crate::reference::evaluate;
use crate::script::{parse, parse_as_written};
use crate::testing::rewritable_script;
use crate::{Library, Program, Sizes};

fn library() -> Library {
    Library::builtin().unwrap()
}

/// An f64 script over A, B, Y, U (m×n), x, v (n), c, t, z (m), y (n) and scalars a, b.
fn script(outputs: &str, calls: &[&str]) -> String {
    let calls: Vec<String> = calls.iter().map(|c| format!("  - {c}\n")).collect();
    format!(
        "precision: f64\nsizes: {{m: 4096, n: 4096}}\n\
         inputs: {{A: [m, n], B: [m, n], Y: [m, n], U: [m, n], x: [n], v: [n], c: [m], t: [m], z: [m], y: [n], a: scalar, b: scalar}}\n\
         outputs: [{outputs}]\ncalls:\n{}",
        calls.concat()
    )
}

fn rewritten(outputs: &str, calls: &[&str]) -> Program {
    parse("t.yaml", &script(outputs, calls), &library()).unwrap_or_else(|e| panic!("{e}"))
}

fn texts(program: &Program) -> Vec<&str> {
    program.calls.iter().map(|c| c.text.as_str()).collect()
}

/// The best plan's predicted time by the shipped CPU table, and how many times it reads each
/// matrix (kernels loading it).
fn best(program: &Program) -> (f64, Vec<(String, usize)>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../library/timings/cpu-amd-epyc.yaml");
    let table = TimingTable::load(&root).unwrap();
    let plan = explore(program, &program.sizes, &table, &library(), Limits::default())
        .unwrap()
        .best();
    let passes = (program.inputs.iter())
        .filter(|&&v| program.values[v].shape.rank() == 2)
        .map(|&v| {
            let reads = plan.kernels.iter().filter(|k| k.loads.contains(&v)).count();
            (program.values[v].variable.clone(), reads)
        })
        .filter(|(_, reads)| *reads > 0)
        .collect::<std::collections::BTreeMap<_, _>>();
    let passes = passes.into_iter().collect();
    (plan.predicted_us, passes)
}

fn once(matrices: &[&str]) -> Vec<(String, usize)> {
    let mut once: Vec<(String, usize)> = matrices.iter().map(|m| (m.to_string(), 1)).collect();
    once.sort();
    once
}

#[test]
fn a_map_between_two_walks_of_a_matrix_joins_the_first() {
    let p = rewritten("y", &["t1 = dgemv(A, x)", "u = daxpy(a, t1, c)", "y = dgemtv(A, u)"]);
    assert_eq!(texts(&p), ["u = dgemv(a, A, x, 1, c)", "y = dgemtv(A, u)"]);
    assert_eq!(p.rewrites.len(), 1);
    assert_eq!(
        p.rewrites[0].to_string(),
        "map-joins-walk: t1 = dgemv(A, x); u = daxpy(a, t1, c) → u = dgemv(a, A, x, 1, c)"
    );
    assert_eq!(best(&p).1, once(&["A"]));
}

#[test]
fn scaling_folds_into_the_walk_it_scales() {
    let p = rewritten("u", &["t1 = dgemv(A, x)", "u = dscal(a, t1)"]);
    assert_eq!(texts(&p), ["u = dgemv(a, A, x)"]);
    let p = rewritten("u", &["t1 = dgemv(2, A, x)", "u = dscal(-0.5, t1)"]);
    assert_eq!(texts(&p), ["u = dgemv(-1, A, x)"]);
    let p = rewritten("u", &["t1 = dgemtv(A, c)", "u = daxpby(a, t1, 3, y)"]);
    assert_eq!(texts(&p), ["u = dgemtv(a, A, c, 3, y)"]);
    // Products of run-time scalars are computed by inlined scalar calls where the kernel starts.
    let p = rewritten("u", &["t1 = dgemv(b, A, x)", "u = dscal(a, t1)"]);
    assert_eq!(texts(&p), ["u = dgemv(dmul(a, b), A, x)"]);
    let p = rewritten("u", &["t1 = dgemv(a, A, x)", "u = dscal(-2, t1)"]);
    assert_eq!(texts(&p), ["u = dgemv(dmul(-2, a), A, x)"]);
    let p = rewritten("u", &["t1 = dgemv(a, A, x)", "u = daxpy(-1, t1, c)"]);
    assert_eq!(texts(&p), ["u = dgemv(dneg(a), A, x, 1, c)"]);
}

#[test]
fn an_axpy_onto_a_product_becomes_the_products_accumulation() {
    let p = rewritten("u", &["t1 = dgemv(a, A, x)", "u = daxpy(b, c, t1)"]);
    assert_eq!(texts(&p), ["u = dgemv(a, A, x, b, c)"]);
}

#[test]
fn a_walk_result_needed_elsewhere_is_kept_where_the_map_feeds_a_walk_of_its_matrix() {
    // GEMVER's phrasing: x is an output, and z feeds the transposed walk of A.
    let p = rewritten(
        "x1, w",
        &["x1 = dgemv(A, x)", "z1 = daxpy(b, x1, z)", "w = dgemtv(a, A, z1)"],
    );
    assert_eq!(
        texts(&p),
        ["x1 = dgemv(A, x)", "z1 = dgemv(b, A, x, 1, z)", "w = dgemtv(a, A, z1)"]
    );
    assert_eq!(best(&p).1, once(&["A"]));
    // Where nothing walks A after the map, a second walk would only cost a pass.
    let p = rewritten("x1, z1", &["x1 = dgemv(A, x)", "z1 = daxpy(b, x1, z)"]);
    assert!(p.rewrites.is_empty());
    // BiCGSTAB's `s = r − α·v; t = A·s`: the walk of A after the map needs all of `s` before
    // its first row, so a second walk would be a second pass.
    let text = "precision: f64\nsizes: {n: 4096}\ninputs: {A: [n, n], x: [n], z: [n], b: scalar}\n\
                outputs: [x1, w]\ncalls:\n  - x1 = dgemv(A, x)\n  - z1 = daxpy(b, x1, z)\n  - w = dgemv(A, z1)\n";
    let p = parse("t.yaml", text, &library()).unwrap();
    assert!(p.rewrites.is_empty(), "{:?}", p.rewrites);
}

#[test]
fn maps_that_no_form_of_the_walk_computes_stay() {
    // Two walks' results, a walk's result read twice, an accumulated vector on both sides.
    for calls in [
        &["t1 = dgemv(A, x)", "t2 = dgemv(B, x)", "u = dadd(t1, t2)"][..],
        &["t1 = dgemv(A, x)", "u = dadd(t1, t1)"],
        &["t1 = dgemv(a, A, x, b, c)", "u = daxpy(2, t, t1)"],
        &["t1 = dgemv(A, x)", "u = daxpy(a, t1, c)", "w = daxpy(b, u, t1)"],
    ] {
        let p = rewritten("u", calls);
        assert!(
            p.rewrites
                .iter()
                .all(|r| !r.before.iter().any(|b| b.starts_with("u ="))),
            "{calls:?}: {:?}",
            p.rewrites
        );
    }
}

#[test]
fn an_accumulation_onto_another_walk_is_split_so_both_walks_fuse() {
    let p = rewritten(
        "y2",
        &[
            "t1 = dgemv(U, v)",
            "y1 = dgemtv(-1, Y, t1, 1, y)",
            "y2 = dgemtv(-1, U, z, 1, y1)",
        ],
    );
    assert_eq!(
        texts(&p),
        [
            "t1 = dgemv(U, v)",
            "y1 = dgemtv(-1, Y, t1, 1, y)",
            "y2_product = dgemtv(-1, U, z)",
            "y2 = dadd(y1, y2_product)",
        ]
    );
    assert_eq!(best(&p).1, once(&["U", "Y"]));
}

#[test]
fn a_repeated_call_is_computed_once_and_a_repeated_output_is_a_copy() {
    let p = rewritten("u", &["t1 = dgemv(A, x)", "t2 = dgemv(A, x)", "u = dadd(t1, t2)"]);
    assert_eq!(texts(&p), ["t1 = dgemv(A, x)", "u = dadd(t1, t1)"]);
    assert_eq!(best(&p).1, once(&["A"]));
    let p = rewritten("u, t2", &["t1 = dgemv(A, x)", "t2 = dgemv(A, x)", "u = dadd(t1, t2)"]);
    assert_eq!(texts(&p), ["t1 = dgemv(A, x)", "t2 = dcopy(t1)", "u = dadd(t1, t1)"]);
    assert_eq!(p.rewrites[0].rule, "common-calls");
    // Inlined scalars and literals are arguments like any other.
    let calls = [
        "al = ddiv(a, b)",
        "be = ddiv(a, b)",
        "u = daxpy(al, x, v)",
        "w1 = daxpy(be, x, v)",
        "w = dadd(u, w1)",
    ];
    let p = rewritten("w", &calls);
    assert_eq!(texts(&p), ["u = daxpy(ddiv(a, b), x, v)", "w = dadd(u, u)"]);
}

#[test]
fn calls_that_differ_or_repeated_outputs_no_call_copies_stay() {
    for (outputs, calls) in [
        ("t1, t2", &["t1 = dgemv(A, x)", "t2 = dgemv(A, v)"][..]),
        ("t1, t2", &["t1 = dgemv(A, x)", "t2 = dgemv(B, x)"][..]),
        ("t1, t2", &["t1 = dgemv(A, x)", "t2 = dgemv(a, A, x)"][..]),
        ("s1, s2", &["s1 = ddot(x, v)", "s2 = ddot(x, v)"][..]),
        ("m1, m2", &["m1 = dmscal(a, A)", "m2 = dmscal(a, A)"][..]),
        ("t1, t2", &["t1 = dcopy(x)", "t2 = dcopy(x)"][..]),
    ] {
        let p = rewritten(outputs, calls);
        assert_eq!(texts(&p), calls, "{:?}", p.rewrites);
    }
}

/// The three phrasings, each with two more of the same math: one pass over each
/// matrix, and the same predicted time whichever way it is written.
#[test]
fn the_same_math_phrased_three_ways_gets_the_same_plan() {
    // (outputs, phrasings, the matrices read), each phrasing a list of calls.
    type Group<'a> = (&'a str, &'a [&'a [&'a str]], &'a [&'a str]);
    let groups: [Group; 4] = [
        (
            "y",
            &[
                &["t1 = dgemv(A, x)", "u = daxpy(a, t1, c)", "y = dgemtv(A, u)"],
                &["u = dgemv(a, A, x, 1, c)", "y = dgemtv(A, u)"],
                &["t1 = dgemv(a, A, x)", "u = dadd(t1, c)", "y = dgemtv(A, u)"],
                &["t1 = dgemv(A, x)", "u = daxpby(a, t1, 1, c)", "y = dgemtv(A, u)"],
            ],
            &["A"],
        ),
        (
            "x1, w",
            &[
                &["x1 = dgemv(A, x)", "z1 = daxpy(b, x1, z)", "w = dgemtv(a, A, z1)"],
                &["x1 = dgemv(A, x)", "z1 = dgemv(b, A, x, 1, z)", "w = dgemtv(a, A, z1)"],
                &["x1 = dgemv(A, x)", "z1 = daxpby(b, x1, 1, z)", "w = dgemtv(a, A, z1)"],
            ],
            &["A"],
        ),
        (
            "y2",
            &[
                &[
                    "t1 = dgemv(U, v)",
                    "y1 = dgemtv(-1, Y, t1, 1, y)",
                    "y2 = dgemtv(-1, U, z, 1, y1)",
                ],
                &[
                    "t1 = dgemv(U, v)",
                    "y1 = dgemtv(-1, Y, t1, 1, y)",
                    "p = dgemtv(-1, U, z)",
                    "y2 = dadd(y1, p)",
                ],
                &[
                    "t1 = dgemv(U, v)",
                    "p = dgemtv(-1, U, z, 1, y)",
                    "y2 = dgemtv(-1, Y, t1, 1, p)",
                ],
            ],
            &["U", "Y"],
        ),
        (
            "q, s, s2",
            &[
                &[
                    "q = dgemv(A, x)",
                    "s = dgemtv(A, z)",
                    "q2 = dgemv(A, x)",
                    "s2 = daxpy(a, q2, c)",
                ],
                &["q = dgemv(A, x)", "s = dgemtv(A, z)", "s2 = daxpy(a, q, c)"],
                &[
                    "q = dgemv(A, x)",
                    "q2 = dgemv(A, x)",
                    "s = dgemtv(A, z)",
                    "s2 = daxpy(a, q2, c)",
                ],
            ],
            &["A"],
        ),
    ];
    for (outputs, phrasings, matrices) in groups {
        let plans: Vec<(f64, Vec<(String, usize)>)> = phrasings.iter().map(|c| best(&rewritten(outputs, c))).collect();
        for (calls, (us, passes)) in phrasings.iter().zip(&plans) {
            assert_eq!(*passes, once(matrices), "{calls:?}");
            let first = plans[0].0;
            assert!(
                (us - first).abs() <= 1e-6 * first,
                "{calls:?}: {us} µs, the first phrasing {first} µs"
            );
        }
    }
}

/// Outputs of `program` on random inputs at small awkward sizes, by the f64 reference.
fn outputs(program: &Program, sizes: &Sizes, seed: u64) -> Bindings {
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, seed, &mut inputs);
    evaluate(program, sizes, &inputs).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Rewritten or not, a program computes the same outputs, up to rounding.
    #[test]
    fn rewritten_programs_compute_what_they_did_as_written(seed in any::<u64>(), calls in 1usize..8) {
        let text = rewritable_script(seed, calls);
        let written = match parse_as_written("t.yaml", &text, &library()) {
            Ok(p) => p,
            Err(_) => return Ok(()), // an output that names a value twice, etc.
        };
        let rewritten = parse("t.yaml", &text, &library()).unwrap();
        prop_assert_eq!(&rewritten.inputs.len(), &written.inputs.len());
        let sizes = written.sizes.clone();
        let (want, got) = (outputs(&written, &sizes, seed), outputs(&rewritten, &sizes, seed));
        for (name, w) in want.iter() {
            let g = &got[name];
            let e = relative_error(&g.to_f64(), &w.to_f64());
            prop_assert!(e <= 1e-12, "{}: relative error {:e}\n{}\nrewrites: {:?}", name, e, text, rewritten.rewrites);
        }
    }
}

#[test]
fn rule_heavy_programs_do_hit_the_rules() {
    let hits = (0..200u64)
        .filter_map(|seed| parse("t.yaml", &rewritable_script(seed, 6), &library()).ok())
        .filter(|p| !p.rewrites.is_empty())
        .count();
    assert!(hits >= 30, "only {hits} of 200 programs were rewritten");
}

#[test]
fn the_papers_sequences_are_fused_as_written() {
    for name in crate::testing::SEQUENCES {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../scripts/{name}.yaml"));
        let program = crate::script::load(&path, &library()).unwrap();
        assert!(program.rewrites.is_empty(), "{name}: {:?}", program.rewrites);
    }
}

#[test]
fn an_accumulation_of_rows_onto_rows_already_fuses_and_stays() {
    // GESUMMV's phrasing: B's row walk reads A's row sums in the rows they are finished for.
    let p = rewritten("u", &["t1 = dgemv(a, A, x)", "u = dgemv(b, B, x, 1, t1)"]);
    assert!(p.rewrites.is_empty(), "{:?}", p.rewrites);
    assert_eq!(best(&p).1, once(&["A", "B"]));
}
