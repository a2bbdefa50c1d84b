//! The f64 reference interpreter: evaluates a program call by call, each call straight from
//! its library formula (a product by a zero scalar zero, as in BLAS), in f64 whatever
//! the script's precision, and each call's result then rounded to the script's precision: a
//! call's result is a number of that precision, as if each call ran alone (`t = sscal(a, x);
//! z = sscal(b, t)` overflows at `t` in f32 on every backend). It is the ground truth every
//! backend is compared with, so it is written for obviousness, with rayon across result rows.

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;

use crate::data::{check_inputs, BindError, Bound};
use crate::formula::{Expr, Func, ReduceOp};
use crate::{Arg, Bindings, Call, HostArray, Precision, Program, Sizes};

/// An f64 array during evaluation.
struct Array {
    dims: Vec<usize>,
    data: Vec<f64>,
}

/// An argument as the formula sees it.
enum Operand<'a> {
    Scalar(f64),
    Array(&'a Array),
}

/// Evaluates `program` at `sizes` on `inputs` (owned [`Bindings`] or borrowed views, read
/// once into f64); returns every output, in f64, by name.
pub fn evaluate<A: Bound>(
    program: &Program,
    sizes: &Sizes,
    inputs: &BTreeMap<String, A>,
) -> Result<Bindings, BindError> {
    check_inputs(program, sizes, inputs)?;
    let mut values: HashMap<usize, Array> = HashMap::new();
    for &id in &program.inputs {
        let a = &inputs[&program.values[id].variable];
        values.insert(
            id,
            Array {
                dims: a.dims().to_vec(),
                data: a.data().to_f64(),
            },
        );
    }
    let round = |x: f64| match program.precision {
        Precision::F32 => f64::from(x as f32),
        Precision::F64 => x,
    };
    for call in &program.calls {
        let mut result = evaluate_call(call, &values, &round);
        result.data.iter_mut().for_each(|x| *x = round(*x));
        values.insert(call.result, result);
    }
    Ok(program
        .outputs
        .iter()
        .map(|&id| {
            let a = &values[&id];
            (
                program.values[id].variable.clone(),
                HostArray::f64(a.dims.clone(), a.data.clone()),
            )
        })
        .collect())
}

/// `call`'s result; an inlined scalar call's result is rounded by `round` as a call's is.
fn evaluate_call(call: &Call, values: &HashMap<usize, Array>, round: &dyn Fn(f64) -> f64) -> Array {
    let scalar = |id: usize| values[&id].data[0];
    let operands: Vec<Operand> = call
        .args
        .iter()
        .map(|a| match a {
            Arg::Value(id) if !values[id].dims.is_empty() => Operand::Array(&values[id]),
            _ => Operand::Scalar(a.scalar_value(&scalar, round)),
        })
        .collect();
    let formula = &call.form.formula;
    let is_zero = |p: usize| matches!(operands[p], Operand::Scalar(v) if v == 0.0);
    let body = formula.body.with_zero_products(&is_zero);
    let mut extent_of_dim: HashMap<&str, usize> = HashMap::new();
    for (param, operand) in call.form.signature.params.iter().zip(&operands) {
        if let Operand::Array(a) = operand {
            for (d, &e) in param.shape.dims().into_iter().zip(&a.dims) {
                extent_of_dim.insert(d, e);
            }
        }
    }
    let extents: Vec<usize> = formula.indices.iter().map(|v| extent_of_dim[v.dim.as_str()]).collect();
    let eval = Evaluator {
        operands: &operands,
        extents: &extents,
    };
    let dims: Vec<usize> = formula.result_indices.iter().map(|&i| extents[i]).collect();
    let data = match dims.as_slice() {
        [] => vec![eval.eval(&body, &mut vec![0; extents.len()])],
        [n] => (0..*n)
            .into_par_iter()
            .map_init(
                || vec![0; extents.len()],
                |idx, i| {
                    idx[0] = i;
                    eval.eval(&body, idx)
                },
            )
            .collect(),
        [_, n] => {
            let mut data = vec![0.0; dims.iter().product()];
            data.par_chunks_mut(*n).enumerate().for_each(|(i, row)| {
                let mut idx = vec![0; extents.len()];
                idx[0] = i;
                for (j, out) in row.iter_mut().enumerate() {
                    idx[1] = j;
                    *out = eval.eval(&body, &mut idx);
                }
            });
            data
        }
        _ => unreachable!("library forms have results of rank 0 to 2"),
    };
    Array { dims, data }
}

struct Evaluator<'a> {
    operands: &'a [Operand<'a>],
    /// Extent of each index variable.
    extents: &'a [usize],
}

impl Evaluator<'_> {
    /// The value of `e` with index variables at `idx`.
    fn eval(&self, e: &Expr, idx: &mut [usize]) -> f64 {
        match e {
            Expr::Number(v) => *v,
            Expr::Scalar(p) => match &self.operands[*p] {
                Operand::Scalar(v) => *v,
                Operand::Array(_) => unreachable!("checked: scalar parameters get scalars"),
            },
            Expr::Element { param, index } => match &self.operands[*param] {
                Operand::Array(a) => {
                    let offset = index
                        .iter()
                        .zip(&a.dims)
                        .fold(0, |acc, (&var, &extent)| acc * extent + idx[var]);
                    a.data[offset]
                }
                Operand::Scalar(_) => unreachable!("checked: array parameters get arrays"),
            },
            Expr::Neg(a) => -self.eval(a, idx),
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.eval(a, idx), self.eval(b, idx));
                op.apply(a, b)
            }
            Expr::Reduce {
                op: ReduceOp::Sum,
                index,
                range,
                body,
            } => {
                let mut total = 0.0;
                for k in range.bounds(self.extents[*index], idx) {
                    idx[*index] = k;
                    total += self.eval(body, idx);
                }
                total
            }
            Expr::Reduce {
                op: ReduceOp::Norm2,
                index,
                body,
                ..
            } => {
                let mut terms = Vec::with_capacity(self.extents[*index]);
                for k in 0..self.extents[*index] {
                    idx[*index] = k;
                    terms.push(self.eval(body, idx));
                }
                norm2(&terms)
            }
            Expr::Call(Func::Abs, a) => self.eval(a, idx).abs(),
            Expr::Call(Func::Sqrt, a) => self.eval(a, idx).sqrt(),
        }
    }
}

/// `sqrt(Σ t²)` to within about an ulp, wherever the result is representable: the terms are
/// scaled by a power of two (exactly) that brings the largest near 1, and the squares are added
/// with their rounding errors (Neumaier's compensated sum of the exact products `s·s`). Two
/// passes over the terms, where the backends make one: the ground truth need not be fast.
pub fn norm2(terms: &[f64]) -> f64 {
    let max = terms.iter().fold(0.0_f64, |m, t| m.max(t.abs()));
    if terms.iter().any(|t| t.is_nan()) {
        return f64::NAN;
    }
    if max == 0.0 || max.is_infinite() {
        return max;
    }
    // Near enough to the exponent of `max`: the scaled maximum lies within a factor 2 of 1.
    let e = max.log2().round() as i32;
    let (mut sum, mut error) = (0.0_f64, 0.0_f64);
    for &t in terms {
        let s = times_power_of_two(t, -e);
        let square = s * s;
        error += s.mul_add(s, -square);
        let next = sum + square;
        error += match sum.abs() >= square {
            true => (sum - next) + square,
            false => (square - next) + sum,
        };
        sum = next;
    }
    times_power_of_two((sum + error).sqrt(), e)
}

/// `x · 2^k` for any `k` that `norm2` needs (|k| ≤ 1075), with one rounding at most: in steps
/// of powers of two that are themselves representable, growing or shrinking monotonically.
fn times_power_of_two(mut x: f64, mut k: i32) -> f64 {
    let power = |k: i32| f64::from_bits(((k + 1023) as u64) << 52);
    while k.abs() > 1000 {
        let step = 1000 * k.signum();
        x *= power(step);
        k -= step;
    }
    x * power(k)
}

#[cfg(test)]
mod tests;
