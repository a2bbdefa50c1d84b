//! Whether a square matrix on the host is exactly symmetric: one pass over it, tile against
//! mirrored tile, on a few threads, stopping at the first element that differs.

use std::sync::atomic::{AtomicBool, Ordering};

/// Side of the tiles compared with their mirror images, in the first-level cache.
const TILE: usize = 64;
/// Side of the blocks read into the caches, a row at a time, before their tiles are compared:
/// read tile by tile, each of a mirror tile's rows comes from another page of memory, and an
/// 8192² f32 matrix took 70–100 ms, ten passes' time (in blocks, compared by bits: 20 ms).
const BLOCK: usize = 256;
/// Threads at most: two cores already read memory about as fast as it goes.
const MAX_THREADS: usize = 4;

/// Floating-point elements compared by their bits.
pub(super) trait Bits: Copy + Send + Sync {
    /// The bits.
    type Word: Copy + Eq + Default + Send + Sync;
    /// The element's bits.
    fn bits(self) -> Self::Word;
}

impl Bits for f32 {
    type Word = u32;
    fn bits(self) -> u32 {
        self.to_bits()
    }
}

impl Bits for f64 {
    type Word = u64;
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

/// The diagonal of the `n × n` row-major matrix `a` if every element off the diagonal has the
/// bits of its mirror image (`a[i][j]` and `a[j][i]`), else `None`. Bits, not `==`: mirrored
/// NaNs make `A·x` NaN in the same rows read either way, and +0 against −0 is left to the
/// general product.
pub(super) fn symmetric_diagonal<T: Bits>(a: &[T], n: usize) -> Option<Vec<T>> {
    debug_assert_eq!(a.len(), n * n);
    let blocks = n.div_ceil(BLOCK);
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, MAX_THREADS);
    let differs = AtomicBool::new(false);
    // Block row `bi` is compared with the blocks right of it; thread `t` takes every
    // `threads`-th block row, so each gets a share of the long and the short ones.
    let check_rows = |t: usize| {
        let mut mirror = Vec::with_capacity(TILE * TILE);
        for bi in (t..blocks).step_by(threads) {
            for bj in bi..blocks {
                if differs.load(Ordering::Relaxed) {
                    return;
                }
                if !blocks_mirrored(a, n, (bi * BLOCK, bj * BLOCK), &mut mirror) {
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

/// Whether the block at rows `r0..`, columns `c0..` is the transpose of its mirror, both read
/// into the caches along their rows first.
fn blocks_mirrored<T: Bits>(a: &[T], n: usize, (r0, c0): (usize, usize), mirror: &mut Vec<T::Word>) -> bool {
    touch(a, n, r0, c0);
    touch(a, n, c0, r0);
    let (r1, c1) = ((r0 + BLOCK).min(n), (c0 + BLOCK).min(n));
    (r0..r1).step_by(TILE).all(|ti| {
        let first = if r0 == c0 { ti } else { c0 };
        (first..c1).step_by(TILE).all(|tj| mirrored(a, n, ti, tj, mirror))
    })
}

/// Reads one element of each cache line of the block at rows `r0..`, columns `c0..`, a row
/// at a time, so that the memory streams it into the caches.
fn touch<T: Copy>(a: &[T], n: usize, r0: usize, c0: usize) {
    let line = (64 / std::mem::size_of::<T>()).max(1);
    let c1 = (c0 + BLOCK).min(n);
    for r in r0..(r0 + BLOCK).min(n) {
        for element in a[r * n + c0..r * n + c1].iter().step_by(line) {
            std::hint::black_box(*element);
        }
    }
}

/// Whether the tile at rows `r0..`, columns `c0..` is the transpose of the tile at rows
/// `c0..`, columns `r0..` (on the diagonal, the tile's part right of it against its part
/// below). The mirror tile is read along its rows into a transposed copy, so that both are
/// compared along rows.
fn mirrored<T: Bits>(a: &[T], n: usize, r0: usize, c0: usize, mirror: &mut Vec<T::Word>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn symmetric(n: usize) -> Vec<f64> {
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let v = ((i * 31 + j * 17) % 23) as f64 - 11.0 + if i == j { 0.5 } else { 0.0 };
                a[i * n + j] = v;
                a[j * n + i] = v;
            }
        }
        a
    }

    /// Symmetric matrices at sizes on, off and across tile and block boundaries give their
    /// diagonal; one element off its mirror's bits anywhere off the diagonal — in the first
    /// tile, the last, a ragged edge; a tiny change, a NaN, +0 against −0 — makes them not
    /// symmetric; mirrored NaNs and the diagonal's own elements do not.
    #[test]
    fn a_matrix_is_symmetric_exactly_when_every_mirrored_pair_has_the_same_bits() {
        for n in [1, 2, 7, 63, 64, 65, 130, 257, 600] {
            let a = symmetric(n);
            let diagonal: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
            assert_eq!(symmetric_diagonal(&a, n), Some(diagonal), "n = {n}");
            let mut nan_diagonal = a.clone();
            nan_diagonal[(n - 1) * n + n - 1] = f64::NAN;
            assert!(symmetric_diagonal(&nan_diagonal, n).is_some(), "n = {n}");
            let pairs = [(0, 1), (n - 1, n.saturating_sub(2)), (n / 2, 0), (1, n - 1)];
            for (i, j) in pairs.into_iter().filter(|&(i, j)| i != j && i < n && j < n) {
                let with = |upper: f64, lower: f64| {
                    let mut b = a.clone();
                    (b[i * n + j], b[j * n + i]) = (upper, lower);
                    symmetric_diagonal(&b, n).is_some()
                };
                let v = a[i * n + j];
                let at = format!("n = {n}, ({i}, {j})");
                assert!(!with(v + v.abs() * 1e-15 + 1e-300, v), "{at}: a tiny change");
                assert!(!with(f64::NAN, v), "{at}: a NaN");
                assert!(!with(0.0, -0.0), "{at}: +0 against −0");
                assert!(with(f64::NAN, f64::NAN), "{at}: mirrored NaNs");
                assert!(with(-0.0, -0.0), "{at}: mirrored −0");
            }
        }
    }
}
