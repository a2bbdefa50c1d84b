//! Long work off the interpreter's thread: the GIL is released and Ctrl-C answered while it
//! runs (a compile of the emulated or CUDA backend takes seconds), and work that runs past a
//! second says what it is on the `fuseblas` logger, so that a first GPU compile is not a silent
//! freeze. The work runs on worker threads kept from call to call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// How long the interpreter's exit waits for abandoned work to leave the emulator's modules.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// How often the waiting thread looks for a signal (Ctrl-C) while the work goes on.
const POLL: Duration = Duration::from_millis(20);

/// Milliseconds of work before its note is logged (`_core._set_note_after_ms` changes it, for
/// the tests).
static NOTE_AFTER_MS: AtomicU64 = AtomicU64::new(1000);

/// Sets how long work runs before its note is logged (a test hook).
#[pyfunction]
pub(crate) fn _set_note_after_ms(ms: u64) {
    NOTE_AFTER_MS.store(ms, Ordering::Relaxed);
}

/// Work for a worker: it returns how to hand its result over, which the worker does once it is
/// idle again, so that the caller's next call finds it idle.
type Job = Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send>;

/// The workers waiting for a job. Threads are kept between calls: one spawned per call made a
/// small flush slower than the work (BiCG from Python at 2048² f32: 0.84 ms an iteration
/// against 0.31 on a kept thread, its kernels alone 0.49 against 0.22).
static IDLE: Mutex<Idle> = Mutex::new(Idle {
    process: 0,
    workers: Vec::new(),
});

/// The idle workers of one process: a child forked from it (`multiprocessing`) has none of
/// its parent's threads, so it must not hand them work.
struct Idle {
    process: u32,
    workers: Vec<mpsc::Sender<Job>>,
}

/// This process's idle workers.
fn idle() -> MutexGuard<'static, Idle> {
    // A list of senders is whole whatever panicked while it was held.
    let mut idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner);
    if idle.process != std::process::id() {
        idle.process = std::process::id();
        // Forgotten, not dropped: a sender's drop may touch its channel's lock, which a
        // thread of the parent may have held when it forked.
        std::mem::forget(std::mem::take(&mut idle.workers));
    }
    idle
}

/// Runs `job` on an idle worker, or on a new one where none is idle (another Python thread's
/// work is running, or work a Ctrl-C walked away from).
fn on_worker(mut job: Job) -> std::io::Result<()> {
    while let Some(worker) = idle().workers.pop() {
        match worker.send(job) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(back)) => job = back,
        }
    }
    let (sender, jobs) = mpsc::channel::<Job>();
    let me = sender.clone();
    thread::Builder::new().name("fuseblas-work".into()).spawn(move || {
        for job in jobs {
            let hand_over = job();
            idle().workers.push(me.clone());
            hand_over();
        }
    })?;
    // The worker holds a sender of its own, so it waits for this job.
    sender
        .send(job)
        .map_err(|_| std::io::Error::other("a worker thread ended before its first job"))
}

/// Logs `note` at INFO on the `fuseblas` logger.
fn log(py: Python<'_>, note: &str) -> PyResult<()> {
    let logger = py.import("logging")?.call_method1("getLogger", ("fuseblas",))?;
    logger.call_method1("info", (note,))?;
    Ok(())
}

/// Runs `work` on a worker thread while this one, without the GIL, waits for it and checks
/// for signals every [`POLL`]. On Ctrl-C the signal's exception (`KeyboardInterrupt`) is
/// returned at once; the work, which owns all it touches, finishes on its own and is dropped.
/// Once the work has run a second, `note` (what it is) is logged, once.
pub(crate) fn interruptible<R, W>(py: Python<'_>, note: &str, work: W) -> PyResult<R>
where
    R: Send + 'static,
    W: FnOnce() -> R + Send + 'static,
{
    let (done, mut result) = mpsc::sync_channel(1);
    on_worker(Box::new(move || {
        let value = work();
        // The receiver is gone once an interrupt returned: nobody wants the result.
        Box::new(move || drop(done.send(value)))
    }))
    .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
    let (started, mut noted) = (Instant::now(), false);
    loop {
        if !noted && started.elapsed() >= Duration::from_millis(NOTE_AFTER_MS.load(Ordering::Relaxed)) {
            noted = true;
            log(py, note)?;
        }
        // The receiver travels with the wait: it may not be shared with the detached closure.
        let (receiver, outcome) = py.detach(move || {
            let outcome = result.recv_timeout(POLL);
            (result, outcome)
        });
        result = receiver;
        match outcome {
            Ok(value) => return Ok(value),
            Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "fuse's worker thread panicked",
                ))
            }
        }
    }
}

/// Registered with `atexit` when the module loads. Work a Ctrl-C walked away from may still be
/// inside an emulated module when the interpreter exits, and exit unloads the module under it
/// (a segmentation fault): stop the emulator first, and wait for it within a bound.
#[pyfunction]
pub(crate) fn _stop_work(py: Python<'_>) -> PyResult<()> {
    if py.detach(|| fuse::stages::fuse_emulate::stop(STOP_BOUND)) {
        return Ok(());
    }
    log(
        py,
        &format!("fuse's emulated work did not stop within {STOP_BOUND:?}; exiting beside it"),
    )
}
