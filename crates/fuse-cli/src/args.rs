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

/// Loads and checks the script at `path`, and prints its warnings (see [`warn`]).
pub fn load(path: &Path, library: &Library) -> Result<Program, Failure> {
    let program = load_quiet(path, library)?;
    warn(&program);
    Ok(program)
}

/// Loads and checks the script at `path`.
pub fn load_quiet(path: &Path, library: &Library) -> Result<Program, Failure> {
    script::load(path, library).map_err(bad_input)
}

/// Prints on standard error what in `program` is legal but likely a slip (an input no call
/// reads).
pub fn warn(program: &Program) {
    for warning in program.warnings() {
        eprintln!("warning: {warning}");
    }
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

/// The sizes of `program` with the `--size` values given, to make plans at: none may be 0.
pub fn bind_sizes(program: &Program, sizes: &[(String, usize)]) -> Result<Sizes, Failure> {
    check_distinct_sizes(sizes)?;
    let bound = program.bind_sizes(sizes).map_err(bad_input)?;
    plannable(&bound)?;
    Ok(bound)
}

/// An error where a size is 0: plans are laid out for at least one element, and an empty
/// dimension leaves nothing to fuse (`fuse run` computes it call by call).
pub fn plannable(sizes: &Sizes) -> Result<(), Failure> {
    match sizes.empty_dimension() {
        Some(symbol) => Err(bad_input(format!(
            "--size {symbol}=0: plans are made for sizes of at least 1; at {symbol} = 0 there is nothing to fuse (`fuse run` computes it call by call)"
        ))),
        None => Ok(()),
    }
}

/// Where a script runs.
#[derive(Clone, Copy, ValueEnum)]
pub enum Backend {
    /// The fused CPU backend: the best plan, run tile by tile on every core this process may
    /// use (FUSE_NUM_THREADS=N for N threads), in the widest vectors it has (FUSE_SIMD=avx512,
    /// avx2 or scalar for another, at most what the CPU has).
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
