//! A plan checked and lowered for the executor: each kernel's space (a vector or a matrix),
//! its calls with their formulas lowered to [`Stage`]s, the values it keeps in tile buffers,
//! and a memory slot for every value that does reach memory.
//!
//! A plan is checked before anything runs, because plans can come from elsewhere than the
//! explorer (a file, a test): every call in exactly one kernel, every value computed before a
//! kernel reads it, no reduction read inside the kernel that computes it (its sum is complete
//! only at the kernel's end, the global barrier) except a row sum read in its own rows (a
//! thread finishes the row sums of a row block before the next pass over it), and one space
//! per kernel.

use std::collections::HashMap;

use fuse_core::explore::implementation::dataflow;
use fuse_core::explore::mapping::{call_diagonals, index_axes, Axis};
use fuse_core::explore::Context;
use fuse_core::formula::{Diagonals, Expr, ReduceOp};
use fuse_core::{Arg, CallId, HigherOrderKind, Plan, Program, Shape, Sizes, ValueId};

use super::error::CpuError;
use super::measured::Prefetch;
use super::stage::{Role, Stage};

/// What a call computes, as the executor runs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// Element by element (BLAS-1 map or nested map): the result of a segment is the stage.
    Map(Stage),
    /// A BLAS-1 reduction to a scalar: `outer(Σ body)` or `outer(‖body‖₂)`; per-thread partial
    /// sums (a norm's three).
    Reduce {
        op: ReduceOp,
        body: Stage,
        outer: Option<Stage>,
    },
    /// A nested reduction along each row (`A·x`): complete once a row block has seen every column.
    RowSums { body: Stage, outer: Option<Stage> },
    /// A nested reduction down each column (`Aᵀ·x`): per-thread partial vectors, added at the
    /// end of the kernel.
    ColumnSums { body: Stage, outer: Option<Stage> },
}

/// One call of a kernel.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallPlan {
    /// The value it defines.
    pub result: ValueId,
    /// What it computes.
    pub op: Op,
    /// The pass over each row block it runs in: 0, or one more than the pass of a row sum of
    /// this kernel that it reads (the row sum is finished between the passes).
    pub pass: usize,
    /// The diagonals of its matrix it reads (a triangle's, or all).
    pub diagonals: Diagonals,
}

/// A row sum and a column sum of one pass, each one product through the rows of the same
/// matrix (BiCGK's `q = A·p` and `s = Aᵀ·r`): they run as one loop, so each element of the
/// matrix is loaded once for both — registers doing for the CPU what on-chip memory does in
/// the GPU kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SharedRows {
    /// The matrix read.
    pub matrix: ValueId,
    /// Position of the row sum among the kernel's calls.
    pub row_sums: usize,
    /// Position of the column sum.
    pub column_sums: usize,
}

impl SharedRows {
    /// Whether call position `c` is one of the pair.
    pub(crate) fn holds(&self, c: usize) -> bool {
        c == self.row_sums || c == self.column_sums
    }

    /// The position the pair runs at: the later of its calls, once both calls' operands are
    /// computed (neither result is read in its own pass).
    pub(crate) fn runs_at(&self) -> usize {
        self.row_sums.max(self.column_sums)
    }
}

/// What a kernel's blocks tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// A vector of this length, in chunks.
    Vector(usize),
    /// A `rows × cols` matrix, in tiles of whole or partial rows.
    Matrix(usize, usize),
}

/// One kernel, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelPlan {
    /// What it tiles.
    pub space: Space,
    /// Its calls, in the order they run on each tile.
    pub calls: Vec<CallPlan>,
    /// Results kept in per-thread tile buffers and never written to memory.
    pub chip: Vec<ValueId>,
    /// Passes over each row block: one more than the highest pass of its calls.
    pub passes: usize,
    /// Row and column sums run together; a call is in at most one pair.
    pub shared_rows: Vec<SharedRows>,
    /// Walks over each tile (see [`walks`]): a tile walked more than once is kept in cache.
    pub walks: usize,
    /// The matrices it walks (reads rows of, or computes), in increasing order.
    pub matrices: Vec<ValueId>,
    /// Whether it walks its rows from the last (see [`set_directions`]).
    pub backward: bool,
    /// Scratch buffers the generic evaluator needs for its deepest stage.
    pub depth: usize,
    /// The values its calls read or compute, in increasing order.
    pub values: Vec<ValueId>,
    /// Its inlined scalar calls, each computed once where the kernel starts and then read as a
    /// scalar value of the id given (past the program's values, increasing), so that the
    /// hand-written loops and the zero rule see a plain scalar factor.
    pub inlined: Vec<(ValueId, Arg)>,
    /// Bytes of memory its calls read and write: `values` but those kept on chip or folded.
    pub bytes: u64,
    /// Results it writes to memory that none of its calls reads: where `bytes` are more than a
    /// share of the last-level cache, they are stored past the caches (see
    /// [`super::loops::Store`]).
    pub streamable: Vec<ValueId>,
}

/// A whole plan, ready to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prepared {
    /// Kernels in launch order.
    pub kernels: Vec<KernelPlan>,
    /// The memory slot of each computed value that reaches memory, by value.
    pub slots: Vec<Option<usize>>,
    /// Elements of each slot.
    pub slot_lens: Vec<usize>,
    /// The row length of each value that is a matrix (1 for the others), by value.
    pub row_lens: Vec<usize>,
    /// Whether walks through a matrix out of cache prefetch each step's next rows in software
    /// (what this CPU's timing table measured; see `Model::prefetch_ahead`, `prefetch_near`).
    pub prefetch: Prefetch,
}

/// Checks `plan` against `program` and lowers it.
pub(crate) fn prepare(program: &Program, sizes: &Sizes, plan: &Plan) -> Result<Prepared, CpuError> {
    let kernel_of = assign_kernels(program, plan)?;
    // Threads walk whole row blocks: row sums can feed later calls of their kernel.
    let ctx = Context::new(program, sizes).with_row_barrier(true);
    let mut kernels = Vec::with_capacity(plan.kernels.len());
    for (k, kernel) in plan.kernels.iter().enumerate() {
        check_reads(&ctx, &kernel_of, k, &kernel.calls)?;
        kernels.push(lower_kernel(&ctx, k, &kernel.calls)?);
    }
    set_directions(&mut kernels);
    // A slot for each result that a kernel computes into memory: not one kept in tile buffers,
    // nor one folded into the calls that read it (GEMVER's `B1`), which is never computed.
    let mut in_memory = vec![false; program.values.len()];
    for kernel in &kernels {
        for call in &kernel.calls {
            in_memory[call.result] = !kernel.chip.contains(&call.result);
        }
    }
    let mut slots = vec![None; program.values.len()];
    let mut slot_lens = Vec::new();
    for (v, value) in program.values.iter().enumerate() {
        if in_memory[v] {
            slots[v] = Some(slot_lens.len());
            let extents = value.shape.extents(sizes).unwrap_or_default();
            slot_lens.push(extents.iter().product::<usize>().max(1));
        }
    }
    let row_lens = program
        .values
        .iter()
        .map(|value| match value.shape.extents(sizes).as_deref() {
            Some([_, cols]) => *cols,
            _ => 1,
        })
        .collect();
    Ok(Prepared {
        kernels,
        slots,
        slot_lens,
        row_lens,
        prefetch: Prefetch::both(true),
    })
}

/// The kernel of each call; every call in exactly one kernel.
fn assign_kernels(program: &Program, plan: &Plan) -> Result<Vec<usize>, CpuError> {
    let mut kernel_of = vec![usize::MAX; program.calls.len()];
    for (k, kernel) in plan.kernels.iter().enumerate() {
        for &c in &kernel.calls {
            let Some(slot) = kernel_of.get_mut(c) else {
                return Err(invalid(format!(
                    "kernel {} names call {c}, but the program has {} calls",
                    k + 1,
                    program.calls.len()
                )));
            };
            if *slot != usize::MAX {
                return Err(invalid(format!(
                    "`{}` is in more than one kernel",
                    program.calls[c].text
                )));
            }
            *slot = k;
        }
    }
    match kernel_of.iter().position(|&k| k == usize::MAX) {
        Some(c) => Err(invalid(format!("`{}` is in no kernel", program.calls[c].text))),
        None => Ok(kernel_of),
    }
}

/// Every value a call of kernel `k` reads is computed by then, and not by a reduction of `k`
/// other than a row sum read in its own rows.
fn check_reads(ctx: &Context, kernel_of: &[usize], k: usize, calls: &[CallId]) -> Result<(), CpuError> {
    let program = ctx.program;
    for (position, &c) in calls.iter().enumerate() {
        let call = &program.calls[c];
        for v in call.reads() {
            let Some(p) = program.values[v].producer else {
                continue;
            };
            let name = &program.values[v].variable;
            let earlier_here = calls[..position].contains(&p);
            if kernel_of[p] > k || (kernel_of[p] == k && !earlier_here) {
                return Err(invalid(format!("`{}` reads `{name}` before it is computed", call.text)));
            }
            if kernel_of[p] == k && program.calls[p].kind.is_reduce() && !ctx.reads_finished_row_sums(p, c) {
                return Err(invalid(format!(
                    "`{}` reads `{name}` in the kernel that reduces it: a reduction is complete only at the kernel's end",
                    call.text
                )));
            }
        }
    }
    Ok(())
}

fn lower_kernel(ctx: &Context, k: usize, calls: &[CallId]) -> Result<KernelPlan, CpuError> {
    let program = ctx.program;
    let mut lowered: Vec<CallPlan> = Vec::with_capacity(calls.len());
    let mut space = None;
    let mut inlined: Vec<(ValueId, Arg)> = Vec::new();
    for &c in calls {
        let args = number_inlined(program, &program.calls[c].args, &mut inlined);
        let (mut call, here) = lower_call(program, &ctx.sizes, c, &args)?;
        call.pass = pass_of(ctx, c, &call.op, &lowered);
        match space {
            Some(s) if s != here => {
                return Err(invalid(format!(
                    "kernel {} mixes {s:?} and {here:?} (`{}`): one kernel tiles one space",
                    k + 1,
                    program.calls[c].text
                )))
            }
            _ => space = Some(here),
        }
        lowered.push(call);
    }
    let mut values: Vec<ValueId> = calls
        .iter()
        .flat_map(|&c| program.calls[c].reads().into_iter().chain([program.calls[c].result]))
        .collect();
    values.sort_unstable();
    values.dedup();
    let flow = dataflow(ctx, calls);
    let chip: Vec<ValueId> = lowered
        .iter()
        .filter(|c| matches!(c.op, Op::Map(_)) && !flow.stores.contains(&c.result))
        .map(|c| c.result)
        .collect();
    let (lowered, chip) = inline_chip_values(lowered, chip);
    let chip: Vec<ValueId> = chip
        .into_iter()
        .filter(|&v| read_in_its_pass(ctx, &lowered, v))
        .collect();
    let depth = lowered
        .iter()
        .flat_map(|c| stages(&c.op))
        .map(|s| s.depth)
        .max()
        .unwrap_or(0);
    let shared_rows = shared_rows(&lowered);
    let space = space.ok_or_else(|| invalid(format!("kernel {} has no calls", k + 1)))?;
    let matrices = match space {
        Space::Matrix(..) => values.iter().copied().filter(|&m| touches(&lowered, m) > 0).collect(),
        Space::Vector(_) => Vec::new(),
    };
    let bytes = memory_bytes(ctx, calls, &lowered, &chip, &values);
    let streamable = streamable(&lowered, &chip);
    Ok(KernelPlan {
        space,
        passes: lowered.iter().map(|c| c.pass + 1).max().unwrap_or(1),
        walks: walks(&lowered, &shared_rows, &values),
        matrices,
        backward: false,
        shared_rows,
        calls: lowered,
        chip,
        depth,
        values,
        inlined,
        bytes,
        streamable,
    })
}

/// `args` with each inlined scalar call replaced by the value id it is computed into where the
/// kernel starts (one id per distinct call, listed in `inlined`).
fn number_inlined(program: &Program, args: &[Arg], inlined: &mut Vec<(ValueId, Arg)>) -> Vec<Arg> {
    let number = |arg: &Arg, inlined: &mut Vec<(ValueId, Arg)>| {
        let id = match inlined.iter().find(|(_, a)| a == arg) {
            Some(&(id, _)) => id,
            None => {
                let id = program.values.len() + inlined.len();
                inlined.push((id, arg.clone()));
                id
            }
        };
        Arg::Value(id)
    };
    args.iter()
        .map(|a| match a {
            Arg::Scalar(_) => number(a, inlined),
            _ => a.clone(),
        })
        .collect()
}

/// Bytes of memory a kernel of `calls` (lowered to `lowered`, with `chip` kept on chip) reads
/// and writes: what it reads from inputs or earlier kernels, and what it computes into memory —
/// not what stays on chip, nor what is folded into the calls that read it.
fn memory_bytes(ctx: &Context, calls: &[CallId], lowered: &[CallPlan], chip: &[ValueId], values: &[ValueId]) -> u64 {
    let program = ctx.program;
    let computed_here = |v: ValueId| calls.iter().any(|&c| program.calls[c].result == v);
    let in_memory = |v: ValueId| !computed_here(v) || lowered.iter().any(|c| c.result == v && !chip.contains(&v));
    let elements = |v: ValueId| {
        let extents = program.values[v].shape.extents(&ctx.sizes).unwrap_or_default();
        extents.iter().product::<usize>() as u64
    };
    let total: u64 = values.iter().copied().filter(|&v| in_memory(v)).map(elements).sum();
    total * program.precision.bytes()
}

/// The results of `lowered` written to memory (maps not kept on chip) that none of its calls
/// reads: a kernel may store them past the caches.
fn streamable(lowered: &[CallPlan], chip: &[ValueId]) -> Vec<ValueId> {
    let read = |v: ValueId| lowered.iter().flat_map(|c| stages(&c.op)).any(|s| s.reads(v));
    lowered
        .iter()
        .filter(|c| matches!(c.op, Op::Map(_)) && !chip.contains(&c.result) && !read(c.result))
        .map(|c| c.result)
        .collect()
}

/// Walks over each tile of a kernel of `calls` over `values`: the most times the tile of one
/// matrix is gone through — read by a call or written by one (a matrix kept on chip, GEMVER's
/// `B`) — a row and column sum run together (BiCGK's) counting once. GESUMMV's two products,
/// each over its own matrix, walk the tile once; ATAX's, over one matrix in two passes, twice.
fn walks(calls: &[CallPlan], shared_rows: &[SharedRows], values: &[ValueId]) -> usize {
    let walks_of = |m| touches(calls, m) - shared_rows.iter().filter(|p| p.matrix == m).count();
    values.iter().map(|&m| walks_of(m)).max().unwrap_or(0).max(1)
}

/// The calls among `calls` (of a kernel over a matrix) that go through the rows of `m`: read
/// them, or compute them (a row sum or column sum computes a vector, not rows).
fn touches(calls: &[CallPlan], m: ValueId) -> usize {
    let computes = |c: &CallPlan| c.result == m && matches!(c.op, Op::Map(_));
    calls
        .iter()
        .filter(|c| computes(c) || stages(&c.op).iter().any(|s| s.reads_rows_of(m)))
        .count()
}

/// Sets which way each kernel walks its rows: the other way from the last kernel before it
/// that walked one of its matrices, so that it starts on the rows that kernel left in the
/// caches (every part on the thread that last walked it, see [`Threads::share_in`]); forward
/// where no kernel before walked them. A matrix larger than the caches is still read from
/// memory but for the rows the last walk left in them (SGEMVT, GEMVER's `w = α·B·x`).
///
/// [`Threads::share_in`]: super::threads::Threads::share_in
fn set_directions(kernels: &mut [KernelPlan]) {
    // The way each matrix was last walked, by the kernel's position.
    let mut last: Vec<(ValueId, usize, bool)> = Vec::new();
    for (k, kernel) in kernels.iter_mut().enumerate() {
        let latest = last
            .iter()
            .filter(|(m, ..)| kernel.matrices.contains(m))
            .max_by_key(|&&(_, at, _)| at);
        kernel.backward = latest.is_some_and(|&(_, _, backward)| !backward);
        last.retain(|(m, ..)| !kernel.matrices.contains(m));
        last.extend(kernel.matrices.iter().map(|&m| (m, k, kernel.backward)));
    }
}

/// Pairs each row sum `Σ_j f·A[i,j]·x[j]` with the first unpaired column sum `Σ_i g·A[i,j]` of
/// its pass over the same `A` (`f`, `g`: scalars and elements fixed along the row).
fn shared_rows(calls: &[CallPlan]) -> Vec<SharedRows> {
    let mut pairs: Vec<SharedRows> = Vec::new();
    for (r, row_call) in calls.iter().enumerate() {
        let Op::RowSums { body, .. } = &row_call.op else {
            continue;
        };
        let Some(matrix) = body.row_product(1) else {
            continue;
        };
        let partner = calls.iter().enumerate().position(|(c, call)| {
            let same = matches!(&call.op, Op::ColumnSums { body, .. } if body.row_product(0) == Some(matrix));
            same && call.pass == row_call.pass
                && call.diagonals == row_call.diagonals
                && !pairs.iter().any(|p| p.holds(c))
        });
        if let Some(column_sums) = partner {
            pairs.push(SharedRows {
                matrix,
                row_sums: r,
                column_sums,
            });
        }
    }
    pairs
}

/// The pass call `c` (doing `op`) runs in, given the calls of its kernel lowered before it: a
/// row sum among them is read in the passes after its own — or in its own by the formula
/// around another row sum (GESUMMV's `y = β·B·x + t`), since a pass finishes its row sums
/// tile by tile in call order.
fn pass_of(ctx: &Context, c: CallId, op: &Op, lowered: &[CallPlan]) -> usize {
    let program = ctx.program;
    program.calls[c]
        .reads()
        .into_iter()
        .filter_map(|v| {
            let earlier = lowered.iter().find(|l| l.result == v)?;
            let row_sum = program.values[v].producer.is_some_and(|p| ctx.is_reduce(p));
            let when_finishing = matches!(op, Op::RowSums { body, .. } if !body.reads(v));
            Some(earlier.pass + usize::from(row_sum && !when_finishing))
        })
        .max()
        .unwrap_or(0)
}

/// Whether every call of the kernel that reads `v` runs in the pass that computes it: a tile
/// buffer holds only the current tile, so a value read in a later pass over the row block must
/// be kept in memory instead.
fn read_in_its_pass(ctx: &Context, lowered: &[CallPlan], v: ValueId) -> bool {
    let pass_of = |value: ValueId| lowered.iter().find(|c| c.result == value).map(|c| c.pass);
    let reads = |c: &&CallPlan| {
        let call = ctx.program.values[c.result].producer.map(|p| &ctx.program.calls[p]);
        call.is_some_and(|call| call.reads().contains(&v))
    };
    lowered.iter().filter(reads).all(|c| Some(c.pass) == pass_of(v))
}

/// Puts the terms of each on-chip map in place of its runs in the maps after it, where that
/// rounds as the calls one by one would ([`Stage::substitute`]), so a chain of maps runs as one
/// pass over its operands (VADD's `x = (w + y) + z` reads three vectors and writes one, with no
/// tile buffer in between). A value no call reads any more is not computed at all; the others
/// stay in tile buffers.
fn inline_chip_values(mut calls: Vec<CallPlan>, chip: Vec<ValueId>) -> (Vec<CallPlan>, Vec<ValueId>) {
    let mut kept = Vec::new();
    for v in chip {
        let Some(p) = calls.iter().position(|c| c.result == v) else {
            continue;
        };
        let producer = match &calls[p].op {
            Op::Map(Stage { terms: Some(t), .. }) => t.clone(),
            _ => {
                kept.push(v);
                continue;
            }
        };
        let mut gone = true;
        for call in &mut calls[p + 1..] {
            // Only a map runs its terms in the order `substitute` keeps rounding-exact.
            gone &= match &mut call.op {
                Op::Map(stage) => stage.substitute(v, &producer),
                op => stages(op).iter().all(|s| !s.reads(v)),
            };
        }
        match gone {
            true => {
                calls.remove(p);
            }
            false => kept.push(v),
        }
    }
    (calls, kept)
}

/// The stages of an op.
pub(crate) fn stages(op: &Op) -> Vec<&Stage> {
    match op {
        Op::Map(s) => vec![s],
        Op::Reduce { body, outer, .. } | Op::RowSums { body, outer } | Op::ColumnSums { body, outer } => {
            std::iter::once(body).chain(outer.as_ref()).collect()
        }
    }
}

/// Lowers call `c` with arguments `args` and says which space it tiles.
fn lower_call(program: &Program, sizes: &Sizes, c: CallId, args: &[Arg]) -> Result<(CallPlan, Space), CpuError> {
    let call = &program.calls[c];
    let unsupported = |what: String| CpuError::Unsupported {
        call: call.text.clone(),
        location: call.location.to_string(),
        what,
    };
    let formula = &call.form.formula;
    let extents = index_extents(program, sizes, c);
    let vars = formula.indices.len();
    let roles = |pairs: &[(usize, Role)]| roles_of(vars, pairs);
    let (op, space) = match call.kind {
        // A stored scalar call: one element, in a kernel of its own.
        HigherOrderKind::Scalar => {
            let body = Stage::lower(&formula.body, args, &[], false, false);
            (Op::Map(body.map_err(unsupported)?), Space::Vector(1))
        }
        HigherOrderKind::Map => {
            let v = formula.result_indices[0];
            let body = Stage::lower(&formula.body, args, &roles(&[(v, Role::Varying)]), false, false);
            (Op::Map(body.map_err(unsupported)?), Space::Vector(extents[v]))
        }
        HigherOrderKind::Reduce => {
            let (op, k, term) = the_reduction(&formula.body).map_err(unsupported)?;
            let body = Stage::lower(term, args, &roles(&[(k, Role::Varying)]), false, false).map_err(unsupported)?;
            let outer = outer_stage(&formula.body, args, &roles(&[]), false).map_err(unsupported)?;
            (Op::Reduce { op, body, outer }, Space::Vector(extents[k]))
        }
        HigherOrderKind::NestedMap | HigherOrderKind::NestedReduce => {
            let axes = index_axes(call);
            let axis = |a: Axis| axes.iter().position(|&x| x == Some(a));
            let (Some(row), Some(col)) = (axis(Axis::Rows), axis(Axis::Columns)) else {
                return Err(unsupported(
                    "a nested function must index a matrix as [row, column]".into(),
                ));
            };
            let tile = roles(&[(row, Role::Fixed), (col, Role::Varying)]);
            let space = Space::Matrix(extents[row], extents[col]);
            if call.kind == HigherOrderKind::NestedMap {
                (
                    Op::Map(Stage::lower(&formula.body, args, &tile, false, false).map_err(unsupported)?),
                    space,
                )
            } else {
                (
                    lower_nested_reduce(&formula.body, args, &tile, (row, col), vars).map_err(unsupported)?,
                    space,
                )
            }
        }
    };
    let plan = CallPlan {
        result: call.result,
        op,
        pass: 0,
        diagonals: call_diagonals(call),
    };
    Ok((plan, space))
}

/// A nested reduction: along rows when it sums over the column index, down columns otherwise.
fn lower_nested_reduce(
    body: &Expr,
    args: &[Arg],
    tile: &[Role],
    (row, col): (usize, usize),
    vars: usize,
) -> Result<Op, String> {
    let roles = |pairs: &[(usize, Role)]| roles_of(vars, pairs);
    let (k, sum) = the_sum(body)?;
    let summands = Stage::lower(sum, args, tile, false, false)?;
    if k == col {
        let outer = outer_stage(body, args, &roles(&[(row, Role::Varying)]), true)?;
        Ok(Op::RowSums { body: summands, outer })
    } else if k == row {
        let outer = outer_stage(body, args, &roles(&[(col, Role::Varying)]), true)?;
        Ok(Op::ColumnSums { body: summands, outer })
    } else {
        Err("a nested reduction must sum over the matrix's row or column index".into())
    }
}

/// Roles of `vars` index variables: `pairs` as given, the others unbound.
fn roles_of(vars: usize, pairs: &[(usize, Role)]) -> Vec<Role> {
    let mut roles = vec![Role::Unbound; vars];
    pairs.iter().for_each(|&(v, role)| roles[v] = role);
    roles
}

/// The stage after the reduction, or `None` when the formula is the bare reduction.
fn outer_stage(body: &Expr, args: &[Arg], roles: &[Role], sum_is_run: bool) -> Result<Option<Stage>, String> {
    match body {
        Expr::Reduce { .. } => Ok(None),
        _ => Stage::lower(body, args, roles, true, sum_is_run).map(Some),
    }
}

/// The one `sum(index, term)` or `norm2(index, term)` of a reduction formula.
fn the_reduction(e: &Expr) -> Result<(ReduceOp, usize, &Expr), String> {
    e.the_reduction()
        .ok_or_else(|| "reductions must contain exactly one, unnested, sum".into())
}

/// The one `sum(index, summand)` of a nested reduction formula (norms are BLAS-1 only).
fn the_sum(e: &Expr) -> Result<(usize, &Expr), String> {
    match the_reduction(e)? {
        (ReduceOp::Sum, index, summand) => Ok((index, summand)),
        (ReduceOp::Norm2, ..) => Err("a norm in a nested reduction".into()),
    }
}

/// The extent of each index variable of call `c`'s formula, from its arguments' shapes.
fn index_extents(program: &Program, sizes: &Sizes, c: CallId) -> Vec<usize> {
    let call = &program.calls[c];
    let mut of_dim: HashMap<&str, usize> = HashMap::new();
    for (param, arg) in call.form.signature.params.iter().zip(&call.args) {
        if let (Arg::Value(v), Shape::Vector(_) | Shape::Matrix(..)) = (arg, &param.shape) {
            let extents = program.values[*v].shape.extents(sizes).unwrap_or_default();
            of_dim.extend(param.shape.dims().into_iter().zip(extents));
        }
    }
    let result = program.values[call.result].shape.extents(sizes).unwrap_or_default();
    for (dim, e) in call.form.signature.result.dims().into_iter().zip(result) {
        of_dim.entry(dim).or_insert(e);
    }
    let formula = &call.form.formula;
    formula
        .indices
        .iter()
        .map(|v| of_dim.get(v.dim.as_str()).copied().unwrap_or(1))
        .collect()
}

fn invalid(message: String) -> CpuError {
    CpuError::InvalidPlan(message)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fused::unfused_plan;
    use fuse_core::testing::sequence;
    use fuse_core::{Kernel, Plan, Precision};

    /// Bundled sequence `name` with its first `calls` calls in one kernel, lowered.
    pub(crate) fn first_calls_in_one_kernel(name: &str, calls: usize) -> KernelPlan {
        let program = sequence(name, Precision::F32);
        let mut plan = unfused_plan(&program, &program.sizes);
        let first = plan.kernels.drain(..calls).flat_map(|k| k.calls).collect();
        plan.kernels.insert(
            0,
            Kernel {
                calls: first,
                ..unfused_plan(&program, &program.sizes).kernels[0].clone()
            },
        );
        prepare(&program, &program.sizes, &plan).unwrap().kernels.swap_remove(0)
    }

    /// The shared-row pairs of `name` with all its calls in one kernel.
    fn pairs_in_one_kernel(name: &str) -> Vec<SharedRows> {
        let calls = sequence(name, Precision::F32).calls.len();
        first_calls_in_one_kernel(name, calls).shared_rows
    }

    /// Unfused, a kernel walks the other way from the last kernel that walked one of its
    /// matrices (GEMVER: `B1` computed forward, read backward into `B`, which the next reads
    /// forward and the last backward); with GEMVER's first three calls in one kernel, the
    /// kernel of `w = α·B·x` after it walks backward.
    #[test]
    fn kernels_walk_a_matrix_the_other_way_from_the_kernel_before() {
        let backward = |plan: &Plan, name| {
            let program = sequence(name, Precision::F32);
            let prepared = prepare(&program, &program.sizes, plan).unwrap();
            prepared.kernels.iter().map(|k| k.backward).collect::<Vec<_>>()
        };
        for (name, want) in [
            ("sgemvt", vec![false, true]),
            ("bicgk", vec![false, true]),
            ("gesummv", vec![false, false]), // A, then B
            ("gemver", vec![false, true, false, true]),
        ] {
            let program = sequence(name, Precision::F32);
            assert_eq!(backward(&unfused_plan(&program, &program.sizes), name), want, "{name}");
        }
        let program = sequence("gemver", Precision::F32);
        let mut fused = unfused_plan(&program, &program.sizes);
        let first = fused.kernels.drain(..3).flat_map(|k| k.calls).collect();
        fused.kernels.insert(
            0,
            Kernel {
                calls: first,
                ..fused.kernels[0].clone()
            },
        );
        assert_eq!(backward(&fused, "gemver"), [false, true]);
    }

    #[test]
    fn bicgk_reads_each_row_once_for_both_sums() {
        let pairs = pairs_in_one_kernel("bicgk");
        assert_eq!(pairs.len(), 1);
        assert_eq!((pairs[0].row_sums, pairs[0].column_sums), (0, 1));
        // ATAX's column sum reads the row sum, so it runs in the next pass: no pair.
        assert!(pairs_in_one_kernel("atax").is_empty());
    }
}
