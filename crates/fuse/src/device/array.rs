//! Arrays in a device's memory for the script API: a program compiled for a GPU (or for the
//! emulated device) runs on arrays that are already there — borrowed from their owner without
//! a copy, as PyTorch's or CuPy's through DLPack — and leaves its outputs there, for the next
//! program or for the caller to take.

use std::collections::BTreeMap;

use cudarc::driver::DevicePtr;
use fuse_core::data::{input_extents, BindError};
use fuse_core::{ArrayView, HostArray, Precision};
use fuse_cuda::Device;

use super::{resident, Buffer, CudaMemory, Raw, RunTimes};
use crate::backend::Compiled;
use crate::error::{Error, Result};

/// An array in the memory of the device a compiled program runs on: an input of
/// [`Compiled::run_on_device`] (made by [`Compiled::upload`], borrowed with
/// [`DeviceArray::borrow_cuda`], or an earlier output), or one of its outputs.
pub struct DeviceArray {
    buffer: Buffer,
    dims: Vec<usize>,
}

impl DeviceArray {
    /// The `dims` elements (row-major) of `precision` at `pointer` on GPU `ordinal`, borrowed
    /// without a copy: fuse never frees this memory, and writes it only where the array is
    /// given as an output's storage (it never is by [`Compiled::run_on_device`], which reads
    /// its inputs).
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
        let len = dims.iter().product::<usize>();
        let device = Device::open(ordinal)?;
        let pool = CudaMemory::pool(&device)?;
        // SAFETY: the caller's promise; the buffer gives the slice up rather than free it.
        let slice = unsafe { device.borrow(pointer, (precision.bytes() as usize) * len) };
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

impl Compiled {
    /// A copy of `array` in the memory of the device this program runs on, for
    /// [`Compiled::run_on_device`]. An error on a backend that computes on the host.
    pub fn upload(&self, array: ArrayView<'_>) -> Result<DeviceArray> {
        let plan = self.device_plan("upload")?;
        Ok(DeviceArray {
            buffer: plan.pool().upload(array.data)?,
            dims: array.dims.to_vec(),
        })
    }

    /// Runs on arrays in the device's memory, one per input by name (they stay the caller's;
    /// a run only reads them), and leaves every output there, by name; with where the time
    /// went (no uploads or downloads). An array of another device, shape or precision is an
    /// error naming it; so is a backend that computes on the host.
    pub fn run_on_device(
        &self,
        inputs: &mut BTreeMap<String, DeviceArray>,
    ) -> Result<(BTreeMap<String, DeviceArray>, RunTimes)> {
        let plan = self.device_plan("run_on_device")?;
        let program = self.program();
        self.check_device_inputs(inputs, plan.pool())?;
        let mut given = BTreeMap::new();
        let mut lent = Vec::new();
        for &v in program.inputs.iter().filter(|v| plan.buffers().contains(v)) {
            let name = &program.values[v].variable;
            if let Some(array) = inputs.remove(name) {
                given.insert(v, array.buffer);
                lent.push((v, name.clone(), array.dims));
            }
        }
        let ran = resident::run(plan, program, self.sizes(), &mut given);
        for (v, name, dims) in lent {
            if let Some(buffer) = given.remove(&v) {
                inputs.insert(name, DeviceArray { buffer, dims });
            }
        }
        let ran = ran?;
        let outputs = (ran.outputs.into_iter())
            .map(|(v, buffer)| {
                let dims = program.values[v].shape.extents(self.sizes()).unwrap_or_default();
                (program.values[v].variable.clone(), DeviceArray { buffer, dims })
            })
            .collect();
        let times = RunTimes {
            compute: ran.compute,
            ..RunTimes::default()
        };
        Ok((outputs, times))
    }

    fn device_plan(&self, method: &str) -> Result<&dyn super::DevicePlan> {
        self.device().ok_or_else(|| Error::NotOnGpu {
            method: method.to_string(),
            backend: self.backend().to_string(),
        })
    }

    /// Every input present, of its extents and precision, on the program's device.
    fn check_device_inputs(
        &self,
        inputs: &BTreeMap<String, DeviceArray>,
        pool: &std::sync::Arc<super::Pool>,
    ) -> Result<()> {
        let program = self.program();
        for (&v, want) in program.inputs.iter().zip(input_extents(program, self.sizes())) {
            let name = &program.values[v].variable;
            let array = inputs.get(name).ok_or_else(|| BindError::Missing(name.clone()))?;
            if array.dims != want {
                return Err(BindError::Shape {
                    name: name.clone(),
                    got: array.dims.clone().into(),
                    want: want.into(),
                    declared: program.values[v].shape.to_string(),
                    file: program.file.clone(),
                }
                .into());
            }
            if array.precision() != program.precision {
                return Err(BindError::Precision {
                    name: name.clone(),
                    got: array.precision(),
                    want: program.precision,
                }
                .into());
            }
            if !std::sync::Arc::ptr_eq(array.buffer.pool(), pool) {
                return Err(Error::DeviceMismatch {
                    name: name.clone(),
                    array: array.buffer.pool().memory().name(),
                    program: pool.memory().name(),
                });
            }
        }
        Ok(())
    }
}
