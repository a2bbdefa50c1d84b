//! `fuse explore` and `fuse explain` from the outside: ranked plans, JSON, explanations, errors.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn fuse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("the fuse binary runs")
}

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&stdout(&fuse(args))).unwrap()
}

/// The calls of each kernel of the best GPU plan.
fn best_kernels(script: &str) -> Vec<Vec<String>> {
    let v = json(&["explore", script, "--backend", "emulate", "--top", "1", "--json"]);
    let kernels = v["plans"][0]["kernels"].as_array().unwrap();
    kernels
        .iter()
        .map(|k| {
            k["calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn best_plans_have_the_expected_kernels() {
    for (script, kernels) in [
        ("bicgk", 1),
        ("vadd", 1),
        ("waxpby", 1),
        ("axpydot", 1),
        ("sgemv", 1),
        ("sscal", 1),
        ("madd", 1),
        // A whole-row block finishes each row of `t = A·x` while the row is in registers.
        ("atax", 1),
        ("sgemvt", 2),
        ("gemver", 2),
    ] {
        let got = best_kernels(&format!("scripts/{script}.yaml"));
        assert_eq!(got.len(), kernels, "{script}: {got:?}");
    }
    let gemver = best_kernels("scripts/gemver.yaml");
    assert_eq!(gemver[0].len(), 3, "both sger and the sgemtv: {gemver:?}");
    assert_eq!(gemver[1], ["w = sgemv(alpha, B, x)"]);
}

#[test]
fn json_has_the_documented_fields() {
    let v = json(&[
        "explore",
        "scripts/bicgk.yaml",
        "--backend",
        "emulate",
        "--json",
        "--top",
        "2",
    ]);
    assert_eq!(v["script"], "scripts/bicgk.yaml");
    assert_eq!(v["backend"], "emulate");
    assert_eq!(v["sizes"]["m"], 4096);
    assert!(v["timings"].as_str().unwrap().contains("analytic estimate"));
    assert!(v["implementations"].as_u64().unwrap() >= 2);
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[0]["rank"], 1);
    let kernel = &plans[0]["kernels"][0];
    assert_eq!(kernel["calls"][0], "q = sgemv(A, p)");
    for field in ["predicted_us", "block", "serial_iterations"] {
        assert!(kernel[field].is_number(), "{field}: {kernel}");
    }
    assert!(plans[0]["predicted_us"].as_f64() <= plans[1]["predicted_us"].as_f64());
}

#[test]
fn all_lists_every_plan_and_the_header_counts_them() {
    let v = json(&[
        "explore",
        "scripts/gemver.yaml",
        "--backend",
        "emulate",
        "--all",
        "--json",
    ]);
    let total = v["implementations"].as_u64().unwrap();
    assert_eq!(v["plans"].as_array().unwrap().len() as u64, total);
    let text = stdout(&fuse(&["explore", "scripts/gemver.yaml", "--backend", "emulate"]));
    assert!(
        text.contains(&format!("plans: {total} in total, ranked for the emulate backend")),
        "{text}"
    );
    assert!(
        text.contains("timings: built-in library/timings/h100-analytic.yaml"),
        "{text}"
    );
    assert!(
        text.contains("kernel 1:") && text.contains("B = sger(u2, v2, B1)"),
        "{text}"
    );
}

/// The predicted time of the plan in a `plan.yaml` that `fuse compile` wrote.
fn compiled_prediction(plan_yaml: &Path) -> f64 {
    let text = std::fs::read_to_string(plan_yaml).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("predicted_us:"))
        .unwrap();
    line.split(':').nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn explore_and_compile_rank_the_plans_of_the_backend_they_say() {
    let v = json(&[
        "explore",
        "scripts/gemver.yaml",
        "--backend",
        "emulate",
        "--all",
        "--json",
    ]);
    let total = v["implementations"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for rank in [1, 3] {
        let out_dir = dir.path().join(format!("plan{rank}"));
        let r = rank.to_string();
        let args = [
            "compile",
            "scripts/gemver.yaml",
            "--backend",
            "emulate",
            "--plan",
            &r,
            "-o",
        ];
        let text = stdout(&fuse(&[&args[..], &[out_dir.to_str().unwrap()]].concat()));
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with(&format!("plan {rank} of {total} for the emulate backend, ranked by timings: built-in library/timings/h100-analytic.yaml")),
            "{text}"
        );
        let want = v["plans"][rank - 1]["predicted_us"].as_f64().unwrap();
        let got = compiled_prediction(&out_dir.join("plan.yaml"));
        assert!(
            (got - want).abs() <= 1e-9 * want,
            "plan {rank}: compiled {got} µs, explored {want} µs"
        );
    }
    // Each says which plans its ranks are, and where the other's are.
    let text = stdout(&fuse(&["explore", "scripts/gemver.yaml", "--backend", "cpu"]));
    assert!(
        text.contains("ranked for the cpu backend by these timings (`fuse compile --plan RANK` ranks GPU plans: see --backend emulate or cuda)"),
        "{text}"
    );
    let text = stdout(&fuse(&["explore", "scripts/gemver.yaml", "--backend", "emulate"]));
    assert!(
        text.contains("`fuse compile --backend emulate --plan RANK` writes plan RANK"),
        "{text}"
    );
    // The CPU's plans are not generated code.
    let out = fuse(&[
        "compile",
        "scripts/gemver.yaml",
        "--backend",
        "cpu",
        "-o",
        dir.path().join("cpu").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--backend cpu: fuse compile writes the CUDA of a GPU plan: use --backend cuda or emulate"),
        "{err}"
    );
}

#[test]
fn the_same_input_gives_the_same_output() {
    let args = ["explore", "scripts/gemver.yaml", "--all", "--json"];
    assert_eq!(stdout(&fuse(&args)), stdout(&fuse(&args)));
}

#[test]
fn explain_names_the_barrier() {
    let explain = |script: &str| stdout(&fuse(&["explain", script, "--backend", "emulate"]));
    let text = explain("scripts/gemver.yaml");
    assert!(text.contains("share B1: fused in kernel 1"), "{text}");
    assert!(text.contains("apart (global-barrier)"), "{text}");
    assert!(text.contains("after a global barrier"), "{text}");
    let text = explain("scripts/sgemvt.yaml");
    assert!(text.contains("`x = sgemtv(beta, A, y, 1.0, z)` reduces"), "{text}");
    let text = explain("scripts/atax.yaml");
    assert!(text.contains("share A, t: fused in kernel 1"), "{text}");
}

/// Words that belong to a GPU's description of a plan.
const GPU_WORDS: [&str; 6] = ["kernel", "block", "shared", "barrier", "on chip", "atomic"];

#[test]
fn on_the_cpu_plans_are_passes_of_threads_over_tiles() {
    // ATAX on the CPU is one pass (a thread finishes its rows' sums, then walks them again),
    // where the analytic H100 keeps two kernels at these sizes. A (8 MB) fits the last-level
    // cache, so its row blocks are a quarter of L2: 64 rows of 4000 bytes (at most) in 256 KiB.
    let sizes = ["--size", "m=2048", "--size", "n=1000"];
    let explain = |backend: &str| {
        stdout(&fuse(
            &[&["explain", "scripts/atax.yaml", "--backend", backend][..], &sizes].concat(),
        ))
    };
    let cpu = explain("cpu");
    assert!(cpu.contains("backend: cpu, ") && cpu.contains("CPU, "), "{cpu}");
    assert!(cpu.contains("best plan: 1 pass,"), "{cpu}");
    assert!(cpu.contains("share A, t: fused in pass 1"), "{cpu}");
    assert!(cpu.contains(" thread"), "{cpu}");
    let rows = (this_cpu().l2_bytes as usize / 4 / 4000).clamp(8, 64) / 8 * 8;
    let tiles = format!("tiles of {rows} rows × 1000 columns, each tile walked twice");
    assert!(cpu.contains(&tiles), "{cpu}");
    assert!(cpu.contains("in cache t"), "{cpu}");
    for word in GPU_WORDS {
        assert!(!cpu.contains(word), "`{word}` in a CPU description:\n{cpu}");
    }
    let gpu = explain("emulate");
    assert!(
        gpu.contains("best plan: 2 kernels,") && gpu.contains("blocks ×"),
        "{gpu}"
    );
    assert!(gpu.contains("B shared") && !gpu.contains("pass"), "{gpu}");
    // A reduction whose result the next call needs: the end of a pass, not a global barrier.
    let text = stdout(&fuse(&["explain", "scripts/sgemvt.yaml", "--backend", "cpu"]));
    assert!(text.contains("must run in a later pass"), "{text}");
    assert!(text.contains("when every thread has finished its share"), "{text}");
    assert!(!text.contains("global barrier") && !text.contains("kernel"), "{text}");
    // Its second pass goes through A from the rows the first left in cache.
    let (first, second) = text.split_once("pass 2:").unwrap_or_default();
    assert!(second.contains("from the last rows"), "{text}");
    assert!(!first.contains("from the last rows"), "{text}");
}

#[test]
fn explore_ranks_the_cpu_plans_by_the_cpu_table_at_the_sizes_given() {
    let v = json(&[
        "explore",
        "scripts/vadd.yaml",
        "--backend",
        "cpu",
        "--json",
        "--size",
        "n=1000",
    ]);
    assert_eq!(v["backend"], "cpu");
    assert_eq!(v["sizes"]["n"], 1000);
    assert!(v["timings"].as_str().unwrap().contains(", CPU, "), "{v}");
    assert_eq!(v["plans"][0]["kernels"].as_array().unwrap().len(), 1);
    let text = stdout(&fuse(&[
        "explore",
        "scripts/vadd.yaml",
        "--backend",
        "cpu",
        "--size",
        "n=100000",
    ]));
    assert!(text.contains("plan 1: ") && text.contains(", 1 pass\n"), "{text}");
    // f32 chunks of half the L1d: 4096 elements with 32 KiB, 6144 with 48.
    let chunk = this_cpu().l1d_bytes as usize / 2 / 4;
    assert!(text.contains(&format!("in chunks of {chunk} elements")), "{text}");
    assert!(text.contains("in cache t"), "{text}");
    for word in GPU_WORDS {
        assert!(!text.contains(word), "`{word}` in a CPU description:\n{text}");
    }
}

#[test]
fn without_backend_the_backend_run_would_use() {
    let run = fuse(&["run", "scripts/vadd.yaml", "--size", "n=10"]);
    let said = String::from_utf8_lossy(&run.stderr);
    let line = said.lines().find(|l| l.starts_with("backend: ")).unwrap();
    let name = line["backend: ".len()..].split(' ').next().unwrap().to_string();
    let text = stdout(&fuse(&["explain", "scripts/vadd.yaml"]));
    // The CPU's line goes on to name its instruction set (`backend: cpu, avx512 (…)`).
    let (alone, followed) = (format!("backend: {name}"), format!("backend: {name}, "));
    assert!(text.lines().any(|l| l == alone || l.starts_with(&followed)), "{text}");
}

#[test]
fn a_table_of_the_wrong_machine_or_the_reference_backend_is_bad_input() {
    let out = fuse(&[
        "explore",
        "scripts/bicgk.yaml",
        "--backend",
        "cpu",
        "--timings",
        "library/timings/h100-analytic.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a GPU timing table") && err.contains("--backend cpu"),
        "{err}"
    );
    let out = fuse(&["explain", "scripts/bicgk.yaml", "--backend", "reference"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plans to explore"));
}

#[test]
fn sizes_can_be_overridden() {
    let small = json(&[
        "explore",
        "scripts/bicgk.yaml",
        "--top",
        "1",
        "--json",
        "--size",
        "m=64",
        "--size",
        "n=64",
    ]);
    let large = json(&["explore", "scripts/bicgk.yaml", "--top", "1", "--json"]);
    assert!(small["plans"][0]["predicted_us"].as_f64() < large["plans"][0]["predicted_us"].as_f64());
    // The header states the sizes explored, not the script's defaults.
    for command in ["explore", "explain"] {
        let text = stdout(&fuse(&[
            command,
            "scripts/atax.yaml",
            "--size",
            "m=2048",
            "--size",
            "n=1000",
        ]));
        let header = text.lines().next().unwrap();
        assert!(header.contains("m=2048 n=1000"), "{command}: {header}");
    }
}

#[test]
fn a_malformed_timing_table_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "format: 1\nsource: guessed\n").unwrap();
    let out = fuse(&["explore", "scripts/bicgk.yaml", "--timings", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("malformed timing table"),
        "{err}"
    );
    let out = fuse(&["explore", "scripts/bicgk.yaml", "--timings", "no/such/table.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/table.yaml"));
    // Some other file: named, its contents not echoed.
    std::fs::write(&path, "secret line one\nsecret line two\n").unwrap();
    let out = fuse(&["explore", "scripts/bicgk.yaml", "--timings", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml: not a timing table") && !err.contains("secret"),
        "{err}"
    );
}

/// A GPU timing table calibrated with another function library, in `dir`.
fn stale_gpu_table(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo().join("library/timings/nvidia-h100-80gb-hbm3-sm90.yaml")).unwrap();
    let stale: String = text
        .lines()
        .map(|line| match line.starts_with("library_checksum:") {
            true => "library_checksum: fnv1a64:0000000000000001\n".to_string(),
            false => format!("{line}\n"),
        })
        .collect();
    assert!(stale.contains("fnv1a64:0000000000000001") && stale.contains("routines:"));
    let path = dir.join("stale-gpu.yaml");
    std::fs::write(&path, stale).unwrap();
    path
}

#[test]
fn a_stale_table_named_for_generated_code_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let table = stale_gpu_table(dir.path());
    let out = fuse(&[
        "compile",
        &repo().join("scripts/bicgk.yaml").display().to_string(),
        "-o",
        dir.path().join("out").to_str().unwrap(),
        "--timings",
        table.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was calibrated with another function library"),
        "{stderr}"
    );
}

#[test]
fn a_gpu_table_given_to_the_cpu_backend_is_called_one_not_stale() {
    let dir = tempfile::tempdir().unwrap();
    let table = stale_gpu_table(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args([
            "run",
            &repo().join("scripts/bicgk.yaml").display().to_string(),
            "--backend",
            "cpu",
        ])
        .env("FUSE_CPU_TIMINGS", &table)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a GPU timing table"), "{stderr}");
    // Its advice must not be to overwrite the GPU table with a CPU calibration.
    assert!(!stderr.contains(&format!("-o {}", table.display())), "{stderr}");
}

#[test]
fn a_reader_that_stops_early_ends_explain_quietly() {
    // `fuse explain long.yaml | head`: standard output closed after the first lines. A write
    // per line once panicked there ("failed printing to stdout").
    let calls: String = (1..=300)
        .map(|k| format!("  - y{k} = saxpy(2.0, y{}, x)\n", k - 1))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("reads-x.yaml");
    let text = format!("sizes: {{n: 4096}}\ninputs: {{x: [n], y0: [n]}}\noutputs: [y300]\ncalls:\n{calls}");
    std::fs::write(&script, text).unwrap();
    // A shipped table, so that no note about this CPU's lands on stderr.
    let table = repo().join("library/timings/cpu-amd-epyc.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(["explain", "--backend", "cpu"])
        .arg(&script)
        .env("FUSE_CPU_TIMINGS", table)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `fuse explain --ranks R`: BiCGK over 4 ranks is one local part reading its rows of A once,
/// a gather of q and a reduction of s, each collective costed and explained; GEMVER's partial
/// `x` is all-reduced because the second part reads it whole.
#[test]
fn explain_over_ranks_shows_distributions_collectives_and_parts() {
    let script = |name: &str| repo().join("scripts").join(name).display().to_string();
    let run = |name: &str, ranks: &str| {
        let s = script(name);
        let out = fuse(&[
            "explain",
            &s,
            "--ranks",
            ranks,
            "--size",
            "m=1000",
            "--size",
            "n=300",
            "--backend",
            "cpu",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        stdout(&out)
    };
    let bicgk = run("bicgk.yaml", "4");
    for expected in [
        "A        [m, n]     row blocks",
        "s        [n]        partial sums",
        "A: [m_local, n]",
        "gather to rank 0 `q` → `q_root`",
        "reduce (sum) to rank 0 `s` → `s_root`",
        "`q_root`: ",
        "(an output)",
        "part 1 on rank 0 (m=1000 m_local=250 n=300)",
        "predicted per run:",
    ] {
        assert!(bicgk.contains(expected), "missing {expected:?} in\n{bicgk}");
    }
    assert!(!bicgk.contains("part 2"), "{bicgk}");
    let gemver = run("gemver.yaml", "3");
    assert!(gemver.contains("all-reduce (sum) `x` → `x_all`"), "{gemver}");
    assert!(gemver.contains("(read by `w = sgemv(alpha, B, x)`)"), "{gemver}");
    let too_many = fuse(&["explain", &script("bicgk.yaml"), "--ranks", "5", "--size", "m=4"]);
    assert_eq!(too_many.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&too_many.stderr).contains("cannot split 4 rows (`m`) over 5 ranks"));
}

/// ATAX with a map between its walks, as a user may write it.
const ATAX_WITH_A_MAP: &str = "precision: f64\nsizes: {m: 4096, n: 4096}\n\
inputs: {A: [m, n], x: [n], c: [m], a: scalar}\noutputs: [y]\ncalls:\n  \
- t = dgemv(A, x)\n  - u = daxpy(a, t, c)\n  - y = dgemtv(A, u)\n";

#[test]
fn rewrite_check_and_explore_show_the_rewritten_calls() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("atax_map.yaml");
    std::fs::write(&script, ATAX_WITH_A_MAP).unwrap();
    let script = script.to_str().unwrap();
    let text = stdout(&fuse(&["rewrite", script]));
    assert!(
        text.contains("  map-joins-walk: t = dgemv(A, x); u = daxpy(a, t, c) → u = dgemv(a, A, x, 1, c)\ncalls:\n  u = dgemv(a, A, x, 1, c)\n  y = dgemtv(A, u)\n"),
        "{text}"
    );
    let text = stdout(&fuse(&["check", script]));
    assert!(text.contains("(rewritten in 1 step: see `fuse rewrite`)"), "{text}");
    assert_eq!(best_kernels(script), [["u = dgemv(a, A, x, 1, c)", "y = dgemtv(A, u)"]]);
    let text = stdout(&fuse(&["rewrite", "scripts/bicgk.yaml"]));
    assert!(text.contains("no rewrite: the calls are fused as written"), "{text}");
}

/// This CPU's key as the CPU backend reads it (its L1d and L2 shape the tiles).
fn this_cpu() -> fuse::stages::fuse_core::explore::CpuKey {
    fuse::stages::fuse_cpu::fused::timings::this_cpu().expect("this CPU's key")
}
