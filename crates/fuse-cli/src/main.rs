//! `fuse`: fuse sequences of BLAS calls into few GPU kernels. See `fuse --help`.

mod args;
mod bench;
mod calibrate;
mod compile;
mod devices;
mod distributed;
mod explore;
mod failure;
mod gpu;
mod interrupt;
mod npy;
mod run;
mod selftest;
mod sizes;
mod solve;
mod tune;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use fuse::stages::fuse_core::{script, DataGraph, Program};
use fuse::Library;

use args::{load, parse_size, Backend};
use failure::{bad_input, Failure};

#[derive(Parser)]
#[command(
    name = "fuse",
    version,
    about = "Kernel fusion for sequences of BLAS calls",
    long_about = "fuse is a kernel-fusion compiler and runtime for sequences of BLAS calls. It reads \
a short YAML script of calls (sgemv, sdot, saxpy, …), builds the data-dependency graph between \
them, finds which calls can share one kernel so that each matrix and vector is read from memory \
as few times as possible, and runs the fused plan: on an NVIDIA GPU, or on every core of the \
CPU this process may use (its affinity and CPU quota; FUSE_NUM_THREADS=N sets the thread count, \
FUSE_SIMD=avx2 or scalar a narrower instruction set than the CPU's widest).\n\nA script looks like this (scripts/bicgk.yaml):\n\n  \
name: bicgk\n  precision: f32\n  sizes: {m: 4096, n: 4096}\n  inputs: {A: [m, n], p: [n], r: [m]}\n  \
outputs: [q, s]\n  calls:\n    - q = sgemv(A, p)\n    - s = sgemtv(A, r)\n\nStart with \
`fuse check scripts/*.yaml`, then `fuse run scripts/bicgk.yaml`.",
    after_help = "Exit status: 0 on success, 1 on a failure of fuse or the GPU, 2 on bad input (the message \
names the file, line and column), 3 when the CUDA backend is asked for and there is no usable GPU."
)]
struct Cli {
    /// Folder of elementary-function metadata (*.yaml) to use instead of the built-in library.
    #[arg(long, global = true, env = "FUSE_LIBRARY", value_name = "DIR")]
    library: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and validate scripts; print a one-line summary of each.
    #[command(after_help = "Example: fuse check scripts/*.yaml")]
    Check {
        /// Script files.
        #[arg(required = true, value_name = "SCRIPT")]
        scripts: Vec<PathBuf>,
    },
    /// Solve A·x = b from .npy files by CG, BiCG, BiCGSTAB or GMRES, each iteration fused.
    #[command(
        long_about = "Solve A·x = b read from --inputs DIR (A.npy n×n, b.npy, optionally x0.npy; float32 or \
float64) by a Krylov method whose every iteration runs as one fused program, its scalars computed on the \
device: only the residual norm the stopping test reads crosses to the host (BiCGSTAB: and its half step's; \
GMRES: its column of the Hessenberg matrix, solved on the host as SciPy does). \
The stopping test and return codes are SciPy's (scipy.sparse.linalg): converged where \
‖b − A·x‖ ≤ max(rtol·‖b‖, atol). A progress line (iteration, ‖r‖) shows on a terminal; the last line says \
how the solve ended. Exit status 0 when converged, 1 when not (x is still written: the last iterate, never \
a NaN one after a breakdown), 2 for bad input. \
With --distributed, under `mpirun -n R`, each rank reads its block of the rows of A, b and x0 and the ranks \
solve together (the CPU unless --backend says otherwise); rank 0 shows the progress, says how it ended and \
writes x, and a bad input on any rank makes every rank exit 2 with one message.",
        after_help = "Examples:\n  fuse solve bicg --inputs sys/ --outputs out/\n  \
fuse solve cg --inputs sys/ --rtol 1e-8 --jacobi --backend cpu\n  \
fuse solve bicgstab --inputs sys/ --maxiter 500 --check-every 10\n  \
fuse solve gmres --inputs sys/ --restart 30\n  \
mpirun -n 4 fuse solve cg --inputs sys/ --outputs out/ --distributed"
    )]
    Solve(solve::SolveArgs),
    /// Print how the rewrite stage rephrased a script before exploring it.
    #[command(
        long_about = "Print how the rewrite stage rephrased a script: each step as `rule: calls before → \
calls after`, then the calls the explorer fuses. The rules rephrase the same math so that its plan does \
not depend on how it was written: a map of a walk's result joins the walk (`map-joins-walk`: \
`t = A·x; u = a·t + c` → `u = a·A·x + c`, scaling folded the same way), and a walk accumulating onto \
another walk's result no longer waits for it (`split-accumulation`). Results are the same up to rounding.",
        after_help = "Example: fuse rewrite scripts/atax.yaml"
    )]
    Rewrite {
        /// Script file.
        script: PathBuf,
    },
    /// Print the data-dependency graph of a script as Graphviz DOT.
    #[command(
        long_about = "Print the data-dependency graph as Graphviz DOT: one box per call (double \
border: it produces an output), a solid arrow where one call reads what another computes, a \
dashed line where two calls read the same value (the data a fused kernel reads once).",
        after_help = "Example: fuse graph scripts/gemver.yaml | dot -Tsvg > gemver.svg"
    )]
    Graph {
        /// Script file.
        script: PathBuf,
    },
    /// Run a script and print or save its outputs.
    #[command(
        long_about = "Run a script. With --inputs DIR every input comes from DIR/<name>.npy \
(float32 or float64 as the script's precision; scalars as 0-d arrays), and a missing file is an \
error — unless the input is named with --random, or --random-rest is given. Without --inputs, \
every input is drawn uniformly from [-1, 1) with --seed. Drawn inputs are named on standard \
error. Outputs go to DIR/<name>.npy with --outputs, or are summarised on the terminal.",
        after_help = "Without --backend, fuse runs on the GPU (cuda) when one is there and on the CPU otherwise, \
and says which on standard error. On the GPU the plan is the one `fuse tune` remembered for this script, \
sizes and GPU, else the best predicted by this GPU's timing table (see `fuse calibrate`); compiled \
modules are cached on disk ($FUSE_CACHE_DIR, else ~/.cache/fuse), so a second run compiles nothing.\n\n\
Environment (CPU): FUSE_NUM_THREADS=N runs on N threads; FUSE_SIMD=avx512|avx2|scalar (neon on aarch64) \
runs the kernels in that instruction set instead of the widest the CPU has (one the CPU lacks, or an unknown \
name, is refused; `fuse explain` and `fuse bench` say which runs); FUSE_CPU_TIMINGS=FILE ranks plans by that table.\n\n\
Examples:\n  fuse run scripts/bicgk.yaml\n  fuse run scripts/gemver.yaml --size m=1000 --size n=300 --seed 7\n  \
fuse run scripts/atax.yaml --inputs in/ --outputs out/\n  \
fuse run scripts/bicgk.yaml --inputs in/ --random r\n  fuse run scripts/bicgk.yaml --backend cuda --size m=8192 --size n=8192\n  \
mpirun -n 4 fuse run scripts/atax.yaml --distributed --inputs in/ --outputs o/"
    )]
    Run {
        /// Script file.
        script: PathBuf,
        /// Where to run it; without it, the best backend available here.
        #[arg(long, value_enum)]
        backend: Option<Backend>,
        /// Override a size of the script, e.g. --size m=1000 (repeatable).
        #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
        sizes: Vec<(String, usize)>,
        /// Folder with input arrays as <name>.npy.
        #[arg(long, value_name = "DIR")]
        inputs: Option<PathBuf>,
        /// Folder to write outputs to as <name>.npy (created if missing); all are written, or
        /// none.
        #[arg(long, value_name = "DIR")]
        outputs: Option<PathBuf>,
        /// With --outputs: replace files in the way that are not .npy arrays.
        #[arg(long)]
        force: bool,
        /// Seed for inputs drawn at random.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print where the run's time went on standard error: copying the inputs to the device,
        /// computing (the kernels' time by CUDA events on a GPU), copying the outputs back.
        #[arg(long)]
        timing: bool,
        /// With --inputs: draw this input at random instead of reading it (repeatable).
        #[arg(long = "random", value_name = "NAME")]
        random: Vec<String>,
        /// With --inputs: draw every input that has no file at random.
        #[arg(long)]
        random_rest: bool,
        /// With --backend cuda: choose the plan as if a size were this (repeatable), e.g. run the
        /// plan chosen for 8192×8192 at small sizes under compute-sanitizer.
        #[arg(long = "plan-size", value_name = "NAME=VALUE", value_parser = parse_size)]
        plan_sizes: Vec<(String, usize)>,
        /// Run as one rank of many, under `mpirun -n R`: each rank reads and computes its own
        /// block of the matrices' rows, rank 0 writes the outputs (see `fuse explain --ranks R`).
        /// Needs a fuse built with the `mpi` feature.
        #[arg(long)]
        distributed: bool,
    },
    /// Generate the CUDA source of a plan; compile it with NVRTC where available.
    #[command(
        long_about = "Generate the CUDA source of the best predicted plan (or of --plan RANK) among the \
GPU plans of --backend (cuda or emulate; without it, the GPU here, else emulate), ranked as \
`fuse explore --backend` ranks them — the first line of the output says which plan of how many, \
by which timing table — and write it to DIR: <name>.cu, plan.yaml (kernels, launch steps, argument order) and, where NVRTC \
is available, <name>.<arch>.ptx, resources.txt (registers, spills and shared memory per \
kernel, from ptxas) and profile.txt, also printed: per kernel the widest global load in bits \
(128 = 16-byte vector loads), the numbers of a matrix row each thread loads at once, atomics and \
warp shuffles per 1024 matrix elements, registers, spills, blocks per SM and waves at the sizes \
given. Where nvdisasm is at hand (the nvidia-cuda-nvdisasm wheel, or FUSE_NVDISASM), the cubin's \
SASS is written too (<name>.<arch>.sass) and each kernel's hot loop read from it: instructions \
per 128-bit load (the probes that reached 93-96 % of an H100's copy bandwidth run 10-14), narrow \
loads beyond its row values (a scalar fallback), barriers per row and the 16-byte loads in \
flight before their first use, which with the blocks resident give the KiB in flight on the SMs \
holding the most blocks (32 KiB or more hide an H100's DRAM latency), and how full the last wave \
is. These are what make memory-bound kernels fast or slow on any GPU. \
Without NVRTC the source is still written, with a note.",
        after_help = "Example: fuse compile scripts/gemver.yaml -o out/gemver"
    )]
    Compile {
        /// Script file.
        script: PathBuf,
        /// Folder to write to (created if missing).
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: PathBuf,
        /// Which plan, by predicted rank (1 = best) among the plans of --backend, as `fuse explore
        /// --backend` ranks them.
        #[arg(long, default_value_t = 1, value_name = "RANK")]
        plan: usize,
        /// The backend whose plans to rank, cuda or emulate (the same plans, ranked by the GPU's
        /// table or the analytic H100's); without it, the GPU here, else emulate.
        #[arg(long, value_enum)]
        backend: Option<Backend>,
        /// Override a size of the script, e.g. --size m=1000 (repeatable).
        #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
        sizes: Vec<(String, usize)>,
        /// Timing table to predict with instead of the shipped one.
        #[arg(long, value_name = "FILE")]
        timings: Option<PathBuf>,
        /// GPU architecture to compile for.
        #[arg(long, default_value = "sm_90")]
        arch: String,
    },
    /// List the library's elementary functions and their forms.
    Functions,
    /// Rank fusion plans by predicted time: which calls share a kernel, and how fast.
    #[command(
        long_about = "Enumerate the legal fusions of a script's calls, predict each implementation's \
time from a timing table (transfers and compute summed per kernel, plus launch overhead), and \
print the best plans. Plans are those of the backend `fuse run` would use (or --backend), ranked \
by its timing table at the sizes given, and described in its words: on the CPU, passes of threads \
over tiles; on a GPU (cuda, or emulate for GPU plans without one), kernels of blocks with shared \
memory. The header states the sizes, the backend, the timing table and how many plans exist.",
        after_help = "Examples:\n  fuse explore scripts/bicgk.yaml\n  fuse explore scripts/gemver.yaml --all\n  \
fuse explore scripts/atax.yaml --backend emulate --top 1 --json\n  \
fuse explore scripts/atax.yaml --backend cuda --timings my-gpu.yaml"
    )]
    Explore(explore::ExploreArgs),
    /// For every pair of calls that share data: fused in the best plan, or which rule kept them apart.
    #[command(
        long_about = "Print the best plan of the backend `fuse run` would use (or --backend) at the \
sizes given, in its words, and for every pair of calls that share data whether that plan fuses \
them or which rule (or prediction) keeps them apart.",
        after_help = "Examples:\n  fuse explain scripts/gemver.yaml\n  fuse explain scripts/atax.yaml --backend emulate\n  \
fuse explain scripts/bicgk.yaml --ranks 4 --size m=100000"
    )]
    Explain(explore::ExplainArgs),
    /// Time fused plans against cuBLAS (GPU) or the same calls run one kernel each (CPU).
    #[command(
        long_about = "Benchmark scripts. On a GPU (--backend cuda, the default where one is): the \
plan `fuse run` runs (tuned, else the best predicted) against the same script written with cuBLAS as \
a cuBLAS user would (gemv with the transpose flag for row-major data, ger, geam for madd, \
copy/scal/axpy/dot, and the copies in-place BLAS forces), timed with CUDA events, the L2 cache \
flushed before each run; a plan of several steps (zero fills, launches) is timed both ways a run \
may go, its steps queued one by one and replayed as one CUDA graph, and the faster is its time, \
as repeated runs of `fuse` settle on it. On the CPU (--backend cpu): the best plan for the CPU against the unfused \
plan (the same calls, one kernel each). Both versions are checked against the f64 reference at \
small sizes first, then timed at the sizes given (median of --runs runs after warm-up, the two \
alternating; on the CPU each timed after a parallel copy of the problem's bytes and an untimed run \
of itself, so that both find the caches alike, as their own last run left them; the copy is timed \
too). Reported: both times, the speedup, \
the effective GB/s (compulsory bytes — every input read once, every output written once — over \
the fused time) and its percentage of the copy bandwidth. On the CPU, whose memory is shared \
with other work, the speedup and the percentage are medians of each run's own ratios (to the \
baseline and the copy timed beside it).",
        after_help = "Examples:\n  fuse bench scripts/bicgk.yaml scripts/gemver.yaml --size m=8192 --size n=8192\n  \
fuse bench scripts/vadd.yaml --size n=67108864 --json\n  \
fuse bench scripts/*.yaml --size m=16384 --size n=16384 --runs 30"
    )]
    Bench(bench::BenchArgs),
    /// Measure this machine and write a timing table for the explorer.
    #[command(
        long_about = "Measure what the explorer ranks plans by and write a timing table (YAML, \
the format of library/timings/). `--backend cuda` (the default where a GPU is) measures a GPU \
(paper §4.2): the device-to-device copy bandwidth, the launch overhead, the arithmetic peaks, and \
every library routine in simulated fusion environments (warps per block, serial iterations, extra \
shared memory), each with CUDA events, warm-up and the median of repeats; the table is keyed by the \
GPU's name and compute capability and installed where `fuse run`, `explore`, `bench` and `tune` \
find it for that GPU. `--backend cpu` measures the CPU: the copy bandwidth of memory, the \
arithmetic peaks, the cost of a parallel section, and the compute time of every library function \
on data in cache, in about a second on any machine; the table is keyed by the CPU's instruction \
set, cache sizes and the threads fuse runs, and installed where `fuse run`, `explore`, `bench` and \
`tune` find it for that key (unless FUSE_CPU_CALIBRATE=0). The table records the library's \
checksum: after the library changes, calibrate again (a stale table is refused with that advice).",
        after_help = "Examples:\n  fuse calibrate              # this GPU, installed for it (a minute or two)\n  \
fuse calibrate --device 1 -o gpu1.yaml\n  \
fuse calibrate --backend cpu  # this CPU, installed for its key\n  \
fuse calibrate --backend cpu -o my-cpu.yaml\n  \
FUSE_CPU_TIMINGS=my-cpu.yaml fuse run scripts/bicgk.yaml"
    )]
    Calibrate(calibrate::CalibrateArgs),
    /// Time the best predicted plans on the GPU and remember the fastest for `fuse run`.
    #[command(
        long_about = "Time the K best predicted plans of a script on the GPU (CUDA events, warm-up, \
median of --runs), each first checked against the f64 reference at small sizes. Prints each plan's \
predicted and measured time, the predicted rank of the fastest and the first predicted plan's speed as \
a percentage of the fastest — how good the prediction is (paper Table 4). The fastest plan is \
remembered in a per-GPU tune cache; `fuse run --backend cuda` uses it for the same script and sizes.",
        after_help = "Examples:\n  fuse tune scripts/gemver.yaml --top 10\n  fuse tune scripts/bicgk.yaml --size m=16384 --size n=16384 --json"
    )]
    Tune(tune::TuneArgs),
    /// Check generated kernels against the f64 reference: every script, top plans, odd sizes.
    #[command(
        long_about = "The correctness matrix of fuse's tests, run by the binary alone (no cargo needed on a \
GPU machine): for every script, in f32 and its f64 twin, the --top best predicted plans (and, in f64, \
the unfused plan) at the sizes 67×45, 1×300, 300×1 and 257×513, outputs poisoned with NaN before each \
run, compared with the f64 reference (normwise relative error below 1e-4 in f32, 1e-12 in f64). One \
line per plan; exit status 1 if any plan is wrong.",
        after_help = "Examples:\n  fuse selftest scripts/*.yaml --backend cuda\n  fuse selftest scripts/bicgk.yaml --backend emulate --top 1"
    )]
    Selftest(selftest::SelftestArgs),
    /// List the GPUs and the CUDA libraries fuse finds here.
    #[command(
        long_about = "Print the CUDA libraries fuse loads (driver, NVRTC, cuBLAS), where its caches \
live, and each GPU the NVIDIA driver reports (name, compute capability, SMs, memory, L2) with its \
timing table. Without a usable GPU the rest is printed all the same, then why there is none. Exit \
status 3 when there is no usable GPU."
    )]
    Devices,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    interrupt::install();
    let alternative = cli.command.without_a_gpu();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            failure::print(&f, alternative);
            ExitCode::from(f.code)
        }
    }
}

impl Command {
    /// What the subcommand can do instead when no GPU is usable.
    fn without_a_gpu(&self) -> Option<&'static str> {
        match self {
            Command::Run { .. }
            | Command::Bench(_)
            | Command::Calibrate(_)
            | Command::Explore(_)
            | Command::Explain(_) => Some(failure::USE_THE_CPU),
            Command::Selftest(_) => Some("use --backend emulate"),
            _ => None,
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    // A thread count set by the user is checked before anything runs on the CPU's threads.
    if std::env::var_os(fuse::THREADS_VAR).is_some() {
        fuse::Threads::shared().map_err(bad_input)?;
    }
    // So is the instruction set asked for.
    fuse::SimdLevel::shared().map_err(bad_input)?;
    let library = Arc::new(
        match &cli.library {
            Some(dir) => Library::load(dir),
            None => Library::builtin(),
        }
        .map_err(bad_input)?,
    );
    match cli.command {
        Command::Check { scripts } => check(&scripts, &library),
        Command::Solve(args) => solve::run(&args, &library),
        Command::Rewrite { script } => {
            let program = load(&script, &library)?;
            print!("{}", rewrites(&program));
            Ok(())
        }
        Command::Graph { script } => {
            let program = load(&script, &library)?;
            print!("{}", DataGraph::build(&program).to_dot(&program));
            Ok(())
        }
        Command::Run {
            script,
            backend,
            sizes,
            inputs,
            outputs,
            force,
            seed,
            random,
            random_rest,
            plan_sizes,
            timing,
            distributed,
        } => {
            // Under mpirun every rank loads the script, and agrees on it before saying anything: a
            // script missing on one rank is said once, its warnings by rank 0.
            let program = args::load_quiet(&script, &library);
            if let (Ok(program), false) = (&program, distributed) {
                args::warn(program);
            }
            let options = run::RunOptions {
                library: &library,
                backend,
                sizes,
                plan_sizes,
                inputs,
                outputs,
                force,
                seed,
                random,
                random_rest,
                timing,
            };
            match distributed {
                true => distributed::run_script(program, &options),
                false => run::run_script(&program?, &options),
            }
        }
        Command::Explore(args) => explore::run_explore(&args, &library),
        Command::Explain(args) => explore::run_explain(&args, &library),
        Command::Bench(args) => bench::run(&args, &library),
        Command::Calibrate(args) => calibrate::run(&args, &library),
        Command::Tune(args) => tune::run(&args, &library),
        Command::Selftest(args) => selftest::run(&args, &library),
        Command::Devices => devices::run(),
        Command::Compile {
            script,
            out,
            plan,
            backend,
            sizes,
            timings,
            arch,
        } => {
            let program = load(&script, &library)?;
            let bound = args::bind_sizes(&program, &sizes)?;
            let args = compile::CompileArgs {
                out,
                rank: plan,
                backend,
                timings,
                arch,
            };
            compile::compile(&program, &bound, &library, &args)
        }
        Command::Functions => {
            functions(&library);
            Ok(())
        }
    }
}

fn check(scripts: &[PathBuf], library: &Library) -> Result<(), Failure> {
    let mut failed = 0;
    for path in scripts {
        match script::load(path, library) {
            Ok(program) => {
                let rewritten = match program.rewrites.len() {
                    0 => String::new(),
                    n => format!(
                        " (rewritten in {n} step{}: see `fuse rewrite`)",
                        if n == 1 { "" } else { "s" }
                    ),
                };
                println!("ok  {}: {program}{rewritten}", path.display());
                args::warn(&program);
            }
            Err(e) => {
                eprintln!("error: {e}");
                failed += 1;
            }
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(bad_input(format!("{n} of {} scripts failed the check", scripts.len()))),
    }
}

/// The rewrite steps of `program`, then its calls as the explorer sees them.
fn rewrites(program: &Program) -> String {
    let mut out = match program.rewrites.len() {
        0 => format!("{}: no rewrite: the calls are fused as written\n", program.file),
        n => format!("{}: {n} rewrite step{}\n", program.file, if n == 1 { "" } else { "s" }),
    };
    for step in &program.rewrites {
        out.push_str(&format!("  {step}\n"));
    }
    out.push_str("calls:\n");
    for call in &program.calls {
        out.push_str(&format!("  {}\n", call.text));
    }
    out
}

fn functions(library: &Library) {
    println!("library: {}", library.origin);
    for f in library.functions() {
        let prefixes: String = f.precisions.iter().map(|p| p.prefix()).collect();
        println!("[{prefixes}]{:<6} {:<13} {}", f.name, f.kind, f.description);
        for form in &f.forms {
            println!("         {}", form.formula_text);
        }
    }
}
