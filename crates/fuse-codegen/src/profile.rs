//! What a compiled plan's kernels will do on a GPU, read without one: the width of their global
//! loads (from the PTX), the numbers each thread holds per matrix row, the atomics and warp
//! shuffles per 1024 matrix elements (from the launch at given sizes; a float4 atomic of sm_90
//! counts once), registers and spills
//! (from ptxas), resident blocks per SM and waves (from the device's limits), and from the SASS
//! (see [`crate::sass`]) what the hot loop issues: instructions per 128-bit load, narrow loads
//! beyond its row values (a scalar fallback), barriers per row, and the loads in flight before
//! the first use, which with the blocks resident give the bytes in flight per SM that hide the
//! memory's latency (on the SMs holding the most blocks, which set the kernel's time).
//!
//! These are the offline proxies of speed for memory-bound kernels: 32-bit matrix loads, an
//! atomic every few elements, spills or a grid of a fraction of a wave are slow on any GPU.

use std::fmt::Write;

use fuse_core::explore::timing::Hardware;
use fuse_core::Sizes;
use serde::Serialize;

use crate::generate::{Generated, Grid, Step};
use crate::nvrtc::KernelResources;
use crate::sass::{Function, HotLoop};

/// Shuffle instructions of one warp sum (32 lanes, halving).
const SHUFFLES_PER_WARP_SUM: u64 = 5;
/// Registers per SM on every architecture fuse targets (sm_70 to sm_90).
const REGISTERS_PER_SM: u64 = 65536;
/// Bytes of one 128-bit load.
const WIDE_LOAD_BYTES: f64 = 16.0;

/// The profile of one launched kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelProfile {
    /// Kernel name.
    pub kernel: String,
    /// Widest global load in its PTX, bits (128: `ld.global.*.v4.f32` or `.v2.f64`).
    pub load_bits: u32,
    /// Numbers of a matrix row each thread loads per row (1 for vector kernels).
    pub per_thread: u32,
    /// Atomic adds per 1024 matrix elements (strip kernels).
    pub atomics_per_1k: Option<f64>,
    /// Warp shuffles per 1024 matrix elements (strip kernels).
    pub shuffles_per_1k: Option<f64>,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes spilled to local memory (stores + loads).
    pub spill_bytes: u64,
    /// Threads per block.
    pub threads: u32,
    /// Blocks in the grid at the sizes.
    pub blocks: u64,
    /// Blocks resident per SM at once.
    pub blocks_per_sm: u64,
    /// Grid blocks over all SMs' resident blocks.
    pub waves: f64,
    /// Blocks resident per SM on average at these sizes: the occupancy limit, or fewer where
    /// the grid has fewer blocks than the SMs hold.
    pub resident_per_sm: f64,
    /// How full the last wave is (1: whole waves).
    pub last_wave: f64,
    /// One trip of the hot loop, where the SASS was read.
    pub hot_loop: Option<HotLoop>,
    /// Bytes of 128-bit loads in flight on each SM holding the most blocks: its resident
    /// threads × loads before first use × 16.
    pub in_flight_per_sm: Option<f64>,
    /// Narrow loads in the hot loop beyond the row values it reads, per 128-bit load: a scalar
    /// fallback behind the vector loads (about 4 per load in f32, 2 in f64), or 0.
    pub fallback_per_wide: Option<f64>,
    /// Block barriers per row of the hot loop.
    pub barriers_per_row: Option<f64>,
}

/// Profiles every kernel launch of `generated`, compiled to `ptx` with `resources` and
/// disassembled to `sass` (none where `nvdisasm` is not at hand), at `sizes` on `device`.
pub fn profile(
    generated: &Generated,
    ptx: &str,
    resources: &[KernelResources],
    sass: &[Function],
    sizes: &Sizes,
    device: &Hardware,
) -> Vec<KernelProfile> {
    generated
        .steps
        .iter()
        .filter_map(|step| match step {
            Step::Launch(launch) => Some(launch),
            Step::Zero(_) => None,
        })
        .map(|launch| {
            let (gx, gy, gz) = launch.grid.dims(sizes);
            let blocks = gx as u64 * gy as u64 * gz as u64;
            let threads = launch.block.0 * launch.block.1 * launch.block.2;
            let res = resources
                .iter()
                .find(|r| r.kernel == launch.kernel)
                .cloned()
                .unwrap_or_default();
            let per_sm = blocks_per_sm(device, threads, &res);
            let (atomics, shuffles) = match (&launch.strips, &launch.grid) {
                (Some(work), Grid::Strips { rows, cols, .. }) => {
                    let get = |s: &str| sizes.get(s).unwrap_or(1) as u64;
                    let (m, n) = (get(rows), get(cols));
                    let per_1k = |count: u64| Some(count as f64 * 1024.0 / (m * n).max(1) as f64);
                    let column_atomics = n.div_ceil(work.column_atomic_width.max(1) as u64);
                    let atomics = work.row_sum_atomics as u64 * m * gx as u64
                        + work.column_sum_atomics as u64 * column_atomics * gy as u64;
                    let shuffles = work.row_sums as u64 * m * gx as u64 * SHUFFLES_PER_WARP_SUM;
                    (per_1k(atomics), per_1k(shuffles))
                }
                _ => (None, None),
            };
            let sms = device.sms.max(1) as u64;
            let waves = blocks as f64 / (per_sm.max(1) * sms) as f64;
            let resident_per_sm = (per_sm as f64).min(blocks as f64 / sms as f64);
            let hot_loop = sass
                .iter()
                .find(|f| f.name == launch.kernel)
                .and_then(Function::hot_loop);
            // The SMs holding the most blocks set the kernel's time (256 blocks on 132 SMs: 124
            // hold two, 8 one).
            let most_resident = (per_sm as f64).min((blocks as f64 / sms as f64).ceil());
            let in_flight =
                hot_loop.map(|h| most_resident * threads as f64 * h.loads_before_use as f64 * WIDE_LOAD_BYTES);
            let rows_per_trip = launch.strips.map_or(1, |w| w.rows_per_trip.max(1));
            let row_values = launch.strips.map_or(0, |w| w.row_value_loads * rows_per_trip);
            let fallback =
                hot_loop.map(|h| h.narrow_loads.saturating_sub(row_values) as f64 / h.wide_loads.max(1) as f64);
            KernelProfile {
                kernel: launch.kernel.clone(),
                load_bits: widest_global_load(ptx, &launch.kernel),
                per_thread: launch.strips.map_or(1, |w| w.per_thread),
                atomics_per_1k: atomics,
                shuffles_per_1k: shuffles,
                registers: res.registers,
                spill_bytes: res.spill_stores_bytes + res.spill_loads_bytes,
                threads,
                blocks,
                blocks_per_sm: per_sm,
                waves,
                resident_per_sm,
                last_wave: match waves.fract() {
                    0.0 => 1.0,
                    part => part,
                },
                hot_loop,
                in_flight_per_sm: in_flight,
                fallback_per_wide: fallback,
                barriers_per_row: hot_loop.map(|h| h.barriers as f64 / rows_per_trip as f64),
            }
        })
        .collect()
}

/// Blocks of `threads` threads with `res`'s registers and shared memory resident on one SM.
fn blocks_per_sm(device: &Hardware, threads: u32, res: &KernelResources) -> u64 {
    let threads = threads.max(1) as u64;
    // Registers are allocated per warp in units of 256.
    let warp_registers = (res.registers.max(1) as u64 * 32).div_ceil(256) * 256;
    let by_registers = REGISTERS_PER_SM / (warp_registers * threads.div_ceil(32));
    let by_threads = device.max_threads_per_sm as u64 / threads;
    let by_shared = device.shared_per_sm.checked_div(res.shared_bytes).unwrap_or(u64::MAX);
    by_registers
        .min(by_threads)
        .min(by_shared)
        .min(device.max_blocks_per_sm as u64)
}

/// The widest `ld.global` in the body of entry `kernel` of `ptx`, in bits (0 if none).
pub fn widest_global_load(ptx: &str, kernel: &str) -> u32 {
    let Some(start) = ptx.find(&format!(".entry {kernel}(")) else {
        return 0;
    };
    let body = &ptx[start..];
    let end = body[1..].find(".entry ").map_or(body.len(), |e| e + 1);
    body[..end]
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("ld.global"))
        .map(load_bits)
        .max()
        .unwrap_or(0)
}

/// The width of one `ld.global...` instruction: lanes (`.v2`, `.v4`) times the type's bits.
fn load_bits(instruction: &str) -> u32 {
    let opcode = instruction.split_whitespace().next().unwrap_or("");
    let lanes = match () {
        _ if opcode.contains(".v4.") => 4,
        _ if opcode.contains(".v2.") => 2,
        _ => 1,
    };
    // The type is the last suffix: f32, u64, b16, s8, ...
    let kind = opcode.rsplit('.').next().unwrap_or("");
    let bits = match kind.strip_prefix(['f', 'u', 's', 'b']) {
        Some(digits) => digits.parse().unwrap_or(0),
        None => 0,
    };
    lanes * bits
}

/// The profile as a table, one kernel per line.
pub fn table(profiles: &[KernelProfile]) -> String {
    let mut s = String::from(
        "kernel                           load_bits  per_thread  atomics/1Ki  shuffles/1Ki  regs  spill_B  threads  blocks  blocks/SM  resident/SM  waves  last_wave  instr/LDG128  fallback/LDG128  bar/row  in_flight  KiB/SM\n",
    );
    let per_1k = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for p in profiles {
        let hot = |f: &dyn Fn(&HotLoop) -> String| p.hot_loop.as_ref().map_or("-".to_string(), f);
        let _ = writeln!(
            s,
            "{:<32} {:>9}  {:>10}  {:>11}  {:>12}  {:>4}  {:>7}  {:>7}  {:>6}  {:>9}  {:>11.2}  {:>5.2}  {:>9.2}  {:>12}  {:>15}  {:>7}  {:>9}  {:>6}",
            p.kernel,
            p.load_bits,
            p.per_thread,
            per_1k(p.atomics_per_1k),
            per_1k(p.shuffles_per_1k),
            p.registers,
            p.spill_bytes,
            p.threads,
            p.blocks,
            p.blocks_per_sm,
            p.resident_per_sm,
            p.waves,
            p.last_wave,
            hot(&|h| format!("{:.1}", h.per_wide_load())),
            p.fallback_per_wide.map_or("-".to_string(), |f| format!("{f:.1}")),
            p.barriers_per_row.map_or("-".to_string(), |b| format!("{b:.2}")),
            hot(&|h| h.loads_before_use.to_string()),
            p.in_flight_per_sm.map_or("-".to_string(), |b| format!("{:.1}", b / 1024.0)),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_widths_are_read_from_the_opcode() {
        assert_eq!(load_bits("ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd5];"), 128);
        assert_eq!(load_bits("ld.global.nc.v2.f64 {%fd1, %fd2}, [%rd5];"), 128);
        assert_eq!(load_bits("ld.global.nc.f32 %f1, [%rd5];"), 32);
        assert_eq!(load_bits("ld.global.u64 %rd1, [%rd2];"), 64);
    }

    #[test]
    fn the_widest_load_of_one_entry_is_found() {
        let ptx = ".visible .entry a(\n)\n{\n ld.global.nc.f32 %f1, [%rd1];\n}\n.visible .entry b(\n)\n{\n ld.global.nc.v4.f32 {%f1,%f2,%f3,%f4}, [%rd1];\n ld.global.nc.f32 %f5, [%rd1];\n}\n";
        assert_eq!(widest_global_load(ptx, "a"), 32);
        assert_eq!(widest_global_load(ptx, "b"), 128);
        assert_eq!(widest_global_load(ptx, "c"), 0);
    }
}
