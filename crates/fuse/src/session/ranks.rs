//! The distributed session: SPMD, every rank records the same calls on its own row blocks. A
//! value is held whole by every rank, or as this rank's block of rows (a matrix made with
//! [`Session::matrix_rows`], a result indexed by rows); a flush distributes the batch's
//! canonical script over the ranks with the values as they are held
//! ([`distribute_held`]), runs each rank's part, and leaves row-block results as row blocks
//! and sums over rows reduced on every rank.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use fuse_core::distribute::{distribute_held, Distribution, Local, RowBlocks};
use fuse_core::{HostArray, Views};

use super::canonical::Canonical;
use super::handle::{Handle, Matrix, Vector};
use super::state::{Computed, Copies, Data, State};
use super::Session;
use crate::backend::{Backend, CompileOptions};
use crate::device::Pool;
use crate::distributed::{
    self, agree, agree_on_digest, agree_on_facts, backend_fact, digest, library_fact, Communicator, Fact, InputSource,
    RankProgram, RankTimes, Stored,
};
use crate::element::{checked_array, Element};
use crate::error::{Error, Result};

impl<T: Element> Session<T> {
    /// A session whose flushes run over the ranks of `comm` (an MPI communicator,
    /// [`distributed::Mpi`](crate::distributed), or [`LocalRanks`](crate::distributed::LocalRanks)
    /// threads), each rank's part on `backend`. Every rank must make the same calls in the
    /// same order; a flush, [`Session::read`] of a pending value and [`Session::gather`] are
    /// collective.
    pub fn distributed(comm: impl Communicator + Send + 'static, backend: Backend) -> Result<Self> {
        Self::distributed_with_options(comm, backend, CompileOptions::new())
    }

    /// [`Session::distributed`] compiling with `options`. Collective: the ranks must make it
    /// with the same kind of backend, library and precision (an error on every rank names
    /// which differs); each flush checks that they flush the same calls on values of the same
    /// extents, held alike, with the same scalars held whole.
    pub fn distributed_with_options(
        comm: impl Communicator + Send + 'static,
        backend: Backend,
        options: CompileOptions,
    ) -> Result<Self> {
        // A session that one rank cannot make is every rank's error, not a rank left waiting.
        let mut session = agree(&comm, Self::with_options(backend, options))?;
        let facts = [
            backend_fact(&session.backend),
            library_fact(&session.library),
            Fact::new("precision", format!("precision {}", T::PRECISION)),
        ];
        agree_on_facts(&comm, &facts)?;
        session.comm = Some(Box::new(comm));
        Ok(session)
    }

    /// The communicator of a distributed session.
    fn comm(&self) -> Option<&dyn Communicator> {
        self.comm.as_deref().map(|c| c as &dyn Communicator)
    }

    /// The ranks of a distributed session (`None` in one process), for a caller's own
    /// collectives between flushes: rank 0 saying that it wrote what the ranks computed.
    pub fn communicator(&self) -> Option<&dyn Communicator> {
        self.comm()
    }

    /// This rank (0 in a session of one process).
    pub fn rank(&self) -> usize {
        self.comm().map_or(0, |c| c.rank())
    }

    /// How many ranks the session runs over (1 in one process).
    pub fn ranks(&self) -> usize {
        self.comm().map_or(1, |c| c.ranks())
    }

    /// How the collectives of a distributed session on a device travel — `NCCL between GPUs`,
    /// or `through the host (why not NCCL)` — once a flush has run there; `None` before, and on
    /// a backend that computes on the host (its collectives are the communicator's).
    pub fn collectives(&self) -> Option<String> {
        self.state.borrow().link.as_ref().map(|link| link.describe())
    }

    /// The rows of a `rows`-row matrix this rank holds: balanced blocks in rank order (all of
    /// them in a session of one process, so that the same SPMD code runs there too).
    pub fn rows(&self, rows: usize) -> Result<Range<usize>> {
        match self.comm() {
            Some(comm) => Ok(blocks(rows, comm.ranks())?.range(comm.rank())),
            None => Ok(0..rows),
        }
    }

    /// A `rows × cols` matrix of which this rank holds rows [`Session::rows`]`(rows)`, given
    /// as `local` (row-major). Every rank makes it with its own block (in one process: all of
    /// it, as [`Session::matrix`]).
    pub fn matrix_rows(&self, rows: usize, cols: usize, local: Vec<T>) -> Result<Matrix<T>> {
        self.rows_value("matrix_rows", vec![rows, cols], local).map(Matrix::new)
    }

    /// A vector of length `len` of which this rank holds elements [`Session::rows`]`(len)`.
    pub fn vector_rows(&self, len: usize, local: Vec<T>) -> Result<Vector<T>> {
        self.rows_value("vector_rows", vec![len], local).map(Vector::new)
    }

    fn rows_value(&self, method: &str, dims: Vec<usize>, local: Vec<T>) -> Result<Arc<super::Token>> {
        let mut local_dims = dims.clone();
        local_dims[0] = self.rows(dims[0]).map_err(|e| on(method, e))?.len();
        let array = checked_array(method, local_dims, local)?;
        let copies = Copies {
            by_rows: self.comm().is_some(),
            ..Copies::host(array)
        };
        Ok(self.state.borrow_mut().insert(dims, Data::Ready(copies)))
    }

    /// The rows of `handle`'s value this rank holds, or `None` where it holds all of it.
    /// (Computes the value first if it is pending.)
    pub fn local_rows(&self, handle: &impl Handle<T>) -> Result<Option<Range<usize>>> {
        let by_rows = self.with_copies("local_rows", handle, |c| c.by_rows)?;
        by_rows.then(|| self.rows(handle.dims()[0])).transpose()
    }

    /// All of `handle`'s value on every rank: its row blocks gathered from every rank, or its
    /// elements where every rank holds them ([`Session::read`] in one process). Collective:
    /// every rank must call it.
    pub fn gather(&self, handle: &impl Handle<T>) -> Result<Vec<T>> {
        let local = self.read(handle)?;
        let Some(comm) = self.comm() else {
            return Ok(local);
        };
        let by_rows = self.local_rows(handle)?.is_some();
        let dims = handle.dims();
        let held = if by_rows { "in row blocks" } else { "whole" };
        // Ranks that gather other values would all-gather other counts, or wait for the others.
        agree_on_facts(comm, &[Fact::new("gather", format!("a gather of {dims:?} {held}"))])?;
        if !by_rows {
            return Ok(local);
        }
        let counts = blocks(dims[0], comm.ranks())?.counts(dims[1..].iter().product());
        let all = comm.all_gather(&T::into_data(local), &counts)?;
        let array = HostArray {
            dims: dims.to_vec(),
            data: all,
        };
        T::values(&array)
            .map(<[T]>::to_vec)
            .ok_or_else(|| Error::Internal("a gather changed the precision".into()))
    }

    fn with_copies<R>(&self, method: &str, handle: &impl Handle<T>, f: impl FnOnce(&Copies) -> R) -> Result<R> {
        self.check_owner(method, "handle", handle.token())?;
        if matches!(self.state.borrow().data(handle.token().id), Some(Data::Pending)) {
            self.flush()?;
        }
        match self.state.borrow().data(handle.token().id) {
            Some(Data::Ready(copies)) => Ok(f(copies)),
            Some(Data::Failed(e)) => Err(Error::Failed(Arc::clone(e))),
            _ => Err(super::not_computed(handle.token().id)),
        }
    }
}

fn blocks(rows: usize, ranks: usize) -> Result<RowBlocks> {
    RowBlocks::new(rows, ranks).ok_or_else(|| {
        Error::Distribution(format!(
            "cannot split {rows} rows over {ranks} ranks: each rank needs at least one row"
        ))
    })
}

fn on(method: &str, e: Error) -> Error {
    Error::Distribution(format!("{method}: {e}"))
}

/// The session's values as each rank holds them: a value held by rows is this rank's block.
struct Held<'a>(Views<'a>);

impl InputSource for Held<'_> {
    fn read(&self, name: &str, _rows: Option<Range<usize>>) -> Result<Stored<'_>> {
        let view = self
            .0
            .get(name)
            .ok_or_else(|| Error::Internal(format!("no session value `{name}`")))?;
        Ok(Stored::Borrowed(view.clone()))
    }
}

impl State {
    /// How this rank holds value `id`.
    fn held(&self, id: u64) -> Distribution {
        match self.data(id) {
            Some(Data::Ready(c)) if c.by_rows => Distribution::Rows,
            _ => Distribution::Replicated,
        }
    }

    /// How this rank holds each input of `script`.
    fn held_inputs(&self, script: &Canonical) -> Vec<Distribution> {
        script.inputs.iter().map(|(id, _)| self.held(*id)).collect()
    }

    /// The value of each input of `script` that is a scalar this rank holds on the host (the
    /// literals a flush passes as values, the caller's scalars): every rank must hold the same.
    fn held_scalars(&self, script: &Canonical) -> Vec<Option<f64>> {
        (script.inputs.iter())
            .map(|(id, _)| match self.data(*id) {
                Some(Data::Ready(Copies { host: Some(a), .. })) if a.dims.is_empty() => a.to_f64().first().copied(),
                _ => None,
            })
            .collect()
    }

    /// The key of `script`'s rank program: the same calls on values held otherwise (rows or
    /// whole) make another.
    pub(super) fn ranked_key(&self, script: &Canonical) -> Vec<u8> {
        rank_program_key(script, &self.held_inputs(script))
    }

    /// Runs `script` over the ranks of `comm`, with the values as each rank holds them.
    pub(super) fn execute_distributed(
        &mut self,
        script: &Canonical,
        backend: &Backend,
        options: &CompileOptions,
        comm: &dyn Communicator,
    ) -> Result<Computed> {
        let held = self.held_inputs(script);
        let key = rank_program_key(script, &held);
        // Before the plan is looked up: ranks with other calls would run other collectives.
        let scalars = self.held_scalars(script);
        let bits: Vec<u8> = (scalars.iter())
            .flat_map(|s| match s {
                Some(v) => [&[1][..], &v.to_bits().to_le_bytes()].concat(),
                None => vec![0],
            })
            .collect();
        agree_on_digest(comm, &digest(&[&key, &bits]), || flush_facts(script, &held, &scalars))?;
        let program = match self.ranked.get(&key) {
            Some(program) => {
                self.stats.cache_hits += 1;
                program
            }
            None => {
                let library = super::state::library(options)?;
                let parsed = fuse_core::script::parse("session.yaml", &script.text(), &library)?;
                let plan = distribute_held(&parsed, &library, &held)?;
                let program = distributed::compile_linked(comm, plan, &parsed.sizes, backend, options, &mut self.link);
                let program = Arc::new(program?);
                self.stats.compilations += 1;
                self.ranked.insert(key.clone(), Arc::clone(&program));
                program
            }
        };
        let started = Instant::now();
        let (local, times) = match program.on_device() {
            Some(pool) => self.run_ranks_on_device(&program, comm, script, pool)?,
            None => {
                let (arrays, times) = program.run_timed(comm, &Held(self.host_views(&script.inputs)?))?;
                (Computed::Host(arrays), times)
            }
        };
        let took = started.elapsed();
        self.stats.compute += took;
        self.ranked.ran(&key, took);
        self.stats.to_device += times.to_device;
        self.stats.from_device += times.from_device;
        self.stats.collectives += times.collectives;
        self.stats.communicated += times.communicated;
        let plan = program.plan();
        let by_rows: HashSet<String> = (plan.results.iter())
            .filter(|r| r.local == Local::Rows)
            .map(|r| plan.program.values[r.value].variable.clone())
            .collect();
        Ok(Computed::Distributed {
            local: Box::new(local),
            by_rows,
        })
    }

    /// Runs `program` on the inputs' device buffers (uploaded first where a value is only on
    /// the host); the inputs' buffers stay with their values, the results are left on the device.
    fn run_ranks_on_device(
        &mut self,
        program: &RankProgram,
        comm: &dyn Communicator,
        script: &Canonical,
        pool: &Arc<Pool>,
    ) -> Result<(Computed, RankTimes)> {
        let mut given = HashMap::new();
        let mut taken = Ok(());
        for (id, name) in &script.inputs {
            match self.take_device(*id, pool) {
                Ok(buffer) => _ = given.insert(name.clone(), buffer),
                Err(e) => {
                    taken = Err(e);
                    break;
                }
            }
        }
        let ran = agree(comm, taken).and_then(|()| program.run_on_device(comm, &mut given));
        for (id, name) in &script.inputs {
            if let Some(buffer) = given.remove(name) {
                self.return_device(*id, buffer);
            }
        }
        let (results, times) = ran?;
        Ok((Computed::Device(results.into_iter().collect()), times))
    }
}

/// What the ranks flush, as facts: the precision, each call, each input's extents, how it is
/// held and its value where it is a scalar held on the host, the outputs.
fn flush_facts(script: &Canonical, held: &[Distribution], scalars: &[Option<f64>]) -> Vec<Fact> {
    let calls = script.call_lines();
    let mut facts = vec![
        Fact::new("precision", format!("precision {}", script.precision)),
        Fact::new("calls", format!("{} calls", calls.len())),
    ];
    for (k, call) in calls.iter().enumerate() {
        facts.push(Fact::new(format!("call {}", k + 1), format!("call {} `{call}`", k + 1)));
    }
    for ((((_, name), dims), held), scalar) in script.inputs.iter().zip(&script.dims).zip(held).zip(scalars) {
        let how = match (held, scalar) {
            (_, Some(v)) => format!("= {v:?}"),
            (Distribution::Rows, None) => format!("of {dims:?} in row blocks"),
            _ => format!("of {dims:?} whole"),
        };
        facts.push(Fact::new(format!("input {name}"), format!("input {name} {how}")));
    }
    let outputs: Vec<&str> = script.outputs.iter().map(|(_, n)| n.as_str()).collect();
    facts.push(Fact::new("outputs", format!("outputs {}", outputs.join(", "))));
    facts
}

fn rank_program_key(script: &Canonical, held: &[Distribution]) -> Vec<u8> {
    [&script.key[..], format!("{held:?}").as_bytes()].concat()
}
