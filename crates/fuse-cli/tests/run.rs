//! `fuse run`: inputs from .npy files, outputs to .npy files, checked against numpy
//! (tests/numpy_check.py), and clear errors for bad input files.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{read_f32, relative_error, write_npy};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fuse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .output()
        .expect("the fuse binary runs")
}

fn script(name: &str) -> String {
    repo().join("scripts").join(name).display().to_string()
}

#[test]
fn matches_numpy_on_all_sequences() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(repo().join("tests/numpy_check.py"))
        .arg(env!("CARGO_BIN_EXE_fuse"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}; install Python 3 with numpy (pip install numpy)"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "numpy check failed (is numpy installed? pip install numpy)\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok ")).count(), 21, "{stdout}");
}

#[test]
fn summary_without_outputs_folder() {
    let out = fuse(&[
        "run",
        &script("bicgk.yaml"),
        "--size",
        "m=33",
        "--size",
        "n=31",
        "--seed",
        "3",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("q  [33] f32"), "{stdout}");
    assert!(stdout.contains("s  [31] f32"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("backend: cpu"));
}

#[test]
fn same_seed_same_outputs_and_outputs_keep_precision() {
    let dir = tempfile::tempdir().unwrap();
    let run = |sub: &str| {
        let out_dir = dir.path().join(sub);
        let out = fuse(&[
            "run",
            &script("axpydot.yaml"),
            "--size",
            "n=100",
            "--seed",
            "9",
            "--outputs",
            out_dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (
            std::fs::read(out_dir.join("z.npy")).unwrap(),
            std::fs::read(out_dir.join("r.npy")).unwrap(),
        )
    };
    let (z1, r1) = run("a");
    let (z2, r2) = run("b");
    assert_eq!((z1.clone(), r1.clone()), (z2, r2));
    let header = String::from_utf8_lossy(&z1[..128]);
    assert!(
        header.contains("'descr': '<f4'") && header.contains("'shape': (100,)"),
        "{header}"
    );
    let header = String::from_utf8_lossy(&r1[..128]);
    assert!(
        header.contains("'shape': ()"),
        "scalar outputs are 0-d arrays: {header}"
    );
}

#[test]
fn input_file_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    let bicgk = script("bicgk.yaml");
    let sizes = ["--size", "m=3", "--size", "n=2"];
    let run = || {
        let mut args = vec![
            "run",
            bicgk.as_str(),
            "--inputs",
            inputs.to_str().unwrap(),
            "--random-rest",
        ];
        args.extend(sizes);
        fuse(&args)
    };
    // Wrong shape: p must be [n] = [2]. (A vector of another length disagrees with --size:
    // tests/inputs.rs.)
    write_npy(&inputs.join("p.npy"), "<f4", &[3, 2], &[0; 24]);
    let out = run();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("input `p` has shape [3, 2] but") && stderr.contains("[n] = [2]"),
        "{stderr}"
    );
    // Wrong precision: float64 in an f32 script.
    write_npy(&inputs.join("p.npy"), "<f8", &[2], &[0; 16]);
    let stderr = String::from_utf8_lossy(&run().stderr).to_string();
    assert!(
        stderr.contains("p.npy: expected a float32 .npy array (the script is f32)"),
        "{stderr}"
    );
    // Not an .npy file at all.
    std::fs::write(inputs.join("p.npy"), b"hello").unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("p.npy"));
    // Missing folder.
    let out = fuse(&["run", &bicgk, "--inputs", "no/such/dir"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--inputs no/such/dir: no such folder"));
}

#[test]
fn never_overwrites_an_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    write_npy(&x, "<f4", &[2], &1.5f32.to_le_bytes().repeat(2));
    let before = std::fs::read(&x).unwrap();
    let d = dir.path().to_str().unwrap();
    let out = fuse(&[
        "run",
        &script("sscal.yaml"),
        "--size",
        "n=2",
        "--inputs",
        d,
        "--random-rest",
        "--outputs",
        d,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to overwrite input"));
    assert_eq!(std::fs::read(&x).unwrap(), before);
}

#[test]
fn a_missing_input_file_is_an_error_not_random_data() {
    let dir = tempfile::tempdir().unwrap();
    let bicgk = script("bicgk.yaml");
    let d = dir.path().to_str().unwrap();
    let sizes = ["--size", "m=3", "--size", "n=2"];
    let run = |extra: &[&str]| {
        let mut args = vec!["run", bicgk.as_str(), "--inputs", d];
        args.extend(sizes);
        args.extend(extra);
        fuse(&args)
    };
    // An empty folder: every input is missing.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no `A.npy`, `p.npy` and `r.npy` for inputs `A`, `p` and `r`"),
        "{stderr}"
    );
    assert!(stderr.contains("--random NAME or --random-rest"), "{stderr}");
    // A misspelt file: named, with a did-you-mean.
    write_npy(&dir.path().join("A.npy"), "<f4", &[3, 2], &[0; 24]);
    write_npy(&dir.path().join("r.npy"), "<f4", &[3], &[0; 12]);
    write_npy(&dir.path().join("P.npy"), "<f4", &[2], &[0; 8]);
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no `p.npy` for input `p`"), "{stderr}");
    assert!(stderr.contains("did you mean `P.npy` for `p`?"), "{stderr}");
    // Asked for: drawn, and said so.
    for extra in [&["--random", "p"][..], &["--random-rest"][..]] {
        let out = run(extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{extra:?}: {stderr}");
        assert!(stderr.contains("inputs: `p` drawn at random (seed 0)"), "{stderr}");
    }
    // --random of a file that is there draws it instead; of a name that is no input, an error.
    let out = run(&["--random", "A", "--random", "p"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("inputs: `A` and `p` drawn at random"));
    let out = run(&["--random", "q"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--random q: "));
}

#[test]
fn an_output_name_of_any_length_is_summarised() {
    let dir = tempfile::tempdir().unwrap();
    let long = "y".repeat(70_000);
    let path = dir.path().join("long.yaml");
    let text = format!("sizes: {{n: 3}}\ninputs: {{x: [n]}}\noutputs: [{long}, z]\ncalls:\n  - {long} = sscal(2.0, x)\n  - z = sscal(3.0, x)\n");
    std::fs::write(&path, text).unwrap();
    let out = fuse(&["run", path.to_str().unwrap(), "--backend", "reference"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let z = stdout.lines().find(|l| l.starts_with('z')).unwrap();
    assert!(
        z.starts_with(&format!("z{}  ", " ".repeat(69_999))),
        "the names line up"
    );
}

#[test]
fn outputs_naming_a_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "mine").unwrap();
    let out = fuse(&[
        "run",
        &script("sscal.yaml"),
        "--size",
        "n=3",
        "--outputs",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("notes.txt: is a file, not a folder"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

#[test]
fn outputs_are_all_or_nothing_and_never_replace_a_stranger() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let bicgk = script("bicgk.yaml");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", bicgk.as_str(), "--size", "m=3", "--size", "n=2", "--outputs"];
        args.push(out_dir.to_str().unwrap());
        args.extend(extra);
        fuse(&args)
    };
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    // q can be written, s cannot (a folder is in the way): neither is, nothing is left behind.
    write_npy(&out_dir.join("q.npy"), "<f4", &[3], &[0; 12]);
    let before = std::fs::read(out_dir.join("q.npy")).unwrap();
    std::fs::create_dir(out_dir.join("s.npy")).unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a folder is in the way"));
    assert_eq!(std::fs::read(out_dir.join("q.npy")).unwrap(), before);
    assert_eq!(listing(), ["q.npy", "s.npy"]);
    // A file that is not an array is the user's: kept, unless --force.
    std::fs::remove_dir(out_dir.join("s.npy")).unwrap();
    std::fs::write(out_dir.join("s.npy"), "my notes").unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("it is not a .npy array (--force replaces it)"));
    assert_eq!(std::fs::read_to_string(out_dir.join("s.npy")).unwrap(), "my notes");
    assert_eq!(std::fs::read(out_dir.join("q.npy")).unwrap(), before);
    let out = run(&["--force"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(out_dir.join("s.npy")).unwrap().starts_with(b"\x93NUMPY"));
    assert_ne!(std::fs::read(out_dir.join("q.npy")).unwrap(), before);
    assert_eq!(listing(), ["q.npy", "s.npy"]);
}

#[test]
fn outputs_are_summarised_in_the_order_declared() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("order.yaml");
    let text = "sizes: {n: 3}\ninputs: {x: [n]}\noutputs: [y2, y10, y1]\ncalls:\n  - y1 = sscal(1.0, x)\n  - y2 = sscal(2.0, x)\n  - y10 = sscal(10.0, x)\n";
    std::fs::write(&path, text).unwrap();
    let out = fuse(&["run", path.to_str().unwrap(), "--backend", "reference"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(names, ["y2", "y10", "y1"]);
}

/// A run that needs more device memory than is free stops before allocating, naming the bytes
/// asked and free (the emulated device's capacity plays the GPU's), exit status 2.
#[test]
fn device_out_of_memory_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_fuse"))
        .env("FUSE_EMULATE_MEMORY", "1M")
        .args([
            "run",
            &script("bicgk.yaml"),
            "--backend",
            "emulate",
            "--size",
            "m=1000",
            "--size",
            "n=1000",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("out of memory on the emulated device"), "{stderr}");
    assert!(
        stderr.contains("(4008000 bytes) asked for the inputs of bicgk"),
        "{stderr}"
    );
    assert!(stderr.contains("(1048576 bytes) free"), "{stderr}");
}

/// `--timing` says where the time went, and that the CPU moves nothing to a device.
#[test]
fn timing_reports_upload_compute_and_download() {
    let out = fuse(&[
        "run",
        &script("bicgk.yaml"),
        "--backend",
        "cpu",
        "--size",
        "m=64",
        "--size",
        "n=32",
        "--timing",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("timing: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        line.contains("upload 0.000 ms") && line.contains("download 0.000 ms"),
        "{line}"
    );
    assert!(line.contains("compute ") && line.contains("on the host"), "{line}");
}

/// A product by a zero scalar is +0 whatever it multiplies (BLAS's α = 0), a literal zero of
/// either sign included, on every backend: NaN and Inf in `y` are not read.
#[test]
fn a_zero_literal_scale_is_zero_on_every_backend_whatever_it_scales() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    let y = [1.0f32, -2.0, 0.0, -0.0, f32::NAN, f32::NEG_INFINITY];
    common::write_f32(&inputs.join("y.npy"), &[6], &y);
    for zero in ["-0.0", "0"] {
        let path = dir.path().join("zero.yaml");
        let text = format!(
            "name: zero\nsizes: {{n: 6}}\ninputs: {{y: [n]}}\noutputs: [z]\ncalls:\n  - z = sscal({zero}, y)\n"
        );
        std::fs::write(&path, text).unwrap();
        for backend in ["reference", "cpu", "emulate"] {
            let out_dir = dir.path().join(format!("{backend}{zero}"));
            let out = fuse(&[
                "run",
                path.to_str().unwrap(),
                "--backend",
                backend,
                "--inputs",
                inputs.to_str().unwrap(),
                "--outputs",
                out_dir.to_str().unwrap(),
            ]);
            assert!(
                out.status.success(),
                "{backend}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let got: Vec<u32> = (common::read_f32(&out_dir.join("z.npy")).iter())
                .map(|v| v.to_bits())
                .collect();
            assert_eq!(got, [0; 6], "{backend}, sscal({zero}, y): bits");
        }
    }
}

#[test]
fn an_outputs_target_in_the_way_is_found_before_computing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "not a folder").unwrap();
    let outputs = dir.path().join("out");
    std::fs::create_dir(&outputs).unwrap();
    std::fs::write(outputs.join("q.npy"), "a user's notes, not an array").unwrap();
    for (target, message) in [
        (file.clone(), "is a file, not a folder".to_string()),
        (
            file.join("deeper"),
            format!("{} is a file, not a folder", file.display()),
        ),
        (outputs.clone(), "it is not a .npy array".to_string()),
    ] {
        // At 20000², the inputs alone take seconds to draw: the check must come first.
        let start = std::time::Instant::now();
        let out = fuse(&[
            "run",
            &script("bicgk.yaml"),
            "--backend",
            "cpu",
            "--size",
            "m=20000",
            "--size",
            "n=20000",
            "--outputs",
            target.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&message), "{stderr}");
        assert!(
            !stderr.contains("drawn at random"),
            "checked only after computing: {stderr}"
        );
        assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
    }
}

#[test]
fn two_runs_writing_one_folder_leave_one_runs_whole_set() {
    let dir = tempfile::tempdir().unwrap();
    let run = |seed: &str, out: &Path| {
        Command::new(env!("CARGO_BIN_EXE_fuse"))
            .args([
                "run",
                &script("bicgk.yaml"),
                "--backend",
                "cpu",
                "--size",
                "m=300",
                "--size",
                "n=200",
            ])
            .args(["--seed", seed, "--outputs", out.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // Each seed's outputs, written alone.
    let sets: Vec<(Vec<u8>, Vec<u8>)> = ["1", "2"]
        .iter()
        .map(|seed| {
            let out = dir.path().join(format!("alone{seed}"));
            assert!(run(seed, &out).wait().unwrap().success());
            (
                std::fs::read(out.join("q.npy")).unwrap(),
                std::fs::read(out.join("s.npy")).unwrap(),
            )
        })
        .collect();
    let shared = dir.path().join("shared");
    for round in 0..10 {
        let mut a = run("1", &shared);
        let mut b = run("2", &shared);
        assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
        let found = (
            std::fs::read(shared.join("q.npy")).unwrap(),
            std::fs::read(shared.join("s.npy")).unwrap(),
        );
        assert!(sets.contains(&found), "round {round}: q and s come from different runs");
        let names: Vec<_> = std::fs::read_dir(&shared)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "round {round}: {names:?}");
    }
}

#[test]
fn the_emulated_backend_under_a_memory_limit_stops_with_a_message_not_an_abort() {
    use std::os::unix::process::CommandExt;
    let cache = tempfile::tempdir().unwrap();
    // Address space enough to compile the kernels and hold A (100 MB), not always for the
    // emulated device's copies of it or its threads' stacks as well.
    for megabytes in [300u64, 350, 380, 400, 450, 500, 700] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_fuse"));
        command
            .args([
                "run",
                &script("bicgk.yaml"),
                "--backend",
                "emulate",
                "--size",
                "m=5000",
                "--size",
                "n=5000",
            ])
            .env("FUSE_CACHE_DIR", cache.path());
        let limit = libc::rlimit {
            rlim_cur: megabytes << 20,
            rlim_max: megabytes << 20,
        };
        // SAFETY: setrlimit is async-signal-safe and reads only `limit`, copied into the closure.
        unsafe {
            command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ok = out.status.success();
        let clean =
            matches!(out.status.code(), Some(1 | 2)) && stderr.contains("memory") && !stderr.contains("panicked");
        assert!(ok || clean, "{megabytes} MB: {:?}: {stderr}", out.status);
    }
}

#[test]
fn the_thread_count_comes_from_fuse_num_threads_and_a_bad_one_is_refused() {
    let run = |threads: &str| {
        Command::new(env!("CARGO_BIN_EXE_fuse"))
            .args(["explain", &script("bicgk.yaml"), "--backend", "cpu"])
            .env("FUSE_NUM_THREADS", threads)
            .output()
            .expect("the fuse binary runs")
    };
    let three = run("3");
    assert!(three.status.success(), "{}", String::from_utf8_lossy(&three.stderr));
    assert!(String::from_utf8_lossy(&three.stdout).contains("3 threads sharing"));
    for bad in ["0", "many", "-2", "99999"] {
        let out = run(bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("FUSE_NUM_THREADS") && stderr.contains("not a thread count"),
            "{bad}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `fuse` with `FUSE_SIMD=level`.
fn fuse_in(level: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .env("FUSE_SIMD", level)
        .output()
        .expect("the fuse binary runs")
}

#[test]
fn every_instruction_set_of_this_cpu_runs_every_sequence_within_tolerance_of_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let levels = fuse::SimdLevel::available();
    let widest = fuse::SimdLevel::widest();
    for name in [
        "atax", "axpydot", "bicgk", "gemver", "gesummv", "madd", "sgemv", "sgemvt", "sscal", "vadd", "waxpby",
    ] {
        let path = script(&format!("{name}.yaml"));
        // Odd sizes: every loop's masked head and tail steps.
        let text = std::fs::read_to_string(&path).unwrap();
        let sizes: &[&str] = match text.contains("m: ") {
            true => &["--size", "m=203", "--size", "n=1037"],
            false => &["--size", "n=100003"],
        };
        let run = |backend: &str, level: &str| {
            let out_dir = dir.path().join(format!("{name}-{backend}-{level}"));
            let out_arg = out_dir.display().to_string();
            let args = [
                &["run", &path, "--backend", backend, "--seed", "5", "--outputs", &out_arg][..],
                sizes,
            ]
            .concat();
            let out = fuse_in(level, &args);
            assert!(
                out.status.success(),
                "{name} {level}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out_dir
        };
        let reference = run("reference", "");
        for level in &levels {
            let got = run("cpu", level.name());
            let outputs = std::fs::read_dir(&reference).unwrap().collect::<Vec<_>>();
            assert!(!outputs.is_empty(), "{name}: no outputs written");
            for entry in outputs {
                let file = entry.unwrap().file_name();
                let want: Vec<f64> = read_f32(&reference.join(&file)).iter().map(|&w| w as f64).collect();
                let error = relative_error(&read_f32(&got.join(&file)), &want);
                // f32 sums of up to a thousand products, in any order, with or without FMA.
                assert!(error < 1e-5, "{name} {file:?} in {level}: relative error {error:e}");
            }
        }
        // The header of `fuse explain` names the level that runs.
        let explain = fuse_in(
            levels[0].name(),
            &[&["explain", &path, "--backend", "cpu"][..], sizes].concat(),
        );
        let header = String::from_utf8_lossy(&explain.stdout);
        let want = match levels[0] == widest {
            true => "backend: cpu, scalar (the widest this CPU has)".to_string(),
            false => format!("backend: cpu, scalar (FUSE_SIMD; this CPU has {widest})"),
        };
        assert!(header.contains(&want), "{header}");
    }
}

#[test]
fn an_instruction_set_the_cpu_lacks_or_an_unknown_one_is_refused() {
    let has: Vec<&str> = fuse::SimdLevel::available().iter().map(|l| l.name()).collect();
    let lacking = ["avx512", "avx2", "neon"].into_iter().filter(|l| !has.contains(l));
    for level in lacking.chain(["sse9", "avx-1024"]) {
        for args in [
            &[
                "run",
                &script("bicgk.yaml"),
                "--backend",
                "cpu",
                "--size",
                "m=8",
                "--size",
                "n=8",
            ][..],
            &["explain", &script("bicgk.yaml"), "--backend", "cpu"],
        ] {
            let out = fuse_in(level, args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{level}: {stderr}");
            assert!(
                stderr.contains("FUSE_SIMD") && stderr.contains(level),
                "{level}: {stderr}"
            );
            assert!(
                stderr.contains(&has.iter().rev().copied().collect::<Vec<_>>().join(", ")),
                "{level}: names what the CPU has: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
}
