//! BLAS-1 kernels: maps and reductions over vectors, one element per thread per iteration.
//!
//! ```text
//! scalars loaded once; reduction accumulators cleared          (invariant / accumulable)
//! for each serial iteration:
//!     i = (block · serial + iteration) · blockDim + thread
//!     if i < n: load routines, compute routines in call order, store routines
//! partial reductions: block sum, then one atomic per block     (after the loop)
//!     — three for a norm (its scaled sums, into scratch memory) —
//!     or, when one block walks the whole vector, the result stored directly
//! ```

use std::fmt::Write;

use fuse_core::formula::ReduceOp;
use fuse_core::ValueId;

use super::error::GenerateError;
use super::expr::{emit, is_norm, the_reduction, unsupported, Registers};
use super::kernel::{pointer, scratch_pointer, size_param, KernelContext, KernelOutput};
use super::launch::{Grid, Launch};

struct VectorRegisters;

impl Registers for VectorRegisters {
    fn element(&self, value: ValueId, _index: &[usize]) -> String {
        format!("v{value}")
    }
}

/// The kernel's source and launch.
pub(crate) fn generate(k: &KernelContext) -> Result<KernelOutput, GenerateError> {
    let length = vector_length(k)?;
    let ty = k.ty();
    let n = size_param(&length);
    let serial = k.iterations(&n, "(long long)blockDim.x");
    let (params, args) = k.parameters(std::slice::from_ref(&length));
    let mut s = String::new();
    let _ = writeln!(s, "\n// Kernel {} fuses:\n{}", k.name, k.header_comment());
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__({}) {}({params}) {{",
        k.block, k.name
    );
    s.push_str(&k.scalar_loads("    ")?);
    for &r in &k.reduced() {
        let _ = match k.program.values[r]
            .producer
            .is_some_and(|c| is_norm(&k.program.calls[c]))
        {
            true => writeln!(s, "    fuse_norm<{ty}> acc{r} = {{}};"),
            false => writeln!(s, "    {ty} acc{r} = {ty}(0);"),
        };
    }
    let _ = writeln!(s, "    const long long iterations = {serial};");
    let _ = writeln!(
        s,
        "    const long long first = (long long)blockIdx.x * iterations * blockDim.x + threadIdx.x;"
    );
    let _ = writeln!(
        s,
        "    for (long long iteration = 0; iteration < iterations; ++iteration) {{"
    );
    let _ = writeln!(
        s,
        "        const long long i = first + (long long)iteration * blockDim.x;"
    );
    let _ = writeln!(s, "        if (i < {n}) {{");
    for v in k.loaded() {
        if k.program.values[v].shape.rank() == 1 {
            let _ = writeln!(s, "            const {ty} v{v} = {}[i];", pointer(k.program, v));
        }
    }
    for &c in &k.calls {
        let call = &k.program.calls[c];
        let r = call.result;
        if call.kind.is_reduce() {
            let (op, _, term) = the_reduction(call)?;
            let term = emit(term, call, k.precision(), &VectorRegisters, None)?;
            let _ = match op {
                ReduceOp::Sum => writeln!(s, "            acc{r} += {term};  // {}", call.text),
                ReduceOp::Norm2 => writeln!(s, "            fuse_norm_add(acc{r}, {term});  // {}", call.text),
            };
        } else {
            let body = emit(&call.form.formula.body, call, k.precision(), &VectorRegisters, None)?;
            let _ = writeln!(s, "            const {ty} v{r} = {body};  // {}", call.text);
        }
    }
    for v in k.stored() {
        let _ = writeln!(s, "            {}[i] = v{v};", pointer(k.program, v));
    }
    s.push_str("        }\n    }\n");
    // One block sees every element when the walk is whole: its sums are complete.
    let direct = if k.grid_serial().is_none() {
        k.reduced()
    } else {
        Vec::new()
    };
    for &c in &k.calls {
        let call = &k.program.calls[c];
        let (r, p) = (call.result, pointer(k.program, call.result));
        if !call.kind.is_reduce() {
            continue;
        }
        if direct.contains(&r) {
            let value = emit(
                &call.form.formula.body,
                call,
                k.precision(),
                &VectorRegisters,
                Some(&format!("total{r}")),
            )?;
            let total = match is_norm(call) {
                true => format!("fuse_norm_value(fuse_block_norm(acc{r}))"),
                false => format!("fuse_block_sum(acc{r})"),
            };
            let _ = writeln!(s, "    const {ty} total{r} = {total};");
            let _ = writeln!(s, "    if (threadIdx.x == 0) {p}[0] = {value};");
        } else if k.in_scratch(r) {
            let _ = writeln!(
                s,
                "    fuse_block_norm_atomic(acc{r}, {});",
                scratch_pointer(k.program, r)
            );
        } else {
            let _ = writeln!(s, "    fuse_block_sum_atomic(acc{r}, {p});");
        }
    }
    let _ = writeln!(s, "}}\nFUSE_EMU_EXPORT({})", k.name);
    let launch = Launch {
        kernel: k.name.clone(),
        grid: Grid::Vector {
            len: Some(length),
            per_block: k.grid_serial().map(|serial| k.block * serial),
        },
        block: (k.block, 1, 1),
        args,
        strips: None,
    };
    Ok(KernelOutput {
        source: s,
        launch,
        direct,
    })
}

/// The one length all vectors of the kernel share.
fn vector_length(k: &KernelContext) -> Result<String, GenerateError> {
    let mut length: Option<String> = None;
    for &c in &k.calls {
        let call = &k.program.calls[c];
        for v in call.reads().into_iter().chain([call.result]) {
            if let Some(&dim) = k.program.values[v].shape.dims().first() {
                match &length {
                    Some(l) if l != dim => return Err(unsupported(call, "vectors of different lengths in one kernel")),
                    Some(_) => {}
                    None => length = Some(dim.to_string()),
                }
            }
        }
    }
    length.ok_or_else(|| GenerateError::InvalidPlan(format!("kernel {} reads no vector", k.name)))
}
