//! Long work off the interpreter's thread: the GIL is released and Ctrl-C answered while it
//! runs (a compile of the emulated or CUDA backend takes seconds), and work that runs past a
//! second says what it is on the `fuseblas` logger, so that a first GPU compile is not a silent
//! freeze.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

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

/// Logs `note` at INFO on the `fuseblas` logger.
fn log(py: Python<'_>, note: &str) -> PyResult<()> {
    let logger = py.import("logging")?.call_method1("getLogger", ("fuseblas",))?;
    logger.call_method1("info", (note,))?;
    Ok(())
}

/// Runs `work` on a thread of its own while this one, without the GIL, waits for it and checks
/// for signals every [`POLL`]. On Ctrl-C the signal's exception (`KeyboardInterrupt`) is
/// returned at once; the work, which owns all it touches, finishes on its own and is dropped.
/// Once the work has run a second, `note` (what it is) is logged, once.
pub(crate) fn interruptible<R, W>(py: Python<'_>, note: &str, work: W) -> PyResult<R>
where
    R: Send + 'static,
    W: FnOnce() -> R + Send + 'static,
{
    let (done, mut result) = mpsc::sync_channel(1);
    thread::Builder::new()
        .name("fuseblas-work".into())
        .spawn(move || {
            // The receiver is gone once an interrupt returned: nobody wants the result.
            let _ = done.send(work());
        })
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
