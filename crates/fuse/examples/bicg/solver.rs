//! BiCG (biconjugate gradients) for a nonsymmetric system A·x = b on the lazy API, in either
//! precision. Each iteration records the BiCGK pair q = A·p, q̃ = Aᵀ·p̃ together with the vector
//! updates; α = ρ/(p̃ᵀq) and β = ρ'/ρ are session scalar calls, computed on the device by the
//! kernels that read them, so the one scalar read per iteration is ‖r‖ (for the convergence
//! test), which runs what is recorded as one fused program. From the
//! third iteration on, every flush finds its program in the session's plan cache, and on a
//! device only scalars cross between host and device. The same code runs on a distributed
//! session, each rank holding its rows of A (`mpirun -n R … bicg --distributed`).

use fuse::{Element, Matrix, Result, Scalar, Session, Vector};

/// A dense system A·x = b, A row-major n×n.
pub struct System {
    pub n: usize,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
}

/// A random nonsymmetric, strictly diagonally dominant system (so BiCG converges): A's elements
/// row by row, then b's, uniform in [-1, 1) from [`uniform`]; each diagonal element replaced by
/// the sum of its row's other magnitudes plus one. `examples/python/bicg.py` draws the same.
pub fn generate(n: usize, seed: u64) -> System {
    let mut a: Vec<f64> = (0..n * n).map(|k| uniform(seed, k as u64)).collect();
    for i in 0..n {
        let off: f64 = (0..n).filter(|&j| j != i).map(|j| a[i * n + j].abs()).sum();
        a[i * n + i] = off + 1.0;
    }
    let b = (0..n).map(|i| uniform(seed, (n * n + i) as u64)).collect();
    System { n, a, b }
}

/// Number `k` of stream `seed`, uniform in [-1, 1): splitmix64 of `seed·2⁴⁰ + k`, its top 53
/// bits scaled — exact in f64, so any language draws the same numbers.
pub fn uniform(seed: u64, k: u64) -> f64 {
    let mut z = (seed << 40).wrapping_add(k).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 * (1.0 / (1u64 << 52) as f64) - 1.0
}

/// What a solve did.
pub struct Solution {
    /// The approximate solution.
    pub x: Vec<f64>,
    /// ‖r‖₂/‖b‖₂ after each iteration (the recurrence residual).
    pub residuals: Vec<f64>,
}

/// The BLAS calls BiCG makes, under one name for both precisions (`d…` on `Session<f64>`,
/// `s…` on `Session<f32>`).
pub trait Blas<T: Element> {
    fn gemv(&self, a: &Matrix<T>, x: &Vector<T>) -> Result<Vector<T>>;
    fn gemtv(&self, a: &Matrix<T>, x: &Vector<T>) -> Result<Vector<T>>;
    fn axpy(&self, a: &Scalar<T>, x: &Vector<T>, y: &Vector<T>) -> Result<Vector<T>>;
    fn dot(&self, x: &Vector<T>, y: &Vector<T>) -> Result<Scalar<T>>;
    fn nrm2(&self, x: &Vector<T>) -> Result<Scalar<T>>;
    fn div(&self, a: &Scalar<T>, b: &Scalar<T>) -> Result<Scalar<T>>;
    fn neg(&self, a: &Scalar<T>) -> Result<Scalar<T>>;
}

/// Implements [`Blas`] for `Session<$t>` with the BLAS names of its precision.
macro_rules! blas {
    ($t:ty, $gemv:ident, $gemtv:ident, $axpy:ident, $dot:ident, $nrm2:ident, $div:ident, $neg:ident) => {
        impl Blas<$t> for Session<$t> {
            fn gemv(&self, a: &Matrix<$t>, x: &Vector<$t>) -> Result<Vector<$t>> {
                self.$gemv(a, x)
            }
            fn gemtv(&self, a: &Matrix<$t>, x: &Vector<$t>) -> Result<Vector<$t>> {
                self.$gemtv(a, x)
            }
            fn axpy(&self, a: &Scalar<$t>, x: &Vector<$t>, y: &Vector<$t>) -> Result<Vector<$t>> {
                self.$axpy(a, x, y)
            }
            fn dot(&self, x: &Vector<$t>, y: &Vector<$t>) -> Result<Scalar<$t>> {
                self.$dot(x, y)
            }
            fn nrm2(&self, x: &Vector<$t>) -> Result<Scalar<$t>> {
                self.$nrm2(x)
            }
            fn div(&self, a: &Scalar<$t>, b: &Scalar<$t>) -> Result<Scalar<$t>> {
                self.$div(a, b)
            }
            fn neg(&self, a: &Scalar<$t>) -> Result<Scalar<$t>> {
                self.$neg(a)
            }
        }
    };
}

blas!(f32, sgemv, sgemtv, saxpy, sdot, snrm2, sdiv, sneg);
blas!(f64, dgemv, dgemtv, daxpy, ddot, dnrm2, ddiv, dneg);

/// Solves `system` by BiCG from x = 0 until ‖r‖/‖b‖ < `tol` or `max_iter` iterations, or a
/// breakdown (r̃ᵀr or p̃ᵀq zero: α or β is then infinite or NaN on the device, and so is the
/// residual; the last finite x is kept);
/// `on_iteration(k, relative residual)` is called after each iteration.
pub fn bicg<T: Element>(
    s: &Session<T>,
    system: &System,
    tol: f64,
    max_iter: usize,
    mut on_iteration: impl FnMut(usize, f64),
) -> Result<Solution>
where
    Session<T>: Blas<T>,
{
    let cast = |v: &[f64]| v.iter().map(|&e| T::from_f64(e)).collect::<Vec<T>>();
    let read = |scalar: &Scalar<T>| s.read_scalar(scalar).map(T::to_f64);
    // SPMD: each rank its rows of A (all of them in one process).
    let n = system.n;
    let rows = s.rows(n)?;
    let a = s.matrix_rows(n, n, cast(&system.a[rows.start * n..rows.end * n]))?;
    let b = s.vector(cast(&system.b))?;
    let mut x = s.vector(vec![T::from_f64(0.0); system.n])?;
    // Handles name immutable values, so r = r̃ = p = p̃ = b share b until first updated.
    let (mut r, mut rt, mut p, mut pt) = (b.clone(), b.clone(), b.clone(), b.clone());
    let b_norm = read(&s.nrm2(&b)?)?;
    let mut rho = s.dot(&rt, &r)?;
    let mut residuals = Vec::new();
    for k in 1..=max_iter {
        let last_x = x.clone();
        let q = s.gemv(&a, &p)?;
        let qt = s.gemtv(&a, &pt)?;
        // α = ρ/(p̃ᵀq), computed where the updates run; its handles are gone before the read,
        // so no kernel stores it.
        {
            let alpha = s.div(&rho, &s.dot(&pt, &q)?)?;
            let minus_alpha = s.neg(&alpha)?;
            x = s.axpy(&alpha, &p, &x)?;
            r = s.axpy(&minus_alpha, &q, &r)?;
            rt = s.axpy(&minus_alpha, &qt, &rt)?;
        }
        let rho_next = s.dot(&rt, &r)?;
        let residual = read(&s.nrm2(&r)?)? / b_norm;
        if !residual.is_finite() {
            x = last_x;
            break;
        }
        residuals.push(residual);
        on_iteration(k, residual);
        if residual < tol {
            break;
        }
        let beta = s.div(&rho_next, &rho)?;
        rho = rho_next;
        p = s.axpy(&beta, &p, &r)?; // p = r + β·p, run with the next iteration's q
        pt = s.axpy(&beta, &pt, &rt)?;
    }
    Ok(Solution {
        x: s.gather(&x)?.into_iter().map(T::to_f64).collect(),
        residuals,
    })
}

/// ‖b − A·x‖₂ / ‖b‖₂, computed on the host.
pub fn true_residual(system: &System, x: &[f64]) -> f64 {
    let n = system.n;
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|e| e * e).sum::<f64>().sqrt();
    let mut r = (0..n).map(|i| system.b[i] - (0..n).map(|j| system.a[i * n + j] * x[j]).sum::<f64>());
    norm(&mut r) / norm(&mut system.b.iter().copied())
}
