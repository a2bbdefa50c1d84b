//! What each backend compiles a program into, and how it chooses its plan (through
//! [`select`](crate::select), the choice every way into fuse shares).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fuse_codegen::generate::generate_plan;
use fuse_core::{Bindings, Library, Plan, Program, Sizes, ValueId, Views};
use fuse_cpu::fused::{FusedPlan, Workspace};
use fuse_cuda::{CudaPlan, Device, PlanGraph, Replays};
use fuse_emulate::EmulatedPlan;

use super::options::CompileOptions;
use crate::device::{self, Buffer, CudaMemory, DevicePlan, EmulatedMemory, Pool, Raw, RunTimes};
use crate::error::Result;
use crate::select;

/// A program compiled by a backend: runs it on inputs already checked against the program,
/// returning every output by script name, in the program's precision. The inputs are borrowed:
/// a host backend reads them in place.
pub(crate) trait Executable: Send + Sync {
    /// Runs once; says where the time went.
    fn run(&self, inputs: &Views) -> Result<(Bindings, RunTimes)>;

    /// The plan on its device, for executables whose values can stay on a device between runs.
    fn device(&self) -> Option<&dyn DevicePlan> {
        None
    }

    /// Takes the memory of the next run now, its pages provided (see `Compiled::provision`);
    /// nothing to do for most.
    fn provision(&self) -> Result<()> {
        Ok(())
    }

    /// Whether the next run's memory is already taken.
    fn provisioned(&self) -> bool {
        false
    }
}

/// Runs `compute` on the host: all of its time is compute time.
fn on_host(compute: impl FnOnce() -> Result<Bindings>) -> Result<(Bindings, RunTimes)> {
    let started = Instant::now();
    let outputs = compute()?;
    let times = RunTimes {
        compute: started.elapsed(),
        ..RunTimes::default()
    };
    Ok((outputs, times))
}

/// An executable with the plan it runs and the notes on how that was chosen (see
/// `Compiled::notes`).
pub(super) struct Chosen {
    pub(super) executable: Box<dyn Executable>,
    pub(super) plan: Option<Plan>,
    pub(super) notes: Vec<String>,
}

/// The reference interpreter: no plan, nothing to choose.
pub(super) fn reference(program: &Arc<Program>, sizes: &Sizes) -> Chosen {
    Chosen {
        executable: Box::new(Interpreter::new(program, sizes)),
        plan: None,
        notes: Vec::new(),
    }
}

/// A program with an empty dimension (`symbol` = 0) on a fused backend: every array of that
/// dimension is empty and every sum over it 0, so there is nothing to fuse, and plans are laid
/// out for at least one element (tiles, blocks): the reference interpreter runs it, as BLAS
/// returns at once. The GPU asked for (`gpu`) must still be there.
pub(super) fn empty(gpu: Option<usize>, program: &Arc<Program>, sizes: &Sizes, symbol: &str) -> Result<Chosen> {
    // Opened and let go: the run itself needs no device.
    if let Some(device) = gpu {
        Device::open(device)?;
    }
    let note = format!("note: {symbol} = 0 (an empty dimension) leaves nothing to fuse: the calls run one by one on the reference interpreter");
    Ok(Chosen {
        notes: vec![note],
        ..reference(program, sizes)
    })
}

/// The fused CPU backend: the given plan, else the best by the CPU's timing table.
pub(super) fn cpu(
    program: &Arc<Program>,
    sizes: &Sizes,
    library: &Library,
    options: &CompileOptions,
) -> Result<Chosen> {
    let (plan, notes) = given_or_best(select::cpu_table, program, sizes, library, options)?;
    let mut fused = FusedPlan::new(Arc::clone(program), sizes, &plan)?;
    if let Some(threads) = &options.threads {
        fused = fused.with_threads(threads.clone());
    }
    let executable = Box::new(HostPlan {
        plan: fused,
        ahead: Mutex::new(None),
    });
    Ok(Chosen {
        executable,
        plan: Some(plan),
        notes,
    })
}

/// The emulation backend: the given plan, else the best by the table of the GPU here (the
/// analytic estimate without one), generated and run on host threads.
pub(super) fn emulate(
    program: &Arc<Program>,
    sizes: &Sizes,
    library: &Library,
    options: &CompileOptions,
) -> Result<Chosen> {
    let (plan, notes) = given_or_best(select::generator_table, program, sizes, library, options)?;
    let emulated = EmulatedPlan::compile(generate_plan(program, &plan)?)?;
    Ok(Chosen {
        executable: Box::new(Generated::new(emulated, EmulatedMemory::pool()?, program, sizes)),
        plan: Some(plan),
        notes,
    })
}

/// The CUDA backend on GPU `device`: the given plan, else the tuned or best predicted one
/// (see [`select::gpu_plan`]), compiled or taken from the module cache.
pub(super) fn cuda(
    device: usize,
    program: &Arc<Program>,
    sizes: &Sizes,
    library: &Library,
    options: &CompileOptions,
) -> Result<Chosen> {
    let device = Device::open(device)?;
    let (plan, mut notes) = plan_or(options, || {
        let at = plan_sizes(program, sizes, options)?;
        select::gpu_plan(&device, program, &at, library, options.timings.as_deref())
    })?;
    let cuda = CudaPlan::compile(generate_plan(program, &plan)?, &device)?;
    notes.push(module_note(&cuda));
    Ok(Chosen {
        executable: Box::new(Generated::new(
            Replaying::new(cuda),
            CudaMemory::pool(&device)?,
            program,
            sizes,
        )),
        plan: Some(plan),
        notes,
    })
}

/// The options' plan, else the one `choose` picks, with the notes on the choice.
fn plan_or(
    options: &CompileOptions,
    choose: impl FnOnce() -> Result<(Plan, Vec<String>)>,
) -> Result<(Plan, Vec<String>)> {
    match &options.plan {
        Some(plan) => Ok((plan.clone(), Vec::new())),
        None => choose(),
    }
}

/// The options' plan, else the best at the options' plan sizes by the timing table `table_of`
/// chooses (with its note).
fn given_or_best(
    table_of: fn(&Library, Option<&Path>) -> Result<select::Table>,
    program: &Program,
    sizes: &Sizes,
    library: &Library,
    options: &CompileOptions,
) -> Result<(Plan, Vec<String>)> {
    plan_or(options, || {
        let table = table_of(library, options.timings.as_deref())?;
        let plan = select::best_plan(program, &plan_sizes(program, sizes, options)?, &table.table, library)?;
        Ok((plan, table.note.into_iter().collect()))
    })
}

/// The sizes a plan is chosen at: the compiled sizes with the options' plan sizes put over
/// them, symbol by symbol.
fn plan_sizes(program: &Program, sizes: &Sizes, options: &CompileOptions) -> Result<Sizes> {
    let mut all: Vec<(String, usize)> = sizes.iter().map(|(k, v)| (k.to_string(), v)).collect();
    all.extend(options.plan_sizes.iter().cloned());
    Ok(program.bind_sizes(&all)?)
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
    /// Reads the inputs once, into the f64 arrays the interpreter works from.
    fn run(&self, inputs: &Views) -> Result<(Bindings, RunTimes)> {
        on_host(|| {
            let outputs = fuse_core::reference::evaluate(&self.program, &self.sizes, inputs)?;
            let precision = self.program.precision;
            Ok(outputs
                .into_iter()
                .map(|(name, a)| (name, a.to_precision(precision)))
                .collect())
        })
    }
}

/// The fused CPU plan, and the workspace its next run computes into where one was taken ahead.
struct HostPlan {
    plan: FusedPlan,
    ahead: Mutex<Option<Workspace>>,
}

impl HostPlan {
    fn ahead(&self) -> MutexGuard<'_, Option<Workspace>> {
        // A workspace is whole or absent: a panic elsewhere cannot leave it half set.
        self.ahead.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Executable for HostPlan {
    fn run(&self, inputs: &Views) -> Result<(Bindings, RunTimes)> {
        let ahead = self.ahead().take();
        on_host(|| match ahead {
            Some(workspace) => Ok(self.plan.run_into(inputs, workspace)?),
            None => Ok(self.plan.run(inputs)?),
        })
    }

    fn provision(&self) -> Result<()> {
        let workspace = self.plan.touched_workspace()?;
        *self.ahead() = Some(workspace);
        Ok(())
    }

    fn provisioned(&self) -> bool {
        self.ahead().is_some()
    }
}

/// Generated CUDA run on a device (emulated or a GPU) for one program at fixed sizes.
struct Generated<P> {
    plan: P,
    pool: Arc<Pool>,
    program: Arc<Program>,
    sizes: Sizes,
}

impl<P> Generated<P> {
    fn new(plan: P, pool: Arc<Pool>, program: &Arc<Program>, sizes: &Sizes) -> Self {
        Generated {
            plan,
            pool,
            program: Arc::clone(program),
            sizes: sizes.clone(),
        }
    }
}

impl<P> Executable for Generated<P>
where
    Generated<P>: DevicePlan,
{
    fn run(&self, inputs: &Views) -> Result<(Bindings, RunTimes)> {
        device::resident::run_host(self, &self.program, &self.sizes, inputs)
    }

    fn device(&self) -> Option<&dyn DevicePlan> {
        Some(self)
    }
}

impl DevicePlan for Generated<EmulatedPlan> {
    fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    fn buffers(&self) -> &[ValueId] {
        self.plan.buffers()
    }

    fn launch(&self, sizes: &Sizes, buffers: &mut BTreeMap<ValueId, Buffer>) -> Result<Duration> {
        let started = Instant::now();
        let raw = device::raw_buffers(buffers, |raw| match raw {
            Raw::Emulated(data) => Some(data),
            Raw::Cuda(_) => None,
        })?;
        self.plan.launch_on(sizes, raw)?;
        Ok(started.elapsed())
    }
}

/// A CUDA plan and how its runs went on the buffers they met: each set of buffers runs the
/// steps one by one until a graph replay has been timed faster on it (see [`Replays`]).
struct Replaying {
    plan: CudaPlan,
    replays: Mutex<Replays<PlanGraph>>,
}

impl Replaying {
    fn new(plan: CudaPlan) -> Self {
        let replays = Mutex::new(Replays::new(plan.generated().steps.len()));
        Replaying { plan, replays }
    }
}

impl DevicePlan for Generated<Replaying> {
    fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    fn buffers(&self) -> &[ValueId] {
        self.plan.plan.buffers()
    }

    fn launch(&self, sizes: &Sizes, buffers: &mut BTreeMap<ValueId, Buffer>) -> Result<Duration> {
        let raw = device::raw_buffers(buffers, |raw| match raw {
            Raw::Cuda(slice) => Some(slice),
            Raw::Emulated(_) => None,
        })?;
        // Whole or absent: a panic elsewhere leaves every set's way a valid one.
        let mut replays = self.plan.replays.lock().unwrap_or_else(PoisonError::into_inner);
        let micros = self.plan.plan.run_replaying(&mut replays, sizes, raw)?;
        Ok(Duration::from_secs_f64(micros * 1e-6))
    }
}
