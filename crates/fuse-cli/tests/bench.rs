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

/// `fuse` with calibration on, its cache in `cache`, on `threads` threads.
fn fuse_calibrating(args: &[&str], cache: &Path, threads: &str) -> Output {
    let cache = cache.to_str().unwrap();
    let env = [
        ("FUSE_CPU_CALIBRATE", "1"),
        ("FUSE_CACHE_DIR", cache),
        ("FUSE_NUM_THREADS", threads),
    ];
    fuse(args, &env)
}

/// The CPU tables installed in `cache`.
fn installed(cache: &Path) -> Vec<PathBuf> {
    let dir = cache.join("timings");
    let entries = std::fs::read_dir(dir).map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect());
    entries.unwrap_or_default()
}

#[test]
fn calibrate_installs_the_cpu_table_that_later_runs_use_without_flags() {
    let cache = tempfile::tempdir().unwrap();
    let out = fuse_calibrating(&["calibrate", "--backend", "cpu"], cache.path(), "2");
    assert!(out.status.success(), "{}", common::stderr(&out));
    let tables = installed(cache.path());
    assert_eq!(tables.len(), 1, "{tables:?}");
    let table = tables[0].display().to_string();
    assert!(table.contains("-2t.yaml"), "{table}");
    assert!(
        common::stderr(&out).contains(&format!("wrote {table}")),
        "{}",
        common::stderr(&out)
    );
    let explore = fuse_calibrating(
        &["explore", &script("bicgk.yaml"), "--backend", "cpu", "--top", "1"],
        cache.path(),
        "2",
    );
    assert!(explore.status.success(), "{}", common::stderr(&explore));
    let timings = common::stdout(&explore);
    assert!(
        timings.contains(&format!("timings: {table}")) && timings.contains("measured routines"),
        "{timings}"
    );
    assert!(
        !common::stderr(&explore).contains("note:"),
        "{}",
        common::stderr(&explore)
    );
    // With calibration off, a table measured here is not used unless named.
    let off = fuse(
        &["explore", &script("bicgk.yaml"), "--backend", "cpu", "--top", "1"],
        &[
            ("FUSE_CPU_CALIBRATE", "0"),
            ("FUSE_CACHE_DIR", cache.path().to_str().unwrap()),
            ("FUSE_NUM_THREADS", "2"),
        ],
    );
    assert!(!common::stdout(&off).contains(&table), "{}", common::stdout(&off));
}

#[test]
fn a_new_cpu_measures_itself_once_within_the_budget_and_later_runs_use_the_table() {
    let cache = tempfile::tempdir().unwrap();
    // Three threads: no shipped table is for this CPU, whatever it is.
    let run = [
        "run",
        &script("bicgk.yaml"),
        "--backend",
        "cpu",
        "--size",
        "m=64",
        "--size",
        "n=64",
    ];
    let first = fuse_calibrating(&run, cache.path(), "3");
    let stderr = common::stderr(&first);
    assert!(first.status.success(), "{stderr}");
    let tables = installed(cache.path());
    assert_eq!(tables.len(), 1, "{tables:?}");
    // One line, not a terminal's progress line.
    let notes: Vec<&str> = stderr.lines().filter(|l| l.contains("measured this CPU")).collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(!stderr.contains('\r'), "{stderr}");
    let seconds: f64 = notes[0]
        .split(" in ")
        .nth(1)
        .and_then(|s| s.split(" s,").next())
        .unwrap()
        .parse()
        .unwrap();
    // The budget bounds the measuring (3 s); setting up the last function's plan may overrun
    // it, and a loaded machine stretches both (a whole calibration takes far longer).
    assert!(seconds <= 10.0, "{stderr}");
    assert!(
        notes[0].contains(&tables[0].display().to_string()) && notes[0].contains("3 threads"),
        "{stderr}"
    );
    let second = fuse_calibrating(&run, cache.path(), "3");
    assert!(
        second.status.success() && !common::stderr(&second).contains("note:"),
        "{}",
        common::stderr(&second)
    );
    let explore = fuse_calibrating(
        &["explore", &script("bicgk.yaml"), "--backend", "cpu", "--top", "1"],
        cache.path(),
        "3",
    );
    assert!(
        common::stdout(&explore).contains(&tables[0].display().to_string()),
        "{}",
        common::stdout(&explore)
    );
}

#[test]
fn no_calibration_measures_nothing_and_says_how_to_name_a_table() {
    let cache = tempfile::tempdir().unwrap();
    let run = [
        "run",
        &script("bicgk.yaml"),
        "--backend",
        "cpu",
        "--size",
        "m=8",
        "--size",
        "n=8",
    ];
    let dir = cache.path().to_str().unwrap();
    let off = fuse(
        &run,
        &[
            ("FUSE_CPU_CALIBRATE", "0"),
            ("FUSE_CACHE_DIR", dir),
            ("FUSE_NUM_THREADS", "3"),
        ],
    );
    assert!(off.status.success(), "{}", common::stderr(&off));
    assert!(installed(cache.path()).is_empty());
    let stderr = common::stderr(&off);
    assert!(
        stderr.contains("FUSE_CPU_CALIBRATE=0") && stderr.contains("analytic estimate"),
        "{stderr}"
    );
    let bad = fuse(&run, &[("FUSE_CPU_CALIBRATE", "sometimes"), ("FUSE_CACHE_DIR", dir)]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        common::stderr(&bad).contains("FUSE_CPU_CALIBRATE=\"sometimes\": expected 0"),
        "{}",
        common::stderr(&bad)
    );
}
