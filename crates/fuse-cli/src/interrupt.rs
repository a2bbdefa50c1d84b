//! Ctrl-C (SIGINT), SIGTERM and SIGHUP: fuse exits with status 130, but first lets the command
//! in progress keep its promises — a step that must finish or be undone (writing outputs all or
//! nothing) is told to stop and undoes itself; a command that has results so far (`fuse bench`)
//! reports them; a host compiler building an emulated module is ended, and its files removed;
//! an emulated launch stops after its current blocks.

use std::sync::{Mutex, PoisonError};

/// Exit status after Ctrl-C: 128 + SIGINT, as shells report a process the signal ended.
pub const EXIT_INTERRUPTED: u8 = 130;

/// What a Ctrl-C does now.
enum OnInterrupt {
    /// Exit at once: nothing is half done.
    Exit,
    /// A step is under way that undoes itself when asked: only record the request.
    Defer { requested: bool },
    /// Print what was finished, then exit.
    Report(Box<dyn Fn() + Send>),
}

/// Locked by the handler for the whole of its work, so a command cannot change what a Ctrl-C
/// does while one is being handled (e.g. start a step the handler's exit would cut in half).
static STATE: Mutex<OnInterrupt> = Mutex::new(OnInterrupt::Exit);

fn state() -> std::sync::MutexGuard<'static, OnInterrupt> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Handles Ctrl-C from now on. Where a handler cannot be installed, Ctrl-C keeps its default
/// effect, which ends the process just the same.
pub fn install() {
    let _ = ctrlc::set_handler(|| {
        let mut state = state();
        match &mut *state {
            OnInterrupt::Defer { requested } => *requested = true,
            OnInterrupt::Report(report) => {
                report();
                exit()
            }
            OnInterrupt::Exit => exit(),
        }
    });
}

/// Ends what runs beside fuse (a host compiler; an emulated launch, which must leave its module
/// before exit unloads it), then fuse.
fn exit() -> ! {
    fuse::stages::fuse_emulate::stop(std::time::Duration::from_secs(2));
    std::process::exit(EXIT_INTERRUPTED.into())
}

/// Runs `step` with Ctrl-C held back: `step` is handed a probe that says whether one came, so
/// that it can undo what it did and stop. Returns its result and whether Ctrl-C was pressed.
pub fn deferred<T>(step: impl FnOnce(&dyn Fn() -> bool) -> T) -> (T, bool) {
    *state() = OnInterrupt::Defer { requested: false };
    let requested = || matches!(*state(), OnInterrupt::Defer { requested: true });
    let result = step(&requested);
    let was = std::mem::replace(&mut *state(), OnInterrupt::Exit);
    (result, matches!(was, OnInterrupt::Defer { requested: true }))
}

/// Until the guard is dropped, Ctrl-C runs `report` before exiting.
pub fn report_on_interrupt(report: impl Fn() + Send + 'static) -> ReportGuard {
    *state() = OnInterrupt::Report(Box::new(report));
    ReportGuard
}

/// Restores the plain exit on Ctrl-C when dropped.
pub struct ReportGuard;

impl Drop for ReportGuard {
    fn drop(&mut self) {
        *state() = OnInterrupt::Exit;
    }
}
