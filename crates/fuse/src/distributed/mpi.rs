//! The [`Communicator`] over MPI (the `mpi` crate, rsmpi), for runs started by `mpirun`.

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator as _;
use mpi::traits::*;
use mpi::Count;

use fuse_core::data::try_zeroed_vec;
use fuse_core::HostData;

use super::{Communicator, Digest};
use crate::error::{Error, Result};

/// MPI's world communicator; MPI is finalized when it is dropped. It may move to another
/// thread (a session does), never be used from two at once: MPI runs with
/// `MPI_THREAD_SERIALIZED`.
pub struct Mpi {
    world: SimpleCommunicator,
    // Dropped last: finalizes MPI.
    _universe: Universe,
}

// SAFETY: MPI is initialized with at least `MPI_THREAD_SERIALIZED` (checked in `init`), under
// which any thread may call MPI as long as no two do at once; `Mpi` is not `Sync`, so only the
// one thread that owns it calls through it.
unsafe impl Send for Mpi {}

impl Mpi {
    /// Initializes MPI (once per process), or the error saying it could not be.
    pub fn init() -> Result<Mpi> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| Error::Distribution("MPI could not be initialized (was it already?)".into()))?;
        if threading < Threading::Serialized {
            return Err(Error::Distribution(format!(
                "this MPI library gives {threading:?} thread support; fuse needs MPI_THREAD_SERIALIZED (Open MPI built with threads provides it)"
            )));
        }
        Ok(Mpi {
            world: universe.world(),
            _universe: universe,
        })
    }

    fn root(&self) -> mpi::topology::Process<'_> {
        self.world.process_at_rank(0)
    }
}

/// MPI counts and displacements (32-bit) of blocks of `counts` elements.
fn partition(counts: &[usize]) -> Result<(Vec<Count>, Vec<Count>)> {
    let too_big = || {
        Error::Distribution(format!(
            "a collective of {} elements in all: MPI counts stop at {}",
            counts.iter().sum::<usize>(),
            Count::MAX
        ))
    };
    let mut displs = Vec::with_capacity(counts.len());
    let mut at: usize = 0;
    for &c in counts {
        displs.push(Count::try_from(at).map_err(|_| too_big())?);
        at += c;
    }
    Count::try_from(at).map_err(|_| too_big())?;
    let counts = counts.iter().map(|&c| c as Count).collect();
    Ok((counts, displs))
}

macro_rules! on_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            HostData::F32($v) => $body,
            HostData::F64($v) => $body,
        }
    };
}

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn ranks(&self) -> usize {
        self.world.size() as usize
    }

    fn broadcast(&self, data: &mut HostData) -> Result<()> {
        partition(&[data.len()])?;
        on_data!(data, v => self.root().broadcast_into(&mut v[..]));
        Ok(())
    }

    fn broadcast_bytes(&self, root: usize, bytes: &mut Vec<u8>) -> Result<()> {
        let from = self.world.process_at_rank(root as i32);
        let mut len = bytes.len() as u64;
        from.broadcast_into(&mut len);
        bytes.resize(len as usize, 0);
        from.broadcast_into(&mut bytes[..]);
        Ok(())
    }

    fn all_gather(&self, local: &HostData, counts: &[usize]) -> Result<HostData> {
        let (c, d) = partition(counts)?;
        let mut all = zeros_like(local, counts.iter().sum())?;
        match (local, &mut all) {
            (HostData::F32(v), HostData::F32(a)) => self
                .world
                .all_gather_varcount_into(&v[..], &mut PartitionMut::new(&mut a[..], c, d)),
            (HostData::F64(v), HostData::F64(a)) => self
                .world
                .all_gather_varcount_into(&v[..], &mut PartitionMut::new(&mut a[..], c, d)),
            _ => return Err(mixed()),
        }
        Ok(all)
    }

    fn gather(&self, local: &HostData, counts: &[usize]) -> Result<Option<HostData>> {
        let (c, d) = partition(counts)?;
        if self.rank() != 0 {
            on_data!(local, v => self.root().gather_varcount_into(&v[..]));
            return Ok(None);
        }
        let mut all = zeros_like(local, counts.iter().sum())?;
        match (local, &mut all) {
            (HostData::F32(v), HostData::F32(a)) => self
                .root()
                .gather_varcount_into_root(&v[..], &mut PartitionMut::new(&mut a[..], c, d)),
            (HostData::F64(v), HostData::F64(a)) => self
                .root()
                .gather_varcount_into_root(&v[..], &mut PartitionMut::new(&mut a[..], c, d)),
            _ => return Err(mixed()),
        }
        Ok(Some(all))
    }

    fn all_reduce_sum(&self, data: &mut HostData) -> Result<()> {
        partition(&[data.len()])?;
        on_data!(data, v => {
            let sent = v.clone();
            self.world.all_reduce_into(&sent[..], &mut v[..], SystemOperation::sum());
        });
        Ok(())
    }

    fn reduce_sum(&self, data: &mut HostData) -> Result<()> {
        partition(&[data.len()])?;
        let root = self.rank() == 0;
        on_data!(data, v => match root {
            true => {
                let sent = v.clone();
                self.root().reduce_into_root(&sent[..], &mut v[..], SystemOperation::sum());
            }
            false => self.root().reduce_into(&v[..], SystemOperation::sum()),
        });
        Ok(())
    }

    fn reduce_scatter_sum(&self, data: &HostData, counts: &[usize]) -> Result<HostData> {
        partition(&[counts.iter().copied().max().unwrap_or(0) * counts.len()])?;
        let mine = counts[self.rank()];
        Ok(match data {
            HostData::F32(v) => HostData::F32(reduce_scatter(&self.world, v, counts, mine)),
            HostData::F64(v) => HostData::F64(reduce_scatter(&self.world, v, counts, mine)),
        })
    }

    fn all_gather_byte(&self, byte: u8) -> Result<Vec<u8>> {
        let mut all = vec![0u8; self.ranks()];
        self.world.all_gather_into(&byte, &mut all[..]);
        Ok(all)
    }

    fn all_gather_digest(&self, digest: &Digest) -> Result<Vec<Digest>> {
        let mut all = vec![0u8; digest.len() * self.ranks()];
        self.world.all_gather_into(&digest[..], &mut all[..]);
        Ok((all.chunks_exact(digest.len()))
            .map(|d| Digest::try_from(d).expect("a digest's bytes"))
            .collect())
    }

    fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut lens = vec![0u64; self.ranks()];
        self.world.all_gather_into(&(bytes.len() as u64), &mut lens[..]);
        let lens: Vec<usize> = lens.iter().map(|&n| n as usize).collect();
        let (c, d) = partition(&lens)?;
        let mut all = vec![0u8; lens.iter().sum()];
        (self.world).all_gather_varcount_into(bytes, &mut PartitionMut::new(&mut all[..], c, d));
        let mut rest = &all[..];
        Ok((lens.iter())
            .map(|&n| {
                let (mine, after) = rest.split_at(n);
                rest = after;
                mine.to_vec()
            })
            .collect())
    }
}

/// This rank's `mine` elements of the sum of `v` over the ranks, blocks of `counts` in rank
/// order: MPI_Reduce_scatter_block over blocks padded to the largest (balanced blocks differ by
/// at most a row), cut to this rank's count.
fn reduce_scatter<T: Equivalence + Copy + Default>(
    world: &SimpleCommunicator,
    v: &[T],
    counts: &[usize],
    mine: usize,
) -> Vec<T> {
    let block = counts.iter().copied().max().unwrap_or(0);
    let mut padded = vec![T::default(); block * counts.len()];
    let mut at = 0;
    for (r, &c) in counts.iter().enumerate() {
        padded[r * block..r * block + c].copy_from_slice(&v[at..at + c]);
        at += c;
    }
    let mut out = vec![T::default(); block];
    world.reduce_scatter_block_into(&padded[..], &mut out[..], SystemOperation::sum());
    out.truncate(mine);
    out
}

/// `len` zeros of `data`'s precision, or the error naming their bytes.
fn zeros_like(data: &HostData, len: usize) -> Result<HostData> {
    let what = || format!("{len} elements gathered from every rank");
    Ok(match data {
        HostData::F32(_) => HostData::F32(try_zeroed_vec(len, what)?),
        HostData::F64(_) => HostData::F64(try_zeroed_vec(len, what)?),
    })
}

fn mixed() -> Error {
    Error::Internal("a collective's buffers differ in precision".into())
}
