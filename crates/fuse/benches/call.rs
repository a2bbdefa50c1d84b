//! The time of one call of a compiled script from Rust — the baseline the Python package's
//! per-call overhead is measured against (`benches/python-overhead.py`): BiCGK at 256², f32,
//! CPU backend, inputs borrowed as a Python call borrows them.

use criterion::{criterion_group, criterion_main, Criterion};
use fuse::{ArrayView, Backend, DataView, Script, Views};

fn bicgk_256(c: &mut Criterion) {
    let n = 256;
    let script = Script::from_file(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/bicgk.yaml")).unwrap();
    let compiled = script.compile(&Backend::Cpu, &[("m", n), ("n", n)]).unwrap();
    let a: Vec<f32> = (0..n * n).map(|k| (k % 7) as f32 - 3.0).collect();
    let v = vec![1.0f32; n];
    let view = |dims: Vec<usize>, data| ArrayView {
        dims,
        data: DataView::F32(data),
    };
    let inputs = Views::from([
        ("A".to_string(), view(vec![n, n], &a)),
        ("p".to_string(), view(vec![n], &v)),
        ("r".to_string(), view(vec![n], &v)),
    ]);
    c.bench_function("bicgk 256² f32 cpu run_views", |b| {
        b.iter(|| compiled.run_views(&inputs).unwrap())
    });
}

criterion_group!(benches, bicgk_256);
criterion_main!(benches);
