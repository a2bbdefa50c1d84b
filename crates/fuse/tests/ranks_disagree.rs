//! Ranks of a distributed session that do not make the same calls, on the same extents, with
//! the same scalars, get one error on every rank naming which rank has what — not a result
//! mixed from their rows, nor a rank left waiting in a collective.

use fuse::distributed::LocalRanks;
use fuse::{Backend, Session};

const M: usize = 6;
const N: usize = 3;

/// `gather(A · (alpha(rank) · p))` over two ranks, each holding its rows of A, with a first
/// flush at `alpha = 1` where `twice` (so that the second's alpha is a scalar passed as a
/// value, not a literal in the calls).
fn scaled_product(alpha: impl Fn(usize) -> f64 + Sync, twice: bool) -> Vec<Result<Vec<f64>, String>> {
    LocalRanks::new(2).run(|comm| {
        let rank = fuse::distributed::Communicator::rank(&comm);
        let s = Session::<f64>::distributed(comm, Backend::Cpu).map_err(|e| e.to_string())?;
        let rows = s.rows(M).unwrap();
        let a = s.matrix_rows(M, N, vec![1.0; rows.len() * N]).unwrap();
        let p = s.vector(vec![1.0; N]).unwrap();
        let product = |alpha: f64| {
            let q = s.dgemv(&a, &s.dscal(alpha, &p)?)?;
            s.gather(&q)
        };
        if twice {
            product(1.0).map_err(|e| e.to_string())?;
        }
        product(alpha(rank)).map_err(|e| e.to_string())
    })
}

#[test]
fn ranks_that_scale_by_other_literals_are_told_which() {
    let results = scaled_product(|rank| [2.0, 3.0][rank], false);
    let want = "the ranks disagree: rank 0 has call 1 `v1 = dscal(2.0, v0)`, rank 1 has call 1 `v1 = dscal(3.0, v0)`";
    for result in results {
        let err = result.unwrap_err();
        assert!(err.ends_with(want), "{err}");
    }
    let agreed = scaled_product(|_| 2.0, false);
    for result in agreed {
        assert_eq!(result.unwrap(), vec![2.0 * N as f64; M]);
    }
}

/// A literal that changed since the first flush is passed as a scalar value: its value is
/// checked all the same.
#[test]
fn ranks_that_pass_other_scalars_are_told_which() {
    let results = scaled_product(|rank| [2.0, 3.0][rank], true);
    for result in results {
        let err = result.unwrap_err();
        assert!(
            err.ends_with("the ranks disagree: rank 0 has input v0 = 2.0, rank 1 has input v0 = 3.0"),
            "{err}"
        );
    }
    for result in scaled_product(|_| 2.0, true) {
        assert_eq!(result.unwrap(), vec![2.0 * N as f64; M]);
    }
}

#[test]
fn ranks_that_hold_other_extents_are_told_which() {
    let results = LocalRanks::new(3).run(|comm| {
        let rank = fuse::distributed::Communicator::rank(&comm);
        let s = Session::<f64>::distributed(comm, Backend::Cpu).unwrap();
        let len = if rank == 0 { 12 } else { 10 };
        let x = s.vector_rows(len, vec![1.0; s.rows(len).unwrap().len()]).unwrap();
        let norm = s.dnrm2(&x).unwrap();
        s.read_scalar(&norm).map_err(|e| e.to_string())
    });
    for result in results {
        let err = result.unwrap_err();
        assert!(
            err.contains(
                "rank 0 has input v0 of [12] in row blocks, ranks 1 and 2 have input v0 of [10] in row blocks"
            ),
            "{err}"
        );
    }
}

#[test]
fn ranks_on_other_backends_are_told_which_when_the_session_is_made() {
    let results = LocalRanks::new(2).run(|comm| {
        let backend = match fuse::distributed::Communicator::rank(&comm) {
            0 => Backend::Cpu,
            _ => Backend::Reference,
        };
        Session::<f32>::distributed(comm, backend)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    for result in results {
        assert_eq!(
            result.unwrap_err(),
            "the ranks disagree: rank 0 has backend cpu, rank 1 has backend reference"
        );
    }
}

/// A gather of values of other extents would all-gather other counts.
#[test]
fn ranks_that_gather_other_extents_are_told_which() {
    let results = LocalRanks::new(3).run(|comm| {
        let rank = fuse::distributed::Communicator::rank(&comm);
        let s = Session::<f32>::distributed(comm, Backend::Cpu).unwrap();
        let len = if rank == 0 { 12 } else { 10 };
        let x = s.vector_rows(len, vec![1.0; s.rows(len).unwrap().len()]).unwrap();
        s.gather(&x).map_err(|e| e.to_string())
    });
    for result in results {
        assert_eq!(
            result.unwrap_err(),
            "the ranks disagree: rank 0 has a gather of [12] in row blocks, \
             ranks 1 and 2 have a gather of [10] in row blocks"
        );
    }
}

/// `fuse::distributed::run` at other sizes on one rank: told, not an abort in a collective.
#[test]
fn ranks_that_run_a_plan_at_other_sizes_are_told_which() {
    use fuse::distributed::{run, Communicator};
    use fuse::stages::fuse_core::{data::fill_random_inputs, distribute::distribute, script};
    use fuse::{Bindings, CompileOptions, Library};

    let library = Library::builtin().unwrap();
    let text = "precision: f64\nsizes: {m: 7, n: 5}\ninputs: {A: [m, n], p: [n], r: [m]}\n\
                outputs: [q, s]\ncalls:\n  - q = dgemv(A, p)\n  - s = dgemtv(A, r)";
    let program = script::parse("bicgk.yaml", text, &library).unwrap();
    let plan = distribute(&program, &library).unwrap();
    let results = LocalRanks::new(3).run(|comm| {
        let m = if comm.rank() == 0 { 12 } else { 10 };
        let sizes = program.bind_sizes(&[("m".into(), m)]).unwrap();
        let mut inputs = Bindings::new();
        fill_random_inputs(&program, &sizes, 1, &mut inputs);
        let ran = run(&comm, &plan, &sizes, &Backend::Cpu, &CompileOptions::new(), &inputs);
        ran.map(drop).map_err(|e| e.to_string())
    });
    for result in results {
        assert_eq!(
            result.unwrap_err(),
            "the ranks disagree: rank 0 has m = 12, ranks 1 and 2 have m = 10"
        );
    }
}
