//! Calls as linear combinations, and library forms that compute a given combination.
//!
//! Most BLAS-1/2 formulas are a sum of terms, each a coefficient — a number times scalar
//! parameters — times either the call's one `sum(...)` or a vector read at the result's index:
//! `a * sum(j, A[i,j] * x[j]) + b * y[i]`, `a * x[i] + y[i]`. The rules combine such terms
//! across calls ([`terms`]) and then look for a form of a library function that computes the
//! combination ([`bind`]), so what they write is a call a script could have written.

use std::collections::HashMap;
use std::sync::Arc;

use crate::formula::{BinOp, Expr, Formula};
use crate::library::{Form, HigherOrderKind, Library};
use crate::program::{Arg, Call, ScalarArg, ValueId};
use crate::shape::Precision;

/// What a term of a call multiplies.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Part {
    /// The call's one `sum(...)`.
    Sum,
    /// A vector argument read at the result's index.
    Vector(ValueId),
}

/// A number times run-time scalars.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Coefficient {
    /// The literal factor.
    pub number: f64,
    /// The run-time scalar factors, as arguments.
    pub scalars: Vec<Arg>,
}

impl Coefficient {
    /// `self · other`.
    pub fn times(&self, other: &Coefficient) -> Coefficient {
        Coefficient {
            number: self.number * other.number,
            scalars: [self.scalars.clone(), other.scalars.clone()].concat(),
        }
    }
}

/// One term of a call: a coefficient times a part.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Term {
    /// Its coefficient.
    pub coefficient: Coefficient,
    /// What it multiplies.
    pub part: Part,
}

/// A term of a form, in its parameters.
#[derive(Debug, Clone, PartialEq)]
struct FormTerm<'f> {
    number: f64,
    scalars: Vec<usize>,
    part: FormPart<'f>,
}

#[derive(Debug, Clone, PartialEq)]
enum FormPart<'f> {
    Sum(&'f Expr),
    Element(usize),
}

/// The terms of `call`, where its formula is a linear combination; terms whose coefficient is
/// a literal zero are left out (a product by zero is zero, whatever it multiplies).
pub(super) fn terms(call: &Call) -> Option<Vec<Term>> {
    let form_terms = form_terms(&call.form.formula)?;
    let mut out = Vec::new();
    for t in form_terms {
        let mut coefficient = Coefficient {
            number: t.number,
            scalars: Vec::new(),
        };
        for p in t.scalars {
            match &call.args[p] {
                Arg::Literal(x) => coefficient.number *= x,
                scalar => coefficient.scalars.push(scalar.clone()),
            }
        }
        let part = match t.part {
            FormPart::Sum(_) => Part::Sum,
            FormPart::Element(p) => match call.args[p] {
                Arg::Value(v) => Part::Vector(v),
                Arg::Literal(_) | Arg::Scalar(_) => return None,
            },
        };
        if coefficient.number != 0.0 {
            out.push(Term { coefficient, part });
        }
    }
    Some(out)
}

/// The one `sum(...)` of `call`'s formula, where it is a linear combination holding one.
pub(super) fn the_sum(call: &Call) -> Option<&Expr> {
    let sums: Vec<&Expr> = (form_terms(&call.form.formula)?.into_iter())
        .filter_map(|t| match t.part {
            FormPart::Sum(e) => Some(e),
            FormPart::Element(_) => None,
        })
        .collect();
    match sums[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// Whether walk `call` sums along rows (`A·x`: the result's index is the row of the matrix
/// its sum reads), so each result is finished with its row.
pub(super) fn walks_rows(call: &Call) -> bool {
    let formula = &call.form.formula;
    let row = formula.result_indices.first();
    the_sum(call).is_some_and(|sum| reads_a_row(sum, row))
}

/// Whether `call` reads vector `v` at the row index of a matrix it reads (`Aᵀ·v` reads `v[i]`
/// with row `i` of A): each row then needs only its own element of `v`.
pub(super) fn reads_per_row(call: &Call, v: ValueId) -> bool {
    let body = &call.form.formula.body;
    let mut rows = Vec::new();
    matrix_rows(body, &mut rows);
    (0..call.args.len())
        .filter(|&p| call.args[p] == Arg::Value(v))
        .any(|p| {
            element_indices(body, p)
                .iter()
                .any(|index| index.len() == 1 && rows.contains(&index[0]))
        })
}

/// The row index variables of the matrix elements `e` reads.
fn matrix_rows(e: &Expr, out: &mut Vec<usize>) {
    match e {
        Expr::Element { index, .. } if index.len() == 2 => out.push(index[0]),
        Expr::Element { .. } | Expr::Number(_) | Expr::Scalar(_) => {}
        Expr::Neg(a) | Expr::Call(_, a) | Expr::Reduce { body: a, .. } => matrix_rows(a, out),
        Expr::Binary(_, a, b) => {
            matrix_rows(a, out);
            matrix_rows(b, out);
        }
    }
}

/// The index lists with which `e` reads parameter `param`.
fn element_indices(e: &Expr, param: usize) -> Vec<Vec<usize>> {
    match e {
        Expr::Element { param: p, index } if *p == param => vec![index.clone()],
        Expr::Element { .. } | Expr::Number(_) | Expr::Scalar(_) => Vec::new(),
        Expr::Neg(a) | Expr::Call(_, a) | Expr::Reduce { body: a, .. } => element_indices(a, param),
        Expr::Binary(_, a, b) => [element_indices(a, param), element_indices(b, param)].concat(),
    }
}

/// Whether `e` reads a matrix at row index `row`.
fn reads_a_row(e: &Expr, row: Option<&usize>) -> bool {
    match e {
        Expr::Element { index, .. } => index.len() == 2 && index.first() == row,
        Expr::Number(_) | Expr::Scalar(_) => false,
        Expr::Neg(a) | Expr::Call(_, a) | Expr::Reduce { body: a, .. } => reads_a_row(a, row),
        Expr::Binary(_, a, b) => reads_a_row(a, row) || reads_a_row(b, row),
    }
}

/// The terms of a formula in its parameters, where it is a linear combination.
fn form_terms(formula: &Formula) -> Option<Vec<FormTerm<'_>>> {
    let mut out = Vec::new();
    collect(&formula.body, &formula.result_indices, 1.0, &[], &mut out)?;
    Some(out)
}

fn collect<'f>(
    e: &'f Expr,
    result: &[usize],
    number: f64,
    scalars: &[usize],
    out: &mut Vec<FormTerm<'f>>,
) -> Option<()> {
    let mut push = |part| {
        out.push(FormTerm {
            number,
            scalars: scalars.to_vec(),
            part,
        })
    };
    match e {
        Expr::Binary(BinOp::Add, a, b) => {
            collect(a, result, number, scalars, out)?;
            collect(b, result, number, scalars, out)
        }
        Expr::Binary(BinOp::Sub, a, b) => {
            collect(a, result, number, scalars, out)?;
            collect(b, result, -number, scalars, out)
        }
        Expr::Neg(a) => collect(a, result, -number, scalars, out),
        Expr::Binary(BinOp::Mul, a, b) => match (factor(a), factor(b)) {
            (Some((n, s)), _) => collect(b, result, number * n, &[scalars, &s[..]].concat(), out),
            (None, Some((n, s))) => collect(a, result, number * n, &[scalars, &s[..]].concat(), out),
            (None, None) => None,
        },
        Expr::Reduce {
            op: crate::formula::ReduceOp::Sum,
            ..
        } => {
            push(FormPart::Sum(e));
            Some(())
        }
        Expr::Element { param, index } if index == result => {
            push(FormPart::Element(*param));
            Some(())
        }
        _ => None,
    }
}

/// A product of numbers and scalar parameters: its number and its scalars.
fn factor(e: &Expr) -> Option<(f64, Vec<usize>)> {
    match e {
        Expr::Number(x) => Some((*x, Vec::new())),
        Expr::Scalar(p) => Some((1.0, vec![*p])),
        Expr::Neg(a) => factor(a).map(|(n, s)| (-n, s)),
        Expr::Binary(BinOp::Mul, a, b) => {
            let ((na, sa), (nb, sb)) = (factor(a)?, factor(b)?);
            Some((na * nb, [sa, sb].concat()))
        }
        _ => None,
    }
}

/// The library's scalar multiplication and negation, for coefficients that are products of
/// several scalars (`scal(a, gemv(b, A, x))` → `gemv(mul(a, b), A, x)`).
pub(super) struct Arithmetic {
    prefix: char,
    mul: Arc<Form>,
    neg: Arc<Form>,
}

impl Arithmetic {
    /// The library's `mul` and `neg` in `precision`, where it has them.
    pub fn of(library: &Library, precision: Precision) -> Option<Arithmetic> {
        let form = |name: &str, arity| {
            let f = library
                .get(name)
                .filter(|f| f.kind == HigherOrderKind::Scalar && f.precisions.contains(&precision))?;
            f.form(arity).cloned()
        };
        Some(Arithmetic {
            prefix: precision.prefix(),
            mul: form("mul", 2)?,
            neg: form("neg", 1)?,
        })
    }

    /// `number · Π scalars` as one argument: a literal, a scalar, or inlined `mul`/`neg` calls.
    fn product(&self, number: f64, scalars: &[Arg]) -> Arg {
        let call = |name: &str, form: &Arc<Form>, args: Vec<Arg>| {
            Arg::Scalar(Arc::new(ScalarArg {
                callee: format!("{}{name}", self.prefix),
                form: Arc::clone(form),
                args,
            }))
        };
        let product = (scalars.iter().cloned()).reduce(|a, b| call("mul", &self.mul, vec![a, b]));
        match product {
            None => Arg::Literal(number),
            Some(p) if number == 1.0 => p,
            Some(p) if number == -1.0 => call("neg", &self.neg, vec![p]),
            Some(p) => call("mul", &self.mul, vec![Arg::Literal(number), p]),
        }
    }
}

/// Arguments for `form` so that it computes the sum of `wanted`, where a `Part::Sum` term means
/// `sum`, the sum of the call `source` (the same `sum(...)` over the same arrays). A coefficient
/// that is a product of scalars is computed by `arithmetic`'s inlined scalar calls, where given.
/// `None` where the form computes something else.
pub(super) fn bind(
    form: &Form,
    wanted: &[Term],
    source: Option<&Call>,
    arithmetic: Option<&Arithmetic>,
) -> Option<Vec<Arg>> {
    let have = form_terms(&form.formula)?;
    if have.len() != wanted.len() {
        return None;
    }
    // Every assignment of the wanted terms to the form's, until one binds.
    permutations(wanted.len()).into_iter().find_map(|order| {
        let mut binding = Binding {
            args: HashMap::new(),
            arithmetic,
        };
        for (t, &w) in have.iter().zip(&order) {
            binding.term(t, &wanted[w], source)?;
        }
        binding.arguments(form)
    })
}

/// Each order of `0..n` (n is at most a few terms).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for k in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(k, n - 1);
            out.push(p);
        }
    }
    out
}

/// Parameters bound so far.
struct Binding<'a> {
    args: HashMap<usize, Arg>,
    arithmetic: Option<&'a Arithmetic>,
}

impl Binding<'_> {
    /// Binds parameter `p` to `arg`, unless it is bound to something else.
    fn set(&mut self, p: usize, arg: Arg) -> Option<()> {
        match self.args.get(&p) {
            Some(a) if *a != arg => None,
            _ => {
                self.args.insert(p, arg);
                Some(())
            }
        }
    }

    /// Binds the form's term `have` so that it computes `want`.
    fn term(&mut self, have: &FormTerm<'_>, want: &Term, source: Option<&Call>) -> Option<()> {
        match (&have.part, &want.part) {
            (FormPart::Element(p), Part::Vector(v)) => self.set(*p, Arg::Value(*v))?,
            (FormPart::Sum(e), Part::Sum) => {
                let source = source?;
                self.same_sum(e, the_sum(source)?, source)?
            }
            _ => return None,
        }
        self.coefficient(have, &want.coefficient)
    }

    /// Binds the scalar parameters of `have`'s coefficient to `want`.
    fn coefficient(&mut self, have: &FormTerm<'_>, want: &Coefficient) -> Option<()> {
        match (&have.scalars[..], &want.scalars[..]) {
            ([], []) if have.number == want.number => Some(()),
            ([p], []) if have.number == 1.0 => self.set(*p, Arg::Literal(want.number)),
            ([p], [v]) if have.number == want.number => self.set(*p, v.clone()),
            ([p], _) if have.number == 1.0 => {
                let product = self.arithmetic?.product(want.number, &want.scalars);
                self.set(*p, product)
            }
            _ => None,
        }
    }

    /// Binds the form's `sum(...)` `have` to `want`, the sum of call `source`: the same
    /// expression, parameter for parameter.
    fn same_sum(&mut self, have: &Expr, want: &Expr, source: &Call) -> Option<()> {
        match (have, want) {
            (Expr::Number(a), Expr::Number(b)) if a == b => Some(()),
            (Expr::Scalar(p), Expr::Scalar(q)) => self.set(*p, source.args[*q].clone()),
            (Expr::Element { param: p, index: i }, Expr::Element { param: q, index: j }) if i == j => {
                self.set(*p, source.args[*q].clone())
            }
            (Expr::Neg(a), Expr::Neg(b)) => self.same_sum(a, b, source),
            (Expr::Call(f, a), Expr::Call(g, b)) if f == g => self.same_sum(a, b, source),
            (Expr::Binary(o, a1, b1), Expr::Binary(p, a2, b2)) if o == p => {
                self.same_sum(a1, a2, source)?;
                self.same_sum(b1, b2, source)
            }
            (
                Expr::Reduce { op, index, body, range },
                Expr::Reduce {
                    op: op2,
                    index: index2,
                    body: body2,
                    range: range2,
                },
            ) if op == op2 && index == index2 && range == range2 => self.same_sum(body, body2, source),
            _ => None,
        }
    }

    /// The arguments, where every parameter of `form` is bound.
    fn arguments(mut self, form: &Form) -> Option<Vec<Arg>> {
        (0..form.signature.params.len()).map(|p| self.args.remove(&p)).collect()
    }
}
