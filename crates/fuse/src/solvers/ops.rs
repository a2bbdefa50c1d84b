//! The BLAS and scalar calls the solvers record, by library name, for either precision.

use crate::element::Element;
use crate::error::{Error, Result};
use crate::session::{AnyHandle, CallArg, Matrix, Scalar, Session, Vector};

/// An argument: a session value or a literal.
pub(super) enum In<'a, T: Element> {
    /// A scalar held by the session.
    S(&'a Scalar<T>),
    /// A vector.
    V(&'a Vector<T>),
    /// A matrix.
    M(&'a Matrix<T>),
    /// A literal.
    L(f64),
}

/// Records calls on one session.
pub(super) struct Ops<'s, T: Element> {
    pub session: &'s Session<T>,
}

impl<T: Element> Ops<'_, T> {
    fn call(&self, function: &str, args: &[In<'_, T>]) -> Result<AnyHandle<T>> {
        let args: Vec<CallArg<'_, T>> = args
            .iter()
            .map(|a| match a {
                In::S(s) => CallArg::Handle(*s),
                In::V(v) => CallArg::Handle(*v),
                In::M(m) => CallArg::Handle(*m),
                In::L(x) => CallArg::Literal(T::from_f64(*x)),
            })
            .collect();
        self.session.call(function, &args)
    }

    /// A call whose result is a vector.
    pub fn vector(&self, function: &str, args: &[In<'_, T>]) -> Result<Vector<T>> {
        match self.call(function, args)? {
            AnyHandle::Vector(v) => Ok(v),
            _ => Err(Error::Internal(format!(
                "the library's `{function}` does not return a vector"
            ))),
        }
    }

    /// A call whose result is a matrix.
    pub fn matrix(&self, function: &str, args: &[In<'_, T>]) -> Result<Matrix<T>> {
        match self.call(function, args)? {
            AnyHandle::Matrix(m) => Ok(m),
            _ => Err(Error::Internal(format!(
                "the library's `{function}` does not return a matrix"
            ))),
        }
    }

    /// A call whose result is a scalar.
    pub fn scalar(&self, function: &str, args: &[In<'_, T>]) -> Result<Scalar<T>> {
        match self.call(function, args)? {
            AnyHandle::Scalar(s) => Ok(s),
            _ => Err(Error::Internal(format!(
                "the library's `{function}` does not return a scalar"
            ))),
        }
    }

    /// `A·x`.
    pub fn gemv(&self, a: &Matrix<T>, x: &Vector<T>) -> Result<Vector<T>> {
        self.vector("gemv", &[In::M(a), In::V(x)])
    }

    /// `Aᵀ·x`.
    pub fn gemtv(&self, a: &Matrix<T>, x: &Vector<T>) -> Result<Vector<T>> {
        self.vector("gemtv", &[In::M(a), In::V(x)])
    }

    /// `b − A·x`.
    pub fn residual(&self, a: &Matrix<T>, x: &Vector<T>, b: &Vector<T>) -> Result<Vector<T>> {
        self.vector("gemv", &[In::L(-1.0), In::M(a), In::V(x), In::L(1.0), In::V(b)])
    }

    /// `a·x + y`.
    pub fn axpy(&self, a: In<'_, T>, x: &Vector<T>, y: &Vector<T>) -> Result<Vector<T>> {
        self.vector("axpy", &[a, In::V(x), In::V(y)])
    }

    /// `xᵀ·y`.
    pub fn dot(&self, x: &Vector<T>, y: &Vector<T>) -> Result<Scalar<T>> {
        self.scalar("dot", &[In::V(x), In::V(y)])
    }

    /// `‖x‖₂`.
    pub fn nrm2(&self, x: &Vector<T>) -> Result<Scalar<T>> {
        self.scalar("nrm2", &[In::V(x)])
    }

    /// `a / b`.
    pub fn div(&self, a: &Scalar<T>, b: &Scalar<T>) -> Result<Scalar<T>> {
        self.scalar("div", &[In::S(a), In::S(b)])
    }

    /// `a · b`.
    pub fn mul(&self, a: &Scalar<T>, b: &Scalar<T>) -> Result<Scalar<T>> {
        self.scalar("mul", &[In::S(a), In::S(b)])
    }

    /// `−a`.
    pub fn neg(&self, a: &Scalar<T>) -> Result<Scalar<T>> {
        self.scalar("neg", &[In::S(a)])
    }

    /// `M·r`: the Jacobi preconditioner `d∘r` where there is one, else `r` itself.
    pub fn precondition(&self, jacobi: Option<&Vector<T>>, r: &Vector<T>) -> Result<Vector<T>> {
        match jacobi {
            Some(d) => self.vector("hadamard", &[In::V(d), In::V(r)]),
            None => Ok(r.clone()),
        }
    }

    /// A guard on `v`: +0 where `|v| ≥ tol` (`tol` > 0) or `v ≠ 0` (`tol` = 0), NaN otherwise —
    /// so that adding it to a residual makes the residual NaN exactly where `v` breaks the
    /// iteration down, computed on the device.
    pub fn guard(&self, v: &Scalar<T>, tol: f64) -> Result<Scalar<T>> {
        // √(|v| − tol) is NaN below tol; 1/v is ±inf at 0; w − w is 0, or NaN for NaN or ±inf.
        let w = match tol > 0.0 {
            true => {
                let abs = self.scalar("abs", &[In::S(v)])?;
                let above = self.scalar("sub", &[In::S(&abs), In::L(tol)])?;
                self.scalar("sqrt", &[In::S(&above)])?
            }
            false => self.scalar("recip", &[In::S(v)])?,
        };
        self.scalar("sub", &[In::S(&w), In::S(&w)])
    }

    /// `a + b`.
    pub fn plus(&self, a: &Scalar<T>, b: &Scalar<T>) -> Result<Scalar<T>> {
        self.scalar("plus", &[In::S(a), In::S(b)])
    }
}
