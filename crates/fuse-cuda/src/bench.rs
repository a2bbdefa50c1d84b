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
    /// The fused plan replayed as a CUDA graph.
    pub graph: Replayed,
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

/// How a fused plan fared replayed as a CUDA graph.
#[derive(Debug, Clone)]
pub enum Replayed {
    /// A plan of one step: nothing to gain.
    OneStep,
    /// Its time.
    Timed(Timing),
    /// Not captured or not replayed here, and why: its steps are timed alone.
    Unavailable(String),
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
    let several = fused.generated().steps.len() > 1;
    let unavailable = match several {
        true => check_replayed(&fused, program, &small, options.seed)?,
        false => None,
    };
    check(program, &small, options.seed, "cuBLAS version", |i| {
        cublas_small.run(program, &small, i)
    })?;
    drop(cublas_small);
    let baseline = Baseline::new(program, sizes)?;
    let (baseline_text, baseline_calls, baseline_bytes) = (
        baseline.describe(program),
        baseline.ops.len(),
        baseline.traffic_bytes(program),
    );
    let cublas = CublasPlan::new(device, baseline)?;
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, options.seed, &mut inputs);
    let mut fused_space = fused.prepare(program, sizes, &inputs)?;
    let cublas_space = cublas.prepare(program, sizes, &inputs)?;
    let graph = match (several, unavailable) {
        (false, _) => Ok(None),
        (true, Some(why)) => Err(why),
        (true, None) => fused
            .capture_workspace(&mut fused_space)
            .map(Some)
            .map_err(|e| e.to_string()),
    };
    let replay = graph.as_ref().ok().and_then(Option::as_ref);
    let timer = Timer::new(device, options.timing.flush_l2)?;
    for _ in 0..options.timing.warmup {
        fused.enqueue(&mut fused_space)?;
        replay.map(PlanGraph::replay).transpose()?;
        cublas.enqueue(&cublas_space)?;
    }
    let (mut f, mut g, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..options.timing.runs.max(1) {
        f.push(timer.once(&mut || fused.enqueue(&mut fused_space))?);
        if let Some(graph) = replay {
            g.push(timer.once(&mut || graph.replay())?);
        }
        b.push(timer.once(&mut || cublas.enqueue(&cublas_space))?);
    }
    let timing = |v| Timing::from_runs(v).expect("at least one run");
    let graph = match graph {
        Ok(None) => Replayed::OneStep,
        Ok(Some(_)) => Replayed::Timed(timing(g)),
        Err(why) => Replayed::Unavailable(why),
    };
    Ok(Measured {
        fused: timing(f),
        graph,
        baseline: timing(b),
        kernels: plan.kernels.len(),
        baseline_calls,
        baseline_text,
        baseline_bytes,
    })
}

/// Runs `fused` as a graph against the reference (see [`CudaPlan::run_replayed`]): why it
/// could not be captured or replayed here, if it could not; a wrong result is an error.
fn check_replayed(fused: &CudaPlan, program: &Program, small: &Sizes, seed: u64) -> Result<Option<String>, CudaError> {
    let (earlier, inputs) = (drawn(program, small, seed.wrapping_add(1)), drawn(program, small, seed));
    match fused.run_replayed(program, small, &earlier, &inputs) {
        Ok(got) => verify(program, small, &inputs, &got, "fused plan replayed as a graph").map(|()| None),
        Err(why) => Ok(Some(why.to_string())),
    }
}

/// Runs one version at small sizes against the reference.
fn check(
    program: &Program,
    small: &Sizes,
    seed: u64,
    what: &str,
    run: impl FnOnce(&Bindings) -> Result<Bindings, CudaError>,
) -> Result<(), CudaError> {
    let inputs = drawn(program, small, seed);
    verify(program, small, &inputs, &run(&inputs)?, what)
}

/// Random inputs of `program` at `sizes`.
fn drawn(program: &Program, sizes: &Sizes, seed: u64) -> Bindings {
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, seed, &mut inputs);
    inputs
}

/// `got`, what the `what` gave on `inputs`, against the reference.
fn verify(program: &Program, small: &Sizes, inputs: &Bindings, got: &Bindings, what: &str) -> Result<(), CudaError> {
    let want = fuse_core::reference::evaluate(program, small, inputs)
        .map_err(|e| CudaError::Unsupported(format!("reference: {e}")))?;
    match compare(program, got, &want) {
        None => Ok(()),
        Some(m) => Err(CudaError::Unsupported(format!(
            "{}: the {what} is wrong on this GPU at {small}: {m}; not timed (a fuse bug, please report)",
            program.file
        ))),
    }
}
