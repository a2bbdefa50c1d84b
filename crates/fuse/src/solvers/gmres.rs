//! Restarted GMRES (SciPy's `gmres`), its Gram–Schmidt as products with the Krylov basis.

use super::ops::{In, Ops};
use super::product::Product;
use super::solution::{Options, Outcome, Solution};
use super::start::{epsilon, start, Start};
use crate::element::Element;
use crate::error::Result;
use crate::session::{Matrix, Session, Vector};

/// Solves `A·x = b` by GMRES restarted every `options.restart` iterations (20 where `None`,
/// at most n) from `x0` (zeros where `None`), with SciPy's outer loop: `maxiter` counts
/// restart cycles, and its inner tolerance adapts as SciPy's does.
///
/// The Krylov basis is a matrix V of `restart + 1` rows in the session (see [`Basis`] for a
/// distributed session). Orthogonalising a new vector w is classical Gram–Schmidt done twice,
/// each time `h = V·w; w = w − Vᵀ·h`: a row walk of V and a column walk reading its finished
/// row sums, so each pass reads V once (ATAX's fusion). The small Hessenberg least-squares
/// problem is solved on the host, as SciPy does: an iteration reads back its column of H
/// (`restart + 1` numbers and two norms), never a vector.
pub fn gmres<T: Element>(
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
        b_norm,
        atol,
        maxiter,
        product,
    }) = start(&ops, a, b, x0, options)?
    else {
        return Ok(Solution::of_zero(b));
    };
    let n = b.len();
    let restart = options.restart.unwrap_or(20).clamp(1, n.max(1));
    let jacobi = options.jacobi.as_ref();
    let read = |s: &crate::Scalar<T>| -> Result<f64> { Ok(session.read_scalar(s)?.to_f64()) };
    let mut r_norm = read(&ops.nrm2(&r)?)?;
    let mut residuals = vec![r_norm];
    if r_norm < atol {
        return Ok(Solution {
            x,
            iterations: 0,
            outcome: Outcome::Converged,
            residuals,
        });
    }
    let m_b_norm = read(&ops.nrm2(&ops.precondition(jacobi, b)?)?)?;
    let eps = epsilon::<T>();
    let mut ptol_max_factor: f64 = 1.0;
    let mut ptol = m_b_norm * ptol_max_factor.min(atol / b_norm);
    let basis = Basis::new(session, n, restart + 1)?;
    let mut cycles = 0;
    while cycles < maxiter && r_norm > atol {
        cycles += 1;
        let cycle = arnoldi(&ops, &product, jacobi, &r, &basis, ptol, eps)?;
        residuals.extend(&cycle.estimates);
        let y: Vec<T> = (cycle.y.iter().copied().map(T::from_f64))
            .chain(std::iter::repeat(T::from_f64(0.0)))
            .take(restart + 1)
            .collect();
        let y = session.vector(y)?;
        x = basis.combine(&ops, &cycle.basis, 1.0, &y, &x)?;
        r = ops.residual(a, &x, b)?;
        r_norm = read(&ops.nrm2(&r)?)?;
        if let Some(callback) = &options.callback {
            callback(session, cycles, r_norm, &x)?;
        }
        if cycle.breakdown {
            break;
        }
        ptol_max_factor = match cycle.presid <= ptol {
            true => f64::max(eps, 0.25 * ptol_max_factor),
            false => f64::min(1.0, 1.5 * ptol_max_factor),
        };
        ptol = cycle.presid * ptol_max_factor.min(atol / r_norm);
    }
    let outcome = match r_norm <= atol {
        true => Outcome::Converged,
        false => Outcome::MaxIterations,
    };
    Ok(Solution {
        x,
        iterations: cycles,
        outcome,
        residuals,
    })
}

/// What one restart cycle found.
struct Cycle<T: Element> {
    /// The basis (v₀ … v_k set, zeros after), held as [`Basis`] says.
    basis: Matrix<T>,
    /// The least-squares coefficients of the basis.
    y: Vec<f64>,
    /// The residual norm the rotations estimate after each iteration.
    estimates: Vec<f64>,
    /// The last estimate.
    presid: f64,
    /// Whether w vanished (the Krylov space holds the solution).
    breakdown: bool,
}

/// One restart cycle from residual `r`: Arnoldi with twice-classical Gram–Schmidt, Givens
/// rotations on the host, until the estimate meets `ptol`, w vanishes, or the basis is full.
#[allow(clippy::too_many_arguments)]
fn arnoldi<T: Element>(
    ops: &Ops<'_, T>,
    product: &Product<T>,
    jacobi: Option<&Vector<T>>,
    r: &Vector<T>,
    layout: &Basis<T>,
    ptol: f64,
    eps: f64,
) -> Result<Cycle<T>> {
    let session = ops.session;
    let restart = layout.units.len() - 1;
    let v0 = ops.precondition(jacobi, r)?;
    let v0_norm = ops.nrm2(&v0)?;
    let v0 = ops.vector("scal", &[In::S(&ops.scalar("recip", &[In::S(&v0_norm)])?), In::V(&v0)])?;
    let mut basis = layout.set(ops, &layout.empty, 0, &v0)?;
    let mut vectors = vec![v0];
    let mut s = vec![0.0; restart + 1];
    s[0] = session.read_scalar(&v0_norm)?.to_f64();
    let mut h: Vec<Vec<f64>> = Vec::new();
    let mut givens: Vec<(f64, f64)> = Vec::new();
    let (mut estimates, mut breakdown) = (Vec::new(), false);
    for col in 0..restart {
        let w = ops.precondition(jacobi, &product.times(ops, &vectors[col])?)?;
        let h0 = ops.nrm2(&w)?;
        let (w, coefficients) = orthogonalise(ops, layout, &basis, w)?;
        let h1 = ops.nrm2(&w)?;
        let mut column: Vec<f64> = layout.read(session, &coefficients)?;
        column.truncate(col + 1);
        let (h0, h1_value) = (session.read_scalar(&h0)?.to_f64(), session.read_scalar(&h1)?.to_f64());
        column.push(h1_value);
        if h1_value <= eps * h0 {
            column[col + 1] = 0.0;
            breakdown = true;
        } else {
            let next = ops.vector("scal", &[In::S(&ops.scalar("recip", &[In::S(&h1)])?), In::V(&w)])?;
            basis = layout.set(ops, &basis, col + 1, &next)?;
            vectors.push(next);
        }
        let presid = rotate(&mut column, &mut givens, &mut s, col);
        h.push(column);
        estimates.push(presid);
        if presid <= ptol || breakdown {
            break;
        }
    }
    let k = h.len();
    let presid = estimates.last().copied().unwrap_or(0.0);
    Ok(Cycle {
        basis,
        y: back_substitute(&h, &s[..k]),
        estimates,
        presid,
        breakdown,
    })
}

/// `w` made orthogonal to the vectors of `basis` by classical Gram–Schmidt twice
/// (`h = V·w; w = w − Vᵀ·h`, again, the coefficients added): the vector, and the coefficients.
fn orthogonalise<T: Element>(
    ops: &Ops<'_, T>,
    layout: &Basis<T>,
    basis: &Matrix<T>,
    w: Vector<T>,
) -> Result<(Vector<T>, Vector<T>)> {
    let mut w = w;
    let mut total: Option<Vector<T>> = None;
    for _ in 0..2 {
        let h = layout.project(ops, basis, &w)?;
        w = layout.combine(ops, basis, -1.0, &h, &w)?;
        total = Some(match total {
            Some(t) => ops.vector("add", &[In::V(&t), In::V(&h)])?,
            None => h,
        });
    }
    Ok((w, total.expect("two passes")))
}

/// Applies the past Givens rotations to Hessenberg column `column` (entries 0 … col+1), then a
/// new one that zeroes its last entry, to it and to the right-hand side `s`; returns the
/// residual norm it leaves, |s[col+1]|.
fn rotate(column: &mut [f64], givens: &mut Vec<(f64, f64)>, s: &mut [f64], col: usize) -> f64 {
    for (k, &(c, sn)) in givens.iter().enumerate() {
        let (n0, n1) = (column[k], column[k + 1]);
        column[k] = c * n0 + sn * n1;
        column[k + 1] = -sn * n0 + c * n1;
    }
    let (f, g) = (column[col], column[col + 1]);
    let magnitude = f.hypot(g);
    let (c, sn) = match magnitude {
        0.0 => (1.0, 0.0),
        m => (f / m, g / m),
    };
    givens.push((c, sn));
    column[col] = magnitude;
    column[col + 1] = 0.0;
    let next = -sn * s[col];
    s[col] *= c;
    s[col + 1] = next;
    next.abs()
}

/// y solving the upper triangular system of the rotated columns `h` (h[j][i], row i of column
/// j) with right-hand side `s`; a zero diagonal entry leaves its unknown 0, as SciPy does.
fn back_substitute(h: &[Vec<f64>], s: &[f64]) -> Vec<f64> {
    let k = h.len();
    let mut y = s.to_vec();
    if k > 0 && h[k - 1][k - 1] == 0.0 {
        y[k - 1] = 0.0;
    }
    for j in (0..k).rev() {
        if y[j] != 0.0 {
            y[j] /= h[j][j];
            let t = y[j];
            for (i, yi) in y.iter_mut().enumerate().take(j) {
                *yi -= t * h[j][i];
            }
        }
    }
    y
}

/// How the Krylov basis V (vectors v₀ … v_{m−1}, each of length n) is held in the session.
///
/// In one process V is an m×n matrix, a vector a row. A distributed session splits every
/// matrix of a flush by the same rows, A's (its planner refuses matrices of other row counts),
/// so there the basis is Vᵀ, n×m, split by rows like A and the vectors: each rank holds its
/// elements of every basis vector. Then `h = V·w` is each rank's partial sum combined by one
/// all-reduce of m numbers, `w − Vᵀ·h` and x's update are local, and an iteration's only
/// vector exchange is the gather of the v that A multiplies. (The price: a Gram–Schmidt pass
/// reads a rank's rows of Vᵀ twice, the sum over all of them being due before the product.)
struct Basis<T: Element> {
    /// Held as Vᵀ.
    transposed: bool,
    /// The basis with no vector set: zeros.
    empty: Matrix<T>,
    /// e₀ … e_{m−1}, each of length m (a vector is set by `ger` with one).
    units: Vec<Vector<T>>,
}

impl<T: Element> Basis<T> {
    /// An empty basis of `m` vectors of length `n`.
    fn new(session: &Session<T>, n: usize, m: usize) -> Result<Self> {
        let transposed = session.communicator().is_some();
        let (rows, cols) = if transposed { (n, m) } else { (m, n) };
        let local = session.rows(rows)?.len();
        Ok(Basis {
            transposed,
            empty: session.matrix_rows(rows, cols, vec![T::from_f64(0.0); local * cols])?,
            units: unit_vectors(session, m)?,
        })
    }

    /// `basis` with `v` as its vector `k`.
    fn set(&self, ops: &Ops<'_, T>, basis: &Matrix<T>, k: usize, v: &Vector<T>) -> Result<Matrix<T>> {
        let (x, y) = match self.transposed {
            true => (v, &self.units[k]),
            false => (&self.units[k], v),
        };
        ops.matrix("ger", &[In::V(x), In::V(y), In::M(basis)])
    }

    /// `V·w`: w's products with the basis vectors.
    fn project(&self, ops: &Ops<'_, T>, basis: &Matrix<T>, w: &Vector<T>) -> Result<Vector<T>> {
        ops.vector(self.product(false), &[In::M(basis), In::V(w)])
    }

    /// `a·Vᵀ·y + w`: the basis vectors weighted by `y`, times `a`, added to `w`.
    fn combine(&self, ops: &Ops<'_, T>, basis: &Matrix<T>, a: f64, y: &Vector<T>, w: &Vector<T>) -> Result<Vector<T>> {
        let args = [In::L(a), In::M(basis), In::V(y), In::L(1.0), In::V(w)];
        ops.vector(self.product(true), &args)
    }

    /// The BLAS name of the product with V (with Vᵀ where `transpose`) as the basis is held.
    fn product(&self, transpose: bool) -> &'static str {
        match transpose != self.transposed {
            false => "gemv",
            true => "gemtv",
        }
    }

    /// The elements of `coefficients` (a vector of length m), on every rank: held whole unless
    /// m is n, whose symbol a distributed flush splits, and then gathered.
    fn read(&self, session: &Session<T>, coefficients: &Vector<T>) -> Result<Vec<f64>> {
        let values = match session.local_rows(coefficients)? {
            Some(_) => session.gather(coefficients)?,
            None => session.read(coefficients)?,
        };
        Ok(values.into_iter().map(T::to_f64).collect())
    }
}

/// e₀ … e_{m−1}, each of length m, in the session (the basis's rows are set by `ger` with them).
fn unit_vectors<T: Element>(session: &Session<T>, m: usize) -> Result<Vec<Vector<T>>> {
    (0..m)
        .map(|k| session.vector((0..m).map(|i| T::from_f64(f64::from(u8::from(i == k)))).collect()))
        .collect()
}
