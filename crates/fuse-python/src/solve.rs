//! `fuseblas.linalg`'s native half: a Krylov solve of `fuse::solvers` on values of a session,
//! the session's lock held and the GIL released throughout. The Python half gives it SciPy's
//! signature.

use std::sync::{Arc, Mutex};

use fuse::solvers::{self, Callback, Options, Solution};
use fuse::{AnyHandle, Matrix, Vector};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::errors::{input_error, IntoPy};
use crate::session::{lock, typed, Precise, Shared, Value};

/// A solver of `fuse::solvers`, in `T`.
type Solver<T> =
    fn(&fuse::Session<T>, &Matrix<T>, &Vector<T>, Option<&Vector<T>>, &Options<T>) -> fuse::Result<Solution<T>>;

/// A, b, x0 and the Jacobi vector of a solve.
type System<T> = (Matrix<T>, Vector<T>, Option<Vector<T>>, Option<Vector<T>>);

/// What a solve hands back: x, SciPy's info, the iterations run, ‖r‖ at each read, and why it
/// stopped in words.
type Solved = (Value, i64, usize, Vec<f64>, String);

/// Solves `a·x = b` by `method` (`"cg"`, `"bicg"`, `"bicgstab"`, `"gmres"`) on values of one
/// session and dtype; `jacobi` is the inverse of A's diagonal. `callback(x)` is called with
/// each iterate as a numpy array (a copy) where SciPy would call it; Ctrl-C or an exception
/// it raises ends the solve and is raised here.
#[pyfunction]
#[pyo3(signature = (method, a, b, x0, jacobi, rtol, atol, maxiter, check_every, restart, callback))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn solve(
    py: Python<'_>,
    method: &str,
    a: &Bound<'_, Value>,
    b: &Bound<'_, Value>,
    x0: Option<Bound<'_, Value>>,
    jacobi: Option<Bound<'_, Value>>,
    rtol: f64,
    atol: f64,
    maxiter: Option<usize>,
    check_every: usize,
    restart: Option<usize>,
    callback: Option<Py<PyAny>>,
) -> PyResult<Solved> {
    let (a, b) = (a.get(), b.get());
    let x0 = x0.as_ref().map(Bound::get);
    let jacobi = jacobi.as_ref().map(Bound::get);
    let named = [("b", Some(b)), ("x0", x0), ("M", jacobi)];
    for (name, value) in named.iter().filter_map(|(n, v)| v.map(|v| (n, v))) {
        if !Arc::ptr_eq(&value.shared, &a.shared) {
            return Err(input_error(format!("{name} is a value of another session than A")));
        }
    }
    let settings = Settings {
        rtol,
        atol,
        maxiter,
        check_every,
        restart,
    };
    let shared = Arc::clone(&a.shared);
    let raised = Arc::new(Mutex::new(None));
    let hook = Hook {
        callback,
        raised: Arc::clone(&raised),
    };
    let f32_args = typed_args::<f32>(a, b, x0, jacobi);
    let f64_args = typed_args::<f64>(a, b, x0, jacobi);
    let method = method.to_string();
    let result = py.detach(move || match (f32_args, f64_args) {
        (Some(args), _) => run::<f32>(&shared, &method, args, &settings, hook),
        (_, Some(args)) => run::<f64>(&shared, &method, args, &settings, hook),
        _ => Err(fuse::Error::Solver(
            "A, b, x0 and M must be values of one dtype: A a matrix, the others vectors".into(),
        )),
    });
    if let Some(err) = raised.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(err);
    }
    let (x, info, iterations, residuals, reason) = result.py_err()?;
    Ok((
        Value {
            shared: Arc::clone(&a.shared),
            handle: x,
        },
        info,
        iterations,
        residuals,
        reason,
    ))
}

/// The numbers of [`Options`].
struct Settings {
    rtol: f64,
    atol: f64,
    maxiter: Option<usize>,
    check_every: usize,
    restart: Option<usize>,
}

/// The Python callback, and where what it (or Ctrl-C) raised is kept for the caller.
struct Hook {
    callback: Option<Py<PyAny>>,
    raised: Arc<Mutex<Option<PyErr>>>,
}

impl Hook {
    /// The solver's callback: checks for Ctrl-C, then calls the Python callback with the
    /// iterate read to numpy.
    fn into_callback<T: Precise>(self) -> Callback<T> {
        Arc::new(move |session: &fuse::Session<T>, _, _, x: &Vector<T>| {
            let values = match &self.callback {
                Some(_) => Some(session.read(x)?),
                None => None,
            };
            let called = Python::attach(|py| -> PyResult<()> {
                py.check_signals()?;
                if let (Some(callback), Some(values)) = (&self.callback, values) {
                    callback.call1(py, (PyArray1::from_vec(py, values),))?;
                }
                Ok(())
            });
            called.map_err(|e| {
                *self.raised.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                fuse::Error::Solver("the solve was interrupted".into())
            })
        })
    }
}

/// A, b, x0 and the Jacobi vector in `T`, where each is of `T` and of its kind.
fn typed_args<T: Precise>(a: &Value, b: &Value, x0: Option<&Value>, jacobi: Option<&Value>) -> Option<System<T>> {
    let vector = |v: &Value| match typed::<T>(&v.handle) {
        Some(AnyHandle::Vector(v)) => Some(v),
        _ => None,
    };
    let a = match typed::<T>(&a.handle) {
        Some(AnyHandle::Matrix(m)) => m,
        _ => return None,
    };
    let optional = |v: Option<&Value>| v.map(|v| vector(v).ok_or(())).transpose().ok();
    Some((a, vector(b)?, optional(x0)?, optional(jacobi)?))
}

fn run<T: Precise>(
    shared: &Shared,
    method: &str,
    (a, b, x0, jacobi): System<T>,
    settings: &Settings,
    hook: Hook,
) -> fuse::Result<(crate::session::Handles, i64, usize, Vec<f64>, String)> {
    let solver: Solver<T> = match method {
        "cg" => solvers::cg,
        "bicg" => solvers::bicg,
        "bicgstab" => solvers::bicgstab,
        "gmres" => solvers::gmres,
        other => {
            return Err(fuse::Error::Solver(format!(
                "no solver `{other}`: cg, bicg, bicgstab or gmres"
            )))
        }
    };
    let options = Options {
        rtol: settings.rtol,
        atol: settings.atol,
        maxiter: settings.maxiter,
        check_every: settings.check_every,
        jacobi,
        restart: settings.restart,
        callback: Some(hook.into_callback()),
        ..Options::default()
    };
    let mut sessions = lock(shared);
    let session = T::session(&mut sessions)?;
    let solution = solver(session, &a, &b, x0.as_ref(), &options)?;
    let reason = match solution.outcome {
        solvers::Outcome::Converged => "converged".to_string(),
        solvers::Outcome::MaxIterations => format!("maxiter: {} iterations without converging", solution.iterations),
        solvers::Outcome::Breakdown(b) => b.to_string(),
    };
    let info = solution.info();
    Ok((
        T::wrap(AnyHandle::Vector(solution.x)),
        info,
        solution.iterations,
        solution.residuals,
        reason,
    ))
}
