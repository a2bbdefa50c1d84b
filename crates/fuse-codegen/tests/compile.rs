//! Real NVRTC compiles. These fail (never skip) without libnvrtc: the error says how to get it.

use fuse_codegen::nvrtc::{self, Arch, CompileOptions, NvrtcError};

const AXPY: &str = r#"
extern "C" __global__ void axpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = a * tile[threadIdx.x] + y[i];
}
"#;

fn compile(source: &str, arch: Arch) -> Result<nvrtc::Compiled, NvrtcError> {
    let opts = CompileOptions {
        arch,
        ..CompileOptions::default()
    };
    nvrtc::compile(source, &opts)
}

#[test]
fn small_kernel_reports_resources_without_spills() {
    for arch in [Arch::SM_80, Arch::SM_90] {
        let compiled = compile(AXPY, arch).unwrap_or_else(|e| panic!("{e}"));
        assert!(compiled.ptx.contains(".entry axpy"), "{}", compiled.ptx);
        assert!(compiled.cubin.starts_with(b"\x7fELF"), "a cubin is an ELF image");
        let [axpy] = compiled.resources.as_slice() else {
            panic!("expected one kernel in:\n{}", compiled.log);
        };
        assert_eq!(axpy.kernel, "axpy");
        assert_eq!(axpy.arch, arch.to_string());
        assert!(axpy.registers > 0, "{axpy:?}");
        assert_eq!(axpy.shared_bytes, 256 * 4);
        assert_eq!(axpy.barriers, 1);
        assert_eq!((axpy.spill_stores_bytes, axpy.spill_loads_bytes), (0, 0));
        assert!(compiled.device_functions.is_empty());
    }
}

#[test]
fn syntax_error_returns_log() {
    let bad = "extern \"C\" __global__ void k(float* y) { y[0] = undefined_name + 1 }";
    match compile(bad, Arch::SM_90) {
        Err(NvrtcError::Compile { log }) => {
            assert!(log.contains("undefined_name"), "{log}");
            assert!(log.contains("fuse.cu(1): error"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn defines_reach_the_source() {
    let source = "extern \"C\" __global__ void k(float* y) { y[0] = FUSE_VALUE; }";
    let opts = CompileOptions {
        defines: vec![("FUSE_VALUE".into(), "2.5f".into())],
        ..CompileOptions::default()
    };
    let compiled = nvrtc::compile(source, &opts).unwrap_or_else(|e| panic!("{e}"));
    // The store of 2.5f appears as its bit pattern.
    let bits = 2.5f32.to_bits().to_string();
    assert!(compiled.ptx.contains(&bits), "{}", compiled.ptx);
}

#[test]
fn version_is_13() {
    let (major, _) = nvrtc::version().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(major, 13, "the GPU machines run CUDA 13.0");
}

#[test]
fn unsupported_arch_is_an_error() {
    let err = compile(AXPY, Arch::new(3, 0).unwrap()).unwrap_err();
    assert!(matches!(err, NvrtcError::UnsupportedArch { .. }), "{err}");
    assert!(err.to_string().contains("sm_90"), "{err}");
}
