//! The kernel library's metadata: one YAML file per elementary function (paper §4.3).
//!
//! ```yaml
//! name: gemv                      # called as sgemv (f32) and dgemv (f64)
//! description: matrix-vector product
//! kind: nested_reduce             # map | reduce | nested_map | nested_reduce | scalar
//! forms:                          # one per arity
//!   - signature: (A[m,n], x[n]) -> [m]
//!     formula: out[i] = sum(j, A[i,j] * x[j])
//! ```
//!
//! Everything the front end knows about a function comes from here, so a user can add a
//! function by adding a file, or point `--library DIR` at a folder of their own.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use include_dir::{include_dir, Dir};
use serde::Deserialize;

use crate::error::{Diagnostic, Error, Location, Result};
use crate::formula::{parse_formula, parse_signature, Formula, ReduceOp, Signature};
use crate::shape::{is_identifier, Precision, Shape};

static BUILTIN: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../library");

/// The higher-order function an elementary function applies (paper §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HigherOrderKind {
    /// Element-wise over vectors (BLAS-1).
    Map,
    /// Vectors to one scalar (BLAS-1); its result needs a global barrier.
    Reduce,
    /// Element-wise over a matrix (BLAS-2).
    NestedMap,
    /// A matrix to a vector, reducing along one dimension (BLAS-2).
    NestedReduce,
    /// Scalars to a scalar (`rho / sigma`): computed where a kernel that reads it starts, or
    /// alone in one thread where its value is stored.
    Scalar,
}

impl HigherOrderKind {
    /// 0 for scalar arithmetic, 1 for BLAS-1 kinds, 2 for nested (BLAS-2) kinds; only equal
    /// levels fuse.
    pub fn nesting_level(self) -> u8 {
        match self {
            HigherOrderKind::Scalar => 0,
            HigherOrderKind::Map | HigherOrderKind::Reduce => 1,
            HigherOrderKind::NestedMap | HigherOrderKind::NestedReduce => 2,
        }
    }

    /// Whether the function reduces (its full result exists only after a global barrier).
    pub fn is_reduce(self) -> bool {
        matches!(self, HigherOrderKind::Reduce | HigherOrderKind::NestedReduce)
    }

    /// The spelling used in metadata.
    pub fn name(self) -> &'static str {
        match self {
            HigherOrderKind::Map => "map",
            HigherOrderKind::Reduce => "reduce",
            HigherOrderKind::NestedMap => "nested_map",
            HigherOrderKind::NestedReduce => "nested_reduce",
            HigherOrderKind::Scalar => "scalar",
        }
    }
}

impl fmt::Display for HigherOrderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One arity of a function: its signature and what it computes.
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    /// Parameters and result shape.
    pub signature: Signature,
    /// The result element as an expression of the parameters.
    pub formula: Formula,
    /// The formula as written in the metadata.
    pub formula_text: String,
}

/// An elementary function of the library.
#[derive(Debug, Clone, PartialEq)]
pub struct ElementaryFunction {
    /// Name without precision prefix (`gemv`).
    pub name: String,
    /// One line for listings.
    pub description: String,
    /// Its higher-order kind.
    pub kind: HigherOrderKind,
    /// Precisions it exists in.
    pub precisions: Vec<Precision>,
    /// Its forms, at most one per arity, shared with every call of them (a long script
    /// holds one copy of each form, not one per call).
    pub forms: Vec<Arc<Form>>,
    /// The metadata file it came from.
    pub file: String,
}

impl ElementaryFunction {
    /// The form taking `arity` arguments.
    pub fn form(&self, arity: usize) -> Option<&Arc<Form>> {
        self.forms.iter().find(|f| f.signature.params.len() == arity)
    }

    /// The arities it accepts, for messages: `2, 3 or 5`.
    pub fn arities(&self) -> String {
        let mut a: Vec<String> = self
            .forms
            .iter()
            .map(|f| f.signature.params.len().to_string())
            .collect();
        match a.len() {
            1 => a.remove(0),
            _ => {
                let last = a.pop().unwrap_or_default();
                format!("{} or {last}", a.join(", "))
            }
        }
    }
}

/// A set of elementary functions, keyed by name.
#[derive(Debug, Clone)]
pub struct Library {
    functions: BTreeMap<String, ElementaryFunction>,
    /// Where it came from (`built-in` or a folder).
    pub origin: String,
}

/// Why a call name does not resolve to a function.
#[derive(Debug, Clone, PartialEq)]
pub enum LookupError {
    /// No such function in any precision; carries the closest known call name.
    Unknown {
        /// The closest call name in this precision, if any is close.
        suggestion: Option<String>,
    },
    /// The function exists, but its prefix selects another precision than the script's.
    WrongPrecision {
        /// The prefix's precision.
        called: Precision,
        /// The name to use instead.
        use_instead: String,
    },
}

impl Library {
    /// The library shipped with fuse (the repository's `library/` folder).
    pub fn builtin() -> Result<Library> {
        let files = BUILTIN.files().filter(|f| is_metadata(f.path())).map(|f| {
            let name = format!("library/{}", f.path().display());
            (name, f.contents_utf8().unwrap_or_default().to_string())
        });
        Self::from_sources(files, "built-in")
    }

    /// Loads every `*.yaml` file directly inside `dir`.
    pub fn load(dir: &Path) -> Result<Library> {
        let io = |source| Error::Io {
            path: dir.display().to_string(),
            source,
        };
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && is_metadata(p))
            .collect();
        paths.sort();
        let mut files = Vec::new();
        for path in paths {
            let text = crate::file::read_text(&path, crate::file::ENTRY_LIMIT).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            files.push((path.display().to_string(), text));
        }
        Self::from_sources(files, &dir.display().to_string())
    }

    /// Builds a library from `(file name, YAML text)` pairs.
    pub fn from_sources(files: impl IntoIterator<Item = (String, String)>, origin: &str) -> Result<Library> {
        let mut functions: BTreeMap<String, ElementaryFunction> = BTreeMap::new();
        for (file, text) in files {
            let f = parse_function(&file, &text)?;
            if let Some(prev) = functions.get(&f.name) {
                return Err(Diagnostic::new(
                    Location::file(&file),
                    format!("function `{}` is already defined in {}", f.name, prev.file),
                )
                .into());
            }
            functions.insert(f.name.clone(), f);
        }
        if functions.is_empty() {
            return Err(Diagnostic::new(
                Location::file(origin),
                "the library folder holds no *.yaml function metadata",
            )
            .into());
        }
        Ok(Library {
            functions,
            origin: origin.to_string(),
        })
    }

    /// All functions, by name.
    pub fn functions(&self) -> impl Iterator<Item = &ElementaryFunction> {
        self.functions.values()
    }

    /// The function named `name` (without prefix).
    pub fn get(&self, name: &str) -> Option<&ElementaryFunction> {
        self.functions.get(name)
    }

    /// Resolves a call name such as `sgemv` in a script of `precision`.
    pub fn lookup(&self, call: &str, precision: Precision) -> Result<&ElementaryFunction, LookupError> {
        let mut chars = call.chars();
        let prefix = chars.next().and_then(Precision::from_prefix);
        let function = prefix.and_then(|_| self.functions.get(chars.as_str()));
        match (prefix, function) {
            (Some(p), Some(f)) if p == precision && f.precisions.contains(&p) => Ok(f),
            (Some(p), Some(f)) if f.precisions.contains(&precision) => Err(LookupError::WrongPrecision {
                called: p,
                use_instead: format!("{}{}", precision.prefix(), f.name),
            }),
            _ => Err(LookupError::Unknown {
                suggestion: self.closest(call, precision),
            }),
        }
    }

    fn closest(&self, call: &str, precision: Precision) -> Option<String> {
        let names = self
            .functions
            .values()
            .filter(|f| f.precisions.contains(&precision))
            .map(|f| format!("{}{}", precision.prefix(), f.name));
        crate::wording::closest(call, names)
    }
}

/// Metadata files are the `*.yaml` files directly in the library folder; routines and timing
/// tables live beside them under other names or in subfolders.
fn is_metadata(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFunction {
    name: String,
    #[serde(default)]
    description: String,
    kind: HigherOrderKind,
    #[serde(default = "both_precisions")]
    precisions: Vec<String>,
    forms: Vec<RawForm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForm {
    signature: String,
    formula: String,
}

fn both_precisions() -> Vec<String> {
    vec!["f32".into(), "f64".into()]
}

fn parse_function(file: &str, text: &str) -> Result<ElementaryFunction, Diagnostic> {
    let raw: RawFunction = serde_yaml::from_str(text).map_err(|e| {
        let location = match e.location() {
            Some(l) => Location::at(file, l.line(), l.column()),
            None => Location::file(file),
        };
        Diagnostic::new(location, format!("malformed function metadata: {e}"))
    })?;
    let err = |msg: String| Diagnostic::new(Location::file(file), msg);
    if !is_identifier(&raw.name) {
        return Err(err(format!("function name `{}` is not an identifier", raw.name)));
    }
    let precisions = raw
        .precisions
        .iter()
        .map(|p| match p.as_str() {
            "f32" => Ok(Precision::F32),
            "f64" => Ok(Precision::F64),
            other => Err(err(format!("precision `{other}` is not one of f32, f64"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if raw.forms.is_empty() {
        return Err(err(format!("function `{}` has no forms", raw.name)));
    }
    let mut forms: Vec<Arc<Form>> = Vec::new();
    for (k, rf) in raw.forms.iter().enumerate() {
        let form = parse_form(rf, raw.kind).map_err(|m| err(format!("`{}` form {}: {m}", raw.name, k + 1)))?;
        let arity = form.signature.params.len();
        if forms.iter().any(|f| f.signature.params.len() == arity) {
            return Err(err(format!("`{}` has two forms taking {arity} arguments", raw.name)));
        }
        forms.push(Arc::new(form));
    }
    Ok(ElementaryFunction {
        name: raw.name,
        description: raw.description,
        kind: raw.kind,
        precisions,
        forms,
        file: file.to_string(),
    })
}

fn parse_form(raw: &RawForm, kind: HigherOrderKind) -> Result<Form, String> {
    let signature = parse_signature(&raw.signature)
        .map_err(|e| format!("signature `{}`: {e}", crate::wording::excerpt(&raw.signature)))?;
    for dim in signature.result.dims() {
        if !signature.params.iter().any(|p| p.shape.dims().contains(&dim)) {
            return Err(format!("result dimension `{dim}` is not a dimension of any parameter"));
        }
    }
    let formula = parse_formula(&raw.formula, &signature)
        .map_err(|e| format!("formula `{}`: {e}", crate::wording::excerpt(&raw.formula)))?;
    check_kind(kind, &signature, &formula)?;
    Ok(Form {
        signature,
        formula,
        formula_text: raw.formula.clone(),
    })
}

/// The declared higher-order kind must match what the formula does.
fn check_kind(kind: HigherOrderKind, signature: &Signature, formula: &Formula) -> Result<(), String> {
    let has_matrix = signature.params.iter().any(|p| matches!(p.shape, Shape::Matrix(..)));
    let rank = signature.result.rank();
    let sums = formula.body.has_reduction();
    // The generated GPU kernels scale a norm's squares in BLAS-1 reductions only.
    if kind != HigherOrderKind::Reduce && formula.body.has(ReduceOp::Norm2) {
        return Err(format!(
            "`norm2` is supported in `kind: reduce` formulas only, not in `{kind}`"
        ));
    }
    let ok = match kind {
        HigherOrderKind::Map => rank == 1 && !sums && !has_matrix,
        HigherOrderKind::Reduce => rank == 0 && sums && !has_matrix,
        HigherOrderKind::NestedMap => rank == 2 && !sums,
        HigherOrderKind::NestedReduce => rank == 1 && sums && has_matrix,
        HigherOrderKind::Scalar => signature.params.iter().all(|p| p.shape.rank() == 0) && rank == 0 && !sums,
    };
    if ok {
        Ok(())
    } else {
        let expected = match kind {
            HigherOrderKind::Map => "a vector result, no sum, no matrix",
            HigherOrderKind::Reduce => "a scalar result computed by a sum (or norm2) over vectors",
            HigherOrderKind::NestedMap => "a matrix result and no sum",
            HigherOrderKind::NestedReduce => "a vector result computed by a sum over a matrix dimension",
            HigherOrderKind::Scalar => "scalar parameters, a scalar result and no sum",
        };
        Err(format!("kind `{kind}` expects {expected}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AXPY: &str =
        "name: axpy\nkind: map\nforms:\n  - signature: (a, x[n], y[n]) -> [n]\n    formula: out[i] = a * x[i] + y[i]\n";

    fn lib(files: &[(&str, &str)]) -> Result<Library> {
        Library::from_sources(files.iter().map(|(a, b)| (a.to_string(), b.to_string())), "test")
    }

    #[test]
    fn a_long_formula_is_quoted_in_part() {
        // 90 KB of formula with one bad name at its end.
        let formula = format!("out[i] = {}q[i]", "x[i] + ".repeat(12_000));
        let text = AXPY.replace("out[i] = a * x[i] + y[i]", &formula);
        let message = lib(&[("axpy.yaml", &text)]).unwrap_err().to_string();
        assert!(message.len() < 1_000, "a message of {} bytes", message.len());
        assert!(
            message.contains(&format!("({} bytes in all)", formula.len())),
            "{message}"
        );
    }

    #[test]
    fn lookup_resolves_prefix_and_precision() {
        let l = lib(&[("axpy.yaml", AXPY)]).unwrap();
        assert_eq!(l.lookup("saxpy", Precision::F32).unwrap().name, "axpy");
        assert_eq!(l.lookup("daxpy", Precision::F64).unwrap().name, "axpy");
        assert_eq!(
            l.lookup("daxpy", Precision::F32),
            Err(LookupError::WrongPrecision {
                called: Precision::F64,
                use_instead: "saxpy".into()
            })
        );
        assert_eq!(
            l.lookup("saxpz", Precision::F32),
            Err(LookupError::Unknown {
                suggestion: Some("saxpy".into())
            })
        );
        assert_eq!(
            l.lookup("zzz", Precision::F32),
            Err(LookupError::Unknown { suggestion: None })
        );
    }

    #[test]
    fn malformed_metadata_names_the_file() {
        let cases = [
            ("name: x\nkind: map\nforms: [\n", "malformed"),
            ("name: x\nkind: mapp\nforms: []\n", "malformed"),
            ("name: x\nkind: map\ncolour: red\nforms: []\n", "unknown field"),
            ("name: x\nkind: map\nforms: []\n", "no forms"),
            ("name: x-y\nkind: map\nforms: []\n", "not an identifier"),
            ("name: x\nkind: reduce\nforms:\n  - signature: (x[n]) -> [n]\n    formula: out[i] = x[i]\n", "kind `reduce` expects"),
            ("name: x\nkind: map\nforms:\n  - signature: (x[n]) -> [k]\n    formula: out[i] = x[i]\n", "result dimension `k`"),
            (
                "name: x\nkind: nested_reduce\nforms:\n  - signature: (A[m,n]) -> [m]\n    formula: out[i] = norm2(j, A[i,j])\n",
                "`norm2` is supported in `kind: reduce` formulas only",
            ),
            ("name: x\nkind: scalar\nforms:\n  - signature: (x[n]) -> scalar\n    formula: out = 1\n", "kind `scalar` expects scalar parameters"),
            ("name: x\nkind: map\nprecisions: [f16]\nforms:\n  - signature: (x[n]) -> [n]\n    formula: out[i] = x[i]\n", "f16"),
        ];
        for (text, want) in cases {
            let err = lib(&[("bad.yaml", text)]).unwrap_err().to_string();
            assert!(err.starts_with("bad.yaml"), "{err}");
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn duplicate_function_names_are_rejected() {
        let err = lib(&[("a.yaml", AXPY), ("b.yaml", AXPY)]).unwrap_err().to_string();
        assert!(err.contains("already defined in a.yaml"), "{err}");
    }

    #[test]
    fn builtin_library_has_the_design_table() {
        let l = Library::builtin().unwrap();
        let arities = |name: &str| {
            let mut a: Vec<usize> = l
                .get(name)
                .unwrap()
                .forms
                .iter()
                .map(|f| f.signature.params.len())
                .collect();
            a.sort();
            a
        };
        assert_eq!(arities("gemv"), [2, 3, 5]);
        assert_eq!(arities("gemtv"), [2, 3, 5]);
        assert_eq!(arities("ger"), [3, 4]);
        assert_eq!(arities("outer"), [2, 3]);
        for (name, arity) in [
            ("scal", 2),
            ("axpy", 3),
            ("axpby", 4),
            ("add", 2),
            ("copy", 1),
            ("dot", 2),
            ("asum", 1),
            ("nrm2", 1),
            ("madd", 2),
            ("plus", 2),
            ("sub", 2),
            ("mul", 2),
            ("div", 2),
            ("max", 2),
            ("min", 2),
            ("neg", 1),
            ("abs", 1),
            ("sqrt", 1),
            ("recip", 1),
            ("mscal", 2),
        ] {
            assert_eq!(arities(name), [arity], "{name}");
        }
    }
}
