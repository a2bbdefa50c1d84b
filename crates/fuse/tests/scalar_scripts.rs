//! `scripts/bicgstab.yaml` (one BiCGSTAB iteration, its scalars on the device) and
//! `scripts/normalize.yaml` on every host backend against the same math written here in f64,
//! at awkward sizes, on random inputs: normwise relative error below 1e-4 in f32, 1e-10 in f64.

use std::collections::BTreeMap;

use fuse::{Backend, Inputs, Script};
use fuse_core::{Bindings, HostArray};

fn backends() -> Vec<Backend> {
    ["reference", "cpu", "emulate"]
        .iter()
        .map(|b| b.parse().unwrap())
        .collect()
}

/// Uniform in [-1, 1), reproducible.
fn random(len: usize, seed: u64) -> Vec<f64> {
    (0..len as u64)
        .map(|i| {
            let z = (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

fn script(name: &str, precision: &str) -> Script {
    let path = format!("{}/../../scripts/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    let mut text = std::fs::read_to_string(&path).unwrap();
    if precision == "f64" {
        text = text.replace("precision: f32", "precision: f64").replace("= s", "= d");
    }
    Script::from_str(&path, &text).unwrap()
}

/// `inputs` in `precision` (f32 rounds them).
fn bind(inputs: &[(&str, Vec<usize>, Vec<f64>)], precision: &str) -> Bindings {
    (inputs.iter())
        .map(|(name, dims, data)| {
            let array = match precision {
                "f32" => HostArray::f32(dims.clone(), data.iter().map(|&e| e as f32).collect()),
                _ => HostArray::f64(dims.clone(), data.clone()),
            };
            (name.to_string(), array)
        })
        .collect()
}

fn run(script: &Script, backend: &Backend, n: usize, inputs: &Bindings) -> BTreeMap<String, Vec<f64>> {
    let compiled = script
        .compile(backend, &[("n", n)])
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
    let outputs = compiled
        .run(&Inputs::from(inputs.clone()))
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
    outputs
        .into_bindings()
        .into_iter()
        .map(|(k, a)| (k, a.to_f64()))
        .collect()
}

fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    let diff: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum::<f64>().sqrt();
    diff / want.iter().map(|w| w * w).sum::<f64>().sqrt()
}

fn tolerance(precision: &str) -> f64 {
    if precision == "f32" {
        1e-4
    } else {
        1e-10
    }
}

fn matvec(a: &[f64], x: &[f64]) -> Vec<f64> {
    let n = x.len();
    (0..n).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect()
}

fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// `x + a·y`, elementwise.
fn axpy(a: f64, y: &[f64], x: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(x, y)| x + a * y).collect()
}

/// One BiCGSTAB iteration in f64, as a textbook writes it.
fn bicgstab(a: &[f64], x: &[f64], r: &[f64], rhat: &[f64], p: &[f64], rho: f64) -> BTreeMap<&'static str, Vec<f64>> {
    let v = matvec(a, p);
    let alpha = rho / dot(rhat, &v);
    let s = axpy(-alpha, &v, r);
    let t = matvec(a, &s);
    let omega = dot(&t, &s) / dot(&t, &t);
    let x2 = axpy(omega, &s, &axpy(alpha, p, x));
    let r1 = axpy(-omega, &t, &s);
    let rho1 = dot(rhat, &r1);
    let beta = (rho1 / rho) * (alpha / omega);
    let p1 = axpy(beta, &axpy(-omega, &v, p), &r1);
    BTreeMap::from([("x2", x2), ("r1", r1), ("p1", p1), ("rho1", vec![rho1])])
}

#[test]
fn bicgstab_iteration_matches_the_textbook_in_f64() {
    for precision in ["f32", "f64"] {
        let script = script("bicgstab", precision);
        for (seed, n) in [(1, 37), (2, 53)] {
            // A diagonally dominant A, as a solver would meet; the rest random.
            let mut a = random(n * n, seed);
            (0..n).for_each(|i| a[i * n + i] += n as f64);
            let [x, r, rhat, p] = [2, 3, 4, 5].map(|k| random(n, seed * 10 + k));
            let rho = dot(&rhat, &r);
            let inputs = bind(
                &[
                    ("A", vec![n, n], a),
                    ("x", vec![n], x),
                    ("r", vec![n], r),
                    ("rhat", vec![n], rhat),
                    ("p", vec![n], p),
                    ("rho", vec![], vec![rho]),
                ],
                precision,
            );
            let f = |name: &str| inputs[name].to_f64();
            let want = bicgstab(&f("A"), &f("x"), &f("r"), &f("rhat"), &f("p"), f("rho")[0]);
            for backend in backends() {
                let got = run(&script, &backend, n, &inputs);
                for (name, w) in &want {
                    let error = relative_error(&got[*name], w);
                    assert!(
                        error < tolerance(precision),
                        "{backend} {precision} n={n} {name}: error {error:e}"
                    );
                }
            }
        }
    }
}

#[test]
fn normalize_matches_x_over_its_norm_in_f64() {
    for precision in ["f32", "f64"] {
        let script = script("normalize", precision);
        for (seed, n) in [(1, 37), (2, 53 * 37), (3, 1)] {
            let inputs = bind(&[("x", vec![n], random(n, seed))], precision);
            let x = inputs["x"].to_f64();
            let norm = dot(&x, &x).sqrt();
            let want: Vec<f64> = x.iter().map(|e| e / norm).collect();
            for backend in backends() {
                let error = relative_error(&run(&script, &backend, n, &inputs)["y"], &want);
                assert!(
                    error < tolerance(precision),
                    "{backend} {precision} n={n}: error {error:e}"
                );
            }
        }
    }
}
