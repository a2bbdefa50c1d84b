//! `fuse solve`: `A·x = b` from `.npy` files, by a Krylov method whose every iteration runs as
//! one fused program (see `fuse::solvers`).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use fuse::solvers::{self, Options, Outcome, Solution, Symmetry};
use fuse::stages::fuse_core::distribute::RowBlocks;
use fuse::stages::fuse_core::{Bindings, HostArray, Precision};
use fuse::{CompileOptions, Element, Library, Session};

use crate::args::Backend;
use crate::failure::{bad_input, failure, Failure};
use crate::npy;
use crate::run::{output_options, write_outputs};

/// Options of `fuse solve`.
#[derive(Args)]
pub struct SolveArgs {
    /// The method.
    #[arg(value_enum)]
    method: Method,
    /// Folder with the system: `A.npy` (n×n), `b.npy` (n) and, optionally, the starting guess
    /// `x0.npy` (n); float32 or float64, all of one precision (the solve's).
    #[arg(long, value_name = "DIR")]
    inputs: PathBuf,
    /// Folder to write the solution to as `x.npy` (created if missing); without it, a summary
    /// of x is printed.
    #[arg(long, value_name = "DIR")]
    outputs: Option<PathBuf>,
    /// With --outputs: replace an `x.npy` in the way that is not a .npy array.
    #[arg(long)]
    force: bool,
    /// Relative tolerance: converged where ‖b − A·x‖ ≤ max(rtol·‖b‖, atol), as SciPy.
    #[arg(long, default_value_t = 1e-5)]
    rtol: f64,
    /// Absolute tolerance.
    #[arg(long, default_value_t = 0.0)]
    atol: f64,
    /// At most this many iterations [default: 10·n].
    #[arg(long)]
    maxiter: Option<usize>,
    /// Read the residual every K iterations (nothing else crosses to the host between reads).
    #[arg(long, value_name = "K", default_value_t = 1)]
    check_every: usize,
    /// GMRES: iterations between restarts [default: 20].
    #[arg(long, value_name = "M")]
    restart: Option<usize>,
    /// Precondition with the inverse of A's diagonal (Jacobi), applied on the device.
    #[arg(long)]
    jacobi: bool,
    /// When an exactly symmetric A (checked once, in one pass) is multiplied by its upper
    /// triangle only, half the bytes a product reads: where it is larger than the CPU's
    /// last-level cache (`large`), wherever it is symmetric (`always`), or never.
    #[arg(long, value_enum, default_value = "large")]
    symmetry: SymmetryArg,
    /// Where to run; without it, the GPU when there is one, else the CPU (with --distributed:
    /// the CPU).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Run as one rank of many, under `mpirun -n R`: each rank reads its block of the rows of
    /// A, b and x0, an iteration exchanges the vector A multiplies and a few scalars, and rank 0
    /// shows the progress and writes x. Needs a fuse built with the `mpi` feature.
    #[arg(long)]
    distributed: bool,
}

/// `--symmetry`: see [`Symmetry`].
#[derive(Clone, Copy, ValueEnum)]
enum SymmetryArg {
    /// Where A is larger than the last-level cache.
    Large,
    /// Wherever A is symmetric.
    Always,
    /// Never: every product reads all of A.
    Never,
}

/// The Krylov methods.
#[derive(Clone, Copy, ValueEnum)]
enum Method {
    /// Conjugate gradients, for symmetric positive definite A.
    Cg,
    /// Biconjugate gradients: A·p and Aᵀ·p̃ of an iteration in one pass over A.
    Bicg,
    /// BiCGSTAB.
    Bicgstab,
    /// Restarted GMRES (--restart), its Gram–Schmidt as products with the basis.
    Gmres,
}

/// `fuse solve`, with the functions of `library` (`--library`).
pub fn run(args: &SolveArgs, library: &Arc<Library>) -> Result<(), Failure> {
    if args.distributed {
        return over_ranks(args, library);
    }
    let system = read_system(args, None)?;
    check_outputs(args, &system)?;
    let backend = match args.backend {
        Some(b) => fuse::Backend::from(b),
        None => fuse::Backend::detect(),
    };
    let options = CompileOptions::new().library(Arc::clone(library));
    match system.precision {
        Precision::F32 => finish(args, &system, Session::<f32>::with_options(backend, options)),
        Precision::F64 => finish(args, &system, Session::<f64>::with_options(backend, options)),
    }
}

/// The system as this process holds it: its rows of A, b and x0.
pub struct System {
    pub precision: Precision,
    /// The order of A.
    n: usize,
    /// This process's rows (all of them in one process).
    rows: Range<usize>,
    /// Its rows of `A`, `b` and (where given) `x0`.
    arrays: Bindings,
    /// The files read.
    read: Vec<PathBuf>,
}

/// `fuse solve --distributed`: the ranks read their rows of the system (every file's
/// header checked first, on every rank: one rank's bad input is every rank's), rank 0
/// checks the output, then the solve runs on a session over the ranks.
#[cfg(feature = "mpi")]
fn over_ranks(args: &SolveArgs, library: &Arc<Library>) -> Result<(), Failure> {
    use crate::distributed::{agree, said_once};
    use fuse::distributed::{Communicator, Mpi};

    let comm = Mpi::init().map_err(failure)?;
    let (rank, ranks) = (comm.rank(), comm.ranks());
    let ready = agree(&comm, read_system(args, Some((rank, ranks))).map_err(|f| f.message)).and_then(|system| {
        let checked = match rank {
            0 => check_outputs(args, &system).map_err(|f| f.message),
            _ => Ok(()),
        };
        agree(&comm, checked).map(|()| system)
    });
    let system = ready.map_err(|f| said_once(&comm, f))?;
    let backend = args.backend.map_or(fuse::Backend::Cpu, fuse::Backend::from);
    let options = CompileOptions::new().library(Arc::clone(library));
    // The session takes the communicator: it says a failure once from here on; one making
    // it (agreed on every rank) is said by rank 0 alone.
    let once = |f: Failure| match rank {
        0 => f,
        _ => Failure {
            code: f.code,
            message: String::new(),
        },
    };
    match system.precision {
        Precision::F32 => finish(
            args,
            &system,
            Session::<f32>::distributed_with_options(comm, backend, options),
        ),
        Precision::F64 => finish(
            args,
            &system,
            Session::<f64>::distributed_with_options(comm, backend, options),
        ),
    }
    .map_err(once)
}

/// `fuse solve --distributed` in a fuse built without MPI: what to do instead.
#[cfg(not(feature = "mpi"))]
fn over_ranks(_: &SolveArgs, _: &Arc<Library>) -> Result<(), Failure> {
    Err(crate::distributed::without_mpi("fuse solve METHOD"))
}

/// Reads the system from `--inputs`: all of it, or rank `part.0`'s block of rows of the order
/// over `part.1` ranks. Every file is checked by its header first (one precision, A square,
/// b and x0 of its order), so a rank reading rows knows what the whole is.
fn read_system(args: &SolveArgs, part: Option<(usize, usize)>) -> Result<System, Failure> {
    let path = |name: &str| args.inputs.join(format!("{name}.npy"));
    let (shape, dtype) = npy::read_header(&path("A")).map_err(bad_input)?;
    let precision = match dtype.as_str() {
        "float32" => Precision::F32,
        "float64" => Precision::F64,
        other => {
            return Err(bad_input(format!(
                "{}: A is {other}: expected float32 or float64",
                path("A").display()
            )))
        }
    };
    if shape.len() != 2 || shape[0] != shape[1] {
        return Err(bad_input(format!(
            "{}: A has shape {}: expected a square matrix",
            path("A").display(),
            npy::tuple(&shape)
        )));
    }
    let n = shape[0];
    let rows = match part {
        None => 0..n,
        Some((rank, ranks)) => RowBlocks::new(n, ranks)
            .ok_or_else(|| {
                bad_input(format!(
                    "{}: A has {n} rows, too few for {ranks} ranks: each rank needs at least one",
                    path("A").display()
                ))
            })?
            .range(rank),
    };
    let mut arrays = Bindings::new();
    for (name, required) in [("A", true), ("b", true), ("x0", false)] {
        if !required && !fuse::stages::fuse_core::file::is_there(&path(name)) {
            continue;
        }
        check_header(&path(name), name, &dtype, n)?;
        let array = npy::read_rows(&path(name), precision, Some(rows.clone())).map_err(bad_input)?;
        arrays.insert(name.into(), array);
    }
    let read = arrays.keys().map(|name| path(name)).collect();
    Ok(System {
        precision,
        n,
        rows,
        arrays,
        read,
    })
}

/// The file of `name` holds `dtype`, and a vector of length `n` where it is b or x0.
fn check_header(path: &Path, name: &str, dtype: &str, n: usize) -> Result<(), Failure> {
    let (shape, own) = npy::read_header(path).map_err(bad_input)?;
    if own != dtype {
        return Err(bad_input(format!(
            "{}: {own}, but A is {dtype}: give the system in one precision",
            path.display()
        )));
    }
    match (name, shape.as_slice()) {
        ("A", _) => Ok(()),
        (_, &[len]) if len == n => Ok(()),
        (_, &[len]) => Err(bad_input(format!(
            "{}: {name} has length {len}, A is {n}×{n}",
            path.display()
        ))),
        _ => Err(bad_input(format!(
            "{}: {name} has shape {}: expected a vector of length {n}, A is {n}×{n}",
            path.display(),
            npy::tuple(&shape)
        ))),
    }
}

/// With --outputs: the target `x.npy` is fit to write, checked before the solve (a target in
/// the way is found at once, not after minutes).
fn check_outputs(args: &SolveArgs, system: &System) -> Result<(), Failure> {
    let Some(dir) = &args.outputs else {
        return Ok(());
    };
    let never = || false;
    let options = output_options(system.precision, &system.read, args.force, &never);
    npy::check_outputs(&["x"], dir, &options).map_err(bad_input)
}

/// Solves `system` on `session` (made for its precision; over ranks with --distributed), then
/// says how it ended and writes or prints x — rank 0 alone, for a distributed session, where
/// a failure is every rank's, said once. Exit status 1 where it did not converge.
fn finish<T: Element>(args: &SolveArgs, system: &System, session: fuse::Result<Session<T>>) -> Result<(), Failure> {
    let session = session.map_err(failure)?;
    let solved = solve(args, system, &session);
    let rank = session.rank();
    let reported = solved.and_then(|(x, summary, converged)| {
        let written = match rank {
            0 => report(args, system, x, &summary),
            _ => Ok(()),
        };
        agree(&session, written)?;
        match converged {
            true => Ok(()),
            false => Err(Failure {
                code: 1,
                message: format!("{}: not converged", method_name(args.method)),
            }),
        }
    });
    match session.communicator() {
        Some(comm) => reported.map_err(|f| crate::distributed::said_once(comm, f)),
        None => reported,
    }
}

/// `result` on every rank of `session` where it is `Ok` on all, else the first failing rank's
/// failure (as bad input).
fn agree<T: Element>(session: &Session<T>, result: Result<(), Failure>) -> Result<(), Failure> {
    match session.communicator() {
        Some(comm) => {
            fuse::distributed::agree(comm, result.map_err(|f| fuse::Error::Distribution(f.message))).map_err(|e| {
                Failure {
                    code: crate::failure::EXIT_BAD_INPUT,
                    message: e.to_string(),
                }
            })
        }
        None => result,
    }
}

/// Says how the solve ended, then writes x to --outputs or prints it.
fn report(args: &SolveArgs, system: &System, x: HostArray, summary: &str) -> Result<(), Failure> {
    eprintln!("{summary}");
    match &args.outputs {
        Some(dir) => {
            let solution = Bindings::from([("x".to_string(), x)]);
            for path in write_outputs(system.precision, &solution, dir, &system.read, args.force)? {
                println!("wrote {}", path.display());
            }
        }
        None => println!("x  {x}"),
    }
    Ok(())
}

/// Solves the system in precision `T`: the solution (whole, on every rank), the line saying
/// how it ended, and whether it converged.
fn solve<T: Element>(
    args: &SolveArgs,
    system: &System,
    session: &Session<T>,
) -> Result<(HostArray, String, bool), Failure> {
    let values = |name: &str| -> Vec<T> { T::values(&system.arrays[name]).map(<[T]>::to_vec).unwrap_or_default() };
    let n = system.n;
    let a_values = values("A");
    let (start, local) = (system.rows.start, system.rows.len());
    // Each row's diagonal element, at column start + k of local row k.
    let jacobi: Option<Vec<T>> = args.jacobi.then(|| {
        (0..local)
            .map(|k| T::from_f64(1.0 / a_values[k * n + start + k].to_f64()))
            .collect()
    });
    let a = session.matrix_rows(n, n, a_values).map_err(failure)?;
    let b = session.vector_rows(n, values("b")).map_err(failure)?;
    let x0 = match system.arrays.contains_key("x0") {
        true => Some(session.vector_rows(n, values("x0")).map_err(failure)?),
        false => None,
    };
    // Progress on rank 0 alone (and only on a terminal).
    let bar = match session.rank() {
        0 => ProgressBar::new_spinner(),
        _ => ProgressBar::hidden(),
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let shown = bar.clone();
    let options = Options {
        rtol: args.rtol,
        atol: args.atol,
        maxiter: args.maxiter,
        check_every: args.check_every,
        restart: args.restart,
        jacobi: jacobi.map(|d| session.vector_rows(n, d)).transpose().map_err(failure)?,
        callback: Some(Arc::new(
            move |_: &Session<T>, iteration, residual, _: &fuse::Vector<T>| {
                shown.set_message(format!("iteration {iteration}: ‖r‖ = {residual:.3e}"));
                shown.tick();
                Ok(())
            },
        )),
        symmetry: match args.symmetry {
            SymmetryArg::Large => Symmetry::Large,
            SymmetryArg::Always => Symmetry::Always,
            SymmetryArg::Never => Symmetry::Never,
        },
    };
    let method = match args.method {
        Method::Cg => solvers::cg,
        Method::Bicg => solvers::bicg,
        Method::Bicgstab => solvers::bicgstab,
        Method::Gmres => solvers::gmres,
    };
    let solution = method(session, &a, &b, x0.as_ref(), &options).map_err(failure)?;
    bar.finish_and_clear();
    let x = session.gather(&solution.x).map_err(failure)?;
    let summary = describe(args.method, &solution);
    let x = HostArray {
        dims: vec![n],
        data: T::into_data(x),
    };
    Ok((x, summary, solution.outcome == Outcome::Converged))
}

/// `bicg: converged in 37 iterations; ‖r‖ = 1.217e-7 at the last read`.
fn describe<T: Element>(method: Method, solution: &Solution<T>) -> String {
    let how = match solution.outcome {
        Outcome::Converged => format!("converged in {}", iterations(solution.iterations)),
        Outcome::MaxIterations => format!("not converged after {} (--maxiter)", iterations(solution.iterations)),
        Outcome::Breakdown(b) => format!(
            "{b} after {} (SciPy's info {})",
            iterations(solution.iterations),
            b.info()
        ),
    };
    match solution.residuals.last() {
        Some(r) => format!("{}: {how}; ‖r‖ = {r:.3e} at the last read", method_name(method)),
        None => format!("{}: {how}", method_name(method)),
    }
}

/// `1 iteration`, `37 iterations`.
fn iterations(count: usize) -> String {
    format!("{count} iteration{}", if count == 1 { "" } else { "s" })
}

fn method_name(method: Method) -> &'static str {
    match method {
        Method::Cg => "cg",
        Method::Bicg => "bicg",
        Method::Bicgstab => "bicgstab",
        Method::Gmres => "gmres",
    }
}
