//! What a solve is given and what it returns.

use std::fmt;
use std::sync::Arc;

use crate::element::Element;
use crate::error::Result;
use crate::session::{Session, Vector};

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
    /// When the products of an exactly symmetric A (checked once a solve, on the host, in one
    /// pass over it) read its upper triangle only: half the bytes each.
    pub symmetry: Symmetry,
}

/// When a solve multiplies an exactly symmetric A by its upper triangle only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Symmetry {
    /// Where A is larger than the CPU's last-level cache ([`crate::cache_bytes`]): from memory,
    /// half the bytes is nearly half the time; from the cache, the triangle's ragged edges and
    /// the check cost more than they save (2048² f32, 16 MiB in a 32 MiB cache, on a Zen 5:
    /// BiCG 0.46× SciPy's time this way, 0.72× reading all of A; CG 0.39× and 0.60×).
    #[default]
    Large,
    /// Wherever A is exactly symmetric.
    Always,
    /// Never: every product reads all of A.
    Never,
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
            .field("symmetry", &self.symmetry)
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
            symmetry: Symmetry::Large,
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

    /// The solution of `A·x = b` for `b` = 0, SciPy's at once: `b` itself.
    pub(super) fn of_zero(b: &Vector<T>) -> Self {
        Solution {
            x: b.clone(),
            iterations: 0,
            outcome: Outcome::Converged,
            residuals: Vec::new(),
        }
    }
}
