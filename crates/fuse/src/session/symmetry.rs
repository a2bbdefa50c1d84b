//! Whether a square matrix on the host is exactly symmetric: one pass over it, tile against
//! mirrored tile, on a few threads, stopping at the first element that differs.

use std::sync::atomic::{AtomicBool, Ordering};

/// Side of the tiles compared with their mirror images: a tile and its mirror (2 × 32 KiB of
/// f64) stay in the first two cache levels while one is read along columns.
const TILE: usize = 64;
/// Threads at most: two cores already read memory about as fast as it goes.
const MAX_THREADS: usize = 4;

/// The diagonal of the `n × n` row-major matrix `a` if `a[i][j] == a[j][i]` for every `i ≠ j`
/// (`==` of floating point: a NaN off the diagonal makes it not symmetric), else `None`.
pub(super) fn symmetric_diagonal<T: Copy + PartialEq + Send + Sync>(a: &[T], n: usize) -> Option<Vec<T>> {
    debug_assert_eq!(a.len(), n * n);
    let tiles = n.div_ceil(TILE);
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, MAX_THREADS);
    let differs = AtomicBool::new(false);
    // Tile row `ti` is compared with the tile columns right of it; thread `t` takes every
    // `threads`-th tile row, so each gets a share of the long and the short ones.
    let check_rows = |t: usize| {
        for ti in (t..tiles).step_by(threads) {
            for tj in ti..tiles {
                if differs.load(Ordering::Relaxed) {
                    return;
                }
                if !mirrored(a, n, ti * TILE, tj * TILE) {
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
/// `c0..`, columns `r0..` (on the diagonal, the tile's upper part against its lower).
fn mirrored<T: PartialEq>(a: &[T], n: usize, r0: usize, c0: usize) -> bool {
    let (r1, c1) = ((r0 + TILE).min(n), (c0 + TILE).min(n));
    (r0..r1).all(|i| {
        let first = if r0 == c0 { i + 1 } else { c0 };
        (first..c1).all(|j| a[i * n + j] == a[j * n + i])
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

    /// Symmetric matrices at sizes on, off and across tile boundaries give their diagonal;
    /// one element changed anywhere off the diagonal — in the first tile, the last, a ragged
    /// edge — or a NaN there makes them not symmetric; the diagonal itself is never compared.
    #[test]
    fn a_matrix_is_symmetric_exactly_when_every_mirrored_pair_is_equal() {
        for n in [1, 2, 7, 63, 64, 65, 130, 200] {
            let a = symmetric(n);
            let diagonal: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
            assert_eq!(symmetric_diagonal(&a, n), Some(diagonal), "n = {n}");
            let mut nan_diagonal = a.clone();
            nan_diagonal[(n - 1) * n + n - 1] = f64::NAN;
            assert!(symmetric_diagonal(&nan_diagonal, n).is_some(), "n = {n}");
            if n < 2 {
                continue;
            }
            let pairs = [(0, 1), (n - 1, n - 2), (n / 2, 0), (1, n - 1)];
            for (i, j) in pairs.into_iter().filter(|(i, j)| i != j) {
                for value in [1e-300, f64::NAN] {
                    let mut b = a.clone();
                    b[i * n + j] += value;
                    if b[i * n + j] != a[i * n + j] || value.is_nan() {
                        assert_eq!(symmetric_diagonal(&b, n), None, "n = {n}, ({i}, {j}) + {value}");
                    }
                }
            }
        }
    }
}
