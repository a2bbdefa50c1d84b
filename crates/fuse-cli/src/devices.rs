//! `fuse devices`: what the CUDA backend finds on this machine.

use fuse::stages::fuse_codegen::nvrtc;
use fuse::stages::fuse_cuda::{cache, device_count, probe, timings, CudaError, DeviceInfo};

use crate::failure::failure;
use crate::failure::Failure;

/// Prints the CUDA libraries, the cache folder and every GPU. Without a GPU all but the GPUs are
/// printed, and the reason is the error (status 3).
pub fn run() -> Result<(), Failure> {
    match probe::driver() {
        Ok(driver) => println!("driver: {}", driver.origin),
        Err(_) => println!("driver: not found (see below)"),
    }
    match nvrtc::load().and_then(|origin| Ok((origin, nvrtc::version()?))) {
        Ok((origin, (major, minor))) => println!("nvrtc: {origin} (NVRTC {major}.{minor})"),
        Err(e) => println!("nvrtc: not found: {e}"),
    }
    match probe::cublas() {
        Ok(pinned) => println!("cublas: {}", pinned.origin),
        Err(e) => println!("cublas: not found: {e}"),
    }
    match cache::cache_root() {
        Ok(root) => println!("cache: {}", root.display()),
        Err(e) => println!("cache: none: {e}"),
    }
    let count = device_count().map_err(failure)?;
    if count == 0 {
        return Err(failure(CudaError::NoDevice {
            ordinal: 0,
            reason: "the driver sees no device".to_string(),
        }));
    }
    for ordinal in 0..count {
        let info = DeviceInfo::query(ordinal).map_err(failure)?;
        println!("{}", info.describe());
        let table = timings::calibrated_path(&info).map_err(failure)?;
        let calibrated = if table.exists() {
            "calibrated"
        } else {
            "not calibrated yet"
        };
        println!("  timing table: {} ({calibrated})", table.display());
    }
    Ok(())
}
