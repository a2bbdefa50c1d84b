//! Errors on the terminal: a one-line message and an exit status — 2 for bad input (the
//! message names the file, line and column), 3 when the CUDA backend was asked for and there is
//! no usable GPU, 1 for a failure of fuse or the GPU.

use fuse::stages::fuse_core::wording::printable;

/// Exit status for bad input (scripts, library, sizes, files named on the command line).
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit status when the CUDA backend was asked for and no usable GPU (or driver) is here.
pub const EXIT_NO_DEVICE: u8 = 3;

/// An error for the terminal, with its exit status.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

/// A failure in what the user gave: a script, a library, sizes, a file named on the command line.
pub fn bad_input(message: impl ToString) -> Failure {
    Failure {
        code: EXIT_BAD_INPUT,
        message: message.to_string(),
    }
}

/// A failure that is fuse's fault, not the input's.
pub fn internal(message: impl ToString) -> Failure {
    Failure {
        code: 1,
        message: message.to_string(),
    }
}

/// Exit status when standard output was closed early (`fuse explain | head`): 128 + SIGPIPE, as a
/// shell reports a tool the signal ended.
pub const EXIT_CLOSED_OUTPUT: u8 = 141;

/// A failed write to standard output. A closed pipe ends the run quietly, as it ends other Unix
/// tools; any other error is reported.
pub fn stdout(e: std::io::Error) -> Failure {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe => Failure {
            code: EXIT_CLOSED_OUTPUT,
            message: String::new(),
        },
        _ => internal(format!("cannot write to standard output: {e}")),
    }
}

/// What a command that also runs on the CPU offers when no GPU is usable.
pub const USE_THE_CPU: &str = "use --backend cpu";

/// Prints `f` on standard error as `error: …`, offering `alternative` where no GPU is usable;
/// nothing for an empty message (already said, or standard output closed).
pub fn print(f: &Failure, alternative: Option<&str>) {
    if f.message.is_empty() || f.code == EXIT_CLOSED_OUTPUT {
        return;
    }
    let advice = match alternative {
        Some(a) if f.code == EXIT_NO_DEVICE => format!(", or {a}"),
        _ => String::new(),
    };
    // Bytes of a file or a name quoted in the message are shown, never obeyed by the terminal;
    // the lines of a compiler's log stay lines.
    let message: Vec<String> = f.message.lines().map(printable).collect();
    eprintln!("error: {}{advice}", message.join("\n"));
}

/// An error of fuse (or of a backend below it) for the terminal.
pub fn failure(err: impl Into<fuse::Error>) -> Failure {
    let err = err.into();
    let code = match &err {
        e if e.is_unavailable() => EXIT_NO_DEVICE,
        e if e.is_bad_input() => EXIT_BAD_INPUT,
        _ => 1,
    };
    Failure {
        code,
        message: err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse::stages::fuse_codegen::dynlib::ProbeError;
    use fuse::stages::fuse_cuda::CudaError;

    #[test]
    fn no_gpu_is_its_own_exit_status_and_stale_tables_are_bad_input() {
        let err = CudaError::NoDriver(ProbeError::NotFound {
            searched: vec!["x".into()],
        });
        let f = failure(err);
        assert_eq!(f.code, EXIT_NO_DEVICE);
        assert!(!f.message.contains('\n'), "{}", f.message);
        let stale = CudaError::StaleTimings {
            file: "t.yaml".into(),
            table: "a".into(),
            library: "b".into(),
        };
        assert_eq!(failure(stale).code, EXIT_BAD_INPUT);
    }
}
