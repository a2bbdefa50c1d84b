//! What the generator of one kernel knows and emits, and the naming helpers every kernel
//! generator shares.

use std::collections::BTreeSet;
use std::fmt::Write;

use fuse_core::{Arg, CallId, Precision, Program, Shape, ValueId};

use super::error::GenerateError;
use super::expr;
use super::group::{KernelGroup, Serial, Walk};
use super::launch::{Launch, LaunchArg};

/// One generated kernel.
pub(crate) struct KernelOutput {
    pub source: String,
    pub launch: Launch,
    /// Reductions complete in their block, stored directly with their whole formula applied.
    pub direct: Vec<ValueId>,
}

/// What the generator of one kernel needs to know.
pub(crate) struct KernelContext<'a> {
    pub program: &'a Program,
    pub name: String,
    pub calls: Vec<CallId>,
    pub level: u8,
    pub block: u32,
    pub width: u32,
    pub whole_rows: bool,
    pub serial: Serial,
    pub walk: Walk,
    pub global: &'a BTreeSet<ValueId>,
}

impl<'a> KernelContext<'a> {
    pub(crate) fn new(
        program: &'a Program,
        group: &KernelGroup,
        k: usize,
        global: &'a BTreeSet<ValueId>,
    ) -> Result<Self, GenerateError> {
        let levels: BTreeSet<u8> = group
            .calls
            .iter()
            .map(|&c| program.calls[c].kind.nesting_level())
            .collect();
        let level = match levels.len() {
            1 => levels.into_iter().next().unwrap_or(1),
            _ => {
                return Err(GenerateError::InvalidPlan(format!(
                    "kernel {k} mixes calls of different nesting levels (scalar, BLAS-1, BLAS-2)"
                )))
            }
        };
        if group.block == 0 || group.block > 1024 || group.serial_iterations == Serial::Iterations(0) {
            return Err(GenerateError::InvalidPlan(format!(
                "kernel {k}: block {} and serial iterations {:?} must be in 1..=1024 and positive",
                group.block, group.serial_iterations
            )));
        }
        if let Serial::Rows(rows) = group.serial_iterations {
            if level != 2 || !group.whole_rows || group.walk != Walk::Rows || !(1..32).contains(&rows) {
                return Err(GenerateError::InvalidPlan(format!(
                    "kernel {k}: blocks of {rows} rows need whole rows walking down, and fewer rows than a tile's 32"
                )));
            }
        }
        if level == 2 && (!group.block.is_multiple_of(32) || !(1..=1024).contains(&group.width)) {
            return Err(GenerateError::InvalidPlan(format!(
                "kernel {k}: a BLAS-2 block needs whole warps and 1..=1024 tiles across, not {} threads and {} tiles",
                group.block, group.width
            )));
        }
        Ok(KernelContext {
            program,
            name: format!("fuse_{}_k{k}", program.name),
            calls: group.calls.clone(),
            level,
            block: group.block,
            width: group.width,
            whole_rows: group.whole_rows,
            serial: group.serial_iterations,
            walk: group.walk,
            global,
        })
    }

    /// The number of serial iterations, as a C expression: the walk covers `extent` (a size
    /// parameter) in steps of `step` when it is whole.
    pub fn iterations(&self, extent: &str, step: &str) -> String {
        match self.serial {
            Serial::Iterations(n) => n.to_string(),
            Serial::Rows(_) => "1".to_string(),
            Serial::Whole => format!("(({extent} + {step} - 1) / ({step}))"),
        }
    }

    /// Iterations per block for the grid (`None`: the whole extent).
    pub fn grid_serial(&self) -> Option<u32> {
        match self.serial {
            Serial::Iterations(n) => Some(n),
            Serial::Rows(_) => Some(1),
            Serial::Whole => None,
        }
    }

    /// Rows each block of a walk down the rows owns (`None`: all).
    pub fn block_rows(&self) -> Option<u64> {
        match self.serial {
            Serial::Iterations(n) => Some(32 * n as u64),
            Serial::Rows(rows) => Some(rows as u64),
            Serial::Whole => None,
        }
    }

    pub fn precision(&self) -> Precision {
        self.program.precision
    }

    /// The C type of elements.
    pub fn ty(&self) -> &'static str {
        match self.precision() {
            Precision::F32 => "float",
            Precision::F64 => "double",
        }
    }

    fn produced_here(&self, v: ValueId) -> bool {
        self.program.values[v].producer.is_some_and(|p| self.calls.contains(&p))
    }

    /// Values read here but computed elsewhere, in id order.
    pub fn loaded(&self) -> Vec<ValueId> {
        let reads: BTreeSet<ValueId> = self.calls.iter().flat_map(|&c| self.program.calls[c].reads()).collect();
        reads.into_iter().filter(|&v| !self.produced_here(v)).collect()
    }

    /// Map results computed here that must reach global memory.
    pub fn stored(&self) -> Vec<ValueId> {
        self.calls
            .iter()
            .map(|&c| &self.program.calls[c])
            .filter(|call| !call.kind.is_reduce() && self.global.contains(&call.result))
            .map(|call| call.result)
            .collect()
    }

    /// Reduction results computed here that reach global memory (by atomics or stores).
    pub fn reduced(&self) -> Vec<ValueId> {
        self.calls
            .iter()
            .map(|&c| &self.program.calls[c])
            .filter(|call| call.kind.is_reduce() && self.global.contains(&call.result))
            .map(|call| call.result)
            .collect()
    }

    /// Whether reduction result `v` of this kernel is accumulated in scratch memory: a norm
    /// whose blocks each see part of the vector (three partial sums, finished by a later
    /// kernel).
    pub fn in_scratch(&self, v: ValueId) -> bool {
        let norm = self.program.values[v]
            .producer
            .is_some_and(|c| expr::is_norm(&self.program.calls[c]));
        // A norm an earlier kernel finished is an ordinary scalar here.
        norm && self.produced_here(v) && self.grid_serial().is_some()
    }

    /// Scalar values read here (loaded once at kernel start).
    pub fn scalars(&self) -> Vec<ValueId> {
        self.loaded()
            .into_iter()
            .filter(|&v| self.program.values[v].shape == Shape::Scalar)
            .collect()
    }

    /// The kernel's parameter list and launch arguments: buffers by value id, then `sizes`.
    pub fn parameters(&self, sizes: &[String]) -> (String, Vec<LaunchArg>) {
        let written: BTreeSet<ValueId> = self.stored().into_iter().chain(self.reduced()).collect();
        let all: BTreeSet<ValueId> = self.loaded().into_iter().chain(written.iter().copied()).collect();
        let mut params = Vec::new();
        let mut args = Vec::new();
        for v in all {
            let qualifier = if written.contains(&v) { "" } else { "const " };
            let (name, arg) = match self.in_scratch(v) {
                true => (scratch_pointer(self.program, v), LaunchArg::Scratch(v)),
                false => (pointer(self.program, v), LaunchArg::Buffer(v)),
            };
            params.push(format!("{qualifier}{}* __restrict__ {name}", self.ty()));
            args.push(arg);
        }
        for s in sizes {
            params.push(format!("const long long {}", size_param(s)));
            args.push(LaunchArg::Size(s.clone()));
        }
        (params.join(", "), args)
    }

    /// The comment naming the calls a kernel fuses.
    pub fn header_comment(&self) -> String {
        let mut s = String::new();
        for &c in &self.calls {
            let _ = writeln!(s, "//   {}", self.program.calls[c].text);
        }
        s
    }

    /// `const T s3 = *p3_alpha;` for every scalar read here, then each scalar call inlined in
    /// the kernel's calls computed from them (`const T i… = (s3 / s5);`).
    pub fn scalar_loads(&self, indent: &str) -> Result<String, GenerateError> {
        let mut s: String = self
            .scalars()
            .into_iter()
            .map(|v| {
                format!(
                    "{indent}const {} {} = *{};\n",
                    self.ty(),
                    expr::scalar_register(v),
                    pointer(self.program, v)
                )
            })
            .collect();
        let args = self.calls.iter().flat_map(|&c| &self.program.calls[c].args);
        let first = &self.program.calls[self.calls[0]];
        s.push_str(&expr::inlined_definitions(args, first, self.precision(), indent)?);
        Ok(s)
    }
}

/// The kernel parameter holding value `v`'s buffer, e.g. `p3_x_1`.
pub(crate) fn pointer(program: &Program, v: ValueId) -> String {
    format!("p{v}_{}", sanitize(&program.values[v].name))
}

/// The kernel parameter holding the scratch memory of reduction result `v`, e.g. `a3_r`.
pub(crate) fn scratch_pointer(program: &Program, v: ValueId) -> String {
    format!("a{v}_{}", sanitize(&program.values[v].name))
}

/// The kernel parameter holding a size.
pub(crate) fn size_param(symbol: &str) -> String {
    format!("size_{}", sanitize(symbol))
}

/// Script names are identifiers plus `.k` for re-assignments; keep only C identifier characters.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The values a call reads as array elements, with the index variables of each use.
pub(crate) fn element_uses(call: &fuse_core::Call) -> Vec<(ValueId, Vec<usize>)> {
    let mut out = Vec::new();
    collect_elements(&call.form.formula.body, call, &mut out);
    out
}

fn collect_elements(e: &fuse_core::formula::Expr, call: &fuse_core::Call, out: &mut Vec<(ValueId, Vec<usize>)>) {
    use fuse_core::formula::Expr;
    match e {
        Expr::Element { param, index } => {
            if let Arg::Value(v) = call.args[*param] {
                out.push((v, index.clone()));
            }
            // Literals and inlined scalar calls are no elements.
        }
        Expr::Number(_) | Expr::Scalar(_) => {}
        Expr::Neg(a) | Expr::Call(_, a) => collect_elements(a, call, out),
        Expr::Binary(_, a, b) => {
            collect_elements(a, call, out);
            collect_elements(b, call, out);
        }
        Expr::Reduce { body, .. } => collect_elements(body, call, out),
    }
}
