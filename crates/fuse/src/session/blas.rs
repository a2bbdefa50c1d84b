//! The BLAS-named calls of a session: `s` names on `Session<f32>`, `d` names on `Session<f64>`,
//! each recording one form of a library function.

use std::sync::Arc;

use super::handle::{sealed::Sealed, Matrix, Scalar, ScalarArg, Token, Vector};
use super::{Operand, Session};
use crate::element::Element;
use crate::error::Result;

/// An array handle as a call argument.
fn value(token: &Arc<Token>) -> Operand<'_> {
    Operand::Value(token)
}

/// A scalar handle or literal as a call argument.
fn scalar<'a, T: Element>(arg: impl Into<ScalarArg<'a, T>>) -> Operand<'a> {
    let arg: ScalarArg<'a, T> = arg.into();
    Operand::from(arg)
}

/// Records calls whose result kind is known statically.
impl<T: Element> Session<T> {
    fn vector_call(&self, function: &str, args: &[Operand<'_>]) -> Result<Vector<T>> {
        self.call(function, args).map(Vector::new)
    }

    fn scalar_call(&self, function: &str, args: &[Operand<'_>]) -> Result<Scalar<T>> {
        self.call(function, args).map(Scalar::new)
    }

    fn matrix_call(&self, function: &str, args: &[Operand<'_>]) -> Result<Matrix<T>> {
        self.call(function, args).map(Matrix::new)
    }
}

/// The calls of one precision; `$t` is the element type, then the method name of each form.
macro_rules! blas_calls {
    ($t:ty, $p:literal; $scal:ident, $axpy:ident, $axpby:ident, $add:ident, $copy:ident, $dot:ident,
     $asum:ident, $nrm2:ident, $gemv:ident, $gemv_a:ident, $gemv_ab:ident, $gemtv:ident,
     $gemtv_a:ident, $gemtv_ab:ident, $ger:ident, $ger_a:ident, $madd:ident) => {
        /// BLAS calls in
        #[doc = $p]
        /// — each records a call and returns its result's handle at once, or an error if an
        /// argument's shape does not fit or a handle is not this session's.
        impl Session<$t> {
            #[doc = concat!("`", stringify!($scal), "(a, x)` = a·x.")]
            pub fn $scal<'s>(&self, a: impl Into<ScalarArg<'s, $t>>, x: &Vector<$t>) -> Result<Vector<$t>> {
                self.vector_call("scal", &[scalar(a), value(x.token())])
            }

            #[doc = concat!("`", stringify!($axpy), "(a, x, y)` = a·x + y.")]
            pub fn $axpy<'s>(
                &self,
                a: impl Into<ScalarArg<'s, $t>>,
                x: &Vector<$t>,
                y: &Vector<$t>,
            ) -> Result<Vector<$t>> {
                self.vector_call("axpy", &[scalar(a), value(x.token()), value(y.token())])
            }

            #[doc = concat!("`", stringify!($axpby), "(a, x, b, y)` = a·x + b·y.")]
            pub fn $axpby<'s>(
                &self,
                a: impl Into<ScalarArg<'s, $t>>,
                x: &Vector<$t>,
                b: impl Into<ScalarArg<'s, $t>>,
                y: &Vector<$t>,
            ) -> Result<Vector<$t>> {
                let args = [scalar(a), value(x.token()), scalar(b), value(y.token())];
                self.vector_call("axpby", &args)
            }

            #[doc = concat!("`", stringify!($add), "(x, y)` = x + y.")]
            pub fn $add(&self, x: &Vector<$t>, y: &Vector<$t>) -> Result<Vector<$t>> {
                self.vector_call("add", &[value(x.token()), value(y.token())])
            }

            #[doc = concat!("`", stringify!($copy), "(x)` = x, as a new value.")]
            pub fn $copy(&self, x: &Vector<$t>) -> Result<Vector<$t>> {
                self.vector_call("copy", &[value(x.token())])
            }

            #[doc = concat!("`", stringify!($dot), "(x, y)` = xᵀ·y.")]
            pub fn $dot(&self, x: &Vector<$t>, y: &Vector<$t>) -> Result<Scalar<$t>> {
                self.scalar_call("dot", &[value(x.token()), value(y.token())])
            }

            #[doc = concat!("`", stringify!($asum), "(x)` = Σ|xᵢ|.")]
            pub fn $asum(&self, x: &Vector<$t>) -> Result<Scalar<$t>> {
                self.scalar_call("asum", &[value(x.token())])
            }

            #[doc = concat!("`", stringify!($nrm2), "(x)` = ‖x‖₂.")]
            pub fn $nrm2(&self, x: &Vector<$t>) -> Result<Scalar<$t>> {
                self.scalar_call("nrm2", &[value(x.token())])
            }

            #[doc = concat!("`", stringify!($gemv), "(A, x)` = A·x, for A m×n and x of length n.")]
            pub fn $gemv(&self, a: &Matrix<$t>, x: &Vector<$t>) -> Result<Vector<$t>> {
                self.vector_call("gemv", &[value(a.token()), value(x.token())])
            }

            #[doc = concat!("`", stringify!($gemv_a), "(alpha, A, x)` = alpha·A·x.")]
            pub fn $gemv_a<'s>(
                &self,
                alpha: impl Into<ScalarArg<'s, $t>>,
                a: &Matrix<$t>,
                x: &Vector<$t>,
            ) -> Result<Vector<$t>> {
                self.vector_call("gemv", &[scalar(alpha), value(a.token()), value(x.token())])
            }

            #[doc = concat!("`", stringify!($gemv_ab), "(alpha, A, x, beta, y)` = alpha·A·x + beta·y.")]
            pub fn $gemv_ab<'s>(
                &self,
                alpha: impl Into<ScalarArg<'s, $t>>,
                a: &Matrix<$t>,
                x: &Vector<$t>,
                beta: impl Into<ScalarArg<'s, $t>>,
                y: &Vector<$t>,
            ) -> Result<Vector<$t>> {
                let args = [
                    scalar(alpha),
                    value(a.token()),
                    value(x.token()),
                    scalar(beta),
                    value(y.token()),
                ];
                self.vector_call("gemv", &args)
            }

            #[doc = concat!("`", stringify!($gemtv), "(A, x)` = Aᵀ·x, for A m×n and x of length m.")]
            pub fn $gemtv(&self, a: &Matrix<$t>, x: &Vector<$t>) -> Result<Vector<$t>> {
                self.vector_call("gemtv", &[value(a.token()), value(x.token())])
            }

            #[doc = concat!("`", stringify!($gemtv_a), "(alpha, A, x)` = alpha·Aᵀ·x.")]
            pub fn $gemtv_a<'s>(
                &self,
                alpha: impl Into<ScalarArg<'s, $t>>,
                a: &Matrix<$t>,
                x: &Vector<$t>,
            ) -> Result<Vector<$t>> {
                self.vector_call("gemtv", &[scalar(alpha), value(a.token()), value(x.token())])
            }

            #[doc = concat!("`", stringify!($gemtv_ab), "(alpha, A, x, beta, y)` = alpha·Aᵀ·x + beta·y.")]
            pub fn $gemtv_ab<'s>(
                &self,
                alpha: impl Into<ScalarArg<'s, $t>>,
                a: &Matrix<$t>,
                x: &Vector<$t>,
                beta: impl Into<ScalarArg<'s, $t>>,
                y: &Vector<$t>,
            ) -> Result<Vector<$t>> {
                let args = [
                    scalar(alpha),
                    value(a.token()),
                    value(x.token()),
                    scalar(beta),
                    value(y.token()),
                ];
                self.vector_call("gemtv", &args)
            }

            #[doc = concat!("`", stringify!($ger), "(x, y, A)` = A + x·yᵀ, for x of length m, y of length n, A m×n.")]
            pub fn $ger(&self, x: &Vector<$t>, y: &Vector<$t>, a: &Matrix<$t>) -> Result<Matrix<$t>> {
                self.matrix_call("ger", &[value(x.token()), value(y.token()), value(a.token())])
            }

            #[doc = concat!("`", stringify!($ger_a), "(alpha, x, y, A)` = A + alpha·x·yᵀ.")]
            pub fn $ger_a<'s>(
                &self,
                alpha: impl Into<ScalarArg<'s, $t>>,
                x: &Vector<$t>,
                y: &Vector<$t>,
                a: &Matrix<$t>,
            ) -> Result<Matrix<$t>> {
                self.matrix_call(
                    "ger",
                    &[
                        scalar(alpha),
                        value(x.token()),
                        value(y.token()),
                        value(a.token()),
                    ],
                )
            }

            #[doc = concat!("`", stringify!($madd), "(A, B)` = A + B.")]
            pub fn $madd(&self, a: &Matrix<$t>, b: &Matrix<$t>) -> Result<Matrix<$t>> {
                self.matrix_call("madd", &[value(a.token()), value(b.token())])
            }
        }
    };
}

blas_calls!(f32, "single precision (`Session<f32>`, `s` names)"; sscal, saxpy, saxpby, sadd, scopy, sdot, sasum,
    snrm2, sgemv, sgemv_a, sgemv_ab, sgemtv, sgemtv_a, sgemtv_ab, sger, sger_a, smadd);
blas_calls!(f64, "double precision (`Session<f64>`, `d` names)"; dscal, daxpy, daxpby, dadd, dcopy, ddot, dasum,
    dnrm2, dgemv, dgemv_a, dgemv_ab, dgemtv, dgemtv_a, dgemtv_ab, dger, dger_a, dmadd);
