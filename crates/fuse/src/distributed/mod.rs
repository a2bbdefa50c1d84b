//! Running a program split over ranks: the plan of [`fuse_core::distribute`] (row blocks,
//! local scripts, collectives) executed on every rank of a [`Communicator`], each rank's
//! segments compiled and run by any local [`Backend`].
//!
//! SPMD: every rank calls [`run`] with the same program and sizes; each reads only its own rows
//! of the inputs that are split (through an [`InputSource`]), rank 0 reads the replicated ones
//! and broadcasts them, and rank 0 returns the outputs. A rank that fails (a bad file, memory)
//! makes every rank return the same [`Error::Rank`] at the next agreement point, so no rank
//! is left waiting in a collective: agreements follow compiling, reading and every segment.
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
//!     run(comm, &plan, &program.sizes, &Backend::Cpu, &CompileOptions::new(), &inputs)
//! });
//! let q = outputs[0].as_ref().unwrap().as_ref().unwrap()["q"].to_f64(); // rank 0 holds them
//! assert_eq!(q.len(), 7);
//! # Ok::<(), fuse::Error>(())
//! ```

mod convert;
#[cfg(feature = "mpi")]
mod mpi;
mod ranks;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ops::Range;

use fuse_core::distribute::{Distributed, Local, LocalValue, RowBlocks, Step};
use fuse_core::{ArrayView, Bindings, HostArray, HostData, Sizes, Views};

use crate::backend::{Backend, CompileOptions, Compiled};
use crate::error::{Error, Result};

#[cfg(feature = "mpi")]
pub use self::mpi::Mpi;
pub use ranks::LocalRanks;

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
    /// One byte from each rank, on every rank.
    fn all_gather_byte(&self, byte: u8) -> Result<Vec<u8>>;

    /// Agrees on failure: `Err` on every rank with the first failing rank's error if any
    /// rank's `result` is an error, else this rank's value.
    fn agree<T>(&self, result: Result<T>) -> Result<T>
    where
        Self: Sized,
    {
        let code = match &result {
            Ok(_) => 0,
            Err(e) if e.is_bad_input() => 1,
            Err(_) => 2,
        };
        let codes = self.all_gather_byte(code)?;
        let Some(first) = codes.iter().position(|&c| c != 0) else {
            return result;
        };
        let mut message = match &result {
            Err(e) if self.rank() == first => e.to_string().into_bytes(),
            _ => Vec::new(),
        };
        self.broadcast_bytes(first, &mut message)?;
        Err(Error::Rank {
            rank: first,
            ranks: self.ranks(),
            message: String::from_utf8_lossy(&message).into_owned(),
            bad_input: codes[first] == 1,
        })
    }
}

/// Where a distributed run's inputs come from: all of an input, or some of its rows.
pub trait InputSource {
    /// Input `name` (whole when `rows` is `None`).
    fn read(&self, name: &str, rows: Option<Range<usize>>) -> Result<HostArray>;
}

impl InputSource for Bindings {
    fn read(&self, name: &str, rows: Option<Range<usize>>) -> Result<HostArray> {
        let array = self
            .get(name)
            .ok_or_else(|| Error::Internal(format!("input `{name}` was not given")))?;
        Ok(match rows {
            None => array.clone(),
            Some(rows) => convert::rows_of(array, rows),
        })
    }
}

/// Runs `plan` at `sizes` on this rank of `comm`, each segment compiled for `backend` with
/// `options`; rank 0 returns the outputs by name, the other ranks `None`.
pub fn run<C: Communicator>(
    comm: &C,
    plan: &Distributed,
    sizes: &Sizes,
    backend: &Backend,
    options: &CompileOptions,
    source: &dyn InputSource,
) -> Result<Option<Bindings>> {
    // The same on every rank: no agreement needed.
    let blocks = plan.blocks(sizes, comm.ranks()).map_err(Error::Distribution)?;
    let local_sizes = plan.local_sizes(sizes, &blocks, comm.rank());
    let compiled: Result<Vec<Compiled>> = (plan.segments.iter())
        .map(|s| backend.compile_with(&s.program, &s.sizes(&local_sizes), options))
        .collect();
    let compiled = comm.agree(compiled)?;
    let mut rank = Rank {
        comm,
        plan,
        sizes,
        blocks,
        store: HashMap::new(),
    };
    rank.read_inputs(source)?;
    for step in &plan.steps {
        match step {
            Step::Run(k) => {
                let outputs = rank.run_segment(*k, &compiled[*k]);
                let outputs = comm.agree(outputs)?;
                for (&form, array) in plan.segments[*k].outputs.iter().zip(outputs) {
                    rank.store.insert(form, array);
                }
            }
            // Reads (no `from`) were done above.
            Step::Convert(c) => {
                if let Some(from) = c.from {
                    rank.convert(c, from)?
                }
            }
        }
    }
    if comm.rank() != 0 {
        return Ok(None);
    }
    let results = (plan.results.iter())
        .map(|r| {
            let name = plan.program.values[r.value].variable.clone();
            let array = rank.store.remove(r).ok_or_else(|| missing(plan, *r))?;
            Ok((name, array))
        })
        .collect::<Result<Bindings>>()?;
    Ok(Some(results))
}

/// One rank's state: the local forms it holds.
struct Rank<'a, C> {
    comm: &'a C,
    plan: &'a Distributed,
    sizes: &'a Sizes,
    blocks: RowBlocks,
    store: HashMap<LocalValue, HostArray>,
}

impl<C: Communicator> Rank<'_, C> {
    /// Every read of the plan: own rows and rank 0's reads, agreed, then the broadcasts.
    fn read_inputs(&mut self, source: &dyn InputSource) -> Result<()> {
        let reads: Vec<LocalValue> = (self.plan.steps.iter())
            .filter_map(|s| match s {
                Step::Convert(c) if c.from.is_none() => Some(c.to),
                _ => None,
            })
            .collect();
        let root = self.comm.rank() == 0;
        let mut local = || -> Result<()> {
            for &form in &reads {
                let name = &self.plan.program.values[form.value].variable;
                let array = match form.local {
                    Local::Rows => Some(source.read(name, Some(self.blocks.range(self.comm.rank())))?),
                    _ if root => Some(source.read(name, None)?),
                    _ => None,
                };
                if let Some(array) = array {
                    self.check_read(name, &array, form)?;
                    self.store.insert(form, array);
                }
            }
            Ok(())
        };
        let result = local();
        self.comm.agree(result)?;
        for form in reads.into_iter().filter(|f| f.local == Local::Whole) {
            let mut array = match self.store.remove(&form) {
                Some(array) => array,
                None => self.zeros(form)?,
            };
            self.comm.broadcast(&mut array.data)?;
            self.store.insert(form, array);
        }
        Ok(())
    }

    /// An input as read must have the local form's extents and the program's precision.
    fn check_read(&self, name: &str, array: &HostArray, form: LocalValue) -> Result<()> {
        let want = self
            .plan
            .local_shape(form)
            .extents(&self.local_sizes())
            .unwrap_or_default();
        let precision = self.plan.program.precision;
        if array.dims != want || array.precision() != precision {
            let rows = match form.local {
                Local::Rows => format!(" (rows {:?} of it)", self.blocks.range(self.comm.rank())),
                _ => String::new(),
            };
            return Err(Error::Distribution(format!(
                "input `{name}`{rows} was read as {} {:?}, but {} needs {precision} {want:?}",
                array.precision(),
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
        let dims = (self.plan.local_shape(form).extents(&self.local_sizes()))
            .ok_or_else(|| Error::Internal(format!("no sizes for `{}`", self.plan.name(form))))?;
        convert::zeros(self.plan.program.precision, dims)
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
            let array = (self.store.get(form).or_else(|| zeros.get(form))).ok_or_else(|| missing(self.plan, *form))?;
            let view = ArrayView {
                dims: array.dims.clone(),
                data: array.data.view(),
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
