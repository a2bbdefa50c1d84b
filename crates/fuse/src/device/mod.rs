//! Device memory for the backends that run generated kernels: a GPU's (`fuse-cuda`) and the
//! emulated device's (host memory standing in for one, `fuse-emulate`).
//!
//! One piece of code keeps the books for both, so that the tests without a GPU check what a
//! GPU run does: [`Pool`] caches freed buffers by length for reuse and checks what an
//! allocation needs against what is free; [`resident`] runs a plan on buffers that stay on the
//! device between runs and counts every byte that crosses to or from the host. A backend only
//! supplies its [`Memory`] (allocate, free, copy in, copy out) and a [`DevicePlan`] that queues
//! the plan's steps on buffers.

mod array;
mod cuda;
mod emulated;
mod memory;
mod pool;
pub(crate) mod resident;

pub use array::DeviceArray;
pub(crate) use cuda::CudaMemory;
pub(crate) use emulated::EmulatedMemory;
pub(crate) use memory::{mismatch, Memory, Raw};
pub(crate) use pool::{raw_buffers, Buffer, Pool};
pub(crate) use resident::DevicePlan;
pub use resident::RunTimes;
