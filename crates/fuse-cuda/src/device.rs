//! A GPU: its properties, and the context and stream every launch of this crate goes to.

use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute_enum as Attr;
use cudarc::driver::sys::CUresult;
use cudarc::driver::{result, CudaContext, CudaSlice, CudaStream, DriverError};
use fuse_codegen::nvrtc::Arch;
use fuse_core::{DataView, HostData, Precision};
use serde::Serialize;

use crate::error::{describe_driver_error, driver, CudaError};
use crate::probe;

/// What fuse needs to know about a GPU, read from the driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    /// The device ordinal.
    pub ordinal: usize,
    /// The driver's name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Device memory, bytes.
    pub memory_bytes: u64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Threads per block at most.
    pub max_threads_per_block: u32,
    /// Resident threads per SM at most.
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM at most.
    pub max_blocks_per_sm: u32,
    /// Shared memory a block may use after opting in, bytes.
    pub max_shared_per_block: u64,
    /// Shared memory per SM, bytes.
    pub shared_per_sm: u64,
    /// 32-bit registers per SM.
    pub registers_per_sm: u64,
    /// Second-level cache, bytes.
    pub l2_bytes: u64,
    /// The CUDA release the driver supports, (major, minor).
    pub driver_cuda: (i32, i32),
    /// The libcuda file in use.
    pub driver_library: String,
}

impl DeviceInfo {
    /// Reads device `ordinal`'s properties without creating a context (cheap: what `fuse run`
    /// uses to decide whether a GPU is there and which timing table fits it).
    pub fn query(ordinal: usize) -> Result<DeviceInfo, CudaError> {
        let pinned = probe::driver()?;
        result::init().map_err(|e| no_device(ordinal, &e))?;
        let count = result::device::get_count().map_err(|e| no_device(ordinal, &e))?;
        if ordinal >= count.max(0) as usize {
            return Err(CudaError::NoDevice {
                ordinal,
                reason: format!("the driver sees {count} device(s)"),
            });
        }
        let device = result::device::get(ordinal as i32).map_err(driver("cuDeviceGet"))?;
        let attr = |a: Attr| -> Result<u64, CudaError> {
            // SAFETY: `device` is a valid handle from `cuDeviceGet`.
            let v = unsafe { result::device::get_attribute(device, a) }.map_err(driver("cuDeviceGetAttribute"))?;
            Ok(v.max(0) as u64)
        };
        Ok(DeviceInfo {
            ordinal,
            name: result::device::get_name(device).map_err(driver("cuDeviceGetName"))?,
            compute_capability: (
                attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
                attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
            ),
            // SAFETY: as above.
            memory_bytes: unsafe { result::device::total_mem(device) }.map_err(driver("cuDeviceTotalMem"))? as u64,
            sms: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            max_threads_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32,
            max_threads_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)? as u32,
            max_blocks_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)? as u32,
            max_shared_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            shared_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            registers_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            driver_cuda: pinned.version.unwrap_or(probe::CUDA_RELEASE),
            driver_library: pinned.origin.clone(),
        })
    }

    /// The architecture to compile for.
    pub fn arch(&self) -> Result<Arch, CudaError> {
        Ok(Arch::new(self.compute_capability.0, self.compute_capability.1)?)
    }

    /// Compute capability as timing tables write it, e.g. `9.0`.
    pub fn compute_capability_text(&self) -> String {
        format!("{}.{}", self.compute_capability.0, self.compute_capability.1)
    }

    /// A file-name-safe key for per-GPU files: `nvidia-h100-80gb-hbm3-sm90`.
    pub fn key(&self) -> String {
        let mut key = String::new();
        for c in self.name.to_lowercase().chars() {
            match c {
                'a'..='z' | '0'..='9' => key.push(c),
                _ if !key.ends_with('-') && !key.is_empty() => key.push('-'),
                _ => {}
            }
        }
        let (major, minor) = self.compute_capability;
        format!("{}-sm{major}{minor}", key.trim_end_matches('-'))
    }

    /// One line: `GPU 0: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB, 50 MiB L2, CUDA 13.0 driver)`.
    pub fn describe(&self) -> String {
        format!(
            "GPU {}: {} (sm_{}{}, {} SMs, {:.1} GiB, {} MiB L2, CUDA {}.{} driver)",
            self.ordinal,
            self.name,
            self.compute_capability.0,
            self.compute_capability.1,
            self.sms,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.l2_bytes >> 20,
            self.driver_cuda.0,
            self.driver_cuda.1
        )
    }

    /// The device as a timing table records it.
    pub fn timing_hardware(&self) -> fuse_core::explore::timing::Hardware {
        fuse_core::explore::timing::Hardware {
            name: self.name.clone(),
            compute_capability: self.compute_capability_text(),
            sms: self.sms,
            max_threads_per_block: self.max_threads_per_block,
            max_threads_per_sm: self.max_threads_per_sm,
            max_blocks_per_sm: self.max_blocks_per_sm,
            max_shared_per_block: self.max_shared_per_block,
            shared_per_sm: self.shared_per_sm,
            registers_per_sm: self.registers_per_sm,
            row_barrier: false,
            cpu: None,
        }
    }
}

/// A driver error while looking for devices means there is no usable one.
fn no_device(ordinal: usize, err: &cudarc::driver::DriverError) -> CudaError {
    CudaError::NoDevice {
        ordinal,
        reason: describe_driver_error(err),
    }
}

/// How many CUDA devices the driver sees (an error when there is no driver).
pub fn device_count() -> Result<usize, CudaError> {
    probe::driver()?;
    result::init().map_err(|e| no_device(0, &e))?;
    let count = result::device::get_count().map_err(|e| no_device(0, &e))?;
    Ok(count.max(0) as usize)
}

/// An opened GPU: its context and the one stream all work goes to, in order.
#[derive(Debug, Clone)]
pub struct Device {
    info: DeviceInfo,
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

impl Device {
    /// Opens GPU `ordinal`. Without a driver or a GPU this is an error (never a panic):
    /// [`CudaError::is_unavailable`] tells a caller to fall back to the CPU.
    pub fn open(ordinal: usize) -> Result<Device, CudaError> {
        let info = DeviceInfo::query(ordinal)?;
        let context = CudaContext::new(ordinal).map_err(|e| no_device(ordinal, &e))?;
        // SAFETY: every operation of this crate goes to the one stream below, so no buffer is
        // shared between streams; without tracking, cudarc records no events around launches.
        unsafe { context.disable_event_tracking() };
        // The default stream: one stream means launches and copies run in program order,
        // and cudarc adds no cross-stream events to any launch.
        let stream = context.default_stream();
        Ok(Device { info, context, stream })
    }

    /// The device's properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The architecture to compile for.
    pub fn arch(&self) -> Result<Arch, CudaError> {
        self.info.arch()
    }

    /// The context (for modules and events).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The stream every operation of this crate is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The GPU's UUID: the same GPU seen by two processes has the same one.
    pub fn uuid(&self) -> Result<[u8; 16], CudaError> {
        let uuid = self.context.uuid().map_err(driver("cuDeviceGetUuid"))?;
        Ok(uuid.bytes.map(|b| b as u8))
    }

    /// Bytes of device memory free now.
    pub fn free_bytes(&self) -> Result<u64, CudaError> {
        let (free, _) = self.context.mem_get_info().map_err(driver("cuMemGetInfo"))?;
        Ok(free as u64)
    }

    /// `bytes` of device memory on the stream, contents undefined (write before reading).
    pub fn alloc(&self, bytes: usize) -> Result<CudaSlice<u8>, CudaError> {
        // SAFETY: the contents are undefined, which the caller is told; no read is queued here.
        match unsafe { self.stream.alloc::<u8>(bytes.max(1)) } {
            Ok(slice) => Ok(slice),
            Err(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => Err(CudaError::OutOfMemory {
                ordinal: self.info.ordinal,
                bytes: bytes as u64,
                free: self.free_bytes().unwrap_or(0),
            }),
            Err(e) => Err(driver("cuMemAlloc")(e)),
        }
    }

    /// Queues a copy of `from` into the start of `to` (which must be at least as long).
    pub fn upload(&self, from: DataView<'_>, to: &mut CudaSlice<u8>) -> Result<(), CudaError> {
        let bytes = host_bytes(from);
        if bytes.len() > to.len() {
            return Err(CudaError::Unsupported(format!(
                "an upload of {} bytes into a buffer of {} (a fuse bug, please report)",
                bytes.len(),
                to.len()
            )));
        }
        let mut view = to.slice_mut(..bytes.len());
        self.stream
            .memcpy_htod(bytes, &mut view)
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// Queues a device-side copy of `from`'s bytes `at..at + to.len()` into `to`.
    pub fn copy_range(&self, from: &CudaSlice<u8>, at: usize, to: &mut CudaSlice<u8>) -> Result<(), CudaError> {
        let end = at
            .checked_add(to.len())
            .filter(|&end| end <= from.len())
            .ok_or_else(|| {
                CudaError::Unsupported(format!(
                    "a copy of bytes {at}.. ({} of them) from a buffer of {} (a fuse bug, please report)",
                    to.len(),
                    from.len()
                ))
            })?;
        self.stream
            .memcpy_dtod(&from.slice(at..end), to)
            .map_err(driver("cuMemcpyDtoD"))
    }

    /// Queues zeros over all of `to`.
    pub fn zero(&self, to: &mut CudaSlice<u8>) -> Result<(), CudaError> {
        self.stream.memset_zeros(to).map_err(driver("cuMemsetD8"))
    }

    /// The elements of `from` in `precision`, on the host (waits for the work queued before).
    pub fn download(&self, from: &CudaSlice<u8>, precision: Precision) -> Result<HostData, CudaError> {
        let bytes = self.stream.clone_dtoh(from).map_err(driver("cuMemcpyDtoH"))?;
        Ok(match precision {
            Precision::F32 => HostData::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            Precision::F64 => HostData::F64(
                bytes
                    .chunks_exact(8)
                    .map(|c| f64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect(),
            ),
        })
    }

    /// Takes `slice`, made by the caller on this GPU (on any stream of it), as untyped bytes on
    /// this device's stream, without a copy; waits for the work queued on its stream first.
    pub fn adopt<T>(&self, slice: CudaSlice<T>) -> Result<CudaSlice<u8>, CudaError> {
        if slice.ordinal() != self.info.ordinal {
            return Err(CudaError::Unsupported(format!(
                "a buffer of GPU {} given to a session on GPU {}",
                slice.ordinal(),
                self.info.ordinal
            )));
        }
        slice.stream().synchronize().map_err(driver("cuStreamSynchronize"))?;
        let bytes = slice.num_bytes();
        let pointer = slice.leak();
        // SAFETY: `pointer` is a live allocation of `bytes` bytes on this device, whose work is
        // finished (synchronised above) and whose only owner was the slice leaked above.
        Ok(unsafe { self.stream.upgrade_device_ptr::<u8>(pointer, bytes) })
    }

    /// `bytes` of this GPU's memory at `pointer`, allocated by someone else, as a slice on this
    /// device's stream. The slice must be given up with [`CudaSlice::leak`], never dropped:
    /// dropping it would free the owner's memory.
    ///
    /// # Safety
    /// `pointer` must address `bytes` bytes of an allocation on this GPU that stays allocated
    /// while the slice lives.
    pub unsafe fn borrow(&self, pointer: u64, bytes: usize) -> CudaSlice<u8> {
        // SAFETY: the caller's promise.
        unsafe { self.stream.upgrade_device_ptr::<u8>(pointer, bytes) }
    }

    /// A device-side copy of `from` as elements of `T` (no trip through the host).
    pub fn copy_as<T: cudarc::driver::DeviceRepr>(&self, from: &CudaSlice<u8>) -> Result<CudaSlice<T>, CudaError> {
        let copy = self.stream.clone_dtod(from).map_err(driver("cuMemcpyDtoD"))?;
        let len = copy.len() / std::mem::size_of::<T>().max(1);
        let pointer = copy.leak();
        // SAFETY: `pointer` is the copy's allocation of `len · size_of::<T>()` bytes or more,
        // owned by nothing else (leaked above); its bytes are elements of `T` as written by
        // the kernels (f32/f64, any bit pattern valid).
        Ok(unsafe { self.stream.upgrade_device_ptr::<T>(pointer, len) })
    }

    /// Waits for everything queued so far; reports an earlier asynchronous failure.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream.synchronize().map_err(driver("cuStreamSynchronize"))
    }
}

/// The elements of `data` as bytes (the layout the kernels read).
pub(crate) fn host_bytes(data: DataView<'_>) -> &[u8] {
    match data {
        DataView::F32(v) => bytemuck::cast_slice(v),
        DataView::F64(v) => bytemuck::cast_slice(v),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An H100's properties named `name`, for tests without a GPU.
    pub(crate) fn info(name: &str) -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: name.to_string(),
            compute_capability: (9, 0),
            memory_bytes: 80 << 30,
            sms: 132,
            max_threads_per_block: 1024,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            max_shared_per_block: 232448,
            shared_per_sm: 233472,
            registers_per_sm: 65536,
            l2_bytes: 50 << 20,
            driver_cuda: (13, 0),
            driver_library: "libcuda.so.1".into(),
        }
    }

    #[test]
    fn host_bytes_are_the_elements_in_memory_order() {
        let bytes = host_bytes(DataView::F32(&[1.0, -2.0]));
        assert_eq!(bytes.len(), 8);
        assert_eq!(&bytes[..4], &1.0f32.to_ne_bytes());
        assert_eq!(host_bytes(DataView::F64(&[0.5])), &0.5f64.to_ne_bytes());
    }

    #[test]
    fn keys_are_file_names() {
        assert_eq!(info("NVIDIA H100 80GB HBM3").key(), "nvidia-h100-80gb-hbm3-sm90");
        assert_eq!(info("  NVIDIA H200 (x) ").key(), "nvidia-h200-x-sm90");
    }

    #[test]
    fn the_timing_hardware_carries_the_limits() {
        let d = info("NVIDIA H100 80GB HBM3").timing_hardware();
        assert_eq!(d.compute_capability, "9.0");
        assert_eq!(d.sms, 132);
        assert!(info("x").describe().contains("sm_90, 132 SMs"));
    }
}
