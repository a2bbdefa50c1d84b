//! `fuse run --distributed`: this process is one rank of a run started by `mpirun -n R`. The
//! ranks first agree that they run one script with one library, precision and kind of
//! backend, then on the sizes, each input file's header and the seed (a digest all-gathered
//! each time; where they differ, one message names who has what). Every rank reads its own
//! rows of each split input (rank 0 the replicated ones, then broadcast), runs its local parts
//! with the backend chosen here, and rank 0 writes or prints the outputs. A failure on any rank
//! is every rank's failure, with the same exit status (2 for bad input), said once by rank 0.
//! `fuse solve --distributed` is the same for a Krylov solve (see `solve.rs`): each rank reads
//! its rows of the system and the solve runs on a session over the ranks.

use fuse::distributed::Communicator;

use crate::failure::Failure;

#[cfg(not(feature = "mpi"))]
pub fn run_script(program: Result<fuse::Program, Failure>, _: &crate::run::RunOptions) -> Result<(), Failure> {
    program?;
    Err(without_mpi("fuse run SCRIPT"))
}

/// --distributed in a fuse built without MPI: how to build one with it, and how to start
/// `command` under mpirun.
#[cfg(not(feature = "mpi"))]
pub fn without_mpi(command: &str) -> Failure {
    crate::failure::bad_input(format!(
        "--distributed: this fuse was built without MPI. Build it with `cargo build --release --features mpi` \
         (needs an MPI library, e.g. Debian's libopenmpi-dev and openmpi-bin, and libclang-dev) and start it \
         with `mpirun -n R {command} --distributed`"
    ))
}

#[cfg(feature = "mpi")]
pub use with_mpi::{agree, on_ranks, run_script};

/// A failure every rank has, said by rank 0 alone, before any rank exits: mpirun stops the
/// other ranks once one exits with an error, so a message every rank printed came once per
/// rank, or not at all.
pub fn said_once(comm: &dyn Communicator, f: Failure) -> Failure {
    if comm.rank() == 0 {
        crate::failure::print(&f, Some(crate::failure::USE_THE_CPU));
    }
    // Standard error is unbuffered: rank 0's line is out when the others pass this.
    let _ = comm.all_gather_byte(0);
    Failure {
        code: f.code,
        message: String::new(),
    }
}

#[cfg(feature = "mpi")]
mod with_mpi {
    use std::collections::BTreeMap;
    use std::ops::Range;
    use std::path::PathBuf;
    use std::sync::Arc;

    use fuse::distributed::{
        agree as agree_on, agree_on_facts, backend_fact, library_fact, script_fact, size_facts, Communicator, Fact,
        InputSource, Mpi, Stored,
    };
    use fuse::stages::fuse_core::data::try_random_input;
    use fuse::stages::fuse_core::distribute::distribute;
    use fuse::stages::fuse_core::wording::list_or_none;
    use fuse::{CompileOptions, Error, Program, Sizes};

    use crate::distributed::said_once;
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

    pub fn run_script(program: Result<Program, Failure>, options: &RunOptions) -> Result<(), Failure> {
        on_ranks(|comm| run_ranks(comm, program, options))
    }

    /// `body` as this rank of the processes mpirun started; its failure, which must be every
    /// rank's (agreed), said once.
    pub fn on_ranks(body: impl FnOnce(&Mpi) -> Result<(), Failure>) -> Result<(), Failure> {
        let comm = Mpi::init().map_err(failure)?;
        body(&comm).map_err(|f| said_once(&comm, f))
    }

    fn run_ranks(comm: &Mpi, program: Result<Program, Failure>, options: &RunOptions) -> Result<(), Failure> {
        let program = &agree(comm, program.map_err(|f| f.message))?;
        if comm.rank() == 0 {
            crate::args::warn(program);
        }
        if comm.rank() == 0 && !options.plan_sizes.is_empty() {
            eprintln!("note: --plan-size applies to runs in one process: ignored with --distributed");
        }
        let backend = options.backend.map_or(fuse::Backend::Cpu, fuse::Backend::from);
        // The ranks must run one script with one library on one kind of backend before the
        // files it names mean the same on each.
        let facts = [
            script_fact(program),
            Fact::new("precision", format!("precision {}", program.precision)),
            library_fact(options.library),
            backend_fact(&backend),
        ];
        agree_on_facts(comm, &facts).map_err(failure)?;
        let headers = agree(comm, input_headers(program, options))?;
        if comm.rank() == 0 {
            headers.warnings.iter().for_each(|w| eprintln!("warning: {w}"));
        }
        let sizes = agree(
            comm,
            sizes::bind_run_sizes(program, &options.sizes, &headers.shapes, options.inputs.as_deref())
                .map_err(|f| f.message),
        )?;
        let drawn: BTreeMap<String, usize> = (program.inputs.iter().enumerate())
            .map(|(k, &v)| (program.values[v].variable.clone(), k))
            .filter(|(name, _)| !headers.shapes.contains_key(name))
            .collect();
        agree_on_facts(comm, &input_facts(program, &sizes, &headers, &drawn, options.seed)).map_err(failure)?;
        if let (Some(dir), 0) = (&options.outputs, comm.rank()) {
            // Before the computation: a target in the way is found at once, not after minutes.
            let names: Vec<&str> = (program.outputs.iter())
                .map(|&v| program.values[v].variable.as_str())
                .collect();
            let never = || false;
            let check = output_options(program.precision, &headers.read, options.force, &never);
            agree(comm, npy::check_outputs(&names, dir, &check))?;
        } else {
            agree(comm, Ok(()))?;
        }
        let plan = distribute(program, options.library).map_err(crate::failure::bad_input)?;
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
        let compile = CompileOptions::new().library(Arc::clone(options.library));
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
            0 => report(program, &results, options, &headers.read).map_err(|f| f.message),
            _ => Ok(()),
        };
        agree(comm, reported)
    }

    /// What the ranks must have alike once the script is: the sizes, each input's header (or
    /// that it is drawn), the seed where inputs are drawn.
    fn input_facts(
        program: &Program,
        sizes: &Sizes,
        headers: &Headers,
        drawn: &BTreeMap<String, usize>,
        seed: u64,
    ) -> Vec<Fact> {
        let mut facts = size_facts(sizes);
        for &v in &program.inputs {
            let name = &program.values[v].variable;
            let about = format!("input {name}");
            facts.push(match (headers.shapes.get(name), headers.files.get(name)) {
                (Some(shape), Some((path, dtype))) => {
                    // Compared without the folder: ranks may read copies in folders of their own.
                    let header = format!("{dtype} {}", npy::tuple(shape));
                    Fact::shown_as(about, &header, format!("{} of {header}", path.display()))
                }
                _ => Fact::new(about, format!("{name} drawn at random")),
            });
        }
        if !drawn.is_empty() {
            facts.push(Fact::new("--seed", format!("--seed {seed}")));
        }
        facts
    }

    /// `result` on every rank if it is `Ok` on all, else the first failing rank's message.
    pub fn agree<T>(comm: &Mpi, result: Result<T, String>) -> Result<T, Failure> {
        agree_on(comm, result.map_err(Error::Distribution)).map_err(failure)
    }

    /// The headers of the input files a rank reads.
    struct Headers {
        /// Of the inputs that have files in `--inputs` (not drawn by `--random`).
        shapes: Shapes,
        /// Their files and element types (`float32`, `float64`, else numpy's).
        files: BTreeMap<String, (PathBuf, String)>,
        /// Their files.
        read: Vec<PathBuf>,
        /// About files that are no input.
        warnings: Vec<String>,
    }

    /// The headers of the inputs that have files in `--inputs` (not drawn by `--random`).
    fn input_headers(program: &Program, options: &RunOptions) -> Result<Headers, String> {
        check_random_names(program, options).map_err(|f| f.message)?;
        let (mut shapes, mut files, mut read) = (BTreeMap::new(), BTreeMap::new(), Vec::new());
        if let Some(dir) = &options.inputs {
            for (name, path) in npy::input_files(program, dir)? {
                if !options.random.contains(&name) {
                    let (shape, dtype) = npy::read_header(&path)?;
                    shapes.insert(name.clone(), shape);
                    files.insert(name, (path.clone(), dtype));
                    read.push(path);
                }
            }
        }
        let warnings = check_input_files(program, options, |n| shapes.contains_key(n)).map_err(|f| f.message)?;
        Ok(Headers {
            shapes,
            files,
            read,
            warnings,
        })
    }
}
