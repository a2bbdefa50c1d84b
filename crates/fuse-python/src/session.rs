//! The lazy BLAS API: a session of recorded calls on values, run fused when a result is read.
//! One Python session holds a `fuse::Session` per precision, made when first needed, so that
//! each value's dtype picks its precision.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fuse::stages::fuse_core::DataView;
use fuse::{AnyHandle, Backend, CallArg, CompileOptions, Forecast, Handle, Precision, Stats};
use numpy::{PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat};

use crate::arrays::{fitted, to_python, Real};
use crate::device::{self, GpuArray};
use crate::errors::{input_error, IntoPy};
use crate::interrupt::interruptible;
use crate::program::{options, parse_backend};

/// The `fuse` sessions of one Python session, one per precision.
pub(crate) struct Sessions {
    backend: Backend,
    options: CompileOptions,
    f32: Option<fuse::Session<f32>>,
    f64: Option<fuse::Session<f64>>,
}

/// A precision's session within [`Sessions`].
pub(crate) trait Precise: Real + Into<f64> {
    fn session(sessions: &mut Sessions) -> fuse::Result<&fuse::Session<Self>>;
    fn wrap(handle: AnyHandle<Self>) -> Handles;
    fn data_view(elements: &[Self]) -> DataView<'_>;
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

            fn data_view(elements: &[$t]) -> DataView<'_> {
                DataView::$variant(elements)
            }
        }
    };
}

precise!(f32, f32, F32);
precise!(f64, f64, F64);

/// A numpy array's elements, read in place by a session ([`fuse::InPlace`]): the array is
/// kept alive by the reference held here, its buffer C-contiguous. Python code writing into it
/// while a session reads it is the caller's mistake, as with SciPy's solvers, which read the
/// array in place too.
struct InNumpy<T> {
    _array: Py<PyArrayDyn<T>>,
    data: *const T,
    len: usize,
}

impl<T: Precise> InNumpy<T> {
    fn new(array: &Bound<'_, PyArrayDyn<T>>) -> PyResult<Self> {
        if !array.is_c_contiguous() {
            return Err(input_error(
                "copy=False reads an array in place: it must be C-contiguous (np.ascontiguousarray)",
            ));
        }
        let readonly = array.readonly();
        let slice = readonly.as_slice().map_err(|e| input_error(e.to_string()))?;
        Ok(InNumpy {
            _array: array.clone().unbind(),
            data: slice.as_ptr(),
            len: slice.len(),
        })
    }
}

// SAFETY: the pointer is into the buffer of the array referenced by `_array`, which numpy
// keeps (and does not move: an array with other references cannot be resized) while it lives.
unsafe impl<T: Precise> Send for InNumpy<T> {}
// SAFETY: as for `Send`; the elements are only read.
unsafe impl<T: Precise> Sync for InNumpy<T> {}

// SAFETY: `elements` is the same C-contiguous buffer each time, alive as long as `self`.
unsafe impl<T: Precise> fuse::InPlace for InNumpy<T> {
    fn elements(&self) -> DataView<'_> {
        // SAFETY: `data` and `len` describe the array's contiguous buffer (see `new`).
        T::data_view(unsafe { std::slice::from_raw_parts(self.data, self.len) })
    }
}

/// A value's handle, in its precision.
#[derive(Clone)]
pub(crate) enum Handles {
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

pub(crate) type Shared = Arc<Mutex<Sessions>>;

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

pub(crate) fn lock(shared: &Shared) -> MutexGuard<'_, Sessions> {
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
    pub(crate) shared: Shared,
    pub(crate) handle: Handles,
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
    /// change, and a numpy array may. With `copy=False`, a C-contiguous matrix is read in place
    /// instead — no copy, no fresh memory — and must not change while the value lives.
    #[pyo3(signature = (array, copy = true))]
    fn array(&self, array: &Bound<'_, PyAny>, copy: bool) -> PyResult<Value> {
        if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
            return self.array_as(a, copy);
        }
        match array.cast::<PyArrayDyn<f64>>() {
            Ok(a) => self.array_as(a, copy),
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
        let operands = args
            .iter()
            .enumerate()
            .map(|(i, arg)| match arg.cast::<Value>() {
                Ok(v) => Ok(Operand::Value(v.get().handle.clone())),
                Err(_) => literal(arg, function, i).map(Operand::Number),
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.record(function, &operands, &|i| format!("{function}: argument {}", i + 1))
    }

    /// Records scalar function `function` (`"sqrt"`, `"max"`, …) on `args`: scalar values of
    /// this session (of one dtype) and real numbers; anything else is a `TypeError`.
    fn scalar_call(&self, function: &str, args: Vec<Bound<'_, PyAny>>) -> PyResult<Value> {
        let name = |i: usize| format!("{function}: argument {}", i + 1);
        self.arithmetic(function, &args, &name)
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

    fn array_as<T: Precise>(&self, array: &Bound<'_, PyArrayDyn<T>>, copy: bool) -> PyResult<Value> {
        let dims = array.shape().to_vec();
        if !copy {
            let [rows, cols] = dims[..] else {
                return Err(input_error(format!(
                    "copy=False reads a matrix in place: an array of shape {dims:?} is not one"
                )));
            };
            let memory = Arc::new(InNumpy::new(array)?);
            let mut sessions = lock(&self.shared);
            let matrix = T::session(&mut sessions).py_err()?.matrix_in_place(rows, cols, memory);
            return Ok(self.value(T::wrap(AnyHandle::Matrix(matrix.py_err()?))));
        }
        // In logical (C) order whatever the layout: this is the one copy a session makes, made
        // only where the host can give the memory.
        let readonly = array.readonly();
        let what = || format!("a session's copy of a {} array of shape {dims:?}", T::DTYPE);
        // A C-contiguous array copies as one slice (a memcpy: an element walk took several
        // times as long); `as_slice` alone also takes a Fortran-ordered one, in the wrong order.
        let slice = array.is_c_contiguous().then(|| readonly.as_slice().ok()).flatten();
        let data = match slice {
            Some(slice) => fuse::try_collect(slice.iter().copied(), what),
            None => fuse::try_collect(readonly.as_array().iter().copied(), what),
        }
        .py_err()?;
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

    /// Records `function` on `operands` in the precision of the first value among them;
    /// `name(i)` names operand `i` in messages.
    fn record(&self, function: &str, operands: &[Operand], name: &dyn Fn(usize) -> String) -> PyResult<Value> {
        let first = operands.iter().find_map(|o| match o {
            Operand::Value(h) => Some(h),
            Operand::Number(_) => None,
        });
        match first {
            Some(Handles::F32(_)) => self.call_as::<f32>(function, operands, name),
            Some(Handles::F64(_)) => self.call_as::<f64>(function, operands, name),
            None => Err(input_error(format!(
                "{function}: at least one argument must be a value of the session (its dtype picks the precision)"
            ))),
        }
    }

    fn call_as<T: Precise>(
        &self,
        function: &str,
        operands: &[Operand],
        name: &dyn Fn(usize) -> String,
    ) -> PyResult<Value> {
        let mut handles: Vec<AnyHandle<T>> = Vec::new();
        let mut literals: Vec<Option<T>> = Vec::new();
        for (i, operand) in operands.iter().enumerate() {
            match operand {
                Operand::Value(h) => {
                    handles.push(
                        typed::<T>(h).ok_or_else(|| {
                            input_error(format!("{} is {}, the others {}", name(i), dtype(h), T::DTYPE))
                        })?,
                    );
                    literals.push(None);
                }
                Operand::Number(v) => literals.push(Some(fitted(*v, || name(i))?)),
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

    /// Records scalar function `function` on `args` (see [`Session::scalar_call`]), each checked
    /// first: a scalar value of this session, of the others' dtype, or a real number.
    fn arithmetic(&self, function: &str, args: &[Bound<'_, PyAny>], name: &dyn Fn(usize) -> String) -> PyResult<Value> {
        let take = "scalar arithmetic takes scalar values of one session and real numbers";
        let mut operands = Vec::with_capacity(args.len());
        for (i, arg) in args.iter().enumerate() {
            let operand = match arg.cast::<Value>() {
                Ok(v) => {
                    let v = v.get();
                    if !Arc::ptr_eq(&v.shared, &self.shared) {
                        return Err(PyTypeError::new_err(format!(
                            "{} is a value of another session; {take}",
                            name(i)
                        )));
                    }
                    if !v.shape().is_empty() {
                        let kind = if v.shape().len() == 1 { "vector" } else { "matrix" };
                        return Err(PyTypeError::new_err(format!(
                            "{} is a {kind} of shape {:?}, not a scalar; {take}",
                            name(i),
                            v.shape()
                        )));
                    }
                    Operand::Value(v.handle.clone())
                }
                Err(_) => Operand::Number(real_number(arg).map_err(|e| match e {
                    NotReal::Type => PyTypeError::new_err(format!("{} is a {}; {take}", name(i), arg.get_type())),
                    NotReal::Range => input_error(format!("{}: {arg} does not fit float64", name(i))),
                })?),
            };
            operands.push(operand);
        }
        let dtypes: Vec<(usize, &'static str)> = operands
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o {
                Operand::Value(h) => Some((i, dtype(h))),
                Operand::Number(_) => None,
            })
            .collect();
        if let Some(&(j, other)) = dtypes.iter().find(|(_, d)| *d != dtypes[0].1) {
            return Err(PyTypeError::new_err(format!(
                "{} is {other}, the others {}; one scalar call computes in one precision",
                name(j),
                dtypes[0].1
            )));
        }
        self.record(function, &operands, name)
    }
}

/// An argument of a recorded call: a value of the session or a number (a literal).
enum Operand {
    Value(Handles),
    Number(f64),
}

/// Why an object is not a real number for scalar arithmetic.
enum NotReal {
    /// Not a number at all (a str, a complex, a bool, an array).
    Type,
    /// An int past float64's range.
    Range,
}

/// `arg` as a float if it is a real number: an instance of `numbers.Real` (Python and numpy
/// ints and floats) other than a bool, or a 0-d numpy array of one.
fn real_number(arg: &Bound<'_, PyAny>) -> Result<f64, NotReal> {
    static REAL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = arg.py();
    if let Ok(array) = arg.cast::<PyUntypedArray>() {
        if array.ndim() != 0 || !matches!(array.dtype().kind(), b'i' | b'u' | b'f') {
            return Err(NotReal::Type);
        }
        let item = array.call_method0("item").map_err(|_| NotReal::Type)?;
        return real_number(&item);
    }
    let real = REAL
        .get_or_try_init(py, || {
            py.import("numbers").and_then(|m| m.getattr("Real")).map(Bound::unbind)
        })
        .map_err(|_| NotReal::Type)?;
    if arg.is_instance_of::<PyBool>() || !arg.is_instance(real.bind(py)).unwrap_or(false) {
        return Err(NotReal::Type);
    }
    arg.extract::<f64>().map_err(|_| NotReal::Range)
}

/// A literal scalar argument: a Python float (the package's Python half makes it one).
fn literal(arg: &Bound<'_, PyAny>, function: &str, index: usize) -> PyResult<f64> {
    let value = arg.cast::<PyFloat>().map_err(|_| {
        input_error(format!(
            "{function}: argument {} is a {}, not a value of the session or a float",
            index + 1,
            arg.get_type()
        ))
    })?;
    Ok(value.value())
}

/// `handle` as a handle of `T`, if it is of that precision.
pub(crate) fn typed<T: Precise>(handle: &Handles) -> Option<AnyHandle<T>> {
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

    /// The session the value belongs to.
    #[getter]
    fn session(&self) -> Session {
        session_of(self)
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

    /// numpy defers to this class's operators (`numpy.float32(2) * v` records a call rather
    /// than reading `v` through `__array__`).
    #[classattr]
    fn __array_ufunc__(py: Python<'_>) -> Py<PyAny> {
        py.None()
    }

    /// `a + b` of a scalar value and a scalar value of the same session or a real number:
    /// recorded as a call of `plus` (computed on the device, nothing read back).
    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "plus", "+", other, false)
    }

    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "plus", "+", other, true)
    }

    /// `a - b`, recorded as a call of `sub` (see `__add__`).
    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "sub", "-", other, false)
    }

    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "sub", "-", other, true)
    }

    /// `a * b`, recorded as a call of `mul` (see `__add__`).
    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "mul", "*", other, false)
    }

    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "mul", "*", other, true)
    }

    /// `a / b`, recorded as a call of `div` (IEEE: ±inf or NaN where b is 0; see `__add__`).
    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "div", "/", other, false)
    }

    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Value> {
        binary(slf, "div", "/", other, true)
    }

    /// `-a`, recorded as a call of `neg`.
    fn __neg__(slf: &Bound<'_, Self>) -> PyResult<Value> {
        unary(slf, "neg", "-")
    }

    /// `abs(a)`, recorded as a call of `abs`.
    fn __abs__(slf: &Bound<'_, Self>) -> PyResult<Value> {
        unary(slf, "abs", "abs")
    }
}

/// `value`'s session, to record calls in.
fn session_of(value: &Value) -> Session {
    Session {
        shared: Arc::clone(&value.shared),
    }
}

/// `slf <operator> other` (`other <operator> slf` where `reflected`), recorded as `function`.
fn binary(
    slf: &Bound<'_, Value>,
    function: &str,
    operator: &str,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Value> {
    let args = if reflected {
        [other.clone(), slf.clone().into_any()]
    } else {
        [slf.clone().into_any(), other.clone()]
    };
    let name = |i: usize| format!("`{operator}`: the {} operand", ["left", "right"][i]);
    session_of(slf.get()).arithmetic(function, &args, &name)
}

/// `<operator> slf`, recorded as `function`.
fn unary(slf: &Bound<'_, Value>, function: &str, operator: &str) -> PyResult<Value> {
    let name = |_| format!("`{operator}`: the operand");
    session_of(slf.get()).arithmetic(function, &[slf.clone().into_any()], &name)
}

fn read<T: Precise>(sessions: &mut Sessions, handle: &AnyHandle<T>) -> fuse::Result<fuse::HostArray> {
    let values = T::session(sessions)?.read(handle)?;
    let dims = handle.dims().to_vec();
    Ok(fuse::HostArray {
        dims,
        data: T::into_data(values),
    })
}
