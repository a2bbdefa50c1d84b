//! The first pass: for each call, which of its index variables run over this rank's rows, in
//! which local form each argument must be held, and how its result is distributed.
//!
//! Invariants of a [`CallSplit`]: a matrix is always indexed by split rows first and whole
//! columns second; a split index variable ranges over the split size symbol; a result is
//! `Partial` only when the formula is a linear function of its sum over split rows plus terms
//! that vanish when one of their parameters is zero (those parameters are held `RootOnly`, so
//! the ranks' partial results add up to the whole result exactly once).

use std::collections::BTreeSet;

use crate::error::{Diagnostic, Result};
use crate::formula::{BinOp, Expr, ReduceOp};
use crate::program::{Arg, Call, Program};

use super::{Distribution, Local};

/// What the first pass decides for one call.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CallSplit {
    /// The local form of each argument, in signature order (`None` for a literal; an inlined
    /// scalar call needs every value it reads whole).
    pub needs: Vec<Option<Local>>,
    /// The distribution of the call's result.
    pub result: Distribution,
}

/// Decides how `call` runs on row blocks, given the distributions of the values it reads.
pub(super) fn split_call(program: &Program, call: &Call, split: &str, dists: &[Distribution]) -> Result<CallSplit> {
    let refuse = |why: String| -> crate::error::Error {
        Diagnostic::new(
            call.location.clone(),
            format!("cannot distribute `{}`: {why}", call.text),
        )
        .into()
    };
    // A rank's rows are numbered from its first: a bound compared with them would be off.
    if call.form.formula.body.reduction_range().is_some_and(|r| !r.is_whole()) {
        return Err(refuse(
            "a sum over part of a dimension (a triangle) is not split over ranks yet".into(),
        ));
    }
    let elements = elements(&call.form.formula.body);
    let blas2 = call.form.signature.result.rank() == 2 || elements.iter().any(|(p, _)| is_matrix(call, *p));
    let split_indices = match blas2 {
        true => matrix_rows(call, &elements).map_err(refuse)?,
        false => vector_rows(program, call, &elements, split, dists),
    };
    let mut needs: Vec<Option<Local>> = (call.args.iter())
        .map(|a| (!matches!(a, Arg::Literal(_))).then_some(Local::Whole))
        .collect();
    for (param, index) in &elements {
        let by_rows = split_indices.contains(&index[0]);
        if elements
            .iter()
            .any(|(p, i)| p == param && split_indices.contains(&i[0]) != by_rows)
        {
            return Err(refuse(format!(
                "`{}` is read both by rows and whole",
                param_name(call, *param)
            )));
        }
        needs[*param] = Some(if by_rows { Local::Rows } else { Local::Whole });
    }
    let result = result_distribution(call, &split_indices, &mut needs).map_err(refuse)?;
    Ok(CallSplit { needs, result })
}

fn is_matrix(call: &Call, param: usize) -> bool {
    call.form.signature.params[param].shape.rank() == 2
}

/// The split index variables of a BLAS-2 call: each matrix's (and a matrix result's) row
/// variable, which must never index a column.
fn matrix_rows(call: &Call, elements: &[(usize, Vec<usize>)]) -> Result<BTreeSet<usize>, String> {
    let formula = &call.form.formula;
    let matrix_result = call.form.signature.result.rank() == 2;
    let matrices = || elements.iter().filter(|(p, _)| is_matrix(call, *p));
    if let Some((param, _)) = matrices().find(|(_, index)| index[1..].contains(&index[0])) {
        return Err(format!(
            "`{}` is indexed by the same variable twice",
            param_name(call, *param)
        ));
    }
    let mut rows: BTreeSet<usize> = matrices().map(|(_, index)| index[0]).collect();
    let mut columns: Vec<usize> = matrices().map(|(_, index)| index[1]).collect();
    if matrix_result {
        rows.insert(formula.result_indices[0]);
        columns.push(formula.result_indices[1]);
    }
    match columns.iter().any(|i| rows.contains(i)) {
        true => Err("its matrices are not all indexed rows first by the same variable".into()),
        false => Ok(rows),
    }
}

/// The split index variables of a BLAS-1 call: it runs on row blocks where an operand already
/// lies in them (or is a partial sum, which a reduce-scatter brings there); on replicated
/// operands it is computed everywhere.
fn vector_rows(
    program: &Program,
    call: &Call,
    elements: &[(usize, Vec<usize>)],
    split: &str,
    dists: &[Distribution],
) -> BTreeSet<usize> {
    (elements.iter())
        .filter(|(param, index)| {
            let Arg::Value(v) = call.args[*param] else { return false };
            index_symbol(program, call, index[0]).as_deref() == Some(split) && dists[v] != Distribution::Replicated
        })
        .map(|(_, index)| index[0])
        .collect()
}

/// How the result lies: by rows where a split variable indexes it, a partial share where the
/// formula sums over split rows (the terms outside the sum then held `RootOnly` in `needs`),
/// else replicated.
fn result_distribution(
    call: &Call,
    split: &BTreeSet<usize>,
    needs: &mut [Option<Local>],
) -> Result<Distribution, String> {
    let formula = &call.form.formula;
    let result_split = formula.result_indices.first().is_some_and(|i| split.contains(i));
    match (result_split, split_reduction(&formula.body, split)) {
        (true, None) => Ok(Distribution::Rows),
        (false, None) => Ok(Distribution::Replicated),
        (true, Some(_)) => Err("its result is both split by rows and summed over them".into()),
        (false, Some(op)) => {
            let zeroable = |param: usize| matches!(call.args[param], Arg::Value(_));
            let root_only = partial_form(&formula.body, split, op, &zeroable).ok_or(
                "its formula is not a sum over the split rows plus terms that vanish with one of its arguments, so the ranks' shares cannot be added up",
            )?;
            for param in root_only {
                needs[param] = Some(Local::RootOnly);
            }
            Ok(Distribution::Partial(op))
        }
    }
}

/// The program's size symbol that index variable `index` of `call`'s formula ranges over.
fn index_symbol(program: &Program, call: &Call, index: usize) -> Option<String> {
    let dim = &call.form.formula.indices[index].dim;
    let signature = &call.form.signature;
    let params = signature.params.iter().zip(&call.args).filter_map(|(p, a)| match a {
        Arg::Value(v) => Some((&p.shape, &program.values[*v].shape)),
        Arg::Literal(_) | Arg::Scalar(_) => None,
    });
    let result = std::iter::once((&signature.result, &program.values[call.result].shape));
    params.chain(result).find_map(|(formal, actual)| {
        let position = formal.dims().iter().position(|d| d == dim)?;
        actual.dims().get(position).map(|s| s.to_string())
    })
}

fn param_name(call: &Call, param: usize) -> String {
    call.form.signature.params[param].name.clone()
}

/// Every array element the expression reads: `(parameter, index variables)`.
fn elements(expr: &Expr) -> Vec<(usize, Vec<usize>)> {
    let mut out = Vec::new();
    walk(expr, &mut |e| {
        if let Expr::Element { param, index } = e {
            out.push((*param, index.clone()));
        }
    });
    out
}

fn walk<'e>(expr: &'e Expr, visit: &mut dyn FnMut(&'e Expr)) {
    visit(expr);
    match expr {
        Expr::Number(_) | Expr::Scalar(_) | Expr::Element { .. } => {}
        Expr::Neg(e) | Expr::Call(_, e) | Expr::Reduce { body: e, .. } => walk(e, visit),
        Expr::Binary(_, a, b) => {
            walk(a, visit);
            walk(b, visit);
        }
    }
}

/// The operation of the reduction over a split index, if the expression has one.
fn split_reduction(expr: &Expr, split: &BTreeSet<usize>) -> Option<ReduceOp> {
    let mut found = None;
    walk(expr, &mut |e| {
        if let Expr::Reduce { op, index, .. } = e {
            if split.contains(index) {
                found = Some(*op);
            }
        }
    });
    found
}

/// Whether `expr` is linear in its one reduction over split rows (a `sum`) or is that reduction
/// alone (a `norm2`), plus terms that each vanish with one of their `zeroable` parameters (not a
/// literal): the parameters to hold only on the root rank, or `None` when the shares of the
/// ranks cannot be combined.
fn partial_form(
    expr: &Expr,
    split: &BTreeSet<usize>,
    op: ReduceOp,
    zeroable: &dyn Fn(usize) -> bool,
) -> Option<Vec<usize>> {
    let has = |e: &Expr| split_reduction(e, split).is_some();
    match expr {
        Expr::Reduce { index, body, .. } if split.contains(index) => (!has(body)).then(Vec::new),
        _ if op == ReduceOp::Norm2 => None,
        Expr::Neg(e) => partial_form(e, split, op, zeroable),
        Expr::Binary(BinOp::Mul, a, b) if has(a) != has(b) => {
            let (linear, factor) = if has(a) { (a, b) } else { (b, a) };
            // The factor must be the same on every rank: no split index may appear in it.
            (!reads_split(factor, split)).then_some(())?;
            partial_form(linear, split, op, zeroable)
        }
        Expr::Binary(BinOp::Div, a, b) if has(a) && !has(b) && !reads_split(b, split) => {
            partial_form(a, split, op, zeroable)
        }
        Expr::Binary(BinOp::Add | BinOp::Sub, a, b) if has(a) != has(b) => {
            let (linear, rest) = if has(a) { (a, b) } else { (b, a) };
            let mut root_only = partial_form(linear, split, op, zeroable)?;
            let inside = params_read(linear);
            for term in terms(rest) {
                let param = vanishing_factor(term)
                    .into_iter()
                    .find(|p| zeroable(*p) && !inside.contains(p))?;
                root_only.push(param);
            }
            Some(root_only)
        }
        _ => None,
    }
}

/// Whether any element read by `expr` is indexed by a split variable.
fn reads_split(expr: &Expr, split: &BTreeSet<usize>) -> bool {
    elements(expr)
        .iter()
        .any(|(_, index)| index.iter().any(|i| split.contains(i)))
}

/// The additive terms of `expr`.
fn terms(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::Binary(BinOp::Add | BinOp::Sub, a, b) => {
            let mut out = terms(a);
            out.extend(terms(b));
            out
        }
        Expr::Neg(e) => terms(e),
        other => vec![other],
    }
}

/// The parameters that are factors of a product term (the term is zero when one of them is),
/// scalars first, since zeroing a scalar is cheaper than zeroing a vector.
fn vanishing_factor(term: &Expr) -> Vec<usize> {
    let mut factors = Vec::new();
    collect_factors(term, &mut factors);
    factors.sort_by_key(|(_, is_array)| *is_array);
    factors.into_iter().map(|(p, _)| p).collect()
}

fn collect_factors(expr: &Expr, out: &mut Vec<(usize, bool)>) {
    match expr {
        Expr::Scalar(p) => out.push((*p, false)),
        Expr::Element { param, .. } => out.push((*param, true)),
        Expr::Neg(e) => collect_factors(e, out),
        Expr::Binary(BinOp::Mul, a, b) => {
            collect_factors(a, out);
            collect_factors(b, out);
        }
        Expr::Binary(BinOp::Div, a, _) => collect_factors(a, out),
        _ => {}
    }
}

/// Every parameter `expr` reads, scalar or array.
fn params_read(expr: &Expr) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    walk(expr, &mut |e| match e {
        Expr::Scalar(p) | Expr::Element { param: p, .. } => {
            out.insert(*p);
        }
        _ => {}
    });
    out
}
