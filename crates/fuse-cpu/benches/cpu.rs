//! The fused CPU backend on the paper's 11 sequences: the explorer's best plan for this CPU
//! (`fused`) against the same calls one kernel each on the same backend (`unfused`) and the
//! f64 reference interpreter (`reference`), at sizes far beyond the caches — A is 8192×8192
//! f32 (256 MiB) for BLAS-2, vectors have 2^26 elements for BLAS-1 (2^24 for the slow
//! reference) — plus the machine's copy
//! bandwidth (`copy`). Every throughput is compulsory bytes (inputs read once, outputs written
//! once) per second, so each reads directly as a share of `copy`.
//!
//! Run: `cargo bench -p fuse-cpu --bench cpu` (a few minutes; `-- bicgk` for one sequence).
//! Without `--bench` (as `cargo test --all-targets` runs it) every size is small and each
//! benchmark runs once, as a smoke test.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, SamplingMode, Throughput};

use fuse_core::data::fill_random_inputs;
use fuse_core::reference::evaluate;
use fuse_core::testing::{sequence, SEQUENCES};
use fuse_core::{explore, Bindings, Library, Limits, Precision, Program};
use fuse_cpu::fused::calibrate::{CopyProbe, COPY_BYTES};
use fuse_cpu::fused::{timings, unfused_plan, FusedPlan};

/// Whether this is a real benchmark run (`cargo bench`) rather than a test-mode smoke run.
fn full() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The sizes of the benchmark: `m = n = 8192` for BLAS-2, `n = 2^26` for BLAS-1 — or `2^24`
/// for the reference interpreter (still 64 MiB per vector, twice the last-level cache), whose
/// ten samples of 2^26 would take minutes per sequence.
fn bench_sizes(program: &Program, reference: bool) -> Vec<(String, usize)> {
    let blas1 = program.sizes.get("m").is_none();
    let n = match (full(), blas1, reference) {
        (true, true, false) => 1 << 26,
        (true, true, true) => 1 << 24,
        (true, false, _) => 8192,
        (false, ..) => 64,
    };
    program.sizes.iter().map(|(s, _)| (s.to_string(), n)).collect()
}

fn configure(group: &mut BenchmarkGroup<WallTime>) {
    group.sample_size(10).sampling_mode(SamplingMode::Flat);
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
}

/// A parallel streaming copy between two arrays of 256 MiB; throughput counts bytes read and written.
fn copy(c: &mut Criterion) {
    let mut probe = CopyProbe::new(if full() { COPY_BYTES } else { 1 << 15 }).expect("threads to copy with");
    let mut group = c.benchmark_group("copy");
    configure(&mut group);
    group.throughput(Throughput::Bytes(probe.bytes()));
    group.bench_function("parallel copy", |b| b.iter(|| probe.copy()));
    group.finish();
}

fn sequences(c: &mut Criterion) {
    let library = Library::builtin().expect("the built-in library loads");
    let table = timings::select(&library, None).expect("a CPU timing table").table;
    for name in SEQUENCES {
        let program = sequence(name, Precision::F32);
        let sizes = program.bind_sizes(&bench_sizes(&program, false)).expect("sizes fit");
        let best = explore(&program, &sizes, &table, &library, Limits::default())
            .expect("explores")
            .best();
        let fused = FusedPlan::new(program.clone(), &sizes, &best).expect("the best plan runs on the CPU");
        let unfused = FusedPlan::new(program.clone(), &sizes, &unfused_plan(&program, &sizes)).expect("runs");
        let mut inputs = Bindings::new();
        fill_random_inputs(&program, &sizes, 0, &mut inputs);
        let mut group = c.benchmark_group(name);
        configure(&mut group);
        group.throughput(Throughput::Bytes(program.compulsory_bytes(&sizes)));
        for (label, plan) in [("fused", &fused), ("unfused", &unfused)] {
            let mut workspace = plan.workspace().expect("memory for the outputs");
            group.bench_function(label, |b| {
                b.iter(|| plan.run_in(&inputs, &mut workspace).expect("runs"))
            });
        }
        drop(inputs);
        let sizes = program.bind_sizes(&bench_sizes(&program, true)).expect("sizes fit");
        let mut inputs = Bindings::new();
        fill_random_inputs(&program, &sizes, 0, &mut inputs);
        group.throughput(Throughput::Bytes(program.compulsory_bytes(&sizes)));
        group.bench_function("reference", |b| {
            b.iter(|| evaluate(&program, &sizes, &inputs).expect("runs"))
        });
        group.finish();
    }
}

criterion_group!(benches, copy, sequences);
criterion_main!(benches);
