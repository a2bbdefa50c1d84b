//! What the subcommands share in reading their arguments: sizes and scripts.

use std::path::Path;

use fuse::stages::fuse_core::script;
use fuse::{Library, Program};

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
