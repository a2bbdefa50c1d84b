//! Device memory in and out of a session without a trip through the host: cudarc memory a
//! Rust program holds becomes a value without a copy; a [`DeviceArray`] (another library's
//! GPU memory through DLPack, say) becomes one by a copy on the device; and a value comes back
//! as either.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use fuse_cuda::Device;

use super::handle::{AnyHandle, Handle, Matrix, Vector};
use super::state::{Copies, Data};
use super::Session;
use crate::backend::Backend;
use crate::device::{CudaMemory, DeviceArray, EmulatedMemory, Pool, Raw};
use crate::element::{checked_len, Element};
use crate::error::{Error, Result};

impl<T: Element> Session<T> {
    /// A `rows × cols` matrix whose row-major elements are in `slice`, GPU memory made through
    /// cudarc on the session's GPU: the session takes the buffer over, without a copy (after
    /// waiting for the work queued on the slice's stream). The session must run on
    /// [`Backend::Cuda`], and `slice` must hold `rows · cols` elements.
    pub fn matrix_from_device(&self, rows: usize, cols: usize, slice: CudaSlice<T>) -> Result<Matrix<T>> {
        self.adopt("matrix_from_device", vec![rows, cols], slice)
            .map(Matrix::new)
    }

    /// A vector of the elements in `slice` (GPU memory on the session's GPU), taken over
    /// without a copy; see [`Session::matrix_from_device`].
    pub fn vector_from_device(&self, slice: CudaSlice<T>) -> Result<Vector<T>> {
        let dims = vec![slice.len()];
        self.adopt("vector_from_device", dims, slice).map(Vector::new)
    }

    /// A copy of `handle`'s value (row-major for a matrix) in GPU memory on the session's
    /// stream, made on the device (computed first if pending; uploaded first if the value was
    /// made on the host). The session must run on [`Backend::Cuda`].
    pub fn to_device(&self, handle: &impl Handle<T>) -> Result<CudaSlice<T>> {
        let token = handle.token();
        self.check_owner("to_device", "handle", token)?;
        let device = self.cuda_device("to_device")?;
        let pool = CudaMemory::pool(&device)?;
        if matches!(self.state.borrow().data(token.id), Some(Data::Pending)) {
            self.flush()?;
        }
        let mut state = self.state.borrow_mut();
        match state.device_value(token.id, &pool)?.raw() {
            Raw::Cuda(bytes) => Ok(device.copy_as::<T>(bytes)?),
            Raw::Emulated(_) => Err(crate::device::mismatch()),
        }
    }

    /// A value holding a copy of `array`, made on the device (values never change; the
    /// array's owner may write it): a vector or a matrix by its extents. `array` must be in the
    /// memory of the session's device (its GPU, or the emulated device) and of its precision.
    pub fn array_from_device(&self, array: &DeviceArray) -> Result<AnyHandle<T>> {
        let method = "array_from_device";
        let pool = self.device_pool(method)?;
        if array.precision() != T::PRECISION {
            return Err(Error::Precision {
                name: format!("{method}: the array"),
                got: array.precision(),
                want: T::PRECISION,
            });
        }
        if !Arc::ptr_eq(array.buffer().pool(), &pool) {
            return Err(Error::DeviceMismatch {
                name: format!("{method}: the array"),
                array: array.buffer().pool().memory().name(),
                program: pool.memory().name(),
            });
        }
        let dims = array.dims().to_vec();
        if !(1..=2).contains(&dims.len()) || dims.contains(&0) {
            return Err(Error::Shape {
                function: method.to_string(),
                argument: "array".to_string(),
                got: format!("{dims:?}"),
                expected: "a non-empty vector or matrix".to_string(),
            });
        }
        let copy = array.buffer().range(0..array.buffer().len())?;
        let copies = Copies {
            device: Some(copy),
            ..Copies::default()
        };
        Ok(AnyHandle::new(
            self.state.borrow_mut().insert(dims, Data::Ready(copies)),
        ))
    }

    /// A copy of `handle`'s value in the memory of the session's device, made there (computed
    /// first if pending; uploaded first if the value was made on the host).
    pub fn to_device_array(&self, handle: &impl Handle<T>) -> Result<DeviceArray> {
        let token = handle.token();
        self.check_owner("to_device_array", "handle", token)?;
        let pool = self.device_pool("to_device_array")?;
        if matches!(self.state.borrow().data(token.id), Some(Data::Pending)) {
            self.flush()?;
        }
        let mut state = self.state.borrow_mut();
        let buffer = state.device_value(token.id, &pool)?;
        let copy = buffer.range(0..buffer.len())?;
        Ok(DeviceArray::new(copy, handle.dims().to_vec()))
    }

    /// The pool of the session's device; an error naming `method` on a host backend.
    fn device_pool(&self, method: &str) -> Result<Arc<Pool>> {
        match self.backend {
            Backend::Cuda { .. } => CudaMemory::pool(&self.cuda_device(method)?),
            Backend::Emulate => EmulatedMemory::pool(),
            _ => Err(Error::NotOnGpu {
                method: method.to_string(),
                backend: self.backend.to_string(),
            }),
        }
    }

    fn adopt(&self, method: &str, dims: Vec<usize>, slice: CudaSlice<T>) -> Result<std::sync::Arc<super::Token>> {
        let len = checked_len(method, &dims, slice.len())?;
        let device = self.cuda_device(method)?;
        let pool = CudaMemory::pool(&device)?;
        let buffer = pool.adopt(Raw::Cuda(device.adopt(slice)?), T::PRECISION, len);
        let copies = Copies {
            device: Some(buffer),
            ..Copies::default()
        };
        Ok(self.state.borrow_mut().insert(dims, Data::Ready(copies)))
    }

    /// The session's GPU, opened; an error naming `method` on another backend.
    fn cuda_device(&self, method: &str) -> Result<Device> {
        match self.backend {
            Backend::Cuda { device } => Ok(Device::open(device)?),
            _ => Err(Error::NotOnGpu {
                method: method.to_string(),
                backend: self.backend.to_string(),
            }),
        }
    }
}
