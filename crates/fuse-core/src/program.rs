//! A checked script: every name resolved to a value in SSA form, every call to a library form,
//! every shape checked. Stages after parsing work on this type only.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Location, Result};
use crate::library::{Form, HigherOrderKind};
use crate::shape::{Precision, Shape, Sizes};
use crate::wording::list_or_none;

/// Index of a value in [`Program::values`].
pub type ValueId = usize;
/// Index of a call in [`Program::calls`].
pub type CallId = usize;

/// A value: an input, or the result of one call. Re-assigning a name makes a new value.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// Unique name: the script's name for its first definition, `name.1`, `name.2`, … after.
    pub name: String,
    /// The name as written in the script.
    pub variable: String,
    /// Its shape in the script's size symbols.
    pub shape: Shape,
    /// The call that computes it, or `None` for an input.
    pub producer: Option<CallId>,
}

/// An argument of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// A value of the program.
    Value(ValueId),
    /// A compile-time constant such as `2.0`.
    Literal(f64),
    /// A scalar call inlined where its result is read (`saxpy(sdiv(rho, sigma), p, x)`): the
    /// kernel computes it once where it starts, from scalars already finished.
    Scalar(Arc<ScalarArg>),
}

/// A scalar call (`kind: scalar`) inlined as an argument.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarArg {
    /// The name as called (`sdiv`).
    pub callee: String,
    /// Its library form.
    pub form: Arc<Form>,
    /// Its arguments: values, literals or further inlined scalar calls.
    pub args: Vec<Arg>,
}

impl Arg {
    /// The values it reads, inside inlined scalar calls too, appended to `out` without repeats.
    pub fn collect_reads(&self, out: &mut Vec<ValueId>) {
        match self {
            Arg::Value(v) if !out.contains(v) => out.push(*v),
            Arg::Value(_) | Arg::Literal(_) => {}
            Arg::Scalar(s) => s.args.iter().for_each(|a| a.collect_reads(out)),
        }
    }

    /// The value of a scalar argument given the values of the scalars it reads: a literal, a
    /// value, or an inlined call evaluated in f64 with each call's result rounded by `round`
    /// (to f32 in an f32 program, as every call's result is).
    pub fn scalar_value(&self, value: &dyn Fn(ValueId) -> f64, round: &dyn Fn(f64) -> f64) -> f64 {
        match self {
            Arg::Value(v) => value(*v),
            Arg::Literal(x) => *x,
            Arg::Scalar(s) => {
                let args: Vec<f64> = s.args.iter().map(|a| a.scalar_value(value, round)).collect();
                // A product by a zero argument is +0 here as in every formula.
                let body = s.form.formula.body.with_zero_products(&|p| args[p] == 0.0);
                round(body.eval_scalar(&args))
            }
        }
    }

    /// The argument with value `v` replaced by `with`, inside inlined scalar calls too.
    pub fn substitute(&self, v: ValueId, with: &Arg) -> Arg {
        match self {
            Arg::Value(u) if *u == v => with.clone(),
            Arg::Value(_) | Arg::Literal(_) => self.clone(),
            Arg::Scalar(s) => Arg::Scalar(Arc::new(ScalarArg {
                callee: s.callee.clone(),
                form: Arc::clone(&s.form),
                args: s.args.iter().map(|a| a.substitute(v, with)).collect(),
            })),
        }
    }

    /// The argument with each value it names replaced by `f` of it (program editing).
    pub fn map_values(&self, f: &dyn Fn(ValueId) -> ValueId) -> Arg {
        match self {
            Arg::Value(v) => Arg::Value(f(*v)),
            Arg::Literal(x) => Arg::Literal(*x),
            Arg::Scalar(s) => Arg::Scalar(Arc::new(ScalarArg {
                callee: s.callee.clone(),
                form: Arc::clone(&s.form),
                args: s.args.iter().map(|a| a.map_values(f)).collect(),
            })),
        }
    }

    /// The argument as a script would write it: `sdiv(rho, sigma)`.
    pub fn text(&self, program: &Program) -> String {
        match self {
            Arg::Value(v) => program.values[*v].variable.clone(),
            Arg::Literal(x) => format!("{x}"),
            Arg::Scalar(s) => {
                let args: Vec<String> = s.args.iter().map(|a| a.text(program)).collect();
                format!("{}({})", s.callee, args.join(", "))
            }
        }
    }
}

/// One call of an elementary function.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The function's name without prefix (`gemv`).
    pub function: String,
    /// The name as called (`sgemv`).
    pub callee: String,
    /// Its higher-order kind.
    pub kind: HigherOrderKind,
    /// The library form selected by the arity, shared with the library.
    pub form: Arc<Form>,
    /// Arguments in signature order.
    pub args: Vec<Arg>,
    /// The value it defines.
    pub result: ValueId,
    /// Where the call is written.
    pub location: Location,
    /// The call as written, normalised: `q = sgemv(A, p)`.
    pub text: String,
}

impl Call {
    /// The values it reads (literals excluded, those read inside inlined scalar calls
    /// included), in argument order, without repeats.
    pub fn reads(&self) -> Vec<ValueId> {
        let mut out: Vec<ValueId> = Vec::new();
        self.args.iter().for_each(|a| a.collect_reads(&mut out));
        out
    }
}

/// One step of the rewrite stage ([`crate::rewrite`]): the calls it replaced and the calls it wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    /// The rule's name (`map-joins-walk`).
    pub rule: &'static str,
    /// The calls replaced, as written before.
    pub before: Vec<String>,
    /// The calls that replace them.
    pub after: Vec<String>,
}

impl fmt::Display for Rewrite {
    /// `map-joins-walk: t = dgemv(A, x); u = daxpy(a, t, c) → u = dgemv(a, A, x, 1, c)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} → {}",
            self.rule,
            self.before.join("; "),
            self.after.join("; ")
        )
    }
}

/// A parsed and checked script.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// The script's `name`.
    pub name: String,
    /// The script file.
    pub file: String,
    /// Element precision.
    pub precision: Precision,
    /// Default sizes from the script.
    pub sizes: Sizes,
    /// All values, inputs first.
    pub values: Vec<Value>,
    /// Input values, in declaration order.
    pub inputs: Vec<ValueId>,
    /// Output values, in the order of `outputs`.
    pub outputs: Vec<ValueId>,
    /// Calls, in script order (after the rewrite stage: see `rewrites`).
    pub calls: Vec<Call>,
    /// What the rewrite stage changed, in the order it did (empty where the script was fused
    /// as written).
    pub rewrites: Vec<Rewrite>,
}

impl Program {
    /// The value with unique name `name`.
    pub fn value(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name)
    }

    /// What is legal but likely a slip, one line each: an input that no call reads (misspelt
    /// where it is used, or left over), which a run must still be given.
    pub fn warnings(&self) -> Vec<String> {
        let read: Vec<ValueId> = self.calls.iter().flat_map(Call::reads).collect();
        (self.inputs.iter())
            .filter(|v| !read.contains(v))
            .map(|&v| {
                let name = &self.values[v].variable;
                format!("{}: input `{name}` is declared but no call reads it", self.file)
            })
            .collect()
    }

    /// Whether `v` is one of the outputs.
    pub fn is_output(&self, v: ValueId) -> bool {
        self.outputs.contains(&v)
    }

    /// The default sizes with `overrides` applied, checked: every symbol known, every array of
    /// a sane byte size. A size may be 0, as in BLAS (see [`Sizes::empty_dimension`]).
    pub fn bind_sizes(&self, overrides: &[(String, usize)]) -> Result<Sizes> {
        let mut sizes = self.sizes.clone();
        for (symbol, value) in overrides {
            if sizes.get(symbol).is_none() {
                let known: Vec<&str> = self.sizes.iter().map(|(k, _)| k).collect();
                return Err(Error::Sizes(format!(
                    "--size {symbol}={value}: `{symbol}` is not a size of {} (it has {})",
                    self.file,
                    list_or_none(&known)
                )));
            }
            sizes.set(symbol, *value);
        }
        for value in &self.values {
            sizes
                .array_bytes(&value.shape, self.precision)
                .map_err(|e| Error::Sizes(format!("{}: `{}`: {e}", self.file, value.variable)))?;
        }
        Ok(sizes)
    }

    /// Bytes that must cross memory at least once: every input read once, every output
    /// written once.
    pub fn compulsory_bytes(&self, sizes: &Sizes) -> u64 {
        self.input_bytes(sizes) + self.bytes_of(&self.outputs, sizes)
    }

    /// Bytes of its inputs at `sizes`.
    pub fn input_bytes(&self, sizes: &Sizes) -> u64 {
        self.bytes_of(&self.inputs, sizes)
    }

    fn bytes_of(&self, values: &[ValueId], sizes: &Sizes) -> u64 {
        values
            .iter()
            .map(|&v| sizes.array_bytes(&self.values[v].shape, self.precision).unwrap_or(0))
            .sum()
    }
}

impl fmt::Display for Program {
    /// One line: `bicgk (f32, m=4096 n=4096): 2 calls, inputs A p r, outputs q s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |ids: &[ValueId]| -> String {
            ids.iter()
                .map(|&v| self.values[v].variable.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        write!(
            f,
            "{} ({}, {}): {} call{}, inputs {}, outputs {}",
            self.name,
            self.precision,
            self.sizes,
            self.calls.len(),
            if self.calls.len() == 1 { "" } else { "s" },
            names(&self.inputs),
            names(&self.outputs)
        )
    }
}
