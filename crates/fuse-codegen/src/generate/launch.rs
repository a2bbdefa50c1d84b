//! What the generator gives back: the module's source and the steps that run it — buffers to
//! zero, kernels to launch, each with its grid as a function of the sizes.

use fuse_core::{Precision, Sizes, ValueId};
use serde::Serialize;

use super::group::Walk;

/// How a launch's grid follows from the sizes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grid {
    /// `ceil(len / per_block)` blocks in x (one block when `per_block` is `None`).
    Vector {
        /// Size symbol of the vector length (`None`: one element).
        len: Option<String>,
        /// Elements each block covers (`None`: all).
        per_block: Option<u32>,
    },
    /// Blocks over strips of `columns` columns: walking down rows, `ceil(cols / columns)` ×
    /// `ceil(rows / per_block)` blocks; walking along columns, `ceil(cols / per_block)` ×
    /// `ceil(rows / 32)`. Whole-row blocks need `cols ≤ columns` ([`Grid::check`]).
    Strips {
        /// Size symbol of the rows.
        rows: String,
        /// Size symbol of the columns.
        cols: String,
        /// Columns per strip.
        columns: u32,
        /// Rows (walking down) or columns (walking along) each block walks (`None`: all, one
        /// block along the walk).
        per_block: Option<u64>,
        /// The direction of the walk.
        walk: Walk,
        /// Whole rows per block: the kernel is only correct where one strip covers every column.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        whole_rows: bool,
    },
}

impl Grid {
    /// Why the kernel cannot run at `sizes`, if it cannot: a whole-row kernel was generated
    /// for rows of at most `columns` numbers.
    pub fn check(&self, sizes: &Sizes) -> Result<(), String> {
        match self {
            Grid::Strips {
                cols,
                columns,
                whole_rows: true,
                ..
            } if sizes.get(cols).unwrap_or(1) > *columns as usize => Err(format!(
                "the plan keeps whole rows of at most {columns} columns in registers, but {cols} = {}: explore the plan at these sizes",
                sizes.get(cols).unwrap_or(1)
            )),
            _ => Ok(()),
        }
    }

    /// The grid dimensions under `sizes`.
    pub fn dims(&self, sizes: &Sizes) -> (u32, u32, u32) {
        let get = |s: &str| sizes.get(s).unwrap_or(1) as u64;
        let blocks = |n: u64, per: Option<u64>| per.map_or(1, |per| n.div_ceil(per).clamp(1, u32::MAX as u64) as u32);
        match self {
            Grid::Vector { len, per_block } => {
                let n = len.as_deref().map_or(1, get);
                (blocks(n, per_block.map(u64::from)), 1, 1)
            }
            Grid::Strips {
                rows,
                cols,
                columns,
                per_block,
                walk,
                ..
            } => match walk {
                Walk::Rows => (
                    blocks(get(cols), Some(*columns as u64)),
                    blocks(get(rows), *per_block),
                    1,
                ),
                Walk::Columns => (blocks(get(cols), *per_block), blocks(get(rows), Some(32)), 1),
            },
        }
    }
}

/// An argument of a launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchArg {
    /// The global buffer of a value.
    Buffer(ValueId),
    /// The scratch of a reduction (see [`Scratch`]), by the value it computes.
    Scratch(ValueId),
    /// A size, as a 64-bit integer.
    Size(String),
}

/// A kernel launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Launch {
    /// Kernel name in the source.
    pub kernel: String,
    /// Grid, from the sizes.
    pub grid: Grid,
    /// Threads per block.
    pub block: (u32, u32, u32),
    /// Arguments in order.
    pub args: Vec<LaunchArg>,
    /// What a strip kernel does per matrix row and per strip (`None` for vector kernels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strips: Option<StripWork>,
}

/// The partial-sum traffic of a strip kernel, for counting its atomics and shuffles at given
/// sizes: every row of every block's strip is warp-summed once per row sum; row sums not
/// finished in their block add one atomic per row per block across the columns, column sums
/// one per column per block down the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StripWork {
    /// Numbers of a matrix row each thread holds (one per tile across the strip).
    pub per_thread: u32,
    /// Row sums (each one warp sum per row per block across the columns).
    pub row_sums: u32,
    /// Of those, the ones added to memory with atomics.
    pub row_sum_atomics: u32,
    /// Column sums added to memory with atomics.
    pub column_sum_atomics: u32,
    /// Columns one column-sum atomic adds (4: a float4 atomic on sm_90).
    pub column_atomic_width: u32,
    /// Rows one trip of the kernel's hot loop works on.
    pub rows_per_trip: u32,
    /// Scalar loads of row values (`u[row]`) per row in the hot loop.
    pub row_value_loads: u32,
}

/// One step of running a generated plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Fill the buffer of a value with zeros (reduction outputs, before their kernel).
    Zero(ValueId),
    /// Launch a kernel.
    Launch(Launch),
}

/// Global memory a reduction needs between its kernel and its finishing kernel besides its
/// result's buffer: the three partial sums of a norm. A runner allocates it for each run of
/// the steps, filled with zeros, and lets it go after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Scratch {
    /// The value the reduction computes.
    pub value: ValueId,
    /// Its length in numbers.
    pub len: usize,
    /// The precision of its numbers (the program's).
    #[serde(skip)]
    pub precision: Precision,
}

/// A generated module: its source, the buffers it needs and the steps that run it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generated {
    /// CUDA C++ source for NVRTC (and the emulator).
    pub source: String,
    /// Values that live in global memory, by id.
    pub buffers: Vec<ValueId>,
    /// Zero-filled scratch memory of each run, for reductions that need more than their result.
    pub scratch: Vec<Scratch>,
    /// What to do, in order.
    pub steps: Vec<Step>,
}
