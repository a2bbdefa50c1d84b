//! Buffers cached for reuse, like the caching allocators of PyTorch and CuPy: a freed buffer
//! goes back to its device's pool, keyed by precision and length, and the next request of that
//! shape takes it instead of allocating. A solver loop allocates in its first iteration and
//! never again. Out of memory, the cache is given back to the device and the allocation tried
//! once more before it fails.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use fuse_core::{DataView, HostData, Precision, ValueId};

use super::memory::bytes_text;
use super::{mismatch, Memory, Raw};
use crate::error::{Error, Result};
use crate::memory::check_host_memory;

/// A device's memory with a cache of free buffers.
pub(crate) struct Pool {
    memory: Arc<dyn Memory>,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    free: HashMap<(Precision, usize), Vec<Raw>>,
}

/// A buffer of `len` elements on a device; back to its pool when dropped.
pub(crate) struct Buffer {
    raw: Option<Raw>,
    precision: Precision,
    len: usize,
    /// Newly allocated for it, not taken from the cache.
    fresh: bool,
    /// Memory someone else allocated: given up when dropped, never freed or cached.
    borrowed: bool,
    pool: Arc<Pool>,
}

impl Pool {
    /// The pool of a device memory, one per device in the process (created on first use), so
    /// that every session and compiled plan on that device shares its cached buffers.
    pub(crate) fn shared(key: String, memory: impl FnOnce() -> Result<Arc<dyn Memory>>) -> Result<Arc<Pool>> {
        use std::sync::OnceLock;
        static POOLS: OnceLock<Mutex<HashMap<String, Arc<Pool>>>> = OnceLock::new();
        let mut pools = POOLS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pools.get(&key) {
            return Ok(Arc::clone(pool));
        }
        let pool = Arc::new(Pool::new(memory()?));
        pools.insert(key, Arc::clone(&pool));
        Ok(pool)
    }

    pub(crate) fn new(memory: Arc<dyn Memory>) -> Self {
        Pool {
            memory,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The device's memory.
    pub(crate) fn memory(&self) -> &dyn Memory {
        &*self.memory
    }

    /// A buffer of `len` elements of `precision`, contents undefined: a cached one if there is
    /// one of that shape, else a new allocation.
    pub(crate) fn take(self: &Arc<Self>, precision: Precision, len: usize) -> Result<Buffer> {
        let cached = self.lock().free.get_mut(&(precision, len)).and_then(Vec::pop);
        let fresh = cached.is_none();
        let raw = match cached {
            Some(raw) => raw,
            None => self.allocate(precision, len)?,
        };
        Ok(Buffer {
            raw: Some(raw),
            precision,
            len,
            fresh,
            borrowed: false,
            pool: Arc::clone(self),
        })
    }

    /// `raw`, an allocation of `len` elements of `precision` made elsewhere on this device, as
    /// a buffer of the pool (cached for reuse when dropped, like the others).
    pub(crate) fn adopt(self: &Arc<Self>, raw: Raw, precision: Precision, len: usize) -> Buffer {
        Buffer {
            raw: Some(raw),
            precision,
            len,
            fresh: false,
            borrowed: false,
            pool: Arc::clone(self),
        }
    }

    /// `raw`, memory of this device that someone else allocated and keeps, as a buffer of
    /// `len` elements of `precision`: given up when dropped, neither freed nor cached.
    pub(crate) fn borrow(self: &Arc<Self>, raw: Raw, precision: Precision, len: usize) -> Buffer {
        let mut buffer = self.adopt(raw, precision, len);
        buffer.borrowed = true;
        buffer
    }

    /// A buffer holding `data`, copied from the host.
    pub(crate) fn upload(self: &Arc<Self>, data: DataView<'_>) -> Result<Buffer> {
        let mut buffer = self.take(data.precision(), data.len())?;
        self.memory.upload(data, buffer.raw_mut())?;
        Ok(buffer)
    }

    /// A buffer of `len` zeros.
    pub(crate) fn zeros(self: &Arc<Self>, precision: Precision, len: usize) -> Result<Buffer> {
        let mut buffer = self.take(precision, len)?;
        self.memory.zero(buffer.raw_mut())?;
        Ok(buffer)
    }

    /// Fails early, naming the sizes, when `bytes` more than the cache holds cannot fit in
    /// what the device has free.
    pub(crate) fn check_fits(&self, what: &str, bytes: u64) -> Result<()> {
        let cached: u64 = self
            .lock()
            .free
            .iter()
            .map(|((p, len), v)| bytes_of(*p, *len) * v.len() as u64)
            .sum();
        let free = self.memory.free_bytes()?.saturating_add(cached);
        if bytes <= free {
            return Ok(());
        }
        Err(Error::DeviceMemory {
            device: self.memory.name(),
            what: what.to_string(),
            asked: bytes_text(bytes),
            free: bytes_text(free),
        })
    }

    fn allocate(&self, precision: Precision, len: usize) -> Result<Raw> {
        let first = self.memory.alloc(precision, len);
        let raw = match first {
            Err(Error::DeviceMemory { .. }) => {
                self.trim();
                self.memory.alloc(precision, len)?
            }
            other => other?,
        };
        Ok(raw)
    }

    /// Gives every cached buffer back to the device.
    fn trim(&self) {
        let free = std::mem::take(&mut self.lock().free);
        for raw in free.into_values().flatten() {
            self.memory.free(raw);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Buffer {
    /// Its allocation.
    pub(crate) fn raw(&self) -> &Raw {
        self.raw.as_ref().expect("a buffer holds its allocation until dropped")
    }

    /// Its allocation, to be written by kernels.
    pub(crate) fn raw_mut(&mut self) -> &mut Raw {
        self.raw.as_mut().expect("a buffer holds its allocation until dropped")
    }

    /// Bytes.
    pub(crate) fn bytes(&self) -> u64 {
        bytes_of(self.precision, self.len)
    }

    /// Its precision.
    pub(crate) fn precision(&self) -> Precision {
        self.precision
    }

    /// Its length in elements.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A new buffer (from the same pool) holding elements `range` of this one, copied on the
    /// device.
    pub(crate) fn range(&self, range: std::ops::Range<usize>) -> Result<Buffer> {
        if range.end > self.len || range.start > range.end {
            return Err(mismatch());
        }
        let mut part = self.pool.take(self.precision, range.len())?;
        (self.pool.memory).copy_range(self.raw(), range.start, part.raw_mut(), self.precision)?;
        Ok(part)
    }

    /// The pool it comes from.
    pub(crate) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Whether it was newly allocated rather than taken from the pool's cache.
    pub(crate) fn fresh(&self) -> bool {
        self.fresh
    }

    /// The elements on the host (waits for the work queued before).
    pub(crate) fn download(&self) -> Result<HostData> {
        // A GPU's copy comes into memory allocated unchecked: the size is checked first.
        check_host_memory(self.bytes(), || {
            format!(
                "a host copy of a device array of {} {} elements",
                self.len, self.precision
            )
        })?;
        self.pool.memory.download(self.raw(), self.precision)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            if self.borrowed {
                if let Raw::Cuda(slice) = raw {
                    slice.leak(); // the owner frees it
                }
                return;
            }
            let mut cache = self.pool.lock();
            cache.free.entry((self.precision, self.len)).or_default().push(raw);
        }
    }
}

/// The allocations of `buffers` by value, as `pick` takes them from the device kind a plan
/// runs on; a buffer of another kind is a fuse bug, reported.
pub(crate) fn raw_buffers<'a, R>(
    buffers: &'a mut BTreeMap<ValueId, Buffer>,
    pick: impl Fn(&'a mut Raw) -> Option<R>,
) -> Result<BTreeMap<ValueId, R>> {
    buffers
        .iter_mut()
        .map(|(v, buffer)| pick(buffer.raw_mut()).map(|raw| (*v, raw)).ok_or_else(mismatch))
        .collect()
}

/// Bytes of `len` elements of `precision`.
pub(crate) fn bytes_of(precision: Precision, len: usize) -> u64 {
    len as u64 * precision.bytes()
}
