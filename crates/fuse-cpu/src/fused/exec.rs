//! Running a prepared plan: kernel after kernel — a kernel's end is the global barrier — each
//! kernel's space split into contiguous parts, shared out between the calling thread and its
//! helpers.
//!
//! A part walks its rows in tiles (a few rows, and as many columns as fit a cache-sized run)
//! or its vector in chunks, and runs every call of the kernel on a tile before moving on, so a
//! tile read from memory by the first call is still in cache for the others — or, for a row
//! sum and a column sum through the same matrix (BiCGK), still in registers: the two run as one
//! loop. Calls that read a row sum of their own kernel run in a later pass over the row block,
//! once the sums of its rows are finished; the row block is then sized to stay in cache between
//! the passes. Values the plan keeps on chip live in the part's tile buffers and never reach
//! memory. Reductions keep per-part partials — a number per BLAS-1 reduction, a row sum per
//! tile row, a whole partial vector for sums down columns — added up, in part order (so every
//! run gives the same bits), after the parallel section.

use std::mem;

use fuse_core::formula::ReduceOp;
use fuse_core::{Bound, Program, Shape};

use fuse_core::formula::Diagonals;

use super::cache::Caches;
use super::eval::{self, EndsTile, Loc, Locs, NextBlock, Piece, Scope, Seg};
use super::loops::{End, Store};
use super::measured::Prefetch;
use super::memory::{split_rows, Local, View, ViewMut};
use super::norm::Norm;
use super::prepare::{KernelPlan, Op, Prepared, SharedRows, Space};
use super::threads::Order;
use super::{loops, Real, Threads};

/// The first-level cache keeps a segment's vectors while the rows of a step stream past in
/// runs of half its size (16 KiB with the 32 KiB of the development machine).
fn run_bytes(caches: &Caches) -> usize {
    caches.first / 2
}

/// Bytes of one run along a tile walked once, whose rows stream from memory: the first-level
/// cache's size. Each break in a row's stream costs the hardware prefetcher a new start, which
/// costs more than the vectors' spilling to L2 (8192² f32 on the development machine, L1d
/// 32 KiB, whole rows of 32 KiB against runs of 16 KiB: SGEMV 0.97× the time, SGEMTV 0.975,
/// BiCGK 0.93; f64 runs of 32 KiB: BiCGK 0.93, SGEMTV 0.99; whole rows of 64 KiB made f64
/// GESUMMV, two matrices against one vector, 7 % slower).
fn walk_run_bytes(caches: &Caches) -> usize {
    caches.first
}

/// Bytes of one matrix tile: an eighth of the second-level cache (128 KiB of 1 MiB on the
/// development machine), so that a few tiles (an input, on-chip values, an output) stay there
/// while every call of the kernel works on them.
fn tile_bytes(caches: &Caches) -> usize {
    caches.second / 8
}

/// Bytes of a row block walked in several passes where the whole space fits the last-level
/// cache: a quarter of the second level. With nothing pulled in beside it, a block twice a
/// tile's size still stays in L2 between its walks, and each block costs its set-up (ATAX in
/// cache on two threads, L2 1 MiB, fused against unfused in one process: 1024² f64 0.97× in
/// 128 KiB blocks, 1.01× in 256; 2048² f32 1.06 → 1.22, f64 1.30 → 1.46; 512 KiB no better).
fn cached_block_bytes(caches: &Caches) -> usize {
    caches.second / 4
}

/// Rows of a tile walked once backward ([`KernelPlan::backward`]) over a matrix in the
/// last-level cache: [`cached_block_bytes`] of them, as a block walked in several passes, 16
/// rows at least. Tiles are walked from the last, but each from its first rows: in tiles of
/// [`WALK_ROWS`] the first one walked is as large as the L2 (rows of 16 KiB), and reading its
/// oldest rows first evicts the rest before they are read, so the walk finds nothing of the
/// pass before in the L2. SGEMVT's
/// second pass on the 2-vCPU Xeon in AVX2, `fuse bench` µs, tiles of 128 rows against smaller:
/// f64 2048² (32 MiB) 1118–1176 against 1075–1114 in 32 rows (seven rounds). Out of that cache
/// (f64 and f32 at 4096², 8192²) smaller tiles were no faster, or 1–4 % slower.
fn backward_walk_rows(caches: &Caches, row_bytes: usize) -> usize {
    (cached_block_bytes(caches) / row_bytes.max(1)).clamp(2 * loops::ROWS, WALK_ROWS)
}

/// A kernel whose bytes are more than this share of the last-level cache stores the results
/// it does not read again past the caches ([`loops::Store::Streamed`]): from so far up, a run
/// after other work finds little of them in cache, and its stores then cost a read and a write
/// each. On the development machine (32 MiB), two threads, a copy of as many bytes between
/// runs, µs a run stored in cache / streamed: MADD 24 MiB 310 / 233, 12 MiB 239 / 202, waxpby
/// 12 MiB 304 / 261, vadd 16 MiB 421 / 238; at 6–8 MiB (MADD, waxpby) the same, and an 8 MiB
/// sscal faster stored in cache (4 MiB in, 4 out: 70 µs a run against 88 on a quiet machine,
/// 147 against 162 on a busy one), so that a third of the cache, not a quarter, is where
/// streaming starts.
const STREAM_SHARE: usize = 3;
/// What a walk through a matrix out of cache, walked once, pulls in: the rows of the next step,
/// as each step goes through its own, ahead of the hardware's prefetchers, which follow
/// [`loops::ROWS`] streams less closely (fuse bench, two threads, against the build without,
/// pairs alternating, ratios of the time: SGEMTV f32 8192² 0.85–0.99, SGEMV f32 8192²
/// 0.85–1.01, f64 0.95–0.96, GESUMMV f32 8192² 0.92–1.00, each with the odd pair the noise
/// of the machine took).
const STEP_AHEAD: NextBlock = NextBlock {
    rows: loops::ROWS as isize,
    share: (0, loops::ROWS),
};
/// Elements a run's length is a multiple of (where it is not the whole row): a cache line
/// of f64, so that every run but the first starts on a vector boundary where the row does.
const RUN_ALIGN: usize = 16;
/// Rows per tile at most where a tile is walked more than once: more rows only lengthen the
/// work between tiles.
const MAX_TILE_ROWS: usize = 64;
/// Rows of a tile walked once, which need not stay in cache: each tile costs its set-up (the
/// operands resolved, the row sums finished), which tall tiles spread (SGEMV at 1024² f32 on
/// one thread: 67–68 µs a run in tiles of 32 rows, 62.5 in tiles of 128).
const WALK_ROWS: usize = 128;
/// Parts per thread at most: a little slack for threads slowed by something else.
const PARTS_PER_THREAD: usize = 4;
/// Tiles (or chunks) of a part at least, beyond one part per thread: each part costs its
/// set-up and its partials, which in a run from the caches are not small (a 1024² ATAX on two
/// threads: 73 µs in two parts, 82 in eight).
const MIN_PART_TILES: usize = 32;
/// Elements per task when partial vectors are added up.
const COMBINE_CHUNK: usize = 8192;

/// Runs every kernel of `prepared` on the arrays `bound` to the program's inputs (in its
/// order), leaving computed values in `buffers` (by slot): each kernel's parts shared between
/// the calling thread and `threads`, or all on the calling thread without.
pub(crate) fn run<T: Real, A: Bound>(
    prepared: &Prepared,
    program: &Program,
    bound: &[&A],
    buffers: &mut [Vec<T>],
    threads: Option<&Threads>,
) {
    let mut input: Vec<Option<&[T]>> = vec![None; program.values.len()];
    for (&id, array) in program.inputs.iter().zip(bound) {
        input[id] = T::borrow(array.data());
    }
    for kernel in &prepared.kernels {
        let run = KernelRun {
            kernel,
            program,
            prepared,
            threads,
        };
        run.run(&input, buffers);
    }
}

/// Where the result of each call of a kernel goes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Dest {
    /// A tile buffer (local of this index).
    Chip(usize),
    /// Memory, written by each part for its rows (local of this index; the slot).
    Parts(usize, usize),
    /// Memory, written once partials are added up (the slot).
    End(usize),
}

/// One kernel with what it needs to run.
struct KernelRun<'k> {
    kernel: &'k KernelPlan,
    program: &'k Program,
    prepared: &'k Prepared,
    threads: Option<&'k Threads>,
}

/// What every part of a kernel shares.
struct Shared<'s, 'a, T> {
    kernel: &'s KernelPlan,
    locs: &'s Locs<'a, T>,
    dests: &'s [Dest],
    tile: Tile,
    /// The threads parts are shared with (else one part, on this thread).
    threads: Option<&'s Threads>,
}

/// The tile (or chunk) a part works on at a time.
#[derive(Debug, Clone, Copy)]
struct Tile {
    rows: usize,
    cols: usize,
    /// Of each step's [`loops::ROWS`] rows, how many counterparts in the next row block the
    /// walks after the first pull in (see [`NextBlock`], [`pulled_rows`]); 0: none.
    pulled: usize,
    /// Whether a walk through a matrix out of cache, walked once, prefetches each step's next
    /// rows as it goes ([`STEP_AHEAD`]).
    step_ahead: bool,
    /// Whether the kernel's bytes are more than a share of the last-level cache, so that the
    /// results none of its calls reads are stored past the caches ([`STREAM_SHARE`]).
    stream: bool,
}

/// A part's reductions, by call position (empty for other calls).
struct Partials<T> {
    columns: Vec<Vec<T>>,
    scalars: Vec<T>,
    norms: Vec<Norm<T>>,
}

impl KernelRun<'_> {
    fn run<T: Real>(&self, input: &[Option<&[T]>], buffers: &mut [Vec<T>]) {
        let dests = self.dests();
        let mut parted: Vec<(usize, Vec<T>)> = Vec::new();
        let mut ended: Vec<(usize, Vec<T>)> = Vec::new();
        for (c, dest) in dests.iter().enumerate() {
            match *dest {
                Dest::Parts(_, slot) => parted.push((c, mem::take(&mut buffers[slot]))),
                Dest::End(slot) => ended.push((c, mem::take(&mut buffers[slot]))),
                Dest::Chip(_) => {}
            }
        }
        let locs = self.locations(input, buffers, &dests);
        let shared = Shared {
            kernel: self.kernel,
            locs: &locs,
            dests: &dests,
            tile: tile::<T>(self.kernel, &Caches::here(), self.prepared.prefetch),
            threads: self.threads,
        };
        let partials = shared.run_parts(&mut parted);
        for (c, buffer) in &mut ended {
            shared.finish(*c, &partials, buffer);
        }
        drop(locs);
        for (c, buffer) in parted.into_iter().chain(ended) {
            if let Dest::Parts(_, slot) | Dest::End(slot) = dests[c] {
                buffers[slot] = buffer;
            }
        }
    }

    /// The destination of each call's result; locals numbered in call order.
    fn dests(&self) -> Vec<Dest> {
        let mut locals = 0;
        let mut local = || {
            locals += 1;
            locals - 1
        };
        self.kernel
            .calls
            .iter()
            .map(|c| {
                let slot = self.prepared.slots[c.result];
                match (&c.op, slot) {
                    (Op::Map(_), None) => Dest::Chip(local()),
                    (Op::Map(_) | Op::RowSums { .. }, Some(s)) => Dest::Parts(local(), s),
                    (_, Some(s)) => Dest::End(s),
                    (_, None) => unreachable!("only map results are kept on chip"),
                }
            })
            .collect()
    }

    /// Where every value is for this kernel: inputs and earlier results in memory, this
    /// kernel's results as locals (reductions: not readable until the kernel ends).
    fn locations<'a, T: Real>(&self, input: &[Option<&'a [T]>], buffers: &'a [Vec<T>], dests: &[Dest]) -> Locs<'a, T> {
        let entries = self
            .kernel
            .values
            .iter()
            .map(|&v| {
                let data = input[v].or_else(|| self.prepared.slots[v].map(|s| buffers[s].as_slice()));
                let loc = match (data, &self.program.values[v].shape) {
                    (None, _) => Loc::Absent,
                    (Some(d), Shape::Scalar) => d.first().map_or(Loc::Absent, |&s| Loc::Scalar(s)),
                    (Some(d), Shape::Vector(_)) => Loc::Array(View::vector(d)),
                    (Some(d), Shape::Matrix(..)) => Loc::Array(View::matrix(d, self.prepared.row_lens[v])),
                };
                (v, loc)
            })
            .collect();
        let mut locs = Locs { entries };
        let scalar = |v: fuse_core::ValueId| match locs.get(v) {
            Loc::Scalar(s) => s.to_f64(),
            _ => unreachable!("the plan was checked: scalars read are inputs or computed earlier"),
        };
        let round = |x: f64| T::from_f64(x).to_f64();
        let inlined: Vec<(fuse_core::ValueId, Loc<T>)> = (self.kernel.inlined.iter())
            .map(|(id, arg)| (*id, Loc::Scalar(T::from_f64(arg.scalar_value(&scalar, &round)))))
            .collect();
        locs.entries.extend(inlined);
        for (call, dest) in self.kernel.calls.iter().zip(dests) {
            let loc = match *dest {
                Dest::Chip(l) | Dest::Parts(l, _) => Loc::Local(l),
                Dest::End(_) => Loc::Absent,
            };
            locs.set(call.result, loc);
        }
        locs
    }
}

/// The tile `kernel` works on at a time. Where a tile is walked more than once — one matrix
/// gone through by several calls, or in several passes ([`KernelPlan::walks`]) — it fits the
/// tile's bytes, so that it stays in cache between the walks (with several passes, the whole
/// row block rather than one run of it). A tile walked once has [`WALK_ROWS`] rows and runs of
/// [`walk_run_bytes`], as do the row blocks walked in passes out of cache: their first walk
/// streams from memory like any other (ATAX at 8192² f32 in AVX2, measured as for
/// [`PULLED_SHARE`]: 1.57 in two runs of 4096 columns, 1.68 in one of 8192, 1.77 so and
/// pulling; in cache, at 2048², runs of half the L1d stay: 1.17 against 1.15 in whole rows).
/// No tile is larger than the space, whose buffers (scratch, row sums, tiles kept on chip)
/// each part allocates on every run.
///
/// Row blocks walked in several passes pull in some of the next block ([`PULLED_SHARE`]) where
/// the space is larger than the last-level cache, and are then smaller, to leave room for it;
/// from the last-level cache the pulls would only cost their instructions (ATAX on two
/// threads at 2048² f32: 236–263 µs a run → 282–291 pulling), and there the blocks are larger
/// ([`cached_block_bytes`]). All the sizes follow `caches`. Prefetching each step's next rows
/// in software runs only where `prefetch` (this CPU's measurement) says so for a kernel of its
/// bytes: part of them still in a larger cache the CPU shows, or none.
fn tile<T>(kernel: &KernelPlan, caches: &Caches, prefetch: Prefetch) -> Tile {
    let size = mem::size_of::<T>();
    let stream = kernel.bytes > (caches.last / STREAM_SHARE) as u64;
    match kernel.space {
        Space::Vector(len) => Tile {
            rows: 1,
            cols: (run_bytes(caches) / size).min(len).max(1),
            pulled: 0,
            step_ahead: false,
            stream,
        },
        Space::Matrix(all, cols) => {
            let out_of_cache = all.saturating_mul(cols).saturating_mul(size) > caches.last;
            let pull = kernel.passes > 1 && out_of_cache;
            let (run, rows) = match kernel.walks {
                1 => {
                    let rows = match kernel.backward && !out_of_cache {
                        true => backward_walk_rows(caches, cols * size),
                        false => WALK_ROWS,
                    };
                    (even_runs(cols, walk_run_bytes(caches) / size), rows)
                }
                _ => {
                    let run_bytes = if pull {
                        walk_run_bytes(caches)
                    } else {
                        run_bytes(caches)
                    };
                    let run = even_runs(cols, run_bytes / size);
                    let kept = if kernel.passes > 1 { cols.max(1) } else { run };
                    let bytes = match kernel.passes > 1 && !pull {
                        true => cached_block_bytes(caches),
                        false => tile_bytes(caches),
                    };
                    // Whole steps of the row loops: a tile of fewer rows would run them one by one.
                    (run, (bytes / (kept * size)).clamp(loops::ROWS, MAX_TILE_ROWS))
                }
            };
            let rows = (rows / loops::ROWS * loops::ROWS).min(all.next_multiple_of(loops::ROWS).max(loops::ROWS));
            Tile {
                rows,
                cols: run,
                pulled: match pull {
                    true => pulled_rows(caches, rows * cols * size),
                    false => 0,
                },
                step_ahead: match caches.partly_cached(kernel.bytes) {
                    true => prefetch.near,
                    false => prefetch.far,
                } && out_of_cache
                    && kernel.walks == 1
                    && !kernel.backward
                    && kernel.shared_rows.is_empty(),
                stream,
            }
        }
    }
}

/// Of each step's rows, how many counterparts in the next row block the walks after the
/// first over a block pull into cache between them: as many as make [`PULLED_SHARE`] of the
/// second-level cache, one at least. The first walk reads the block from memory and the
/// hardware's prefetchers keep up with it; the later walks read it from cache while memory
/// would idle, and a few of the next block's rows keep it busy. More is worse: the pulls then
/// compete with the block read again, and the next block's first walk restarts the
/// prefetchers on the rest anyway.
fn pulled_rows(caches: &Caches, block_bytes: usize) -> usize {
    (loops::ROWS * (caches.second / PULLED_SHARE) / block_bytes.max(1)).clamp(1, loops::ROWS)
}

/// The share of the second-level cache that the walks after the first over a row block pull
/// in of the next ([`pulled_rows`]): a sixteenth, the best of the counts measured on two CPUs
/// with blocks of 256 KiB. ATAX on two threads, the plans in turn, medians of each round's
/// unfused time over the fused. Zen 5 (L2 1 MiB, L3 32 MiB; runs of whole rows, blocks of 8
/// rows): at 8192² f32 in AVX2 (256 KiB blocks), 1.57 pulling none, 1.67 two rows of eight
/// (64 KiB), 1.54 three, 1.52 four; f32 in AVX-512 1.72 → 1.80; at 4096² f32, 1.76 → 1.83; f64
/// (512 KiB blocks, of which a sixteenth of the L2 is one row) 1.60 none, 1.62 two, 1.54 three,
/// 1.49 four. Xeon (L2 2 MiB; fuse bench, builds alternating, µs a run): at 8192² f32 in AVX2,
/// 9004–9693 pulling two rows of eight, 8310–9036 four (128 KiB; four the faster in each of
/// seven pairs); in AVX-512 9008–9367 → 8938–9087 (four pairs); at 4096² f32 (16-row blocks)
/// 1644–1885 → 1539–1741; at 8192² f64 (512 KiB) two rows and four the same, 19.0–19.6 ms.
const PULLED_SHARE: usize = 16;

/// The run length that splits `cols` into runs of at most `most` elements, all but the last
/// the same length, a multiple of [`RUN_ALIGN`]: 8192 f64 in runs of at most 6144 (an L1d of
/// 48 KiB) go as two of 4096, not one of 6144 and a short one that restarts the prefetchers.
fn even_runs(cols: usize, most: usize) -> usize {
    let runs = cols.div_ceil(most.max(1)).max(1);
    cols.div_ceil(runs).next_multiple_of(RUN_ALIGN).min(cols).max(1)
}

/// How `kernel` runs, in one line: threads, parts, tiles and walks over each tile.
pub(crate) fn layout<T>(kernel: &KernelPlan, threads: usize, prefetch: Prefetch) -> String {
    let tile = tile::<T>(kernel, &Caches::here(), prefetch);
    let (extent, per_tile, tiles) = match kernel.space {
        Space::Vector(len) => (len, tile.cols, format!("chunks of {} elements", tile.cols.min(len))),
        Space::Matrix(rows, _) => (
            rows,
            tile.rows,
            format!("tiles of {} rows × {} columns", tile.rows.min(rows), tile.cols),
        ),
    };
    let parts = part_bounds(kernel, extent, per_tile, threads).len();
    let walks = match kernel.passes {
        1 => String::new(),
        2 => ", each tile walked twice (its row sums finished in the first walk)".to_string(),
        n => format!(", each tile walked {n} times (row sums finished in earlier walks)"),
    };
    let pulls = match (tile.pulled, tile.step_ahead) {
        (0, true) => ", each step prefetching the rows of the next".to_string(),
        (0, false) => String::new(),
        (n, _) => format!(
            ", the walks after the first pulling {n} of each step's {} rows of the next row block into cache",
            loops::ROWS
        ),
    };
    let backward = match kernel.backward {
        true => ", from the last rows (those the pass before left in cache)",
        false => "",
    };
    let streams = match tile.stream && !kernel.streamable.is_empty() {
        true => ", writing results nothing here reads again past the caches",
        false => "",
    };
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    format!(
        "{threads} thread{} sharing {parts} part{} in {tiles}{walks}{pulls}{backward}{streams}",
        plural(threads),
        plural(parts)
    )
}

/// Splits `0..extent`, in whole tiles of `per_tile`, into contiguous parts for `threads` of
/// about equal work: one each, more where there are tiles enough. A tile's work is the
/// columns its rows read: the row blocks of a triangle read from one to every column, so equal
/// numbers of rows would leave the thread with the first rows of an upper triangle three
/// quarters of it, and the other idle for half the kernel.
fn part_bounds(kernel: &KernelPlan, extent: usize, per_tile: usize, threads: usize) -> Vec<(usize, usize)> {
    let tiles = extent.div_ceil(per_tile);
    let parts = (tiles / MIN_PART_TILES)
        .clamp(threads, threads * PARTS_PER_THREAD)
        .clamp(1, tiles.max(1));
    let banded = kernel.calls.iter().any(|c| !c.diagonals.is_full());
    let cols = match kernel.space {
        Space::Matrix(_, cols) if banded => cols,
        // Every tile the same work: no sums to build on each run of the kernel.
        _ => {
            let start = |p: usize| (p * tiles / parts * per_tile).min(extent);
            return (0..parts).map(|p| (start(p), start(p + 1))).collect();
        }
    };
    let work = |t: usize| {
        let rows = t * per_tile..((t + 1) * per_tile).min(extent);
        (0..kernel.passes)
            .map(|pass| columns_read(kernel, pass, rows.clone(), cols).len())
            .sum::<usize>()
            .max(1)
    };
    let mut done = vec![0usize; tiles + 1];
    for t in 0..tiles {
        done[t + 1] = done[t] + work(t);
    }
    let total = done[tiles];
    // Part p starts at the first tile boundary with p / parts of the work before it.
    let start = |p: usize| done.partition_point(|&w| w * parts < p * total).min(tiles) * per_tile;
    let bounds = (0..parts).map(|p| (start(p).min(extent), start(p + 1).min(extent)));
    bounds.filter(|(start, end)| start < end).collect()
}

/// The columns of rows `rows` that the calls of `kernel`'s pass `pass` read: all of them unless
/// every call reads a triangle (tiles wholly outside it are not walked).
fn columns_read(kernel: &KernelPlan, pass: usize, rows: std::ops::Range<usize>, cols: usize) -> std::ops::Range<usize> {
    let calls = kernel.calls.iter().filter(|call| call.pass == pass);
    let band = calls.map(|c| c.diagonals).reduce(Diagonals::union).unwrap_or_default();
    let (first, last) = (band.columns(rows.start, 0..cols), band.columns(rows.end - 1, 0..cols));
    first.start..last.end.max(first.start)
}

impl<'a, T: Real> Shared<'_, 'a, T> {
    /// Runs every part in parallel, each writing its share of `parted` (call, buffer).
    fn run_parts(&self, parted: &mut [(usize, Vec<T>)]) -> Vec<Partials<T>> {
        let (extent, per_tile) = match self.kernel.space {
            Space::Vector(len) => (len, self.tile.cols),
            Space::Matrix(rows, _) => (rows, self.tile.rows),
        };
        let bounds = part_bounds(self.kernel, extent, per_tile, self.threads.map_or(1, Threads::count));
        let mut pieces: Vec<Vec<(usize, &mut [T])>> = bounds.iter().map(|_| Vec::new()).collect();
        for (c, buffer) in parted.iter_mut() {
            // A matrix splits by rows of `cols` elements; row sums and vectors by elements.
            let per_row = match (self.kernel.space, &self.kernel.calls[*c].op) {
                (Space::Matrix(_, cols), Op::Map(_)) => cols,
                _ => 1,
            };
            for (p, piece) in split_rows(buffer, &bounds, per_row).into_iter().enumerate() {
                pieces[p].push((*c, piece));
            }
        }
        let parts = bounds.into_iter().zip(pieces).collect();
        let work = |(range, pieces)| self.part(range, pieces);
        let order = if self.kernel.backward {
            Order::Backward
        } else {
            Order::Forward
        };
        match self.threads {
            Some(threads) => threads.share_in(order, parts, work),
            None => order.serial(parts, work),
        }
    }

    /// The locals of one part: tile buffers, and windows on its pieces of memory.
    fn locals<'p>(&self, start: usize, pieces: Vec<(usize, &'p mut [T])>) -> Vec<Local<'p, T>> {
        let mut pieces = pieces.into_iter();
        let cols = match self.kernel.space {
            Space::Matrix(_, cols) => cols,
            Space::Vector(_) => 0,
        };
        self.dests
            .iter()
            .enumerate()
            .filter_map(|(c, dest)| match *dest {
                Dest::Chip(_) => Some(Local::chip(self.tile.rows * self.tile.cols, self.tile.cols, T::ZERO)),
                Dest::Parts(..) => {
                    let (_, data) = pieces.next().expect("a piece per call writing by parts");
                    Some(Local::Part(match (self.kernel.space, &self.kernel.calls[c].op) {
                        (Space::Matrix(..), Op::Map(_)) => ViewMut::rows(data, start, cols),
                        _ => ViewMut::vector(data, start),
                    }))
                }
                Dest::End(_) => None,
            })
            .collect()
    }

    fn part(&self, (start, end): (usize, usize), pieces: Vec<(usize, &mut [T])>) -> Partials<T> {
        let mut locals = self.locals(start, pieces);
        let mut work = Work::new(self);
        match self.kernel.space {
            Space::Vector(_) => {
                for a in (start..end).step_by(self.tile.cols) {
                    let len = self.tile.cols.min(end - a);
                    locals.iter_mut().for_each(|l| l.place(0, a));
                    self.vector_chunk(a, len, &mut locals, &mut work);
                }
            }
            Space::Matrix(_, cols) => {
                let blocks = (start..end).step_by(self.tile.rows);
                let blocks: Vec<usize> = match self.kernel.backward {
                    true => blocks.rev().collect(),
                    false => blocks.collect(),
                };
                for r0 in blocks {
                    let r1 = (r0 + self.tile.rows).min(end);
                    for pass in 0..self.kernel.passes {
                        work.rows.iter_mut().for_each(|a| a.fill(T::ZERO));
                        let next = self.next_block(pass, (start, end), r0);
                        let read = columns_read(self.kernel, pass, r0..r1, cols);
                        let first = read.start - read.start % self.tile.cols;
                        for c0 in (first..read.end).step_by(self.tile.cols) {
                            let w = self.tile.cols.min(cols - c0);
                            locals.iter_mut().for_each(|l| l.place(r0, c0));
                            self.matrix_tile((pass, next), r0..r1, c0, w, &mut locals, &mut work);
                        }
                        self.finish_rows(pass, r0..r1, &mut locals, &mut work);
                    }
                }
            }
        }
        if self.tile.stream {
            // Published with the part's other writes at the end of the parallel section.
            loops::stream_fence();
        }
        Partials {
            columns: work.columns,
            scalars: work.scalars,
            norms: work.norms,
        }
    }

    /// What the walk of `pass` over the row block from row `r0` pulls in of the next block
    /// where the tile pulls: its [`Tile::pulled`] of every step's rows, shared between the walks
    /// after the first; nothing outside the part's rows, `start .. end`. Going backward the
    /// next block is the one before, and whole (only a part's last block may be short).
    fn next_block(&self, pass: usize, (start, end): (usize, usize), r0: usize) -> NextBlock {
        let (passes, rows) = (self.kernel.passes, self.tile.rows);
        let last = match self.kernel.backward {
            true => r0 == start,
            false => r0 + rows >= end,
        };
        if self.tile.step_ahead {
            return STEP_AHEAD;
        }
        if self.tile.pulled == 0 || last || pass == 0 {
            return NextBlock::NONE;
        }
        let share = |p: usize| (p - 1) * self.tile.pulled / (passes - 1);
        NextBlock {
            rows: if self.kernel.backward {
                -(rows as isize)
            } else {
                rows as isize
            },
            share: (share(pass), share(pass + 1)),
        }
    }

    /// How call `c` stores its result: past the caches where the tile says so and it is one of
    /// the kernel's [streamable](KernelPlan::streamable) results, written by parts.
    fn store(&self, c: usize) -> Store {
        let streamable = self.kernel.streamable.contains(&self.kernel.calls[c].result);
        match self.tile.stream && streamable && matches!(self.dests[c], Dest::Parts(..)) {
            true => Store::Streamed,
            false => Store::Cached,
        }
    }

    /// The calls of the kernel that run in `pass`, with their positions.
    fn calls_of(&self, pass: usize) -> impl Iterator<Item = (usize, &super::prepare::CallPlan)> {
        self.kernel
            .calls
            .iter()
            .enumerate()
            .filter(move |(_, call)| call.pass == pass)
    }

    fn scope<'s>(&'s self, locals: &'s [Local<'a, T>], sum: Piece<'s, T>) -> Scope<'s, 'a, T> {
        Scope {
            locs: self.locs,
            locals,
            sum,
        }
    }

    /// Every call of the kernel on vector elements `a .. a + len`.
    fn vector_chunk(&self, a: usize, len: usize, locals: &mut [Local<'a, T>], work: &mut Work<T>) {
        let seg = Seg {
            fixed: 0,
            start: a,
            len,
        };
        for (c, call) in self.kernel.calls.iter().enumerate() {
            match (&call.op, self.dests[c]) {
                (Op::Map(stage), Dest::Chip(l) | Dest::Parts(l, _)) => {
                    let mut dest = mem::replace(&mut locals[l], Local::Lent);
                    let scope = self.scope(locals, Piece::Scalar(T::ZERO));
                    let (mut out, store) = (dest.view_mut(), self.store(c));
                    eval::map(stage, &scope, seg, out.run_mut(a, len), store, &mut work.scratch);
                    locals[l] = dest;
                }
                (Op::Reduce { op, body, .. }, _) => {
                    let scope = self.scope(locals, Piece::Scalar(T::ZERO));
                    match op {
                        ReduceOp::Sum => work.scalars[c] += eval::sum(body, &scope, seg, &mut work.scratch),
                        ReduceOp::Norm2 => {
                            let chunk = eval::norm(body, &scope, seg, &mut work.scratch);
                            work.norms[c] = work.norms[c].merge(chunk);
                        }
                    }
                }
                _ => unreachable!("BLAS-1 kernels hold maps and reductions"),
            }
        }
    }

    /// Every call of the kernel's `pass` on the tile of `rows` × columns `c0 .. c0 + w`, the
    /// walks through a matrix pulling in `next`.
    fn matrix_tile(
        &self,
        (pass, next): (usize, NextBlock),
        rows: std::ops::Range<usize>,
        c0: usize,
        w: usize,
        locals: &mut [Local<'a, T>],
        work: &mut Work<T>,
    ) {
        let seg = |i| Seg {
            fixed: i,
            start: c0,
            len: w,
        };
        let tile = EndsTile {
            r0: rows.start,
            start: c0,
            len: w,
        };
        let mut ends = mem::take(&mut work.ends);
        for (c, call) in self.calls_of(pass) {
            if let Some(pair) = self.kernel.shared_rows.iter().find(|p| p.holds(c)) {
                if c == pair.runs_at() {
                    let whole = pieces(call.diagonals, rows.clone(), (c0, w), next, &mut ends);
                    self.shared_rows_tile(pair, whole, (tile, &ends), locals, work);
                }
                continue;
            }
            match (&call.op, self.dests[c]) {
                (Op::Map(stage), Dest::Chip(l) | Dest::Parts(l, _)) => {
                    let mut dest = mem::replace(&mut locals[l], Local::Lent);
                    let scope = self.scope(locals, Piece::Scalar(T::ZERO));
                    let (mut out, store) = (dest.view_mut(), self.store(c));
                    for i in rows.clone() {
                        eval::map(stage, &scope, seg(i), out.row_mut(i, c0, w), store, &mut work.scratch);
                    }
                    locals[l] = dest;
                }
                (Op::RowSums { body, .. }, _) => {
                    let scope = self.scope(locals, Piece::Scalar(T::ZERO));
                    let sums = &mut work.rows[c];
                    if let Some((part, c0, w, next)) = pieces(call.diagonals, rows.clone(), (c0, w), next, &mut ends) {
                        let sums = &mut sums[part.start - rows.start..];
                        eval::row_sums(body, &scope, part, (c0, w), (sums, next), &mut work.scratch);
                    }
                    eval::row_sums_ends(body, &scope, (tile, &ends), sums, &mut work.scratch);
                }
                (Op::ColumnSums { body, .. }, _) => {
                    let scope = self.scope(locals, Piece::Scalar(T::ZERO));
                    let columns = &mut work.columns[c];
                    if let Some((part, c0, w, next)) = pieces(call.diagonals, rows.clone(), (c0, w), next, &mut ends) {
                        let dest = &mut columns[c0..c0 + w];
                        eval::accumulate(body, &scope, part, c0, (dest, next), &mut work.scratch);
                    }
                    let dest = &mut columns[c0..c0 + w];
                    eval::accumulate_ends(body, &scope, (tile, &ends), dest, &mut work.scratch);
                }
                _ => unreachable!("BLAS-2 kernels hold nested maps and nested reductions"),
            }
        }
        work.ends = ends;
    }

    /// A row sum and a column sum run together on the rectangle `whole` of a tile (rows,
    /// first column, columns) and on its ragged `ends`.
    fn shared_rows_tile(
        &self,
        pair: &SharedRows,
        whole: Option<(std::ops::Range<usize>, usize, usize, NextBlock)>,
        (tile, ends): (EndsTile, &[End]),
        locals: &[Local<'a, T>],
        work: &mut Work<T>,
    ) {
        let calls = &self.kernel.calls;
        let (Op::RowSums { body: row_body, .. }, Op::ColumnSums { body: column_body, .. }) =
            (&calls[pair.row_sums].op, &calls[pair.column_sums].op)
        else {
            unreachable!("a pair is a row sum and a column sum");
        };
        let scope = self.scope(locals, Piece::Scalar(T::ZERO));
        let (sums, columns) = (&mut work.rows[pair.row_sums], &mut work.columns[pair.column_sums]);
        let bodies = (row_body, column_body);
        if let Some((rows, c0, w, _)) = whole {
            let sums = &mut sums[rows.start - tile.r0..];
            eval::shared_rows(bodies, pair.matrix, &scope, rows, c0, sums, &mut columns[c0..c0 + w]);
        }
        let dest = &mut columns[tile.start..tile.start + tile.len];
        eval::shared_rows_ends(bodies, pair.matrix, &scope, (tile, ends), sums, dest);
    }

    /// Row sums of `pass` on the finished row block: `outer(sum)` into the part's rows of the
    /// result.
    fn finish_rows(&self, pass: usize, rows: std::ops::Range<usize>, locals: &mut [Local<'a, T>], work: &mut Work<T>) {
        let len = rows.len();
        for (c, call) in self.calls_of(pass) {
            let (Op::RowSums { outer, .. }, Dest::Parts(l, _)) = (&call.op, self.dests[c]) else {
                continue;
            };
            let sums = &work.rows[c][..len];
            let mut dest = mem::replace(&mut locals[l], Local::Lent);
            let mut out = dest.view_mut();
            let out = out.run_mut(rows.start, len);
            match outer {
                None => out.copy_from_slice(sums),
                Some(stage) => {
                    let scope = self.scope(locals, Piece::Run(sums));
                    let seg = Seg {
                        fixed: 0,
                        start: rows.start,
                        len,
                    };
                    eval::map(stage, &scope, seg, out, Store::Cached, &mut work.scratch);
                }
            }
            locals[l] = dest;
        }
    }

    /// Adds up call `c`'s partials into `out` and applies the formula around its sum.
    fn finish(&self, c: usize, partials: &[Partials<T>], out: &mut [T]) {
        match &self.kernel.calls[c].op {
            Op::Reduce { op, outer, .. } => {
                let total = match op {
                    ReduceOp::Sum => partials.iter().fold(T::ZERO, |s, p| s + p.scalars[c]),
                    ReduceOp::Norm2 => partials
                        .iter()
                        .fold(Norm::default(), |s, p| s.merge(p.norms[c]))
                        .value(),
                };
                let value = match outer {
                    None => total,
                    Some(stage) => {
                        let scope = self.scope(&[], Piece::Scalar(total));
                        let mut one = [T::ZERO];
                        let mut scratch = vec![vec![T::ZERO; 1]; stage.depth];
                        eval::generic(
                            &stage.node,
                            &scope,
                            Seg {
                                fixed: 0,
                                start: 0,
                                len: 1,
                            },
                            &mut one,
                            &mut scratch,
                        );
                        one[0]
                    }
                };
                out[0] = value;
            }
            Op::ColumnSums { outer, .. } => self.finish_columns(c, outer.as_ref(), partials, out),
            _ => unreachable!("only reductions finish after the parallel section"),
        }
    }

    fn finish_columns(&self, c: usize, outer: Option<&super::stage::Stage>, partials: &[Partials<T>], out: &mut [T]) {
        let combine = |(k, out): (usize, &mut [T])| {
            let start = k * COMBINE_CHUNK;
            let mut sums = vec![T::ZERO; out.len()];
            for p in partials {
                loops::add(&mut sums, &p.columns[c][start..start + out.len()]);
            }
            match outer {
                None => out.copy_from_slice(&sums),
                Some(stage) => {
                    let scope = self.scope(&[], Piece::Run(&sums));
                    let mut scratch = vec![vec![T::ZERO; out.len()]; stage.depth];
                    let seg = Seg {
                        fixed: 0,
                        start,
                        len: out.len(),
                    };
                    eval::map(stage, &scope, seg, out, Store::Cached, &mut scratch);
                }
            }
        };
        self.share(out.chunks_mut(COMBINE_CHUNK).enumerate().collect(), combine);
    }

    /// `work` on every item, shared with the kernel's threads where it has them.
    fn share<I: Send, R: Send>(&self, items: Vec<I>, work: impl Fn(I) -> R + Sync) -> Vec<R> {
        match self.threads {
            Some(threads) => threads.share(items, work),
            None => items.into_iter().map(work).collect(),
        }
    }
}

/// A part's working memory: scratch buffers and reduction partials.
struct Work<T> {
    scratch: Vec<Vec<T>>,
    /// Row sums of the current row block, per call.
    rows: Vec<Vec<T>>,
    /// Partial column sums, per call.
    columns: Vec<Vec<T>>,
    /// Partial BLAS-1 sums, per call.
    scalars: Vec<T>,
    /// Partial norms, per call.
    norms: Vec<Norm<T>>,
    /// The ragged ends of the tile at hand.
    ends: Vec<End>,
}

impl<T: Real> Work<T> {
    /// Working memory for a part of `shared`'s kernel.
    fn new(shared: &Shared<T>) -> Self {
        let calls = &shared.kernel.calls;
        let tile = shared.tile;
        let cols = match shared.kernel.space {
            Space::Matrix(_, cols) => cols,
            Space::Vector(_) => 0,
        };
        let sized = |want: bool, len: usize| vec![T::ZERO; if want { len } else { 0 }];
        Work {
            scratch: vec![vec![T::ZERO; tile.cols.max(tile.rows)]; shared.kernel.depth + 1],
            rows: calls
                .iter()
                .map(|c| sized(matches!(c.op, Op::RowSums { .. }), tile.rows))
                .collect(),
            columns: calls
                .iter()
                .map(|c| sized(matches!(c.op, Op::ColumnSums { .. }), cols))
                .collect(),
            scalars: vec![T::ZERO; calls.len()],
            norms: vec![Norm::default(); calls.len()],
            ends: Vec::new(),
        }
    }
}

/// The parts of the tile `rows` × columns `c0 .. c0 + w` a call reading `diagonals` reads: the
/// rectangle all its rows read, walked as a whole (pulling in `next`), as `(rows, first
/// column, columns, pull)`, and each row's ends beside it — a triangle's ragged edge, at most a
/// tile's height of columns a row — into `ends`, in the order of the rows.
fn pieces(
    diagonals: Diagonals,
    rows: std::ops::Range<usize>,
    (c0, w): (usize, usize),
    next: NextBlock,
    ends: &mut Vec<End>,
) -> Option<(std::ops::Range<usize>, usize, usize, NextBlock)> {
    ends.clear();
    let tile = c0..c0 + w;
    if diagonals.is_full() {
        return Some((rows, c0, w, next));
    }
    let (first, last) = (
        diagonals.columns(rows.start, tile.clone()),
        diagonals.columns(rows.end - 1, tile.clone()),
    );
    let all = last.start..first.end.max(last.start);
    for i in rows.clone() {
        let read = diagonals.columns(i, tile.clone());
        let (left, right) = match all.is_empty() {
            true => (read.clone(), read.end..read.end),
            false => (read.start..all.start, all.end..read.end),
        };
        for run in [left, right].into_iter().filter(|r| !r.is_empty()) {
            ends.push(End {
                row: i - rows.start,
                at: run.start - c0,
                len: run.len(),
            });
        }
    }
    (!all.is_empty()).then(|| (rows, all.start, all.len(), next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::prepare::tests::first_calls_in_one_kernel;
    use crate::fused::{unfused_plan, FusedPlan};
    use fuse_core::data::{fill_random_inputs, relative_error};
    use fuse_core::reference::evaluate;
    use fuse_core::testing::{sequence, sizes_mn};
    use fuse_core::{Bindings, Precision};

    /// A tile is walked as often as its most-read matrix is gone through, so only a tile walked
    /// again is kept small enough to stay in cache between the walks.
    #[test]
    fn walks_count_the_passes_over_one_matrix() {
        for (name, calls, want) in [
            ("gesummv", 2, 1), // A·x and B·x: each matrix once
            ("bicgk", 2, 1),   // one loop for both sums
            ("atax", 2, 2),    // Aᵀ·(A·x): A again once the row sums are finished
            ("gemver", 3, 2),  // B kept on chip: written, then read by Bᵀ·y
        ] {
            let kernel = first_calls_in_one_kernel(name, calls);
            assert_eq!(kernel.walks, want, "{name}");
            let rows = tile::<f32>(&kernel, &Caches::here(), Prefetch::both(true)).rows;
            assert_eq!(rows == WALK_ROWS, want == 1, "{name}: tiles of {rows} rows");
        }
    }

    /// A triangle's row blocks are shared by the columns they read, not by their rows: each
    /// of two threads gets half of an upper or lower triangle's elements, and a full matrix
    /// splits by rows as before.
    #[test]
    fn parts_of_a_triangle_share_its_elements_evenly() {
        let library = fuse_core::Library::builtin().unwrap();
        for (function, even_rows) in [("trmv_upper", false), ("trmtv_lower", false), ("gemv", true)] {
            let text = format!(
                "precision: f64\nsizes: {{n: 8192}}\ninputs: {{A: [n, n], x: [n]}}\noutputs: [y]\ncalls:\n  - y = d{function}(A, x)\n"
            );
            let program = fuse_core::script::parse("t.yaml", &text, &library).unwrap();
            let plan = unfused_plan(&program, &program.sizes);
            let kernel = crate::fused::prepare::prepare(&program, &program.sizes, &plan)
                .unwrap()
                .kernels
                .swap_remove(0);
            let bounds = part_bounds(&kernel, 8192, 128, 2);
            let elements = |(start, end): (usize, usize)| -> usize {
                (start..end)
                    .step_by(128)
                    .map(|r0| columns_read(&kernel, 0, r0..(r0 + 128).min(end), 8192).len() * 128)
                    .sum()
            };
            let work: Vec<usize> = bounds.iter().map(|&b| elements(b)).collect();
            let (least, most) = (*work.iter().min().unwrap(), *work.iter().max().unwrap());
            assert!(
                most as f64 <= 1.1 * least as f64,
                "{function}: {bounds:?} read {work:?}"
            );
            assert_eq!(bounds.first().unwrap().0, 0);
            assert_eq!(bounds.last().unwrap().1, 8192);
            assert!(bounds.windows(2).all(|w| w[0].1 == w[1].0), "{function}: {bounds:?}");
            let rows: Vec<usize> = bounds.iter().map(|(start, end)| end - start).collect();
            assert_eq!(rows.windows(2).all(|w| w[0] == w[1]), even_rows, "{function}: {rows:?}");
        }
    }

    /// A tile of a triangle or band is read once, exactly where each row reads: its rectangle
    /// and its rows' ends cover every row's columns in the tile, none twice, the ends in the
    /// rows' order (the order their column sums add up in).
    #[test]
    fn a_tiles_rectangle_and_ragged_ends_cover_each_rows_columns_once() {
        let bands = [
            Diagonals {
                from: Some(0),
                to: None,
            },
            Diagonals {
                from: Some(1),
                to: None,
            },
            Diagonals {
                from: None,
                to: Some(0),
            },
            Diagonals {
                from: Some(-1),
                to: Some(1),
            },
            Diagonals {
                from: Some(-40),
                to: Some(3),
            },
        ];
        let mut ends = Vec::new();
        for band in bands {
            for (rows, c0, w) in [
                (0..1, 0, 1),
                (0..128, 0, 300),
                (128..256, 0, 300),
                (200..213, 150, 77),
                (5..40, 100, 20),
            ] {
                let whole = pieces(band, rows.clone(), (c0, w), NextBlock::NONE, &mut ends);
                assert!(
                    ends.windows(2).all(|e| e[0].row <= e[1].row),
                    "{band:?} {rows:?}: {ends:?}"
                );
                for i in rows.clone() {
                    let mut read = vec![0; w];
                    if let Some((part, start, len, _)) = &whole {
                        if part.contains(&i) {
                            (start - c0..start - c0 + len).for_each(|j| read[j] += 1);
                        }
                    }
                    for end in ends.iter().filter(|e| e.row == i - rows.start) {
                        (end.at..end.at + end.len).for_each(|j| read[j] += 1);
                    }
                    let want = band.columns(i, c0..c0 + w);
                    for (j, &times) in read.iter().enumerate() {
                        let expected = usize::from(want.contains(&(c0 + j)));
                        assert_eq!(
                            times,
                            expected,
                            "{band:?} tile {rows:?} × {c0}+{w}: row {i} column {}",
                            c0 + j
                        );
                    }
                }
            }
        }
    }

    /// Tiles and runs follow the caches: the development machine's (L1d 32 KiB, L2 1 MiB) give
    /// the sizes measured there; a second level twice as large holds tiles of twice the rows,
    /// a first level half again as large longer runs; and a 2-vCPU machine shown a 480 MiB
    /// cache walks a 256 MiB ATAX as out of cache, in whole rows, pulling in the next row block
    /// (a sixteenth of the L2 of it).
    #[test]
    fn tiles_and_runs_are_shaped_by_the_caches() {
        let epyc = Caches::new(32 << 10, 1 << 20, 32 << 20, 2);
        let twice_l2 = Caches::new(32 << 10, 2 << 20, 32 << 20, 2);
        let xeon = Caches::new(48 << 10, 2 << 20, 480 << 20, 2);
        let mut gemver = first_calls_in_one_kernel("gemver", 3);
        gemver.space = Space::Matrix(8192, 8192);
        let shape = |caches: &Caches| {
            let tile = tile::<f32>(&gemver, caches, Prefetch::both(true));
            (tile.rows, tile.cols)
        };
        assert_eq!(shape(&epyc), (8, 4096), "16 KiB runs of 8 rows in 128 KiB");
        assert_eq!(shape(&twice_l2), (16, 4096), "16 KiB runs of 16 rows in 256 KiB");
        assert_eq!(
            shape(&xeon),
            (16, 4096),
            "two even runs of at most 24 KiB, 16 rows in 256 KiB"
        );
        let mut atax = first_calls_in_one_kernel("atax", 2);
        atax.space = Space::Matrix(8192, 8192);
        assert_eq!(
            tile::<f32>(&atax, &xeon, Prefetch::both(true)).pulled,
            4,
            "256 MiB is out of a 2-vCPU share of 480 MiB: 128 KiB of the next 8-row block pulled"
        );
        assert_eq!(
            tile::<f32>(&atax, &epyc, Prefetch::both(true)).pulled,
            2,
            "64 KiB of the next 256 KiB"
        );
        assert_eq!(
            tile::<f64>(&atax, &epyc, Prefetch::both(true)).pulled,
            1,
            "one row at least"
        );
        assert_eq!(
            tile::<f32>(&atax, &xeon, Prefetch::both(false)).cols,
            8192,
            "read from memory: whole rows"
        );
        atax.space = Space::Matrix(512, 8192);
        assert_eq!(
            tile::<f32>(&atax, &xeon, Prefetch::both(true)).pulled,
            0,
            "16 MiB is in it"
        );
        assert_eq!(
            tile::<f32>(&atax, &xeon, Prefetch::both(true)).cols,
            4096,
            "in cache: runs of 24 KiB at most"
        );
        let mut gesummv = first_calls_in_one_kernel("gesummv", 2);
        gesummv.space = Space::Matrix(8192, 8192);
        assert!(tile::<f32>(&gesummv, &xeon, Prefetch::both(true)).step_ahead);
        assert!(
            !tile::<f32>(&gesummv, &xeon, Prefetch::both(false)).step_ahead,
            "as this CPU's table measured"
        );
        assert!(!layout::<f32>(&gesummv, 2, Prefetch::both(false)).contains("prefetching"));
        // Where part of them may be in the 480 MiB the Xeon shows, as its table measured there.
        let near = Prefetch { near: true, far: false };
        for (side, ahead) in [(4096, true), (8192, false)] {
            gesummv.space = Space::Matrix(side, side);
            gesummv.bytes = 2 * (side * side * 4) as u64;
            assert_eq!(tile::<f32>(&gesummv, &xeon, near).step_ahead, ahead, "{side}²");
        }
        let mut sgemv = first_calls_in_one_kernel("gesummv", 2);
        sgemv.space = Space::Matrix(8192, 8192);
        assert_eq!(
            tile::<f32>(&sgemv, &epyc, Prefetch::both(true)).cols,
            8192,
            "runs of 32 KiB: whole rows"
        );
        assert_eq!(
            tile::<f64>(&sgemv, &xeon, Prefetch::both(true)).cols,
            4096,
            "two even runs of at most 48 KiB"
        );
        assert_eq!(
            tile::<f32>(&sgemv, &xeon, Prefetch::both(true)).cols,
            8192,
            "whole rows of 32 KiB"
        );
    }

    /// A walk backward over a matrix in the last-level cache goes in tiles of a quarter of the
    /// L2, so that it starts on what the walk before left in the L2; out of that cache, and
    /// forward, in tiles of `WALK_ROWS`.
    #[test]
    fn backward_walks_in_cache_go_in_tiles_of_a_quarter_of_the_l2() {
        let xeon = Caches::new(48 << 10, 2 << 20, 480 << 20, 2);
        let rows = |backward: bool, side: usize, size: usize| {
            let mut sgemv = first_calls_in_one_kernel("sgemv", 1);
            (sgemv.space, sgemv.backward) = (Space::Matrix(side, side), backward);
            match size {
                4 => tile::<f32>(&sgemv, &xeon, Prefetch::both(false)).rows,
                _ => tile::<f64>(&sgemv, &xeon, Prefetch::both(false)).rows,
            }
        };
        assert_eq!(
            rows(true, 2048, 8),
            32,
            "32 MiB is in the 2-thread share: 512 KiB tiles"
        );
        assert_eq!(rows(true, 2048, 4), 64, "rows of 8 KiB");
        assert_eq!(
            rows(true, 512, 4),
            WALK_ROWS,
            "rows of 2 KiB: no taller than a walk's tile"
        );
        assert_eq!(rows(true, 4096, 8), WALK_ROWS, "128 MiB is out of it");
        assert_eq!(rows(false, 2048, 8), WALK_ROWS, "forward");
    }

    #[test]
    fn runs_split_a_row_evenly_on_vector_boundaries() {
        assert_eq!(even_runs(8192, 6144), 4096);
        assert_eq!(even_runs(8192, 8192), 8192);
        assert_eq!(even_runs(10000, 4096), 3344, "3 runs: 3344, 3344, 3312");
        assert_eq!(even_runs(5, 4096), 5, "a short row is one run");
        assert_eq!(even_runs(0, 4096), 1);
    }

    /// Only row blocks walked again in a later pass pull in the next, and only where the space
    /// is too large to be in cache still; there, a matrix walked once in steps of rows of its
    /// own (GESUMMV's two products, not BiCGK's one loop for two sums) prefetches the next step's,
    /// but not where this CPU's table says that prefetching does not pay.
    #[test]
    fn row_blocks_walked_in_two_passes_out_of_cache_pull_in_the_next() {
        let side = (Caches::here().last / 4).isqrt() + 1;
        for (name, calls, passes, ahead) in [
            ("gesummv", 2, 1, true),
            ("bicgk", 2, 1, false),
            ("atax", 2, 2, false),
            ("gemver", 3, 1, false),
        ] {
            let mut kernel = first_calls_in_one_kernel(name, calls);
            assert_eq!(kernel.passes, passes, "{name}");
            for (rows, cols, large) in [(side, side, true), (side / 2, side, false), (8, 1000, false)] {
                kernel.space = Space::Matrix(rows, cols);
                let tile = tile::<f32>(&kernel, &Caches::here(), Prefetch::both(true));
                assert_eq!(tile.pulled > 0, large && passes > 1, "{name} at {rows} × {cols}");
                assert_eq!(tile.step_ahead, large && ahead, "{name} at {rows} × {cols}");
                let text = layout::<f32>(&kernel, 2, Prefetch::both(true));
                assert_eq!(text.contains("pulling"), tile.pulled > 0, "{name} at {rows} × {cols}");
                assert_eq!(text.contains("prefetching"), tile.step_ahead, "{name}: {text}");
                let text = layout::<f32>(&kernel, 2, Prefetch::both(false));
                assert_eq!(text.contains("pulling"), tile.pulled > 0, "{name}: {text}");
                assert!(!text.contains("prefetching"), "{name}: {text}");
            }
        }
    }

    /// ATAX's row blocks walked twice out of cache — in whole-L1d runs, the second walk pulling
    /// in some of the next block — give the reference's results, on rows of odd length (one run
    /// of f32, two of f64 with this machine's L1d of 32 or 48 KiB) and a last block of fewer
    /// rows than the others, in both precisions and on one thread and two.
    #[test]
    fn row_blocks_walked_in_passes_out_of_cache_match_the_reference() {
        for precision in [Precision::F32, Precision::F64] {
            let program = sequence("atax", precision);
            let cols = 7001;
            let rows = (Caches::here().last / (cols * precision.bytes() as usize) + 13) | 1;
            let sizes = sizes_mn(&program, rows, cols);
            let mut plan = unfused_plan(&program, &sizes);
            let calls = plan.kernels.drain(..).flat_map(|k| k.calls).collect::<Vec<_>>();
            plan.kernels = vec![fuse_core::Kernel {
                calls,
                ..unfused_plan(&program, &sizes).kernels[0].clone()
            }];
            let mut inputs = Bindings::new();
            fill_random_inputs(&program, &sizes, 5, &mut inputs);
            let want = evaluate(&program, &sizes, &inputs).unwrap();
            for threads in [1, 2] {
                let fused = FusedPlan::new(program.clone(), &sizes, &plan)
                    .unwrap()
                    .with_threads(crate::fused::Threads::new(threads).unwrap());
                let kernel = &fused.prepared.kernels[0];
                assert_eq!(kernel.passes, 2);
                let pulls = match precision {
                    Precision::F32 => tile::<f32>(kernel, &Caches::here(), Prefetch::both(false)).pulled,
                    Precision::F64 => tile::<f64>(kernel, &Caches::here(), Prefetch::both(false)).pulled,
                };
                assert!(pulls > 0, "{precision} at {sizes}");
                let got = fused.run(&inputs).unwrap();
                let error = relative_error(&got["y"].to_f64(), &want["y"].to_f64());
                let tolerance = match precision {
                    Precision::F32 => 1e-4,
                    Precision::F64 => 1e-12,
                };
                assert!(
                    error < tolerance,
                    "{precision} at {sizes} on {threads}: y off by {error:e}"
                );
            }
        }
    }

    /// Where a kernel's bytes are more than a share of the last-level cache, the results none of
    /// its calls reads again are stored past the caches (MADD's `C`, waxpby's `w`, the `B1` of
    /// GEMVER's first unfused kernel) and match the reference, on rows of odd length (off the
    /// vector boundaries); GEMVER's `B`, read again in its fused kernel, is stored in cache.
    #[test]
    fn results_stored_past_the_caches_match_the_reference() {
        assert!(first_calls_in_one_kernel("gemver", 3).streamable.is_empty());
        for (name, precision) in [
            ("madd", Precision::F32),
            ("madd", Precision::F64),
            ("waxpby", Precision::F64),
            ("gemver", Precision::F32),
        ] {
            let program = sequence(name, precision);
            // Two arrays of side² elements overflow the cache; every kernel here has as many.
            let side = ((Caches::here().last / 2 / precision.bytes() as usize).isqrt() + 1) | 1;
            let blas1 = program.sizes.get("m").is_none();
            let sizes = sizes_mn(&program, side, if blas1 { side * side } else { side });
            let fused = FusedPlan::new(program.clone(), &sizes, &unfused_plan(&program, &sizes)).unwrap();
            let first = &fused.prepared.kernels[0];
            assert_eq!(first.streamable.len(), 1, "{name}");
            assert!(
                layout::<f32>(first, 2, Prefetch::both(true)).contains("past the caches"),
                "{name} at {sizes}"
            );
            let mut inputs = Bindings::new();
            fill_random_inputs(&program, &sizes, 3, &mut inputs);
            let (want, got) = (
                evaluate(&program, &sizes, &inputs).unwrap(),
                fused.run(&inputs).unwrap(),
            );
            let tolerance = match precision {
                Precision::F32 => 1e-5,
                Precision::F64 => 1e-14,
            };
            for (output, w) in &want {
                let error = relative_error(&got[output].to_f64(), &w.to_f64());
                assert!(
                    error < tolerance,
                    "{name} {precision} at {sizes}: {output} off by {error:e}"
                );
            }
        }
    }
}
