//! The sizes `fuse run` binds: each size symbol from `--size`, else from the shape of an input
//! file that has it, else the script's default (the rule of [`fuse::bind_sizes`]).

use std::path::Path;

use std::collections::BTreeMap;

use fuse::{Program, SizeSource, Sizes};

use crate::args::check_distinct_sizes;
use crate::failure::{bad_input, Failure};

/// The sizes of a run of `program`: `flags` (`--size`) first, then the shapes of the arrays read
/// in `dir` (`--inputs`; `shapes` holds them by input name), then the script's defaults.
pub fn bind_run_sizes(
    program: &Program,
    flags: &[(String, usize)],
    shapes: &BTreeMap<String, Vec<usize>>,
    dir: Option<&Path>,
) -> Result<Sizes, Failure> {
    check_distinct_sizes(flags)?;
    let given = flags.iter().map(|(symbol, value)| SizeSource::Given {
        symbol,
        value: *value,
        what: format!("--size {symbol}={value}"),
    });
    // In declaration order, so that a disagreement names the first input that bound the size.
    let in_order = program
        .inputs
        .iter()
        .filter_map(|&id| shapes.get_key_value(&program.values[id].variable));
    let shapes = dir.into_iter().flat_map(|dir| {
        in_order.clone().map(move |(input, dims)| SizeSource::Shape {
            input,
            dims,
            what: dir.join(format!("{input}.npy")).display().to_string(),
        })
    });
    let sources: Vec<SizeSource> = given.chain(shapes).collect();
    fuse::bind_sizes(program, &sources).map_err(bad_input)
}
