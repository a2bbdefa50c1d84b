//! Everything that can go wrong on the CUDA path, as values: no driver and no GPU included,
//! so that a machine without one gets a one-line message instead of cudarc's panic.

use fuse_codegen::dynlib::ProbeError;
use fuse_codegen::generate::GenerateError;
use fuse_codegen::nvrtc::NvrtcError;
use fuse_core::data::BindError;
use fuse_core::explore::{ExploreError, TimingError};

/// Why a CUDA operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// libcuda (the NVIDIA driver's library) does not load: no NVIDIA driver on this machine.
    #[error(
        "no NVIDIA GPU driver here: libcuda.so.1 does not load ({}). Run on a machine with an NVIDIA GPU \
         and driver, or set {env} to libcuda.so.1",
        summary(.0),
        env = crate::env_vars::DRIVER_ENV
    )]
    NoDriver(ProbeError),
    /// The driver is older than the CUDA release fuse is built against.
    #[error(
        "the NVIDIA driver supports CUDA {found}, fuse needs CUDA {needed} or newer: update the driver (580 or later)"
    )]
    OldDriver {
        /// The driver's CUDA version, `major.minor`.
        found: String,
        /// The version fuse is built for.
        needed: String,
    },
    /// The driver loads but has no such device.
    #[error("no CUDA device {ordinal}: {reason}")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// The driver's answer (no device, too few devices, …).
        reason: String,
    },
    /// libcublas does not load (only the cuBLAS baseline needs it).
    #[error(
        "cuBLAS not found: libcublas.so.13 does not load ({}). Install it (pip install 'nvidia-cublas==13.*' or the CUDA toolkit) \
         and set {env} to libcublas.so.13 or its folder",
        summary(.0),
        env = crate::env_vars::CUBLAS_ENV
    )]
    NoCublas(ProbeError),
    /// libnccl does not load the way cudarc opens it (only collectives between GPUs need it).
    #[error(
        "NCCL not found: {}. cudarc opens it as libnccl.so, while NCCL's wheel (pip install nvidia-nccl-cu13) \
         holds only libnccl.so.2: put a link named libnccl.so to it in a folder on LD_LIBRARY_PATH, \
         set before fuse starts ({env} names the copy to check)",
        summary(.0),
        env = crate::env_vars::NCCL_ENV
    )]
    NoNccl(ProbeError),
    /// An NCCL call failed.
    #[error("NCCL {call} failed: {result}")]
    Nccl {
        /// The NCCL function.
        call: &'static str,
        /// Its result code.
        result: String,
    },
    /// A device allocation larger than the memory free on the GPU.
    #[error("out of memory on GPU {ordinal}: {bytes} bytes asked, {free} free")]
    OutOfMemory {
        /// The device.
        ordinal: usize,
        /// Bytes asked for.
        bytes: u64,
        /// Bytes free when it failed.
        free: u64,
    },
    /// A CUDA driver call failed.
    #[error("{call} failed: {message}")]
    Driver {
        /// What was being done.
        call: &'static str,
        /// The driver's error name and description.
        message: String,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS {call} failed: {status}")]
    Cublas {
        /// The cuBLAS function.
        call: &'static str,
        /// Its status code.
        status: String,
    },
    /// NVRTC could not be loaded or could not compile.
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    /// The plan could not be turned into CUDA.
    #[error(transparent)]
    Generate(#[from] GenerateError),
    /// The program could not be explored for this GPU.
    #[error(transparent)]
    Explore(#[from] ExploreError),
    /// Inputs that do not fit the program.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// A malformed timing table.
    #[error(transparent)]
    Timing(#[from] TimingError),
    /// A cache folder someone else could write, or one that cannot be made.
    #[error(transparent)]
    Cache(#[from] fuse_core::cache::CacheError),
    /// A timing table measured on another function library.
    #[error(
        "{file} was calibrated with another function library ({table}, this one is {library}): \
         re-run `fuse calibrate` on this GPU"
    )]
    StaleTimings {
        /// The table.
        file: String,
        /// Its library checksum.
        table: String,
        /// This library's checksum.
        library: String,
    },
    /// A file of the module, tune or timing cache could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file or folder.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A launch does not fit the device (grid too large, too much shared memory, …).
    #[error("cannot launch {kernel}: {why}")]
    Launch {
        /// The kernel.
        kernel: String,
        /// The limit exceeded.
        why: String,
    },
    /// Something the cuBLAS baseline or the runtime does not handle.
    #[error("{0}")]
    Unsupported(String),
}

impl CudaError {
    /// Whether the error means "no usable GPU here" (no driver, no device, old driver): the
    /// cue for a caller to fall back to the CPU.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            CudaError::NoDriver(_) | CudaError::OldDriver { .. } | CudaError::NoDevice { .. }
        )
    }
}

/// Where a library was looked for, in a few words: the files tried, and "the system loader"
/// for cudarc's many bare names.
fn summary(err: &ProbeError) -> String {
    match err {
        ProbeError::NotFound { searched } => {
            let places: Vec<&str> = searched
                .iter()
                .map(|s| {
                    if s.starts_with("system loader") {
                        "the system loader"
                    } else {
                        s.as_str()
                    }
                })
                .collect();
            format!("searched {}", places.join(", "))
        }
        conflict => conflict.to_string(),
    }
}

/// Wraps a driver error with what was being done.
pub(crate) fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CudaError {
    move |err| CudaError::Driver {
        call,
        message: describe_driver_error(&err),
    }
}

/// `CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)`.
pub(crate) fn describe_driver_error(err: &cudarc::driver::DriverError) -> String {
    let name = err.error_name().map(|s| s.to_string_lossy().into_owned());
    let text = err.error_string().map(|s| s.to_string_lossy().into_owned());
    match (name, text) {
        (Ok(name), Ok(text)) => format!("{name} ({text})"),
        _ => format!("{:?}", err.0),
    }
}

/// Wraps a cuBLAS status.
pub(crate) fn cublas(call: &'static str) -> impl Fn(cudarc::cublas::result::CublasError) -> CudaError {
    move |err| CudaError::Cublas {
        call,
        status: format!("{:?}", err.0),
    }
}

/// Wraps an NCCL result.
pub(crate) fn nccl(call: &'static str) -> impl Fn(cudarc::nccl::result::NcclError) -> CudaError {
    move |err| CudaError::Nccl {
        call,
        result: format!("{:?}", err.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_one_short_line_with_the_fix() {
        let searched = vec![
            "/nowhere/libcuda.so.1 (no such file)".to_string(),
            "system loader: libcuda.so, libcuda.so.1".to_string(),
        ];
        let err = CudaError::NoDriver(ProbeError::NotFound { searched });
        let text = err.to_string();
        assert!(!text.contains('\n') && text.len() < 300, "{text}");
        assert!(
            text.contains("searched /nowhere/libcuda.so.1 (no such file), the system loader"),
            "{text}"
        );
        assert!(text.contains("FUSE_CUDA_LIB") && err.is_unavailable(), "{text}");
    }
}
