//! The emulation backend: runs a generated CUDA module on host threads with the
//! same grids, blocks and arguments as a GPU launch, so generated kernels are tested without a
//! GPU. [`EmulatedPlan::run`] is the checking run: buffers that kernels write are poisoned with
//! NaN first, so an element a kernel forgets to write shows up in the comparison with the
//! reference. [`EmulatedPlan::launch_on`] runs on buffers the caller owns (the `fuse` crate's
//! emulated device memory), with nothing poisoned.

use std::collections::BTreeMap;

use fuse_codegen::generate::{Generated, LaunchArg, Step};
use fuse_core::data::{check_inputs, BindError};
use fuse_core::{Bindings, HostArray, HostData, Precision, Program, Sizes, ValueId};

use crate::{EmulateError, EmulatedModule, KernelArg};

/// Why an emulated run failed.
#[derive(Debug, thiserror::Error)]
pub enum EmulationError {
    /// The inputs do not fit the program.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The host compiler or a kernel failed.
    #[error(transparent)]
    Emulate(#[from] EmulateError),
    /// A step names a value that was handed no buffer (a fuse bug).
    #[error("{step}: value {value} has no buffer (a fuse bug, please report)")]
    MissingBuffer {
        /// The kernel or fill.
        step: String,
        /// The value.
        value: ValueId,
    },
    /// The plan was generated for other sizes than these.
    #[error("kernel {kernel}: {why}")]
    Sizes {
        /// The kernel that cannot run.
        kernel: String,
        /// Why.
        why: String,
    },
}

/// A generated module compiled for emulation, reusable across runs.
pub struct EmulatedPlan {
    module: EmulatedModule,
    generated: Generated,
}

impl EmulatedPlan {
    /// Compiles `generated` with the host C++ compiler.
    pub fn compile(generated: Generated) -> Result<Self, EmulationError> {
        Ok(EmulatedPlan {
            module: EmulatedModule::compile(&generated.source)?,
            generated,
        })
    }

    /// Runs the plan's steps on `inputs`, every other buffer poisoned with NaN first (the
    /// checking run of tests and `fuse selftest`); returns the outputs by name.
    pub fn run(&self, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Result<Bindings, EmulationError> {
        check_inputs(program, sizes, inputs)?;
        let mut buffers = self.allocate(program, sizes, inputs);
        self.launch_on(sizes, buffers.iter_mut().map(|(v, b)| (*v, b)).collect())?;
        Ok(program
            .outputs
            .iter()
            .map(|&v| {
                let dims = program.values[v].shape.extents(sizes).unwrap_or_default();
                (
                    program.values[v].variable.clone(),
                    HostArray {
                        dims,
                        data: buffers[&v].clone(),
                    },
                )
            })
            .collect())
    }

    /// The values that live in buffers (inputs, outputs and temporaries between kernels).
    pub fn buffers(&self) -> &[ValueId] {
        &self.generated.buffers
    }

    /// Runs the plan's steps — zero fills and launches — at `sizes` on `buffers`, one per
    /// value of [`Self::buffers`], each as long as its value at those sizes; the scratch
    /// memory of the run is allocated here.
    pub fn launch_on(
        &self,
        sizes: &Sizes,
        mut buffers: BTreeMap<ValueId, &mut HostData>,
    ) -> Result<(), EmulationError> {
        let mut scratch: BTreeMap<ValueId, HostData> = self
            .generated
            .scratch
            .iter()
            .map(|s| (s.value, zeros(s.precision, s.len)))
            .collect();
        for step in &self.generated.steps {
            if let Step::Launch(launch) = step {
                launch.grid.check(sizes).map_err(|why| EmulationError::Sizes {
                    kernel: launch.kernel.clone(),
                    why,
                })?;
            }
            missing_buffers(step, &buffers, &scratch)?;
        }
        for step in &self.generated.steps {
            match step {
                Step::Zero(v) => fill(buffers.get_mut(v).expect("checked above"), 0.0),
                Step::Launch(launch) => {
                    let mut args = kernel_args(&launch.args, &mut buffers, &mut scratch, sizes);
                    let grid = launch.grid.dims(sizes);
                    self.module.launch(&launch.kernel, grid, launch.block, 0, &mut args)?;
                }
            }
        }
        Ok(())
    }

    /// A buffer per global value: inputs hold their data, everything else NaN.
    fn allocate(&self, program: &Program, sizes: &Sizes, inputs: &Bindings) -> BTreeMap<ValueId, HostData> {
        self.generated
            .buffers
            .iter()
            .map(|&v| {
                let value = &program.values[v];
                let data = match value.producer {
                    None => inputs[&value.variable].data.clone(),
                    Some(_) => {
                        let len = value.shape.extents(sizes).unwrap_or_default().iter().product();
                        poisoned(program.precision, len)
                    }
                };
                (v, data)
            })
            .collect()
    }
}

/// A step that names a value without a buffer (or scratch): a fuse bug, reported rather than a
/// panic.
fn missing_buffers(
    step: &Step,
    buffers: &BTreeMap<ValueId, &mut HostData>,
    scratch: &BTreeMap<ValueId, HostData>,
) -> Result<(), EmulationError> {
    let named: Vec<(ValueId, bool)> = match step {
        Step::Zero(v) => vec![(*v, buffers.contains_key(v))],
        Step::Launch(launch) => launch
            .args
            .iter()
            .filter_map(|a| match a {
                LaunchArg::Buffer(v) => Some((*v, buffers.contains_key(v))),
                LaunchArg::Scratch(v) => Some((*v, scratch.contains_key(v))),
                LaunchArg::Size(_) => None,
            })
            .collect(),
    };
    match named.into_iter().find(|(_, held)| !held).map(|(v, _)| v) {
        Some(value) => Err(EmulationError::MissingBuffer {
            step: step_name(step),
            value,
        }),
        None => Ok(()),
    }
}

fn step_name(step: &Step) -> String {
    match step {
        Step::Zero(v) => format!("zero fill of value {v}"),
        Step::Launch(launch) => launch.kernel.clone(),
    }
}

fn poisoned(precision: Precision, len: usize) -> HostData {
    filled(precision, len, f64::NAN)
}

fn zeros(precision: Precision, len: usize) -> HostData {
    filled(precision, len, 0.0)
}

fn filled(precision: Precision, len: usize, value: f64) -> HostData {
    match precision {
        Precision::F32 => HostData::F32(vec![value as f32; len]),
        Precision::F64 => HostData::F64(vec![value; len]),
    }
}

fn fill(data: &mut HostData, value: f64) {
    match data {
        HostData::F32(v) => v.fill(value as f32),
        HostData::F64(v) => v.fill(value),
    }
}

/// Kernel arguments in launch order: buffers and scratch borrowed mutably (each at most once
/// per launch).
fn kernel_args<'a>(
    args: &[LaunchArg],
    buffers: &'a mut BTreeMap<ValueId, &mut HostData>,
    scratch: &'a mut BTreeMap<ValueId, HostData>,
    sizes: &Sizes,
) -> Vec<KernelArg<'a>> {
    let mut by_value: BTreeMap<ValueId, &'a mut HostData> = buffers.iter_mut().map(|(k, v)| (*k, &mut **v)).collect();
    let mut scratch: BTreeMap<ValueId, &'a mut HostData> = scratch.iter_mut().map(|(k, v)| (*k, v)).collect();
    let pass = |data: &'a mut HostData| match data {
        HostData::F32(d) => KernelArg::from(&mut d[..]),
        HostData::F64(d) => KernelArg::from(&mut d[..]),
    };
    args.iter()
        .map(|a| match a {
            LaunchArg::Buffer(v) => pass(by_value.remove(v).expect("each buffer is passed once and exists")),
            LaunchArg::Scratch(v) => pass(scratch.remove(v).expect("each scratch is passed once and exists")),
            LaunchArg::Size(s) => KernelArg::from(sizes.get(s).unwrap_or(0) as i64),
        })
        .collect()
}
