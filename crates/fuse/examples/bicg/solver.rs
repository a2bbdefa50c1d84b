//! BiCG (biconjugate gradients) for a nonsymmetric system A·x = b on the lazy API. Each
//! iteration records the BiCGK pair q = A·p, q̃ = Aᵀ·p̃ together with the vector updates;
//! reading a scalar (p̃ᵀq, ‖r‖) runs what is recorded as one fused program. From the third
//! iteration on, every flush finds its program in the session's plan cache.

use fuse::{Result, Session};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A dense system A·x = b, A row-major n×n.
pub struct System {
    pub n: usize,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
}

/// A random nonsymmetric, strictly diagonally dominant system (so BiCG converges).
pub fn generate(n: usize, seed: u64) -> System {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut a: Vec<f64> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    for i in 0..n {
        let off: f64 = (0..n).filter(|&j| j != i).map(|j| a[i * n + j].abs()).sum();
        a[i * n + i] = off + 1.0;
    }
    let b = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    System { n, a, b }
}

/// What a solve did.
pub struct Solution {
    /// The approximate solution.
    pub x: Vec<f64>,
    /// ‖r‖₂/‖b‖₂ after each iteration (the recurrence residual).
    pub residuals: Vec<f64>,
}

/// Solves `system` by BiCG from x = 0 until ‖r‖/‖b‖ < `tol` or `max_iter` iterations;
/// `on_iteration(k, relative residual)` is called after each iteration.
pub fn bicg(
    s: &Session<f64>,
    system: &System,
    tol: f64,
    max_iter: usize,
    mut on_iteration: impl FnMut(usize, f64),
) -> Result<Solution> {
    let a = s.matrix(system.n, system.n, system.a.clone())?;
    let b = s.vector(system.b.clone())?;
    let mut x = s.vector(vec![0.0; system.n])?;
    // Handles name immutable values, so r = r̃ = p = p̃ = b share b until first updated.
    let (mut r, mut rt, mut p, mut pt) = (b.clone(), b.clone(), b.clone(), b.clone());
    let b_norm = s.read_scalar(&s.dnrm2(&b)?)?;
    let mut rho = s.read_scalar(&s.ddot(&rt, &r)?)?;
    let mut residuals = Vec::new();
    for k in 1..=max_iter {
        let q = s.dgemv(&a, &p)?;
        let qt = s.dgemtv(&a, &pt)?;
        let alpha = rho / s.read_scalar(&s.ddot(&pt, &q)?)?;
        // Run-time scalars, not literals: the recorded program stays the same every iteration.
        let (alpha, minus_alpha) = (s.scalar(alpha), s.scalar(-alpha));
        x = s.daxpy(&alpha, &p, &x)?;
        r = s.daxpy(&minus_alpha, &q, &r)?;
        rt = s.daxpy(&minus_alpha, &qt, &rt)?;
        let rho_next = s.ddot(&rt, &r)?;
        let residual = s.read_scalar(&s.dnrm2(&r)?)? / b_norm;
        residuals.push(residual);
        on_iteration(k, residual);
        if residual < tol {
            break;
        }
        let rho_next = s.read_scalar(&rho_next)?;
        let beta = s.scalar(rho_next / rho);
        rho = rho_next;
        p = s.daxpy(&beta, &p, &r)?; // p = r + β·p, run with the next iteration's q
        pt = s.daxpy(&beta, &pt, &rt)?;
    }
    Ok(Solution {
        x: s.read(&x)?,
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
