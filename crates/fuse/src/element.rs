//! The element types `fuse` computes in, and checked host arrays of them.

use std::fmt::{Debug, Display};

use fuse_core::{HostArray, HostData, Precision};

use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// An element type: `f32` (BLAS prefix `s`) or `f64` (prefix `d`). Sealed: scripts and kernels
/// exist in these two precisions only.
///
/// ```
/// use fuse::{Element, Precision};
///
/// assert_eq!(<f32 as Element>::PRECISION, Precision::F32);
/// let a = fuse::array(vec![2], vec![1.0f64, 2.0])?;
/// assert_eq!(f64::values(&a), Some(&[1.0, 2.0][..]));
/// assert_eq!(f32::values(&a), None);
/// # Ok::<(), fuse::Error>(())
/// ```
pub trait Element:
    sealed::Sealed + Copy + Debug + Display + PartialEq + Send + Sync + cudarc::driver::DeviceRepr + 'static
{
    /// The script precision of this type.
    const PRECISION: Precision;

    /// Wraps elements as host data of this precision.
    fn into_data(values: Vec<Self>) -> HostData;

    /// The elements of `array` if it has this precision.
    fn values(array: &HostArray) -> Option<&[Self]>;

    /// The value widened to f64 (exact).
    fn to_f64(self) -> f64;

    /// `value` in this type, rounded to nearest.
    fn from_f64(value: f64) -> Self;
}

/// Implements [`Element`] for `$t`, whose precision and host data are `$variant`.
macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const PRECISION: Precision = Precision::$variant;

            fn into_data(values: Vec<Self>) -> HostData {
                HostData::$variant(values)
            }

            fn values(array: &HostArray) -> Option<&[Self]> {
                match &array.data {
                    HostData::$variant(v) => Some(v),
                    _ => None,
                }
            }

            fn to_f64(self) -> f64 {
                f64::from(self)
            }

            fn from_f64(value: f64) -> Self {
                value as $t
            }
        }
    };
}

element!(f32, F32);
element!(f64, F64);

/// A row-major host array of `dims` holding `data`, checked: the data must fill the dimensions
/// exactly (`dims = []` is a scalar of one element; a dimension of 0, an empty array, as an
/// input of a script run at a size of 0).
///
/// ```
/// let a = fuse::array(vec![2, 3], vec![0.0f32; 6])?;
/// assert_eq!(a.dims, [2, 3]);
/// assert!(fuse::array(vec![2, 3], vec![0.0f32; 5]).is_err());
/// assert!(fuse::array(vec![0, 3], Vec::<f32>::new())?.data.is_empty());
/// # Ok::<(), fuse::Error>(())
/// ```
pub fn array<T: Element>(dims: Vec<usize>, data: Vec<T>) -> Result<HostArray> {
    exact_array("array", dims, data)
}

/// [`array`], naming `what` in the error.
pub(crate) fn exact_array<T: Element>(what: &str, dims: Vec<usize>, data: Vec<T>) -> Result<HostArray> {
    exact_len(what, &dims, data.len())?;
    Ok(HostArray {
        dims,
        data: T::into_data(data),
    })
}

/// [`exact_array`], and not empty: what a session holds.
pub(crate) fn checked_array<T: Element>(what: &str, dims: Vec<usize>, data: Vec<T>) -> Result<HostArray> {
    checked_len(what, &dims, data.len())?;
    exact_array(what, dims, data)
}

/// `len`, if it is the number of elements of `dims`; else an error naming `what`.
fn exact_len(what: &str, dims: &[usize], len: usize) -> Result<usize> {
    match dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)) {
        Some(want) if want == len => Ok(len),
        want => Err(data_length(what, dims, len, want.unwrap_or(usize::MAX))),
    }
}

/// [`exact_len`], and not 0: a session holds no empty arrays.
pub(crate) fn checked_len(what: &str, dims: &[usize], len: usize) -> Result<usize> {
    match exact_len(what, dims, len)? {
        0 => Err(data_length(what, dims, 0, 0)),
        len => Ok(len),
    }
}

fn data_length(what: &str, dims: &[usize], len: usize, want: usize) -> Error {
    Error::DataLength {
        what: what.to_string(),
        len,
        want,
        dims: dims.to_vec(),
    }
}
