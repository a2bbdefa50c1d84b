//! The named arrays a compiled program runs on and returns.

use std::collections::BTreeMap;
use std::ops::Deref;

use fuse_core::{Bindings, HostArray};

use crate::element::{exact_array, Element};
use crate::error::{list, Error, Result};

/// Named input arrays for [`Compiled::run`](crate::Compiled::run), built from host vectors with their lengths
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
        let array = exact_array(&format!("matrix `{name}`"), vec![rows, cols], data)?;
        Ok(self.array(name, array))
    }

    /// Binds `name` to a vector of `data`.
    pub fn vector<T: Element>(self, name: &str, data: Vec<T>) -> Result<Self> {
        let array = exact_array(&format!("vector `{name}`"), vec![data.len()], data)?;
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
