//! Runs CUDA C++ kernels on the CPU, so generated code can be checked without a GPU.
//!
//! The source that NVRTC compiles for the GPU is compiled here by the host C++ compiler with
//! [`CUDA_EMU_HEADER`] force-included: every CUDA thread becomes a fiber, a block runs
//! cooperatively on one OS thread (barriers and warp shuffles switch fibers), and blocks run
//! in parallel on a few OS threads. Misuse that would hang or corrupt a GPU run — a
//! `__syncthreads()` some threads never reach, a warp shuffle whose lanes never meet, a write
//! just outside a buffer — comes back as an [`EmulateError`]; reads of unwritten shared memory
//! give NaN. See `cuda_emu.h` for the details of the model.
//!
//! A kernel is launchable when the source marks it with `FUSE_EMU_EXPORT(name)` after its
//! definition; sources start with [`CUDA_PRELUDE`] so that the macro (and
//! `FUSE_DYNAMIC_SHARED`) also mean something to NVRTC.
//!
//! ```
//! use fuse_emulate::{EmulatedModule, KernelArg, CUDA_PRELUDE};
//!
//! let source = format!("{CUDA_PRELUDE}{}", r#"
//! extern "C" __global__ void scale(float* x, float a, int n) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) x[i] *= a;
//! }
//! FUSE_EMU_EXPORT(scale)
//! "#);
//! let module = EmulatedModule::compile(&source)?;
//! let mut x = vec![1.0f32; 1000];
//! let n = x.len() as i32;
//! let mut args = [KernelArg::from(&mut x[..]), 2.0f32.into(), n.into()];
//! module.launch("scale", (4, 1, 1), (256, 1, 1), 0, &mut args)?;
//! assert!(x.iter().all(|&v| v == 2.0));
//! # Ok::<(), fuse_emulate::EmulateError>(())
//! ```
//!
//! The host compiler is `$CXX` if set, else `c++`, else `g++` (C++20). Built modules are
//! cached under `emulate/` in fuse's per-user cache root (`fuse_core::cache`: a folder
//! only this user can write, entries named by SHA-256; a damaged entry is rebuilt).

mod arg;
mod compiler;
mod error;
mod headers;
mod module;
mod plan;
mod stop;

pub use arg::KernelArg;
pub use error::EmulateError;
pub use headers::{CUDA_EMU_HEADER, CUDA_PRELUDE};
pub use module::{EmulateOptions, EmulatedModule};
pub use plan::{EmulatedPlan, EmulationError};
pub use stop::stop;
