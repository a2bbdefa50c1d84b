//! Matrices made from vectors (`outer`, `mscal`) and triangular products (`trmv`) on every host
//! backend (reference, fused CPU, emulated GPU), in f64 against loops written here at awkward
//! sizes, on random inputs.

use fuse::{Backend, Inputs, Script};
use fuse_core::data::fill_random_inputs;
use fuse_core::{Bindings, HostArray};

/// Relative to the largest magnitude a result element is made of: an outer product or a
/// scaling rounds once or twice per element, a triangular product sums at most 97 terms.
const TOLERANCE: f64 = 1e-13;

fn backends() -> Vec<Backend> {
    ["reference", "cpu", "emulate"]
        .iter()
        .map(|b| b.parse().unwrap())
        .collect()
}

/// The script of `calls` over `inputs` (YAML flow mapping) and output `out`, in f64.
fn script(inputs: &str, calls: &str) -> Script {
    let text = format!(
        "name: t\nprecision: f64\nsizes: {{m: 3, n: 5}}\ninputs: {{{inputs}}}\noutputs: [out]\ncalls:\n{calls}"
    );
    Script::from_str("t.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Random inputs of `script` at sizes `m`, `n` (seeded by the sizes).
fn random(script: &Script, m: usize, n: usize) -> Bindings {
    let program = script.program();
    let sizes = program.bind_sizes(&[("m".into(), m), ("n".into(), n)]).unwrap();
    let mut inputs = Bindings::new();
    fill_random_inputs(program, &sizes, (m * 1000 + n) as u64, &mut inputs);
    inputs
}

/// Output `out` of `script` at `m`×`n` on `backend`.
fn run(backend: &Backend, script: &Script, (m, n): (usize, usize), inputs: &Bindings) -> Vec<f64> {
    let compiled = script
        .compile(backend, &[("m", m), ("n", n)])
        .unwrap_or_else(|e| panic!("{backend} at {m}×{n}: {e}"));
    let outputs = compiled
        .run(&Inputs::from(inputs.clone()))
        .unwrap_or_else(|e| panic!("{backend} at {m}×{n}: {e}"));
    outputs.into_bindings()["out"].to_f64()
}

fn data(inputs: &Bindings, name: &str) -> Vec<f64> {
    inputs[name].to_f64()
}

/// Every element within [`TOLERANCE`] of `want`, relative to `scale`.
fn assert_close(got: &[f64], want: &[f64], scale: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= TOLERANCE * scale.max(1.0),
            "{what}: element {k} is {g}, not {w}"
        );
    }
}

const AWKWARD: [(usize, usize); 5] = [(37, 53), (1, 70), (70, 1), (1, 1), (97, 33)];

#[test]
fn outer_products_and_scaled_matrices_match_loops_on_every_backend() {
    let s = script(
        "x: [m], y: [n], A: [m, n], a: scalar",
        "  - P = douter(x, y)\n  - Q = douter(a, x, y)\n  - R = dmscal(a, A)\n  - S = dmadd(P, Q)\n  - out = dmadd(S, R)\n",
    );
    for (m, n) in AWKWARD {
        let inputs = random(&s, m, n);
        let (x, y, a_m) = (data(&inputs, "x"), data(&inputs, "y"), data(&inputs, "A"));
        let a = data(&inputs, "a")[0];
        let want: Vec<f64> = (0..m * n)
            .map(|k| {
                let (i, j) = (k / n, k % n);
                (x[i] * y[j] + a * x[i] * y[j]) + a * a_m[k]
            })
            .collect();
        for backend in backends() {
            assert_close(
                &run(&backend, &s, (m, n), &inputs),
                &want,
                1.0,
                &format!("{backend} {m}×{n}"),
            );
        }
    }
}

#[test]
fn two_outer_products_added_match_loops_on_every_backend() {
    let s = script(
        "u1: [m], v1: [n], u2: [m], v2: [n]",
        "  - B1 = douter(u1, v1)\n  - out = dger(u2, v2, B1)\n",
    );
    for (m, n) in AWKWARD {
        let inputs = random(&s, m, n);
        let [u1, v1, u2, v2] = ["u1", "v1", "u2", "v2"].map(|v| data(&inputs, v));
        let want: Vec<f64> = (0..m * n)
            .map(|k| {
                let (i, j) = (k / n, k % n);
                u1[i] * v1[j] + u2[i] * v2[j]
            })
            .collect();
        for backend in backends() {
            assert_close(
                &run(&backend, &s, (m, n), &inputs),
                &want,
                1.0,
                &format!("{backend} {m}×{n}"),
            );
        }
    }
}

#[test]
fn a_zero_scalar_makes_an_outer_product_or_a_scaling_plus_zero_whatever_it_multiplies() {
    for calls in ["  - out = douter(a, x, y)\n", "  - out = dmscal(a, A)\n"] {
        let s = script("x: [m], y: [n], A: [m, n], a: scalar", calls);
        let mut inputs = random(&s, 37, 53);
        inputs.insert("x".into(), HostArray::f64(vec![37], vec![f64::NAN; 37]));
        inputs.insert("A".into(), HostArray::f64(vec![37, 53], vec![f64::INFINITY; 37 * 53]));
        inputs.insert("a".into(), HostArray::f64(vec![], vec![0.0]));
        for backend in backends() {
            let got = run(&backend, &s, (37, 53), &inputs);
            assert!(
                got.iter().all(|v| v.to_bits() == 0),
                "{backend} {calls}: not all +0: {:?}",
                &got[..4]
            );
        }
    }
}
