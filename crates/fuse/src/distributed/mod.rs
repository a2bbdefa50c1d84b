//! Running a program split over ranks: the plan of [`fuse_core::distribute`] (row blocks,
//! local scripts, collectives) executed on every rank of a [`Communicator`], each rank's
//! segments compiled and run by any local [`Backend`].
//!
//! SPMD: every rank calls [`run`] (or [`compile`], then [`RankProgram::run`] as often as it
//! likes) with the same program and sizes (checked when compiling: ranks that differ all get
//! one error naming who has what, see [`agree_on_facts`]); each reads only its own rows of the inputs that are
//! split (through an [`InputSource`]), rank 0 reads the replicated ones and broadcasts them, and
//! each rank returns the results it holds (all of them on rank 0 for a plan of
//! [`distribute`](fuse_core::distribute::distribute)). A rank that fails (a bad file, memory)
//! makes every rank return the same [`Error::Rank`] at the next agreement point, so no rank is
//! left waiting in a collective: agreements follow compiling, reading and every segment.
//!
//! Where the local backend runs on a device (a GPU, or the emulated one), each rank's forms stay
//! in device memory from segment to segment and the conversions move device buffers: between
//! GPUs through NCCL, else through the host and the communicator ([`Link`], in `resident.rs`).
//!
//! ```
//! use fuse::distributed::{run, LocalRanks};
//! use fuse::{Backend, Bindings, CompileOptions, Library};
//! use fuse::stages::fuse_core::{data::fill_random_inputs, distribute::distribute, script};
//!
//! let library = Library::builtin()?;
//! let text = "sizes: {m: 7, n: 5}\ninputs: {A: [m, n], p: [n], r: [m]}\noutputs: [q, s]\n\
//!             calls:\n  - q = dgemv(A, p)\n  - s = dgemtv(A, r)";
//! let program = script::parse("bicgk.yaml", text.replace("sizes", "precision: f64\nsizes").as_str(), &library)?;
//! let plan = distribute(&program, &library)?;
//! let mut inputs = Bindings::new();
//! fill_random_inputs(&program, &program.sizes, 1, &mut inputs);
//! let outputs = LocalRanks::new(3).run(|comm| {
//!     run(&comm, &plan, &program.sizes, &Backend::Cpu, &CompileOptions::new(), &inputs)
//! });
//! let on_root = outputs[0].as_ref().unwrap(); // rank 0 holds the outputs, whole
//! assert_eq!(on_root["q"].to_f64().len(), 7);
//! assert!(outputs[1].as_ref().unwrap().is_empty());
//! # Ok::<(), fuse::Error>(())
//! ```

mod agreement;
mod convert;
mod measure;
#[cfg(feature = "mpi")]
mod mpi;
mod ranks;
mod resident;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuse_core::distribute::{Distributed, Local, LocalValue, RowBlocks, Step, Transfer};
use fuse_core::{ArrayView, Bindings, HostArray, HostData, Sizes, Views};

use crate::backend::{Backend, CompileOptions, Compiled};
use crate::device::{Buffer, Pool};
use crate::error::{Error, Result};
use resident::OnDevice;

#[cfg(feature = "mpi")]
pub use self::mpi::Mpi;
use agreement::plan_fact;
pub use agreement::{
    agree_on_digest, agree_on_facts, backend_fact, digest, library_fact, script_fact, size_facts, Digest, Fact,
};
pub use measure::measure_links;
pub use ranks::{LocalRank, LocalRanks};
pub use resident::Link;

/// The collectives a distributed run needs. Every rank calls each method in the same order;
/// `counts` (elements per rank) are the same on every rank.
pub trait Communicator {
    /// This rank, from 0.
    fn rank(&self) -> usize;
    /// How many ranks there are.
    fn ranks(&self) -> usize;
    /// Rank 0's `data` onto every rank (`data` has the right length everywhere).
    fn broadcast(&self, data: &mut HostData) -> Result<()>;
    /// Rank `root`'s bytes onto every rank (`bytes`' length is only known at the root).
    fn broadcast_bytes(&self, root: usize, bytes: &mut Vec<u8>) -> Result<()>;
    /// Every rank's `local` (of `counts[rank]` elements), concatenated in rank order, on every rank.
    fn all_gather(&self, local: &HostData, counts: &[usize]) -> Result<HostData>;
    /// The same concatenation on rank 0 only (`None` elsewhere).
    fn gather(&self, local: &HostData, counts: &[usize]) -> Result<Option<HostData>>;
    /// The element-wise sum of every rank's `data`, into `data` on every rank.
    fn all_reduce_sum(&self, data: &mut HostData) -> Result<()>;
    /// The element-wise sum into `data` on rank 0 (other ranks' `data` is left unspecified).
    fn reduce_sum(&self, data: &mut HostData) -> Result<()>;
    /// This rank's block of the element-wise sum of every rank's `data`, blocks of `counts`
    /// elements in rank order.
    fn reduce_scatter_sum(&self, data: &HostData, counts: &[usize]) -> Result<HostData>;
    /// One byte from each rank, on every rank.
    fn all_gather_byte(&self, byte: u8) -> Result<Vec<u8>>;
    /// Every rank's `digest`, in rank order, on every rank: what the ranks check they agree on
    /// before data moves. By default through [`Communicator::all_gather_bytes`]; one
    /// all-gather of its fixed size where the communicator has one.
    fn all_gather_digest(&self, digest: &Digest) -> Result<Vec<Digest>> {
        (self.all_gather_bytes(digest)?.iter())
            .map(|d| {
                Digest::try_from(&d[..]).map_err(|_| Error::Internal("a rank sent a digest of another size".into()))
            })
            .collect()
    }
    /// Every rank's `bytes` (of any length), in rank order, on every rank. By default one
    /// broadcast per rank, for the few bytes of an agreement.
    fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        (0..self.ranks())
            .map(|root| {
                let mut data = if root == self.rank() {
                    bytes.to_vec()
                } else {
                    Vec::new()
                };
                self.broadcast_bytes(root, &mut data)?;
                Ok(data)
            })
            .collect()
    }
}

/// Agrees on failure: `Err` on every rank with the first failing rank's error if any rank's
/// `result` is an error, else this rank's value. Every rank must call it at the same point.
pub fn agree<T>(comm: &dyn Communicator, result: Result<T>) -> Result<T> {
    let code = match &result {
        Ok(_) => 0,
        Err(e) if e.is_unavailable() => 3,
        Err(e) if e.is_bad_input() => 1,
        Err(_) => 2,
    };
    let codes = comm.all_gather_byte(code)?;
    let Some(first) = codes.iter().position(|&c| c != 0) else {
        return result;
    };
    let mut message = match &result {
        Err(e) if comm.rank() == first => e.to_string().into_bytes(),
        _ => Vec::new(),
    };
    comm.broadcast_bytes(first, &mut message)?;
    Err(Error::Rank {
        rank: first,
        ranks: comm.ranks(),
        message: String::from_utf8_lossy(&message).into_owned(),
        bad_input: codes[first] == 1,
        unavailable: codes[first] == 3,
    })
}

/// A local form as a rank holds it: computed here, or borrowed from the caller (a session's
/// value, an input already in memory) without a copy.
#[derive(Debug)]
pub enum Stored<'a> {
    /// Computed or read by the run.
    Owned(HostArray),
    /// The caller's.
    Borrowed(ArrayView<'a>),
}

impl Stored<'_> {
    /// Its elements, borrowed.
    pub fn view(&self) -> ArrayView<'_> {
        match self {
            Stored::Owned(a) => a.view(),
            Stored::Borrowed(v) => v.clone(),
        }
    }

    fn into_owned(self) -> HostArray {
        match self {
            Stored::Owned(a) => a,
            Stored::Borrowed(v) => v.to_owned(),
        }
    }
}

/// Where a distributed run's inputs come from: all of an input, or some of its rows.
pub trait InputSource {
    /// Input `name` (whole when `rows` is `None`).
    fn read(&self, name: &str, rows: Option<Range<usize>>) -> Result<Stored<'_>>;
}

impl InputSource for Bindings {
    fn read(&self, name: &str, rows: Option<Range<usize>>) -> Result<Stored<'_>> {
        let array = self
            .get(name)
            .ok_or_else(|| Error::Internal(format!("input `{name}` was not given")))?;
        Ok(match rows {
            None => Stored::Borrowed(array.view()),
            Some(rows) => Stored::Owned(array.view().rows(rows)),
        })
    }
}

/// This rank's part of a distributed plan, compiled at fixed sizes: runs any number of times.
pub struct RankProgram {
    plan: Distributed,
    sizes: Sizes,
    blocks: RowBlocks,
    compiled: Vec<Compiled>,
    /// Where the segments run on a device: its pool, and how collectives travel.
    device: Option<(Arc<Pool>, Arc<Link>)>,
}

/// Compiles this rank's segments of `plan` at `sizes` for `backend` with `options` (on every
/// rank; a failure on one is every rank's error, and so are ranks that give other plans,
/// sizes or kinds of backend). Where the segments run on a GPU, the ranks
/// join an NCCL communicator for the program's collectives.
pub fn compile(
    comm: &dyn Communicator,
    plan: Distributed,
    sizes: &Sizes,
    backend: &Backend,
    options: &CompileOptions,
) -> Result<RankProgram> {
    compile_linked(comm, plan, sizes, backend, options, &mut None)
}

/// [`compile`] with the collectives' [`Link`] of `link`, made there first where the segments
/// run on a device and it holds none (a session's programs share one NCCL communicator).
pub(crate) fn compile_linked(
    comm: &dyn Communicator,
    plan: Distributed,
    sizes: &Sizes,
    backend: &Backend,
    options: &CompileOptions,
    link: &mut Option<Arc<Link>>,
) -> Result<RankProgram> {
    // Ranks with other plans, sizes or kinds of backend would run other collectives.
    let mut facts = vec![script_fact(&plan.program), plan_fact(&plan), backend_fact(backend)];
    facts.extend(size_facts(sizes));
    agree_on_facts(comm, &facts)?;
    // The same on every rank: no agreement needed.
    let blocks = plan.blocks(sizes, comm.ranks()).map_err(Error::Distribution)?;
    let local_sizes = plan.local_sizes(sizes, &blocks, comm.rank());
    let compiled: Result<Vec<Compiled>> = (plan.segments.iter())
        .map(|s| backend.compile_with(&s.program, &s.sizes(&local_sizes), options))
        .collect();
    let compiled = agree(comm, compiled)?;
    let device = match resident::device_pool(&compiled) {
        Some(pool) => {
            if link.is_none() {
                *link = Some(Arc::new(Link::new(comm, backend)?));
            }
            link.clone().map(|link| (pool, link))
        }
        None => None,
    };
    Ok(RankProgram {
        compiled,
        plan,
        sizes: sizes.clone(),
        blocks,
        device,
    })
}

/// [`compile`] and [`RankProgram::run`] once.
pub fn run(
    comm: &dyn Communicator,
    plan: &Distributed,
    sizes: &Sizes,
    backend: &Backend,
    options: &CompileOptions,
    source: &dyn InputSource,
) -> Result<Bindings> {
    compile(comm, plan.clone(), sizes, backend, options)?.run(comm, source)
}

impl RankProgram {
    /// The plan it runs.
    pub fn plan(&self) -> &Distributed {
        &self.plan
    }

    /// How its collectives travel, where its segments run on a device (`None` on the host).
    pub fn link(&self) -> Option<&Link> {
        self.device.as_ref().map(|(_, link)| &**link)
    }

    /// The rows of the split symbol this rank holds.
    pub fn rows(&self, rank: usize) -> Range<usize> {
        self.blocks.range(rank)
    }

    /// Runs it on this rank of `comm` (every rank must): the results this rank holds, by the
    /// program's output names, in the form [`Distributed::results`] gives.
    pub fn run(&self, comm: &dyn Communicator, source: &dyn InputSource) -> Result<Bindings> {
        self.run_timed(comm, source).map(|(results, _)| results)
    }

    /// [`RankProgram::run`], and where this rank's time went.
    pub fn run_timed(&self, comm: &dyn Communicator, source: &dyn InputSource) -> Result<(Bindings, RankTimes)> {
        let started = Instant::now();
        let mut rank = self.rank(comm);
        rank.read_inputs(source)?;
        if rank.on_device.is_some() {
            agree(comm, rank.upload_reads())?;
        }
        let read = started.elapsed();
        let mut times = self.steps(&mut rank)?;
        times.read = read;
        if rank.on_device.is_some() {
            agree(comm, rank.download_results())?;
            (times.to_device, times.from_device) = rank.on_device.as_ref().map_or((0, 0), |d| d.moved);
        }
        let mut results = Bindings::new();
        for r in &self.plan.results {
            if let Some(stored) = rank.store.remove(r) {
                results.insert(self.plan.program.values[r.value].variable.clone(), stored.into_owned());
            }
        }
        Ok((results, times))
    }

    /// Runs it on device buffers, where its segments run on a device: `given` holds this
    /// rank's inputs by name (its rows of those split, all of the others), and gets them back
    /// whatever happens; returns the results this rank holds, by name, left on the device.
    pub(crate) fn run_on_device(
        &self,
        comm: &dyn Communicator,
        given: &mut HashMap<String, Buffer>,
    ) -> Result<(HashMap<String, Buffer>, RankTimes)> {
        let mut rank = self.rank(comm);
        let reads: Vec<LocalValue> = (self.plan.steps.iter())
            .filter_map(|s| match s {
                Step::Convert(c) if c.from.is_none() => Some(c.to),
                _ => None,
            })
            .collect();
        let device = rank.device()?;
        for &form in &reads {
            let name = &self.plan.program.values[form.value].variable;
            if let Some(buffer) = given.remove(name) {
                device.buffers.insert(form, buffer);
            }
        }
        let ran = self.steps(&mut rank);
        let device = rank.device()?;
        for &form in &reads {
            if let Some(buffer) = device.buffers.remove(&form) {
                given.insert(self.plan.program.values[form.value].variable.clone(), buffer);
            }
        }
        let mut times = ran?;
        (times.to_device, times.from_device) = device.moved;
        let results = (self.plan.results.iter())
            .filter_map(|r| {
                Some((
                    self.plan.program.values[r.value].variable.clone(),
                    device.buffers.remove(r)?,
                ))
            })
            .collect();
        Ok((results, times))
    }

    /// Whether its segments run on a device ([`RankProgram::run_on_device`] then applies).
    pub(crate) fn on_device(&self) -> Option<&Arc<Pool>> {
        self.device.as_ref().map(|(pool, _)| pool)
    }

    fn rank<'a>(&'a self, comm: &'a dyn Communicator) -> Rank<'a> {
        Rank {
            comm,
            plan: &self.plan,
            sizes: &self.sizes,
            blocks: self.blocks,
            store: HashMap::new(),
            on_device: self.device.as_ref().map(|(pool, link)| OnDevice {
                pool: Arc::clone(pool),
                link,
                buffers: HashMap::new(),
                moved: (0, 0),
            }),
        }
    }

    /// Runs the plan's segments and conversions (the reads are done): where the time went.
    fn steps(&self, rank: &mut Rank<'_>) -> Result<RankTimes> {
        let mut times = RankTimes::default();
        for step in &self.plan.steps {
            let step_started = Instant::now();
            match step {
                Step::Run(k) => self.run_segment(rank, *k, &mut times)?,
                // Reads (no `from`) were done before.
                Step::Convert(c) => {
                    if let Some(from) = c.from {
                        if c.transfer.communicates() {
                            let source = LocalValue {
                                value: c.to.value,
                                local: from,
                            };
                            times.collectives += 1;
                            times.communicated += rank.local_len(source)? as u64 * self.plan.program.precision.bytes();
                        }
                        match rank.on_device {
                            Some(_) => agree(rank.comm, rank.convert_on_device(c, from))?,
                            None => rank.convert(c, from)?,
                        }
                        times.exchange += step_started.elapsed();
                    }
                }
            }
        }
        Ok(times)
    }

    /// Runs segment `k` and keeps its outputs, on the device where the rank has one.
    fn run_segment(&self, rank: &mut Rank<'_>, k: usize, times: &mut RankTimes) -> Result<()> {
        let started = Instant::now();
        let forms = &self.plan.segments[k].outputs;
        if rank.on_device.is_some() {
            let outputs = rank.run_segment_on_device(k, &self.compiled[k]);
            times.compute += started.elapsed();
            let outputs = agree(rank.comm, outputs)?;
            rank.device()?.buffers.extend(forms.iter().copied().zip(outputs));
        } else {
            let outputs = rank.run_segment(k, &self.compiled[k]);
            times.compute += started.elapsed();
            let outputs = agree(rank.comm, outputs)?;
            rank.store
                .extend(forms.iter().copied().zip(outputs.into_iter().map(Stored::Owned)));
        }
        Ok(())
    }
}

/// Where one rank's run went: reading (and broadcasting) inputs, computing its parts, and the
/// conversions between them (collectives, waiting for the other ranks included); and, where
/// its parts run on a device, the bytes that crossed between host and device.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RankTimes {
    /// Reading its inputs and the broadcasts of replicated ones.
    pub read: Duration,
    /// Running its parts.
    pub compute: Duration,
    /// Collectives and local slices.
    pub exchange: Duration,
    /// Bytes copied from host to device (inputs read on the host, collectives through it).
    pub to_device: u64,
    /// Bytes copied from device to host (results, collectives through the host).
    pub from_device: u64,
    /// Collectives it took part in (the reads' broadcasts left out).
    pub collectives: u64,
    /// Bytes it put into them: its block of each gather, its partial sums of each reduction.
    pub communicated: u64,
}

/// One rank's state: the local forms it holds.
struct Rank<'a> {
    comm: &'a dyn Communicator,
    plan: &'a Distributed,
    sizes: &'a Sizes,
    blocks: RowBlocks,
    store: HashMap<LocalValue, Stored<'a>>,
    /// The forms on the device, where the segments run on one.
    on_device: Option<OnDevice<'a>>,
}

impl<'a> Rank<'a> {
    /// Every read of the plan: own rows, forms held, rank 0's reads, agreed; then the broadcasts.
    fn read_inputs(&mut self, source: &'a dyn InputSource) -> Result<()> {
        let reads: Vec<(LocalValue, Transfer)> = (self.plan.steps.iter())
            .filter_map(|s| match s {
                Step::Convert(c) if c.from.is_none() => Some((c.to, c.transfer)),
                _ => None,
            })
            .collect();
        let (me, root) = (self.comm.rank(), self.comm.rank() == 0);
        let mut local = || -> Result<()> {
            for &(form, transfer) in &reads {
                let name = &self.plan.program.values[form.value].variable;
                let stored = match form.local {
                    Local::Rows => Some(source.read(name, Some(self.blocks.range(me)))?),
                    _ if root || transfer == Transfer::Given => Some(source.read(name, None)?),
                    _ => None,
                };
                if let Some(stored) = stored {
                    self.check_read(name, &stored.view(), form)?;
                    self.store.insert(form, stored);
                }
            }
            Ok(())
        };
        let result = local();
        agree(self.comm, result)?;
        let broadcast = reads
            .into_iter()
            .filter(|(f, t)| f.local == Local::Whole && *t == Transfer::Read);
        for (form, _) in broadcast {
            let mut array = match self.store.remove(&form) {
                Some(stored) => stored.into_owned(),
                None => self.zeros(form)?,
            };
            self.comm.broadcast(&mut array.data)?;
            self.store.insert(form, Stored::Owned(array));
        }
        Ok(())
    }

    /// An input as read must have the local form's extents and the program's precision.
    fn check_read(&self, name: &str, array: &ArrayView, form: LocalValue) -> Result<()> {
        let want = (self.plan.local_shape(form).extents(&self.local_sizes())).unwrap_or_default();
        let precision = self.plan.program.precision;
        if array.dims != want || array.data.precision() != precision {
            let rows = match form.local {
                Local::Rows => format!(" (rows {:?} of it)", self.blocks.range(self.comm.rank())),
                _ => String::new(),
            };
            return Err(Error::Distribution(format!(
                "input `{name}`{rows} was read as {} {:?}, but {} needs {precision} {want:?}",
                array.data.precision(),
                array.dims,
                self.plan.program.file
            )));
        }
        Ok(())
    }

    fn local_sizes(&self) -> Sizes {
        self.plan.local_sizes(self.sizes, &self.blocks, self.comm.rank())
    }

    /// Zeros in the local shape of `form`.
    fn zeros(&self, form: LocalValue) -> Result<HostArray> {
        convert::zeros(self.plan.program.precision, self.local_dims(form)?)
    }

    /// The extents of this rank's `form`.
    fn local_dims(&self, form: LocalValue) -> Result<Vec<usize>> {
        (self.plan.local_shape(form).extents(&self.local_sizes())).ok_or_else(|| self.no_sizes(form))
    }

    /// Elements of this rank's `form`.
    fn local_len(&self, form: LocalValue) -> Result<usize> {
        Ok(self.local_dims(form)?.iter().product())
    }

    /// The extents of all of `form`'s value.
    fn whole_dims(&self, form: LocalValue) -> Result<Vec<usize>> {
        (self.plan.program.values[form.value].shape.extents(self.sizes)).ok_or_else(|| self.no_sizes(form))
    }

    /// Elements of each rank's row block of `form`'s value.
    fn counts(&self, form: LocalValue) -> Result<Vec<usize>> {
        Ok(self.blocks.counts(self.whole_dims(form)?.iter().skip(1).product()))
    }

    fn no_sizes(&self, form: LocalValue) -> Error {
        Error::Internal(format!("no sizes for `{}`", self.plan.name(form)))
    }

    /// Runs segment `k`; its outputs in the order of its program's outputs.
    fn run_segment(&self, k: usize, compiled: &Compiled) -> Result<Vec<HostArray>> {
        let segment = &self.plan.segments[k];
        // Terms added once by rank 0 are zeros on the other ranks.
        let zeros: HashMap<LocalValue, HostArray> = (segment.inputs.iter())
            .filter(|f| !self.store.contains_key(f) && f.local == Local::RootOnly && self.comm.rank() != 0)
            .map(|&f| Ok((f, self.zeros(f)?)))
            .collect::<Result<_>>()?;
        let mut views = Views::new();
        for form in &segment.inputs {
            let view = match (self.store.get(form), zeros.get(form)) {
                (Some(stored), _) => stored.view(),
                (None, Some(z)) => z.view(),
                (None, None) => return Err(missing(self.plan, *form)),
            };
            views.insert(self.plan.name(*form).to_string(), view);
        }
        let mut outputs = compiled.run_views(&views)?.into_bindings();
        (segment.outputs.iter())
            .map(|&f| outputs.remove(self.plan.name(f)).ok_or_else(|| missing(self.plan, f)))
            .collect()
    }
}

fn missing(plan: &Distributed, form: LocalValue) -> Error {
    Error::Internal(format!("the distributed run lost `{}`", plan.name(form)))
}
