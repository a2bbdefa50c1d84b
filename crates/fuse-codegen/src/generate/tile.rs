//! BLAS-2 kernels: nested maps and reductions over strips of whole matrix rows.
//!
//! A block of `T` threads (`T/32` warps) covers strips of `32·w` columns (`w` tiles across, the
//! plan's `Block::instances`); lane `l` holds columns `(g·32 + l)·V + e` of a row — `w/V` groups
//! of `V` consecutive elements, each moved by one 16-byte access where aligned
//! (library/cuda/routines.cuh). Warps take the rows of a strip in turn. Two walks:
//!
//! ```text
//! Walk::Rows — a block owns one strip, 32·serial rows (or all) high:
//!     column sub-vectors loaded once; column sums accumulated in registers
//!     for each row of the warp: matrix loads (w/V in flight), computes, stores;
//!                               row sums: one warp sum, one atomic per row per strip
//!     column sums: added across warps in shared memory once, one atomic (or store) per column
//!
//! Walk::Columns — a block owns 32 rows and walks `serial` strips (or all) along them:
//!     row sub-vectors loaded once; row sums accumulated in registers across strips
//!     for each strip: column sub-vectors loaded; for each of the warp's rows: as above;
//!                     column sums across warps, one atomic per column per strip
//!     row sums: one warp sum per row, one atomic (or store, when the walk is whole)
//! ```
//! Every routine sees element (row, col) in the same thread, so fused values stay in registers
//! and the only barriers are those of the column-sum exchange (paper §3.2.3).

use std::fmt::Write;

use fuse_core::explore::mapping::{
    call_diagonals, index_axes, Axis, StripLayout, ROWS_PER_STRIP_BLOCK, STATIC_SHARED_LIMIT,
};
use fuse_core::formula::Diagonals;
use fuse_core::{Arg, Call, Shape, ValueId};

use super::error::GenerateError;
use super::expr::{emit, the_sum, unsupported, Registers};
use super::group::Walk;
use super::kernel::{element_uses, pointer, size_param, KernelContext, KernelOutput};
use super::launch::{Grid, Launch, StripWork};

mod band;
use band::Tiles;

/// How a call's index variables map onto a strip: which one indexes rows.
struct StripRegisters {
    row_var: usize,
    /// `[k]` where row sub-vectors are held per row of the warp (the walk along columns).
    row_index: &'static str,
}

impl Registers for StripRegisters {
    fn element(&self, value: ValueId, index: &[usize]) -> String {
        match index {
            [_, _] => format!("v{value}[g].e[e]"),
            [i] if *i == self.row_var => format!("r{value}{}", self.row_index),
            _ => format!("c{value}[g].e[e]"),
        }
    }
}

/// Registers of values read after a reduction is complete, by the thread that stores one
/// column of it: column sub-vectors come from memory (another lane holds them in registers).
struct ColumnFinishRegisters<'a> {
    k: &'a KernelContext<'a>,
    row_var: usize,
}

impl Registers for ColumnFinishRegisters<'_> {
    fn element(&self, value: ValueId, index: &[usize]) -> String {
        match index {
            [i] if *i != self.row_var => format!("{}[col]", pointer(self.k.program, value)),
            _ => format!("v{value}"),
        }
    }
}

/// The row index variable of a nested call: the first of its first matrix element, or of its
/// result where it reads no matrix (an outer product).
fn row_var(call: &Call) -> Result<usize, GenerateError> {
    index_axes(call)
        .iter()
        .position(|&a| a == Some(Axis::Rows))
        .ok_or_else(|| unsupported(call, "a nested function must index a matrix"))
}

/// What a kernel's loaded values are, strip-wise.
#[derive(Default)]
struct Uses {
    row_vectors: Vec<ValueId>,
    column_vectors: Vec<ValueId>,
    matrices: Vec<ValueId>,
}

fn uses(k: &KernelContext) -> Result<Uses, GenerateError> {
    let mut u = Uses::default();
    let loaded = k.loaded();
    for &c in &k.calls {
        let call = &k.program.calls[c];
        let rows = row_var(call)?;
        for (v, index) in element_uses(call) {
            if !loaded.contains(&v) {
                continue;
            }
            let list = match index.as_slice() {
                [_, _] => &mut u.matrices,
                [i] if *i == rows => &mut u.row_vectors,
                _ => &mut u.column_vectors,
            };
            if !list.contains(&v) {
                list.push(v);
            }
        }
    }
    for list in [&mut u.row_vectors, &mut u.column_vectors, &mut u.matrices] {
        list.sort_unstable();
    }
    Ok(u)
}

/// The matrix shape all strips of the kernel cover.
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

/// Whether reduce call `call` sums over rows (its result is indexed by column).
fn is_column_sum(call: &Call) -> Result<bool, GenerateError> {
    Ok(the_sum(call)?.0 == row_var(call)?)
}

/// The kernel being generated, with its sizes and layout resolved.
struct Strips<'a> {
    k: &'a KernelContext<'a>,
    layout: StripLayout,
    /// Size parameters of rows and columns.
    m: String,
    n: String,
    uses: Uses,
    row_sums: Vec<ValueId>,
    column_sums: Vec<ValueId>,
    /// The walk along columns keeps row values per row of the warp: `[k]`.
    row_index: &'static str,
    /// Whether triangular sums test each element's diagonal (off in rows whose part of the
    /// strip lies wholly inside the triangle).
    tested: std::cell::Cell<bool>,
    /// A whole-row block on a band: its rows in tiles, each thread's vectors inside the band
    /// loaded and summed as on a full matrix, the ragged columns beside its edges one element
    /// at a time.
    tiles: Option<Tiles>,
}

impl<'a> Strips<'a> {
    fn new(k: &'a KernelContext<'a>, rows: &str, cols: &str) -> Result<Self, GenerateError> {
        let layout = match k.whole_rows {
            true => StripLayout::whole_rows(k.block, k.width, k.precision()),
            false => StripLayout::new(k.block, k.width, k.precision()),
        };
        if k.whole_rows && k.walk == Walk::Columns {
            return Err(GenerateError::InvalidPlan(format!(
                "kernel {}: whole-row blocks walk down the rows",
                k.name
            )));
        }
        let (mut row_sums, mut column_sums) = (Vec::new(), Vec::new());
        for &c in &k.calls {
            let call = &k.program.calls[c];
            if call.kind.is_reduce() {
                match is_column_sum(call)? {
                    true => column_sums.push(call.result),
                    false => row_sums.push(call.result),
                }
            }
        }
        let shared = layout.shared_bytes(!column_sums.is_empty(), !row_sums.is_empty(), k.precision());
        if shared > STATIC_SHARED_LIMIT {
            return Err(GenerateError::InvalidPlan(format!(
                "kernel {}: {} warps × {} columns do not fit the column-sum exchange in {} KiB of shared memory",
                k.name,
                layout.warps,
                layout.columns(),
                STATIC_SHARED_LIMIT / 1024
            )));
        }
        let tiles = match k.whole_rows {
            true => Tiles::new(k, &layout),
            false => None,
        };
        Ok(Strips {
            k,
            layout,
            m: size_param(rows),
            n: size_param(cols),
            uses: uses(k)?,
            row_sums,
            column_sums,
            row_index: match k.walk {
                Walk::Rows => "",
                Walk::Columns => "[k]",
            },
            tested: std::cell::Cell::new(true),
            tiles,
        })
    }

    fn registers(&self, call: &Call) -> Result<StripRegisters, GenerateError> {
        Ok(StripRegisters {
            row_var: row_var(call)?,
            row_index: self.row_index,
        })
    }

    fn vec(&self) -> String {
        format!("fuse_vec<{}, kVector>", self.k.ty())
    }

    /// `c{v}[g]` for every column sub-vector, loaded for the strip at `col0`, `checked` (a C++
    /// constant) or not.
    fn column_vector_loads(&self, checked: &str, indent: &str) -> String {
        let mut s = String::new();
        for &v in &self.uses.column_vectors {
            let _ = writeln!(s, "{indent}{} c{v}[kGroups];", self.vec());
            let _ = writeln!(
                s,
                "{indent}#pragma unroll\n{indent}for (int g = 0; g < kGroups; ++g) c{v}[g] = {};",
                self.column_vector_load(v, checked)
            );
        }
        s
    }

    /// The load of group g of column sub-vector `v` for the strip at `col0`, bounds-checked as
    /// `checked` (a C++ boolean) says.
    fn column_vector_load(&self, v: ValueId, checked: &str) -> String {
        format!(
            "fuse_load_vec<{}, kVector, {checked}>({}, col0 + (g * kRowThreads + rt) * kVector, {})",
            self.k.ty(),
            pointer(self.k.program, v),
            self.n
        )
    }

    /// Clears the column-sum accumulators `acc{r}[g]`.
    fn column_sum_clear(&self, indent: &str) -> String {
        self.column_sums
            .iter()
            .map(|r| format!("{indent}{} acc{r}[kGroups] = {{}};\n", self.vec()))
            .collect()
    }

    /// `{into}[g]` loaded for every matrix v (`{v}` in `into` standing for its number), from
    /// the row starting at element `at`: only the vectors with bit g in mask `live` where given
    /// (the others are never read). A whole row's loads are at immediate offsets from the
    /// thread's first element, `start{v}`, kept in a register (`fuse_in_register` in
    /// routines.cuh), which took a third of the instructions out of its loop; a strip's, whose
    /// loops that did not shorten, index the row.
    fn matrix_loads(&self, into: &str, at: &str, live: Option<&str>, indent: &str) -> String {
        let (ty, n) = (self.k.ty(), &self.n);
        let only = live.map_or(String::new(), |live| format!("if (({live} >> g) & 1u) "));
        let mut s = String::new();
        for &v in &self.uses.matrices {
            let (from, col, n) = match self.k.whole_rows {
                true => {
                    let _ = writeln!(
                        s,
                        "{indent}const {ty}* const start{v} = fuse_in_register({} + {at} + col0 + rt * kVector);",
                        pointer(self.k.program, v)
                    );
                    (
                        format!("start{v}"),
                        "g * kRowThreads * kVector",
                        format!("{n} - col0 - rt * kVector"),
                    )
                }
                false => (
                    format!("{} + {at}", pointer(self.k.program, v)),
                    "col0 + (g * kRowThreads + rt) * kVector",
                    n.clone(),
                ),
            };
            let _ = writeln!(
                s,
                "{indent}#pragma unroll\n{indent}for (int g = 0; g < kGroups; ++g) {only}{}[g] = fuse_load_vec<{ty}, kVector, kChecked>({from}, {col}, {n});",
                into.replace("{v}", &v.to_string()),
            );
        }
        s
    }

    /// The registers of the map results of one row.
    fn map_registers(&self, indent: &str) -> String {
        let k = self.k;
        let mut s = String::new();
        for &c in &k.calls {
            let call = &k.program.calls[c];
            if !call.kind.is_reduce() {
                let _ = writeln!(s, "{indent}{} v{}[kGroups];", self.vec(), call.result);
            }
        }
        s
    }

    /// The compute routines of `calls` for every element of the thread's part of the row. Row
    /// sums add to `part{r}{row_index}`, column sums to `acc{r}[g]`. On a band, then those of
    /// the tile's ragged columns.
    fn row_compute(&self, calls: &[fuse_core::CallId], indent: &str) -> Result<String, GenerateError> {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{indent}#pragma unroll\n{indent}for (int g = 0; g < kGroups; ++g) {{"
        );
        let _ = writeln!(
            s,
            "{indent}    #pragma unroll\n{indent}    for (int e = 0; e < kVector; ++e) {{"
        );
        // `ok`, where a call tests it (on a band's tiles, only a term that is no product).
        let program = self.k.program;
        let mut tests_ok = self.tiles.is_none();
        for &c in calls.iter().filter(|&&c| program.calls[c].kind.is_reduce()) {
            tests_ok |= self.element_tests(&program.calls[c])?.iter().any(|t| t == "ok");
        }
        if tests_ok {
            let _ = writeln!(
                s,
                "{indent}        const bool ok = !kChecked || col0 + (g * kRowThreads + rt) * kVector + e < {};",
                self.n
            );
        }
        let inner = format!("{indent}        ");
        for &c in calls {
            s.push_str(&self.compute(&self.k.program.calls[c], &inner)?);
        }
        let _ = writeln!(s, "{indent}    }}\n{indent}}}");
        if self.tiles.is_some() {
            s.push_str(&self.ragged_compute(calls, indent)?);
        }
        Ok(s)
    }

    /// Stores of the map results of one row.
    fn row_stores(&self, indent: &str) -> String {
        let (k, ty) = (self.k, self.k.ty());
        let mut s = String::new();
        for v in k.stored() {
            let _ = writeln!(
                s,
                "{indent}#pragma unroll\n{indent}for (int g = 0; g < kGroups; ++g) fuse_store_vec<{ty}, kVector, kChecked>({} + at, col0 + (g * kRowThreads + rt) * kVector, {}, v{v}[g]);",
                pointer(k.program, v),
                self.n
            );
        }
        s
    }

    /// The work of one whole row: the calls run in phases, a phase ending before a call that
    /// reads one of its row sums element by element (a call reading one only in its finishing
    /// formula, as GESUMMV's `y = B·x + t`, stays in the phase). A phase's row sums are summed
    /// across the block while the row is in registers, all through one exchange, each formula
    /// applied into `r{r}` and, where the sum is global, stored.
    fn whole_row_body(&self, indent: &str) -> Result<String, GenerateError> {
        let k = self.k;
        let mut s = self.map_registers(indent);
        let mut phase: Vec<fuse_core::CallId> = Vec::new();
        for &c in &k.calls {
            let call = &k.program.calls[c];
            if phase
                .iter()
                .any(|&p| reads_per_element(call, k.program.calls[p].result))
            {
                s.push_str(&self.phase(&phase, indent)?);
                phase.clear();
            }
            phase.push(c);
        }
        s.push_str(&self.phase(&phase, indent)?);
        s.push_str(&self.row_stores(indent));
        Ok(s)
    }

    /// One phase of a whole row: the compute routines of `calls`, then their row sums finished.
    fn phase(&self, calls: &[fuse_core::CallId], indent: &str) -> Result<String, GenerateError> {
        let (k, ty) = (self.k, self.k.ty());
        let mut s = self.row_compute(calls, indent)?;
        let sums: Vec<ValueId> = (calls.iter())
            .map(|&c| k.program.calls[c].result)
            .filter(|r| self.row_sums.contains(r))
            .collect();
        let Some(&first) = sums.first() else {
            return Ok(s);
        };
        let parts: Vec<String> = sums.iter().map(|r| format!("part{r}")).collect();
        let _ = writeln!(
            s,
            "{indent}const fuse_vec<{ty}, {n}> sums{first} = fuse_block_sums<kWarps>(fuse_vec<{ty}, {n}>{{{{{}}}}}, turn);",
            parts.join(", "),
            n = sums.len(),
        );
        for (i, &r) in sums.iter().enumerate() {
            let call = self.producer(r);
            let total = format!("sums{first}.e[{i}]");
            let value = emit(
                &call.form.formula.body,
                call,
                k.precision(),
                &self.registers(call)?,
                Some(&total),
            )?;
            let _ = writeln!(s, "{indent}const {ty} r{r} = {value};");
            if k.global.contains(&r) {
                let _ = writeln!(
                    s,
                    "{indent}if (threadIdx.x == 0) {}[row] = r{r};",
                    pointer(k.program, r)
                );
            }
        }
        Ok(s)
    }

    /// The compute routine of one call for element (g, e); reductions add their term to the
    /// thread's partial sum.
    fn compute(&self, call: &Call, indent: &str) -> Result<String, GenerateError> {
        let regs = self.registers(call)?;
        let (r, p) = (call.result, self.k.precision());
        if !call.kind.is_reduce() {
            let body = emit(&call.form.formula.body, call, p, &regs, None)?;
            return Ok(format!("{indent}v{r}[g].e[e] = {body};  // {}\n", call.text));
        }
        let term = emit(the_sum(call)?.1, call, p, &regs, None)?;
        let target = match self.column_sums.contains(&r) {
            true => format!("acc{r}[g].e[e]"),
            false => format!("part{r}{}", self.row_index),
        };
        let tests = self.element_tests(call)?;
        Ok(match tests.is_empty() {
            true => format!("{indent}{target} += {term};  // {}\n", call.text),
            false => format!(
                "{indent}if ({}) {target} += {term};  // {}\n",
                tests.join(" && "),
                call.text
            ),
        })
    }

    /// The tests element (g, e) passes before reduction `call` sums it: inside the row (`ok`)
    /// and, on a triangle, inside the call's band, the other triangle's numbers loaded with the
    /// strip but never summed. A band's tiles read the vectors outside the steady ones, and the
    /// elements past the row's end, as zeros: a product by the matrix element needs no test (its
    /// term is zero, or NaN by an infinite x or row value, which [`Strips::tile_loop`] keeps
    /// out once a tile), any other term the steady bit.
    fn element_tests(&self, call: &Call) -> Result<Vec<String>, GenerateError> {
        let mut tests = vec!["ok".to_string()];
        if self.tiles.is_some() {
            if the_sum(call)?.1.has_matrix_factor() {
                return Ok(Vec::new());
            }
            tests.push("((tile.steady >> g) & 1u)".to_string());
            return Ok(tests);
        }
        if self.tested.get() {
            tests.extend(inside_band(
                call_diagonals(call),
                "col0 + (g * kRowThreads + rt) * kVector + e - row",
            ));
        }
        Ok(tests)
    }

    /// [`kernel_band`] of this kernel.
    fn band(&self) -> Diagonals {
        kernel_band(self.k)
    }

    /// The band inside every call's band: where the sums may skip their diagonal tests. The
    /// kernel's band, their union, is only where some call reads (`strmtv_upper` reads a
    /// diagonal `strmtv_upper_unit` must not sum).
    fn common_band(&self) -> Diagonals {
        calls_band(self.k, Diagonals::intersection)
    }

    /// Row sums of one row: a warp sum, then one atomic — or, when `direct`, the finished
    /// value stored — by lane 0, where `inside` holds (`None`: always). All lanes of the warp
    /// must run it.
    fn row_sum_stores(&self, direct: bool, inside: Option<&str>, indent: &str) -> Result<String, GenerateError> {
        let lane0 = match inside {
            Some(condition) => format!("lane == 0 && {condition}"),
            None => "lane == 0".to_string(),
        };
        let mut s = String::new();
        for &r in &self.row_sums {
            let call = self.producer(r);
            let p = pointer(self.k.program, r);
            let total = format!("total{r}");
            let _ = writeln!(
                s,
                "{indent}const {} {total} = fuse_warp_sum(part{r}{});",
                self.k.ty(),
                self.row_index
            );
            if direct {
                let value = emit(
                    &call.form.formula.body,
                    call,
                    self.k.precision(),
                    &self.registers(call)?,
                    Some(&total),
                )?;
                let _ = writeln!(s, "{indent}if ({lane0}) {p}[row] = {value};");
            } else {
                let _ = writeln!(s, "{indent}if ({lane0}) atomicAdd({p} + row, {total});");
            }
        }
        Ok(s)
    }

    /// Column sums of the strip at `col0`: each warp's partials go to shared memory, then each
    /// thread adds up `V` consecutive columns across warps and adds them to memory with one
    /// vector atomic — or, when `direct`, stores the finished values. All threads of the block
    /// must run it.
    fn column_sum_stores(&self, direct: bool, indent: &str) -> Result<String, GenerateError> {
        let (k, ty) = (self.k, self.k.ty());
        let mut s = String::new();
        if self.column_sums.is_empty() {
            return Ok(s);
        }
        if k.whole_rows {
            return self.owned_column_stores(direct, indent);
        }
        let _ = writeln!(s, "{indent}__shared__ {ty} exchange[kWarps * kColumns];");
        for &r in &self.column_sums {
            let call = self.producer(r);
            let p = pointer(k.program, r);
            let _ = writeln!(s, "{indent}#pragma unroll\n{indent}for (int g = 0; g < kGroups; ++g)");
            let _ = writeln!(
                s,
                "{indent}    #pragma unroll\n{indent}    for (int e = 0; e < kVector; ++e)"
            );
            let _ = writeln!(
                s,
                "{indent}        exchange[warp * kColumns + (g * kVector + e) * 32 + lane] = acc{r}[g].e[e];"
            );
            let _ = writeln!(s, "{indent}__syncthreads();");
            // Thread q adds up the V consecutive columns of group q / 32, lane q % 32.
            let _ = writeln!(
                s,
                "{indent}for (int q = threadIdx.x; q < kColumns / kVector; q += blockDim.x) {{"
            );
            let _ = writeln!(s, "{indent}    {} total{r} = {{}};", self.vec());
            let _ = writeln!(
                s,
                "{indent}    #pragma unroll\n{indent}    for (int e = 0; e < kVector; ++e)"
            );
            let _ = writeln!(s, "{indent}        for (int w = 0; w < kWarps; ++w)");
            let _ = writeln!(
                s,
                "{indent}            total{r}.e[e] += exchange[w * kColumns + ((q / 32) * kVector + e) * 32 + q % 32];"
            );
            let _ = writeln!(s, "{indent}    const long long col_g = col0 + q * kVector;");
            if direct {
                let regs = ColumnFinishRegisters {
                    k,
                    row_var: row_var(call)?,
                };
                let total = format!("total{r}.e[e]");
                let value = emit(&call.form.formula.body, call, k.precision(), &regs, Some(&total))?;
                let _ = writeln!(
                    s,
                    "{indent}    #pragma unroll\n{indent}    for (int e = 0; e < kVector; ++e) {{"
                );
                let _ = writeln!(s, "{indent}        const long long col = col_g + e;");
                let _ = writeln!(s, "{indent}        if (col < {}) {p}[col] = {value};", self.n);
                let _ = writeln!(s, "{indent}    }}");
            } else {
                let _ = writeln!(
                    s,
                    "{indent}    fuse_atomic_add_vec<{ty}, kVector>({p}, col_g, {}, total{r});",
                    self.n
                );
            }
            let _ = writeln!(s, "{indent}}}");
            let _ = writeln!(s, "{indent}__syncthreads();  // the exchange is reused");
        }
        Ok(s)
    }

    /// Column sums of a whole-row block: each column belongs to one thread, which adds its
    /// `V` totals to memory with one vector atomic — or, when `direct`, stores the finished
    /// values.
    fn owned_column_stores(&self, direct: bool, indent: &str) -> Result<String, GenerateError> {
        let (k, ty) = (self.k, self.k.ty());
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{indent}#pragma unroll\n{indent}for (int g = 0; g < kGroups; ++g) {{"
        );
        let _ = writeln!(
            s,
            "{indent}    const long long col_g = col0 + (g * kRowThreads + rt) * kVector;"
        );
        for &r in &self.column_sums {
            let call = self.producer(r);
            let p = pointer(k.program, r);
            if direct {
                let value = emit(
                    &call.form.formula.body,
                    call,
                    k.precision(),
                    &self.registers(call)?,
                    Some(&format!("acc{r}[g].e[e]")),
                )?;
                let _ = writeln!(
                    s,
                    "{indent}    #pragma unroll\n{indent}    for (int e = 0; e < kVector; ++e)"
                );
                let _ = writeln!(
                    s,
                    "{indent}        if (col_g + e < {}) {p}[col_g + e] = {value};",
                    self.n
                );
            } else {
                let _ = writeln!(
                    s,
                    "{indent}    fuse_atomic_add_vec<{ty}, kVector>({p}, col_g, {}, acc{r}[g]);",
                    self.n
                );
            }
        }
        let _ = writeln!(s, "{indent}}}");
        Ok(s)
    }

    fn producer(&self, r: ValueId) -> &'a Call {
        let k = self.k;
        &k.program.calls[k.program.values[r].producer.expect("reductions are call results")]
    }

    /// The walk down the rows of one strip.
    fn walk_rows(&self) -> Result<String, GenerateError> {
        let (k, m, ty) = (self.k, &self.m, self.k.ty());
        let mut s = String::new();
        let _ = writeln!(s, "    const long long col0 = (long long)blockIdx.x * kColumns;");
        let _ = writeln!(
            s,
            "    const long long height = {};",
            match k.block_rows() {
                Some(rows) => format!("{rows}LL"),
                None => m.clone(),
            }
        );
        let _ = writeln!(s, "    const long long first_row = (long long)blockIdx.y * height;");
        let _ = writeln!(
            s,
            "    long long row_end = first_row + height < {m} ? first_row + height : {m};"
        );
        // Rows whose part of the strip lies wholly outside the kernel's triangle are not
        // walked: above a lower one's first diagonal, below an upper one's last (the first row
        // kept a multiple of 32, as the blocks' own first rows are). A whole-row block walks
        // them all: it stores each row's finished value, an empty sum's too (`x[i] + 0`).
        let band = match k.whole_rows {
            true => Diagonals::default(),
            false => self.band(),
        };
        if let Some(from) = band.from {
            let _ = writeln!(
                s,
                "    if (col0 + kColumns - ({from}LL) < row_end) row_end = col0 + kColumns - ({from}LL);"
            );
        }
        let _ = match band.to {
            Some(to) => writeln!(
                s,
                "    const long long lowest = (col0 - ({to}LL)) / 32 * 32;\n    const long long row0 = lowest > first_row ? lowest : first_row;"
            ),
            None => writeln!(s, "    const long long row0 = first_row;"),
        };
        // Once per block, before the loop: checked.
        s.push_str(&self.column_vector_loads("true", "    "));
        s.push_str(&self.column_sum_clear("    "));
        // A band's tiles load no vector past the row's end (none is steady): a row of any
        // multiple of the vector takes the interior body.
        let within = match self.tiles {
            Some(_) => None,
            None => Some("col0 + kColumns <= "),
        };
        s.push_str(&self.interior(within, "    "));
        if k.whole_rows {
            let _ = writeln!(s, "    int turn = 0;  // calls of fuse_block_sums");
        }
        let mut row = String::new();
        if k.whole_rows {
            for &v in &self.uses.row_vectors {
                let _ = writeln!(row, "            const {ty} r{v} = {}[row];", pointer(k.program, v));
            }
        }
        for &r in &self.row_sums {
            let _ = writeln!(row, "            {ty} part{r} = {ty}(0);");
        }
        if k.whole_rows {
            row.push_str(&self.whole_row_body("            ")?);
            s.push_str(&both_bodies(&self.prefetching_row_loop(&row), "    "));
        } else {
            let body = |tested: bool| -> Result<String, GenerateError> {
                self.tested.set(tested);
                let mut body = row.clone();
                body.push_str(&self.map_registers("            "));
                body.push_str(&self.row_compute(&k.calls, "            ")?);
                body.push_str(&self.row_stores("            "));
                body.push_str(&self.row_sum_stores(false, None, "            ")?);
                self.tested.set(true);
                Ok(both_bodies(&self.strip_row_loop(&body), "    "))
            };
            match band.is_full() {
                true => s.push_str(&body(true)?),
                false => s.push_str(&self.band_row_loops(self.common_band(), &body(true)?, &body(false)?)),
            }
        }
        s.push_str(&self.column_sum_stores(k.grid_serial().is_none(), "    ")?);
        Ok(s)
    }

    /// The walk down the rows of a strip crossing the kernel's band: the rows whose part of the
    /// strip lies wholly inside `band` — every call's ([`Self::common_band`]) — (from a multiple
    /// of 32 to a multiple of 32) by `inside`, whose sums test no diagonal, the rows before and
    /// after by `tested`; each loop walks its own rows (`row0 .. row_end` shadowed).
    fn band_row_loops(&self, band: Diagonals, tested: &str, inside: &str) -> String {
        let mut s = String::new();
        // Inside: column − row ≥ from for the strip's first column, ≤ to for its last.
        let lo = match band.to {
            Some(to) => format!("(col0 + kColumns - 1 - ({to}LL))"),
            None => "row0".to_string(),
        };
        let hi = match band.from {
            Some(from) => format!("(col0 - ({from}LL) + 1)"),
            None => "row_end".to_string(),
        };
        let _ = writeln!(s, "    long long inside_lo = {lo} > row0 ? {lo} : row0;");
        let _ = writeln!(
            s,
            "    inside_lo = inside_lo < row_end ? (inside_lo + 31) / 32 * 32 : row_end;"
        );
        let _ = writeln!(s, "    inside_lo = inside_lo < row_end ? inside_lo : row_end;");
        let _ = writeln!(
            s,
            "    long long inside_hi = {hi} < row_end ? ({hi}) / 32 * 32 : row_end;"
        );
        let _ = writeln!(s, "    inside_hi = inside_hi > inside_lo ? inside_hi : inside_lo;");
        let _ = writeln!(
            s,
            "    {{
    const long long row_end_all = row_end;"
        );
        let _ = writeln!(s, "    {{  // rows before the triangle's inside: tested");
        let _ = writeln!(
            s,
            "    const long long row_end = inside_lo;
{tested}    }}"
        );
        let _ = writeln!(s, "    {{  // rows wholly inside it: untested");
        let _ = writeln!(
            s,
            "    const long long row0 = inside_lo, row_end = inside_hi;
{inside}    }}"
        );
        let _ = writeln!(s, "    {{  // rows after: tested");
        let _ = writeln!(
            s,
            "    const long long row0 = inside_hi, row_end = row_end_all;
{tested}    }}
    }}"
        );
        s
    }

    /// The walk down a strip's rows with `row` (the work of row `row` on its matrix values
    /// `v{v}` at element `at` and its row values `r{v}`) as its body: a row a trip, or
    /// `rows_per_trip` consecutive rows a trip for each warp, every row's loads issued before any
    /// is used (ptxas keeps a row's loads behind the previous row's atomic) and their row values
    /// loaded 16 bytes at a time where they fill such loads; the last rows one at a time.
    fn strip_row_loop(&self, row: &str) -> String {
        let (k, vec, n, per_trip) = (self.k, self.vec(), &self.n, self.rows_per_trip());
        let row_values = |index: &dyn Fn(ValueId) -> String| -> String {
            (self.uses.row_vectors.iter())
                .map(|&v| format!("            const {} r{v} = {};\n", k.ty(), index(v)))
                .collect()
        };
        let at_row = |v: ValueId| format!("{}[row]", pointer(k.program, v));
        let mut one_at_a_time =
            String::from("        #pragma unroll 1\n        for (; row < row_end; row += kRowsAtOnce) {\n");
        let _ = writeln!(one_at_a_time, "            const long long at = row * {n};");
        for &v in &self.uses.matrices {
            let _ = writeln!(one_at_a_time, "            {vec} v{v}[kGroups];");
        }
        one_at_a_time.push_str(&self.matrix_loads("v{v}", "at", None, "            "));
        one_at_a_time.push_str(&row_values(&at_row));
        one_at_a_time.push_str(row);
        one_at_a_time.push_str("        }\n");
        if per_trip == 1 {
            return format!("        long long row = row0 + row_slot;\n{one_at_a_time}");
        }
        // A warp's rows of a trip start at a multiple of per_trip: 16-byte aligned where they fill one.
        let mut s =
            format!("        constexpr int kTrip = {per_trip};\n        long long row = row0 + row_slot * kTrip;\n");
        s.push_str("        #pragma unroll 1\n        for (; row - row_slot * kTrip + kTrip * kRowsAtOnce <= row_end; row += kTrip * kRowsAtOnce) {\n");
        for &v in &self.uses.matrices {
            let _ = writeln!(s, "            {vec} rows{v}[kTrip][kGroups];");
        }
        s.push_str("            #pragma unroll\n            for (int u = 0; u < kTrip; ++u) {\n");
        s.push_str(&self.matrix_loads("rows{v}[u]", &format!("(row + u) * {n}"), None, "                "));
        s.push_str("            }\n");
        let in_vectors = self.row_values_in_vectors();
        if in_vectors {
            for &v in &self.uses.row_vectors {
                let _ = writeln!(
                    s,
                    "            {vec} values{v}[kTrip / kVector];\n            #pragma unroll\n            for (int q = 0; q < kTrip / kVector; ++q) values{v}[q] = fuse_load_vec<{}, kVector, kChecked>({}, row + q * kVector, {});",
                    k.ty(),
                    pointer(k.program, v),
                    self.m
                );
            }
        }
        s.push_str("            const long long first = row;\n            #pragma unroll\n            for (int u = 0; u < kTrip; ++u) {\n");
        let _ = writeln!(s, "            const long long row = first + u, at = row * {n};");
        let _ = writeln!(s, "            {}", self.aliases("v", "rows{v}[u]"));
        s.push_str(&match in_vectors {
            true => row_values(&|v| format!("values{v}[u / kVector].e[u % kVector]")),
            false => row_values(&at_row),
        });
        s.push_str(row);
        s.push_str(
            "            }\n        }\n        row += row_slot - row_slot * kTrip;  // the rows left, one at a time\n",
        );
        s.push_str(&one_at_a_time);
        s
    }

    /// Whether a strip walk's trips load their rows' row values 16 bytes at a time: a warp's
    /// rows of a trip fill whole vectors.
    fn row_values_in_vectors(&self) -> bool {
        let (layout, bytes) = (self.layout, self.k.precision().bytes() as u32);
        let per_trip = self.rows_per_trip();
        !self.k.whole_rows
            && self.k.walk == Walk::Rows
            && per_trip > 1
            && layout.vector * bytes == 16
            && per_trip.is_multiple_of(layout.vector)
    }

    /// The walk down a block's whole rows with `row` (the work of row `row` on its matrix values
    /// `v{v}`) as its body: the next row's loads, into `next{v}`, are issued before this row's
    /// block sums, so a row stays in flight across their barrier (the probes' register
    /// prefetch). A trip is two rows, the buffers' roles swapped by references in the second,
    /// so no registers are copied. On a band the walk goes tile by tile ([`Tiles`]), a row's
    /// ragged elements travelling with its vectors (`ragged{v}`, `next_ragged{v}`).
    fn prefetching_row_loop(&self, row: &str) -> String {
        let (vec, n) = (self.vec(), &self.n);
        // Whether a row is left, one after it, none: on a band `rel` counts the tile's `rows`.
        let (more, next, done) = match self.tiles {
            Some(_) => ("rel < rows", "rel + kRowsAtOnce < rows", "rel >= rows"),
            None => ("row < row_end", "row + kRowsAtOnce < row_end", "row >= row_end"),
        };
        let rel = self.tiles.as_ref().map(|_| "rel + kRowsAtOnce");
        let mut step = String::from("            const long long at = row * ");
        let _ = writeln!(step, "{n};");
        let _ = writeln!(step, "            if ({next}) {{");
        step.push_str(&self.row_loads(
            ("next{v}", "next_ragged{v}"),
            &format!("at + kRowsAtOnce * {n}"),
            rel,
            "                ",
        ));
        step.push_str("            }\n");
        step.push_str(row);
        step.push_str("            row += kRowsAtOnce;\n");
        if self.tiles.is_some() {
            step.push_str("            rel += kRowsAtOnce;\n");
        }
        // `this` and `other`: the buffers' names, `a` or `b`.
        let half = |this: &str, other: &str| {
            let mut names = vec![
                self.aliases("v", &format!("{this}{{v}}")),
                self.aliases("next", &format!("{other}{{v}}")),
            ];
            if self.tiles.is_some() {
                names.push(self.ragged_aliases("ragged", &format!("ragged_{this}{{v}}")));
                names.push(self.ragged_aliases("next_ragged", &format!("ragged_{other}{{v}}")));
            }
            format!("        {{\n            {}\n{step}        }}\n", names.join(" "))
        };
        let mut s = String::from("        long long row = row0 + row_slot;\n");
        // On a band, vectors outside the steady ones read as zeros.
        let zeros = match self.tiles {
            Some(_) => " = {}",
            None => "",
        };
        for &v in &self.uses.matrices {
            let _ = writeln!(s, "        {vec} a{v}[kGroups]{zeros}, b{v}[kGroups]{zeros};");
        }
        // The first row's loads: the block's, or on a band each tile's, inside its loop.
        let indent = match self.tiles {
            Some(_) => "                ",
            None => "            ",
        };
        let first = self.row_loads(("a{v}", "ragged_a{v}"), &format!("row * {n}"), None, indent);
        let trips = format!(
            "        #pragma unroll 1\n        while ({more}) {{\n{}        if ({done}) break;\n{}        }}\n",
            half("a", "b"),
            half("b", "a")
        );
        match &self.tiles {
            Some(tiles) => s.push_str(&self.tile_loop(tiles, &first, &trips)),
            None => {
                let _ = write!(s, "        if (row < row_end) {{\n{first}        }}\n{trips}");
            }
        }
        s
    }

    /// The loads of one row at element `at` into `{vectors}[g]` for every matrix (`{v}` standing
    /// for its number) — on a band, of the row `rel` rows into its tile (the first where
    /// `None`): its steady vectors, and its ragged elements into `{ragged}[s]`.
    fn row_loads(&self, (vectors, ragged): (&str, &str), at: &str, rel: Option<&str>, indent: &str) -> String {
        let mut s = String::new();
        if self.tiles.is_some() {
            // Copied here, ptxas sets the loads' predicates from it at once (R2P), not one by one.
            let _ = writeln!(s, "{indent}const unsigned steady = fuse_in_register(tile.steady);");
        }
        s.push_str(&self.matrix_loads(vectors, at, self.tiles.as_ref().map(|_| "steady"), indent));
        if let Some(tiles) = &self.tiles {
            s.push_str(&self.ragged_loads(tiles, ragged, rel, indent));
        }
        s
    }

    /// `{name}{v}` declared for every matrix v as another name of the registers `of` (`{v}` in
    /// it standing for the matrix's number): a loop body written once for `v{v}` works on
    /// whichever buffer or row of a trip the names point to, with no copy.
    fn aliases(&self, name: &str, of: &str) -> String {
        let vec = self.vec();
        (self.uses.matrices.iter())
            .map(|v| format!("{vec} (&{name}{v})[kGroups] = {};", of.replace("{v}", &v.to_string())))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Rows one trip of the hot loop works on ([`StripLayout::rows_per_trip`]).
    fn rows_per_trip(&self) -> u32 {
        self.layout.rows_per_trip(match self.k.walk {
            Walk::Rows => Axis::Rows,
            Walk::Columns => Axis::Columns,
        })
    }

    /// `interior`: whether every vector access of the block's strip is inside its row and
    /// 16-byte aligned — the strip `{within}` the row length (where given), rows a multiple of
    /// the vector, and every matrix and column vector it moves aligned. The same for the whole
    /// block, so it selects the loop body once.
    fn interior(&self, within: Option<&str>, indent: &str) -> String {
        let k = self.k;
        let row_vectors = match self.row_values_in_vectors() {
            true => self.uses.row_vectors.as_slice(),
            false => &[],
        };
        let aligned = (self.uses.matrices.iter().copied())
            .chain(self.uses.column_vectors.iter().copied())
            .chain(row_vectors.iter().copied())
            .chain(k.stored())
            .map(|v| format!(" && fuse_aligned({})", pointer(k.program, v)))
            .collect::<String>();
        let n = &self.n;
        let within = within.map_or(String::new(), |within| format!("{within}{n} && "));
        format!("{indent}const bool interior = {within}{n} % kVector == 0{aligned};\n")
    }

    /// The walk of 32 rows along their strips.
    fn walk_columns(&self) -> Result<String, GenerateError> {
        let (k, m, n, ty) = (self.k, &self.m, &self.n, self.k.ty());
        let mut s = String::new();
        let _ = writeln!(
            s,
            "    constexpr int kRows = ({ROWS_PER_STRIP_BLOCK} + kWarps - 1) / kWarps;"
        );
        let _ = writeln!(
            s,
            "    const long long row_first = (long long)blockIdx.y * {ROWS_PER_STRIP_BLOCK} + warp;"
        );
        for &v in &self.uses.row_vectors {
            let _ = writeln!(s, "    {ty} r{v}[kRows];");
            let _ = writeln!(s, "    #pragma unroll\n    for (int k = 0; k < kRows; ++k) {{");
            let _ = writeln!(s, "        const long long row = row_first + k * kWarps;");
            let _ = writeln!(
                s,
                "        r{v}[k] = row < {m} && k * kWarps + warp < {ROWS_PER_STRIP_BLOCK} ? {}[row] : {ty}(0);",
                pointer(k.program, v)
            );
            s.push_str("    }\n");
        }
        for &r in &self.row_sums {
            let _ = writeln!(s, "    {ty} part{r}[kRows] = {{}};");
        }
        let _ = writeln!(
            s,
            "    const long long strips = {};",
            k.iterations(n, "(long long)kColumns")
        );
        s.push_str(&self.interior(Some("((long long)blockIdx.x + 1) * strips * kColumns <= "), "    "));
        let band = self.band();
        let block_row = format!("(long long)blockIdx.y * {ROWS_PER_STRIP_BLOCK}");
        let walk = |tested: bool| -> Result<String, GenerateError> {
            self.tested.set(tested);
            let strips = self.strip_loop(&block_row, band);
            self.tested.set(true);
            strips.map(|strips| both_bodies(&strips, "    "))
        };
        match band.is_full() {
            true => {
                let _ = writeln!(s, "    const long long strip_begin = 0, strip_end = strips;");
                s.push_str(&walk(true)?);
            }
            false => s.push_str(&self.band_strip_loops(&block_row, self.common_band(), &walk(true)?, &walk(false)?)),
        }
        let _ = writeln!(s, "    #pragma unroll\n    for (int k = 0; k < kRows; ++k) {{");
        let _ = writeln!(s, "        const long long row = row_first + k * kWarps;");
        let inside = format!("row < {m} && k * kWarps + warp < {ROWS_PER_STRIP_BLOCK}");
        s.push_str(&self.row_sum_stores(k.grid_serial().is_none(), Some(&inside), "        ")?);
        s.push_str("    }\n");
        Ok(s)
    }

    /// The walk along strips `strip_begin .. strip_end` of the block's 32 rows from `block_row`.
    fn strip_loop(&self, block_row: &str, band: Diagonals) -> Result<String, GenerateError> {
        let (k, m, n) = (self.k, &self.m, &self.n);
        let mut strips = String::new();
        let _ = writeln!(
            strips,
            "        for (long long strip = strip_begin; strip < strip_end; ++strip) {{"
        );
        let _ = writeln!(
            strips,
            "            const long long col0 = ((long long)blockIdx.x * strips + strip) * kColumns;"
        );
        let _ = writeln!(
            strips,
            "            if (col0 >= {n}) break;  // uniform across the block"
        );
        // Strips wholly outside the kernel's triangle for the block's rows are skipped.
        if let Some(from) = band.from {
            let _ = writeln!(
                strips,
                "            if (col0 + kColumns <= {block_row} + ({from}LL)) continue;"
            );
        }
        if let Some(to) = band.to {
            let _ = writeln!(
                strips,
                "            if (col0 > {block_row} + {} + ({to}LL)) break;",
                ROWS_PER_STRIP_BLOCK - 1
            );
        }
        strips.push_str(&self.column_vector_loads("kChecked", "            "));
        strips.push_str(&self.column_sum_clear("            "));
        // Unrolled, so that the per-row arrays stay in registers; the test is uniform per warp.
        // Every row's loads are issued before any is used: ptxas does not move a row's loads
        // above the previous row's test.
        let vec = self.vec();
        for &v in &self.uses.matrices {
            let _ = writeln!(strips, "            {vec} rows{v}[kRows][kGroups];");
        }
        let each_row = format!(
            "            #pragma unroll\n            for (int k = 0; k < kRows; ++k) {{\n                const long long row = row_first + k * kWarps;\n                if (row < {m} && k * kWarps + warp < {ROWS_PER_STRIP_BLOCK}) {{\n"
        );
        strips.push_str(&each_row);
        strips.push_str(&self.matrix_loads("rows{v}[k]", &format!("row * {n}"), None, "                    "));
        strips.push_str("                }\n            }\n");
        strips.push_str(&each_row);
        let _ = writeln!(strips, "                    const long long at = row * {n};");
        let _ = writeln!(strips, "                    {}", self.aliases("v", "rows{v}[k]"));
        strips.push_str(&self.map_registers("                    "));
        strips.push_str(&self.row_compute(&k.calls, "                    ")?);
        strips.push_str(&self.row_stores("                    "));
        strips.push_str("                }\n            }\n");
        strips.push_str(&self.column_sum_stores(false, "            ")?);
        strips.push_str("        }\n");
        Ok(strips)
    }

    /// The walk along the strips of a block's rows crossing the kernel's band: the strips
    /// wholly inside `band` — every call's ([`Self::common_band`]) — for all the block's rows by
    /// `inside`, whose sums test no diagonal, the strips before and after by `tested`.
    fn band_strip_loops(&self, block_row: &str, band: Diagonals, tested: &str, inside: &str) -> String {
        let mut s = String::new();
        let last = ROWS_PER_STRIP_BLOCK - 1;
        // Floor division of possibly negative column offsets by the strip width.
        let _ = writeln!(
            s,
            "    const auto strip_floor = [](long long a) {{ return a >= 0 ? a / kColumns : -((-a + kColumns - 1) / kColumns); }};"
        );
        let _ = writeln!(s, "    const long long base = (long long)blockIdx.x * strips;");
        let _ = writeln!(s, "    long long inside_lo = 0, inside_hi = strips;");
        if let Some(from) = band.from {
            // col0 ≥ last row + from: strips from ⌈(last + from) / kColumns⌉.
            let _ = writeln!(
                s,
                "    {{ const long long at = -strip_floor(-({block_row} + {last} + ({from}LL))) - base; if (at > inside_lo) inside_lo = at; }}"
            );
        }
        if let Some(to) = band.to {
            // col0 + kColumns − 1 ≤ first row + to: strips before ⌊(first + to + 1) / kColumns⌋.
            let _ = writeln!(
                s,
                "    {{ const long long at = strip_floor({block_row} + ({to}LL) + 1) - base; if (at < inside_hi) inside_hi = at; }}"
            );
        }
        let _ = writeln!(s, "    inside_lo = inside_lo < strips ? inside_lo : strips;");
        let _ = writeln!(s, "    inside_hi = inside_hi > inside_lo ? inside_hi : inside_lo;");
        let _ = writeln!(s, "    {{  // strips before the triangle's inside: tested");
        let _ = writeln!(
            s,
            "    const long long strip_begin = 0, strip_end = inside_lo;\n{tested}    }}"
        );
        let _ = writeln!(s, "    {{  // strips wholly inside it: untested");
        let _ = writeln!(
            s,
            "    const long long strip_begin = inside_lo, strip_end = inside_hi;\n{inside}    }}"
        );
        let _ = writeln!(s, "    {{  // strips after: tested");
        let _ = writeln!(
            s,
            "    const long long strip_begin = inside_hi, strip_end = strips;\n{tested}    }}"
        );
        s
    }
}

/// The tests that `diagonal` (a C++ expression of an element's column − row) lies in `band`.
fn inside_band(band: Diagonals, diagonal: &str) -> Vec<String> {
    [(band.from, ">="), (band.to, "<=")]
        .into_iter()
        .filter_map(|(d, op)| d.map(|d| format!("{diagonal} {op} {d}")))
        .collect()
}

/// The band of diagonals every call of kernel `k` stays in (all, unless each reads a triangle).
fn kernel_band(k: &KernelContext) -> Diagonals {
    calls_band(k, Diagonals::union)
}

/// The bands of kernel `k`'s calls, combined by `combine` (their union or intersection).
fn calls_band(k: &KernelContext, combine: fn(Diagonals, Diagonals) -> Diagonals) -> Diagonals {
    (k.calls.iter())
        .map(|&c| call_diagonals(&k.program.calls[c]))
        .reduce(combine)
        .unwrap_or_default()
}

/// Whether `call` reads `value` element by element — anywhere in a map, inside the sum of a
/// reduction — rather than only in the formula that finishes its sum.
fn reads_per_element(call: &Call, value: ValueId) -> bool {
    let body = &call.form.formula.body;
    let term = body.the_reduction().map_or(body, |(_, _, term)| term);
    (call.args.iter().enumerate()).any(|(p, arg)| *arg == Arg::Value(value) && term.reads(p))
}

/// `rows` twice: as the interior body, where `kChecked` is false and no access is tested, and
/// as the edge body, every access checked; `interior` chooses, once per block or strip.
fn both_bodies(rows: &str, indent: &str) -> String {
    format!(
        "{indent}if (interior) {{  // interior: no bounds or alignment tests\n{indent}    constexpr bool kChecked = false;\n{rows}{indent}}} else {{  // edge: every access checked\n{indent}    constexpr bool kChecked = true;\n{rows}{indent}}}\n"
    )
}

/// The kernel's source and launch.
pub(crate) fn generate(k: &KernelContext) -> Result<KernelOutput, GenerateError> {
    let (rows, cols) = matrix_dims(k)?;
    let mut sizes = vec![rows.clone()];
    if cols != rows {
        sizes.push(cols.clone());
    }
    let strips = Strips::new(k, &rows, &cols)?;
    let layout = strips.layout;
    let (params, args) = k.parameters(&sizes);
    let mut s = String::new();
    let _ = writeln!(s, "\n// Kernel {} fuses:\n{}", k.name, k.header_comment());
    // A walk along the columns holds its rows' sums and row values in registers across the
    // strips, and a trip of several rows their loads: with ptxas's default register cap for
    // the block size, the interior body's loads of all those rows at once spilled. One block
    // per SM is the floor asked for instead; the registers used, and the blocks resident with
    // them, are in `fuse compile`'s profile.
    let min_blocks = match k.walk == Walk::Columns || strips.rows_per_trip() > 1 {
        true => ", 1",
        false => "",
    };
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__({}{min_blocks}) {}({params}) {{",
        32 * layout.warps,
        k.name
    );
    let _ = writeln!(
        s,
        "    constexpr int kWarps = {}, kVector = {}, kGroups = {}, kColumns = {};",
        layout.warps,
        layout.vector,
        layout.groups,
        layout.columns()
    );
    let _ = writeln!(
        s,
        "    constexpr int kRowThreads = {}, kRowsAtOnce = 32 * kWarps / kRowThreads;",
        layout.row_threads
    );
    let _ = writeln!(s, "    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;");
    let _ = writeln!(
        s,
        "    const int rt = threadIdx.x % kRowThreads, row_slot = threadIdx.x / kRowThreads;"
    );
    s.push_str(&k.scalar_loads("    ")?);
    s.push_str(&match k.walk {
        Walk::Rows => strips.walk_rows()?,
        Walk::Columns => strips.walk_columns()?,
    });
    let _ = writeln!(s, "}}\nFUSE_EMU_EXPORT({})", k.name);
    // With a whole walk, one block sees all of each reduction along it: stored directly.
    let mut direct = match (k.grid_serial(), k.walk) {
        (None, Walk::Rows) => strips.column_sums.clone(),
        (None, Walk::Columns) => strips.row_sums.clone(),
        _ => Vec::new(),
    };
    // A whole-row block finishes its row sums itself.
    if k.whole_rows {
        direct.extend(&strips.row_sums);
    }
    let atomics = |sums: &[ValueId]| sums.iter().filter(|r| !direct.contains(r)).count() as u32;
    let work = StripWork {
        per_thread: layout.per_thread(),
        row_sums: strips.row_sums.len() as u32,
        row_sum_atomics: atomics(&strips.row_sums),
        column_sum_atomics: atomics(&strips.column_sums),
        column_atomic_width: layout.column_atomic_width(k.precision()),
        rows_per_trip: strips.rows_per_trip(),
        row_value_loads: match k.walk {
            Walk::Rows => strips.uses.row_vectors.len() as u32,
            Walk::Columns => 0,
        },
    };
    let launch = Launch {
        kernel: k.name.clone(),
        grid: Grid::Strips {
            rows,
            cols,
            columns: layout.columns(),
            per_block: match k.walk {
                Walk::Rows => k.block_rows(),
                Walk::Columns => k.grid_serial().map(|serial| serial as u64 * layout.columns() as u64),
            },
            walk: k.walk,
            whole_rows: k.whole_rows,
        },
        block: (32 * layout.warps, 1, 1),
        args,
        strips: Some(work),
    };
    Ok(KernelOutput {
        source: s,
        launch,
        direct,
    })
}
