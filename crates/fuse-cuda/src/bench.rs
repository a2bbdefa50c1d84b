//! `fuse bench --backend cuda`: a fused plan against the same program written with cuBLAS.
//!
//! Both are checked against the f64 reference at small sizes first (a benchmark never times
//! wrong code), then timed at the sizes asked for with CUDA events, alternating run by run so
//! that both see the same clocks, after warm-up; the medians are reported. A fused plan of more
//! than one step is timed both ways a run may go: step by step, and replayed as a CUDA graph
//! (checked against the reference too, on inputs other than those it was captured with). The copy bandwidth
//! the results are compared with is [`crate::calibrate::copy_bandwidth`].

use fuse_codegen::generate::generate_plan;
use fuse_core::data::fill_random_inputs;
use fuse_core::{Bindings, Plan, Program, Sizes};

use crate::baseline::cublas::CublasPlan;
use crate::baseline::Baseline;
use crate::cache::ModuleCache;
use crate::check::{capped, compare};
use crate::device::Device;
use crate::error::CudaError;
use crate::graph::PlanGraph;
use crate::plan::CudaPlan;
use crate::timer::{Timer, Timing, TimingOptions};

/// How to benchmark.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// Warm-up, runs and L2 flushing.
    pub timing: TimingOptions,
    /// Largest extent of the correctness check.
    pub check_extent: usize,
    /// Seed of the random inputs.
    pub seed: u64,
}

impl Default for BenchOptions {
    /// [`TimingOptions::default`], checked at ≤ 513, seed 0.
    fn default() -> Self {
        BenchOptions {
            timing: TimingOptions::default(),
            check_extent: 513,
            seed: 0,
        }
    }
}

/// One program's measurement.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The fused plan's time, its steps queued one by one.
    pub fused: Timing,
    /// The fused plan's time replayed as a CUDA graph (plans of more than one step).
    pub graph: Option<Timing>,
    /// The cuBLAS version's time.
    pub baseline: Timing,
    /// Kernels of the fused plan.
    pub kernels: usize,
    /// cuBLAS calls (and copies) of the baseline.
    pub baseline_calls: usize,
    /// The baseline's calls in one line.
    pub baseline_text: String,
    /// Bytes the baseline moves through memory.
    pub baseline_bytes: u64,
}

/// Measures `plan` of `program` against its cuBLAS version at `sizes`.
pub fn measure(
    device: &Device,
    program: &Program,
    sizes: &Sizes,
    plan: &Plan,
    options: &BenchOptions,
) -> Result<Measured, CudaError> {
    let fused = CudaPlan::compile_with(generate_plan(program, plan)?, device, &ModuleCache::default_location())?;
    let small = capped(program, sizes, options.check_extent);
    let cublas_small = CublasPlan::new(device, Baseline::new(program, &small)?)?;
    check(program, &small, options.seed, "fused plan", |i| {
        fused.run(program, &small, i)
    })?;
    if fused.generated().steps.len() > 1 {
        check_replayed(&fused, program, &small, options.seed)?;
    }
    check(program, &small, options.seed, "cuBLAS version", |i| {
        cublas_small.run(program, &small, i)
    })?;
    drop(cublas_small);
    let baseline = Baseline::new(program, sizes)?;
    let (baseline_text, baseline_calls, baseline_bytes) =
        (baseline.describe(program), baseline.ops.len(), baseline.traffic_bytes());
    let cublas = CublasPlan::new(device, baseline)?;
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, options.seed, &mut inputs);
    let mut fused_space = fused.prepare(program, sizes, &inputs)?;
    let cublas_space = cublas.prepare(program, sizes, &inputs)?;
    let graph = match fused.generated().steps.len() > 1 {
        true => Some(fused.capture_workspace(&mut fused_space)?),
        false => None,
    };
    let timer = Timer::new(device, options.timing.flush_l2)?;
    for _ in 0..options.timing.warmup {
        fused.enqueue(&mut fused_space)?;
        graph.as_ref().map(PlanGraph::replay).transpose()?;
        cublas.enqueue(&cublas_space)?;
    }
    let (mut f, mut g, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..options.timing.runs.max(1) {
        f.push(timer.once(&mut || fused.enqueue(&mut fused_space))?);
        if let Some(graph) = &graph {
            g.push(timer.once(&mut || graph.replay())?);
        }
        b.push(timer.once(&mut || cublas.enqueue(&cublas_space))?);
    }
    let timing = |v| Timing::from_runs(v).expect("at least one run");
    Ok(Measured {
        fused: timing(f),
        graph: Timing::from_runs(g),
        baseline: timing(b),
        kernels: plan.kernels.len(),
        baseline_calls,
        baseline_text,
        baseline_bytes,
    })
}

/// Runs `fused` as a graph against the reference (see [`CudaPlan::run_replayed`]).
fn check_replayed(fused: &CudaPlan, program: &Program, small: &Sizes, seed: u64) -> Result<(), CudaError> {
    let mut earlier = Bindings::new();
    fill_random_inputs(program, small, seed.wrapping_add(1), &mut earlier);
    check(program, small, seed, "fused plan replayed as a graph", |i| {
        fused.run_replayed(program, small, &earlier, i)
    })
}

/// Runs one version at small sizes against the reference.
fn check(
    program: &Program,
    small: &Sizes,
    seed: u64,
    what: &str,
    run: impl FnOnce(&Bindings) -> Result<Bindings, CudaError>,
) -> Result<(), CudaError> {
    let mut inputs = Bindings::new();
    fill_random_inputs(program, small, seed, &mut inputs);
    let want = fuse_core::reference::evaluate(program, small, &inputs)
        .map_err(|e| CudaError::Unsupported(format!("reference: {e}")))?;
    let got = run(&inputs)?;
    match compare(program, &got, &want) {
        None => Ok(()),
        Some(m) => Err(CudaError::Unsupported(format!(
            "{}: the {what} is wrong on this GPU at {small}: {m}; not timed (a fuse bug, please report)",
            program.file
        ))),
    }
}
