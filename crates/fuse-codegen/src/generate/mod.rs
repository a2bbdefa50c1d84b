//! Plan → CUDA source (paper §4.3): one kernel per fusion, glued from the library's routines.
//!
//! Input: the program and its kernels (each an ordered group of calls with a block size and a
//! number of serial iterations). Output: a [`Generated`] module — one CUDA source that compiles
//! with NVRTC and under emulation — and the [`Step`]s that run it: zero-fills of reduction
//! outputs, kernel launches, and finishing kernels for reductions whose result is a function
//! of the sum (`a·Σ + b·y`, `sqrt(Σ)`).
//!
//! Invariants of the generated code: every value that leaves its kernel (an output, or read by
//! a later kernel) lives in a global buffer; every other value lives in registers, because all
//! routines of a kernel share one thread-to-data mapping (library/cuda/routines.cuh); partial
//! reductions are finished by atomics into zero-filled buffers, except where one block walks the
//! whole reduced extent ([`Serial::Whole`], the plan's `Finish::Complete`) and stores the result
//! directly. The same input gives the same source, byte for byte.

mod expr;
mod finish;
mod tile;
mod vector;

use std::collections::BTreeSet;
use std::fmt::Write;

use fuse_core::{Arg, CallId, Precision, Program, Shape, Sizes, ValueId};
use serde::Serialize;

/// The library's generic routines, pasted into every generated source.
pub const ROUTINES: &str = include_str!("../../../../library/cuda/routines.cuh");

/// The prelude that gives the helper macros their GPU meaning (see fuse-emulate).
pub const PRELUDE: &str = "// cuda_prelude: helper macros, GPU side (emulation defines them first)
#ifndef FUSE_EMULATION
#define FUSE_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#define FUSE_EMU_EXPORT(kernel)
#endif
";

/// Threads per block of BLAS-1 finishing kernels.
const FINISH_BLOCK: u32 = 256;

/// One kernel to generate: calls in execution order, block size and serial iterations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelGroup {
    /// The calls it fuses, in an order that respects their dependencies.
    pub calls: Vec<CallId>,
    /// Threads per block.
    pub block: u32,
    /// BLAS-2: tiles across a block's strip of columns (32 columns each); 1 for BLAS-1.
    pub width: u32,
    /// BLAS-2: each row spread over the whole block, rows taken one at a time, so a row sum is
    /// complete while its row is in registers and later calls of the kernel may read it.
    pub whole_rows: bool,
    /// Elements (BLAS-1) or tiles (BLAS-2) each thread block processes in sequence.
    pub serial_iterations: Serial,
    /// The direction BLAS-2 blocks walk their serial iterations in.
    pub walk: Walk,
}

/// How many iterations each block runs in sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Serial {
    /// A fixed number; the grid grows with the sizes.
    Iterations(u32),
    /// As many as the extent along the walk needs, with one block along it: reductions along
    /// the walk are then complete in their block and stored directly, with no atomics, zero
    /// fill or finishing kernel — at any size.
    Whole,
}

impl KernelGroup {
    /// The generator's view of one implementation of a fusion (what calibration times).
    pub fn of(imp: &fuse_core::explore::implementation::Implementation) -> Self {
        Self::launching(&imp.order, &imp.launch)
    }

    /// A reduction finished inside its block along the walk (`Finish::Complete`) makes the
    /// block walk the whole extent — except in a whole-row block, whose row sums are complete in
    /// any grid and which walks all rows only where the grid has one block. The instances of a
    /// BLAS-2 block are the tiles across its strip.
    fn launching(calls: &[CallId], launch: &fuse_core::explore::Launch) -> Self {
        use fuse_core::explore::implementation::Finish;
        let block = launch.block;
        let complete = match block.whole_rows {
            true => launch.blocks == 1,
            false => launch.reductions.iter().any(|r| r.finish == Finish::Complete),
        };
        KernelGroup {
            calls: calls.to_vec(),
            block: block.threads,
            width: block.instances,
            whole_rows: block.whole_rows,
            serial_iterations: match complete {
                true => Serial::Whole,
                false => Serial::Iterations(launch.serial_iterations),
            },
            walk: match launch.walk {
                Some(fuse_core::explore::mapping::Axis::Columns) => Walk::Columns,
                _ => Walk::Rows,
            },
        }
    }
}

impl From<&fuse_core::Kernel> for KernelGroup {
    /// The generator's view of a planned kernel.
    fn from(k: &fuse_core::Kernel) -> Self {
        KernelGroup::launching(&k.calls, &k.launch)
    }
}

/// Generates the module of a whole plan.
pub fn generate_plan(program: &Program, plan: &fuse_core::Plan) -> Result<Generated, GenerateError> {
    let kernels: Vec<KernelGroup> = plan.kernels.iter().map(KernelGroup::from).collect();
    generate(program, &kernels)
}

/// The direction a BLAS-2 block's serial iterations walk over the tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Walk {
    /// Down a column of tiles: column sub-vectors are invariant, column sums accumulate.
    #[default]
    Rows,
    /// Along a row of tiles: row sub-vectors are invariant, row sums accumulate.
    Columns,
}

/// Why a plan cannot be turned into CUDA.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenerateError {
    /// A call uses something the generator does not handle.
    #[error("{file}: cannot generate `{call}`: {what}")]
    Unsupported {
        /// The call as written.
        call: String,
        /// Where it is written.
        file: String,
        /// What is not supported.
        what: String,
    },
    /// The kernel groups do not form a valid plan.
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
}

/// How a launch's grid follows from the sizes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grid {
    /// `ceil(len / per_block)` blocks in x (one block when `per_block` is `None`).
    Vector {
        /// Size symbol of the vector length (`None`: one element).
        len: Option<String>,
        /// Elements each block covers (`None`: all).
        per_block: Option<u32>,
    },
    /// Blocks over strips of `columns` columns: walking down rows, `ceil(cols / columns)` ×
    /// `ceil(rows / (32 · serial))` blocks; walking along columns, `ceil(cols / (columns ·
    /// serial))` × `ceil(rows / 32)`. Whole-row blocks need `cols ≤ columns` ([`Grid::check`]).
    Strips {
        /// Size symbol of the rows.
        rows: String,
        /// Size symbol of the columns.
        cols: String,
        /// Columns per strip.
        columns: u32,
        /// Tiles (walking down) or strips (walking along) each block walks (`None`: all, one
        /// block along the walk).
        serial: Option<u32>,
        /// The direction of the walk.
        walk: Walk,
        /// Whole rows per block: the kernel is only correct where one strip covers every column.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        whole_rows: bool,
    },
}

impl Grid {
    /// Why the kernel cannot run at `sizes`, if it cannot: a whole-row kernel was generated
    /// for rows of at most `columns` numbers.
    pub fn check(&self, sizes: &Sizes) -> Result<(), String> {
        match self {
            Grid::Strips {
                cols,
                columns,
                whole_rows: true,
                ..
            } if sizes.get(cols).unwrap_or(1) > *columns as usize => Err(format!(
                "the plan keeps whole rows of at most {columns} columns in registers, but {cols} = {}: explore the plan at these sizes",
                sizes.get(cols).unwrap_or(1)
            )),
            _ => Ok(()),
        }
    }

    /// The grid dimensions under `sizes`.
    pub fn dims(&self, sizes: &Sizes) -> (u32, u32, u32) {
        let get = |s: &str| sizes.get(s).unwrap_or(1) as u64;
        let blocks = |n: u64, per: Option<u64>| per.map_or(1, |per| n.div_ceil(per).clamp(1, u32::MAX as u64) as u32);
        match self {
            Grid::Vector { len, per_block } => {
                let n = len.as_deref().map_or(1, get);
                (blocks(n, per_block.map(u64::from)), 1, 1)
            }
            Grid::Strips {
                rows,
                cols,
                columns,
                serial,
                walk,
                ..
            } => {
                let columns = *columns as u64;
                match walk {
                    Walk::Rows => (
                        blocks(get(cols), Some(columns)),
                        blocks(get(rows), serial.map(|s| 32 * s as u64)),
                        1,
                    ),
                    Walk::Columns => (
                        blocks(get(cols), serial.map(|s| columns * s as u64)),
                        blocks(get(rows), Some(32)),
                        1,
                    ),
                }
            }
        }
    }
}

/// An argument of a launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchArg {
    /// The global buffer of a value.
    Buffer(ValueId),
    /// A size, as a 64-bit integer.
    Size(String),
}

/// A kernel launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Launch {
    /// Kernel name in the source.
    pub kernel: String,
    /// Grid, from the sizes.
    pub grid: Grid,
    /// Threads per block.
    pub block: (u32, u32, u32),
    /// Arguments in order.
    pub args: Vec<LaunchArg>,
    /// What a strip kernel does per matrix row and per strip (`None` for vector kernels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strips: Option<StripWork>,
}

/// The partial-sum traffic of a strip kernel, for counting its atomics and shuffles at given
/// sizes: every row of every block's strip is warp-summed once per row sum; row sums not
/// finished in their block add one atomic per row per block across the columns, column sums
/// one per column per block down the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StripWork {
    /// Numbers of a matrix row each thread holds (one per tile across the strip).
    pub per_thread: u32,
    /// Row sums (each one warp sum per row per block across the columns).
    pub row_sums: u32,
    /// Of those, the ones added to memory with atomics.
    pub row_sum_atomics: u32,
    /// Column sums added to memory with atomics.
    pub column_sum_atomics: u32,
    /// Columns one column-sum atomic adds (4: a float4 atomic on sm_90).
    pub column_atomic_width: u32,
}

/// One step of running a generated plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Fill the buffer of a value with zeros (reduction outputs, before their kernel).
    Zero(ValueId),
    /// Launch a kernel.
    Launch(Launch),
}

/// A generated module: its source, the buffers it needs and the steps that run it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generated {
    /// CUDA C++ source for NVRTC (and the emulator).
    pub source: String,
    /// Values that live in global memory, by id.
    pub buffers: Vec<ValueId>,
    /// What to do, in order.
    pub steps: Vec<Step>,
}

/// Generates the module for `program` split into `kernels`.
pub fn generate(program: &Program, kernels: &[KernelGroup]) -> Result<Generated, GenerateError> {
    check_cover(program, kernels)?;
    let global = global_values(program, kernels);
    let mut source = format!(
        "// Generated by fuse from {} ({}): {} kernel(s).\n{PRELUDE}{ROUTINES}\n",
        program.file,
        program.name,
        kernels.len()
    );
    let mut steps = Vec::new();
    for (k, group) in kernels.iter().enumerate() {
        let kernel = KernelContext::new(program, group, k, &global)?;
        let out = match kernel.level {
            1 => vector::generate(&kernel)?,
            _ => tile::generate(&kernel)?,
        };
        source.push_str(&out.source);
        let atomic: Vec<ValueId> = kernel
            .reduced()
            .into_iter()
            .filter(|r| !out.direct.contains(r))
            .collect();
        steps.extend(atomic.iter().copied().map(Step::Zero));
        steps.push(Step::Launch(out.launch));
        for &c in &kernel.calls {
            if !atomic.contains(&kernel.program.calls[c].result) {
                continue;
            }
            if let Some((text, launch)) = finish::generate(&kernel, c)? {
                source.push_str(&text);
                steps.push(Step::Launch(launch));
            }
        }
    }
    Ok(Generated {
        source,
        buffers: global.into_iter().collect(),
        steps,
    })
}

/// Every call in exactly one kernel, dependencies in earlier kernels or earlier in the same one.
fn check_cover(program: &Program, kernels: &[KernelGroup]) -> Result<(), GenerateError> {
    let mut position = vec![None; program.calls.len()];
    for (k, group) in kernels.iter().enumerate() {
        for (order, &c) in group.calls.iter().enumerate() {
            let slot = position
                .get_mut(c)
                .ok_or_else(|| GenerateError::InvalidPlan(format!("call {c} does not exist")))?;
            if slot.is_some() {
                return Err(GenerateError::InvalidPlan(format!("call {c} is in two kernels")));
            }
            *slot = Some((k, order));
        }
    }
    for (c, call) in program.calls.iter().enumerate() {
        let here =
            position[c].ok_or_else(|| GenerateError::InvalidPlan(format!("call `{}` is in no kernel", call.text)))?;
        for v in call.reads() {
            if let Some(p) = program.values[v].producer {
                let before = position[p].is_some_and(|there| there < here);
                let reduce_in_kernel = position[p].is_some_and(|t| t.0 == here.0 && !kernels[t.0].whole_rows)
                    && program.calls[p].kind.is_reduce();
                if !before || reduce_in_kernel {
                    return Err(GenerateError::InvalidPlan(format!(
                        "`{}` reads `{}` before it is complete",
                        call.text, program.values[v].name
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Values that must live in global memory: inputs, outputs, reduction results, and values read
/// by a kernel other than the one computing them.
fn global_values(program: &Program, kernels: &[KernelGroup]) -> BTreeSet<ValueId> {
    let mut kernel_of = vec![0; program.calls.len()];
    for (k, group) in kernels.iter().enumerate() {
        for &c in &group.calls {
            kernel_of[c] = k;
        }
    }
    let mut global: BTreeSet<ValueId> = program.outputs.iter().copied().collect();
    for (c, call) in program.calls.iter().enumerate() {
        // A whole-row kernel finishes its row sums in registers: only a sum read elsewhere
        // (or an output) needs memory.
        if call.kind.is_reduce() && !kernels[kernel_of[c]].whole_rows {
            global.insert(call.result);
        }
        for v in call.reads() {
            match program.values[v].producer {
                Some(p) if kernel_of[p] == kernel_of[c] => {}
                _ => {
                    global.insert(v);
                }
            }
        }
    }
    global
}

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
    fn new(
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
                    "kernel {k} mixes BLAS-1 and BLAS-2 calls"
                )))
            }
        };
        if group.block == 0 || group.block > 1024 || group.serial_iterations == Serial::Iterations(0) {
            return Err(GenerateError::InvalidPlan(format!(
                "kernel {k}: block {} and serial iterations {:?} must be in 1..=1024 and positive",
                group.block, group.serial_iterations
            )));
        }
        if level == 2 && (group.block % 32 != 0 || !(1..=1024).contains(&group.width)) {
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
            Serial::Whole => format!("(({extent} + {step} - 1) / ({step}))"),
        }
    }

    /// Iterations per block for the grid (`None`: the whole extent).
    pub fn grid_serial(&self) -> Option<u32> {
        match self.serial {
            Serial::Iterations(n) => Some(n),
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
            params.push(format!(
                "{qualifier}{}* __restrict__ {}",
                self.ty(),
                pointer(self.program, v)
            ));
            args.push(LaunchArg::Buffer(v));
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

    /// `const T s3 = *p3_alpha;` for every scalar read here.
    pub fn scalar_loads(&self, indent: &str) -> String {
        self.scalars()
            .into_iter()
            .map(|v| {
                format!(
                    "{indent}const {} {} = *{};\n",
                    self.ty(),
                    expr::scalar_register(v),
                    pointer(self.program, v)
                )
            })
            .collect()
    }
}

/// The kernel parameter holding value `v`'s buffer, e.g. `p3_x_1`.
pub(crate) fn pointer(program: &Program, v: ValueId) -> String {
    format!("p{v}_{}", sanitize(&program.values[v].name))
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
        }
        Expr::Number(_) | Expr::Scalar(_) => {}
        Expr::Neg(a) | Expr::Call(_, a) => collect_elements(a, call, out),
        Expr::Binary(_, a, b) => {
            collect_elements(a, call, out);
            collect_elements(b, call, out);
        }
        Expr::Sum { body, .. } => collect_elements(body, call, out),
    }
}
