//! BiCG on a generated nonsymmetric, diagonally dominant system, through the lazy BLAS API,
//! timed per iteration:
//!
//! ```sh
//! cargo run --release -p fuse --example bicg -- [N] [--backend cuda|cpu|emulate|reference] [--precision f32|f64] [--iterations K] [--no-stop]
//! cargo build --release -p fuse --features mpi --example bicg
//! mpirun -n 4 target/release/examples/bicg 4000 --distributed   # each rank its rows of A
//! target/release/examples/bicg 8192 --backend cuda --local-ranks 1  # ranks as threads: NCCL
//! ```
//!
//! `examples/python/bicg.py` is the same solver from Python, on the same system, with the same
//! arguments and output: through `fuseblas` (its residual history is this one's), or in numpy
//! (`--backend numpy`) to compare the time per iteration with.
//!
//! On a GPU the matrix is uploaded once; each iteration then reads back only the scalars the
//! algorithm needs, so its time is the fused kernels' time plus a few launches.

mod solver;

use std::time::{Duration, Instant};

use clap::Parser;
use fuse::distributed::{Communicator, LocalRanks};
use fuse::{Backend, Element, Session};
use solver::Blas;

/// BiCG on a random nonsymmetric n×n system, timed per iteration.
#[derive(Parser)]
struct Args {
    /// The system size n (A is n×n).
    #[arg(default_value_t = 500)]
    n: usize,
    /// Where to run: cuda, cuda:N, cpu, emulate or reference [default: the GPU if there is
    /// one, else cpu].
    #[arg(long)]
    backend: Option<Backend>,
    /// The precision of the solve: f32 or f64.
    #[arg(long, default_value = "f64", value_parser = ["f32", "f64"])]
    precision: String,
    /// Iterations to run (the solve stops early once ‖r‖/‖b‖ < 1e-10 in f64, 1e-5 in f32).
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    /// Run every iteration, converged or not (until BiCG breaks down), so that the time per
    /// iteration is measured on a system that converges in a few.
    #[arg(long)]
    no_stop: bool,
    /// Run as one rank of `mpirun -n R`, each rank holding its rows of A (build with
    /// `--features mpi`); rank 0 prints.
    #[arg(long)]
    distributed: bool,
    /// Run R ranks as threads of this process, each holding its rows of A (on the GPU, rank r
    /// on GPU r, their collectives through NCCL); rank 0 prints.
    #[arg(long, value_name = "R", conflicts_with = "distributed")]
    local_ranks: Option<usize>,
}

fn main() {
    let args = Args::parse();
    let backend = args.backend.clone().unwrap_or_else(Backend::detect);
    let tolerance = |tol: f64| if args.no_stop { 0.0 } else { tol };
    let outcome = match args.precision.as_str() {
        "f32" => solve::<f32>(&args, backend, tolerance(1e-5)),
        _ => solve::<f64>(&args, backend, tolerance(1e-10)),
    };
    if let Err(e) = outcome {
        eprintln!("error: {e}");
        std::process::exit(if e.is_bad_input() { 2 } else { 1 });
    }
}

fn solve<T: Element>(args: &Args, backend: Backend, tol: f64) -> fuse::Result<()>
where
    Session<T>: Blas<T>,
{
    let Some(ranks) = args.local_ranks else {
        return solve_on(args, new_session::<T>(args.distributed, backend)?, tol);
    };
    let outcomes = LocalRanks::new(ranks).run(|comm| {
        let backend = match backend {
            Backend::Cuda { device } => Backend::Cuda {
                device: device + comm.rank(),
            },
            ref other => other.clone(),
        };
        solve_on(args, Session::<T>::distributed(comm, backend)?, tol)
    });
    outcomes.into_iter().collect()
}

fn solve_on<T: Element>(args: &Args, session: Session<T>, tol: f64) -> fuse::Result<()>
where
    Session<T>: Blas<T>,
{
    let n = args.n;
    let system = solver::generate(n, 2024);
    let say = |line: String| {
        if session.rank() == 0 {
            println!("{line}");
        }
    };
    say(format!(
        "BiCG, n = {n}, {}, backend {}{}",
        T::PRECISION,
        session.backend(),
        match session.ranks() {
            1 => String::new(),
            r => format!(" on each of {r} ranks"),
        }
    ));
    let mut times = Vec::new();
    let mut last = (Instant::now(), session.stats());
    let solution = solver::bicg(&session, &system, tol, args.iterations, |k, residual| {
        let (now, stats) = (Instant::now(), session.stats());
        let step = stats.since(&last.1);
        let wall = now - last.0;
        times.push((wall, step.compute));
        let exchanged = match step.collectives {
            0 => String::new(),
            c => format!("; {c} collectives, {} B in from this rank", step.communicated),
        };
        say(format!(
            "iteration {k:3}  ‖r‖/‖b‖ = {residual:.3e}  {:8.3} ms (compute {:.3} ms, {} B to / {} B from the device{exchanged})",
            ms(wall),
            ms(step.compute),
            step.to_device,
            step.from_device
        ));
        last = (Instant::now(), session.stats());
    })?;
    if let Some(collectives) = session.collectives() {
        say(format!("collectives: {collectives}"));
    }
    let stats = session.stats();
    say(format!(
        "{} iterations; true residual ‖b − A·x‖/‖b‖ = {:.3e}; {} flushes, {} compilations, {} cache hits",
        solution.residuals.len(),
        solver::true_residual(&system, &solution.x),
        stats.flushes,
        stats.compilations,
        stats.cache_hits
    ));
    // The first iterations compile and upload; the steady state is what a solver pays.
    let steady: Vec<(Duration, Duration)> = times.iter().skip(3).copied().collect();
    if !steady.is_empty() {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let wall = median(steady.iter().map(|t| ms(t.0)).collect());
        let compute = median(steady.iter().map(|t| ms(t.1)).collect());
        say(format!(
            "time per iteration (median of iterations 4–{}): {wall:.3} ms, of which compute {compute:.3} ms ({:.2}× the compute)",
            times.len(),
            wall / compute.max(1e-9)
        ));
    }
    Ok(())
}

/// A session in this process, or (with `--distributed`) this rank's of an MPI run.
fn new_session<T: Element>(distributed: bool, backend: Backend) -> fuse::Result<Session<T>> {
    if !distributed {
        return Session::new(backend);
    }
    #[cfg(feature = "mpi")]
    return Session::distributed(fuse::distributed::Mpi::init()?, backend);
    #[cfg(not(feature = "mpi"))]
    Err(fuse::Error::Distribution(
        "--distributed: built without MPI; run `mpirun -n R cargo run --release -p fuse --features mpi --example bicg -- --distributed`".into(),
    ))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
