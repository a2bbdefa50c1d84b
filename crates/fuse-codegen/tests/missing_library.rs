//! A wrong `FUSE_NVRTC_LIB` is an error, not a panic and not a silent fallback.
//!
//! Alone in its own test binary: the env var is process-wide and the loaded library is cached.

use fuse_codegen::nvrtc::{self, CompileOptions, NvrtcError, LIB_ENV};

#[test]
fn bogus_library_path_is_not_found() {
    std::env::set_var(LIB_ENV, "/nonexistent/fuse-test/libnvrtc.so.13");
    let err = nvrtc::compile("__global__ void k() {}", &CompileOptions::default()).unwrap_err();
    let NvrtcError::NotFound { searched } = &err else {
        panic!("expected NotFound, got {err:?}");
    };
    assert!(searched[0].starts_with("/nonexistent/fuse-test/libnvrtc.so.13"));
    let message = err.to_string();
    assert!(message.contains("pip install 'nvidia-cuda-nvrtc==13.0.*'"), "{message}");
    assert!(message.contains("nvidia/cu13/lib"), "{message}");
    assert!(matches!(nvrtc::version(), Err(NvrtcError::NotFound { .. })));
}
