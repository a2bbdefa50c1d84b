//! Every class of bad input gets a one-line message naming the file, line and column, the
//! offending text and what was expected, and exit status 2 — never a panic.

mod common;

use std::path::Path;
use std::process::{Command, Output};

const BICGK: &str = "name: bicgk
precision: f32
sizes: {m: 40, n: 30}
inputs:
  A: [m, n]
  p: [n]
  r: [m]
outputs: [q, s]
calls:
  - q = sgemv(A, p)
  - s = sgemtv(A, r)
";

fn fuse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .output()
        .expect("the fuse binary runs")
}

/// Runs `fuse check` on `text` saved as `script.yaml`; returns the stderr of a failure.
fn check_fails(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.yaml");
    std::fs::write(&path, text).unwrap();
    let out = fuse(&["check", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "exit status for:\n{text}\nstderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr.replace(path.to_str().unwrap(), "script.yaml")
}

/// Asserts that the first line of `stderr` starts with `script.yaml:LINE:COL:` and contains
/// every fragment.
fn assert_message(stderr: &str, line: usize, column: usize, fragments: &[&str]) {
    let first = stderr.lines().next().unwrap_or_default();
    let at = format!("error: script.yaml:{line}:{column}: ");
    assert!(first.starts_with(&at), "expected `{at}…`, got: {first}");
    for f in fragments {
        assert!(first.contains(f), "missing `{f}` in: {first}");
    }
}

#[test]
fn valid_script_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bicgk.yaml");
    std::fs::write(&path, BICGK).unwrap();
    let out = fuse(&["check", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("bicgk (f32, m=40 n=30): 2 calls, inputs A p r, outputs q s"),
        "{stdout}"
    );
}

#[test]
fn yaml_syntax_error() {
    let e = check_fails(&BICGK.replace("sizes: {m: 40, n: 30}", "sizes: {m: 40, n: 30"));
    assert_message(&e, 4, 7, &["YAML syntax error"]);
}

#[test]
fn unknown_top_level_key() {
    let e = check_fails(&BICGK.replace("outputs:", "colour: red\noutputs:"));
    assert_message(
        &e,
        8,
        1,
        &["unknown top-level key `colour`", "expected one of name, precision"],
    );
}

#[test]
fn unknown_function() {
    let e = check_fails(&BICGK.replace("sgemtv(A, r)", "sgemtx(A, r)"));
    assert_message(&e, 11, 9, &["unknown function `sgemtx`", "did you mean `sgemtv`"]);
    // The nearest first: one letter too many (`sgemv`) before one letter changed (`sgemtv`),
    // two letters swapped counted as one slip.
    let e = check_fails(&BICGK.replace("sgemv(A, p)", "sgemvv(A, p)"));
    assert_message(&e, 10, 9, &["unknown function `sgemvv`", "did you mean `sgemv`?"]);
    let e = check_fails(&BICGK.replace("sgemv(A, p)", "sgmev(A, p)"));
    assert_message(&e, 10, 9, &["unknown function `sgmev`", "did you mean `sgemv`?"]);
    let e = check_fails(&BICGK.replace("sgemtv(A, r)", "frobnicate(A, r)"));
    assert_message(
        &e,
        11,
        9,
        &["unknown function `frobnicate`", "expected a library function"],
    );
}

#[test]
fn wrong_arity() {
    let e = check_fails(&BICGK.replace("sgemv(A, p)", "sgemv(A, p, r, r)"));
    assert_message(
        &e,
        10,
        9,
        &["wrong number of arguments", "sgemv takes 2, 3 or 5", "got 4"],
    );
}

#[test]
fn f64_function_in_f32_script() {
    let e = check_fails(&BICGK.replace("sgemv(A, p)", "dgemv(A, p)"));
    assert_message(
        &e,
        10,
        9,
        &["`dgemv` is the f64 variant", "script is f32", "expected `sgemv`"],
    );
}

#[test]
fn shape_mismatch() {
    // x of length m where sgemv needs length n (A is m×n).
    let e = check_fails(&BICGK.replace("sgemv(A, p)", "sgemv(A, r)"));
    assert_message(
        &e,
        10,
        18,
        &[
            "shape mismatch in argument 2 of sgemv",
            "`r` is [m] but must be [n] to match `A` [m, n]",
        ],
    );
    let e = check_fails(&BICGK.replace("sgemv(A, p)", "sgemv(p, A)"));
    assert_message(&e, 10, 15, &["`p` is a vector [n]", "parameter `A` is a matrix"]);
    let text = "sizes: {n: 4}\ninputs: {x: [n], alpha: scalar}\noutputs: [y]\ncalls:\n  - y = saxpy(x, alpha, x)\n";
    let e = check_fails(text);
    assert_message(&e, 5, 15, &["`x` is a vector [n] but parameter `a` is a scalar"]);
    let e = check_fails(&text.replace("saxpy(x, alpha, x)", "saxpy(alpha, alpha, x)"));
    assert!(
        e.contains("`alpha` is a scalar but parameter `x` is a vector [n]"),
        "{e}"
    );
}

#[test]
fn name_used_before_assignment() {
    let e = check_fails(&BICGK.replace("sgemtv(A, r)", "sgemtv(A, t)"));
    assert_message(&e, 11, 19, &["`t` is used before it is assigned"]);
}

#[test]
fn output_never_assigned() {
    let e = check_fails(&BICGK.replace("outputs: [q, s]", "outputs: [q, z]"));
    assert_message(&e, 8, 14, &["output `z` is never assigned"]);
    let e = check_fails(&BICGK.replace("outputs: [q, s]", "outputs: [q, p]"));
    assert_message(&e, 8, 14, &["output `p` is an input that no call assigns"]);
}

#[test]
fn unknown_size_symbol() {
    let e = check_fails(&BICGK.replace("p: [n]", "p: [k]"));
    assert_message(&e, 6, 7, &["unknown size symbol `k`", "`sizes` defines `m` and `n`"]);
}

#[test]
fn non_positive_and_absurd_sizes() {
    let e = check_fails(&BICGK.replace("m: 40", "m: 0"));
    assert_message(&e, 3, 12, &["size `m` is 0", "positive integers"]);
    let e = check_fails(&BICGK.replace("m: 40", "m: -5"));
    assert_message(&e, 3, 12, &["size `m` is `-5`", "expected a positive integer"]);
    let e = check_fails(&BICGK.replace("m: 40", "m: 99999999999999999999999"));
    assert_message(&e, 3, 12, &["absurdly large"]);
    let e = check_fails(&BICGK.replace("m: 40", "m: 4000000000000"));
    assert_message(&e, 5, 6, &["`A`", "more than"]);
}

#[test]
fn duplicate_input() {
    let e = check_fails(&BICGK.replace("  r: [m]\n", "  r: [m]\n  p: [m]\n"));
    assert_message(&e, 8, 3, &["duplicate input `p`", "first defined on line 6"]);
}

#[test]
fn bad_identifiers() {
    let e = check_fails(&BICGK.replace("  r: [m]", "  2r: [m]"));
    assert_message(&e, 7, 3, &["input name `2r` is not an identifier"]);
    let e = check_fails(&BICGK.replace("- q = sgemv", "- q-1 = sgemv"));
    assert_message(&e, 10, 5, &["`q-1` is not an identifier"]);
}

#[test]
fn empty_call_list() {
    let at = BICGK.find("calls:").unwrap();
    let e = check_fails(&format!("{}calls: []\n", &BICGK[..at]));
    assert_message(&e, 9, 8, &["empty call list"]);
}

#[test]
fn malformed_call() {
    let e = check_fails(&BICGK.replace("q = sgemv(A, p)", "q sgemv(A, p)"));
    assert_message(&e, 10, 5, &["is not a call", "expected `name = function(arguments)`"]);
}

#[test]
fn quoted_calls_report_columns_inside_the_quotes() {
    let e = check_fails(&BICGK.replace("- s = sgemtv(A, r)", "- \"s = sgemtv(A, t)\""));
    assert_message(&e, 11, 20, &["`t` is used before"]);
}

#[test]
fn malformed_library_file_is_named() {
    let lib = tempfile::tempdir().unwrap();
    let builtin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../library");
    for entry in std::fs::read_dir(builtin).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::copy(&path, lib.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let bad = lib.path().join("gemv.yaml");
    std::fs::write(
        &bad,
        "name: gemv\nkind: nested_reduce\nforms:\n  - signature: (A[m,n], x[n] -> [m]\n    formula: x\n",
    )
    .unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let script = scripts.path().join("bicgk.yaml");
    std::fs::write(&script, BICGK).unwrap();
    let out = fuse(&[
        "check",
        "--library",
        lib.path().to_str().unwrap(),
        script.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}: `gemv` form 1: signature", bad.display())),
        "{stderr}"
    );
    // A library literal that is not finite is refused where it is written, as in scripts.
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../library/gemv.yaml"),
        &bad,
    )
    .unwrap();
    let scal = lib.path().join("scal.yaml");
    let text = std::fs::read_to_string(&scal).unwrap();
    std::fs::write(&scal, text.replace("a * x[i]", "1e999 * x[i]")).unwrap();
    let out = fuse(&["functions", "--library", lib.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&scal.display().to_string()) && stderr.contains("literal `1e999` is not a finite number"),
        "{stderr}"
    );
}

#[test]
fn missing_script_file() {
    let out = fuse(&["check", "no/such/script.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot read no/such/script.yaml"), "{stderr}");
}

#[test]
fn bad_size_override() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bicgk.yaml");
    std::fs::write(&path, BICGK).unwrap();
    let p = path.to_str().unwrap();
    for (arg, want) in [("k=3", "`k` is not a size of"), ("m=4000000000000", "more than")] {
        let out = fuse(&["run", p, "--backend", "reference", "--size", arg]);
        assert_eq!(out.status.code(), Some(2), "{arg}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{arg}: {stderr}");
    }
    let out = fuse(&["run", p, "--size", "m"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected NAME=VALUE"));
}

#[test]
fn an_input_no_call_reads_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bicgk.yaml");
    std::fs::write(
        &path,
        BICGK.replace("  r: [m]\n", "  r: [m]\n  alpha: scalar\n  beta: scalar\n"),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let runs: [&[&str]; 4] = [
        &["check", p],
        &["run", p, "--backend", "reference"],
        &["explore", p, "--backend", "cpu"],
        &["graph", p],
    ];
    for args in runs {
        let out = fuse(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        for name in ["alpha", "beta"] {
            let warning = format!("warning: {p}: input `{name}` is declared but no call reads it\n");
            assert_eq!(stderr.matches(&warning).count(), 1, "{args:?}: {stderr}");
        }
    }
    // The script every input of which is read: not a word.
    std::fs::write(&path, BICGK).unwrap();
    let out = fuse(&["check", p]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}

#[test]
fn missing_sections() {
    let at = BICGK.find("calls:").unwrap();
    let e = check_fails(&BICGK[..at]);
    assert_message(&e, 1, 1, &["missing `calls`", "expected a list of calls"]);
    let e = check_fails(&BICGK.replace("outputs: [q, s]\n", ""));
    assert_message(&e, 1, 1, &["missing `outputs`"]);
}

#[test]
fn a_wrong_nvrtc_setting_names_the_path() {
    let out_dir = tempfile::tempdir().unwrap();
    let not_nvrtc = out_dir.path().join("notes.txt");
    std::fs::write(&not_nvrtc, "not a library").unwrap();
    for (setting, why) in [
        ("/no/such/libnvrtc.so".to_string(), "(no such file)"),
        (not_nvrtc.display().to_string(), ""),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_fuse"))
            .args(["compile", "../../scripts/sscal.yaml", "-o"])
            .arg(out_dir.path().join("out"))
            .env("FUSE_NVRTC_LIB", &setting)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{setting}: {stderr}");
        assert!(
            stderr.contains("FUSE_NVRTC_LIB") && stderr.contains(&setting) && stderr.contains(why),
            "{stderr}"
        );
        assert!(!stderr.contains("fuse bug"), "{stderr}");
    }
}

#[test]
fn a_wrong_nvdisasm_setting_names_the_path() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(["compile", "../../scripts/bicgk.yaml", "-o"])
        .arg(out_dir.path().join("out"))
        .env("FUSE_NVDISASM", "/no/such/nvdisasm")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("FUSE_NVDISASM=/no/such/nvdisasm"), "{stderr}");
}

#[test]
fn compile_writes_a_consistent_folder_and_never_a_users() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let compile = |script: &str| {
        fuse(&[
            "compile",
            &format!("../../scripts/{script}.yaml"),
            "-o",
            out.to_str().unwrap(),
        ])
    };
    assert!(compile("gemver").status.success());
    assert!(out.join("gemver.cu").exists());
    // A second compile into the same folder leaves nothing of the first.
    assert!(compile("sscal").status.success());
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with("gemver")), "{names:?}");
    assert!(names.contains(&"sscal.cu".to_string()) && names.contains(&"plan.yaml".to_string()));
    // A folder with the user's files, or the user's own plan.yaml, is refused and left alone.
    for (name, text) in [("notes.txt", "mine"), ("plan.yaml", "my: plan\n")] {
        std::fs::remove_dir_all(&out).unwrap();
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join(name), text).unwrap();
        let result = compile("sscal");
        assert_eq!(result.status.code(), Some(2), "{name}");
        assert!(String::from_utf8_lossy(&result.stderr).contains("files `fuse compile` did not write"));
        assert_eq!(std::fs::read_to_string(out.join(name)).unwrap(), text);
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    }
}

/// A problem larger than the machine's memory: exit status 2 at once, naming the bytes needed
/// and available — never the abort (134) of a failed allocation.
#[test]
fn a_problem_larger_than_the_host_memory_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bicgk.yaml");
    std::fs::write(&path, BICGK).unwrap();
    let script = path.to_str().unwrap();
    // 200000² f32 is 149 GiB of A; f64 twice that.
    let huge = ["--size", "m=200000", "--size", "n=200000"];
    for command in [
        &["run", script, "--backend", "cpu"][..],
        &["bench", script, "--backend", "cpu"],
    ] {
        let started = std::time::Instant::now();
        let out = fuse(&[command, &huge].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(stderr.contains("not enough host memory for "), "{stderr}");
        assert!(stderr.contains("at m=200000 n=200000"), "{stderr}");
        // A alone is 149 GiB.
        let needed = stderr.split("it needs ").nth(1).and_then(|t| t.split(" bytes").next());
        let needed: u64 = needed.and_then(|n| n.parse().ok()).expect(&stderr);
        assert!(needed >= 160_000_000_000, "{stderr}");
        assert!(stderr.contains(" GiB) are available"), "{stderr}");
        assert!(
            started.elapsed().as_secs() < 30,
            "{command:?} took {:?}",
            started.elapsed()
        );
    }
}

/// `.npy` inputs too large for the memory: the same error, before anything is read.
#[test]
fn npy_inputs_larger_than_the_host_memory_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bicgk.yaml");
    std::fs::write(&path, BICGK).unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    let out = fuse(&[
        "run",
        path.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--random-rest",
        "--size",
        "m=300000",
        "--size",
        "n=300000",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not enough host memory"), "{stderr}");
}

#[test]
fn a_quoted_size_is_text_not_a_number() {
    let stderr = check_fails(&BICGK.replace("sizes: {m: 40, n: 30}", "sizes: {m: 40, n: \"30\"}"));
    assert_message(&stderr, 3, 19, &["size `n` is the quoted text \"30\"", "unquoted"]);
}

#[test]
fn a_byte_order_mark_opens_a_script_as_yaml_allows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.yaml");
    std::fs::write(&path, format!("\u{feff}{BICGK}")).unwrap();
    let out = fuse(&["check", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_literal_beyond_the_precision_is_refused_not_rounded_to_infinity() {
    let text = "name: s\nsizes: {n: 4}\ninputs: {y: [n]}\noutputs: [z]\ncalls:\n  - z = sscal(3.5e38, y)\n";
    let stderr = check_fails(text);
    assert_message(&stderr, 6, 15, &["literal `3.5e38` is out of range of f32"]);
    // The same number is fine in f64.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.yaml");
    std::fs::write(
        &path,
        text.replace("name: s", "name: s\nprecision: f64")
            .replace("sscal", "dscal"),
    )
    .unwrap();
    assert!(fuse(&["check", path.to_str().unwrap()]).status.success());
}

#[test]
fn scripts_that_are_not_files_or_never_end_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.yaml");
    common::mkfifo(&fifo);
    // A script of 17 MB: more than any script needs (a 20,000-call chain is about 1 MB).
    let huge = dir.path().join("huge.yaml");
    let calls = "  - y = sscal(2.0, y)\n".repeat(800_000);
    std::fs::write(
        &huge,
        format!("name: h\nsizes: {{n: 4}}\ninputs: {{y: [n]}}\noutputs: [y]\ncalls:\n{calls}"),
    )
    .unwrap();
    for (path, message) in [
        (fifo.to_str().unwrap(), "is a FIFO (named pipe), not a regular file"),
        ("/dev/zero", "is a character device, not a regular file"),
        ("/dev/stdin", "not a regular file"),
        (huge.to_str().unwrap(), "is longer than 16777216 bytes"),
    ] {
        let start = std::time::Instant::now();
        let out = fuse(&["check", path]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {stderr}");
        assert!(stderr.contains(message), "{path}: {stderr}");
        assert!(start.elapsed().as_secs() < 20, "{path}: took {:?}", start.elapsed());
    }
}

#[cfg(not(feature = "mpi"))]
#[test]
fn distributed_without_mpi_says_how_to_build_it() {
    let out = fuse(&["run", &common::script("bicgk.yaml"), "--distributed"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("built without MPI") && err.contains("--features mpi"),
        "{err}"
    );
}
