//! fuse's errors on the terminal — exit status 3 when there is no usable GPU, 2 for bad input
//! such as a stale timing table, 1 otherwise — and the GPU choices of `fuse::select` with their
//! notes printed to standard error.

use std::path::Path;

use fuse::stages::fuse_core::TimingTable;
use fuse::stages::fuse_cuda::{Device, DeviceInfo};
use fuse::{select, Library, Plan, Program, Sizes};

use crate::{Failure, EXIT_BAD_INPUT, EXIT_NO_DEVICE};

/// An error of fuse (or of a backend below it) for the terminal.
pub fn failure(err: impl Into<fuse::Error>) -> Failure {
    let err = err.into();
    let code = match &err {
        e if e.is_unavailable() => EXIT_NO_DEVICE,
        e if e.is_bad_input() => EXIT_BAD_INPUT,
        _ => 1,
    };
    Failure {
        code,
        message: err.to_string(),
    }
}

/// Opens GPU `ordinal`.
pub fn open(ordinal: usize) -> Result<Device, Failure> {
    Device::open(ordinal).map_err(failure)
}

/// Prints the notes of a choice to standard error.
fn say(notes: impl IntoIterator<Item = String>) {
    for note in notes {
        eprintln!("{note}");
    }
}

/// The timing table for `gpu` (explicit file, calibrated, shipped or the estimate).
pub fn table(gpu: &DeviceInfo, library: &Library, explicit: Option<&Path>) -> Result<TimingTable, Failure> {
    let chosen = select::gpu_table(gpu, library, explicit).map_err(failure)?;
    say(chosen.note);
    Ok(chosen.table)
}

/// The table the explorer ranks generated plans by: `explicit`, else this GPU's, else the
/// built-in analytic H100 estimate.
pub fn generator_table(library: &Library, explicit: Option<&Path>) -> Result<TimingTable, Failure> {
    let chosen = select::generator_table(library, explicit).map_err(failure)?;
    say(chosen.note);
    Ok(chosen.table)
}

/// The plan `fuse run --backend cuda` runs on `device`: tuned, else the best predicted.
pub fn plan(
    device: &Device,
    program: &Program,
    sizes: &Sizes,
    library: &Library,
    timings: Option<&Path>,
) -> Result<Plan, Failure> {
    let (plan, notes) = select::gpu_plan(device, program, sizes, library, timings).map_err(failure)?;
    say(notes);
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse::stages::fuse_codegen::dynlib::ProbeError;
    use fuse::stages::fuse_cuda::CudaError;

    #[test]
    fn no_gpu_is_its_own_exit_status_and_stale_tables_are_bad_input() {
        let err = CudaError::NoDriver(ProbeError::NotFound {
            searched: vec!["x".into()],
        });
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
