//! Formula → CUDA expression: the compute routine of a call, element by element.
//!
//! Each library formula states one result element; the generator emits it with every array
//! element replaced by the register that holds it under the kernel's thread-to-data mapping,
//! every scalar by its register or literal, and (for reductions) the sum or norm by its value.

use fuse_core::formula::{BinOp, Expr, Func, ReduceOp};
use fuse_core::{Arg, Call, Precision, ValueId};

use super::error::GenerateError;

/// How a formula's operands are named in the kernel being generated.
pub trait Registers {
    /// The register holding the element of value `value` indexed by index variables `index`
    /// (of the call's formula).
    fn element(&self, value: ValueId, index: &[usize]) -> String;
}

/// A floating-point literal of `precision`.
pub fn literal(v: f64, precision: Precision) -> String {
    let mut s = format!("{v:?}");
    if !s.contains(['.', 'e']) {
        s.push_str(".0");
    }
    match precision {
        Precision::F32 => format!("{s}f"),
        Precision::F64 => s,
    }
}

/// Register name of scalar value `v`.
pub fn scalar_register(v: ValueId) -> String {
    format!("s{v}")
}

/// Emits `expr` of `call`; `sum` names the value that replaces its `sum(...)` or `norm2(...)`,
/// if any. A product by a scalar that is zero is 0 (`fuse_core::formula`): by a literal 0 here
/// (what it multiplies is then never loaded), by a run-time scalar where the kernel runs, a
/// test of the scalar the compiler hoists out of the loops.
pub fn emit(
    expr: &Expr,
    call: &Call,
    precision: Precision,
    regs: &dyn Registers,
    sum: Option<&str>,
) -> Result<String, GenerateError> {
    let literal_zero = |p: usize| matches!(call.args.get(p), Some(Arg::Literal(v)) if *v == 0.0);
    let emitter = Emitter {
        call,
        precision,
        regs,
        sum,
    };
    emitter.emit(&expr.with_zero_products(&literal_zero))
}

/// What [`emit`] emits with.
struct Emitter<'a> {
    call: &'a Call,
    precision: Precision,
    regs: &'a dyn Registers,
    sum: Option<&'a str>,
}

impl Emitter<'_> {
    fn emit(&self, expr: &Expr) -> Result<String, GenerateError> {
        Ok(match expr {
            Expr::Binary(BinOp::Mul, ..) | Expr::Neg(_) => {
                let product = self.product(expr)?;
                let zero = literal(0.0, self.precision);
                let tests: Vec<String> = (expr.scalar_factors().into_iter())
                    .filter_map(|p| match self.call.args[p] {
                        Arg::Value(v) => Some(format!("{} == {zero}", scalar_register(v))),
                        Arg::Literal(_) => None,
                    })
                    .collect();
                match tests.is_empty() {
                    true => product,
                    false => format!("(({}) ? {zero} : {product})", tests.join(" || ")),
                }
            }
            _ => self.product(expr)?,
        })
    }

    /// `expr` with its products unguarded: a product's factors, or any other node.
    fn product(&self, expr: &Expr) -> Result<String, GenerateError> {
        let (call, precision) = (self.call, self.precision);
        Ok(match expr {
            Expr::Number(v) => literal(*v, precision),
            Expr::Scalar(p) => match call.args[*p] {
                Arg::Literal(v) => literal(v, precision),
                Arg::Value(v) => scalar_register(v),
            },
            Expr::Element { param, index } => match call.args[*param] {
                Arg::Value(v) => self.regs.element(v, index),
                Arg::Literal(_) => unreachable!("the checker gives array parameters values"),
            },
            Expr::Neg(a) => format!("(-{})", self.product(a)?),
            Expr::Binary(BinOp::Mul, a, b) => format!("({} * {})", self.product(a)?, self.product(b)?),
            Expr::Binary(op, a, b) => {
                let op = match op {
                    BinOp::Add => '+',
                    BinOp::Sub => '-',
                    BinOp::Mul => '*',
                    BinOp::Div => '/',
                };
                format!("({} {op} {})", self.emit(a)?, self.emit(b)?)
            }
            Expr::Call(Func::Abs, a) => format!("fuse_abs({})", self.emit(a)?),
            Expr::Call(Func::Sqrt, a) => format!("fuse_sqrt({})", self.emit(a)?),
            Expr::Reduce { .. } => match self.sum {
                Some(acc) => acc.to_string(),
                None => return Err(unsupported(call, "a sum where no reduction is generated")),
            },
        })
    }
}

/// The one `sum(index, term)` or `norm2(index, term)` of a reduce formula.
pub fn the_reduction(call: &Call) -> Result<(ReduceOp, usize, &Expr), GenerateError> {
    call.form
        .formula
        .body
        .the_reduction()
        .ok_or_else(|| unsupported(call, "reductions must contain exactly one, unnested, sum"))
}

/// The one `sum(index, term)` of a nested reduce formula (norms are BLAS-1 only).
pub fn the_sum(call: &Call) -> Result<(usize, &Expr), GenerateError> {
    match the_reduction(call)? {
        (ReduceOp::Sum, index, term) => Ok((index, term)),
        (ReduceOp::Norm2, ..) => Err(unsupported(call, "a norm in a nested reduction")),
    }
}

/// Whether the call computes a norm (its partials are three sums in scratch memory).
pub fn is_norm(call: &Call) -> bool {
    call.form.formula.body.has(ReduceOp::Norm2)
}

/// Whether the formula is the bare sum, so the accumulated partials are already the result.
pub fn is_bare_sum(call: &Call) -> bool {
    matches!(call.form.formula.body, Expr::Reduce { op: ReduceOp::Sum, .. })
}

pub fn unsupported(call: &Call, what: &str) -> GenerateError {
    GenerateError::Unsupported {
        call: call.text.clone(),
        file: call.location.to_string(),
        what: what.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_carry_their_precision() {
        assert_eq!(literal(-1.0, Precision::F32), "-1.0f");
        assert_eq!(literal(2.5, Precision::F64), "2.5");
        assert_eq!(literal(1e-30, Precision::F32), "1e-30f");
        assert_eq!(literal(3.0, Precision::F64), "3.0");
    }
}
