//! The lazy BLAS-like API, in the style of an active library (DESOLA): a [`Session`] records
//! calls on typed handles and runs them, fused, when a result is read or on [`Session::flush`].
//!
//! Calls keep the BLAS names and argument order of the script language (`sgemv(A, x)`,
//! `saxpy(a, x, y)`, `sger(x, y, A)`; `d` names on a `Session<f64>`). A function with several
//! forms gets one method per form, suffixed by the scalars it adds:
//!
//! | method | computes |
//! |---|---|
//! | `sgemv(A, x)` · `sgemv_a(a, A, x)` · `sgemv_ab(a, A, x, b, y)` | A·x · a·A·x · a·A·x + b·y |
//! | `sgemtv(A, x)` · `sgemtv_a(a, A, x)` · `sgemtv_ab(a, A, x, b, y)` | Aᵀ·x · a·Aᵀ·x · a·Aᵀ·x + b·y |
//! | `sger(x, y, A)` · `sger_a(a, x, y, A)` | A + x·yᵀ · A + a·x·yᵀ |
//!
//! At a flush, the recorded calls become one program — the same data graph a script of those
//! calls would give — whose outputs are the results the user still holds a handle to; results
//! whose handles were all dropped are temporaries, and calls nothing held depends on are not
//! run. Compiled programs are cached by the program's canonical text (which includes the
//! sizes), so the second iteration of a loop compiles nothing. A literal scalar is compiled in
//! as a constant until a flush of the same calls meets another value in its place; from then on
//! it is passed as a scalar value, so a number that changes every iteration compiles twice, not
//! every time.
//!
//! On a device (a GPU, or the emulated one) values live in device memory: a value made on the
//! host is uploaded once, when a flush first needs it; results stay on the device until read,
//! and only what is read comes back. Buffers freed by dropped values are reused by later
//! flushes. [`Stats`] counts the bytes that crossed, so a solver loop can check that only its
//! scalars do. [`Session::matrix_from_device`] and [`Session::to_device`] exchange cudarc
//! device memory without a copy through the host.

mod blas;
mod canonical;
mod device;
mod handle;
mod literals;
mod ranks;
mod record;
mod state;
mod symmetry;

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fuse_core::{DataView, Diagnostic, Form, HostArray, Library, Location, Precision};

use crate::backend::{Backend, CompileOptions};
use crate::distributed::Communicator;
use crate::element::{checked_array, checked_len, Element};
use crate::error::{Error, Result};
use crate::memory::try_collect;
use crate::select::builtin_library;
use canonical::PendingArg;
use state::{not_computed, Copies, Data, State};
pub use state::{Forecast, InPlace, Stats};

use handle::{sealed::Sealed, Token};
pub use handle::{AnyHandle, CallArg, Handle, Matrix, Scalar, ScalarArg, Vector};

/// Session ids, unique in the process, so a handle used with another session is caught.
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// A lazy BLAS session in precision `T` (`f32` or `f64`) on a [`Backend`].
///
/// Calls return handles at once, shape-checked; nothing runs until a result is read or the
/// session is flushed. Then every recorded call that a held handle depends on runs as one fused
/// program. A session is used from one thread at a time (`Send`, not `Sync`); its handles may
/// travel between threads, and sessions on the same device, each on its own thread, do not
/// disturb each other.
///
/// ```
/// use fuse::{Backend, Session};
///
/// let s = Session::<f32>::new(Backend::Reference)?;
/// let a = s.matrix(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
/// let p = s.vector(vec![1.0, 0.0, 1.0])?;
/// let r = s.vector(vec![1.0, 1.0])?;
/// let q = s.sgemv(&a, &p)?; // BiCGK: q = A·p, s = Aᵀ·r, fused into one program
/// let t = s.sgemtv(&a, &r)?;
/// assert_eq!(s.stats().flushes, 0); // nothing ran yet
/// assert_eq!(s.read(&q)?, [4.0, 10.0]);
/// assert_eq!(s.read(&t)?, [5.0, 7.0, 9.0]); // computed by the same flush
/// assert_eq!(s.stats().flushes, 1);
/// # Ok::<(), fuse::Error>(())
/// ```
pub struct Session<T: Element> {
    id: u64,
    backend: Backend,
    library: Arc<Library>,
    options: CompileOptions,
    state: RefCell<State>,
    /// The ranks a distributed session runs over ([`Session::distributed`]).
    comm: Option<Box<dyn Communicator + Send>>,
    _element: PhantomData<fn() -> T>,
}

/// A call's argument, untyped.
enum Operand<'a> {
    Value(&'a Arc<Token>),
    Literal(f64),
}

impl<'a, T: Element> From<ScalarArg<'a, T>> for Operand<'a> {
    fn from(arg: ScalarArg<'a, T>) -> Self {
        match arg {
            ScalarArg::Value(s) => Operand::Value(s.token()),
            ScalarArg::Literal(v) => Operand::Literal(v.to_f64()),
        }
    }
}

impl<T: Element> Session<T> {
    /// A session running on `backend`, with the built-in function library.
    pub fn new(backend: Backend) -> Result<Self> {
        Self::with_options(backend, CompileOptions::new())
    }

    /// A session compiling every flush with `options` (its library, timing table or threads;
    /// a plan given there is ignored: each flush is its own program).
    ///
    /// ```
    /// use fuse::{Backend, CompileOptions, Session, Threads};
    ///
    /// let s = Session::<f64>::with_options(Backend::Cpu, CompileOptions::new().threads(Threads::new(2)?))?;
    /// let x = s.vector(vec![3.0, 4.0])?;
    /// assert_eq!(s.read_scalar(&s.dnrm2(&x)?)?, 5.0);
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn with_options(backend: Backend, options: CompileOptions) -> Result<Self> {
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let library = match &options.library {
            Some(library) => Arc::clone(library),
            None => builtin_library()?,
        };
        Ok(Session {
            id,
            backend,
            options: CompileOptions { plan: None, ..options }.library(Arc::clone(&library)),
            library,
            state: RefCell::new(State::new(id)),
            comm: None,
            _element: PhantomData,
        })
    }

    /// The backend the session runs on.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The session's id, unique in the process (it appears in messages about handles).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A `rows × cols` matrix of row-major `data`, which must hold `rows · cols` elements.
    pub fn matrix(&self, rows: usize, cols: usize, data: Vec<T>) -> Result<Matrix<T>> {
        self.host("matrix", vec![rows, cols], data).map(Matrix::new)
    }

    /// A `rows × cols` matrix read in place from `memory` (row-major, `rows · cols` elements of
    /// this session's precision) rather than copied: a large input the caller keeps, such as a
    /// numpy array, costs no copy and no fresh pages. Reading the value back copies it; a
    /// device backend uploads from it.
    pub fn matrix_in_place(&self, rows: usize, cols: usize, memory: Arc<dyn InPlace>) -> Result<Matrix<T>> {
        let len = match memory.elements() {
            DataView::F32(v) if T::PRECISION == Precision::F32 => v.len(),
            DataView::F64(v) if T::PRECISION == Precision::F64 => v.len(),
            other => {
                return Err(Error::Precision {
                    name: "a matrix read in place".into(),
                    got: other.precision(),
                    want: T::PRECISION,
                })
            }
        };
        checked_len("matrix", &[rows, cols], len)?;
        let copies = Copies {
            in_place: Some(memory),
            ..Copies::default()
        };
        Ok(Matrix::new(
            self.state.borrow_mut().insert(vec![rows, cols], Data::Ready(copies)),
        ))
    }

    /// A vector of `data` (non-empty).
    pub fn vector(&self, data: Vec<T>) -> Result<Vector<T>> {
        let dims = vec![data.len()];
        self.host("vector", dims, data).map(Vector::new)
    }

    /// A scalar of run-time value `value`.
    pub fn scalar(&self, value: T) -> Scalar<T> {
        let array = HostArray {
            dims: Vec::new(),
            data: T::into_data(vec![value]),
        };
        Scalar::new(
            self.state
                .borrow_mut()
                .insert(Vec::new(), Data::Ready(Copies::host(array))),
        )
    }

    fn host(&self, what: &str, dims: Vec<usize>, data: Vec<T>) -> Result<Arc<Token>> {
        let array = checked_array(what, dims, data)?;
        Ok(self
            .state
            .borrow_mut()
            .insert(array.dims.clone(), Data::Ready(Copies::host(array))))
    }

    /// The elements of `handle`'s value (row-major for a matrix), running the recorded calls
    /// first if it is not computed yet.
    pub fn read(&self, handle: &impl Handle<T>) -> Result<Vec<T>> {
        self.with_value("read", handle.token(), |values| {
            try_collect(values.iter().copied(), || {
                format!("a copy of a value of {} elements", values.len())
            })
        })?
    }

    /// The diagonal of `a` where `a` is square and exactly symmetric and its elements are on
    /// the host — given, read in place or computed there — in a session of one process:
    /// checked in one pass over them, without running anything or copying A. `None` where it
    /// is not symmetric, not computed yet, only on a device or split over ranks.
    pub(crate) fn symmetric_diagonal(&self, a: &Matrix<T>) -> Result<Option<Vec<T>>> {
        self.check_owner("symmetric_diagonal", "A", a.token())?;
        if self.comm.is_some() || a.rows() != a.cols() {
            return Ok(None);
        }
        let state = self.state.borrow();
        let Some(Data::Ready(copies)) = state.data(a.token().id) else {
            return Ok(None);
        };
        let view = match (&copies.host, &copies.in_place) {
            (Some(host), _) => host.data.view(),
            (None, Some(memory)) => memory.elements(),
            (None, None) => return Ok(None),
        };
        let n = a.rows();
        let diagonal: Option<Vec<f64>> = match view {
            DataView::F32(v) => symmetry::symmetric_diagonal(v, n).map(|d| d.into_iter().map(f64::from).collect()),
            DataView::F64(v) => symmetry::symmetric_diagonal(v, n),
        };
        Ok(diagonal.map(|d| d.into_iter().map(T::from_f64).collect()))
    }

    /// The value of `scalar`, running the recorded calls first if it is not computed yet.
    pub fn read_scalar(&self, scalar: &Scalar<T>) -> Result<T> {
        let first = self.with_value("read_scalar", scalar.token(), |values| values.first().copied())?;
        first.ok_or_else(|| not_computed(scalar.token().id))
    }

    /// Runs every recorded call that a held handle depends on, as one fused program, and
    /// forgets the others. An error is also kept by each value the run should have computed.
    pub fn flush(&self) -> Result<()> {
        let precision = T::PRECISION;
        let comm = self.comm.as_deref().map(|c| c as &dyn Communicator);
        self.state
            .borrow_mut()
            .flush(&self.backend, &self.options, precision, comm)
    }

    /// Counts of flushes, compilations, cache hits and calls run.
    pub fn stats(&self) -> Stats {
        self.state.borrow().stats
    }

    /// What the next flush will do: run nothing, compile its program first, or run a program
    /// it ran before (and how long that took). A caller can wait for a short flush on its own
    /// thread and hand a long or compiling one to a thread it can walk away from (fuseblas does,
    /// so that Ctrl-C answers at once).
    ///
    /// ```
    /// use fuse::{Backend, Forecast, Session};
    ///
    /// let s = Session::<f64>::new(Backend::Reference)?;
    /// let x = s.vector(vec![3.0, 4.0])?;
    /// assert_eq!(s.forecast(), Forecast::Nothing);
    /// let n = s.dnrm2(&x)?;
    /// assert_eq!(s.forecast(), Forecast::Compile);
    /// assert_eq!(s.read_scalar(&n)?, 5.0); // flushes
    /// let again = s.dnrm2(&x)?; // the same calls on the same shapes: the same program
    /// assert!(matches!(s.forecast(), Forecast::Run(_)));
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn forecast(&self) -> Forecast {
        self.state.borrow().forecast(T::PRECISION, self.comm.is_some())
    }

    /// Number of calls recorded since the last flush.
    pub fn pending_calls(&self) -> usize {
        self.state.borrow().pending_calls()
    }

    /// The script the next flush would run (`fuse check`, `fuse graph` and the explorer read
    /// it too), or `None` if no held handle waits for a result.
    pub fn pending_script(&self) -> Option<String> {
        self.state.borrow().pending_script(T::PRECISION)
    }

    /// Calls `f` on the values of `token`, flushing first if they are pending.
    fn with_value<R>(&self, method: &str, token: &Token, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        self.check_owner(method, "handle", token)?;
        if matches!(self.state.borrow().data(token.id), Some(Data::Pending)) {
            self.flush()?;
        }
        let mut state = self.state.borrow_mut();
        let array = state.host_value(token.id)?;
        T::values(array).map(f).ok_or_else(|| Error::Precision {
            name: format!("v{}", token.id),
            got: array.precision(),
            want: T::PRECISION,
        })
    }

    fn check_owner(&self, function: &str, argument: &str, token: &Token) -> Result<()> {
        if token.session == self.id {
            return Ok(());
        }
        Err(Error::ForeignHandle {
            function: function.to_string(),
            argument: argument.to_string(),
            owner: token.session,
            session: self.id,
        })
    }

    /// Records a call of library function `function`, named without its precision prefix
    /// (`"gemv"`), in the form that takes `args.len()` arguments: any function of the
    /// session's library, those added as YAML files included. The BLAS-named methods
    /// (`sgemv`, …) are this call with their argument kinds fixed.
    ///
    /// ```
    /// use fuse::{AnyHandle, Backend, CallArg, Session};
    ///
    /// let s = Session::<f64>::new(Backend::Reference)?;
    /// let x = s.vector(vec![3.0, 4.0])?;
    /// let y = s.call("axpy", &[CallArg::Literal(2.0), CallArg::Handle(&x), CallArg::Handle(&x)])?;
    /// assert!(matches!(y, AnyHandle::Vector(_)));
    /// assert_eq!(s.read(&y)?, [9.0, 12.0]);
    /// assert!(s.call("gemv", &[CallArg::Handle(&x)]).is_err()); // no one-argument form
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn call(&self, function: &str, args: &[CallArg<'_, T>]) -> Result<AnyHandle<T>> {
        let operands: Vec<Operand<'_>> = args
            .iter()
            .map(|arg| match *arg {
                CallArg::Handle(handle) => Operand::Value(handle.token()),
                CallArg::Literal(value) => Operand::Literal(value.to_f64()),
            })
            .collect();
        self.record_call(function, &operands).map(AnyHandle::new)
    }

    /// Records a call of library function `function` (no prefix); returns its result's token.
    fn record_call(&self, function: &str, args: &[Operand<'_>]) -> Result<Arc<Token>> {
        let callee = format!("{}{function}", T::PRECISION.prefix());
        let form = self.form(&callee, args.len())?;
        let mut dims: Vec<&[usize]> = Vec::new();
        let mut recorded = Vec::new();
        for (arg, param) in args.iter().zip(&form.signature.params) {
            match *arg {
                Operand::Literal(value) if !value.is_finite() => {
                    return Err(Error::NonFiniteLiteral {
                        function: callee,
                        argument: param.name.clone(),
                        value,
                    })
                }
                Operand::Literal(value) => {
                    dims.push(&[]);
                    recorded.push(PendingArg::Literal(value));
                }
                Operand::Value(token) => {
                    self.check_usable(&callee, &param.name, token)?;
                    dims.push(&token.dims);
                    recorded.push(PendingArg::Value(token.id));
                }
            }
        }
        let result = record::result_dims(&callee, form, &dims)?;
        Ok(self.state.borrow_mut().record(function, recorded, result))
    }

    /// The library form of `callee` taking `arity` arguments.
    fn form(&self, callee: &str, arity: usize) -> Result<&Form> {
        let function = self.library.lookup(callee, T::PRECISION).ok();
        function.and_then(|f| f.form(arity)).map(|f| &**f).ok_or_else(|| {
            let message = format!("the function library has no `{callee}` taking {arity} arguments");
            Error::Script(Diagnostic::new(Location::file(&self.library.origin), message).into())
        })
    }

    /// Whether a handle passed as `argument` is this session's and not a failed value.
    fn check_usable(&self, function: &str, argument: &str, token: &Token) -> Result<()> {
        self.check_owner(function, argument, token)?;
        match self.state.borrow().data(token.id) {
            Some(Data::Failed(e)) => Err(Error::Failed(Arc::clone(e))),
            _ => Ok(()),
        }
    }
}

impl<T: Element> std::fmt::Debug for Session<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("precision", &T::PRECISION)
            .field("backend", &self.backend)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
