//! GPU arrays through DLPack (the `dlpark` crate): a CuPy, PyTorch or JAX array on a GPU is
//! read in place by a program compiled for that GPU, and each output is handed back as a DLPack
//! producer (`torch.from_dlpack(out)`, `cupy.from_dlpack(out)`) owning fuse's buffer.
//!
//! Streams: fuse queues its work on the GPU's legacy default stream, so inputs are asked for
//! with `__dlpack__(stream=1)` (the producer orders its pending writes before that stream), and
//! a run returns once its kernels are done, so an output is ready on any consumer stream.

use std::sync::Arc;

use dlpark::ffi::{DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use dlpark::python::consumer::stream::cuda as cuda_stream;
use dlpark::python::{
    export_dlpack, DlpackExporter, DlpackStream, ExportRequest, ImportRequest, ImportedDlpack, StreamArg,
};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use fuse::{Backend, DeviceArray, Precision};
use pyo3::prelude::*;

use crate::errors::{input_error, IntoPy};

/// An array a program left in GPU memory. Hand it to PyTorch, CuPy or JAX through DLPack
/// (`torch.from_dlpack(a)`): they take it over without a copy. `numpy.asarray` does not reach
/// GPU memory; `a.to_host()` copies it to a numpy array.
#[pyclass(frozen, module = "fuseblas._core", name = "DeviceArray")]
pub struct GpuArray {
    array: Arc<DeviceArray>,
    ordinal: usize,
    pointer: u64,
}

impl GpuArray {
    /// `array`, which must be on a GPU.
    pub(crate) fn new(array: DeviceArray) -> PyResult<Self> {
        let (ordinal, pointer) = array
            .cuda_pointer()
            .ok_or_else(|| input_error("an output of the emulated device is not in GPU memory"))?;
        Ok(GpuArray {
            array: Arc::new(array),
            ordinal,
            pointer,
        })
    }

    /// A fresh DLPack descriptor of the array, holding a reference to it.
    fn managed<M: ManagedTensorBase>(&self) -> PyResult<Managed<M>> {
        let shape: Vec<i64> = self.array.dims().iter().map(|&d| d as i64).collect();
        let mut tensor = Dynamic::compact(shape)
            .initialize_as::<M>(Box::new(Arc::clone(&self.array)))
            .map_err(|e| input_error(format!("cannot describe the array for DLPack: {e}")))?;
        tensor
            .set_data(self.pointer as *mut std::ffi::c_void)
            .set_device(self.device())
            .set_dtype(dtype(self.array.precision()));
        // SAFETY: the data pointer is the array's, kept alive by the context installed above
        // until the consumer's deleter runs; shape and compact strides come from the builder.
        Ok(unsafe { tensor.finish() })
    }
}

#[pymethods]
impl GpuArray {
    /// The DLPack capsule of the array (the protocol's producer side; call `torch.from_dlpack`
    /// or `cupy.from_dlpack` rather than this). Zero-copy only.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request = ExportRequest::parse(stream.as_ref(), max_version, dl_device, copy)?;
        export_dlpack(self, py, request)
    }

    /// `(2, ordinal)`: DLPack's CUDA device type and the GPU.
    fn __dlpack_device__(&self) -> (u32, i32) {
        (DLDeviceType::CUDA.0, self.ordinal as i32)
    }

    /// Extents, outermost first.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.array.dims().to_vec()
    }

    /// Its address in GPU memory (what `torch.from_dlpack(a).data_ptr()` gives).
    #[getter]
    fn data_ptr(&self) -> u64 {
        self.pointer
    }

    /// `"float32"` or `"float64"`.
    #[getter]
    fn dtype(&self) -> &'static str {
        match self.array.precision() {
            Precision::F32 => "float32",
            Precision::F64 => "float64",
        }
    }

    /// A copy in host memory, as a numpy array.
    fn to_host(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let host = py.detach(|| self.array.to_host()).py_err()?;
        crate::arrays::to_python(py, host)
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceArray(shape={:?}, dtype={}, device=cuda:{})",
            self.shape(),
            self.dtype(),
            self.ordinal
        )
    }
}

impl DlpackExporter for GpuArray {
    fn device(&self) -> DLDevice {
        DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: self.ordinal as i32,
        }
    }

    fn flags(&self) -> DlpackFlags {
        DlpackFlags::empty()
    }

    fn prepare_export(&self, _py: Python<'_>, _request: &ExportRequest<'_>) -> PyResult<()> {
        Ok(()) // the run that made it waited for its kernels: ready on every stream
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        self.managed()
    }

    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.managed()
    }
}

/// The GPU's legacy default stream, where fuse queues its work: DLPack's `stream=1`.
struct LegacyDefaultStream;

// SAFETY: the legacy default stream exists on every CUDA device for the life of the process.
unsafe impl DlpackStream for LegacyDefaultStream {
    fn as_python_arg(&self, _py: Python<'_>, _device: DLDevice) -> PyResult<StreamArg> {
        Ok(cuda_stream(std::ptr::null_mut()))
    }
}

/// Whether `object` is an array in CUDA memory that speaks DLPack, and on which GPU.
pub(crate) fn cuda_device(object: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    // A numpy array is in host memory: asking it through DLPack cost a method call per input.
    if object.is_instance_of::<numpy::PyUntypedArray>() || !object.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    let (kind, ordinal): (u32, i32) = object.call_method0("__dlpack_device__")?.extract()?;
    Ok((kind == DLDeviceType::CUDA.0).then_some(ordinal.max(0) as usize))
}

/// A GPU array taken in through DLPack: the producer's tensor (kept until the run is over)
/// and fuse's borrowed view of its memory.
pub(crate) struct Imported {
    pub(crate) array: DeviceArray,
    pub(crate) owner: ImportedDlpack,
}

/// `object` (a CUDA array with `__dlpack__`, on GPU `ordinal`) as a borrowed device array for a
/// program or session (`holder`) that runs on `backend`, which must be that GPU: C-contiguous,
/// float32 or float64 (`want`'s where given), without a copy; anything else is an `InputError`
/// naming `what`.
pub(crate) fn import(
    object: &Bound<'_, PyAny>,
    what: &str,
    want: Option<Precision>,
    ordinal: usize,
    (backend, holder): (&Backend, &str),
) -> PyResult<Imported> {
    if *backend != (Backend::Cuda { device: ordinal }) {
        return Err(input_error(format!(
            "{what} is in the memory of cuda:{ordinal}, but this {holder} runs on {backend}: make it with \
             backend=\"cuda:{ordinal}\" to use GPU arrays in place"
        )));
    }
    let request = ImportRequest::new(object.as_borrowed())?;
    // No `copy` argument: producers that predate it (DLPack < 1.0) would refuse it, and none
    // copies GPU memory unasked.
    let owner = request.import(Some(&LegacyDefaultStream), None)?;
    let tensor = owner
        .validate()
        .map_err(|e| input_error(format!("{what}: not a valid DLPack tensor ({e})")))?;
    let device = tensor.device();
    if device.device_type != DLDeviceType::CUDA || device.device_id as usize != ordinal {
        return Err(input_error(format!(
            "{what} is on DLPack device {:?}:{}, but the program runs on cuda:{ordinal}",
            device.device_type, device.device_id
        )));
    }
    let precision = [Precision::F32, Precision::F64]
        .into_iter()
        .find(|&p| dtype(p) == tensor.dtype() && want.is_none_or(|w| w == p))
        .ok_or_else(|| {
            let computes = want.map_or("float32 or float64".to_string(), |w| w.to_string());
            input_error(format!(
                "{what} has DLPack dtype {:?}, but fuseblas computes in {computes} here",
                tensor.dtype()
            ))
        })?;
    if !tensor.is_compact().unwrap_or(false) {
        return Err(input_error(format!(
            "{what} is not C-contiguous (fuseblas reads GPU arrays in place, row by row): pass a contiguous copy"
        )));
    }
    let pointer = tensor.data_ptr() as u64 + tensor.byte_offset();
    let dims: Vec<usize> = tensor.shape().iter().map(|&d| d as usize).collect();
    // SAFETY: the producer's tensor (`owner`) keeps the memory allocated until the run is over,
    // and its pending writes are ordered before the legacy default stream (asked for above).
    let array = unsafe { DeviceArray::borrow_cuda(ordinal, pointer, dims, precision) }.py_err()?;
    Ok(Imported { array, owner })
}

fn dtype(precision: Precision) -> DLDataType {
    match precision {
        Precision::F32 => DLDataType::F32,
        Precision::F64 => DLDataType::F64,
    }
}
