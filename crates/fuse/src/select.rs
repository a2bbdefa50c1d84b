//! How a backend chooses what it runs: the timing table it ranks plans by and the plan. One
//! place, used by [`Backend::compile`](crate::Backend::compile) and by the command line's
//! `bench`, `tune`, `compile` and `explore`, so that every way in picks the same plan.
//!
//! Each choice may come with a note for the user (an estimate used, a table passed over, a
//! tuned plan taken): a line starting with what it is about (`note:`, `plan:`).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use fuse_core::explore::Vocabulary;
use fuse_core::{explore, Library, Limits, Plan, Program, Sizes, TimingTable};
use fuse_cpu::fused::timings as cpu_timings;
use fuse_cuda::timings as gpu_timings;
use fuse_cuda::tune::TuneCache;
use fuse_cuda::{CudaError, Device, DeviceInfo};

use crate::error::Result;

/// The built-in function library, loaded once per process.
pub(crate) fn builtin_library() -> Result<Arc<Library>> {
    static BUILTIN: OnceLock<Arc<Library>> = OnceLock::new();
    if let Some(library) = BUILTIN.get() {
        return Ok(Arc::clone(library));
    }
    let library = Arc::new(Library::builtin()?);
    Ok(Arc::clone(BUILTIN.get_or_init(|| library)))
}

/// A timing table and the note that came with choosing it.
#[derive(Debug, Clone)]
pub struct Table {
    /// The table.
    pub table: TimingTable,
    /// Why it is an estimate, or why a table was passed over (`note: …`).
    pub note: Option<String>,
}

/// The CPU's timing table: `explicit`, else `$FUSE_CPU_TIMINGS`, else the shipped table of
/// this CPU, else the analytic estimate.
pub fn cpu_table(library: &Library, explicit: Option<&Path>) -> Result<Table> {
    let selected = cpu_timings::select(library, explicit)?;
    Ok(Table {
        table: selected.table.of_kind(Vocabulary::Cpu)?,
        note: selected.note.map(|n| format!("note: {n}")),
    })
}

/// `gpu`'s timing table: `explicit`, else `$FUSE_CUDA_TIMINGS`, else the calibrated or
/// shipped table of this GPU, else the analytic estimate.
pub fn gpu_table(gpu: &DeviceInfo, library: &Library, explicit: Option<&Path>) -> Result<Table> {
    let selected = gpu_timings::select(gpu, library, explicit)?;
    Ok(Table {
        table: selected.table.of_kind(Vocabulary::Gpu)?,
        note: selected.note.map(|n| format!("note: {n}")),
    })
}

/// The table generated code is ranked by where no GPU is named: `explicit`, else GPU 0's
/// when there is one, else the built-in analytic H100 estimate.
pub fn generator_table(library: &Library, explicit: Option<&Path>) -> Result<Table> {
    if let Some(path) = explicit {
        let table = TimingTable::load(path)?.of_kind(Vocabulary::Gpu)?;
        gpu_timings::check_fresh(&table, &explore::library_checksum(library))?;
        return Ok(Table { table, note: None });
    }
    match DeviceInfo::query(0) {
        Ok(gpu) => gpu_table(&gpu, library, None),
        Err(_) => Ok(Table {
            table: TimingTable::builtin()?,
            note: None,
        }),
    }
}

/// The best predicted plan of `program` at `sizes` by `table`.
pub fn best_plan(program: &Program, sizes: &Sizes, table: &TimingTable, library: &Library) -> Result<Plan> {
    Ok(explore(program, sizes, table, library, Limits::default())?.best())
}

/// The plan the CUDA backend runs on `device`: the one `fuse tune` remembered for this
/// program, sizes and GPU (unless a table is named), else the best predicted by the GPU's
/// table. The notes say which.
pub fn gpu_plan(
    device: &Device,
    program: &Program,
    sizes: &Sizes,
    library: &Library,
    timings: Option<&Path>,
) -> Result<(Plan, Vec<String>)> {
    let cache = TuneCache::for_gpu(device.info());
    if let Some(entry) = cache.get(program, sizes, library).filter(|_| timings.is_none()) {
        let note = format!(
            "plan: tuned by `fuse tune` (fastest of {} timed, {:.1} µs; {})",
            entry.timed,
            entry.measured_us,
            cache.path()?.display()
        );
        return Ok((entry.plan, vec![note]));
    }
    let Table { table, note } = gpu_table(device.info(), library, timings)?;
    Ok((best_plan(program, sizes, &table, library)?, note.into_iter().collect()))
}

/// GPU 0 when the CUDA backend can use it — a GPU, its driver and NVRTC — else why not, in a
/// few words: what a backend is picked by when none is named.
pub fn usable_gpu() -> std::result::Result<DeviceInfo, String> {
    let gpu = DeviceInfo::query(0).map_err(|e| short_reason(&e))?;
    match fuse_codegen::nvrtc::load() {
        Ok(_) => Ok(gpu),
        Err(_) => Err(format!(
            "{} is here, but not NVRTC: set {} to use it",
            gpu.name,
            fuse_codegen::nvrtc::LIB_ENV
        )),
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

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_codegen::dynlib::ProbeError;

    #[test]
    fn no_driver_is_a_short_reason() {
        let err = CudaError::NoDriver(ProbeError::NotFound {
            searched: vec!["x".into()],
        });
        assert_eq!(short_reason(&err), "no NVIDIA GPU driver here");
    }

    #[test]
    fn a_named_table_is_loaded_and_a_missing_one_is_an_error() {
        let library = Library::builtin().unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../library/timings/h100-analytic.yaml");
        let chosen = generator_table(&library, Some(&path)).unwrap();
        assert_eq!(chosen.table.device.name, TimingTable::builtin().unwrap().device.name);
        assert!(generator_table(&library, Some(Path::new("/nonexistent/t.yaml"))).is_err());
    }

    #[test]
    fn a_table_of_the_other_kind_of_machine_is_refused() {
        let library = Library::builtin().unwrap();
        let timings = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../library/timings");
        let err = cpu_table(&library, Some(&timings.join("h100-analytic.yaml"))).unwrap_err();
        assert!(err.is_bad_input());
        let message = err.to_string();
        assert!(message.contains("h100-analytic.yaml: a GPU timing table"), "{message}");
        assert!(message.contains("fuse calibrate --backend cpu"), "{message}");
        let err = generator_table(&library, Some(&timings.join("cpu-analytic.yaml"))).unwrap_err();
        assert!(err.to_string().contains("a CPU timing table"), "{err}");
    }
}
