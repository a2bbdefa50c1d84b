//! The reference interpreter against hand-written f64 loops for the 11 sequences, at awkward
//! sizes, on random inputs.

use std::collections::BTreeMap;

use approx::assert_relative_eq;

use super::evaluate;
use crate::data::fill_random_inputs;
use crate::testing::{sequence, sizes_mn, SEQUENCES as ALL};
use crate::{Bindings, HostArray, Library, Precision, Program};

fn load(name: &str) -> Program {
    sequence(name, Precision::F32)
}

struct Data(BTreeMap<String, Vec<f64>>);

impl Data {
    fn v(&self, name: &str) -> &[f64] {
        &self.0[name]
    }
    fn s(&self, name: &str) -> f64 {
        self.0[name][0]
    }
}

fn gemv(a: &[f64], x: &[f64], m: usize, n: usize) -> Vec<f64> {
    (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect()
}

fn gemtv(a: &[f64], x: &[f64], m: usize, n: usize) -> Vec<f64> {
    (0..n).map(|j| (0..m).map(|i| a[i * n + j] * x[i]).sum()).collect()
}

fn ger(a: &[f64], x: &[f64], y: &[f64], n: usize) -> Vec<f64> {
    a.iter().enumerate().map(|(k, v)| v + x[k / n] * y[k % n]).collect()
}

fn zip(x: &[f64], y: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| f(*a, *b)).collect()
}

/// The outputs of sequence `name`, computed by hand.
fn expected(name: &str, d: &Data, m: usize, n: usize) -> Vec<(&'static str, Vec<f64>)> {
    match name {
        "axpydot" => {
            let z = zip(d.v("w"), d.v("v"), |w, v| w - d.s("alpha") * v);
            let r = zip(&z, d.v("u"), |a, b| a * b).iter().sum();
            vec![("z", z), ("r", vec![r])]
        }
        "atax" => vec![("y", gemtv(d.v("A"), &gemv(d.v("A"), d.v("x"), m, n), m, n))],
        "bicgk" => vec![
            ("q", gemv(d.v("A"), d.v("p"), m, n)),
            ("s", gemtv(d.v("A"), d.v("r"), m, n)),
        ],
        "sgemv" => {
            let ax = gemv(d.v("A"), d.v("x"), m, n);
            vec![("z", zip(&ax, d.v("y"), |a, y| d.s("alpha") * a + d.s("beta") * y))]
        }
        "sgemvt" => {
            let aty = gemtv(d.v("A"), d.v("y"), m, n);
            let x = zip(&aty, d.v("z"), |a, z| d.s("beta") * a + z);
            let w = gemv(d.v("A"), &x, m, n).iter().map(|v| d.s("alpha") * v).collect();
            vec![("x", x), ("w", w)]
        }
        "sscal" => vec![("x", d.v("x").iter().map(|v| d.s("alpha") * v).collect())],
        "gemver" => {
            let b = ger(&ger(d.v("A"), d.v("u1"), d.v("v1"), n), d.v("u2"), d.v("v2"), n);
            let x = zip(&gemtv(&b, d.v("y"), m, n), d.v("z"), |a, z| d.s("beta") * a + z);
            let w = gemv(&b, &x, m, n).iter().map(|v| d.s("alpha") * v).collect();
            vec![("B", b), ("x", x), ("w", w)]
        }
        "gesummv" => {
            let (ax, bx) = (gemv(d.v("A"), d.v("x"), m, n), gemv(d.v("B"), d.v("x"), m, n));
            vec![("y", zip(&ax, &bx, |a, b| d.s("alpha") * a + d.s("beta") * b))]
        }
        "madd" => vec![("C", zip(d.v("A"), d.v("B"), |a, b| a + b))],
        "vadd" => vec![(
            "x",
            d.v("w")
                .iter()
                .zip(d.v("y"))
                .zip(d.v("z"))
                .map(|((w, y), z)| w + y + z)
                .collect(),
        )],
        "waxpby" => vec![("w", zip(d.v("x"), d.v("y"), |x, y| d.s("alpha") * x + d.s("beta") * y))],
        other => panic!("no expectation for {other}"),
    }
}

fn check(name: &str, m: usize, n: usize, seed: u64) {
    let program = load(name);
    let sizes = sizes_mn(&program, m, n);
    let mut inputs = Bindings::new();
    fill_random_inputs(&program, &sizes, seed, &mut inputs);
    let data = Data(inputs.iter().map(|(k, a)| (k.clone(), a.to_f64())).collect());
    let got = evaluate(&program, &sizes, &inputs).unwrap();
    let want = expected(name, &data, m, n);
    assert_eq!(got.len(), want.len(), "{name}");
    for (output, values) in want {
        let g = &got[output];
        assert_eq!(g.len(), values.len(), "{name}.{output}");
        // Each call's result is rounded to the script's precision: a few roundings of f32 (or
        // of f64) from the f64 expectation.
        let tolerance = match program.precision {
            Precision::F32 => 1e-5,
            Precision::F64 => 1e-12,
        };
        for (a, b) in g.to_f64().iter().zip(&values) {
            assert_relative_eq!(*a, *b, epsilon = tolerance, max_relative = tolerance);
        }
    }
}

#[test]
fn all_sequences_at_awkward_sizes() {
    for name in ALL {
        for (k, (m, n)) in [(67, 45), (1, 300), (300, 1), (257, 513)].into_iter().enumerate() {
            check(name, m, n, k as u64);
        }
    }
}

#[test]
fn missing_input_is_an_error() {
    let program = load("bicgk");
    let sizes = program.bind_sizes(&[]).unwrap();
    let err = evaluate(&program, &sizes, &Bindings::new()).unwrap_err();
    assert_eq!(err.to_string(), "input `A` has no value");
}

/// `scale · [±1 … ±13; n]`, and its norm `scale · sqrt(Σ m²)`: exact (the sum of the integer
/// squares is, the root is correctly rounded, a power of two scales exactly).
fn integer_vector(n: usize, scale: f64) -> (Vec<f64>, f64) {
    let m: Vec<f64> = (0..n)
        .map(|k| (1 + (k * 7) % 13) as f64 * if k % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let exact = scale * m.iter().map(|v| v * v).sum::<f64>().sqrt();
    (m.iter().map(|v| v * scale).collect(), exact)
}

#[test]
fn norm2_is_exact_across_the_f64_range() {
    use crate::testing::{within_ulps, NORM_LENGTHS};
    for e in [-1070, -1000, -600, -511, -300, 0, 300, 486, 600, 1000] {
        for n in NORM_LENGTHS {
            let (x, exact) = integer_vector(n, 2f64.powi(e));
            let got = super::norm2(&x);
            // Below 2^-1022 the norm is subnormal: exact to its last (absolute) place.
            assert!(
                within_ulps(got, exact, Precision::F64, 1),
                "2^{e}, n = {n}: {got:e} vs {exact:e}"
            );
        }
    }
    assert_relative_eq!(super::norm2(&[3e300, -4e300]), 5e300, max_relative = 1e-15);
    assert_relative_eq!(super::norm2(&[3e-300, 4e-300]), 5e-300, max_relative = 1e-15);
    assert_relative_eq!(
        super::norm2(&[f64::MAX / 2.0, f64::MAX / 4.0]),
        f64::MAX * 0.3125f64.sqrt(),
        max_relative = 1e-15
    );
    assert_eq!(super::norm2(&[3e-323, 4e-323]), 5e-323);
    assert_eq!(super::norm2(&[]), 0.0);
    assert_eq!(super::norm2(&[1.0, f64::INFINITY]), f64::INFINITY);
    assert!(super::norm2(&[f64::INFINITY, f64::NAN]).is_nan());
}

/// Every hostile f32 vector through the interpreter: f32 numbers square in f64 without
/// overflow or underflow, so the plain formula in f64 is an independent check.
#[test]
fn nrm2_of_f32_vectors_at_the_edges_of_the_range() {
    use crate::testing::{hostile_norms, norm_program, within_ulps};
    use crate::{HostArray, HostData};
    let program = norm_program(Precision::F32, false);
    for case in hostile_norms(Precision::F32) {
        let sizes = program.bind_sizes(&[("n".to_string(), case.x.len())]).unwrap();
        let x: Vec<f32> = case.x.iter().map(|&v| v as f32).collect();
        let plain = x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>().sqrt();
        let inputs = Bindings::from([(
            "x".to_string(),
            HostArray {
                dims: vec![x.len()],
                data: HostData::F32(x),
            },
        )]);
        // The near-exact norm, rounded once to f32: the call's result.
        let got = evaluate(&program, &sizes, &inputs).unwrap()["r"].to_f64()[0];
        let plain = f64::from(plain as f32);
        assert!(
            within_ulps(got, plain, Precision::F32, 1),
            "{}: {got:e} vs {plain:e}",
            case.what
        );
    }
}

#[test]
fn inlined_scalar_calls_compute_like_calls() {
    // alpha = rho / sigma inlined into the axpy, the f32 quotient rounded as a call's result.
    let text = "precision: f32\nsizes: {n: 3}\ninputs: {rho: scalar, sigma: scalar, x: [n], y: [n]}\noutputs: [z, q]\ncalls:\n  - alpha = sdiv(rho, sigma)\n  - beta = smax(alpha, 0.25)\n  - z = saxpy(beta, x, y)\n  - q = ssqrt(beta)\n";
    let program = crate::script::parse("t.yaml", text, &Library::builtin().unwrap()).unwrap();
    let kinds: Vec<&str> = program.calls.iter().map(|c| c.function.as_str()).collect();
    assert_eq!(kinds, ["axpy", "sqrt"], "{:?}", program.calls);
    let inputs: BTreeMap<String, HostArray> = [
        ("rho".to_string(), HostArray::f32(vec![], vec![1.0])),
        ("sigma".to_string(), HostArray::f32(vec![], vec![3.0])),
        ("x".to_string(), HostArray::f32(vec![3], vec![1.0, 2.0, 3.0])),
        ("y".to_string(), HostArray::f32(vec![3], vec![0.0, 0.0, 1.0])),
    ]
    .into();
    let out = evaluate(&program, &program.sizes, &inputs).unwrap();
    let alpha = f64::from(1.0_f32 / 3.0_f32);
    let z = out["z"].to_f64();
    assert_eq!(
        z,
        [
            alpha,
            f64::from((2.0 * alpha) as f32),
            f64::from((3.0 * alpha + 1.0) as f32)
        ]
    );
    assert_eq!(out["q"].to_f64(), [f64::from(alpha.sqrt() as f32)]);
}
