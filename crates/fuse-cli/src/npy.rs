//! Reading inputs from and writing outputs to `.npy` files (numpy's format), one per name.

use std::io::{BufReader, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use ndarray::{ArrayViewD, IxDyn};
use ndarray_npy::WriteNpyExt;

use fuse::stages::fuse_core::data::try_vec;
use fuse::stages::fuse_core::file;
use fuse::stages::fuse_core::wording::{closest, excerpt, list_or_none, printable};
use fuse::stages::fuse_core::{Bindings, HostArray, HostData, Precision, Program};

/// Reads `DIR/<input>.npy` for every input of `program` that has such a file; returns the
/// arrays and the paths read.
pub fn read_inputs(program: &Program, dir: &Path) -> Result<(Bindings, Vec<PathBuf>), String> {
    let mut arrays = Bindings::new();
    let mut read = Vec::new();
    for (name, path) in input_files(program, dir)? {
        arrays.insert(name, read_array(&path, program.precision)?);
        read.push(path);
    }
    Ok((arrays, read))
}

/// Each input of `program` that has a file `DIR/<input>.npy`, with that file, in declaration
/// order; an error where `dir` is no folder that can be listed.
pub fn input_files(program: &Program, dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    // Listed first, so that a folder that cannot be read says so rather than "has none".
    std::fs::read_dir(dir).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "no such folder".to_string(),
            std::io::ErrorKind::NotADirectory => "is a file, not a folder".to_string(),
            _ => format!("cannot list it: {e}"),
        };
        format!("--inputs {}: {why}", dir.display())
    })?;
    Ok((program.inputs.iter())
        .map(|&id| {
            let name = &program.values[id].variable;
            (name.clone(), dir.join(format!("{name}.npy")))
        })
        .filter(|(_, path)| file::is_there(path))
        .collect())
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

/// Why a run of `program` with `--inputs dir` cannot start: the files of inputs `missing` are
/// not there. Names the `.npy` files that are, with a did-you-mean where one that is no other
/// input's own file is close to a missing name, and to none closer.
pub fn missing_inputs(program: &Program, dir: &Path, missing: &[&str]) -> String {
    let found = npy_files(dir);
    let own: Vec<String> = (program.inputs.iter())
        .map(|&v| format!("{}.npy", program.values[v].variable))
        .collect();
    let spare = || found.iter().filter(|f| !own.contains(f)).cloned();
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
        let near = closest(file, spare()).filter(|near| closest(near, files.iter().cloned()).as_ref() == Some(file));
        if let Some(near) = near {
            message += &format!("; did you mean `{near}` for `{name}`?");
        }
    }
    message + ". Give every input as DIR/<name>.npy, or draw some at random with --random NAME or --random-rest"
}

/// Reads the `.npy` array at `path`, which must hold `precision`'s floats, straight into the
/// vector it is used from: no second copy of the array on the way, and memory too short for it
/// an error naming the bytes, not an abort. Big-endian files are converted, Fortran-ordered
/// matrices transposed into row-major order (a second array for that).
fn read_array(path: &Path, precision: Precision) -> Result<HostArray, String> {
    read_rows(path, precision, None)
}

/// The shape and the element type (`float32`, `float64`, else numpy's `descr`) in the header
/// of the `.npy` file at `path`, without reading its elements.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn read_header(path: &Path) -> Result<(Vec<usize>, String), String> {
    let file = file::open_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    let header = Header::read(&mut BufReader::new(file), size).map_err(|e| format!("{}: {e}", path.display()))?;
    let dtype = match header.float_kind() {
        Ok((Precision::F32, _)) => "float32".to_string(),
        Ok((Precision::F64, _)) => "float64".to_string(),
        Err(_) => header.descr,
    };
    Ok((header.shape, dtype))
}

/// A shape as numpy prints it: `(120, 50)`, `(50,)`, `()`.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn tuple(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// [`read_array`], or only rows `rows` of its outermost dimension: a row-major file is read
/// from the first of them on (what a rank of a distributed run holds), a Fortran-ordered
/// matrix whole and then cut.
pub fn read_rows(path: &Path, precision: Precision, rows: Option<Range<usize>>) -> Result<HostArray, String> {
    let file = file::open_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    let mut reader = BufReader::with_capacity(READ_CHUNK, file);
    let dtype = match precision {
        Precision::F32 => "float32",
        Precision::F64 => "float64",
    };
    let bad = |e: String| {
        format!(
            "{}: expected a {dtype} .npy array (the script is {precision}): {e}",
            path.display()
        )
    };
    let header = Header::read(&mut reader, size).map_err(bad)?;
    let (kind, big_endian) = header.float_kind().map_err(bad)?;
    if kind != precision {
        return Err(bad(format!("its dtype is {}", printable(&header.descr))));
    }
    let what = || match &rows {
        Some(r) => format!("{} (rows {}..{})", path.display(), r.start, r.end),
        None => format!("{}", path.display()),
    };
    let count = header.count().ok_or_else(|| bad("its shape overflows".to_string()))?;
    let outer = header.shape.first().copied().unwrap_or(1);
    let part = match &rows {
        Some(r) if r.end > outer => {
            return Err(format!(
                "{}: has {outer} rows, but rows {}..{} are asked for",
                path.display(),
                r.start,
                r.end
            ))
        }
        Some(r) if !header.fortran_order => Some(r.clone()),
        _ => None,
    };
    let (skip, count) = match &part {
        Some(r) => {
            let row = count / outer.max(1);
            (r.start * row, r.len() * row)
        }
        None => (0, count),
    };
    let skipped = skip as u64 * precision.bytes();
    reader
        .seek_relative(i64::try_from(skipped).map_err(|_| bad("too large to seek in".into()))?)
        .map_err(|e| format!("{}: {e}", what()))?;
    let data = match precision {
        Precision::F32 => {
            let v = read_elements(&mut reader, count, what, |b| match big_endian {
                true => f32::from_be_bytes(b),
                false => f32::from_le_bytes(b),
            })?;
            HostData::F32(header.in_row_major(v, what)?)
        }
        Precision::F64 => {
            let v = read_elements(&mut reader, count, what, |b| match big_endian {
                true => f64::from_be_bytes(b),
                false => f64::from_le_bytes(b),
            })?;
            HostData::F64(header.in_row_major(v, what)?)
        }
    };
    let mut dims = header.shape;
    if let (Some(r), Some(outer)) = (&part, dims.first_mut()) {
        *outer = r.len();
    }
    let array = HostArray { dims, data };
    // A Fortran-ordered matrix was read whole: its rows are cut here.
    Ok(match (rows, part) {
        (Some(r), None) => array.view().rows(r),
        _ => array,
    })
}

/// The longest header read (numpy's own reader stops at 10,000 bytes unless told otherwise).
const MAX_HEADER: usize = 1 << 20;

/// Bytes read from a `.npy` file at a time.
const READ_CHUNK: usize = 1 << 16;

/// The header of a `.npy` file (numpy's format 1.0 to 3.0).
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

impl Header {
    /// Reads the header of a file of `size` bytes.
    fn read(reader: &mut impl Read, size: u64) -> Result<Header, String> {
        let mut magic = [0u8; 8];
        reader
            .read_exact(&mut magic)
            .map_err(|_| "not a .npy file (too short)".to_string())?;
        if &magic[..6] != b"\x93NUMPY" {
            return Err("not a .npy file (no numpy magic)".to_string());
        }
        let len = match magic[6] {
            1 => {
                let mut len = [0u8; 2];
                reader.read_exact(&mut len).map_err(|e| e.to_string())?;
                u16::from_le_bytes(len) as usize
            }
            2 | 3 => {
                let mut len = [0u8; 4];
                reader.read_exact(&mut len).map_err(|e| e.to_string())?;
                u32::from_le_bytes(len) as usize
            }
            v => return Err(format!(".npy format version {v} is not known")),
        };
        let prefix = if magic[6] == 1 { 10 } else { 12 };
        if len > MAX_HEADER || len as u64 > size.saturating_sub(prefix) {
            return Err(format!(
                "its header claims {len} bytes, more than {}",
                match len > MAX_HEADER {
                    true => format!("the {MAX_HEADER} fuse reads"),
                    false => format!("the file's {} after the magic", size.saturating_sub(prefix)),
                }
            ));
        }
        let mut text = vec![0u8; len];
        reader.read_exact(&mut text).map_err(|e| e.to_string())?;
        let text = String::from_utf8(text).map_err(|_| "its header is not text".to_string())?;
        Header::parse(&text)
    }

    fn parse(text: &str) -> Result<Header, String> {
        let bad = || format!("its header is not a numpy array header: {}", excerpt(text.trim()));
        let Ok(py_literal::Value::Dict(entries)) = text.trim().parse::<py_literal::Value>() else {
            return Err(bad());
        };
        // The last of a repeated key counts, as in the dict numpy evaluates.
        let entry = |key: &str| {
            entries
                .iter()
                .rev()
                .find(|(k, _)| matches!(k, py_literal::Value::String(s) if s == key))
                .map(|(_, v)| v)
        };
        let descr = match entry("descr") {
            Some(py_literal::Value::String(d)) => d.clone(),
            _ => return Err(bad()),
        };
        let fortran_order = match entry("fortran_order") {
            Some(py_literal::Value::Boolean(b)) => *b,
            _ => return Err(bad()),
        };
        let Some(py_literal::Value::Tuple(dims)) = entry("shape") else {
            return Err(bad());
        };
        let shape = dims
            .iter()
            .map(|d| match d {
                py_literal::Value::Integer(n) => usize::try_from(n.clone()).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(bad)?;
        Ok(Header {
            descr,
            fortran_order,
            shape,
        })
    }

    /// The precision of its floats and whether they are big-endian.
    fn float_kind(&self) -> Result<(Precision, bool), String> {
        let big_endian = self.descr.starts_with('>') || (self.descr.starts_with('=') && cfg!(target_endian = "big"));
        match self.descr.trim_start_matches(['<', '>', '=', '|']) {
            "f4" => Ok((Precision::F32, big_endian)),
            "f8" => Ok((Precision::F64, big_endian)),
            _ => Err(format!("its dtype is {}", printable(&self.descr))),
        }
    }

    /// Elements it holds.
    fn count(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// `data`, read in the file's order, in row-major order.
    fn in_row_major<T: Copy>(&self, data: Vec<T>, what: impl Fn() -> String) -> Result<Vec<T>, String> {
        match (self.fortran_order, self.shape.as_slice()) {
            (false, _) | (true, [] | [_]) => Ok(data),
            (true, &[rows, cols]) => {
                let mut out =
                    try_vec(data.len(), || format!("{} in row-major order", what())).map_err(|e| e.to_string())?;
                out.extend((0..rows * cols).map(|k| data[(k % cols) * rows + k / cols]));
                Ok(out)
            }
            (true, _) => Err(format!(
                "{}: a Fortran-ordered array of more than two dimensions",
                what()
            )),
        }
    }
}

/// `count` elements of `N` bytes each from `reader`, converted by `from`, into memory reserved
/// for them first (an error naming `what` where it cannot be had).
fn read_elements<T, const N: usize>(
    reader: &mut impl Read,
    count: usize,
    what: impl Fn() -> String,
    from: impl Fn([u8; N]) -> T,
) -> Result<Vec<T>, String> {
    let mut out = try_vec(count, &what).map_err(|e| e.to_string())?;
    let mut chunk = vec![0u8; READ_CHUNK / N * N];
    while out.len() < count {
        let take = ((count - out.len()) * N).min(chunk.len());
        let got = fill(reader, &mut chunk[..take]).map_err(|e| {
            format!(
                "{}: cannot be read after {} of its {count} elements: {e}",
                what(),
                out.len()
            )
        })?;
        out.extend(
            chunk[..got - got % N]
                .chunks_exact(N)
                .map(|b| from(b.try_into().expect("N bytes"))),
        );
        if got < take {
            return Err(format!("{}: ends after {} of its {count} elements", what(), out.len()));
        }
    }
    Ok(out)
}

/// Reads into `buf` until it is full or the file ends: the bytes read.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
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

/// Checks, before anything is computed, that outputs `names` can be written to `dir` as
/// [`write_outputs`] would: `dir` is a folder or can be made, and no file of theirs is in the
/// way. (Checked again when writing, under the folder's lock.)
pub fn check_outputs(names: &[&str], dir: &Path, options: &WriteOptions) -> Result<(), String> {
    if check_folder(dir)? {
        for name in names {
            check_target(&dir.join(format!("{name}.npy")), options.protected, options.force)?;
        }
    }
    Ok(())
}

/// Whether `dir` is there already (a folder); an error where it, or the nearest of its parents
/// that is there, is a file.
fn check_folder(dir: &Path) -> Result<bool, String> {
    let mut existing = dir;
    while !file::is_there(existing) {
        match existing.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => existing = parent,
            _ => return Ok(false),
        }
    }
    if !existing.is_dir() {
        let what = match existing == dir {
            true => "is a file, not a folder".to_string(),
            false => format!("{} is a file, not a folder", existing.display()),
        };
        return Err(format!("--outputs {}: {what}", dir.display()));
    }
    Ok(existing == dir)
}

/// Writes each array as `DIR/<name>.npy`, creating `DIR` and its missing parents: all or
/// nothing. Every array is written to an unnamed file in `DIR` first (nothing to see, nothing
/// left behind if the process is killed), and only when all are written are they linked into
/// place, with the folder locked from the check of what is in the way to the last link, so that
/// two runs writing to one folder leave one run's whole set. A failure — or `stop()` turning
/// true while they are written — leaves the folder as it was, and removes every folder this call
/// made. A `protected` file is never overwritten, nor — unless `force` — a file in the way that
/// is not a `.npy` array.
pub fn write_outputs(outputs: &Bindings, dir: &Path, options: &WriteOptions) -> Result<Vec<PathBuf>, String> {
    // What is in the way is checked under the folder's lock, in write_all_or_none.
    check_folder(dir)?;
    let made = make_folders(dir)?;
    let written = write_all_or_none(outputs, dir, options);
    if written.is_err() {
        // Empty again: the unnamed files vanish when dropped.
        remove_folders(&made);
    }
    written
}

/// Makes `dir` and its missing parents; returns those it made, outermost first.
fn make_folders(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !file::is_there(p))
        .collect();
    let mut made = Vec::new();
    for folder in missing.into_iter().rev() {
        match std::fs::create_dir(folder) {
            Ok(()) => made.push(folder.to_path_buf()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                remove_folders(&made);
                return Err(format!(
                    "--outputs {}: cannot make {}: {e}",
                    dir.display(),
                    folder.display()
                ));
            }
        }
    }
    Ok(made)
}

/// Removes the empty folders `made` (outermost first), innermost first.
fn remove_folders(made: &[PathBuf]) {
    for folder in made.iter().rev() {
        let _ = std::fs::remove_dir(folder);
    }
}

fn write_all_or_none(outputs: &Bindings, dir: &Path, options: &WriteOptions) -> Result<Vec<PathBuf>, String> {
    let WriteOptions {
        precision,
        protected,
        force,
        stop,
    } = *options;
    let cannot = |e: std::io::Error| format!("--outputs {}: {e}", dir.display());
    let folder = cap_std::fs::Dir::open_ambient_dir(dir, cap_std::ambient_authority()).map_err(cannot)?;
    let _lock = file::lock(&folder, true).map_err(cannot)?;
    let targets: Vec<(String, &HostArray)> = outputs.iter().map(|(name, a)| (format!("{name}.npy"), a)).collect();
    for (name, _) in &targets {
        check_target(&dir.join(name), protected, force)?;
    }
    let mut staged = Vec::new();
    for (name, array) in &targets {
        staged.push(stage_array(&folder, &dir.join(name), array, precision, stop)?);
    }
    // The last moment to stop: linking is quick and not interrupted, so all land or none.
    if stop() {
        return Err(INTERRUPTED.to_string());
    }
    let mut written = Vec::new();
    for ((name, _), file) in targets.into_iter().zip(staged) {
        let path = dir.join(&name);
        file.replace(&name)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
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

/// `array` in `.npy` format and `precision` in an unnamed file of `folder`, to be linked as
/// `path`; gone if dropped instead.
fn stage_array<'d>(
    folder: &'d cap_std::fs::Dir,
    path: &Path,
    array: &HostArray,
    precision: Precision,
    stop: &dyn Fn() -> bool,
) -> Result<cap_tempfile::TempFile<'d>, String> {
    let err = |e: String| format!("cannot write {}: {e}", path.display());
    // Mode 666 less the umask, as a file written in place would be.
    let mut staged = cap_tempfile::TempFile::new(folder).map_err(|e| err(e.to_string()))?;
    let mut file = Stoppable {
        file: std::io::BufWriter::new(staged.as_file_mut()),
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
    drop(file);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` file of `descr` and `shape` holding `bytes`, in numpy's format 1.0.
    fn npy(dir: &Path, descr: &str, fortran: bool, shape: &str, bytes: &[u8]) -> PathBuf {
        let order = if fortran { "True" } else { "False" };
        let header = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}\n");
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out.extend(bytes);
        let path = dir.join("a.npy");
        std::fs::write(&path, out).unwrap();
        path
    }

    #[test]
    fn fortran_order_is_transposed_and_big_endian_converted() {
        let dir = tempfile::tempdir().unwrap();
        // [[1, 2, 3], [4, 5, 6]] stored column by column.
        let columns: Vec<u8> = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let a = read_array(&npy(dir.path(), "<f4", true, "(2, 3)", &columns), Precision::F32).unwrap();
        assert_eq!(a, HostArray::f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let big: Vec<u8> = [0.5f64, -2.0].iter().flat_map(|x| x.to_be_bytes()).collect();
        let v = read_array(&npy(dir.path(), ">f8", false, "(2,)", &big), Precision::F64).unwrap();
        assert_eq!(v, HostArray::f64(vec![2], vec![0.5, -2.0]));
        let s = read_array(
            &npy(dir.path(), "<f8", false, "()", &7.0f64.to_le_bytes()),
            Precision::F64,
        )
        .unwrap();
        assert_eq!(s, HostArray::f64(vec![], vec![7.0]));
    }

    #[test]
    fn a_short_or_foreign_file_is_named_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let short = npy(dir.path(), "<f4", false, "(4,)", &[0; 12]);
        let err = read_array(&short, Precision::F32).unwrap_err();
        // The three elements there are counted, in fuse's words (no "failed to fill whole buffer").
        assert!(err.ends_with("a.npy: ends after 3 of its 4 elements"), "{err}");
        let ints = npy(dir.path(), "<i8", false, "(1,)", &[0; 8]);
        let err = read_array(&ints, Precision::F64).unwrap_err();
        assert!(
            err.contains("expected a float64 .npy array (the script is f64): its dtype is <i8"),
            "{err}"
        );
        let huge = npy(dir.path(), "<f8", false, "(1000000000000000,)", &[]);
        let err = read_array(&huge, Precision::F64).unwrap_err();
        assert!(
            err.contains("not enough host memory for") && err.contains("a.npy"),
            "{err}"
        );
    }
}
