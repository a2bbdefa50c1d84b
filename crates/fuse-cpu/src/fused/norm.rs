//! The Euclidean norm as BLAS computes it (Blue's algorithm, LAPACK's `dnrm2`): the squares
//! are accumulated in three additive sums — magnitudes below [`Real::NORM_SMALL`] scaled up,
//! above [`Real::NORM_BIG`] scaled down, the rest as they are — so that no square overflows or
//! underflows where the norm itself is representable. Being additive, partial norms of parts
//! add up like partial sums; the generated CUDA (`fuse_norm` in library/cuda/routines.cuh)
//! does the same.

use super::Real;

/// The three sums of a norm.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Norm<T> {
    pub small: T,
    pub medium: T,
    pub big: T,
}

impl<T: Real> Norm<T> {
    /// The sums of both.
    pub(crate) fn merge(self, other: Self) -> Self {
        Norm {
            small: self.small + other.small,
            medium: self.medium + other.medium,
            big: self.big + other.big,
        }
    }

    /// The norm: the big sum where there is one (the small one is then below its rounding),
    /// else the small and medium ones combined without squaring either root again. A NaN term
    /// went to the medium sum (`!= 0` below: positive or NaN), so it propagates.
    pub(crate) fn value(self) -> T {
        let Norm { small, medium, mut big } = self;
        if big > T::ZERO {
            if medium != T::ZERO {
                big += (medium * T::NORM_DOWN) * T::NORM_DOWN;
            }
            return big.sqrt() / T::NORM_DOWN;
        }
        if small > T::ZERO && medium != T::ZERO {
            let (medium, small) = (medium.sqrt(), small.sqrt() / T::NORM_UP);
            let (high, low) = if small > medium {
                (small, medium)
            } else {
                (medium, small)
            };
            let ratio = low / high;
            return high * (T::from_f64(1.0) + ratio * ratio).sqrt();
        }
        if small > T::ZERO {
            return small.sqrt() / T::NORM_UP;
        }
        medium.sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::loops;

    fn norm<T: Real>(x: &[T]) -> T {
        loops::norm(x).value()
    }

    #[test]
    fn no_overflow_or_underflow_where_the_norm_is_representable() {
        // 3·2^e and 4·2^e have the norm 5·2^e exactly, at every scale.
        let f32_at = |e: i32| [3.0, -4.0, 5.0].map(|m| m * 2f32.powi(e));
        let f64_at = |e: i32| [3.0, -4.0, 5.0].map(|m| m * 2f64.powi(e));
        for e in [-140, -100, -70, -63, -40, 0, 40, 52, 70, 100, 120] {
            let [a, b, want] = f32_at(e);
            assert_eq!(norm(&[a, b]), want, "f32 2^{e}");
        }
        for e in [-1070, -1000, -511, -300, 0, 300, 486, 1000] {
            let [a, b, want] = f64_at(e);
            assert_eq!(norm(&[a, b]), want, "f64 2^{e}");
        }
        assert_eq!(norm(&[1e-25_f32; 4]), 2e-25);
        assert_eq!(norm(&[0.0_f32; 3]), 0.0);
        assert_eq!(norm::<f64>(&[]), 0.0);
        // Small and medium sums combined: 2^-70·3 and 2^-60·4 (f32: the small range is below 2^-63).
        let (s, m) = (3.0 * 2f32.powi(-70), 4.0 * 2f32.powi(-60));
        let want = ((s as f64).powi(2) + (m as f64).powi(2)).sqrt() as f32;
        assert_eq!(norm(&[s, m]), want);
    }

    #[test]
    fn infinities_and_nans_propagate() {
        assert_eq!(norm(&[1.0_f32, f32::INFINITY, 1e-30]), f32::INFINITY);
        assert!(norm(&[1e30_f32, f32::NAN]).is_nan());
        assert!(norm(&[1e-30_f64, f64::NAN]).is_nan());
        assert!(norm(&[f64::NAN]).is_nan());
    }
}
