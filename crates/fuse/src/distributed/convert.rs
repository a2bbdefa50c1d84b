//! The conversions of a distributed run on one rank: each [`Transfer`] as collectives of the
//! [`Communicator`] and local slices.

use fuse_core::data::try_zeroed_vec;
use fuse_core::distribute::{Conversion, Local, LocalValue, Transfer};
use fuse_core::reference::norm2;
use fuse_core::{ArrayView, HostArray, HostData, Precision};

use super::{missing, Rank, Stored};
use crate::error::{Error, Result};

impl Rank<'_> {
    /// Makes `c.to` from this rank's form `from` of the same value.
    pub(super) fn convert(&mut self, c: &Conversion, from: Local) -> Result<()> {
        let source = LocalValue {
            value: c.to.value,
            local: from,
        };
        let src = self
            .store
            .get(&source)
            .ok_or_else(|| missing(self.plan, source))?
            .view();
        if let Some(array) = self.converted(c, &src)? {
            self.store.insert(c.to, Stored::Owned(array));
        }
        Ok(())
    }

    /// `c.to` made from `src` on the host: `None` where this rank holds no such form.
    pub(super) fn converted(&self, c: &Conversion, src: &ArrayView) -> Result<Option<HostArray>> {
        let (comm, ranks, me) = (self.comm, self.comm.ranks(), self.comm.rank());
        let (whole, counts) = (self.whole_dims(c.to)?, self.counts(c.to)?);
        let with = |data: HostData, dims: &[usize]| HostArray {
            dims: dims.to_vec(),
            data,
        };
        Ok(match c.transfer {
            Transfer::AllGather => Some(with(comm.all_gather(&src.data.to_owned(), &counts)?, &whole)),
            Transfer::Gather => comm.gather(&src.data.to_owned(), &counts)?.map(|d| with(d, &whole)),
            Transfer::AllReduce => {
                let mut data = src.data.to_owned();
                comm.all_reduce_sum(&mut data)?;
                Some(with(data, &src.dims))
            }
            Transfer::Reduce => {
                let mut data = src.data.to_owned();
                comm.reduce_sum(&mut data)?;
                (me == 0).then(|| with(data, &src.dims))
            }
            Transfer::ReduceScatter => {
                let mut dims = src.dims.clone();
                dims[0] = self.blocks.rows(me);
                Some(with(comm.reduce_scatter_sum(&src.data.to_owned(), &counts)?, &dims))
            }
            Transfer::AllNorm => {
                let all = comm.all_gather(&src.data.to_owned(), &vec![src.data.len(); ranks])?;
                Some(with(combine_norms(&all, src.data.len()), &src.dims))
            }
            Transfer::Slice => Some(src.rows(self.blocks.range(me))),
            Transfer::KeepOnRoot => (me == 0).then(|| src.to_owned()),
            Transfer::Read | Transfer::Given => return Err(Error::Internal("a read is not a conversion".into())),
        })
    }
}

/// Zeros of `dims`, or the error naming their bytes.
pub(super) fn zeros(precision: Precision, dims: Vec<usize>) -> Result<HostArray> {
    let len = dims.iter().product();
    let what = || format!("zeros of {dims:?} for a term rank 0 adds");
    let data = match precision {
        Precision::F32 => HostData::F32(try_zeroed_vec(len, what)?),
        Precision::F64 => HostData::F64(try_zeroed_vec(len, what)?),
    };
    Ok(HostArray { dims, data })
}

/// Element `i` of the result is the Euclidean norm of element `i` of every rank's norms
/// (`all` holds the ranks' arrays of `len` one after the other).
fn combine_norms(all: &HostData, len: usize) -> HostData {
    let column = |i: usize| -> Vec<f64> {
        match all {
            HostData::F32(v) => v.iter().skip(i).step_by(len).map(|&x| f64::from(x)).collect(),
            HostData::F64(v) => v.iter().skip(i).step_by(len).copied().collect(),
        }
    };
    let norms = (0..len).map(|i| norm2(&column(i)));
    match all {
        HostData::F32(_) => HostData::F32(norms.map(|x| x as f32).collect()),
        HostData::F64(_) => HostData::F64(norms.collect()),
    }
}
