//! What each backend compiles a program into, and how it chooses its plan (through
//! [`select`](crate::select), the choice every way into fuse shares).

use std::sync::Arc;

use fuse_codegen::generate::generate_plan;
use fuse_core::{Bindings, Library, Plan, Program, Sizes};
use fuse_cpu::fused::FusedPlan;
use fuse_cuda::{CudaPlan, Device};
use fuse_emulate::EmulatedPlan;

use super::{Backend, CompileOptions};
use crate::error::Result;
use crate::select;

/// A program compiled by a backend: runs it on inputs already checked against the program,
/// returning every output by script name, in the program's precision.
pub(crate) trait Executable: Send + Sync {
    /// Runs once.
    fn run(&self, inputs: &Bindings) -> Result<Bindings>;
}

/// An executable with the plan it runs and the notes on how that was chosen.
pub(super) struct Chosen {
    pub(super) executable: Box<dyn Executable>,
    pub(super) plan: Option<Plan>,
    pub(super) notes: Vec<String>,
}

/// Builds `backend`'s executable of `program` at `sizes`.
pub(super) fn build(
    backend: &Backend,
    program: &Arc<Program>,
    sizes: &Sizes,
    library: &Library,
    options: &CompileOptions,
) -> Result<Chosen> {
    let timings = options.timings.as_deref();
    let mut notes = Vec::new();
    let plan_sizes = program.bind_sizes(&overrides(sizes, &options.plan_sizes))?;
    let (executable, plan): (Box<dyn Executable>, Option<Plan>) = match backend {
        Backend::Reference => (Box::new(Interpreter::new(program, sizes)), None),
        Backend::Cpu => {
            let plan = match &options.plan {
                Some(plan) => plan.clone(),
                None => {
                    let table = select::cpu_table(library, timings)?;
                    notes.extend(table.note);
                    select::best_plan(program, &plan_sizes, &table.table, library)?
                }
            };
            (Box::new(FusedPlan::new(program, sizes, &plan)?), Some(plan))
        }
        Backend::Emulate => {
            let plan = match &options.plan {
                Some(plan) => plan.clone(),
                None => {
                    let table = select::generator_table(library, timings)?;
                    notes.extend(table.note);
                    select::best_plan(program, &plan_sizes, &table.table, library)?
                }
            };
            let emulated = EmulatedPlan::compile(generate_plan(program, &plan)?)?;
            (Box::new(Generated::new(emulated, program, sizes)), Some(plan))
        }
        Backend::Cuda { device } => {
            let device = Device::open(*device)?;
            let plan = match &options.plan {
                Some(plan) => plan.clone(),
                None => {
                    let (plan, chosen) = select::gpu_plan(&device, program, &plan_sizes, library, timings)?;
                    notes.extend(chosen);
                    plan
                }
            };
            let cuda = CudaPlan::compile(generate_plan(program, &plan)?, &device)?;
            notes.push(module_note(&cuda));
            (Box::new(Generated::new(cuda, program, sizes)), Some(plan))
        }
    };
    Ok(Chosen {
        executable,
        plan,
        notes,
    })
}

/// The compiled sizes with `plan_sizes` put over them, symbol by symbol.
fn overrides(sizes: &Sizes, plan_sizes: &[(String, usize)]) -> Vec<(String, usize)> {
    let mut all: Vec<(String, usize)> = sizes.iter().map(|(k, v)| (k.to_string(), v)).collect();
    all.extend(plan_sizes.iter().cloned());
    all
}

/// Whether the CUDA module was compiled or taken from the on-disk cache.
fn module_note(cuda: &CudaPlan) -> String {
    match (cuda.from_cache(), cuda.cache_warning()) {
        (true, _) => "module: from the module cache (nothing compiled)".to_string(),
        (false, None) => "module: compiled with NVRTC and cached".to_string(),
        (false, Some(warning)) => format!("module: compiled with NVRTC; not cached: {warning}"),
    }
}

/// The reference interpreter, outputs rounded to the program's precision so that every
/// backend returns the same types.
struct Interpreter {
    program: Arc<Program>,
    sizes: Sizes,
}

impl Interpreter {
    fn new(program: &Arc<Program>, sizes: &Sizes) -> Self {
        Interpreter {
            program: Arc::clone(program),
            sizes: sizes.clone(),
        }
    }
}

impl Executable for Interpreter {
    fn run(&self, inputs: &Bindings) -> Result<Bindings> {
        let outputs = fuse_core::reference::evaluate(&self.program, &self.sizes, inputs)?;
        let precision = self.program.precision;
        Ok(outputs
            .into_iter()
            .map(|(name, a)| (name, a.to_precision(precision)))
            .collect())
    }
}

impl Executable for FusedPlan {
    fn run(&self, inputs: &Bindings) -> Result<Bindings> {
        Ok(FusedPlan::run(self, inputs)?)
    }
}

/// Generated CUDA run somewhere (emulated or on a GPU) for one program at fixed sizes.
struct Generated<P> {
    plan: P,
    program: Arc<Program>,
    sizes: Sizes,
}

impl<P> Generated<P> {
    fn new(plan: P, program: &Arc<Program>, sizes: &Sizes) -> Self {
        Generated {
            plan,
            program: Arc::clone(program),
            sizes: sizes.clone(),
        }
    }
}

impl Executable for Generated<EmulatedPlan> {
    fn run(&self, inputs: &Bindings) -> Result<Bindings> {
        Ok(self.plan.run(&self.program, &self.sizes, inputs)?)
    }
}

impl Executable for Generated<CudaPlan> {
    fn run(&self, inputs: &Bindings) -> Result<Bindings> {
        Ok(self.plan.run(&self.program, &self.sizes, inputs)?)
    }
}
