//! The CUDA backend from the command line: finding the GPU, choosing its timing table and plan,
//! and turning CUDA errors into one-line messages with an exit status (3 when there is no
//! usable GPU, 2 for bad input such as a stale timing table, 1 otherwise).

use std::path::Path;

use fuse_codegen::generate::generate_plan;
use fuse_core::{explore, Bindings, Library, Limits, Plan, Program, Sizes, TimingTable};
use fuse_cuda::timings::{self, Selected};
use fuse_cuda::tune::TuneCache;
use fuse_cuda::{CudaError, CudaPlan, Device, DeviceInfo};

use crate::{Failure, EXIT_BAD_INPUT, EXIT_NO_DEVICE};

/// A CUDA error for the terminal.
pub fn failure(err: CudaError) -> Failure {
    let code = match &err {
        e if e.is_unavailable() => EXIT_NO_DEVICE,
        CudaError::StaleTimings { .. } | CudaError::Timing(_) | CudaError::Bind(_) | CudaError::Explore(_) => {
            EXIT_BAD_INPUT
        }
        _ => 1,
    };
    Failure {
        code,
        message: err.to_string(),
    }
}

/// Why no GPU is usable, in a few words (for "backend: cpu (…)").
pub fn short_reason(err: &CudaError) -> String {
    match err {
        CudaError::NoDriver(_) => "no NVIDIA GPU driver here".to_string(),
        CudaError::NoDevice { reason, .. } => format!("no CUDA device: {reason}"),
        other => other.to_string(),
    }
}

/// GPU 0, if one is here (cheap: no context is created).
pub fn detect() -> Result<DeviceInfo, CudaError> {
    DeviceInfo::query(0)
}

/// GPU 0 when the CUDA backend can use it — a GPU, its driver and NVRTC — else why not, in a
/// few words: what `run`, `bench` and `calibrate` pick their backend by.
pub fn usable() -> Result<DeviceInfo, String> {
    let gpu = detect().map_err(|e| short_reason(&e))?;
    match fuse_codegen::nvrtc::load() {
        Ok(_) => Ok(gpu),
        Err(_) => Err(format!(
            "{} is here, but not NVRTC: set {} to use it",
            gpu.name,
            fuse_codegen::nvrtc::LIB_ENV
        )),
    }
}

/// Opens GPU `ordinal`.
pub fn open(ordinal: usize) -> Result<Device, Failure> {
    Device::open(ordinal).map_err(failure)
}

/// The timing table for `gpu` (explicit file, calibrated, shipped or the estimate), its note
/// printed to standard error.
pub fn table(gpu: &DeviceInfo, library: &Library, explicit: Option<&Path>) -> Result<TimingTable, Failure> {
    let Selected { table, note } = timings::select(gpu, library, explicit).map_err(failure)?;
    if let Some(note) = note {
        eprintln!("note: {note}");
    }
    Ok(table)
}

/// The table the explorer ranks plans by when none is named: this GPU's, when there is one,
/// else the built-in analytic H100 estimate.
pub fn default_table(library: &Library) -> Result<TimingTable, Failure> {
    match detect() {
        Ok(gpu) => table(&gpu, library, None),
        Err(_) => TimingTable::builtin().map_err(crate::bad_input),
    }
}

/// The plan `fuse run --backend cuda` runs: the one `fuse tune` remembered for this program,
/// sizes and GPU, else the best predicted by the GPU's table. Says which on standard error.
pub fn plan(
    device: &Device,
    program: &Program,
    sizes: &Sizes,
    library: &Library,
    timings: Option<&Path>,
) -> Result<Plan, Failure> {
    let cache = TuneCache::for_gpu(device.info());
    if let Some(entry) = cache.get(program, sizes, library).filter(|_| timings.is_none()) {
        eprintln!(
            "plan: tuned by `fuse tune` (fastest of {} timed, {:.1} µs; {})",
            entry.timed,
            entry.measured_us,
            cache.path().display()
        );
        return Ok(entry.plan);
    }
    let table = table(device.info(), library, timings)?;
    let exploration = explore(program, sizes, &table, library, Limits::default()).map_err(crate::bad_input)?;
    Ok(exploration.best())
}

/// `fuse run --backend cuda`: the plan chosen at `plan_sizes` (usually the run's sizes), run
/// on GPU 0 once at `sizes`.
pub fn run(
    program: &Program,
    sizes: &Sizes,
    plan_sizes: &Sizes,
    library: &Library,
    inputs: &Bindings,
) -> Result<Bindings, Failure> {
    let device = open(0)?;
    let plan = plan(&device, program, plan_sizes, library, None)?;
    let generated = generate_plan(program, &plan).map_err(crate::bad_input)?;
    let cuda = CudaPlan::compile(generated, &device).map_err(failure)?;
    match (cuda.from_cache(), cuda.cache_warning()) {
        (true, _) => eprintln!("module: from the module cache (nothing compiled)"),
        (false, None) => eprintln!("module: compiled with NVRTC and cached"),
        (false, Some(warning)) => eprintln!("module: compiled with NVRTC; not cached: {warning}"),
    }
    cuda.run(program, sizes, inputs).map_err(failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_codegen::dynlib::ProbeError;

    #[test]
    fn no_gpu_is_its_own_exit_status_and_a_short_reason() {
        let err = CudaError::NoDriver(ProbeError::NotFound {
            searched: vec!["x".into()],
        });
        assert_eq!(short_reason(&err), "no NVIDIA GPU driver here");
        let f = failure(err);
        assert_eq!(f.code, EXIT_NO_DEVICE);
        assert!(!f.message.contains('\n'), "{}", f.message);
        let stale = CudaError::StaleTimings {
            file: "t.yaml".into(),
            table: "a".into(),
            library: "b".into(),
        };
        assert_eq!(failure(stale).code, EXIT_BAD_INPUT);
    }
}
