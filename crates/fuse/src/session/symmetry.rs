//! Whether a square matrix on the host is exactly symmetric: one pass over it, tile against
//! mirrored tile, on a few threads, stopping at the first element that differs.

use std::sync::atomic::{AtomicBool, Ordering};

/// Side of the tiles compared with their mirror images. A mirror tile's rows each come from
/// another page; rows of 128 elements (512 bytes in f32) keep the walk about as fast as rows
/// of 256 and faster than rows of 64 (8192² f32 on two Zen 5 threads, compared in vectors:
/// 11 ms a check in tiles of 128, 12.5 in tiles of 64, 18 in tiles of 32).
const TILE: usize = 128;
/// Threads at most: two cores already read memory about as fast as it goes.
const MAX_THREADS: usize = 4;

/// Floating-point elements compared by their bits.
pub(super) trait Bits: Copy + Send + Sync {
    /// The bits.
    type Word: Copy + Eq + Default + Send + Sync;
    /// The element's bits.
    fn bits(self) -> Self::Word;
    /// Whether the whole tile of side [`TILE`] at rows `r0..`, columns `c0..` of the `n`-wide
    /// matrix at `a` is the transpose of its mirror, compared in AVX vectors.
    ///
    /// # Safety
    ///
    /// The CPU has AVX; both tiles lie in the matrix.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_mirrored(a: *const Self, n: usize, r0: usize, c0: usize) -> bool;
}

impl Bits for f32 {
    type Word = u32;
    fn bits(self) -> u32 {
        self.to_bits()
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_mirrored(a: *const f32, n: usize, r0: usize, c0: usize) -> bool {
        avx::tile_mirrored_f32::<TILE>(a, n, r0, c0)
    }
}

impl Bits for f64 {
    type Word = u64;
    fn bits(self) -> u64 {
        self.to_bits()
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_mirrored(a: *const f64, n: usize, r0: usize, c0: usize) -> bool {
        avx::tile_mirrored_f64::<TILE>(a, n, r0, c0)
    }
}

/// The diagonal of the `n × n` row-major matrix `a` if every element off the diagonal has the
/// bits of its mirror image (`a[i][j]` and `a[j][i]`), else `None`. Bits, not `==`: mirrored
/// NaNs make `A·x` NaN in the same rows read either way, and +0 against −0 is left to the
/// general product.
pub(super) fn symmetric_diagonal<T: Bits>(a: &[T], n: usize) -> Option<Vec<T>> {
    debug_assert_eq!(a.len(), n * n);
    let tiles = n.div_ceil(TILE);
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, MAX_THREADS);
    let differs = AtomicBool::new(false);
    // Tile row `ti` is compared with the tiles right of it; thread `t` takes every
    // `threads`-th tile row, so each gets a share of the long and the short ones.
    let check_rows = |t: usize| {
        let mut mirror = Vec::new();
        for ti in (t..tiles).step_by(threads) {
            for tj in ti..tiles {
                if differs.load(Ordering::Relaxed) {
                    return;
                }
                if !mirrored(a, n, (ti * TILE, tj * TILE), &mut mirror) {
                    differs.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    };
    std::thread::scope(|s| {
        for t in 1..threads {
            s.spawn(move || check_rows(t));
        }
        check_rows(0);
    });
    match differs.into_inner() {
        true => None,
        false => Some((0..n).map(|i| a[i * n + i]).collect()),
    }
}

/// Whether the tile at rows `r0..`, columns `c0..` is the transpose of the tile at rows
/// `c0..`, columns `r0..` (on the diagonal, the tile against itself): in vectors where the
/// tile is whole and the CPU has them, else element by element ([`mirrored_elements`]).
fn mirrored<T: Bits>(a: &[T], n: usize, (r0, c0): (usize, usize), mirror: &mut Vec<T::Word>) -> bool {
    #[cfg(target_arch = "x86_64")]
    if r0.max(c0) + TILE <= n && std::arch::is_x86_feature_detected!("avx") {
        assert!((r0.max(c0) + TILE - 1) * n + r0.max(c0) + TILE <= a.len());
        // SAFETY: AVX is there, and both tiles lie in `a` (checked above).
        return unsafe { T::tile_mirrored(a.as_ptr(), n, r0, c0) };
    }
    mirrored_elements(a, n, r0, c0, mirror)
}

/// [`mirrored`] element by element: the mirror tile is read along its rows into a transposed
/// copy, so that both are compared along rows.
fn mirrored_elements<T: Bits>(a: &[T], n: usize, r0: usize, c0: usize, mirror: &mut Vec<T::Word>) -> bool {
    let (rows, cols) = ((r0 + TILE).min(n) - r0, (c0 + TILE).min(n) - c0);
    mirror.clear();
    mirror.resize(rows * cols, T::Word::default());
    for j in 0..cols {
        let source = &a[(c0 + j) * n + r0..][..rows];
        for (i, &v) in source.iter().enumerate() {
            mirror[i * cols + j] = v.bits();
        }
    }
    (0..rows).all(|i| {
        let first = if r0 == c0 { i + 1 } else { 0 };
        let row = &a[(r0 + i) * n + c0..][first..cols];
        let want = &mirror[i * cols..][first..cols];
        // Not short-circuiting, so that the comparison runs in vectors.
        row.iter().zip(want).fold(true, |same, (&v, &w)| same & (v.bits() == w))
    })
}

/// Whole tiles against their mirrors in AVX vectors: the mirror tile is read in squares of a
/// vector's side, each transposed in registers and compared with the tile's rows by the bits
/// (`xor`, the differences `or`-ed together).
#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    /// [`super::Bits::tile_mirrored`] for f32, in squares of 8 × 8.
    ///
    /// # Safety
    ///
    /// The CPU has AVX; `TILE` is a multiple of 8; the tiles at `(r0, c0)` and `(c0, r0)`, of
    /// side `TILE`, lie in the `n`-wide matrix at `a`.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn tile_mirrored_f32<const TILE: usize>(a: *const f32, n: usize, r0: usize, c0: usize) -> bool {
        let mut differences = _mm256_setzero_ps();
        for i in (0..TILE).step_by(8) {
            for j in (0..TILE).step_by(8) {
                let m = |k: usize| _mm256_loadu_ps(a.add((c0 + j + k) * n + r0 + i));
                let (t0, t1) = (_mm256_unpacklo_ps(m(0), m(1)), _mm256_unpackhi_ps(m(0), m(1)));
                let (t2, t3) = (_mm256_unpacklo_ps(m(2), m(3)), _mm256_unpackhi_ps(m(2), m(3)));
                let (t4, t5) = (_mm256_unpacklo_ps(m(4), m(5)), _mm256_unpackhi_ps(m(4), m(5)));
                let (t6, t7) = (_mm256_unpacklo_ps(m(6), m(7)), _mm256_unpackhi_ps(m(6), m(7)));
                let (s0, s1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xEE>(t0, t2));
                let (s2, s3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xEE>(t1, t3));
                let (s4, s5) = (_mm256_shuffle_ps::<0x44>(t4, t6), _mm256_shuffle_ps::<0xEE>(t4, t6));
                let (s6, s7) = (_mm256_shuffle_ps::<0x44>(t5, t7), _mm256_shuffle_ps::<0xEE>(t5, t7));
                // Column k of the mirror's 8 × 8 square, to compare with row k of the tile's.
                let columns = [
                    _mm256_permute2f128_ps::<0x20>(s0, s4),
                    _mm256_permute2f128_ps::<0x20>(s1, s5),
                    _mm256_permute2f128_ps::<0x20>(s2, s6),
                    _mm256_permute2f128_ps::<0x20>(s3, s7),
                    _mm256_permute2f128_ps::<0x31>(s0, s4),
                    _mm256_permute2f128_ps::<0x31>(s1, s5),
                    _mm256_permute2f128_ps::<0x31>(s2, s6),
                    _mm256_permute2f128_ps::<0x31>(s3, s7),
                ];
                for (k, column) in columns.into_iter().enumerate() {
                    let row = _mm256_loadu_ps(a.add((r0 + i + k) * n + c0 + j));
                    differences = _mm256_or_ps(differences, _mm256_xor_ps(row, column));
                }
            }
        }
        let bits = _mm256_castps_si256(differences);
        _mm256_testz_si256(bits, bits) == 1
    }

    /// [`super::Bits::tile_mirrored`] for f64, in squares of 4 × 4.
    ///
    /// # Safety
    ///
    /// As [`tile_mirrored_f32`].
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn tile_mirrored_f64<const TILE: usize>(a: *const f64, n: usize, r0: usize, c0: usize) -> bool {
        let mut differences = _mm256_setzero_pd();
        for i in (0..TILE).step_by(4) {
            for j in (0..TILE).step_by(4) {
                let m = |k: usize| _mm256_loadu_pd(a.add((c0 + j + k) * n + r0 + i));
                let (t0, t1) = (_mm256_unpacklo_pd(m(0), m(1)), _mm256_unpackhi_pd(m(0), m(1)));
                let (t2, t3) = (_mm256_unpacklo_pd(m(2), m(3)), _mm256_unpackhi_pd(m(2), m(3)));
                let columns = [
                    _mm256_permute2f128_pd::<0x20>(t0, t2),
                    _mm256_permute2f128_pd::<0x20>(t1, t3),
                    _mm256_permute2f128_pd::<0x31>(t0, t2),
                    _mm256_permute2f128_pd::<0x31>(t1, t3),
                ];
                for (k, column) in columns.into_iter().enumerate() {
                    let row = _mm256_loadu_pd(a.add((r0 + i + k) * n + c0 + j));
                    differences = _mm256_or_pd(differences, _mm256_xor_pd(row, column));
                }
            }
        }
        let bits = _mm256_castpd_si256(differences);
        _mm256_testz_si256(bits, bits) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symmetric<T: Bits + From<f32>>(n: usize) -> Vec<T> {
        let mut a = vec![T::from(0.0); n * n];
        for i in 0..n {
            for j in 0..=i {
                let v = ((i * 31 + j * 17) % 23) as f32 - 11.0 + if i == j { 0.5 } else { 0.0 };
                a[i * n + j] = T::from(v);
                a[j * n + i] = T::from(v);
            }
        }
        a
    }

    /// Symmetric matrices at sizes on, off and across tile boundaries give their diagonal; one
    /// element off its mirror's bits anywhere off the diagonal — in the first tile, the last,
    /// a ragged edge, every place of a vector's square inside whole tiles; the smallest
    /// change, a NaN, +0 against −0 — makes them not symmetric; mirrored NaNs and the
    /// diagonal's own elements do not. In f32 and f64, whose whole tiles go in vectors of
    /// different widths.
    fn check<T: Bits + From<f32> + PartialEq + std::fmt::Debug>(next_up: fn(T) -> T) {
        let [zero, minus_zero, nan] = [0.0, -0.0, f32::NAN].map(T::from);
        for n in [1, 2, 7, 127, 128, 129, 257, 300] {
            let a = symmetric::<T>(n);
            let diagonal: Vec<T> = (0..n).map(|i| a[i * n + i]).collect();
            assert_eq!(symmetric_diagonal(&a, n), Some(diagonal), "n = {n}");
            let mut nan_diagonal = a.clone();
            nan_diagonal[(n - 1) * n + n - 1] = nan;
            assert!(symmetric_diagonal(&nan_diagonal, n).is_some(), "n = {n}");
            let edges = [(0, 1), (n - 1, n.saturating_sub(2)), (n / 2, 0), (1, n - 1)];
            // Every row and column place of an 8 × 8 square, in the diagonal tile and off it.
            let squares = (0..8).flat_map(|k| [(k, 8 + (k * 3) % 8), (130 + k, 3 + (k * 5) % 8), (17 + k, 250 - k)]);
            for (i, j) in edges
                .into_iter()
                .chain(squares)
                .filter(|&(i, j)| i != j && i < n && j < n)
            {
                let with = |upper: T, lower: T| {
                    let mut b = a.clone();
                    (b[i * n + j], b[j * n + i]) = (upper, lower);
                    symmetric_diagonal(&b, n).is_some()
                };
                let v = a[i * n + j];
                let at = format!("n = {n}, ({i}, {j})");
                assert!(!with(next_up(v), v), "{at}: the next number up");
                assert!(!with(v, next_up(v)), "{at}: the next number up, below the diagonal");
                assert!(!with(nan, v), "{at}: a NaN");
                assert!(!with(zero, minus_zero), "{at}: +0 against −0");
                assert!(with(nan, nan), "{at}: mirrored NaNs");
                assert!(with(minus_zero, minus_zero), "{at}: mirrored −0");
            }
        }
    }

    #[test]
    fn a_matrix_is_symmetric_exactly_when_every_mirrored_pair_has_the_same_bits() {
        check::<f32>(|v| f32::from_bits(v.to_bits() + 1));
        check::<f64>(|v| f64::from_bits(v.to_bits() + 1));
    }
}
