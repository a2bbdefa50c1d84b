//! `stop` ends a launch under way after its current blocks, leaves no module copy's folder in
//! the cache, and holds the launching thread back from returning a half-computed result. A test
//! binary of its own: stopping is for good, for the whole process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuse_emulate::{EmulatedModule, KernelArg, CUDA_PRELUDE};

/// Each block spins, so the grid as a whole would take minutes.
const SPIN: &str = r#"
extern "C" __global__ void spin(float* out, int rounds) {
    float acc = 0.0f;
    for (int r = 0; r < rounds; ++r) acc = acc * 0.5f + 1.0f;
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
}
FUSE_EMU_EXPORT(spin)
"#;

#[test]
fn stop_ends_a_launch_under_way_and_the_launch_never_returns() {
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var("FUSE_CACHE_DIR", cache.path());
    let module = EmulatedModule::compile(&format!("{CUDA_PRELUDE}{SPIN}")).unwrap_or_else(|e| panic!("{e}"));
    let scratch = std::fs::read_dir(cache.path().join("emulate")).unwrap();
    let left: Vec<_> = scratch
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".scratch-"))
        .collect();
    assert!(left.is_empty(), "the loaded copies' folder outlived the load: {left:?}");

    let blocks = 100_000u32;
    let returned = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&returned);
    std::thread::spawn(move || {
        let mut out = vec![0.0f32; blocks as usize];
        let mut args = [KernelArg::from(&mut out[..]), 20_000i32.into()];
        let _ = module.launch("spin", (blocks, 1, 1), (32, 1, 1), 0, &mut args);
        flag.store(true, Ordering::SeqCst);
    });
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    assert!(fuse_emulate::stop(Duration::from_secs(20)), "the launch did not stop");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped only after {:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !returned.load(Ordering::SeqCst),
        "a stopped launch returned (its results are incomplete)"
    );
}
