//! `fuse bench` — on the CPU, fused against unfused; on a GPU, fused against the same calls
//! written with cuBLAS. Plans are chosen by `fuse::select`, as `fuse run` chooses them; the
//! timing loops and the baselines are the backends' own tools (`fuse::stages`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use clap::{Args, ValueEnum};
use serde_json::json;

use fuse::stages::fuse_core::data::{fill_random_inputs, relative_error, try_fill_random_inputs};
use fuse::stages::fuse_core::{Bindings, Library, Precision, Program, Sizes, TimingTable};
use fuse::stages::fuse_cpu::fused::calibrate::{CopyProbe, COPY_BYTES};
use fuse::stages::fuse_cpu::fused::{unfused_plan, FusedPlan, SimdLevel, Workspace};
use fuse::stages::fuse_cuda::bench::{BenchOptions, Replayed};
use fuse::stages::fuse_cuda::timer::TimingOptions;
use fuse::stages::fuse_cuda::Device;

use crate::args::{load, parse_size};
use crate::calibrate::progress_bar;
use crate::failure::failure;
use crate::failure::{bad_input, internal, Failure};
use crate::gpu;
use crate::interrupt;

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
    /// (default: 10 on the CPU, 25 on a GPU; on the CPU rounded up to an even number, the two
    /// taking turns at going first).
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
    /// The fused CPU backend.
    Cpu,
    /// A GPU: the plan `fuse run --backend cuda` runs, against cuBLAS.
    Cuda,
}

/// Where a benchmark runs, with the table its plans are ranked by.
enum Target {
    Cpu { table: TimingTable, simd: SimdLevel },
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
                Target::Cpu {
                    table: selected.table,
                    simd: SimdLevel::shared().map_err(bad_input)?,
                }
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
            Target::Cpu { table, .. } | Target::Cuda { table, .. } => table,
        }
    }

    /// Timed runs per program.
    fn runs(&self, args: &BenchArgs) -> u32 {
        args.runs.unwrap_or(match self {
            Target::Cpu { .. } => 10,
            Target::Cuda { .. } => 25,
        })
    }

    /// The copy bandwidth (GB/s, bytes read + written) and how it was measured: on a GPU,
    /// measured now; on the CPU, the median of the copies timed beside each script's runs
    /// (`results`), sized to its problem, so that no copy buffer outgrows the problem.
    fn copy_bandwidth(&self, results: &[Measured]) -> Result<(f64, String), Failure> {
        Ok(match self {
            Target::Cpu { .. } => (
                median(results.iter().filter_map(|r| r.copy.map(|c| c.0)).collect()),
                "parallel streaming copies of each problem's bytes, timed between its runs".to_string(),
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

    /// The instruction set the CPU's kernels run in.
    fn simd(&self) -> Option<SimdLevel> {
        match self {
            Target::Cpu { simd, .. } => Some(*simd),
            Target::Cuda { .. } => None,
        }
    }
}

/// One script's measurement.
struct Measured {
    /// The script's file, and its name for the table.
    script: String,
    name: String,
    sizes: Sizes,
    kernels: (usize, usize),
    /// The way a run goes: on the GPU the faster of the two below.
    fused_us: f64,
    /// On the GPU, a plan of more than one step: its steps queued one by one, and replayed as
    /// a CUDA graph.
    ways: Option<Ways>,
    /// Why such a plan was not replayed as a graph here, where it was not.
    unreplayed: Option<String>,
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

/// The two ways a plan of several steps runs on the GPU, median µs.
#[derive(Clone, Copy)]
struct Ways {
    steps_us: f64,
    graph_us: f64,
}

/// `fuse bench`. Ctrl-C prints the measurements finished so far.
pub fn run(args: &BenchArgs, library: &Library) -> Result<(), Failure> {
    let programs = args
        .scripts
        .iter()
        .map(|p| load(p, library))
        .collect::<Result<Vec<_>, _>>()?;
    crate::args::check_distinct_sizes(&args.sizes)?;
    check_sizes_used(&programs, &args.sizes)?;
    let target = Target::new(args, library)?;
    let bar = progress_bar(1 + 3 * programs.len());
    let report = Arc::new(Mutex::new(Report {
        copy: None,
        table: target.table().describe(),
        baseline: target.baseline_name(),
        backend: target.name(),
        simd: target.simd(),
        runs: target.runs(args),
        json: args.json,
        results: Vec::new(),
    }));
    let _on_interrupt = interrupt::report_on_interrupt({
        let (report, bar, scripts) = (Arc::clone(&report), bar.clone(), programs.len());
        move || {
            bar.finish_and_clear();
            let report = report.lock().unwrap_or_else(PoisonError::into_inner);
            eprintln!("interrupted: {} of {scripts} scripts measured", report.results.len());
            report.print();
        }
    });
    for (done, program) in programs.iter().enumerate() {
        let bench = Bench {
            program,
            library,
            target: &target,
            args,
            bar: &bar,
        };
        let measured = bench.run()?;
        // Kept before it is announced: a Ctrl-C right after the line still reports it.
        report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .results
            .push(measured);
        if bar.is_hidden() {
            // No progress bar (standard error is not a terminal): a line per script instead.
            eprintln!("measured {} ({} of {})", program.name, done + 1, programs.len());
        }
    }
    bar.set_message("copy bandwidth");
    let mut report = report.lock().unwrap_or_else(PoisonError::into_inner);
    report.copy = Some(target.copy_bandwidth(&report.results)?);
    bar.inc(1);
    bar.finish_and_clear();
    report.print();
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
        crate::args::plannable(&sizes)?;
        match self.target {
            Target::Cpu { table, .. } => self.cpu(sizes, table),
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
        let (ways, unreplayed) = match m.graph {
            Replayed::OneStep => (None, None),
            Replayed::Timed(graph) => {
                let ways = Ways {
                    steps_us: m.fused.median_us,
                    graph_us: graph.median_us,
                };
                (Some(ways), None)
            }
            Replayed::Unavailable(why) => (None, Some(why)),
        };
        let fused_us = ways.map_or(m.fused.median_us, |w| w.steps_us.min(w.graph_us));
        Ok(Measured {
            script: program.file.clone(),
            name: program.name.clone(),
            kernels: (m.kernels, m.baseline_calls),
            bytes: program.compulsory_bytes(&sizes),
            sizes,
            fused_us,
            ways,
            unreplayed,
            baseline_us: m.baseline.median_us,
            speedup: m.baseline.median_us / fused_us,
            baseline_calls: Some(m.baseline_text),
            copy: None,
        })
    }

    /// The best plan for the CPU against the same calls one kernel each.
    fn cpu(&self, sizes: Sizes, table: &TimingTable) -> Result<Measured, Failure> {
        let program = self.program;
        let fused_plan = fuse::select::best_plan(program, &sizes, table, self.library).map_err(failure)?;
        let baseline_plan = unfused_plan(program, &sizes);
        let bytes = program.compulsory_bytes(&sizes);
        let needed = program.input_bytes(&sizes)
            + fused_plan.stored_bytes(program, &sizes)
            + baseline_plan.stored_bytes(program, &sizes)
            + copy_probe_bytes(bytes);
        fuse::check_host_memory(needed, || {
            format!(
                "benchmarking {} at {sizes} (inputs, both plans' outputs and temporaries, a copy of as many bytes)",
                program.file
            )
        })
        .map_err(failure)?;
        self.step("checking");
        for plan in [&fused_plan, &baseline_plan] {
            check_against_reference(program, &sizes, plan, self.args.seed)?;
        }
        self.bar.inc(1);
        self.step("inputs");
        let fused = FusedPlan::new(program.clone(), &sizes, &fused_plan).map_err(internal)?;
        let baseline = FusedPlan::new(program.clone(), &sizes, &baseline_plan).map_err(internal)?;
        let mut inputs = Bindings::new();
        try_fill_random_inputs(program, &sizes, self.args.seed, &mut inputs).map_err(failure)?;
        self.bar.inc(1);
        self.step("timing");
        let runs = self.target.runs(self.args) as usize;
        let timed = time_both(&fused, &baseline, &inputs, runs, bytes)?;
        self.bar.inc(1);
        Ok(Measured {
            script: program.file.clone(),
            name: program.name.clone(),
            kernels: (fused_plan.kernels.len(), baseline_plan.kernels.len()),
            bytes,
            sizes,
            fused_us: timed.fused_us,
            ways: None,
            unreplayed: None,
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
        if error.is_nan() || error >= tolerance {
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

/// `runs` rounds, each timing the fused plan, the baseline and a copy of as many bytes as the
/// problem moves ([`copy_probe_bytes`]), so that all three see the same machine and ratios are
/// taken round by round. Each plan is timed after a copy and an untimed run of itself, so it
/// finds the caches as its own last run left them — the steady state of a loop — and both
/// plans alike: timed straight after one another, the second found the inputs they share
/// already in cache (the fused BiCGK looked 0.6× at 512²), or just warmer caches (one SGEMV
/// plan timed against itself: 0.82–0.89× at 2048²). The plans take turns at going first, an
/// even number of rounds, so each goes first as often: the one timed first in every round,
/// after the timed copy, ran 5–10 % slower (SGEMVT at 2048², whose two plans are the same
/// kernels, 0.90–0.95× whichever went first), and with an odd count the medians still fell on
/// the side of the plan that went first once more (SGEMVT at 1024² f64, 15 runs: 0.93×).
fn time_both(
    fused: &FusedPlan,
    baseline: &FusedPlan,
    inputs: &Bindings,
    runs: usize,
    bytes: u64,
) -> Result<Timed, Failure> {
    let mut spaces = (
        fused.workspace().map_err(failure)?,
        baseline.workspace().map_err(failure)?,
    );
    let mut probe = CopyProbe::new(copy_probe_bytes(bytes) as usize / 2).map_err(failure)?;
    for _ in 0..WARM_UP {
        fused.run_in(inputs, &mut spaces.0).map_err(internal)?;
        baseline.run_in(inputs, &mut spaces.1).map_err(internal)?;
        probe.copy();
    }
    let runs = runs.next_multiple_of(2);
    let mut times: Vec<[f64; 3]> = Vec::with_capacity(runs);
    for round in 0..runs {
        let mut after_copy = |plan: &FusedPlan, space: &mut Workspace| {
            probe.copy();
            second_run_us(|| plan.run_in(inputs, space).map_err(internal))
        };
        let (f, b) = if round % 2 == 0 {
            let f = after_copy(fused, &mut spaces.0)?;
            (f, after_copy(baseline, &mut spaces.1)?)
        } else {
            let b = after_copy(baseline, &mut spaces.1)?;
            (after_copy(fused, &mut spaces.0)?, b)
        };
        let c = second_run_us(|| {
            probe.copy();
            Ok(())
        })?;
        times.push([f, b, c]);
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

/// Bytes of the two arrays of the copy timed beside a problem of `bytes` compulsory bytes:
/// as many (at least 8 KiB, at most two of [`COPY_BYTES`]), so that one copy moves them.
fn copy_probe_bytes(bytes: u64) -> u64 {
    bytes.clamp(1 << 13, 2 * COPY_BYTES as u64)
}

/// Runs `run` twice and times the second run, µs.
fn second_run_us(mut run: impl FnMut() -> Result<(), Failure>) -> Result<f64, Failure> {
    run()?;
    let start = Instant::now();
    run()?;
    Ok(start.elapsed().as_secs_f64() * 1e6)
}

/// The median, NaN for none.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
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

/// What `fuse bench` prints: how it measured, and each script's measurement.
struct Report {
    /// The copy bandwidth (GB/s) and how it was measured, once measured (after the scripts).
    copy: Option<(f64, String)>,
    /// The timing table plans are ranked by.
    table: String,
    baseline: &'static str,
    backend: &'static str,
    /// On the CPU, the instruction set its kernels run in.
    simd: Option<SimdLevel>,
    runs: u32,
    json: bool,
    results: Vec<Measured>,
}

impl Report {
    fn print(&self) {
        match self.json {
            true => self.print_json(),
            false => self.print_table(),
        }
    }

    /// The copy bandwidth, or NaN where Ctrl-C came before it was measured.
    fn copy(&self) -> (f64, String) {
        let interrupted = || (f64::NAN, "nothing: interrupted before it was timed".to_string());
        self.copy.clone().unwrap_or_else(interrupted)
    }

    fn print_table(&self) {
        let (gbps, how) = &self.copy();
        println!("copy bandwidth: {gbps:.1} GB/s (bytes read + written by {how})");
        if self.results.iter().any(|r| r.copy.is_some()) {
            println!("% copy: of the copy of the problem's bytes timed in each run (`copy_gbps` in --json); speedup and % copy: medians of the runs' own ratios");
        }
        println!("plans ranked by: {}", self.table);
        if let Some(simd) = self.simd {
            println!("CPU instruction set: {}", simd.describe());
        }
        println!(
            "times: median of {} runs after warm-up; GB/s: compulsory bytes (inputs read once, outputs written once) over the fused time",
            self.runs
        );
        let graphs = self.results.iter().any(|r| r.ways.is_some());
        if graphs {
            println!("steps / graph: a plan of several steps queued one by one / replayed as a CUDA graph; fused: the faster, the way `fuse run` settles on");
        }
        let mut header = vec![
            "script".to_string(),
            "sizes".into(),
            "kernels".into(),
            "fused µs".into(),
        ];
        if graphs {
            header.extend(["steps µs".into(), "graph µs".into()]);
        }
        header.extend([
            format!("{} µs", self.baseline),
            "speedup".into(),
            "GB/s".into(),
            "% copy".into(),
        ]);
        let rows = self.results.iter().map(|r| {
            let mut row = vec![
                r.name.clone(),
                r.sizes.to_string(),
                format!("{} / {}", r.kernels.0, r.kernels.1),
                format!("{:.1}", r.fused_us),
            ];
            if graphs {
                let (steps, graph) = r.ways.map_or(("—".into(), "—".into()), |w| {
                    (format!("{:.1}", w.steps_us), format!("{:.1}", w.graph_us))
                });
                row.extend([steps, graph]);
            }
            row.extend([
                format!("{:.1}", r.baseline_us),
                format!("{:.2}×", r.speedup),
                format!("{:.1}", r.gbps()),
                format!("{:.1}%", r.pct_of_copy(*gbps)),
            ]);
            row
        });
        // Names and sizes to the left, numbers to the right.
        print!("{}", aligned(std::iter::once(header).chain(rows).collect(), 2));
        let written: Vec<&Measured> = self.results.iter().filter(|r| r.baseline_calls.is_some()).collect();
        if !written.is_empty() {
            println!("{0} versions (kernels: fused / {0} calls):", self.baseline);
        }
        for r in written {
            println!("  {}: {}", r.name, r.baseline_calls.as_deref().unwrap_or_default());
        }
        for r in &self.results {
            if let Some(why) = &r.unreplayed {
                println!(
                    "{}: not replayed as a CUDA graph here (its steps timed alone): {why}",
                    r.name
                );
            }
        }
    }

    fn print_json(&self) {
        let copy = self.copy().0;
        let rows: Vec<serde_json::Value> = self
            .results
            .iter()
            .map(|r| {
                json!({
                    "script": r.script,
                    "name": r.name,
                    "sizes": r.sizes.iter().collect::<std::collections::BTreeMap<_, _>>(),
                    "kernels": r.kernels.0,
                    "baseline_kernels": r.kernels.1,
                    "baseline_calls": r.baseline_calls,
                    "fused_us": r.fused_us,
                    "steps_us": r.ways.map(|w| w.steps_us),
                    "graph_us": r.ways.map(|w| w.graph_us),
                    "graph_error": r.unreplayed,
                    "baseline_us": r.baseline_us,
                    "speedup": r.speedup,
                    "gbps": r.gbps(),
                    "copy_gbps": r.copy.map_or(copy, |c| c.0),
                    "pct_of_copy": r.pct_of_copy(copy),
                })
            })
            .collect();
        let object = json!({
            "backend": self.backend,
            "simd": self.simd.map(SimdLevel::name),
            "simd_widest": self.simd.map(|_| SimdLevel::widest().name()),
            "baseline": self.baseline,
            "timings": self.table,
            "copy_gbps": copy,
            "results": rows,
        });
        println!("{object}");
    }
}

/// `rows` as lines of columns two spaces apart, each as wide as its widest cell: the first
/// `left` columns aligned left, the others right.
fn aligned(rows: Vec<Vec<String>>, left: usize) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| {
        rows.iter()
            .filter_map(|r| r.get(c))
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns).map(width).collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &w))| {
                let pad = " ".repeat(w - cell.chars().count());
                match c < left {
                    true => format!("{cell}{pad}"),
                    false => format!("{pad}{cell}"),
                }
            })
            .collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::aligned;

    #[test]
    fn columns_line_up_whatever_their_width() {
        let rows = vec![
            vec!["script".to_string(), "µs".to_string()],
            vec!["a-very-long-name".to_string(), "1.5".to_string()],
            vec!["b".to_string(), "12345.0".to_string()],
        ];
        let text = aligned(rows, 1);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "script                 µs");
        assert_eq!(lines[1], "a-very-long-name      1.5");
        assert_eq!(lines[2], "b                 12345.0");
    }
}
