//! BiCG (SciPy's `bicg`): A·p and Aᵀ·p̃ of an iteration are one pass over A.

use super::monitor::Monitor;
use super::ops::{In, Ops};
use super::solution::{Breakdown, Options, Solution};
use super::start::{epsilon, start, Start};
use crate::element::Element;
use crate::error::Result;
use crate::session::{Matrix, Session, Vector};

/// Solves `A·x = b` by biconjugate gradients from `x0` (zeros where `None`), with the shadow
/// residual r̃₀ = r₀ as SciPy. Each iteration's products `A·p` and `Aᵀ·p̃` run fused (BiCGK:
/// A is read once); α and β are computed on the device. Breaks down where |ρ| < ε² (info −10)
/// or p̃ᵀA·p = 0 (−11).
pub fn bicg<T: Element>(
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
    let rho_tol = epsilon::<T>().powi(2);
    let mut shadow = r.clone();
    let mut monitor = Monitor::new(&ops, atol, options);
    let mut previous: Option<(Vector<T>, Vector<T>, _)> = None;
    for it in 0..maxiter {
        monitor.begin(&x, ops.nrm2(&r)?);
        let z = ops.precondition(jacobi, &r)?;
        let z_shadow = ops.precondition(jacobi, &shadow)?;
        let rho = ops.dot(&shadow, &z)?;
        monitor.test(&rho, rho_tol, Breakdown::Rho)?;
        let (p, p_shadow) = match &previous {
            Some((p, p_shadow, rho_previous)) => {
                let beta = ops.div(&rho, rho_previous)?;
                (
                    ops.axpy(In::S(&beta), p, &z)?,
                    ops.axpy(In::S(&beta), p_shadow, &z_shadow)?,
                )
            }
            None => (z, z_shadow),
        };
        let q = product.times(&ops, &p)?;
        let q_shadow = product.transposed_times(&ops, &p_shadow)?;
        let rv = ops.dot(&p_shadow, &q)?;
        monitor.test(&rv, 0.0, Breakdown::ZeroDenominator)?;
        let alpha = ops.div(&rho, &rv)?;
        let minus_alpha = ops.neg(&alpha)?;
        x = ops.axpy(In::S(&alpha), &p, &x)?;
        r = ops.axpy(In::S(&minus_alpha), &q, &r)?;
        shadow = ops.axpy(In::S(&minus_alpha), &q_shadow, &shadow)?;
        previous = Some((p, p_shadow, rho));
        if monitor.end(it + 1 == maxiter, &x)? {
            break;
        }
    }
    Ok(monitor.solution(x, maxiter))
}
