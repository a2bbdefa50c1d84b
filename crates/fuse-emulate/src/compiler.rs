//! Building an emulated module with the host C++ compiler. Modules are cached sealed in fuse's
//! per-user cache (`emulate/`; see `fuse_core::cache` for what makes it safe to load from),
//! named by the SHA-256 of everything that determines them, and handed back as bytes that
//! matched their seal.
//!
//! A build runs in a scratch folder of that cache folder, which the compiler gets as its working
//! folder from the open handle, never by path. The compiler runs in its own process group, so
//! that [`stop_builds`] can end it with everything it started, and its folder with it.

use crate::error::EmulateError;
use crate::headers::CUDA_EMU_HEADER;
use fuse_core::cache::{entry_name, CacheDir, Scratch};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

/// Flags besides `-include`, defines, input and output. Hidden visibility keeps the exports
/// to the launch ABI; CUDA code type-puns freely, hence no strict aliasing.
const FLAGS: [&str; 6] = [
    "-O1",
    "-std=c++20",
    "-shared",
    "-fPIC",
    "-fvisibility=hidden",
    "-fno-strict-aliasing",
];

/// The files of a build, in its scratch folder.
const HEADER_FILE: &str = "fuse_emu.h";
const SOURCE_FILE: &str = "kernel.cu";
const OUTPUT_FILE: &str = "kernel.so";

/// The shared library of `source`: from `cache` (fuse's `emulate` cache folder), or compiled
/// and stored there.
pub(crate) fn build(cache: &CacheDir, source: &str, defines: &[(String, String)]) -> Result<Vec<u8>, EmulateError> {
    let define_flags = defines
        .iter()
        .map(|(name, value)| define_flag(name, value))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tried = Vec::new();
    for compiler in compilers() {
        let command = [
            std::slice::from_ref(&compiler.program),
            &compiler.args[..],
            &FLAGS.map(String::from),
            &define_flags[..],
        ]
        .concat();
        let key = entry_name(&[
            CUDA_EMU_HEADER.as_bytes(),
            command.join("\0").as_bytes(),
            source.as_bytes(),
        ]);
        let name = format!("{key}.so");
        if let Some(module) = cache.load(&name)? {
            return Ok(module);
        }
        let job = Job {
            compiler: &compiler,
            defines: &define_flags,
            source,
        };
        match job.run(cache) {
            Err(JobError::NotStarted) => tried.push(compiler.program),
            Err(JobError::Failed(err)) => return Err(err),
            Ok(module) => {
                cache.store(&name, &module)?;
                return Ok(module);
            }
        }
    }
    Err(EmulateError::CompilerNotFound { tried })
}

/// Ends every compiler run in progress, with the processes it started, and removes its
/// scratch folder: for a process about to exit on a signal, which runs no destructors. The
/// threads that waited for those runs wait for the exit.
pub(crate) fn stop_builds() {
    for (group, scratch) in running().drain(..) {
        // SAFETY: kill has no memory preconditions; the group is the compiler's own.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        drop(scratch);
    }
}

/// The process groups of the compilers running, each with its scratch folder.
fn running() -> std::sync::MutexGuard<'static, Vec<(i32, Scratch)>> {
    static RUNNING: Mutex<Vec<(i32, Scratch)>> = Mutex::new(Vec::new());
    RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A compiler program with leading arguments (as in `CXX="ccache g++"`).
struct Compiler {
    program: String,
    args: Vec<String>,
}

/// `$CXX` when set, else `c++`, then `g++`.
fn compilers() -> Vec<Compiler> {
    let cxx = std::env::var("CXX").unwrap_or_default();
    let mut words = cxx.split_whitespace().map(str::to_owned);
    match words.next() {
        Some(program) => vec![Compiler {
            program,
            args: words.collect(),
        }],
        None => ["c++", "g++"]
            .map(|program| Compiler {
                program: program.to_owned(),
                args: Vec::new(),
            })
            .into(),
    }
}

/// `-DNAME=VALUE`, for identifier names only.
fn define_flag(name: &str, value: &str) -> Result<String, EmulateError> {
    let mut chars = name.chars();
    let identifier = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier || value.contains('\0') {
        return Err(EmulateError::InvalidOption(format!(
            "define `{name}={}`: name must be an identifier and neither may contain NUL",
            value.escape_debug()
        )));
    }
    Ok(format!("-D{name}={value}"))
}

/// One compiler run.
struct Job<'a> {
    compiler: &'a Compiler,
    defines: &'a [String],
    source: &'a str,
}

enum JobError {
    /// The compiler program could not be started (try the next one).
    NotStarted,
    Failed(EmulateError),
}

impl Job<'_> {
    /// Compiles in a scratch folder of `cache` and returns the library's bytes.
    fn run(&self, cache: &CacheDir) -> Result<Vec<u8>, JobError> {
        let failed = |context: &str| {
            let context = format!("{context} in {}", cache.path().display());
            move |e| JobError::Failed(io(context)(e))
        };
        let scratch = cache.scratch().map_err(|e| JobError::Failed(e.into()))?;
        let dir = scratch.dir();
        dir.write(HEADER_FILE, CUDA_EMU_HEADER)
            .map_err(failed("writing the header"))?;
        dir.write(SOURCE_FILE, self.source)
            .map_err(failed("writing the source"))?;
        let mut command = self.command();
        let folder = dir.as_raw_fd();
        // SAFETY: fchdir is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(move || match libc::fchdir(folder) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        // Registered as it starts, so that a signal's stop_builds finds it from then on.
        let (child, group) = {
            let mut running = running();
            let child = match command.spawn() {
                Err(err) if err.kind() == ErrorKind::NotFound => return Err(JobError::NotStarted),
                Err(err) => return Err(JobError::Failed(io(format!("running {command:?}"))(err))),
                Ok(child) => child,
            };
            let group = child.id() as i32;
            running.push((group, scratch));
            (child, group)
        };
        let result = child.wait_with_output();
        let scratch = {
            let mut running = running();
            let at = running.iter().position(|(g, _)| *g == group);
            match at {
                Some(at) => running.swap_remove(at).1,
                // Gone only when stop_builds ended the run: the process is exiting, with the
                // status its signal handler chose, which an error here must not pre-empt.
                None => loop {
                    std::thread::park();
                },
            }
        };
        let result = result.map_err(|e| JobError::Failed(io(format!("running {command:?}"))(e)))?;
        if !result.status.success() {
            let mut message = String::from_utf8_lossy(&result.stderr).into_owned();
            message.push_str(&String::from_utf8_lossy(&result.stdout));
            return Err(JobError::Failed(EmulateError::Compile {
                command: format!("{command:?}"),
                message: message.trim_end().to_owned(),
            }));
        }
        scratch
            .dir()
            .read(OUTPUT_FILE)
            .map_err(failed("reading the compiled module"))
    }

    /// The compiler's command line, with file names relative to the scratch folder, in a
    /// process group of its own.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.compiler.program);
        command
            .args(&self.compiler.args)
            .args(FLAGS)
            .args(["-include", HEADER_FILE])
            .args(self.defines)
            .args(["-x", "c++", SOURCE_FILE, "-o", OUTPUT_FILE])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        command
    }
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> EmulateError {
    move |source| EmulateError::Io { context, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defines_must_be_identifiers() {
        assert_eq!(define_flag("TILE", "32").unwrap(), "-DTILE=32");
        for (name, value) in [("-o", "x"), ("1A", "1"), ("", "1"), ("A", "\0")] {
            assert!(define_flag(name, value).is_err(), "{name:?}");
        }
    }
}
