//! Device memory for the backends that run generated kernels: a GPU's (`fuse-cuda`) and the
//! emulated device's (host memory standing in for one, `fuse-emulate`).
//!
//! One piece of code keeps the books for both, so that the tests without a GPU check what a
//! GPU run does: [`Pool`] caches freed buffers by length for reuse and checks what an
//! allocation needs against what is free; [`resident`] runs a plan on buffers that stay on the
//! device between runs and counts every byte that crosses to or from the host. A backend only
//! supplies its [`Memory`] (allocate, free, copy in, copy out) and a [`DevicePlan`] that queues
//! the plan's steps on buffers.

mod cuda;
mod emulated;
mod pool;
pub(crate) mod resident;

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use fuse_core::{HostData, Precision};

use crate::error::Result;
pub(crate) use cuda::CudaMemory;
pub(crate) use emulated::EmulatedMemory;
pub(crate) use pool::{Buffer, Pool};
pub(crate) use resident::DevicePlan;
pub use resident::RunTimes;

/// One allocation of device memory.
#[derive(Debug)]
pub(crate) enum Raw {
    /// The emulated device's memory: host memory.
    Emulated(HostData),
    /// A GPU's memory, as bytes (kernels take their buffers as untyped pointers).
    Cuda(CudaSlice<u8>),
}

/// A device's memory: what the [`Pool`] needs to allocate, free, fill and read buffers.
pub(crate) trait Memory: Send + Sync {
    /// The device, for messages: `GPU 0 (NVIDIA H100 80GB HBM3)`, `the emulated device`.
    fn name(&self) -> String;
    /// Bytes free for new allocations.
    fn free_bytes(&self) -> Result<u64>;
    /// A new allocation of `len` elements of `precision`, contents undefined; out of memory is
    /// [`Error::DeviceMemory`](crate::Error::DeviceMemory).
    fn alloc(&self, precision: Precision, len: usize) -> Result<Raw>;
    /// Gives an allocation back to the device.
    fn free(&self, raw: Raw);
    /// Copies `from` into `to`, an allocation of its precision and length.
    fn upload(&self, from: &HostData, to: &mut Raw) -> Result<()>;
    /// The elements of `from` on the host (waits for the work queued before).
    fn download(&self, from: &Raw, precision: Precision) -> Result<HostData>;
    /// Waits for the work queued so far.
    fn synchronize(&self) -> Result<()>;
}

/// The pool of a device memory, one per device in the process (created on first use), so
/// that every session and compiled plan on that device shares its cached buffers.
fn shared_pool(key: String, memory: impl FnOnce() -> Result<Arc<dyn Memory>>) -> Result<Arc<Pool>> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    static POOLS: OnceLock<Mutex<HashMap<String, Arc<Pool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(pool) = pools.get(&key) {
        return Ok(Arc::clone(pool));
    }
    let pool = Arc::new(Pool::new(memory()?));
    pools.insert(key, Arc::clone(&pool));
    Ok(pool)
}

/// A buffer of another device, precision or length than asked: a fuse bug, reported rather
/// than a panic.
pub(crate) fn mismatch() -> crate::Error {
    crate::Error::Internal("a device buffer of another device, precision or length (a fuse bug, please report)".into())
}

/// `1.5 GiB`, `512 B`: bytes for messages.
pub(crate) fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.1} {} ({bytes} bytes)", UNITS[unit]),
    }
}
