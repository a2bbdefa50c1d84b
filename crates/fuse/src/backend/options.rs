//! What compiling may be told besides the program and sizes.

use std::path::PathBuf;
use std::sync::Arc;

use fuse_core::{Library, Plan};
use fuse_cpu::fused::Threads;

/// What [`Backend::compile_with`](crate::Backend::compile_with) may be told besides the program and sizes.
///
/// ```
/// use fuse::{Backend, CompileOptions, Library, Script};
///
/// let script = Script::from_str("t.yaml", "sizes: {n: 8}\ninputs: {x: [n]}\noutputs: [y]\ncalls:\n  - y = sscal(2.0, x)")?;
/// let options = CompileOptions::new().library(Library::builtin()?);
/// let compiled = Backend::Cpu.compile_with(script.program(), &script.program().sizes, &options)?;
/// assert_eq!(compiled.plan().map(|p| p.kernels.len()), Some(1));
/// # Ok::<(), fuse::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    pub(crate) library: Option<Arc<Library>>,
    pub(crate) timings: Option<PathBuf>,
    pub(crate) plan_sizes: Vec<(String, usize)>,
    pub(crate) plan: Option<Plan>,
    pub(crate) threads: Option<Threads>,
}

impl CompileOptions {
    /// The defaults: the built-in library, the backend's own timing table, the best plan at
    /// the compiled sizes (or the plan `fuse tune` remembered, on a GPU).
    pub fn new() -> Self {
        Self::default()
    }

    /// Resolve functions against `library` (it must be the one the program was checked with).
    pub fn library(mut self, library: impl Into<Arc<Library>>) -> Self {
        self.library = Some(library.into());
        self
    }

    /// Rank plans with the timing table in `file` (and, on a GPU, ignore remembered tuning).
    pub fn timings(mut self, file: impl Into<PathBuf>) -> Self {
        self.timings = Some(file.into());
        self
    }

    /// Choose the plan as if these sizes were in force (they override the compiled sizes
    /// symbol by symbol), e.g. run the plan chosen for 8192² at a small size. The emulation
    /// and CUDA backends only.
    pub fn plan_sizes(mut self, sizes: Vec<(String, usize)>) -> Self {
        self.plan_sizes = sizes;
        self
    }

    /// Run `plan` rather than choosing one (fused CPU, emulation and CUDA backends).
    pub fn plan(mut self, plan: Plan) -> Self {
        self.plan = Some(plan);
        self
    }

    /// Run on `threads` (the fused CPU backend) rather than the shared pool of
    /// `FUSE_NUM_THREADS` threads, else one per core this process may run on.
    ///
    /// ```
    /// use fuse::{Backend, CompileOptions, Script, Threads};
    ///
    /// let script = Script::from_str("t.yaml", "sizes: {n: 8}\ninputs: {x: [n]}\noutputs: [y]\ncalls:\n  - y = sscal(2.0, x)")?;
    /// let options = CompileOptions::new().threads(Threads::new(3)?);
    /// let compiled = Backend::Cpu.compile_with(script.program(), &script.program().sizes, &options)?;
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn threads(mut self, threads: Threads) -> Self {
        self.threads = Some(threads);
        self
    }
}
