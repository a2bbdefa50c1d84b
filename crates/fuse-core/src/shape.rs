//! Element types, symbolic shapes and the size bindings that make them concrete.

use std::collections::BTreeMap;
use std::fmt;

/// Floating-point precision of a script; selects the `s` or `d` variant of every function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    /// 32-bit floats, functions prefixed `s`.
    F32,
    /// 64-bit floats, functions prefixed `d`.
    F64,
}

impl Precision {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }

    /// The BLAS prefix of function names in this precision.
    pub fn prefix(self) -> char {
        match self {
            Precision::F32 => 's',
            Precision::F64 => 'd',
        }
    }

    /// The precision whose BLAS prefix is `c`, if any.
    pub fn from_prefix(c: char) -> Option<Self> {
        match c {
            's' => Some(Precision::F32),
            'd' => Some(Precision::F64),
            _ => None,
        }
    }

    /// The spelling used in scripts (`f32`, `f64`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The shape of a value, with dimensions named by size symbols (`m`, `n`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A single number.
    Scalar,
    /// A vector of the given length.
    Vector(String),
    /// A row-major matrix of `rows × columns`.
    Matrix(String, String),
}

impl Shape {
    /// Number of dimensions: 0, 1 or 2.
    pub fn rank(&self) -> usize {
        self.dims().len()
    }

    /// The dimension symbols, outermost first.
    pub fn dims(&self) -> Vec<&str> {
        match self {
            Shape::Scalar => vec![],
            Shape::Vector(n) => vec![n],
            Shape::Matrix(m, n) => vec![m, n],
        }
    }

    /// Concrete extents under `sizes`; `None` if a symbol is unbound.
    pub fn extents(&self, sizes: &Sizes) -> Option<Vec<usize>> {
        self.dims().iter().map(|d| sizes.get(d)).collect()
    }

    /// A word for messages: `scalar`, `vector`, `matrix`.
    /// `a scalar`, `a vector [n]`, `a matrix [m, n]`: the shape in a sentence.
    pub fn described(&self) -> String {
        match self {
            Shape::Scalar => "a scalar".to_string(),
            other => format!("a {} {other}", other.kind_name()),
        }
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            Shape::Scalar => "scalar",
            Shape::Vector(_) => "vector",
            Shape::Matrix(..) => "matrix",
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Scalar => f.write_str("scalar"),
            Shape::Vector(n) => write!(f, "[{n}]"),
            Shape::Matrix(m, n) => write!(f, "[{m}, {n}]"),
        }
    }
}

/// Largest array fuse accepts, in bytes: beyond any device's memory, so a bigger one is a typo.
pub const MAX_ARRAY_BYTES: u64 = 1 << 42;

/// Concrete values of the size symbols of a script.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sizes(BTreeMap<String, usize>);

impl Sizes {
    /// Sizes from `(symbol, value)` pairs.
    pub fn new(pairs: impl IntoIterator<Item = (String, usize)>) -> Self {
        Sizes(pairs.into_iter().collect())
    }

    /// The value bound to `symbol`.
    pub fn get(&self, symbol: &str) -> Option<usize> {
        self.0.get(symbol).copied()
    }

    /// Binds `symbol` to `value`, replacing any earlier value.
    pub fn set(&mut self, symbol: &str, value: usize) {
        self.0.insert(symbol.to_string(), value);
    }

    /// Symbols and values, in symbol order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, usize)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The first symbol bound to 0: an empty dimension, which BLAS allows (a dot of length 0 is
    /// 0) and which leaves a program nothing to fuse.
    pub fn empty_dimension(&self) -> Option<&str> {
        self.iter().find(|&(_, v)| v == 0).map(|(k, _)| k)
    }

    /// Bytes of an array of `shape` in `precision`, or why it is not a sane size.
    pub fn array_bytes(&self, shape: &Shape, precision: Precision) -> Result<u64, String> {
        let mut bytes = precision.bytes();
        for dim in shape.dims() {
            let extent = self.get(dim).ok_or_else(|| format!("size `{dim}` has no value"))?;
            bytes = bytes
                .checked_mul(extent as u64)
                .filter(|b| *b <= MAX_ARRAY_BYTES)
                .ok_or_else(|| {
                    format!(
                        "an array of shape {shape} with {} would need more than {} bytes",
                        self.describe(shape),
                        MAX_ARRAY_BYTES
                    )
                })?;
        }
        Ok(bytes)
    }

    /// `m=4096, n=512` for the symbols of `shape`.
    fn describe(&self, shape: &Shape) -> String {
        let parts: Vec<String> = shape
            .dims()
            .iter()
            .map(|d| format!("{d}={}", self.get(d).unwrap_or(0)))
            .collect();
        parts.join(", ")
    }
}

impl fmt::Display for Sizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(" "))
    }
}

/// Whether `s` is an identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for ok in ["A", "_x", "alpha_2", "u1"] {
            assert!(is_identifier(ok), "{ok}");
        }
        for bad in ["", "1x", "a-b", "x y", "é", "a.b"] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }

    #[test]
    fn array_bytes_overflow_is_an_error() {
        let sizes = Sizes::new([("m".to_string(), usize::MAX), ("n".to_string(), 3)]);
        let err = sizes
            .array_bytes(&Shape::Matrix("m".into(), "n".into()), Precision::F32)
            .unwrap_err();
        assert!(err.contains("more than"), "{err}");
        let sizes = Sizes::new([("m".to_string(), 1000), ("n".to_string(), 3)]);
        let shape = Shape::Matrix("m".into(), "n".into());
        assert_eq!(sizes.array_bytes(&shape, Precision::F64), Ok(24_000));
    }
}
