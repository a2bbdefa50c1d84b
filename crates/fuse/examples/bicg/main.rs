//! BiCG on a generated 500×500 nonsymmetric, diagonally dominant system, through the lazy
//! BLAS API: `cargo run --release -p fuse --example bicg [-- N]`.

mod solver;

use fuse::{Backend, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|_| format!("expected a system size, got `{arg}`"))?,
        None => 500,
    };
    let system = solver::generate(n, 2024);
    let session = Session::<f64>::new(Backend::default())?;
    println!("BiCG, n = {n}, backend {}", session.backend());
    let solution = solver::bicg(&session, &system, 1e-10, 200, |k, residual| {
        println!("iteration {k:3}  ‖r‖/‖b‖ = {residual:.3e}");
    })?;
    let stats = session.stats();
    println!(
        "{} iterations; true residual ‖b − A·x‖/‖b‖ = {:.3e}; {} flushes, {} compilations, {} cache hits",
        solution.residuals.len(),
        solver::true_residual(&system, &solution.x),
        stats.flushes,
        stats.compilations,
        stats.cache_hits
    );
    Ok(())
}
