//! The emulated device's memory: host memory, with the capacity of a device so that running
//! out of it is tested without a GPU. `FUSE_EMULATE_MEMORY` sets the capacity (bytes, or with
//! a `K`, `M` or `G` suffix for powers of 1024); without it the host's memory is the limit, and
//! an allocation the host cannot make is an error too, never an abort.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fuse_core::{DataView, HostData, Precision};

use super::memory::bytes_text;
use super::pool::bytes_of;
use super::{mismatch, Memory, Pool, Raw};
use crate::error::{Error, Result};
use crate::memory::try_to_owned;

/// The variable that sets the emulated device's capacity.
const CAPACITY_VAR: &str = "FUSE_EMULATE_MEMORY";

/// Host memory playing a device's.
pub(crate) struct EmulatedMemory {
    capacity: u64,
    used: AtomicU64,
}

impl EmulatedMemory {
    /// The emulated device's pool (one per process, with the capacity read at first use).
    pub(crate) fn pool() -> Result<Arc<Pool>> {
        Pool::shared("emulated".to_string(), || {
            let capacity = capacity(std::env::var(CAPACITY_VAR).ok().as_deref())?;
            Ok(Arc::new(EmulatedMemory {
                capacity,
                used: AtomicU64::new(0),
            }))
        })
    }

    fn out_of_memory(&self, bytes: u64, free: u64) -> Error {
        Error::DeviceMemory {
            device: self.name(),
            what: "an allocation".to_string(),
            asked: bytes_text(bytes),
            free: bytes_text(free),
        }
    }
}

/// The capacity `FUSE_EMULATE_MEMORY` gives (unlimited when unset).
fn capacity(setting: Option<&str>) -> Result<u64> {
    let Some(text) = setting else {
        return Ok(u64::MAX);
    };
    let (digits, shift) = match text.trim().char_indices().last() {
        Some((i, 'K' | 'k')) => (&text.trim()[..i], 10),
        Some((i, 'M' | 'm')) => (&text.trim()[..i], 20),
        Some((i, 'G' | 'g')) => (&text.trim()[..i], 30),
        _ => (text.trim(), 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| Error::Setting {
            variable: CAPACITY_VAR.to_string(),
            value: text.to_string(),
            expected: "a number of bytes, optionally with a K, M or G suffix (powers of 1024)".to_string(),
        })
}

impl Memory for EmulatedMemory {
    fn name(&self) -> String {
        "the emulated device".to_string()
    }

    fn free_bytes(&self) -> Result<u64> {
        Ok(self.capacity.saturating_sub(self.used.load(Ordering::Relaxed)))
    }

    fn alloc(&self, precision: Precision, len: usize) -> Result<Raw> {
        let bytes = bytes_of(precision, len);
        let reserved = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            used.checked_add(bytes).filter(|&total| total <= self.capacity)
        });
        if let Err(used) = reserved {
            return Err(self.out_of_memory(bytes, self.capacity.saturating_sub(used)));
        }
        let data = match precision {
            Precision::F32 => host_vec::<f32>(len).map(HostData::F32),
            Precision::F64 => host_vec::<f64>(len).map(HostData::F64),
        };
        data.map(Raw::Emulated).ok_or_else(|| {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            self.out_of_memory(bytes, 0)
        })
    }

    fn free(&self, raw: Raw) {
        if let Raw::Emulated(data) = raw {
            self.used
                .fetch_sub(bytes_of(data.precision(), data.len()), Ordering::Relaxed);
        }
    }

    fn upload(&self, from: DataView<'_>, to: &mut Raw) -> Result<()> {
        match (from, to) {
            (DataView::F32(from), Raw::Emulated(HostData::F32(to))) if from.len() == to.len() => {
                to.copy_from_slice(from)
            }
            (DataView::F64(from), Raw::Emulated(HostData::F64(to))) if from.len() == to.len() => {
                to.copy_from_slice(from)
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    fn copy_range(&self, from: &Raw, at: usize, to: &mut Raw, _: Precision) -> Result<()> {
        fn copy<T: Copy>(from: &[T], at: usize, to: &mut [T]) -> Result<()> {
            let from = from.get(at..at + to.len()).ok_or_else(mismatch)?;
            to.copy_from_slice(from);
            Ok(())
        }
        match (from, to) {
            (Raw::Emulated(HostData::F32(from)), Raw::Emulated(HostData::F32(to))) => copy(from, at, to),
            (Raw::Emulated(HostData::F64(from)), Raw::Emulated(HostData::F64(to))) => copy(from, at, to),
            _ => Err(mismatch()),
        }
    }

    fn zero(&self, to: &mut Raw) -> Result<()> {
        match to {
            Raw::Emulated(HostData::F32(v)) => v.fill(0.0),
            Raw::Emulated(HostData::F64(v)) => v.fill(0.0),
            Raw::Cuda(_) => return Err(mismatch()),
        }
        Ok(())
    }

    fn download(&self, from: &Raw, precision: Precision) -> Result<HostData> {
        match from {
            Raw::Emulated(data) if data.precision() == precision => {
                try_to_owned(data.view(), || "a host copy of an emulated device array".to_string())
            }
            _ => Err(mismatch()),
        }
    }

    fn synchronize(&self) -> Result<()> {
        Ok(()) // the emulated device works synchronously
    }
}

/// `len` zeros, or `None` when the host cannot allocate them.
fn host_vec<T: Clone + Default>(len: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, T::default());
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_read_bytes_and_binary_suffixes() {
        assert_eq!(capacity(None).unwrap(), u64::MAX);
        assert_eq!(capacity(Some("4096")).unwrap(), 4096);
        assert_eq!(capacity(Some("3M")).unwrap(), 3 << 20);
        assert_eq!(capacity(Some(" 2g ")).unwrap(), 2 << 30);
        let err = capacity(Some("lots")).unwrap_err().to_string();
        assert!(err.contains("FUSE_EMULATE_MEMORY") && err.contains("`lots`"), "{err}");
        assert!(capacity(Some("99999999999G")).is_err());
    }

    #[test]
    fn allocations_beyond_the_capacity_fail_with_the_sizes() {
        let memory = EmulatedMemory {
            capacity: 1000,
            used: AtomicU64::new(0),
        };
        let a = memory.alloc(Precision::F64, 100).unwrap();
        let err = memory.alloc(Precision::F32, 100).unwrap_err().to_string();
        assert!(err.contains("400 B") && err.contains("200 B"), "{err}");
        memory.free(a);
        assert_eq!(memory.free_bytes().unwrap(), 1000);
        assert!(memory.alloc(Precision::F32, 250).is_ok());
    }
}
