//! The script API: load a script, compile it for a backend, run it with named arrays.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::Path;

use fuse_core::{Bindings, HostArray, Library, Program};

use crate::backend::{Backend, Compiled};
use crate::element::{checked_array, Element};
use crate::error::{list, Error, Result};
use crate::session::builtin_library;

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

/// Named input arrays for [`Compiled::run`], built from host vectors with their lengths
/// checked, or from ready [`Bindings`]. Dereferences to [`Bindings`] to look at them.
///
/// ```
/// use fuse::Inputs;
///
/// let inputs = Inputs::new()
///     .matrix("A", 2, 2, vec![1.0f64, 0.0, 0.0, 1.0])?
///     .vector("x", vec![3.0f64, 4.0])?
///     .scalar("alpha", 0.5f64);
/// assert_eq!(inputs["A"].dims, [2, 2]);
/// assert!(Inputs::new().matrix("A", 2, 2, vec![1.0f64]).is_err()); // 1 element for 2×2
/// # Ok::<(), fuse::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    bindings: Bindings,
}

impl Inputs {
    /// No inputs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `name` to `array`.
    pub fn array(mut self, name: &str, array: HostArray) -> Self {
        self.bindings.insert(name.to_string(), array);
        self
    }

    /// Binds `name` to a `rows × cols` row-major matrix; `data` must hold `rows · cols` elements.
    pub fn matrix<T: Element>(self, name: &str, rows: usize, cols: usize, data: Vec<T>) -> Result<Self> {
        let array = checked_array(&format!("matrix `{name}`"), vec![rows, cols], data)?;
        Ok(self.array(name, array))
    }

    /// Binds `name` to a vector of `data` (non-empty).
    pub fn vector<T: Element>(self, name: &str, data: Vec<T>) -> Result<Self> {
        let array = checked_array(&format!("vector `{name}`"), vec![data.len()], data)?;
        Ok(self.array(name, array))
    }

    /// Binds `name` to a scalar.
    pub fn scalar<T: Element>(self, name: &str, value: T) -> Self {
        let array = HostArray {
            dims: Vec::new(),
            data: T::into_data(vec![value]),
        };
        self.array(name, array)
    }
}

impl Deref for Inputs {
    type Target = Bindings;

    fn deref(&self) -> &Bindings {
        &self.bindings
    }
}

impl From<Bindings> for Inputs {
    fn from(bindings: Bindings) -> Inputs {
        Inputs { bindings }
    }
}

impl From<Inputs> for Bindings {
    fn from(inputs: Inputs) -> Bindings {
        inputs.bindings
    }
}

/// The outputs of a run, by script name, in the program's precision. Dereferences to
/// [`Bindings`] to iterate over them.
///
/// ```
/// use fuse::{Backend, Inputs, Script};
///
/// let script = Script::from_str("dot.yaml", "
/// sizes: {n: 3}
/// inputs: {x: [n]}
/// outputs: [d]
/// calls:
///   - d = sdot(x, x)
/// ")?;
/// let out = script.compile(&Backend::Reference, &[])?.run(&Inputs::new().vector("x", vec![1.0f32, 2.0, 2.0])?)?;
/// assert_eq!(out.scalar::<f32>("d")?, 9.0);
/// assert!(out.get::<f64>("d").is_err()); // the script is f32
/// assert!(out.get::<f32>("e").is_err()); // no such output
/// # Ok::<(), fuse::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    bindings: Bindings,
}

impl Outputs {
    pub(crate) fn new(bindings: Bindings) -> Self {
        Outputs { bindings }
    }

    /// The array named `name`.
    pub fn array(&self, name: &str) -> Result<&HostArray> {
        self.bindings.get(name).ok_or_else(|| Error::UnknownOutput {
            name: name.to_string(),
            outputs: list(&self.bindings.keys().collect::<Vec<_>>()),
        })
    }

    /// The elements of output `name` (row-major for a matrix), which must be of type `T`.
    pub fn get<T: Element>(&self, name: &str) -> Result<&[T]> {
        let array = self.array(name)?;
        T::values(array).ok_or_else(|| Error::Precision {
            name: name.to_string(),
            got: array.precision(),
            want: T::PRECISION,
        })
    }

    /// The value of scalar output `name` (the first element of any other output).
    pub fn scalar<T: Element>(&self, name: &str) -> Result<T> {
        let values = self.get::<T>(name)?;
        values.first().copied().ok_or_else(|| Error::DataLength {
            what: format!("output `{name}`"),
            dims: Vec::new(),
            len: 0,
            want: 1,
        })
    }

    /// The arrays by name.
    pub fn into_bindings(self) -> Bindings {
        self.bindings
    }
}

impl Deref for Outputs {
    type Target = BTreeMap<String, HostArray>;

    fn deref(&self) -> &Bindings {
        &self.bindings
    }
}
