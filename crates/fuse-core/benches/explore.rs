//! Explorer speed on the paper's sequences: the first plan (`--top 1`) and every plan
//! (`--all`), including fusion enumeration and prediction, from a parsed program.
//!
//! Run: `cargo bench -p fuse-core --bench explore`.

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};

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
        let program = script::load(&root.join(format!("{name}.yaml")), &library).expect("the script parses");
        let run = |all: bool| {
            let ex = explore(&program, &program.sizes, &table, &library, Limits::default()).expect("explores");
            let count = ex.count();
            let plans = if all {
                ex.plans().count()
            } else {
                ex.plans().take(1).count()
            };
            (count, plans)
        };
        c.bench_function(&format!("{name} top 1"), |b| b.iter(|| run(false)));
        c.bench_function(&format!("{name} all"), |b| b.iter(|| run(true)));
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
