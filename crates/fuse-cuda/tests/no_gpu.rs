//! Without a driver every entry point is an error value, never cudarc's panic. The driver is
//! made "missing" on any machine by pointing `FUSE_CUDA_LIB` at nothing, which is why this file
//! holds a single test: the variable is set before anything loads, with no other test running
//! in this process.

use fuse_cuda::{device_count, CudaError, Device, DeviceInfo};

#[test]
fn no_driver_is_an_error_everywhere_and_never_a_panic() {
    std::env::set_var(fuse_cuda::probe::DRIVER_ENV, "/nowhere/libcuda.so.1");
    let errors: Vec<CudaError> = vec![
        Device::open(0).unwrap_err(),
        DeviceInfo::query(0).unwrap_err(),
        device_count().unwrap_err(),
    ];
    for err in errors {
        let text = err.to_string();
        assert!(err.is_unavailable(), "{text}");
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.starts_with(
                "no NVIDIA GPU driver here: libcuda.so.1 does not load (searched /nowhere/libcuda.so.1 (no such file))"
            ),
            "{text}"
        );
    }
}
