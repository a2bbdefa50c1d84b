//! The script API: load a script, compile it for a backend, run it with named arrays.

use std::collections::BTreeMap;
use std::path::Path;

use fuse_core::{Error as CoreError, Library, Program, Sizes};

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

/// Where a size comes from, for messages: a value given for a symbol (`--size m=5`), or an
/// input's array whose shape gives its symbols.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeSource<'a> {
    /// Size `symbol` given as `value`; `what` says how (`--size m=5`).
    Given {
        /// The size symbol.
        symbol: &'a str,
        /// Its value.
        value: usize,
        /// How it was given, for messages.
        what: String,
    },
    /// The array bound to input `input` has extents `dims`; `what` says which array it is
    /// (`in/A.npy`).
    Shape {
        /// The input's name.
        input: &'a str,
        /// The array's extents.
        dims: &'a [usize],
        /// The array, for messages.
        what: String,
    },
}

/// The sizes of a run of `program`, each symbol taken from the first of `sources` that gives it
/// (a given value, or the shape of an input's array), else the script's default. Two sources
/// that disagree are a size error (`fuse_core::Error::Sizes`) naming both. An empty array binds
/// its sizes to 0, as BLAS allows. An array of another rank than its input is passed over: the
/// input check names it, with the shape wanted.
///
/// ```
/// use fuse::{bind_sizes, Script, SizeSource};
///
/// let script = Script::from_str("bicgk.yaml", "
/// sizes: {m: 4096, n: 4096}
/// inputs: {A: [m, n], p: [n], r: [m]}
/// outputs: [q, s]
/// calls:
///   - q = sgemv(A, p)
///   - s = sgemtv(A, r)
/// ")?;
/// let a = SizeSource::Shape { input: "A", dims: &[3, 5], what: "A".into() };
/// let sizes = bind_sizes(script.program(), &[a.clone()])?;
/// assert_eq!((sizes.get("m"), sizes.get("n")), (Some(3), Some(5)));
/// let m = SizeSource::Given { symbol: "m", value: 4, what: "m=4".into() };
/// let err = bind_sizes(script.program(), &[m, a]).unwrap_err();
/// assert_eq!(err.to_string(), "size `m` disagrees: m=4 gives m = 4, but A (input `A`: [m, n]) of shape [3, 5] gives m = 3");
/// # Ok::<(), fuse::Error>(())
/// ```
pub fn bind_sizes(program: &Program, sources: &[SizeSource<'_>]) -> Result<Sizes> {
    // Each symbol bound so far: its value and what bound it, for messages.
    let mut bound: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    let mut bind = |symbol, value, source: &str| match bound.get(symbol) {
        Some((v, first)) if *v != value => Err(CoreError::Sizes(format!(
            "size `{symbol}` disagrees: {first} gives {symbol} = {v}, but {source} gives {symbol} = {value}"
        ))),
        Some(_) => Ok(()),
        None => {
            bound.insert(symbol, (value, source.to_string()));
            Ok(())
        }
    };
    for source in sources {
        match source {
            SizeSource::Given { symbol, value, what } => bind(symbol, *value, what)?,
            SizeSource::Shape { input, dims, what } => {
                let Some(value) = program
                    .inputs
                    .iter()
                    .map(|&v| &program.values[v])
                    .find(|v| v.variable == *input)
                else {
                    continue; // not an input: the name check reports it
                };
                let symbols = value.shape.dims();
                if symbols.len() != dims.len() {
                    continue;
                }
                let what = format!("{what} (input `{input}`: {}) of shape {dims:?}", value.shape);
                for (symbol, &extent) in symbols.into_iter().zip(dims.iter()) {
                    bind(symbol, extent, &what)?;
                }
            }
        }
    }
    let overrides: Vec<(String, usize)> = bound.into_iter().map(|(s, (v, _))| (s.to_string(), v)).collect();
    Ok(program.bind_sizes(&overrides)?)
}
