//! Building an emulated module with the host C++ compiler, cached under fuse's per-user cache
//! root (`emulate/`, a folder only this user can write: its modules are loaded and run) and
//! named by the SHA-256 of everything that determines them.

use crate::error::EmulateError;
use crate::headers::CUDA_EMU_HEADER;
use fuse_core::cache::{cache_root, entry_name, private_dir};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Compiles `source` (unless already cached) and returns the path of the shared library.
pub(crate) fn build(source: &str, defines: &[(String, String)]) -> Result<PathBuf, EmulateError> {
    let define_flags = defines
        .iter()
        .map(|(name, value)| define_flag(name, value))
        .collect::<Result<Vec<_>, _>>()?;
    let dir = cache_dir()?;
    let header = write_once(&dir, "h", CUDA_EMU_HEADER)?;
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
        let library = dir.join(format!("{key}.so"));
        if library.exists() {
            return Ok(library);
        }
        let input = write_once(&dir, "cu", source)?;
        let job = Job {
            compiler: &compiler,
            header: &header,
            defines: &define_flags,
            input: &input,
        };
        match job.run(&dir, &library) {
            Err(JobError::NotStarted) => tried.push(compiler.program),
            Err(JobError::Failed(err)) => return Err(err),
            Ok(()) => return Ok(library),
        }
    }
    Err(EmulateError::CompilerNotFound { tried })
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

fn cache_dir() -> Result<PathBuf, EmulateError> {
    Ok(private_dir(&cache_root().join("emulate"))?)
}

/// Writes `text` to `<hash>.<ext>` in `dir` unless present; atomic, so that concurrent
/// processes never see half a file.
fn write_once(dir: &Path, ext: &str, text: &str) -> Result<PathBuf, EmulateError> {
    let path = dir.join(format!("{}.{ext}", entry_name(&[text.as_bytes()])));
    if path.exists() {
        return Ok(path);
    }
    let context = || format!("writing {}", path.display());
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io(context()))?;
    file.write_all(text.as_bytes()).map_err(io(context()))?;
    file.persist(&path).map_err(|e| io(context())(e.error))?;
    Ok(path)
}

/// One compiler run.
struct Job<'a> {
    compiler: &'a Compiler,
    header: &'a Path,
    defines: &'a [String],
    input: &'a Path,
}

enum JobError {
    /// The compiler program could not be started (try the next one).
    NotStarted,
    Failed(EmulateError),
}

impl Job<'_> {
    /// Compiles into a temporary file, then renames it to `library`.
    fn run(&self, dir: &Path, library: &Path) -> Result<(), JobError> {
        let output = tempfile::Builder::new()
            .prefix(".build-")
            .suffix(".so")
            .tempfile_in(dir)
            .map_err(|e| JobError::Failed(io(format!("creating a file in {}", dir.display()))(e)))?
            .into_temp_path();
        let mut command = self.command(&output);
        let result = match command.output() {
            Err(err) if err.kind() == ErrorKind::NotFound => return Err(JobError::NotStarted),
            Err(err) => return Err(JobError::Failed(io(format!("running {command:?}"))(err))),
            Ok(result) => result,
        };
        if !result.status.success() {
            let mut message = String::from_utf8_lossy(&result.stderr).into_owned();
            message.push_str(&String::from_utf8_lossy(&result.stdout));
            return Err(JobError::Failed(EmulateError::Compile {
                command: format!("{command:?}"),
                message: message.trim_end().to_owned(),
            }));
        }
        output
            .persist(library)
            .map_err(|e| JobError::Failed(io(format!("writing {}", library.display()))(e.error)))
    }

    fn command(&self, output: &Path) -> Command {
        let mut command = Command::new(&self.compiler.program);
        command
            .args(&self.compiler.args)
            .args(FLAGS)
            .arg("-include")
            .arg(self.header)
            .args(self.defines)
            .args(["-x", "c++"])
            .arg(self.input)
            .arg("-o")
            .arg(output);
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

    #[test]
    fn write_once_is_content_addressed() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_once(dir.path(), "cu", "int a;").unwrap();
        let again = write_once(dir.path(), "cu", "int a;").unwrap();
        let b = write_once(dir.path(), "cu", "int b;").unwrap();
        assert_eq!(a, again);
        assert_ne!(a, b);
        assert_eq!(std::fs::read_to_string(b).unwrap(), "int b;");
    }
}
