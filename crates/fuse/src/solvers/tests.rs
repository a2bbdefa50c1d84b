//! The solvers against SciPy's algorithms transliterated on the host in f64 (the same
//! residual history), on systems with known solutions, at odd orders; breakdowns, limits and
//! bad input.

use super::*;
use std::sync::Arc;

use crate::distributed::LocalRanks;
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
        "bicgstab" => bicgstab,
        _ => gmres,
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

/// What a solve over ranks gives one rank: info, iterations, x gathered, its row count, and
/// per residual read after the first the collectives and bytes this rank took part in since
/// the last.
type RankSolve = (i64, usize, Vec<f64>, usize, Vec<(u64, u64)>);

/// `method` on the system of order `n` over `ranks` ranks (threads), each holding its rows of
/// A and b given by rows (or whole where `whole_b`), in precision `T` to `rtol`.
fn solve_over_ranks<T: Element>(
    method: &str,
    backend: &Backend,
    n: usize,
    ranks: usize,
    whole_b: bool,
) -> Vec<RankSolve> {
    let (a, b) = system(n, 13, method == "cg");
    let cast = |v: &[f64]| -> Vec<T> { v.iter().map(|&x| T::from_f64(x)).collect() };
    LocalRanks::new(ranks).run(|comm| {
        let s = Session::<T>::distributed(comm, backend.clone()).unwrap();
        let rows = s.rows(n).unwrap();
        let am = s.matrix_rows(n, n, cast(&a[rows.start * n..rows.end * n])).unwrap();
        let bv = match whole_b {
            true => s.vector(cast(&b)).unwrap(),
            false => s.vector_rows(n, cast(&b[rows.clone()])).unwrap(),
        };
        let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&steps);
        let options = Options {
            callback: Some(Arc::new(move |s: &Session<T>, _, _, _: &Vector<T>| {
                let stats = s.stats();
                seen.lock().unwrap().push((stats.collectives, stats.communicated));
                Ok(())
            })),
            ..ranks_options::<T>(method, n)
        };
        let solution = solver::<T>(method)(&s, &am, &bv, None, &options).unwrap();
        let x = s.gather(&solution.x).unwrap().into_iter().map(T::to_f64).collect();
        let steps = steps.lock().unwrap();
        let per_read = steps.windows(2).map(|w| (w[1].0 - w[0].0, w[1].1 - w[0].1)).collect();
        (solution.info(), solution.iterations, x, rows.len(), per_read)
    })
}

/// GMRES restarts every 6 iterations, or every n − 1 (a basis of n vectors: the coefficients'
/// length is the rows' there).
fn ranks_options<T: Element>(method: &str, n: usize) -> Options<T> {
    Options {
        rtol: if T::PRECISION == Precision::F64 { 1e-10 } else { 1e-5 },
        restart: (method == "gmres").then_some(if n == 37 { 36 } else { 6 }),
        ..Options::default()
    }
}

fn relative(got: &[f64], want: &[f64]) -> f64 {
    let norm = |v: &[f64]| dot(v, v).sqrt();
    norm(&axpy(-1.0, got, want)) / norm(want)
}

/// Each solver over 1–3 ranks against the single-process solve of the same system: every rank
/// the same info, iterations and x, that solve's to `tol` (f64 1e-10; f32 1e-4 and an iteration
/// more or less, its dot products summed in another order).
fn over_ranks_as_in_one_process<T: Element>(method: &str, backend: &Backend, n: usize, tol: f64) {
    let (a, b) = system(n, 13, method == "cg");
    let cast = |v: &[f64]| -> Vec<T> { v.iter().map(|&x| T::from_f64(x)).collect() };
    let s = Session::<T>::new(backend.clone()).unwrap();
    let (am, bv) = (s.matrix(n, n, cast(&a)).unwrap(), s.vector(cast(&b)).unwrap());
    let want = solver::<T>(method)(&s, &am, &bv, None, &ranks_options(method, n)).unwrap();
    assert_eq!(want.outcome, Outcome::Converged, "{method}, n = {n}");
    let want_x: Vec<f64> = s.read(&want.x).unwrap().into_iter().map(T::to_f64).collect();
    let slack = usize::from(T::PRECISION == Precision::F32);
    for ranks in [1, 2, 3] {
        let results = solve_over_ranks::<T>(method, backend, n, ranks, n % 2 == 1 && ranks == 2);
        let what = format!("{method} on {backend}, n = {n}, {} over {ranks} ranks", T::PRECISION);
        for (rank, (info, iterations, x, rows, per_read)) in results.iter().enumerate() {
            assert_eq!(*info, 0, "{what}, rank {rank}");
            assert!(
                iterations.abs_diff(want.iterations) <= slack,
                "{what}, rank {rank}: {iterations} iterations, one process {}",
                want.iterations
            );
            assert!(
                (iterations, x) == (&results[0].1, &results[0].2),
                "{what}: rank {rank} differs from rank 0"
            );
            let error = relative(x, &want_x);
            assert!(error <= tol, "{what}, rank {rank}: x off by {error:e}");
            for &read in per_read {
                assert_eq!(
                    read,
                    exchanged::<T>(method, n, *rows, read.0),
                    "{what}, rank {rank}: collectives and bytes"
                );
            }
        }
    }
}

#[test]
fn each_solver_over_ranks_gives_every_rank_the_single_process_solve() {
    for method in ["cg", "bicg", "bicgstab", "gmres"] {
        for backend in [Backend::Cpu, Backend::Reference] {
            for n in [37, 53] {
                over_ranks_as_in_one_process::<f64>(method, &backend, n, 1e-10);
            }
            over_ranks_as_in_one_process::<f32>(method, &backend, 37, 1e-4);
        }
    }
}

/// The collectives of a rank of `rows` rows between two residual reads, and the bytes it puts
/// into them in precision `T` (a GMRES cycle of `collectives` of them): the gathers of the vectors A (and Aᵀ)
/// multiply, BiCG's sum of Aᵀ·p̃'s partial vectors, and scalars. ‖r‖ is one of the scalars:
/// each rank's norm, combined, never a vector.
fn exchanged<T: Element>(method: &str, n: usize, rows: usize, collectives: u64) -> (u64, u64) {
    let rows = rows as u64;
    let (collectives, words) = match method {
        // p gathered; ‖r‖, ρ = rᵀr, pᵀA·p.
        "cg" => (4, rows + 3),
        // Aᵀ·p̃ summed, p gathered; ‖r‖, ρ, p̃ᵀA·p.
        "bicg" => (5, n as u64 + rows + 3),
        // p̂ and ŝ gathered; ‖r‖, ρ, r̃ᵀv, ‖s‖, tᵀs, tᵀt.
        "bicgstab" => (8, 2 * rows + 6),
        // Each of k iterations: v gathered, V·w summed twice (7 numbers: restart 6), two norms;
        // after the cycle: x gathered for b − A·x, ‖r‖, ‖v₀‖.
        _ => {
            let k = (collectives - 3) / 5;
            (5 * k + 3, k * (rows + 2 * 7 + 2) + rows + 2)
        }
    };
    (collectives, std::mem::size_of::<T>() as u64 * words)
}

/// A skew-symmetric system (xᵀA·x = 0 for every x) over 1–3 ranks: every rank sees the first
/// denominator vanish, ends with SciPy's −11 and the iterate before it — none waits in a
/// collective the others left.
#[test]
fn a_breakdown_over_ranks_ends_every_rank_alike() {
    let n = 5;
    // Whole numbers: pᵀA·p sums to exactly 0 in any order.
    let a: Vec<f64> = (0..n * n).map(|k| (k % n) as f64 - (k / n) as f64).collect();
    let b: Vec<f64> = (1..=n).map(|i| i as f64).collect();
    for method in ["cg", "bicg", "bicgstab"] {
        for ranks in [1, 2, 3] {
            let results = LocalRanks::new(ranks).run(|comm| {
                let s = Session::<f64>::distributed(comm, Backend::Cpu).unwrap();
                let rows = s.rows(n).unwrap();
                let am = s.matrix_rows(n, n, a[rows.start * n..rows.end * n].to_vec()).unwrap();
                let bv = s.vector_rows(n, b[rows].to_vec()).unwrap();
                let solution = solver::<f64>(method)(&s, &am, &bv, None, &Options::default()).unwrap();
                (solution.outcome, solution.iterations, s.gather(&solution.x).unwrap())
            });
            for (rank, got) in results.into_iter().enumerate() {
                let want = (Outcome::Breakdown(Breakdown::ZeroDenominator), 0, vec![0.0; n]);
                assert_eq!(got, want, "{method} over {ranks} ranks, rank {rank}");
            }
        }
    }
}

/// The start's checks read A's whole shape from a row block: every rank the same message.
#[test]
fn a_system_over_ranks_is_checked_by_its_whole_shape() {
    let results = LocalRanks::new(2).run(|comm| {
        let s = Session::<f64>::distributed(comm, Backend::Cpu).unwrap();
        let rows = s.rows(5).unwrap().len();
        let wide = s.matrix_rows(5, 6, vec![1.0; rows * 6]).unwrap();
        let square = s.matrix_rows(5, 5, vec![1.0; rows * 5]).unwrap();
        let b = s.vector_rows(5, vec![1.0; rows]).unwrap();
        let long = s.vector(vec![1.0; 6]).unwrap();
        let message = |r: Result<Solution<f64>>| r.unwrap_err().to_string();
        (
            message(gmres(&s, &wide, &b, None, &Options::default())),
            message(cg(&s, &square, &long, None, &Options::default())),
        )
    });
    for got in results {
        assert_eq!(
            got,
            (
                "A must be square: it is 5×6".to_string(),
                "b has length 6, A is 5×5".to_string()
            )
        );
    }
}

/// A symmetric A is found symmetric and its products read its upper triangle only (the
/// recorded calls say so); in the cache (by default), with one element off its mirror, or
/// with the option switched off, they read all of A.
#[test]
fn a_symmetric_matrix_is_multiplied_by_its_upper_triangle_only() {
    use super::ops::Ops;
    use super::product::Product;
    let n = 37;
    let (a, _) = system(n, 5, true);
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let products = |a: &[f64], options: &Options<f64>| {
        let am = s.matrix(n, n, a.to_vec()).unwrap();
        let ops = Ops { session: &s };
        let product = Product::of(&ops, &am, options).unwrap();
        let _q = product.times(&ops, &s.vector(vec![1.0; n]).unwrap()).unwrap();
        let script = s.pending_script().unwrap();
        s.flush().unwrap();
        (product.is_symmetric(), script)
    };
    let always = Options {
        symmetry: Symmetry::Always,
        ..Options::default()
    };
    assert!(!products(&a, &Options::default()).0, "a 37² matrix is in the cache");
    let (symmetric, script) = products(&a, &always);
    assert!(symmetric);
    assert!(
        script.contains("trmv_upper") && script.contains("trmtv_upper") && !script.contains("gemv"),
        "{script}"
    );
    let mut off = a.clone();
    off[3 * n + 30] += 1e-12;
    assert!(!products(&off, &always).0, "one element off its mirror");
    let general = Options {
        symmetry: Symmetry::Never,
        ..Options::default()
    };
    let (symmetric, script) = products(&a, &general);
    assert!(!symmetric && script.contains("gemv"), "{script}");
}

/// Every solver on a symmetric system takes the triangle's products and follows the same
/// iteration as with all of A: the same count, residual histories equal within rounding, on
/// the reference and the CPU backend in f64 and f32 at odd orders, and on the emulated GPU.
#[test]
fn each_solver_on_a_symmetric_system_follows_its_iteration_on_all_of_a() {
    fn both<T: Element>(method: &str, backend: &str, n: usize, rtol: f64, tol: f64) {
        let (a, b) = system(n, 11 + n as u64, true);
        let s = Session::<T>::new(backend.parse().unwrap()).unwrap();
        let am = s.matrix(n, n, a.iter().map(|&v| T::from_f64(v)).collect()).unwrap();
        let bv = s.vector(b.iter().map(|&v| T::from_f64(v)).collect()).unwrap();
        let run = |symmetry: Symmetry| {
            let options = Options {
                rtol,
                restart: Some(7),
                symmetry,
                ..Options::default()
            };
            solver::<T>(method)(&s, &am, &bv, None, &options).unwrap()
        };
        let (triangle, whole) = (run(Symmetry::Always), run(Symmetry::Never));
        let what = format!("{method} on {backend}, n = {n}, {:?}", T::PRECISION);
        assert_eq!(triangle.outcome, Outcome::Converged, "{what}");
        let slack = usize::from(T::PRECISION == Precision::F32);
        assert!(triangle.iterations.abs_diff(whole.iterations) <= slack, "{what}");
        for (got, want) in triangle.residuals.iter().zip(&whole.residuals) {
            assert!(
                (got - want).abs() <= tol * want.max(1e-300),
                "{what}: ‖r‖ {got} against {want}"
            );
        }
        let x: Vec<f64> = s.read(&triangle.x).unwrap().into_iter().map(T::to_f64).collect();
        let residual = axpy(-1.0, &matvec(&a, &x, false), &b);
        assert!(
            dot(&residual, &residual).sqrt() <= 2.0 * rtol * dot(&b, &b).sqrt(),
            "{what}"
        );
    }
    for method in ["cg", "bicg", "bicgstab", "gmres"] {
        for backend in ["reference", "cpu"] {
            both::<f64>(method, backend, 37, 1e-10, 1e-6);
            both::<f32>(method, backend, 53, 1e-5, 1e-3);
        }
    }
    // Each emulated flush compiles its kernels with the host compiler: two methods there.
    for method in ["cg", "bicg"] {
        both::<f64>(method, "emulate", 29, 1e-10, 1e-6);
    }
}
