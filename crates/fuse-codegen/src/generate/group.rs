//! What the generator is asked for: kernels as groups of calls with their launch shape.

use fuse_core::CallId;
use serde::Serialize;

/// One kernel to generate: calls in execution order, block size and serial iterations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelGroup {
    /// The calls it fuses, in an order that respects their dependencies.
    pub calls: Vec<CallId>,
    /// Threads per block.
    pub block: u32,
    /// BLAS-2: tiles across a block's strip of columns (32 columns each); 1 for BLAS-1.
    pub width: u32,
    /// BLAS-2: each row spread over the whole block, rows taken one at a time, so a row sum is
    /// complete while its row is in registers and later calls of the kernel may read it.
    pub whole_rows: bool,
    /// Elements (BLAS-1) or tiles (BLAS-2) each thread block processes in sequence.
    pub serial_iterations: Serial,
    /// The direction BLAS-2 blocks walk their serial iterations in.
    pub walk: Walk,
}

/// How many iterations each block runs in sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Serial {
    /// A fixed number; the grid grows with the sizes.
    Iterations(u32),
    /// As many as the extent along the walk needs, with one block along it: reductions along
    /// the walk are then complete in their block and stored directly, with no atomics, zero
    /// fill or finishing kernel — at any size.
    Whole,
    /// Whole-row blocks owning this many rows each, fewer than a tile's 32: more blocks for
    /// matrices of few rows.
    Rows(u32),
}

impl KernelGroup {
    /// The generator's view of one implementation of a fusion (what calibration times).
    pub fn of(imp: &fuse_core::explore::implementation::Implementation) -> Self {
        Self::launching(&imp.order, &imp.launch)
    }

    /// A reduction finished inside its block along the walk (`Finish::Complete`) makes the
    /// block walk the whole extent — except in a whole-row block, whose row sums are complete in
    /// any grid and which walks all rows only where the grid has one block. The instances of a
    /// BLAS-2 block are the tiles across its strip.
    fn launching(calls: &[CallId], launch: &fuse_core::explore::Launch) -> Self {
        use fuse_core::explore::implementation::Finish;
        let block = launch.block;
        let complete = match block.whole_rows {
            true => launch.blocks == 1,
            false => launch.reductions.iter().any(|r| r.finish == Finish::Complete),
        };
        KernelGroup {
            calls: calls.to_vec(),
            block: block.threads,
            width: block.instances,
            whole_rows: block.whole_rows,
            serial_iterations: match (complete, launch.block_rows) {
                (true, _) => Serial::Whole,
                (false, Some(rows)) => Serial::Rows(rows),
                (false, None) => Serial::Iterations(launch.serial_iterations),
            },
            walk: match launch.walk {
                Some(fuse_core::explore::mapping::Axis::Columns) => Walk::Columns,
                _ => Walk::Rows,
            },
        }
    }
}

impl From<&fuse_core::Kernel> for KernelGroup {
    /// The generator's view of a planned kernel.
    fn from(k: &fuse_core::Kernel) -> Self {
        KernelGroup::launching(&k.calls, &k.launch)
    }
}

/// The direction a BLAS-2 block's serial iterations walk over the tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Walk {
    /// Down a column of tiles: column sub-vectors are invariant, column sums accumulate.
    #[default]
    Rows,
    /// Along a row of tiles: row sub-vectors are invariant, row sums accumulate.
    Columns,
}
