//! Backends: where a checked [`Program`] runs. Compiling binds a program to sizes once
//! (exploring and generating code where the backend does that) and gives a [`Compiled`] object
//! that runs any number of times.
//!
//! A backend is an enum variant of [`Backend`] (with its name in `NAMES` and `from_str`) plus a
//! private type implementing [`Executable`] (in `executables.rs`), built in
//! [`Backend::compile_with`] — e.g. a fused CPU backend explores the program into a `Plan`
//! there (see [`select`](crate::select)) and its executable runs the plan.
//! [`Compiled::run`] checks the inputs before handing them over, so an executable sees only
//! inputs that fit its program, and must return every output by name in the program's
//! precision.

mod executables;
mod on_device;
mod options;

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use fuse_core::data::{check_inputs, views};
use fuse_core::{Library, Plan, Precision, Program, Sizes, Views};
use fuse_cuda::DeviceInfo;

use crate::device::RunTimes;
use crate::error::{list, Error, Result};
use crate::io::{Inputs, Outputs};
use crate::memory::check_host_memory;
use crate::select;
use executables::Executable;
pub use options::CompileOptions;

/// Where programs run.
///
/// The fused CPU backend is the default, since it works everywhere; [`Backend::detect`] picks
/// the GPU when one is usable. More backends may come, so `match` on it with a wildcard arm.
///
/// ```
/// use fuse::Backend;
///
/// let backend: Backend = "reference".parse()?;
/// assert_eq!(backend, Backend::Reference);
/// assert_eq!("cuda:1".parse::<Backend>()?, Backend::Cuda { device: 1 });
/// assert_eq!(Backend::default(), Backend::Cpu); // works on any machine
/// # Ok::<(), fuse::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Backend {
    /// The f64 reference interpreter of `fuse-core`: every call straight from its library
    /// formula, in f64 whatever the precision (results are rounded to the program's precision).
    /// Unfused and slow, but the ground truth every other backend is tested against.
    Reference,
    /// The fused CPU backend of `fuse-cpu`: the explorer's best plan for this CPU (ranked by
    /// its timing table, see `fuse calibrate --backend cpu`), run tile by tile on every core,
    /// in the program's precision.
    #[default]
    Cpu,
    /// The generated CUDA of the best plan for the GPU here (else for the analytic H100
    /// estimate), run on host threads by `fuse-emulate`: slow, for testing kernels without a
    /// GPU. Needs a host C++ compiler.
    Emulate,
    /// An NVIDIA GPU through `fuse-cuda` (driver, NVRTC and cuBLAS loaded at run time): the
    /// plan `fuse tune` remembered for the program, sizes and GPU, else the best predicted by
    /// the GPU's timing table, compiled (or taken from the on-disk module cache) and run on
    /// one stream. Compiling for it without a GPU is an [`Error::Cuda`] saying so.
    Cuda {
        /// The device ordinal (`cuda` is device 0, `cuda:1` device 1).
        device: usize,
    },
}

/// Names accepted by [`Backend::from_str`], in the order of [`Backend`]'s variants.
const NAMES: [&str; 4] = ["reference", "cpu", "emulate", "cuda[:N]"];

impl Backend {
    /// GPU 0 when one is usable here, else the fused CPU backend.
    pub fn detect() -> Backend {
        Backend::detect_why().0
    }

    /// [`Backend::detect`], and why, in a few words: the GPU's description, or why no GPU
    /// (driver, device or NVRTC missing) is usable.
    pub fn detect_why() -> (Backend, String) {
        match crate::select::usable_gpu() {
            Ok(gpu) => (Backend::Cuda { device: 0 }, gpu.describe()),
            Err(why) => (Backend::Cpu, why),
        }
    }

    /// The timing table this backend ranks its plans by (see [`select::cpu_table`],
    /// [`select::gpu_table`] and [`select::generator_table`]; `explicit` names one of its kind of
    /// machine); none for the reference interpreter, which runs call by call.
    ///
    /// ```
    /// use fuse::{Backend, Library};
    ///
    /// let library = Library::builtin()?;
    /// let cpu = Backend::Cpu.timing_table(&library, None)?.unwrap();
    /// assert!(cpu.table.device.is_cpu());
    /// assert!(Backend::Reference.timing_table(&library, None)?.is_none());
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn timing_table(&self, library: &Library, explicit: Option<&Path>) -> Result<Option<select::Table>> {
        Ok(Some(match self {
            Backend::Reference => return Ok(None),
            Backend::Cpu => select::cpu_table(library, explicit)?,
            Backend::Emulate => select::generator_table(library, explicit)?,
            Backend::Cuda { device } => select::gpu_table(&DeviceInfo::query(*device)?, library, explicit)?,
        }))
    }

    /// The backend's name, as `fuse run --backend` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Reference => NAMES[0],
            Backend::Cpu => NAMES[1],
            Backend::Emulate => NAMES[2],
            Backend::Cuda { .. } => "cuda",
        }
    }

    /// Compiles `program` for this backend at `sizes` (symbols not given keep the program's
    /// defaults). The result runs any number of times on inputs of those sizes. A size of 0
    /// (an empty dimension, as BLAS allows: a dot of length 0 is 0) leaves nothing to fuse:
    /// such a program runs call by call on the reference interpreter, whatever the backend,
    /// with a note saying so.
    ///
    /// ```
    /// use fuse::{Backend, Inputs, Library};
    ///
    /// let library = Library::builtin()?;
    /// let text = "sizes: {n: 8}\ninputs: {x: [n]}\noutputs: [y]\ncalls:\n  - y = sscal(2.0, x)";
    /// let program = fuse_core::script::parse("double.yaml", text, &library)?;
    /// let sizes = program.bind_sizes(&[("n".to_string(), 3)])?;
    /// let compiled = Backend::Reference.compile(&program, &sizes)?;
    /// let out = compiled.run(&Inputs::new().vector("x", vec![1.0f32, 2.0, 3.0])?)?;
    /// assert_eq!(out.get::<f32>("y")?, [2.0, 4.0, 6.0]);
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn compile(&self, program: &Program, sizes: &Sizes) -> Result<Compiled> {
        self.compile_with(program, sizes, &CompileOptions::default())
    }

    /// [`Backend::compile`] with `options`: another library, timing table or plan.
    pub fn compile_with(&self, program: &Program, sizes: &Sizes, options: &CompileOptions) -> Result<Compiled> {
        let overrides: Vec<(String, usize)> = sizes.iter().map(|(k, v)| (k.to_string(), v)).collect();
        let sizes = program.bind_sizes(&overrides)?;
        let program = Arc::new(program.clone());
        let library = match &options.library {
            Some(library) => Arc::clone(library),
            None => crate::select::builtin_library()?,
        };
        let chosen = match (self, sizes.empty_dimension()) {
            (Backend::Reference, _) => executables::reference(&program, &sizes),
            (_, Some(symbol)) => {
                let gpu = match self {
                    Backend::Cuda { device } => Some(*device),
                    _ => None,
                };
                executables::empty(gpu, &program, &sizes, symbol)?
            }
            (Backend::Cpu, _) => executables::cpu(&program, &sizes, &library, options)?,
            (Backend::Emulate, _) => executables::emulate(&program, &sizes, &library, options)?,
            (Backend::Cuda { device }, _) => executables::cuda(*device, &program, &sizes, &library, options)?,
        };
        Ok(Compiled {
            backend: self.clone(),
            program,
            sizes,
            plan: chosen.plan,
            notes: chosen.notes,
            executable: chosen.executable,
        })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Cuda { device } if *device > 0 => write!(f, "cuda:{device}"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// Parses a backend name (`reference`, `cpu`, `emulate`, `cuda`, `cuda:N`).
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "reference" => Ok(Backend::Reference),
            "cpu" => Ok(Backend::Cpu),
            "emulate" => Ok(Backend::Emulate),
            _ => cuda_device(name)
                .map(|device| Backend::Cuda { device })
                .ok_or_else(|| Error::UnknownBackend {
                    name: name.to_string(),
                    known: list(&NAMES),
                }),
        }
    }
}

/// The device of `cuda` (0) or `cuda:N`.
fn cuda_device(name: &str) -> Option<usize> {
    match name {
        "cuda" => Some(0),
        _ => name.strip_prefix("cuda:")?.parse().ok(),
    }
}

/// A program compiled by a backend for fixed sizes; run it any number of times.
///
/// ```
/// use fuse::{Backend, Inputs, Script};
///
/// let script = Script::from_str("waxpby.yaml", "
/// precision: f64
/// sizes: {n: 4}
/// inputs: {x: [n], y: [n], alpha: scalar}
/// outputs: [w]
/// calls:
///   - w = daxpby(alpha, x, 0.5, y)
/// ")?;
/// let compiled = script.compile(&Backend::Reference, &[("n", 2)])?;
/// for alpha in [1.0, 2.0] {
///     let inputs = Inputs::new()
///         .vector("x", vec![1.0, 2.0])?
///         .vector("y", vec![4.0, 4.0])?
///         .scalar("alpha", alpha);
///     let out = compiled.run(&inputs)?;
///     assert_eq!(out.get::<f64>("w")?, [alpha + 2.0, 2.0 * alpha + 2.0]);
/// }
/// # Ok::<(), fuse::Error>(())
/// ```
pub struct Compiled {
    backend: Backend,
    program: Arc<Program>,
    sizes: Sizes,
    plan: Option<Plan>,
    notes: Vec<String>,
    executable: Box<dyn Executable>,
}

impl Compiled {
    /// Runs on `inputs`, an array per input name of the program's shape (at the compiled sizes)
    /// and precision; returns every output by name, in the program's precision. Where the
    /// host cannot give the memory the run needs ([`Compiled::run_bytes`]), an
    /// [`Error::HostMemory`] before anything is allocated.
    pub fn run(&self, inputs: &Inputs) -> Result<Outputs> {
        self.run_timed(inputs).map(|(outputs, _)| outputs)
    }

    /// [`Compiled::run`], and where the time went: copying the inputs to the device, computing
    /// (the kernels' time by CUDA events on a GPU), copying the outputs back.
    pub fn run_timed(&self, inputs: &Inputs) -> Result<(Outputs, RunTimes)> {
        self.run_views_timed(&views(inputs))
    }

    /// [`Compiled::run`] on arrays the caller keeps ([`Views`]): the host backends read them in
    /// place, without a copy; a device backend uploads from them.
    ///
    /// ```
    /// use fuse::{ArrayView, Backend, DataView, Script, Views};
    ///
    /// let script = Script::from_str("scal.yaml", "
    /// precision: f64
    /// sizes: {n: 3}
    /// inputs: {x: [n]}
    /// outputs: [y]
    /// calls:
    ///   - y = dscal(2.0, x)
    /// ")?;
    /// let x = [1.0, 2.0, 3.0]; // stays where it is
    /// let inputs = Views::from([("x".to_string(), ArrayView { dims: vec![3], data: DataView::F64(&x) })]);
    /// let out = script.compile(&Backend::Cpu, &[])?.run_views(&inputs)?;
    /// assert_eq!(out.get::<f64>("y")?, [2.0, 4.0, 6.0]);
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn run_views(&self, inputs: &Views) -> Result<Outputs> {
        self.run_views_timed(inputs).map(|(outputs, _)| outputs)
    }

    /// [`Compiled::run_views`], and where the time went (see [`Compiled::run_timed`]).
    pub fn run_views_timed(&self, inputs: &Views) -> Result<(Outputs, RunTimes)> {
        self.check_names(inputs.keys())?;
        check_inputs(&self.program, &self.sizes, inputs)?;
        if !self.executable.provisioned() {
            self.check_run_memory()?;
        }
        let (outputs, times) = self.executable.run(inputs)?;
        Ok((Outputs::new(outputs), times))
    }

    /// Takes the memory the next run computes into now, and has the operating system provide
    /// its pages, on the fused CPU backend (the others have nothing to do here). A fresh page
    /// costs a zero-fill and, under a hypervisor, the host's own provision: for the 32 MB that a
    /// 2000² f64 GEMVER writes, 4–30 ms on the development VM, where its kernels take 4. Call it
    /// on another thread while preparing the inputs (`fuse run` does, while it draws them), and
    /// the next run's time is the kernels'.
    ///
    /// ```
    /// use fuse::{Backend, Inputs, Script};
    ///
    /// let compiled = Script::from_str("scal.yaml", "
    /// precision: f64
    /// sizes: {n: 100000}
    /// inputs: {x: [n]}
    /// outputs: [y]
    /// calls:
    ///   - y = dscal(2.0, x)
    /// ")?.compile(&Backend::Cpu, &[])?;
    /// let x = std::thread::scope(|s| {
    ///     let ahead = s.spawn(|| compiled.provision());
    ///     let x = vec![1.5; 100_000]; // the inputs, made meanwhile
    ///     ahead.join().expect("provision does not panic").map(|()| x)
    /// })?;
    /// let out = compiled.run(&Inputs::new().vector("x", x)?)?;
    /// assert_eq!(out.get::<f64>("y")?[99_999], 3.0);
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn provision(&self) -> Result<()> {
        self.check_run_memory()?;
        self.executable.provision()
    }

    /// An error naming the bytes where the host cannot give a run's memory.
    fn check_run_memory(&self) -> Result<()> {
        check_host_memory(self.run_bytes(), || {
            format!("the outputs and temporaries of {} at {}", self.program.name, self.sizes)
        })
    }

    /// The plan on its device, where the backend runs on one (emulated or a GPU): a session
    /// keeps its values there between runs.
    pub(crate) fn device(&self) -> Option<&dyn crate::device::DevicePlan> {
        self.executable.device()
    }

    /// Host bytes a run allocates beside its inputs: every value the plan stores to memory
    /// (outputs, and temporaries passed between kernels), or, for the reference interpreter (no
    /// plan), every value in f64 (its copies of the inputs too) and the outputs handed over.
    pub fn run_bytes(&self) -> u64 {
        let p = &self.program;
        match &self.plan {
            Some(plan) => plan.stored_bytes(p, &self.sizes),
            None => {
                let in_f64 = p
                    .values
                    .iter()
                    .map(|v| self.sizes.array_bytes(&v.shape, Precision::F64));
                let in_f64: u64 = in_f64.map(|b| b.unwrap_or(u64::MAX)).fold(0, u64::saturating_add);
                in_f64.saturating_add(p.compulsory_bytes(&self.sizes) - p.input_bytes(&self.sizes))
            }
        }
    }

    /// The backend that compiled it.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The program it runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The sizes it was compiled for.
    pub fn sizes(&self) -> &Sizes {
        &self.sizes
    }

    /// The plan it runs: which calls share a kernel and how (none for the reference
    /// interpreter, which runs call by call).
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// What compiling chose that a user may want to know, a line each: an estimated timing
    /// table, a tuned plan taken, a module taken from the cache (`note: …`, `plan: …`,
    /// `module: …`).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Each input's name and extents at the compiled sizes, in declaration order.
    pub fn inputs(&self) -> Vec<(String, Vec<usize>)> {
        let p = &self.program;
        p.inputs
            .iter()
            .map(|&v| {
                let dims = p.values[v].shape.extents(&self.sizes).unwrap_or_default();
                (p.values[v].variable.clone(), dims)
            })
            .collect()
    }

    /// Rejects a binding that names no input: a misspelt name would otherwise be ignored.
    /// Every name given is an input of the program (a typo would otherwise be ignored).
    fn check_names<'n>(&self, mut given: impl Iterator<Item = &'n String>) -> Result<()> {
        let p = &self.program;
        let names: Vec<&str> = p.inputs.iter().map(|&v| p.values[v].variable.as_str()).collect();
        match given.find(|k| !names.contains(&k.as_str())) {
            Some(name) => Err(Error::UnknownInput {
                name: name.clone(),
                program: p.name.clone(),
                inputs: list(&names),
            }),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Compiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compiled")
            .field("backend", &self.backend)
            .field("program", &self.program.name)
            .field("sizes", &self.sizes)
            .finish_non_exhaustive()
    }
}
