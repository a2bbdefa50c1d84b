//! Timing tables: what the predictor knows about a GPU (paper §4.2).
//!
//! A table is a YAML file for one device, keyed by the device's name, its compute capability
//! and a checksum of the library its routines were measured on ([`library_checksum`]):
//!
//! ```yaml
//! format: 1
//! source: measured            # or `analytic`: an estimate, no measurements
//! device:
//!   name: NVIDIA H100 SXM
//!   compute_capability: "9.0"
//!   sms: 132
//!   max_threads_per_block: 1024
//!   max_threads_per_sm: 2048
//!   max_blocks_per_sm: 32
//!   max_shared_per_block: 232448
//!   shared_per_sm: 233472
//! library_checksum: fnv1a64:0123456789abcdef   # required when `routines` is not empty
//! model:                       # the analytic estimate, used for routines not measured
//!   bandwidth_gb_s: 3000
//!   peak_gflop_s: {f32: 50000, f64: 25000}
//!   launch_us: 3.0
//!   warps_to_saturate_memory: 32
//!   warps_to_saturate_compute: 16
//!   atomic_cost: 2.0
//! routines:                    # measured routine times, one per environment
//!   - {function: gemv, variant: default, routine: load.A, precision: f32,
//!      threads: 256, serial_iterations: 8, shared_bytes: 4096, ns_per_call: 0.012}
//! ```
//!
//! A routine is `load.PARAM` (one per input parameter), `compute`, `store` or `accumulate`
//! (an atomic store of a partial result). `ns_per_call` is the GPU's time per execution of the
//! routine at full load in that environment (threads per block, serial iterations, shared
//! memory per block): a kernel running it N times spends N × ns_per_call on it. The predictor
//! uses the measurement of the nearest environment, and the analytic model for a routine with
//! none. The shipped default, `library/timings/h100-analytic.yaml`, is analytic only.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::explore::environment::Environment;
use crate::library::Library;
use crate::shape::Precision;

/// The format version this build reads.
pub const FORMAT: u32 = 1;

const BUILTIN_FILE: &str = "library/timings/h100-analytic.yaml";
const BUILTIN_TEXT: &str = include_str!("../../../../library/timings/h100-analytic.yaml");

/// A timing table for one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingTable {
    /// Format version, [`FORMAT`].
    pub format: u32,
    /// Whether the figures were measured or estimated.
    pub source: Source,
    /// The hardware measured on and its limits (the `device` of the YAML).
    pub device: Hardware,
    /// Checksum of the library the routines were measured on; `null` for analytic tables.
    #[serde(default)]
    pub library_checksum: Option<String>,
    /// The analytic model.
    pub model: Model,
    /// Measured routine times.
    #[serde(default)]
    pub routines: Vec<Measurement>,
    /// Where the table came from (file name), for messages.
    #[serde(skip)]
    pub origin: String,
}

/// Where the figures of a table come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Estimated from bandwidth, peak and launch figures: no measurements.
    Analytic,
    /// Measured on the device by benchmarking routines.
    Measured,
}

/// The hardware a table was measured on — a GPU, or the CPU backend's threads posing as one —
/// and the limits that decide whether a kernel can launch and how many blocks stay resident.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// Its name (the GPU's, or the CPU model).
    pub name: String,
    /// Compute capability, `major.minor`.
    pub compute_capability: String,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Threads per block at most.
    pub max_threads_per_block: u32,
    /// Resident threads per SM at most.
    pub max_threads_per_sm: u32,
    /// Resident blocks per SM at most.
    pub max_blocks_per_sm: u32,
    /// Shared memory per block at most, bytes.
    pub max_shared_per_block: u64,
    /// Shared memory per SM, bytes.
    pub shared_per_sm: u64,
    /// 32-bit registers per SM.
    #[serde(default = "default_registers_per_sm")]
    pub registers_per_sm: u64,
    /// Whether blocks own whole matrix rows and keep their band of rows on chip, so that a row
    /// sum finished by a block may be read by later calls of the same kernel: true for the CPU
    /// backend (its blocks are threads walking row bands in cache), false for GPUs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub row_barrier: bool,
    /// For a CPU table, what decides the CPU's speed ([`CpuKey`]): a table is used only on a
    /// CPU of a matching key. GPU tables leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuKey>,
}

/// What decides a CPU's speed, the key of a CPU timing table — not its model name, which a
/// hypervisor shows the same for different cores.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuKey {
    /// The instruction set the kernels run on: `avx512`, `avx2+fma`, `neon` or `scalar`.
    pub isa: String,
    /// First-level data cache of a core, bytes.
    pub l1d_bytes: u64,
    /// Second-level cache of a core, bytes.
    pub l2_bytes: u64,
    /// Last-level cache, bytes.
    pub llc_bytes: u64,
    /// Threads fuse runs plans on.
    pub threads: u32,
}

/// Registers per SM of every NVIDIA GPU since sm_50, for tables written before they were recorded.
fn default_registers_per_sm() -> u64 {
    65536
}

/// Compute capability a CPU timing table records: there is none.
pub const CPU_COMPUTE_CAPABILITY: &str = "0.0";

impl Hardware {
    /// Whether it is a CPU (the CPU backend's threads posing as a GPU).
    pub fn is_cpu(&self) -> bool {
        self.compute_capability == CPU_COMPUTE_CAPABILITY
    }
}

/// The analytic model's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Achievable DRAM bandwidth, GB/s.
    pub bandwidth_gb_s: f64,
    /// Arithmetic peak by precision, GFLOP/s.
    pub peak_gflop_s: Peaks,
    /// Overhead of one kernel launch (or memset), µs.
    pub launch_us: f64,
    /// Resident warps per SM that saturate memory bandwidth.
    pub warps_to_saturate_memory: f64,
    /// Resident warps per SM that saturate arithmetic.
    pub warps_to_saturate_compute: f64,
    /// Bytes moved per byte accumulated by an atomic add.
    pub atomic_cost: f64,
    /// Warp instructions one SM issues per µs (GPU: schedulers × clock), against which a BLAS-2
    /// kernel's estimated instructions are timed; absent: not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warp_instructions_per_us: Option<f64>,
    /// CPU: whether a walk through a matrix out of cache prefetches each step's next rows in
    /// software, as measured on the CPU (it helps where the hardware's prefetchers lag, and costs
    /// a few per cent where they keep up); absent: it does. Row blocks walked in passes pull in
    /// some of their next block whatever it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch_ahead: Option<bool>,
    /// CPU: the same for kernels that are beyond the cache a run counts on but part of whose
    /// data is still in the larger cache the CPU shows (a virtual machine shown its host's),
    /// measured where there is such a cache; absent: as `prefetch_ahead`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch_near: Option<bool>,
}

/// A figure per precision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peaks {
    /// For f32.
    pub f32: f64,
    /// For f64.
    pub f64: f64,
}

impl Peaks {
    /// The figure for `precision`.
    pub fn get(&self, precision: Precision) -> f64 {
        match precision {
            Precision::F32 => self.f32,
            Precision::F64 => self.f64,
        }
    }
}

/// One measured routine time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    /// Function name without prefix (`gemv`).
    pub function: String,
    /// Routine variant (`default`).
    pub variant: String,
    /// `load.PARAM`, `compute`, `store` or `accumulate`.
    pub routine: String,
    /// `f32` or `f64`.
    pub precision: String,
    /// Threads per block.
    pub threads: u32,
    /// Instances per block (BLAS-2: tiles across the strip); 1 when left out.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub instances: u32,
    /// Serial iterations per block.
    pub serial_iterations: u32,
    /// Shared memory per block, bytes.
    pub shared_bytes: u64,
    /// Time per execution at full load, ns.
    pub ns_per_call: f64,
}

/// Which routine a time is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutineKey<'a> {
    /// Function name without prefix.
    pub function: &'a str,
    /// Variant name.
    pub variant: &'a str,
    /// Routine name (`load.A`, `compute`, `store`, `accumulate`).
    pub routine: &'a str,
    /// Precision.
    pub precision: Precision,
}

/// A malformed or unreadable timing table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct TimingError {
    /// The table file.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

impl TimingTable {
    /// The table, if it was measured on the kind of machine `words` names: a GPU table ranks
    /// no CPU plans, nor a CPU table GPU ones. Checked before its freshness, so that the advice
    /// for a stale table never names a table of the other kind as the one to re-calibrate.
    pub fn of_kind(self, words: crate::explore::Vocabulary) -> Result<TimingTable, TimingError> {
        use crate::explore::Vocabulary;
        if Vocabulary::of(&self.device) == words {
            return Ok(self);
        }
        let (is, wanted, calibrate) = match words {
            Vocabulary::Cpu => ("a GPU", "the CPU backend needs a CPU table", "--backend cpu"),
            Vocabulary::Gpu => ("a CPU", "GPU plans need a GPU table", "--backend cuda"),
        };
        Err(TimingError {
            message: format!(
                "{is} timing table ({}): {wanted} (see `fuse calibrate {calibrate}`)",
                self.device.name
            ),
            file: self.origin,
        })
    }

    /// The shipped default table (an analytic H100 estimate).
    pub fn builtin() -> Result<TimingTable, TimingError> {
        Self::parse(&format!("built-in {BUILTIN_FILE}"), BUILTIN_TEXT)
    }

    /// Reads the table at `path`.
    pub fn load(path: &Path) -> Result<TimingTable, TimingError> {
        let file = path.display().to_string();
        let text = crate::file::read_text(path, crate::file::ENTRY_LIMIT).map_err(|e| TimingError {
            file: file.clone(),
            message: format!("cannot read the timing table: {e}"),
        })?;
        Self::parse(&file, &text)
    }

    /// Parses and checks table `text`; `file` names it in messages.
    pub fn parse(file: &str, text: &str) -> Result<TimingTable, TimingError> {
        let err = |message: String| TimingError {
            file: file.to_string(),
            message,
        };
        // A file that is not a mapping at all (a wrong path) is named, not echoed back.
        if matches!(serde_yaml::from_str(text), Ok(v) if !matches!(v, serde_yaml::Value::Mapping(_))) {
            return Err(err(
                "not a timing table (a YAML mapping with `format`, `device`, `peaks`, …; see library/timings/)"
                    .to_string(),
            ));
        }
        let mut table: TimingTable = serde_yaml::from_str(text).map_err(|e| {
            let at = e.location().map(|l| format!("{}:{}: ", l.line(), l.column()));
            err(format!("{}malformed timing table: {e}", at.unwrap_or_default()))
        })?;
        table.validate().map_err(err)?;
        table.origin = file.to_string();
        Ok(table)
    }

    fn validate(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "format {} is not supported (this build reads format {FORMAT})",
                self.format
            ));
        }
        let cc_ok = self.device.compute_capability.split_once('.').is_some_and(|(a, b)| {
            !a.is_empty() && !b.is_empty() && (a.chars().chain(b.chars())).all(|c| c.is_ascii_digit())
        });
        if !cc_ok {
            return Err(format!(
                "device.compute_capability `{}` is not like \"9.0\"",
                self.device.compute_capability
            ));
        }
        let d = &self.device;
        let counts = [
            ("device.sms", d.sms as u64),
            ("device.max_threads_per_block", d.max_threads_per_block as u64),
            ("device.max_threads_per_sm", d.max_threads_per_sm as u64),
            ("device.max_blocks_per_sm", d.max_blocks_per_sm as u64),
            ("device.max_shared_per_block", d.max_shared_per_block),
            ("device.shared_per_sm", d.shared_per_sm),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be positive"));
        }
        let m = &self.model;
        let figures = [
            ("model.bandwidth_gb_s", m.bandwidth_gb_s),
            ("model.peak_gflop_s.f32", m.peak_gflop_s.f32),
            ("model.peak_gflop_s.f64", m.peak_gflop_s.f64),
            ("model.warps_to_saturate_memory", m.warps_to_saturate_memory),
            ("model.warps_to_saturate_compute", m.warps_to_saturate_compute),
            ("model.atomic_cost", m.atomic_cost),
        ];
        if let Some((name, v)) = figures.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(format!("{name} must be a positive number, not {v}"));
        }
        if !(m.launch_us.is_finite() && m.launch_us >= 0.0) {
            return Err(format!("model.launch_us must be a number ≥ 0, not {}", m.launch_us));
        }
        self.routines
            .iter()
            .enumerate()
            .try_for_each(|(k, r)| check_measurement(k, r))?;
        if !self.routines.is_empty() && self.library_checksum.is_none() {
            return Err("measured `routines` need the `library_checksum` of the library they were measured on".into());
        }
        Ok(())
    }

    /// One line: `built-in library/timings/h100-analytic.yaml: NVIDIA H100 SXM (analytic estimate), sm_90, analytic estimate — not measured`.
    pub fn describe(&self) -> String {
        let source = match self.source {
            Source::Analytic => "analytic estimate — not measured".to_string(),
            Source::Measured => format!("{} measured routines", self.routines.len()),
        };
        // CPU tables record no compute capability: no CUDA architecture to name.
        let arch = match self.device.is_cpu() {
            true => "CPU".to_string(),
            false => format!("sm_{}", self.device.compute_capability.replace('.', "")),
        };
        format!("{}: {}, {arch}, {source}", self.origin, self.device.name)
    }

    /// Why the measurements cannot be used with a library of checksum `library`, if they cannot.
    pub fn mismatch(&self, library: &str) -> Option<String> {
        match &self.library_checksum {
            Some(sum) if !self.routines.is_empty() && sum != library => Some(format!(
                "{} was measured on library {sum}, not on this one ({library}): its routine times are ignored, the analytic model is used",
                self.origin
            )),
            _ => None,
        }
    }

    /// The measured ns per call of `key` in the environment nearest to `env` (threads,
    /// instances, serial iterations, shared bytes), if the routine was measured.
    pub fn measured(&self, key: &RoutineKey, env: &Environment) -> Option<f64> {
        let distance = |m: &Measurement| {
            let log = |a: f64, b: f64| (a.max(1.0).log2() - b.max(1.0).log2()).abs();
            log(m.threads as f64, env.threads as f64)
                + log(m.instances as f64, env.instances as f64)
                + log(m.serial_iterations as f64, env.serial_iterations as f64)
                + log((m.shared_bytes + 1024) as f64, (env.shared_bytes + 1024) as f64)
        };
        self.routines
            .iter()
            .filter(|m| {
                m.function == key.function
                    && m.variant == key.variant
                    && m.routine == key.routine
                    && m.precision == key.precision.name()
            })
            .map(|m| (distance(m), m.ns_per_call))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, ns)| ns)
    }
}

fn check_measurement(k: usize, r: &Measurement) -> Result<(), String> {
    let at = format!("routines[{k}] ({} {} {})", r.function, r.variant, r.routine);
    let routine_ok = matches!(r.routine.as_str(), "compute" | "store" | "accumulate")
        || r.routine.strip_prefix("load.").is_some_and(|p| !p.is_empty());
    if !routine_ok {
        return Err(format!(
            "{at}: routine must be load.PARAM, compute, store or accumulate"
        ));
    }
    if !matches!(r.precision.as_str(), "f32" | "f64") {
        return Err(format!("{at}: precision `{}` is not f32 or f64", r.precision));
    }
    if r.threads == 0 || r.serial_iterations == 0 {
        return Err(format!("{at}: threads and serial_iterations must be positive"));
    }
    if !(r.ns_per_call.is_finite() && r.ns_per_call >= 0.0) {
        return Err(format!("{at}: ns_per_call must be a number ≥ 0, not {}", r.ns_per_call));
    }
    Ok(())
}

/// The generation of kernel designs routine timings were measured on: part of the library
/// checksum, so that a table measured on kernels the generator no longer emits is not trusted.
/// Change it whenever the generated code of a routine changes how fast it runs.
pub const KERNEL_DESIGN: &str = "strips-1 (BLAS-2 over row strips, 16-byte accesses)";

/// A checksum of everything in `library` that routine timings depend on: each function's
/// name, kind, precisions, signatures and formulas (not comments or file names), and the
/// [`KERNEL_DESIGN`] they are generated with.
pub fn library_checksum(library: &Library) -> String {
    let mut canonical = format!("{KERNEL_DESIGN}\n");
    let functions: BTreeMap<&str, _> = library.functions().map(|f| (f.name.as_str(), f)).collect();
    for (name, f) in functions {
        let _ = write!(canonical, "{name}|{}|{:?}", f.kind, f.precisions);
        for form in &f.forms {
            let params: Vec<String> = form
                .signature
                .params
                .iter()
                .map(|p| format!("{}{}", p.name, p.shape))
                .collect();
            let _ = write!(
                canonical,
                "|({})->{}:{}",
                params.join(","),
                form.signature.result,
                form.formula_text
            );
        }
        canonical.push('\n');
    }
    format!("fnv1a64:{:016x}", fnv1a64(canonical.as_bytes()))
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// One step of a calibration (CPU or GPU) that writes a timing table, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct CalibrationStep<'a> {
    /// Steps done before this one.
    pub done: usize,
    /// Steps in all.
    pub total: usize,
    /// What is measured now.
    pub what: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_routines(extra: &str) -> String {
        BUILTIN_TEXT
            .replace("library_checksum: null", "library_checksum: fnv1a64:0000000000000001")
            .replace("routines: []", extra)
    }

    #[test]
    fn the_builtin_table_is_an_analytic_h100_estimate() {
        let t = TimingTable::builtin().unwrap();
        assert_eq!(t.source, Source::Analytic);
        assert_eq!(t.device.compute_capability, "9.0");
        assert!(
            t.describe().contains("analytic estimate — not measured"),
            "{}",
            t.describe()
        );
        assert!(BUILTIN_TEXT.starts_with("# fuse timing table — ANALYTIC ESTIMATE, NOT MEASURED."));
    }

    /// A CPU table's measured choice of prefetching ahead is read and written; tables without
    /// it (every GPU table, the shipped CPU ones) leave it unsaid.
    #[test]
    fn a_tables_prefetching_choice_is_optional_and_kept() {
        assert_eq!(TimingTable::builtin().unwrap().model.prefetch_ahead, None);
        let text = BUILTIN_TEXT.replace(
            "atomic_cost: 16.0 ",
            "atomic_cost: 16.0\n  prefetch_ahead: false\n  prefetch_near: true ",
        );
        let table = TimingTable::parse("t.yaml", &text).unwrap();
        assert_eq!(
            (table.model.prefetch_ahead, table.model.prefetch_near),
            (Some(false), Some(true))
        );
        let again = TimingTable::parse("u.yaml", &serde_yaml::to_string(&table).unwrap()).unwrap();
        assert_eq!(
            (again.model.prefetch_ahead, again.model.prefetch_near),
            (Some(false), Some(true))
        );
        let builtin = serde_yaml::to_string(&TimingTable::builtin().unwrap()).unwrap();
        assert!(!builtin.contains("prefetch_ahead") && !builtin.contains("prefetch_near"));
    }

    #[test]
    fn malformed_tables_name_the_file_and_the_problem() {
        let cases = [
            ("format: [", "malformed timing table"),
            ("root:x:0:0:root:/root:/bin/bash", "not a timing table"),
            (&BUILTIN_TEXT.replace("format: 1", "format: 7") as &str, "format 7"),
            (&BUILTIN_TEXT.replace("sms: 132", "sms: 0"), "device.sms must be positive"),
            (&BUILTIN_TEXT.replace("bandwidth_gb_s: 3000", "bandwidth_gb_s: -1"), "model.bandwidth_gb_s"),
            (&BUILTIN_TEXT.replace("\"9.0\"", "nine"), "compute_capability"),
            (&BUILTIN_TEXT.replace("atomic_cost: 16.0 ", "atomic_cost: 16.0\n  colour: red "), "unknown field"),
            (
                &BUILTIN_TEXT.replace(
                    "routines: []",
                    "routines: [{function: dot, variant: default, routine: compute, precision: f32, threads: 32, serial_iterations: 1, shared_bytes: 0, ns_per_call: 1}]",
                ),
                "library_checksum",
            ),
            (
                &with_routines("routines: [{function: dot, variant: default, routine: fetch, precision: f32, threads: 32, serial_iterations: 1, shared_bytes: 0, ns_per_call: 1}]"),
                "routine must be",
            ),
        ];
        for (text, want) in cases {
            let err = TimingTable::parse("t.yaml", text).unwrap_err().to_string();
            assert!(err.starts_with("t.yaml: "), "{err}");
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn measurements_are_looked_up_in_the_nearest_environment() {
        let row = |threads: u32, instances: u32, ns: f64| {
            format!("  - {{function: dot, variant: default, routine: load.x, precision: f32, threads: {threads}, instances: {instances}, serial_iterations: 4, shared_bytes: 0, ns_per_call: {ns}}}\n")
        };
        let text = with_routines(&format!(
            "routines:\n{}{}{}",
            row(64, 1, 1.0),
            row(512, 1, 2.0),
            row(512, 32, 3.0)
        ));
        let t = TimingTable::parse("t.yaml", &text).unwrap();
        let key = RoutineKey {
            function: "dot",
            variant: "default",
            routine: "load.x",
            precision: Precision::F32,
        };
        let env = |threads: u32, instances: u32| Environment {
            threads,
            instances,
            lane_bytes: None,
            registers: None,
            serial_iterations: 4,
            shared_bytes: 0,
            blocks: 1,
        };
        assert_eq!(t.measured(&key, &env(128, 1)), Some(1.0));
        assert_eq!(t.measured(&key, &env(1024, 1)), Some(2.0));
        assert_eq!(t.measured(&key, &env(1024, 16)), Some(3.0));
        let other = RoutineKey {
            routine: "load.y",
            ..key
        };
        assert_eq!(t.measured(&other, &env(128, 1)), None);
        assert!(t.mismatch("fnv1a64:0000000000000002").unwrap().contains("ignored"));
        assert_eq!(t.mismatch("fnv1a64:0000000000000001"), None);
    }

    #[test]
    fn the_library_checksum_is_stable_and_sensitive() {
        let builtin = Library::builtin().unwrap();
        assert_eq!(
            library_checksum(&builtin),
            library_checksum(&Library::builtin().unwrap())
        );
        let one = Library::from_sources(
            [(
                "a.yaml".to_string(),
                "name: copy\nkind: map\nforms:\n  - signature: (x[n]) -> [n]\n    formula: out[i] = x[i]\n".to_string(),
            )],
            "t",
        )
        .unwrap();
        assert_ne!(library_checksum(&builtin), library_checksum(&one));
    }
}
