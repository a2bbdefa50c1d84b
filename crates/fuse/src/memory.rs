//! Host memory: what a run needs against what the machine can give, checked before the big
//! arrays are made, so that a problem too large for the machine is a clear error (bytes needed,
//! bytes available) rather than the abort of a failed allocation. Allocations themselves are
//! fallible too ([`fuse_core::data::try_vec`]): memory taken by others between the check and
//! the allocation is still an error, not an abort.

use std::path::Path;

use fuse_core::data::{try_vec, HostMemoryError};
use fuse_core::{DataView, HostData};

use crate::error::Result;

/// Bytes of memory the host can give this process now: `MemAvailable` of `/proc/meminfo`, or
/// less where the process's control group (cgroup v2) allows less; `None` where unknown.
pub fn available_host_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = meminfo.lines().find_map(|l| {
        let kib = l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?;
        kib.trim().parse::<u64>().ok().map(|k| k * 1024)
    })?;
    Some(cgroup_room().map_or(available, |room| room.min(available)))
}

/// What the process's cgroup still allows (its `memory.max` less `memory.current`), if it
/// sets a limit.
fn cgroup_room() -> Option<u64> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok()?.trim().parse::<u64>().ok();
    Some(read("memory.max")?.saturating_sub(read("memory.current")?))
}

/// Runs needing fewer bytes than this are not checked against the memory available: reading
/// the system's accounting (four files) costs 30–50 µs, what a whole in-cache run takes, and
/// an allocation refused is an error anyway.
const UNCHECKED_BYTES: u64 = 64 << 20;

/// Checks that `needed` bytes for `what` fit the host memory available now (where that is
/// known; below 64 MiB, not checked).
///
/// ```
/// let err = fuse::check_host_memory(u64::MAX, || "a huge matrix".to_string()).unwrap_err();
/// assert!(err.to_string().starts_with("not enough host memory for a huge matrix: it needs 18446744073709551615 bytes"));
/// assert!(fuse::check_host_memory(1, || "a byte".to_string()).is_ok());
/// ```
pub fn check_host_memory(needed: u64, what: impl FnOnce() -> String) -> Result<()> {
    if needed < UNCHECKED_BYTES {
        return Ok(());
    }
    match available_host_memory() {
        Some(available) if needed > available => Err(HostMemoryError {
            what: what(),
            needed,
            available: Some(available),
        }
        .into()),
        _ => Ok(()),
    }
}

/// `items` collected into a vector, which is first checked against the host memory available
/// ([`check_host_memory`]) and then allocated fallibly: a copy sized by a caller's data (a
/// session's copy of a numpy array, a value read back) is an error naming `what`, never the
/// abort of a failed allocation.
///
/// ```
/// let copy = fuse::try_collect([1.0f32, 2.0].iter().copied(), || "two floats".to_string())?;
/// assert_eq!(copy, [1.0, 2.0]);
/// # Ok::<(), fuse::Error>(())
/// ```
pub fn try_collect<T>(items: impl ExactSizeIterator<Item = T>, what: impl Fn() -> String) -> Result<Vec<T>> {
    let bytes = (items.len() as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    check_host_memory(bytes, &what)?;
    let mut collected = try_vec(items.len(), what)?;
    collected.extend(items);
    Ok(collected)
}

/// The elements of `data`, copied as [`try_collect`] copies.
pub fn try_to_owned(data: DataView<'_>, what: impl Fn() -> String) -> Result<HostData> {
    Ok(match data {
        DataView::F32(values) => HostData::F32(try_collect(values.iter().copied(), what)?),
        DataView::F64(values) => HostData::F64(try_collect(values.iter().copied(), what)?),
    })
}
