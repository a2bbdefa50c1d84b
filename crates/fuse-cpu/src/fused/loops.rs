//! The hand-written inner loops: every BLAS-1/2 formula of the library comes down to these on
//! runs of contiguous elements.
//!
//! Each loop is one generic body over pulp's [`Simd`] instruction sets, dispatched to the
//! widest the CPU has (AVX-512, AVX2 with FMA, NEON; scalar code elsewhere) or the narrower one
//! `FUSE_SIMD` asks for ([`simd::arch`]). The loops that decide a BLAS-2 kernel's speed — dot products, several rows
//! against one vector, scaled rows added into a partial vector — are written in vectors with
//! fused multiply-adds, several rows per step, so that each load of the vector serves every
//! row and enough independent sums are in flight to hide the additions' latency. The rest are
//! plain loops the compiler vectorizes at the width picked. Fused multiply-adds round once
//! where a multiplication and an addition round twice, so results differ between instruction
//! sets in the last bits (tests compare with the f64 reference within tolerances).
//!
//! Vector operations stay out of closures (`array::map`, `from_fn`, `fold`): a closure is a
//! function of its own, compiled without the instruction set the dispatch enables unless it
//! happens to be inlined, and then every operation in it is a call (found in a profile: the
//! row sums of an eight-row step took 900 cycles where their loop took 100). So do the rows'
//! splits into vectors: two `array::map`s over eight rows, left as calls, made a third of a
//! short [`dot_rows`] call (43 ns on 16 elements, 30 with plain loops; SGEMV at 1024² f32 on
//! one thread 71–74 µs a run, 59–60 without them).

use pulp::Simd;

use super::norm::Norm;
use super::simd;
use super::Real;

/// Independent vector sums of one dot product: two fused multiply-adds a cycle, each taking
/// four, need eight in flight.
const SUMS: usize = 8;
/// Rows a step in [`dot_rows`] and [`dot_add_rows`], one vector sum each: each load of the
/// vector serves them all, and eight streams of rows keep memory busier than one or four (on
/// the development machine one row a step reads an 8192² f32 matrix at 16 GB/s a core, four
/// at 22, eight at 23.5; in L3 one row is 5 % faster, four 15 % slower).
pub(crate) const ROWS: usize = 8;
/// Rows added into a partial vector per pass over it ([`lin_add`]).
pub(crate) const ROWS_PER_PASS: usize = 8;

/// `Σ x[k]·y[k]`.
#[pulp::with_simd(dot = simd::arch())]
#[inline(always)]
pub(crate) fn dot_simd<S: Simd, T: Real>(simd: S, x: &[T], y: &[T]) -> T {
    let n = x.len().min(y.len());
    let (xv, xt) = T::as_lanes::<S>(&x[..n]);
    let (yv, yt) = T::as_lanes::<S>(&y[..n]);
    let mut acc = [T::splat(simd, T::ZERO); SUMS];
    let (xs, ys) = (xv.chunks_exact(SUMS), yv.chunks_exact(SUMS));
    let rest = xs.remainder().iter().zip(ys.remainder());
    for (a, b) in xs.zip(ys) {
        for k in 0..SUMS {
            acc[k] = T::mul_add(simd, a[k], b[k], acc[k]);
        }
    }
    for (k, (&a, &b)) in rest.enumerate() {
        acc[k] = T::mul_add(simd, a, b, acc[k]);
    }
    reduce::<S, T, _>(simd, acc) + dot_tail(xt, yt)
}

/// `Σ x[k]`.
#[pulp::with_simd(sum = simd::arch())]
#[inline(always)]
pub(crate) fn sum_simd<S: Simd, T: Real>(simd: S, x: &[T]) -> T {
    let (xv, xt) = T::as_lanes::<S>(x);
    let mut acc = [T::splat(simd, T::ZERO); SUMS];
    let xs = xv.chunks_exact(SUMS);
    for (k, &a) in xs.remainder().iter().enumerate() {
        acc[k] = T::add_lanes(simd, acc[k], a);
    }
    for a in xs {
        for k in 0..SUMS {
            acc[k] = T::add_lanes(simd, acc[k], a[k]);
        }
    }
    reduce::<S, T, _>(simd, acc) + xt.iter().fold(T::ZERO, |s, &a| s + a)
}

/// Consecutive rows of a matrix, each cut to the same run of columns: row `k` is
/// `data[k·stride ..][..len]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lines<'a, T> {
    pub(crate) data: &'a [T],
    pub(crate) stride: usize,
    pub(crate) len: usize,
}

impl<'a, T> Lines<'a, T> {
    /// Row `k`.
    fn line(&self, k: usize) -> &'a [T] {
        &self.data[k * self.stride..][..self.len]
    }

    /// The first element of each group of [`ROWS`] rows among the first `count`, after
    /// checking once that those rows lie in `data`: the groups' loops read them through
    /// pointers, so that a step costs no more than its loads (SGEMV at 1024² f32 on one
    /// thread: 57 µs a run with each step's rows sliced and checked, 51.5 through pointers).
    fn groups(&self, count: usize) -> impl Iterator<Item = *const T> + 'a {
        let end = (count.saturating_sub(1).checked_mul(self.stride)).and_then(|e| e.checked_add(self.len));
        assert!(
            count == 0 || end.is_some_and(|end| end <= self.data.len()),
            "{count} rows of {} elements, {} apart, in {} elements",
            self.len,
            self.stride,
            self.data.len()
        );
        let (data, step) = (self.data, ROWS * self.stride);
        (0..count / ROWS).map(move |g| data[g * step..].as_ptr())
    }
}

/// The rows of the next row block that a walk over the current one pulls into the cache as it
/// goes. Where a block of whole rows is walked twice (ATAX: its row sums, then its column sums
/// once they are finished), the second walk reads the cache and memory would idle through it;
/// it pulls in a few of the next block's rows instead, so that memory stays busy (how many:
/// `exec::pulled_rows`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ahead {
    /// Elements from a row to its counterpart in the next block (before it, going backward).
    pub(crate) offset: isize,
    /// Of each step's [`ROWS`] rows, those whose counterparts this walk pulls in.
    pub(crate) share: (usize, usize),
}

impl Ahead {
    /// Nothing pulled in.
    pub(crate) const NONE: Ahead = Ahead {
        offset: 0,
        share: (0, 0),
    };

    /// Whether anything is pulled in.
    fn pulls(&self) -> bool {
        self.share.0 < self.share.1
    }
}

/// What a loop step pulls in of the next block: an [`Ahead`], or [`NoPull`] where it is
/// empty, so that a loop walked once carries no prefetches and no test for them (unfused
/// ATAX at 1024² f32 on one thread: 119 µs a run with an empty share tested in its steps, 113
/// without).
trait Pull: Copy {
    /// Pulls in the counterparts of a share of `rows` at element `j` of each.
    fn pull<T>(&self, rows: &[*const T], j: usize);
}

impl Pull for Ahead {
    #[inline(always)]
    fn pull<T>(&self, rows: &[*const T], j: usize) {
        for &row in &rows[self.share.0.min(rows.len())..self.share.1.min(rows.len())] {
            prefetch(row.wrapping_offset(self.offset).wrapping_add(j));
        }
    }
}

/// Nothing pulled in.
#[derive(Clone, Copy)]
struct NoPull;

impl Pull for NoPull {
    #[inline(always)]
    fn pull<T>(&self, _: &[*const T], _: usize) {}
}

/// Asks for the cache line holding `p` in the second-level cache (x86-64; elsewhere the
/// hardware's own prefetching alone). A prefetch reads nothing the program sees and never
/// faults, wherever `p` points.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint, not an access; SSE is part of x86-64.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        _mm_prefetch::<_MM_HINT_T1>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How the rows of one call lie on vectors: `head` elements before the first vector
/// boundary, the same in every row (else none), and the whole vectors of the unpeeled run
/// ending at element `whole`.
///
/// Peeled, the rows' loads are aligned, none across two cache lines (SGEMV at 1024² f32 on one
/// thread, rows 16 bytes off a line as the allocator hands out large arrays: 54 µs a run,
/// 51.5 peeled). Lane `l` of a vector then holds the elements `head + l` apart from a multiple
/// of the lanes, not `l`: the first vector's lanes below `head` start each sum, turned to
/// those places, and the last vector's lanes from `head` on end it, after the sums are turned
/// back — so that each lane adds the same terms in the same order as unpeeled, and the bits
/// do not depend on where the rows lie.
#[derive(Debug, Clone, Copy)]
struct Peel {
    head: usize,
    whole: usize,
    lanes: usize,
}

impl Peel {
    #[inline(always)]
    fn new<S: Simd, T: Real>(lines: &Lines<'_, T>) -> Peel {
        let lanes = lanes::<S, T>();
        let whole = lines.len / lanes * lanes;
        let head = match whole > 0 && lines.stride.is_multiple_of(lanes) {
            true => vector_head::<S, T>(std::iter::once(lines.data), whole),
            false => 0,
        };
        Peel { head, whole, lanes }
    }

    /// The elements of the aligned vectors.
    #[inline(always)]
    fn body(&self) -> std::ops::Range<usize> {
        match self.head {
            0 => 0..self.whole,
            head => head..self.whole - self.lanes + head,
        }
    }

    /// The first element of each aligned vector, in order.
    #[inline(always)]
    fn vectors(&self) -> Vectors {
        let body = self.body();
        Vectors {
            next: body.start,
            end: body.end,
            lanes: self.lanes,
        }
    }
}

/// The first elements of a run's vectors, `lanes` apart: a counted loop, which LLVM compiles
/// to one index added to each row's own pointer (through `step_by` it kept a pointer a row
/// and stepped each, eight more adds a vector).
struct Vectors {
    next: usize,
    end: usize,
    lanes: usize,
}

impl Iterator for Vectors {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        let j = self.next;
        self.next += self.lanes;
        (j < self.end).then_some(j)
    }
}

/// `dots[k] = Σ_j lines[k][j]·x[j]` for every `k`: [`ROWS`] rows a step ([`dot_rows`]), the
/// rest one at a time; `ahead` pulled in as the steps go. One dispatch for them all: a call
/// through the dispatch costs as much as a short row (SGEMV at 1024² f32 on one thread: 59–60
/// µs a run with a dispatch per eight rows, 55 with one per tile).
#[pulp::with_simd(dot_lines = simd::arch())]
#[inline(always)]
pub(crate) fn dot_lines_simd<S: Simd, T: Real>(simd: S, lines: Lines<'_, T>, x: &[T], dots: &mut [T], ahead: Ahead) {
    let x = &x[..lines.len];
    let peel = Peel::new::<S, T>(&lines);
    let done = dots.len() / ROWS * ROWS;
    let (groups, rest) = dots.split_at_mut(done);
    for (first, out) in lines.groups(done).zip(groups.chunks_exact_mut(ROWS)) {
        // SAFETY: `groups` checked that the rows lie in `lines.data`, `x.len()` elements each.
        let sums = unsafe {
            match ahead.pulls() {
                true => dot_rows(simd, first, lines.stride, x, peel, ahead),
                false => dot_rows(simd, first, lines.stride, x, peel, NoPull),
            }
        };
        out.copy_from_slice(&sums);
    }
    for (k, out) in (done..).zip(rest) {
        *out = dot_simd(simd, lines.line(k), x);
    }
}

/// The [`ROWS`] rows `stride` apart from `first`.
#[inline(always)]
fn row_starts<T>(first: *const T, stride: usize) -> [*const T; ROWS] {
    let mut rows = [first; ROWS];
    for r in 1..ROWS {
        rows[r] = rows[r - 1].wrapping_add(stride);
    }
    // Opaque to LLVM, which would otherwise rebuild each row's address from the first and
    // the stride in the loops, a chain of adds a vector (SGEMV at 8192² f32 on one thread
    // 7 % slower than with a register a row, as OpenBLAS's loops have).
    std::hint::black_box(rows)
}

/// The vector at `p`.
///
/// # Safety
///
/// A vector's elements from `p` must be readable.
#[inline(always)]
unsafe fn load<S: Simd, T: Real>(p: *const T) -> T::Lanes<S> {
    p.cast::<T::Lanes<S>>().read_unaligned()
}

/// Writes `v` at `p`.
///
/// # Safety
///
/// A vector's elements from `p` must be writable.
#[inline(always)]
unsafe fn store<S: Simd, T: Real>(p: *mut T, v: T::Lanes<S>) {
    p.cast::<T::Lanes<S>>().write_unaligned(v)
}

/// `Σ_k rows[r][k]·x[k]` for each of the [`ROWS`] rows `stride` apart from `first` (`A·x`):
/// each vector of `x` is loaded once for them all.
///
/// # Safety
///
/// The rows, `x.len()` elements each, must be readable.
#[inline(always)]
unsafe fn dot_rows<S: Simd, T: Real, P: Pull>(
    simd: S,
    first: *const T,
    stride: usize,
    x: &[T],
    peel: Peel,
    ahead: P,
) -> [T; ROWS] {
    let rows = row_starts(first, stride);
    let mut acc = first_sums::<S, T>(simd, &rows, x, peel);
    let (n, x) = (x.len(), x.as_ptr());
    for j in peel.vectors() {
        let xs = load::<S, T>(x.add(j));
        for r in 0..ROWS {
            acc[r] = T::mul_add(simd, load::<S, T>(rows[r].add(j)), xs, acc[r]);
        }
        ahead.pull(&rows, j);
    }
    last_sums::<S, T>(simd, &rows, x, n, peel, &mut acc)
}

/// The row sums' vectors after the elements before the first vector boundary (see [`Peel`]).
///
/// # Safety
///
/// As [`dot_rows`].
#[inline(always)]
unsafe fn first_sums<S: Simd, T: Real>(simd: S, rows: &[*const T; ROWS], x: &[T], peel: Peel) -> [T::Lanes<S>; ROWS] {
    let zero = T::splat(simd, T::ZERO);
    let mut acc = [zero; ROWS];
    if peel.head > 0 {
        let x_first = load::<S, T>(x.as_ptr());
        for r in 0..ROWS {
            let first = T::mul_add(simd, load::<S, T>(rows[r]), x_first, zero);
            acc[r] = T::rotate_left(simd, T::select_below(simd, peel.head, first, zero), peel.head);
        }
    }
    acc
}

/// The row sums, from their vectors after the aligned vectors: the rest of the last whole
/// vector, the lanes turned back (see [`Peel`]), and the elements past it.
///
/// # Safety
///
/// As [`dot_rows`], with `x` pointing to the `n` elements of a row.
#[inline(always)]
unsafe fn last_sums<S: Simd, T: Real>(
    simd: S,
    rows: &[*const T; ROWS],
    x: *const T,
    n: usize,
    peel: Peel,
    acc: &mut [T::Lanes<S>; ROWS],
) -> [T; ROWS] {
    let Peel { head, whole, lanes } = peel;
    if head > 0 {
        let x_last = load::<S, T>(x.add(whole - lanes));
        for r in 0..ROWS {
            let sum = T::rotate_left(simd, acc[r], lanes - head);
            let last = load::<S, T>(rows[r].add(whole - lanes));
            acc[r] = T::select_below(simd, head, sum, T::mul_add(simd, last, x_last, sum));
        }
    }
    let x_tail = std::slice::from_raw_parts(x.add(whole), n - whole);
    let mut sums = [T::ZERO; ROWS];
    for r in 0..ROWS {
        let tail = std::slice::from_raw_parts(rows[r].add(whole), n - whole);
        sums[r] = T::reduce_sum(simd, acc[r]) + dot_tail(tail, x_tail);
    }
    sums
}

/// Elements a vector of `T` holds in the instruction set `S`.
#[inline(always)]
fn lanes<S: Simd, T: Real>() -> usize {
    std::mem::size_of::<T::Lanes<S>>() / std::mem::size_of::<T>()
}

/// Where a loop's results go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    /// Plain stores: each line written is read in first, and stays in cache.
    Cached,
    /// Streaming stores of whole vectors: a line written is not read in first and displaces
    /// nothing — for a result nothing reads again while it is in cache. A quarter less traffic
    /// for `C = A + B`: MADD at 2048² f32 and 1024² f64 on two threads 0.68× the time. As wide
    /// as the vector: in C on the development machine, the same loop streaming 16 bytes at a
    /// time took 1.25 ms a run against 0.93–0.98 in 64, and from a buffer in L1 1.1–1.7. Call
    /// [`stream_fence`] before other threads read what was written.
    Streamed,
}

/// `dest = konst + Σ a·x` over the terms `(a, x)`, stored as `store` says: in one pass where
/// there are at most three terms, else the first three (in cache) and the rest added in
/// [`lin_add`]'s passes. Each element adds its terms in their order, the first three each
/// multiplied and added (two roundings), the rest in fused multiply-adds, however stored.
#[pulp::with_simd(lin_write = simd::arch())]
#[inline(always)]
pub(crate) fn lin_write_simd<S: Simd, T: Real>(simd: S, dest: &mut [T], konst: T, terms: &[(T, &[T])], store: Store) {
    match (terms.len(), store) {
        (0, Store::Cached) => lin_elements::<T, 0>(dest, 0, konst, terms),
        (1, Store::Cached) => lin_elements::<T, 1>(dest, 0, konst, terms),
        (2, Store::Cached) => lin_elements::<T, 2>(dest, 0, konst, terms),
        (3, Store::Cached) => lin_elements::<T, 3>(dest, 0, konst, terms),
        (0, Store::Streamed) => lin_stream::<S, T, 0>(simd, dest, konst, terms),
        (1, Store::Streamed) => lin_stream::<S, T, 1>(simd, dest, konst, terms),
        (2, Store::Streamed) => lin_stream::<S, T, 2>(simd, dest, konst, terms),
        (3, Store::Streamed) => lin_stream::<S, T, 3>(simd, dest, konst, terms),
        _ => {
            lin_elements::<T, 3>(dest, 0, konst, &terms[..3]);
            lin_add_simd(simd, dest, &terms[3..], Ahead::NONE);
        }
    }
}

/// `dest[k] = konst + Σ a·x[from + k]` over exactly `N` terms: a plain loop, which the compiler
/// vectorizes at the width picked (in cache faster than [`lin_stream`]'s explicit vectors
/// storing in cache: MADD at 1000² f32 on one thread 250 µs a run, 286 with the stores
/// aligned, 265 not).
#[inline(always)]
fn lin_elements<T: Real, const N: usize>(dest: &mut [T], from: usize, konst: T, terms: &[(T, &[T])]) {
    let terms: &[(T, &[T]); N] = terms.try_into().expect("N terms");
    let n = dest.len();
    let mut xs = [&[][..]; N];
    for t in 0..N {
        xs[t] = &terms[t].1[from..from + n];
    }
    for k in 0..n {
        let mut acc = konst;
        for t in 0..N {
            acc += terms[t].0 * xs[t][k];
        }
        dest[k] = acc;
    }
}

/// [`lin_elements`] with every whole vector of `dest` streamed past the caches: the elements
/// before its first vector boundary and past its last whole vector one by one, the vectors
/// between, aligned as streaming stores must be, with the same roundings.
#[inline(always)]
fn lin_stream<S: Simd, T: Real, const N: usize>(simd: S, dest: &mut [T], konst: T, terms: &[(T, &[T])]) {
    let cut = Aligned::<S, T>::new(dest);
    lin_elements::<T, N>(cut.head, 0, konst, terms);
    let k = T::splat(simd, konst);
    let (mut coefs, mut runs) = ([k; N], [&[][..]; N]);
    for t in 0..N {
        coefs[t] = T::splat(simd, terms[t].0);
        runs[t] = &T::as_lanes::<S>(&terms[t].1[cut.body.clone()]).0[..cut.vectors.len()];
    }
    for (j, d) in cut.vectors.iter_mut().enumerate() {
        let mut acc = k;
        for t in 0..N {
            acc = T::add_lanes(simd, acc, T::mul_lanes(simd, coefs[t], runs[t][j]));
        }
        // SAFETY: `d` is a whole vector of `dest` after its head, so aligned to its size.
        unsafe { stream_vector(d, acc) };
    }
    lin_elements::<T, N>(cut.tail, cut.body.end, konst, terms);
}

/// A slice cut into vectors from a given element on ([`Aligned::split`]), or from its first
/// vector boundary ([`Aligned::new`]).
struct Aligned<'a, S: Simd, T: Real> {
    /// The elements before the vectors.
    head: &'a mut [T],
    /// The whole vectors (from a vector boundary: aligned to their size, as streaming stores
    /// must be).
    vectors: &'a mut [T::Lanes<S>],
    /// The elements after them.
    tail: &'a mut [T],
    /// The elements the vectors hold.
    body: std::ops::Range<usize>,
}

impl<'a, S: Simd, T: Real> Aligned<'a, S, T> {
    /// `dest` cut at its first vector boundary.
    #[inline(always)]
    fn new(dest: &'a mut [T]) -> Self {
        let start = dest.as_ptr().align_offset(std::mem::size_of::<T::Lanes<S>>());
        Self::split(dest, start.min(dest.len()))
    }

    /// `dest` cut into vectors from element `start` on.
    #[inline(always)]
    fn split(dest: &'a mut [T], start: usize) -> Self {
        let n = dest.len();
        let (head, rest) = dest.split_at_mut(start);
        let (vectors, tail) = T::as_mut_lanes::<S>(rest);
        let end = n - tail.len();
        Aligned {
            head,
            vectors,
            tail,
            body: start..end,
        }
    }
}

/// `v` stored at `at` past the caches: a streaming store as wide as the vector (x86-64), a
/// plain store elsewhere.
///
/// # Safety
///
/// `at` must be valid for a write of `V` and aligned to its size.
#[inline(always)]
unsafe fn stream_vector<V: Copy>(at: *mut V, v: V) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, __m256i, __m512i, _mm256_stream_si256, _mm512_stream_si512, _mm_stream_si128,
        };
        use std::mem::{size_of, transmute_copy};
        // A vector of 64 bytes exists only where the dispatch found AVX-512 (pulp's V4), one of
        // 32 only with AVX2; SSE2 is part of x86-64.
        match size_of::<V>() {
            64 => return _mm512_stream_si512(at.cast(), transmute_copy::<V, __m512i>(&v)),
            32 => return _mm256_stream_si256(at.cast(), transmute_copy::<V, __m256i>(&v)),
            16 => return _mm_stream_si128(at.cast(), transmute_copy::<V, __m128i>(&v)),
            _ => {}
        }
    }
    at.write(v);
}

/// Elements before the first vector boundary of each row, where the rows all reach one after
/// the same count (else none), at most `len`. [`lin_add`] takes them, and the elements past the
/// last whole vector, in one masked step each, so that every other vector load of the rows —
/// the streams that decide its speed — is aligned and within one cache line: a load across two
/// lines costs two (with rows 16 bytes off a line, as the allocator hands out large arrays,
/// SGEMTV at 1024² f32 took 38.5–41 µs a run on two threads, 33 with its row loads aligned;
/// ATAX on one thread 130–150 µs, 117–121). Each element's sum still adds its terms in their
/// order, so the bits do not depend on where the rows lie; the dot products of rows (`A·x`)
/// peel too, and turn their lanes back (see [`Peel`]).
#[inline(always)]
fn vector_head<'a, S: Simd, T: Real + 'a>(mut rows: impl Iterator<Item = &'a [T]>, len: usize) -> usize {
    let width = std::mem::size_of::<T::Lanes<S>>();
    let Some(first) = rows.next() else { return 0 };
    let head = first.as_ptr().align_offset(width);
    match head < lanes::<S, T>() && rows.all(|r| r.as_ptr().align_offset(width) == head) {
        true => head.min(len),
        false => 0,
    }
}

/// `dest += Σ a·x` over the terms `(a, x)`, [`ROWS_PER_PASS`] at a time (one pass over `dest`
/// for as many rows of `Aᵀ·x`); where the terms are rows of a matrix, `ahead` pulled in as
/// each pass goes.
#[pulp::with_simd(lin_add = simd::arch())]
#[inline(always)]
pub(crate) fn lin_add_simd<S: Simd, T: Real>(simd: S, dest: &mut [T], terms: &[(T, &[T])], ahead: Ahead) {
    match ahead.pulls() {
        true => lin_add_groups(simd, dest, terms, ahead),
        false => lin_add_groups(simd, dest, terms, NoPull),
    }
}

/// [`lin_add`], pulling in `ahead`.
#[inline(always)]
fn lin_add_groups<S: Simd, T: Real, P: Pull>(simd: S, dest: &mut [T], terms: &[(T, &[T])], ahead: P) {
    let head = vector_head::<S, T>(terms.iter().map(|t| t.1), dest.len());
    for group in terms.chunks(ROWS_PER_PASS) {
        match group.len() {
            1 => lin_add_group::<S, T, 1, P>(simd, dest, group, head, ahead),
            2 => lin_add_group::<S, T, 2, P>(simd, dest, group, head, ahead),
            3 => lin_add_group::<S, T, 3, P>(simd, dest, group, head, ahead),
            4 => lin_add_group::<S, T, 4, P>(simd, dest, group, head, ahead),
            5 => lin_add_group::<S, T, 5, P>(simd, dest, group, head, ahead),
            6 => lin_add_group::<S, T, 6, P>(simd, dest, group, head, ahead),
            7 => lin_add_group::<S, T, 7, P>(simd, dest, group, head, ahead),
            _ => lin_add_group::<S, T, ROWS_PER_PASS, P>(simd, dest, group, head, ahead),
        }
    }
}

/// `dest += Σ a·x` over exactly `N` terms, in one pass; the first `head` elements and those
/// past the last whole vector in a masked step each (see [`vector_head`]).
#[inline(always)]
fn lin_add_group<S: Simd, T: Real, const N: usize, P: Pull>(
    simd: S,
    dest: &mut [T],
    terms: &[(T, &[T])],
    head: usize,
    ahead: P,
) {
    let terms: &[(T, &[T]); N] = terms.try_into().expect("a group of N terms");
    let n = dest.len();
    let Aligned {
        head: dest_head,
        vectors,
        tail,
        body,
    } = Aligned::<S, T>::split(dest, head);
    let (mut d_head, mut d_tail) = (T::partial_load(simd, dest_head), T::partial_load(simd, tail));
    let mut coefs = [T::splat(simd, T::ZERO); N];
    let mut runs = [&[][..]; N];
    let mut starts = [std::ptr::null::<T>(); N];
    for t in 0..N {
        coefs[t] = T::splat(simd, terms[t].0);
        let x = &terms[t].1[..n];
        d_head = T::mul_add(simd, coefs[t], T::partial_load(simd, &x[..body.start]), d_head);
        d_tail = T::mul_add(simd, coefs[t], T::partial_load(simd, &x[body.end..]), d_tail);
        runs[t] = &T::as_lanes::<S>(&x[body.clone()]).0[..vectors.len()];
        starts[t] = runs[t].as_ptr().cast::<T>();
    }
    T::partial_store(simd, dest_head, d_head);
    T::partial_store(simd, tail, d_tail);
    for (j, d) in vectors.iter_mut().enumerate() {
        let mut acc = *d;
        for t in 0..N {
            acc = T::mul_add(simd, coefs[t], runs[t][j], acc);
        }
        *d = acc;
        ahead.pull(&starts, j * lanes::<S, T>());
    }
}

/// `dest += Σ_k coefs[k]·lines[k]` over the rows of `lines` (`Aᵀ·y` on a tile): [`ROWS`] rows
/// a pass over `dest` through pointers ([`add_rows`]), the rest in one pass of [`lin_add`]'s;
/// `ahead` pulled in as the passes go. One dispatch for them all, as [`dot_lines`] (SGEMTV at
/// 1024² f32 on one thread: 5 % longer with a dispatch per eight rows through slices).
#[pulp::with_simd(add_lines = simd::arch())]
#[inline(always)]
pub(crate) fn add_lines_simd<S: Simd, T: Real>(
    simd: S,
    lines: Lines<'_, T>,
    coefs: &[T],
    dest: &mut [T],
    ahead: Ahead,
) {
    let dest = &mut dest[..lines.len];
    let peel = Peel::new::<S, T>(&lines);
    let done = coefs.len() / ROWS * ROWS;
    for (first, c) in lines.groups(done).zip(coefs.chunks_exact(ROWS)) {
        let mut step_coefs = [T::ZERO; ROWS];
        step_coefs.copy_from_slice(c);
        // SAFETY: `groups` checked that the rows lie in `lines.data`, `dest.len()` elements each.
        unsafe {
            match ahead.pulls() {
                true => add_rows(simd, first, lines.stride, step_coefs, dest, peel, ahead),
                false => add_rows(simd, first, lines.stride, step_coefs, dest, peel, NoPull),
            }
        }
    }
    let rest: Vec<(T, &[T])> = (done..coefs.len()).map(|k| (coefs[k], lines.line(k))).collect();
    lin_add_simd(simd, dest, &rest, ahead);
}

/// `dest += Σ_r coefs[r]·rows[r]` over the [`ROWS`] rows `stride` apart from `first`, in one
/// pass: each element of `dest` adds its terms in the rows' order, peeled or not.
///
/// # Safety
///
/// The rows, `dest.len()` elements each, must be readable.
#[inline(always)]
unsafe fn add_rows<S: Simd, T: Real, P: Pull>(
    simd: S,
    first: *const T,
    stride: usize,
    coefs: [T; ROWS],
    dest: &mut [T],
    peel: Peel,
    ahead: P,
) {
    let rows = row_starts(first, stride);
    let c = splats::<S, T>(simd, coefs);
    let Peel { head, whole, lanes } = peel;
    let d = dest.as_mut_ptr();
    if head > 0 {
        let (old, new) = add_columns::<S, T>(simd, &rows, &c, d, 0);
        store::<S, T>(d, T::select_below(simd, head, new, old));
    }
    for j in peel.vectors() {
        let mut column = load::<S, T>(d.add(j));
        for r in 0..ROWS {
            column = T::mul_add(simd, c[r], load::<S, T>(rows[r].add(j)), column);
        }
        store::<S, T>(d.add(j), column);
        ahead.pull(&rows, j);
    }
    if head > 0 {
        let (old, new) = add_columns::<S, T>(simd, &rows, &c, d, whole - lanes);
        store::<S, T>(d.add(whole - lanes), T::select_below(simd, head, old, new));
    }
    add_tail::<S, T>(simd, &rows, &c, &mut dest[whole..], whole);
}

/// Each of the rows' coefficients in every lane of a vector.
#[inline(always)]
fn splats<S: Simd, T: Real>(simd: S, coefs: [T; ROWS]) -> [T::Lanes<S>; ROWS] {
    let mut c = [T::splat(simd, T::ZERO); ROWS];
    for r in 0..ROWS {
        c[r] = T::splat(simd, coefs[r]);
    }
    c
}

/// `tail += Σ_r c[r]·rows[r][from ..]` for the elements past the rows' last whole vector, in
/// one masked step, with the same fused multiply-adds as the vectors before.
///
/// # Safety
///
/// The rows must be readable for `tail.len()` elements from `from`.
#[inline(always)]
unsafe fn add_tail<S: Simd, T: Real>(
    simd: S,
    rows: &[*const T; ROWS],
    c: &[T::Lanes<S>; ROWS],
    tail: &mut [T],
    from: usize,
) {
    let mut column = T::partial_load(simd, tail);
    for r in 0..ROWS {
        let row = std::slice::from_raw_parts(rows[r].add(from), tail.len());
        column = T::mul_add(simd, c[r], T::partial_load(simd, row), column);
    }
    T::partial_store(simd, tail, column);
}

/// `dest += c·x·y`.
#[pulp::with_simd(prod_add = simd::arch())]
#[inline(always)]
pub(crate) fn prod_add_simd<S: Simd, T: Real>(_simd: S, dest: &mut [T], c: T, x: &[T], y: &[T]) {
    let n = dest.len();
    let (x, y) = (&x[..n], &y[..n]);
    for k in 0..n {
        dest[k] += c * x[k] * y[k];
    }
}

/// `dest += x`.
#[pulp::with_simd(add = simd::arch())]
#[inline(always)]
pub(crate) fn add_simd<S: Simd, T: Real>(_simd: S, dest: &mut [T], x: &[T]) {
    let n = dest.len();
    let x = &x[..n];
    for k in 0..n {
        dest[k] += x[k];
    }
}

/// `dest += c`.
#[pulp::with_simd(add_const = simd::arch())]
#[inline(always)]
pub(crate) fn add_const_simd<S: Simd, T: Real>(_simd: S, dest: &mut [T], c: T) {
    dest.iter_mut().for_each(|d| *d += c);
}

/// `dots[k] = Σ_j lines[k][j]·x[j]` for every `k`, and `dest += Σ_k coefs[k]·lines[k]`:
/// [`ROWS`] rows a step ([`dot_add_rows`]), the rest one at a time, one dispatch for all.
#[pulp::with_simd(dot_add_lines = simd::arch())]
#[inline(always)]
pub(crate) fn dot_add_lines_simd<S: Simd, T: Real>(
    simd: S,
    lines: Lines<'_, T>,
    x: &[T],
    coefs: &[T],
    dest: &mut [T],
    dots: &mut [T],
) {
    let (x, dest) = (&x[..lines.len], &mut dest[..lines.len]);
    let peel = Peel::new::<S, T>(&lines);
    let done = dots.len() / ROWS * ROWS;
    let (groups, rest) = dots.split_at_mut(done);
    let steps = lines.groups(done).zip(groups.chunks_exact_mut(ROWS));
    for ((first, out), c) in steps.zip(coefs.chunks_exact(ROWS)) {
        let mut step_coefs = [T::ZERO; ROWS];
        step_coefs.copy_from_slice(c);
        // SAFETY: `groups` checked that the rows lie in `lines.data`, `x.len()` elements each.
        out.copy_from_slice(&unsafe { dot_add_rows(simd, first, lines.stride, x, step_coefs, dest, peel) });
    }
    for (k, out) in (done..).zip(rest) {
        *out = dot_add_row_simd(simd, lines.line(k), x, coefs[k], dest);
    }
}

/// `Σ_k rows[r][k]·x[k]` for each of the [`ROWS`] rows `stride` apart from `first`, and
/// `dest += Σ_r coefs[r]·rows[r]`, in one loop: each element of the rows is loaded once for
/// both sums (`A·x` with `Aᵀ·y`). Each element of `dest` adds its terms in the rows' order,
/// peeled or not.
///
/// # Safety
///
/// The rows, `x.len()` elements each, must be readable; `dest` holds as many.
#[inline(always)]
unsafe fn dot_add_rows<S: Simd, T: Real>(
    simd: S,
    first: *const T,
    stride: usize,
    x: &[T],
    coefs: [T; ROWS],
    dest: &mut [T],
    peel: Peel,
) -> [T; ROWS] {
    let rows = row_starts(first, stride);
    let mut acc = first_sums::<S, T>(simd, &rows, x, peel);
    let c = splats::<S, T>(simd, coefs);
    let Peel { head, whole, lanes } = peel;
    let (n, x, d) = (x.len(), x.as_ptr(), dest.as_mut_ptr());
    if head > 0 {
        let (old, new) = add_columns::<S, T>(simd, &rows, &c, d, 0);
        store::<S, T>(d, T::select_below(simd, head, new, old));
    }
    for j in peel.vectors() {
        let xs = load::<S, T>(x.add(j));
        let mut column = load::<S, T>(d.add(j));
        for r in 0..ROWS {
            let a = load::<S, T>(rows[r].add(j));
            acc[r] = T::mul_add(simd, a, xs, acc[r]);
            column = T::mul_add(simd, c[r], a, column);
        }
        store::<S, T>(d.add(j), column);
    }
    if head > 0 {
        let (old, new) = add_columns::<S, T>(simd, &rows, &c, d, whole - lanes);
        store::<S, T>(d.add(whole - lanes), T::select_below(simd, head, old, new));
    }
    add_tail::<S, T>(simd, &rows, &c, &mut dest[whole..n], whole);
    last_sums::<S, T>(simd, &rows, x, n, peel, &mut acc)
}

/// The vector of `dest` at `at`, and it plus `Σ_r c[r]·rows[r]` there.
///
/// # Safety
///
/// As [`dot_add_rows`], with a vector from `at` in the rows and `dest`.
#[inline(always)]
unsafe fn add_columns<S: Simd, T: Real>(
    simd: S,
    rows: &[*const T; ROWS],
    c: &[T::Lanes<S>; ROWS],
    dest: *const T,
    at: usize,
) -> (T::Lanes<S>, T::Lanes<S>) {
    let old = load::<S, T>(dest.add(at));
    let mut column = old;
    for r in 0..ROWS {
        column = T::mul_add(simd, c[r], load::<S, T>(rows[r].add(at)), column);
    }
    (old, column)
}

/// [`dot_add_rows`] for one row (the rows of a tile past a multiple of [`ROWS`]).
#[inline(always)]
fn dot_add_row_simd<S: Simd, T: Real>(simd: S, row: &[T], x: &[T], coef: T, dest: &mut [T]) -> T {
    let n = dest.len();
    let (xv, xt) = T::as_lanes::<S>(&x[..n]);
    let (av, at) = T::as_lanes::<S>(&row[..n]);
    let (dv, dt) = T::as_mut_lanes::<S>(dest);
    let c = T::splat(simd, coef);
    let whole = dv.len();
    let (av, xv) = (&av[..whole], &xv[..whole]);
    let mut acc = [T::splat(simd, T::ZERO); SUMS];
    for (j, d) in dv.iter_mut().enumerate() {
        acc[j % SUMS] = T::mul_add(simd, av[j], xv[j], acc[j % SUMS]);
        *d = T::mul_add(simd, c, av[j], *d);
    }
    for (k, d) in dt.iter_mut().enumerate() {
        *d += coef * at[k];
    }
    reduce::<S, T, _>(simd, acc) + dot_tail(at, xt)
}

/// One row's run on a triangle's ragged edge in a tile: row `row` and columns `at .. at + len`,
/// both counted from the tile's first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct End {
    pub(crate) row: usize,
    pub(crate) at: usize,
    pub(crate) len: usize,
}

/// The ragged ends of a tile: `data` from the tile's first element on, its rows `stride` apart.
/// The ends of a tile's rows go through one dispatch together, not a call each: a call per end
/// made the ends of an upper triangle at 1024² f32 three quarters of `U·x` with `Uᵀ·x`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ends<'a, T> {
    pub(crate) data: &'a [T],
    pub(crate) stride: usize,
    pub(crate) ends: &'a [End],
}

impl<'a, T> Ends<'a, T> {
    /// The elements of end `k`, with it.
    fn line(&self, k: usize) -> (End, &'a [T]) {
        let end = self.ends[k];
        (end, &self.data[end.row * self.stride + end.at..][..end.len])
    }
}

/// `dots[k] = Σ_j end_k[j]·x[at_k + j]`, `x` the tile's run: [`dot_lines`] on each end.
#[pulp::with_simd(dot_ends = simd::arch())]
#[inline(always)]
pub(crate) fn dot_ends_simd<S: Simd, T: Real>(simd: S, ends: Ends<'_, T>, x: &[T], dots: &mut [T]) {
    for (k, dot) in dots.iter_mut().enumerate() {
        let (end, line) = ends.line(k);
        *dot = dot_simd(simd, line, &x[end.at..][..end.len]);
    }
}

/// `dest[at_k ..] += coefs[k]·end_k` for every end in turn, `dest` the tile's run:
/// [`add_lines`] on each end.
#[pulp::with_simd(add_ends = simd::arch())]
#[inline(always)]
pub(crate) fn add_ends_simd<S: Simd, T: Real>(simd: S, ends: Ends<'_, T>, coefs: &[T], dest: &mut [T]) {
    for (k, &coef) in coefs.iter().enumerate() {
        let (end, line) = ends.line(k);
        lin_add_groups(simd, &mut dest[end.at..][..end.len], &[(coef, line)], NoPull);
    }
}

/// [`dot_ends`] and [`add_ends`] in one loop over each end: [`dot_add_lines`] on each end.
#[pulp::with_simd(dot_add_ends = simd::arch())]
#[inline(always)]
pub(crate) fn dot_add_ends_simd<S: Simd, T: Real>(
    simd: S,
    ends: Ends<'_, T>,
    x: &[T],
    coefs: &[T],
    dest: &mut [T],
    dots: &mut [T],
) {
    for (k, dot) in dots.iter_mut().enumerate() {
        let (end, line) = ends.line(k);
        let (x, dest) = (&x[end.at..][..end.len], &mut dest[end.at..][..end.len]);
        *dot = dot_add_row_simd(simd, line, x, coefs[k], dest);
    }
}

/// The three scaled sums of squares of a norm of `x` (see [`super::norm`]).
#[pulp::with_simd(norm = simd::arch())]
#[inline(always)]
pub(crate) fn norm_simd<S: Simd, T: Real>(_simd: S, x: &[T]) -> Norm<T> {
    norm_body(x)
}

/// The sum of vector sums, lanes and all, in a fixed order.
#[inline(always)]
fn reduce<S: Simd, T: Real, const K: usize>(simd: S, acc: [T::Lanes<S>; K]) -> T {
    let mut total = acc[0];
    for &a in &acc[1..] {
        total = T::add_lanes(simd, total, a);
    }
    T::reduce_sum(simd, total)
}

/// `Σ x[k]·y[k]` of the elements past the last whole vector.
#[inline(always)]
fn dot_tail<T: Real>(x: &[T], y: &[T]) -> T {
    x.iter().zip(y).fold(T::ZERO, |s, (&a, &b)| s + a * b)
}

/// Independent scalar accumulators of a norm's sums, which the compiler vectorizes.
const LANES: usize = 16;

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

/// `dest = src`, each whole vector of `dest` streamed past the caches ([`stream_vector`]): the
/// fastest copy there is (in C on the development machine, 24 MiB on one thread took 1.9–2.1
/// ms streamed 64 bytes at a time, 2.5 in 16, and `memcpy` reads each line written in first).
/// Call [`stream_fence`] before other threads read `dest`.
#[pulp::with_simd(stream = simd::arch())]
#[inline(always)]
pub(crate) fn stream_simd<S: Simd, T: Real>(_simd: S, dest: &mut [T], src: &[T]) {
    let src = &src[..dest.len()];
    let cut = Aligned::<S, T>::new(dest);
    cut.head.copy_from_slice(&src[..cut.body.start]);
    cut.tail.copy_from_slice(&src[cut.body.end..]);
    for (d, &s) in cut.vectors.iter_mut().zip(T::as_lanes::<S>(&src[cut.body]).0) {
        // SAFETY: `d` is a whole vector of `dest` after its head, so aligned to its size.
        unsafe { stream_vector(d, s) };
    }
}

/// Orders the streaming stores of this thread before its later stores (the end of a parallel
/// section then publishes them like any other write).
pub(crate) fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_core::Precision;

    /// Lengths around every vector width (4, 8, 16 lanes) and a long one.
    const LENGTHS: [usize; 10] = [0, 1, 3, 7, 8, 15, 16, 17, 33, 1031];

    /// A deterministic awkward value of row `r`, element `k`, in [-1, 1).
    fn value(r: usize, k: usize) -> f64 {
        let h = (r as u64 * 0x9e37_79b9 + k as u64 * 0x85eb_ca6b + 7).wrapping_mul(0xc2b2_ae35);
        (h % 20011) as f64 / 10005.5 - 1.0
    }

    fn data<T: Real>(r: usize, n: usize) -> Vec<T> {
        (0..n).map(|k| T::from_f64(value(r, k))).collect()
    }

    /// Whether `got` is within the rounding of summing `n` products of magnitude `scale` in
    /// precision `T` (`n·ε·Σ|terms|`, with room for the final additions).
    fn close<T: Real + Into<f64>>(got: T, want: f64, magnitude: f64, n: usize) -> bool {
        let eps = match T::PRECISION {
            Precision::F32 => f32::EPSILON as f64,
            Precision::F64 => f64::EPSILON,
        };
        (got.into() - want).abs() <= (n as f64 + 16.0) * eps * magnitude.max(f64::MIN_POSITIVE)
    }

    /// Half of every step's rows pulled in from the block after the next, rows `stride` apart.
    fn pulling(stride: usize) -> Ahead {
        Ahead {
            offset: (2 * ROWS * stride) as isize,
            share: (ROWS / 2, ROWS),
        }
    }

    /// Every kernel on `simd` in precision `T` against sums in f64.
    fn check<S: Simd, T: Real + Into<f64>>(simd: S) {
        let name = std::any::type_name::<S>();
        let mut heads = std::collections::BTreeSet::new();
        // The row loops' results for each length, from the first offset: the others must match
        // them bit for bit (each sum adds its terms in the same order wherever the rows lie).
        let mut first_bits: std::collections::BTreeMap<usize, [Vec<T>; 4]> = Default::default();
        let layouts = [0, 1, 3, 7].map(|offset| (offset, 16)).into_iter().chain([(3, 17)]);
        for (n, (offset, gap)) in LENGTHS.into_iter().flat_map(|n| layouts.clone().map(move |l| (n, l))) {
            // Rows of one matrix from `offset` elements into it, a whole number of vectors
            // apart (all as far from a vector boundary, so the loops take their masked head
            // steps) or, `gap` odd, not (each row lies differently, and none is peeled).
            let (count, stride) = (ROWS_PER_PASS + 3, n.next_multiple_of(16) + gap);
            let mut matrix = vec![T::ZERO; offset + count * stride];
            for r in 0..count {
                matrix[offset + r * stride..][..n].copy_from_slice(&data::<T>(r, n));
            }
            let rows: Vec<&[T]> = (0..count).map(|r| &matrix[offset + r * stride..][..n]).collect();
            heads.insert(vector_head::<S, T>(rows.iter().copied(), n));
            let x: Vec<T> = data(99, n);
            let wide = |v: &[T]| v.iter().map(|&e| e.into()).collect::<Vec<f64>>();
            let (xs, rs): (Vec<f64>, Vec<Vec<f64>>) = (wide(&x), rows.iter().map(|r| wide(r)).collect());
            let dot_of = |r: &[f64]| {
                (
                    r.iter().zip(&xs).map(|(a, b)| a * b).sum::<f64>(),
                    r.iter().zip(&xs).map(|(a, b)| (a * b).abs()).sum::<f64>(),
                )
            };
            let (want, mag) = dot_of(&rs[0]);
            assert!(
                close(dot_simd(simd, rows[0], &x), want, mag, n),
                "dot {name} {n} from {offset}"
            );
            let total: f64 = xs.iter().sum();
            assert!(
                close(sum_simd(simd, &x), total, xs.iter().map(|a| a.abs()).sum(), n),
                "sum {name} {n} from {offset}"
            );

            // Every row of the matrix: a step of eight and three more, taken one at a time.
            let lines = Lines {
                data: &matrix[offset..],
                stride,
                len: n,
            };
            heads.insert(Peel::new::<S, T>(&lines).head);
            let mut dots = vec![T::ZERO; count];
            dot_lines_simd(simd, lines, &x, &mut dots, Ahead::NONE);
            for (r, &got) in dots.iter().enumerate() {
                let (want, mag) = dot_of(&rs[r]);
                assert!(close(got, want, mag, n), "dot_lines row {r} {name} {n} from {offset}");
            }
            // Pulling in rows ahead (here past the matrix's end: a prefetch never faults) changes
            // nothing computed.
            let mut pulled = vec![T::ZERO; count];
            dot_lines_simd(simd, lines, &x, &mut pulled, pulling(stride));
            assert!(pulled == dots, "dot_lines pulling {name} {n} from {offset}");

            let coefs: Vec<T> = (0..count).map(|r| T::from_f64(0.5 - r as f64 * 0.25)).collect();
            let start: Vec<T> = data(50, n);
            let column = |k: usize, rows: usize| {
                let terms = (0..rows).map(|r| (0.5 - r as f64 * 0.25) * rs[r][k]);
                let mag = terms.clone().map(f64::abs).sum::<f64>() + start[k].into().abs();
                (start[k].into() + terms.sum::<f64>(), mag)
            };
            let (mut columns, mut sums) = (start.clone(), vec![T::ZERO; count]);
            dot_add_lines_simd(simd, lines, &x, &coefs, &mut columns, &mut sums);
            for (r, &got) in sums.iter().enumerate() {
                let (want, mag) = dot_of(&rs[r]);
                assert!(
                    close(got, want, mag, n),
                    "dot_add_lines row {r} {name} {n} from {offset}"
                );
            }
            for (k, &got) in columns.iter().enumerate() {
                let (want, mag) = column(k, count);
                assert!(
                    close(got, want, mag, count),
                    "dot_add_lines column {k} {name} {n} from {offset}"
                );
            }
            let mut one = start.clone();
            let got = dot_add_row_simd(simd, rows[0], &x, coefs[0], &mut one);
            assert!(
                close(got, dot_of(&rs[0]).0, dot_of(&rs[0]).1, n),
                "dot_add_row {name} {n} from {offset}"
            );
            for (k, &got) in one.iter().enumerate() {
                let (want, mag) = column(k, 1);
                assert!(
                    close(got, want, mag, 1),
                    "dot_add_row column {k} {name} {n} from {offset}"
                );
            }

            // One pass of eight rows and one of three.
            let terms: Vec<(T, &[T])> = (0..rows.len())
                .map(|r| (T::from_f64(0.5 - r as f64 * 0.25), rows[r]))
                .collect();
            let mut dest = start.clone();
            lin_add_simd(simd, &mut dest, &terms, Ahead::NONE);
            for (k, &got) in dest.iter().enumerate() {
                let (want, mag) = column(k, rows.len());
                assert!(
                    close(got, want, mag, rows.len()),
                    "lin_add {k} {name} {n} from {offset}"
                );
            }
            let mut pulled = start.clone();
            lin_add_simd(simd, &mut pulled, &terms, pulling(stride));
            assert!(pulled == dest, "lin_add pulling {name} {n} from {offset}");
            // The same rows as a matrix's lines, pulling or not: the same additions in the same
            // order, so the same bits.
            for ahead in [Ahead::NONE, pulling(stride)] {
                let mut added = start.clone();
                add_lines_simd(simd, lines, &coefs, &mut added, ahead);
                assert!(added == dest, "add_lines {name} {n} from {offset}, {stride} apart");
            }
            // `dest = konst + Σ`, into a destination as far from a vector boundary as the rows:
            // the same bits stored cached or streamed, and nothing outside it written.
            for count in [0, 1, 2, 3, 5] {
                let (konst, fill) = (T::from_f64(0.375), T::from_f64(7.0));
                let mut written = Vec::new();
                for store in [Store::Cached, Store::Streamed] {
                    let mut buffer = vec![fill; offset + n + 1];
                    lin_write_simd(simd, &mut buffer[offset..offset + n], konst, &terms[..count], store);
                    stream_fence();
                    let outside = buffer[..offset].iter().chain(&buffer[offset + n..]);
                    assert!(
                        outside.into_iter().all(|&e| e == fill),
                        "lin_write {store:?} {name} {n}"
                    );
                    written.push(buffer);
                }
                assert!(written[0] == written[1], "lin_write streamed {name} {n} from {offset}");
                for k in 0..n {
                    let parts = (0..count).map(|r| (0.5 - r as f64 * 0.25) * rs[r][k]);
                    let (want, mag) = (
                        0.375 + parts.clone().sum::<f64>(),
                        0.375 + parts.map(f64::abs).sum::<f64>(),
                    );
                    let got = written[0][offset + k];
                    assert!(
                        close(got, want, mag, count),
                        "lin_write {count} terms {k} {name} {n} from {offset}"
                    );
                }
            }
            // A copy streamed past the caches in this instruction set's vectors.
            let mut copied = vec![T::ZERO; offset + n];
            stream_simd(simd, &mut copied[offset..], &x);
            stream_fence();
            assert!(copied[offset..] == x[..], "stream {name} {n} from {offset}");
            let got = [dest, dots, columns, sums];
            let first = first_bits.entry(n).or_insert_with(|| got.clone());
            assert!(*first == got, "{name} {n}: other bits from {offset}, {stride} apart");
        }
        assert_eq!(
            heads.len() > 1,
            lanes::<S, T>() > 1,
            "{name}: masked head steps taken {heads:?}"
        );
    }

    /// [`check`] in both precisions on the instruction set it is dispatched to.
    struct CheckAll;

    impl pulp::WithSimd for CheckAll {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, simd: S) {
            check::<_, f32>(simd);
            check::<_, f64>(simd);
        }
    }

    #[test]
    fn every_kernel_on_every_instruction_set_of_this_cpu_matches_f64_sums() {
        // The levels `FUSE_SIMD` may pick here, each dispatched as the kernels are.
        for level in simd::SimdLevel::available() {
            level.arch().expect("an available level").dispatch(CheckAll);
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
            lin_write(&mut dest, 0.5, &list, Store::Cached);
            assert_eq!(dest, [0.5 + scale, 0.5 + 2.0 * scale, 0.5 + 3.0 * scale], "{terms}");
        }
    }
}
