//! Reading inputs from and writing outputs to `.npy` files (numpy's format), one per name.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ndarray::{ArrayD, ArrayViewD, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use fuse::stages::fuse_core::wording::{closest, list_or_none};
use fuse::stages::fuse_core::{Bindings, HostArray, HostData, Precision, Program};

/// Reads `DIR/<input>.npy` for every input of `program` that has such a file; returns the
/// arrays and the paths read.
pub fn read_inputs(program: &Program, dir: &Path) -> Result<(Bindings, Vec<PathBuf>), String> {
    if !dir.is_dir() {
        return Err(format!("--inputs {}: no such folder", dir.display()));
    }
    let mut arrays = Bindings::new();
    let mut read = Vec::new();
    for &id in &program.inputs {
        let name = &program.values[id].variable;
        let path = dir.join(format!("{name}.npy"));
        if !path.exists() {
            continue;
        }
        arrays.insert(name.clone(), read_array(&path, program.precision)?);
        read.push(path);
    }
    Ok((arrays, read))
}

/// A warning for each `.npy` file in `dir` that is no input of `program` (a misspelt name, or
/// a file of another script), with a did-you-mean for the input it is closest to.
pub fn unused_files(program: &Program, dir: &Path) -> Vec<String> {
    let inputs: Vec<String> = (program.inputs.iter())
        .map(|&v| format!("{}.npy", program.values[v].variable))
        .collect();
    npy_files(dir)
        .into_iter()
        .filter(|file| !inputs.contains(file))
        .map(|file| {
            let near = closest(&file, inputs.iter().cloned())
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            format!(
                "--inputs {}: `{file}` is no input of {}{near}; not read",
                dir.display(),
                program.file
            )
        })
        .collect()
}

/// The names of the `.npy` files in `dir`, sorted.
fn npy_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".npy"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Why a run with `--inputs dir` cannot start: the files of `missing` are not there. Names the
/// `.npy` files that are, with a did-you-mean where one is close to a missing name.
pub fn missing_inputs(dir: &Path, missing: &[&str]) -> String {
    let found = npy_files(dir);
    let files: Vec<String> = missing.iter().map(|n| format!("{n}.npy")).collect();
    let mut message = format!(
        "--inputs {}: no {} for input{} {}",
        dir.display(),
        list_or_none(&files.iter().map(String::as_str).collect::<Vec<_>>()),
        if missing.len() == 1 { "" } else { "s" },
        list_or_none(missing),
    );
    let there: Vec<&str> = found.iter().map(String::as_str).collect();
    message += &format!("; the folder has {}", list_or_none(&there));
    for (name, file) in missing.iter().zip(&files) {
        if let Some(near) = closest(file, found.iter().cloned()) {
            message += &format!("; did you mean `{near}` for `{name}`?");
        }
    }
    message + ". Give every input as DIR/<name>.npy, or draw some at random with --random NAME or --random-rest"
}

fn read_array(path: &Path, precision: Precision) -> Result<HostArray, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let dtype = match precision {
        Precision::F32 => "float32",
        Precision::F64 => "float64",
    };
    let bad = |e: ndarray_npy::ReadNpyError| {
        format!(
            "{}: expected a {dtype} .npy array (the script is {precision}): {e}",
            path.display()
        )
    };
    Ok(match precision {
        Precision::F32 => {
            let a = ArrayD::<f32>::read_npy(file).map_err(bad)?;
            HostArray::f32(a.shape().to_vec(), a.iter().copied().collect())
        }
        Precision::F64 => {
            let a = ArrayD::<f64>::read_npy(file).map_err(bad)?;
            HostArray::f64(a.shape().to_vec(), a.iter().copied().collect())
        }
    })
}

/// How [`write_outputs`] writes.
pub struct WriteOptions<'a> {
    /// Of every file written.
    pub precision: Precision,
    /// Files never overwritten (the inputs just read).
    pub protected: &'a [PathBuf],
    /// Whether a file in the way that is not a `.npy` array may be replaced.
    pub force: bool,
    /// Turns true when the writing must stop and be undone (Ctrl-C).
    pub stop: &'a dyn Fn() -> bool,
}

/// Writes each array as `DIR/<name>.npy`, creating `DIR`: all or nothing. Every array is
/// written to a temporary file in `DIR` first, and only when all are written are they renamed
/// into place, so a failure — or `stop()` turning true while they are written — leaves the
/// folder as it was (and removes it if this call created it). A `protected` file is never
/// overwritten, nor — unless `force` — a file in the way that is not a `.npy` array.
pub fn write_outputs(outputs: &Bindings, dir: &Path, options: &WriteOptions) -> Result<Vec<PathBuf>, String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!("--outputs {}: is a file, not a folder", dir.display()));
    }
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| format!("--outputs {}: {e}", dir.display()))?;
    let written = write_all_or_none(outputs, dir, options);
    if written.is_err() && created {
        // Empty again: every temporary file was removed when dropped.
        let _ = std::fs::remove_dir(dir);
    }
    written
}

fn write_all_or_none(outputs: &Bindings, dir: &Path, options: &WriteOptions) -> Result<Vec<PathBuf>, String> {
    let WriteOptions {
        precision,
        protected,
        force,
        stop,
    } = *options;
    let targets: Vec<(PathBuf, &HostArray)> = outputs
        .iter()
        .map(|(name, a)| (dir.join(format!("{name}.npy")), a))
        .collect();
    for (path, _) in &targets {
        check_target(path, protected, force)?;
    }
    let mut staged = Vec::new();
    for (path, array) in &targets {
        staged.push(stage_array(dir, path, array, precision, stop)?);
    }
    // The last moment to stop: renaming is quick and not interrupted, so all land or none.
    if stop() {
        return Err(INTERRUPTED.to_string());
    }
    let mut written = Vec::new();
    for ((path, _), file) in targets.into_iter().zip(staged) {
        file.persist(&path)
            .map_err(|e| format!("cannot write {}: {}", path.display(), e.error))?;
        written.push(path);
    }
    Ok(written)
}

/// Why [`write_outputs`] stopped when asked to.
const INTERRUPTED: &str = "interrupted";

/// Whether an output may replace what is at `path`.
fn check_target(path: &Path, protected: &[PathBuf], force: bool) -> Result<(), String> {
    if protected.iter().any(|p| same_file(p, path)) {
        return Err(format!(
            "refusing to overwrite input {}: write outputs to another folder than --inputs",
            path.display()
        ));
    }
    if path.is_dir() {
        return Err(format!("cannot write {}: a folder is in the way", path.display()));
    }
    let is_npy = |p: &Path| {
        let mut magic = [0u8; 6];
        std::fs::File::open(p)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
            && &magic == b"\x93NUMPY"
    };
    if path.exists() && !force && !is_npy(path) {
        return Err(format!(
            "refusing to overwrite {}: it is not a .npy array (--force replaces it)",
            path.display()
        ));
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `array` in `.npy` format and `precision` in a temporary file of `dir`, to be renamed to
/// `path`; removed if dropped instead.
fn stage_array(
    dir: &Path,
    path: &Path,
    array: &HostArray,
    precision: Precision,
    stop: &dyn Fn() -> bool,
) -> Result<tempfile::NamedTempFile, String> {
    let err = |e: String| format!("cannot write {}: {e}", path.display());
    let staged = tempfile::Builder::new()
        .prefix(".fuse-output-")
        // As a file written in place would be (less the umask), not private like a temporary.
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| err(e.to_string()))?;
    let mut file = Stoppable {
        file: std::io::BufWriter::new(staged.reopen().map_err(|e| err(e.to_string()))?),
        stop,
    };
    // Converted only where the precision differs: an output can be most of memory.
    let converted;
    let array = match array.precision() == precision {
        true => array,
        false => {
            converted = array.to_precision(precision);
            &converted
        }
    };
    let shape = IxDyn(&array.dims);
    let written = match &array.data {
        HostData::F32(v) => ArrayViewD::from_shape(shape, v)
            .map_err(|e| e.to_string())?
            .write_npy(&mut file),
        HostData::F64(v) => ArrayViewD::from_shape(shape, v)
            .map_err(|e| e.to_string())?
            .write_npy(&mut file),
    }
    .map_err(|e| e.to_string())
    .and_then(|()| file.flush().map_err(|e| e.to_string()));
    match written {
        Err(_) if stop() => Err(INTERRUPTED.to_string()),
        Err(e) => Err(err(e)),
        Ok(()) => Ok(staged),
    }
}

/// A file that fails the next write once `stop()` is true. Writes go through in pieces of at
/// most [`PIECE`] bytes, so a large array is stopped within one piece.
struct Stoppable<'a, W> {
    file: W,
    stop: &'a dyn Fn() -> bool,
}

/// Bytes written between two looks at `stop`.
const PIECE: usize = 1 << 20;

impl<W: Write> Write for Stoppable<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.stop)() {
            // Not `ErrorKind::Interrupted`, which `write_all` retries.
            return Err(std::io::Error::other(INTERRUPTED));
        }
        self.file.write(&buf[..buf.len().min(PIECE)])
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}
