//! Measuring this machine for a CPU timing table (`fuse calibrate --backend cpu`): the copy
//! bandwidth of its memory, its arithmetic peaks, the cost of a parallel section, and the
//! compute time of every library function on data in cache.
//!
//! Each figure is the median of repeated runs after a warm-up, because a shared machine is
//! noisy and the median ignores the runs something else interrupted.

use std::hint::black_box;
use std::time::Instant;

use fuse_core::data::{fill_random_inputs, try_fill_random_inputs, try_vec, try_zeroed_vec};
use fuse_core::explore::library_checksum;
use fuse_core::explore::mapping::{call_diagonals, ELEMENT_SIDE};
use fuse_core::explore::timing::{Hardware, Measurement, Model, Peaks, Source, TimingTable, FORMAT};
use fuse_core::library::{ElementaryFunction, Form};
use fuse_core::{script, Bindings, HigherOrderKind, Library, Precision, Program, Shape, Sizes};

use super::cache::{self, Caches};
use super::cpu::{cpu_model, this_cpu};
use super::{unfused_plan, CpuError, FusedPlan, Real, Threads};
use fuse_core::explore::CPU_COMPUTE_CAPABILITY;

/// Bytes of each array of the copy measurement: far beyond any cache.
pub const COPY_BYTES: usize = 256 << 20;
/// Timed copies.
pub const COPY_REPS: usize = 10;

/// How long a calibration measures.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// What measures, for the table's header.
    pub by: &'static str,
    /// Bytes of each array of the copy measurement.
    pub copy_bytes: usize,
    /// Timed copies.
    pub copy_reps: usize,
    /// Timed runs of each function.
    pub routine_reps: usize,
    /// Functions not begun by then are left out (the model times them).
    pub seconds: Option<f64>,
}

impl Budget {
    /// `fuse calibrate --backend cpu`: about a second on a small machine, no limit.
    pub const FULL: Budget = Budget {
        by: "`fuse calibrate --backend cpu`",
        copy_bytes: COPY_BYTES,
        copy_reps: COPY_REPS,
        routine_reps: 30,
        seconds: None,
    };
    /// A CPU's first compile: half the copy, fewer runs, and at most [`QUICK_SECONDS`].
    pub const QUICK: Budget = Budget {
        by: "fuse on its first compile on this CPU (a short calibration)",
        copy_bytes: COPY_BYTES / 2,
        copy_reps: 4,
        routine_reps: 9,
        seconds: Some(QUICK_SECONDS),
    };
}

/// The most seconds a CPU's self-calibration measures ([`Budget::QUICK`]).
pub const QUICK_SECONDS: f64 = 3.0;
/// Elements per thread of a function's operands: 1 MiB of f32 per array, in the last-level
/// cache, and enough work that the parallel section's cost is a small part of the time.
const ROUTINE_ELEMENTS_PER_THREAD: usize = 256 << 10;

pub use fuse_core::explore::timing::CalibrationStep as Step;

/// A calibration's table, and what could not be measured.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The table.
    pub table: TimingTable,
    /// Functions left out, and why.
    pub notes: Vec<String>,
}

/// Measures this machine within `budget`; `progress` hears of every step before it runs.
pub fn calibrate(library: &Library, budget: Budget, progress: &mut dyn FnMut(Step)) -> Result<Calibration, CpuError> {
    let start = Instant::now();
    let functions: Vec<(&ElementaryFunction, Precision)> = library
        .functions()
        .flat_map(|f| f.precisions.iter().map(move |&p| (f, p)))
        .collect();
    let total = 4 + functions.len();
    let mut step = |done: usize, what: &str| progress(Step { done, total, what });
    // On the threads plans run on (`FUSE_NUM_THREADS`).
    let threads = Threads::shared()?;
    step(0, "copy bandwidth");
    let bandwidth = copy_bandwidth(budget.copy_bytes, budget.copy_reps)?;
    step(1, "arithmetic peak");
    let peak = Peaks {
        f32: peak_gflops::<f32>(&threads),
        f64: peak_gflops::<f64>(&threads),
    };
    step(2, "parallel section");
    let launch_us = parallel_section_us(&threads);
    let mut routines = Vec::new();
    let mut notes = Vec::new();
    step(3, "prefetching ahead");
    let caches = Caches::here();
    let mut prefetch = |matrix_bytes: usize, what: &str| {
        let rows = (matrix_bytes / (PREFETCH_COLS * 4)).min(PREFETCH_MAX_ROWS);
        match prefetch_ahead(library, rows, budget.routine_reps.clamp(3, PREFETCH_REPS)) {
            Ok(ahead) => Some(ahead),
            Err(e) => {
                notes.push(format!("prefetching ahead {what} not measured: {e}"));
                None
            }
        }
    };
    // Past what may be partly in cache, where a machine has that much.
    let far_bytes = (2 * caches.last).max(PREFETCH_MIN_BYTES).max(caches.shown / 4);
    let prefetch_ahead = prefetch(far_bytes, "out of cache");
    let prefetch_near = near_matrix_bytes(&caches).and_then(|bytes| prefetch(bytes, "partly in cache"));
    for (k, (f, precision)) in functions.iter().enumerate() {
        let name = format!("{}{}", precision.prefix(), f.name);
        if budget.seconds.is_some_and(|s| start.elapsed().as_secs_f64() > s) {
            notes.push(format!(
                "{name} not measured: the {}-second budget was spent",
                budget.seconds.unwrap_or(0.0)
            ));
            continue;
        }
        step(4 + k, &name);
        match compute_ns(library, f, *precision, launch_us, threads.count(), budget.routine_reps) {
            Ok(ns) => routines.push(measurement(f, *precision, ns)),
            Err(e) => notes.push(format!("{}{} not measured: {e}", precision.prefix(), f.name)),
        }
    }
    let table = TimingTable {
        format: FORMAT,
        source: Source::Measured,
        device: hardware(threads.count())?,
        library_checksum: Some(library_checksum(library)),
        model: Model {
            bandwidth_gb_s: bandwidth,
            peak_gflop_s: peak,
            launch_us,
            warps_to_saturate_memory: 1.0,
            warps_to_saturate_compute: 1.0,
            atomic_cost: 1.0,
            warp_instructions_per_us: None,
            prefetch_ahead,
            prefetch_near,
        },
        routines,
        origin: String::new(),
    };
    Ok(Calibration { table, notes })
}

/// The table measured within `budget` as YAML, with a header saying where it comes from.
pub fn to_yaml(table: &TimingTable, budget: Budget) -> String {
    let body = serde_yaml::to_string(table).unwrap_or_default();
    format!(
        "# fuse timing table — CPU, MEASURED by {}.\n\
         # {}: copy bandwidth {:.1} GB/s (bytes read + written by a parallel streaming copy of {} MiB arrays),\n\
         # arithmetic peak {:.0} / {:.0} GFLOP/s (f32 / f64), a parallel section {:.1} µs, and the compute\n\
         # time of each library function on data in cache (ns per 32-element or 32×32 instance);\n\
         # `prefetch_ahead`: whether walks out of cache ran faster prefetching rows in software;\n\
         # `prefetch_near`: the same for walks part of whose data a larger cache the CPU shows still held.\n\
         # `sms` is the number of threads the backend runs on; `cpu` the key of the CPUs it is used on.\n{body}",
        budget.by,
        table.device.name,
        table.model.bandwidth_gb_s,
        budget.copy_bytes >> 20,
        table.model.peak_gflop_s.f32,
        table.model.peak_gflop_s.f64,
        table.model.launch_us,
    )
}

/// This CPU as timing-table hardware: one "SM" per thread; no block limit that matters; a
/// tile may use the second-level cache of a core, and a thread walks whole rows (a row
/// barrier: row sums finish before later calls of the kernel read them). Keyed by this CPU.
fn hardware(threads: usize) -> Result<Hardware, CpuError> {
    let l2 = cache::second_level_bytes() as u64;
    Ok(Hardware {
        name: cpu_model(),
        compute_capability: CPU_COMPUTE_CAPABILITY.to_string(),
        sms: threads as u32,
        max_threads_per_block: 1024,
        max_threads_per_sm: 2048,
        max_blocks_per_sm: 32,
        max_shared_per_block: l2,
        shared_per_sm: l2,
        registers_per_sm: 65536,
        row_barrier: true,
        cpu: Some(this_cpu()?),
    })
}

/// Most timed pairs of runs in the prefetching measurement.
const PREFETCH_REPS: usize = 11;
/// Columns of the prefetching measurement's matrices (16 KiB rows of f32).
const PREFETCH_COLS: usize = 4096;
/// Bytes of each matrix at least: out of any cache a machine of a few cores is really given
/// (on the 2-vCPU Xeon, matrices of 64 MiB still came partly from its host's L3, and the two
/// ways timed alike to within noise; from 128 MiB on, prefetching was 4–9 % slower each time).
const PREFETCH_MIN_BYTES: usize = 128 << 20;
/// Rows of them at most: 256 MiB a matrix, so that a machine with a vast cache still measures
/// in a second.
const PREFETCH_MAX_ROWS: usize = 16384;
/// Bytes of each of the prefetching measurement's two matrices where part of a kernel's data
/// may still be in a larger cache than a run counts on ([`Caches::partly_cached`]): one and a
/// half times that cache each, so that each is out of it and the two together in the range;
/// none where the range is narrower than that.
fn near_matrix_bytes(caches: &Caches) -> Option<usize> {
    let bytes = caches.last + caches.last / 2;
    caches.partly_cached(2 * bytes as u64).then_some(bytes)
}
/// How much slower prefetching ahead may run before it is switched off: less is noise.
const PREFETCH_MARGIN: f64 = 0.02;

/// Whether walks out of cache run as fast prefetching each step's next rows in software as
/// without (row blocks walked in passes pull in some of the next block on every CPU, since
/// memory idles while they are walked again from cache): GESUMMV (two matrices walked in one
/// kernel, where the choice shows most — 5–7 % slower with it on the 2-vCPU Xeon of
/// 2026-11-28, up to 8 % faster on the EPYC it was tuned on) on matrices of `rows` rows (each
/// at least twice the cache a run counts on, to walk them out of cache), the two ways in
/// alternating pairs.
fn prefetch_ahead(library: &Library, rows: usize, reps: usize) -> Result<bool, CpuError> {
    let text = format!(
        "name: calibrate_prefetch\nprecision: f32\nsizes: {{m: {rows}, n: {PREFETCH_COLS}}}\n\
         inputs: {{A: [m, n], B: [m, n], x: [n]}}\noutputs: [y]\n\
         calls:\n  - t = sgemv(A, x)\n  - y = sgemv(1.0, B, x, 1.0, t)\n"
    );
    let program =
        script::parse("calibrate-prefetch.yaml", &text, library).map_err(|e| CpuError::InvalidPlan(e.to_string()))?;
    let sizes = program.sizes.clone();
    let mut plan = unfused_plan(&program, &sizes);
    let calls = plan.kernels.iter().flat_map(|k| k.calls.clone()).collect();
    plan.kernels.truncate(1);
    plan.kernels[0].calls = calls;
    let with = FusedPlan::new(program.clone(), &sizes, &plan)?.with_prefetch_ahead(true);
    let without = FusedPlan::new(program.clone(), &sizes, &plan)?.with_prefetch_ahead(false);
    let mut inputs = Bindings::new();
    // Hundreds of MiB: a machine without them skips the measurement, with a note.
    try_fill_random_inputs(&program, &sizes, 1, &mut inputs)?;
    let mut workspace = with.workspace()?;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for k in 0..=reps {
        for (fused, times) in [(&with, &mut on), (&without, &mut off)] {
            let start = Instant::now();
            fused.run_in(&inputs, &mut workspace)?;
            // The first pair only warms up.
            if k > 0 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
    }
    let median = |times: &mut Vec<f64>| {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    Ok(median(&mut on) <= median(&mut off) * (1.0 + PREFETCH_MARGIN))
}

/// The median of `reps` timings of `f`, in seconds, after one untimed run.
pub fn median_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Two arrays to time parallel copies between: the reference bandwidth of memory.
pub struct CopyProbe {
    src: Vec<f64>,
    dst: Vec<f64>,
    threads: Threads,
}

impl CopyProbe {
    /// Arrays of `bytes` each, written once so that their pages exist (huge pages, as inputs
    /// get), copied by the threads plans run on.
    pub fn new(bytes: usize) -> Result<Self, CpuError> {
        let len = (bytes / std::mem::size_of::<f64>()).max(1);
        let what = || "the copy that measures memory's bandwidth".to_string();
        let threads = Threads::shared()?;
        let mut src = try_vec(len, what)?;
        src.extend((0..len).map(|k| k as f64));
        let mut dst = try_zeroed_vec(len, what)?;
        dst.fill(0.0);
        Ok(CopyProbe { src, dst, threads })
    }

    /// Bytes one copy reads plus writes (the STREAM convention).
    pub fn bytes(&self) -> u64 {
        2 * std::mem::size_of_val(self.src.as_slice()) as u64
    }

    /// One copy, every thread copying its share with streaming stores: the fastest copy there
    /// is (on the development machine 40% faster than `memcpy`, which there reads each
    /// destination line in before writing it), so that bandwidths read as a share of what
    /// memory can do.
    pub fn copy(&mut self) {
        let piece = self.src.len().div_ceil(self.threads.count()).max(1);
        let (src, dst) = (&self.src, &mut self.dst);
        let pairs = dst.chunks_mut(piece).zip(src.chunks(piece)).collect();
        self.threads.share(pairs, |(d, s)| {
            super::loops::stream(d, s);
            super::loops::stream_fence();
        });
        black_box(&self.dst);
    }
}

/// The copy bandwidth of memory, GB/s: bytes read plus bytes written per second by a parallel
/// copy between two arrays of `bytes`, median of `reps` copies.
pub fn copy_bandwidth(bytes: usize, reps: usize) -> Result<f64, CpuError> {
    let mut probe = CopyProbe::new(bytes)?;
    let seconds = median_seconds(reps, || probe.copy());
    Ok(probe.bytes() as f64 / seconds / 1e9)
}

/// Independent vector multiply-add chains per thread in the peak measurement: enough to hide
/// the latency of each operation.
const CHAINS: usize = 16;
/// Steps of each chain.
const STEPS: usize = 200_000;

/// GFLOP/s of independent fused multiply-adds on every thread, in the precision of `T`, by the
/// same instruction set as the inner loops.
fn peak_gflops<T: Real>(threads: &Threads) -> f64 {
    let count = threads.count();
    let mut lanes = 0;
    let seconds = median_seconds(5, || {
        let each = threads.share((0..count).collect(), |t| {
            chains(black_box(T::from_f64(0.999_999)), black_box(T::from_f64(t as f64)))
        });
        lanes = black_box(each)[0].1;
    });
    (2 * lanes * CHAINS * STEPS * count) as f64 / seconds / 1e9
}

/// `CHAINS` vector chains of `x = x·a + b`: their sum, and the lanes of a vector.
#[pulp::with_simd(chains = super::simd::arch())]
#[inline(always)]
fn chains_simd<S: pulp::Simd, T: Real>(simd: S, a: T, start: T) -> (T, usize) {
    let (a, b) = (T::splat(simd, a), T::splat(simd, T::from_f64(1e-7)));
    let mut acc = [T::splat(simd, start); CHAINS];
    for _ in 0..STEPS {
        for x in acc.iter_mut() {
            *x = T::mul_add(simd, *x, a, b);
        }
    }
    let total = acc
        .iter()
        .fold(T::splat(simd, T::ZERO), |s, &x| T::add_lanes(simd, s, x));
    (
        T::reduce_sum(simd, total),
        std::mem::size_of::<T::Lanes<S>>() / std::mem::size_of::<T>(),
    )
}

/// The cost of one parallel section over every thread (a kernel's "launch"), µs.
fn parallel_section_us(threads: &Threads) -> f64 {
    let parts = threads.count() * 4;
    let seconds = median_seconds(200, || {
        threads.share((0..parts).collect(), |k| {
            black_box(k);
        });
    });
    seconds * 1e6
}

/// ns per instance of `f`'s compute routine: its largest form run alone on operands in the
/// last-level cache, the parallel section's cost taken off. A call on a triangle (or band)
/// pays per row for its ragged edge and per element for the rest, and the rest is nearly all
/// of a large one: it is timed at two sides in cache, `n` and `n/2`, and charged what grows
/// with the elements (`t(n) = a·n² + b·n`, so `a·n² = 2·(t(n) − 2·t(n/2))`). Timed at one side,
/// the edge of a 1024² triangle made a triangular product's bytes cost nearly five times a
/// full product's, and an 8192² one was predicted compute-bound, where it is memory-bound like
/// the full one, so that no plan fused two products on one triangle.
fn compute_ns(
    library: &Library,
    f: &ElementaryFunction,
    precision: Precision,
    launch_us: f64,
    threads: usize,
    reps: usize,
) -> Result<f64, CpuError> {
    let form = f
        .forms
        .iter()
        .max_by_key(|form| form.signature.params.len())
        .ok_or_else(|| CpuError::InvalidPlan(format!("`{}` has no forms", f.name)))?;
    let (text, instances) = one_call_script(f, form, precision, threads);
    let program = script::parse(&format!("calibrate-{}.yaml", f.name), &text, library)
        .map_err(|e| CpuError::InvalidPlan(e.to_string()))?;
    let once = run_us(&program, &program.sizes, reps)? - launch_us;
    let per_instance = match call_diagonals(&program.calls[0]).is_full() {
        true => once / instances as f64,
        false => {
            let mut half = program.sizes.clone();
            for (symbol, side) in program.sizes.iter() {
                half.set(symbol, side / 2);
            }
            let half = run_us(&program, &half, reps)? - launch_us;
            // At least 0, so that the bounds are in order (`clamp` would panic otherwise).
            let whole = (once / instances as f64).max(0.0);
            (2.0 * (once - 2.0 * half) / instances as f64).clamp(whole / 4.0, whole)
        }
    };
    Ok((per_instance * 1e3).max(0.0))
}

/// µs a run of `program`'s unfused plan at `sizes` takes (median of `reps`).
fn run_us(program: &Program, sizes: &Sizes, reps: usize) -> Result<f64, CpuError> {
    let fused = FusedPlan::new(program.clone(), sizes, &unfused_plan(program, sizes))?;
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, 1, &mut inputs);
    let mut workspace = fused.workspace()?;
    let mut failed = None;
    let seconds = median_seconds(reps, || {
        if let Err(e) = fused.run_in(&inputs, &mut workspace) {
            failed = Some(e);
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(seconds * 1e6),
    }
}

/// A script calling `form` of `f` once, with in-cache sizes for every dimension symbol, and
/// the number of instances (32-element sub-vectors or 32×32 tiles) the call has: as many as
/// the explorer charges the compute routine for at these sizes.
fn one_call_script(f: &ElementaryFunction, form: &Form, precision: Precision, threads: usize) -> (String, u64) {
    let elements = ROUTINE_ELEMENTS_PER_THREAD * threads;
    let shapes: Vec<(&str, &Shape)> = (form.signature.params.iter())
        .map(|p| (p.name.as_str(), &p.shape))
        .chain(std::iter::once(("", &form.signature.result)))
        .collect();
    let matrix = match f.kind {
        HigherOrderKind::NestedMap | HigherOrderKind::NestedReduce => {
            shapes.iter().map(|(_, s)| s.dims()).find(|d| d.len() == 2)
        }
        _ => None,
    };
    let extent = |symbol: &str| match matrix.as_deref() {
        // A square of one symbol (a triangle or band): its side from the elements of a
        // square, so that its triangle holds no more than the others' matrices.
        Some([rows, cols]) if rows == cols => square_side(elements),
        Some([rows, _]) if *rows == symbol => elements / MATRIX_COLS,
        Some(_) => MATRIX_COLS,
        None => elements,
    };
    let mut symbols: Vec<&str> = Vec::new();
    let mut inputs = Vec::new();
    for &(name, shape) in &shapes {
        for d in shape.dims() {
            if !symbols.contains(&d) {
                symbols.push(d);
            }
        }
        if !name.is_empty() {
            inputs.push(match shape {
                Shape::Scalar => format!("{name}: scalar"),
                _ => format!("{name}: [{}]", shape.dims().join(", ")),
            });
        }
    }
    let sizes: Vec<String> = symbols.iter().map(|s| format!("{s}: {}", extent(s))).collect();
    let args: Vec<&str> = form.signature.params.iter().map(|p| p.name.as_str()).collect();
    let result = (0..)
        .map(|k| format!("out{k}"))
        .find(|r| !args.contains(&r.as_str()))
        .unwrap_or_default();
    let text = format!(
        "precision: {precision}\nsizes: {{{}}}\ninputs: {{{}}}\noutputs: [{result}]\ncalls:\n  - {result} = {}{}({})\n",
        sizes.join(", "),
        inputs.join(", "),
        precision.prefix(),
        f.name,
        args.join(", ")
    );
    let tiles = |symbol: &str| (extent(symbol) as u64).div_ceil(ELEMENT_SIDE);
    let instances = match &matrix {
        Some(dims) => dims.iter().map(|d| tiles(d)).product(),
        None => symbols.first().map_or(1, |s| tiles(s)),
    };
    (text, instances.max(1))
}

/// Columns of a measured matrix with a symbol for each dimension.
const MATRIX_COLS: usize = 1024;

/// The side of a square of at most `2 · elements` elements, a multiple of 32.
fn square_side(elements: usize) -> usize {
    let side = (2 * elements).isqrt() as u64;
    (side / ELEMENT_SIDE * ELEMENT_SIDE).max(ELEMENT_SIDE) as usize
}

fn measurement(f: &ElementaryFunction, precision: Precision, ns: f64) -> Measurement {
    Measurement {
        function: f.name.clone(),
        variant: "default".to_string(),
        routine: "compute".to_string(),
        precision: precision.name().to_string(),
        threads: 256,
        instances: 1,
        serial_iterations: 1,
        shared_bytes: 0,
        ns_per_call: (ns * 1e4).round() / 1e4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_function_gets_a_runnable_script() {
        let library = Library::builtin().unwrap();
        for f in library.functions() {
            for form in &f.forms {
                let (text, instances) = one_call_script(f, form, Precision::F64, 2);
                let program = script::parse("t.yaml", &text, &library).unwrap_or_else(|e| panic!("{text}\n{e}"));
                assert_eq!(program.calls.len(), 1);
                assert!(instances >= 1);
            }
        }
    }

    /// The instances a measurement divides by are the tiles of the call's matrix, both of its
    /// dimensions — a triangle's square of one symbol too (it was counted along one side, so
    /// a new CPU's table had every triangular product 16 times too slow and fused none).
    #[test]
    fn a_measurement_counts_every_tile_of_its_matrix() {
        let library = Library::builtin().unwrap();
        let instances = |name: &str| {
            let f = library.functions().find(|f| f.name == name).unwrap();
            let form = f.forms.iter().max_by_key(|form| form.signature.params.len()).unwrap();
            let (text, instances) = one_call_script(f, form, Precision::F64, 2);
            let program = script::parse("t.yaml", &text, &library).unwrap();
            let dims: Vec<u64> = program.sizes.iter().map(|(_, v)| v as u64).collect();
            (dims, instances)
        };
        let (gemv, gemv_tiles) = instances("gemv");
        assert_eq!(gemv_tiles, gemv.iter().map(|d| d / 32).product::<u64>(), "{gemv:?}");
        let (trmv, trmv_tiles) = instances("trmv_upper");
        assert_eq!(
            trmv,
            [1024],
            "a triangle's side holds twice the elements, as its square"
        );
        assert_eq!(trmv_tiles, 32 * 32);
        let (dot, dot_tiles) = instances("dot");
        assert_eq!(dot_tiles, dot[0] / 32);
    }

    /// The prefetching measurement runs GESUMMV as one kernel, both ways, on the outputs of
    /// the same plan (here in cache, where the two are the same walk).
    #[test]
    fn prefetching_ahead_is_measured_on_one_gesummv_kernel() {
        let library = Library::builtin().unwrap();
        prefetch_ahead(&library, 64, 3).unwrap();
    }

    /// Only a CPU that shows a cache well beyond what a run counts on measures prefetching
    /// into it: the Xeon's 2 vCPUs shown 480 MiB, on two matrices of 48 MiB; not the EPYC's 32.
    #[test]
    fn prefetching_partly_in_cache_is_measured_where_the_cache_shown_is_larger() {
        assert_eq!(
            near_matrix_bytes(&Caches::new(48 << 10, 2 << 20, 480 << 20, 2)),
            Some(48 << 20)
        );
        assert_eq!(near_matrix_bytes(&Caches::new(32 << 10, 1 << 20, 32 << 20, 2)), None);
        assert_eq!(
            near_matrix_bytes(&Caches::new(32 << 10, 1 << 20, 96 << 20, 2)),
            None,
            "48 MiB half"
        );
    }

    #[test]
    fn a_small_copy_measures_a_positive_bandwidth() {
        let gbs = copy_bandwidth(1 << 20, 3).unwrap();
        assert!(gbs.is_finite() && gbs > 0.0, "{gbs}");
    }
}
