//! What the subcommands share in reading their arguments: sizes, scripts and backends.

use std::path::Path;

use clap::ValueEnum;

use fuse::stages::fuse_core::script;
use fuse::{Library, Program, Sizes};

use crate::failure::{bad_input, Failure};

/// Parses `--size NAME=VALUE`.
pub fn parse_size(s: &str) -> Result<(String, usize), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=VALUE, e.g. m=1000"))?;
    let value = value
        .trim()
        .parse::<usize>()
        .map_err(|_| format!("`{s}`: `{value}` is not a positive integer"))?;
    Ok((name.trim().to_string(), value))
}

/// Loads and checks the script at `path`.
pub fn load(path: &Path, library: &Library) -> Result<Program, Failure> {
    script::load(path, library).map_err(bad_input)
}

/// `--size` given twice for one symbol (`--size m=5 --size m=7`): which one was meant is not
/// for fuse to guess.
pub fn check_distinct_sizes(sizes: &[(String, usize)]) -> Result<(), Failure> {
    for (k, (name, value)) in sizes.iter().enumerate() {
        if let Some((_, first)) = sizes[..k].iter().find(|(n, _)| n == name) {
            return Err(bad_input(format!(
                "--size {name}={first} and --size {name}={value}: size `{name}` is given twice"
            )));
        }
    }
    Ok(())
}

/// The sizes of `program` with the `--size` values given.
pub fn bind_sizes(program: &Program, sizes: &[(String, usize)]) -> Result<Sizes, Failure> {
    check_distinct_sizes(sizes)?;
    program.bind_sizes(sizes).map_err(bad_input)
}

/// Where a script runs.
#[derive(Clone, Copy, ValueEnum)]
pub enum Backend {
    /// The fused CPU backend: the best plan, run tile by tile on every core this process may
    /// use (FUSE_NUM_THREADS=N for N threads).
    Cpu,
    /// The f64 reference interpreter: call by call, no fusion, the ground truth.
    Reference,
    /// The generated CUDA of the best plan, run on host threads (slow; for testing kernels).
    Emulate,
    /// The generated CUDA on GPU 0 (NVIDIA, CUDA 13 driver): the tuned or best predicted plan.
    Cuda,
}

impl From<Backend> for fuse::Backend {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Cpu => fuse::Backend::Cpu,
            Backend::Reference => fuse::Backend::Reference,
            Backend::Emulate => fuse::Backend::Emulate,
            Backend::Cuda => fuse::Backend::Cuda { device: 0 },
        }
    }
}
