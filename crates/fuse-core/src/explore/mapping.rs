//! How a call maps thread blocks to data (paper §3.3, §4.3.2).
//!
//! A BLAS-1 call works on 32-element sub-vectors: one *instance* per sub-vector, a 1D grid of
//! instances. A nested (BLAS-2) call works on 32×32 tiles of its matrix with 32-element
//! sub-vectors along the tile's rows or columns: one instance per tile, a 2D grid of tiles.
//! Calls can share on-chip data only if they agree on this mapping, which is why the mapping is
//! derived here from each call's formula rather than from its name: `sgemv` and `sgemtv` over
//! the same A index the same tiles, one reducing along rows, the other along columns.

use serde::{Deserialize, Serialize};

use crate::formula::{Diagonals, Expr};
use crate::program::{Arg, Call, Program, ValueId};
use crate::shape::{Shape, Sizes};
use crate::Precision;

/// Elements along one side of an element: a sub-vector has 32, a tile 32×32.
pub const ELEMENT_SIDE: u64 = 32;

/// BLAS-2 kernels run over strips of whole matrix rows: a block of warps covers strips `w` tiles
/// (32·w columns) across, each lane holding `w` elements of a row as `w/V` vector accesses of
/// `V` elements (library/cuda/routines.cuh). A *whole-row* block instead spreads each row over
/// all its threads and takes its rows one at a time: a row sum is then complete inside the
/// block, while the row is still in registers, and later calls of the kernel can read it (ATAX
/// reads A once). The explorer counts work in 32×32 tiles; these constants and [`StripLayout`]
/// say how the generator lays a block over them.
/// Rows a block owns when it walks along the columns.
pub const ROWS_PER_STRIP_BLOCK: u32 = 32;

/// Bytes of static shared memory a kernel may use (the column-sum exchange).
pub const STATIC_SHARED_LIMIT: u64 = 48 * 1024;

/// Vector accesses per thread per row of a whole-row block at most: the row lives in registers.
pub const MAX_ROW_GROUPS: u32 = 8;

/// Threads per block of a whole-row block at most.
pub const MAX_ROW_THREADS: u32 = 1024;

/// The layout of one kernel's strips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripLayout {
    /// Warps per block.
    pub warps: u32,
    /// Elements per vector access (4 for f32, 2 for f64 where `w` allows, else 1).
    pub vector: u32,
    /// Vector accesses per thread per row.
    pub groups: u32,
    /// Threads that share one row: 32 (a warp) in strips, the whole block for whole rows.
    pub row_threads: u32,
}

impl StripLayout {
    /// The layout of `threads` threads over strips `width` tiles across.
    pub fn new(threads: u32, width: u32, precision: Precision) -> Self {
        let vector = Self::vector(width, precision);
        StripLayout {
            warps: (threads / 32).max(1),
            vector,
            groups: width / vector,
            row_threads: 32,
        }
    }

    /// The layout of a whole-row block of `threads` threads over rows `width` tiles across.
    pub fn whole_rows(threads: u32, width: u32, precision: Precision) -> Self {
        let vector = Self::vector(width, precision);
        let row_threads = threads.max(32);
        StripLayout {
            warps: row_threads / 32,
            vector,
            groups: (32 * width / (row_threads * vector)).max(1),
            row_threads,
        }
    }

    /// The whole-row block of `threads` threads for rows of `columns` columns: the width in
    /// tiles, if the row fits its registers.
    pub fn whole_row_width(threads: u32, columns: u64, precision: Precision) -> Option<u32> {
        let vector = 16 / precision.bytes();
        let groups = columns.div_ceil(threads as u64 * vector).max(1);
        (groups <= MAX_ROW_GROUPS as u64 && threads <= MAX_ROW_THREADS)
            .then(|| (groups * threads as u64 * vector / 32) as u32)
    }

    fn vector(width: u32, precision: Precision) -> u32 {
        let widest = 16 / precision.bytes() as u32;
        [widest, 2, 1]
            .into_iter()
            .find(|v| width.is_multiple_of(*v))
            .unwrap_or(1)
    }

    /// Rows one trip of a kernel's hot loop loads at once, walking along `walk`. Down the rows,
    /// a lane's part of a row is `groups` 16-byte loads: narrow strips take several rows a trip,
    /// so that about 8 are in flight as in the probes; wider ones one row at a time, as two
    /// would not fit the registers; whole rows two, the next loading while this one is summed
    /// across the block. Along the columns, a trip is one strip of all the block's rows.
    pub fn rows_per_trip(&self, walk: Axis) -> u32 {
        match (walk, self.row_threads > 32) {
            (Axis::Rows, true) => 2,
            (Axis::Rows, false) => (8 / self.groups.max(1)).max(1),
            (Axis::Columns, _) => ROWS_PER_STRIP_BLOCK.div_ceil(self.warps),
        }
    }

    /// Rows whose loads a thread keeps in flight at once walking along `walk`: a trip's, or for
    /// whole rows one — the next, loading while this one is summed.
    pub fn rows_in_flight(&self, walk: Axis) -> u32 {
        match self.row_threads > 32 {
            true => 1,
            false => self.rows_per_trip(walk),
        }
    }

    /// Columns per strip (per row, for whole rows).
    pub fn columns(&self) -> u32 {
        self.row_threads * self.vector * self.groups
    }

    /// Numbers of a row each thread holds.
    pub fn per_thread(&self) -> u32 {
        self.vector * self.groups
    }

    /// Columns one column-sum atomic adds: four floats in one 16-byte atomic (sm_90).
    pub fn column_atomic_width(&self, precision: Precision) -> u32 {
        match (precision, self.vector) {
            (Precision::F32, 4) => 4,
            _ => 1,
        }
    }

    /// Shared memory: strips exchange column sums across warps, one number per column per
    /// warp; whole rows exchange each row sum's warp totals.
    pub fn shared_bytes(&self, column_sums: bool, row_sums: bool, precision: Precision) -> u64 {
        let numbers = match self.row_threads {
            32 if column_sums => self.warps as u64 * self.columns() as u64,
            32 => 0,
            _ if row_sums => 32,
            _ => 0,
        };
        numbers * precision.bytes()
    }
}

/// A dimension of the 2D tile grid of a nested call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Along the matrix rows: the tile-row index varies (a walk down a column of tiles).
    Rows,
    /// Along the matrix columns: the tile-column index varies (a walk along a row of tiles).
    Columns,
}

impl Axis {
    /// The other axis.
    pub fn other(self) -> Axis {
        match self {
            Axis::Rows => Axis::Columns,
            Axis::Columns => Axis::Rows,
        }
    }

    /// Words for messages: how a block's serial iterations advance.
    pub fn walk(self) -> &'static str {
        match self {
            Axis::Rows => "down the strip (32 rows each)",
            Axis::Columns => "along 32 rows (a strip each)",
        }
    }
}

/// The grid a call runs on, in the script's size symbols.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Space {
    /// A 1D grid of 32-element sub-vectors of vectors of this length.
    Vector {
        /// Length symbol.
        length: String,
    },
    /// A 2D grid of 32×32 tiles of a `rows × columns` matrix.
    Matrix {
        /// Row-count symbol.
        rows: String,
        /// Column-count symbol.
        columns: String,
    },
}

impl Space {
    /// Instances along (rows, columns) under `sizes`: `(1, n/32)` for vectors.
    pub fn tiles(&self, sizes: &Sizes) -> (u64, u64) {
        let count = |s: &str| (sizes.get(s).unwrap_or(1) as u64).div_ceil(ELEMENT_SIDE).max(1);
        match self {
            Space::Vector { length } => (1, count(length)),
            Space::Matrix { rows, columns } => (count(rows), count(columns)),
        }
    }
}

impl std::fmt::Display for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Space::Vector { length } => write!(f, "sub-vectors of [{length}]"),
            Space::Matrix { rows, columns } => write!(f, "tiles of [{rows}, {columns}]"),
        }
    }
}

/// What one instance of a call holds of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A scalar: a kernel argument or one number in device memory.
    Scalar,
    /// A 32-element sub-vector of a BLAS-1 vector.
    SubVector,
    /// A 32-element sub-vector of a vector indexed by the tile row.
    RowVector,
    /// A 32-element sub-vector of a vector indexed by the tile column.
    ColumnVector,
    /// A 32×32 tile of a matrix.
    Tile,
}

impl Role {
    /// Numbers per element.
    pub fn numbers(self) -> u64 {
        match self {
            Role::Scalar => 1,
            Role::SubVector | Role::RowVector | Role::ColumnVector => ELEMENT_SIDE,
            Role::Tile => ELEMENT_SIDE * ELEMENT_SIDE,
        }
    }

    /// The axis along which this element changes from tile to tile, for vectors of nested calls.
    pub fn axis(self) -> Option<Axis> {
        match self {
            Role::RowVector => Some(Axis::Rows),
            Role::ColumnVector => Some(Axis::Columns),
            _ => None,
        }
    }

    /// Whether the element stays the same while a block walks along `walk` (an invariant load).
    pub fn invariant_along(self, walk: Option<Axis>) -> bool {
        matches!((self.axis(), walk), (Some(a), Some(w)) if a != w)
    }
}

/// The block-to-data mapping of one call.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallMapping {
    /// The grid it runs on.
    pub space: Space,
    /// The role of each argument, in signature order (literals are scalars).
    pub args: Vec<Role>,
    /// The role of its result.
    pub result: Role,
    /// For a nested reduce, the axis it sums along.
    pub reduced: Option<Axis>,
    /// Arithmetic operations per instance.
    pub flops_per_instance: u64,
}

/// Derives the mapping of `call` from its form's signature and formula and the shapes of its
/// arguments in `program`.
pub fn call_mapping(program: &Program, call: &Call) -> CallMapping {
    let shape_of = |k: usize| match call.args.get(k) {
        Some(Arg::Value(v)) => program.values[*v].shape.clone(),
        _ => Shape::Scalar,
    };
    let result_shape = program.values[call.result].shape.clone();
    let shapes: Vec<Shape> = (0..call.args.len()).map(shape_of).collect();
    let flops = call.form.formula.body.flops().max(1) as u64;
    if call.kind.nesting_level() == 1 {
        blas1_mapping(&shapes, &result_shape, flops)
    } else {
        nested_mapping(call, &shapes, &result_shape, flops)
    }
}

fn blas1_mapping(shapes: &[Shape], result: &Shape, flops: u64) -> CallMapping {
    let role = |s: &Shape| match s {
        Shape::Scalar => Role::Scalar,
        _ => Role::SubVector,
    };
    let length = shapes
        .iter()
        .chain(std::iter::once(result))
        .find_map(|s| match s {
            Shape::Vector(n) => Some(n.clone()),
            _ => None,
        })
        .unwrap_or_default();
    CallMapping {
        space: Space::Vector { length },
        args: shapes.iter().map(role).collect(),
        result: role(result),
        reduced: None,
        flops_per_instance: flops * ELEMENT_SIDE,
    }
}

fn nested_mapping(call: &Call, shapes: &[Shape], result: &Shape, flops: u64) -> CallMapping {
    let formula = &call.form.formula;
    let axes = index_axes(call);
    let axis_of_param = |k: usize| first_index(&formula.body, k).and_then(|ix| axes[ix[0]]);
    let vector_role = |axis: Option<Axis>| match axis {
        Some(Axis::Columns) => Role::ColumnVector,
        _ => Role::RowVector,
    };
    let args = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| match s {
            Shape::Scalar => Role::Scalar,
            Shape::Vector(_) => vector_role(axis_of_param(k)),
            Shape::Matrix(..) => Role::Tile,
        })
        .collect();
    let result_role = match result {
        Shape::Matrix(..) => Role::Tile,
        Shape::Vector(_) => vector_role(formula.result_indices.first().and_then(|&i| axes[i])),
        Shape::Scalar => Role::Scalar,
    };
    let space = shapes
        .iter()
        .chain(std::iter::once(result))
        .find_map(|s| match s {
            Shape::Matrix(r, c) => Some(Space::Matrix {
                rows: r.clone(),
                columns: c.clone(),
            }),
            _ => None,
        })
        .unwrap_or(Space::Vector { length: String::new() });
    CallMapping {
        space,
        args,
        result: result_role,
        reduced: first_sum(&formula.body).and_then(|i| axes[i]),
        flops_per_instance: flops * ELEMENT_SIDE * ELEMENT_SIDE,
    }
}

/// The grid axis of each index variable: the matrix is indexed `[row, column]`.
pub fn index_axes(call: &Call) -> Vec<Option<Axis>> {
    let formula = &call.form.formula;
    let mut axes = vec![None; formula.indices.len()];
    let matrix = call
        .form
        .signature
        .params
        .iter()
        .position(|p| matches!(p.shape, Shape::Matrix(..)));
    let pair = match matrix.and_then(|p| first_index(&formula.body, p)) {
        Some(ix) => ix.to_vec(),
        None => formula.result_indices.clone(),
    };
    if let [r, c] = pair[..] {
        axes[r] = Some(Axis::Rows);
        axes[c] = Some(Axis::Columns);
    }
    axes
}

/// The diagonals of its matrix (indexed `[row, column]`) a nested call reads: a triangle for a
/// sum over part of a row or column (`sum(j in i..n, A[i,j] * x[j])`), else all.
pub fn call_diagonals(call: &Call) -> Diagonals {
    let formula = &call.form.formula;
    let axes = index_axes(call);
    let (Some(range), Some(summed)) = (formula.body.reduction_range(), first_sum(&formula.body)) else {
        return Diagonals::default();
    };
    let other = |a: Axis| axes.iter().position(|&x| x == Some(a));
    match axes[summed] {
        Some(Axis::Columns) => other(Axis::Rows).map(|r| range.diagonals(true, r)),
        Some(Axis::Rows) => other(Axis::Columns).map(|c| range.diagonals(false, c)),
        None => None,
    }
    .unwrap_or_default()
}

/// The index list of the first element of parameter `param` in `expr`.
/// Whether every element `call` reads of `value` is indexed along `axis` of its matrix only
/// (`t[i]` in `sum(i, A[i,j] * t[i])`, not also `t[j]` as a unit triangle's `t[i] +
/// sum(j in 0..i, A[i,j] * t[j])` reads it).
pub fn reads_only_along(call: &Call, value: ValueId, axis: Axis) -> bool {
    let axes = index_axes(call);
    let along = |index: &[usize]| index.iter().all(|&ix| axes[ix] == Some(axis));
    (call.args.iter().enumerate())
        .filter(|(_, a)| **a == Arg::Value(value))
        .all(|(k, _)| indexed_only(&call.form.formula.body, k, &along))
}

/// Whether every element of parameter `param` in `expr` has an index `along` accepts.
fn indexed_only(expr: &Expr, param: usize, along: &impl Fn(&[usize]) -> bool) -> bool {
    match expr {
        Expr::Element { param: p, index } => *p != param || along(index),
        Expr::Number(_) | Expr::Scalar(_) => true,
        Expr::Neg(e) | Expr::Call(_, e) | Expr::Reduce { body: e, .. } => indexed_only(e, param, along),
        Expr::Binary(_, a, b) => indexed_only(a, param, along) && indexed_only(b, param, along),
    }
}

fn first_index(expr: &Expr, param: usize) -> Option<&[usize]> {
    match expr {
        Expr::Element { param: p, index } if *p == param => Some(index),
        Expr::Number(_) | Expr::Scalar(_) | Expr::Element { .. } => None,
        Expr::Neg(e) | Expr::Call(_, e) => first_index(e, param),
        Expr::Reduce { body, .. } => first_index(body, param),
        Expr::Binary(_, a, b) => first_index(a, param).or_else(|| first_index(b, param)),
    }
}

/// The index variable of the first `sum` in `expr`.
fn first_sum(expr: &Expr) -> Option<usize> {
    match expr {
        Expr::Reduce { index, .. } => Some(*index),
        Expr::Number(_) | Expr::Scalar(_) | Expr::Element { .. } => None,
        Expr::Neg(e) | Expr::Call(_, e) => first_sum(e),
        Expr::Binary(_, a, b) => first_sum(a).or_else(|| first_sum(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{script, Library};

    fn mappings(calls: &str) -> Vec<CallMapping> {
        let text = format!(
            "sizes: {{m: 64, n: 96}}\ninputs: {{A: [m, n], x: [n], y: [m], v: [n], a: scalar}}\noutputs: [out]\ncalls:\n{calls}"
        );
        let program = script::parse("t.yaml", &text, &Library::builtin().unwrap()).unwrap();
        program.calls.iter().map(|c| call_mapping(&program, c)).collect()
    }

    #[test]
    fn gemv_and_gemtv_share_the_tile_grid_and_reduce_along_different_axes() {
        let m = mappings("  - q = sgemv(A, x)\n  - out = sgemtv(A, y)\n");
        assert_eq!(m[0].space, m[1].space);
        assert_eq!(m[0].args, [Role::Tile, Role::ColumnVector]);
        assert_eq!(m[0].result, Role::RowVector);
        assert_eq!(m[0].reduced, Some(Axis::Columns));
        assert_eq!(m[1].args, [Role::Tile, Role::RowVector]);
        assert_eq!(m[1].result, Role::ColumnVector);
        assert_eq!(m[1].reduced, Some(Axis::Rows));
    }

    #[test]
    fn ger_maps_its_vectors_to_rows_and_columns() {
        let m = mappings("  - out = sger(a, y, x, A)\n");
        assert_eq!(
            m[0].args,
            [Role::Scalar, Role::RowVector, Role::ColumnVector, Role::Tile]
        );
        assert_eq!(m[0].result, Role::Tile);
        assert_eq!(m[0].reduced, None);
        assert_eq!(
            m[0].space.tiles(&Sizes::new([("m".into(), 64), ("n".into(), 96)])),
            (2, 3)
        );
    }

    #[test]
    fn blas1_calls_run_on_sub_vectors() {
        let m = mappings("  - out = sdot(x, v)\n");
        assert_eq!(m[0].space, Space::Vector { length: "n".into() });
        assert_eq!(m[0].args, [Role::SubVector, Role::SubVector]);
        assert_eq!(m[0].result, Role::Scalar);
    }

    #[test]
    fn invariance_follows_the_walk() {
        assert!(Role::ColumnVector.invariant_along(Some(Axis::Rows)));
        assert!(!Role::RowVector.invariant_along(Some(Axis::Rows)));
        assert!(!Role::SubVector.invariant_along(None));
    }
}
