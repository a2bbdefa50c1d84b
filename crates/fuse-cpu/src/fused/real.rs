//! The element types the fused backend computes in: `f32` for f32 scripts, `f64` for f64 ones.
//! Computing in the script's own precision (not in f64, like the reference) is what makes the
//! backend as fast as the memory allows — and as accurate as a BLAS of that precision.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

use fuse_core::{HostData, Precision};

/// A floating-point element type of the fused CPU backend.
pub trait Real:
    Copy
    + Debug
    + Default
    + PartialEq
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
{
    /// Zero.
    const ZERO: Self;
    /// The script precision it computes.
    const PRECISION: Precision;
    /// The nearest value to `v`.
    fn from_f64(v: f64) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// The elements of `data` when they are of this type.
    fn borrow(data: &HostData) -> Option<&[Self]>;
    /// Wraps elements of this type as host data.
    fn into_host(data: Vec<Self>) -> HostData;
}

macro_rules! real {
    ($t:ty, $precision:ident, $variant:ident) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const PRECISION: Precision = Precision::$precision;

            fn from_f64(v: f64) -> Self {
                v as $t
            }

            fn abs(self) -> Self {
                <$t>::abs(self)
            }

            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }

            fn borrow(data: &HostData) -> Option<&[Self]> {
                match data {
                    HostData::$variant(v) => Some(v),
                    _ => None,
                }
            }

            fn into_host(data: Vec<Self>) -> HostData {
                HostData::$variant(data)
            }
        }
    };
}

real!(f32, F32, F32);
real!(f64, F64, F64);
