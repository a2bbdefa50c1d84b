//! Interop with cudarc: device memory a Rust program already holds becomes a session value
//! without a copy, and a value comes back as device memory without a trip through the host.

use cudarc::driver::CudaSlice;
use fuse_cuda::Device;

use super::handle::{Handle, Matrix, Vector};
use super::state::{Copies, Data};
use super::Session;
use crate::backend::Backend;
use crate::device::{CudaMemory, Raw};
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
