//! fuse's errors as the exceptions of `fuseblas._errors` (defined in Python so that each can
//! also be a `ValueError` or `MemoryError`): the same one-line messages as the CLI, with a
//! script error's file, line and column as attributes.

use fuse::stages::fuse_core::Error as CoreError;
use fuse::stages::fuse_cpu::fused::CpuError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

/// The exception classes, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The class of `fuseblas._errors` named `name`.
fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let module = ERRORS.get_or_try_init(py, || PyModule::import(py, "fuseblas._errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// Which exception class an error is.
fn class_name(err: &fuse::Error) -> &'static str {
    use fuse::Error as E;
    match err {
        E::Failed(inner) => class_name(inner),
        // A size that does not fit is about the arrays or sizes given, not the script text.
        E::Script(CoreError::Sizes(_)) => "InputError",
        E::Script(_) => "ScriptError",
        E::HostMemory(_) | E::DeviceMemory { .. } | E::Cpu(CpuError::HostMemory(_)) => "OutOfMemoryError",
        e if e.is_unavailable() => "NoDeviceError",
        E::Bind(_)
        | E::UnknownInput { .. }
        | E::UnknownOutput { .. }
        | E::Precision { .. }
        | E::DataLength { .. }
        | E::Shape { .. }
        | E::NonFiniteLiteral { .. }
        | E::ForeignHandle { .. }
        | E::UnknownBackend { .. }
        | E::NoSuchPlan { .. }
        | E::Setting { .. } => "InputError",
        _ => "FuseError",
    }
}

/// The script position of an error, where it has one.
fn location(err: &fuse::Error) -> Option<&fuse::stages::fuse_core::Location> {
    match err {
        fuse::Error::Failed(inner) => location(inner),
        fuse::Error::Script(fuse::stages::fuse_core::Error::Input(diagnostic)) => Some(&diagnostic.location),
        _ => None,
    }
}

/// `err` as the Python exception of its class.
pub(crate) fn to_py(err: fuse::Error) -> PyErr {
    Python::attach(|py| match raise(py, &err) {
        Ok(e) | Err(e) => e,
    })
}

fn raise(py: Python<'_>, err: &fuse::Error) -> PyResult<PyErr> {
    let exception = class(py, class_name(err))?.call1((err.to_string(),))?;
    if let Some(at) = location(err) {
        exception.setattr("file", &at.file)?;
        exception.setattr("line", at.line)?;
        exception.setattr("column", at.column)?;
    }
    Ok(PyErr::from_value(exception))
}

/// An `InputError` (a `ValueError`) with `message`.
pub(crate) fn input_error(message: impl Into<String>) -> PyErr {
    Python::attach(
        |py| match class(py, "InputError").and_then(|c| c.call1((message.into(),))) {
            Ok(exception) => PyErr::from_value(exception),
            Err(e) => e,
        },
    )
}

/// `Result` of fuse, into one of Python.
pub(crate) trait IntoPy<T> {
    /// The error as its Python exception.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for fuse::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
