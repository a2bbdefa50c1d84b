//! The sizes `fuse run` binds: each size symbol from `--size`, else from the shape of an input
//! file that has it, else the script's default. Two sources that disagree are named, both.

use std::collections::BTreeMap;
use std::path::Path;

use fuse::{Bindings, Program, Sizes};

use crate::args::check_distinct_sizes;
use crate::failure::{bad_input, Failure};

/// The sizes of a run of `program`: `flags` (`--size`) first, then the shapes of the arrays read
/// from `dir` (`--inputs`; `files` holds them by input name), then the script's defaults.
pub fn bind_run_sizes(
    program: &Program,
    flags: &[(String, usize)],
    files: &Bindings,
    dir: Option<&Path>,
) -> Result<Sizes, Failure> {
    check_distinct_sizes(flags)?;
    // Each symbol bound so far: its value and what bound it, for messages.
    let mut bound: BTreeMap<&str, (usize, String)> = flags
        .iter()
        .map(|(name, value)| (name.as_str(), (*value, format!("--size {name}={value}"))))
        .collect();
    for &id in &program.inputs {
        let value = &program.values[id];
        let (Some(array), Some(dir)) = (files.get(&value.variable), dir) else {
            continue;
        };
        let symbols = value.shape.dims();
        // Of another rank: the shape check names it, with the shape wanted.
        if symbols.len() != array.dims.len() {
            continue;
        }
        let source = format!(
            "{} (input `{}`: {}) of shape {:?}",
            dir.join(format!("{}.npy", value.variable)).display(),
            value.variable,
            value.shape,
            array.dims
        );
        if array.dims.contains(&0) {
            return Err(bad_input(format!(
                "{source}: an empty array; every size must be positive"
            )));
        }
        for (symbol, &extent) in symbols.into_iter().zip(&array.dims) {
            match bound.get(symbol) {
                Some((v, first)) if *v != extent => {
                    return Err(bad_input(format!(
                    "size `{symbol}` disagrees: {first} gives {symbol} = {v}, but {source} gives {symbol} = {extent}"
                )))
                }
                Some(_) => {}
                None => {
                    bound.insert(symbol, (extent, source.clone()));
                }
            }
        }
    }
    let overrides: Vec<(String, usize)> = bound.into_iter().map(|(s, (v, _))| (s.to_string(), v)).collect();
    program.bind_sizes(&overrides).map_err(bad_input)
}
