//! `fuse bench` — on the CPU, fused against unfused; on a GPU, fused against the same calls
//! written with cuBLAS. Plans are chosen by `fuse::select`, as `fuse run` chooses them; the
//! timing loops and the baselines are the backends' own tools (`fuse::stages`).

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use serde_json::json;

use fuse::stages::fuse_core::data::{fill_random_inputs, relative_error};
use fuse::stages::fuse_core::{Bindings, Library, Precision, Program, Sizes, TimingTable};
use fuse::stages::fuse_cpu::fused::calibrate::{copy_bandwidth, CopyProbe, COPY_BYTES, COPY_REPS};
use fuse::stages::fuse_cpu::fused::{unfused_plan, FusedPlan};
use fuse::stages::fuse_cuda::bench::BenchOptions;
use fuse::stages::fuse_cuda::timer::TimingOptions;
use fuse::stages::fuse_cuda::Device;

use crate::args::{load, parse_size};
use crate::calibrate::progress_bar;
use crate::failure::failure;
use crate::failure::{bad_input, internal, Failure};
use crate::gpu;

/// Bytes of each buffer of the GPU's copy-bandwidth measurement.
const GPU_COPY_BYTES: usize = 512 << 20;

/// Largest size of any dimension in the correctness check before timing.
const CHECK_EXTENT: usize = 513;
/// Runs before timing: page faults, caches and the thread pool warmed up.
const WARM_UP: usize = 2;

/// Options of `fuse bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Script files.
    #[arg(required = true, value_name = "SCRIPT")]
    scripts: Vec<PathBuf>,
    /// Where to run: `cuda` (fused plan against cuBLAS) or `cpu` (fused against the same calls
    /// one kernel each); without it, the GPU when one is there, else the CPU.
    #[arg(long, value_enum)]
    backend: Option<BenchBackend>,
    /// A size, e.g. --size m=8192 (repeatable); each script takes the sizes it has.
    #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
    sizes: Vec<(String, usize)>,
    /// Timed runs of the fused program and of the baseline each; the median is reported
    /// (default: 10 on the CPU, 25 on a GPU).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    runs: Option<u32>,
    /// Timing table to rank plans with, instead of the one chosen for this CPU or GPU.
    #[arg(long, value_name = "FILE")]
    timings: Option<PathBuf>,
    /// GPU to run on (cuda).
    #[arg(long, value_name = "N", default_value_t = 0)]
    device: usize,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// The backends `fuse bench` measures.
#[derive(Clone, Copy, ValueEnum)]
enum BenchBackend {
    /// The fused CPU backend (rayon).
    Cpu,
    /// A GPU: the plan `fuse run --backend cuda` runs, against cuBLAS.
    Cuda,
}

/// Where a benchmark runs, with the table its plans are ranked by.
enum Target {
    Cpu { table: TimingTable },
    Cuda { device: Device, table: TimingTable },
}

impl Target {
    fn new(args: &BenchArgs, library: &Library) -> Result<Target, Failure> {
        let backend = args.backend.unwrap_or_else(|| match fuse::select::usable_gpu() {
            Ok(gpu) => {
                eprintln!("backend: cuda ({})", gpu.describe());
                BenchBackend::Cuda
            }
            Err(e) => {
                eprintln!("backend: cpu ({})", e);
                BenchBackend::Cpu
            }
        });
        Ok(match backend {
            BenchBackend::Cpu => {
                let selected = fuse::select::cpu_table(library, args.timings.as_deref()).map_err(failure)?;
                if let Some(note) = selected.note {
                    eprintln!("{note}");
                }
                Target::Cpu { table: selected.table }
            }
            BenchBackend::Cuda => {
                let device = gpu::open(args.device)?;
                let table = gpu::table(device.info(), library, args.timings.as_deref())?;
                Target::Cuda { device, table }
            }
        })
    }

    fn table(&self) -> &TimingTable {
        match self {
            Target::Cpu { table } | Target::Cuda { table, .. } => table,
        }
    }

    /// Timed runs per program.
    fn runs(&self, args: &BenchArgs) -> u32 {
        args.runs.unwrap_or(match self {
            Target::Cpu { .. } => 10,
            Target::Cuda { .. } => 25,
        })
    }

    /// The copy bandwidth (GB/s, bytes read + written) and how it was measured.
    fn copy_bandwidth(&self) -> Result<(f64, String), Failure> {
        Ok(match self {
            Target::Cpu { .. } => (
                copy_bandwidth(COPY_BYTES, COPY_REPS),
                format!("a parallel streaming copy of {} MiB arrays", COPY_BYTES >> 20),
            ),
            Target::Cuda { device, .. } => {
                let gbps = fuse::stages::fuse_cuda::calibrate::copy_bandwidth(
                    device,
                    GPU_COPY_BYTES,
                    &TimingOptions::default(),
                )
                .map_err(failure)?;
                (gbps, format!("a device-to-device copy of {} MiB", GPU_COPY_BYTES >> 20))
            }
        })
    }

    /// What the fused plan is compared with.
    fn baseline_name(&self) -> &'static str {
        match self {
            Target::Cpu { .. } => "unfused",
            Target::Cuda { .. } => "cuBLAS",
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Target::Cpu { .. } => "cpu",
            Target::Cuda { .. } => "cuda",
        }
    }
}

/// One script's measurement.
struct Measured {
    script: String,
    sizes: Sizes,
    kernels: (usize, usize),
    fused_us: f64,
    baseline_us: f64,
    /// Baseline time over fused time: on the CPU the median of the ratios of runs timed back
    /// to back, which a machine whose speed drifts between runs changes least.
    speedup: f64,
    bytes: u64,
    /// The baseline's calls, where they are not simply the fused plan's calls one kernel each.
    baseline_calls: Option<String>,
    /// The copy bandwidth measured between this script's runs, where it was (the CPU: memory
    /// shared with other work gives different bandwidth from minute to minute), and the fused
    /// GB/s as a share of it: the median of each run's share of the copy timed right after it.
    copy: Option<(f64, f64)>,
}

/// `fuse bench`.
pub fn run(args: &BenchArgs, library: &Library) -> Result<(), Failure> {
    let programs = args
        .scripts
        .iter()
        .map(|p| load(p, library))
        .collect::<Result<Vec<_>, _>>()?;
    check_sizes_used(&programs, &args.sizes)?;
    let target = Target::new(args, library)?;
    let bar = progress_bar(1 + 3 * programs.len());
    bar.set_message("copy bandwidth");
    let copy = target.copy_bandwidth()?;
    bar.inc(1);
    let mut results = Vec::new();
    for program in &programs {
        let bench = Bench {
            program,
            library,
            target: &target,
            args,
            bar: &bar,
        };
        results.push(bench.run()?);
    }
    bar.finish_and_clear();
    match args.json {
        true => print_json(&results, copy.0, &target),
        false => print_table(&results, &copy, &target, target.runs(args)),
    }
    Ok(())
}

/// Every size given is a size of some script (a typo would otherwise be ignored).
fn check_sizes_used(programs: &[Program], sizes: &[(String, usize)]) -> Result<(), Failure> {
    for (name, value) in sizes {
        if !programs.iter().any(|p| p.sizes.get(name).is_some()) {
            return Err(bad_input(format!(
                "--size {name}={value}: no script given has a size `{name}`"
            )));
        }
    }
    Ok(())
}

/// One script's benchmark.
struct Bench<'a> {
    program: &'a Program,
    library: &'a Library,
    target: &'a Target,
    args: &'a BenchArgs,
    bar: &'a indicatif::ProgressBar,
}

impl Bench<'_> {
    fn run(&self) -> Result<Measured, Failure> {
        let program = self.program;
        let overrides: Vec<(String, usize)> = (self.args.sizes.iter())
            .filter(|(name, _)| program.sizes.get(name).is_some())
            .cloned()
            .collect();
        let sizes = program.bind_sizes(&overrides).map_err(bad_input)?;
        match self.target {
            Target::Cpu { table } => self.cpu(sizes, table),
            Target::Cuda { device, .. } => self.cuda(sizes, device),
        }
    }

    /// The plan `fuse run --backend cuda` runs (tuned, or the best predicted by the GPU's table),
    /// against the program written with cuBLAS.
    fn cuda(&self, sizes: Sizes, device: &Device) -> Result<Measured, Failure> {
        let program = self.program;
        self.step("planning");
        let plan = gpu::plan(device, program, &sizes, self.library, self.args.timings.as_deref())?;
        self.bar.inc(1);
        self.step("checking and timing");
        let options = BenchOptions {
            timing: TimingOptions {
                runs: self.target.runs(self.args) as usize,
                ..TimingOptions::default()
            },
            seed: self.args.seed,
            ..BenchOptions::default()
        };
        let m = fuse::stages::fuse_cuda::bench::measure(device, program, &sizes, &plan, &options).map_err(failure)?;
        self.bar.inc(2);
        Ok(Measured {
            script: program.file.clone(),
            kernels: (m.kernels, m.baseline_calls),
            bytes: program.compulsory_bytes(&sizes),
            sizes,
            fused_us: m.fused.median_us,
            baseline_us: m.baseline.median_us,
            speedup: m.baseline.median_us / m.fused.median_us,
            baseline_calls: Some(m.baseline_text),
            copy: None,
        })
    }

    /// The best plan for the CPU against the same calls one kernel each.
    fn cpu(&self, sizes: Sizes, table: &TimingTable) -> Result<Measured, Failure> {
        let program = self.program;
        let fused_plan = fuse::select::best_plan(program, &sizes, table, self.library).map_err(failure)?;
        let baseline_plan = unfused_plan(program, &sizes);
        self.step("checking");
        for plan in [&fused_plan, &baseline_plan] {
            check_against_reference(program, &sizes, plan, self.args.seed)?;
        }
        self.bar.inc(1);
        self.step("inputs");
        let fused = FusedPlan::new(program.clone(), &sizes, &fused_plan).map_err(internal)?;
        let baseline = FusedPlan::new(program.clone(), &sizes, &baseline_plan).map_err(internal)?;
        let mut inputs = Bindings::new();
        fill_random_inputs(program, &sizes, self.args.seed, &mut inputs);
        self.bar.inc(1);
        self.step("timing");
        let runs = self.target.runs(self.args) as usize;
        let bytes = program.compulsory_bytes(&sizes);
        let timed = time_both(&fused, &baseline, &inputs, runs, bytes)?;
        self.bar.inc(1);
        Ok(Measured {
            script: program.file.clone(),
            kernels: (fused_plan.kernels.len(), baseline_plan.kernels.len()),
            bytes,
            sizes,
            fused_us: timed.fused_us,
            baseline_us: timed.baseline_us,
            speedup: timed.speedup,
            baseline_calls: None,
            copy: Some((timed.copy_gbps, timed.copy_share)),
        })
    }

    fn step(&self, what: &str) {
        self.bar.set_message(format!("{} ({what})", self.program.name));
    }
}

/// Runs `plan` at small sizes against the reference, so a benchmark never times wrong code.
fn check_against_reference(
    program: &Program,
    sizes: &Sizes,
    plan: &fuse::stages::fuse_core::Plan,
    seed: u64,
) -> Result<(), Failure> {
    let small: Vec<(String, usize)> = sizes
        .iter()
        .map(|(k, v)| (k.to_string(), v.min(CHECK_EXTENT)))
        .collect();
    let small = program.bind_sizes(&small).map_err(bad_input)?;
    let fused = FusedPlan::new(program.clone(), &small, plan).map_err(internal)?;
    let mut inputs = Bindings::new();
    fill_random_inputs(program, &small, seed, &mut inputs);
    let got = fused.run(&inputs).map_err(internal)?;
    let want = fuse::stages::fuse_core::reference::evaluate(program, &small, &inputs).map_err(internal)?;
    let tolerance = match program.precision {
        Precision::F32 => 1e-4,
        Precision::F64 => 1e-12,
    };
    for (name, w) in &want {
        let error = got
            .get(name)
            .map_or(f64::INFINITY, |g| relative_error(&g.to_f64(), &w.to_f64()));
        if !(error < tolerance) {
            return Err(internal(format!(
                "{}: output `{name}` of the {}-kernel plan is off the reference by {error:e} at {small}: not timed (a fuse bug, please report)",
                program.file,
                plan.kernels.len()
            )));
        }
    }
    Ok(())
}

/// What [`time_both`] measures.
struct Timed {
    /// Medians, µs.
    fused_us: f64,
    baseline_us: f64,
    /// The median of the runs' baseline-over-fused ratios.
    speedup: f64,
    /// The median copy bandwidth, GB/s.
    copy_gbps: f64,
    /// The median of the runs' fused GB/s (of `bytes`) over the copy's GB/s.
    copy_share: f64,
}

/// `runs` runs of each plan, each pair followed by a timed copy: all three alternate, so that
/// they see the same machine, and ratios are taken run by run.
fn time_both(
    fused: &FusedPlan,
    baseline: &FusedPlan,
    inputs: &Bindings,
    runs: usize,
    bytes: u64,
) -> Result<Timed, Failure> {
    let mut spaces = (fused.workspace(), baseline.workspace());
    let mut probe = CopyProbe::new(COPY_BYTES);
    for _ in 0..WARM_UP {
        fused.run_in(inputs, &mut spaces.0).map_err(internal)?;
        baseline.run_in(inputs, &mut spaces.1).map_err(internal)?;
        probe.copy();
    }
    let micros = |start: Instant| start.elapsed().as_secs_f64() * 1e6;
    let mut times: Vec<[f64; 3]> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        fused.run_in(inputs, &mut spaces.0).map_err(internal)?;
        let f = micros(start);
        let start = Instant::now();
        baseline.run_in(inputs, &mut spaces.1).map_err(internal)?;
        let b = micros(start);
        let start = Instant::now();
        probe.copy();
        times.push([f, b, micros(start)]);
    }
    let of = |stat: fn(&[f64; 3]) -> f64| median(times.iter().map(stat).collect());
    let copy_bytes = probe.bytes() as f64;
    Ok(Timed {
        fused_us: of(|t| t[0]),
        baseline_us: of(|t| t[1]),
        speedup: of(|t| t[1] / t[0]),
        copy_gbps: copy_bytes / (of(|t| t[2]) * 1e3),
        copy_share: median(
            times
                .iter()
                .map(|t| bytes as f64 * t[2] / (copy_bytes * t[0]))
                .collect(),
        ),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Measured {
    fn gbps(&self) -> f64 {
        self.bytes as f64 / (self.fused_us * 1e3)
    }

    /// The fused GB/s as a % of the copy measured with it, else of `copy_gbps`.
    fn pct_of_copy(&self, copy_gbps: f64) -> f64 {
        100.0 * self.copy.map_or(self.gbps() / copy_gbps, |c| c.1)
    }
}

fn print_table(results: &[Measured], copy: &(f64, String), target: &Target, runs: u32) {
    let (gbps, how) = copy;
    println!("copy bandwidth: {gbps:.1} GB/s (bytes read + written by {how})");
    if results.iter().any(|r| r.copy.is_some()) {
        println!("% copy: of the copy bandwidth timed after each run (`copy_gbps` in --json); speedup and % copy: medians of the runs' own ratios");
    }
    println!("plans ranked by: {}", target.table().describe());
    println!("times: median of {runs} runs after warm-up; GB/s: compulsory bytes (inputs read once, outputs written once) over the fused time");
    let baseline = format!("{} µs", target.baseline_name());
    println!(
        "{:<22} {:<16} {:>9} {:>12} {:>12} {:>8} {:>7} {:>9}",
        "script", "sizes", "kernels", "fused µs", baseline, "speedup", "GB/s", "% copy"
    );
    for r in results {
        println!(
            "{:<22} {:<16} {:>9} {:>12.1} {:>12.1} {:>7.2}× {:>7.1} {:>8.1}%",
            r.script,
            r.sizes.to_string(),
            format!("{} / {}", r.kernels.0, r.kernels.1),
            r.fused_us,
            r.baseline_us,
            r.speedup,
            r.gbps(),
            r.pct_of_copy(*gbps)
        );
    }
    let written: Vec<&Measured> = results.iter().filter(|r| r.baseline_calls.is_some()).collect();
    if !written.is_empty() {
        println!(
            "{} versions (kernels: fused / {} calls):",
            target.baseline_name(),
            target.baseline_name()
        );
    }
    for r in written {
        println!("  {}: {}", r.script, r.baseline_calls.as_deref().unwrap_or_default());
    }
}

fn print_json(results: &[Measured], copy: f64, target: &Target) {
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            json!({
                "script": r.script,
                "sizes": r.sizes.iter().collect::<std::collections::BTreeMap<_, _>>(),
                "kernels": r.kernels.0,
                "baseline_kernels": r.kernels.1,
                "baseline_calls": r.baseline_calls,
                "fused_us": r.fused_us,
                "baseline_us": r.baseline_us,
                "speedup": r.speedup,
                "gbps": r.gbps(),
                "copy_gbps": r.copy.map_or(copy, |c| c.0),
                "pct_of_copy": r.pct_of_copy(copy),
            })
        })
        .collect();
    let object = json!({
        "backend": target.name(),
        "baseline": target.baseline_name(),
        "timings": target.table().describe(),
        "copy_gbps": copy,
        "results": rows,
    });
    println!("{object}");
}
