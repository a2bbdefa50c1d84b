use std::ops::Range;
use std::path::Path;

use fuse_core::data::{fill_random_inputs, relative_error};
use fuse_core::distribute::distribute;
use fuse_core::reference::evaluate;
use fuse_core::{script, Bindings, HostData, Library, Precision, Program, Sizes};

use super::*;

fn scripts() -> Vec<Program> {
    let library = Library::builtin().unwrap();
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts"));
    let mut paths: Vec<_> = (std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths.iter().map(|p| script::load(p, &library).unwrap()).collect()
}

/// Awkward sizes: every symbol a different prime-ish count.
fn awkward(program: &Program) -> Sizes {
    let overrides: Vec<(String, usize)> = (program.sizes.iter().enumerate())
        .map(|(k, (s, _))| (s.to_string(), [67, 45, 13][k % 3]))
        .collect();
    program.bind_sizes(&overrides).unwrap()
}

/// Bundled script `name` at awkward sizes, with random inputs.
fn bundled(name: &str) -> (Program, Sizes, Bindings) {
    let program = scripts().into_iter().find(|p| p.name == name).unwrap();
    let sizes = awkward(&program);
    let mut inputs = Bindings::new();
    fill_random_inputs(&program, &sizes, 3, &mut inputs);
    (program, sizes, inputs)
}

fn run_over(
    ranks: usize,
    program: &Program,
    sizes: &Sizes,
    backend: &Backend,
    inputs: &Bindings,
) -> Vec<Result<Bindings>> {
    let library = Library::builtin().unwrap();
    let plan = distribute(program, &library).unwrap();
    LocalRanks::new(ranks).run(|comm| run(&comm, &plan, sizes, backend, &CompileOptions::new(), inputs))
}

/// On the CPU, and on the emulated device (each rank's forms in device buffers, the
/// collectives through the host).
#[test]
fn every_bundled_script_runs_over_ranks_as_the_whole_program_computes() {
    for (program, backend) in scripts()
        .into_iter()
        .flat_map(|p| [(p.clone(), Backend::Cpu), (p, Backend::Emulate)])
    {
        let sizes = awkward(&program);
        let mut inputs = Bindings::new();
        fill_random_inputs(&program, &sizes, 3, &mut inputs);
        let want = evaluate(&program, &sizes, &inputs).unwrap();
        let tolerance = match program.precision {
            Precision::F32 => 2e-5,
            Precision::F64 => 1e-12,
        };
        for ranks in [1, 2, 3, 4] {
            let mut results = run_over(ranks, &program, &sizes, &backend, &inputs);
            for other in &results[1..] {
                assert!(
                    other.as_ref().is_ok_and(|o| o.is_empty()),
                    "{}: a rank other than 0 returned {other:?}",
                    program.file
                );
            }
            let got = results.swap_remove(0).unwrap();
            for (name, w) in &want {
                let error = relative_error(&got[name].to_f64(), &w.to_f64());
                assert!(
                    error < tolerance,
                    "{} over {ranks} ranks on {backend}: `{name}` off by {error:e}",
                    program.file
                );
                assert_eq!(got[name].dims, w.dims);
            }
        }
    }
}

/// Outputs of `program` over 1–4 ranks on the CPU and the emulated device against the
/// single-process reference, to `tolerance`.
fn check_over_ranks(program: &Program, sizes: &Sizes, tolerance: f64) {
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, 7, &mut inputs);
    let want = evaluate(program, sizes, &inputs).unwrap();
    for backend in [Backend::Cpu, Backend::Emulate] {
        for ranks in [1, 2, 3, 4] {
            let got = run_over(ranks, program, sizes, &backend, &inputs)
                .swap_remove(0)
                .unwrap();
            for (name, w) in &want {
                let error = relative_error(&got[name].to_f64(), &w.to_f64());
                assert!(
                    error < tolerance,
                    "{} over {ranks} ranks on {backend}: `{name}` off by {error:e}",
                    program.name
                );
            }
        }
    }
}

/// Scalar calls over ranks: each rank computes a scalar call, inlined or stored, from the
/// reductions combined over every rank (a rank's partial dot would give another quotient),
/// and a stored one that is an output comes back once.
#[test]
fn scalar_calls_over_ranks_read_the_combined_reductions() {
    let library = Library::builtin().unwrap();
    let text = "name: scalars\nprecision: f64\nsizes: {n: 53}\ninputs: {A: [n, n], x: [n], y: [n], a: scalar}\n\
                outputs: [q, z, w, big]\ncalls:\n  - d = ddot(x, y)\n  - e = dnrm2(y)\n  - q = ddiv(d, e)\n\
                \x20 - z = daxpy(q, x, y)\n  - g = dgemv(A, z)\n  - h = ddot(g, g)\n  - s = dsqrt(h)\n\
                \x20 - r = drecip(s)\n  - w = dscal(r, g)\n  - big = dmax(q, a)\n";
    let program = script::parse("scalars.yaml", text, &library).unwrap();
    assert!(
        (program.calls.iter()).any(|c| c.args.iter().any(|a| matches!(a, fuse_core::Arg::Scalar(_)))),
        "the rewrite stage inlines scalar calls"
    );
    check_over_ranks(&program, &program.sizes, 1e-12);
    for name in ["bicgstab", "normalize"] {
        for precision in [Precision::F32, Precision::F64] {
            let program = fuse_core::testing::sequence(name, precision);
            let sizes = program.bind_sizes(&[("n".into(), 61)]).unwrap();
            let tolerance = if precision == Precision::F32 { 1e-4 } else { 1e-11 };
            check_over_ranks(&program, &sizes, tolerance);
        }
    }
}

/// Fails on one rank's rows of one input, like a short file.
struct FailingOn {
    rank_rows: Range<usize>,
    inputs: Bindings,
}

impl InputSource for FailingOn {
    fn read(&self, name: &str, rows: Option<Range<usize>>) -> Result<Stored<'_>> {
        if rows.as_ref() == Some(&self.rank_rows) {
            return Err(Error::Distribution(format!(
                "{name}.npy: ends before row {}",
                self.rank_rows.end
            )));
        }
        self.inputs.read(name, rows)
    }
}

#[test]
fn a_rank_that_fails_to_read_makes_every_rank_return_its_error() {
    let (program, sizes, inputs) = bundled("bicgk");
    let library = Library::builtin().unwrap();
    let plan = distribute(&program, &library).unwrap();
    let blocks = plan.blocks(&sizes, 3).unwrap();
    let source = FailingOn {
        rank_rows: blocks.range(2),
        inputs,
    };
    let results =
        LocalRanks::new(3).run(|comm| run(&comm, &plan, &sizes, &Backend::Cpu, &CompileOptions::new(), &source));
    for result in results {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Rank { rank: 2, ranks: 3, .. }), "{err:?}");
        assert!(
            err.to_string().starts_with("rank 2 of 3: A.npy: ends before row"),
            "{err}"
        );
        assert!(err.is_bad_input(), "a short input file is bad input: {err:?}");
    }
}

#[test]
fn more_ranks_than_rows_is_an_error_on_every_rank() {
    let program = scripts().into_iter().find(|p| p.name == "bicgk").unwrap();
    let sizes = program.bind_sizes(&[("m".into(), 2), ("n".into(), 5)]).unwrap();
    let mut inputs = Bindings::new();
    fill_random_inputs(&program, &sizes, 3, &mut inputs);
    for result in run_over(3, &program, &sizes, &Backend::Cpu, &inputs) {
        let err = result.unwrap_err().to_string();
        assert!(err.contains("cannot split 2 rows (`m`) over 3 ranks"), "{err}");
    }
}

#[test]
fn links_are_measured_between_ranks_and_one_rank_is_refused() {
    for links in LocalRanks::new(2).run(|comm| measure_links(&comm)) {
        let links = links.unwrap();
        assert!(links.latency_us > 0.0 && links.bandwidth_gbs > 0.0, "{links:?}");
        assert!(links.measured_on.starts_with("2 ranks on "), "{links:?}");
    }
    let one = LocalRanks::new(1).run(|comm| measure_links(&comm));
    assert!(one[0].as_ref().unwrap_err().to_string().contains("mpirun -n R"));
}

/// A rank that panics does not leave the others waiting: they get an error, and the panic
/// reaches the caller.
#[test]
fn a_panicking_rank_breaks_the_others_out_of_their_collective() {
    let caught = std::panic::catch_unwind(|| {
        LocalRanks::new(3).run(|comm| {
            if comm.rank() == 1 {
                panic!("rank 1 fails");
            }
            let mut one = HostData::F64(vec![1.0]);
            comm.all_reduce_sum(&mut one)
        })
    });
    let panic = caught.unwrap_err();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"rank 1 fails"));
}

/// On a device, a rank uploads what it read once, runs every segment on device buffers, and
/// downloads only what its collectives pass through the host and, on rank 0, the results.
#[test]
fn ranks_on_a_device_keep_their_forms_there_between_segments() {
    let (program, sizes, inputs) = bundled("bicgk");
    let plan = distribute(&program, &Library::builtin().unwrap()).unwrap();
    let (m, n) = (sizes.get("m").unwrap(), sizes.get("n").unwrap());
    let runs = LocalRanks::new(2).run(|comm| {
        let compiled = compile(&comm, plan.clone(), &sizes, &Backend::Emulate, &CompileOptions::new()).unwrap();
        let link = compiled.link().map(Link::describe);
        let (_, times) = compiled.run_timed(&comm, &inputs).unwrap();
        (link, times, compiled.rows(comm.rank()).len())
    });
    let bytes = program.precision.bytes();
    for (rank, (link, times, rows)) in runs.into_iter().enumerate() {
        assert!(link.is_some_and(|l| l.starts_with("through the host")));
        // Up: its rows of A and r, all of p; on rank 0 the sums of s and the gathered q.
        // Down: its partial s and its rows of q for the collectives; on rank 0 the results.
        let root = if rank == 0 { (n + m) as u64 } else { 0 };
        assert_eq!(
            times.to_device,
            bytes * ((rows * n + n + rows) as u64 + root),
            "rank {rank}"
        );
        assert_eq!(times.from_device, bytes * ((n + rows) as u64 + root), "rank {rank}");
    }
}
