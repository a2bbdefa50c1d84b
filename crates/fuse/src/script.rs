//! The script API: load a script, compile it for a backend, run it with named arrays.

use std::path::Path;

use fuse_core::{Library, Program};

use crate::backend::{Backend, Compiled};
use crate::error::Result;
use crate::select::builtin_library;

/// A parsed and checked script (the YAML language of the README).
///
/// ```
/// use fuse::{Backend, Inputs, Script};
///
/// let script = Script::from_str("bicgk.yaml", "
/// sizes: {m: 4096, n: 4096}
/// inputs: {A: [m, n], p: [n], r: [m]}
/// outputs: [q, s]
/// calls:
///   - q = sgemv(A, p)
///   - s = sgemtv(A, r)
/// ")?;
/// let compiled = script.compile(&Backend::Reference, &[("m", 2), ("n", 3)])?;
/// let inputs = Inputs::new()
///     .matrix("A", 2, 3, vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?
///     .vector("p", vec![1.0f32, 0.0, 1.0])?
///     .vector("r", vec![1.0f32, 1.0])?;
/// let out = compiled.run(&inputs)?;
/// assert_eq!(out.get::<f32>("q")?, [4.0, 10.0]);
/// assert_eq!(out.get::<f32>("s")?, [5.0, 7.0, 9.0]);
/// # Ok::<(), fuse::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Script {
    program: Program,
}

impl Script {
    /// Reads and checks the script at `path` with the built-in function library.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Script> {
        Self::from_file_with_library(path, &*builtin_library()?)
    }

    /// Reads and checks the script at `path` with the functions of `library`.
    pub fn from_file_with_library(path: impl AsRef<Path>, library: &Library) -> Result<Script> {
        let program = fuse_core::script::load(path.as_ref(), library)?;
        Ok(Script { program })
    }

    /// Checks script `text`; `file` names it in error messages (and, without a `name:` key,
    /// gives the script its name).
    pub fn from_str(file: &str, text: &str) -> Result<Script> {
        Self::from_str_with_library(file, text, &*builtin_library()?)
    }

    /// Checks script `text` with the functions of `library`.
    pub fn from_str_with_library(file: &str, text: &str, library: &Library) -> Result<Script> {
        let program = fuse_core::script::parse(file, text, library)?;
        Ok(Script { program })
    }

    /// The checked program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Compiles for `backend` with the script's default sizes, each overridden by `sizes`
    /// (`&[("m", 1000)]`; `&[]` keeps them all). The result is reusable across runs.
    pub fn compile(&self, backend: &Backend, sizes: &[(&str, usize)]) -> Result<Compiled> {
        let overrides: Vec<(String, usize)> = sizes.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        let sizes = self.program.bind_sizes(&overrides)?;
        backend.compile(&self.program, &sizes)
    }
}
