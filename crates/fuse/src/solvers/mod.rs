//! Krylov solvers on a [`Session`](crate::Session): conjugate gradients ([`cg`]), BiCG ([`bicg`]), BiCGSTAB
//! ([`bicgstab`]) and restarted GMRES ([`gmres`]), with SciPy's stopping test and return codes.
//!
//! Each iteration is recorded as the session's BLAS calls, its scalars (α, β, ω) computed on
//! the device by scalar calls, so a flush runs a whole iteration fused — BiCG's `A·p` and
//! `Aᵀ·p̃` in one pass over A — and the only numbers that cross to the host are the residual
//! norms the stopping test reads: one per iteration (BiCGSTAB: two, its half-step residual
//! too), or one per `check_every` iterations.
//!
//! On a distributed session ([`Session::distributed`](crate::Session::distributed)) the same
//! calls run over the ranks, A given as each rank's rows ([`Session::matrix_rows`](crate::Session::matrix_rows)), b and x0 by
//! rows or whole: each rank holds its rows of the vectors, an iteration gathers the vector A
//! multiplies and reduces its scalars (‖r‖ one number combined, never a vector), and every
//! rank reads the same residual, so all end alike — converged, out of iterations or broken
//! down. Read x with [`Session::gather`](crate::Session::gather).
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
mod product;
mod solution;
mod start;

pub use bicg::bicg;
pub use bicgstab::bicgstab;
pub use cg::cg;
pub use gmres::gmres;
pub use solution::{Breakdown, Callback, Options, Outcome, Solution, Symmetry};

#[cfg(test)]
mod tests;
