//! `fuse solve`: `A·x = b` from `.npy` files, by a Krylov method whose every iteration runs as
//! one fused program (see `fuse::solvers`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use fuse::solvers::{self, Options, Outcome, Solution};
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
    /// Where to run; without it, the GPU when there is one, else the CPU.
    #[arg(long, value_enum)]
    backend: Option<Backend>,
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
    let mut system = Bindings::new();
    for (name, required) in [("A", true), ("b", true), ("x0", false)] {
        if !required && !fuse::stages::fuse_core::file::is_there(&path(name)) {
            continue;
        }
        check_dtype(&path(name), &dtype)?;
        system.insert(
            name.into(),
            npy::read_rows(&path(name), precision, None).map_err(bad_input)?,
        );
    }
    let read: Vec<PathBuf> = system.keys().map(|name| path(name)).collect();
    if let Some(dir) = &args.outputs {
        // Before the solve: a target in the way is found at once, not after minutes.
        let never = || false;
        let options = output_options(precision, &read, args.force, &never);
        npy::check_outputs(&["x"], dir, &options).map_err(bad_input)?;
    }
    let backend = match args.backend {
        Some(b) => fuse::Backend::from(b),
        None => fuse::Backend::detect(),
    };
    let (x, summary, converged) = match precision {
        Precision::F32 => solve::<f32>(args, backend, library, &system)?,
        Precision::F64 => solve::<f64>(args, backend, library, &system)?,
    };
    eprintln!("{summary}");
    match &args.outputs {
        Some(dir) => {
            let solution = Bindings::from([("x".to_string(), x)]);
            for path in write_outputs(precision, &solution, dir, &read, args.force)? {
                println!("wrote {}", path.display());
            }
        }
        None => println!("x  {x}"),
    }
    match converged {
        true => Ok(()),
        false => Err(Failure {
            code: 1,
            message: format!("{}: not converged", method_name(args.method)),
        }),
    }
}

/// Every file of the system holds `dtype`.
fn check_dtype(path: &Path, dtype: &str) -> Result<(), Failure> {
    let (_, own) = npy::read_header(path).map_err(bad_input)?;
    match own == dtype {
        true => Ok(()),
        false => Err(bad_input(format!(
            "{}: {own}, but A is {dtype}: give the system in one precision",
            path.display()
        ))),
    }
}

/// Solves the system in precision `T`: the solution, the line saying how it ended, and
/// whether it converged.
fn solve<T: Element>(
    args: &SolveArgs,
    backend: fuse::Backend,
    library: &Arc<Library>,
    system: &Bindings,
) -> Result<(HostArray, String, bool), Failure> {
    let options = CompileOptions::new().library(Arc::clone(library));
    let session = Session::<T>::with_options(backend, options).map_err(failure)?;
    let values = |name: &str| -> Vec<T> { T::values(&system[name]).map(<[T]>::to_vec).unwrap_or_default() };
    let n = system["b"].dims.first().copied().unwrap_or(0);
    let a_values = values("A");
    let jacobi: Option<Vec<T>> = args.jacobi.then(|| {
        (0..n)
            .map(|i| T::from_f64(1.0 / a_values[i * n + i].to_f64()))
            .collect()
    });
    let a = session
        .matrix(system["A"].dims[0], system["A"].dims[1], a_values)
        .map_err(failure)?;
    let b = session.vector(values("b")).map_err(failure)?;
    let x0 = match system.contains_key("x0") {
        true => Some(session.vector(values("x0")).map_err(failure)?),
        false => None,
    };
    let bar = ProgressBar::new_spinner();
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
        jacobi: jacobi.map(|d| session.vector(d)).transpose().map_err(failure)?,
        callback: Some(Arc::new(
            move |_: &Session<T>, iteration, residual, _: &fuse::Vector<T>| {
                shown.set_message(format!("iteration {iteration}: ‖r‖ = {residual:.3e}"));
                shown.tick();
                Ok(())
            },
        )),
    };
    let method = match args.method {
        Method::Cg => solvers::cg,
        Method::Bicg => solvers::bicg,
        Method::Bicgstab => solvers::bicgstab,
        Method::Gmres => solvers::gmres,
    };
    let solution = method(&session, &a, &b, x0.as_ref(), &options).map_err(failure)?;
    bar.finish_and_clear();
    let x = session.read(&solution.x).map_err(failure)?;
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
