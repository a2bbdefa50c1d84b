//! The element types the fused backend computes in: `f32` for f32 scripts, `f64` for f64 ones.
//! Computing in the script's own precision (not in f64, like the reference) is what makes the
//! backend as fast as the memory allows — and as accurate as a BLAS of that precision.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

use fuse_core::{DataView, HostData, Precision};
use pulp::Simd;

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
    + PartialOrd
    + bytemuck::Zeroable
{
    /// Zero.
    const ZERO: Self;
    /// Negative zero: the identity of addition (`-0 + x` is `x` for every `x`, a negative
    /// zero included, where `0 + -0` is `0`).
    const NEG_ZERO: Self;
    /// Blue's thresholds and scales for a norm's squares, LAPACK's for this precision
    /// (`la_xnrm2`): magnitudes below `NORM_SMALL` are scaled up by `NORM_UP` before squaring,
    /// above `NORM_BIG` down by `NORM_DOWN`.
    const NORM_SMALL: Self;
    /// See [`Real::NORM_SMALL`].
    const NORM_BIG: Self;
    /// See [`Real::NORM_SMALL`].
    const NORM_UP: Self;
    /// See [`Real::NORM_SMALL`].
    const NORM_DOWN: Self;
    /// The script precision it computes.
    const PRECISION: Precision;
    /// The nearest value to `v`.
    fn from_f64(v: f64) -> Self;
    /// The same number in f64 (exact).
    fn to_f64(self) -> f64;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// The elements of `data` when they are of this type.
    fn borrow(data: DataView<'_>) -> Option<&[Self]>;
    /// Wraps elements of this type as host data.
    fn into_host(data: Vec<Self>) -> HostData;

    /// A SIMD vector of this type in the instruction set `S` (pulp's `f32s`, `f64s`): one
    /// kernel body serves every width, chosen at run time.
    type Lanes<S: Simd>: Copy;
    /// `v` in every lane.
    fn splat<S: Simd>(simd: S, v: Self) -> Self::Lanes<S>;
    /// `a + b`, lane by lane.
    fn add_lanes<S: Simd>(simd: S, a: Self::Lanes<S>, b: Self::Lanes<S>) -> Self::Lanes<S>;
    /// `a·b`, lane by lane.
    fn mul_lanes<S: Simd>(simd: S, a: Self::Lanes<S>, b: Self::Lanes<S>) -> Self::Lanes<S>;
    /// `a·b + c`, lane by lane: one fused multiply-add where the CPU has it (a rounding
    /// fewer), a multiplication and an addition where not.
    fn mul_add<S: Simd>(simd: S, a: Self::Lanes<S>, b: Self::Lanes<S>, c: Self::Lanes<S>) -> Self::Lanes<S>;
    /// The sum of the lanes.
    fn reduce_sum<S: Simd>(simd: S, a: Self::Lanes<S>) -> Self;
    /// `x` as whole vectors and the elements past the last one.
    fn as_lanes<S: Simd>(x: &[Self]) -> (&[Self::Lanes<S>], &[Self]);
    /// `x` as whole vectors and the elements past the last one, writable.
    fn as_mut_lanes<S: Simd>(x: &mut [Self]) -> (&mut [Self::Lanes<S>], &mut [Self]);
    /// The elements of `x` (fewer than a vector holds) in the first lanes, zeros in the rest:
    /// one masked load where the instruction set has them.
    fn partial_load<S: Simd>(simd: S, x: &[Self]) -> Self::Lanes<S>;
    /// The first lanes of `v` into `x` (fewer elements than a vector holds).
    fn partial_store<S: Simd>(simd: S, x: &mut [Self], v: Self::Lanes<S>);
    /// `v` with lane `l` holding lane `(l + by) mod lanes` (one permutation).
    fn rotate_left<S: Simd>(simd: S, v: Self::Lanes<S>, by: usize) -> Self::Lanes<S>;
    /// The lanes below `count` from `below`, the others from `rest`.
    fn select_below<S: Simd>(simd: S, count: usize, below: Self::Lanes<S>, rest: Self::Lanes<S>) -> Self::Lanes<S>;
}

macro_rules! real {
    ($t:ty, $precision:ident, $variant:ident, $power:ident, [$small:expr, $big:expr, $up:expr, $down:expr],
     $lanes:ident, [$splat:ident, $add:ident, $mul:ident, $mul_add:ident, $reduce:ident, $split:ident, $split_mut:ident,
     $partial_load:ident, $partial_store:ident, $rotate_left:ident, $select:ident],
     [$index:ty, $indices:ident, $splat_index:ident, $less_than:ident]) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const NEG_ZERO: Self = -0.0;
            const NORM_SMALL: Self = $power($small);
            const NORM_BIG: Self = $power($big);
            const NORM_UP: Self = $power($up);
            const NORM_DOWN: Self = $power($down);
            const PRECISION: Precision = Precision::$precision;

            fn from_f64(v: f64) -> Self {
                v as $t
            }

            fn to_f64(self) -> f64 {
                self as f64
            }

            fn abs(self) -> Self {
                <$t>::abs(self)
            }

            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }

            fn borrow(data: DataView<'_>) -> Option<&[Self]> {
                match data {
                    DataView::$variant(v) => Some(v),
                    _ => None,
                }
            }

            fn into_host(data: Vec<Self>) -> HostData {
                HostData::$variant(data)
            }

            type Lanes<S: Simd> = S::$lanes;

            #[inline(always)]
            fn splat<S: Simd>(simd: S, v: Self) -> S::$lanes {
                simd.$splat(v)
            }

            #[inline(always)]
            fn add_lanes<S: Simd>(simd: S, a: S::$lanes, b: S::$lanes) -> S::$lanes {
                simd.$add(a, b)
            }

            #[inline(always)]
            fn mul_lanes<S: Simd>(simd: S, a: S::$lanes, b: S::$lanes) -> S::$lanes {
                simd.$mul(a, b)
            }

            #[inline(always)]
            fn mul_add<S: Simd>(simd: S, a: S::$lanes, b: S::$lanes, c: S::$lanes) -> S::$lanes {
                simd.$mul_add(a, b, c)
            }

            #[inline(always)]
            fn reduce_sum<S: Simd>(simd: S, a: S::$lanes) -> Self {
                simd.$reduce(a)
            }

            #[inline(always)]
            fn as_lanes<S: Simd>(x: &[Self]) -> (&[S::$lanes], &[Self]) {
                S::$split(x)
            }

            #[inline(always)]
            fn as_mut_lanes<S: Simd>(x: &mut [Self]) -> (&mut [S::$lanes], &mut [Self]) {
                S::$split_mut(x)
            }

            #[inline(always)]
            fn partial_load<S: Simd>(simd: S, x: &[Self]) -> S::$lanes {
                simd.$partial_load(x)
            }

            #[inline(always)]
            fn partial_store<S: Simd>(simd: S, x: &mut [Self], v: S::$lanes) {
                simd.$partial_store(x, v)
            }

            #[inline(always)]
            fn rotate_left<S: Simd>(simd: S, v: S::$lanes, by: usize) -> S::$lanes {
                simd.$rotate_left(v, by)
            }

            #[inline(always)]
            fn select_below<S: Simd>(simd: S, count: usize, below: S::$lanes, rest: S::$lanes) -> S::$lanes {
                const LANE_NUMBERS: [$index; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
                let numbers = S::$indices(&LANE_NUMBERS).0[0];
                let mask = simd.$less_than(numbers, simd.$splat_index(count as $index));
                simd.$select(mask, below, rest)
            }
        }
    };
}

/// `2^e`, for exponents of normal numbers.
const fn power_f32(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// `2^e`, for exponents of normal numbers.
const fn power_f64(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

real!(
    f32,
    F32,
    F32,
    power_f32,
    [-63, 52, 75, -76],
    f32s,
    [
        splat_f32s,
        add_f32s,
        mul_f32s,
        mul_add_e_f32s,
        reduce_sum_f32s,
        as_simd_f32s,
        as_mut_simd_f32s,
        partial_load_f32s,
        partial_store_f32s,
        rotate_left_f32s,
        select_f32s
    ],
    [u32, as_simd_u32s, splat_u32s, less_than_u32s]
);
real!(
    f64,
    F64,
    F64,
    power_f64,
    [-511, 486, 537, -538],
    f64s,
    [
        splat_f64s,
        add_f64s,
        mul_f64s,
        mul_add_e_f64s,
        reduce_sum_f64s,
        as_simd_f64s,
        as_mut_simd_f64s,
        partial_load_f64s,
        partial_store_f64s,
        rotate_left_f64s,
        select_f64s
    ],
    [u64, as_simd_u64s, splat_u64s, less_than_u64s]
);
