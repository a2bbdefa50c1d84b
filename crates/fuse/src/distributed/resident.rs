//! A distributed run on device buffers, where each rank's backend runs on a device (a GPU, or
//! the emulated device): the local forms stay in device memory from step to step, each segment
//! runs on the buffers of the forms it reads, and each conversion moves buffers — between GPUs
//! through NCCL ([`Link::Nccl`]), else down to the host, through the [`Communicator`], and back
//! up ([`Link::Host`]). A session's matrix is uploaded once and never crosses again; with NCCL
//! nothing but the scalars a caller reads leaves the device.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use fuse_core::distribute::{Conversion, Local, LocalValue, Transfer};
use fuse_core::{HostArray, ValueId};
use fuse_cuda::{Device, Nccl};

use super::{agree, missing, Communicator, Rank};
use crate::backend::{Backend, Compiled};
use crate::device::{resident, Buffer, Pool, Raw};
use crate::error::{Error, Result};

/// How the collectives of a run on device buffers travel.
pub enum Link {
    /// Downloaded, exchanged by the communicator between hosts, uploaded; `why` NCCL is not
    /// used.
    Host {
        /// The reason, for `--timing` and the examples.
        why: String,
    },
    /// NCCL between the ranks' GPUs, device to device (one caller at a time: a communicator is
    /// not thread-safe).
    Nccl(Mutex<Nccl>),
}

impl Link {
    /// The link for runs on `backend` over `comm`: NCCL where every rank runs on a GPU of its
    /// own and loads libnccl, else the host. Collective: every rank must call it.
    pub(super) fn new(comm: &dyn Communicator, backend: &Backend) -> Result<Link> {
        let Backend::Cuda { device } = *backend else {
            return Ok(Link::Host {
                why: format!("{backend} is not a GPU"),
            });
        };
        let loaded = fuse_cuda::probe::nccl().map(|_| ());
        let everywhere = comm.all_gather_byte(u8::from(loaded.is_ok()))?;
        if let Err(e) = loaded {
            return Ok(Link::Host { why: e.to_string() });
        }
        if let Some(rank) = everywhere.iter().position(|&ok| ok == 0) {
            return Ok(Link::Host {
                why: format!("rank {rank} has no NCCL"),
            });
        }
        let uuid = Device::open(device).and_then(|d| d.uuid()).map_err(Error::from);
        let uuids = comm.all_gather_bytes(&agree(comm, uuid)?)?;
        if (1..uuids.len()).any(|r| uuids[..r].contains(&uuids[r])) {
            return Ok(Link::Host {
                why: "ranks share a GPU, and NCCL needs one GPU per rank".to_string(),
            });
        }
        let made = match comm.rank() {
            0 => Nccl::unique_id().map_err(Error::from),
            _ => Ok(Vec::new()),
        };
        let mut id = agree(comm, made)?;
        comm.broadcast_bytes(0, &mut id)?;
        let joined = Device::open(device).and_then(|d| Nccl::join(&d, comm.rank(), comm.ranks(), &id));
        Ok(Link::Nccl(Mutex::new(agree(comm, joined.map_err(Error::from))?)))
    }

    /// `NCCL between GPUs` or `through the host (why)`.
    pub fn describe(&self) -> String {
        match self {
            Link::Nccl(_) => "NCCL between GPUs".to_string(),
            Link::Host { why } => format!("through the host ({why})"),
        }
    }
}

/// A rank's forms on the device, and what crossed between host and device for them.
pub(super) struct OnDevice<'a> {
    pub(super) pool: Arc<Pool>,
    pub(super) link: &'a Link,
    pub(super) buffers: HashMap<LocalValue, Buffer>,
    /// Bytes uploaded and downloaded.
    pub(super) moved: (u64, u64),
}

impl OnDevice<'_> {
    fn upload(&mut self, array: &HostArray) -> Result<Buffer> {
        let buffer = self.pool.upload(array.data.view())?;
        self.moved.0 += buffer.bytes();
        Ok(buffer)
    }

    fn download(&mut self, buffer: &Buffer) -> Result<fuse_core::HostData> {
        self.moved.1 += buffer.bytes();
        buffer.download()
    }
}

/// The device pool of `compiled`'s segments, where every one runs on a device.
pub(super) fn device_pool(compiled: &[Compiled]) -> Option<Arc<Pool>> {
    let mut plans = compiled.iter().map(Compiled::device);
    let first = plans.next()??;
    plans.all(|p| p.is_some()).then(|| Arc::clone(first.pool()))
}

impl<'a> Rank<'a> {
    /// The rank's forms on the device (an error in a run on the host).
    pub(super) fn device(&mut self) -> Result<&mut OnDevice<'a>> {
        let on = self.on_device.as_mut();
        on.ok_or_else(|| Error::Internal("a device step of a run on the host".into()))
    }

    /// Moves every form read on the host onto the device.
    pub(super) fn upload_reads(&mut self) -> Result<()> {
        for (form, stored) in std::mem::take(&mut self.store) {
            let array = stored.into_owned();
            let device = self.device()?;
            let buffer = device.upload(&array)?;
            device.buffers.insert(form, buffer);
        }
        Ok(())
    }

    /// The results' buffers on the host, by form.
    pub(super) fn download_results(&mut self) -> Result<()> {
        for &form in &self.plan.results {
            let dims = self.local_dims(form)?;
            let device = self.device()?;
            if let Some(buffer) = device.buffers.remove(&form) {
                let data = device.download(&buffer)?;
                self.store.insert(form, super::Stored::Owned(HostArray { dims, data }));
            }
        }
        Ok(())
    }

    /// Runs segment `k` on the device: its outputs' buffers, in the order of its outputs.
    pub(super) fn run_segment_on_device(&mut self, k: usize, compiled: &Compiled) -> Result<Vec<Buffer>> {
        let segment = &self.plan.segments[k];
        let plan = compiled
            .device()
            .ok_or_else(|| Error::Internal("a host plan in a device run".into()))?;
        let program = &segment.program;
        let mut given: BTreeMap<ValueId, Buffer> = BTreeMap::new();
        let mut lent: Vec<(ValueId, LocalValue)> = Vec::new();
        let root = self.comm.rank() == 0;
        for (&v, &form) in program.inputs.iter().zip(&segment.inputs) {
            if !plan.buffers().contains(&v) {
                continue; // read by no kernel
            }
            let len = self.local_len(form)?;
            let device = self.device()?;
            let buffer = match device.buffers.remove(&form) {
                Some(buffer) => {
                    lent.push((v, form));
                    buffer
                }
                // Terms added once by rank 0 are zeros on the other ranks.
                None if form.local == Local::RootOnly && !root => device.pool.zeros(program.precision, len)?,
                None => return Err(missing(self.plan, form)),
            };
            given.insert(v, buffer);
        }
        let ran = resident::run(plan, program, compiled.sizes(), &mut given);
        let device = self.device()?;
        for (v, form) in lent {
            if let Some(buffer) = given.remove(&v) {
                device.buffers.insert(form, buffer);
            }
        }
        let mut outputs = ran?.outputs;
        (program.outputs.iter().zip(&segment.outputs))
            .map(|(v, &form)| outputs.remove(v).ok_or_else(|| missing(self.plan, form)))
            .collect()
    }

    /// Makes `c.to` on the device from this rank's form `from`.
    pub(super) fn convert_on_device(&mut self, c: &Conversion, from: Local) -> Result<()> {
        let source = LocalValue {
            value: c.to.value,
            local: from,
        };
        let me = self.comm.rank();
        let rows = self.blocks.range(me);
        let columns: usize = self.local_dims(source)?.iter().skip(1).product();
        let counts = self.counts(c.to)?;
        let (plan, comm) = (self.plan, self.comm);
        let device = self.device()?;
        let src = device.buffers.get(&source).ok_or_else(|| missing(plan, source))?;
        let made = match (c.transfer, device.link) {
            (Transfer::Slice, _) => Some(src.range(rows.start * columns..rows.end * columns)?),
            (Transfer::KeepOnRoot, _) => (me == 0).then(|| src.range(0..src.len())).transpose()?,
            (transfer, Link::Nccl(nccl)) if transfer != Transfer::AllNorm => {
                // Every rank holds its result's memory before any enters the collective: a
                // rank out of memory there would leave the others waiting in it.
                let mut out = agree(comm, nccl_output(transfer, src, &counts, me))?;
                let nccl = nccl.lock().unwrap_or_else(PoisonError::into_inner);
                nccl_convert(&nccl, transfer, src, &mut out, &counts)?;
                let only_root = matches!(transfer, Transfer::Gather | Transfer::Reduce);
                (!only_root || me == 0).then_some(out)
            }
            _ => return self.convert_through_host(c, source),
        };
        if let Some(buffer) = made {
            self.device()?.buffers.insert(c.to, buffer);
        }
        Ok(())
    }

    /// [`Rank::converted`] on the source's elements downloaded, the result uploaded.
    fn convert_through_host(&mut self, c: &Conversion, source: LocalValue) -> Result<()> {
        let (dims, plan) = (self.local_dims(source)?, self.plan);
        let device = self.device()?;
        let src = device.buffers.remove(&source).ok_or_else(|| missing(plan, source))?;
        let data = device.download(&src);
        device.buffers.insert(source, src);
        // Agreed before the collective, like the NCCL path's memory.
        let host = HostArray {
            dims,
            data: agree(self.comm, data)?,
        };
        if let Some(array) = self.converted(c, &host.view())? {
            let device = self.device()?;
            let buffer = device.upload(&array)?;
            device.buffers.insert(c.to, buffer);
        }
        Ok(())
    }
}

/// The buffer `transfer` of `src` writes into: all of the value for a gather, the sum's
/// length for a reduction, this rank's block for a reduce-scatter (a copy of `src` for an
/// in-place sum).
fn nccl_output(transfer: Transfer, src: &Buffer, counts: &[usize], me: usize) -> Result<Buffer> {
    let (pool, precision) = (src.pool(), src.precision());
    match transfer {
        Transfer::AllGather | Transfer::Gather => pool.take(precision, counts.iter().sum()),
        Transfer::AllReduce | Transfer::Reduce => src.range(0..src.len()),
        Transfer::ReduceScatter => pool.take(precision, counts[me]),
        other => Err(Error::Internal(format!("{other:?} is not an NCCL collective"))),
    }
}

/// `transfer` of `src` through NCCL into `out` (from [`nccl_output`]). NCCL has no gather: a
/// gather is an all-gather whose result only rank 0 keeps; likewise a reduce keeps rank 0's.
fn nccl_convert(nccl: &Nccl, transfer: Transfer, src: &Buffer, out: &mut Buffer, counts: &[usize]) -> Result<()> {
    let precision = src.precision();
    let (Raw::Cuda(src), Raw::Cuda(out)) = (src.raw(), out.raw_mut()) else {
        return Err(crate::device::mismatch());
    };
    match transfer {
        Transfer::AllGather | Transfer::Gather => nccl.all_gather(src, out, counts, precision)?,
        Transfer::AllReduce => nccl.all_reduce_sum(out, precision)?,
        Transfer::Reduce => nccl.reduce_sum(out, precision)?,
        Transfer::ReduceScatter => nccl.reduce_scatter_sum(src, out, counts, precision)?,
        other => return Err(Error::Internal(format!("{other:?} is not an NCCL collective"))),
    }
    Ok(())
}
