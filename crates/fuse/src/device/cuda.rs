//! A GPU's memory, through the device's one stream: copies, fills and launches run in the
//! order they are queued, so a buffer freed into the pool is reused only by later work.

use std::sync::Arc;

use fuse_core::{DataView, HostData, Precision};
use fuse_cuda::{CudaError, Device};

use super::memory::bytes_text;
use super::pool::bytes_of;
use super::{mismatch, Memory, Pool, Raw};
use crate::error::{Error, Result};

/// GPU memory of one device.
pub(crate) struct CudaMemory {
    device: Device,
}

impl CudaMemory {
    /// The pool of `device`'s memory (one per GPU in the process).
    pub(crate) fn pool(device: &Device) -> Result<Arc<Pool>> {
        let key = format!("cuda:{}", device.info().ordinal);
        Pool::shared(key, || Ok(Arc::new(CudaMemory { device: device.clone() })))
    }
}

impl Memory for CudaMemory {
    fn name(&self) -> String {
        let info = self.device.info();
        format!("GPU {} ({})", info.ordinal, info.name)
    }

    fn free_bytes(&self) -> Result<u64> {
        Ok(self.device.free_bytes()?)
    }

    fn alloc(&self, precision: Precision, len: usize) -> Result<Raw> {
        match self.device.alloc(bytes_of(precision, len) as usize) {
            Ok(slice) => Ok(Raw::Cuda(slice)),
            Err(CudaError::OutOfMemory { bytes, free, .. }) => Err(Error::DeviceMemory {
                device: self.name(),
                what: "an allocation".to_string(),
                asked: bytes_text(bytes),
                free: bytes_text(free),
            }),
            Err(e) => Err(e.into()),
        }
    }

    fn free(&self, raw: Raw) {
        drop(raw); // cudarc frees on the stream, after the work queued before
    }

    fn upload(&self, from: DataView<'_>, to: &mut Raw) -> Result<()> {
        match to {
            Raw::Cuda(to) => Ok(self.device.upload(from, to)?),
            Raw::Emulated(_) => Err(mismatch()),
        }
    }

    fn copy_range(&self, from: &Raw, at: usize, to: &mut Raw, precision: Precision) -> Result<()> {
        match (from, to) {
            (Raw::Cuda(from), Raw::Cuda(to)) => {
                Ok(self.device.copy_range(from, bytes_of(precision, at) as usize, to)?)
            }
            _ => Err(mismatch()),
        }
    }

    fn zero(&self, to: &mut Raw) -> Result<()> {
        match to {
            Raw::Cuda(to) => Ok(self.device.zero(to)?),
            Raw::Emulated(_) => Err(mismatch()),
        }
    }

    fn download(&self, from: &Raw, precision: Precision) -> Result<HostData> {
        match from {
            Raw::Cuda(from) => Ok(self.device.download(from, precision)?),
            Raw::Emulated(_) => Err(mismatch()),
        }
    }

    fn synchronize(&self) -> Result<()> {
        Ok(self.device.synchronize()?)
    }
}
