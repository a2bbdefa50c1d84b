//! Everything that can go wrong when compiling, loading or launching an emulated module.

use std::path::PathBuf;

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
    /// The host cannot hold the device copies of a launch's arguments.
    #[error(transparent)]
    HostMemory(#[from] fuse_core::data::HostMemoryError),
    /// The module cache folder is not this user's alone, or cannot be made.
    #[error(transparent)]
    Cache(Box<fuse_core::cache::CacheError>),
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
        /// Where it was loaded from.
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

impl From<fuse_core::cache::CacheError> for EmulateError {
    /// Boxed: cache errors carry two paths and a reason, and every launch's `Result` would
    /// otherwise be as large.
    fn from(err: fuse_core::cache::CacheError) -> Self {
        EmulateError::Cache(Box::new(err))
    }
}
