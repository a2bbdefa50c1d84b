//! What a device's memory must do for the pool: allocate, free, copy in, copy out.

use cudarc::driver::CudaSlice;
use fuse_core::{DataView, HostData, Precision};

use crate::error::{Error, Result};

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
    fn upload(&self, from: DataView<'_>, to: &mut Raw) -> Result<()>;
    /// Copies `from`'s elements `at..at + n` (of `precision`) into `to`, an allocation of `n`
    /// elements, on the device.
    fn copy_range(&self, from: &Raw, at: usize, to: &mut Raw, precision: Precision) -> Result<()>;
    /// Sets every element of `to` to zero.
    fn zero(&self, to: &mut Raw) -> Result<()>;
    /// The elements of `from` on the host (waits for the work queued before).
    fn download(&self, from: &Raw, precision: Precision) -> Result<HostData>;
    /// Waits for the work queued so far.
    fn synchronize(&self) -> Result<()>;
}

/// A buffer of another device, precision or length than asked: a fuse bug, reported rather
/// than a panic.
pub(crate) fn mismatch() -> Error {
    Error::Internal("a device buffer of another device, precision or length (a fuse bug, please report)".into())
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
