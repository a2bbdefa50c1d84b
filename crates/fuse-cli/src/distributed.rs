//! `fuse run --distributed`: this process is one rank of a run started by `mpirun -n R`. Every
//! rank reads the headers of the input files for the sizes, its own rows of each split input
//! (rank 0 the replicated ones, then broadcast), runs its local parts with the backend chosen
//! here, and rank 0 writes or prints the outputs. A failure on any rank is every rank's
//! failure, with the same message and exit status (2 for bad input).

#[cfg(not(feature = "mpi"))]
pub fn run_script(_: &fuse::Program, _: &crate::run::RunOptions) -> Result<(), crate::failure::Failure> {
    Err(crate::failure::bad_input(
        "--distributed: this fuse was built without MPI. Build it with `cargo build --release --features mpi` \
         (needs an MPI library, e.g. Debian's libopenmpi-dev and openmpi-bin, and libclang-dev) and start it \
         with `mpirun -n R fuse run SCRIPT --distributed`",
    ))
}

#[cfg(feature = "mpi")]
pub use with_mpi::run_script;

#[cfg(feature = "mpi")]
mod with_mpi {
    use std::collections::BTreeMap;
    use std::ops::Range;
    use std::path::PathBuf;

    use fuse::distributed::{agree as agree_on, Communicator, InputSource, Mpi, Stored};
    use fuse::stages::fuse_core::data::try_random_input;
    use fuse::stages::fuse_core::distribute::distribute;
    use fuse::stages::fuse_core::wording::list_or_none;
    use fuse::{CompileOptions, Error, Program, Sizes};

    use crate::failure::{failure, Failure};
    use crate::run::{check_input_files, check_random_names, output_options, report, RunOptions};
    use crate::{npy, sizes};

    /// Input shapes by name.
    type Shapes = BTreeMap<String, Vec<usize>>;

    /// Inputs of one rank: rows of `.npy` files, or of inputs drawn at random (each rank draws
    /// only the rows it holds, the numbers `fuse run` draws without `--distributed`).
    struct Files<'a> {
        dir: Option<PathBuf>,
        program: &'a Program,
        sizes: &'a Sizes,
        seed: u64,
        /// Inputs without a file, by their position among the program's inputs.
        drawn: BTreeMap<String, usize>,
    }

    impl InputSource for Files<'_> {
        fn read(&self, name: &str, rows: Option<Range<usize>>) -> fuse::Result<Stored<'_>> {
            if let Some(&k) = self.drawn.get(name) {
                let array = try_random_input(self.program, self.sizes, self.seed, k, rows)?;
                return Ok(Stored::Owned(array));
            }
            let dir = (self.dir.as_ref()).ok_or_else(|| Error::Internal(format!("no source for input `{name}`")))?;
            let array = npy::read_rows(&dir.join(format!("{name}.npy")), self.program.precision, rows);
            array.map(Stored::Owned).map_err(Error::Distribution)
        }
    }

    pub fn run_script(program: &Program, options: &RunOptions) -> Result<(), Failure> {
        let comm = Mpi::init().map_err(failure)?;
        if comm.rank() == 0 && !options.plan_sizes.is_empty() {
            eprintln!("note: --plan-size applies to runs in one process: ignored with --distributed");
        }
        let comm = &comm;
        let (shapes, read, warnings) = agree(comm, input_shapes(program, options))?;
        if comm.rank() == 0 {
            warnings.iter().for_each(|w| eprintln!("warning: {w}"));
        }
        let sizes = agree(
            comm,
            sizes::bind_run_sizes(program, &options.sizes, &shapes, options.inputs.as_deref()).map_err(|f| f.message),
        )?;
        if let (Some(dir), 0) = (&options.outputs, comm.rank()) {
            // Before the computation: a target in the way is found at once, not after minutes.
            let names: Vec<&str> = (program.outputs.iter())
                .map(|&v| program.values[v].variable.as_str())
                .collect();
            let never = || false;
            let check = output_options(program, &read, options.force, &never);
            agree(comm, npy::check_outputs(&names, dir, &check))?;
        } else {
            agree(comm, Ok(()))?;
        }
        let plan = distribute(program, options.library).map_err(crate::failure::bad_input)?;
        let drawn: BTreeMap<String, usize> = (program.inputs.iter().enumerate())
            .map(|(k, &v)| (program.values[v].variable.clone(), k))
            .filter(|(name, _)| !shapes.contains_key(name))
            .collect();
        if comm.rank() == 0 && !drawn.is_empty() {
            let names: Vec<&str> = drawn.keys().map(String::as_str).collect();
            eprintln!(
                "inputs: {} drawn at random (seed {})",
                list_or_none(&names),
                options.seed
            );
        }
        let source = Files {
            dir: options.inputs.clone(),
            program,
            sizes: &sizes,
            seed: options.seed,
            drawn,
        };
        let backend = options.backend.map_or(fuse::Backend::Cpu, fuse::Backend::from);
        let compile = CompileOptions::new().library(std::sync::Arc::clone(options.library));
        let program_here = fuse::distributed::compile(comm, plan, &sizes, &backend, &compile).map_err(failure)?;
        let (results, times) = program_here.run_timed(comm, &source).map_err(failure)?;
        if options.timing && comm.rank() == 0 {
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            eprintln!(
                "timing on rank 0 of {}: read {:.3} ms, compute {:.3} ms, collectives {:.3} ms",
                comm.ranks(),
                ms(times.read),
                ms(times.compute),
                ms(times.exchange)
            );
            if let Some(link) = program_here.link() {
                eprintln!(
                    "  on the device: {} B up, {} B down; collectives {}",
                    times.to_device,
                    times.from_device,
                    link.describe()
                );
            }
        }
        // Rank 0 holds the outputs.
        let reported = match comm.rank() {
            0 => report(program, &results, options, &read).map_err(|f| f.message),
            _ => Ok(()),
        };
        agree(comm, reported)
    }

    /// `result` on every rank if it is `Ok` on all, else the first failing rank's message.
    fn agree<T>(comm: &Mpi, result: Result<T, String>) -> Result<T, Failure> {
        agree_on(comm, result.map_err(Error::Distribution)).map_err(failure)
    }

    /// The shapes of the inputs that have files in `--inputs` (not drawn by `--random`), from
    /// their headers, and the files; the warnings about files that are no input.
    fn input_shapes(program: &Program, options: &RunOptions) -> Result<(Shapes, Vec<PathBuf>, Vec<String>), String> {
        check_random_names(program, options).map_err(|f| f.message)?;
        let Some(dir) = &options.inputs else {
            return Ok(Default::default());
        };
        let (mut shapes, mut read) = (BTreeMap::new(), Vec::new());
        for (name, path) in npy::input_files(program, dir)? {
            if !options.random.contains(&name) {
                shapes.insert(name, npy::read_shape(&path)?);
                read.push(path);
            }
        }
        let warnings = check_input_files(program, options, |n| shapes.contains_key(n)).map_err(|f| f.message)?;
        Ok((shapes, read, warnings))
    }
}
