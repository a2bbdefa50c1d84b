//! The distributed plan checked by running it: every rank's segments through the reference
//! interpreter, in lockstep, with the conversions done on all ranks' arrays at once, against
//! the whole program's result.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::data::{fill_random_inputs, relative_error, Bindings, HostArray};
use crate::reference::{evaluate, norm2};
use crate::script;
use crate::shape::Precision;

type Store = BTreeMap<LocalValue, Vec<f64>>;

/// Runs `d` over `ranks` ranks in lockstep: the outputs as rank 0 holds them.
fn simulate(d: &Distributed, sizes: &Sizes, ranks: usize, inputs: &Bindings) -> BTreeMap<String, Vec<f64>> {
    let blocks = d.blocks(sizes, ranks).unwrap();
    let mut stores: Vec<Store> = vec![Store::new(); ranks];
    let cols = |value: ValueId| match &d.program.values[value].shape {
        Shape::Matrix(_, n) => sizes.get(n).unwrap(),
        _ => 1,
    };
    let rows_of = |data: &[f64], value: ValueId, rank: usize| {
        let c = cols(value);
        let r = blocks.range(rank);
        data[r.start * c..r.end * c].to_vec()
    };
    for step in &d.steps {
        match *step {
            Step::Run(k) => {
                let segment = &d.segments[k];
                for (rank, store) in stores.iter_mut().enumerate() {
                    let local_sizes = d.local_sizes(sizes, &blocks, rank);
                    let mut bound = Bindings::new();
                    for &form in &segment.inputs {
                        let dims = d.local_shape(form).extents(&local_sizes).unwrap();
                        let len = dims.iter().product();
                        let data = store.get(&form).cloned().unwrap_or_else(|| {
                            assert!(form.local == Local::RootOnly && rank != 0, "{form:?} missing on {rank}");
                            vec![0.0; len]
                        });
                        bound.insert(d.name(form).to_string(), array(d.program.precision, dims, data));
                    }
                    let out = evaluate(&segment.program, &local_sizes, &bound).unwrap();
                    for &form in &segment.outputs {
                        store.insert(form, out[d.name(form)].to_f64());
                    }
                }
            }
            Step::Convert(c) => {
                let v = c.to.value;
                let from: Vec<Vec<f64>> = match c.from {
                    Some(l) => stores
                        .iter()
                        .map(|s| s.get(&LocalValue { value: v, local: l }).cloned().unwrap_or_default())
                        .collect(),
                    None => vec![inputs[&d.program.values[v].variable].to_f64(); ranks],
                };
                let concat: Vec<f64> = from.concat();
                let sum = |from: &[Vec<f64>]| -> Vec<f64> {
                    (0..from[0].len()).map(|i| from.iter().map(|p| p[i]).sum()).collect()
                };
                for (rank, store) in stores.iter_mut().enumerate() {
                    let made = match (c.transfer, c.to.local) {
                        (Transfer::Read | Transfer::Given, Local::Rows) => Some(rows_of(&from[rank], v, rank)),
                        (Transfer::Read | Transfer::Given, _) => Some(from[rank].clone()),
                        (Transfer::AllGather | Transfer::Gather, _) => Some(concat.clone()),
                        (Transfer::AllReduce | Transfer::Reduce, _) => Some(sum(&from)),
                        (Transfer::ReduceScatter, _) => Some(rows_of(&sum(&from), v, rank)),
                        (Transfer::AllNorm, _) => Some(
                            (0..from[0].len())
                                .map(|i| norm2(&from.iter().map(|p| p[i]).collect::<Vec<_>>()))
                                .collect(),
                        ),
                        (Transfer::Slice, _) => Some(rows_of(&from[rank], v, rank)),
                        (Transfer::KeepOnRoot, _) => Some(from[rank].clone()),
                    };
                    let made = made.filter(|_| rank == 0 || c.to.local != Local::RootOnly);
                    if let Some(data) = made {
                        store.insert(c.to, round(d.program.precision, data));
                    }
                }
            }
        }
    }
    // Results left in row blocks are put together here.
    let result = |r: &LocalValue| match r.local {
        Local::Rows => stores.iter().flat_map(|s| s[r].clone()).collect(),
        _ => stores[0][r].clone(),
    };
    d.results
        .iter()
        .map(|r| (d.program.values[r.value].variable.clone(), result(r)))
        .collect()
}

fn round(precision: Precision, data: Vec<f64>) -> Vec<f64> {
    match precision {
        Precision::F32 => data.into_iter().map(|x| x as f32 as f64).collect(),
        Precision::F64 => data,
    }
}

fn array(precision: Precision, dims: Vec<usize>, data: Vec<f64>) -> HostArray {
    HostArray::f64(dims, data).to_precision(precision)
}

fn scripts_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts"))
}

fn check_against_whole(program: &Program, sizes: &Sizes, ranks: &[usize]) -> Distributed {
    let library = Library::builtin().unwrap();
    let d = distribute(program, &library).unwrap_or_else(|e| panic!("{}: {e}", program.file));
    check_plan(&d, sizes, ranks);
    d
}

fn check_plan(d: &Distributed, sizes: &Sizes, ranks: &[usize]) {
    let program = &d.program;
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, 7, &mut inputs);
    let whole = evaluate(program, sizes, &inputs).unwrap();
    let tolerance = match program.precision {
        Precision::F32 => 1e-5,
        Precision::F64 => 1e-12,
    };
    for &r in ranks {
        let got = simulate(d, sizes, r, &inputs);
        for (name, want) in &whole {
            let error = relative_error(&got[name], &want.to_f64());
            assert!(
                error < tolerance,
                "{} over {r} ranks at {sizes}: `{name}` off by {error:e}\n{d}",
                program.file
            );
        }
    }
}

#[test]
fn every_bundled_script_over_ranks_matches_the_whole_program() {
    let library = Library::builtin().unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(scripts_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let program = script::load(&path, &library).unwrap();
        let overrides: Vec<(String, usize)> = program
            .sizes
            .iter()
            .enumerate()
            .map(|(k, (s, _))| (s.to_string(), [37, 23, 11][k % 3]))
            .collect();
        let sizes = program.bind_sizes(&overrides).unwrap();
        check_against_whole(&program, &sizes, &[1, 2, 3, 5]);
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} scripts found");
}

/// A square matrix read both ways, partial sums needed whole and by rows, a norm and a dot of
/// row blocks, a term added once (`b·y` of `gemtv`), and re-assigned names.
const SOLVER_STEP: &str = "
name: step
precision: f64
sizes: {n: 29}
inputs: {A: [n, n], p: [n], r: [n], alpha: scalar}
outputs: [q, s, t, rho, nr, x]
calls:
  - q = dgemv(A, p)
  - s = dgemtv(A, r)
  - t = dgemv(A, s)
  - q = daxpy(alpha, s, q)
  - rho = ddot(q, r)
  - nr = dnrm2(t)
  - x = dgemtv(alpha, A, q, rho, s)
";

#[test]
fn a_solver_step_with_every_conversion_matches_the_whole_program() {
    let library = Library::builtin().unwrap();
    let program = script::parse("step.yaml", SOLVER_STEP, &library).unwrap();
    let sizes = program.bind_sizes(&[]).unwrap();
    let d = check_against_whole(&program, &sizes, &[1, 2, 3, 4, 7, 29]);
    let transfers: Vec<Transfer> = d
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Convert(c) => Some(c.transfer),
            Step::Run(_) => None,
        })
        .collect();
    for t in [
        Transfer::AllReduce,
        Transfer::AllNorm,
        Transfer::Gather,
        Transfer::Slice,
    ] {
        assert!(transfers.contains(&t), "no {t:?} in\n{d}");
    }
    // `x`'s `+ rho·s` term is added by rank 0 alone.
    assert!(d.segments.iter().any(|s| s.script.contains("rho_root")), "{d}");
}

#[test]
fn bicgk_reads_its_rows_once_and_communicates_once_per_output() {
    let library = Library::builtin().unwrap();
    let program = script::load(&scripts_dir().join("bicgk.yaml"), &library).unwrap();
    let d = distribute(&program, &library).unwrap();
    assert_eq!(d.segments.len(), 1, "{d}");
    let a = program.value("A").unwrap();
    assert_eq!(d.distributions[a], Distribution::Rows);
    assert_eq!(
        d.distributions[program.value("s").unwrap()],
        Distribution::Partial(ReduceOp::Sum)
    );
    let communicating: Vec<Transfer> = d
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Convert(c) if c.transfer != Transfer::Read => Some(c.transfer),
            _ => None,
        })
        .collect();
    assert_eq!(communicating, [Transfer::Gather, Transfer::Reduce], "{d}");
    assert!(
        d.segments[0].script.contains("A: [m_local, n]"),
        "{}",
        d.segments[0].script
    );
}

#[test]
fn matrices_with_different_row_counts_are_refused_with_the_reason() {
    let library = Library::builtin().unwrap();
    let text = "sizes: {m: 4, n: 5}\ninputs: {A: [m, n], B: [n, m], x: [n]}\noutputs: [y, z]\ncalls:\n  - y = sgemv(A, x)\n  - z = sgemtv(B, x)";
    let program = script::parse("two.yaml", text, &library).unwrap();
    let err = distribute(&program, &library).unwrap_err().to_string();
    assert!(
        err.contains("two.yaml") && err.contains("different row counts"),
        "{err}"
    );
}

#[test]
fn more_ranks_than_rows_is_an_error_naming_both() {
    let library = Library::builtin().unwrap();
    let program = script::load(&scripts_dir().join("bicgk.yaml"), &library).unwrap();
    let d = distribute(&program, &library).unwrap();
    let sizes = program.bind_sizes(&[("m".into(), 3)]).unwrap();
    let err = d.blocks(&sizes, 4).unwrap_err();
    assert!(err.contains("3 rows") && err.contains("4 ranks"), "{err}");
}

#[test]
fn held_inputs_in_either_form_give_the_whole_programs_results_left_distributed() {
    let library = Library::builtin().unwrap();
    let program = script::parse("step.yaml", SOLVER_STEP, &library).unwrap();
    let sizes = program.bind_sizes(&[]).unwrap();
    // Every way of holding the vectors; A by rows or (a session's whole matrix) replicated.
    for choice in 0..16u32 {
        let held: Vec<Distribution> = (program.inputs.iter().enumerate())
            .map(|(k, &v)| match program.values[v].shape {
                Shape::Scalar => Distribution::Replicated,
                _ if choice & (1 << k) != 0 => Distribution::Rows,
                _ => Distribution::Replicated,
            })
            .collect();
        let d = distribute_held(&program, &library, &held).unwrap();
        for r in &d.results {
            let want = match d.distributions[r.value] {
                Distribution::Rows => Local::Rows,
                _ => Local::Whole,
            };
            assert_eq!(r.local, want, "{d}");
        }
        check_plan(&d, &sizes, &[1, 2, 3, 5]);
    }
}

/// A call whose ranks' shares cannot be added up is refused at its line, saying why.
#[test]
fn a_formula_that_is_not_linear_in_its_sum_over_rows_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let function = |name: &str, formula: &str| {
        let text = format!(
            "name: {name}\ndescription: test\nkind: nested_reduce\nforms:\n  - signature: (A[m,n], x[m]) -> [n]\n    formula: {formula}\n"
        );
        std::fs::write(dir.path().join(format!("{name}.yaml")), text).unwrap();
    };
    function("absgemtv", "out[j] = abs(sum(i, A[i,j] * x[i]))");
    function("shiftgemtv", "out[j] = sum(i, A[i,j] * x[i]) + 1.0");
    let library = Library::load(dir.path()).unwrap();
    for (callee, why) in [
        ("sabsgemtv", "is not a sum over the split rows"),
        ("sshiftgemtv", "is not a sum over the split rows"),
    ] {
        let text = format!(
            "sizes: {{m: 4, n: 3}}\ninputs: {{A: [m, n], r: [m]}}\noutputs: [s]\ncalls:\n  - s = {callee}(A, r)"
        );
        let program = script::parse("odd.yaml", &text, &library).unwrap();
        let err = distribute(&program, &library).unwrap_err().to_string();
        assert!(
            err.starts_with("odd.yaml:") && err.contains("cannot distribute `s = ") && err.contains(why),
            "{err}"
        );
    }
}

#[test]
fn matrices_made_from_vectors_lie_in_row_blocks() {
    // B = u₁v₁ᵀ + u₂v₂ᵀ and a·B: each rank makes its own rows from its rows of u₁, u₂.
    let text = "precision: f64\nsizes: {m: 37, n: 23}\ninputs: {u1: [m], v1: [n], u2: [m], v2: [n], a: scalar}\noutputs: [B, C]\ncalls:\n  - B1 = douter(u1, v1)\n  - B = dger(u2, v2, B1)\n  - C = dmscal(a, B)\n";
    let library = Library::builtin().unwrap();
    let program = script::parse("rank2.yaml", text, &library).unwrap();
    let sizes = program.bind_sizes(&[]).unwrap();
    let d = check_against_whole(&program, &sizes, &[1, 2, 3, 5, 37]);
    let text = d.to_string();
    assert!(text.contains("B        [m, n]     row blocks"), "{d}");
}

#[test]
fn a_triangular_sum_is_refused_with_the_reason() {
    let library = Library::builtin().unwrap();
    let text = "sizes: {n: 8}\ninputs: {A: [n, n], x: [n]}\noutputs: [y]\ncalls:\n  - y = strmv_upper(A, x)\n";
    let program = script::parse("t.yaml", text, &library).unwrap();
    let err = distribute(&program, &library).unwrap_err().to_string();
    assert!(
        err.contains("t.yaml:5:5: cannot distribute `y = strmv_upper(A, x)`: a sum over part of a dimension"),
        "{err}"
    );
}
