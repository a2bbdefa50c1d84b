//! The sizes of the CPU's caches, from sysfs: they shape the CPU kernels' tiles and runs
//! ([`Caches`]), decide whether a matrix can still be in the last-level cache when a kernel
//! walks it again (and so whether the walks pull in the next row block ahead of them), size
//! the calibration's environments, and are part of a CPU timing table's key.

use std::path::Path;
use std::sync::OnceLock;

use super::threads::Threads;

/// Where CPU 0's caches are listed (`index*/level`, `index*/type`, `index*/size`).
const CACHES: &str = "/sys/devices/system/cpu/cpu0/cache";
/// Assumed where the system does not say: a common last-level cache of one core complex.
const UNKNOWN_LAST_LEVEL: usize = 32 << 20;
/// Assumed where the system does not say: a common second-level cache.
const UNKNOWN_SECOND_LEVEL: usize = 1 << 20;
/// Assumed where the system does not say: a common first-level data cache.
const UNKNOWN_FIRST_LEVEL: usize = 32 << 10;

/// The most last-level cache one thread of fuse counts on. A machine's own cores share its
/// last-level cache among a few MiB each (2–4 on most, 12 on AMD's stacked-cache parts); a
/// virtual machine of a few vCPUs is shown its host's whole cache (480 MiB for 2 vCPUs on the
/// Xeon of benches/results/cpu-peers-2026-11-28-xeon), which other tenants use too: taken at
/// its word, a 256 MiB matrix looked in cache there, so ATAX walked its row blocks twice
/// without pulling the next one in.
const LAST_LEVEL_PER_THREAD: usize = 16 << 20;

/// The cache sizes the CPU kernels are shaped by, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caches {
    /// The first-level data cache of a core.
    pub(crate) first: usize,
    /// The second-level cache of a core.
    pub(crate) second: usize,
    /// The last-level cache a run can count on: the CPU's, at most [`LAST_LEVEL_PER_THREAD`]
    /// for each thread fuse runs.
    pub(crate) last: usize,
    /// The last-level cache the CPU shows.
    pub(crate) shown: usize,
}

impl Caches {
    /// This CPU's, for the threads fuse runs (`FUSE_NUM_THREADS`), read once.
    pub(crate) fn here() -> Caches {
        static HERE: OnceLock<Caches> = OnceLock::new();
        *HERE.get_or_init(|| {
            let threads = Threads::shared().map_or(1, |t| t.count());
            Caches::new(first_level_bytes(), second_level_bytes(), last_level_bytes(), threads)
        })
    }

    /// The caches of a CPU whose last level is `last` bytes, run on `threads` threads.
    pub(crate) fn new(first: usize, second: usize, last: usize, threads: usize) -> Caches {
        let usable = last.min(threads.max(1).saturating_mul(LAST_LEVEL_PER_THREAD));
        Caches {
            first,
            second,
            last: usable.max(second),
            shown: last,
        }
    }

    /// Whether a kernel of `bytes` is beyond the cache a run counts on, but no more than
    /// [`PARTLY_CACHED_SHARE`] of the cache the CPU shows, so that a run after other work may
    /// still find part of its data there.
    pub(crate) fn partly_cached(&self, bytes: u64) -> bool {
        bytes > self.last as u64 && bytes <= (self.shown / PARTLY_CACHED_SHARE) as u64
    }
}

/// The share of the last-level cache a CPU shows that a kernel beyond the cache a run counts on
/// may be and still find part of its data there after other work: a half. On the 2-vCPU Xeon
/// shown 480 MiB (benches/results/cpu-peers-2026-12-04b-xeon), walks of up to 128 MiB ran
/// faster or alike prefetching each step's next rows in software, where walks of 256 MiB,
/// out of the cache as any other machine's, ran slower.
const PARTLY_CACHED_SHARE: usize = 2;

/// Bytes of the largest data cache of the CPU, read once.
pub(crate) fn last_level_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| largest_cache(&data_caches(Path::new(CACHES))).unwrap_or(UNKNOWN_LAST_LEVEL))
}

/// Bytes of the CPU's second-level cache.
pub(crate) fn second_level_bytes() -> usize {
    level_bytes(&data_caches(Path::new(CACHES)), 2).unwrap_or(UNKNOWN_SECOND_LEVEL)
}

/// Bytes of the CPU's first-level data cache.
pub(crate) fn first_level_bytes() -> usize {
    level_bytes(&data_caches(Path::new(CACHES)), 1).unwrap_or(UNKNOWN_FIRST_LEVEL)
}

/// The data and unified caches listed in `dir`: (level, bytes) each.
fn data_caches(dir: &Path) -> Vec<(u32, usize)> {
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let kind = read(&path.join("type"))?;
            (kind.trim() != "Instruction").then_some(())?;
            let level = read(&path.join("level"))?.trim().parse().ok()?;
            Some((level, bytes(&read(&path.join("size"))?)?))
        })
        .collect()
}

/// The largest of `caches`.
fn largest_cache(caches: &[(u32, usize)]) -> Option<usize> {
    caches.iter().map(|&(_, bytes)| bytes).max()
}

/// The size of the cache of `level` among `caches`.
fn level_bytes(caches: &[(u32, usize)], level: u32) -> Option<usize> {
    caches.iter().find(|&&(l, _)| l == level).map(|&(_, bytes)| bytes)
}

/// `32768K`, `1M` or `512` as bytes.
fn bytes(text: &str) -> Option<usize> {
    let text = text.trim();
    let (number, scale) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    number.parse::<usize>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_sysfs_writes_them() {
        assert_eq!(bytes("32768K\n"), Some(32 << 20));
        assert_eq!(bytes("1M"), Some(1 << 20));
        assert_eq!(bytes("512"), Some(512));
        assert_eq!(bytes("K"), None);
        assert_eq!(bytes("lots"), None);
        assert_eq!(bytes("99999999999999999999G"), None);
    }

    /// A few vCPUs are not shown their share of a host's cache; a machine's own cores are.
    #[test]
    fn a_run_counts_on_its_threads_share_of_a_large_last_level_cache() {
        assert_eq!(Caches::new(48 << 10, 2 << 20, 480 << 20, 2).last, 32 << 20);
        assert_eq!(Caches::new(32 << 10, 1 << 20, 32 << 20, 2).last, 32 << 20);
        assert_eq!(Caches::new(32 << 10, 1 << 20, 32 << 20, 1).last, 16 << 20);
        assert_eq!(Caches::new(48 << 10, 2 << 20, 480 << 20, 64).last, 480 << 20);
        assert_eq!(
            Caches::new(32 << 10, 4 << 20, 2 << 20, 1).last,
            4 << 20,
            "never below L2"
        );
    }

    /// Beyond the cache a run counts on, part of a kernel's data may still be in a larger cache
    /// that the CPU shows; only where the CPU shows one.
    #[test]
    fn kernels_beyond_a_runs_cache_are_partly_cached_only_in_a_larger_one() {
        let xeon = Caches::new(48 << 10, 2 << 20, 480 << 20, 2);
        assert!(!xeon.partly_cached(32 << 20), "the cache a run counts on");
        assert!(xeon.partly_cached(64 << 20) && xeon.partly_cached(128 << 20));
        assert!(!xeon.partly_cached(256 << 20), "more than half of 480 MiB");
        let epyc = Caches::new(32 << 10, 1 << 20, 32 << 20, 2);
        assert!(!(1..=512).any(|mib| epyc.partly_cached(mib << 20)));
    }

    #[test]
    fn the_caches_of_a_listing() {
        let dir = std::env::temp_dir().join(format!("fuse-cache-{}", std::process::id()));
        for (index, level, kind, size) in [
            (0, 1, "Data", "32K"),
            (1, 1, "Instruction", "64M"),
            (2, 2, "Unified", "1024K"),
            (3, 3, "Unified", "32768K"),
        ] {
            let entry = dir.join(format!("index{index}"));
            std::fs::create_dir_all(&entry).unwrap();
            std::fs::write(entry.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(entry.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(entry.join("size"), format!("{size}\n")).unwrap();
        }
        std::fs::create_dir_all(dir.join("uevent-like")).unwrap();
        let caches = data_caches(&dir);
        assert_eq!(largest_cache(&caches), Some(32 << 20));
        assert_eq!(
            level_bytes(&caches, 1),
            Some(32 << 10),
            "the data cache, not the instruction one"
        );
        assert_eq!(level_bytes(&caches, 2), Some(1 << 20));
        assert_eq!(level_bytes(&caches, 4), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(data_caches(&dir), Vec::new());
    }
}
