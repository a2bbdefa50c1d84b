//! The GPU choices of `fuse::select` from the command line, their notes printed to standard
//! error.

use std::path::Path;

use fuse::stages::fuse_core::TimingTable;
use fuse::stages::fuse_cuda::{Device, DeviceInfo};
use fuse::{select, Library, Plan, Program, Sizes};

use crate::failure::{failure, Failure};

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
