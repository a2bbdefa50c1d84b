//! `fuse selftest`: the correctness matrix of the emulation tests, run by the binary alone — so
//! a GPU machine without a Rust toolchain checks the generated kernels on its GPU, each plan of
//! several steps also replayed as a CUDA graph.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use fuse::stages::fuse_codegen::generate::{generate, Generated, KernelGroup, Serial, Walk};
use fuse::stages::fuse_core::data::fill_random_inputs;
use fuse::stages::fuse_core::{
    explore, file, script, Bindings, Library, Limits, Precision, Program, Sizes, TimingTable,
};
use fuse::stages::fuse_cuda::check::compare;
use fuse::stages::fuse_cuda::{CudaPlan, Device};
use fuse::stages::fuse_emulate::EmulatedPlan;

use crate::failure::{bad_input, Failure};
use crate::gpu;

/// The (m, n) sizes every plan runs at: odd, a single row, a single column, past a tile.
const SIZES: [(usize, usize); 4] = [(67, 45), (1, 300), (300, 1), (257, 513)];

/// Options of `fuse selftest`.
#[derive(Args)]
pub struct SelftestArgs {
    /// Script files (f32 scripts are also checked as their f64 twin).
    #[arg(required = true, value_name = "SCRIPT")]
    scripts: Vec<PathBuf>,
    /// Where the generated kernels run.
    #[arg(long, value_enum, default_value_t = Target::Cuda)]
    backend: Target,
    /// How many of the best predicted plans of each script to check.
    #[arg(long, value_name = "K", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    top: u32,
    /// GPU to run on (cuda).
    #[arg(long, value_name = "N", default_value_t = 0)]
    device: usize,
    /// Check only this precision (default: the script's and, for f32 scripts, the f64 twin).
    #[arg(long, value_enum)]
    precision: Option<PrecisionArg>,
}

/// Where `fuse selftest` runs kernels.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Target {
    /// On the GPU.
    Cuda,
    /// On host threads (no GPU needed; slow).
    Emulate,
}

/// A precision on the command line.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PrecisionArg {
    /// Single.
    F32,
    /// Double.
    F64,
}

/// A generated module loaded on the chosen backend.
enum Loaded {
    Cuda(Box<CudaPlan>),
    Emulated(Box<EmulatedPlan>),
}

impl Loaded {
    fn run(&self, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Result<Bindings, String> {
        match self {
            Loaded::Cuda(p) => p.run(program, sizes, inputs).map_err(|e| e.to_string()),
            Loaded::Emulated(p) => p.run(program, sizes, inputs).map_err(|e| e.to_string()),
        }
    }

    /// On a GPU, a plan of several steps replayed as a CUDA graph the way runs replay one
    /// (captured on `earlier` inputs, replayed on `inputs` in the same buffers); else `None`.
    fn run_replayed(
        &self,
        program: &Program,
        sizes: &Sizes,
        earlier: &Bindings,
        inputs: &Bindings,
    ) -> Option<Result<Bindings, String>> {
        match self {
            Loaded::Cuda(p) if p.generated().steps.len() > 1 => Some(
                p.run_replayed(program, sizes, earlier, inputs)
                    .map_err(|e| e.to_string()),
            ),
            _ => None,
        }
    }
}

/// The backend and how plans are ranked on it.
struct Runner {
    device: Option<Device>,
    table: TimingTable,
}

impl Runner {
    fn load(&self, generated: Generated) -> Result<Loaded, String> {
        match &self.device {
            Some(device) => CudaPlan::compile(generated, device)
                .map(|p| Loaded::Cuda(Box::new(p)))
                .map_err(|e| e.to_string()),
            None => EmulatedPlan::compile(generated)
                .map(|p| Loaded::Emulated(Box::new(p)))
                .map_err(|e| e.to_string()),
        }
    }
}

/// `fuse selftest`.
pub fn run(args: &SelftestArgs, library: &Library) -> Result<(), Failure> {
    let runner = match args.backend {
        Target::Cuda => {
            let device = gpu::open(args.device)?;
            let table = gpu::table(device.info(), library, None)?;
            println!("selftest on {}", device.info().describe());
            Runner {
                device: Some(device),
                table,
            }
        }
        Target::Emulate => Runner {
            device: None,
            table: gpu::generator_table(library, None)?,
        },
    };
    let (mut ok, mut failed) = (0, 0);
    for path in &args.scripts {
        for program in variants(path, library, args.precision)? {
            for (label, kernels) in plans(&program, &runner.table, library, args.top as usize)? {
                match check(&runner, &program, &kernels) {
                    Ok((worst, replays)) => {
                        ok += 1;
                        println!(
                            "ok    {} {} {label}: worst error {worst:.1e} over {} sizes{replays}",
                            program.name,
                            program.precision,
                            SIZES.len(),
                        );
                    }
                    Err(why) => {
                        failed += 1;
                        println!("FAIL  {} {} {label}: {why}", program.name, program.precision);
                    }
                }
            }
        }
    }
    println!("selftest: {} plans checked: {ok} ok, {failed} failed", ok + failed);
    match failed {
        0 => Ok(()),
        n => Err(Failure {
            code: 1,
            message: format!("{n} plan(s) do not match the reference"),
        }),
    }
}

/// The script, and its f64 twin when it is f32 (as the tests make it: `precision: f64`, every
/// call `d`-prefixed), filtered by `only`.
fn variants(path: &Path, library: &Library, only: Option<PrecisionArg>) -> Result<Vec<Program>, Failure> {
    let program = script::load(path, library).map_err(bad_input)?;
    let mut out = vec![program.clone()];
    if program.precision == Precision::F32 {
        let text =
            file::read_text(path, file::SCRIPT_LIMIT).map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
        let twin = text.replace("precision: f32", "precision: f64").replace("= s", "= d");
        match script::parse(&program.file, &twin, library) {
            Ok(p) if p.precision == Precision::F64 => out.push(p),
            _ => eprintln!(
                "note: {}: no f64 twin (rewrite its s-prefixed calls by hand)",
                path.display()
            ),
        }
    }
    let wanted = |p: &Program| match only {
        Some(PrecisionArg::F32) => p.precision == Precision::F32,
        Some(PrecisionArg::F64) => p.precision == Precision::F64,
        None => true,
    };
    Ok(out.into_iter().filter(wanted).collect())
}

/// The `top` best plans at the script's sizes, and in f64 the unfused plan (one kernel per
/// call, BLAS-2 blocks walking along rows of tiles) — what the emulation tests run.
fn plans(
    program: &Program,
    table: &TimingTable,
    library: &Library,
    top: usize,
) -> Result<Vec<(String, Vec<KernelGroup>)>, Failure> {
    let exploration = explore(program, &program.sizes, table, library, Limits::default()).map_err(bad_input)?;
    let mut out: Vec<(String, Vec<KernelGroup>)> = exploration
        .plans()
        .take(top)
        .map(|p| {
            let kernels: Vec<KernelGroup> = p.kernels.iter().map(KernelGroup::from).collect();
            let s = if kernels.len() == 1 { "" } else { "s" };
            (format!("plan {} ({} kernel{s})", p.rank, kernels.len()), kernels)
        })
        .collect();
    if program.precision == Precision::F64 {
        let unfused = (0..program.calls.len())
            .map(|c| KernelGroup {
                calls: vec![c],
                block: 128,
                width: 4,
                whole_rows: false,
                serial_iterations: Serial::Iterations(2),
                walk: Walk::Columns,
            })
            .collect();
        out.push(("unfused plan".to_string(), unfused));
    }
    Ok(out)
}

/// Runs one plan at every size against the reference — on a GPU, as a graph replay too where
/// the plan has several steps; the worst error and how the replays went (for the report line),
/// or what went wrong. A graph this GPU cannot capture is said, not failed: runs then go step
/// by step.
fn check(runner: &Runner, program: &Program, kernels: &[KernelGroup]) -> Result<(f64, String), String> {
    let generated = generate(program, kernels).map_err(|e| e.to_string())?;
    let loaded = runner.load(generated)?;
    let (mut worst, mut replays): (f64, String) = (0.0, String::new());
    for (seed, &(m, n)) in SIZES.iter().enumerate() {
        let sizes = sizes_mn(program, m, n);
        let draw = |seed: u64| {
            let mut inputs = Bindings::new();
            fill_random_inputs(program, &sizes, seed, &mut inputs);
            inputs
        };
        let inputs = draw(seed as u64);
        let want = fuse::stages::fuse_core::reference::evaluate(program, &sizes, &inputs).map_err(|e| e.to_string())?;
        let got = loaded
            .run(program, &sizes, &inputs)
            .map_err(|e| format!("at {sizes}: {e}"))?;
        let mut runs = vec![("", got)];
        let earlier = draw(seed as u64 + SIZES.len() as u64);
        match loaded.run_replayed(program, &sizes, &earlier, &inputs) {
            None => {}
            Some(Ok(got)) => {
                runs.push((" replayed as a graph", got));
                replays = ", run step by step and replayed as a CUDA graph".into();
            }
            Some(Err(why)) => replays = format!(", not replayed as a CUDA graph here: {why}"),
        }
        for (how, got) in runs {
            if let Some(m) = compare(program, &got, &want) {
                return Err(format!("at {sizes}{how}: {m}"));
            }
            for (name, w) in &want {
                let error = fuse::stages::fuse_core::data::relative_error(&got[name].to_f64(), &w.to_f64());
                worst = worst.max(error);
            }
        }
    }
    Ok((worst, replays))
}

/// `program`'s sizes with `m` set to `m` and every other symbol to `n`.
fn sizes_mn(program: &Program, m: usize, n: usize) -> Sizes {
    let overrides: Vec<(String, usize)> = program
        .sizes
        .iter()
        .map(|(s, _)| (s.to_string(), if s == "m" { m } else { n }))
        .collect();
    program.bind_sizes(&overrides).unwrap_or_else(|_| program.sizes.clone())
}
