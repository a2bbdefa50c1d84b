#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod backend;
mod device;
pub mod distributed;
mod element;
mod error;
mod io;
mod memory;
mod script;
pub mod select;
mod session;
pub mod solvers;

pub use backend::{Backend, CompileOptions, Compiled};
pub use device::{DeviceArray, RunTimes};
pub use element::{array, Element};
pub use error::{Error, Result};
pub use io::{Inputs, Outputs};
pub use memory::{available_host_memory, check_host_memory, try_collect, try_to_owned};
pub use script::{bind_sizes, Script, SizeSource};
pub use session::{AnyHandle, CallArg, Forecast, Handle, InPlace, Matrix, Scalar, ScalarArg, Session, Stats, Vector};

pub use fuse_core::{
    ArrayView, Bindings, DataView, HostArray, HostData, Library, Plan, Precision, Program, Sizes, Views,
};
pub use fuse_cpu::fused::{cache_bytes, SimdLevel, Threads, SIMD_VAR, THREADS_VAR};

/// The cudarc that fuse's GPU memory types come from ([`Session::matrix_from_device`],
/// [`Session::to_device`]): use this one, so that the versions agree.
pub use cudarc;

/// The crates below this one, for what is itself about a lower stage or a backend's own tools:
/// the language, graph and explorer (`fuse_core`), the generator and NVRTC (`fuse_codegen`),
/// and the backends' measurement tools — calibration, the cuBLAS baseline, the tune cache
/// (`fuse_cpu`, `fuse_cuda`, `fuse_emulate`). Running a script goes through [`Backend`].
pub mod stages {
    pub use fuse_codegen;
    pub use fuse_core;
    pub use fuse_cpu;
    pub use fuse_cuda;
    pub use fuse_emulate;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    /// Handles and compiled programs cross threads; a session moves between them.
    #[test]
    fn thread_safety() {
        send_sync::<Matrix<f32>>();
        send_sync::<Vector<f64>>();
        send_sync::<Scalar<f64>>();
        send_sync::<Compiled>();
        send_sync::<Error>();
        send::<Session<f32>>();
    }
}
