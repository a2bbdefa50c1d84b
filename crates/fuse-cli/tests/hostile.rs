//! Hostile input across the command line: generated scripts (mutated structure, huge, negative
//! and odd sizes, strange names, deep nesting, long formulas) and generated library functions
//! (deep and long formulas, non-finite literals, wrong kinds and signatures) fed to the `fuse`
//! binary. Every command must end, within a time bound, with status 0 (valid input) or 2 and a
//! message — never a panic (101), an abort (134) or a signal.
//!
//! Each case runs several commands, so the case count is small; `PROPTEST_CASES` sets it.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;

/// Longest a command may take on one case (a debug build, on a busy machine).
const TIME_BOUND: Duration = Duration::from_secs(30);

/// Cases unless `PROPTEST_CASES` says otherwise: a few seconds of test time.
const DEFAULT_CASES: u32 = 256;

/// One of `items`.
fn one_of(items: &[&str]) -> impl Strategy<Value = String> + Clone {
    prop::sample::select(items.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// Mostly `valid`, sometimes something hostile in its place: valid enough that many cases
/// reach the later stages.
fn mostly(valid: &str, hostile: impl Strategy<Value = String> + 'static) -> BoxedStrategy<String> {
    prop_oneof![6 => Just(valid.to_string()), 1 => hostile].boxed()
}

/// Text nested `depth` times: `((((x))))`, `[[[[n]]]]`.
fn nested(open: &str, inner: &str, close: &str, depth: usize) -> String {
    format!("{}{inner}{}", open.repeat(depth), close.repeat(depth))
}

/// Depths around the limits fuse and its YAML parser enforce, and far past them.
fn depth() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![1usize, 3, 63, 64, 65, 130, 2_000, 20_000])
}

/// Lengths of flat chains of operations, around the operation limit and far past it.
fn length() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![2usize, 50, 999, 1_000, 1_001, 100_000])
}

fn size() -> BoxedStrategy<String> {
    // Valid sizes stay small, so that every valid case runs in a moment; the rest are refused
    // (zero, negative, not integers, beyond the 4 TiB guard, beyond u64).
    mostly(
        "3",
        one_of(&[
            "1",
            "7",
            "33",
            "0",
            "-1",
            "1.5",
            "1e3",
            "abc",
            "''",
            "[2]",
            "{n: 2}",
            "2199023255552",
            "4611686018427387904",
            "18446744073709551615",
            "99999999999999999999999",
        ]),
    )
}

fn name() -> BoxedStrategy<String> {
    mostly(
        "y",
        prop_oneof![
            one_of(&[
                "_", "é", "a b", "''", "sum", "out", "1x", "x", "A", "NaN", "y-z", "\"q\"", "[y]", "{}", "&y", "*y"
            ]),
            (1usize..3000).prop_map(|n| "y".repeat(n)),
        ],
    )
}

fn literal() -> impl Strategy<Value = String> {
    one_of(&[
        "2.0", "-1", "0", "1e999", "-1e999", "1e-999", "nan", "inf", "0x10", "--1", "1_0", ".5", "5.", "1e", "e5",
        // Past f32 and inside f64, and below f32's smallest: outside the script's precision.
        "1e300", "-3.5e38", "1e-50",
    ])
}

/// A call's right-hand side: a function of the built-in library (or the generated one, `shostile`)
/// with arguments, sometimes broken.
fn call() -> BoxedStrategy<String> {
    let function = one_of(&[
        "sscal", "saxpy", "sdot", "sgemv", "sgemtv", "sger", "smadd", "snrm2", "sasum", "scopy", "dgemv", "shostile",
        "sfoo", "s",
    ]);
    let argument = prop_oneof![3 => one_of(&["x", "A", "alpha", "y", "z"]), 1 => literal(), 1 => name()];
    let arguments = prop::collection::vec(argument, 0..6).prop_map(|a| a.join(", "));
    // Calls that fit the script's inputs (A: [m, n], x: [n], z: [m], alpha: scalar).
    let valid = one_of(&[
        "sscal(alpha, x)",
        "saxpy(alpha, x, x)",
        "sdot(x, z)",
        "sgemv(A, x)",
        "sgemtv(A, z)",
        "sger(z, x, A)",
        "smadd(A, A)",
        "snrm2(x)",
        "sasum(z)",
        "scopy(x)",
        "sgemv(alpha, A, x, 2.0, z)",
        "shostile(alpha, x)",
    ]);
    prop_oneof![
        8 => valid,
        2 => (function, arguments).prop_map(|(f, a)| format!("{f}({a})")),
        1 => depth().prop_map(|d| format!("sscal({}, x)", nested("(", "2.0", ")", d))),
        1 => length().prop_map(|n| format!("sscal(alpha, x{})", ", x".repeat(n))),
        1 => one_of(&["sscal(alpha, x", "sscal alpha, x)", "= sscal(alpha, x)", "", "()", "sscal((alpha), x)"]),
    ]
    .boxed()
}

/// A script around BiCGK's and SSCAL's inputs, with hostile substitutions and mutations.
fn script() -> impl Strategy<Value = String> {
    let precision = mostly("f32", one_of(&["f64", "f16", "F32", "''", "[f32]", "32"]));
    let shape = mostly(
        "[m, n]",
        one_of(&["[n]", "scalar", "[n, n]", "[k]", "[]", "[n, m, n]", "[[m], n]", "m n"]),
    );
    let calls = prop::collection::vec((name(), call()), 1..6);
    let mutation = prop_oneof![
        4 => Just(None),
        1 => (depth(), prop::sample::select(vec![0usize, 1, 2, 3, 4, 5])).prop_map(Some),
    ];
    (precision, size(), size(), shape, calls, name(), mutation).prop_map(
        |(precision, m, n, shape, calls, output, mutation)| {
            let calls: Vec<String> = calls.iter().map(|(out, rhs)| format!("  - {out} = {rhs}\n")).collect();
            let mut sections = vec![
                format!("precision: {precision}\n"),
                format!("sizes: {{m: {m}, n: {n}}}\n"),
                format!("inputs: {{A: {shape}, x: [n], z: [m], alpha: scalar}}\n"),
                format!("outputs: [{output}]\n"),
                format!("calls:\n{}", calls.concat()),
            ];
            // A structure mutation: a section replaced by deeply nested YAML.
            if let Some((depth, section)) = mutation {
                let key = ["precision", "sizes", "inputs", "outputs", "calls", "extra"][section];
                let deep = format!("{key}: {}\n", nested("[", "n", "]", depth));
                match sections.get_mut(section) {
                    Some(s) => *s = deep,
                    None => sections.push(deep),
                }
            }
            sections.concat()
        },
    )
}

/// A formula's right-hand side for `(a, x[n]) -> [n]`, often hostile.
fn formula() -> BoxedStrategy<String> {
    let term = one_of(&[
        "x[i]",
        "a",
        "a * x[i]",
        "abs(x[i])",
        "sqrt(x[i])",
        "x[j]",
        "y[i]",
        "x[i, i]",
        "foo(x[i])",
    ]);
    prop_oneof![
        3 => term.clone(),
        1 => literal().prop_map(|l| format!("{l} * x[i]")),
        1 => depth().prop_map(|d| nested("(", "x[i]", ")", d)),
        1 => depth().prop_map(|d| nested("abs(", "x[i]", ")", d)),
        1 => depth().prop_map(|d| format!("{}x[i]", "-".repeat(d))),
        1 => length().prop_map(|n| vec!["x[i]"; n].join(" + ")),
        1 => length().prop_map(|n| format!("sum(j, {})", vec!["x[j]"; n].join(" * "))),
        1 => (depth(), term).prop_map(|(d, t)| nested("sum(j, ", &t, ")", d)),
    ]
    .boxed()
}

/// A library function file named `hostile`, often broken.
fn function_file() -> impl Strategy<Value = String> {
    let kind = mostly(
        "map",
        one_of(&["reduce", "nested_map", "nested_reduce", "scan", "''", "[map]"]),
    );
    let signature = mostly(
        "(a, x[n]) -> [n]",
        one_of(&[
            "(a, x[n]) -> scalar",
            "(x[n]) -> [n]",
            "(a, x[n] -> [n]",
            "(a, a) -> [n]",
            "() -> [n]",
            "(a, x[n, m]) -> [n]",
        ]),
    );
    let fname = mostly("hostile", one_of(&["", "sum", "scal", "é", "1x", "a b"]));
    (fname, kind, signature, formula()).prop_map(|(fname, kind, signature, formula)| {
        format!(
            "name: {fname}\ndescription: generated\nkind: {kind}\nforms:\n  - signature: {signature}\n    formula: out[i] = {formula}\n"
        )
    })
}

/// Runs `fuse args` within the time bound; returns the exit status and standard error.
fn fuse_bounded(args: &[&str]) -> Result<(i32, String), TestCaseError> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .env_remove("FUSE_CPU_TIMINGS")
        .env_remove("FUSE_LIBRARY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fuse binary runs");
    // Standard error is read beside the wait, so that a long message cannot fill the pipe.
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
        text
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > TIME_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TestCaseError::fail(format!(
                "`fuse {}` took over {TIME_BOUND:?}",
                shown(args)
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = reader.join().unwrap();
    let Some(code) = status.code() else {
        return Err(TestCaseError::fail(format!(
            "`fuse {}` ended by {status}: {stderr}",
            shown(args)
        )));
    };
    Ok((code, stderr))
}

/// The arguments for a message, long ones cut.
fn shown(args: &[&str]) -> String {
    args.iter()
        .map(|a| a.chars().take(200).collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Status 0, or 2 with an `error:` message that does not call itself a fuse bug.
fn check_outcome(args: &[&str], code: i32, stderr: &str) -> Result<(), TestCaseError> {
    let last = stderr.lines().last().unwrap_or_default();
    let clean_error = code == 2 && last.starts_with("error: ") && !stderr.contains("fuse bug");
    prop_assert!(
        code == 0 || clean_error,
        "`fuse {}`: status {code}\n{}",
        shown(args),
        stderr.chars().take(2000).collect::<String>()
    );
    Ok(())
}

/// The built-in library's files and `extra` as `hostile.yaml`, in `dir`.
fn library_with(dir: &Path, extra: &str) {
    for entry in std::fs::read_dir(common::repo().join("library")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(dir.join("hostile.yaml"), extra).unwrap();
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_script_or_library_makes_fuse_crash(script in script(), function in prop::option::of(function_file())) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hostile.yaml");
        std::fs::write(&path, &script).unwrap();
        let path = path.to_str().unwrap();
        let library = dir.path().join("library");
        let mut prefix: Vec<&str> = Vec::new();
        if let Some(function) = &function {
            std::fs::create_dir(&library).unwrap();
            library_with(&library, function);
            prefix = vec!["--library", library.to_str().unwrap()];
            let args = [&prefix[..], &["functions"]].concat();
            let (code, stderr) = fuse_bounded(&args)?;
            check_outcome(&args, code, &stderr)?;
        }
        let commands: [&[&str]; 3] = [
            &["check", path],
            &["run", path, "--backend", "reference"],
            &["run", path, "--backend", "cpu"],
        ];
        for command in commands {
            let args = [&prefix[..], command].concat();
            let (code, stderr) = fuse_bounded(&args)?;
            check_outcome(&args, code, &stderr)?;
            // A script that fails its check fails to run with the same status.
            if command[0] == "check" && code != 0 {
                break;
            }
        }
    }
}

/// A file where fuse expects a script or a `.npy` input: often not a file at all, or a `.npy`
/// file that lies about itself.
#[derive(Debug, Clone)]
enum Hostile {
    /// The right file.
    Valid,
    Fifo,
    Folder,
    DanglingLink,
    /// A link to `/dev/zero`: endless.
    Device,
    /// A `.npy` header whose length field says `len` bytes.
    HeaderLength(u32),
    /// A `.npy` header naming a key twice (numpy takes the last).
    RepeatedKey,
    /// A valid header and too few elements.
    Truncated,
    Garbage(Vec<u8>),
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        4 => Just(Hostile::Valid),
        1 => Just(Hostile::Fifo),
        1 => Just(Hostile::Folder),
        1 => Just(Hostile::DanglingLink),
        1 => Just(Hostile::Device),
        1 => prop::sample::select(vec![0u32, 11, 60_000, 1 << 20, u32::MAX]).prop_map(Hostile::HeaderLength),
        1 => Just(Hostile::RepeatedKey),
        1 => Just(Hostile::Truncated),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Hostile::Garbage),
    ]
}

/// Makes `path` the `kind` of file, where a valid one is an f32 array of `shape`.
fn plant(path: &Path, kind: &Hostile, shape: &[usize]) {
    let count: usize = shape.iter().product();
    let dims: Vec<String> = shape.iter().map(|d| format!("{d},")).collect();
    let header = |extra: &str| {
        format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), {extra}}}\n",
            dims.concat()
        )
    };
    let npy = |header: &str, claimed: u32, elements: usize| {
        let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
        bytes.extend(claimed.to_le_bytes());
        bytes.extend(header.as_bytes());
        bytes.extend(vec![0u8; 4 * elements]);
        bytes
    };
    match kind {
        Hostile::Valid => common::write_f32(path, shape, &common::numbers(count, 5)),
        Hostile::Fifo => common::mkfifo(path),
        Hostile::Folder => std::fs::create_dir(path).unwrap(),
        Hostile::DanglingLink => std::os::unix::fs::symlink("nowhere.npy", path).unwrap(),
        Hostile::Device => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        Hostile::HeaderLength(len) => std::fs::write(path, npy(&header(""), *len, count)).unwrap(),
        Hostile::RepeatedKey => {
            let text = header("'descr': '<f8', 'descr': '<f4', ");
            std::fs::write(path, npy(&text, text.len() as u32, count)).unwrap()
        }
        Hostile::Truncated => std::fs::write(path, npy(&header(""), header("").len() as u32, count / 2)).unwrap(),
        Hostile::Garbage(bytes) => std::fs::write(path, bytes).unwrap(),
    }
}

/// Every entry of `dir` with its bytes, sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap_or_default(),
            )
        })
        .collect();
    entries.sort();
    entries
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases / 8, ..config() })]

    #[test]
    fn no_special_or_lying_file_makes_fuse_hang_or_crash(
        script in hostile(), a in hostile(), p in hostile(), r in hostile()
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bicgk.yaml");
        match script {
            Hostile::Valid => { std::fs::copy(common::script("bicgk.yaml"), &path).unwrap(); }
            ref other => plant(&path, other, &[1]),
        }
        let inputs = dir.path().join("in");
        std::fs::create_dir(&inputs).unwrap();
        for (name, kind, shape) in [("A", &a, &[5usize, 3][..]), ("p", &p, &[3]), ("r", &r, &[5])] {
            plant(&inputs.join(format!("{name}.npy")), kind, shape);
        }
        let args = ["run", path.to_str().unwrap(), "--backend", "cpu", "--inputs", inputs.to_str().unwrap()];
        let (code, stderr) = fuse_bounded(&args)?;
        check_outcome(&args, code, &stderr)?;
        let readable = [&a, &p, &r].iter().all(|k| matches!(k, Hostile::Valid | Hostile::RepeatedKey));
        let all_valid = matches!(script, Hostile::Valid) && readable;
        prop_assert_eq!(code == 0, all_valid, "{}", stderr);
    }

    #[test]
    fn a_signal_at_any_moment_leaves_the_outputs_all_or_nothing(
        signal in prop::sample::select(vec![libc::SIGINT, libc::SIGTERM, libc::SIGHUP]),
        delay_ms in 0u64..600,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("q.npy"), b"\x93NUMPY an earlier q").unwrap();
        std::fs::write(out.join("notes.txt"), "mine").unwrap();
        let before = snapshot(&out);
        let mut child = Command::new(env!("CARGO_BIN_EXE_fuse"))
            .args(["run", &common::script("bicgk.yaml"), "--backend", "cpu", "--size", "m=3000", "--size", "n=2000"])
            .args(["--outputs", out.to_str().unwrap()])
            .env_remove("FUSE_CPU_TIMINGS")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: kill(2) with the id of a child this test spawned and has not waited for.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        let status = child.wait().unwrap();
        let after = snapshot(&out);
        let names: Vec<&str> = after.iter().map(|(n, _)| n.as_str()).collect();
        // The whole new set: notes.txt untouched, q (m = 3000) replaced and s (n = 2000) added,
        // each a complete array.
        let whole_new_set = names == ["notes.txt", "q.npy", "s.npy"]
            && after[0] == before[0]
            && after[1].1 != before[1].1
            && common::read_f32(&out.join("q.npy")).len() == 3000
            && common::read_f32(&out.join("s.npy")).len() == 2000;
        match status.code() {
            // Done before the signal.
            Some(0) => prop_assert!(whole_new_set, "{:?}", names),
            // Stopped while writing (the folder as before), or after the last link (the whole
            // new set); in the first moments, ended before its handler was set.
            Some(130) | None => prop_assert!(after == before || whole_new_set, "{:?}: {:?}", status, names),
            _ => prop_assert!(false, "status {:?}", status),
        }
    }
}
