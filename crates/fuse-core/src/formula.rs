//! The index-notation language in which library metadata states what an elementary function
//! computes, e.g. `out[i] = a * sum(j, A[i,j] * x[j]) + b * y[i]`.
//!
//! A [`Signature`] such as `(a, A[m,n], x[n], b, y[m]) -> [m]` gives the parameters in call
//! order (a name alone is a scalar) and the result shape. A [`Formula`] is checked against its
//! signature when the library is loaded, so every backend can rely on it: each array is indexed
//! with as many indices as it has dimensions, each index variable ranges over exactly one
//! dimension symbol, the left-hand side names the result's dimensions in order, and `sum` (or
//! `norm2`) binds a variable not free outside it.
//!
//! `sum(j in i..n, e)` sums over part of `j`'s dimension ([`Range`]): from `i` to its end here,
//! `0..=i` up to `i` included; a bound is 0, the dimension's symbol (an end) or an index bound
//! outside the sum over the same dimension plus or minus a whole number. A triangular matrix is
//! such a sum; [`Range::diagonals`] says which part of the matrix it reads.
//!
//! `norm2(i, e)` is the Euclidean norm `sqrt(sum(i, e * e))` as BLAS `nrm2` computes it: scaled
//! so that it neither overflows nor underflows where the result is representable.
//!
//! A product with a scalar parameter that is zero is zero (+0), whatever its other factors hold
//! ([`Expr::with_zero_products`]): BLAS does not read `y` where β = 0 or `A` where α = 0, so a
//! NaN or an uninitialised buffer there does not reach the result. Every backend follows this
//! rule, for a literal 0 at compile time and for a run-time scalar when it runs.
//!
//! `max(a, b)` is `a` where `a > b` or `b` is NaN, else `b`; `min(a, b)` is `a` where `a < b`
//! or `b` is NaN, else `b`. So, as C's `fmax`/`fmin`, a NaN argument gives the other argument
//! (NaN only where both are), and of two equal arguments (`+0` and `-0`) the second is the
//! result. Every backend computes exactly this expression, so the sign of a zero agrees too.

use std::ops::{Add, Div, Mul, Sub};

use crate::shape::Shape;

/// Parameters in call order and the result shape of one form of a function.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    /// The parameters, in the order a call passes them.
    pub params: Vec<Param>,
    /// The shape of the result.
    pub result: Shape,
}

/// One formal parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Its name in the formula.
    pub name: String,
    /// Its shape, in the function's own dimension symbols.
    pub shape: Shape,
}

/// A checked formula: the result at each index tuple is `body`.
#[derive(Debug, Clone, PartialEq)]
pub struct Formula {
    /// The index variables: their names and the dimension symbol each ranges over.
    pub indices: Vec<IndexVar>,
    /// Index variables of the result, outermost dimension first.
    pub result_indices: Vec<usize>,
    /// The expression giving one result element.
    pub body: Expr,
}

/// An index variable and the dimension symbol it ranges over.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexVar {
    /// The variable (`i`).
    pub name: String,
    /// The dimension symbol of the signature (`m`).
    pub dim: String,
}

/// An expression over parameters and index variables.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant.
    Number(f64),
    /// A scalar parameter, by position in the signature.
    Scalar(usize),
    /// An element of an array parameter; `index` holds index-variable numbers.
    Element {
        /// Position of the parameter in the signature.
        param: usize,
        /// Index variables, outermost dimension first.
        index: Vec<usize>,
    },
    /// `-e`.
    Neg(Box<Expr>),
    /// A binary arithmetic operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `sum(i, body)` or `norm2(i, body)`: `body` reduced over the range of index variable
    /// `index`.
    Reduce {
        /// How the terms combine.
        op: ReduceOp,
        /// The bound index variable.
        index: usize,
        /// The part of its dimension it runs over (all of it unless `sum(j in …, body)`).
        range: Range,
        /// The term.
        body: Box<Expr>,
    },
    /// A unary function such as `abs` or `sqrt`.
    Call(Func, Box<Expr>),
}

/// The part of its dimension a summation index runs over: `start..end`, each bound either
/// the dimension's own end (0, the extent) or another index variable plus a constant, clamped
/// to the dimension. `sum(j in i..n, …)` is an upper triangle's row, `sum(j in 0..=i, …)` a
/// lower one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Range {
    /// The first value, where not 0.
    pub start: Option<Offset>,
    /// One past the last value, where not the extent.
    pub end: Option<Offset>,
}

/// Index variable `var` plus `plus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    /// The index variable.
    pub var: usize,
    /// The constant added.
    pub plus: i64,
}

impl Range {
    /// Whether it is the whole dimension.
    pub fn is_whole(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }

    /// The values it runs over for a dimension of `extent`, index variables at `idx`.
    pub fn bounds(&self, extent: usize, idx: &[usize]) -> std::ops::Range<usize> {
        let at = |b: Option<Offset>, or: usize| match b {
            None => or,
            Some(o) => (idx[o.var] as i64 + o.plus).clamp(0, extent as i64) as usize,
        };
        let (start, end) = (at(self.start, 0), at(self.end, extent));
        start..end.max(start)
    }

    /// The diagonals of a matrix indexed `[row, column]` that a sum with this range reads,
    /// where the sum runs over the column index (`summed_is_column`) or the row index and
    /// `other` is the matrix's other index variable.
    pub fn diagonals(&self, summed_is_column: bool, other: usize) -> Diagonals {
        let bound = |b: Option<Offset>| b.filter(|o| o.var == other).map(|o| o.plus);
        let (start, end) = (bound(self.start), bound(self.end));
        match summed_is_column {
            // column ≥ row + start; column ≤ row + end − 1.
            true => Diagonals {
                from: start,
                to: end.map(|e| e - 1),
            },
            // row ≥ column + start: column − row ≤ −start; row ≤ column + end − 1.
            false => Diagonals {
                from: end.map(|e| 1 - e),
                to: start.map(|s| -s),
            },
        }
    }
}

/// The diagonals `column − row` of a matrix a call reads, each bound inclusive: an upper
/// triangle is `from: Some(0)`, a strictly lower one `to: Some(-1)`, a full matrix neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Diagonals {
    /// The lowest diagonal read, where bounded.
    pub from: Option<i64>,
    /// The highest diagonal read, where bounded.
    pub to: Option<i64>,
}

impl Diagonals {
    /// Whether every element may be read.
    pub fn is_full(&self) -> bool {
        self.from.is_none() && self.to.is_none()
    }

    /// The columns of row `row` read, within `columns`.
    pub fn columns(&self, row: usize, columns: std::ops::Range<usize>) -> std::ops::Range<usize> {
        let at = |d: Option<i64>, plus: i64, or: usize| match d {
            None => or,
            Some(d) => (row as i64 + d + plus).clamp(columns.start as i64, columns.end as i64) as usize,
        };
        let (start, end) = (at(self.from, 0, columns.start), at(self.to, 1, columns.end));
        start..end.max(start)
    }

    /// The share of the `tiles.0 × tiles.1` tiles of `side`×`side` elements that hold an
    /// element of the band (1 for a full matrix).
    pub fn tile_share(&self, tiles: (u64, u64), side: u64) -> f64 {
        if self.is_full() || tiles.0 == 0 || tiles.1 == 0 {
            return 1.0;
        }
        let columns = (tiles.1 * side) as usize;
        let touched: u64 = (0..tiles.0)
            .map(|r| {
                // The tile row's first row reads the band's first columns, its last row the last.
                let (first, last) = (r * side, (r + 1) * side - 1);
                let (a, b) = (
                    self.columns(first as usize, 0..columns),
                    self.columns(last as usize, 0..columns),
                );
                let (start, end) = (a.start.min(b.start) as u64, a.end.max(b.end) as u64);
                match end > start {
                    true => (end - 1) / side - start / side + 1,
                    false => 0,
                }
            })
            .sum();
        touched as f64 / (tiles.0 * tiles.1) as f64
    }

    /// The smallest band holding both.
    pub fn union(self, other: Diagonals) -> Diagonals {
        let both = |a: Option<i64>, b: Option<i64>, pick: fn(i64, i64) -> i64| a.zip(b).map(|(a, b)| pick(a, b));
        Diagonals {
            from: both(self.from, other.from, i64::min),
            to: both(self.to, other.to, i64::max),
        }
    }

    /// The largest band inside both (empty where they do not overlap: `from` past `to`).
    pub fn intersection(self, other: Diagonals) -> Diagonals {
        let either = |a: Option<i64>, b: Option<i64>, pick: fn(i64, i64) -> i64| match (a, b) {
            (Some(a), Some(b)) => Some(pick(a, b)),
            (a, b) => a.or(b),
        };
        Diagonals {
            from: either(self.from, other.from, i64::max),
            to: either(self.to, other.to, i64::min),
        }
    }
}

/// How a reduction combines its terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// `sum`: Σ term.
    Sum,
    /// `norm2`: sqrt(Σ term²), computed without overflow or underflow of the squares (BLAS
    /// `nrm2`: the squares are accumulated in three ranges, each scaled by a power of two).
    Norm2,
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `max(a, b)`: see the module documentation for NaN and signed zeros.
    Max,
    /// `min(a, b)`: see the module documentation for NaN and signed zeros.
    Min,
}

impl BinOp {
    /// `op` applied to two numbers, as every backend computes it.
    pub fn apply<T>(self, a: T, b: T) -> T
    where
        T: PartialOrd + Copy + Add<Output = T> + Sub<Output = T> + Mul<Output = T> + Div<Output = T>,
    {
        // NaN is the one number unequal to itself.
        #[allow(clippy::eq_op)]
        let nan = |x: T| x != x;
        match self {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
            BinOp::Max => {
                if a > b || nan(b) {
                    a
                } else {
                    b
                }
            }
            BinOp::Min => {
                if a < b || nan(b) {
                    a
                } else {
                    b
                }
            }
        }
    }
}

/// Unary functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// Absolute value.
    Abs,
    /// Square root.
    Sqrt,
}

impl Expr {
    /// Whether the expression reads an element of array parameter `param`.
    pub fn reads(&self, param: usize) -> bool {
        match self {
            Expr::Element { param: p, .. } => *p == param,
            Expr::Number(_) | Expr::Scalar(_) => false,
            Expr::Reduce { body: e, .. } | Expr::Neg(e) | Expr::Call(_, e) => e.reads(param),
            Expr::Binary(_, a, b) => a.reads(param) || b.reads(param),
        }
    }

    /// The scalar parameters this expression multiplies by, where it is a product (a chain of
    /// `*` and `-`): where one of them is zero, the product is zero.
    pub fn scalar_factors(&self) -> Vec<usize> {
        match self {
            Expr::Scalar(p) => vec![*p],
            Expr::Neg(a) => a.scalar_factors(),
            Expr::Binary(BinOp::Mul, a, b) => [a.scalar_factors(), b.scalar_factors()].concat(),
            _ => Vec::new(),
        }
    }

    /// Whether the expression is a product (a chain of `*` and `-`) with a matrix element (an
    /// element of two indices) among its factors: zero where that element is, the other
    /// factors finite.
    pub fn has_matrix_factor(&self) -> bool {
        match self {
            Expr::Element { index, .. } => index.len() == 2,
            Expr::Neg(a) => a.has_matrix_factor(),
            Expr::Binary(BinOp::Mul, a, b) => a.has_matrix_factor() || b.has_matrix_factor(),
            _ => false,
        }
    }

    /// The expression with every product by a scalar parameter that `is_zero` replaced by the
    /// number 0 (+0, as BLAS's zeroed `y` is): `a·x + y` with `a` zero is `0 + y`, and reads no
    /// `x`.
    pub fn with_zero_products(&self, is_zero: &dyn Fn(usize) -> bool) -> Expr {
        let zeroed = |e: &Expr| Box::new(e.with_zero_products(is_zero));
        // A bare scalar is no product: `1 / b` with `b = -0` is -inf, as IEEE says.
        let product = matches!(self, Expr::Neg(_) | Expr::Binary(BinOp::Mul, ..));
        if product && self.scalar_factors().into_iter().any(is_zero) {
            return Expr::Number(0.0);
        }
        match self {
            Expr::Number(_) | Expr::Scalar(_) | Expr::Element { .. } => self.clone(),
            Expr::Neg(a) => Expr::Neg(zeroed(a)),
            Expr::Binary(op, a, b) => Expr::Binary(*op, zeroed(a), zeroed(b)),
            Expr::Reduce { op, index, range, body } => Expr::Reduce {
                op: *op,
                index: *index,
                range: *range,
                body: zeroed(body),
            },
            Expr::Call(f, a) => Expr::Call(*f, zeroed(a)),
        }
    }

    /// The value of an expression without array elements (a `kind: scalar` formula) where
    /// scalar parameter `p` is `scalars[p]`, in f64.
    pub fn eval_scalar(&self, scalars: &[f64]) -> f64 {
        match self {
            Expr::Number(v) => *v,
            Expr::Scalar(p) => scalars[*p],
            Expr::Neg(a) => -a.eval_scalar(scalars),
            Expr::Binary(op, a, b) => op.apply(a.eval_scalar(scalars), b.eval_scalar(scalars)),
            Expr::Call(Func::Abs, a) => a.eval_scalar(scalars).abs(),
            Expr::Call(Func::Sqrt, a) => a.eval_scalar(scalars).sqrt(),
            Expr::Element { .. } | Expr::Reduce { .. } => {
                unreachable!("the library checks that scalar formulas index no array")
            }
        }
    }

    /// Whether the expression contains a reduction (`sum` or `norm2`).
    pub fn has_reduction(&self) -> bool {
        self.any_reduction(&|_| true)
    }

    /// Whether the expression contains a reduction `op`.
    pub fn has(&self, op: ReduceOp) -> bool {
        self.any_reduction(&|o| o == op)
    }

    fn any_reduction(&self, hit: &dyn Fn(ReduceOp) -> bool) -> bool {
        match self {
            Expr::Reduce { op, body, .. } => hit(*op) || body.any_reduction(hit),
            Expr::Number(_) | Expr::Scalar(_) | Expr::Element { .. } => false,
            Expr::Neg(e) | Expr::Call(_, e) => e.any_reduction(hit),
            Expr::Binary(_, a, b) => a.any_reduction(hit) || b.any_reduction(hit),
        }
    }

    /// The one reduction of a reduce formula: `(op, index, term)`, or `None` unless the
    /// expression holds exactly one reduction and none nests inside it.
    pub fn the_reduction(&self) -> Option<(ReduceOp, usize, &Expr)> {
        let mut found = Vec::new();
        self.collect_reductions(&mut found);
        match found.as_slice() {
            [Expr::Reduce { op, index, body, .. }] if !body.has_reduction() => Some((*op, *index, body)),
            _ => None,
        }
    }

    /// The range of its outermost reduction, if it has one (whole for `sum(j, …)`).
    pub fn reduction_range(&self) -> Option<Range> {
        let mut found = Vec::new();
        self.collect_reductions(&mut found);
        found.first().and_then(|e| match e {
            Expr::Reduce { range, .. } => Some(*range),
            _ => None,
        })
    }

    /// The outermost reductions, in order.
    fn collect_reductions<'e>(&'e self, out: &mut Vec<&'e Expr>) {
        match self {
            Expr::Reduce { .. } => out.push(self),
            Expr::Number(_) | Expr::Scalar(_) | Expr::Element { .. } => {}
            Expr::Neg(a) | Expr::Call(_, a) => a.collect_reductions(out),
            Expr::Binary(_, a, b) => {
                a.collect_reductions(out);
                b.collect_reductions(out);
            }
        }
    }

    /// Arithmetic operations per evaluation, counting each summand once per sum.
    pub fn flops(&self) -> usize {
        match self {
            Expr::Number(_) | Expr::Scalar(_) | Expr::Element { .. } => 0,
            Expr::Neg(e) | Expr::Call(_, e) => 1 + e.flops(),
            Expr::Binary(_, a, b) => 1 + a.flops() + b.flops(),
            Expr::Reduce {
                op: ReduceOp::Sum,
                body,
                ..
            } => 1 + body.flops(),
            // Per term: the magnitude, its range, a scaling and a square added.
            Expr::Reduce {
                op: ReduceOp::Norm2,
                body,
                ..
            } => 4 + body.flops(),
        }
    }
}

/// Parses a signature such as `(a, A[m,n], x[n]) -> [m]` or `(x[n], y[n]) -> scalar`.
pub fn parse_signature(text: &str) -> Result<Signature, String> {
    let mut p = Parser::new(text)?;
    p.expect(&Token::LParen)?;
    let mut params = Vec::new();
    if !p.eat(&Token::RParen) {
        loop {
            let name = p.ident()?;
            if params.iter().any(|q: &Param| q.name == name) {
                return Err(format!("parameter `{name}` appears twice"));
            }
            let shape = if p.peek() == Some(&Token::LBracket) {
                p.shape()?
            } else {
                Shape::Scalar
            };
            params.push(Param { name, shape });
            if p.eat(&Token::RParen) {
                break;
            }
            p.expect(&Token::Comma)?;
        }
    }
    p.expect(&Token::Arrow)?;
    let result = if p.peek() == Some(&Token::LBracket) {
        p.shape()?
    } else {
        match p.ident()?.as_str() {
            "scalar" => Shape::Scalar,
            other => {
                return Err(format!(
                    "expected a result shape like `[m]` or `scalar`, found `{other}`"
                ))
            }
        }
    };
    p.end()?;
    Ok(Signature { params, result })
}

/// Parses `out[i, j] = expr` and checks it against `signature`.
pub fn parse_formula(text: &str, signature: &Signature) -> Result<Formula, String> {
    let mut p = Parser::new(text)?;
    p.signature = Some(signature);
    p.ident()?;
    let mut lhs = Vec::new();
    if p.eat(&Token::LBracket) {
        loop {
            lhs.push(p.ident()?);
            if p.eat(&Token::RBracket) {
                break;
            }
            p.expect(&Token::Comma)?;
        }
    }
    p.expect(&Token::Equals)?;
    let result_dims = signature.result.dims();
    if lhs.len() != result_dims.len() {
        return Err(format!(
            "the left-hand side has {} indices but the result shape {} has {}",
            lhs.len(),
            signature.result,
            result_dims.len()
        ));
    }
    for (name, dim) in lhs.iter().zip(&result_dims) {
        if p.indices.iter().any(|v| &v.name == name) {
            return Err(format!("index `{name}` appears twice on the left-hand side"));
        }
        p.indices.push(IndexVar {
            name: name.clone(),
            dim: dim.to_string(),
        });
    }
    p.free = (0..lhs.len()).collect();
    let body = p.expr()?;
    p.end()?;
    Ok(Formula {
        result_indices: (0..lhs.len()).collect(),
        indices: p.indices,
        body,
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Number(f64),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    Equals,
    Arrow,
    /// `..` (`inclusive`: `..=`).
    Dots {
        inclusive: bool,
    },
    Op(BinOp),
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let single = match c {
            '(' => Some(Token::LParen),
            ')' => Some(Token::RParen),
            '[' => Some(Token::LBracket),
            ']' => Some(Token::RBracket),
            ',' => Some(Token::Comma),
            '=' => Some(Token::Equals),
            '+' => Some(Token::Op(BinOp::Add)),
            '*' => Some(Token::Op(BinOp::Mul)),
            '/' => Some(Token::Op(BinOp::Div)),
            _ => None,
        };
        if let Some(t) = single {
            tokens.push(t);
            i += 1;
        } else if c == '-' {
            let arrow = chars.get(i + 1) == Some(&'>');
            tokens.push(if arrow { Token::Arrow } else { Token::Op(BinOp::Sub) });
            i += 1 + arrow as usize;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '.' && chars.get(i + 1) == Some(&'.') {
            let inclusive = chars.get(i + 2) == Some(&'=');
            tokens.push(Token::Dots { inclusive });
            i += 2 + inclusive as usize;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            let dots = |i: usize| chars[i] == '.' && chars.get(i + 1) == Some(&'.');
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') && !dots(i) {
                i += 1;
            }
            let s: String = chars[start..i].iter().collect();
            let value: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
            // As for script literals: an infinite constant has no meaning in generated code.
            if !value.is_finite() {
                return Err(format!("literal `{s}` is not a finite number"));
            }
            tokens.push(Token::Number(value));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else {
            return Err(format!("unexpected character `{c}`"));
        }
    }
    Ok(tokens)
}

/// Parentheses, calls and negations a formula may nest: every stage walks formulas
/// recursively, and deeper nesting would overflow its stack.
const MAX_NESTING: usize = 64;
/// Operations (`+ - * /`) a formula may have: a flat chain of them is a tree as deep.
const MAX_OPERATIONS: usize = 1000;

struct Parser<'s> {
    tokens: Vec<Token>,
    pos: usize,
    signature: Option<&'s Signature>,
    indices: Vec<IndexVar>,
    /// Index variables that may appear at this point (the result's and enclosing sums').
    free: Vec<usize>,
    /// Subexpressions open at this point, and operations so far.
    nesting: usize,
    operations: usize,
}

impl<'s> Parser<'s> {
    fn new(text: &str) -> Result<Self, String> {
        Ok(Parser {
            tokens: tokenize(text)?,
            pos: 0,
            signature: None,
            indices: Vec::new(),
            free: Vec::new(),
            nesting: 0,
            operations: 0,
        })
    }

    /// Runs `parse` one level deeper, refusing nesting past [`MAX_NESTING`].
    fn nested(&mut self, parse: impl FnOnce(&mut Self) -> Result<Expr, String>) -> Result<Expr, String> {
        if self.nesting == MAX_NESTING {
            return Err(format!("the formula nests more than {MAX_NESTING} levels deep"));
        }
        self.nesting += 1;
        let e = parse(self);
        self.nesting -= 1;
        e
    }

    /// `lhs op rhs`, refusing more than [`MAX_OPERATIONS`] in the formula.
    fn binary(&mut self, op: BinOp, lhs: Expr, rhs: Expr) -> Result<Expr, String> {
        self.operations += 1;
        if self.operations > MAX_OPERATIONS {
            return Err(format!("the formula has more than {MAX_OPERATIONS} operations"));
        }
        Ok(Expr::Binary(op, Box::new(lhs), Box::new(rhs)))
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn eat(&mut self, t: &Token) -> bool {
        let hit = self.peek() == Some(t);
        self.pos += hit as usize;
        hit
    }

    fn expect(&mut self, t: &Token) -> Result<(), String> {
        match self.next() {
            Some(ref got) if got == t => Ok(()),
            got => Err(format!(
                "expected {}, found {}",
                describe(Some(t)),
                describe(got.as_ref())
            )),
        }
    }

    fn end(&self) -> Result<(), String> {
        match self.peek() {
            None => Ok(()),
            t => Err(format!("unexpected {} after the end", describe(t))),
        }
    }

    fn ident(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Ident(s)) => Ok(s),
            got => Err(format!("expected a name, found {}", describe(got.as_ref()))),
        }
    }

    /// `[m]` or `[m, n]`.
    fn shape(&mut self) -> Result<Shape, String> {
        self.expect(&Token::LBracket)?;
        let mut dims = vec![self.ident()?];
        while self.eat(&Token::Comma) {
            dims.push(self.ident()?);
        }
        self.expect(&Token::RBracket)?;
        match dims.as_slice() {
            [n] => Ok(Shape::Vector(n.clone())),
            [m, n] => Ok(Shape::Matrix(m.clone(), n.clone())),
            _ => Err(format!("arrays have 1 or 2 dimensions, not {}", dims.len())),
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let mut lhs = self.term()?;
        while let Some(Token::Op(op @ (BinOp::Add | BinOp::Sub))) = self.peek().cloned() {
            self.pos += 1;
            let rhs = self.term()?;
            lhs = self.binary(op, lhs, rhs)?;
        }
        Ok(lhs)
    }

    fn term(&mut self) -> Result<Expr, String> {
        let mut lhs = self.unary()?;
        while let Some(Token::Op(op @ (BinOp::Mul | BinOp::Div))) = self.peek().cloned() {
            self.pos += 1;
            let rhs = self.unary()?;
            lhs = self.binary(op, lhs, rhs)?;
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat(&Token::Op(BinOp::Sub)) {
            return self.nested(|p| Ok(Expr::Neg(Box::new(p.unary()?))));
        }
        match self.next() {
            Some(Token::Number(v)) => Ok(Expr::Number(v)),
            Some(Token::LParen) => self.nested(|p| {
                let e = p.expr()?;
                p.expect(&Token::RParen)?;
                Ok(e)
            }),
            Some(Token::Ident(name)) => self.nested(|p| p.named(name)),
            got => Err(format!("expected an operand, found {}", describe(got.as_ref()))),
        }
    }

    /// A function call, a scalar parameter or an array element.
    fn named(&mut self, name: String) -> Result<Expr, String> {
        if self.peek() == Some(&Token::LParen) {
            return self.call(&name);
        }
        let signature = self.signature.expect("formulas are parsed against a signature");
        let param = signature
            .params
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| format!("`{name}` is not a parameter of the signature"))?;
        let dims: Vec<String> = signature.params[param]
            .shape
            .dims()
            .iter()
            .map(|d| d.to_string())
            .collect();
        if dims.is_empty() {
            return Ok(Expr::Scalar(param));
        }
        self.expect(&Token::LBracket)?;
        let mut index = Vec::new();
        loop {
            let var = self.ident()?;
            let dim = dims
                .get(index.len())
                .ok_or_else(|| format!("`{name}` has {} dimensions but is indexed with more", dims.len()))?;
            index.push(self.use_index(&var, dim)?);
            if self.eat(&Token::RBracket) {
                break;
            }
            self.expect(&Token::Comma)?;
        }
        if index.len() != dims.len() {
            return Err(format!(
                "`{name}` has {} dimensions but is indexed with {}",
                dims.len(),
                index.len()
            ));
        }
        Ok(Expr::Element { param, index })
    }

    /// Resolves index variable `var` used over dimension `dim`.
    fn use_index(&mut self, var: &str, dim: &str) -> Result<usize, String> {
        let id = self
            .free
            .iter()
            .copied()
            .find(|&i| self.indices[i].name == var)
            .ok_or_else(|| format!("index `{var}` is not bound here (use it on the left-hand side or in a sum)"))?;
        let bound = &self.indices[id].dim;
        if bound != dim {
            return Err(format!("index `{var}` ranges over `{bound}` but is used over `{dim}`"));
        }
        Ok(id)
    }

    fn call(&mut self, name: &str) -> Result<Expr, String> {
        self.expect(&Token::LParen)?;
        let expr = match name {
            "sum" => self.reduction(ReduceOp::Sum)?,
            "norm2" => self.reduction(ReduceOp::Norm2)?,
            "abs" => Expr::Call(Func::Abs, Box::new(self.expr()?)),
            "sqrt" => Expr::Call(Func::Sqrt, Box::new(self.expr()?)),
            "max" => self.pair(BinOp::Max)?,
            "min" => self.pair(BinOp::Min)?,
            other => {
                return Err(format!(
                    "unknown function `{other}`; expected sum, norm2, abs, sqrt, max or min"
                ))
            }
        };
        self.expect(&Token::RParen)?;
        Ok(expr)
    }

    /// The two arguments of `max(a, b)` or `min(a, b)`.
    fn pair(&mut self, op: BinOp) -> Result<Expr, String> {
        let a = self.expr()?;
        self.expect(&Token::Comma)?;
        let b = self.expr()?;
        self.binary(op, a, b)
    }

    /// `sum(j, body)` or `norm2(j, body)`: the range of `j` is the dimension it first indexes
    /// in `body`; `sum(j in START..END, body)` (or `..=END`) a part of it.
    fn reduction(&mut self, op: ReduceOp) -> Result<Expr, String> {
        let var = self.ident()?;
        if self.free.iter().any(|&i| self.indices[i].name == var) {
            return Err(format!("index `{var}` is already bound"));
        }
        let range_at = self.eat(&Token::Ident("in".into())).then_some(self.pos);
        if let Some(at) = range_at {
            while !matches!(self.peek(), Some(Token::Comma) | None) {
                self.pos += 1;
            }
            if self.pos == at {
                return Err(format!("expected a range after `{var} in`, like `0..n` or `i..n`"));
            }
        }
        self.expect(&Token::Comma)?;
        let id = self.indices.len();
        // The dimension is not known until the body indexes something with `var`; parse the
        // body with a placeholder and fix it from the first use.
        self.indices.push(IndexVar {
            name: var.clone(),
            dim: String::new(),
        });
        let start = self.pos;
        let dim = self.first_dim_of(&var, start)?;
        self.indices[id].dim = dim;
        let range = match range_at {
            Some(at) => {
                let end = self.pos - 1;
                self.range(at, end, id)?
            }
            None => Range::default(),
        };
        self.free.push(id);
        let body = self.expr()?;
        self.free.pop();
        if op == ReduceOp::Norm2 && !range.is_whole() {
            return Err("`norm2` runs over a whole dimension: no range".into());
        }
        Ok(Expr::Reduce {
            op,
            index: id,
            range,
            body: Box::new(body),
        })
    }

    /// The range of summation index `id` in tokens `at..end`: `START..END` or `START..=END`,
    /// each bound `0`, the index's dimension (an end), or a bound index `v`, `v + k`, `v - k`.
    fn range(&self, at: usize, end: usize, id: usize) -> Result<Range, String> {
        let tokens = &self.tokens[at..end];
        let var = &self.indices[id];
        let dots = tokens.iter().position(|t| matches!(t, Token::Dots { .. }));
        let Some(k) = dots else {
            return Err(format!(
                "the range of `{}` needs `..` or `..=` (like `0..{}`)",
                var.name, var.dim
            ));
        };
        let inclusive = matches!(tokens[k], Token::Dots { inclusive: true });
        let start = match &tokens[..k] {
            [Token::Number(v)] if *v == 0.0 => None,
            bound => Some(self.offset(bound, id)?),
        };
        let end = match (&tokens[k + 1..], inclusive) {
            ([Token::Ident(d)], false) if *d == var.dim => None,
            (bound, _) => {
                let o = self.offset(bound, id)?;
                Some(Offset {
                    plus: o.plus + inclusive as i64,
                    ..o
                })
            }
        };
        Ok(Range { start, end })
    }

    /// A range bound `v`, `v + k` or `v - k`: `v` an index variable bound here over the same
    /// dimension as summation index `id`, `k` a whole number.
    fn offset(&self, tokens: &[Token], id: usize) -> Result<Offset, String> {
        let sum = &self.indices[id];
        let shown = || {
            tokens
                .iter()
                .map(|t| describe(Some(t)).replace('`', ""))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let bad = || {
            format!(
                "range bound `{}` of `{}`: expected 0, `{}` (its dimension) or a bound index such as `i`, `i + 1`, `i - 1`",
                shown(),
                sum.name,
                sum.dim
            )
        };
        let (name, plus) = match tokens {
            [Token::Ident(v)] => (v, 0.0),
            [Token::Ident(v), Token::Op(BinOp::Add), Token::Number(k)] => (v, *k),
            [Token::Ident(v), Token::Op(BinOp::Sub), Token::Number(k)] => (v, -k),
            _ => return Err(bad()),
        };
        if plus.fract() != 0.0 || plus.abs() > 1e9 {
            return Err(bad());
        }
        let var = self
            .free
            .iter()
            .copied()
            .find(|&i| &self.indices[i].name == name)
            .ok_or_else(|| {
                format!(
                    "range bound `{}` of `{}`: index `{name}` is not bound here",
                    shown(),
                    sum.name
                )
            })?;
        let dim = &self.indices[var].dim;
        if *dim != sum.dim {
            return Err(format!(
                "range bound `{}` of `{}`: `{name}` ranges over `{dim}`, `{}` over `{}`",
                shown(),
                sum.name,
                sum.name,
                sum.dim
            ));
        }
        Ok(Offset { var, plus: plus as i64 })
    }

    /// The dimension that `var` first indexes among the tokens from `start`.
    fn first_dim_of(&self, var: &str, start: usize) -> Result<String, String> {
        let signature = self.signature.expect("formulas are parsed against a signature");
        let tokens = &self.tokens[start..];
        for (k, t) in tokens.iter().enumerate() {
            let (Token::Ident(name), Some(Token::LBracket)) = (t, tokens.get(k + 1)) else {
                continue;
            };
            let Some(param) = signature.params.iter().find(|p| &p.name == name) else {
                continue;
            };
            let dims = param.shape.dims();
            let mut position = 0;
            for inner in &tokens[k + 2..] {
                match inner {
                    Token::Ident(v) if v == var => {
                        if let Some(d) = dims.get(position) {
                            return Ok(d.to_string());
                        }
                    }
                    Token::Comma => position += 1,
                    Token::RBracket => break,
                    _ => {}
                }
            }
        }
        Err(format!("summation index `{var}` never indexes an array"))
    }
}

fn describe(t: Option<&Token>) -> String {
    match t {
        None => "the end".to_string(),
        Some(Token::Ident(s)) => format!("`{s}`"),
        Some(Token::Number(v)) => format!("`{v}`"),
        Some(Token::LParen) => "`(`".into(),
        Some(Token::RParen) => "`)`".into(),
        Some(Token::LBracket) => "`[`".into(),
        Some(Token::RBracket) => "`]`".into(),
        Some(Token::Comma) => "`,`".into(),
        Some(Token::Equals) => "`=`".into(),
        Some(Token::Arrow) => "`->`".into(),
        Some(Token::Dots { inclusive }) => format!("`..{}`", if *inclusive { "=" } else { "" }),
        Some(Token::Op(op)) => format!("`{}`", op_symbol(*op)),
    }
}

fn op_symbol(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Max => "max",
        BinOp::Min => "min",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemv() -> Signature {
        parse_signature("(a, A[m,n], x[n], b, y[m]) -> [m]").unwrap()
    }

    #[test]
    fn signature_lists_params_in_call_order() {
        let s = gemv();
        let names: Vec<&str> = s.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "A", "x", "b", "y"]);
        assert_eq!(s.params[1].shape, Shape::Matrix("m".into(), "n".into()));
        assert_eq!(s.result, Shape::Vector("m".into()));
        assert_eq!(parse_signature("(x[n]) -> scalar").unwrap().result, Shape::Scalar);
    }

    #[test]
    fn formula_binds_sum_index_to_its_dimension() {
        let f = parse_formula("out[i] = a * sum(j, A[i,j] * x[j]) + b * y[i]", &gemv()).unwrap();
        assert_eq!(
            f.indices[0],
            IndexVar {
                name: "i".into(),
                dim: "m".into()
            }
        );
        assert_eq!(
            f.indices[1],
            IndexVar {
                name: "j".into(),
                dim: "n".into()
            }
        );
        assert!(f.body.has_reduction());
        assert!(!f.body.has(ReduceOp::Norm2));
    }

    #[test]
    fn norm2_is_a_reduction_over_its_index() {
        let s = parse_signature("(a, x[n]) -> scalar").unwrap();
        let f = parse_formula("out = a * norm2(i, x[i])", &s).unwrap();
        assert_eq!(f.indices[0].dim, "n");
        let (op, index, term) = f.body.the_reduction().unwrap();
        assert_eq!((op, index), (ReduceOp::Norm2, 0));
        assert_eq!(
            term,
            &Expr::Element {
                param: 1,
                index: vec![0]
            }
        );
        assert!(f.body.has(ReduceOp::Norm2) && !f.body.has(ReduceOp::Sum));
        let nested = parse_formula("out = sum(i, norm2(j, x[j]) * x[i])", &s).unwrap();
        assert_eq!(nested.body.the_reduction(), None);
    }

    #[test]
    fn formula_errors_are_specific() {
        let s = gemv();
        let cases = [
            ("out[i] = A[j,i] * x[i]", "not bound"),
            ("out[i] = sum(j, A[j,i] * x[j])", "ranges over"),
            ("out[i] = z[i]", "not a parameter"),
            ("out[i] = sum(j, A[i] * x[j])", "indexed with 1"),
            ("out = a", "left-hand side has 0"),
            ("out[i] = foo(y[i])", "unknown function"),
            ("out[i] = y[i] +", "expected an operand"),
            ("out[i] = y[i] $", "unexpected character"),
            ("out[i] = 1e999 * y[i]", "literal `1e999` is not a finite number"),
            (
                &format!("out[i] = {}y[i]{}", "(".repeat(10_000), ")".repeat(10_000)),
                "more than 64 levels",
            ),
            (&format!("out[i] = {}y[i]", "-".repeat(10_000)), "more than 64 levels"),
            (
                &format!("out[i] = y[i]{}", " + y[i]".repeat(100_000)),
                "more than 1000 operations",
            ),
        ];
        for (text, want) in cases {
            let err = parse_formula(text, &s).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn a_sum_over_part_of_a_dimension_reads_a_triangle() {
        let s = parse_signature("(A[n,n], x[n]) -> [n]").unwrap();
        let range = |text: &str| parse_formula(text, &s).unwrap().body.reduction_range().unwrap();
        let upper = range("out[i] = sum(j in i..n, A[i,j] * x[j])");
        assert_eq!(upper.start, Some(Offset { var: 0, plus: 0 }));
        assert_eq!(upper.end, None);
        assert_eq!(upper.bounds(5, &[2, 0]), 2..5);
        assert_eq!(
            upper.diagonals(true, 0),
            Diagonals {
                from: Some(0),
                to: None
            }
        );
        let strict = range("out[i] = x[i] + sum(j in 0..i, A[i,j] * x[j])");
        assert_eq!(strict.bounds(5, &[0, 0]), 0..0);
        assert_eq!(
            strict.diagonals(true, 0),
            Diagonals {
                from: None,
                to: Some(-1)
            }
        );
        // Summed down a column: rows 0..=j of column j are an upper triangle.
        let column = range("out[j] = sum(i in 0..=j, A[i,j] * x[i])");
        assert_eq!(
            column.diagonals(false, 0),
            Diagonals {
                from: Some(0),
                to: None
            }
        );
        assert_eq!(
            range("out[i] = sum(j in i+1..n, A[i,j] * x[j])").bounds(5, &[4, 0]),
            5..5
        );
        assert!(range("out[i] = sum(j, A[i,j] * x[j])").is_whole());
        let term = |text: &str| match parse_formula(text, &s).unwrap().body {
            Expr::Reduce { body, .. } => *body,
            other => panic!("{other:?}"),
        };
        assert!(term("out[i] = sum(j, -(2 * A[i,j]) * x[j])").has_matrix_factor());
        assert!(!term("out[i] = sum(j, A[i,j] + x[j])").has_matrix_factor());
        assert!(!term("out[i] = sum(j, x[j] / A[i,j])").has_matrix_factor());
        let d = Diagonals {
            from: Some(1),
            to: None,
        };
        assert_eq!(d.columns(2, 0..8), 3..8);
        assert_eq!(d.columns(9, 0..8), 8..8);
        // An upper triangle and its strict part: the union reads the diagonal, the
        // intersection does not; with a band, the band's other side bounds the intersection.
        let (upper, band) = (
            Diagonals {
                from: Some(0),
                to: None,
            },
            Diagonals {
                from: Some(-1),
                to: Some(2),
            },
        );
        assert_eq!(upper.union(d), upper);
        assert_eq!(upper.intersection(d), d);
        assert_eq!(
            upper.union(band),
            Diagonals {
                from: Some(-1),
                to: None
            }
        );
        assert_eq!(
            upper.intersection(band),
            Diagonals {
                from: Some(0),
                to: Some(2)
            }
        );
        // An upper triangle of 4×4 tiles touches 10 of them; a strictly lower one 6 + the
        // diagonal tiles' lower halves (4) = 10; a tridiagonal band 4 + 3 + 3.
        let upper = Diagonals {
            from: Some(0),
            to: None,
        };
        assert_eq!(upper.tile_share((4, 4), 32), 10.0 / 16.0);
        assert_eq!(
            Diagonals {
                from: None,
                to: Some(-1)
            }
            .tile_share((4, 4), 32),
            10.0 / 16.0
        );
        assert_eq!(
            Diagonals {
                from: Some(-1),
                to: Some(1)
            }
            .tile_share((4, 4), 32),
            10.0 / 16.0
        );
        assert_eq!(Diagonals::default().tile_share((4, 4), 32), 1.0);
    }

    #[test]
    fn range_errors_are_specific() {
        let s = parse_signature("(A[m,n], x[n], y[m]) -> [m]").unwrap();
        let cases = [
            (
                "out[i] = sum(j in i..n, A[i,j] * x[j])",
                "`i` ranges over `m`, `j` over `n`",
            ),
            ("out[i] = sum(j in k..n, A[i,j] * x[j])", "index `k` is not bound here"),
            ("out[i] = sum(j in j..n, A[i,j] * x[j])", "index `j` is not bound here"),
            ("out[i] = sum(j in 0, A[i,j] * x[j])", "needs `..` or `..=`"),
            ("out[i] = sum(j in 1..n, A[i,j] * x[j])", "range bound `1` of `j`"),
            ("out[i] = sum(j in 0..m, A[i,j] * x[j])", "range bound `m` of `j`"),
            ("out[i] = sum(j in , A[i,j] * x[j])", "expected a range after `j in`"),
            (
                "out[i] = sum(j in 0..i * 2, A[i,j] * x[j])",
                "range bound `i * 2` of `j`",
            ),
        ];
        for (text, want) in cases {
            let err = parse_formula(text, &s).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        let v = parse_signature("(A[n,n]) -> [n]").unwrap();
        let err = parse_formula("out[i] = norm2(j in i..n, A[i,j])", &v).unwrap_err();
        assert!(err.contains("no range"), "{err}");
    }

    #[test]
    fn signature_errors_are_specific() {
        assert!(parse_signature("(x[n], x[n]) -> [n]").unwrap_err().contains("twice"));
        assert!(parse_signature("(x[n] -> [n]").unwrap_err().contains("expected"));
        assert!(parse_signature("(x[n]) -> vector")
            .unwrap_err()
            .contains("result shape"));
        assert!(parse_signature("(T[a,b,c]) -> scalar").unwrap_err().contains("1 or 2"));
    }
}
