//! Shared by the tests that need an NVIDIA GPU.

/// Whether the GPU tests run (`FUSE_TEST_CUDA=1`); says that `test` is skipped when they do not.
pub fn gpu_tests_on(test: &str) -> bool {
    let on = std::env::var("FUSE_TEST_CUDA").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("{test}: skipped — set FUSE_TEST_CUDA=1 on a machine with an NVIDIA GPU");
    }
    on
}
