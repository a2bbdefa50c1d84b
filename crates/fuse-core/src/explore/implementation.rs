//! Implementations of a fusion (paper §4.2): the order its calls run in, the routine variant
//! of each call, the block size, the serial iterations per block (and, for tile grids, the
//! direction blocks walk), and how each partial reduction is finished. Each is predicted, and
//! dominated ones are pruned: an order that needs more on-chip memory per instance than
//! another for the same work, and any implementation predicted no faster than another that
//! uses no more shared memory and no more threads. Implementations that cannot launch (too
//! many threads or too much shared memory per block) are dropped.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::explore::callset::CallSet;
use crate::explore::context::Context;
use crate::explore::environment::Environment;
use crate::explore::mapping::{call_diagonals, Axis, Role, StripLayout, ELEMENT_SIDE, STATIC_SHARED_LIMIT};
use crate::explore::predict::{FinishWork, KernelTime, Predictor, RoutineRun, Work};
use crate::explore::timing::RoutineKey;
use crate::explore::Limits;
use crate::formula::Diagonals;
use crate::program::{Arg, CallId, ValueId};

/// Instances per block tried for BLAS-1 fusions (each instance is one warp on a sub-vector).
pub const BLAS1_INSTANCES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Threads per instance of a BLAS-1 routine.
pub const BLAS1_THREADS_PER_INSTANCE: u32 = 32;
/// Threads per block tried for nested fusions.
pub const NESTED_THREADS: [u32; 5] = [64, 128, 256, 512, 1024];
/// Tiles across a nested block's strip tried on GPUs (32 columns each): each lane moves 16
/// bytes per access, several in flight. Not 1, the paper's 32×32 tile of 32-bit loads: on the
/// H100 those ran BLAS-2 at 37–40 % of the bandwidth, and their loop issues four times the
/// instructions per byte; a matrix narrower than a strip takes the edge body. Widest first, so
/// that of implementations predicted equal the one with more bytes in flight is kept.
pub const NESTED_WIDTHS: [u32; 4] = [32, 16, 8, 4];
/// Registers per thread the generated code needs besides its strip arrays (indices, pointers).
const BASE_REGISTERS: u64 = 24;
/// Instructions of a warp sum: five shuffles and five adds.
const WARP_SUM: u64 = 10;
/// A row sum's atomic add by one lane: the test of the lane and the atomic.
const ATOMIC: u64 = 2;
/// A whole-row block's exchange of a row sum's warp totals: the store, the barrier, the loads
/// (besides one add per warp).
const EXCHANGE: u64 = 6;
/// A trip of a row loop: the row index, its address, the test and the branch.
const LOOP: u64 = 4;
/// Registers one thread may have; the SM's registers limit the block ([`Predictor::resident_blocks`]).
const MAX_REGISTERS: u64 = 255;
/// Rows one warp may carry along the columns: it keeps each row's partial sums and address in
/// registers across strips, and beyond 8 ptxas spills (SGEMV in f64 at 64 threads, 16 rows per
/// warp: 254 registers and 40 bytes of spills on sm_80 and sm_90).
const MAX_ROWS_PER_WARP: u64 = 8;
/// Rows per whole-row block tried besides whole tiles: at 2048² a tile of rows per block makes
/// 64 blocks for 132 SMs.
const BLOCK_ROWS: [u32; 3] = [4, 8, 16];
/// Serial iterations tried, besides the whole extent along the walk.
pub const SERIAL_ITERATIONS: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// The variant every function has until library metadata lists others.
pub const DEFAULT_VARIANT: &str = "default";
/// Above this many partial reductions, all are finished the same way instead of every mix.
const MAX_MIXED_FINISHES: usize = 3;

/// The shape of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Block {
    /// Threads per block.
    pub threads: u32,
    /// Instances per block: sub-vectors (BLAS-1), tiles across a strip (BLAS-2).
    pub instances: u32,
    /// BLAS-2: each row is spread over the whole block, which takes its rows one at a time
    /// ([`StripLayout::whole_rows`]), instead of over one warp.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_rows: bool,
}

impl Block {
    /// A block of `threads` threads over `instances` sub-vectors or tiles across a strip.
    pub fn new(threads: u32, instances: u32) -> Self {
        Block {
            threads,
            instances,
            whole_rows: false,
        }
    }

    /// The strip layout of this block in `precision` (BLAS-2).
    pub fn layout(&self, precision: crate::Precision) -> StripLayout {
        match self.whole_rows {
            true => StripLayout::whole_rows(self.threads, self.instances, precision),
            false => StripLayout::new(self.threads, self.instances, precision),
        }
    }
}

/// How a reduction's partial results become its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// One block sees the whole reduced dimension: its result is complete, a plain store.
    Complete,
    /// Blocks add their partials to the zeroed result with atomics.
    Atomic,
    /// Blocks store partials; a finishing kernel adds them up.
    Kernel,
}

impl std::fmt::Display for Finish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Finish::Complete => "complete in each block",
            Finish::Atomic => "partials added by atomics",
            Finish::Kernel => "partials summed by a finishing kernel",
        })
    }
}

/// A reduce call of a kernel and how its result is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reduction {
    /// The reduce call.
    pub call: CallId,
    /// Its result.
    pub value: ValueId,
    /// How its partial results are combined.
    pub finish: Finish,
}

/// Where the values a fusion touches live.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Dataflow {
    /// Values read from global memory.
    pub loads: Vec<ValueId>,
    /// Values written to global memory (outputs, and results read by later kernels).
    pub stores: Vec<ValueId>,
    /// Results passed between calls of the kernel on chip.
    pub on_chip: Vec<ValueId>,
    /// Run-time scalar inputs, passed as kernel arguments.
    pub parameters: Vec<ValueId>,
}

/// How a fusion's kernel launches: the block, the grid, the shared memory, and how each partial
/// reduction is finished. An [`Implementation`] chooses it and a plan's kernel carries it to the
/// generator; both serialize its fields as their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// Block shape.
    pub block: Block,
    /// Serial iterations per block.
    pub serial_iterations: u32,
    /// Rows each whole-row block owns where fewer than a tile's 32 (with one serial iteration):
    /// a grid of more blocks for matrices of few rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_rows: Option<u32>,
    /// For tile grids, the direction blocks walk their iterations in.
    pub walk: Option<Axis>,
    /// Blocks in the grid.
    pub blocks: u64,
    /// Shared memory per block, bytes.
    pub shared_bytes: u64,
    /// How each reduce call's result is finished.
    pub reductions: Vec<Reduction>,
}

/// One way to run a fusion as a kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Implementation {
    /// The calls in the order they run.
    pub order: Vec<CallId>,
    /// The routine variant of each call, by position in `order`: shared by the
    /// implementations of one order, and by fusions of one shape.
    pub variants: Arc<[String]>,
    /// How it launches.
    #[serde(flatten)]
    pub launch: Launch,
    /// Predicted time.
    pub time: KernelTime,
}

/// The implementations of one fusion that survived pruning.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Implemented {
    /// Survivors, fastest first.
    pub list: Vec<Implementation>,
    /// Pruned as dominated.
    pub dominated: usize,
    /// Dropped because a block would not fit on the device.
    pub unlaunchable: usize,
}

/// The routine variants of call `c`. Library metadata has no variants yet, so every function
/// has [`DEFAULT_VARIANT`]; timing tables already key routines by variant.
pub fn variants(_ctx: &Context, _c: CallId) -> Vec<String> {
    vec![DEFAULT_VARIANT.to_string()]
}

/// Where the values of the calls in `order` live.
pub fn dataflow(ctx: &Context, order: &[CallId]) -> Dataflow {
    let members = CallSet::of(order);
    let program = ctx.program;
    let inside = |v: ValueId| program.values[v].producer.is_some_and(|p| members.contains(p));
    let mut flow = Dataflow::default();
    for &c in order {
        for v in program.calls[c].reads() {
            let list = match () {
                _ if inside(v) => &mut flow.on_chip,
                _ if ctx.is_parameter(v) => &mut flow.parameters,
                _ => &mut flow.loads,
            };
            if !list.contains(&v) {
                list.push(v);
            }
        }
        let result = program.calls[c].result;
        if program.is_output(result) || ctx.readers[result].iter().any(|&r| !members.contains(r)) {
            flow.stores.push(result);
        }
    }
    flow
}

/// Enumerates, predicts and prunes the implementations of the fusion of `calls`.
pub fn implement(ctx: &Context, calls: &[CallId], predictor: &Predictor, limits: &Limits) -> Implemented {
    let nested = ctx.program.calls[calls[0]].kind.nesting_level() == 2;
    let walks = if nested {
        vec![Some(Axis::Rows), Some(Axis::Columns)]
    } else {
        vec![None]
    };
    let mut out = Implemented::default();
    // The order and variants of each family of candidates: only the survivors of pruning
    // get copies of them.
    let mut families: Vec<(Vec<CallId>, Arc<[String]>)> = Vec::new();
    let mut candidates: Vec<(usize, Predicted)> = Vec::new();
    for walk in walks {
        let (order, peak, worse) = best_order(ctx, calls, walk, limits.max_orders);
        out.dominated += worse;
        let kernel = KernelRoutines::new(ctx, &order);
        let mut options = blocks(nested, predictor);
        if nested && walk == Some(Axis::Rows) && !ctx.row_barrier {
            options.extend(whole_row_blocks(ctx, kernel.tiles.1 * ELEMENT_SIDE));
        }
        for variants in variant_choices(ctx, &order) {
            let family = families.len();
            for &block in &options {
                let shared = kernel.shared_bytes(block, peak);
                let probe = Environment {
                    threads: block.threads,
                    instances: block.instances,
                    lane_bytes: None,
                    registers: kernel.registers(block, walk),
                    serial_iterations: 1,
                    shared_bytes: shared,
                    blocks: 1,
                };
                if predictor.resident_blocks(&probe) == 0 || !kernel.fits_strips(block, walk) {
                    out.unlaunchable += 1;
                    continue;
                }
                let setting = Setting {
                    block,
                    walk,
                    shared,
                    variants: &variants,
                };
                let predicted = kernel.candidates(ctx, predictor, &setting);
                candidates.extend(predicted.into_iter().map(|p| (family, p)));
            }
            families.push((order.clone(), variants.into()));
        }
    }
    let (kept, dominated) = pareto(candidates);
    out.dominated += dominated;
    out.list = kept
        .into_iter()
        .map(|(family, p)| {
            let (order, variants) = &families[family];
            p.implementation(order, variants)
        })
        .collect();
    out
}

/// A launch configuration of a kernel and its predicted time: what pruning compares, before
/// the order and variants it was predicted for make it an [`Implementation`].
struct Predicted {
    launch: Launch,
    time: KernelTime,
}

impl Predicted {
    fn implementation(self, order: &[CallId], variants: &Arc<[String]>) -> Implementation {
        Implementation {
            order: order.to_vec(),
            variants: variants.clone(),
            launch: self.launch,
            time: self.time,
        }
    }
}

/// Fixed choices of one candidate family.
struct Setting<'a> {
    block: Block,
    walk: Option<Axis>,
    shared: u64,
    variants: &'a [String],
}

/// The routines a fusion runs, in a given order, independent of the launch configuration.
struct KernelRoutines<'c> {
    order: Vec<CallId>,
    /// (position in order, routine name, role) of each load.
    loads: Vec<(usize, String, Role)>,
    /// (position, role) of each stored map result.
    stores: Vec<(usize, Role)>,
    /// (position, call, value) of each reduce.
    reduces: Vec<(usize, CallId, ValueId)>,
    /// The reduces whose results later calls of the kernel read (row sums on a target with a
    /// row barrier): blocks must finish them, so only grids where they are complete qualify.
    read_inside: Vec<CallId>,
    tiles: (u64, u64),
    ctx: &'c Context<'c>,
}

impl<'c> KernelRoutines<'c> {
    fn new(ctx: &'c Context<'c>, order: &[CallId]) -> Self {
        let flow = dataflow(ctx, order);
        let program = ctx.program;
        let position = |c: CallId| order.iter().position(|&o| o == c).unwrap_or(0);
        let loads = flow
            .loads
            .iter()
            .map(|&v| {
                let reader = *order
                    .iter()
                    .find(|&&c| program.calls[c].reads().contains(&v))
                    .unwrap_or(&order[0]);
                let call = &program.calls[reader];
                let k = call.args.iter().position(|a| *a == Arg::Value(v)).unwrap_or(0);
                let param = call.form.signature.params.get(k).map_or("x", |p| p.name.as_str());
                (position(reader), format!("load.{param}"), ctx.role(reader, v))
            })
            .collect();
        let producer = |v: ValueId| program.values[v].producer.unwrap_or(0);
        let stores = flow
            .stores
            .iter()
            .filter(|&&v| !ctx.is_reduce(producer(v)))
            .map(|&v| (position(producer(v)), ctx.role(producer(v), v)))
            .collect();
        let reduces = order
            .iter()
            .enumerate()
            .filter(|&(_, &c)| ctx.is_reduce(c))
            .map(|(p, &c)| (p, c, program.calls[c].result))
            .collect();
        let read_inside = order
            .iter()
            .copied()
            .filter(|&c| ctx.is_reduce(c) && order.iter().any(|&d| ctx.consumes(c, d)))
            .collect();
        KernelRoutines {
            order: order.to_vec(),
            loads,
            stores,
            reduces,
            read_inside,
            tiles: ctx.mappings[order[0]].space.tiles(&ctx.sizes),
            ctx,
        }
    }

    /// Whether the fusion is nested (BLAS-2), run over strips of rows.
    fn nested(&self) -> bool {
        self.ctx.program.calls[self.order[0]].kind.nesting_level() == 2
    }

    /// Whether the fusion is nested and runs on a GPU's strips (not the CPU's whole-row threads).
    fn gpu_strips(&self) -> bool {
        self.nested() && !self.ctx.row_barrier
    }

    /// The column sums among the kernel's reductions (reduced along the rows).
    fn column_sums(&self) -> usize {
        let ctx = self.ctx;
        self.reduces
            .iter()
            .filter(|&&(_, c, _)| ctx.mappings[c].reduced == Some(Axis::Rows))
            .count()
    }

    /// Bytes of matrix rows each thread of a GPU strip kernel keeps in flight: one number per
    /// tile across the strip, for each row it loads at once. `None` for BLAS-1 and for targets
    /// without strips (the CPU).
    fn lane_bytes(&self, block: Block, walk: Option<Axis>) -> Option<u64> {
        let precision = self.ctx.program.precision;
        let (true, Some(walk)) = (self.gpu_strips(), walk) else {
            return None;
        };
        let layout = block.layout(precision);
        Some((layout.per_thread() * layout.rows_in_flight(walk)) as u64 * precision.bytes())
    }

    /// Shared memory per block: a BLAS-1 block keeps `peak` bytes per instance; a nested block
    /// only exchanges partial sums across its warps.
    fn shared_bytes(&self, block: Block, peak: u64) -> u64 {
        let precision = self.ctx.program.precision;
        let column_sums = self.column_sums();
        match self.nested() {
            false => peak * block.instances as u64,
            true => block
                .layout(precision)
                .shared_bytes(column_sums > 0, self.reduces.len() > column_sums, precision),
        }
    }

    /// Whether a nested kernel's strip arrays fit the registers one thread may have and its
    /// column-sum exchange the static shared memory.
    fn fits_strips(&self, block: Block, walk: Option<Axis>) -> bool {
        let Some(registers) = self.registers(block, walk) else {
            return true;
        };
        registers <= MAX_REGISTERS && self.shared_bytes(block, 0) <= STATIC_SHARED_LIMIT
    }

    /// Registers per thread of a nested GPU kernel, estimated before compiling: each lane
    /// holds `w` numbers of a row for every column sub-vector, column-sum accumulator and
    /// matrix it touches (a matrix twice for whole rows, whose next row loads across the
    /// barrier, and once per row of its warp walking along the columns), and walking along the
    /// columns a number per row of its warp for every row sub-vector and row sum. `None` for
    /// BLAS-1 and the CPU; more than a thread may have for a walk along the columns with more
    /// rows per warp than ptxas keeps without spilling.
    fn registers(&self, block: Block, walk: Option<Axis>) -> Option<u64> {
        if !self.gpu_strips() {
            return None;
        }
        let program = self.ctx.program;
        let layout = block.layout(program.precision);
        let words = program.precision.bytes() / 4;
        let mut arrays = self.column_sums() as u64;
        let mut matrices = 0;
        for (_, _, role) in &self.loads {
            match role {
                Role::ColumnVector => arrays += 1,
                Role::Tile => matrices += 1,
                _ => {}
            }
        }
        // Whole rows hold the next row's matrix values too, loaded across the row's barrier; a
        // walk along the columns loads all the rows of its warp before using any.
        let rows_per_warp = layout.rows_per_trip(Axis::Columns) as u64;
        matrices *= match (block.whole_rows, walk) {
            (true, _) => 2,
            (false, Some(Axis::Columns)) => rows_per_warp,
            _ => 1,
        };
        matrices += self.stores.iter().filter(|(_, role)| *role == Role::Tile).count() as u64;
        let row_arrays = match walk {
            Some(Axis::Columns) => {
                if rows_per_warp > MAX_ROWS_PER_WARP {
                    return Some(MAX_REGISTERS + 1);
                }
                let row_vectors = self
                    .loads
                    .iter()
                    .filter(|(_, _, role)| *role == Role::RowVector)
                    .count();
                let row_sums = self.reduces.len() - self.column_sums();
                (row_vectors + row_sums) as u64 * rows_per_warp * words
            }
            _ => 0,
        };
        // A stored matrix keeps each access's 64-bit column index and bounds test live from
        // the load to the store (SGER in f64 over 32 tiles: 255 registers and spills without).
        let stores_tiles = self.stores.iter().any(|(_, role)| *role == Role::Tile);
        let per_access = if stores_tiles { 3 * layout.groups as u64 } else { 0 };
        Some((arrays + matrices.max(1)) * layout.per_thread() as u64 * words + per_access + row_arrays + BASE_REGISTERS)
    }

    /// Warp instructions a nested GPU kernel issues in all, estimated from its shape as the
    /// SASS of the generated loops counts them: per row, each warp on it issues an address and
    /// a load per 16-byte access (or store), an FMA per element per call, two per row value,
    /// and per row sum walking down a warp sum (five shuffles and adds) and its atomic — or, in
    /// a whole-row block, the exchange through shared memory behind a barrier, adding every
    /// warp's total. `None` for BLAS-1 and the CPU.
    fn warp_instructions(&self, block: Block, walk: Option<Axis>) -> Option<u64> {
        let (true, Some(walk)) = (self.gpu_strips(), walk) else {
            return None;
        };
        let layout = block.layout(self.ctx.program.precision);
        let groups = layout.groups as u64;
        let count = |wanted: Role| self.loads.iter().filter(|(_, _, role)| *role == wanted).count() as u64;
        let stored = self.stores.iter().filter(|(_, role)| *role == Role::Tile).count() as u64;
        let row_sums = (self.reduces.len() - self.column_sums()) as u64;
        // Walking along the columns, a row's partial sums stay in registers across the strips.
        let (warps_per_row, per_row_sum) = match (block.whole_rows, walk) {
            (true, _) => (layout.warps as u64, WARP_SUM + EXCHANGE + layout.warps as u64),
            (false, Axis::Rows) => (1, WARP_SUM + ATOMIC),
            (false, Axis::Columns) => (1, 0),
        };
        let per_warp_row = 2 * groups * (count(Role::Tile) + stored)
            + self.order.len() as u64 * layout.per_thread() as u64
            + 2 * count(Role::RowVector)
            + row_sums * per_row_sum
            + LOOP / layout.rows_per_trip(walk) as u64;
        let rows = self.tiles.0 * ELEMENT_SIDE;
        let strips = self.tiles.1.div_ceil(block.instances.max(1) as u64);
        Some(rows * strips * warps_per_row * per_warp_row)
    }

    /// Every serial-iteration count and finish choice of `setting`, predicted.
    fn candidates(&self, ctx: &Context, predictor: &Predictor, setting: &Setting) -> Vec<Predicted> {
        let mut out = Vec::new();
        // On a GPU only a whole-row block still holds the row when its sum is complete.
        if !self.read_inside.is_empty() && !ctx.row_barrier && !setting.block.whole_rows {
            return out;
        }
        let mut heights: Vec<(u32, Option<u32>)> = (serial_options(self.tiles, setting.block, setting.walk))
            .into_iter()
            .map(|serial| (serial, None))
            .collect();
        if setting.block.whole_rows {
            heights.extend(BLOCK_ROWS.iter().map(|&rows| (1, Some(rows))));
        }
        for (serial, block_rows) in heights {
            let grid = Grid::new(self.tiles, setting.block, serial, setting.walk, block_rows);
            if self.read_inside.iter().any(|&c| !grid.complete(ctx, c)) {
                continue;
            }
            let complete: Vec<bool> = self.reduces.iter().map(|&(_, c, _)| grid.complete(ctx, c)).collect();
            for finishes in finish_choices(&complete, ctx.row_barrier) {
                out.push(self.predict(predictor, setting, &grid, finishes));
            }
        }
        out
    }

    fn predict(&self, predictor: &Predictor, setting: &Setting, grid: &Grid, finishes: Vec<Finish>) -> Predicted {
        let (runs, finish) = self.routine_runs(predictor, setting, grid, &finishes);
        let env = Environment {
            threads: setting.block.threads,
            instances: setting.block.instances,
            lane_bytes: self.lane_bytes(setting.block, setting.walk),
            registers: self.registers(setting.block, setting.walk),
            serial_iterations: grid.serial,
            shared_bytes: setting.shared,
            blocks: grid.blocks,
        };
        let reductions = (self.reduces.iter().zip(&finishes))
            .map(|(&(_, call, value), &finish)| Reduction { call, value, finish })
            .collect();
        Predicted {
            launch: Launch {
                block: setting.block,
                serial_iterations: grid.serial,
                block_rows: grid.block_rows,
                walk: setting.walk,
                blocks: grid.blocks,
                shared_bytes: setting.shared,
                reductions,
            },
            time: predictor.kernel(
                &runs,
                &env,
                self.warp_instructions(setting.block, setting.walk).unwrap_or(0),
                finish,
            ),
        }
    }

    /// Every routine the kernel runs (loads, computes, stores, partial-result stores or
    /// accumulations) with its executions and work, and the work that finishes its reductions.
    fn routine_runs<'s>(
        &'s self,
        predictor: &Predictor,
        setting: &'s Setting,
        grid: &Grid,
        finishes: &[Finish],
    ) -> (Vec<RoutineRun<'s>>, FinishWork) {
        let program = self.ctx.program;
        let precision = program.precision;
        let bytes = precision.bytes();
        let key = |pos: usize, routine: &'s str| RoutineKey {
            function: &program.calls[self.order[pos]].function,
            variant: &setting.variants[pos],
            routine,
            precision,
        };
        let count = self.loads.len() + self.order.len() + self.stores.len() + self.reduces.len();
        let mut runs: Vec<RoutineRun> = Vec::with_capacity(count);
        // A kernel whose calls each read a triangle (or band) loads only the tiles holding it.
        let band = (self.order.iter())
            .map(|&c| call_diagonals(&program.calls[c]))
            .reduce(Diagonals::union)
            .unwrap_or_default();
        let share = band.tile_share(self.tiles, ELEMENT_SIDE);
        for (pos, routine, role) in &self.loads {
            let transfers = grid.transfers(*role);
            runs.push(RoutineRun {
                key: key(*pos, routine),
                runs: match role {
                    Role::Tile => (transfers as f64 * share).ceil() as u64,
                    _ => transfers,
                },
                work: Work::Bytes(role.numbers() * bytes),
            });
        }
        for (pos, &c) in self.order.iter().enumerate() {
            runs.push(RoutineRun {
                key: key(pos, "compute"),
                runs: grid.instances(),
                work: Work::Flops(self.ctx.mappings[c].flops_per_instance),
            });
        }
        for &(pos, role) in &self.stores {
            runs.push(RoutineRun {
                key: key(pos, "store"),
                runs: grid.transfers(role),
                work: Work::Bytes(role.numbers() * bytes),
            });
        }
        let mut finish = FinishWork::default();
        let (mut memset, mut second_kernel) = (false, false);
        let atomic_cost = predictor.table().model.atomic_cost;
        let gpu_strips = self.gpu_strips();
        for (&(pos, c, _), &how) in self.reduces.iter().zip(finishes) {
            let (partials, per) = grid.partials(self.ctx, c);
            let per_bytes = per * bytes;
            let result_bytes = grid.result_numbers(self.ctx, c) * bytes;
            // A column sum of a GPU strip kernel adds several columns per atomic.
            let column_sum = gpu_strips && self.ctx.mappings[c].reduced == Some(Axis::Rows);
            let per_atomic = match column_sum {
                true => setting.block.layout(precision).column_atomic_width(precision) as f64,
                false => 1.0,
            };
            let (routine, work) = match how {
                Finish::Atomic => (
                    "accumulate",
                    (per_bytes as f64 * atomic_cost / per_atomic).round() as u64,
                ),
                _ => ("store", per_bytes),
            };
            runs.push(RoutineRun {
                key: key(pos, routine),
                runs: partials,
                work: Work::Bytes(work),
            });
            match how {
                Finish::Complete => {}
                Finish::Atomic => (memset, finish.bytes) = (true, finish.bytes + result_bytes),
                Finish::Kernel => {
                    (second_kernel, finish.bytes) = (true, finish.bytes + partials * per_bytes + result_bytes)
                }
            }
        }
        finish.launches = memset as u32 + second_kernel as u32;
        (runs, finish)
    }
}

/// One routine of a kernel, with owned names: what calibration splits a measured kernel into.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutineShare {
    /// Function name without prefix.
    pub function: String,
    /// Variant name.
    pub variant: String,
    /// `load.PARAM`, `compute`, `store` or `accumulate`.
    pub routine: String,
    /// Executions in the whole grid.
    pub runs: u64,
    /// Work per execution.
    pub work: Work,
}

/// The implementation of the fusion of `calls` in one launch configuration — the order with
/// the least on-chip memory, default variants, partial reductions finished by atomics (as the
/// generator does) — predicted, with the routines it runs. Calibration times the generated
/// kernel of exactly this configuration and splits the time among these routines.
pub fn implementation_with(
    ctx: &Context,
    calls: &[CallId],
    block: Block,
    serial_iterations: u32,
    walk: Option<Axis>,
    predictor: &Predictor,
) -> (Implementation, Vec<RoutineShare>) {
    let (order, peak, _) = best_order(ctx, calls, walk, Limits::default().max_orders);
    let kernel = KernelRoutines::new(ctx, &order);
    let variants: Arc<[String]> = order.iter().map(|_| DEFAULT_VARIANT.to_string()).collect();
    let setting = Setting {
        block,
        walk,
        shared: peak * block.instances as u64,
        variants: &variants,
    };
    let grid = Grid::new(kernel.tiles, block, serial_iterations.max(1), walk, None);
    let finishes: Vec<Finish> = (kernel.reduces.iter())
        .map(|&(_, c, _)| match grid.complete(ctx, c) {
            true => Finish::Complete,
            false => Finish::Atomic,
        })
        .collect();
    let (runs, _) = kernel.routine_runs(predictor, &setting, &grid, &finishes);
    let shares = runs
        .iter()
        .map(|r| RoutineShare {
            function: r.key.function.to_string(),
            variant: r.key.variant.to_string(),
            routine: r.key.routine.to_string(),
            runs: r.runs,
            work: r.work,
        })
        .collect();
    let predicted = kernel.predict(predictor, &setting, &grid, finishes);
    (predicted.implementation(&order, &variants), shares)
}

/// The grid of one launch configuration. Nested blocks cover strips `width` tiles across:
/// walking down, a block owns one strip `serial` tiles high (or `block_rows` rows of whole
/// rows); walking along, a block owns one tile row
/// ([`ROWS_PER_STRIP_BLOCK`](crate::explore::mapping::ROWS_PER_STRIP_BLOCK) rows) and walks
/// `serial` strips.
struct Grid {
    /// Instances along (rows, columns): `(1, n/32)` for BLAS-1.
    tiles: (u64, u64),
    walk: Option<Axis>,
    serial: u32,
    block_rows: Option<u32>,
    /// Tiles across a strip (1 for BLAS-1).
    width: u64,
    /// Whole-row blocks: each row of the block's strip is complete in the block.
    whole_rows: bool,
    blocks: u64,
}

impl Grid {
    fn new(tiles: (u64, u64), block: Block, serial: u32, walk: Option<Axis>, block_rows: Option<u32>) -> Self {
        let s = serial as u64;
        let width = match walk {
            None => 1,
            Some(_) => block.instances.max(1) as u64,
        };
        let row_blocks = match block_rows {
            Some(rows) => (tiles.0 * ELEMENT_SIDE).div_ceil(rows as u64),
            None => tiles.0.div_ceil(s),
        };
        let blocks = match walk {
            None => tiles.1.div_ceil(block.instances as u64 * s),
            Some(Axis::Rows) => row_blocks * tiles.1.div_ceil(width),
            Some(Axis::Columns) => tiles.0 * tiles.1.div_ceil(width * s),
        };
        Grid {
            tiles,
            walk,
            serial,
            block_rows,
            width,
            whole_rows: block.whole_rows,
            blocks,
        }
    }

    fn instances(&self) -> u64 {
        self.tiles.0 * self.tiles.1
    }

    fn along(&self, axis: Axis) -> u64 {
        match axis {
            Axis::Rows => self.tiles.0,
            Axis::Columns => self.tiles.1,
        }
    }

    /// Tiles a block advances by per serial iteration along `axis`: a strip along the columns.
    fn step(&self, axis: Axis) -> u64 {
        match axis {
            Axis::Rows => 1,
            Axis::Columns => self.width,
        }
    }

    /// Executions of a load or store of an element of `role`: once per block (per tile the
    /// block's strip is wide) for invariants and device scalars; a row sub-vector walking down is
    /// read once per row of each strip; everything else once per instance.
    fn transfers(&self, role: Role) -> u64 {
        match role {
            Role::Scalar => self.blocks,
            _ if role.invariant_along(self.walk) => self.blocks * self.width.min(self.tiles.1),
            Role::RowVector => self.instances().div_ceil(self.width),
            _ => self.instances(),
        }
    }

    /// (partial results, numbers per partial) of reduce call `c`. Along the walk a partial is
    /// accumulated over the block's iterations: one per block (per strip walking down). Across
    /// the walk, one per strip row: walking down, a row sum per row of each strip; walking
    /// along, a column sum per column of each strip of each tile row.
    fn partials(&self, ctx: &Context, c: CallId) -> (u64, u64) {
        match ctx.mappings[c].reduced {
            None => (self.blocks, 1),
            Some(r) if self.walk == Some(r) => (self.blocks, ELEMENT_SIDE * self.step(r.other())),
            Some(r) => (
                self.instances().div_ceil(self.width),
                ELEMENT_SIDE * self.step(r.other()),
            ),
        }
    }

    /// Whether one block sees all of reduce `c`'s reduced dimension: along the walk, when the
    /// block walks all of it; across it, only a whole-row block's row sums (across strips,
    /// partials meet by atomics).
    fn complete(&self, ctx: &Context, c: CallId) -> bool {
        match ctx.mappings[c].reduced {
            None => self.blocks == 1,
            Some(r) if self.walk == Some(r) => {
                self.block_rows.is_none() && self.along(r).div_ceil(self.step(r) * self.serial as u64) == 1
            }
            Some(r) => self.whole_rows && r == Axis::Columns && self.along(r) <= self.width,
        }
    }

    /// Numbers in reduce `c`'s result.
    fn result_numbers(&self, ctx: &Context, c: CallId) -> u64 {
        match ctx.mappings[c].reduced {
            None => 1,
            Some(r) => self.along(r.other()) * ELEMENT_SIDE,
        }
    }
}

fn blocks(nested: bool, predictor: &Predictor) -> Vec<Block> {
    let max = predictor.table().device.max_threads_per_block;
    // A target whose blocks own whole rows (the CPU) has no strips to choose.
    let widths: &[u32] = match predictor.table().device.row_barrier {
        true => &[1],
        false => &NESTED_WIDTHS,
    };
    let all: Vec<Block> = if nested {
        NESTED_THREADS
            .iter()
            .flat_map(|&threads| widths.iter().map(move |&instances| Block::new(threads, instances)))
            .collect()
    } else {
        BLAS1_INSTANCES
            .iter()
            .map(|&instances| Block::new(instances * BLAS1_THREADS_PER_INSTANCE, instances))
            .collect()
    };
    let fitting: Vec<Block> = all.iter().copied().filter(|b| b.threads <= max).collect();
    // A device too small for every option still gets the smallest, to be reported unlaunchable.
    if fitting.is_empty() {
        all[..1].to_vec()
    } else {
        fitting
    }
}

/// Whole-row blocks of every thread count whose registers hold a row of `columns` numbers.
fn whole_row_blocks(ctx: &Context, columns: u64) -> Vec<Block> {
    NESTED_THREADS
        .iter()
        .filter_map(|&threads| {
            let width = StripLayout::whole_row_width(threads, columns, ctx.program.precision)?;
            Some(Block {
                whole_rows: true,
                ..Block::new(threads, width)
            })
        })
        .collect()
}

/// Serial iterations worth trying: powers of two below the extent the walk covers, and the
/// whole extent (which completes reductions along it).
fn serial_options(tiles: (u64, u64), block: Block, walk: Option<Axis>) -> Vec<u32> {
    let extent = match walk {
        None => tiles.1.div_ceil(block.instances as u64),
        Some(Axis::Rows) => tiles.0,
        Some(Axis::Columns) => tiles.1.div_ceil(block.instances as u64),
    };
    let extent = extent.min(u32::MAX as u64) as u32;
    let mut out: Vec<u32> = SERIAL_ITERATIONS.iter().copied().filter(|&s| s < extent).collect();
    out.push(extent.max(1));
    out
}

/// Finish choices for reductions whose completeness is `complete`. Partial sums are added by
/// atomics, or — on a target whose blocks own whole rows (the CPU, `row_barrier`) — summed at
/// the kernel's end; the GPU generator emits atomics only, so GPU plans never name a finishing
/// kernel they would not get.
fn finish_choices(complete: &[bool], summed_at_end: bool) -> Vec<Vec<Finish>> {
    let partial: Vec<usize> = (0..complete.len()).filter(|&k| !complete[k]).collect();
    let base: Vec<Finish> = complete
        .iter()
        .map(|&c| if c { Finish::Complete } else { Finish::Atomic })
        .collect();
    let with = |pick: &dyn Fn(usize) -> bool| {
        let mut f = base.clone();
        for (bit, &k) in partial.iter().enumerate() {
            if pick(bit) {
                f[k] = Finish::Kernel;
            }
        }
        f
    };
    if !summed_at_end {
        return vec![base];
    }
    if partial.len() > MAX_MIXED_FINISHES {
        return vec![with(&|_| false), with(&|_| true)];
    }
    (0..1u32 << partial.len())
        .map(|mask| with(&|bit| mask & (1 << bit) != 0))
        .collect()
}

/// Every combination of the calls' variants (one while the library has only defaults).
fn variant_choices(ctx: &Context, order: &[CallId]) -> Vec<Vec<String>> {
    order.iter().fold(vec![Vec::new()], |acc, &c| {
        let options = variants(ctx, c);
        acc.iter()
            .flat_map(|prefix| {
                options.iter().map(move |v| {
                    let mut next = prefix.clone();
                    next.push(v.clone());
                    next
                })
            })
            .collect()
    })
}

/// The topological order of `calls` with the least on-chip memory per instance for `walk`,
/// that memory, and how many other orders were pruned (more memory, or the same as the kept one).
fn best_order(ctx: &Context, calls: &[CallId], walk: Option<Axis>, cap: usize) -> (Vec<CallId>, u64, usize) {
    let orders = topological_orders(ctx, calls, cap.max(1));
    let pruned = orders.len() - 1;
    let (peak, order) = orders
        .into_iter()
        .map(|o| (peak_bytes(ctx, &o, walk), o))
        .min_by_key(|(peak, _)| *peak)
        .unwrap_or_default();
    (order, peak, pruned)
}

/// Up to `cap` orders of `calls` that respect their dependencies, lexicographically first.
fn topological_orders(ctx: &Context, calls: &[CallId], cap: usize) -> Vec<Vec<CallId>> {
    let members = CallSet::of(calls);
    let inner_producers: Vec<Vec<CallId>> = calls
        .iter()
        .map(|&c| {
            let reads = ctx.program.calls[c].reads();
            let producers = reads.iter().filter_map(|&v| ctx.program.values[v].producer);
            producers.filter(|&p| members.contains(p)).collect()
        })
        .collect();
    let mut out = Vec::new();
    let mut prefix = Vec::new();
    extend_orders(calls, &inner_producers, &mut prefix, &mut out, cap);
    out
}

fn extend_orders(
    calls: &[CallId],
    producers: &[Vec<CallId>],
    prefix: &mut Vec<CallId>,
    out: &mut Vec<Vec<CallId>>,
    cap: usize,
) {
    if prefix.len() == calls.len() {
        out.push(prefix.clone());
        return;
    }
    for (k, &c) in calls.iter().enumerate() {
        let ready = !prefix.contains(&c) && producers[k].iter().all(|p| prefix.contains(p));
        if ready && out.len() < cap {
            prefix.push(c);
            extend_orders(calls, producers, prefix, out, cap);
            prefix.pop();
        }
    }
}

/// Peak bytes on chip per instance when `order` runs with `walk`: each value is live from its
/// load or production to its last use; invariant loads and accumulated partial results live
/// through the whole serial loop.
fn peak_bytes(ctx: &Context, order: &[CallId], walk: Option<Axis>) -> u64 {
    let program = ctx.program;
    let bytes = program.precision.bytes();
    let last = order.len().saturating_sub(1);
    let mut live: BTreeMap<ValueId, (usize, usize, u64)> = BTreeMap::new();
    let mut touch = |v: ValueId, from: usize, to: usize, size: u64| {
        let e = live.entry(v).or_insert((from, to, size));
        e.0 = e.0.min(from);
        e.1 = e.1.max(to);
    };
    for (p, &c) in order.iter().enumerate() {
        for v in program.calls[c].reads().into_iter().filter(|&v| !ctx.is_parameter(v)) {
            let role = ctx.role(c, v);
            let whole = role.invariant_along(walk) && program.values[v].producer.is_none_or(|q| !order.contains(&q));
            let from = if whole { 0 } else { p };
            touch(v, from, if whole { last } else { p }, role.numbers() * bytes);
        }
        let result = program.calls[c].result;
        let role = ctx.mappings[c].result;
        let accumulates = ctx.is_reduce(c) && ctx.mappings[c].reduced.is_none_or(|r| walk == Some(r));
        let (from, to) = if accumulates { (0, last) } else { (p, p) };
        touch(result, from, to, role.numbers() * bytes);
    }
    (0..order.len())
        .map(|p| {
            live.values()
                .filter(|(a, b, _)| *a <= p && p <= *b)
                .map(|(_, _, s)| s)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

/// Keeps the candidates (of a family each) no other beats on time, shared memory and threads
/// at once; returns them fastest first and how many were dropped.
fn pareto(mut candidates: Vec<(usize, Predicted)>) -> (Vec<(usize, Predicted)>, usize) {
    candidates.sort_by(|(_, a), (_, b)| {
        a.time
            .total_us
            .total_cmp(&b.time.total_us)
            .then(a.launch.shared_bytes.cmp(&b.launch.shared_bytes))
            .then(a.launch.block.threads.cmp(&b.launch.block.threads))
    });
    let total = candidates.len();
    let mut kept: Vec<(usize, Predicted)> = Vec::new();
    for (family, c) in candidates {
        let (shared, threads) = (c.launch.shared_bytes, c.launch.block.threads);
        let beaten = kept
            .iter()
            .any(|(_, k)| k.launch.shared_bytes <= shared && k.launch.block.threads <= threads);
        if !beaten {
            kept.push((family, c));
        }
    }
    let dropped = total - kept.len();
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::timing::TimingTable;
    use crate::{script, Library, Program};

    fn load(name: &str) -> Program {
        let path = format!("../../scripts/{name}.yaml");
        script::load(std::path::Path::new(&path), &Library::builtin().unwrap()).unwrap()
    }

    fn implemented(p: &Program, calls: &[CallId]) -> Implemented {
        let table = TimingTable::builtin().unwrap();
        let ctx = Context::new(p, &p.sizes);
        implement(&ctx, calls, &Predictor::new(&table, true), &Limits::default())
    }

    #[test]
    fn bicgk_reads_a_once_and_finishes_its_partial_reductions() {
        let p = load("bicgk");
        let ctx = Context::new(&p, &p.sizes);
        let flow = dataflow(&ctx, &[0, 1]);
        let names = |ids: &[ValueId]| ids.iter().map(|&v| ctx.name(v).to_string()).collect::<Vec<_>>();
        assert_eq!(names(&flow.loads), ["A", "p", "r"]);
        assert_eq!(names(&flow.stores), ["q", "s"]);
        // The walk runs along one reduced dimension only, so at most one result is complete.
        for imp in &implemented(&p, &[0, 1]).list {
            let reductions = &imp.launch.reductions;
            let complete = reductions.iter().filter(|r| r.finish == Finish::Complete).count();
            assert!(reductions.len() == 2 && complete <= 1, "{imp:?}");
        }
    }

    #[test]
    fn temporaries_stay_on_chip() {
        let p = load("axpydot");
        let ctx = Context::new(&p, &p.sizes);
        let flow = dataflow(&ctx, &[0, 1, 2]);
        assert_eq!(flow.on_chip, [p.value("t").unwrap(), p.value("z").unwrap()]);
        assert_eq!(flow.stores, [p.value("z").unwrap(), p.value("r").unwrap()]);
        assert_eq!(flow.parameters, [p.value("alpha").unwrap()]);
    }

    #[test]
    fn survivors_are_pareto_optimal_and_fastest_first() {
        let p = load("gemver");
        let imps = implemented(&p, &[0, 1, 2]);
        assert!(!imps.list.is_empty() && imps.dominated > 0);
        for w in imps.list.windows(2) {
            assert!(w[0].time.total_us <= w[1].time.total_us);
            let (a, b) = (&w[0].launch, &w[1].launch);
            assert!(b.shared_bytes < a.shared_bytes || b.block.threads < a.block.threads);
        }
    }

    #[test]
    fn the_order_with_least_on_chip_memory_is_kept() {
        // Loading x early for the last call keeps it live across the others.
        let text = "sizes: {n: 4096}\ninputs: {x: [n], y: [n], z: [n]}\noutputs: [c]\ncalls:\n  - a = sadd(x, y)\n  - b = sadd(y, z)\n  - c = sadd(a, b)\n";
        let p = script::parse("t.yaml", text, &Library::builtin().unwrap()).unwrap();
        let ctx = Context::new(&p, &p.sizes);
        let (order, peak, pruned) = best_order(&ctx, &[0, 1, 2], None, 16);
        assert_eq!((order.len(), pruned), (3, 1));
        assert_eq!(
            peak,
            peak_bytes(&ctx, &[0, 1, 2], None).min(peak_bytes(&ctx, &[1, 0, 2], None))
        );
    }

    #[test]
    fn blocks_that_do_not_fit_are_dropped() {
        // BiCGK's column sum is exchanged across warps: 4 bytes per column of the strip per warp.
        let p = load("bicgk");
        let table_with = |shared: u64| {
            let text = std::fs::read_to_string("../../library/timings/h100-analytic.yaml").unwrap();
            let text = text.replace(
                "max_shared_per_block: 232448",
                &format!("max_shared_per_block: {shared}"),
            );
            TimingTable::parse("small.yaml", &text).unwrap()
        };
        let ctx = Context::new(&p, &p.sizes);
        let table = table_with(1024);
        let imps = implement(&ctx, &[0, 1], &Predictor::new(&table, true), &Limits::default());
        assert!(!imps.list.is_empty() && imps.unlaunchable > 0);
        for launch in imps.list.iter().map(|i| &i.launch).filter(|l| !l.block.whole_rows) {
            let warps = launch.block.threads as u64 / 32;
            assert_eq!(
                launch.shared_bytes,
                warps * 32 * launch.block.instances as u64 * 4,
                "{launch:?}"
            );
            assert!(launch.shared_bytes <= 1024);
        }
        // Whole-row blocks exchange only each row sum's warp totals: 32 numbers at most.
        let table = table_with(128);
        let imps = implement(&ctx, &[0, 1], &Predictor::new(&table, true), &Limits::default());
        let whole_rows_in_128_bytes = |l: &Launch| l.block.whole_rows && l.shared_bytes == 128;
        assert!(!imps.list.is_empty() && imps.list.iter().all(|i| whole_rows_in_128_bytes(&i.launch)));
        let table = table_with(64);
        let imps = implement(&ctx, &[0, 1], &Predictor::new(&table, true), &Limits::default());
        assert!(imps.list.is_empty());
        // 64 threads cannot hold a row of 4096 numbers in 8 float4 each.
        let whole_rows = whole_row_blocks(&ctx, 4096).len();
        assert_eq!(whole_rows, NESTED_THREADS.len() - 1);
        assert_eq!(
            imps.unlaunchable,
            2 * NESTED_THREADS.len() * NESTED_WIDTHS.len() + whole_rows
        );
    }

    #[test]
    fn a_chosen_configuration_is_predicted_from_the_routines_it_lists() {
        let p = load("bicgk");
        let table = TimingTable::builtin().unwrap();
        let predictor = Predictor::new(&table, true);
        let ctx = Context::new(&p, &p.sizes);
        let block = Block::new(256, 1);
        let (imp, shares) = implementation_with(&ctx, &[0], block, 4, Some(Axis::Rows), &predictor);
        assert_eq!(
            (imp.launch.block, imp.launch.serial_iterations, imp.launch.walk),
            (block, 4, Some(Axis::Rows))
        );
        let routines: Vec<&str> = shares.iter().map(|s| s.routine.as_str()).collect();
        assert_eq!(routines, ["load.A", "load.x", "compute", "accumulate"]);
        // A is read once: every one of its 32×32 tiles, 4 bytes per number.
        let a = &shares[0];
        assert_eq!((a.runs, a.work), (128 * 128, Work::Bytes(32 * 32 * 4)));
        // The listed routines are the ones predicted: their analytic times add up.
        let env = Environment {
            threads: 256,
            instances: 1,
            // One number a row, eight rows a trip.
            lane_bytes: Some(32),
            registers: None,
            serial_iterations: 4,
            shared_bytes: imp.launch.shared_bytes,
            blocks: imp.launch.blocks,
        };
        let transfer: f64 = shares
            .iter()
            .filter(|s| matches!(s.work, Work::Bytes(_)))
            .map(|s| {
                let key = RoutineKey {
                    function: &s.function,
                    variant: &s.variant,
                    routine: &s.routine,
                    precision: p.precision,
                };
                predictor.routine_us(
                    &RoutineRun {
                        key,
                        runs: s.runs,
                        work: s.work,
                    },
                    &env,
                )
            })
            .sum();
        assert!(
            (transfer - imp.time.transfer_us).abs() < 1e-9,
            "{transfer} {:?}",
            imp.time
        );
    }

    #[test]
    fn finish_choices_mix_partials_only_where_they_are_summed_at_the_end() {
        assert_eq!(finish_choices(&[true], true), [vec![Finish::Complete]]);
        assert_eq!(finish_choices(&[false, true], true).len(), 2);
        assert_eq!(finish_choices(&[false; 5], true).len(), 2);
        assert_eq!(
            finish_choices(&[false, true], false),
            [vec![Finish::Atomic, Finish::Complete]]
        );
    }
}
