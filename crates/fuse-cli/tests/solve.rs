//! `fuse solve` from the outside: a system from .npy files solved, the solution written, how it
//! ended said, and clear errors for a system that does not fit.

mod common;

use std::path::Path;

use common::{fuse, numbers, read_f32, stderr, write_f32, write_npy};

/// A diagonally dominant n×n system in f32 (A, b), written to `dir`.
fn system(dir: &Path, n: usize) -> (Vec<f32>, Vec<f32>) {
    let mut a = numbers(n * n, 1);
    for i in 0..n {
        a[i * n + i] += 2.0 * (n as f32).sqrt();
    }
    let b = numbers(n, 2);
    write_f32(&dir.join("A.npy"), &[n, n], &a);
    write_f32(&dir.join("b.npy"), &[n], &b);
    (a, b)
}

/// ‖b − A·x‖ / ‖b‖ in f64.
fn relative_residual(a: &[f32], b: &[f32], x: &[f32]) -> f64 {
    let n = b.len();
    let r: f64 = (0..n)
        .map(|i| {
            let ax: f64 = (0..n).map(|j| a[i * n + j] as f64 * x[j] as f64).sum();
            (b[i] as f64 - ax).powi(2)
        })
        .sum();
    (r / b.iter().map(|&v| (v as f64).powi(2)).sum::<f64>()).sqrt()
}

#[test]
fn each_method_solves_a_system_and_writes_x() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = system(dir.path(), 61);
    for method in ["bicg", "bicgstab", "gmres", "cg"] {
        let out = dir.path().join(format!("out-{method}"));
        let mut args = vec!["solve", method, "--backend", "cpu", "--rtol", "1e-4"];
        let (inputs, outputs) = (dir.path().to_str().unwrap(), out.to_str().unwrap());
        args.extend(["--inputs", inputs, "--outputs", outputs]);
        if method == "cg" {
            // A is not symmetric: CG runs on, and says it did not converge.
            args.extend(["--maxiter", "3"]);
        }
        let run = fuse(&args);
        let err = stderr(&run);
        let x = read_f32(&out.join("x.npy"));
        match method {
            "cg" => {
                assert_eq!(run.status.code(), Some(1), "{err}");
                assert!(
                    err.contains("cg: not converged after 3 iterations (--maxiter)"),
                    "{err}"
                );
                assert!(x.iter().all(|v| v.is_finite()));
            }
            _ => {
                assert!(run.status.success(), "{err}");
                assert!(err.contains(&format!("{method}: converged in ")), "{err}");
                assert!(relative_residual(&a, &b, &x) <= 2e-4, "{method}");
            }
        }
    }
}

#[test]
fn a_system_that_does_not_fit_is_refused_before_solving() {
    let dir = tempfile::tempdir().unwrap();
    system(dir.path(), 5);
    let inputs = dir.path().to_str().unwrap();
    let solve = |method: &str| fuse(&["solve", method, "--inputs", inputs, "--backend", "cpu"]);
    // b of another precision than A.
    write_npy(&dir.path().join("b.npy"), "<f8", &[5], &[0u8; 40]);
    let run = solve("bicg");
    assert_eq!(run.status.code(), Some(2));
    assert!(
        stderr(&run).contains("b.npy: float64, but A is float32: give the system in one precision"),
        "{}",
        stderr(&run)
    );
    // A not square.
    write_f32(&dir.path().join("A.npy"), &[5, 4], &[1.0; 20]);
    let run = solve("cg");
    assert_eq!(run.status.code(), Some(2));
    assert!(
        stderr(&run).contains("A has shape (5, 4): expected a square matrix"),
        "{}",
        stderr(&run)
    );
    // b of another length.
    write_f32(&dir.path().join("A.npy"), &[5, 5], &[1.0; 25]);
    write_f32(&dir.path().join("b.npy"), &[4], &[1.0; 4]);
    let run = solve("bicgstab");
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("b has length 4, A is 5×5"), "{}", stderr(&run));
}

#[cfg(not(feature = "mpi"))]
#[test]
fn distributed_without_mpi_says_how_to_build_it_and_start_the_solve() {
    let dir = tempfile::tempdir().unwrap();
    system(dir.path(), 5);
    let run = fuse(&["solve", "cg", "--inputs", dir.path().to_str().unwrap(), "--distributed"]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(
        err.contains("built without MPI") && err.contains("mpirun -n R fuse solve METHOD --distributed"),
        "{err}"
    );
}
