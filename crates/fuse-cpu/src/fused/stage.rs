//! A call's formula lowered for the executor: what one *segment* evaluation computes.
//!
//! The executor evaluates formulas on segments: contiguous runs of result elements (or of
//! summands) along which exactly one index variable varies, every other one fixed. In a BLAS-2
//! tile the column index varies along a row and the row index is fixed; in a BLAS-1 chunk the
//! vector index varies. Lowering a formula for such a stage decides, once, how each array
//! element is reached — a run of a vector, one number of a vector, or a run along a matrix row
//! — so that evaluation never looks at index variables again.
//!
//! A stage also keeps its formula as a sum of products ([`Term`]s) where it has that form
//! (`a·x + y`, `A + a·x·yᵀ`, `A·x` summands…): those run through the hand-written loops of
//! [`super::loops`]; anything else (`abs`, `sqrt`, `/`, long products) goes through the generic
//! evaluator, so every library formula runs.
//!
//! Stages name the program's values, not the call's parameters, so the terms of one call can
//! be put in place of a value another call of the kernel computes ([`Stage::substitute`]): a
//! chain of maps then runs as one pass over its operands.

use fuse_core::formula::{BinOp, Expr, Func};
use fuse_core::{Arg, ValueId};

/// Products of more than this many terms are evaluated generically.
pub(crate) const MAX_TERMS: usize = 8;

/// What an index variable does in a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Held at one value for the whole segment (the row of a tile).
    Fixed,
    /// Runs along the segment.
    Varying,
    /// Not bound in this stage (a summation index outside its sum).
    Unbound,
}

/// How the elements of an array argument are reached in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A vector indexed by the fixed index: one number for the whole segment.
    Item,
    /// A vector indexed by the varying index: a contiguous run.
    Run,
    /// A matrix indexed `[fixed, varying]`: a run along one of its rows.
    Row,
}

impl Access {
    /// Whether the access yields a run of numbers rather than one.
    pub(crate) fn is_run(self) -> bool {
        !matches!(self, Access::Item)
    }
}

/// A formula node with element accesses resolved for the stage.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// A constant (literal arguments included).
    Number(f64),
    /// A run-time scalar value.
    Scalar(ValueId),
    /// An array value, reached by `Access`.
    Array(ValueId, Access),
    /// The finished sum (or norm) of a reduction (in the stage after it).
    Sum,
    /// `-a`.
    Neg(Box<Node>),
    /// `a op b`.
    Binary(BinOp, Box<Node>, Box<Node>),
    /// `abs(a)`, `sqrt(a)`.
    Call(Func, Box<Node>),
}

/// A factor of a product term.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Factor {
    /// A run-time scalar value.
    Scalar(ValueId),
    /// An array value.
    Array(ValueId, Access),
    /// The finished sum.
    Sum,
}

/// `coef · Π factors`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Term {
    /// The constant part, sign included.
    pub coef: f64,
    /// The rest.
    pub factors: Vec<Factor>,
}

/// A formula lowered for one stage.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stage {
    /// The expression, for the generic evaluator.
    pub node: Node,
    /// The same as a sum of products with at most two runs per product, where it is one.
    pub terms: Option<Vec<Term>>,
    /// Scratch buffers the generic evaluator needs.
    pub depth: usize,
}

impl Stage {
    /// Lowers `expr` of a call with arguments `args`, index variables playing `roles`; `sum` is
    /// whether a `sum(…)` stands for the finished sum here (and whether that sum is a run,
    /// `sum_is_run`).
    pub(crate) fn lower(
        expr: &Expr,
        args: &[Arg],
        roles: &[Role],
        sum: bool,
        sum_is_run: bool,
    ) -> Result<Stage, String> {
        let node = lower(expr, args, roles, sum)?;
        let terms = expand(&node).filter(|t| fits_loops(t, sum_is_run));
        Ok(Stage {
            depth: depth(&node),
            node,
            terms,
        })
    }

    /// The matrix the stage reads along its rows, when the stage is one product with exactly
    /// one such read and `runs` runs of vectors besides (any scalars and single elements).
    pub(crate) fn row_product(&self, runs: usize) -> Option<ValueId> {
        let [term] = self.terms.as_deref()? else {
            return None;
        };
        let reads = |access| {
            term.factors
                .iter()
                .filter(move |f| matches!(f, Factor::Array(_, a) if *a == access))
        };
        let matrix = reads(Access::Row).next();
        let single = reads(Access::Row).count() == 1 && reads(Access::Run).count() == runs;
        match (single, matrix) {
            (true, Some(Factor::Array(m, _))) => Some(*m),
            _ => None,
        }
    }

    /// Whether the stage reads value `v`.
    pub(crate) fn reads(&self, v: ValueId) -> bool {
        reads(&self.node, &|x, _| x == v)
    }

    /// Whether the stage reads rows of matrix `m`.
    pub(crate) fn reads_rows_of(&self, m: ValueId) -> bool {
        reads(&self.node, &|x, access| x == m && access == Some(Access::Row))
    }

    /// Puts `producer` — the terms of the map computing `v` on the same segments — in place of
    /// every run of `v` in the terms, where the result still fits the loops. Returns whether
    /// the stage no longer reads `v`.
    pub(crate) fn substitute(&mut self, v: ValueId, producer: &[Term]) -> bool {
        let Some(terms) = &self.terms else {
            return !self.reads(v);
        };
        let mut out = Vec::new();
        for term in terms {
            let (hits, rest): (Vec<Factor>, Vec<Factor>) = term
                .factors
                .iter()
                .partition(|f| matches!(f, Factor::Array(x, a) if *x == v && a.is_run()));
            match hits.len() {
                0 => out.push(term.clone()),
                1 => out.extend(producer.iter().map(|p| Term {
                    coef: term.coef * p.coef,
                    factors: [rest.clone(), p.factors.clone()].concat(),
                })),
                _ => return false,
            }
        }
        if out.len() > MAX_TERMS || !fits_loops(&out, false) {
            return false;
        }
        self.terms = Some(out);
        true
    }
}

/// Whether `node` reads a value that `read` picks (by the value and its access; a scalar's: none).
fn reads(node: &Node, read: &dyn Fn(ValueId, Option<Access>) -> bool) -> bool {
    match node {
        Node::Array(x, access) => read(*x, Some(*access)),
        Node::Scalar(x) => read(*x, None),
        Node::Number(_) | Node::Sum => false,
        Node::Neg(a) | Node::Call(_, a) => reads(a, read),
        Node::Binary(_, a, b) => reads(a, read) || reads(b, read),
    }
}

fn lower(e: &Expr, args: &[Arg], roles: &[Role], sum: bool) -> Result<Node, String> {
    let recur = |e: &Expr| lower(e, args, roles, sum).map(Box::new);
    Ok(match e {
        Expr::Number(v) => Node::Number(*v),
        Expr::Scalar(p) => match args.get(*p) {
            Some(Arg::Value(v)) => Node::Scalar(*v),
            Some(Arg::Literal(x)) => Node::Number(*x),
            None => return Err(format!("no argument for parameter {}", p + 1)),
        },
        Expr::Element { param, index } => match args.get(*param) {
            Some(Arg::Value(v)) => Node::Array(*v, access(index, roles)?),
            _ => return Err(format!("no array argument for parameter {}", param + 1)),
        },
        Expr::Neg(a) => Node::Neg(recur(a)?),
        Expr::Binary(op, a, b) => Node::Binary(*op, recur(a)?, recur(b)?),
        Expr::Call(f, a) => Node::Call(*f, recur(a)?),
        Expr::Reduce { .. } if sum => Node::Sum,
        Expr::Reduce { .. } => return Err("a sum inside a sum (reductions need exactly one, unnested, sum)".into()),
    })
}

fn access(index: &[usize], roles: &[Role]) -> Result<Access, String> {
    let role = |v: usize| roles.get(v).copied().unwrap_or(Role::Unbound);
    match index {
        [v] => match role(*v) {
            Role::Fixed => Ok(Access::Item),
            Role::Varying => Ok(Access::Run),
            Role::Unbound => Err("a vector indexed by a summation index outside its sum".into()),
        },
        [r, c] if role(*r) == Role::Fixed && role(*c) == Role::Varying => Ok(Access::Row),
        _ => Err("a matrix indexed other than [row, column] of the kernel's tiles".into()),
    }
}

/// Buffers a generic evaluation needs: one per right operand that is not a single number,
/// nested.
fn depth(node: &Node) -> usize {
    match node {
        Node::Number(_) | Node::Scalar(_) | Node::Array(..) | Node::Sum => 0,
        Node::Neg(a) | Node::Call(_, a) => depth(a),
        Node::Binary(_, a, b) => depth(a).max(1 + depth(b)),
    }
}

/// `node` as a sum of products, if it is one of at most [`MAX_TERMS`] terms.
fn expand(node: &Node) -> Option<Vec<Term>> {
    let one = |f: Factor| {
        Some(vec![Term {
            coef: 1.0,
            factors: vec![f],
        }])
    };
    let terms = match node {
        Node::Number(v) => Some(vec![Term {
            coef: *v,
            factors: Vec::new(),
        }]),
        Node::Scalar(v) => one(Factor::Scalar(*v)),
        Node::Array(v, a) => one(Factor::Array(*v, *a)),
        Node::Sum => one(Factor::Sum),
        Node::Neg(a) => Some(negated(expand(a)?)),
        Node::Binary(BinOp::Add, a, b) => Some([expand(a)?, expand(b)?].concat()),
        Node::Binary(BinOp::Sub, a, b) => Some([expand(a)?, negated(expand(b)?)].concat()),
        Node::Binary(BinOp::Mul, a, b) => {
            let (a, b) = (expand(a)?, expand(b)?);
            let product = a.iter().flat_map(|x| {
                b.iter().map(move |y| Term {
                    coef: x.coef * y.coef,
                    factors: [x.factors.clone(), y.factors.clone()].concat(),
                })
            });
            Some(product.collect())
        }
        Node::Binary(BinOp::Div, ..) | Node::Call(..) => None,
    }?;
    (terms.len() <= MAX_TERMS).then_some(terms)
}

fn negated(mut terms: Vec<Term>) -> Vec<Term> {
    terms.iter_mut().for_each(|t| t.coef = -t.coef);
    terms
}

/// Whether every product has at most two runs (the loops handle `c·x` and `c·x·y`).
fn fits_loops(terms: &[Term], sum_is_run: bool) -> bool {
    terms.iter().all(|t| {
        let runs = t.factors.iter().filter(|f| match f {
            Factor::Array(_, a) => a.is_run(),
            Factor::Sum => sum_is_run,
            Factor::Scalar(_) => false,
        });
        runs.count() <= 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_core::formula::{parse_formula, parse_signature};

    /// Lowers `formula`; argument `k` is value `10 + k`.
    fn stage(signature: &str, formula: &str, roles: &[Role]) -> Result<Stage, String> {
        let s = parse_signature(signature).unwrap();
        let f = parse_formula(formula, &s).unwrap();
        let args: Vec<Arg> = (0..s.params.len()).map(|k| Arg::Value(10 + k)).collect();
        Stage::lower(&f.body, &args, roles, false, false)
    }

    #[test]
    fn ger_is_a_row_plus_a_scaled_run() {
        let s = stage(
            "(a, x[m], y[n], A[m,n]) -> [m,n]",
            "out[i,j] = A[i,j] + a * x[i] * y[j]",
            &[Role::Fixed, Role::Varying],
        )
        .unwrap();
        let terms = s.terms.unwrap();
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[0].factors, [Factor::Array(13, Access::Row)]);
        assert_eq!(
            terms[1].factors,
            [
                Factor::Scalar(10),
                Factor::Array(11, Access::Item),
                Factor::Array(12, Access::Run)
            ]
        );
    }

    #[test]
    fn a_map_is_substituted_into_its_consumer() {
        let roles = [Role::Varying];
        // x = t + z with t = w + y (values 10 + k are the arguments of each).
        let mut consumer = stage("(x[n], y[n]) -> [n]", "out[i] = x[i] + y[i]", &roles).unwrap();
        let producer = stage("(x[n], y[n]) -> [n]", "out[i] = 2.0 * x[i] - y[i]", &roles).unwrap();
        assert!(consumer.substitute(10, producer.terms.as_ref().unwrap()));
        let terms = consumer.terms.unwrap();
        let coefs: Vec<f64> = terms.iter().map(|t| t.coef).collect();
        assert_eq!(coefs, [2.0, -1.0, 1.0]);
        assert_eq!(terms[2].factors, [Factor::Array(11, Access::Run)]);
        let mut generic = stage("(x[n], y[n]) -> [n]", "out[i] = x[i] / y[i]", &roles).unwrap();
        assert!(!generic.substitute(10, &[]), "a generic stage keeps reading the value");
    }

    #[test]
    fn division_and_abs_go_generic() {
        let s = stage("(x[n], y[n]) -> [n]", "out[i] = abs(x[i]) / y[i]", &[Role::Varying]).unwrap();
        assert!(s.terms.is_none());
        assert_eq!(s.depth, 1);
    }

    #[test]
    fn three_runs_in_a_product_go_generic() {
        let s = stage("(x[n], y[n]) -> [n]", "out[i] = x[i] * y[i] * x[i]", &[Role::Varying]).unwrap();
        assert!(s.terms.is_none());
    }

    #[test]
    fn transposed_matrices_are_refused() {
        let err = stage("(A[n,n]) -> [n,n]", "out[i,j] = A[j,i]", &[Role::Fixed, Role::Varying]).unwrap_err();
        assert!(err.contains("[row, column]"), "{err}");
    }
}
