//! The reference interpreter against hand-written f64 loops for the 11 sequences, at awkward
//! sizes, on random inputs.

use std::collections::BTreeMap;

use approx::assert_relative_eq;

use super::evaluate;
use crate::data::fill_random_inputs;
use crate::testing::{sequence, sizes_mn, SEQUENCES as ALL};
use crate::{Bindings, Precision, Program};

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
        for (a, b) in g.to_f64().iter().zip(&values) {
            assert_relative_eq!(*a, *b, epsilon = 1e-12, max_relative = 1e-12);
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
