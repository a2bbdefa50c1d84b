//! Arrays in a device's memory: a program compiled for a GPU (or for the emulated device) runs
//! on arrays that are already there — borrowed from their owner without a copy, as PyTorch's or
//! CuPy's through DLPack — and leaves its outputs there, for the next program, a session or the
//! caller to take (`Compiled::run_on_device`, in the backend).

use cudarc::driver::DevicePtr;
use fuse_core::{HostArray, Precision};
use fuse_cuda::Device;

use super::{Buffer, CudaMemory, Raw};
use crate::error::{Error, Result};

/// An array in the memory of the device a compiled program runs on: an input of
/// [`Compiled::run_on_device`](crate::Compiled::run_on_device) (made by
/// [`Compiled::upload`](crate::Compiled::upload), borrowed with [`DeviceArray::borrow_cuda`], or
/// an earlier output), or one of its outputs.
pub struct DeviceArray {
    buffer: Buffer,
    dims: Vec<usize>,
}

impl DeviceArray {
    /// The `dims` elements (row-major) of `precision` at `pointer` on GPU `ordinal`, borrowed
    /// without a copy: fuse never frees this memory, and writes it only where the array is
    /// given as an output's storage (it never is by
    /// [`Compiled::run_on_device`](crate::Compiled::run_on_device), which reads its inputs).
    ///
    /// # Safety
    /// `pointer` must address that many elements of an allocation on that GPU which stays
    /// allocated, and which nothing else writes, while the array lives; the work that filled
    /// it must be finished, or queued before anything fuse queues on the GPU's legacy default
    /// stream (DLPack's `stream=1`).
    pub unsafe fn borrow_cuda(
        ordinal: usize,
        pointer: u64,
        dims: Vec<usize>,
        precision: Precision,
    ) -> Result<DeviceArray> {
        let bytes = (dims
            .iter()
            .try_fold(precision.bytes() as usize, |n, &d| n.checked_mul(d)))
        .ok_or_else(|| Error::Internal(format!("an array of extents {dims:?} is larger than memory")))?;
        let len = bytes / precision.bytes() as usize;
        let device = Device::open(ordinal)?;
        let pool = CudaMemory::pool(&device)?;
        // SAFETY: the caller's promise; the buffer gives the slice up rather than free it.
        let slice = unsafe { device.borrow(pointer, bytes) };
        Ok(DeviceArray {
            buffer: pool.borrow(Raw::Cuda(slice), precision, len),
            dims,
        })
    }

    /// `buffer` as an array of extents `dims`.
    pub(crate) fn new(buffer: Buffer, dims: Vec<usize>) -> DeviceArray {
        DeviceArray { buffer, dims }
    }

    /// Its buffer.
    pub(crate) fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// Its buffer and extents.
    pub(crate) fn into_parts(self) -> (Buffer, Vec<usize>) {
        (self.buffer, self.dims)
    }

    /// Extents, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The element precision.
    pub fn precision(&self) -> Precision {
        self.buffer.precision()
    }

    /// On a GPU: its ordinal and the array's address there (for DLPack); `None` on the emulated
    /// device.
    pub fn cuda_pointer(&self) -> Option<(usize, u64)> {
        match self.buffer.raw() {
            Raw::Cuda(slice) => {
                let (pointer, _record) = slice.device_ptr(slice.stream());
                Some((slice.ordinal(), pointer))
            }
            Raw::Emulated(_) => None,
        }
    }

    /// A copy in host memory (waits for the work queued before).
    pub fn to_host(&self) -> Result<HostArray> {
        Ok(HostArray {
            dims: self.dims.clone(),
            data: self.buffer.download()?,
        })
    }
}

impl std::fmt::Debug for DeviceArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match self.cuda_pointer() {
            Some((ordinal, pointer)) => format!("GPU {ordinal} at {pointer:#x}"),
            None => "the emulated device".to_string(),
        };
        write!(f, "DeviceArray({} {:?} on {place})", self.precision(), self.dims)
    }
}
