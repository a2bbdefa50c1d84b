//! Whole-row blocks on a band of diagonals (a triangle): the block's rows go in tiles, and in
//! each tile a thread's vectors are steady — inside every call's band in every row of the tile,
//! loaded and summed as on a full matrix — or never read: they stay zeros, which make a
//! product by the matrix element a zero term (any other term tests the steady bit). The tile's
//! ragged columns, where the band's edges cross its rows, are taken one column per slot by the
//! threads and summed element by element (`fuse_band_tile` in library/cuda/routines.cuh).
//!
//! ```text
//! for each tile of kTile rows (the whole block where its ragged columns fit one slot a thread):
//!     its steady vectors (a bit each) and ragged columns (kSlots a thread);
//!     the vectors not steady zeroed, their column values too (the steady ones' reloaded where
//!     the block has several tiles: fewer registers than tracking which hold x),
//!     the column sums kept (where the tile is not the block), its first row loaded
//!     for each row (two a trip, the next row's loads in flight across this one's block sums):
//!         steady vectors: predicated loads, the compute routines as on a full matrix
//!         ragged columns: one element a slot, loaded and summed inside its band
//!     column sums of the vectors not steady put back (to zero where the tile is the block)
//!     ragged column sums: through shared memory to the threads that hold those columns
//! the column values whole again, for the formulas finishing the column sums
//! ```
//! The hot loop is the full product's plus a predicate a vector and a few instructions a slot;
//! no element of a steady vector is tested, none outside the band is loaded. A zero times an
//! infinite or NaN x or row value is NaN, so a vector not steady keeps none of its zero terms:
//! its x is zero too (a row sum's term 0·0), its column sums are put back at the tile's end —
//! once a tile, nothing a row — and an infinite or NaN value reaches only the sums its band
//! does, as in the reference.

use std::fmt::Write;

use fuse_core::explore::mapping::{call_diagonals, StripLayout, ROWS_PER_STRIP_BLOCK};
use fuse_core::formula::Diagonals;
use fuse_core::{CallId, ValueId};

use super::{inside_band, kernel_band, row_var, Strips};
use crate::generate::error::GenerateError;
use crate::generate::expr::{emit, the_sum, Registers};
use crate::generate::kernel::{pointer, KernelContext};

/// The tiles of a whole-row kernel on a band ([`Strips::tiles`]).
pub(super) struct Tiles {
    /// The union of the calls' bands: what may be loaded.
    union: Diagonals,
    /// Their intersection: what every call sums, the steady vectors.
    inner: Diagonals,
    /// Rows a tile.
    rows: u64,
    /// Ragged columns a tile at most, and the slots a thread has for them.
    columns: u64,
    slots: u64,
    /// Whether a tile is the whole block (its column sums start from zero).
    whole_block: bool,
}

impl Tiles {
    /// The tiles of kernel `k` laid out as `layout`: none where a call reads the whole matrix,
    /// or where a thread's part of a row has more vectors than `steady` has bits.
    pub(super) fn new(k: &KernelContext, layout: &StripLayout) -> Option<Tiles> {
        let union = kernel_band(k);
        if union.is_full() || layout.groups > 32 {
            return None;
        }
        let inner = (k.calls.iter())
            .map(|&c| call_diagonals(&k.program.calls[c]))
            .reduce(Diagonals::intersection)?;
        // Beside each bounded edge of a tile of `rows` rows: its rows, how far the calls' bands
        // differ there, and a vector's rounding (`fuse_band_edges`).
        let columns = |rows: u64| {
            let side = |outer: Option<i64>, inner: Option<i64>| {
                (outer.zip(inner)).map_or(0, |(o, i)| rows - 1 + o.abs_diff(i) + layout.vector as u64 - 1)
            };
            side(union.from, inner.from) + side(union.to, inner.to)
        };
        // The whole block where its ragged columns take one slot a thread; else a serial
        // iteration's 32 rows, each tile's first row loaded with no row in flight.
        let threads = layout.row_threads as u64;
        let (rows, whole_block) = match k.block_rows() {
            Some(rows) if columns(rows) <= threads => (rows, true),
            _ => (ROWS_PER_STRIP_BLOCK as u64, false),
        };
        Some(Tiles {
            whole_block,
            union,
            inner,
            rows,
            columns: columns(rows),
            slots: columns(rows).div_ceil(threads),
        })
    }
}

/// Registers of a ragged element of a row: the slot's matrix element and column values, the
/// row's values.
struct RaggedRegisters {
    row_var: usize,
}

impl Registers for RaggedRegisters {
    fn element(&self, value: ValueId, index: &[usize]) -> String {
        match index {
            [_, _] => format!("ragged{value}[s]"),
            [i] if *i == self.row_var => format!("r{value}"),
            _ => format!("ragged_c{value}[s]"),
        }
    }
}

impl Strips<'_> {
    /// The tiles' constants and the registers that outlive a row: both buffers of the ragged
    /// elements and the ragged column sums.
    fn tile_declarations(&self, tiles: &Tiles) -> String {
        let ty = self.k.ty();
        let bound = |d: Option<i64>, unbounded: &str| d.map_or(unbounded.to_string(), |d| format!("{d}LL"));
        let mut s = String::new();
        let _ = writeln!(
            s,
            "        // Tiles of kTile rows; kSlots ragged columns a thread (fuse_band_tile)."
        );
        let _ = writeln!(
            s,
            "        constexpr int kTile = {}, kRaggedColumns = {}, kSlots = {};",
            tiles.rows, tiles.columns, tiles.slots
        );
        let _ = writeln!(
            s,
            "        typedef fuse_band_tile<kVector, kRowThreads, kGroups, kSlots> Tile;"
        );
        let _ = writeln!(
            s,
            "        const auto edges_at = [&](long long first) {{  // of the tile from row `first`"
        );
        let _ = writeln!(
            s,
            "            const long long last = (first + kTile < row_end ? first + kTile : row_end) - 1;"
        );
        let band = |d: Diagonals| match (d.from, d.to) {
            (Some(from), Some(to)) => format!("{from} to {to}"),
            (Some(from), None) => format!("{from} and above"),
            (None, Some(to)) => format!("{to} and below"),
            (None, None) => "all".to_string(),
        };
        let _ = writeln!(
            s,
            "            // the diagonals some call reads ({}), and those all read ({})",
            band(tiles.union),
            band(tiles.inner)
        );
        let _ = writeln!(
            s,
            "            return fuse_band_edges<kVector>(first, last, {}, {}, {}, {}, {});",
            self.n,
            bound(tiles.union.from, "-kFuseUnbounded"),
            bound(tiles.union.to, "kFuseUnbounded"),
            bound(tiles.inner.from, "-kFuseUnbounded"),
            bound(tiles.inner.to, "kFuseUnbounded"),
        );
        let _ = writeln!(s, "        }};");
        for &v in &self.uses.matrices {
            let _ = writeln!(s, "        {ty} ragged_a{v}[kSlots], ragged_b{v}[kSlots];");
        }
        for &r in &self.column_sums {
            let _ = writeln!(s, "        {ty} ragged_acc{r}[kSlots] = {{}};");
        }
        s
    }

    /// The elements of the row `rel` rows into the tile (its first where `None`) in the tile's
    /// ragged columns, into `{into}[s]` for every matrix (`{v}` standing for its number), from
    /// the thread's first column of the row (`start{v}`, as [`Strips::matrix_loads`] leaves
    /// it): only those inside the kernel's band are read.
    pub(super) fn ragged_loads(&self, tiles: &Tiles, into: &str, rel: Option<&str>, indent: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{indent}#pragma unroll\n{indent}for (int s = 0; s < kSlots; ++s) {{");
        let _ = writeln!(
            s,
            "{indent}    const int d = tile.diagonal[s]{};",
            rel.map_or(String::new(), |rel| format!(" - ({rel})"))
        );
        for &v in &self.uses.matrices {
            let _ = writeln!(
                s,
                "{indent}    if ({}) {}[s] = __ldg(start{v} + tile.offset[s]);",
                inside_band(tiles.union, "d").join(" && "),
                into.replace("{v}", &v.to_string()),
            );
        }
        let _ = writeln!(s, "{indent}}}");
        s
    }

    /// The compute routines of `calls` for the row's elements in the tile's ragged columns, each
    /// inside its call's band. Row sums add to `part{r}`, column sums to `ragged_acc{r}[s]`.
    pub(super) fn ragged_compute(&self, calls: &[CallId], indent: &str) -> Result<String, GenerateError> {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{indent}#pragma unroll\n{indent}for (int s = 0; s < kSlots; ++s) {{  // the tile's ragged columns"
        );
        let _ = writeln!(
            s,
            "{indent}    const int d = tile.diagonal[s] - rel;  // the element's diagonal"
        );
        for &c in calls {
            let call = &self.k.program.calls[c];
            let regs = RaggedRegisters {
                row_var: row_var(call)?,
            };
            let term = emit(the_sum(call)?.1, call, self.k.precision(), &regs, None)?;
            let r = call.result;
            let target = match self.column_sums.contains(&r) {
                true => format!("ragged_acc{r}[s]"),
                false => format!("part{r}"),
            };
            let _ = writeln!(
                s,
                "{indent}    if ({}) {target} += {term};  // {}",
                inside_band(call_diagonals(call), "d").join(" && "),
                call.text
            );
        }
        let _ = writeln!(s, "{indent}}}");
        Ok(s)
    }

    /// `{name}{v}` declared for every matrix v as another name of the ragged elements `of` (as
    /// [`Strips::aliases`] for vectors).
    pub(super) fn ragged_aliases(&self, name: &str, of: &str) -> String {
        let ty = self.k.ty();
        (self.uses.matrices.iter())
            .map(|v| format!("{ty} (&{name}{v})[kSlots] = {};", of.replace("{v}", &v.to_string())))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The walk over the block's tiles with `trips` (the walk down one tile's `rows` rows,
    /// counted by `rel`) as its body: each tile found, its vectors not steady zeroed with
    /// their column values, the column values of its ragged columns and its first row
    /// (`first_row`: the loads) loaded; at its end the column sums of the vectors not steady put
    /// back and its ragged column sums handed on; after the walk the column values reloaded.
    pub(super) fn tile_loop(&self, tiles: &Tiles, first_row: &str, trips: &str) -> String {
        let (k, ty, n) = (self.k, self.k.ty(), &self.n);
        let mut s = self.tile_declarations(tiles);
        let column_values = !self.uses.column_vectors.is_empty();
        let _ = writeln!(
            s,
            "        #pragma unroll 1\n        for (long long first = row0; first < row_end; first += kTile) {{"
        );
        let _ = writeln!(
            s,
            "            const int rows = (int)(row_end - first < kTile ? row_end - first : kTile);"
        );
        let _ = writeln!(s, "            int rel = 0;  // the row in the tile");
        let _ = writeln!(s, "            const Tile tile(edges_at(first), first, col0, {n}, rt);");
        let _ = writeln!(
            s,
            "            #pragma unroll\n            for (int g = 0; g < kGroups; ++g) {{  // vectors no longer steady read as zeros"
        );
        let zero: Vec<String> = (self.uses.matrices.iter())
            .map(|v| format!("a{v}[g] = b{v}[g] = {{}};"))
            .collect();
        let _ = writeln!(
            s,
            "                if (!((tile.steady >> g) & 1u)) {{ {} }}",
            zero.join(" ")
        );
        let _ = writeln!(s, "            }}");
        // A zero of A times an infinite or NaN x is NaN: the column values of the vectors not
        // steady are zeros too, those of the steady ones reloaded (a load a vector a tile; keeping
        // a mask of the vectors still holding x took 30–40 more registers).
        if column_values {
            let _ = writeln!(
                s,
                "            #pragma unroll\n            for (int g = 0; g < kGroups; ++g) {{"
            );
            for &v in &self.uses.column_vectors {
                // (A block of one tile has all of x at its start.)
                let reload = match tiles.whole_block {
                    true => String::new(),
                    false => format!(
                        "\n                else c{v}[g] = {};",
                        self.column_vector_load(v, "true")
                    ),
                };
                let _ = writeln!(
                    s,
                    "                if (!((tile.steady >> g) & 1u)) c{v}[g] = {{}};{reload}"
                );
            }
            let _ = writeln!(s, "            }}");
        }
        // And times an infinite or NaN row value: the column sums of the vectors not steady
        // are put back at the tile's end, none of its terms theirs (their ragged columns' are
        // added after) — to zero where the tile is the block, else to a copy (registers).
        if !tiles.whole_block {
            for &r in &self.column_sums {
                let _ = writeln!(
                    s,
                    "            {} tile_start{r}[kGroups];\n            #pragma unroll\n            for (int g = 0; g < kGroups; ++g) tile_start{r}[g] = acc{r}[g];",
                    self.vec()
                );
            }
        }
        for &v in &self.uses.column_vectors {
            let _ = writeln!(s, "            {ty} ragged_c{v}[kSlots];");
            let _ = writeln!(
                s,
                "            #pragma unroll\n            for (int s = 0; s < kSlots; ++s) {{"
            );
            let _ = writeln!(
                s,
                "                const long long col = col0 + rt * kVector + tile.offset[s];"
            );
            let _ = writeln!(
                s,
                "                ragged_c{v}[s] = col < {n} ? {}[col] : {ty}(0);",
                pointer(k.program, v)
            );
            let _ = writeln!(s, "            }}");
        }
        let _ = write!(s, "            {{  // its first row\n{first_row}            }}\n");
        for line in trips.lines() {
            let _ = writeln!(s, "    {line}");
        }
        for &r in &self.column_sums {
            let _ = writeln!(
                s,
                "            #pragma unroll\n            for (int g = 0; g < kGroups; ++g) if (!((tile.steady >> g) & 1u)) acc{r}[g] = {};",
                match tiles.whole_block {
                    true => "{}".to_string(),
                    false => format!("tile_start{r}[g]"),
                }
            );
        }
        s.push_str(&self.ragged_column_sums());
        s.push_str("        }\n");
        // The column values whole again, for the formulas finishing the column sums.
        for &v in &self.uses.column_vectors {
            let _ = writeln!(
                s,
                "        #pragma unroll\n        for (int g = 0; g < kGroups; ++g) c{v}[g] = {};",
                self.column_vector_load(v, "true")
            );
        }
        s
    }

    /// The tile's ragged column sums added to the column sums of the threads that hold those
    /// columns, through shared memory. All threads of the block must run it.
    fn ragged_column_sums(&self) -> String {
        let ty = self.k.ty();
        let mut s = String::new();
        if self.column_sums.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "            {{  // the tile's ragged column sums, to the threads holding the columns"
        );
        let _ = writeln!(
            s,
            "                __shared__ {ty} ragged_sums[{}][kRaggedColumns];",
            self.column_sums.len()
        );
        let _ = writeln!(
            s,
            "                #pragma unroll\n                for (int s = 0; s < kSlots; ++s) {{"
        );
        let _ = writeln!(s, "                    const int slot = rt + s * kRowThreads;");
        for (i, &r) in self.column_sums.iter().enumerate() {
            let _ = writeln!(
                s,
                "                    if (slot < kRaggedColumns) ragged_sums[{i}][slot] = ragged_acc{r}[s];"
            );
            let _ = writeln!(s, "                    ragged_acc{r}[s] = {ty}(0);");
        }
        let _ = writeln!(s, "                }}\n                __syncthreads();");
        let _ = writeln!(
            s,
            "                const fuse_band_edges<kVector> edges = edges_at(first);"
        );
        let _ = writeln!(
            s,
            "                #pragma unroll\n                for (int g = 0; g < kGroups; ++g) {{"
        );
        let _ = writeln!(
            s,
            "                    #pragma unroll\n                    for (int e = 0; e < kVector; ++e) {{"
        );
        let _ = writeln!(
            s,
            "                        const int slot = edges.slot((int)col0 + (g * kRowThreads + rt) * kVector + e);"
        );
        for (i, &r) in self.column_sums.iter().enumerate() {
            let _ = writeln!(
                s,
                "                        if (slot >= 0) acc{r}[g].e[e] += ragged_sums[{i}][slot];"
            );
        }
        let _ = writeln!(s, "                    }}\n                }}");
        let _ = writeln!(
            s,
            "                __syncthreads();  // the next tile's reuse ragged_sums"
        );
        let _ = writeln!(s, "            }}");
        s
    }
}
