//! The threads the fused CPU backend runs on: the calling thread and a [`Crew`] of fuse's own
//! (a program embedding fuse keeps its global rayon pool to itself, and a plan may be given
//! threads of another count).
//!
//! The shared threads are `FUSE_NUM_THREADS`, else one per core this process may run on —
//! its CPU affinity (`taskset`, a container's cpuset) and its cgroup's CPU quota, as
//! [`std::thread::available_parallelism`] reads them — never the machine's count when fewer
//! are ours: a thread more than the cores available waits for one, and every kernel's parallel
//! section waits for its slowest thread.

use std::env::VarError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::crew::{lock, Crew};
use super::CpuError;

/// The environment variable that sets the shared threads' count.
pub const THREADS_VAR: &str = "FUSE_NUM_THREADS";

/// Most threads that may be asked for: more is a typo, not a machine.
const MAX_THREADS: usize = 4096;

/// Which way a thread goes through its block of items (see [`Threads::share_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// From the first item.
    Forward,
    /// From the last item.
    Backward,
}

impl Order {
    /// `work` on every item on this thread, in this order; the results in the items' order.
    pub(crate) fn serial<I, R>(self, items: Vec<I>, work: impl Fn(I) -> R) -> Vec<R> {
        match self {
            Order::Forward => items.into_iter().map(work).collect(),
            Order::Backward => {
                let mut done: Vec<R> = items.into_iter().rev().map(work).collect();
                done.reverse();
                done
            }
        }
    }
}

/// The threads to run plans on: the calling thread and a crew of helpers; clones share the
/// crew.
#[derive(Debug, Clone)]
pub struct Threads {
    count: usize,
    /// `count - 1` helpers (none for one).
    crew: Option<Arc<Crew>>,
}

impl Threads {
    /// The process's shared threads, their crew started on first use from [`THREADS_VAR`] (a
    /// bad setting is an error every time it is asked for).
    pub fn shared() -> Result<Threads, CpuError> {
        static SHARED: OnceLock<Result<Threads, CpuError>> = OnceLock::new();
        SHARED.get_or_init(|| Threads::new(from_env()?)).clone()
    }

    /// `count` threads (1 to 4096): the caller and a crew of its own of `count - 1`.
    pub fn new(count: usize) -> Result<Threads, CpuError> {
        if !(1..=MAX_THREADS).contains(&count) {
            return Err(CpuError::Threads(format!(
                "{count} threads asked for: from 1 to {MAX_THREADS} may be"
            )));
        }
        let crew = (count > 1)
            .then(|| Crew::new(count - 1))
            .transpose()
            .map_err(|e| CpuError::Threads(format!("cannot start {count} threads: {e}")))?;
        Ok(Threads {
            count,
            crew: crew.map(Arc::new),
        })
    }

    /// Threads that work on a run, the caller's included.
    pub fn count(&self) -> usize {
        self.count
    }

    /// `work` on every item, the results in the items' order: [`Self::share_in`] forward.
    pub(crate) fn share<I: Send, R: Send>(&self, items: Vec<I>, work: impl Fn(I) -> R + Sync) -> Vec<R> {
        self.share_in(Order::Forward, items, work)
    }

    /// `work` on every item, the results in the items' order. The items are cut into one
    /// contiguous block per thread; each thread works through its own block, in `order`, then
    /// helps with the others'. So the caller works on the first block, a helper that comes late
    /// (or not at all: the crew busy with another caller's run) only takes fewer, and in a loop
    /// of runs each thread finds its block's data where it left it, in its own core's caches —
    /// going backward, starting with what it touched last.
    pub(crate) fn share_in<I: Send, R: Send>(
        &self,
        order: Order,
        items: Vec<I>,
        work: impl Fn(I) -> R + Sync,
    ) -> Vec<R> {
        let count = items.len();
        let Some(crew) = self.crew.as_ref().filter(|_| count > 1) else {
            return order.serial(items, work);
        };
        let items: Vec<Mutex<Option<I>>> = items.into_iter().map(|i| Mutex::new(Some(i))).collect();
        let results: Vec<Mutex<Option<R>>> = (0..count).map(|_| Mutex::new(None)).collect();
        let blocks = self.count.min(count);
        // Items taken from each block so far.
        let taken: Vec<AtomicUsize> = (0..blocks).map(|_| AtomicUsize::new(0)).collect();
        crew.run(&|me| {
            for b in (0..blocks).map(|k| (me + k) % blocks) {
                let (first, end) = (b * count / blocks, (b + 1) * count / blocks);
                loop {
                    let t = taken[b].fetch_add(1, Ordering::Relaxed);
                    if t >= end - first {
                        break;
                    }
                    let k = match order {
                        Order::Forward => first + t,
                        Order::Backward => end - 1 - t,
                    };
                    let item = lock(&items[k]).take().expect("each item is taken once");
                    *lock(&results[k]) = Some(work(item));
                }
            }
        });
        results
            .into_iter()
            .map(|r| r.into_inner().ok().flatten().expect("every item was worked on"))
            .collect()
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
    fn shared_work_covers_every_item_once_in_order_on_the_caller_and_the_pool() {
        let caller = std::thread::current().id();
        for threads in [1, 3] {
            let threads = Threads::new(threads).unwrap();
            for count in [0, 1, 2, 3, 50] {
                let done = threads.share((0..count).collect(), |k: usize| (k * 2, std::thread::current().id()));
                let want: Vec<usize> = (0..count).map(|k| k * 2).collect();
                assert_eq!(done.iter().map(|r| r.0).collect::<Vec<_>>(), want);
                if count == 1 || threads.count() == 1 {
                    assert!(
                        done.iter().all(|r| r.1 == caller),
                        "one item, or one thread: all on the caller"
                    );
                }
            }
        }
    }

    #[test]
    fn going_backward_each_thread_starts_at_the_end_of_its_own_block() {
        for threads in [1, 2] {
            let threads = Threads::new(threads).unwrap();
            let order = Mutex::new(Vec::new());
            let done = threads.share_in(Order::Backward, (0..8).collect(), |k: usize| {
                lock(&order).push((std::thread::current().id(), k));
                // Slow enough for a helper to come for its block.
                std::thread::sleep(std::time::Duration::from_millis(5));
                k * 2
            });
            assert_eq!(
                done,
                (0..8).map(|k| k * 2).collect::<Vec<_>>(),
                "results in the items' order"
            );
            let order = order.into_inner().unwrap();
            let caller: Vec<usize> = order
                .iter()
                .filter(|(t, _)| *t == std::thread::current().id())
                .map(|&(_, k)| k)
                .collect();
            let block = 8 / threads.count();
            assert_eq!(caller[0], block - 1, "the caller starts at its block's end: {order:?}");
            let own: Vec<usize> = caller.iter().copied().take_while(|&k| k < block).collect();
            assert!(own.windows(2).all(|w| w[0] > w[1]), "then goes down it: {order:?}");
        }
    }

    #[test]
    fn items_run_on_the_pool_too() {
        let threads = Threads::new(2).unwrap();
        let gate = std::sync::Barrier::new(2);
        // Two items that wait for each other finish only if two threads take them.
        let names = threads.share(vec![0, 1], |_| {
            gate.wait();
            std::thread::current().name().map(str::to_string)
        });
        assert!(names.iter().any(|n| n.as_deref() == Some("fuse-cpu-1")), "{names:?}");
    }

    #[test]
    fn impossible_counts_are_refused_with_the_range() {
        for count in [0, MAX_THREADS + 1] {
            let err = Threads::new(count).unwrap_err().to_string();
            assert!(err.contains("from 1 to 4096"), "{err}");
        }
    }
}
