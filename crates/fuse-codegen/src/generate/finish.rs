//! Finishing kernels: after a reduction's partial sums have all been added (the end of its
//! kernel is the global barrier), apply the rest of its formula, e.g. `a·Σ + b·y[i]` for
//! `sgemv(a, A, x, b, y)`, or combine a norm's three scaled sums for `snrm2`. Bare sums need
//! none.

use std::collections::BTreeSet;
use std::fmt::Write;

use fuse_core::formula::Expr;
use fuse_core::{Call, CallId, Shape, ValueId};

use super::error::GenerateError;
use super::expr::{emit, inlined_definitions, is_bare_sum, scalar_register, unsupported, Registers};
use super::kernel::{pointer, scratch_pointer, size_param, KernelContext};
use super::launch::{Grid, Launch, LaunchArg};

/// Threads per block of BLAS-1 finishing kernels.
const FINISH_BLOCK: u32 = 256;

struct FinishRegisters;

impl Registers for FinishRegisters {
    fn element(&self, value: ValueId, _index: &[usize]) -> String {
        format!("v{value}")
    }
}

/// The finishing kernel of call `c` of kernel `k`, if its formula is more than a sum.
pub(crate) fn generate(k: &KernelContext, c: CallId) -> Result<Option<(String, Launch)>, GenerateError> {
    let call = &k.program.calls[c];
    if !call.kind.is_reduce() || is_bare_sum(call) {
        return Ok(None);
    }
    let (ty, r) = (k.ty(), call.result);
    let name = format!("{}_finish{r}", k.name);
    let length = k.program.values[r].shape.dims().first().map(|d| d.to_string());
    let reads = outside_sum(call);
    if let Some(v) = reads.iter().find(|v| !k.global.contains(v)) {
        let what = format!(
            "`{}` is needed after the reduction but is not in global memory",
            k.program.values[*v].name
        );
        return Err(unsupported(call, &what));
    }
    let mut params = vec![format!("{ty}* __restrict__ {}", pointer(k.program, r))];
    let mut args = vec![LaunchArg::Buffer(r)];
    let out = pointer(k.program, r);
    // The reduction's value: the sum added up in the result's buffer, or a norm's sums.
    let total = match k.in_scratch(r) {
        true => {
            let sums = scratch_pointer(k.program, r);
            params.push(format!("const {ty}* __restrict__ {sums}"));
            args.push(LaunchArg::Scratch(r));
            format!("fuse_norm_value(fuse_norm<{ty}>{{{sums}[0], {sums}[1], {sums}[2]}})")
        }
        false => format!("{out}[i]"),
    };
    for &v in &reads {
        params.push(format!("const {ty}* __restrict__ {}", pointer(k.program, v)));
        args.push(LaunchArg::Buffer(v));
    }
    let bound = match &length {
        Some(len) => {
            params.push(format!("const long long {}", size_param(len)));
            args.push(LaunchArg::Size(len.clone()));
            size_param(len)
        }
        None => "1".to_string(),
    };
    let mut s = String::new();
    let _ = writeln!(s, "\n// Kernel {name} finishes {}", call.text);
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__({FINISH_BLOCK}) {name}({}) {{",
        params.join(", ")
    );
    let _ = writeln!(
        s,
        "    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
    );
    let _ = writeln!(s, "    if (i >= {bound}) return;");
    for &v in &reads {
        let p = pointer(k.program, v);
        match k.program.values[v].shape {
            Shape::Scalar => {
                let _ = writeln!(s, "    const {ty} {} = *{p};", scalar_register(v));
            }
            _ => {
                let _ = writeln!(s, "    const {ty} v{v} = {p}[i];");
            }
        }
    }
    s.push_str(&inlined_definitions(call.args.iter(), call, k.precision(), "    ")?);
    let _ = writeln!(s, "    const {ty} total = {total};");
    let body = emit(
        &call.form.formula.body,
        call,
        k.precision(),
        &FinishRegisters,
        Some("total"),
    )?;
    let _ = writeln!(s, "    {out}[i] = {body};\n}}\nFUSE_EMU_EXPORT({name})");
    let launch = Launch {
        kernel: name,
        grid: Grid::Vector {
            len: length,
            per_block: Some(FINISH_BLOCK),
        },
        block: (FINISH_BLOCK, 1, 1),
        args,
        strips: None,
    };
    Ok(Some((s, launch)))
}

/// Values the formula reads outside its sum, in id order.
fn outside_sum(call: &Call) -> Vec<ValueId> {
    let mut out = BTreeSet::new();
    collect(&call.form.formula.body, call, &mut out);
    out.into_iter().collect()
}

fn collect(e: &Expr, call: &Call, out: &mut BTreeSet<ValueId>) {
    match e {
        Expr::Reduce { .. } | Expr::Number(_) => {}
        Expr::Scalar(p) | Expr::Element { param: p, .. } => {
            let mut reads = Vec::new();
            call.args[*p].collect_reads(&mut reads);
            out.extend(reads);
        }
        Expr::Neg(a) | Expr::Call(_, a) => collect(a, call, out),
        Expr::Binary(_, a, b) => {
            collect(a, call, out);
            collect(b, call, out);
        }
    }
}
