//! On a GPU, behind `FUSE_TEST_CUDA=1` (each test says when it is skipped): the emulation test
//! matrix on the device — all 11 sequences, the five best plans (and in f64 the unfused plan),
//! odd sizes, poisoned outputs, f32 and f64 — the cuBLAS baseline of every sequence, the module
//! cache, timing and a small calibration and tuning. `fuse selftest --backend cuda` runs the
//! same matrix from the prebuilt binary where there is no Rust toolchain.

use fuse_codegen::generate::{generate, KernelGroup, Serial, Walk};
use fuse_core::data::fill_random_inputs;
use fuse_core::testing::{sequence, sizes_mn, SEQUENCES};
use fuse_core::{explore, Bindings, Library, Limits, Precision, Program, TimingTable};
use fuse_cuda::baseline::{cublas::CublasPlan, Baseline};
use fuse_cuda::cache::ModuleCache;
use fuse_cuda::calibrate::{calibrate, copy_bandwidth, to_yaml, CalibrateOptions};
use fuse_cuda::check::compare;
use fuse_cuda::timer::TimingOptions;
use fuse_cuda::tune::{tune, TuneOptions};
use fuse_cuda::{CudaPlan, Device, Replays};

const SIZES: [(usize, usize); 4] = [(67, 45), (1, 300), (300, 1), (257, 513)];

/// The GPU, when the GPU tests are asked for; says so when they are skipped.
fn gpu(test: &str) -> Option<Device> {
    if std::env::var("FUSE_TEST_CUDA").map_or(true, |v| v != "1") {
        eprintln!("{test}: skipped — set FUSE_TEST_CUDA=1 on a machine with an NVIDIA GPU to run it");
        return None;
    }
    Some(Device::open(0).unwrap_or_else(|e| panic!("FUSE_TEST_CUDA=1 but {e}")))
}

fn top_plans(program: &Program, count: usize) -> Vec<Vec<KernelGroup>> {
    let library = Library::builtin().unwrap();
    let table = TimingTable::builtin().unwrap();
    let exploration = explore(program, &program.sizes, &table, &library, Limits::default()).unwrap();
    let mut plans: Vec<Vec<KernelGroup>> = exploration
        .plans()
        .take(count)
        .map(|p| p.kernels.iter().map(KernelGroup::from).collect())
        .collect();
    if program.precision == Precision::F64 {
        plans.push(
            (0..program.calls.len())
                .map(|c| KernelGroup {
                    calls: vec![c],
                    block: 128,
                    width: 4,
                    whole_rows: false,
                    serial_iterations: Serial::Iterations(2),
                    walk: Walk::Columns,
                })
                .collect(),
        );
    }
    plans
}

fn inputs(program: &Program, sizes: &fuse_core::Sizes, seed: u64) -> Bindings {
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, seed, &mut inputs);
    inputs
}

#[test]
fn the_emulation_matrix_passes_on_the_gpu() {
    let Some(device) = gpu("the_emulation_matrix_passes_on_the_gpu") else {
        return;
    };
    for name in SEQUENCES {
        for precision in [Precision::F32, Precision::F64] {
            let program = sequence(name, precision);
            for kernels in top_plans(&program, 5) {
                let plan = CudaPlan::compile(generate(&program, &kernels).unwrap(), &device).unwrap();
                for (seed, &(m, n)) in SIZES.iter().enumerate() {
                    let sizes = sizes_mn(&program, m, n);
                    let inputs = inputs(&program, &sizes, seed as u64);
                    let want = fuse_core::reference::evaluate(&program, &sizes, &inputs).unwrap();
                    let got = plan.run(&program, &sizes, &inputs).unwrap();
                    let mismatch = compare(&program, &got, &want);
                    assert!(
                        mismatch.is_none(),
                        "{name} {precision} {m}x{n} {kernels:?}: {mismatch:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn plans_replayed_as_graphs_match_the_reference() {
    let Some(device) = gpu("plans_replayed_as_graphs_match_the_reference") else {
        return;
    };
    let mut replayed = 0;
    for name in SEQUENCES {
        for precision in [Precision::F32, Precision::F64] {
            let program = sequence(name, precision);
            for kernels in top_plans(&program, 3) {
                let plan = CudaPlan::compile(generate(&program, &kernels).unwrap(), &device).unwrap();
                for (seed, &(m, n)) in SIZES.iter().enumerate() {
                    let sizes = sizes_mn(&program, m, n);
                    // Captured on other inputs: a replay must redo everything, zero fills too.
                    let earlier = inputs(&program, &sizes, 100 + seed as u64);
                    let inputs = inputs(&program, &sizes, seed as u64);
                    let want = fuse_core::reference::evaluate(&program, &sizes, &inputs).unwrap();
                    let got = plan.run_replayed(&program, &sizes, &earlier, &inputs).unwrap();
                    let mismatch = compare(&program, &got, &want);
                    assert!(
                        mismatch.is_none(),
                        "{name} {precision} {m}x{n} {kernels:?}: {mismatch:?}"
                    );
                }
                replayed += usize::from(plan.generated().steps.len() > 1);
            }
        }
    }
    assert!(replayed > 0, "no plan of several steps among the sequences' best");
}

#[test]
fn repeated_runs_settle_on_a_way_and_stay_right() {
    let Some(device) = gpu("repeated_runs_settle_on_a_way_and_stay_right") else {
        return;
    };
    // BiCGK at 2048²: its column sums are zero-filled before the kernel, two steps.
    let program = sequence("bicgk", Precision::F32);
    let sizes = program.bind_sizes(&[("m".into(), 2048), ("n".into(), 2048)]).unwrap();
    let plan = CudaPlan::compile(generate(&program, &top_plans(&program, 1)[0]).unwrap(), &device).unwrap();
    assert!(plan.generated().steps.len() > 1, "{:?}", plan.generated().steps);
    let mut replays = Replays::new(plan.generated().steps.len());
    let mut workspace = plan.prepare(&program, &sizes, &inputs(&program, &sizes, 0)).unwrap();
    for run in 0..6 {
        let inputs = inputs(&program, &sizes, run);
        plan.refill(&program, &mut workspace, &inputs).unwrap();
        let micros = plan
            .run_replaying(&mut replays, &sizes, workspace.buffers_mut())
            .unwrap();
        assert!(micros > 0.0 && micros < 1e5, "run {run}: {micros} µs");
        let want = fuse_core::reference::evaluate(&program, &sizes, &inputs).unwrap();
        let mismatch = compare(&program, &plan.download(&program, &workspace).unwrap(), &want);
        assert!(mismatch.is_none(), "run {run}: {mismatch:?}");
    }
}

#[test]
fn the_cublas_version_of_every_sequence_matches_the_reference() {
    let Some(device) = gpu("the_cublas_version_of_every_sequence_matches_the_reference") else {
        return;
    };
    for name in SEQUENCES {
        for precision in [Precision::F32, Precision::F64] {
            let program = sequence(name, precision);
            for (seed, &(m, n)) in SIZES.iter().enumerate() {
                let sizes = sizes_mn(&program, m, n);
                let cublas = CublasPlan::new(&device, Baseline::new(&program, &sizes).unwrap()).unwrap();
                let inputs = inputs(&program, &sizes, seed as u64);
                let want = fuse_core::reference::evaluate(&program, &sizes, &inputs).unwrap();
                let got = cublas.run(&program, &sizes, &inputs).unwrap();
                let mismatch = compare(&program, &got, &want);
                assert!(mismatch.is_none(), "{name} {precision} {m}x{n}: {mismatch:?}");
            }
        }
    }
}

/// Scalar calls, stored and inlined, computed on the host between the cuBLAS calls (n = 1
/// is left out: one BiCGSTAB step solves a 1×1 system, and its residual is rounding noise).
#[test]
fn the_cublas_version_of_the_scalar_scripts_matches_the_reference() {
    let Some(device) = gpu("the_cublas_version_of_the_scalar_scripts_matches_the_reference") else {
        return;
    };
    for name in ["bicgstab", "normalize"] {
        for precision in [Precision::F32, Precision::F64] {
            let program = sequence(name, precision);
            for (seed, n) in [45, 300, 513].into_iter().enumerate() {
                let sizes = sizes_mn(&program, n, n);
                let cublas = CublasPlan::new(&device, Baseline::new(&program, &sizes).unwrap()).unwrap();
                let inputs = inputs(&program, &sizes, seed as u64);
                let want = fuse_core::reference::evaluate(&program, &sizes, &inputs).unwrap();
                let got = cublas.run(&program, &sizes, &inputs).unwrap();
                let mismatch = compare(&program, &got, &want);
                assert!(mismatch.is_none(), "{name} {precision} n = {n}: {mismatch:?}");
            }
        }
    }
}

#[test]
fn a_second_load_compiles_nothing() {
    let Some(device) = gpu("a_second_load_compiles_nothing") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = ModuleCache::at(dir.path());
    let program = sequence("gemver", Precision::F32);
    let kernels = &top_plans(&program, 1)[0];
    let first = CudaPlan::compile_with(generate(&program, kernels).unwrap(), &device, &cache).unwrap();
    let second = CudaPlan::compile_with(generate(&program, kernels).unwrap(), &device, &cache).unwrap();
    assert!(!first.from_cache() && second.from_cache());
}

#[test]
fn timing_copy_and_calibration_give_sane_figures() {
    let Some(device) = gpu("timing_copy_and_calibration_give_sane_figures") else {
        return;
    };
    let quick = TimingOptions {
        warmup: 1,
        runs: 3,
        flush_l2: true,
    };
    let copy = copy_bandwidth(&device, 256 << 20, &quick).unwrap();
    assert!(copy > 100.0 && copy < 20_000.0, "{copy} GB/s");
    let options = CalibrateOptions {
        timing: quick,
        vector_len: 1 << 20,
        matrix: (512, 1024),
        copy_bytes: 64 << 20,
    };
    let library = Library::builtin().unwrap();
    let calibration = calibrate(&device, &library, &options, &mut |_| {}).unwrap();
    assert!(calibration.notes.is_empty(), "{:?}", calibration.notes);
    assert!(!calibration.table.routines.is_empty());
    let model = &calibration.table.model;
    assert!(model.launch_us > 0.0 && model.launch_us < 50.0, "{model:?}");
    let text = to_yaml(&calibration, &options);
    let table = TimingTable::parse("calibrated.yaml", &text).unwrap();
    assert!(table.describe().contains("measured routines"), "{}", table.describe());
}

#[test]
fn tuning_times_the_top_plans_and_reports_the_accuracy() {
    let Some(device) = gpu("tuning_times_the_top_plans_and_reports_the_accuracy") else {
        return;
    };
    let program = sequence("bicgk", Precision::F32);
    let sizes = program.bind_sizes(&[("m".into(), 2048), ("n".into(), 2048)]).unwrap();
    let library = Library::builtin().unwrap();
    let table = TimingTable::builtin().unwrap();
    let options = TuneOptions {
        top: 3,
        ..TuneOptions::default()
    };
    let tuned = tune(&device, &program, &sizes, &library, &table, &options, &mut |_| {}).unwrap();
    assert_eq!(tuned.candidates.len(), 3);
    assert!((1..=3).contains(&tuned.rank_of_fastest()));
    let pct = tuned.first_pct_of_fastest();
    assert!(pct > 0.0 && pct <= 100.0, "{pct}");
}
