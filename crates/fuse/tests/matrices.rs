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

/// The eight triangular products: (function, upper, transposed, unit diagonal).
const TRIANGULAR: [(&str, bool, bool, bool); 8] = [
    ("trmv_upper", true, false, false),
    ("trmv_lower", false, false, false),
    ("trmtv_upper", true, true, false),
    ("trmtv_lower", false, true, false),
    ("trmv_upper_unit", true, false, true),
    ("trmv_lower_unit", false, false, true),
    ("trmtv_upper_unit", true, true, true),
    ("trmtv_lower_unit", false, true, true),
];

/// `op(T)·x` for the `n`×`n` row-major `a`, T its triangle (ones on the diagonal where `unit`),
/// looping over the stored triangle only.
fn triangular(a: &[f64], x: &[f64], n: usize, (upper, transposed, unit): (bool, bool, bool)) -> Vec<f64> {
    let stored = |i: usize, j: usize| if upper { j >= i } else { j <= i };
    let element = |i: usize, j: usize| match (i == j && unit, stored(i, j)) {
        (true, _) => 1.0,
        (false, true) => a[i * n + j],
        (false, false) => 0.0,
    };
    (0..n)
        .map(|r| {
            (0..n)
                .filter(|&k| if transposed { stored(k, r) } else { stored(r, k) })
                .map(|k| {
                    if transposed {
                        element(k, r) * x[k]
                    } else {
                        element(r, k) * x[k]
                    }
                })
                .sum()
        })
        .collect()
}

/// `A` with NaN in every element a triangular product of `upper`'s triangle must not read.
fn poisoned(mut a: Vec<f64>, n: usize, upper: bool, unit: bool) -> Vec<f64> {
    for (k, v) in a.iter_mut().enumerate() {
        let (i, j) = (k / n, k % n);
        let outside = if upper { j < i } else { j > i };
        if outside || (unit && i == j) {
            *v = f64::NAN;
        }
    }
    a
}

#[test]
fn every_triangular_product_reads_only_its_triangle_on_every_backend() {
    for (name, upper, transposed, unit) in TRIANGULAR {
        let s = script("A: [n, n], x: [n]", &format!("  - out = d{name}(A, x)\n"));
        for n in [1, 2, 37, 97, 130] {
            let mut inputs = random(&s, n, n);
            let a = poisoned(data(&inputs, "A"), n, upper, unit);
            let x = data(&inputs, "x");
            let want = triangular(&a, &x, n, (upper, transposed, unit));
            inputs.insert("A".into(), HostArray::f64(vec![n, n], a));
            for backend in backends() {
                let got = run(&backend, &s, (n, n), &inputs);
                assert_close(&got, &want, n as f64, &format!("{backend} {name} at {n}"));
            }
        }
    }
}

/// An infinite or NaN x reaches only the sums whose triangle holds it (zero times it would be
/// NaN): every backend's output is NaN or infinite exactly where the loops' is, close elsewhere.
#[test]
fn an_infinite_or_nan_x_reaches_only_its_triangles_sums_on_every_backend() {
    for (name, upper, transposed, unit) in TRIANGULAR {
        let s = script("A: [n, n], x: [n]", &format!("  - out = d{name}(A, x)\n"));
        for n in [2, 37, 130] {
            let mut inputs = random(&s, n, n);
            let a = poisoned(data(&inputs, "A"), n, upper, unit);
            let mut x = data(&inputs, "x");
            (x[2 * n / 5], x[3 * n / 5]) = (f64::INFINITY, f64::NAN);
            let want = triangular(&a, &x, n, (upper, transposed, unit));
            inputs.insert("A".into(), HostArray::f64(vec![n, n], a));
            inputs.insert("x".into(), HostArray::f64(vec![n], x));
            for backend in backends() {
                let got = run(&backend, &s, (n, n), &inputs);
                let what = format!("{backend} {name} at {n}");
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    let same = match (w.is_nan(), w.is_finite()) {
                        (true, _) => g.is_nan(),
                        (false, true) => g.is_finite(),
                        (false, false) => g == w,
                    };
                    assert!(same, "{what}: element {k} is {g}, not {w}");
                }
                let finite = |v: &[f64]| {
                    v.iter()
                        .map(|v| if v.is_finite() { *v } else { 0.0 })
                        .collect::<Vec<_>>()
                };
                assert_close(&finite(&got), &finite(&want), n as f64, &what);
            }
        }
    }
}

#[test]
fn triangular_products_fused_on_one_triangle_match_loops_on_every_backend() {
    // y = U·(Uᵀ·x), and q = U·p with s = Uᵀ·r (BiCGK on a triangle), next to a full gemv.
    let s = script(
        "A: [n, n], x: [n], p: [n], r: [n]",
        "  - t = dtrmtv_upper(A, x)\n  - y = dtrmv_upper(A, t)\n  - q = dtrmv_upper(A, p)\n  - s = dtrmtv_upper(A, r)\n  - g = dgemv(A, r)\n  - w = dadd(y, q)\n  - v = dadd(s, g)\n  - out = dadd(w, v)\n",
    );
    for n in [1, 37, 130] {
        let inputs = random(&s, n, n);
        let [a, x, p, r] = ["A", "x", "p", "r"].map(|v| data(&inputs, v));
        let upper = |x: &[f64], transposed| triangular(&a, x, n, (true, transposed, false));
        let (y, q, t) = (upper(&upper(&x, true), false), upper(&p, false), upper(&r, true));
        let g: Vec<f64> = (0..n).map(|i| (0..n).map(|j| a[i * n + j] * r[j]).sum()).collect();
        let want: Vec<f64> = (0..n).map(|i| (y[i] + q[i]) + (t[i] + g[i])).collect();
        for backend in backends() {
            let got = run(&backend, &s, (n, n), &inputs);
            assert_close(&got, &want, n as f64, &format!("{backend} at {n}"));
        }
    }
}

#[test]
fn a_users_band_function_reads_only_its_band_on_every_backend() {
    // A tridiagonal product written in a library folder of one's own: the sum's range is the
    // band, and nothing outside it is read.
    let dir = tempfile::tempdir().unwrap();
    let band = "name: band\nkind: nested_reduce\nforms:\n  - signature: (A[n,n], x[n]) -> [n]\n    formula: out[i] = sum(j in i-1..i+2, A[i,j] * x[j])\n";
    std::fs::write(dir.path().join("band.yaml"), band).unwrap();
    let library = fuse_core::Library::load(dir.path()).unwrap();
    let text = "name: t\nprecision: f64\nsizes: {m: 3, n: 5}\ninputs: {A: [n, n], x: [n]}\noutputs: [out]\ncalls:\n  - out = dband(A, x)\n";
    let s = Script::from_str_with_library("t.yaml", text, &library).unwrap();
    for n in [1, 2, 37, 130] {
        let mut inputs = random(&s, n, n);
        let mut a = data(&inputs, "A");
        let x = data(&inputs, "x");
        for (k, v) in a.iter_mut().enumerate() {
            if (k % n).abs_diff(k / n) > 1 {
                *v = f64::NAN;
            }
        }
        let want: Vec<f64> = (0..n)
            .map(|i| (i.saturating_sub(1)..(i + 2).min(n)).map(|j| a[i * n + j] * x[j]).sum())
            .collect();
        inputs.insert("A".into(), HostArray::f64(vec![n, n], a));
        for backend in backends() {
            assert_close(
                &run(&backend, &s, (n, n), &inputs),
                &want,
                3.0,
                &format!("{backend} at {n}"),
            );
        }
    }
}

/// Deterministic values in [-1, 1) from `seed`.
fn values(len: usize, seed: u64) -> Vec<f64> {
    (0..len as u64)
        .map(|k| ((k * 7919 + seed * 104_729) % 1999) as f64 / 999.5 - 1.0)
        .collect()
}

#[test]
fn session_methods_make_matrices_from_vectors_on_every_backend() {
    let (m, n) = (37, 53);
    let (x, y, a_m) = (values(m, 1), values(n, 2), values(m * n, 3));
    let outer = |alpha: f64| -> Vec<f64> { (0..m * n).map(|k| alpha * x[k / n] * y[k % n]).collect() };
    let scaled: Vec<f64> = a_m.iter().map(|v| -0.75 * v).collect();
    for backend in backends() {
        let s = fuse::Session::<f64>::new(backend.clone()).unwrap();
        let (xv, yv) = (s.vector(x.clone()).unwrap(), s.vector(y.clone()).unwrap());
        let a = s.matrix(m, n, a_m.clone()).unwrap();
        let p = s.douter(&xv, &yv).unwrap();
        let q = s.douter_a(2.5, &xv, &yv).unwrap();
        let r = s.dmscal(-0.75, &a).unwrap();
        assert_close(&s.read(&p).unwrap(), &outer(1.0), 1.0, &format!("{backend} douter"));
        assert_close(&s.read(&q).unwrap(), &outer(2.5), 1.0, &format!("{backend} douter_a"));
        assert_close(&s.read(&r).unwrap(), &scaled, 1.0, &format!("{backend} dmscal"));
        // A shape that does not fit is refused when recorded.
        assert!(s.dmscal(1.0, &a).is_ok() && s.dtrmv_upper(&a, &yv).is_err());
    }
}

#[test]
fn session_triangular_methods_read_only_their_triangle_on_every_backend() {
    type Method = fn(&fuse::Session<f64>, &fuse::Matrix<f64>, &fuse::Vector<f64>) -> fuse::Result<fuse::Vector<f64>>;
    let methods: [Method; 8] = [
        fuse::Session::dtrmv_upper,
        fuse::Session::dtrmv_lower,
        fuse::Session::dtrmtv_upper,
        fuse::Session::dtrmtv_lower,
        fuse::Session::dtrmv_upper_unit,
        fuse::Session::dtrmv_lower_unit,
        fuse::Session::dtrmtv_upper_unit,
        fuse::Session::dtrmtv_lower_unit,
    ];
    for ((name, upper, transposed, unit), method) in TRIANGULAR.into_iter().zip(methods) {
        for n in [37, 130] {
            let a = poisoned(values(n * n, 4), n, upper, unit);
            let x = values(n, 5);
            let want = triangular(&a, &x, n, (upper, transposed, unit));
            for backend in backends() {
                let s = fuse::Session::<f64>::new(backend.clone()).unwrap();
                let (am, xv) = (s.matrix(n, n, a.clone()).unwrap(), s.vector(x.clone()).unwrap());
                let got = s.read(&method(&s, &am, &xv).unwrap()).unwrap();
                assert_close(&got, &want, n as f64, &format!("{backend} session d{name} at {n}"));
            }
        }
    }
}
