//! The hand-written inner loops: every BLAS-1/2 formula of the library comes down to these on
//! runs of contiguous elements. They are written so that the compiler vectorizes them: equal
//! lengths made explicit up front (no bounds checks in the loop), and sums kept in [`LANES`]
//! independent accumulators, since floating-point addition may not be reordered for it.
//!
//! Each loop is compiled twice — for the baseline x86-64 (SSE2) and for AVX2 — and the AVX2
//! build runs where the CPU has it: twice the width per instruction keeps more cache lines in
//! flight, which is what a loop streaming from memory is limited by. Multiplications and
//! additions stay separate (no FMA), so both builds give the same results.

use super::norm::Norm;
use super::Real;

/// Defines `pub(crate) fn $name` running `$body` built for AVX2 where the CPU has it (the
/// detection is cached after the first call), for the baseline otherwise.
macro_rules! wide {
    ($(#[$doc:meta])* $name:ident = $body:ident ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        $(#[$doc])*
        pub(crate) fn $name<T: Real>($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2<T: Real>($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

pub(crate) use wide;

wide!(
    /// `Σ x[k]·y[k]`.
    dot = dot_body(x: &[T], y: &[T]) -> T
);
wide!(
    /// `Σ x[k]`.
    sum = sum_body(x: &[T]) -> T
);
wide!(
    /// `dest = konst + Σ a·x` over the terms `(a, x)`.
    lin_write = lin_write_body(dest: &mut [T], konst: T, terms: &[(T, &[T])])
);
wide!(
    /// `dest += Σ a·x` over the terms `(a, x)`, four at a time (one pass over `dest` per four).
    lin_add = lin_add_body(dest: &mut [T], terms: &[(T, &[T])])
);
wide!(
    /// `dest += c·x·y`.
    prod_add = prod_add_body(dest: &mut [T], c: T, x: &[T], y: &[T])
);
wide!(
    /// `dest += x`.
    add = add_body(dest: &mut [T], x: &[T])
);
wide!(
    /// `Σ_k rows[r][k]·x[k]` for each of four rows, and `dest += Σ_r coefs[r]·rows[r]`, in one
    /// loop: each element of the rows is loaded once for both sums (`A·x` with `Aᵀ·y`).
    dot_add_rows = dot_add_rows_body(rows: [&[T]; 4], x: &[T], coefs: [T; 4], dest: &mut [T]) -> [T; 4]
);
wide!(
    /// The three scaled sums of squares of a norm of `x` (see [`super::norm`]).
    norm = norm_body(x: &[T]) -> Norm<T>
);
wide!(
    /// [`dot_add_rows`] for one row (the rows of a tile past a multiple of four).
    dot_add_row = dot_add_row_body(row: &[T], x: &[T], coef: T, dest: &mut [T]) -> T
);

/// Independent accumulators of a sum: enough to fill the vector registers and hide the
/// latency of the additions.
const LANES: usize = 16;

#[inline(always)]
fn dot_body<T: Real>(x: &[T], y: &[T]) -> T {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let mut acc = [T::ZERO; LANES];
    let (xs, ys) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let tail: T = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .fold(T::ZERO, |s, (&a, &b)| s + a * b);
    for (a, b) in xs.zip(ys) {
        for k in 0..LANES {
            acc[k] += a[k] * b[k];
        }
    }
    fold(acc) + tail
}

#[inline(always)]
fn sum_body<T: Real>(x: &[T]) -> T {
    let mut acc = [T::ZERO; LANES];
    let xs = x.chunks_exact(LANES);
    let tail: T = xs.remainder().iter().fold(T::ZERO, |s, &a| s + a);
    for a in xs {
        for k in 0..LANES {
            acc[k] += a[k];
        }
    }
    fold(acc) + tail
}

#[inline(always)]
fn norm_body<T: Real>(x: &[T]) -> Norm<T> {
    let (mut small, mut medium, mut big) = ([T::ZERO; LANES], [T::ZERO; LANES], [T::ZERO; LANES]);
    let xs = x.chunks_exact(LANES);
    let mut tail = Norm::default();
    for &v in xs.remainder() {
        let [s, m, b] = squares(v);
        tail = tail.merge(Norm {
            small: s,
            medium: m,
            big: b,
        });
    }
    for a in xs {
        for k in 0..LANES {
            let [s, m, b] = squares(a[k]);
            small[k] += s;
            medium[k] += m;
            big[k] += b;
        }
    }
    let lanes = Norm {
        small: fold(small),
        medium: fold(medium),
        big: fold(big),
    };
    lanes.merge(tail)
}

/// The square of `x` as the small, medium or big sum takes it (zero for the other two),
/// without branches, so that the loop vectorizes; a NaN goes to the medium sum. The magnitude
/// is chosen before it is scaled, so that no product is subnormal (a hundredfold slower on
/// x86 CPUs): scaling a medium number down and squaring it would be.
#[inline(always)]
fn squares<T: Real>(x: T) -> [T; 3] {
    let m = x.abs();
    let (small, big) = (m < T::NORM_SMALL, m > T::NORM_BIG);
    let pick = |take: bool| if take { m } else { T::ZERO };
    let (up, medium, down) = (pick(small) * T::NORM_UP, pick(!(small | big)), pick(big) * T::NORM_DOWN);
    [up * up, medium * medium, down * down]
}

/// The sum of the accumulators, in order (a pairwise tree here would lead the compiler to
/// vectorize the main loop at half width).
#[inline(always)]
fn fold<T: Real>(acc: [T; LANES]) -> T {
    acc.iter().fold(T::ZERO, |s, &a| s + a)
}

#[inline(always)]
fn lin_write_body<T: Real>(dest: &mut [T], konst: T, terms: &[(T, &[T])]) {
    let n = dest.len();
    match terms {
        [] => dest.fill(konst),
        [(a, x)] => {
            let x = &x[..n];
            for k in 0..n {
                dest[k] = konst + *a * x[k];
            }
        }
        [(a, x), (b, y)] => {
            let (x, y) = (&x[..n], &y[..n]);
            for k in 0..n {
                dest[k] = konst + *a * x[k] + *b * y[k];
            }
        }
        [(a, x), (b, y), (c, z), rest @ ..] => {
            let (x, y, z) = (&x[..n], &y[..n], &z[..n]);
            for k in 0..n {
                dest[k] = konst + *a * x[k] + *b * y[k] + *c * z[k];
            }
            lin_add_body(dest, rest);
        }
    }
}

#[inline(always)]
fn lin_add_body<T: Real>(dest: &mut [T], terms: &[(T, &[T])]) {
    let n = dest.len();
    for group in terms.chunks(4) {
        match group {
            [(a, x)] => {
                let x = &x[..n];
                for k in 0..n {
                    dest[k] += *a * x[k];
                }
            }
            [(a, x), (b, y)] => {
                let (x, y) = (&x[..n], &y[..n]);
                for k in 0..n {
                    dest[k] += *a * x[k] + *b * y[k];
                }
            }
            [(a, x), (b, y), (c, z)] => {
                let (x, y, z) = (&x[..n], &y[..n], &z[..n]);
                for k in 0..n {
                    dest[k] += *a * x[k] + *b * y[k] + *c * z[k];
                }
            }
            [(a, x), (b, y), (c, z), (d, w)] => {
                let (x, y, z, w) = (&x[..n], &y[..n], &z[..n], &w[..n]);
                for k in 0..n {
                    dest[k] += (*a * x[k] + *b * y[k]) + (*c * z[k] + *d * w[k]);
                }
            }
            _ => unreachable!("chunks of at most four"),
        }
    }
}

/// Accumulators per row in [`dot_add_rows`]: four rows of them fill as many registers as one
/// [`dot`].
const ROW_LANES: usize = LANES / 2;

/// The `ROW_LANES` elements of `s` from `k`.
#[inline(always)]
fn lanes<T: Real>(s: &[T], k: usize) -> [T; ROW_LANES] {
    s[k..k + ROW_LANES].try_into().expect("a whole chunk")
}

#[inline(always)]
fn dot_add_rows_body<T: Real>(rows: [&[T]; 4], x: &[T], coefs: [T; 4], dest: &mut [T]) -> [T; 4] {
    let n = dest.len();
    let x = &x[..n];
    let [r0, r1, r2, r3] = rows.map(|r| &r[..n]);
    let [c0, c1, c2, c3] = coefs;
    let mut acc = [[T::ZERO; ROW_LANES]; 4];
    let body = n - n % ROW_LANES;
    for k in (0..body).step_by(ROW_LANES) {
        let (xs, mut column) = (lanes(x, k), lanes(dest, k));
        let (a0, a1, a2, a3) = (lanes(r0, k), lanes(r1, k), lanes(r2, k), lanes(r3, k));
        for l in 0..ROW_LANES {
            acc[0][l] += a0[l] * xs[l];
            acc[1][l] += a1[l] * xs[l];
            acc[2][l] += a2[l] * xs[l];
            acc[3][l] += a3[l] * xs[l];
            column[l] += (c0 * a0[l] + c1 * a1[l]) + (c2 * a2[l] + c3 * a3[l]);
        }
        dest[k..k + ROW_LANES].copy_from_slice(&column);
    }
    let tail = body..n;
    let sum = |acc: [T; ROW_LANES], r: &[T]| fold_lanes(acc) + dot_body(&r[tail.clone()], &x[tail.clone()]);
    let sums = [sum(acc[0], r0), sum(acc[1], r1), sum(acc[2], r2), sum(acc[3], r3)];
    for k in tail.clone() {
        dest[k] += (c0 * r0[k] + c1 * r1[k]) + (c2 * r2[k] + c3 * r3[k]);
    }
    sums
}

#[inline(always)]
fn dot_add_row_body<T: Real>(row: &[T], x: &[T], coef: T, dest: &mut [T]) -> T {
    let n = dest.len();
    let (row, x) = (&row[..n], &x[..n]);
    let mut acc = [T::ZERO; ROW_LANES];
    let body = n - n % ROW_LANES;
    for k in (0..body).step_by(ROW_LANES) {
        let (xs, a, mut column) = (lanes(x, k), lanes(row, k), lanes(dest, k));
        for l in 0..ROW_LANES {
            acc[l] += a[l] * xs[l];
            column[l] += coef * a[l];
        }
        dest[k..k + ROW_LANES].copy_from_slice(&column);
    }
    for k in body..n {
        dest[k] += coef * row[k];
    }
    fold_lanes(acc) + dot_body(&row[body..], &x[body..])
}

/// The sum of the accumulators of one row, in order.
#[inline(always)]
fn fold_lanes<T: Real>(acc: [T; ROW_LANES]) -> T {
    acc.iter().fold(T::ZERO, |s, &a| s + a)
}

#[inline(always)]
fn prod_add_body<T: Real>(dest: &mut [T], c: T, x: &[T], y: &[T]) {
    let n = dest.len();
    let (x, y) = (&x[..n], &y[..n]);
    for k in 0..n {
        dest[k] += c * x[k] * y[k];
    }
}

#[inline(always)]
fn add_body<T: Real>(dest: &mut [T], x: &[T]) {
    let n = dest.len();
    let x = &x[..n];
    for k in 0..n {
        dest[k] += x[k];
    }
}

/// `dest = src`, with streaming stores where the CPU has them (x86-64): the lines written are
/// not read in first and do not displace the cache. Call [`stream_fence`] before other threads
/// read `dest`.
pub(crate) fn stream<T: Real>(dest: &mut [T], src: &[T]) {
    let src = &src[..dest.len()];
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        const WIDTH: usize = 16;
        let bytes = std::mem::size_of_val(dest);
        let (d, s) = (dest.as_mut_ptr().cast::<u8>(), src.as_ptr().cast::<u8>());
        // Elements are 4 or 8 bytes and aligned to their size, so 16-byte alignment starts at
        // an element boundary.
        let head = d.align_offset(WIDTH).min(bytes);
        let body = (bytes - head) / WIDTH * WIDTH;
        // SAFETY: `dest` and `src` are distinct slices of `bytes` bytes (one is borrowed
        // mutably); every access below stays within them, streamed stores go to 16-byte-aligned
        // addresses (SSE2 is part of x86-64), and the element boundaries are kept.
        unsafe {
            std::ptr::copy_nonoverlapping(s, d, head);
            for k in (head..head + body).step_by(WIDTH) {
                _mm_stream_si128(d.add(k).cast::<__m128i>(), _mm_loadu_si128(s.add(k).cast::<__m128i>()));
            }
            std::ptr::copy_nonoverlapping(s.add(head + body), d.add(head + body), bytes - head - body);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dest.copy_from_slice(src);
}

/// Orders the streaming stores of this thread before its later stores (a rayon join then
/// publishes them like any other write).
pub(crate) fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// `dest += c`.
pub(crate) fn add_const<T: Real>(dest: &mut [T], c: T) {
    dest.iter_mut().for_each(|d| *d += c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_match_plain_loops_at_every_tail_length() {
        for n in [0, 1, 15, 16, 17, 100] {
            let x: Vec<f64> = (0..n).map(|k| k as f64 * 0.5 - 3.0).collect();
            let y: Vec<f64> = (0..n).map(|k| 1.0 + k as f64).collect();
            let want: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            assert!((dot(&x, &y) - want).abs() < 1e-9, "{n}");
            assert!((sum(&x) - x.iter().sum::<f64>()).abs() < 1e-9, "{n}");
        }
    }

    #[test]
    fn streaming_copies_at_every_alignment_and_length() {
        let src: Vec<f64> = (0..70).map(|k| k as f64 - 0.25).collect();
        for offset in 0..3 {
            for len in [0, 1, 2, 3, 7, 8, 33, 64] {
                let mut dest = vec![0.0f64; 70];
                stream(&mut dest[offset..offset + len], &src[..len]);
                stream_fence();
                assert_eq!(&dest[offset..offset + len], &src[..len], "{offset} {len}");
                assert!(dest[..offset].iter().chain(&dest[offset + len..]).all(|&d| d == 0.0));
                let (mut narrow, wide) = (vec![0.0f32; 70], vec![1.5f32; 70]);
                stream(&mut narrow[offset..offset + len], &wide[..len]);
                assert_eq!(narrow.iter().filter(|&&x| x == 1.5).count(), len, "{offset} {len}");
            }
        }
    }

    #[test]
    fn row_sums_and_column_sums_in_one_loop_at_every_tail_length() {
        for n in [0, 1, 7, 8, 9, 17, 100] {
            let value = |r: usize, k: usize| ((r * 31 + k * 17) % 13) as f64 - 6.0;
            let rows: Vec<Vec<f64>> = (0..4).map(|r| (0..n).map(|k| value(r, k)).collect()).collect();
            let x: Vec<f64> = (0..n).map(|k| value(5, k) * 0.25).collect();
            let coefs = [0.5, -1.0, 2.0, 3.0];
            let dot = |r: &[f64]| r.iter().zip(&x).map(|(a, b)| a * b).sum::<f64>();
            let start: Vec<f64> = (0..n).map(|k| k as f64).collect();
            let mut dest = start.clone();
            let sums = dot_add_rows([&rows[0], &rows[1], &rows[2], &rows[3]], &x, coefs, &mut dest);
            for r in 0..4 {
                assert_eq!(sums[r], dot(&rows[r]), "row {r}, {n}");
            }
            for k in 0..n {
                let want = start[k] + (0..4).map(|r| coefs[r] * rows[r][k]).sum::<f64>();
                assert_eq!(dest[k], want, "column {k}, {n}");
            }
            let mut one = start.clone();
            assert_eq!(dot_add_row(&rows[3], &x, 3.0, &mut one), dot(&rows[3]), "{n}");
            assert!(one
                .iter()
                .zip(&start)
                .zip(&rows[3])
                .all(|((o, s), a)| *o == s + 3.0 * a));
        }
    }

    #[test]
    fn linear_combinations_of_any_length() {
        let x = [1.0f32, 2.0, 3.0];
        for terms in 0..7 {
            let list: Vec<(f32, &[f32])> = (0..terms).map(|t| (t as f32 + 1.0, &x[..])).collect();
            let scale: f32 = (1..=terms).map(|t| t as f32).sum();
            let mut dest = [0.0f32; 3];
            lin_write(&mut dest, 0.5, &list);
            assert_eq!(dest, [0.5 + scale, 0.5 + 2.0 * scale, 0.5 + 3.0 * scale], "{terms}");
        }
    }
}
