//! Runs a generated plan on buffers that live on the device: the inputs are given as buffers
//! (already there, or uploaded once by the caller), the temporaries between kernels come from
//! the pool and go back to it, and the outputs stay on the device until someone reads them.
//! Nothing is poisoned: that is the checking runs' job (`fuse selftest`, the tests).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuse_core::{Bindings, HostArray, Program, Sizes, ValueId, Views};

use super::pool::bytes_of;
use super::{Buffer, Pool};
use crate::error::{Error, Result};

/// A generated plan that runs on a device's buffers.
pub(crate) trait DevicePlan: Send + Sync {
    /// The pool of the device it runs on.
    fn pool(&self) -> &Arc<Pool>;
    /// The values that live in buffers (inputs, outputs and temporaries between kernels).
    fn buffers(&self) -> &[ValueId];
    /// Runs the plan's steps at `sizes` on `buffers` (one per value of [`Self::buffers`]) and
    /// waits for them; returns the time they took on the device (CUDA events on a GPU).
    fn launch(&self, sizes: &Sizes, buffers: &mut BTreeMap<ValueId, Buffer>) -> Result<Duration>;
}

/// Where the time of a run went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunTimes {
    /// Copying the inputs to the device (zero where the backend computes on the host).
    pub upload: Duration,
    /// The computation: the kernels on the device, measured with CUDA events on a GPU.
    pub compute: Duration,
    /// Copying the outputs back (zero where the backend computes on the host).
    pub download: Duration,
}

/// What a run on the device gave.
pub(crate) struct Ran {
    /// The outputs' buffers, by value id.
    pub(crate) outputs: BTreeMap<ValueId, Buffer>,
    /// The time the steps took on the device.
    pub(crate) compute: Duration,
    /// Buffers newly allocated for outputs and temporaries (the others came from the pool).
    pub(crate) allocations: u64,
}

/// Runs `plan` for `program` at `sizes` on the input buffers `inputs` (by value id). The
/// inputs are left in `inputs`, whatever happens.
pub(crate) fn run(
    plan: &dyn DevicePlan,
    program: &Program,
    sizes: &Sizes,
    inputs: &mut BTreeMap<ValueId, Buffer>,
) -> Result<Ran> {
    let made = plan.buffers().iter().filter(|&&v| program.values[v].producer.is_some());
    let lengths: Vec<(ValueId, usize)> = made.map(|&v| (v, length(program, sizes, v))).collect();
    let bytes = lengths.iter().map(|&(_, len)| bytes_of(program.precision, len)).sum();
    plan.pool()
        .check_fits(&format!("{} (outputs and temporaries)", program.name), bytes)?;
    let mut all = BTreeMap::new();
    for (v, len) in lengths {
        all.insert(v, plan.pool().take(program.precision, len)?);
    }
    let given: Vec<ValueId> = inputs.keys().copied().collect();
    all.append(inputs);
    let launched = plan.launch(sizes, &mut all);
    for v in given {
        if let Some(buffer) = all.remove(&v) {
            inputs.insert(v, buffer);
        }
    }
    let compute = launched?;
    let allocations = all.values().filter(|b| b.fresh()).count() as u64;
    let outputs = program.outputs.iter().filter_map(|v| all.remove_entry(v)).collect();
    Ok(Ran {
        outputs,
        compute,
        allocations,
    }) // temporaries left in `all` go back to the pool here
}

/// Runs `plan` on host inputs: uploads them, runs, downloads the outputs (by name).
pub(crate) fn run_host(
    plan: &dyn DevicePlan,
    program: &Program,
    sizes: &Sizes,
    inputs: &Views,
) -> Result<(Bindings, RunTimes)> {
    let started = Instant::now();
    let mut resident = BTreeMap::new();
    let wanted = plan.buffers().iter().filter(|&&v| program.values[v].producer.is_none());
    let in_bytes = wanted
        .clone()
        .map(|&v| bytes_of(program.precision, length(program, sizes, v)))
        .sum();
    plan.pool()
        .check_fits(&format!("the inputs of {}", program.name), in_bytes)?;
    for &v in wanted {
        let name = &program.values[v].variable;
        let array = inputs.get(name).ok_or_else(|| missing(program, v))?;
        resident.insert(v, plan.pool().upload(array.data)?);
    }
    plan.pool().memory().synchronize()?;
    let upload = started.elapsed();
    let Ran { outputs, compute, .. } = run(plan, program, sizes, &mut resident)?;
    let started = Instant::now();
    let mut out = Bindings::new();
    for &v in &program.outputs {
        let buffer = outputs.get(&v).ok_or_else(|| missing(program, v))?;
        let dims = program.values[v].shape.extents(sizes).unwrap_or_default();
        out.insert(
            program.values[v].variable.clone(),
            HostArray {
                dims,
                data: buffer.download()?,
            },
        );
    }
    let download = started.elapsed();
    Ok((
        out,
        RunTimes {
            upload,
            compute,
            download,
        },
    ))
}

/// Elements of value `v` at `sizes`.
fn length(program: &Program, sizes: &Sizes, v: ValueId) -> usize {
    let dims = program.values[v].shape.extents(sizes).unwrap_or_default();
    dims.iter().product()
}

fn missing(program: &Program, v: ValueId) -> Error {
    Error::Internal(format!(
        "`{}` of {} has no device buffer (a fuse bug, please report)",
        program.values[v].variable, program.name
    ))
}
