//! Krylov solvers on a [`Session`](crate::Session): conjugate gradients ([`cg`]), BiCG ([`bicg`]), BiCGSTAB
//! ([`bicgstab`]) and restarted GMRES ([`gmres`]), with SciPy's stopping test and return codes.
//!
//! Each iteration is recorded as the session's BLAS calls, its scalars (α, β, ω) computed on
//! the device by scalar calls, so a flush runs a whole iteration fused — BiCG's `A·p` and
//! `Aᵀ·p̃` in one pass over A — and the only numbers that cross to the host are the residual
//! norms the stopping test reads: one per iteration (BiCGSTAB: two, its half-step residual
//! too), or one per `check_every` iterations.
//!
//! Breakdowns are caught on the device too: each quantity SciPy tests (`|ρ| < ε²`, `ω`, a zero
//! denominator) adds a *guard* to the residual the host reads — zero where the quantity is
//! fine, NaN where it is not — so a breakdown makes that one read NaN. Only then are the
//! iteration's scalars read, to name the breakdown; the solution returned is the last iterate
//! before it, never a NaN one.
//!
//! ```
//! use fuse::solvers::{cg, Options};
//! use fuse::{Backend, Session};
//!
//! let s = Session::<f64>::new(Backend::Reference)?;
//! let a = s.matrix(2, 2, vec![4.0, 1.0, 1.0, 3.0])?;
//! let b = s.vector(vec![1.0, 2.0])?;
//! let solution = cg(&s, &a, &b, None, &Options::default())?;
//! assert_eq!(solution.info(), 0);
//! let x = s.read(&solution.x)?;
//! assert!((x[0] - 1.0 / 11.0).abs() < 1e-5 && (x[1] - 7.0 / 11.0).abs() < 1e-5);
//! # Ok::<(), fuse::Error>(())
//! ```

mod bicg;
mod bicgstab;
mod cg;
mod gmres;
mod monitor;
mod ops;

use std::fmt;
use std::sync::Arc;

use fuse_core::Precision;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::session::{Matrix, Session, Vector};
use ops::{In, Ops};

pub use bicg::bicg;
pub use bicgstab::bicgstab;
pub use cg::cg;
pub use gmres::gmres;

/// Called at each residual read after which the solve goes on (or runs out of iterations), as
/// SciPy calls its callback: with the session, the iterations run, ‖r‖ at the start of the last
/// of them, and the iterate after it (reading it with the session costs a copy to the host on a
/// device). GMRES calls it after each restart cycle, with ‖r‖ after it.
pub type Callback<T> = Arc<dyn Fn(&Session<T>, usize, f64, &Vector<T>) -> Result<()>>;

/// How a solve stops, and what it may use.
#[derive(Clone)]
pub struct Options<T: Element> {
    /// Relative tolerance: converged where `‖b − A·x‖ ≤ max(rtol·‖b‖, atol)` (SciPy's test).
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// At most this many iterations (SciPy's default: 10·n).
    pub maxiter: Option<usize>,
    /// Read the residual every this many iterations (1: every iteration, as SciPy); between
    /// reads nothing crosses to the host.
    pub check_every: usize,
    /// Jacobi preconditioning: the inverse of A's diagonal, applied element-wise on the device.
    pub jacobi: Option<Vector<T>>,
    /// GMRES: iterations between restarts (20 where `None`, as SciPy; at most n).
    pub restart: Option<usize>,
    /// Progress: called at each residual read; an error it returns ends the solve with it.
    pub callback: Option<Callback<T>>,
}

impl<T: Element> fmt::Debug for Options<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("rtol", &self.rtol)
            .field("atol", &self.atol)
            .field("maxiter", &self.maxiter)
            .field("check_every", &self.check_every)
            .field("jacobi", &self.jacobi)
            .field("restart", &self.restart)
            .field("callback", &self.callback.as_ref().map(|_| "…"))
            .finish()
    }
}

impl<T: Element> Default for Options<T> {
    fn default() -> Self {
        Options {
            rtol: 1e-5,
            atol: 0.0,
            maxiter: None,
            check_every: 1,
            jacobi: None,
            restart: None,
            callback: None,
        }
    }
}

/// Why a solve stopped before converging, as SciPy would say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakdown {
    /// ρ = r̃ᵀr vanished (|ρ| < ε²): the shadow residual is orthogonal to the residual.
    Rho,
    /// ω vanished (|ω| < ε²): BiCGSTAB's stabilising step made no progress.
    Omega,
    /// A denominator (p̃ᵀA·p, r̃ᵀA·p, pᵀA·p) is zero.
    ZeroDenominator,
    /// The residual is not finite: the iteration overflowed or divided by zero.
    NonFinite,
}

impl Breakdown {
    /// SciPy's `info` for it (−10: ρ, −11: ω or a zero denominator); −12 for a non-finite
    /// residual, which SciPy does not detect.
    pub fn info(self) -> i64 {
        match self {
            Breakdown::Rho => -10,
            Breakdown::Omega | Breakdown::ZeroDenominator => -11,
            Breakdown::NonFinite => -12,
        }
    }
}

impl fmt::Display for Breakdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Breakdown::Rho => "breakdown: ρ = r̃ᵀr vanished",
            Breakdown::Omega => "breakdown: ω vanished",
            Breakdown::ZeroDenominator => "breakdown: a denominator of the iteration is zero",
            Breakdown::NonFinite => "breakdown: the residual is not finite",
        })
    }
}

/// How a solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The residual met the tolerance.
    Converged,
    /// `maxiter` iterations ran without meeting it.
    MaxIterations,
    /// The iteration broke down.
    Breakdown(Breakdown),
}

/// A solve's result.
#[derive(Debug, Clone)]
pub struct Solution<T: Element> {
    /// The solution, in the session (read it with [`Session::read`](crate::Session::read)).
    pub x: Vector<T>,
    /// Iterations run.
    pub iterations: usize,
    /// How it ended.
    pub outcome: Outcome,
    /// ‖r‖ at each residual read, in order (with `check_every = 1`: at the start of each
    /// iteration, as SciPy's loop tests it).
    pub residuals: Vec<f64>,
}

impl<T: Element> Solution<T> {
    /// SciPy's `info`: 0 converged, the iterations run where `maxiter` ran out, < 0 a
    /// breakdown ([`Breakdown::info`]).
    pub fn info(&self) -> i64 {
        match self.outcome {
            Outcome::Converged => 0,
            Outcome::MaxIterations => self.iterations as i64,
            Outcome::Breakdown(b) => b.info(),
        }
    }
}

impl<T: Element> Solution<T> {
    /// The solution of `A·x = b` for `b` = 0, SciPy's at once: `b` itself.
    fn of_zero(b: &Vector<T>) -> Self {
        Solution {
            x: b.clone(),
            iterations: 0,
            outcome: Outcome::Converged,
            residuals: Vec::new(),
        }
    }
}

/// A solve's start: its checks, then — unless ‖b‖ = 0, where the solution is 0 — the iterate
/// x₀ (zeros where not given), r₀ = b − A·x₀, the tolerance on ‖r‖ (SciPy's
/// `max(rtol·‖b‖, atol)`) and the iteration limit (10·n unless given). The one read before
/// the iterations is ‖b‖.
#[allow(clippy::type_complexity)]
fn start<T: Element>(
    ops: &Ops<'_, T>,
    a: &Matrix<T>,
    b: &Vector<T>,
    x0: Option<&Vector<T>>,
    options: &Options<T>,
) -> Result<Option<(Vector<T>, Vector<T>, f64, usize)>> {
    check_system(a, b, x0, options)?;
    let b_norm = ops.session.read_scalar(&ops.nrm2(b)?)?.to_f64();
    if b_norm == 0.0 {
        return Ok(None);
    }
    let (x, r) = match x0 {
        Some(x0) => (x0.clone(), ops.residual(a, x0, b)?),
        // 0·b is +0 whatever b holds (a product by a zero scalar), and costs no upload.
        None => (ops.vector("scal", &[In::L(0.0), In::V(b)])?, b.clone()),
    };
    let atol = options.atol.max(options.rtol * b_norm);
    Ok(Some((x, r, atol, options.maxiter.unwrap_or(10 * b.len()))))
}

/// The checks of a system and its options before a solve: a square A, b, x0 and the Jacobi
/// vector of its order, tolerances ≥ 0, a check interval ≥ 1.
fn check_system<T: Element>(a: &Matrix<T>, b: &Vector<T>, x0: Option<&Vector<T>>, options: &Options<T>) -> Result<()> {
    let n = a.rows();
    let bad = |what: String| Err(Error::Solver(what));
    if a.cols() != n {
        return bad(format!("A must be square: it is {}×{}", a.rows(), a.cols()));
    }
    let vectors = [
        ("b", Some(b)),
        ("x0", x0),
        ("the Jacobi vector", options.jacobi.as_ref()),
    ];
    for (name, v) in vectors {
        if let Some(v) = v.filter(|v| v.len() != n) {
            return bad(format!("{name} has length {}, A is {n}×{n}", v.len()));
        }
    }
    if !(options.rtol >= 0.0 && options.atol >= 0.0) {
        return bad(format!(
            "rtol and atol must be ≥ 0, got rtol = {}, atol = {}",
            options.rtol, options.atol
        ));
    }
    if options.check_every == 0 {
        return bad("check_every must be at least 1".into());
    }
    Ok(())
}

/// The machine epsilon of `T`.
fn epsilon<T: Element>() -> f64 {
    match T::PRECISION {
        Precision::F32 => f64::from(f32::EPSILON),
        Precision::F64 => f64::EPSILON,
    }
}

#[cfg(test)]
mod tests;
