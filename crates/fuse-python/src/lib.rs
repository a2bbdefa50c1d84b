//! `fuseblas._core`: the `fuse` crate's two APIs for Python, as thin over the crate as the CLI
//! is. The package's Python half (`python/fuseblas`) gives them their Python manners: argument
//! conversion, BLAS-named session methods, docstrings; this half holds no logic of its own
//! beyond moving arrays across without copies and turning errors into exceptions.

// `fuse::Error` is the crate's one error type; its size is the crate's choice.
#![allow(clippy::result_large_err)]

mod arrays;
mod device;
mod errors;
mod interrupt;
mod program;
mod session;
mod solve;

use pyo3::prelude::*;

/// The native half of `fuseblas`; use the `fuseblas` package, not this module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<program::Program>()?;
    m.add_class::<session::Session>()?;
    m.add_class::<session::Value>()?;
    m.add_class::<device::GpuArray>()?;
    m.add_function(wrap_pyfunction!(arrays::view_address, m)?)?;
    m.add_function(wrap_pyfunction!(backends, m)?)?;
    m.add_function(wrap_pyfunction!(solve::solve, m)?)?;
    m.add_function(wrap_pyfunction!(check_host_memory, m)?)?;
    m.add_function(wrap_pyfunction!(interrupt::_set_note_after_ms, m)?)?;
    let stop_work = wrap_pyfunction!(interrupt::_stop_work, m)?;
    m.py().import("atexit")?.call_method1("register", (&stop_work,))?;
    m.add_function(stop_work)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // `pip install` builds release; tests/run's build is the dev profile, whose loops are
    // unoptimised enough (2× at BLAS-2 sizes) that benchmarks refuse it.
    m.add("BUILD_PROFILE", if cfg!(debug_assertions) { "dev" } else { "release" })?;
    Ok(())
}

/// The backend `"auto"` picks here and why, in a few words (the GPU's name, or why none).
#[pyfunction]
fn backends() -> (String, String) {
    let (backend, why) = fuse::Backend::detect_why();
    (backend.to_string(), why)
}

/// Raises `OutOfMemoryError` naming `what` where the host cannot give `bytes` now: the copies
/// the Python half has numpy make are checked as fuse's own are.
#[pyfunction]
fn check_host_memory(bytes: u64, what: String) -> PyResult<()> {
    use errors::IntoPy;
    fuse::check_host_memory(bytes, || what).py_err()
}
