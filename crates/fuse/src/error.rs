//! The one error type of the crate: every problem with user input is a value, never a panic.

use std::sync::Arc;

use fuse_core::data::{BindError, HostMemoryError};
use fuse_core::Precision;

/// Anything that can go wrong in `fuse`: a bad script, arrays that do not fit, a shape mismatch
/// in a recorded call, a handle from another session, a failed run.
///
/// ```
/// use fuse::{Backend, Error, Session};
///
/// let s = Session::<f64>::new(Backend::Reference)?;
/// let a = s.matrix(2, 3, vec![0.0; 6])?;
/// let x = s.vector(vec![1.0, 2.0])?; // A·x needs 3 elements
/// let err = s.dgemv(&a, &x).unwrap_err();
/// assert!(matches!(err, Error::Shape { .. }));
/// assert_eq!(err.to_string(), "dgemv: argument `x` has shape [2] but needs [3] (n = 3 from `A` [2, 3])");
/// # Ok::<(), fuse::Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A solve's system or options do not fit (`fuse::solvers`).
    #[error("{0}")]
    Solver(String),
    /// A script, library or size problem found by the front end (with file, line and column).
    #[error(transparent)]
    Script(#[from] fuse_core::Error),
    /// Arrays bound to a program's inputs do not fit it: missing, wrong shape or wrong precision.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// A run needs more host memory than the machine can give (bytes needed and available).
    #[error(transparent)]
    HostMemory(#[from] HostMemoryError),
    /// A binding names no input of the program (a typo would otherwise be ignored).
    #[error("`{name}` is not an input of {program} (its inputs are {inputs})")]
    UnknownInput {
        /// The name bound.
        name: String,
        /// The program's name.
        program: String,
        /// Its inputs, for the message.
        inputs: String,
    },
    /// An output was asked for that the results do not hold.
    #[error("there is no output `{name}` (the outputs are {outputs})")]
    UnknownOutput {
        /// The name asked for.
        name: String,
        /// The outputs there are.
        outputs: String,
    },
    /// Values were read in another precision than they have.
    #[error("`{name}` holds {got} values, not {want}")]
    Precision {
        /// The array.
        name: String,
        /// Its precision.
        got: Precision,
        /// The precision asked for.
        want: Precision,
    },
    /// Host data whose length does not fill the dimensions given, or an empty array given to a
    /// session.
    #[error("{what}: {len} elements given for dimensions {dims:?}, which need {want}{}", if .len == .want { " (a session holds no empty arrays)" } else { "" })]
    DataLength {
        /// What was being built.
        what: String,
        /// The dimensions asked for.
        dims: Vec<usize>,
        /// Elements given.
        len: usize,
        /// Elements needed.
        want: usize,
    },
    /// A recorded call whose argument does not have the shape its function needs.
    #[error("{function}: argument `{argument}` has shape {got} but needs {expected}")]
    Shape {
        /// The call (`sgemv`).
        function: String,
        /// The parameter, as the library names it (`x`).
        argument: String,
        /// The argument's shape (`[2]`).
        got: String,
        /// What was needed, and why (`[3] (n = 3 from `A` [2, 3])`).
        expected: String,
    },
    /// A literal scalar argument that is NaN or infinite.
    #[error("{function}: argument `{argument}` is the literal {value}, which is not a finite number")]
    NonFiniteLiteral {
        /// The call.
        function: String,
        /// The parameter.
        argument: String,
        /// The literal.
        value: f64,
    },
    /// A handle used with a session other than the one that made it.
    #[error("{function}: argument `{argument}` belongs to session #{owner}, not to this session #{session}")]
    ForeignHandle {
        /// The call or method.
        function: String,
        /// The argument.
        argument: String,
        /// The session that made the handle.
        owner: u64,
        /// The session it was used with.
        session: u64,
    },
    /// The run that should have computed a value failed; reading the value reports why.
    #[error("the recorded calls computing this value failed: {0}")]
    Failed(#[source] Arc<Error>),
    /// The fused CPU backend could not plan or run a program (a stale timing table, a
    /// formula it cannot run).
    #[error(transparent)]
    Cpu(#[from] fuse_cpu::fused::CpuError),
    /// The CUDA backend could not open the GPU, plan, compile or run (no GPU or driver here
    /// among them: [`fuse_cuda::CudaError::is_unavailable`] tells).
    #[error(transparent)]
    Cuda(Box<fuse_cuda::CudaError>),
    /// A backend name that `fuse` does not know.
    #[error("unknown backend `{name}` (known: {known})")]
    UnknownBackend {
        /// The name given.
        name: String,
        /// The names there are.
        known: String,
    },
    /// A timing table could not be read, or does not fit the library.
    #[error(transparent)]
    Timings(#[from] fuse_core::explore::TimingError),
    /// The program could not be planned (e.g. no launchable implementation of a call).
    #[error(transparent)]
    Explore(#[from] fuse_core::explore::ExploreError),
    /// The plan could not be turned into CUDA (a library formula the generator cannot emit).
    #[error(transparent)]
    Generate(#[from] fuse_codegen::generate::GenerateError),
    /// The emulation backend could not compile or run the generated CUDA.
    #[error(transparent)]
    Emulation(#[from] fuse_emulate::EmulationError),
    /// A run needs more device memory than the device has free (the host data is untouched).
    #[error("out of memory on {device}: {asked} asked for {what}, {free} free")]
    DeviceMemory {
        /// The device (`GPU 0 (NVIDIA H100 80GB HBM3)`, `the emulated device`).
        device: String,
        /// What needed the memory.
        what: String,
        /// The bytes asked for, for the message.
        asked: String,
        /// The bytes free, for the message.
        free: String,
    },
    /// An array in one device's memory given to a program that runs on another.
    #[error("input `{name}` is in the memory of {array}, but the program runs on {program}")]
    DeviceMismatch {
        /// The input.
        name: String,
        /// Where the array is.
        array: String,
        /// Where the program runs.
        program: String,
    },
    /// A method that exchanges GPU memory, called on a session that runs elsewhere.
    #[error("{method} needs a session on the CUDA backend; this one runs on {backend}")]
    NotOnGpu {
        /// The method.
        method: String,
        /// The session's backend.
        backend: String,
    },
    /// An environment variable that fuse reads holds a value it cannot use.
    #[error("{variable}=`{value}`: expected {expected}")]
    Setting {
        /// The variable.
        variable: String,
        /// Its value.
        value: String,
        /// What it should hold.
        expected: String,
    },
    /// fuse broke one of its own invariants; the message says which.
    #[error("{0}")]
    Internal(String),
    /// A program that cannot run over these ranks (fewer rows than ranks), or a collective that
    /// the communicator cannot carry.
    #[error("{0}")]
    Distribution(String),
    /// One rank of a distributed run failed; every rank returns this same error.
    #[error("rank {rank} of {ranks}: {message}")]
    Rank {
        /// The first rank that failed.
        rank: usize,
        /// How many ranks ran.
        ranks: usize,
        /// Its error.
        message: String,
        /// Whether its error was in what the user gave.
        bad_input: bool,
        /// Whether it asked for a GPU where none is usable.
        unavailable: bool,
    },
    /// A plan rank that is not there.
    #[error("plan {rank}: {program} has {count} plan(s), ranked from 1 (the best predicted)")]
    NoSuchPlan {
        /// The rank asked for.
        rank: usize,
        /// The program's file.
        program: String,
        /// How many plans it has.
        count: String,
    },
}

impl Error {
    /// Whether the error is in what the user gave (a script, a library, sizes, a timing table,
    /// inputs, a plan rank) rather than in fuse or the machine.
    pub fn is_bad_input(&self) -> bool {
        use fuse_cuda::CudaError as C;
        match self {
            Error::Cuda(e) => matches!(
                **e,
                C::StaleTimings { .. } | C::Timing(_) | C::Bind(_) | C::Explore(_) | C::Cache(_)
            ),
            Error::Failed(e) => e.is_bad_input(),
            Error::Emulation(e) => matches!(
                e,
                fuse_emulate::EmulationError::Bind(_)
                    | fuse_emulate::EmulationError::Emulate(
                        fuse_emulate::EmulateError::Cache(_) | fuse_emulate::EmulateError::HostMemory(_)
                    )
            ),
            Error::Internal(_) => false,
            Error::Rank { bad_input, .. } => *bad_input,
            _ => true,
        }
    }

    /// Whether the CUDA backend was asked for and no usable GPU or driver is here.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Cuda(e) => e.is_unavailable(),
            Error::Failed(e) => e.is_unavailable(),
            Error::Rank { unavailable, .. } => *unavailable,
            _ => false,
        }
    }
}

impl From<fuse_cuda::CudaError> for Error {
    /// Boxed: CUDA errors carry several strings, and every `Result` of this crate would
    /// otherwise be as large.
    fn from(err: fuse_cuda::CudaError) -> Self {
        Error::Cuda(Box::new(err))
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `a, b and c`, or `none`, with names in backquotes.
pub(crate) fn list<S: AsRef<str>>(items: &[S]) -> String {
    let refs: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    fuse_core::wording::list_or_none(&refs)
}
