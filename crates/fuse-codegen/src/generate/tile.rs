//! BLAS-2 kernels: nested maps and reductions over 32×32 tiles of the matrices.
//!
//! ```text
//! scalars and the sub-vectors along the walk loaded once; accumulators cleared (invariants)
//! for each serial iteration (the next tile down a column of tiles, or along a row of tiles):
//!     sub-vectors across the walk loaded
//!     for each of the thread's 4 rows of the tile:
//!         matrix loads, compute routines in call order, stores, partial sums
//!     partial sums across the walk: one atomic per row or column of the tile
//! partial sums along the walk: one atomic per row or column, after the loop — or, when the
//! block walks the whole extent, the finished result stored directly
//! ```
//! Row sums (gemv-like) use a warp sum, column sums (gemtv-like) a sum over the block's 8
//! thread rows in shared memory.
//! Every routine sees element (row, col) in the same thread, so fused values stay in registers
//! and no barrier is needed between routines (paper §3.2.3); only the column reduction uses
//! shared memory, after the loop.

use std::fmt::Write;

use fuse_core::{Call, Shape, ValueId};

use super::expr::{emit, the_sum, unsupported, Registers};
use super::{element_uses, pointer, size_param, GenerateError, Grid, KernelContext, KernelOutput, Launch, Walk};

/// How a call's index variables map onto the tile: which one walks rows, which columns.
struct TileRegisters {
    row_var: usize,
}

impl Registers for TileRegisters {
    fn element(&self, value: ValueId, index: &[usize]) -> String {
        match index {
            [_, _] => format!("v{value}"),
            [i] if *i == self.row_var => format!("r{value}[k]"),
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
pub(crate) fn generate(k: &KernelContext) -> Result<KernelOutput, GenerateError> {
    let (rows, cols) = matrix_dims(k)?;
    let mut sizes = vec![rows.clone()];
    if cols != rows {
        sizes.push(cols.clone());
    }
    let (m, n) = (size_param(&rows), size_param(&cols));
    let ty = k.ty();
    let down = k.walk == Walk::Rows;
    let u = uses(k)?;
    let (params, args) = k.parameters(&sizes);
    let accumulated = accumulated_reductions(k)?;
    let mut s = String::new();
    let _ = writeln!(s, "\n// Kernel {} fuses:\n{}", k.name, k.header_comment());
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__(FUSE_TILE * FUSE_TILE_ROWS) {}({params}) {{",
        k.name
    );
    s.push_str(&k.scalar_loads("    "));
    // The walk fixes one of the block's coordinates; sub-vectors along it are invariant.
    let (fixed, moving, along, limit) = if down {
        (
            "const long long col = (long long)blockIdx.x * FUSE_TILE + threadIdx.x;",
            "row0",
            &m,
            "blockIdx.y",
        )
    } else {
        (
            "const long long row0 = (long long)blockIdx.y * FUSE_TILE;",
            "col0",
            &n,
            "blockIdx.x",
        )
    };
    let _ = writeln!(s, "    {fixed}");
    let _ = writeln!(
        s,
        "    const long long iterations = {};",
        k.iterations(along, "FUSE_TILE")
    );
    if down {
        let _ = writeln!(s, "    const bool col_ok = col < {n};");
        s.push_str(&column_vector_loads(k, &u, "    "));
    } else {
        s.push_str(&row_vector_loads(k, &u, &m, "    "));
    }
    for &r in &accumulated {
        let _ = writeln!(s, "    {ty} acc{r}[FUSE_TILE / FUSE_TILE_ROWS] = {{}};");
    }
    let _ = writeln!(
        s,
        "    for (long long iteration = 0; iteration < iterations; ++iteration) {{"
    );
    let _ = writeln!(
        s,
        "        const long long {moving} = ({limit} * iterations + iteration) * FUSE_TILE;"
    );
    let _ = writeln!(
        s,
        "        if ({moving} >= {along}) break;  // uniform across the block"
    );
    if down {
        s.push_str(&row_vector_loads(k, &u, &m, "        "));
    } else {
        let _ = writeln!(s, "        const long long col = col0 + threadIdx.x;");
        let _ = writeln!(s, "        const bool col_ok = col < {n};");
        s.push_str(&column_vector_loads(k, &u, "        "));
    }
    let per_tile: Vec<ValueId> = k.reduced().into_iter().filter(|r| !accumulated.contains(r)).collect();
    for &r in &per_tile {
        let _ = writeln!(s, "        {ty} part{r}[FUSE_TILE / FUSE_TILE_ROWS] = {{}};");
    }
    s.push_str("#pragma unroll\n        for (int k = 0; k < FUSE_TILE / FUSE_TILE_ROWS; ++k) {\n");
    let _ = writeln!(
        s,
        "            const long long row = row0 + threadIdx.y + k * FUSE_TILE_ROWS;"
    );
    let _ = writeln!(s, "            const bool ok = row < {m} && col_ok;");
    let at = format!("row * {n} + col");
    for &v in &u.matrices {
        let _ = writeln!(
            s,
            "            const {ty} v{v} = fuse_load({}, {at}, ok);",
            pointer(k.program, v)
        );
    }
    for &c in &k.calls {
        s.push_str(&compute(k, &k.program.calls[c], &accumulated)?);
    }
    for v in k.stored() {
        let _ = writeln!(s, "            fuse_store({}, {at}, ok, v{v});", pointer(k.program, v));
    }
    s.push_str("        }\n");
    for &r in &per_tile {
        s.push_str(&reduction_store(k, r, "part", false, "        ")?);
    }
    s.push_str("    }\n");
    // With a whole walk, one block sees all of a reduction along it: store it directly.
    let direct = if k.grid_serial().is_none() {
        accumulated.clone()
    } else {
        Vec::new()
    };
    for &r in &accumulated {
        s.push_str(&reduction_store(k, r, "acc", direct.contains(&r), "    ")?);
    }
    let _ = writeln!(s, "}}\nFUSE_EMU_EXPORT({})", k.name);
    let grid = Grid::Tiles {
        rows,
        cols,
        serial: k.grid_serial(),
        walk: k.walk,
    };
    let launch = Launch {
        kernel: k.name.clone(),
        grid,
        block: (32, 8, 1),
        args,
    };
    Ok(KernelOutput {
        source: s,
        launch,
        direct,
    })
}

/// Row sub-vectors: each thread's 4 rows, `r{v}[k]`.
fn row_vector_loads(k: &KernelContext, u: &Uses, m: &str, indent: &str) -> String {
    let mut s = String::new();
    for &v in &u.rows_vectors {
        let _ = writeln!(s, "{indent}{} r{v}[FUSE_TILE / FUSE_TILE_ROWS];", k.ty());
        let _ = writeln!(s, "{indent}for (int k = 0; k < FUSE_TILE / FUSE_TILE_ROWS; ++k) {{");
        let _ = writeln!(
            s,
            "{indent}    const long long row = row0 + threadIdx.y + k * FUSE_TILE_ROWS;"
        );
        let _ = writeln!(
            s,
            "{indent}    r{v}[k] = fuse_load({}, row, row < {m});\n{indent}}}",
            pointer(k.program, v)
        );
    }
    s
}

/// Column sub-vectors: the thread's column, `c{v}`.
fn column_vector_loads(k: &KernelContext, u: &Uses, indent: &str) -> String {
    u.column_vectors
        .iter()
        .map(|&v| {
            format!(
                "{indent}const {} c{v} = fuse_load({}, col, col_ok);\n",
                k.ty(),
                pointer(k.program, v)
            )
        })
        .collect()
}

/// Stores reduction `r` from the partial sums `{prefix}{r}[k]`: added to its zero-filled buffer
/// with atomics, or — when `direct`, the block having seen the whole reduced dimension — written
/// with the rest of its formula applied.
fn reduction_store(
    k: &KernelContext,
    r: ValueId,
    prefix: &str,
    direct: bool,
    indent: &str,
) -> Result<String, GenerateError> {
    let call = &k.program.calls[k.program.values[r].producer.expect("reductions are call results")];
    let (ty, p) = (k.ty(), pointer(k.program, r));
    let (m, n) = matrix_dims(k)?;
    let (m, n) = (size_param(&m), size_param(&n));
    let total = format!("total{r}");
    let value = || {
        emit(
            &call.form.formula.body,
            call,
            k.precision(),
            &tile_vars(call)?,
            Some(&total),
        )
    };
    let mut s = String::new();
    if is_column_sum(call)? {
        let _ = writeln!(s, "{indent}{ty} {total} = {ty}(0);");
        let _ = writeln!(
            s,
            "{indent}for (int k = 0; k < FUSE_TILE / FUSE_TILE_ROWS; ++k) {total} += {prefix}{r}[k];"
        );
        if direct {
            let _ = writeln!(s, "{indent}{total} = fuse_column_sum({total});");
            let _ = writeln!(s, "{indent}if (threadIdx.y == 0 && col < {n}) {p}[col] = {};", value()?);
        } else {
            let _ = writeln!(s, "{indent}fuse_column_sum_atomic({total}, {p}, col, col < {n});");
        }
    } else {
        let _ = writeln!(s, "{indent}for (int k = 0; k < FUSE_TILE / FUSE_TILE_ROWS; ++k) {{");
        let _ = writeln!(
            s,
            "{indent}    const long long row = row0 + threadIdx.y + k * FUSE_TILE_ROWS;"
        );
        if direct {
            let _ = writeln!(s, "{indent}    const {ty} {total} = fuse_warp_sum({prefix}{r}[k]);");
            let _ = writeln!(
                s,
                "{indent}    if (threadIdx.x == 0 && row < {m}) {p}[row] = {};",
                value()?
            );
        } else {
            let _ = writeln!(
                s,
                "{indent}    fuse_row_sum_atomic({prefix}{r}[k], {p}, row, row < {m});"
            );
        }
        let _ = writeln!(s, "{indent}}}");
    }
    Ok(s)
}

/// Whether reduce call `call` sums over rows (its result is indexed by column).
fn is_column_sum(call: &Call) -> Result<bool, GenerateError> {
    Ok(the_sum(call)?.0 == tile_vars(call)?.row_var)
}

/// Reductions whose partial sums stay in the same threads along the walk, so they accumulate in
/// registers across iterations and reach memory once: column sums when walking down rows, row
/// sums when walking along columns.
fn accumulated_reductions(k: &KernelContext) -> Result<Vec<ValueId>, GenerateError> {
    let mut out = Vec::new();
    for &c in &k.calls {
        let call = &k.program.calls[c];
        if call.kind.is_reduce() && is_column_sum(call)? == (k.walk == Walk::Rows) {
            out.push(call.result);
        }
    }
    Ok(out)
}

/// The compute routine of one call inside the per-row loop; reductions add their term to the
/// thread's partial sum for this row (`acc` when accumulated along the walk, else `part`).
fn compute(k: &KernelContext, call: &Call, accumulated: &[ValueId]) -> Result<String, GenerateError> {
    let regs = tile_vars(call)?;
    let (ty, r, p) = (k.ty(), call.result, k.precision());
    if !call.kind.is_reduce() {
        let body = emit(&call.form.formula.body, call, p, &regs, None)?;
        return Ok(format!("            const {ty} v{r} = {body};  // {}\n", call.text));
    }
    let term = emit(the_sum(call)?.1, call, p, &regs, None)?;
    let prefix = if accumulated.contains(&r) { "acc" } else { "part" };
    Ok(format!(
        "            if (ok) {prefix}{r}[k] += {term};  // {}\n",
        call.text
    ))
}
