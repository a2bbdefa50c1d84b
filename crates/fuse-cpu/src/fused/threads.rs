//! The threads the fused CPU backend runs on: a rayon pool of its own, so that a program
//! embedding fuse keeps its global rayon pool to itself, and a plan may be given a pool of
//! another size.
//!
//! The shared pool has `FUSE_NUM_THREADS` threads, else one per core this process may run on —
//! its CPU affinity (`taskset`, a container's cpuset) and its cgroup's CPU quota, as
//! [`std::thread::available_parallelism`] reads them — never the machine's count when fewer
//! are ours: a thread more than the cores available waits for one, and every kernel's parallel
//! section waits for its slowest thread.

use std::env::VarError;
use std::sync::{Arc, OnceLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use super::CpuError;

/// The environment variable that sets the shared pool's thread count.
pub const THREADS_VAR: &str = "FUSE_NUM_THREADS";

/// Most threads a pool may be asked for: more is a typo, not a machine.
const MAX_THREADS: usize = 4096;

/// A pool of threads to run plans on; clones share it.
#[derive(Debug, Clone)]
pub struct Threads(Arc<ThreadPool>);

impl Threads {
    /// The process's shared pool, built on first use from [`THREADS_VAR`] (a bad setting is an
    /// error every time it is asked for).
    pub fn shared() -> Result<Threads, CpuError> {
        static SHARED: OnceLock<Result<Threads, CpuError>> = OnceLock::new();
        SHARED.get_or_init(|| Threads::new(from_env()?)).clone()
    }

    /// A pool of its own with `count` threads (1 to 4096).
    pub fn new(count: usize) -> Result<Threads, CpuError> {
        if !(1..=MAX_THREADS).contains(&count) {
            return Err(CpuError::Threads(format!(
                "{count} threads asked for: from 1 to {MAX_THREADS} may be"
            )));
        }
        ThreadPoolBuilder::new()
            .num_threads(count)
            .thread_name(|k| format!("fuse-cpu-{k}"))
            .build()
            .map(|pool| Threads(Arc::new(pool)))
            .map_err(|e| CpuError::Threads(format!("cannot start {count} threads: {e}")))
    }

    /// Threads in the pool.
    pub fn count(&self) -> usize {
        self.0.current_num_threads()
    }

    /// Runs `work` on the pool (its parallel iterators use the pool's threads).
    pub fn install<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.0.install(work)
    }
}

/// The thread count [`THREADS_VAR`] asks for, else the cores available to this process.
fn from_env() -> Result<usize, CpuError> {
    let bad = |value: String| {
        CpuError::Threads(format!(
            "{THREADS_VAR}={value:?} is not a thread count: set it to a whole number from 1 to {MAX_THREADS}, \
             or unset it to use every core this process may run on"
        ))
    };
    match std::env::var(THREADS_VAR) {
        Err(VarError::NotPresent) => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
        Err(VarError::NotUnicode(value)) => Err(bad(value.to_string_lossy().into_owned())),
        Ok(value) => match value.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
            _ => Err(bad(value)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_has_the_threads_asked_for_and_runs_work_on_them() {
        let threads = Threads::new(3).unwrap();
        assert_eq!(threads.count(), 3);
        assert_eq!(threads.install(rayon::current_num_threads), 3);
        let name = threads.install(|| std::thread::current().name().map(str::to_string));
        assert!(name.is_some_and(|n| n.starts_with("fuse-cpu-")));
    }

    #[test]
    fn impossible_counts_are_refused_with_the_range() {
        for count in [0, MAX_THREADS + 1] {
            let err = Threads::new(count).unwrap_err().to_string();
            assert!(err.contains("from 1 to 4096"), "{err}");
        }
    }
}
