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
//! cached by content hash under `$TMPDIR/fuse-emulate`.

mod arg;
mod compiler;
mod module;
mod plan;

pub use arg::KernelArg;
pub use module::{EmulateOptions, EmulatedModule};
pub use plan::{EmulatedPlan, EmulationError};

use std::path::PathBuf;

/// The emulation header (`cuda_emu.h`), force-included ahead of every emulated source.
pub const CUDA_EMU_HEADER: &str = include_str!("cuda_emu.h");

/// The GPU side of the helper macros (`cuda_prelude.h`); put it at the top of a source so it
/// compiles with NVRTC as well as under emulation.
pub const CUDA_PRELUDE: &str = include_str!("cuda_prelude.h");

/// Why a source could not be emulated.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    /// No host C++ compiler could be started.
    #[error("no host C++ compiler found (tried {}); install g++ or set CXX", tried.join(", "))]
    CompilerNotFound {
        /// Commands tried.
        tried: Vec<String>,
    },
    /// The host compiler rejected the source.
    #[error("host C++ compilation failed ({command}):\n{message}")]
    Compile {
        /// The command line run.
        command: String,
        /// The compiler's diagnostics.
        message: String,
    },
    /// A file operation on the module cache failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The compiled module could not be loaded.
    #[error("cannot load emulated module {}: {source}", path.display())]
    Load {
        /// The shared library.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// The module lacks a symbol of the launch ABI (it was not built from this header).
    #[error("emulated module has no `{symbol}`: {source}")]
    Symbol {
        /// The symbol looked up.
        symbol: String,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// An option (such as a define) that cannot be passed to the compiler.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The kernel is not in the module.
    #[error(
        "no kernel `{name}` in the module; kernels marked with FUSE_EMU_EXPORT: {}",
        if exported.is_empty() { "none".to_owned() } else { exported.join(", ") }
    )]
    UnknownKernel {
        /// The requested name.
        name: String,
        /// Kernels the module exports.
        exported: Vec<String>,
    },
    /// The arguments do not match the kernel's parameters.
    #[error("kernel `{kernel}` takes ({expected}) but was given ({given})")]
    Arguments {
        /// Kernel name.
        kernel: String,
        /// Parameter types, e.g. `const f32*,f32*,i32`.
        expected: String,
        /// Argument types in the same notation.
        given: String,
    },
    /// Grid, block or shared memory size out of CUDA's limits.
    #[error("invalid launch of `{kernel}`: {reason}")]
    InvalidLaunch {
        /// Kernel name.
        kernel: String,
        /// Which limit was broken.
        reason: String,
    },
    /// The kernel misbehaved while running (divergent barrier, deadlock, ...); the message
    /// names the kernel, block, threads and source lines.
    #[error("{0}")]
    Execution(String),
    /// The kernel wrote just outside a buffer argument.
    #[error("kernel `{kernel}` wrote {detail} of argument {index} ({code}, {len} elements)")]
    OutOfBounds {
        /// Kernel name.
        kernel: String,
        /// Zero-based argument position.
        index: usize,
        /// Argument type, e.g. `f32*`.
        code: &'static str,
        /// Buffer length in elements.
        len: usize,
        /// Where, e.g. `4 bytes past the end`.
        detail: String,
    },
}
