//! `fuse run` in one process: inputs read or drawn, sizes bound, the script compiled for the
//! backend and run, outputs written (all or none) or printed.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use fuse::stages::fuse_core::data::{check_inputs_given, try_fill_random_inputs};
use fuse::stages::fuse_core::wording::list_or_none;
use fuse::{Bindings, CompileOptions, Inputs, Library, Precision, Program, Sizes};

use crate::args::Backend;
use crate::failure::{bad_input, failure, Failure};
use crate::{interrupt, npy, sizes};

/// The options of `fuse run`.
pub struct RunOptions<'a> {
    pub library: &'a Arc<Library>,
    pub backend: Option<Backend>,
    pub sizes: Vec<(String, usize)>,
    pub plan_sizes: Vec<(String, usize)>,
    pub inputs: Option<PathBuf>,
    pub outputs: Option<PathBuf>,
    pub force: bool,
    pub seed: u64,
    pub random: Vec<String>,
    pub random_rest: bool,
    pub timing: bool,
}

/// The arrays read from `--inputs` (every input's file there, except those named by
/// `--random`) and the files read.
fn read_input_files(program: &Program, options: &RunOptions) -> Result<(Bindings, Vec<PathBuf>), Failure> {
    check_random_names(program, options)?;
    let Some(dir) = &options.inputs else {
        return Ok(Default::default());
    };
    let (mut inputs, read) = npy::read_inputs(program, dir).map_err(bad_input)?;
    for name in &options.random {
        inputs.remove(name);
    }
    Ok((inputs, read))
}

/// Every `--random NAME` names an input.
pub fn check_random_names(program: &Program, options: &RunOptions) -> Result<(), Failure> {
    let names = input_names(program);
    match options.random.iter().find(|n| !names.contains(&n.as_str())) {
        Some(name) => Err(bad_input(format!(
            "--random {name}: {} has no input `{name}` (its inputs are {})",
            program.file,
            list_or_none(&names)
        ))),
        None => Ok(()),
    }
}

fn input_names(program: &Program) -> Vec<&str> {
    (program.inputs.iter())
        .map(|&v| program.values[v].variable.as_str())
        .collect()
}

/// The inputs of a run: those read from files, checked against `sizes`, and the names of the
/// inputs still to draw — with `--inputs`, only those the user asked to draw.
fn gather_inputs<'p>(
    program: &'p Program,
    sizes: &Sizes,
    options: &RunOptions,
    inputs: Bindings,
) -> Result<(Bindings, Vec<&'p str>), Failure> {
    let drawn: Vec<&str> = (input_names(program).into_iter())
        .filter(|n| !inputs.contains_key(*n))
        .collect();
    for warning in check_input_files(program, options, |n| inputs.contains_key(n))? {
        eprintln!("warning: {warning}");
    }
    check_inputs_given(program, sizes, &inputs).map_err(bad_input)?;
    Ok((inputs, drawn))
}

/// With `--inputs`: an error unless every input lacking a file (`has_file` false) is asked to
/// be drawn (`--random NAME`, `--random-rest`); else the warnings about files that are no input.
pub fn check_input_files(
    program: &Program,
    options: &RunOptions,
    has_file: impl Fn(&str) -> bool,
) -> Result<Vec<String>, Failure> {
    let Some(dir) = &options.inputs else {
        return Ok(Vec::new());
    };
    let asked = |n: &str| options.random_rest || options.random.iter().any(|r| r == n);
    let missing: Vec<&str> = (input_names(program).into_iter())
        .filter(|n| !has_file(n) && !asked(n))
        .collect();
    match missing.is_empty() {
        true => Ok(npy::unused_files(program, dir)),
        false => Err(bad_input(npy::missing_inputs(program, dir, &missing))),
    }
}

pub fn run_script(program: &Program, options: &RunOptions) -> Result<(), Failure> {
    let (files, read) = read_input_files(program, options)?;
    if let Some(dir) = &options.outputs {
        // Before the computation: a target in the way is found at once, not after minutes.
        let names: Vec<&str> = program
            .outputs
            .iter()
            .map(|&v| program.values[v].variable.as_str())
            .collect();
        let never = || false;
        let check = output_options(program.precision, &read, options.force, &never);
        npy::check_outputs(&names, dir, &check).map_err(bad_input)?;
    }
    let shapes = files.iter().map(|(name, a)| (name.clone(), a.dims.clone())).collect();
    let sizes = sizes::bind_run_sizes(program, &options.sizes, &shapes, options.inputs.as_deref())?;
    // Before any array is drawn or made: a problem larger than the machine is an error naming
    // the bytes, not an abort halfway through.
    fuse::check_host_memory(program.compulsory_bytes(&sizes), || {
        format!("the inputs and outputs of {} at {sizes}", program.file)
    })
    .map_err(failure)?;
    let (mut inputs, drawn) = gather_inputs(program, &sizes, options, files)?;
    let backend = match options.backend {
        Some(b) if !options.plan_sizes.is_empty() && !matches!(b, Backend::Cuda) => {
            return Err(bad_input("--plan-size applies to --backend cuda only"))
        }
        Some(b) => fuse::Backend::from(b),
        None => {
            let (b, why) = fuse::Backend::detect_why();
            eprintln!("backend: {} ({why})", b.name());
            if !options.plan_sizes.is_empty() && !matches!(b, fuse::Backend::Cuda { .. }) {
                eprintln!("note: --plan-size applies to --backend cuda only: ignored");
            }
            b
        }
    };
    let compile = CompileOptions::new()
        .library(Arc::clone(options.library))
        .plan_sizes(options.plan_sizes.clone());
    let compiled =
        said_if_slow(&backend, program, || backend.compile_with(program, &sizes, &compile)).map_err(failure)?;
    for note in compiled.notes() {
        eprintln!("{note}");
    }
    if !drawn.is_empty() {
        eprintln!(
            "inputs: {} drawn at random (seed {})",
            list_or_none(&drawn),
            options.seed
        );
        // The run's memory is taken meanwhile, so its fresh pages cost the run nothing.
        std::thread::scope(|s| {
            let ahead = s.spawn(|| compiled.provision().map_err(failure));
            let drawn = try_fill_random_inputs(program, &sizes, options.seed, &mut inputs).map_err(failure);
            drawn.and(ahead.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        })?;
    }
    let (results, times) = compiled.run_timed(&Inputs::from(inputs)).map_err(failure)?;
    if options.timing {
        eprintln!("{}", timing_line(compiled.backend(), &times));
    }
    report(program, &results.into_bindings(), options, &read)
}

/// How long a compile goes on unannounced: a first compile of generated code takes seconds,
/// which without a word look like a hang.
const QUIET_COMPILE: Duration = Duration::from_secs(1);

/// `compile()`, with a note on standard error once it has taken [`QUIET_COMPILE`] on a backend
/// that builds a module of generated code (emulate, cuda): what it is doing, and that it
/// happens once.
fn said_if_slow<T: Send>(backend: &fuse::Backend, program: &Program, compile: impl FnOnce() -> T + Send) -> T {
    let how = match backend {
        fuse::Backend::Emulate => "for emulation with the host C++ compiler",
        fuse::Backend::Cuda { .. } => "for the GPU with NVRTC",
        _ => return compile(),
    };
    let (done, finished) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            if finished.recv_timeout(QUIET_COMPILE) == Err(RecvTimeoutError::Timeout) {
                eprintln!(
                    "note: compiling the kernels of {} {how} (seconds, once: later runs take the module from the cache)",
                    program.name
                );
            }
        });
        let compiled = compile();
        drop(done);
        compiled
    })
}

/// The outputs of a run: written to `--outputs` (all or none), else printed in script order.
pub fn report(program: &Program, results: &Bindings, options: &RunOptions, read: &[PathBuf]) -> Result<(), Failure> {
    match &options.outputs {
        Some(dir) => {
            for path in write_outputs(program.precision, results, dir, read, options.force)? {
                println!("wrote {}", path.display());
            }
        }
        None => {
            let width = results.keys().map(|k| k.chars().count()).max().unwrap_or(0);
            // In the order the script declares its outputs.
            for name in program.outputs.iter().map(|&v| &program.values[v].variable) {
                let Some(array) = results.get(name) else { continue };
                // Padded by hand: a format width over 65535 panics, and names may be that long.
                // Outputs come in the program's precision: printed as they are, not copied.
                let pad = " ".repeat(width - name.chars().count());
                println!("{name}{pad}  {array}");
            }
        }
    }
    Ok(())
}

/// `timing: upload 1.234 ms, compute 0.456 ms (CUDA events), download 0.012 ms`.
fn timing_line(backend: &fuse::Backend, times: &fuse::RunTimes) -> String {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let how = match backend {
        fuse::Backend::Cuda { .. } => "CUDA events",
        fuse::Backend::Emulate => "emulated on host threads",
        _ => "on the host, no transfers",
    };
    format!(
        "timing: upload {:.3} ms, compute {:.3} ms ({how}), download {:.3} ms",
        ms(times.upload),
        ms(times.compute),
        ms(times.download)
    )
}

/// Writes `results` to `dir`, all or nothing; Ctrl-C meanwhile leaves `dir` as it was and
/// exits with status 130.
pub fn write_outputs(
    precision: Precision,
    results: &Bindings,
    dir: &std::path::Path,
    inputs: &[PathBuf],
    force: bool,
) -> Result<Vec<PathBuf>, Failure> {
    let (written, interrupted) =
        interrupt::deferred(|stop| npy::write_outputs(results, dir, &output_options(precision, inputs, force, stop)));
    match (written, interrupted) {
        (Err(_), true) => Err(Failure {
            code: interrupt::EXIT_INTERRUPTED,
            message: format!("interrupted: nothing written to {}", dir.display()),
        }),
        (written, _) => written.map_err(bad_input),
    }
}

pub fn output_options<'a>(
    precision: Precision,
    inputs: &'a [PathBuf],
    force: bool,
    stop: &'a dyn Fn() -> bool,
) -> npy::WriteOptions<'a> {
    npy::WriteOptions {
        precision,
        protected: inputs,
        force,
        stop,
    }
}
