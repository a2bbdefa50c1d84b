//! The launch configuration a routine runs in: what a timing table's measurements are keyed by
//! and what the predictor estimates for, so both depend on it rather than on each other.

use serde::{Deserialize, Serialize};

/// The launch configuration a routine runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    /// Threads per block.
    pub threads: u32,
    /// Instances per block: sub-vectors (BLAS-1), tiles across the strip (BLAS-2).
    pub instances: u32,
    /// Bytes of matrix rows a thread of a strip kernel loads at once (GPU BLAS-2: as many
    /// numbers as tiles across its strip, for each row of a trip); `None` where the model's
    /// reference applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane_bytes: Option<u64>,
    /// Registers per thread, estimated before compiling (GPU BLAS-2); `None` where they do not
    /// limit the blocks resident.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registers: Option<u64>,
    /// Serial iterations per block.
    pub serial_iterations: u32,
    /// Shared memory per block, bytes.
    pub shared_bytes: u64,
    /// Blocks in the grid.
    pub blocks: u64,
}
