//! The BiCG example's solver converges, and from its third iteration on compiles nothing.

#[path = "../examples/bicg/solver.rs"]
mod solver;

use fuse::{Backend, Session};

#[test]
fn bicg_converges_on_a_nonsymmetric_system() {
    let system = solver::generate(200, 11);
    assert!(
        (0..200).any(|i| system.a[i * 200 + 1] != system.a[200 + i]),
        "A is nonsymmetric"
    );
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let solution = solver::bicg(&s, &system, 1e-10, 100, |_, _| {}).unwrap();
    let last = *solution.residuals.last().unwrap();
    assert!(last < 1e-10, "recurrence residual {last:e}");
    let truth = solver::true_residual(&system, &solution.x);
    assert!(truth < 1e-6, "true residual {truth:e}");
}

#[test]
fn bicg_iterations_after_the_second_compile_nothing() {
    let system = solver::generate(100, 3);
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let mut compilations = Vec::new();
    let solution = solver::bicg(&s, &system, 1e-14, 8, |_, _| compilations.push(s.stats().compilations)).unwrap();
    assert!(solution.residuals.len() >= 5, "{:?}", solution.residuals);
    // Iterations 1 and 2 see r = r̃ = p = p̃ = b as one shared value, so their graphs differ.
    let steady = compilations[2];
    assert!(compilations[3..].iter().all(|&c| c == steady), "{compilations:?}");
    assert!(
        s.stats().cache_hits >= 2 * (compilations.len() as u64 - 3),
        "{:?}",
        s.stats()
    );
}
