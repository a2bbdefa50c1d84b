//! The test kernels behind CUDA_PRELUDE also compile for the GPU: one source, both ways.
//!
//! Needs libnvrtc (see fuse_codegen::nvrtc); fails with install instructions without it.

use fuse_codegen::nvrtc::{compile, Arch, CompileOptions};
use fuse_emulate::{EmulatedModule, CUDA_PRELUDE};

#[test]
fn test_kernels_compile_with_nvrtc_for_sm90() {
    let source = format!("{CUDA_PRELUDE}{}", include_str!("kernels.cu"));
    let opts = CompileOptions {
        arch: Arch::SM_90,
        name: "kernels.cu".into(),
        ..CompileOptions::default()
    };
    let compiled = compile(&source, &opts).unwrap_or_else(|e| panic!("{e}"));
    let emulated = EmulatedModule::compile(&source).unwrap_or_else(|e| panic!("{e}"));
    assert!(!emulated.kernels().is_empty());
    for kernel in emulated.kernels() {
        let resources = compiled
            .resources
            .iter()
            .find(|r| &r.kernel == kernel)
            .unwrap_or_else(|| panic!("NVRTC did not build `{kernel}`:\n{}", compiled.log));
        assert_eq!(resources.spill_stores_bytes, 0, "{resources:?}");
    }
    let dynamic = compiled.resources.iter().find(|r| r.kernel == "reverse_chunks");
    assert_eq!(
        dynamic.map(|r| r.shared_bytes),
        Some(0),
        "dynamic shared memory is not static"
    );
}
