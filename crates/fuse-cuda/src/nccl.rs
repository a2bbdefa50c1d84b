//! Collectives between GPUs through NCCL (cudarc's `nccl`): sums, gathers and reduce-scatters
//! of device buffers, queued on the device's one stream, so that they run in order with the
//! kernels before and after them and no buffer crosses to the host.
//!
//! Every rank makes the same calls in the same order (NCCL's rule for collectives). Blocks of
//! different lengths — a row-partitioned vector whose rows do not divide evenly — go as one
//! broadcast (gather) or reduction (reduce-scatter) per rank, since NCCL's own all-gather and
//! reduce-scatter move equal blocks; balanced blocks differ by at most a row, so the common
//! case of equal ones takes the single collective.

use std::ffi::c_char;

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DeviceRepr};
use cudarc::nccl::{Comm, Id, NcclType, ReduceOp};
use fuse_core::Precision;

use crate::error::{nccl, CudaError};
use crate::{probe, Device};

/// The bytes of NCCL's unique id, which rank 0 makes and every rank joins with.
pub const ID_BYTES: usize = 128;

/// One rank's NCCL communicator, on the stream of its [`Device`].
pub struct Nccl {
    comm: Comm,
    device: Device,
}

// SAFETY: an NCCL communicator may be used from any thread as long as no two threads use it at
// once (NCCL's thread-safety rule); `Nccl` is not `Sync`, so only the thread owning it calls it.
unsafe impl Send for Nccl {}

impl Nccl {
    /// A new unique id (on rank 0), to be sent to every rank before they [`Nccl::join`].
    pub fn unique_id() -> Result<Vec<u8>, CudaError> {
        probe::nccl()?;
        let id = Id::new().map_err(nccl("ncclGetUniqueId"))?;
        Ok(id.internal().iter().map(|&c| c as u8).collect())
    }

    /// Joins the communicator of `ranks` ranks that `id` names, as `rank`, on `device` (one GPU
    /// per rank: NCCL refuses two ranks on one GPU). Every rank must call it; it returns when
    /// all have.
    pub fn join(device: &Device, rank: usize, ranks: usize, id: &[u8]) -> Result<Nccl, CudaError> {
        probe::nccl()?;
        // NCCL takes the GPU of the communicator from the thread's current context.
        bind(device)?;
        let internal: [c_char; ID_BYTES] = (id.iter().map(|&b| b as c_char).collect::<Vec<_>>().try_into())
            .map_err(|_| CudaError::Unsupported(format!("an NCCL id of {} bytes, not {ID_BYTES}", id.len())))?;
        let comm = Comm::from_rank(device.stream().clone(), rank, ranks, Id::uninit(internal))
            .map_err(nccl("ncclCommInitRank"))?;
        Ok(Nccl {
            comm,
            device: device.clone(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// How many ranks there are.
    pub fn ranks(&self) -> usize {
        self.comm.world_size()
    }

    /// The element-wise sum of every rank's `data` (elements of `precision`), in place.
    pub fn all_reduce_sum(&self, data: &mut CudaSlice<u8>, precision: Precision) -> Result<(), CudaError> {
        bind(&self.device)?;
        on_precision!(precision, T => {
            let mut view = typed_mut::<T>(data)?;
            self.comm
                .all_reduce_in_place(&mut view, &ReduceOp::Sum)
                .map_err(nccl("ncclAllReduce"))?;
        });
        Ok(())
    }

    /// The element-wise sum into `data` on rank 0 (the others' `data` is left as it was).
    pub fn reduce_sum(&self, data: &mut CudaSlice<u8>, precision: Precision) -> Result<(), CudaError> {
        bind(&self.device)?;
        on_precision!(precision, T => {
            let mut view = typed_mut::<T>(data)?;
            self.comm
                .reduce_in_place(&mut view, &ReduceOp::Sum, 0)
                .map_err(nccl("ncclReduce"))?;
        });
        Ok(())
    }

    /// Every rank's `local` (`counts[rank]` elements) into `all`, in rank order, on every rank.
    pub fn all_gather(
        &self,
        local: &CudaSlice<u8>,
        all: &mut CudaSlice<u8>,
        counts: &[usize],
        precision: Precision,
    ) -> Result<(), CudaError> {
        bind(&self.device)?;
        on_precision!(precision, T => {
            let local = typed::<T>(local)?;
            let mut all = typed_mut::<T>(all)?;
            if counts.iter().all(|&c| c == counts[0]) {
                self.comm.all_gather(&local, &mut all).map_err(nccl("ncclAllGather"))?;
            } else {
                for (root, range) in blocks(counts).enumerate() {
                    let send = (root == self.rank()).then_some(&local);
                    let mut piece = all.slice_mut(range);
                    self.comm
                        .broadcast(send, &mut piece, root as i32)
                        .map_err(nccl("ncclBroadcast"))?;
                }
            }
        });
        Ok(())
    }

    /// This rank's block (`counts[rank]` elements, into `mine`) of the element-wise sum of every
    /// rank's `data`, whose blocks of `counts` elements follow in rank order.
    pub fn reduce_scatter_sum(
        &self,
        data: &CudaSlice<u8>,
        mine: &mut CudaSlice<u8>,
        counts: &[usize],
        precision: Precision,
    ) -> Result<(), CudaError> {
        bind(&self.device)?;
        on_precision!(precision, T => {
            let data = typed::<T>(data)?;
            let mut mine = typed_mut::<T>(mine)?;
            if counts.iter().all(|&c| c == counts[0]) {
                self.comm
                    .reduce_scatter(&data, &mut mine, &ReduceOp::Sum)
                    .map_err(nccl("ncclReduceScatter"))?;
            } else {
                for (root, range) in blocks(counts).enumerate() {
                    let receive = (root == self.rank()).then_some(&mut mine);
                    self.comm
                        .reduce(&data.slice(range), receive, &ReduceOp::Sum, root as i32)
                        .map_err(nccl("ncclReduce"))?;
                }
            }
        });
        Ok(())
    }
}

/// Makes `device`'s context current on this thread (a session may move between threads).
fn bind(device: &Device) -> Result<(), CudaError> {
    device
        .context()
        .bind_to_thread()
        .map_err(crate::error::driver("cuCtxSetCurrent"))
}

/// Runs `$body` with `$t` the element type of `$precision`.
macro_rules! on_precision {
    ($precision:expr, $t:ident => $body:block) => {
        match $precision {
            Precision::F32 => {
                type $t = f32;
                $body
            }
            Precision::F64 => {
                type $t = f64;
                $body
            }
        }
    };
}
use on_precision;

/// The element ranges of blocks of `counts` elements laid end to end.
fn blocks(counts: &[usize]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    counts.iter().scan(0, |at, &c| {
        *at += c;
        Some(*at - c..*at)
    })
}

/// `bytes` as elements of `T` (whole elements only).
fn typed<T: DeviceRepr + NcclType>(bytes: &CudaSlice<u8>) -> Result<CudaView<'_, T>, CudaError> {
    let len = bytes.len() / std::mem::size_of::<T>();
    // SAFETY: `len` elements of `T` fit in the allocation; f32/f64 take any bit pattern.
    unsafe { bytes.transmute::<T>(len) }.ok_or_else(too_short)
}

/// `bytes` as elements of `T`, to be written.
fn typed_mut<T: DeviceRepr + NcclType>(bytes: &mut CudaSlice<u8>) -> Result<CudaViewMut<'_, T>, CudaError> {
    let len = bytes.len() / std::mem::size_of::<T>();
    // SAFETY: as in `typed`.
    unsafe { bytes.transmute_mut::<T>(len) }.ok_or_else(too_short)
}

fn too_short() -> CudaError {
    CudaError::Unsupported("a device buffer shorter than its elements (a fuse bug, please report)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_lie_end_to_end() {
        let ranges: Vec<_> = blocks(&[3, 3, 2, 0]).collect();
        assert_eq!(ranges, [0..3, 3..6, 6..8, 8..8]);
    }

    /// Where libnccl loads the way cudarc opens it (a `libnccl.so` on the loader's path), a
    /// unique id is made without a GPU; where it does not, joining says what to install or link.
    #[test]
    fn nccl_is_found_as_cudarc_opens_it_or_named_in_the_error() {
        match probe::nccl() {
            Ok(pinned) => {
                let (major, _) = pinned.version.expect("ncclGetVersion answers");
                assert_eq!(major, 2, "{}", pinned.origin);
                assert_eq!(Nccl::unique_id().unwrap().len(), ID_BYTES);
            }
            Err(_) => {
                let err = Nccl::unique_id().unwrap_err();
                assert!(matches!(err, CudaError::NoNccl(_)), "{err}");
                assert!(err.to_string().contains("libnccl.so"), "{err}");
            }
        }
    }
}
