//! The fused CPU backend's one error type.

use fuse_core::data::{BindError, HostMemoryError};
use fuse_core::explore::{ExploreError, TimingError};

/// Why the fused CPU backend cannot prepare or run a plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpuError {
    /// The inputs do not fit the program.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The host memory to compute into cannot be had.
    #[error(transparent)]
    HostMemory(#[from] HostMemoryError),
    /// A call's formula has a form the executor does not handle.
    #[error("{location}: the CPU backend cannot run `{call}`: {what}")]
    Unsupported {
        /// The call as written.
        call: String,
        /// Where it is written.
        location: String,
        /// What is not supported.
        what: String,
    },
    /// The plan does not fit the program (calls missing, read before computed, …).
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// The threads to run on cannot be had (a bad `FUSE_NUM_THREADS`, a count out of range,
    /// threads the system refuses).
    #[error("{0}")]
    Threads(String),
    /// An environment variable set to a value it does not take (`FUSE_CPU_CALIBRATE`, or a
    /// `FUSE_SIMD` this CPU lacks).
    #[error("{0}")]
    Setting(String),
    /// A workspace used with a plan other than the one that made it.
    #[error("this workspace was made for another plan (make one with FusedPlan::workspace)")]
    Workspace,
    /// The explorer found no plan.
    #[error(transparent)]
    Explore(#[from] ExploreError),
    /// A timing table that cannot be read.
    #[error(transparent)]
    Timings(#[from] TimingError),
    /// A timing table calibrated with another function library.
    #[error(
        "{file} was calibrated with function library {table} but this library is {library}: \
         re-run `fuse calibrate --backend cpu -o {file}`"
    )]
    StaleTimings {
        /// The table.
        file: String,
        /// The checksum it records.
        table: String,
        /// The checksum of the library in use.
        library: String,
    },
}
