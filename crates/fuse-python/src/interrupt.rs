//! Long work off the interpreter's thread: the GIL is released and Ctrl-C answered while it
//! runs (a compile of the emulated or CUDA backend takes seconds).

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use pyo3::prelude::*;

/// How often the waiting thread looks for a signal (Ctrl-C) while the work goes on.
const POLL: Duration = Duration::from_millis(20);

/// Runs `work` on a thread of its own while this one, without the GIL, waits for it and checks
/// for signals every [`POLL`]. On Ctrl-C the signal's exception (`KeyboardInterrupt`) is
/// returned at once; the work, which owns all it touches, finishes on its own and is dropped.
pub(crate) fn interruptible<R, W>(py: Python<'_>, work: W) -> PyResult<R>
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
    loop {
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
