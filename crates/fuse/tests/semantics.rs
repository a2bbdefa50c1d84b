//! What a call means, on every host backend (reference, fused CPU, emulated GPU):
//!
//! - BLAS's α = 0 and β = 0: a product by a scalar that is zero is dropped, so what it would
//!   multiply is not read — NaN there (an uninitialised `y`, a poisoned `A`) never reaches the
//!   result, whether the zero is a literal or a run-time scalar.
//! - Each call's result is a number of the script's precision, as if each call ran alone: no
//!   backend reassociates across calls (`b·(a·x)` is not `(b·a)·x`), and the reference rounds
//!   each call's result.

use fuse::{Backend, Inputs, Script};
use fuse_core::{Bindings, HostArray};
use proptest::prelude::*;

const M: usize = 67;
const N: usize = 45;

fn backends() -> Vec<Backend> {
    ["reference", "cpu", "emulate"]
        .iter()
        .map(|b| b.parse().unwrap())
        .collect()
}

/// Runs `calls` (f64 unless `precision` says otherwise) with inputs `A[m,n]`, vectors `x[n]`,
/// `y[m]`, `u[m]`, `v[n]`, scalars `a`, `b` on `backend`; returns output `out`.
fn run(backend: &Backend, precision: &str, calls: &str, inputs: &Bindings) -> Vec<f64> {
    let f = if precision == "f32" { "s" } else { "d" };
    let text = format!(
        "name: t\nprecision: {precision}\nsizes: {{m: {M}, n: {N}}}\n\
         inputs: {{A: [m, n], x: [n], y: [m], u: [m], v: [n], a: scalar, b: scalar}}\n\
         outputs: [out]\ncalls:\n{}",
        calls.replace("F", f)
    );
    let script = Script::from_str("t.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let compiled = script
        .compile(backend, &[])
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
    let outputs = compiled
        .run(&Inputs::from(inputs.clone()))
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
    outputs.into_bindings()["out"].to_f64()
}

fn values(len: usize, seed: u64) -> Vec<f64> {
    (0..len as u64)
        .map(|i| (((i * 2654435761 + seed * 97) % 1000) as f64) / 500.0 - 1.0)
        .collect()
}

/// f64 inputs; the names in `poisoned` are all NaN, `a` and `b` as given.
fn inputs(a: f64, b: f64, poisoned: &[&str]) -> Bindings {
    let fill = |name: &str, len: usize, seed: u64| match poisoned.contains(&name) {
        true => vec![f64::NAN; len],
        false => values(len, seed),
    };
    let mut inputs = Bindings::new();
    inputs.insert("A".into(), HostArray::f64(vec![M, N], fill("A", M * N, 1)));
    for (name, len, seed) in [("x", N, 2), ("y", M, 3), ("u", M, 4), ("v", N, 5)] {
        inputs.insert(name.into(), HostArray::f64(vec![len], fill(name, len, seed)));
    }
    inputs.insert("a".into(), HostArray::f64(vec![], vec![a]));
    inputs.insert("b".into(), HostArray::f64(vec![], vec![b]));
    inputs
}

fn column(inputs: &Bindings, name: &str) -> Vec<f64> {
    inputs[name].to_f64()
}

/// `A·x` (or `Aᵀ·x` where `transposed`) in f64.
fn product(inputs: &Bindings, x: &str, transposed: bool) -> Vec<f64> {
    let (a, x) = (column(inputs, "A"), column(inputs, x));
    match transposed {
        false => (0..M).map(|i| (0..N).map(|j| a[i * N + j] * x[j]).sum()).collect(),
        true => (0..N).map(|j| (0..M).map(|i| a[i * N + j] * x[i]).sum()).collect(),
    }
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "{what}: element {k} is {g}, not {w}"
        );
    }
}

#[test]
fn a_zero_beta_does_not_read_y_and_a_zero_alpha_does_not_read_a() {
    let scaled = |v: Vec<f64>, c: f64| v.into_iter().map(|e| c * e).collect::<Vec<f64>>();
    for backend in backends() {
        // β = 0, literal and at run time: y is NaN and unread.
        let i = inputs(1.5, 0.0, &["y"]);
        let want = scaled(product(&i, "x", false), 1.5);
        for calls in ["  - out = Fgemv(a, A, x, 0, y)\n", "  - out = Fgemv(a, A, x, b, y)\n"] {
            assert_close(&run(&backend, "f64", calls, &i), &want, &format!("{backend} {calls}"));
        }
        // α = 0: A and x are NaN and unread.
        let i = inputs(0.0, 2.0, &["A", "x", "v"]);
        let want = scaled(column(&i, "y"), 2.0);
        for calls in ["  - out = Fgemv(a, A, x, b, y)\n", "  - out = Fgemv(0.0, A, x, b, y)\n"] {
            assert_close(&run(&backend, "f64", calls, &i), &want, &format!("{backend} {calls}"));
        }
        let i = inputs(0.0, 1.0, &["A", "y"]);
        let want = column(&i, "v");
        let got = run(&backend, "f64", "  - out = Fgemtv(a, A, y, b, v)\n", &i);
        assert_close(&got, &want, &format!("{backend} gemtv α = 0"));
    }
}

#[test]
fn a_zero_scalar_drops_its_term_in_maps_and_updates() {
    for backend in backends() {
        // axpy with α = 0 returns y unchanged; axpby drops each term whose scalar is 0.
        let i = inputs(0.0, 3.0, &["x"]);
        assert_close(
            &run(&backend, "f64", "  - out = Faxpy(a, x, v)\n", &i),
            &column(&i, "v"),
            "axpy",
        );
        let want: Vec<f64> = column(&i, "v").iter().map(|e| 3.0 * e).collect();
        assert_close(
            &run(&backend, "f64", "  - out = Faxpby(a, x, b, v)\n", &i),
            &want,
            "axpby",
        );
        // ger with α = 0 leaves A as it is.
        let i = inputs(0.0, 1.0, &["u", "x"]);
        assert_close(
            &run(&backend, "f64", "  - out = Fger(a, u, x, A)\n", &i),
            &column(&i, "A"),
            "ger",
        );
    }
}

#[test]
fn a_zero_scalar_in_a_fused_pass_over_a_drops_only_its_own_term() {
    // ATAX's one pass over A's rows: each row's `a·(A·x) + y` then scales the same row into
    // Aᵀ·t. α = 0 drops A·x alone (x is NaN and unread): t = y.
    let calls = "  - t = Fgemv(a, A, x, 1.0, y)\n  - out = Fgemtv(A, t)\n";
    for backend in backends() {
        let i = inputs(0.0, 1.0, &["x"]);
        let want = product(&i, "y", true);
        assert_close(&run(&backend, "f64", calls, &i), &want, &format!("{backend} fused"));
    }
}

#[test]
fn each_call_rounds_to_the_script_precision_as_if_it_ran_alone() {
    let calls = "  - t = Fscal(a, x)\n  - out = Fscal(b, t)\n";
    let f32_inputs = |a: f64, b: f64, x: Vec<f32>| {
        let mut i = inputs(a, b, &[]);
        i.insert("x".into(), HostArray::f32(vec![N], x));
        for name in ["A", "y", "u", "v", "a", "b"] {
            let data: Vec<f32> = i[name].to_f64().iter().map(|&e| e as f32).collect();
            i.insert(name.into(), HostArray::f32(i[name].dims.clone(), data));
        }
        i
    };
    for backend in backends() {
        // a·x overflows f32 (as two BLAS calls would), though b·a·x would not.
        let got = run(&backend, "f32", calls, &f32_inputs(1e30, 1e-30, vec![1e30; N]));
        assert!(got.iter().all(|&z| z == f64::INFINITY), "{backend}: {got:?}");
        // And bit for bit b·(a·x) in f32, not (b·a)·x.
        let x: Vec<f32> = values(N, 9).iter().map(|&e| e as f32 * 7.0).collect();
        let want: Vec<f64> = x.iter().map(|&e| f64::from(3.3f32 * (0.1f32 * e))).collect();
        let got = run(&backend, "f32", calls, &f32_inputs(0.1, 3.3, x));
        assert_eq!(got, want, "{backend}");
    }
}

/// A call with scalar parameters `$a` (and `$b`), and the arrays each scalar multiplies.
struct Form {
    call: &'static str,
    terms: &'static [(&'static str, &'static [&'static str])],
}

const FORMS: [Form; 7] = [
    Form {
        call: "Fgemv($a, A, x)",
        terms: &[("a", &["A", "x"])],
    },
    Form {
        call: "Fgemv($a, A, x, $b, y)",
        terms: &[("a", &["A", "x"]), ("b", &["y"])],
    },
    Form {
        call: "Fgemtv($a, A, y, $b, v)",
        terms: &[("a", &["A", "y"]), ("b", &["v"])],
    },
    Form {
        call: "Faxpy($a, x, v)",
        terms: &[("a", &["x"])],
    },
    Form {
        call: "Faxpby($a, x, $b, v)",
        terms: &[("a", &["x"]), ("b", &["v"])],
    },
    Form {
        call: "Fscal($a, x)",
        terms: &[("a", &["x"])],
    },
    Form {
        call: "Fger($a, u, x, A)",
        terms: &[("a", &["u", "x"])],
    },
];

/// What a scalar argument is: a literal 0, a run-time 0, or a run-time number.
#[derive(Debug, Clone, Copy)]
enum Zero {
    Literal,
    RunTime,
    No(f64),
}

/// `inputs` in `precision` (f32 rounds them).
fn in_precision(inputs: Bindings, precision: &str) -> Bindings {
    match precision {
        "f32" => (inputs.into_iter())
            .map(|(k, a)| {
                let data = a.to_f64().iter().map(|&e| e as f32).collect();
                (k, HostArray::f32(a.dims, data))
            })
            .collect(),
        _ => inputs,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any form, any pattern of zero scalars (literal or at run time), NaN in every array only
    /// a zero scalar multiplies: every backend gives the numbers the call gives on finite
    /// inputs there, in either precision.
    #[test]
    fn nan_where_a_zero_scalar_multiplies_never_reaches_a_result(
        form in 0..FORMS.len(),
        zeros in prop::array::uniform2(prop_oneof![
            Just(Zero::Literal), Just(Zero::RunTime), (-2.0..2.0f64).prop_map(Zero::No)
        ]),
        f32 in any::<bool>(),
    ) {
        let (form, precision) = (&FORMS[form], if f32 { "f32" } else { "f64" });
        let mut call = form.call.to_owned();
        let (mut a, mut b) = (1.0, 1.0);
        let mut poisoned: Vec<&str> = Vec::new();
        let mut live: Vec<&str> = Vec::new();
        for (k, (scalar, arrays)) in form.terms.iter().enumerate() {
            let (text, value, zero) = match zeros[k] {
                Zero::Literal => ("0".to_owned(), 0.0, true),
                Zero::RunTime => (scalar.to_string(), 0.0, true),
                Zero::No(v) => (scalar.to_string(), v, false),
            };
            call = call.replace(&format!("${scalar}"), &text);
            *if *scalar == "a" { &mut a } else { &mut b } = value;
            if zero { poisoned.extend(*arrays) } else { live.extend(*arrays) }
        }
        poisoned.retain(|p| !live.contains(p));
        let calls = format!("  - out = {call}\n");
        let want = run(&Backend::Reference, precision, &calls, &in_precision(inputs(a, b, &[]), precision));
        let poison = in_precision(inputs(a, b, &poisoned), precision);
        let tolerance = if f32 { 1e-5 } else { 1e-12 };
        for backend in backends() {
            let got = run(&backend, precision, &calls, &poison);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(
                    (g - w).abs() <= tolerance * (1.0 + w.abs()),
                    "{backend} {calls} (NaN in {poisoned:?}, a = {a}, b = {b}) element {k}: {g}, not {w}"
                );
            }
        }
    }
}

/// Whether `got` is `want` bit for bit but for NaN's payload: IEEE results, not approximations.
fn same_ieee(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits())
}

#[test]
fn scalar_calls_give_the_same_ieee_results_on_every_backend() {
    // Stored (`out` a scalar call) and inlined (read by `scal`); division by zero, NaN to
    // `max`/`min`, the root of a negative number, signed zeros.
    let cases: [(&str, f64, f64, f64); 14] = [
        ("  - out = Fdiv(a, b)\n", 1.0, 0.0, f64::INFINITY),
        ("  - out = Fdiv(a, b)\n", -1.0, 0.0, f64::NEG_INFINITY),
        ("  - out = Fdiv(a, b)\n", 0.0, 0.0, f64::NAN),
        ("  - out = Frecip(b)\n", 0.0, -0.0, f64::NEG_INFINITY),
        ("  - out = Fsqrt(a)\n", -1.0, 0.0, f64::NAN),
        ("  - out = Fmax(a, b)\n", f64::NAN, 1.0, 1.0),
        ("  - out = Fmax(a, b)\n", 1.0, f64::NAN, 1.0),
        ("  - out = Fmin(a, b)\n", f64::NAN, -1.0, -1.0),
        ("  - out = Fmax(a, b)\n", 0.0, -0.0, -0.0),
        ("  - out = Fabs(a)\n", -0.0, 0.0, 0.0),
        // −a is a product by a: where a is zero, +0 (the zero rule).
        ("  - out = Fneg(a)\n", 0.0, 0.0, 0.0),
        ("  - out = Fsub(a, b)\n", 1.5, 0.25, 1.25),
        ("  - out = Fplus(a, b)\n", 1.5, 0.25, 1.75),
        ("  - out = Fmul(a, b)\n", 0.0, f64::NAN, 0.0),
    ];
    for precision in ["f64", "f32"] {
        for backend in backends() {
            for (calls, a, b, want) in cases {
                let i = in_precision(inputs(a, b, &[]), precision);
                let got = run(&backend, precision, calls, &i);
                assert!(
                    same_ieee(&got, &[want]),
                    "{backend} {precision} {calls} a={a} b={b}: {got:?}"
                );
                // The same call inlined into a map: x·c, with +0 where c is 0 (the zero rule).
                let inlined = format!("{}  - out = Fscal(c, x)\n", calls.replace("out =", "c ="));
                let got = run(&backend, precision, &inlined, &i);
                let x = column(&i, "x");
                let round = |v: f64| if precision == "f32" { f64::from(v as f32) } else { v };
                let want: Vec<f64> = x
                    .iter()
                    .map(|e| if want == 0.0 { 0.0 } else { round(want * e) })
                    .collect();
                assert!(
                    same_ieee(&got, &want),
                    "{backend} {precision} {inlined} a={a} b={b}: {got:?}"
                );
            }
        }
    }
}

#[test]
fn an_inlined_scalar_that_is_zero_drops_its_term() {
    for backend in backends() {
        // c = a − b = 0: A and x are NaN and unread; gemv gives y.
        let i = inputs(2.0, 2.0, &["A", "x"]);
        let calls = "  - c = Fsub(a, b)\n  - out = Fgemv(c, A, x, 1.0, y)\n";
        assert_close(
            &run(&backend, "f64", calls, &i),
            &column(&i, "y"),
            &format!("{backend} gemv"),
        );
        // c = a·(b/a) with a = 0: the product is +0 though b/a is NaN; axpy gives v.
        let i = inputs(0.0, 0.0, &["x"]);
        let calls = "  - q = Fdiv(b, a)\n  - c = Fmul(a, q)\n  - out = Faxpy(c, x, v)\n";
        assert_close(
            &run(&backend, "f64", calls, &i),
            &column(&i, "v"),
            &format!("{backend} axpy"),
        );
    }
}
