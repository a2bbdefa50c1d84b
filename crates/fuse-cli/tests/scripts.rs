//! The GPU machine's scripts, checked where they can be without a GPU: `scripts/peers.py`
//! (its help, and its sequence definitions against numpy), `scripts/gpu-check.sh` (syntax and
//! help) and `scripts/report.py` (the summary of made-up results, misses included).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn ok(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn peers_help_and_definitions_work_without_a_gpu() {
    let help = ok(&run(&python(), &["scripts/peers.py", "--help"]));
    assert!(
        help.contains("torch.compile") && help.contains("--check-definitions"),
        "{help}"
    );
    let checked = ok(&run(&python(), &["scripts/peers.py", "--check-definitions"]));
    assert_eq!(
        checked.lines().filter(|l| l.starts_with("ok ")).count(),
        16,
        "{checked}"
    );
}

#[test]
fn gpu_check_parses_and_explains_itself() {
    ok(&run("bash", &["-n", "scripts/gpu-check.sh"]));
    let help = ok(&run("bash", &["scripts/gpu-check.sh", "--help"]));
    for stage in ["selftest", "calibrate", "bench", "sanitize", "ncu", "tune", "peers"] {
        assert!(help.contains(stage), "{stage}: {help}");
    }
}

/// A lease of 15 minutes holds one call of 540 s after the machine's start: the numbers the open
/// issues ask for (the benchmark against cuBLAS, ncu, the framework peers) come back from it
/// even where every stage takes its whole budget.
#[test]
fn gpu_check_measures_the_claims_in_its_first_call() {
    let plan = ok(&run("bash", &["scripts/gpu-check.sh", "--plan"]));
    let first = plan.lines().next().unwrap_or_default();
    for stage in ["env", "selftest", "bench", "ncu", "peers"] {
        assert!(
            first.split_whitespace().any(|s| s == stage),
            "{stage} not in the first call: {plan}"
        );
    }
    let planned: Vec<&str> = (plan.lines())
        .flat_map(|l| l.split(": ").nth(1).unwrap_or("").split_whitespace())
        .collect();
    let script = std::fs::read_to_string(repo().join("scripts/gpu-check.sh")).unwrap();
    let all = (script.lines())
        .find_map(|l| l.strip_prefix("ALL_STAGES=("))
        .and_then(|l| l.strip_suffix(')'))
        .expect("gpu-check.sh lists ALL_STAGES");
    let all: Vec<&str> = all.split_whitespace().collect();
    assert_eq!(planned, all, "every stage in some call, in order: {plan}");
}

#[test]
fn the_report_checks_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("nvidia-h100-2026-01-01");
    std::fs::create_dir(&raw).unwrap();
    let bench = r#"{"copy_gbps": 3000.0, "results": [
        {"script": "scripts/bicgk.yaml", "sizes": {"m": 8192, "n": 8192}, "fused_us": 100.0,
         "steps_us": 110.0, "graph_us": 100.0, "baseline_us": 150.0, "speedup": 1.5, "gbps": 2700.0, "pct_of_copy": 90.0}]}"#;
    std::fs::write(raw.join("bench-m8192.json"), bench).unwrap();
    let tune = r#"{"script": "scripts/bicgk.yaml", "sizes": "m=8192 n=8192", "fastest_rank": 2,
        "first_pct_of_fastest": 90.0, "candidates": [{"measured_us": 100.0}, {"measured_us": 90.0}]}"#;
    std::fs::write(raw.join("tune.jsonl"), tune.replace('\n', " ")).unwrap();
    let peers = r#"{"copy_gbps": 2900.0, "results": [{"script": "scripts/bicgk.yaml",
        "sizes": {"m": 8192, "n": 8192}, "framework": "jax.jit", "us": 95.0, "kernels": 2}]}"#;
    std::fs::write(raw.join("peers.json"), peers).unwrap();
    std::fs::write(raw.join("selftest.log"), "selftest: 1 plans checked: 1 ok, 0 failed\n").unwrap();
    // A one-rank distributed BiCG whose collectives went through the host: vectors crossed.
    let iteration = |k: usize| {
        format!("iteration {k:3}  ‖r‖/‖b‖ = 1e-3  1.000 ms (compute 0.900 ms, 65536 B to / 65560 B from the device)\n")
    };
    let nccl_log = format!(
        "BiCG, n = 8192, f64, backend cuda\n{}collectives: through the host (NCCL not found)\n\
         time per iteration (median of iterations 4–5): 1.000 ms, of which compute 0.900 ms (1.11× the compute)\n",
        (1..=5).map(iteration).collect::<String>()
    );
    std::fs::write(raw.join("solver-nccl-8192-f64.log"), nccl_log).unwrap();
    // benches/gpu-solvers.py's JSON: two rounds of fuseblas against one of cupyx.
    let linalg = r#"{"results": [
        {"method": "cg", "framework": "fuseblas", "n": 2048, "dtype": "float64", "ms_per_iteration": 0.1, "bytes_to_host_per_iteration": 8.0},
        {"method": "cg", "framework": "fuseblas", "n": 2048, "dtype": "float64", "ms_per_iteration": 0.3, "bytes_to_host_per_iteration": 8.0},
        {"method": "cg", "framework": "cupyx", "n": 2048, "dtype": "float64", "ms_per_iteration": 0.5, "to_host_per_iteration": "one norm"}]}"#;
    std::fs::write(raw.join("python-gpu-solvers.json"), linalg).unwrap();
    let report = ok(&run(&python(), &["scripts/report.py", raw.to_str().unwrap()]));
    assert!(
        report.contains("| 8192 | f64, one rank (NCCL) | 1.000 | 0.900 | 1.11× |"),
        "{report}"
    );
    assert!(
        report.contains("over one rank: not through NCCL (collectives: through the host (NCCL not found))"),
        "{report}"
    );
    assert!(
        report.contains("over one rank: 131096 B an iteration between host and device, target 256 B"),
        "{report}"
    );
    assert!(
        report.contains("| bicgk | m=8192 n=8192 | 100.0 | 110.0 | 100.0 | 150.0 | 1.50× | 90.0 |"),
        "{report}"
    );
    assert!(report.contains("1.50× cuBLAS, target 1.8× (short by 17%)"), "{report}");
    assert!(
        report.contains("jax.jit 95.0 µs beats fuse's 100.0 µs by 5%"),
        "{report}"
    );
    assert!(
        report.contains("first predicted plan at 90.0% of the fastest"),
        "{report}"
    );
    assert!(
        report.contains("| cg | 2048 | float64 | fuseblas | 0.200 |  | 8 B |"),
        "{report}"
    );
    assert!(
        report.contains("| cg | 2048 | float64 | cupyx | 0.500 | 2.50× | one norm |"),
        "{report}"
    );
    assert!(report.contains("### ncu\n\nnot run"), "{report}");
    assert!(report.contains("selftest: 1 plans checked"), "{report}");
}
