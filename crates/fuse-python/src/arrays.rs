//! numpy arrays in and out: inputs read in place (C-contiguous arrays of the script's dtype),
//! outputs handed over as the buffers fuse computed into.

use std::ops::Deref;

use fuse::{ArrayView, DataView, Element, HostArray, HostData};
use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyWeakrefReference};

use crate::errors::input_error;

/// An element type both fuse and numpy know.
pub(crate) trait Real: Element + numpy::Element + Copy + std::fmt::LowerExp {
    /// The elements as fuse's borrowed host data.
    fn view(values: &[Self]) -> DataView<'_>;
    /// numpy's name for the type.
    const DTYPE: &'static str;
    /// The largest finite value.
    const MAX: Self;
}

impl Real for f32 {
    fn view(values: &[f32]) -> DataView<'_> {
        DataView::F32(values)
    }
    const DTYPE: &'static str = "float32";
    const MAX: f32 = f32::MAX;
}

impl Real for f64 {
    fn view(values: &[f64]) -> DataView<'_> {
        DataView::F64(values)
    }
    const DTYPE: &'static str = "float64";
    const MAX: f64 = f64::MAX;
}

/// `value` in `T`, or an `InputError` saying so where a finite value does not fit (1e300 would
/// be inf in float32); `what` names the value.
pub(crate) fn fitted<T: Real>(value: f64, what: impl FnOnce() -> String) -> PyResult<T> {
    let converted = T::from_f64(value);
    if value.is_finite() && !converted.to_f64().is_finite() {
        return Err(input_error(format!(
            "{}: {value:e} does not fit {} (at most {:e} in magnitude)",
            what(),
            T::DTYPE,
            T::MAX
        )));
    }
    Ok(converted)
}

/// A numpy array that fuse reads in place, with a weak reference to the array that owns its
/// memory: numpy refuses to resize an array that has weak references (`ndarray.resize` raises
/// even with `refcheck=False`), so the memory stays where it is while fuse reads it with the GIL
/// released and another thread runs.
pub(crate) struct InPlace<'py, T: Real> {
    // Declared first, so dropped first: the borrow is released while the array is still pinned.
    array: PyReadonlyArrayDyn<'py, T>,
    _pin: Bound<'py, PyWeakrefReference>,
}

impl<'py, T: Real> Deref for InPlace<'py, T> {
    type Target = PyReadonlyArrayDyn<'py, T>;

    fn deref(&self) -> &Self::Target {
        &self.array
    }
}

/// The numpy array at the end of `array`'s chain of bases: the one that owns the memory, the
/// only one numpy can resize.
fn owner<'py>(array: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let mut owner = array.clone();
    loop {
        let base = owner.getattr("base")?;
        if base.cast::<PyUntypedArray>().is_err() {
            return Ok(owner);
        }
        owner = base;
    }
}

/// `object` as a numpy array of `T` that fuse may read in place: C-contiguous, of dtype `T`,
/// pinned ([`InPlace`]). The package's Python half converts what it may first; anything else is
/// an `InputError` naming `what`.
pub(crate) fn borrow<'py, T: Real>(object: &Bound<'py, PyAny>, what: &str) -> PyResult<InPlace<'py, T>> {
    let array = object.cast::<PyArrayDyn<T>>().map_err(|_| {
        let dtype = object
            .getattr("dtype")
            .map(|d| d.to_string())
            .unwrap_or_else(|_| object.get_type().to_string());
        input_error(format!("{what} is {dtype}, not a numpy array of {}", T::DTYPE))
    })?;
    if !array.is_c_contiguous() {
        return Err(input_error(format!(
            "{what} is not C-contiguous (fuseblas reads arrays in place, row by row)"
        )));
    }
    Ok(InPlace {
        array: array.readonly(),
        _pin: PyWeakrefReference::new(&owner(object)?)?,
    })
}

/// A view of `array`'s elements where they are: no copy.
pub(crate) fn view<'a, T: Real>(array: &'a InPlace<'_, T>) -> PyResult<ArrayView<'a>> {
    let values = array
        .as_slice()
        .map_err(|e| input_error(format!("cannot read the array in place: {e}")))?;
    Ok(ArrayView {
        dims: array.shape().to_vec(),
        data: T::view(values),
    })
}

/// An output for Python: a scalar as a float, an array as a numpy array that owns fuse's
/// buffer (no copy).
pub(crate) fn to_python(py: Python<'_>, array: HostArray) -> PyResult<Py<PyAny>> {
    let HostArray { dims, data } = array;
    match data {
        HostData::F32(values) => numpy_or_float(py, dims, values),
        HostData::F64(values) => numpy_or_float(py, dims, values),
    }
}

fn numpy_or_float<T: Real + Into<f64>>(py: Python<'_>, dims: Vec<usize>, values: Vec<T>) -> PyResult<Py<PyAny>> {
    if dims.is_empty() {
        let value: f64 = values.first().copied().map_or(f64::NAN, Into::into);
        return Ok(PyFloat::new(py, value).into_any().unbind());
    }
    let array = ArrayD::from_shape_vec(IxDyn(&dims), values)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("an output of the wrong length: {e}")))?;
    Ok(array.into_pyarray(py).into_any().unbind())
}

/// The address of the memory fuse reads for `array` when it is passed as an input: the
/// array's own data where it is read in place. For tests of the no-copy rule.
#[pyfunction]
pub(crate) fn view_address(array: &Bound<'_, PyAny>) -> PyResult<usize> {
    let address = match borrow::<f32>(array, "the array") {
        Ok(a) => view(&a)?.data.address(),
        Err(_) => view(&borrow::<f64>(array, "the array")?)?.data.address(),
    };
    Ok(address)
}

/// Where a view's elements start.
trait Address {
    fn address(&self) -> usize;
}

impl Address for DataView<'_> {
    fn address(&self) -> usize {
        match self {
            DataView::F32(v) => v.as_ptr() as usize,
            DataView::F64(v) => v.as_ptr() as usize,
        }
    }
}
