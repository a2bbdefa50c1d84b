//! `fuse compile` without NVRTC: parse, explore to the best plan, and generate its CUDA source,
//! for every shipped sequence (the target: GEMVER under 100 ms).
//!
//! Run: `cargo bench -p fuse-codegen --bench generate`.

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};

use fuse_codegen::generate::generate_plan;
use fuse_core::explore::{explore, Limits, TimingTable};
use fuse_core::{script, Library};

const SCRIPTS: [&str; 11] = [
    "axpydot", "atax", "bicgk", "gemver", "gesummv", "madd", "sgemv", "sgemvt", "sscal", "vadd", "waxpby",
];

fn bench(c: &mut Criterion) {
    let library = Library::builtin().expect("the built-in library loads");
    let table = TimingTable::builtin().expect("the built-in timing table loads");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    for name in SCRIPTS {
        let path = root.join(format!("{name}.yaml"));
        c.bench_function(&format!("compile {name} (no NVRTC)"), |b| {
            b.iter(|| {
                let program = script::load(&path, &library).expect("the script parses");
                let ex = explore(&program, &program.sizes, &table, &library, Limits::default()).expect("explores");
                generate_plan(&program, &ex.best()).expect("generates").source.len()
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
