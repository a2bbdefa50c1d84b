//! Prediction (paper §4.2): a kernel's time is the sum of its routines' times, transfers and
//! compute summed separately, `max(transfer, compute)` for their overlap, combined with the
//! time to issue its instructions where the model has an issue rate (GPU BLAS-2: per-row
//! sums, barriers and atomics cost instructions no byte count shows), **plus the launch
//! overhead** (the paper ignored it and ranked unfused AXPYDOT first), plus the work that
//! finishes partial reductions after the kernel.
//!
//! A routine's time comes from the timing table: its measurement in the nearest environment,
//! or the analytic model: bytes over bandwidth (loads, stores) or flops over peak (compute),
//! divided by an efficiency of the environment: the share of SMs the grid keeps busy times the
//! resident warps per SM (limited by threads, shared memory and registers per block) against
//! the warps needed to saturate the unit, a partly filled last wave counted at its own warps.
//! Memory needs bytes in flight: the model's figure is for threads that keep 16 bytes of a
//! matrix row in flight; a strip thread holding fewer needs proportionally more resident
//! warps, one holding more needs fewer — on the H100, 4-byte tiles ran BLAS-2 at 37–40 % of the
//! bandwidth where 16-byte accesses, eight in flight, reached 96 %. Everything here is a pure
//! function of its inputs.

use serde::{Deserialize, Serialize};

use crate::explore::environment::Environment;
use crate::explore::timing::{RoutineKey, TimingTable};

/// Warps are 32 threads.
const WARP: f64 = 32.0;
/// Bytes of a matrix row in flight per thread that `warps_to_saturate_memory` is stated for.
const REFERENCE_LANE_BYTES: f64 = 16.0;

/// The predicted time of one kernel, µs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct KernelTime {
    /// Loads and stores (including atomic accumulation).
    pub transfer_us: f64,
    /// Compute routines.
    pub compute_us: f64,
    /// Issuing the kernel's instructions (GPU BLAS-2, where the model has an issue rate).
    #[serde(default)]
    pub issue_us: f64,
    /// Launch overhead: the kernel's, plus a memset or finishing kernel where one is needed.
    pub launch_us: f64,
    /// Memory work of zeroing atomically accumulated outputs or of the finishing kernel.
    pub finish_us: f64,
    /// `max(transfer, compute) ⊕ issue + launch + finish`, where `a ⊕ b = √(a² + b²)`.
    pub total_us: f64,
}

impl KernelTime {
    /// Adds up the parts. Loads in flight and instructions issuing overlap, but not wholly: a
    /// kernel whose issue time nears its memory time reaches neither peak (a block spending
    /// its cycles on per-row sums and barriers keeps fewer loads in flight), so the two add
    /// as the sides of a right triangle — the larger dominates, the smaller still counts.
    pub fn new(transfer_us: f64, compute_us: f64, issue_us: f64, launch_us: f64, finish_us: f64) -> Self {
        KernelTime {
            transfer_us,
            compute_us,
            issue_us,
            launch_us,
            finish_us,
            total_us: transfer_us.max(compute_us).hypot(issue_us) + launch_us + finish_us,
        }
    }
}

/// What one execution of a routine does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Moves this many bytes between global memory and the chip.
    Bytes(u64),
    /// Performs this many arithmetic operations.
    Flops(u64),
}

/// A routine of a kernel and how many times the kernel runs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutineRun<'a> {
    /// Which routine.
    pub key: RoutineKey<'a>,
    /// Executions in the whole grid.
    pub runs: u64,
    /// Work per execution.
    pub work: Work,
}

/// Work after the kernel proper, to finish its partial reductions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FinishWork {
    /// Extra launches (a memset before atomics, a finishing kernel).
    pub launches: u32,
    /// Bytes those move.
    pub bytes: u64,
}

/// Predicts routine and kernel times from a timing table.
#[derive(Debug, Clone, Copy)]
pub struct Predictor<'t> {
    table: &'t TimingTable,
    measured: bool,
}

impl<'t> Predictor<'t> {
    /// A predictor over `table`; `use_measurements` is false when the table was measured on
    /// another library.
    pub fn new(table: &'t TimingTable, use_measurements: bool) -> Self {
        Predictor {
            table,
            measured: use_measurements && !table.routines.is_empty(),
        }
    }

    /// The table predictions come from.
    pub fn table(&self) -> &'t TimingTable {
        self.table
    }

    /// Blocks of `env` that fit on one SM at once — by threads, shared memory and registers
    /// (allocated per warp in units of 256) — 0 when a block does not fit at all.
    pub fn resident_blocks(&self, env: &Environment) -> u64 {
        let d = &self.table.device;
        if env.threads > d.max_threads_per_block || env.shared_bytes > d.max_shared_per_block {
            return 0;
        }
        let by_threads = (d.max_threads_per_sm / env.threads.max(1)) as u64;
        let by_shared = d.shared_per_sm.checked_div(env.shared_bytes).unwrap_or(u64::MAX);
        let warps = (env.threads as u64).div_ceil(WARP as u64);
        let by_registers = match env.registers {
            Some(r) => d.registers_per_sm / (r.div_ceil(8).saturating_mul(8 * WARP as u64 * warps)).max(1),
            None => u64::MAX,
        };
        by_threads
            .min(by_shared)
            .min(by_registers)
            .min(d.max_blocks_per_sm as u64)
    }

    /// The fraction of a unit's peak a kernel in `env` reaches when `saturating_warps`
    /// resident warps per SM saturate it. A grid of several waves runs its full waves at the
    /// occupancy limit and its last, partly filled one with fewer warps on each SM.
    pub fn efficiency(&self, env: &Environment, saturating_warps: f64) -> f64 {
        let resident = self.resident_blocks(env).max(1) as f64;
        let per_sm = env.blocks.max(1) as f64 / self.table.device.sms as f64;
        let warps_per_block = env.threads as f64 / WARP;
        let at = |blocks_per_sm: f64| (blocks_per_sm * warps_per_block / saturating_warps).min(1.0);
        let waves = per_sm / resident;
        if waves <= 1.0 {
            return per_sm.min(1.0) * at(per_sm.max(1.0));
        }
        let (full, last) = (waves.floor(), waves.fract());
        // Time in units of a full wave at full speed: each wave's share of the work over its speed.
        let time = full / at(resident) + last / at(last * resident).max(f64::MIN_POSITIVE);
        waves / time
    }

    /// The time of all runs of one routine, µs.
    pub fn routine_us(&self, run: &RoutineRun, env: &Environment) -> f64 {
        if self.measured {
            if let Some(ns) = self.table.measured(&run.key, env) {
                return run.runs as f64 * ns / 1000.0;
            }
        }
        let model = &self.table.model;
        match run.work {
            Work::Bytes(b) => {
                let saturating = match env.lane_bytes {
                    Some(bytes) => model.warps_to_saturate_memory * REFERENCE_LANE_BYTES / bytes.max(1) as f64,
                    None => model.warps_to_saturate_memory,
                };
                let per_us = model.bandwidth_gb_s * 1e3 * self.efficiency(env, saturating.max(1.0));
                (run.runs * b) as f64 / per_us
            }
            Work::Flops(f) => {
                let peak = model.peak_gflop_s.get(run.key.precision);
                let per_us = peak * 1e3 * self.efficiency(env, model.warps_to_saturate_compute);
                (run.runs * f) as f64 / per_us
            }
        }
    }

    /// The time of a kernel running `routines` in `env` with `warp_instructions` issued in all
    /// (0: not estimated), then `finish`.
    pub fn kernel(
        &self,
        routines: &[RoutineRun],
        env: &Environment,
        warp_instructions: u64,
        finish: FinishWork,
    ) -> KernelTime {
        let (mut transfer, mut compute) = (0.0, 0.0);
        for run in routines {
            let t = self.routine_us(run, env);
            match run.work {
                Work::Bytes(_) => transfer += t,
                Work::Flops(_) => compute += t,
            }
        }
        let model = &self.table.model;
        let launch = model.launch_us * (1 + finish.launches) as f64;
        let finish_us = finish.bytes as f64 / (model.bandwidth_gb_s * 1e3);
        let issue = match model.warp_instructions_per_us {
            Some(rate) if warp_instructions > 0 => {
                let per_us =
                    rate * self.table.device.sms as f64 * self.efficiency(env, model.warps_to_saturate_compute);
                warp_instructions as f64 / per_us
            }
            _ => 0.0,
        };
        KernelTime::new(transfer, compute, issue, launch, finish_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Precision;

    /// 100 waves of 8 blocks on each of the H100's 132 SMs (and of 2, 4 or 1): no partial wave.
    const WHOLE_WAVES: u64 = 132 * 8 * 100;

    fn env(threads: u32, shared: u64, blocks: u64) -> Environment {
        Environment {
            threads,
            instances: 1,
            lane_bytes: None,
            registers: None,
            serial_iterations: 1,
            shared_bytes: shared,
            blocks,
        }
    }

    #[test]
    fn efficiency_follows_occupancy_and_grid_size() {
        let table = TimingTable::builtin().unwrap();
        let p = Predictor::new(&table, true);
        // Plenty of blocks, 64 resident warps per SM: saturated.
        assert_eq!(p.efficiency(&env(256, 4096, WHOLE_WAVES), 32.0), 1.0);
        // Shared memory limits residency to 2 blocks of 2 warps.
        let starved = p.efficiency(&env(64, 100_000, WHOLE_WAVES), 32.0);
        assert!((starved - 4.0 / 32.0).abs() < 1e-12, "{starved}");
        // Half the SMs idle.
        assert!((p.efficiency(&env(1024, 0, 66), 32.0) - 0.5).abs() < 1e-12);
        assert_eq!(p.resident_blocks(&env(2048, 0, 1)), 0);
    }

    #[test]
    fn registers_limit_the_blocks_resident() {
        let table = TimingTable::builtin().unwrap();
        let p = Predictor::new(&table, true);
        let with = |registers: u64| Environment {
            registers: Some(registers),
            ..env(256, 0, WHOLE_WAVES)
        };
        // 8 warps of 32 threads × 128 registers: two blocks of 65536 registers.
        assert_eq!(p.resident_blocks(&with(128)), 2);
        // Allocated in units of 8 per thread: 121 takes 128.
        assert_eq!(p.resident_blocks(&with(121)), 2);
        assert_eq!(p.resident_blocks(&with(255)), 1);
        assert_eq!(p.resident_blocks(&with(32)), 8);
    }

    #[test]
    fn a_partly_filled_last_wave_runs_with_fewer_warps() {
        let table = TimingTable::builtin().unwrap();
        let p = Predictor::new(&table, true);
        // 264 blocks of 8 warps, 1 resident per SM at 255 registers: two whole waves.
        let grid = |blocks: u64| Environment {
            registers: Some(255),
            ..env(256, 0, blocks)
        };
        assert_eq!(p.efficiency(&grid(264), 8.0), 1.0);
        // 1.25 waves, the last a quarter full: a quarter of the warps for a fifth of the work.
        // Time 1 + 0.25 / 0.25 = 2 waves' worth for 1.25 waves of work.
        let e = p.efficiency(&grid(165), 32.0);
        assert!((e - 0.25 * 1.25 / (1.0 + 1.0)).abs() < 1e-12, "{e}");
    }

    #[test]
    fn measured_routines_override_the_model_unless_the_library_differs() {
        let text = std::fs::read_to_string("../../library/timings/h100-analytic.yaml")
            .unwrap()
            .replace("library_checksum: null", "library_checksum: fnv1a64:0000000000000001")
            .replace(
                "routines: []",
                "routines: [{function: copy, variant: default, routine: load.x, precision: f32, threads: 256, serial_iterations: 1, shared_bytes: 0, ns_per_call: 2.0}]",
            );
        let table = TimingTable::parse("m.yaml", &text).unwrap();
        let run = RoutineRun {
            key: RoutineKey {
                function: "copy",
                variant: "default",
                routine: "load.x",
                precision: Precision::F32,
            },
            runs: 1000,
            work: Work::Bytes(128),
        };
        let e = env(256, 0, WHOLE_WAVES);
        assert_eq!(Predictor::new(&table, true).routine_us(&run, &e), 2.0);
        let analytic = Predictor::new(&table, false).routine_us(&run, &e);
        assert!((analytic - 128_000.0 / 3e6).abs() < 1e-12, "{analytic}");
    }

    #[test]
    fn a_kernel_overlaps_transfer_and_compute_and_pays_its_launch() {
        let table = TimingTable::builtin().unwrap();
        let p = Predictor::new(&table, true);
        let key = RoutineKey {
            function: "copy",
            variant: "default",
            routine: "load.x",
            precision: Precision::F32,
        };
        let load = RoutineRun {
            key,
            runs: 1000,
            work: Work::Bytes(3_000_000),
        };
        let compute = RoutineRun {
            key: RoutineKey {
                routine: "compute",
                ..key
            },
            runs: 1000,
            work: Work::Flops(1000),
        };
        let t = p.kernel(&[load, compute], &env(256, 0, WHOLE_WAVES), 0, FinishWork::default());
        assert!((t.transfer_us - 1000.0).abs() < 1e-9, "{t:?}");
        assert!((t.total_us - 1003.0).abs() < 1e-9, "{t:?}");
        // Issue time adds to memory time as a right triangle's sides.
        let issued = p.kernel(
            &[load],
            &env(256, 0, WHOLE_WAVES),
            7000 * 132 * 750,
            FinishWork::default(),
        );
        assert!((issued.issue_us - 750.0).abs() < 1e-9, "{issued:?}");
        assert!((issued.total_us - (1250.0 + 3.0)).abs() < 1e-9, "{issued:?}");
        let f = p.kernel(
            &[load],
            &env(256, 0, WHOLE_WAVES),
            0,
            FinishWork {
                launches: 1,
                bytes: 3000,
            },
        );
        assert!((f.total_us - (1000.0 + 6.0 + 0.001)).abs() < 1e-9, "{f:?}");
    }
}
