//! Rewritten programs on every host backend: what the rewrite stage writes runs on the
//! reference, the fused CPU and the emulated GPU, and computes what the script as written does
//! (by the f64 reference of the calls as written).

use fuse::{Backend, Inputs, Script};
use fuse_core::data::{fill_random_inputs, relative_error};
use fuse_core::script::parse_as_written;
use fuse_core::testing::rewritable_script;
use fuse_core::{reference, Bindings, Library};

/// Runs seeds `seeds` of the rewritable random scripts on `backend`; returns how many were
/// rewritten. Tolerance: the rewrite only drops the rounding of intermediate results, and every
/// backend computes in f64 here, so 1e-12 relative.
fn agree(backend: &str, seeds: std::ops::Range<u64>) -> usize {
    let library = Library::builtin().unwrap();
    let backend: Backend = backend.parse().unwrap();
    let mut rewritten = 0;
    for seed in seeds {
        let text = rewritable_script(seed, 6);
        let Ok(written) = parse_as_written("t.yaml", &text, &library) else {
            continue;
        };
        let script = Script::from_str("t.yaml", &text).unwrap();
        rewritten += usize::from(!script.program().rewrites.is_empty());
        let mut inputs = Bindings::new();
        fill_random_inputs(&written, &written.sizes, seed, &mut inputs);
        let want = reference::evaluate(&written, &written.sizes, &inputs).unwrap();
        let compiled = script
            .compile(&backend, &[])
            .unwrap_or_else(|e| panic!("{backend}: {e}\n{text}"));
        let got = compiled.run(&Inputs::from(inputs)).unwrap().into_bindings();
        for (name, w) in &want {
            let e = relative_error(&got[name].to_f64(), &w.to_f64());
            assert!(
                e <= 1e-12,
                "{backend}, {name}: relative error {e:e}\n{text}\n{:?}",
                script.program().rewrites
            );
        }
    }
    rewritten
}

#[test]
fn rewritten_programs_agree_with_the_calls_as_written_on_the_cpu() {
    assert!(agree("cpu", 0..60) >= 10);
}

#[test]
fn rewritten_programs_agree_with_the_calls_as_written_emulated() {
    assert!(agree("emulate", 0..8) >= 2);
}
