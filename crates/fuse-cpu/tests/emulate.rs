//! Generated CUDA, run under emulation, against the f64 reference: every sequence, unfused and
//! greedily fused, at awkward sizes, f32 and f64, outputs poisoned with NaN beforehand.

use std::path::Path;

use fuse_codegen::generate::{generate, KernelGroup, Walk};
use fuse_core::data::{fill_random_inputs, relative_error};
use fuse_core::{script, Bindings, Library, Precision, Program};
use fuse_cpu::emulate::EmulatedPlan;
use fuse_cpu::reference::evaluate;

const ALL: [&str; 11] = [
    "axpydot", "atax", "bicgk", "sgemv", "sgemvt", "sscal", "gemver", "gesummv", "madd", "vadd", "waxpby",
];

fn load(name: &str, precision: Precision) -> Program {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(format!("{name}.yaml"));
    let mut text = std::fs::read_to_string(path).unwrap();
    if precision == Precision::F64 {
        text = text.replace("precision: f32", "precision: f64");
        for f in [
            "sscal", "saxpy", "sdot", "sgemv", "sgemtv", "sger", "smadd", "sadd", "saxpby",
        ] {
            text = text.replace(&format!("= {f}("), &format!("= d{}(", &f[1..]));
        }
    }
    script::parse(&format!("{name}.yaml"), &text, &Library::builtin().unwrap()).unwrap()
}

/// One kernel per call.
fn unfused(p: &Program) -> Vec<KernelGroup> {
    (0..p.calls.len())
        .map(|c| KernelGroup {
            calls: vec![c],
            block: 128,
            serial_iterations: 2,
            walk: Walk::Columns,
        })
        .collect()
}

/// Consecutive calls of one nesting level share a kernel unless a call reads a reduction
/// computed in that kernel.
fn greedy(p: &Program) -> Vec<KernelGroup> {
    let mut groups: Vec<KernelGroup> = Vec::new();
    for (c, call) in p.calls.iter().enumerate() {
        let joins = groups.last().is_some_and(|g| {
            let level = p.calls[g.calls[0]].kind.nesting_level();
            level == call.kind.nesting_level()
                && !call.reads().iter().any(|&v| {
                    p.values[v]
                        .producer
                        .is_some_and(|q| g.calls.contains(&q) && p.calls[q].kind.is_reduce())
                })
        });
        match groups.last_mut() {
            Some(g) if joins => g.calls.push(c),
            _ => groups.push(KernelGroup {
                calls: vec![c],
                block: 256,
                serial_iterations: 3,
                walk: Walk::Rows,
            }),
        }
    }
    groups
}

fn check(name: &str, precision: Precision, plans: &[Vec<KernelGroup>], sizes: &[(usize, usize)]) {
    let tolerance = match precision {
        Precision::F32 => 1e-4,
        Precision::F64 => 1e-12,
    };
    let program = load(name, precision);
    for kernels in plans {
        let generated = generate(&program, kernels).unwrap_or_else(|e| panic!("{name}: {e}"));
        let plan = EmulatedPlan::compile(generated).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (seed, &(m, n)) in sizes.iter().enumerate() {
            let overrides: Vec<(String, usize)> = program
                .sizes
                .iter()
                .map(|(s, _)| (s.to_string(), if s == "m" { m } else { n }))
                .collect();
            let sizes = program.bind_sizes(&overrides).unwrap();
            let mut inputs = Bindings::new();
            fill_random_inputs(&program, &sizes, seed as u64, &mut inputs);
            let want = evaluate(&program, &sizes, &inputs).unwrap();
            let got = plan
                .run(&program, &sizes, &inputs)
                .unwrap_or_else(|e| panic!("{name} {m}x{n}: {e}"));
            for (output, w) in &want {
                let error = relative_error(&got[output].to_f64(), &w.to_f64());
                assert!(
                    error < tolerance,
                    "{name} {precision} {m}x{n} {output}: error {error:e} ({} kernels)",
                    kernels.len()
                );
            }
        }
    }
}

#[test]
fn every_sequence_matches_the_reference_f32() {
    for name in ALL {
        let program = load(name, Precision::F32);
        check(
            name,
            Precision::F32,
            &[unfused(&program), greedy(&program)],
            &[(67, 45), (1, 300), (300, 1), (257, 513)],
        );
    }
}

#[test]
fn every_sequence_matches_the_reference_f64() {
    for name in ALL {
        let program = load(name, Precision::F64);
        check(name, Precision::F64, &[greedy(&program)], &[(67, 45), (33, 31)]);
    }
}

#[test]
fn same_plan_same_source() {
    let program = load("gemver", Precision::F32);
    let a = generate(&program, &greedy(&program)).unwrap();
    let b = generate(&program, &greedy(&program)).unwrap();
    assert_eq!(a.source, b.source);
    assert!(a.source.contains("//   B = sger(u2, v2, B1)"));
}

#[test]
fn generated_kernels_compile_with_nvrtc_without_spills() {
    use fuse_codegen::nvrtc::{compile, Arch, CompileOptions};
    for name in ALL {
        for precision in [Precision::F32, Precision::F64] {
            let program = load(name, precision);
            for kernels in [unfused(&program), greedy(&program)] {
                let generated = generate(&program, &kernels).unwrap();
                for arch in [Arch::new(8, 0).unwrap(), Arch::new(9, 0).unwrap()] {
                    let options = CompileOptions {
                        arch,
                        ..CompileOptions::default()
                    };
                    let compiled = compile(&generated.source, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert!(!compiled.resources.is_empty(), "{name}: no resource report");
                    for r in &compiled.resources {
                        assert_eq!(
                            (r.spill_stores_bytes, r.spill_loads_bytes),
                            (0, 0),
                            "{name} {arch}: {r:?}"
                        );
                    }
                }
            }
        }
    }
}
