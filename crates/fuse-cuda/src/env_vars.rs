//! The environment variables that name the CUDA libraries: the probe reads them, and the
//! errors for a library that does not load point to them.

/// Env var naming libcuda (the driver's library), or a folder holding it.
pub const DRIVER_ENV: &str = "FUSE_CUDA_LIB";
/// Env var naming libcublas, or a folder holding it.
pub const CUBLAS_ENV: &str = "FUSE_CUBLAS_LIB";
/// Env var naming libnccl (NCCL, for collectives between GPUs), or a folder holding it.
pub const NCCL_ENV: &str = "FUSE_NCCL_LIB";
