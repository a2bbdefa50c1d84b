//! Stopping the emulator before the process exits.
//!
//! A process may exit while another of its threads is still running an emulated kernel: Python
//! ending after a Ctrl-C walked away from a call, or the CLI exiting on a signal. Exit runs the
//! destructors of every loaded module copy, and a thread still inside one then crashes the
//! process. [`stop`] ends each launch after the blocks it is running, ends the host compilers,
//! and waits, within a bound, until no thread is inside a module. The threads whose launches it
//! ended, and any that start one after, wait for the exit: their results are incomplete, and
//! an error of theirs must not pre-empt the exit status the process chose.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The launches under way and whether the process is stopping.
struct Running {
    /// Each launch's block counter (its address) and the grid's block count: storing the count
    /// in the counter makes every worker of the launch stop after its current block.
    launches: Vec<(usize, u64)>,
    stopping: bool,
}

static RUNNING: Mutex<Running> = Mutex::new(Running {
    launches: Vec::new(),
    stopping: false,
});

/// Signalled whenever a launch ends.
static ENDED: Condvar = Condvar::new();

fn running() -> MutexGuard<'static, Running> {
    // The list is whole whatever panicked while it was held.
    RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A launch registered as under way: `blocks` blocks handed out by `counter`.
pub(crate) struct Underway<'a> {
    counter: &'a AtomicU64,
}

impl<'a> Underway<'a> {
    /// Registers a launch; once the process is stopping, waits for the exit instead.
    pub(crate) fn enter(counter: &'a AtomicU64, blocks: u64) -> Underway<'a> {
        let mut running = running();
        if running.stopping {
            drop(running);
            wait_for_exit()
        }
        running.launches.push((counter.as_ptr() as usize, blocks));
        Underway { counter }
    }

    /// Ends the registration; where [`stop`] cut the launch short (or came as it ended), waits
    /// for the exit instead of returning.
    pub(crate) fn leave(self) {
        drop(self);
        if running().stopping {
            wait_for_exit()
        }
    }
}

impl Drop for Underway<'_> {
    /// Unregisters the launch: its counter is about to go away.
    fn drop(&mut self) {
        let address = self.counter.as_ptr() as usize;
        running().launches.retain(|&(a, _)| a != address);
        ENDED.notify_all();
    }
}

fn wait_for_exit() -> ! {
    loop {
        std::thread::park();
    }
}

/// Stops the emulator for good, for a process about to exit: ends the host compilers (removing
/// their folders), ends every launch after its current blocks, and waits up to `bound` until
/// none runs. Returns whether none does.
pub fn stop(bound: Duration) -> bool {
    crate::compiler::stop_builds();
    let mut running = running();
    running.stopping = true;
    for &(counter, blocks) in &running.launches {
        // SAFETY: a launch's counter outlives its registration, which is removed under this lock.
        let counter = unsafe { &*(counter as *const AtomicU64) };
        counter.fetch_max(blocks, Ordering::Relaxed);
    }
    let deadline = Instant::now() + bound;
    while !running.launches.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        running = ENDED
            .wait_timeout(running, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    true
}
