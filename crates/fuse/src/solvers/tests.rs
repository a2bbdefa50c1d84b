//! The solvers against SciPy's algorithms transliterated on the host in f64 (the same
//! residual history), on systems with known solutions, at odd orders; breakdowns, limits and
//! bad input.

use super::*;
use std::sync::Arc;

use crate::{Backend, Element, Matrix, Precision, Result, Session, Vector};

/// A random n×n matrix (row-major) made diagonally dominant, symmetric where `symmetric`.
fn system(n: usize, seed: u64, symmetric: bool) -> (Vec<f64>, Vec<f64>) {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    let mut a: Vec<f64> = (0..n * n).map(|_| next()).collect();
    for i in 0..n {
        for j in 0..i {
            if symmetric {
                a[i * n + j] = a[j * n + i];
            }
        }
        a[i * n + i] = n as f64 * (1.5 + next().abs());
    }
    let b = (0..n).map(|_| next()).collect();
    (a, b)
}

fn matvec(a: &[f64], x: &[f64], transposed: bool) -> Vec<f64> {
    let n = x.len();
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| if transposed { a[j * n + i] } else { a[i * n + j] } * x[j])
                .sum()
        })
        .collect()
}

fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

fn axpy(a: f64, x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(x, y)| a * x + y).collect()
}

/// SciPy's residual history (‖r‖ at the top of each iteration until it stops) and iterations.
fn scipy_history(method: &str, a: &[f64], b: &[f64], rtol: f64, maxiter: usize) -> (Vec<f64>, usize) {
    let norm = |v: &[f64]| dot(v, v).sqrt();
    let atol = rtol * norm(b);
    let mut r = b.to_vec();
    let mut rt = r.clone();
    let (mut p, mut pt, mut v) = (vec![0.0; b.len()], vec![0.0; b.len()], vec![0.0; b.len()]);
    let (mut rho_prev, mut alpha, mut omega) = (0.0, 0.0, 0.0);
    let mut history = Vec::new();
    for it in 0..maxiter {
        history.push(norm(&r));
        if norm(&r) < atol {
            return (history, it);
        }
        match method {
            "cg" => {
                let rho = dot(&r, &r);
                p = if it > 0 {
                    axpy(rho / rho_prev, &p, &r)
                } else {
                    r.clone()
                };
                let q = matvec(a, &p, false);
                let alpha = rho / dot(&p, &q);
                r = axpy(-alpha, &q, &r);
                rho_prev = rho;
            }
            "bicg" => {
                let rho = dot(&rt, &r);
                if it > 0 {
                    p = axpy(rho / rho_prev, &p, &r);
                    pt = axpy(rho / rho_prev, &pt, &rt);
                } else {
                    (p, pt) = (r.clone(), rt.clone());
                }
                let (q, qt) = (matvec(a, &p, false), matvec(a, &pt, true));
                let alpha = rho / dot(&pt, &q);
                r = axpy(-alpha, &q, &r);
                rt = axpy(-alpha, &qt, &rt);
                rho_prev = rho;
            }
            _ => {
                let rho = dot(&rt, &r);
                p = if it > 0 {
                    let beta = (rho / rho_prev) * (alpha / omega);
                    axpy(beta, &axpy(-omega, &v, &p), &r)
                } else {
                    r.clone()
                };
                v = matvec(a, &p, false);
                alpha = rho / dot(&rt, &v);
                let s = axpy(-alpha, &v, &r);
                if norm(&s) < atol {
                    return (history, it + 1);
                }
                let t = matvec(a, &s, false);
                omega = dot(&t, &s) / dot(&t, &t);
                r = axpy(-omega, &t, &s);
                rho_prev = rho;
            }
        }
    }
    (history, maxiter)
}

type Solver<T> = fn(&Session<T>, &Matrix<T>, &Vector<T>, Option<&Vector<T>>, &Options<T>) -> Result<Solution<T>>;

fn solver<T: Element>(method: &str) -> Solver<T> {
    match method {
        "cg" => cg,
        "bicg" => bicg,
        _ => bicgstab,
    }
}

/// Solves the seeded system of order `n` with `method` on `backend`; checks the solution's
/// residual and the history against SciPy's (relative `tol`).
fn solves<T: Element>(method: &str, backend: &str, n: usize, rtol: f64, tol: f64) {
    let (a, b) = system(n, n as u64, method == "cg");
    let s = Session::<T>::new(backend.parse().unwrap()).unwrap();
    let am = s.matrix(n, n, a.iter().map(|&v| T::from_f64(v)).collect()).unwrap();
    let bv = s.vector(b.iter().map(|&v| T::from_f64(v)).collect()).unwrap();
    let options = Options {
        rtol,
        ..Options::default()
    };
    let solution = solver::<T>(method)(&s, &am, &bv, None, &options).unwrap();
    let what = format!("{method} on {backend}, n = {n}, {:?}", T::PRECISION);
    assert_eq!(solution.outcome, Outcome::Converged, "{what}");
    let x: Vec<f64> = s.read(&solution.x).unwrap().into_iter().map(T::to_f64).collect();
    let residual = axpy(-1.0, &matvec(&a, &x, false), &b);
    assert!(
        dot(&residual, &residual).sqrt() <= 2.0 * rtol * dot(&b, &b).sqrt(),
        "{what}: ‖b − A·x‖ too large"
    );
    let (want, iterations) = scipy_history(method, &a, &b, rtol, 10 * n);
    // f32 rounds each step: an iteration more or less where the last residual is near the
    // tolerance.
    let slack = usize::from(T::PRECISION == Precision::F32);
    assert!(
        solution.iterations.abs_diff(iterations) <= slack,
        "{what}: {} iterations, SciPy {iterations}",
        solution.iterations
    );
    assert!(
        solution.residuals.len().abs_diff(want.len()) <= slack,
        "{what}: {:?} against {want:?}",
        solution.residuals
    );
    for (got, want) in solution.residuals.iter().zip(&want) {
        assert!(
            (got - want).abs() <= tol * want.max(1e-300),
            "{what}: ‖r‖ {got} against SciPy's {want}"
        );
    }
}

#[test]
fn each_solver_follows_scipys_iteration_in_f64_and_f32() {
    for method in ["cg", "bicg", "bicgstab"] {
        for backend in ["reference", "cpu"] {
            for n in [1, 37, 53] {
                solves::<f64>(method, backend, n, 1e-10, 1e-6);
            }
            solves::<f32>(method, backend, 37, 1e-5, 1e-3);
        }
    }
}

#[test]
fn on_the_emulated_gpu_an_iteration_reads_back_only_its_residuals() {
    for (method, per_iteration) in [("cg", 1), ("bicg", 1), ("bicgstab", 2)] {
        solves::<f64>(method, "emulate", 29, 1e-8, 1e-6);
        let (a, b) = system(29, 3, method == "cg");
        let s = Session::<f64>::new("emulate".parse().unwrap()).unwrap();
        let (am, bv) = (s.matrix(29, 29, a).unwrap(), s.vector(b).unwrap());
        let options = Options {
            maxiter: Some(4),
            rtol: 0.0,
            ..Options::default()
        };
        let before = s.stats().from_device;
        let solution = solver::<f64>(method)(&s, &am, &bv, None, &options).unwrap();
        assert_eq!(solution.info(), 4, "{method}");
        // ‖b‖ once, then the residual (BiCGSTAB: and the half step's) an iteration.
        let bytes = s.stats().from_device - before;
        assert_eq!(bytes, 8 * (1 + 4 * per_iteration), "{method}");
    }
}

#[test]
fn checking_every_k_iterations_reads_less_and_converges_the_same() {
    let (a, b) = system(41, 7, false);
    let s = Session::<f64>::new(Backend::Cpu).unwrap();
    let (am, bv) = (s.matrix(41, 41, a.clone()).unwrap(), s.vector(b.clone()).unwrap());
    let options = Options {
        rtol: 1e-10,
        check_every: 4,
        ..Options::default()
    };
    let solution = bicg(&s, &am, &bv, None, &options).unwrap();
    assert_eq!(solution.outcome, Outcome::Converged);
    let (_, iterations) = scipy_history("bicg", &a, &b, 1e-10, 410);
    // A read after iterations 4, 8, … tests ‖r‖ where the last of them began: converged at
    // 3, 7, 11, … iterations, the first such count at or past SciPy's.
    assert_eq!((solution.iterations + 1) % 4, 0, "{} iterations", solution.iterations);
    assert!(solution.iterations >= iterations && solution.iterations < iterations + 4);
    assert_eq!(solution.residuals.len(), (solution.iterations + 1) / 4);
}

#[test]
fn a_skew_system_breaks_down_with_scipys_code_and_no_nan_solution() {
    // xᵀA·x = 0 for every x: each method's first denominator vanishes.
    let s = Session::<f64>::new(Backend::Cpu).unwrap();
    let a = s.matrix(2, 2, vec![0.0, 1.0, -1.0, 0.0]).unwrap();
    let b = s.vector(vec![1.0, 2.0]).unwrap();
    for method in ["cg", "bicg", "bicgstab"] {
        let solution = solver::<f64>(method)(&s, &a, &b, None, &Options::default()).unwrap();
        assert_eq!(
            solution.outcome,
            Outcome::Breakdown(Breakdown::ZeroDenominator),
            "{method}"
        );
        assert_eq!(solution.info(), -11);
        assert_eq!(
            s.read(&solution.x).unwrap(),
            [0.0, 0.0],
            "{method}: the iterate before it"
        );
    }
}

#[test]
fn maxiter_x0_jacobi_and_a_zero_right_hand_side() {
    let (a, b) = system(30, 11, true);
    let s = Session::<f64>::new(Backend::Cpu).unwrap();
    let (am, bv) = (s.matrix(30, 30, a.clone()).unwrap(), s.vector(b.clone()).unwrap());
    let limited = cg(
        &s,
        &am,
        &bv,
        None,
        &Options {
            maxiter: Some(2),
            rtol: 1e-12,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!((limited.info(), limited.outcome), (2, Outcome::MaxIterations));
    // Restarting from where it stopped converges.
    let x = limited.x.clone();
    let resumed = cg(
        &s,
        &am,
        &bv,
        Some(&x),
        &Options {
            rtol: 1e-9,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(resumed.info(), 0);
    let inverse_diagonal: Vec<f64> = (0..30).map(|i| 1.0 / a[i * 30 + i]).collect();
    let jacobi = Options {
        rtol: 1e-9,
        jacobi: Some(s.vector(inverse_diagonal).unwrap()),
        ..Options::default()
    };
    let preconditioned = cg(&s, &am, &bv, None, &jacobi).unwrap();
    assert_eq!(preconditioned.info(), 0);
    let xj: Vec<f64> = s.read(&preconditioned.x).unwrap();
    let residual = axpy(-1.0, &matvec(&a, &xj, false), &b);
    assert!(dot(&residual, &residual).sqrt() <= 2e-9 * dot(&b, &b).sqrt());
    let zero = s.vector(vec![0.0; 30]).unwrap();
    let solution = bicgstab(&s, &am, &zero, None, &Options::default()).unwrap();
    assert_eq!((solution.info(), solution.iterations), (0, 0));
    assert_eq!(s.read(&solution.x).unwrap(), vec![0.0; 30]);
}

#[test]
fn a_system_that_does_not_fit_is_a_clear_error() {
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let a = s.matrix(2, 3, vec![1.0; 6]).unwrap();
    let square = s.matrix(2, 2, vec![1.0; 4]).unwrap();
    let b = s.vector(vec![1.0, 2.0]).unwrap();
    let long = s.vector(vec![1.0; 3]).unwrap();
    let message = |r: Result<Solution<f64>>| r.unwrap_err().to_string();
    assert_eq!(
        message(cg(&s, &a, &b, None, &Options::default())),
        "A must be square: it is 2×3"
    );
    assert_eq!(
        message(bicg(&s, &square, &long, None, &Options::default())),
        "b has length 3, A is 2×2"
    );
    assert_eq!(
        message(bicgstab(&s, &square, &b, Some(&long), &Options::default())),
        "x0 has length 3, A is 2×2"
    );
    let negative = Options {
        rtol: -1.0,
        ..Options::default()
    };
    assert!(message(cg(&s, &square, &b, None, &negative)).starts_with("rtol and atol must be ≥ 0"));
}

#[test]
fn gmres_converges_with_restarts_and_counts_cycles_as_scipy() {
    for backend in ["reference", "cpu"] {
        for (n, restart) in [(37, None), (53, Some(5)), (1, Some(3))] {
            let (a, b) = system(n, 5, false);
            let s = Session::<f64>::new(backend.parse().unwrap()).unwrap();
            let (am, bv) = (s.matrix(n, n, a.clone()).unwrap(), s.vector(b.clone()).unwrap());
            let options = Options {
                rtol: 1e-10,
                restart,
                ..Options::default()
            };
            let solution = gmres(&s, &am, &bv, None, &options).unwrap();
            assert_eq!(solution.outcome, Outcome::Converged, "{backend}, n = {n}");
            let x = s.read(&solution.x).unwrap();
            let residual = axpy(-1.0, &matvec(&a, &x, false), &b);
            assert!(
                dot(&residual, &residual).sqrt() <= 1e-10 * dot(&b, &b).sqrt(),
                "{backend}, n = {n}"
            );
            // The estimates fall: each is the least-squares residual over a larger space.
            assert!(
                solution
                    .residuals
                    .windows(2)
                    .filter(|w| w[1] > w[0] * (1.0 + 1e-9))
                    .count()
                    <= solution.iterations
            );
        }
    }
    // One cycle of two iterations cannot solve a system of 40: info is the cycles run.
    let (a, b) = system(40, 9, false);
    let s = Session::<f64>::new(Backend::Cpu).unwrap();
    let (am, bv) = (s.matrix(40, 40, a).unwrap(), s.vector(b).unwrap());
    let options = Options {
        rtol: 1e-12,
        restart: Some(2),
        maxiter: Some(1),
        ..Options::default()
    };
    let solution = gmres(&s, &am, &bv, None, &options).unwrap();
    assert_eq!((solution.info(), solution.outcome), (1, Outcome::MaxIterations));
}

#[test]
fn the_callback_runs_once_an_iteration_as_scipys_never_past_the_solution() {
    for method in ["cg", "bicg", "bicgstab"] {
        let (a, b) = system(23, 5, method == "cg");
        let s = Session::<f64>::new(Backend::Reference).unwrap();
        let (am, bv) = (s.matrix(23, 23, a).unwrap(), s.vector(b).unwrap());
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let options = Options {
            rtol: 1e-10,
            callback: Some(Arc::new(move |s: &Session<f64>, iteration, _, x: &Vector<f64>| {
                seen.lock().unwrap().push((iteration, s.read(x)?));
                Ok(())
            })),
            ..Options::default()
        };
        let solution = solver::<f64>(method)(&s, &am, &bv, None, &options).unwrap();
        assert_eq!(solution.outcome, Outcome::Converged, "{method}");
        let calls = calls.lock().unwrap();
        // SciPy calls back after each iteration it runs, the last with the solution itself
        // (BiCGSTAB may end at a half step, past its last call).
        let iterations: Vec<usize> = calls.iter().map(|c| c.0).collect();
        let expected: Vec<usize> = (1..=calls.len()).collect();
        assert_eq!(iterations, expected, "{method}");
        let half_step = usize::from(method == "bicgstab");
        assert!(
            solution.iterations - calls.len() <= half_step,
            "{method}: {} calls, {} iterations",
            calls.len(),
            solution.iterations
        );
        if calls.len() == solution.iterations {
            assert_eq!(calls.last().unwrap().1, s.read(&solution.x).unwrap(), "{method}");
        }
    }
}
