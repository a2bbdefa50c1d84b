//! BiCGSTAB (SciPy's `bicgstab`).

use super::monitor::Monitor;
use super::ops::{In, Ops};
use super::solution::{Breakdown, Options, Solution};
use super::start::{epsilon, start, Start};
use crate::element::Element;
use crate::error::Result;
use crate::session::{Matrix, Session, Vector};

/// Solves `A·x = b` by BiCGSTAB from `x0` (zeros where `None`), with r̃ = r₀ as SciPy. Each
/// iteration is two products with A, four dot products and the vector updates, with α, β and
/// ω computed on the device; the host reads ‖r‖ and the half-step ‖s‖, which ends the solve
/// early where it meets the tolerance. Breaks down where |ρ| < ε² (info −10), |ω| < ε² or
/// r̃ᵀA·p = 0 (−11).
pub fn bicgstab<T: Element>(
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
    let tol = epsilon::<T>().powi(2);
    let shadow = r.clone();
    let mut monitor = Monitor::new(&ops, atol, options);
    let mut previous: Option<(Vector<T>, Vector<T>, _, _, _)> = None;
    for it in 0..maxiter {
        monitor.begin(&x, ops.nrm2(&r)?);
        let rho = ops.dot(&shadow, &r)?;
        monitor.test(&rho, tol, Breakdown::Rho)?;
        let p = match &previous {
            Some((p, v, rho_previous, alpha, omega)) => {
                monitor.test(omega, tol, Breakdown::Omega)?;
                let beta = ops.mul(&ops.div(&rho, rho_previous)?, &ops.div(alpha, omega)?)?;
                let p_less_v = ops.axpy(In::S(&ops.neg(omega)?), v, p)?;
                ops.axpy(In::S(&beta), &p_less_v, &r)?
            }
            None => r.clone(),
        };
        let p_hat = ops.precondition(jacobi, &p)?;
        let v = product.times(&ops, &p_hat)?;
        let rv = ops.dot(&shadow, &v)?;
        monitor.test(&rv, 0.0, Breakdown::ZeroDenominator)?;
        let alpha = ops.div(&rho, &rv)?;
        let s = ops.axpy(In::S(&ops.neg(&alpha)?), &v, &r)?;
        let x_half = ops.axpy(In::S(&alpha), &p_hat, &x)?;
        monitor.early(ops.nrm2(&s)?, &x_half);
        let s_hat = ops.precondition(jacobi, &s)?;
        let t = product.times(&ops, &s_hat)?;
        let omega = ops.div(&ops.dot(&t, &s)?, &ops.dot(&t, &t)?)?;
        x = ops.axpy(In::S(&omega), &s_hat, &x_half)?;
        r = ops.axpy(In::S(&ops.neg(&omega)?), &t, &s)?;
        previous = Some((p, v, rho, alpha, omega));
        if monitor.end(it + 1 == maxiter, &x)? {
            break;
        }
    }
    Ok(monitor.solution(x, maxiter))
}
