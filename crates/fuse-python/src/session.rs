//! The lazy BLAS API: a session of recorded calls on values, run fused when a result is read.
//! One Python session holds a `fuse::Session` per precision, made when first needed, so that
//! each value's dtype picks its precision.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fuse::{AnyHandle, Backend, CallArg, CompileOptions, Forecast, Handle, Precision, Stats};
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat};

use crate::arrays::{fitted, to_python, Real};
use crate::device::{self, GpuArray};
use crate::errors::{input_error, IntoPy};
use crate::interrupt::interruptible;
use crate::program::{options, parse_backend};

/// The `fuse` sessions of one Python session, one per precision.
struct Sessions {
    backend: Backend,
    options: CompileOptions,
    f32: Option<fuse::Session<f32>>,
    f64: Option<fuse::Session<f64>>,
}

/// A precision's session within [`Sessions`].
trait Precise: Real + Into<f64> {
    fn session(sessions: &mut Sessions) -> fuse::Result<&fuse::Session<Self>>;
    fn wrap(handle: AnyHandle<Self>) -> Handles;
}

macro_rules! precise {
    ($t:ty, $field:ident, $variant:ident) => {
        impl Precise for $t {
            fn session(sessions: &mut Sessions) -> fuse::Result<&fuse::Session<$t>> {
                if sessions.$field.is_none() {
                    let options = sessions.options.clone();
                    sessions.$field = Some(fuse::Session::with_options(sessions.backend.clone(), options)?);
                }
                Ok(sessions.$field.as_ref().expect("made above"))
            }

            fn wrap(handle: AnyHandle<$t>) -> Handles {
                Handles::$variant(handle)
            }
        }
    };
}

precise!(f32, f32, F32);
precise!(f64, f64, F64);

/// A value's handle, in its precision.
#[derive(Clone)]
enum Handles {
    F32(AnyHandle<f32>),
    F64(AnyHandle<f64>),
}

impl Sessions {
    /// Whether the next flush of both precisions together is known to take less than
    /// [`INLINE_BELOW`]: nothing to compile, and each program ran that fast last time.
    fn next_flush_is_quick(&self) -> bool {
        let f32 = self.f32.as_ref().map(|s| s.forecast());
        let f64 = self.f64.as_ref().map(|s| s.forecast());
        let mut total = Duration::ZERO;
        for forecast in [f32, f64].into_iter().flatten() {
            match forecast {
                Forecast::Nothing => {}
                Forecast::Compile => return false,
                Forecast::Run(took) => total = total.saturating_add(took),
            }
        }
        total < INLINE_BELOW
    }
}

/// A flush known to take less than this runs on the calling thread (the GIL released): the
/// hand-over to a worker and back cost more than a small flush (BiCG from Python at 2048² f32:
/// 0.40 ms an iteration on a worker, 0.22 here), and Ctrl-C waits at most about this long.
const INLINE_BELOW: Duration = Duration::from_millis(20);

type Shared = Arc<Mutex<Sessions>>;

/// Runs `work`, which flushes the sessions first if calls are pending: here when that flush is
/// known to be quick, else on a worker that Ctrl-C walks away from, noting what it is if it
/// takes long (a new program compiles first: seconds on a GPU).
fn flushing<R, W>(py: Python<'_>, shared: &Shared, work: W) -> PyResult<R>
where
    R: Send + 'static,
    W: FnOnce() -> R + Send + 'static,
{
    let sessions = lock(shared);
    if sessions.next_flush_is_quick() {
        drop(sessions);
        return Ok(py.detach(work));
    }
    let note = format!(
        "a session flush on {} is compiling or running its calls (a new program compiles first: seconds on a GPU, cached on disk)",
        sessions.backend
    );
    drop(sessions);
    interruptible(py, &note, work)
}

fn lock(shared: &Shared) -> MutexGuard<'_, Sessions> {
    // A panic inside fuse while the sessions were held leaves them as consistent as an error.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// A lazy BLAS session: calls are recorded and run fused when a result is read.
#[pyclass(frozen, module = "fuseblas._core")]
pub struct Session {
    shared: Shared,
}

/// A value of a session: an array given to it, or the (maybe not yet computed) result of a
/// call. Dropping every reference to a result not yet computed makes it a temporary.
#[pyclass(frozen, module = "fuseblas._core")]
pub struct Value {
    shared: Shared,
    handle: Handles,
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (backend = "auto", threads = None))]
    fn new(backend: &str, threads: Option<usize>) -> PyResult<Self> {
        let sessions = Sessions {
            backend: parse_backend(backend)?,
            options: options(threads)?,
            f32: None,
            f64: None,
        };
        Ok(Session {
            shared: Arc::new(Mutex::new(sessions)),
        })
    }

    /// The backend the session runs on.
    #[getter]
    fn backend(&self) -> String {
        lock(&self.shared).backend.to_string()
    }

    /// A value holding a copy of `array` (float32 or float64, 0 to 2 dimensions): values never
    /// change, and a numpy array may.
    fn array(&self, array: &Bound<'_, PyAny>) -> PyResult<Value> {
        if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
            return self.array_as(a);
        }
        match array.cast::<PyArrayDyn<f64>>() {
            Ok(a) => self.array_as(a),
            Err(_) => Err(input_error("a session holds float32 or float64 numpy arrays")),
        }
    }

    /// A value holding a copy, made on the GPU, of `array`: a CuPy, PyTorch or JAX array in the
    /// memory of the session's GPU (taken through DLPack), float32 or float64, 1 or 2
    /// dimensions, C-contiguous.
    fn array_from_gpu(&self, array: &Bound<'_, PyAny>) -> PyResult<Value> {
        let backend = lock(&self.shared).backend.clone();
        let ordinal = device::cuda_device(array)?.unwrap_or(0);
        let imported = device::import(array, "the array", None, ordinal, (&backend, "session"))?;
        let mut sessions = lock(&self.shared);
        let handle = match imported.array.precision() {
            Precision::F32 => Handles::F32(
                f32::session(&mut sessions)
                    .py_err()?
                    .array_from_device(&imported.array)
                    .py_err()?,
            ),
            Precision::F64 => Handles::F64(
                f64::session(&mut sessions)
                    .py_err()?
                    .array_from_device(&imported.array)
                    .py_err()?,
            ),
        };
        drop(sessions);
        Ok(self.value(handle))
    }

    /// A copy, made on the GPU, of `value`'s contents as a `DeviceArray` (computed first if
    /// pending); the session must run on a GPU.
    fn to_device(&self, value: &Value) -> PyResult<GpuArray> {
        let mut sessions = lock(&self.shared);
        let array = match &value.handle {
            Handles::F32(h) => f32::session(&mut sessions).py_err()?.to_device_array(h),
            Handles::F64(h) => f64::session(&mut sessions).py_err()?.to_device_array(h),
        }
        .py_err()?;
        GpuArray::new(array)
    }

    /// A run-time scalar `value` of `dtype` (`"float32"` or `"float64"`), which it must fit.
    fn scalar(&self, value: f64, dtype: &str) -> PyResult<Value> {
        let what = || "Session.scalar".to_string();
        let mut sessions = lock(&self.shared);
        let handle = match dtype {
            "float32" => Handles::F32(AnyHandle::Scalar(
                f32::session(&mut sessions).py_err()?.scalar(fitted(value, what)?),
            )),
            "float64" => Handles::F64(AnyHandle::Scalar(
                f64::session(&mut sessions).py_err()?.scalar(fitted(value, what)?),
            )),
            other => {
                return Err(input_error(format!(
                    "dtype `{other}`: a session computes in float32 or float64"
                )))
            }
        };
        Ok(self.value(handle))
    }

    /// Records a call of library function `function` (`"gemv"`, no precision prefix) on `args`,
    /// values of one dtype or floats (compile-time constants).
    fn call(&self, function: &str, args: Vec<Bound<'_, PyAny>>) -> PyResult<Value> {
        let mut values: Vec<Option<Handles>> = Vec::with_capacity(args.len());
        for arg in &args {
            values.push(match arg.cast::<Value>() {
                Ok(v) => Some(v.get().handle.clone()),
                Err(_) => None,
            });
        }
        let precision = values.iter().flatten().next().map(|h| matches!(h, Handles::F64(_)));
        match precision {
            Some(false) => self.call_as::<f32>(function, &args, &values),
            Some(true) => self.call_as::<f64>(function, &args, &values),
            None => Err(input_error(format!(
                "{function}: at least one argument must be a value of the session (its dtype picks the precision)"
            ))),
        }
    }

    /// Runs every recorded call that a held value depends on.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let shared = Arc::clone(&self.shared);
        flushing(py, &self.shared, move || {
            let sessions = lock(&shared);
            sessions.f32.as_ref().map_or(Ok(()), |s| s.flush())?;
            sessions.f64.as_ref().map_or(Ok(()), |s| s.flush())
        })?
        .py_err()
    }

    /// What the session has done so far, both precisions together.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let sessions = lock(&self.shared);
        let all = [
            sessions.f32.as_ref().map(|s| s.stats()),
            sessions.f64.as_ref().map(|s| s.stats()),
        ];
        let sum = all.into_iter().flatten().fold(Stats::default(), |a, b| a + b);
        let dict = PyDict::new(py);
        dict.set_item("flushes", sum.flushes)?;
        dict.set_item("compilations", sum.compilations)?;
        dict.set_item("cache_hits", sum.cache_hits)?;
        dict.set_item("calls", sum.calls)?;
        dict.set_item("to_device", sum.to_device)?;
        dict.set_item("from_device", sum.from_device)?;
        dict.set_item("device_allocations", sum.device_allocations)?;
        dict.set_item("compute_seconds", sum.compute.as_secs_f64())?;
        Ok(dict)
    }

    /// The scripts the next flush would run (float32 first), empty if nothing waits.
    fn pending_scripts(&self) -> Vec<String> {
        let sessions = lock(&self.shared);
        let f32 = sessions.f32.as_ref().and_then(|s| s.pending_script());
        let f64 = sessions.f64.as_ref().and_then(|s| s.pending_script());
        f32.into_iter().chain(f64).collect()
    }
}

impl Session {
    fn value(&self, handle: Handles) -> Value {
        Value {
            shared: Arc::clone(&self.shared),
            handle,
        }
    }

    fn array_as<T: Precise>(&self, array: &Bound<'_, PyArrayDyn<T>>) -> PyResult<Value> {
        let dims = array.shape().to_vec();
        // In logical (C) order whatever the layout: this is the one copy a session makes, made
        // only where the host can give the memory.
        let readonly = array.readonly();
        let what = || format!("a session's copy of a {} array of shape {dims:?}", T::DTYPE);
        let data = fuse::try_collect(readonly.as_array().iter().copied(), what).py_err()?;
        let mut sessions = lock(&self.shared);
        let session = T::session(&mut sessions).py_err()?;
        let handle = match dims[..] {
            [] => AnyHandle::Scalar(session.scalar(data[0])),
            [_] => AnyHandle::Vector(session.vector(data).py_err()?),
            [rows, cols] => AnyHandle::Matrix(session.matrix(rows, cols, data).py_err()?),
            _ => {
                return Err(input_error(format!(
                    "an array of shape {dims:?}: sessions hold scalars, vectors and matrices"
                )))
            }
        };
        Ok(self.value(T::wrap(handle)))
    }

    fn call_as<T: Precise>(
        &self,
        function: &str,
        args: &[Bound<'_, PyAny>],
        values: &[Option<Handles>],
    ) -> PyResult<Value> {
        let mut handles: Vec<AnyHandle<T>> = Vec::new();
        let mut literals: Vec<Option<T>> = Vec::new();
        for (i, (arg, value)) in args.iter().zip(values).enumerate() {
            match value {
                Some(h) => {
                    handles.push(typed::<T>(h).ok_or_else(|| {
                        input_error(format!(
                            "{function}: argument {} is {}, the others {}",
                            i + 1,
                            dtype(h),
                            T::DTYPE
                        ))
                    })?);
                    literals.push(None);
                }
                None => literals.push(Some(literal::<T>(arg, function, i)?)),
            }
        }
        let mut next = handles.iter();
        let call_args: Vec<CallArg<'_, T>> = literals
            .iter()
            .map(|l| match l {
                Some(v) => CallArg::Literal(*v),
                None => CallArg::Handle(next.next().expect("one handle per value argument") as &dyn Handle<T>),
            })
            .collect();
        let mut sessions = lock(&self.shared);
        let result = T::session(&mut sessions)
            .py_err()?
            .call(function, &call_args)
            .py_err()?;
        Ok(self.value(T::wrap(result)))
    }
}

/// A literal scalar argument: a Python float (the package's Python half makes it one), which
/// must fit `T`.
fn literal<T: Real>(arg: &Bound<'_, PyAny>, function: &str, index: usize) -> PyResult<T> {
    let value = arg.cast::<PyFloat>().map_err(|_| {
        input_error(format!(
            "{function}: argument {} is a {}, not a value of the session or a float",
            index + 1,
            arg.get_type()
        ))
    })?;
    fitted(value.value(), || format!("{function}: argument {}", index + 1))
}

/// `handle` as a handle of `T`, if it is of that precision.
fn typed<T: Precise>(handle: &Handles) -> Option<AnyHandle<T>> {
    let any: &dyn std::any::Any = match handle {
        Handles::F32(h) => h,
        Handles::F64(h) => h,
    };
    any.downcast_ref::<AnyHandle<T>>().cloned()
}

fn dtype(handle: &Handles) -> &'static str {
    match handle {
        Handles::F32(_) => f32::DTYPE,
        Handles::F64(_) => f64::DTYPE,
    }
}

#[pymethods]
impl Value {
    /// The extents: `()` for a scalar, `(n,)` for a vector, `(m, n)` for a matrix.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        match &self.handle {
            Handles::F32(h) => h.dims().to_vec(),
            Handles::F64(h) => h.dims().to_vec(),
        }
    }

    /// `"float32"` or `"float64"`.
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype(&self.handle)
    }

    /// The value: a numpy array (a copy: the session keeps its own), or a float for a scalar.
    /// Runs the recorded calls first if it is not computed yet (Ctrl-C answered).
    fn read(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let (shared, handle) = (Arc::clone(&self.shared), self.handle.clone());
        let read_now = move || {
            let mut sessions = lock(&shared);
            match handle {
                Handles::F32(h) => read::<f32>(&mut sessions, &h),
                Handles::F64(h) => read::<f64>(&mut sessions, &h),
            }
        };
        let array = flushing(py, &self.shared, read_now)?.py_err()?;
        to_python(py, array)
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        let value = self.read(py)?;
        match value.bind(py).cast::<PyFloat>() {
            Ok(f) => Ok(f.value()),
            Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "only a scalar value converts to float; this one has shape {:?}",
                self.shape()
            ))),
        }
    }

    /// numpy's array protocol: `numpy.asarray(value)` reads it (see [`Value::read`]).
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__(&self, py: Python<'_>, dtype: Option<Bound<'_, PyAny>>, copy: Option<bool>) -> PyResult<Py<PyAny>> {
        let _ = copy; // every read is a fresh array, owned by nobody else
        let value = self.read(py)?;
        let dtype = match dtype {
            Some(d) if !d.is_none() => d,
            _ => pyo3::types::PyString::new(py, self.dtype()).into_any(),
        };
        let numpy = py.import("numpy")?;
        Ok(numpy.call_method1("asarray", (value, dtype))?.unbind())
    }

    fn __repr__(&self) -> String {
        format!("Value(shape={:?}, dtype={})", self.shape(), self.dtype())
    }
}

fn read<T: Precise>(sessions: &mut Sessions, handle: &AnyHandle<T>) -> fuse::Result<fuse::HostArray> {
    let values = T::session(sessions)?.read(handle)?;
    let dims = handle.dims().to_vec();
    Ok(fuse::HostArray {
        dims,
        data: T::into_data(values),
    })
}
