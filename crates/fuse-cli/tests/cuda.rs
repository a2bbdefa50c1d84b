//! The CUDA backend from the command line.
//!
//! Everywhere: without a usable GPU (forced by pointing `FUSE_CUDA_LIB` at nothing, so these
//! run the same on a GPU machine) every CUDA command fails with one line and exit status 3, and
//! `fuse run`/`bench`/`calibrate` without `--backend` pick the CPU and say so; `fuse selftest`
//! runs its matrix under emulation.
//!
//! On a GPU, with `FUSE_TEST_CUDA=1`: the selftest matrix on the GPU, the module cache, `bench`'s
//! JSON, `tune` and `calibrate`. Without it they say that they were skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `FUSE_CUDA_LIB` pointing at no file: the driver is "missing" on any machine.
const NO_DRIVER: (&str, &str) = ("FUSE_CUDA_LIB", "/nowhere/libcuda.so.1");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script(name: &str) -> String {
    repo().join("scripts").join(name).display().to_string()
}

fn fuse(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .env_remove("FUSE_CPU_TIMINGS")
        .env_remove("FUSE_CUDA_TIMINGS")
        .envs(env.iter().copied())
        .output()
        .expect("the fuse binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_cuda_command_without_a_gpu_is_one_line_and_status_3() {
    let bicgk = script("bicgk.yaml");
    let commands: [&[&str]; 7] = [
        &["run", &bicgk, "--backend", "cuda"],
        &["bench", &bicgk, "--backend", "cuda"],
        &["calibrate", "--backend", "cuda"],
        &["tune", &bicgk],
        &["selftest", &bicgk],
        &["selftest", &bicgk, "--backend", "cuda"],
        &["devices"],
    ];
    for args in commands {
        let out = fuse(args, &[NO_DRIVER]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: no NVIDIA GPU driver here"), "{args:?}: {err}");
        assert!(err.contains("/nowhere/libcuda.so.1 (no such file)"), "{args:?}: {err}");
        // The way on without a GPU, where the command has one.
        let alternative = match args[0] {
            "run" | "bench" | "calibrate" => Some("or use --backend cpu"),
            "selftest" => Some("or use --backend emulate"),
            _ => None,
        };
        match alternative {
            Some(a) => assert!(err.trim_end().ends_with(a), "{args:?}: {err}"),
            None => assert!(!err.contains("--backend"), "{args:?}: {err}"),
        }
    }
}

#[test]
fn without_a_gpu_run_bench_and_calibrate_pick_the_cpu_and_say_so() {
    let out = fuse(
        &["run", &script("bicgk.yaml"), "--size", "m=20", "--size", "n=30"],
        &[NO_DRIVER],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("backend: cpu (no NVIDIA GPU driver here)"),
        "{}",
        stderr(&out)
    );
    let out = fuse(
        &[
            "bench",
            &script("vadd.yaml"),
            "--size",
            "n=1000",
            "--runs",
            "1",
            "--json",
        ],
        &[NO_DRIVER],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("backend: cpu (no NVIDIA GPU driver here)"));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["backend"], "cpu");
    assert_eq!(json["baseline"], "unfused");
}

#[test]
fn selftest_runs_the_matrix_under_emulation() {
    let out = fuse(
        &[
            "selftest",
            &script("bicgk.yaml"),
            &script("vadd.yaml"),
            "--backend",
            "emulate",
            "--top",
            "1",
        ],
        &[],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    // f32 plan 1, f64 plan 1 and the f64 unfused plan of each script.
    assert_eq!(text.lines().filter(|l| l.starts_with("ok ")).count(), 6, "{text}");
    assert!(text.contains("ok    bicgk f64 unfused plan"), "{text}");
    assert!(text.ends_with("selftest: 6 plans checked: 6 ok, 0 failed\n"), "{text}");
}

#[test]
fn help_teaches_the_gpu_commands() {
    for (command, needle) in [
        ("tune", "predicted rank of the fastest"),
        ("selftest", "poisoned with NaN"),
        ("calibrate", "simulated fusion environments"),
        ("bench", "as a cuBLAS user would"),
        ("run", "compiled modules are cached on disk"),
        ("devices", "Exit status 3"),
    ] {
        let out = fuse(&[command, "--help"], &[]);
        let text = stdout(&out).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(out.status.success(), "{command}");
        assert!(text.contains(needle), "{command} --help lacks `{needle}`:\n{text}");
    }
}

/// Whether the GPU tests run (`FUSE_TEST_CUDA=1`); says so when they do not.
fn gpu_tests(name: &str) -> bool {
    let on = std::env::var("FUSE_TEST_CUDA").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("{name}: skipped — set FUSE_TEST_CUDA=1 on a machine with an NVIDIA GPU to run it");
    }
    on
}

#[test]
fn gpu_selftest_matrix_passes() {
    if !gpu_tests("gpu_selftest_matrix_passes") {
        return;
    }
    let scripts: Vec<String> = fuse_scripts();
    let mut args = vec!["selftest", "--backend", "cuda"];
    args.extend(scripts.iter().map(String::as_str));
    let out = fuse(&args, &[]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains(", 0 failed"), "{}", stdout(&out));
}

#[test]
fn gpu_run_twice_compiles_once() {
    if !gpu_tests("gpu_run_twice_compiles_once") {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().display().to_string();
    let args = [
        "run",
        &script("gemver.yaml"),
        "--backend",
        "cuda",
        "--size",
        "m=300",
        "--size",
        "n=257",
    ];
    let first = fuse(&args, &[("FUSE_CACHE_DIR", &dir)]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("module: compiled with NVRTC and cached"),
        "{}",
        stderr(&first)
    );
    let second = fuse(&args, &[("FUSE_CACHE_DIR", &dir)]);
    assert!(
        stderr(&second).contains("module: from the module cache"),
        "{}",
        stderr(&second)
    );
    assert_eq!(stdout(&first), stdout(&second));
}

#[test]
fn gpu_bench_tune_and_calibrate_report() {
    if !gpu_tests("gpu_bench_tune_and_calibrate_report") {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let env = [("FUSE_CACHE_DIR", cache.path().to_str().unwrap())];
    let out = fuse(
        &[
            "bench",
            &script("bicgk.yaml"),
            "--size",
            "m=2048",
            "--size",
            "n=2048",
            "--json",
        ],
        &env,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["baseline"], "cuBLAS");
    for key in ["fused_us", "baseline_us", "speedup", "gbps", "pct_of_copy"] {
        assert!(
            json["results"][0][key].as_f64().is_some_and(|v| v > 0.0),
            "{key}: {json}"
        );
    }
    let out = fuse(&["tune", &script("atax.yaml"), "--top", "3", "--json"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["candidates"].as_array().unwrap().len(), 3);
    let run = fuse(&["run", &script("atax.yaml"), "--backend", "cuda"], &env);
    assert!(stderr(&run).contains("plan: tuned by `fuse tune`"), "{}", stderr(&run));
    let table = cache.path().join("gpu.yaml");
    let out = fuse(&["calibrate", "-o", table.to_str().unwrap()], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let explore = fuse(&["explore", &script("bicgk.yaml"), "--top", "1"], &env);
    assert!(stdout(&explore).contains("measured routines"), "{}", stdout(&explore));
}

fn fuse_scripts() -> Vec<String> {
    let mut scripts: Vec<String> = std::fs::read_dir(repo().join("scripts"))
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().display().to_string()))
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    scripts.sort();
    scripts
}
