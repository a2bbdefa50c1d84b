//! What the CUDA runtime compiles, compiled here with NVRTC (no GPU needed; `tests/run` points
//! `FUSE_NVRTC_LIB` at the NVRTC wheel): the runtime's own kernels, a kernel of every
//! calibration program, and the module cache's second compile of a source (none).

use fuse_codegen::generate::{generate, KernelGroup, Serial, Walk};
use fuse_codegen::nvrtc::{compile, Arch, CompileOptions};
use fuse_core::Library;
use fuse_cuda::cache::ModuleCache;
use fuse_cuda::calibrate::{calibration_programs, CalibrateOptions};

fn compiles_without_spills(source: &str) {
    let options = CompileOptions {
        arch: Arch::SM_90,
        ..CompileOptions::default()
    };
    let compiled = compile(source, &options).unwrap_or_else(|e| panic!("{e}"));
    assert!(compiled.cubin.starts_with(b"\x7fELF"));
    for r in &compiled.resources {
        assert_eq!((r.spill_stores_bytes, r.spill_loads_bytes), (0, 0), "{r:?}");
    }
}

#[test]
fn the_runtime_kernels_compile_for_hopper() {
    compiles_without_spills(fuse_cuda::kernels::SOURCE);
}

#[test]
fn a_kernel_of_every_calibration_program_compiles() {
    let library = Library::builtin().unwrap();
    for program in calibration_programs(&library, &CalibrateOptions::default()).unwrap() {
        let group = KernelGroup {
            calls: vec![0],
            block: 256,
            width: 4,
            whole_rows: false,
            serial_iterations: Serial::Iterations(4),
            walk: Walk::Columns,
        };
        compiles_without_spills(&generate(&program, &[group]).unwrap().source);
    }
}

#[test]
fn the_second_compile_of_a_source_is_a_cache_hit() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ModuleCache::at(dir.path());
    let source = "extern \"C\" __global__ void k(float* y) { y[threadIdx.x] = 2.0f; }";
    let first = cache.get_or_compile(source, Arch::SM_90).unwrap();
    assert!(!first.from_cache && first.warning.is_none());
    let second = cache.get_or_compile(source, Arch::SM_90).unwrap();
    assert!(second.from_cache);
    assert_eq!(first.cubin, second.cubin);
    let other = cache.get_or_compile(source, Arch::SM_80).unwrap();
    assert!(!other.from_cache, "another architecture is another module");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn an_unwritable_cache_still_compiles_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, "x").unwrap();
    let cache = ModuleCache::at(&file);
    let module = cache
        .get_or_compile("extern \"C\" __global__ void k() {}", Arch::SM_90)
        .unwrap();
    assert!(!module.from_cache);
    assert!(module.warning.is_some());
}
