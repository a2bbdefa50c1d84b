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

use fuse_core::formula::{BinOp, Expr, Func};

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
    /// A constant.
    Number(f64),
    /// The scalar argument at this parameter position.
    Param(usize),
    /// The array argument at this parameter position.
    Element(usize, Access),
    /// The finished sum of a reduction (in the stage after the sum).
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
    /// A scalar argument.
    Param(usize),
    /// An array argument.
    Element(usize, Access),
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
    /// Lowers `expr` with index variables playing `roles`; `sum` is whether a `sum(…)` stands
    /// for the finished sum here (and whether that sum is a run, `sum_is_run`).
    pub(crate) fn lower(expr: &Expr, roles: &[Role], sum: bool, sum_is_run: bool) -> Result<Stage, String> {
        let node = lower(expr, roles, sum)?;
        let terms = expand(&node).filter(|t| fits_loops(t, sum_is_run));
        Ok(Stage {
            depth: depth(&node),
            node,
            terms,
        })
    }
}

fn lower(e: &Expr, roles: &[Role], sum: bool) -> Result<Node, String> {
    let recur = |e: &Expr| lower(e, roles, sum).map(Box::new);
    Ok(match e {
        Expr::Number(v) => Node::Number(*v),
        Expr::Scalar(p) => Node::Param(*p),
        Expr::Element { param, index } => Node::Element(*param, access(index, roles)?),
        Expr::Neg(a) => Node::Neg(recur(a)?),
        Expr::Binary(op, a, b) => Node::Binary(*op, recur(a)?, recur(b)?),
        Expr::Call(f, a) => Node::Call(*f, recur(a)?),
        Expr::Sum { .. } if sum => Node::Sum,
        Expr::Sum { .. } => return Err("a sum inside a sum (reductions need exactly one, unnested, sum)".into()),
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
        Node::Number(_) | Node::Param(_) | Node::Element(..) | Node::Sum => 0,
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
        Node::Param(p) => one(Factor::Param(*p)),
        Node::Element(p, a) => one(Factor::Element(*p, *a)),
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
            Factor::Element(_, a) => a.is_run(),
            Factor::Sum => sum_is_run,
            Factor::Param(_) => false,
        });
        runs.count() <= 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_core::formula::{parse_formula, parse_signature};

    fn stage(signature: &str, formula: &str, roles: &[Role]) -> Result<Stage, String> {
        let s = parse_signature(signature).unwrap();
        let f = parse_formula(formula, &s).unwrap();
        Stage::lower(&f.body, roles, false, false)
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
        assert_eq!(terms[0].factors, [Factor::Element(3, Access::Row)]);
        assert_eq!(
            terms[1].factors,
            [
                Factor::Param(0),
                Factor::Element(1, Access::Item),
                Factor::Element(2, Access::Run)
            ]
        );
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
