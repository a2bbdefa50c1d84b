//! The CUDA runtime of fuse: runs the plans `fuse-codegen` generates on an NVIDIA GPU.
//!
//! - [`Device`]: a GPU, found through the driver; without a driver or a GPU every entry point
//!   returns [`CudaError`] (see [`CudaError::is_unavailable`]) — never cudarc's panic, because
//!   [`probe`] loads libcuda and libcublas before cudarc touches them.
//! - [`CudaPlan`]: a generated module loaded on the GPU, run step by step (zero-fills, kernel
//!   launches) on one stream; compiled modules are cached on disk ([`cache`]) by a hash of the
//!   source, the architecture and the NVRTC release, so a second run compiles nothing.
//! - [`graph`]: a plan's steps captured as one CUDA graph and replayed with one launch, where
//!   [`Replays`] has timed that faster than the steps.
//! - [`timer`]: CUDA-event timing, warm-up and the median of repeats, L2 flushed between runs.
//! - [`baseline`]: the same program written as a cuBLAS user would write it.
//! - [`calibrate`]: a timing table for this GPU (paper §4.2); [`timings`] picks the table for a
//!   GPU; [`tune`]: the measured-fastest of the best predicted plans, remembered per GPU.
//! - [`Nccl`]: collectives between GPUs on device buffers (NCCL), for distributed runs.
//!
//! ```no_run
//! use fuse_codegen::generate::generate_plan;
//! use fuse_core::{data::fill_random_inputs, explore, script, Bindings, Library, Limits};
//! use fuse_cuda::{CudaPlan, Device};
//!
//! let library = Library::builtin()?;
//! let program = script::load("scripts/bicgk.yaml".as_ref(), &library)?;
//! let device = Device::open(0)?;
//! let table = fuse_cuda::timings::select(device.info(), &library, None)?.table;
//! let plan = explore(&program, &program.sizes, &table, &library, Limits::default())?.best();
//! let cuda = CudaPlan::compile(generate_plan(&program, &plan)?, &device)?;
//! let mut inputs = Bindings::new();
//! fill_random_inputs(&program, &program.sizes, 0, &mut inputs);
//! let outputs = cuda.run(&program, &program.sizes, &inputs)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod baseline;
pub mod bench;
pub mod cache;
pub mod calibrate;
pub mod check;
pub mod device;
mod env_vars;
pub mod error;
pub mod graph;
pub mod kernels;
pub mod module;
pub mod nccl;
pub mod plan;
pub mod probe;
pub mod timer;
pub mod timings;
pub mod tune;

pub use device::{device_count, Device, DeviceInfo};
pub use error::CudaError;
pub use graph::{PlanGraph, Replays};
pub use nccl::Nccl;
pub use plan::{CudaPlan, Workspace};
pub use timer::{Timer, Timing, TimingOptions};
