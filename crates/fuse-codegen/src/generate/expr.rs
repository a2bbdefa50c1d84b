//! Formula → CUDA expression: the compute routine of a call, element by element.
//!
//! Each library formula states one result element; the generator emits it with every array
//! element replaced by the register that holds it under the kernel's thread-to-data mapping,
//! every scalar by its register or literal, and (for reductions) the sum or norm by its value.

use fuse_core::formula::{BinOp, Expr, Func, ReduceOp};
use fuse_core::{Arg, Call, Precision, ScalarArg, ValueId};

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

/// The register of an inlined scalar call, named after what it computes, so that the same call
/// inlined twice in a kernel is one register: `i` and 16 hex digits.
pub fn inlined_register(s: &ScalarArg) -> String {
    fn canonical(arg: &Arg, out: &mut String) {
        match arg {
            Arg::Value(v) => out.push_str(&scalar_register(*v)),
            Arg::Literal(x) => out.push_str(&format!("{x:?}")),
            Arg::Scalar(s) => {
                out.push_str(&s.callee);
                out.push('(');
                s.args.iter().for_each(|a| {
                    canonical(a, out);
                    out.push(',');
                });
                out.push(')');
            }
        }
    }
    let mut text = String::new();
    canonical(&Arg::Scalar(std::sync::Arc::new(s.clone())), &mut text);
    // FNV-1a: stable from build to build, so the same plan gives the same source.
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    format!("i{hash:016x}")
}

/// `const T iK = (…);` for each scalar call inlined in `args` (nested ones first, each once,
/// `call` naming the kernel in messages): computed where the kernel starts, after the scalar
/// loads, in the script's precision.
pub fn inlined_definitions<'a>(
    args: impl Iterator<Item = &'a Arg>,
    call: &Call,
    precision: Precision,
    indent: &str,
) -> Result<String, GenerateError> {
    let ty = match precision {
        Precision::F32 => "float",
        Precision::F64 => "double",
    };
    let mut defined: Vec<String> = Vec::new();
    let mut out = String::new();
    fn define(
        arg: &Arg,
        call: &Call,
        (precision, ty, indent): (Precision, &str, &str),
        defined: &mut Vec<String>,
        out: &mut String,
    ) -> Result<(), GenerateError> {
        let Arg::Scalar(s) = arg else { return Ok(()) };
        for a in &s.args {
            define(a, call, (precision, ty, indent), defined, out)?;
        }
        let name = inlined_register(s);
        if !defined.contains(&name) {
            let value = emit_with(&s.form.formula.body, call, &s.args, precision, &NoElements, None)?;
            out.push_str(&format!(
                "{indent}const {ty} {name} = {value};  // {}
",
                s.callee
            ));
            defined.push(name);
        }
        Ok(())
    }
    for arg in args {
        define(arg, call, (precision, ty, indent), &mut defined, &mut out)?;
    }
    Ok(out)
}

/// Registers of a formula without array elements (a scalar call's).
pub(crate) struct NoElements;

impl Registers for NoElements {
    fn element(&self, value: ValueId, _index: &[usize]) -> String {
        unreachable!("scalar formulas read no element (value {value})")
    }
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
    emit_with(expr, call, &call.args, precision, regs, sum)
}

/// [`emit`] with the parameters bound to `args` (those of `call`, or of a scalar call inlined
/// in it).
fn emit_with(
    expr: &Expr,
    call: &Call,
    args: &[Arg],
    precision: Precision,
    regs: &dyn Registers,
    sum: Option<&str>,
) -> Result<String, GenerateError> {
    let literal_zero = |p: usize| matches!(args.get(p), Some(Arg::Literal(v)) if *v == 0.0);
    let emitter = Emitter {
        call,
        args,
        precision,
        regs,
        sum,
    };
    emitter.emit(&expr.with_zero_products(&literal_zero))
}

/// What [`emit`] emits with.
struct Emitter<'a> {
    /// The call, for messages.
    call: &'a Call,
    /// The arguments the formula's parameters are bound to.
    args: &'a [Arg],
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
                    .filter_map(|p| match &self.args[p] {
                        Arg::Value(v) => Some(format!("{} == {zero}", scalar_register(*v))),
                        Arg::Scalar(s) => Some(format!("{} == {zero}", inlined_register(s))),
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
            Expr::Scalar(p) => match &self.args[*p] {
                Arg::Literal(v) => literal(*v, precision),
                Arg::Value(v) => scalar_register(*v),
                Arg::Scalar(s) => inlined_register(s),
            },
            Expr::Element { param, index } => match self.args[*param] {
                Arg::Value(v) => self.regs.element(v, index),
                Arg::Literal(_) | Arg::Scalar(_) => unreachable!("the checker gives array parameters values"),
            },
            Expr::Neg(a) => format!("(-{})", self.product(a)?),
            Expr::Binary(BinOp::Mul, a, b) => format!("({} * {})", self.product(a)?, self.product(b)?),
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.emit(a)?, self.emit(b)?);
                match op {
                    BinOp::Add => format!("({a} + {b})"),
                    BinOp::Sub => format!("({a} - {b})"),
                    BinOp::Mul => format!("({a} * {b})"),
                    BinOp::Div => format!("({a} / {b})"),
                    BinOp::Max => format!("fuse_max({a}, {b})"),
                    BinOp::Min => format!("fuse_min({a}, {b})"),
                }
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
