//! BLAS-2 kernels: nested maps and reductions over 32×32 tiles of the matrices.
//!
//! ```text
//! scalars and column sub-vectors loaded once; column accumulators cleared   (invariants)
//! for each serial iteration (the next tile down this block's column of tiles):
//!     for each of the thread's 4 rows of the tile:
//!         row sub-vector and matrix loads, compute routines in call order, stores,
//!         row reductions: warp sum, one atomic per row                   (gemv-like)
//! column reductions: sum over the block's 8 thread rows, one atomic per column (gemtv-like)
//! ```
//! Every routine sees element (row, col) in the same thread, so fused values stay in registers
//! and no barrier is needed between routines (paper §3.2.3); only the column reduction uses
//! shared memory, after the loop.

use std::fmt::Write;

use fuse_core::{Call, Shape, ValueId};

use super::expr::{emit, the_sum, unsupported, Registers};
use super::{element_uses, pointer, size_param, GenerateError, Grid, KernelContext, Launch};

/// How a call's index variables map onto the tile: which one walks rows, which columns.
struct TileRegisters {
    row_var: usize,
}

impl Registers for TileRegisters {
    fn element(&self, value: ValueId, index: &[usize]) -> String {
        match index {
            [_, _] => format!("v{value}"),
            [i] if *i == self.row_var => format!("r{value}"),
            _ => format!("c{value}"),
        }
    }
}

/// The row and column index variables of a nested call: those of its first matrix element.
fn tile_vars(call: &Call) -> Result<TileRegisters, GenerateError> {
    element_uses(call)
        .into_iter()
        .find_map(|(_, index)| match index.as_slice() {
            [row, _] => Some(TileRegisters { row_var: *row }),
            _ => None,
        })
        .ok_or_else(|| unsupported(call, "a nested function must index a matrix"))
}

/// What a kernel's values are, tile-wise.
#[derive(Default)]
struct Uses {
    rows_vectors: Vec<ValueId>,
    column_vectors: Vec<ValueId>,
    matrices: Vec<ValueId>,
}

fn uses(k: &KernelContext) -> Result<Uses, GenerateError> {
    let mut u = Uses::default();
    let loaded = k.loaded();
    for &c in &k.calls {
        let call = &k.program.calls[c];
        let regs = tile_vars(call)?;
        for (v, index) in element_uses(call) {
            if !loaded.contains(&v) {
                continue;
            }
            let list = match index.as_slice() {
                [_, _] => &mut u.matrices,
                [i] if *i == regs.row_var => &mut u.rows_vectors,
                _ => &mut u.column_vectors,
            };
            if !list.contains(&v) {
                list.push(v);
            }
        }
    }
    for list in [&mut u.rows_vectors, &mut u.column_vectors, &mut u.matrices] {
        list.sort_unstable();
    }
    Ok(u)
}

/// The matrix shape all tiles of the kernel walk.
fn matrix_dims(k: &KernelContext) -> Result<(String, String), GenerateError> {
    let mut dims: Option<(String, String)> = None;
    for &c in &k.calls {
        let call = &k.program.calls[c];
        for v in call.reads().into_iter().chain([call.result]) {
            if let Shape::Matrix(m, n) = &k.program.values[v].shape {
                match &dims {
                    Some(d) if (&d.0, &d.1) != (m, n) => {
                        return Err(unsupported(call, "matrices of different shapes in one kernel"))
                    }
                    Some(_) => {}
                    None => dims = Some((m.clone(), n.clone())),
                }
            }
        }
    }
    dims.ok_or_else(|| GenerateError::InvalidPlan(format!("kernel {} reads no matrix", k.name)))
}

/// The kernel's source and launch.
pub(crate) fn generate(k: &KernelContext) -> Result<(String, Launch), GenerateError> {
    let (rows, cols) = matrix_dims(k)?;
    let mut sizes = vec![rows.clone()];
    if cols != rows {
        sizes.push(cols.clone());
    }
    let (m, n) = (size_param(&rows), size_param(&cols));
    let ty = k.ty();
    let u = uses(k)?;
    let (params, args) = k.parameters(&sizes);
    let mut s = String::new();
    let _ = writeln!(s, "\n// Kernel {} fuses:\n{}", k.name, k.header_comment());
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__(FUSE_TILE * FUSE_TILE_ROWS) {}({params}) {{",
        k.name
    );
    s.push_str(&k.scalar_loads("    "));
    let _ = writeln!(
        s,
        "    const long long col = (long long)blockIdx.x * FUSE_TILE + threadIdx.x;"
    );
    let _ = writeln!(s, "    const bool col_ok = col < {n};");
    for &v in &u.column_vectors {
        let _ = writeln!(
            s,
            "    const {ty} c{v} = fuse_load({}, col, col_ok);",
            pointer(k.program, v)
        );
    }
    let column_reductions = column_reductions(k)?;
    for &r in &column_reductions {
        let _ = writeln!(s, "    {ty} acc{r} = {ty}(0);");
    }
    let _ = writeln!(
        s,
        "    for (int iteration = 0; iteration < {}; ++iteration) {{",
        k.serial
    );
    let _ = writeln!(
        s,
        "        const long long row0 = ((long long)blockIdx.y * {} + iteration) * FUSE_TILE;",
        k.serial
    );
    let _ = writeln!(s, "        if (row0 >= {m}) break;  // uniform across the block");
    s.push_str("#pragma unroll\n        for (int k = 0; k < FUSE_TILE / FUSE_TILE_ROWS; ++k) {\n");
    let _ = writeln!(
        s,
        "            const long long row = row0 + threadIdx.y + k * FUSE_TILE_ROWS;"
    );
    let _ = writeln!(s, "            const bool row_ok = row < {m};");
    s.push_str("            const bool ok = row_ok && col_ok;\n");
    let at = format!("row * {n} + col");
    for &v in &u.rows_vectors {
        let _ = writeln!(
            s,
            "            const {ty} r{v} = fuse_load({}, row, row_ok);",
            pointer(k.program, v)
        );
    }
    for &v in &u.matrices {
        let _ = writeln!(
            s,
            "            const {ty} v{v} = fuse_load({}, {at}, ok);",
            pointer(k.program, v)
        );
    }
    for &c in &k.calls {
        s.push_str(&compute(k, &k.program.calls[c])?);
    }
    for v in k.stored() {
        let _ = writeln!(s, "            fuse_store({}, {at}, ok, v{v});", pointer(k.program, v));
    }
    s.push_str("        }\n    }\n");
    for &r in &column_reductions {
        let _ = writeln!(
            s,
            "    fuse_column_sum_atomic(acc{r}, {}, col, col_ok);",
            pointer(k.program, r)
        );
    }
    let _ = writeln!(s, "}}\nFUSE_EMU_EXPORT({})", k.name);
    let grid = Grid::Tiles {
        rows,
        cols,
        serial: k.serial,
    };
    let launch = Launch {
        kernel: k.name.clone(),
        grid,
        block: (32, 8, 1),
        args,
    };
    Ok((s, launch))
}

/// Reductions summing over rows (their result is indexed by column), accumulated in a register
/// across all tiles of the block's column.
fn column_reductions(k: &KernelContext) -> Result<Vec<ValueId>, GenerateError> {
    let mut out = Vec::new();
    for &c in &k.calls {
        let call = &k.program.calls[c];
        if call.kind.is_reduce() && the_sum(call)?.0 == tile_vars(call)?.row_var {
            out.push(call.result);
        }
    }
    Ok(out)
}

/// The compute routine of one call inside the per-row loop.
fn compute(k: &KernelContext, call: &Call) -> Result<String, GenerateError> {
    let regs = tile_vars(call)?;
    let (ty, r, p) = (k.ty(), call.result, k.precision());
    if !call.kind.is_reduce() {
        let body = emit(&call.form.formula.body, call, p, &regs, None)?;
        return Ok(format!("            const {ty} v{r} = {body};  // {}\n", call.text));
    }
    let (sum_var, term) = the_sum(call)?;
    let term = emit(term, call, p, &regs, None)?;
    Ok(if sum_var == regs.row_var {
        format!("            if (ok) acc{r} += {term};  // {}\n", call.text)
    } else {
        format!(
            "            fuse_row_sum_atomic(ok ? {term} : {ty}(0), {}, row, row_ok);  // {}\n",
            pointer(k.program, r),
            call.text
        )
    })
}
