//! Where every solve starts: its checks, x₀, r₀ and its tolerance.

use fuse_core::Precision;

use super::ops::{In, Ops};
use super::product::Product;
use super::solution::Options;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::session::{Matrix, Vector};

/// Where a solve starts.
pub(super) struct Start<T: Element> {
    /// x₀ (zeros where not given).
    pub x: Vector<T>,
    /// r₀ = b − A·x₀.
    pub r: Vector<T>,
    /// ‖b‖.
    pub b_norm: f64,
    /// The tolerance on ‖r‖: SciPy's `max(rtol·‖b‖, atol)`.
    pub atol: f64,
    /// The iteration limit: 10·n unless given.
    pub maxiter: usize,
    /// The iterations' products with A.
    pub product: Product<T>,
}

/// A solve's checks, then its start — unless ‖b‖ = 0, where the solution is 0. The one read
/// before the iterations is ‖b‖.
pub(super) fn start<T: Element>(
    ops: &Ops<'_, T>,
    a: &Matrix<T>,
    b: &Vector<T>,
    x0: Option<&Vector<T>>,
    options: &Options<T>,
) -> Result<Option<Start<T>>> {
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
    Ok(Some(Start {
        x,
        r,
        b_norm,
        atol: options.atol.max(options.rtol * b_norm),
        maxiter: options.maxiter.unwrap_or(10 * b.len()),
        product: Product::of(ops, a, options)?,
    }))
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
pub(super) fn epsilon<T: Element>() -> f64 {
    match T::PRECISION {
        Precision::F32 => f64::from(f32::EPSILON),
        Precision::F64 => f64::EPSILON,
    }
}
