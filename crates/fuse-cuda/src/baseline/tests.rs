//! The translation to cuBLAS calls, checked without a GPU: the calls a cuBLAS user writes for
//! each sequence, and their results (cuBLAS semantics on the host) against the reference.

use fuse_core::data::{fill_random_inputs, relative_error};
use fuse_core::testing::{random_program, sequence, sizes_mn, SEQUENCES};
use fuse_core::{Bindings, Library, Precision, Program};

use super::*;

fn describe(name: &str) -> String {
    let program = sequence(name, Precision::F32);
    let sizes = sizes_mn(&program, 67, 45);
    Baseline::new(&program, &sizes).unwrap().describe(&program)
}

#[test]
fn each_sequence_is_written_as_a_cublas_user_would() {
    let expected = [
        ("axpydot", "copy w→z; axpy(-1·alpha, v, z); dot(z, u)→r"),
        ("atax", "gemv_T(1, A, x, 0, t); gemv_N(1, A, t, 0, y)"),
        ("bicgk", "gemv_T(1, A, p, 0, q); gemv_N(1, A, r, 0, s)"),
        ("sgemv", "copy y→z; gemv_T(alpha, A, x, beta, z)"),
        ("sgemvt", "copy z→x; gemv_N(beta, A, y, 1, x); gemv_T(alpha, A, x, 0, w)"),
        ("sscal", "scal(alpha, x)"),
        (
            "gemver",
            "copy A→B1; ger(1, v1, u1, B1); ger(1, v2, u2, B1); copy z→x; gemv_N(beta, B1, y, 1, x); gemv_T(alpha, B1, x, 0, w)",
        ),
        ("gesummv", "gemv_T(alpha, A, x, 0, t); gemv_T(beta, B, x, 1, t)"),
        ("madd", "geam(1, A, 1, B)→C"),
        ("vadd", "copy w→t; axpy(1, y, t); axpy(1, z, t)"),
        ("waxpby", "copy y→w; scal(beta, w); axpy(alpha, x, w)"),
    ];
    assert_eq!(expected.len(), SEQUENCES.len());
    for (name, want) in expected {
        assert_eq!(describe(name), want, "{name}");
    }
}

#[test]
fn row_major_matrices_are_passed_transposed() {
    let program = sequence("bicgk", Precision::F32);
    let sizes = sizes_mn(&program, 67, 45);
    let baseline = Baseline::new(&program, &sizes).unwrap();
    // A is 67×45 row-major: column-major 45×67 with leading dimension 45.
    for op in &baseline.ops {
        let BlasOp::Gemv { m, n, lda, .. } = *op else {
            panic!("{op:?}")
        };
        assert_eq!((m, n, lda), (45, 67, 45));
    }
    let a = program.value("A").unwrap();
    assert_eq!(baseline.buffers[&a], 67 * 45);
}

#[test]
fn traffic_counts_what_cublas_moves() {
    let n = 1000;
    let traffic = |name: &str| {
        let program = sequence(name, Precision::F32);
        let sizes = sizes_mn(&program, n, n);
        Baseline::new(&program, &sizes).unwrap().traffic_bytes(&program) / 4
    };
    let n = n as u64;
    // copy (2n) + axpy (3n) + dot (2n + the result).
    assert_eq!(traffic("axpydot"), 7 * n + 1);
    // copy (2n) + two axpy (3n each).
    assert_eq!(traffic("vadd"), 8 * n);
    // Two gemv reading A, x and writing y.
    assert_eq!(traffic("bicgk"), 2 * (n * n + 2 * n));
    assert_eq!(traffic("madd"), 3 * n * n);
}

/// Runs the baseline's cuBLAS calls on the host and the reference; compares every output.
fn check(program: &Program, m: usize, n: usize, seed: u64) {
    let sizes = sizes_mn(program, m, n);
    let baseline = Baseline::new(program, &sizes).unwrap_or_else(|e| panic!("{}: {e}", program.name));
    let mut inputs = Bindings::new();
    fill_random_inputs(program, &sizes, seed, &mut inputs);
    let want = fuse_core::reference::evaluate(program, &sizes, &inputs).unwrap();
    let got = host::run(&baseline, program, &sizes, &inputs);
    // The host runs the calls in f64; the reference rounds each call's result to the script's
    // precision.
    let tolerance = match program.precision {
        fuse_core::Precision::F32 => 1e-6,
        fuse_core::Precision::F64 => 1e-12,
    };
    for (name, w) in &want {
        let error = relative_error(&got[name].to_f64(), &w.to_f64());
        assert!(
            error < tolerance,
            "{} {m}x{n} `{name}`: error {error:e}\n{}",
            program.name,
            baseline.describe(program)
        );
    }
}

#[test]
fn the_cublas_calls_compute_each_sequence() {
    for name in SEQUENCES {
        let program = sequence(name, Precision::F64);
        for (seed, (m, n)) in [(67, 45), (1, 300), (300, 1)].into_iter().enumerate() {
            check(&program, m, n, seed as u64);
        }
    }
}

#[test]
fn the_cublas_calls_compute_random_scripts() {
    let library = Library::builtin().unwrap();
    for seed in 0..40 {
        let program = random_program(&library, seed, 1 + seed as usize % 7).unwrap();
        check(&program, 23, 17, seed);
    }
}

#[test]
fn a_scaling_read_twice_is_not_folded() {
    let library = Library::builtin().unwrap();
    let text = "sizes: {n: 8}\ninputs: {v: [n], w: [n], alpha: scalar}\noutputs: [z, y]\ncalls:\n  - t = sscal(alpha, v)\n  - z = saxpy(2.0, t, w)\n  - y = sadd(t, w)\n";
    let program = fuse_core::script::parse("t.yaml", text, &library).unwrap();
    let baseline = Baseline::new(&program, &program.sizes).unwrap();
    assert_eq!(
        baseline.describe(&program),
        "copy v→t; scal(alpha, t); copy w→z; axpy(2, t, z); axpy(1, w, t)"
    );
    check(&program, 1, 8, 3);
}

#[test]
fn functions_without_a_cublas_twin_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("twice.yaml"),
        "name: twice\nkind: map\nforms:\n  - signature: (x[n]) -> [n]\n    formula: out[i] = x[i] + x[i]\n",
    )
    .unwrap();
    let library = Library::load(dir.path()).unwrap();
    let text = "sizes: {n: 8}\ninputs: {x: [n]}\noutputs: [y]\ncalls:\n  - y = stwice(x)\n";
    let program = fuse_core::script::parse("t.yaml", text, &library).unwrap();
    let err = Baseline::new(&program, &program.sizes).unwrap_err().to_string();
    assert!(err.contains("`y = stwice(x)` has no cuBLAS equivalent"), "{err}");
}

#[test]
fn scalar_calls_run_on_the_host_between_the_cublas_calls() {
    // Each inlined scalar call is computed once, where its first reader needs it.
    assert_eq!(
        describe("normalize"),
        "nrm2(x)→norm; host $0 = srecip(norm); copy x→y; scal($0, y)"
    );
    let bicgstab = describe("bicgstab");
    for computed in [
        "host $0 = sneg(sdiv(rho, sigma)); copy r→s; axpy($0, v, s)",
        "axpy($3, v, pv)",
    ] {
        assert!(bicgstab.contains(computed), "{bicgstab}");
    }
    assert_eq!(bicgstab.matches("host").count(), 5, "{bicgstab}");
    for name in ["bicgstab", "normalize"] {
        for precision in [Precision::F32, Precision::F64] {
            let program = sequence(name, precision);
            for (seed, n) in [(1, 45), (2, 7), (3, 300)] {
                check(&program, n, n, seed);
            }
        }
    }
}

#[test]
fn a_stored_scalar_call_fills_its_own_buffer() {
    let library = Library::builtin().unwrap();
    let text = "sizes: {n: 8}\ninputs: {x: [n], y: [n], alpha: scalar}\noutputs: [q, z]\ncalls:\n  - d = sdot(x, y)\n  - q = sdiv(d, alpha)\n  - z = saxpy(q, x, y)\n";
    let program = fuse_core::script::parse("t.yaml", text, &library).unwrap();
    let baseline = Baseline::new(&program, &program.sizes).unwrap();
    assert_eq!(
        baseline.describe(&program),
        "dot(x, y)→d; host *q = sdiv(d, alpha); copy y→z; axpy(*q, x, z)"
    );
    check(&program, 1, 8, 4);
}

#[test]
fn host_scalars_read_each_scalar_once_and_round_to_the_precision() {
    let library = Library::builtin().unwrap();
    let text = "sizes: {n: 8}\ninputs: {x: [n], a: scalar}\noutputs: [y]\ncalls:\n  - d = sdot(x, x)\n  - t = sdiv(a, d)\n  - u = sdiv(t, d)\n  - y = sscal(u, x)\n";
    let program = fuse_core::script::parse("t.yaml", text, &library).unwrap();
    let value = &program.calls.last().unwrap().args[0];
    assert_eq!(
        value.text(&program),
        "sdiv(sdiv(a, d), d)",
        "inlined by the rewrite stage"
    );
    let (a, d) = (program.value("a").unwrap(), program.value("d").unwrap());
    let mut reads = Vec::new();
    let mut read = |v| {
        reads.push(v);
        Ok::<f64, ()>(if v == a { 1.0 } else { 3.0 })
    };
    // (1/3 rounded to f32) / 3, rounded to f32: not 1/9 in f64.
    let third = (1.0f64 / 3.0) as f32 as f64;
    assert_eq!(
        evaluate_host_scalar(value, Precision::F32, &mut read),
        Ok((third / 3.0) as f32 as f64)
    );
    assert_eq!(reads, [a, d]);
    assert_eq!(
        evaluate_host_scalar(value, Precision::F64, |_| Ok::<f64, ()>(1.0)),
        Ok(1.0)
    );
    assert_eq!(
        evaluate_host_scalar(value, Precision::F64, |_| Err("no device")),
        Err("no device")
    );
    assert_eq!(device_reads(value, &program), [d]);
}

#[test]
fn matrices_from_vectors_are_zeroed_then_updated() {
    let library = Library::builtin().unwrap();
    let text = "precision: f64\nsizes: {m: 3, n: 5}\ninputs: {u1: [m], v1: [n], u2: [m], v2: [n], a: scalar}\noutputs: [B, C]\ncalls:\n  - B1 = douter(u1, v1)\n  - B = dger(u2, v2, B1)\n  - C = dmscal(a, B)\n";
    let program = fuse_core::script::parse("t.yaml", text, &library).unwrap();
    let baseline = Baseline::new(&program, &program.sizes).unwrap();
    assert_eq!(
        baseline.describe(&program),
        "zero B1; ger(1, v1, u1, B1); ger(1, v2, u2, B1); geam(a, B1, 0, B1)→C"
    );
    for (m, n) in [(37, 53), (1, 40), (40, 1)] {
        check(&program, m, n, 5);
    }
}

#[test]
fn triangular_products_are_trmv_on_a_copy_with_the_triangle_swapped() {
    let library = Library::builtin().unwrap();
    let text = "precision: f64\nsizes: {n: 5}\ninputs: {A: [n, n], x: [n]}\noutputs: [y, z]\ncalls:\n  - y = dtrmv_upper(A, x)\n  - z = dtrmtv_lower_unit(A, y)\n";
    let program = fuse_core::script::parse("t.yaml", text, &library).unwrap();
    let baseline = Baseline::new(&program, &program.sizes).unwrap();
    assert_eq!(
        baseline.describe(&program),
        "copy x→y; trmv_LTN(A, y); copy y→z; trmv_UNU(A, z)"
    );
    for n in [1, 37, 97] {
        check(&program, n, n, 3);
    }
}
