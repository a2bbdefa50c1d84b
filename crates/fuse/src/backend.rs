//! Backends: where a checked [`Program`] runs. Compiling binds a program to sizes once
//! (exploring and generating code where the backend does that) and gives a [`Compiled`] object
//! that runs any number of times.
//!
//! A backend is an enum variant of [`Backend`] (with its name in `NAMES` and `from_str`) plus a
//! private type implementing [`Executable`], built in [`Backend::compile`] — e.g. a fused CPU
//! backend explores the program into a `Plan` there and its executable runs the plan.
//! [`Compiled::run`] checks the inputs before handing them over, so an executable sees only
//! inputs that fit its program, and must return every output by name in the program's
//! precision.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use fuse_core::data::check_inputs;
use fuse_core::{Bindings, Program, Sizes};

use crate::error::{list, Error, Result};
use crate::script::{Inputs, Outputs};

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
const NAMES: [&str; 3] = ["reference", "cpu", "cuda[:N]"];

impl Backend {
    /// GPU 0 when one is usable here, else the fused CPU backend.
    pub fn detect() -> Backend {
        match fuse_cuda::DeviceInfo::query(0) {
            Ok(_) => Backend::Cuda { device: 0 },
            Err(_) => Backend::Cpu,
        }
    }

    /// The backend's name, as `fuse run --backend` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Reference => NAMES[0],
            Backend::Cpu => NAMES[1],
            Backend::Cuda { .. } => "cuda",
        }
    }

    /// Compiles `program` for this backend at `sizes` (symbols not given keep the program's
    /// defaults). The result runs any number of times on inputs of those sizes.
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
        let overrides: Vec<(String, usize)> = sizes.iter().map(|(k, v)| (k.to_string(), v)).collect();
        let sizes = program.bind_sizes(&overrides)?;
        let program = Arc::new(program.clone());
        let executable: Box<dyn Executable> = match self {
            Backend::Reference => Box::new(reference::Interpreter {
                program: Arc::clone(&program),
                sizes: sizes.clone(),
            }),
            Backend::Cpu => Box::new(cpu::Fused::new(&program, &sizes)?),
            Backend::Cuda { device } => Box::new(cuda::Gpu::new(&program, &sizes, *device)?),
        };
        Ok(Compiled {
            backend: self.clone(),
            program,
            sizes,
            executable,
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

    /// Parses a backend name (`reference`, `cpu`, `cuda`, `cuda:N`).
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "reference" => Ok(Backend::Reference),
            "cpu" => Ok(Backend::Cpu),
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

/// What a backend compiles a program into: runs it on inputs already checked against the
/// program, returning every output by script name, in the program's precision.
pub(crate) trait Executable: Send + Sync {
    /// Runs once.
    fn run(&self, inputs: &Bindings) -> Result<Bindings>;
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
    executable: Box<dyn Executable>,
}

impl Compiled {
    /// Runs on `inputs`, an array per input name of the program's shape (at the compiled sizes)
    /// and precision; returns every output by name, in the program's precision.
    pub fn run(&self, inputs: &Inputs) -> Result<Outputs> {
        self.check_names(inputs)?;
        check_inputs(&self.program, &self.sizes, inputs)?;
        Ok(Outputs::new(self.executable.run(inputs)?))
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
    fn check_names(&self, inputs: &Bindings) -> Result<()> {
        let p = &self.program;
        let names: Vec<&str> = p.inputs.iter().map(|&v| p.values[v].variable.as_str()).collect();
        match inputs.keys().find(|k| !names.contains(&k.as_str())) {
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

/// The reference backend: `fuse_core::reference::evaluate`, outputs rounded to the program's
/// precision so that every backend returns the same types.
mod reference {
    use super::*;

    pub(super) struct Interpreter {
        pub(super) program: Arc<Program>,
        pub(super) sizes: Sizes,
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
}

/// The fused CPU backend: explores the program for this CPU once, at compile time, and runs the
/// best plan with `fuse_cpu::fused`.
mod cpu {
    use fuse_core::explore::{explore, Limits};
    use fuse_cpu::fused::{timings, CpuError, FusedPlan};

    use super::*;

    pub(super) struct Fused {
        plan: FusedPlan,
    }

    impl Fused {
        /// The best plan of `program` at `sizes` by the CPU timing table. Functions resolve
        /// against the built-in library's checksum, which is what the shipped tables record.
        pub(super) fn new(program: &Program, sizes: &Sizes) -> Result<Self> {
            let library = crate::session::builtin_library()?;
            let selected = timings::select(&library, None)?;
            let exploration =
                explore(program, sizes, &selected.table, &library, Limits::default()).map_err(CpuError::from)?;
            Ok(Fused {
                plan: FusedPlan::new(program, sizes, &exploration.best())?,
            })
        }
    }

    impl Executable for Fused {
        fn run(&self, inputs: &Bindings) -> Result<Bindings> {
            Ok(self.plan.run(inputs)?)
        }
    }
}

/// The CUDA backend: explores the program for the GPU once, at compile time (or takes the plan
/// `fuse tune` remembered), and runs it with `fuse_cuda::CudaPlan`.
mod cuda {
    use fuse_codegen::generate::generate_plan;
    use fuse_core::explore::{explore, Limits};
    use fuse_cuda::tune::TuneCache;
    use fuse_cuda::{timings, CudaError, CudaPlan, Device};

    use super::*;

    pub(super) struct Gpu {
        plan: CudaPlan,
        program: Arc<Program>,
        sizes: Sizes,
    }

    impl Gpu {
        pub(super) fn new(program: &Arc<Program>, sizes: &Sizes, device: usize) -> Result<Self> {
            let library = crate::session::builtin_library()?;
            let device = Device::open(device)?;
            let plan = match TuneCache::for_gpu(device.info()).get(program, sizes, &library) {
                Some(entry) => entry.plan,
                None => {
                    let table = timings::select(device.info(), &library, None)?.table;
                    explore(program, sizes, &table, &library, Limits::default())
                        .map_err(CudaError::from)?
                        .best()
                }
            };
            let generated = generate_plan(program, &plan).map_err(CudaError::from)?;
            Ok(Gpu {
                plan: CudaPlan::compile(generated, &device)?,
                program: Arc::clone(program),
                sizes: sizes.clone(),
            })
        }
    }

    impl Executable for Gpu {
        fn run(&self, inputs: &Bindings) -> Result<Bindings> {
            Ok(self.plan.run(&self.program, &self.sizes, inputs)?)
        }
    }
}
