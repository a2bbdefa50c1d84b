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
        // A product by a literal 0 is 0 from here on; by a run-time 0, as each segment runs.
        let literal_zero = |p: usize| matches!(args.get(p), Some(Arg::Literal(v)) if *v == 0.0);
        let expr = expr.with_zero_products(&literal_zero);
        let node = lower(&expr, args, roles, sum)?;
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
    /// `v` in the terms of this map, where that computes every element with exactly the
    /// operations, in the same order, of `v` computed alone and then this stage: each call's
    /// result is a number of the script's precision, as if each call ran alone, so a chain of
    /// maps may run as one pass only where no rounding moves (`(w + y) + z` and GEMVER's two
    /// rank-1 updates do; `b·(a·x)` would become `(b·a)·x`, and is not). Returns whether the
    /// stage no longer reads `v`.
    pub(crate) fn substitute(&mut self, v: ValueId, producer: &[Term]) -> bool {
        let Some(terms) = &self.terms else {
            return !self.reads(v);
        };
        let runs_of_v = |t: &Term| {
            t.factors
                .iter()
                .any(|f| matches!(f, Factor::Array(x, a) if *x == v && a.is_run()))
        };
        if !terms.iter().any(runs_of_v) {
            return !terms_read(terms, v);
        }
        match exact_substitution(terms, v, producer) {
            Some(out) if out.len() <= MAX_TERMS && fits_loops(&out, false) => {
                let gone = !terms_read(&out, v);
                self.terms = Some(out);
                gone
            }
            _ => false,
        }
    }
}

/// Whether any of `terms` reads value `v` (a single element of it included).
fn terms_read(terms: &[Term], v: ValueId) -> bool {
    let reads = |f: &Factor| matches!(*f, Factor::Array(x, _) | Factor::Scalar(x) if x == v);
    terms.iter().any(|t| t.factors.iter().any(reads))
}

/// The order in which a map runs its terms ([`super::eval::map`]), as indices into them: the
/// constants first, folded into the starting value, then each one-run term added in order, then
/// each two-run product in order.
fn evaluation_order(terms: &[Term]) -> Vec<usize> {
    (0..3)
        .flat_map(|k| (0..terms.len()).filter(move |&t| runs(&terms[t], false) == k))
        .collect()
}

/// For each term, whether a map adds it as a plain product then sum (the first [`LIN_PLAIN`]
/// one-run terms) or as a fused multiply-add (the one-run terms after them); `None` for the
/// others.
fn plain_adds(terms: &[Term]) -> Vec<Option<bool>> {
    let mut lins = 0;
    (terms.iter())
        .map(|t| {
            (runs(t, false) == 1).then(|| {
                lins += 1;
                lins <= LIN_PLAIN
            })
        })
        .collect()
}

/// One-run terms a map adds as a product then a sum; those after are fused multiply-adds,
/// which round alike only where the product is exact.
const LIN_PLAIN: usize = 3;

/// `terms` with `producer` in place of `v`, where that rounds exactly as `v` computed alone and
/// then `terms`: `v` is the first operation of `terms` (`±1·v`: `-0 ± v` is `±v`), the operations
/// of `producer` then those of the rest follow in the same order, and each one-run term of the
/// rest is still a plain product and sum, or still a fused multiply-add, unless its product is
/// exact. (The producer's terms come first, where they were.)
fn exact_substitution(terms: &[Term], v: ValueId, producer: &[Term]) -> Option<Vec<Term>> {
    let order = evaluation_order(terms);
    let at = *order.first()?;
    let alone = matches!(terms[at].factors[..], [Factor::Array(x, a)] if x == v && a.is_run());
    // `±v`: a negation is exact and rounding symmetric, so `-v`'s operations are `v`'s negated.
    let sign = terms[at].coef;
    if sign.abs() != 1.0 || !alone {
        return None;
    }
    // The terms of the result, each with where it comes from.
    let origins: Vec<Origin> = ((0..at).map(Origin::Consumer))
        .chain((0..producer.len()).map(Origin::Producer))
        .chain((at + 1..terms.len()).map(Origin::Consumer))
        .collect();
    let term = |o: Origin| match o {
        Origin::Producer(k) => Term {
            coef: sign * producer[k].coef,
            factors: producer[k].factors.clone(),
        },
        Origin::Consumer(k) => terms[k].clone(),
    };
    let out: Vec<Term> = origins.iter().map(|&o| term(o)).collect();
    let got: Vec<Origin> = evaluation_order(&out).into_iter().map(|k| origins[k]).collect();
    let expected: Vec<Origin> = (evaluation_order(producer).into_iter().map(Origin::Producer))
        .chain(order[1..].iter().map(|&k| Origin::Consumer(k)))
        .collect();
    let (before, after) = (plain_adds(terms), plain_adds(&out));
    let adds_alike = origins.iter().zip(&after).all(|(o, now)| match o {
        Origin::Producer(_) => true,
        Origin::Consumer(k) => {
            let exact = terms[*k].coef.abs() == 1.0 && terms[*k].factors.len() == 1;
            exact || before[*k] == *now
        }
    });
    (got == expected && adds_alike).then_some(out)
}

/// Where a term of a substituted map comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The producer's term of this index.
    Producer(usize),
    /// The consumer's term of this index.
    Consumer(usize),
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
            // The kernel numbers its inlined scalar calls as values before lowering.
            Some(Arg::Scalar(s)) => return Err(format!("an unnumbered inlined call of `{}`", s.callee)),
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
        Node::Binary(BinOp::Div | BinOp::Max | BinOp::Min, ..) | Node::Call(..) => None,
    }?;
    (terms.len() <= MAX_TERMS).then_some(terms)
}

fn negated(mut terms: Vec<Term>) -> Vec<Term> {
    terms.iter_mut().for_each(|t| t.coef = -t.coef);
    terms
}

/// Whether every product has at most two runs (the loops handle `c·x` and `c·x·y`).
fn fits_loops(terms: &[Term], sum_is_run: bool) -> bool {
    terms.iter().all(|t| runs(t, sum_is_run) <= 2)
}

/// The runs a term multiplies (the finished sum one where `sum_is_run`).
fn runs(t: &Term, sum_is_run: bool) -> usize {
    let is_run = |f: &&Factor| match f {
        Factor::Array(_, a) => a.is_run(),
        Factor::Sum => sum_is_run,
        Factor::Scalar(_) => false,
    };
    t.factors.iter().filter(is_run).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_core::formula::{parse_formula, parse_signature};

    /// Lowers `formula`; argument `k` is value `10 + k`.
    fn stage(signature: &str, formula: &str, roles: &[Role]) -> Result<Stage, String> {
        stage_from(10, signature, formula, roles)
    }

    /// Lowers `formula`; argument `k` is value `first + k`.
    fn stage_from(first: usize, signature: &str, formula: &str, roles: &[Role]) -> Result<Stage, String> {
        let s = parse_signature(signature).unwrap();
        let f = parse_formula(formula, &s).unwrap();
        let args: Vec<Arg> = (0..s.params.len()).map(|k| Arg::Value(first + k)).collect();
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
        // x = t + z with t = 2w - y (values 10 + k the consumer's arguments, 20 + k the producer's).
        let mut consumer = stage("(x[n], y[n]) -> [n]", "out[i] = x[i] + y[i]", &roles).unwrap();
        let producer = stage_from(20, "(x[n], y[n]) -> [n]", "out[i] = 2.0 * x[i] - y[i]", &roles).unwrap();
        assert!(consumer.substitute(10, producer.terms.as_ref().unwrap()));
        let terms = consumer.terms.unwrap();
        let coefs: Vec<f64> = terms.iter().map(|t| t.coef).collect();
        assert_eq!(coefs, [2.0, -1.0, 1.0]);
        assert_eq!(terms[2].factors, [Factor::Array(11, Access::Run)]);
        let mut generic = stage("(x[n], y[n]) -> [n]", "out[i] = x[i] / y[i]", &roles).unwrap();
        assert!(!generic.substitute(10, &[]), "a generic stage keeps reading the value");
    }

    #[test]
    fn a_map_is_substituted_only_where_no_rounding_moves() {
        let roles = [Role::Varying];
        let sum = stage("(x[n], y[n]) -> [n]", "out[i] = x[i] + y[i]", &roles).unwrap();
        let scaled = stage("(a, x[n]) -> [n]", "out[i] = a * x[i]", &roles).unwrap();
        let producer = stage_from(20, "(a, x[n], y[n]) -> [n]", "out[i] = a * x[i] + y[i]", &roles).unwrap();
        let producer = producer.terms.as_ref().unwrap();
        // (a·x + y) + z: the same operations in the same order.
        assert!(sum.clone().substitute(10, producer));
        // z + (a·x + y) would add z first; b·(a·x + y) would distribute b.
        assert!(!sum.clone().substitute(11, producer));
        assert!(!scaled.clone().substitute(11, producer));
        // −(a·x + y) + z (AXPYDOT's `w − α·v`): a negation rounds alike.
        let minus = stage("(x[n], y[n]) -> [n]", "out[i] = -x[i] + y[i]", &roles).unwrap();
        assert!(minus.clone().substitute(10, producer));
        // A fourth one-run term is a fused multiply-add: a term with a coefficient moved past
        // the third changes how it rounds.
        let three = stage(
            "(x[n], y[n], a, w[n]) -> [n]",
            "out[i] = x[i] + y[i] + a * w[i]",
            &roles,
        )
        .unwrap();
        let two = stage_from(20, "(x[n], y[n]) -> [n]", "out[i] = 2.0 * x[i] - y[i]", &roles).unwrap();
        assert!(!three.clone().substitute(10, two.terms.as_ref().unwrap()));
        let unit = stage("(x[n], y[n], w[n]) -> [n]", "out[i] = x[i] + y[i] + w[i]", &roles).unwrap();
        assert!(unit.clone().substitute(10, two.terms.as_ref().unwrap()));
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
