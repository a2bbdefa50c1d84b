//! Evaluating a [`Stage`] on one segment: writing its elements (maps), summing them
//! (reductions along the segment) or adding them, row after row, into a partial vector
//! (reductions down columns). Stages with a sum-of-products form run through the loops of
//! [`super::loops`]; the rest through the generic evaluator, which works a whole segment at a
//! time, node by node, so even formulas without a fast path stay vectorized.

use fuse_core::formula::{BinOp, Func};
use fuse_core::ValueId;

use super::loops::{self, End, Ends, Lines, Store};
use super::memory::{Local, View};
use super::norm::Norm;
use super::stage::{Access, Factor, Node, Stage, Term, MAX_TERMS};
use super::Real;

/// A run of elements: `len` of them from `start` along the varying index, the fixed index at
/// `fixed` (the row of a BLAS-2 tile).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg {
    /// The fixed index.
    pub fixed: usize,
    /// The first element along the varying index.
    pub start: usize,
    /// Elements.
    pub len: usize,
}

/// The share of the next row block that a walk over a tile pulls into the cache (see
/// [`loops::Ahead`]): the rows from each row of the tile to its counterpart, and which of each
/// step's [`loops::ROWS`] rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NextBlock {
    /// Rows from a row to its counterpart in the next block: negative where the walk goes
    /// backward, and the next block is the one before.
    pub rows: isize,
    /// Of each step's rows, those whose counterparts are pulled in.
    pub share: (usize, usize),
}

impl NextBlock {
    /// Nothing pulled in.
    pub const NONE: NextBlock = NextBlock { rows: 0, share: (0, 0) };

    /// The share in rows `stride` elements apart.
    fn ahead(self, stride: usize) -> loops::Ahead {
        loops::Ahead {
            offset: self.rows * stride as isize,
            share: self.share,
        }
    }
}

/// One operand on a segment: a number for all of it, or a run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Piece<'s, T> {
    /// The same number for every element.
    Scalar(T),
    /// One number per element.
    Run(&'s [T]),
}

/// Where a value is while a kernel runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Loc<'a, T> {
    /// Not readable by this kernel.
    Absent,
    /// A scalar.
    Scalar(T),
    /// An array in memory, read-only here.
    Array(View<'a, T>),
    /// Computed by this kernel: the thread's local of this index.
    Local(usize),
}

/// Where the values a kernel touches are, by value id. A kernel touches a few values, so they
/// are a sorted list: a table of all the program's values would cost the program's length for
/// every kernel.
pub(crate) struct Locs<'a, T> {
    /// (value, where it is), by increasing value.
    pub entries: Vec<(ValueId, Loc<'a, T>)>,
}

impl<'a, T: Copy> Locs<'a, T> {
    /// Where `v` is; absent when the kernel does not touch it.
    pub fn get(&self, v: ValueId) -> Loc<'a, T> {
        match self.entries.binary_search_by_key(&v, |&(id, _)| id) {
            Ok(k) => self.entries[k].1,
            Err(_) => Loc::Absent,
        }
    }

    /// Puts `v` at `loc`; `v` must be one of the values listed.
    pub fn set(&mut self, v: ValueId, loc: Loc<'a, T>) {
        if let Ok(k) = self.entries.binary_search_by_key(&v, |&(id, _)| id) {
            self.entries[k].1 = loc;
        }
    }
}

/// What a stage reads.
pub(crate) struct Scope<'s, 'a, T> {
    /// The values of the running kernel.
    pub locs: &'s Locs<'a, T>,
    /// The thread's values of the running kernel.
    pub locals: &'s [Local<'a, T>],
    /// The finished sum, in the stage after a reduction's sum.
    pub sum: Piece<'s, T>,
}

impl<'s, T: Real> Scope<'s, '_, T> {
    fn scalar(&self, v: ValueId) -> T {
        match self.locs.get(v) {
            Loc::Scalar(s) => s,
            _ => unreachable!("the plan was checked: scalars read are inputs or computed earlier"),
        }
    }

    /// The array `v`.
    fn view(&self, v: ValueId) -> View<'s, T> {
        self.view_at(self.locs.get(v))
    }

    /// The array at `loc`.
    fn view_at(&self, loc: Loc<'s, T>) -> View<'s, T> {
        match loc {
            Loc::Array(view) => view,
            Loc::Local(k) => self.locals[k].view(),
            Loc::Scalar(_) | Loc::Absent => unreachable!("the plan was checked: arrays read are computed earlier"),
        }
    }

    fn element(&self, v: ValueId, access: Access, seg: Seg) -> Piece<'s, T> {
        let view = match self.locs.get(v) {
            Loc::Scalar(s) => return Piece::Scalar(s),
            loc => self.view_at(loc),
        };
        match access {
            Access::Item => Piece::Scalar(view.item(seg.fixed)),
            Access::Run => Piece::Run(view.run(seg.start, seg.len)),
            Access::Row => Piece::Run(view.row(seg.fixed, seg.start, seg.len)),
        }
    }

    /// Whether `term` is a product by a scalar that is zero now: +0, as in BLAS
    /// (`fuse_core::formula`), its other factors not read.
    fn drops(&self, term: &Term) -> bool {
        // A bare scalar (`a` in `a + b`) is no product: it keeps its sign.
        let bare = term.coef == 1.0 && term.factors.len() == 1;
        !bare && (term.factors.iter()).any(|f| matches!(f, Factor::Scalar(v) if self.scalar(*v) == T::ZERO))
    }

    /// [`Scope::drops`] for a product node of the generic evaluator (a chain of `*` and `-`; a
    /// bare scalar is no product).
    fn drops_product(&self, node: &Node) -> bool {
        matches!(node, Node::Neg(_) | Node::Binary(BinOp::Mul, ..)) && self.zero_factor(node)
    }

    /// Whether a factor of the chain of `*` and `-` at `node` is a scalar that is zero now.
    fn zero_factor(&self, node: &Node) -> bool {
        match node {
            Node::Scalar(v) => self.scalar(*v) == T::ZERO,
            Node::Neg(a) => self.zero_factor(a),
            Node::Binary(BinOp::Mul, a, b) => self.zero_factor(a) || self.zero_factor(b),
            _ => false,
        }
    }

    fn factor(&self, f: Factor, seg: Seg) -> Piece<'s, T> {
        match f {
            Factor::Scalar(v) => Piece::Scalar(self.scalar(v)),
            Factor::Array(v, a) => self.element(v, a, seg),
            Factor::Sum => self.sum,
        }
    }
}

/// A stage's terms on one segment: a constant, scaled runs and scaled products of two runs.
struct Resolved<'s, T> {
    konst: T,
    lin: [(T, &'s [T]); MAX_TERMS],
    lins: usize,
    prod: [(T, &'s [T], &'s [T]); MAX_TERMS],
    prods: usize,
}

impl<'s, T: Real> Resolved<'s, T> {
    fn new() -> Self {
        Resolved {
            // The sum of no constants: `-0.0 · x` stays a negative zero.
            konst: T::NEG_ZERO,
            lin: [(T::ZERO, &[]); MAX_TERMS],
            lins: 0,
            prod: [(T::ZERO, &[], &[]); MAX_TERMS],
            prods: 0,
        }
    }

    /// Whether the terms of one more segment fit.
    fn has_room(&self, terms: usize) -> bool {
        self.lins + terms <= MAX_TERMS && self.prods + terms <= MAX_TERMS
    }

    /// `dest += ` everything held, then holds nothing.
    fn flush_into(&mut self, dest: &mut [T]) {
        loops::lin_add(dest, &self.lin[..self.lins], loops::Ahead::NONE);
        for &(c, x, y) in &self.prod[..self.prods] {
            loops::prod_add(dest, c, x, y);
        }
        if self.konst != T::ZERO {
            loops::add_const(dest, self.konst);
        }
        (self.konst, self.lins, self.prods) = (T::NEG_ZERO, 0, 0);
    }

    /// Adds the terms of one segment (the stage guarantees at most two runs per term).
    fn add(&mut self, terms: &[Term], scope: &Scope<'s, '_, T>, seg: Seg) {
        for term in terms {
            if scope.drops(term) {
                // The term is +0: only the sign of a zero result can tell, and adding +0
                // anywhere in the sum tells it alike.
                self.konst += T::ZERO;
                continue;
            }
            let mut coef = T::from_f64(term.coef);
            let mut runs: [&'s [T]; 2] = [&[], &[]];
            let mut count = 0;
            for &f in &term.factors {
                match scope.factor(f, seg) {
                    Piece::Scalar(s) => coef = coef * s,
                    Piece::Run(r) => {
                        runs[count] = r;
                        count += 1;
                    }
                }
            }
            match count {
                0 => self.konst += coef,
                1 => {
                    self.lin[self.lins] = (coef, runs[0]);
                    self.lins += 1;
                }
                _ => {
                    self.prod[self.prods] = (coef, runs[0], runs[1]);
                    self.prods += 1;
                }
            }
        }
    }
}

/// `dest = stage` on `seg`, stored as `store` says where the stage is written in one pass (a
/// sum of scaled runs), else in cache.
pub(crate) fn map<T: Real>(
    stage: &Stage,
    scope: &Scope<T>,
    seg: Seg,
    dest: &mut [T],
    store: Store,
    scratch: &mut [Vec<T>],
) {
    let Some(terms) = &stage.terms else {
        return generic(&stage.node, scope, seg, dest, scratch);
    };
    let mut r = Resolved::new();
    r.add(terms, scope, seg);
    let store = if r.prods == 0 { store } else { Store::Cached };
    loops::lin_write(dest, r.konst, &r.lin[..r.lins], store);
    for &(c, x, y) in &r.prod[..r.prods] {
        loops::prod_add(dest, c, x, y);
    }
}

/// `Σ stage` over `seg`.
pub(crate) fn sum<T: Real>(stage: &Stage, scope: &Scope<T>, seg: Seg, scratch: &mut [Vec<T>]) -> T {
    let Some(terms) = &stage.terms else {
        let (buffer, rest) = scratch
            .split_first_mut()
            .expect("one scratch buffer beyond the stage's depth");
        let buffer = &mut buffer[..seg.len];
        generic(&stage.node, scope, seg, buffer, rest);
        return loops::sum(buffer);
    };
    let mut r = Resolved::new();
    r.add(terms, scope, seg);
    let mut total = r.konst * T::from_f64(seg.len as f64);
    for &(a, x) in &r.lin[..r.lins] {
        total += a * loops::sum(x);
    }
    for &(c, x, y) in &r.prod[..r.prods] {
        total += c * loops::dot(x, y);
    }
    total
}

/// `sums[k] += Σ stage` over the segment `(rows.start + k, start .. start + len)` of each row:
/// [`loops::ROWS`] rows a step where the stage is one product of a matrix row and a vector run (`A·x`),
/// so that each load of the vector serves them all, and pulling in `next` as they go.
pub(crate) fn row_sums<T: Real>(
    stage: &Stage,
    scope: &Scope<T>,
    rows: std::ops::Range<usize>,
    (start, len): (usize, usize),
    (sums, next): (&mut [T], NextBlock),
    scratch: &mut [Vec<T>],
) {
    let seg = |fixed| Seg { fixed, start, len };
    let Some(matrix) = stage.row_product(1) else {
        for (s, i) in sums.iter_mut().zip(rows) {
            *s += sum(stage, scope, seg(i), scratch);
        }
        return;
    };
    if scope.drops(only_term(stage)) {
        return;
    }
    let product = RowProduct::new(only_term(stage), matrix, scope, (start, len));
    let mut dots = [T::ZERO; CHUNK];
    for (first, chunk) in (rows.start..).step_by(CHUNK).zip(sums[..rows.len()].chunks_mut(CHUNK)) {
        let dots = &mut dots[..chunk.len()];
        let lines = product.lines(first);
        loops::dot_lines(lines, product.x, dots, next.ahead(lines.stride));
        product.add_scaled(first, chunk, dots);
    }
}

/// Rows a call of the row loops takes (one dispatch to the instruction set): a multiple of
/// [`loops::ROWS`], so that the rows go in the same groups whatever the tile.
const CHUNK: usize = 16 * loops::ROWS;

/// A one-product stage `c · A[i, ·] · x[·]` resolved once for the rows of a tile: the matrix,
/// the vector run (the same for every row), and `c` as a number times the vectors indexed by
/// the row (`y[i]`), looked up once.
struct RowProduct<'s, T> {
    matrix: View<'s, T>,
    /// The vector run the rows are multiplied by (empty if none).
    x: &'s [T],
    /// The part of `c` that is the same for every row.
    constant: T,
    /// The vectors whose element of the row multiplies `c`.
    by_row: Vec<View<'s, T>>,
    start: usize,
    len: usize,
}

impl<'s, T: Real> RowProduct<'s, T> {
    fn new(term: &Term, matrix: ValueId, scope: &Scope<'s, '_, T>, (start, len): (usize, usize)) -> Self {
        let mut product = RowProduct {
            matrix: scope.view(matrix),
            x: &[],
            constant: T::from_f64(term.coef),
            by_row: Vec::new(),
            start,
            len,
        };
        for &f in &term.factors {
            match f {
                Factor::Array(_, Access::Row) => {}
                Factor::Array(v, Access::Item) => product.by_row.push(scope.view(v)),
                Factor::Array(v, Access::Run) => product.x = scope.view(v).run(start, len),
                Factor::Scalar(_) | Factor::Sum => {
                    if let Piece::Scalar(c) = scope.factor(f, Seg { fixed: 0, start, len }) {
                        product.constant = product.constant * c;
                    }
                }
            }
        }
        product
    }

    /// The runs of the rows from `i` on.
    fn lines(&self, i: usize) -> Lines<'s, T> {
        self.matrix.lines(i, self.start, self.len)
    }

    /// The ends of the tile whose first row is `r0` (see [`loops::Ends`]).
    fn ends(&self, r0: usize, ends: &'s [End]) -> Ends<'s, T> {
        let lines = self.lines(r0);
        Ends {
            data: lines.data,
            stride: lines.stride,
            ends,
        }
    }

    /// `c` at row `i`.
    fn coef(&self, i: usize) -> T {
        self.by_row.iter().fold(self.constant, |c, v| c * v.item(i))
    }

    /// `c` at each row from `first` on, one per element of `coefs`.
    fn coefs(&self, first: usize, coefs: &mut [T]) {
        for (i, c) in (first..).zip(coefs.iter_mut()) {
            *c = self.coef(i);
        }
    }

    /// `sums[k] += c·dots[k]`, `c` at row `first + k`: the rows' products added to their sums.
    fn add_scaled(&self, first: usize, sums: &mut [T], dots: &[T]) {
        for (i, (s, &d)) in (first..).zip(sums.iter_mut().zip(dots)) {
            *s += self.coef(i) * d;
        }
    }
}

/// The norm's sums of the terms `stage` over `seg`: straight from the run where the term is
/// one (`nrm2(x)`), else computed into a scratch buffer (in cache: a chunk at a time) first.
pub(crate) fn norm<T: Real>(stage: &Stage, scope: &Scope<T>, seg: Seg, scratch: &mut [Vec<T>]) -> Norm<T> {
    if let Some(terms) = &stage.terms {
        let mut r = Resolved::new();
        r.add(terms, scope, seg);
        if let ([(a, x)], 0) = (&r.lin[..r.lins], r.prods) {
            if r.konst == T::ZERO && *a == T::from_f64(1.0) {
                return loops::norm(x);
            }
        }
    }
    let (buffer, rest) = scratch
        .split_first_mut()
        .expect("one scratch buffer beyond the stage's depth");
    let buffer = &mut buffer[..seg.len];
    map(stage, scope, seg, buffer, Store::Cached, rest);
    loops::norm(buffer)
}

/// `dest += Σ_rows stage` on the segments `(row, start .. start + dest.len())`, several rows
/// per pass over `dest` where the stage is linear in its runs (`Aᵀ·x`: `dest += x[i]·A[i, ·]`),
/// pulling in `next` as they go where the stage is one product of a matrix row.
pub(crate) fn accumulate<T: Real>(
    stage: &Stage,
    scope: &Scope<T>,
    rows: std::ops::Range<usize>,
    start: usize,
    (dest, next): (&mut [T], NextBlock),
    scratch: &mut [Vec<T>],
) {
    let len = dest.len();
    let seg = |row| Seg { fixed: row, start, len };
    let Some(terms) = &stage.terms else {
        let (buffer, rest) = scratch
            .split_first_mut()
            .expect("one scratch buffer beyond the stage's depth");
        let buffer = &mut buffer[..len];
        for row in rows {
            generic(&stage.node, scope, seg(row), buffer, rest);
            loops::add(dest, buffer);
        }
        return;
    };
    if let Some(matrix) = stage.row_product(0) {
        // `c·A[i, ·]` (`Aᵀ·y`): the matrix and each row's coefficient looked up once for the
        // tile, not factor by factor for every row (a fifth of a 1024² `Aᵀ·y` went to that).
        if scope.drops(only_term(stage)) {
            return;
        }
        let product = RowProduct::new(only_term(stage), matrix, scope, (start, len));
        let mut coefs = [T::ZERO; CHUNK];
        for first in rows.clone().step_by(CHUNK) {
            let coefs = &mut coefs[..(rows.end - first).min(CHUNK)];
            product.coefs(first, coefs);
            let lines = product.lines(first);
            loops::add_lines(lines, coefs, dest, next.ahead(lines.stride));
        }
        return;
    }
    // Rows are gathered until the term buffers are full, so `dest` is passed over once per
    // [`loops::ROWS_PER_PASS`] rows.
    let mut r = Resolved::new();
    for row in rows {
        if !r.has_room(terms.len()) {
            r.flush_into(dest);
        }
        r.add(terms, scope, seg(row));
    }
    r.flush_into(dest);
}

/// A row sum and a column sum through the rows of `matrix` (a [`SharedRows`] pair), on the
/// tile `rows` × `start .. start + dest.len()`, [`loops::ROWS`] rows per loop: each row's sum is added to
/// `row_sums` (indexed from `rows.start`), the column sums to `dest`.
///
/// [`SharedRows`]: super::prepare::SharedRows
pub(crate) fn shared_rows<T: Real>(
    (row_body, column_body): (&Stage, &Stage),
    matrix: ValueId,
    scope: &Scope<T>,
    rows: std::ops::Range<usize>,
    start: usize,
    row_sums: &mut [T],
    dest: &mut [T],
) {
    let span = (start, dest.len());
    let row_sum = RowProduct::new(only_term(row_body), matrix, scope, span);
    // The column sums' product, its run being the matrix row itself.
    let column = RowProduct::new(only_term(column_body), matrix, scope, span);
    // A product by a scalar that is zero now is 0: the other sum alone.
    let (rows_drop, columns_drop) = (scope.drops(only_term(row_body)), scope.drops(only_term(column_body)));
    let (mut dots, mut coefs) = ([T::ZERO; CHUNK], [T::ZERO; CHUNK]);
    for (first, chunk) in (rows.start..)
        .step_by(CHUNK)
        .zip(row_sums[..rows.len()].chunks_mut(CHUNK))
    {
        let (dots, coefs) = (&mut dots[..chunk.len()], &mut coefs[..chunk.len()]);
        column.coefs(first, coefs);
        match (rows_drop, columns_drop) {
            (false, false) => loops::dot_add_lines(row_sum.lines(first), row_sum.x, coefs, dest, dots),
            (false, true) => loops::dot_lines(row_sum.lines(first), row_sum.x, dots, loops::Ahead::NONE),
            (true, false) => loops::add_lines(column.lines(first), coefs, dest, loops::Ahead::NONE),
            (true, true) => return,
        }
        if !rows_drop {
            row_sum.add_scaled(first, chunk, dots);
        }
    }
}

/// The tile a triangle's ragged ends lie in: its first row and its run of columns
/// `(start, len)`, from which the ends count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EndsTile {
    pub r0: usize,
    pub start: usize,
    pub len: usize,
}

impl EndsTile {
    fn seg(&self, end: &End) -> Seg {
        Seg {
            fixed: self.r0 + end.row,
            start: self.start + end.at,
            len: end.len,
        }
    }
}

/// [`row_sums`] on the ragged `ends` of `tile`, `sums` indexed from its first row: one
/// dispatch for them all where the stage is one product of a matrix row.
pub(crate) fn row_sums_ends<T: Real>(
    stage: &Stage,
    scope: &Scope<T>,
    (tile, ends): (EndsTile, &[End]),
    sums: &mut [T],
    scratch: &mut [Vec<T>],
) {
    if ends.is_empty() {
        return;
    }
    let Some(matrix) = stage.row_product(1) else {
        for end in ends {
            sums[end.row] += sum(stage, scope, tile.seg(end), scratch);
        }
        return;
    };
    if scope.drops(only_term(stage)) {
        return;
    }
    let product = RowProduct::new(only_term(stage), matrix, scope, (tile.start, tile.len));
    let mut dots = [T::ZERO; CHUNK];
    for chunk in ends.chunks(CHUNK) {
        let dots = &mut dots[..chunk.len()];
        loops::dot_ends(product.ends(tile.r0, chunk), product.x, dots);
        for (end, &dot) in chunk.iter().zip(dots.iter()) {
            sums[end.row] += product.coef(tile.r0 + end.row) * dot;
        }
    }
}

/// [`accumulate`] on the ragged `ends` of `tile`, `dest` its run: one dispatch for them all
/// where the stage is one product of a matrix row.
pub(crate) fn accumulate_ends<T: Real>(
    stage: &Stage,
    scope: &Scope<T>,
    (tile, ends): (EndsTile, &[End]),
    dest: &mut [T],
    scratch: &mut [Vec<T>],
) {
    if ends.is_empty() {
        return;
    }
    let Some(matrix) = stage.row_product(0) else {
        for end in ends {
            let (seg, dest) = (tile.seg(end), &mut dest[end.at..][..end.len]);
            accumulate(
                stage,
                scope,
                seg.fixed..seg.fixed + 1,
                seg.start,
                (dest, NextBlock::NONE),
                scratch,
            );
        }
        return;
    };
    if scope.drops(only_term(stage)) {
        return;
    }
    let product = RowProduct::new(only_term(stage), matrix, scope, (tile.start, tile.len));
    let mut coefs = [T::ZERO; CHUNK];
    for chunk in ends.chunks(CHUNK) {
        let coefs = &mut coefs[..chunk.len()];
        for (end, c) in chunk.iter().zip(coefs.iter_mut()) {
            *c = product.coef(tile.r0 + end.row);
        }
        loops::add_ends(product.ends(tile.r0, chunk), coefs, dest);
    }
}

/// [`shared_rows`] on the ragged `ends` of `tile`: `row_sums` indexed from its first row,
/// `dest` its run.
pub(crate) fn shared_rows_ends<T: Real>(
    (row_body, column_body): (&Stage, &Stage),
    matrix: ValueId,
    scope: &Scope<T>,
    (tile, ends): (EndsTile, &[End]),
    row_sums: &mut [T],
    dest: &mut [T],
) {
    if ends.is_empty() {
        return;
    }
    let span = (tile.start, tile.len);
    let row_sum = RowProduct::new(only_term(row_body), matrix, scope, span);
    let column = RowProduct::new(only_term(column_body), matrix, scope, span);
    let (rows_drop, columns_drop) = (scope.drops(only_term(row_body)), scope.drops(only_term(column_body)));
    let (mut dots, mut coefs) = ([T::ZERO; CHUNK], [T::ZERO; CHUNK]);
    for chunk in ends.chunks(CHUNK) {
        let (dots, coefs) = (&mut dots[..chunk.len()], &mut coefs[..chunk.len()]);
        for (end, c) in chunk.iter().zip(coefs.iter_mut()) {
            *c = column.coef(tile.r0 + end.row);
        }
        let (row_ends, column_ends) = (row_sum.ends(tile.r0, chunk), column.ends(tile.r0, chunk));
        match (rows_drop, columns_drop) {
            (false, false) => loops::dot_add_ends(row_ends, row_sum.x, coefs, dest, dots),
            (false, true) => loops::dot_ends(row_ends, row_sum.x, dots),
            (true, false) => loops::add_ends(column_ends, coefs, dest),
            (true, true) => return,
        }
        if !rows_drop {
            for (end, &dot) in chunk.iter().zip(dots.iter()) {
                row_sums[end.row] += row_sum.coef(tile.r0 + end.row) * dot;
            }
        }
    }
}

fn only_term(stage: &Stage) -> &Term {
    match stage.terms.as_deref() {
        Some([term]) => term,
        _ => unreachable!("a pair is made of one-product stages"),
    }
}

/// `dest = node` on `seg`, a node at a time; `scratch` holds a buffer per level of right
/// operands.
pub(crate) fn generic<T: Real>(node: &Node, scope: &Scope<T>, seg: Seg, dest: &mut [T], scratch: &mut [Vec<T>]) {
    if scope.drops_product(node) {
        return dest.fill(T::ZERO);
    }
    if let Some(v) = uniform(node, scope, seg) {
        return dest.fill(v);
    }
    let piece = match node {
        Node::Array(v, a) => Some(scope.element(*v, *a, seg)),
        Node::Sum => Some(scope.sum),
        _ => None,
    };
    match (node, piece) {
        (_, Some(Piece::Scalar(v))) => dest.fill(v),
        (_, Some(Piece::Run(r))) => dest.copy_from_slice(r),
        (Node::Neg(a), _) => {
            generic(a, scope, seg, dest, scratch);
            dest.iter_mut().for_each(|d| *d = -*d);
        }
        (Node::Call(f, a), _) => {
            generic(a, scope, seg, dest, scratch);
            match f {
                Func::Abs => dest.iter_mut().for_each(|d| *d = d.abs()),
                Func::Sqrt => dest.iter_mut().for_each(|d| *d = d.sqrt()),
            }
        }
        (Node::Binary(op, a, b), _) => {
            generic(a, scope, seg, dest, scratch);
            match uniform(b, scope, seg) {
                Some(v) => dest.iter_mut().for_each(|d| *d = apply(*op, *d, v)),
                None => {
                    let (tmp, rest) = scratch.split_first_mut().expect("the stage's depth counts its buffers");
                    let tmp = &mut tmp[..seg.len];
                    generic(b, scope, seg, tmp, rest);
                    dest.iter_mut()
                        .zip(tmp.iter())
                        .for_each(|(d, &t)| *d = apply(*op, *d, t));
                }
            }
        }
        (Node::Number(_) | Node::Scalar(_) | Node::Array(..) | Node::Sum, None) => {
            unreachable!("leaves are uniform or pieces")
        }
    }
}

/// The value of `node` when it is the same for the whole segment.
fn uniform<T: Real>(node: &Node, scope: &Scope<T>, seg: Seg) -> Option<T> {
    if scope.drops_product(node) {
        return Some(T::ZERO);
    }
    match node {
        Node::Number(v) => Some(T::from_f64(*v)),
        Node::Scalar(v) => Some(scope.scalar(*v)),
        Node::Array(v, a) => match scope.element(*v, *a, seg) {
            Piece::Scalar(v) => Some(v),
            Piece::Run(_) => None,
        },
        Node::Sum => match scope.sum {
            Piece::Scalar(v) => Some(v),
            Piece::Run(_) => None,
        },
        Node::Neg(a) => uniform(a, scope, seg).map(|v| -v),
        Node::Call(Func::Abs, a) => uniform(a, scope, seg).map(T::abs),
        Node::Call(Func::Sqrt, a) => uniform(a, scope, seg).map(T::sqrt),
        Node::Binary(op, a, b) => Some(apply(*op, uniform(a, scope, seg)?, uniform(b, scope, seg)?)),
    }
}

fn apply<T: Real>(op: BinOp, a: T, b: T) -> T {
    op.apply(a, b)
}
