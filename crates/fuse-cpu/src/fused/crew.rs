//! A crew of helper threads that wait for the next parallel section spinning, then asleep.
//!
//! A kernel that runs from the caches lasts 20–100 µs; waking a sleeping thread takes 10–40 µs
//! under a hypervisor, so a pool whose threads sleep between kernels (rayon's) gets its helpers
//! when the work is half done — a 1024² f32 `A·x` on two threads took 69 µs with a rayon pool,
//! 53 µs on one thread alone, and 27 µs with a helper that was spinning (the development
//! machine, `FUSE_NUM_THREADS=2`). OpenBLAS's threads spin for a long time after each call for
//! the same reason. A helper here spins for [`SPIN`] after its last job, yielding its core to
//! anything else runnable now and then, and then sleeps until the next job: a loop of kernels
//! finds its helpers awake, and an idle program costs nothing.
//!
//! The caller always works on its own job, so no job waits for a helper to wake, and a caller
//! that finds the crew busy (another thread's job, or a job inside a job) runs its job alone.
//!
//! # The protocol
//!
//! A job is a borrowed closure, so a helper must never touch it once its caller returns. The
//! crew's `gate` counts the helpers inside the current job, with a `CLOSED` bit: a helper
//! enters by incrementing it and leaves at once, without reading the job, if it finds the bit
//! set; the caller writes a job while the gate is closed, opens it once it is empty, and ends
//! the job by closing the gate and waiting until the count is back to zero. The job is read
//! only between an entry through the open gate and the matching exit, and written only while
//! the gate is closed — so never both at once.

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a helper keeps spinning after a job before it sleeps: a few wake-ups' worth, so a
/// loop of kernels with some work of the caller's between them finds it awake.
const SPIN: Duration = Duration::from_micros(500);
/// Spin iterations between looks at the clock and offers of the core to other threads.
const SPINS_PER_CHECK: u32 = 256;
/// The gate's bit that says the current job takes no more helpers.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// The work of one job, called by each thread that enters it with the thread's number: 0 for
/// the caller, `k` for the helper `fuse-cpu-k`.
type Job<'a> = &'a (dyn Fn(usize) + Sync);

/// Helper threads that join the parallel sections of whichever thread calls [`Crew::run`].
#[derive(Debug)]
pub(crate) struct Crew {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    /// Held by the caller whose job the crew is on.
    busy: Mutex<()>,
}

struct Shared {
    gate: AtomicUsize,
    /// The current job, valid while the gate is open; its lifetime erased (see the protocol).
    job: UnsafeCell<Option<Job<'static>>>,
    /// Bumped for every job (and to stop): what a waiting helper watches.
    epoch: AtomicU64,
    /// Helpers asleep on `wake`.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
    /// The first panic of a helper in the current job, for the caller to resume.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `job` is written only by the caller holding `busy` while the gate is closed, and
// read only by helpers that entered through the open gate (the module's protocol); the closure
// it points to is `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the pointer is only dereferenced under the protocol.
unsafe impl Send for Shared {}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl Crew {
    /// A crew of `helpers` threads named `fuse-cpu-1`, `fuse-cpu-2`, …
    pub(crate) fn new(helpers: usize) -> std::io::Result<Crew> {
        let shared = Arc::new(Shared {
            gate: AtomicUsize::new(CLOSED),
            job: UnsafeCell::new(None),
            epoch: AtomicU64::new(0),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            panic: Mutex::new(None),
        });
        let mut crew = Crew {
            shared,
            helpers: Vec::with_capacity(helpers),
            busy: Mutex::new(()),
        };
        for k in 1..=helpers {
            let shared = Arc::clone(&crew.shared);
            let helper = std::thread::Builder::new()
                .name(format!("fuse-cpu-{k}"))
                .spawn(move || shared.serve(k))?;
            crew.helpers.push(helper);
        }
        Ok(crew)
    }

    /// Runs `job` on the calling thread and on every helper that comes while it lasts, and
    /// returns once no helper is inside it. A helper may call it more than once, so it should
    /// take its work from something shared. A panic in `job`, on any thread, reaches the
    /// caller.
    pub(crate) fn run(&self, job: Job<'_>) {
        let _busy = match self.busy.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return job(0),
        };
        let shared = &*self.shared;
        // SAFETY: no helper reads the job until the gate opens below, and every path out of
        // this function closes and empties the gate first (the caller's panic is caught).
        unsafe {
            *shared.job.get() = Some(std::mem::transmute::<Job<'_>, Job<'static>>(job));
        }
        // A helper late for the last job may still be on its way out: wait until it is out.
        spin_until(|| shared.gate.compare_exchange_weak(CLOSED, 0, Release, Relaxed).is_ok());
        shared.epoch.fetch_add(1, SeqCst);
        if shared.sleeping.load(SeqCst) > 0 {
            let _lock = lock(&shared.lock);
            shared.wake.notify_all();
        }
        let mine = panic::catch_unwind(AssertUnwindSafe(|| job(0)));
        shared.gate.fetch_or(CLOSED, AcqRel);
        spin_until(|| shared.gate.load(Acquire) == CLOSED);
        let theirs = lock(&shared.panic).take();
        if let Some(payload) = mine.err().or(theirs) {
            panic::resume_unwind(payload);
        }
    }
}

impl Shared {
    /// The life of helper `me`: wait for a job, enter it, run it, leave; until the crew is
    /// dropped.
    fn serve(&self, me: usize) {
        let mut seen = 0;
        while let Some(epoch) = self.next_epoch(seen) {
            seen = epoch;
            if self.gate.fetch_add(1, Acquire) & CLOSED == 0 {
                // SAFETY: inside an open gate the job is set and outlives this call.
                let job = unsafe { (*self.job.get()).expect("an open gate has a job") };
                if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| job(me))) {
                    lock(&self.panic).get_or_insert(payload);
                }
            }
            self.gate.fetch_sub(1, Release);
        }
    }

    /// The epoch after `seen`: spun for during [`SPIN`], then slept for; `None` to stop.
    fn next_epoch(&self, seen: u64) -> Option<u64> {
        let start = Instant::now();
        loop {
            let mut tries = 0u32;
            spin_until(|| {
                tries = tries.wrapping_add(1);
                let news = self.stop.load(Acquire) || self.epoch.load(Acquire) != seen;
                news || (tries.is_multiple_of(SPINS_PER_CHECK) && start.elapsed() >= SPIN)
            });
            if self.stop.load(Acquire) {
                return None;
            }
            let epoch = self.epoch.load(Acquire);
            if epoch != seen {
                return Some(epoch);
            }
            let guard = lock(&self.lock);
            self.sleeping.fetch_add(1, SeqCst);
            // Checked after counting itself asleep: a caller that bumps the epoch later sees
            // the count and notifies under the lock, which this thread holds until it waits.
            if self.epoch.load(SeqCst) == seen && !self.stop.load(SeqCst) {
                drop(self.wake.wait(guard));
            }
            self.sleeping.fetch_sub(1, SeqCst);
        }
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        self.shared.epoch.fetch_add(1, SeqCst);
        {
            let _lock = lock(&self.shared.lock);
            self.shared.wake.notify_all();
        }
        for helper in self.helpers.drain(..) {
            let _ = helper.join();
        }
    }
}

/// Spins until `done`, offering the core to other threads every [`SPINS_PER_CHECK`] tries: with
/// more threads than cores, the thread waited for may be waiting for this very core.
fn spin_until(mut done: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !done() {
        spins = spins.wrapping_add(1);
        match spins % SPINS_PER_CHECK {
            0 => std::thread::yield_now(),
            _ => std::hint::spin_loop(),
        }
    }
}

/// The value behind `mutex`, whether or not a panic poisoned it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Runs a job that takes `items` from a counter on `crew`: the thread of each item.
    fn spread(crew: &Crew, items: usize, each: Duration) -> Vec<std::thread::ThreadId> {
        let next = AtomicUsize::new(0);
        let by = Mutex::new(vec![None; items]);
        crew.run(&|_| loop {
            let k = next.fetch_add(1, Relaxed);
            if k >= items {
                break;
            }
            std::thread::sleep(each);
            lock(&by)[k] = Some(std::thread::current().id());
        });
        by.into_inner()
            .unwrap()
            .into_iter()
            .map(|t| t.expect("every item done"))
            .collect()
    }

    #[test]
    fn every_item_is_done_once_by_the_caller_and_the_helpers_many_jobs_in_a_row() {
        let crew = Crew::new(3).unwrap();
        let mut threads = HashSet::new();
        for _ in 0..2000 {
            let next = AtomicUsize::new(0);
            let done: Vec<AtomicUsize> = (0..40).map(|_| AtomicUsize::new(0)).collect();
            crew.run(&|_| {
                while let Some(d) = done.get(next.fetch_add(1, Relaxed)) {
                    d.fetch_add(1, Relaxed);
                }
            });
            assert!(done.iter().all(|d| d.load(Relaxed) == 1));
        }
        // Slow items, so that the helpers (awake or not) come before the work runs out.
        threads.extend(spread(&crew, 16, Duration::from_millis(5)));
        assert!(threads.len() > 1, "helpers took part: {threads:?}");
        assert!(threads.contains(&std::thread::current().id()), "the caller worked too");
    }

    #[test]
    fn helpers_asleep_are_woken_for_the_next_job() {
        let crew = Crew::new(1).unwrap();
        let start = Instant::now();
        while crew.shared.sleeping.load(SeqCst) == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the helper sleeps after SPIN"
            );
            std::thread::sleep(SPIN);
        }
        let threads: HashSet<_> = spread(&crew, 8, Duration::from_millis(10)).into_iter().collect();
        assert_eq!(threads.len(), 2, "the sleeping helper woke and took part");
    }

    #[test]
    fn a_busy_crew_leaves_a_second_caller_to_run_alone() {
        let crew = Crew::new(2).unwrap();
        let inner = Mutex::new(Vec::new());
        crew.run(&|_| {
            // A job inside a job (or another thread's while this one runs) cannot wait for
            // the crew: it runs on its own thread.
            let me = std::thread::current().id();
            let ran = spread(&crew, 3, Duration::ZERO);
            lock(&inner).push(ran.iter().all(|t| *t == me));
        });
        let inner = inner.into_inner().unwrap();
        assert!(!inner.is_empty() && inner.iter().all(|&alone| alone), "{inner:?}");
    }

    #[test]
    fn a_panic_on_a_helper_reaches_the_caller_and_the_crew_goes_on() {
        let crew = Crew::new(2).unwrap();
        let gate = std::sync::Barrier::new(2);
        let entered = AtomicUsize::new(0);
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            crew.run(&|me| {
                // The first two threads in meet; the helper among them panics.
                if entered.fetch_add(1, SeqCst) < 2 {
                    gate.wait();
                    if me != 0 {
                        panic!("a helper's bug");
                    }
                }
            })
        }));
        let payload = result.expect_err("the helper's panic is the caller's");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"a helper's bug"));
        assert_eq!(spread(&crew, 10, Duration::ZERO).len(), 10, "the crew still works");
    }

    #[test]
    fn dropping_the_crew_stops_its_helpers_awake_or_asleep() {
        for pause in [Duration::ZERO, SPIN * 4] {
            let crew = Crew::new(3).unwrap();
            spread(&crew, 6, Duration::ZERO);
            std::thread::sleep(pause);
            drop(crew); // joins every helper: hangs here if one missed the stop
        }
    }
}
