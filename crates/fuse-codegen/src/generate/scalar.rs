//! Kernels of stored scalar calls (`kind: scalar` whose result is an output): one thread of one
//! block computes them from scalars already finished and stores them. Scalar calls read by
//! other calls are not here: each kernel that reads one computes it where it starts.

use std::fmt::Write;

use super::error::GenerateError;
use super::expr::{emit, scalar_register, NoElements};
use super::kernel::{pointer, KernelContext, KernelOutput};
use super::launch::{Grid, Launch};

/// The kernel's source and launch.
pub(crate) fn generate(k: &KernelContext) -> Result<KernelOutput, GenerateError> {
    let (params, args) = k.parameters(&[]);
    let mut s = String::new();
    let _ = writeln!(s, "\n// Kernel {} computes:\n{}", k.name, k.header_comment());
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__(1) {}({params}) {{",
        k.name
    );
    s.push_str(&k.scalar_loads("    ")?);
    let stored = k.stored();
    for &c in &k.calls {
        let call = &k.program.calls[c];
        let value = emit(&call.form.formula.body, call, k.precision(), &NoElements, None)?;
        let register = scalar_register(call.result);
        let _ = writeln!(s, "    const {} {register} = {value};", k.ty());
        if stored.contains(&call.result) {
            let _ = writeln!(s, "    *{} = {register};", pointer(k.program, call.result));
        }
    }
    let _ = writeln!(s, "}}\nFUSE_EMU_EXPORT({})", k.name);
    let launch = Launch {
        kernel: k.name.clone(),
        grid: Grid::Vector {
            len: None,
            per_block: None,
        },
        block: (1, 1, 1),
        args,
        strips: None,
    };
    Ok(KernelOutput {
        source: s,
        launch,
        direct: Vec::new(),
    })
}
