//! `fuse bench`, `fuse run --backend cpu` and the CPU timing table from the command line.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fuse(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .env_remove("FUSE_CPU_TIMINGS")
        .envs(env.iter().copied())
        .output()
        .expect("the fuse binary runs")
}

fn script(name: &str) -> String {
    repo().join("scripts").join(name).display().to_string()
}

#[test]
fn bench_reports_every_script_as_json() {
    let (bicgk, vadd) = (script("bicgk.yaml"), script("vadd.yaml"));
    let args = [
        "bench",
        &bicgk,
        &vadd,
        "--backend",
        "cpu",
        "--size",
        "m=70",
        "--size",
        "n=50",
        "--runs",
        "2",
        "--json",
    ];
    let out = fuse(&args, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        for key in ["fused_us", "baseline_us", "speedup", "gbps", "pct_of_copy"] {
            assert!(r[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {r}");
        }
    }
    assert!(results[0]["script"].as_str().unwrap().ends_with("bicgk.yaml"));
    assert_eq!(results[1]["sizes"]["n"], 50, "vadd takes n and ignores m");
    assert_eq!(
        (results[0]["kernels"].as_u64(), results[0]["baseline_kernels"].as_u64()),
        (Some(1), Some(2))
    );
}

#[test]
fn bench_refuses_a_size_no_script_has() {
    let out = fuse(&["bench", &script("vadd.yaml"), "--size", "q=3"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no script given has a size `q`"));
}

#[test]
fn run_on_the_cpu_backend_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = |backend: &str| {
        let out_dir = dir.path().join(backend);
        let args = [
            "run",
            &script("gemver.yaml"),
            "--backend",
            backend,
            "--size",
            "m=33",
            "--size",
            "n=45",
            "--outputs",
            out_dir.to_str().unwrap(),
        ];
        let out = fuse(&args, &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        ["B", "x", "w"].map(|name| std::fs::read(out_dir.join(format!("{name}.npy"))).unwrap())
    };
    let (cpu, reference) = (outputs("cpu"), outputs("reference"));
    for (c, r) in cpu.iter().zip(&reference) {
        let floats = |b: &[u8]| -> Vec<f32> {
            let start = 10 + u16::from_le_bytes([b[8], b[9]]) as usize;
            b[start..]
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let (c, r) = (floats(c), floats(r));
        let diff: f32 = c.iter().zip(&r).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff < 1e-4, "{diff}");
    }
}

#[test]
fn a_stale_cpu_table_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join("library/timings/cpu-analytic.yaml")).unwrap();
    let stale = text.replace("library_checksum: null", "library_checksum: fnv1a64:0000000000000001");
    let path = dir.path().join("stale.yaml");
    std::fs::write(&path, stale).unwrap();
    let out = fuse(
        &[
            "run",
            &script("bicgk.yaml"),
            "--backend",
            "cpu",
            "--size",
            "m=8",
            "--size",
            "n=8",
        ],
        &[("FUSE_CPU_TIMINGS", path.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("re-run `fuse calibrate --backend cpu"), "{stderr}");
}

#[test]
fn calibrate_never_overwrites_a_file_that_is_not_a_timing_table() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.yaml");
    std::fs::write(&notes, "my: notes\n").unwrap();
    let out = fuse(&["calibrate", "--backend", "cpu", "-o", notes.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to overwrite a file that is not a timing table"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my: notes\n");
}

#[test]
fn calibrate_refuses_a_fifo_or_folder_as_its_output_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("table.yaml");
    common::mkfifo(&fifo);
    for (target, message) in [
        (&fifo, "is a FIFO (named pipe)"),
        (&dir.path().to_path_buf(), "is a folder"),
    ] {
        let out = fuse(&["calibrate", "--backend", "cpu", "-o", target.to_str().unwrap()], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(message), "{stderr}");
    }
}
