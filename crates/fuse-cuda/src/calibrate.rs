//! `fuse calibrate` on a GPU (paper §4.2): a timing table measured on this device.
//!
//! What is measured, each with CUDA events, warm-up and the median of repeats:
//!
//! - the device-to-device copy bandwidth (bytes read + written), the model's bandwidth;
//! - the launch overhead: back-to-back launches of an empty kernel;
//! - the f32 and f64 multiply-add peaks;
//! - every routine of the library in simulated fusion environments: the generated kernel of
//!   every form of every function, alone, in each environment — instances per block, serial
//!   iterations, and extra (unused) shared memory that lowers occupancy the way a larger fusion
//!   would — at sizes well beyond the L2 cache, with the cache flushed before each run.
//!
//! A kernel's time, less its launches and the finishing work the predictor charges separately,
//! is its transfer time (these kernels are memory-bound); it is split among the kernel's load,
//! store and accumulate routines in proportion to the bytes each moves
//! ([`fuse_core::explore::implementation_with`] lists them, with their executions), giving each
//! routine's ns per execution in that environment. Compute routines keep the analytic model
//! (measured peaks): in a memory-bound kernel their time hides under the transfers.

use std::collections::BTreeMap;

use cudarc::driver::{LaunchConfig, PushKernelArg};
use fuse_codegen::generate::{generate, KernelGroup};
use fuse_core::data::fill_random_inputs;
use fuse_core::explore::timing::{Measurement, Model, Peaks, Source, TimingTable, FORMAT};
use fuse_core::explore::{implementation_with, library_checksum, Axis, Block, Context, Predictor, Work};
use fuse_core::library::{ElementaryFunction, Form};
use fuse_core::{script, Bindings, HigherOrderKind, Library, Precision, Program, Shape};

use crate::cache::ModuleCache;
use crate::device::Device;
use crate::error::{driver, CudaError};
use crate::kernels::{self, FMA_CHAINS};
use crate::plan::CudaPlan;
use crate::timer::{Timer, TimingOptions};

/// Empty-kernel launches per timed run of the launch overhead.
const LAUNCHES: usize = 1000;
/// Multiply-add iterations per thread of the peak kernels.
const FMA_ITERATIONS: i32 = 1 << 14;

/// What to measure at which sizes.
#[derive(Debug, Clone, Copy)]
pub struct CalibrateOptions {
    /// Timing of every measurement (the L2 flush applies to routine kernels only).
    pub timing: TimingOptions,
    /// Elements of each vector of a BLAS-1 routine kernel.
    pub vector_len: usize,
    /// (rows, columns) of each matrix of a BLAS-2 routine kernel.
    pub matrix: (usize, usize),
    /// Bytes of each buffer of the copy-bandwidth measurement.
    pub copy_bytes: usize,
}

impl Default for CalibrateOptions {
    /// 2²⁴-element vectors and 4096×8192 matrices (64 MiB and 128 MiB in f32, beyond any L2 of
    /// today), a 512 MiB copy, 3 warm-up runs and the median of 20.
    fn default() -> Self {
        CalibrateOptions {
            timing: TimingOptions {
                warmup: 3,
                runs: 20,
                flush_l2: true,
            },
            vector_len: 1 << 24,
            matrix: (4096, 8192),
            copy_bytes: 512 << 20,
        }
    }
}

pub use fuse_core::explore::timing::CalibrationStep as Step;

/// A calibration's table and headline figures.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The table.
    pub table: TimingTable,
    /// Kernels timed.
    pub kernels: usize,
    /// Forms that could not be measured, and why.
    pub notes: Vec<String>,
}

/// One simulated environment of a routine kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Environment {
    block: Block,
    serial: u32,
    walk: Option<Axis>,
    extra_shared: u32,
}

/// The environments measured: for BLAS-1, 1, 8 and 32 warps per block by 1 to 64 serial
/// iterations, and two occupancy-lowering shared-memory sizes; for BLAS-2, 8 warps over strips
/// 4, 8 and 16 tiles across (the widths the explorer chooses from, bar 32), both walks by 1 to
/// 64 serial iterations, 4 and 32 warps over strips of 32 and 4 tiles, 16 warps over whole
/// rows, and the same shared sizes.
fn environments(nested: bool) -> Vec<Environment> {
    let mut out = Vec::new();
    let serials = [1, 4, 16, 64];
    let shared = [24 << 10, 96 << 10];
    if nested {
        let strip = Block::new;
        // Every one fits the 48 KiB column-sum exchange in f64 too.
        for width in [4, 8, 16] {
            for walk in [Axis::Rows, Axis::Columns] {
                for serial in serials {
                    out.push(env(strip(256, width), serial, Some(walk), 0));
                }
            }
        }
        for (threads, width) in [(128, 32), (1024, 4)] {
            out.push(env(strip(threads, width), 4, Some(Axis::Rows), 0));
        }
        // Whole rows of the calibration matrix's 8192 columns: 4 (f32) or 8 (f64) vector
        // loads per thread.
        let whole = Block {
            whole_rows: true,
            ..Block::new(512, 256)
        };
        out.push(env(whole, 4, Some(Axis::Rows), 0));
        for extra in shared {
            out.push(env(strip(256, 16), 4, Some(Axis::Rows), extra));
        }
    } else {
        for instances in [1, 8, 32] {
            let block = Block::new(32 * instances, instances);
            for serial in serials {
                out.push(env(block, serial, None, 0));
            }
        }
        let block = Block::new(256, 8);
        for extra in shared {
            out.push(env(block, 4, None, extra));
        }
    }
    out
}

fn env(block: Block, serial: u32, walk: Option<Axis>, extra_shared: u32) -> Environment {
    Environment {
        block,
        serial,
        walk,
        extra_shared,
    }
}

/// A routine kernel to measure: one form of one function in one precision.
struct Subject<'l> {
    function: &'l ElementaryFunction,
    form: usize,
    precision: Precision,
}

/// Measures `device` for `library`; `progress` hears of every step before it runs.
pub fn calibrate(
    device: &Device,
    library: &Library,
    options: &CalibrateOptions,
    progress: &mut dyn FnMut(Step),
) -> Result<Calibration, CudaError> {
    let subjects: Vec<Subject> = timed_functions(library)
        .flat_map(|f| {
            let forms = 0..f.forms.len();
            forms.flat_map(move |form| {
                (f.precisions.iter()).map(move |&precision| Subject {
                    function: f,
                    form,
                    precision,
                })
            })
        })
        .collect();
    let total = 4 + subjects.len();
    let cache = ModuleCache::default_location();
    let runtime = kernels::load(device, &cache)?;
    progress(Step {
        done: 0,
        total,
        what: "copy bandwidth",
    });
    let bandwidth = copy_bandwidth(device, options.copy_bytes, &options.timing)?;
    progress(Step {
        done: 1,
        total,
        what: "launch overhead",
    });
    let launch_us = launch_overhead_us(device, &runtime)?;
    progress(Step {
        done: 2,
        total,
        what: "arithmetic peak",
    });
    let peak = Peaks {
        f32: peak_gflops(device, &runtime, Precision::F32)?,
        f64: peak_gflops(device, &runtime, Precision::F64)?,
    };
    let mut table = TimingTable {
        format: FORMAT,
        source: Source::Measured,
        device: device.info().timing_hardware(),
        library_checksum: Some(library_checksum(library)),
        model: model(bandwidth, peak, launch_us)?,
        routines: Vec::new(),
        origin: String::new(),
    };
    let mut rows = Rows::default();
    let (mut kernels, mut notes) = (0, Vec::new());
    for (k, subject) in subjects.iter().enumerate() {
        let what = format!(
            "{}{} (form {}/{})",
            subject.precision.prefix(),
            subject.function.name,
            subject.form + 1,
            subject.function.forms.len()
        );
        progress(Step {
            done: 3 + k,
            total,
            what: &what,
        });
        match measure(device, library, &table, subject, options, &cache, &mut rows) {
            Ok(timed) => kernels += timed,
            Err(e) => notes.push(format!("{what} not measured: {e}")),
        }
    }
    progress(Step {
        done: total - 1,
        total,
        what: "writing the table",
    });
    table.routines = rows.into_measurements();
    Ok(Calibration { table, kernels, notes })
}

/// The model of a measured table: the measured bandwidth, peaks and launch overhead; the
/// occupancy figures the analytic estimate uses (not measured).
fn model(bandwidth: f64, peak: Peaks, launch_us: f64) -> Result<Model, CudaError> {
    let estimate = TimingTable::builtin()?.model;
    Ok(Model {
        bandwidth_gb_s: round(bandwidth, 1),
        peak_gflop_s: Peaks {
            f32: round(peak.f32, 0),
            f64: round(peak.f64, 0),
        },
        launch_us: round(launch_us, 3),
        ..estimate
    })
}

fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// A routine in an environment: function, variant, routine, precision, threads, instances,
/// serial iterations, shared bytes.
type RowKey = (String, String, String, &'static str, u32, u32, u32, u64);

/// Routine times by routine and environment, averaged over the kernels that measured them.
#[derive(Default)]
struct Rows(BTreeMap<RowKey, Vec<f64>>);

impl Rows {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        function: &str,
        variant: &str,
        routine: &str,
        precision: Precision,
        env: (u32, u32, u32, u64),
        ns: f64,
    ) {
        let key = (
            function.to_string(),
            variant.to_string(),
            routine.to_string(),
            precision.name(),
            env.0,
            env.1,
            env.2,
            env.3,
        );
        self.0.entry(key).or_default().push(ns);
    }

    fn into_measurements(self) -> Vec<Measurement> {
        self.0
            .into_iter()
            .map(
                |((function, variant, routine, precision, threads, instances, serial, shared), ns)| Measurement {
                    function,
                    variant,
                    routine,
                    precision: precision.to_string(),
                    threads,
                    instances,
                    serial_iterations: serial,
                    shared_bytes: shared,
                    ns_per_call: round(ns.iter().sum::<f64>() / ns.len() as f64, 5),
                },
            )
            .collect()
    }
}

/// Times `subject`'s kernel in every environment and records its routines; returns the number
/// of kernels timed.
fn measure(
    device: &Device,
    library: &Library,
    table: &TimingTable,
    subject: &Subject,
    options: &CalibrateOptions,
    cache: &ModuleCache,
    rows: &mut Rows,
) -> Result<usize, CudaError> {
    let form = &subject.function.forms[subject.form];
    let nested = matches!(
        subject.function.kind,
        HigherOrderKind::NestedMap | HigherOrderKind::NestedReduce
    );
    let text = one_call_script(subject.function, form, subject.precision, options, nested);
    let name = format!("calibrate-{}{}.yaml", subject.precision.prefix(), subject.function.name);
    let program = script::parse(&name, &text, library).map_err(|e| CudaError::Unsupported(e.to_string()))?;
    let sizes = program.sizes.clone();
    let mut inputs = Bindings::new();
    fill_random_inputs(&program, &sizes, 1, &mut inputs);
    let predictor = Predictor::new(table, false);
    let ctx = Context::new(&program, &sizes);
    let timer = Timer::new(device, options.timing.flush_l2)?;
    let mut timed = 0;
    for env in environments(nested) {
        let (imp, shares) = implementation_with(&ctx, &[0], env.block, env.serial, env.walk, &predictor);
        let group = KernelGroup::of(&imp);
        let mut plan = CudaPlan::compile_with(generate(&program, &[group])?, device, cache)?;
        plan.set_extra_shared(env.extra_shared)?;
        let mut workspace = plan.prepare(&program, &sizes, &inputs)?;
        let timing = timer.time(&options.timing, &mut || plan.enqueue(&mut workspace))?;
        timed += 1;
        let transfer_us = (timing.median_us - imp.time.launch_us - imp.time.finish_us).max(0.01 * timing.median_us);
        let moved: u64 = shares.iter().map(|s| s.runs * bytes(s.work)).sum();
        let shared = imp.launch.shared_bytes + env.extra_shared as u64;
        let at = (
            env.block.threads,
            env.block.instances,
            imp.launch.serial_iterations,
            shared,
        );
        for share in shares.iter().filter(|s| bytes(s.work) > 0) {
            let ns = transfer_us * 1e3 * bytes(share.work) as f64 / moved.max(1) as f64;
            rows.add(
                &share.function,
                &share.variant,
                &share.routine,
                subject.precision,
                at,
                ns,
            );
        }
    }
    Ok(timed)
}

fn bytes(work: Work) -> u64 {
    match work {
        Work::Bytes(b) => b,
        Work::Flops(_) => 0,
    }
}

/// A script calling `form` of `f` once on inputs beyond the L2 cache: every vector symbol of a
/// BLAS-1 form is `options.vector_len`; a BLAS-2 form's matrix is `options.matrix`.
fn one_call_script(
    f: &ElementaryFunction,
    form: &Form,
    precision: Precision,
    options: &CalibrateOptions,
    nested: bool,
) -> String {
    let params = &form.signature.params;
    let matrix_dims: Vec<String> = params
        .iter()
        .find_map(|p| match &p.shape {
            Shape::Matrix(r, c) => Some(vec![r.clone(), c.clone()]),
            _ => None,
        })
        .unwrap_or_default();
    let extent = |symbol: &str| match (nested, matrix_dims.iter().position(|d| d == symbol)) {
        (true, Some(0)) => options.matrix.0,
        (true, _) => options.matrix.1,
        (false, _) => options.vector_len,
    };
    let mut symbols: Vec<String> = Vec::new();
    let shapes = params.iter().map(|p| &p.shape).chain([&form.signature.result]);
    for d in shapes.flat_map(|s| s.dims()) {
        if !symbols.iter().any(|s| s == d) {
            symbols.push(d.to_string());
        }
    }
    let sizes: Vec<String> = symbols.iter().map(|s| format!("{s}: {}", extent(s))).collect();
    let inputs: Vec<String> = params
        .iter()
        .map(|p| match &p.shape {
            Shape::Scalar => format!("{}: scalar", p.name),
            shape => format!("{}: [{}]", p.name, shape.dims().join(", ")),
        })
        .collect();
    let args: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let result = (0..)
        .map(|k| format!("out{k}"))
        .find(|r| !args.contains(&r.as_str()))
        .unwrap_or_default();
    format!(
        "precision: {precision}\nsizes: {{{}}}\ninputs: {{{}}}\noutputs: [{result}]\ncalls:\n  - {result} = {}{}({})\n",
        sizes.join(", "),
        inputs.join(", "),
        precision.prefix(),
        f.name,
        args.join(", ")
    )
}

/// The device-to-device copy bandwidth, GB/s: bytes read plus bytes written per second by a
/// copy between two buffers of `bytes`, median of `options.runs` after warm-up.
pub fn copy_bandwidth(device: &Device, bytes: usize, options: &TimingOptions) -> Result<f64, CudaError> {
    let stream = device.stream();
    let src = stream.alloc_zeros::<u8>(bytes).map_err(driver("cuMemAlloc"))?;
    let mut dst = stream.alloc_zeros::<u8>(bytes).map_err(driver("cuMemAlloc"))?;
    // A copy this large flows through L2; no flush needed, nor wanted (it would add traffic).
    let timer = Timer::new(device, false)?;
    let timing = timer.time(options, &mut || {
        stream.memcpy_dtod(&src, &mut dst).map_err(driver("cuMemcpyDtoDAsync"))
    })?;
    Ok(2.0 * bytes as f64 / (timing.median_us * 1e3))
}

/// Timing of the device probes (launch overhead, arithmetic peak): a few runs of a kernel whose
/// data stays in registers, so no L2 flush.
const PROBE_TIMING: TimingOptions = TimingOptions {
    warmup: 1,
    runs: 5,
    flush_l2: false,
};

/// The cost of one kernel launch in a stream of launches, µs.
pub fn launch_overhead_us(device: &Device, runtime: &crate::module::CudaModuleSet) -> Result<f64, CudaError> {
    let function = runtime.function(kernels::EMPTY)?;
    let stream = device.stream();
    let config = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let timer = Timer::new(device, false)?;
    let timing = timer.time(&PROBE_TIMING, &mut || {
        for _ in 0..LAUNCHES {
            // SAFETY: the empty kernel takes no arguments.
            unsafe { stream.launch_builder(function).launch(config) }.map_err(driver("cuLaunchKernel"))?;
        }
        Ok(())
    })?;
    Ok(timing.median_us / LAUNCHES as f64)
}

/// The multiply-add peak in `precision`, GFLOP/s.
pub fn peak_gflops(
    device: &Device,
    runtime: &crate::module::CudaModuleSet,
    precision: Precision,
) -> Result<f64, CudaError> {
    let name = match precision {
        Precision::F32 => kernels::FMA_F32,
        Precision::F64 => kernels::FMA_F64,
    };
    let function = runtime.function(name)?;
    let stream = device.stream();
    let out = stream.alloc_zeros::<u8>(8).map_err(driver("cuMemAlloc"))?;
    let blocks = device.info().sms * 8;
    let config = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let timer = Timer::new(device, false)?;
    let timing = timer.time(&PROBE_TIMING, &mut || {
        let mut builder = stream.launch_builder(function);
        builder.arg(&out).arg(&FMA_ITERATIONS);
        // SAFETY: (T* out, int iterations) as declared; `out` holds one element of either type.
        unsafe { builder.launch(config) }.map_err(driver("cuLaunchKernel"))?;
        Ok(())
    })?;
    let flops = 2.0 * FMA_CHAINS as f64 * FMA_ITERATIONS as f64 * (blocks as f64 * 256.0);
    Ok(flops / (timing.median_us * 1e3))
}

/// The table as YAML, with a header saying how it was measured.
pub fn to_yaml(calibration: &Calibration, options: &CalibrateOptions) -> String {
    let table = &calibration.table;
    let body = serde_yaml::to_string(table).unwrap_or_default();
    format!(
        "# fuse timing table — {}, MEASURED by `fuse calibrate`.\n\
         # Copy bandwidth {:.1} GB/s (bytes read + written by a device-to-device copy of {} MiB),\n\
         # launch overhead {:.3} µs, multiply-add peak {:.0} / {:.0} GFLOP/s (f32 / f64); {} routine\n\
         # kernels timed ({}-element vectors, {}×{} matrices, L2 flushed, median of {} after {} warm-up).\n\
         # The occupancy figures of `model` are the analytic estimate's, not measured.\n{body}",
        table.device.name,
        table.model.bandwidth_gb_s,
        options.copy_bytes >> 20,
        table.model.launch_us,
        table.model.peak_gflop_s.f32,
        table.model.peak_gflop_s.f64,
        calibration.kernels,
        options.vector_len,
        options.matrix.0,
        options.matrix.1,
        options.timing.runs,
        options.timing.warmup,
    )
}

/// The functions whose routines calibration times: all but scalar functions, which have none
/// (a kernel computes an inlined scalar call once where it starts, from its scalars).
fn timed_functions(library: &Library) -> impl Iterator<Item = &fuse_core::ElementaryFunction> {
    library.functions().filter(|f| f.kind != HigherOrderKind::Scalar)
}

/// The programs calibration times, one per form and precision (for tests and `--dry-run`).
pub fn calibration_programs(library: &Library, options: &CalibrateOptions) -> Result<Vec<Program>, CudaError> {
    let mut out = Vec::new();
    for f in timed_functions(library) {
        let nested = matches!(f.kind, HigherOrderKind::NestedMap | HigherOrderKind::NestedReduce);
        for form in &f.forms {
            for &precision in &f.precisions {
                let text = one_call_script(f, form, precision, options, nested);
                let name = format!("calibrate-{}{}.yaml", precision.prefix(), f.name);
                out.push(script::parse(&name, &text, library).map_err(|e| CudaError::Unsupported(e.to_string()))?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_codegen::generate::{Serial, Walk};

    #[test]
    fn every_form_of_every_function_gets_a_calibration_program() {
        let library = Library::builtin().unwrap();
        let options = CalibrateOptions::default();
        let programs = calibration_programs(&library, &options).unwrap();
        let forms: usize = timed_functions(&library)
            .map(|f| f.forms.len() * f.precisions.len())
            .sum();
        assert_eq!(programs.len(), forms);
        for p in &programs {
            assert_eq!(p.calls.len(), 1);
            // The largest array (an outer product's is its result) is beyond a 50 MB L2 in
            // f32: sizes fill the GPU.
            let largest = (p.inputs.iter().chain(&p.outputs))
                .map(|&v| p.sizes.array_bytes(&p.values[v].shape, p.precision).unwrap());
            assert!(largest.max().unwrap() >= 64 << 20, "{}", p.file);
        }
    }

    #[test]
    fn the_generated_kernels_of_every_environment_exist() {
        let library = Library::builtin().unwrap();
        let programs = calibration_programs(&library, &CalibrateOptions::default()).unwrap();
        for p in programs {
            let nested = p.calls[0].kind.nesting_level() == 2;
            for env in environments(nested) {
                let group = KernelGroup {
                    calls: vec![0],
                    block: env.block.threads,
                    width: env.block.instances,
                    whole_rows: env.block.whole_rows,
                    serial_iterations: Serial::Iterations(env.serial),
                    walk: Walk::Rows,
                };
                generate(&p, &[group]).unwrap_or_else(|e| panic!("{}: {e}", p.file));
            }
        }
    }

    #[test]
    fn routine_rows_average_over_kernels() {
        let mut rows = Rows::default();
        rows.add("gemv", "default", "load.A", Precision::F32, (256, 1, 4, 0), 1.0);
        rows.add("gemv", "default", "load.A", Precision::F32, (256, 1, 4, 0), 3.0);
        rows.add("gemv", "default", "load.x", Precision::F32, (256, 1, 4, 0), 5.0);
        let m = rows.into_measurements();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].routine.as_str(), m[0].ns_per_call), ("load.A", 2.0));
    }

    #[test]
    fn environments_cover_blocks_serial_iterations_and_shared_memory() {
        let blas1 = environments(false);
        assert!(blas1.iter().any(|e| e.block.threads == 1024 && e.serial == 64));
        assert!(blas1.iter().any(|e| e.extra_shared > 64 << 10));
        let blas2 = environments(true);
        assert!(blas2.iter().all(|e| e.walk.is_some()));
        assert!(blas2.iter().any(|e| e.walk == Some(Axis::Columns)));
        // Every one fits the 48 KiB column-sum exchange in f64 too.
        for width in [4, 8, 16] {
            assert!(blas2.iter().any(|e| e.block.instances == width));
        }
    }
}
