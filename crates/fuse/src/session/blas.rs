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
    Operand::from(arg.into())
}

/// The parameter type of an argument kind in element type `$t`: a scalar is a handle or a
/// literal, a vector or matrix a handle.
macro_rules! param {
    (Scalar, $t:ty) => { impl Into<ScalarArg<'s, $t>> };
    ($handle:ident, $t:ty) => { &$handle<$t> };
}

/// A parameter of an argument kind as a call argument.
macro_rules! operand {
    (Scalar, $arg:ident) => {
        scalar($arg)
    };
    ($handle:ident, $arg:ident) => {
        value($arg.token())
    };
}

/// Defines the calls of a table whose rows read `s-name d-name (shown arguments) "result" =
/// library-function(parameter: kind, …) -> result kind`, once per precision: each method is a
/// row, written once for both element types.
macro_rules! blas_calls {
    ($($s:ident $d:ident $shown:tt $doc:literal
       = $function:ident($($arg:ident: $kind:ident),*) -> $ret:ident;)*) => {
        blas_calls!(@impl f32, "single precision (`Session<f32>`, `s` names)";
            $($s $shown $doc = $function($($arg: $kind),*) -> $ret;)*);
        blas_calls!(@impl f64, "double precision (`Session<f64>`, `d` names)";
            $($d $shown $doc = $function($($arg: $kind),*) -> $ret;)*);
    };
    (@impl $t:ty, $precision:literal;
     $($name:ident $shown:tt $doc:literal = $function:ident($($arg:ident: $kind:ident),*) -> $ret:ident;)*) => {
        /// BLAS calls in
        #[doc = $precision]
        /// — each records a call and returns its result's handle at once, or an error if an
        /// argument's shape does not fit or a handle is not this session's.
        // `'s`: how long a call's scalar arguments are borrowed; unused by calls without one.
        impl<'s> Session<$t> {
            $(
                #[doc = concat!("`", stringify!($name), stringify!($shown), "` = ", $doc, ".")]
                pub fn $name(&self, $($arg: param!($kind, $t)),*) -> Result<$ret<$t>> {
                    let args = [$(operand!($kind, $arg)),*];
                    self.record_call(stringify!($function), &args).map($ret::new)
                }
            )*
        }
    };
}

blas_calls! {
    sscal dscal (a, x) "a·x" = scal(a: Scalar, x: Vector) -> Vector;
    saxpy daxpy (a, x, y) "a·x + y" = axpy(a: Scalar, x: Vector, y: Vector) -> Vector;
    saxpby daxpby (a, x, b, y) "a·x + b·y" = axpby(a: Scalar, x: Vector, b: Scalar, y: Vector) -> Vector;
    sadd dadd (x, y) "x + y" = add(x: Vector, y: Vector) -> Vector;
    scopy dcopy (x) "x, as a new value" = copy(x: Vector) -> Vector;
    sdot ddot (x, y) "xᵀ·y" = dot(x: Vector, y: Vector) -> Scalar;
    sasum dasum (x) "Σ|xᵢ|" = asum(x: Vector) -> Scalar;
    snrm2 dnrm2 (x) "‖x‖₂" = nrm2(x: Vector) -> Scalar;
    sgemv dgemv (A, x) "A·x, for A m×n and x of length n" = gemv(a: Matrix, x: Vector) -> Vector;
    sgemv_a dgemv_a (alpha, A, x) "alpha·A·x" = gemv(alpha: Scalar, a: Matrix, x: Vector) -> Vector;
    sgemv_ab dgemv_ab (alpha, A, x, beta, y) "alpha·A·x + beta·y"
        = gemv(alpha: Scalar, a: Matrix, x: Vector, beta: Scalar, y: Vector) -> Vector;
    sgemtv dgemtv (A, x) "Aᵀ·x, for A m×n and x of length m" = gemtv(a: Matrix, x: Vector) -> Vector;
    sgemtv_a dgemtv_a (alpha, A, x) "alpha·Aᵀ·x" = gemtv(alpha: Scalar, a: Matrix, x: Vector) -> Vector;
    sgemtv_ab dgemtv_ab (alpha, A, x, beta, y) "alpha·Aᵀ·x + beta·y"
        = gemtv(alpha: Scalar, a: Matrix, x: Vector, beta: Scalar, y: Vector) -> Vector;
    sger dger (x, y, A) "A + x·yᵀ, for x of length m, y of length n, A m×n"
        = ger(x: Vector, y: Vector, a: Matrix) -> Matrix;
    sger_a dger_a (alpha, x, y, A) "A + alpha·x·yᵀ" = ger(alpha: Scalar, x: Vector, y: Vector, a: Matrix) -> Matrix;
    smadd dmadd (A, B) "A + B" = madd(a: Matrix, b: Matrix) -> Matrix;
    souter douter (x, y) "x·yᵀ, for x of length m and y of length n: a new m×n matrix"
        = outer(x: Vector, y: Vector) -> Matrix;
    souter_a douter_a (alpha, x, y) "alpha·x·yᵀ" = outer(alpha: Scalar, x: Vector, y: Vector) -> Matrix;
    smscal dmscal (alpha, A) "alpha·A, a new matrix" = mscal(alpha: Scalar, a: Matrix) -> Matrix;
    strmv_upper dtrmv_upper (A, x) "U·x, U the upper triangle of the n×n A (the other never read)"
        = trmv_upper(a: Matrix, x: Vector) -> Vector;
    strmv_lower dtrmv_lower (A, x) "L·x, L the lower triangle of A" = trmv_lower(a: Matrix, x: Vector) -> Vector;
    strmv_upper_unit dtrmv_upper_unit (A, x) "U·x, U the upper triangle of A with ones on its diagonal"
        = trmv_upper_unit(a: Matrix, x: Vector) -> Vector;
    strmv_lower_unit dtrmv_lower_unit (A, x) "L·x, L the lower triangle of A with ones on its diagonal"
        = trmv_lower_unit(a: Matrix, x: Vector) -> Vector;
    strmtv_upper dtrmtv_upper (A, x) "Uᵀ·x, U the upper triangle of A" = trmtv_upper(a: Matrix, x: Vector) -> Vector;
    strmtv_lower dtrmtv_lower (A, x) "Lᵀ·x, L the lower triangle of A" = trmtv_lower(a: Matrix, x: Vector) -> Vector;
    strmtv_upper_unit dtrmtv_upper_unit (A, x) "Uᵀ·x, U the upper triangle of A with ones on its diagonal"
        = trmtv_upper_unit(a: Matrix, x: Vector) -> Vector;
    strmtv_lower_unit dtrmtv_lower_unit (A, x) "Lᵀ·x, L the lower triangle of A with ones on its diagonal"
        = trmtv_lower_unit(a: Matrix, x: Vector) -> Vector;
    splus dplus (a, b) "a + b, of scalars (computed on the device, where a later call reads it)"
        = plus(a: Scalar, b: Scalar) -> Scalar;
    ssub dsub (a, b) "a − b, of scalars" = sub(a: Scalar, b: Scalar) -> Scalar;
    smul dmul (a, b) "a·b, of scalars" = mul(a: Scalar, b: Scalar) -> Scalar;
    sdiv ddiv (a, b) "a / b, of scalars (IEEE: ±inf or NaN where b is 0)" = div(a: Scalar, b: Scalar) -> Scalar;
    sneg dneg (a) "−a, of a scalar" = neg(a: Scalar) -> Scalar;
    sabs dabs (a) "|a|, of a scalar" = abs(a: Scalar) -> Scalar;
    ssqrt dsqrt (a) "√a, of a scalar" = sqrt(a: Scalar) -> Scalar;
    srecip drecip (a) "1 / a, of a scalar" = recip(a: Scalar) -> Scalar;
    smax dmax (a, b) "max(a, b), of scalars (a NaN argument gives the other)" = max(a: Scalar, b: Scalar) -> Scalar;
    smin dmin (a, b) "min(a, b), of scalars (a NaN argument gives the other)" = min(a: Scalar, b: Scalar) -> Scalar;
}
