//! What the command-line tests share: running the binary and numpy's `.npy` format.

#![allow(dead_code)] // each test file uses some of it

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn script(name: &str) -> String {
    repo().join("scripts").join(name).display().to_string()
}

/// Runs `fuse` with `args`, on the built-in CPU timing table.
pub fn fuse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .env_remove("FUSE_CPU_TIMINGS")
        .env_remove("FUSE_LIBRARY")
        .output()
        .expect("the fuse binary runs")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes a `.npy` file of numpy type `descr` (`<f4`, `<f8`), `shape` and raw little-endian
/// `bytes`, in numpy's format 1.0 layout.
pub fn write_npy(path: &Path, descr: &str, shape: &[usize], bytes: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(bytes);
    std::fs::write(path, out).unwrap();
}

/// Writes `data` as a float32 `.npy` array of `shape`.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) {
    assert_eq!(shape.iter().product::<usize>(), data.len());
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    write_npy(path, "<f4", shape, &bytes);
}

/// The numbers of a float32 `.npy` file (header skipped).
pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.starts_with(b"\x93NUMPY\x01\x00"), "{}", path.display());
    let start = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    bytes[start..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `count` numbers in [-1, 1) from a fixed-seed generator (a 64-bit LCG).
pub fn numbers(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

/// ‖got − want‖₂ / ‖want‖₂.
pub fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let diff: f64 = got.iter().zip(want).map(|(&g, w)| (g as f64 - w).powi(2)).sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (diff / norm).sqrt()
}

/// Makes a FIFO (named pipe) at `path`: a file that blocks whoever reads it until someone writes.
pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        path.display()
    );
}

/// BiCGK inputs of an odd shape in `dir` (made if missing): A (rows × cols), p (cols), r (rows).
pub fn bicgk_inputs(dir: &Path, rows: usize, cols: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (a, p, r) = (numbers(rows * cols, 1), numbers(cols, 2), numbers(rows, 3));
    std::fs::create_dir_all(dir).unwrap();
    write_f32(&dir.join("A.npy"), &[rows, cols], &a);
    write_f32(&dir.join("p.npy"), &[cols], &p);
    write_f32(&dir.join("r.npy"), &[rows], &r);
    (a, p, r)
}

/// BiCGK's `q = A·p` and `s = Aᵀ·r` in f64 from f32 numbers (A is `r.len()` × `p.len()`).
pub fn bicgk_in_f64(a: &[f32], p: &[f32], r: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (rows, cols) = (r.len(), p.len());
    let q = (0..rows)
        .map(|i| (0..cols).map(|j| a[i * cols + j] as f64 * p[j] as f64).sum())
        .collect();
    let s = (0..cols)
        .map(|j| (0..rows).map(|i| a[i * cols + j] as f64 * r[i] as f64).sum())
        .collect();
    (q, s)
}
