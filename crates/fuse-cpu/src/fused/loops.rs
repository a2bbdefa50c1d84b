//! The hand-written inner loops: every BLAS-1/2 formula of the library comes down to these on
//! runs of contiguous elements. They are written so that the compiler vectorizes them: equal
//! lengths made explicit up front (no bounds checks in the loop), and sums kept in [`LANES`]
//! independent accumulators, since floating-point addition may not be reordered for it.
//!
//! Each loop is compiled twice — for the baseline x86-64 (SSE2) and for AVX2 — and the AVX2
//! build runs where the CPU has it: twice the width per instruction keeps more cache lines in
//! flight, which is what a loop streaming from memory is limited by. Multiplications and
//! additions stay separate (no FMA), so both builds give the same results.

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
