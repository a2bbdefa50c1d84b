//! Conjugate gradients (SciPy's `cg`), for symmetric positive definite A.

use super::monitor::Monitor;
use super::ops::{In, Ops};
use super::solution::{Breakdown, Options, Solution};
use super::start::{start, Start};
use crate::element::Element;
use crate::error::Result;
use crate::session::{Matrix, Session, Vector};

/// Solves `A·x = b` by conjugate gradients from `x0` (zeros where `None`). Each iteration
/// is one product with A, two dot products and three vector updates, with α and β computed on
/// the device; it breaks down where `pᵀA·p = 0`.
pub fn cg<T: Element>(
    session: &Session<T>,
    a: &Matrix<T>,
    b: &Vector<T>,
    x0: Option<&Vector<T>>,
    options: &Options<T>,
) -> Result<Solution<T>> {
    let ops = Ops { session };
    let Some(Start {
        mut x,
        mut r,
        atol,
        maxiter,
        product,
        ..
    }) = start(&ops, a, b, x0, options)?
    else {
        return Ok(Solution::of_zero(b));
    };
    let jacobi = options.jacobi.as_ref();
    let mut monitor = Monitor::new(&ops, atol, options);
    let mut previous: Option<(Vector<T>, _)> = None;
    for it in 0..maxiter {
        monitor.begin(&x, ops.nrm2(&r)?);
        let z = ops.precondition(jacobi, &r)?;
        let rho = ops.dot(&r, &z)?;
        let p = match &previous {
            Some((p, rho_previous)) => ops.axpy(In::S(&ops.div(&rho, rho_previous)?), p, &z)?,
            None => z,
        };
        let q = product.times(&ops, &p)?;
        let pq = ops.dot(&p, &q)?;
        monitor.test(&pq, 0.0, Breakdown::ZeroDenominator)?;
        let alpha = ops.div(&rho, &pq)?;
        x = ops.axpy(In::S(&alpha), &p, &x)?;
        r = ops.axpy(In::S(&ops.neg(&alpha)?), &q, &r)?;
        previous = Some((p, rho));
        if monitor.end(it + 1 == maxiter, &x)? {
            break;
        }
    }
    Ok(monitor.solution(x, maxiter))
}
