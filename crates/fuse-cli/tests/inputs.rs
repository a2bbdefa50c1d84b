//! `fuse run --inputs DIR`: sizes bound from the arrays' shapes, disagreements named, files that
//! are no input warned of, and `--size` given once per symbol.

mod common;

use common::{bicgk_in_f64, bicgk_inputs, fuse, numbers, read_f32, relative_error, script, stderr, write_f32};

#[test]
fn sizes_come_from_the_input_files() {
    let dir = tempfile::tempdir().unwrap();
    let (inputs, outputs) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir(&inputs).unwrap();
    let (rows, cols) = (37, 23);
    let (a, p, r) = bicgk_inputs(&inputs, rows, cols);
    for backend in ["cpu", "reference"] {
        let out_dir = outputs.join(backend);
        let out = fuse(&[
            "run",
            &script("bicgk.yaml"),
            "--backend",
            backend,
            "--inputs",
            inputs.to_str().unwrap(),
            "--outputs",
            out_dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        // q = A·p, s = Aᵀ·r, in f64 from the same f32 numbers.
        let (q, s) = bicgk_in_f64(&a, &p, &r);
        // f32 sums of at most 37 products of numbers in [-1, 1).
        let tolerance = 1e-5;
        for (name, want) in [("q", q), ("s", s)] {
            let got = read_f32(&out_dir.join(format!("{name}.npy")));
            let error = relative_error(&got, &want);
            assert!(error < tolerance, "{backend}: {name} off by {error:e}");
        }
    }
}

#[test]
fn disagreeing_sizes_name_both_sources() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    bicgk_inputs(d, 37, 23);
    let bicgk = script("bicgk.yaml");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", &bicgk, "--inputs", d.to_str().unwrap()];
        args.extend(extra);
        fuse(&args)
    };
    // A file against a file: p is [n] but has 22 numbers, A's n is 23.
    write_f32(&d.join("p.npy"), &[22], &numbers(22, 2));
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let message = stderr(&out);
    assert!(message.contains("size `n` disagrees"), "{message}");
    assert!(
        message.contains("A.npy (input `A`: [m, n]) of shape [37, 23] gives n = 23"),
        "{message}"
    );
    assert!(
        message.contains("p.npy (input `p`: [n]) of shape [22] gives n = 22"),
        "{message}"
    );
    // A file against the flag.
    write_f32(&d.join("p.npy"), &[23], &numbers(23, 2));
    let out = run(&["--size", "m=36"]);
    assert_eq!(out.status.code(), Some(2));
    let message = stderr(&out);
    assert!(message.contains("--size m=36 gives m = 36, but"), "{message}");
    assert!(
        message.contains("A.npy (input `A`: [m, n]) of shape [37, 23] gives m = 37"),
        "{message}"
    );
    // The flag agreeing with the files is fine.
    let out = run(&["--size", "m=37"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn sizes_of_inputs_drawn_at_random_keep_the_default_or_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.yaml");
    let text = "sizes: {n: 4, k: 3}\ninputs: {x: [n], y: [k]}\noutputs: [u, v]\ncalls:\n  - u = sscal(2.0, x)\n  - v = sscal(2.0, y)\n";
    std::fs::write(&path, text).unwrap();
    write_f32(&dir.path().join("x.npy"), &[6], &numbers(6, 1));
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            path.to_str().unwrap(),
            "--inputs",
            dir.path().to_str().unwrap(),
            "--random",
            "y",
        ];
        args.extend(extra);
        let out = fuse(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let summary = run(&[]);
    assert!(
        summary.contains("u  [6] f32") && summary.contains("v  [3] f32"),
        "{summary}"
    );
    let summary = run(&["--size", "k=5"]);
    assert!(
        summary.contains("u  [6] f32") && summary.contains("v  [5] f32"),
        "{summary}"
    );
}

/// A script of the BLAS calls BLAS allows at a length of 0, over `x`, `y` of length n and `A`
/// of m × n.
const EMPTY: &str = "sizes: {m: 3, n: 4}
inputs: {x: [n], y: [n], A: [m, n], r: [m]}
outputs: [d, s, e, q, t, z]
calls:
  - d = sdot(x, y)
  - s = sasum(x)
  - e = snrm2(y)
  - q = sgemv(2.0, A, x, 3.0, r)
  - t = sgemtv(A, r)
  - z = saxpy(2.0, x, y)
";

#[test]
fn empty_vectors_give_what_blas_gives_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let (inputs, path) = (dir.path().join("in"), dir.path().join("empty.yaml"));
    std::fs::write(&path, EMPTY).unwrap();
    std::fs::create_dir(&inputs).unwrap();
    let r = numbers(3, 5);
    write_f32(&inputs.join("x.npy"), &[0], &[]);
    write_f32(&inputs.join("y.npy"), &[0], &[]);
    write_f32(&inputs.join("A.npy"), &[3, 0], &[]);
    write_f32(&inputs.join("r.npy"), &[3], &r);
    // Sums over nothing are 0, so 2·A·x + 3·r is 3·r: one f32 rounding of each element.
    let q: Vec<f64> = r.iter().map(|&v| 3.0 * v as f64).collect();
    for backend in ["reference", "cpu", "emulate"] {
        let out_dir = dir.path().join(backend);
        let (i, o) = (inputs.to_str().unwrap(), out_dir.to_str().unwrap());
        let out = fuse(&[
            "run",
            path.to_str().unwrap(),
            "--backend",
            backend,
            "--inputs",
            i,
            "--outputs",
            o,
        ]);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        for (name, want) in [
            ("d", vec![0.0]),
            ("s", vec![0.0]),
            ("e", vec![0.0]),
            ("t", vec![]),
            ("z", vec![]),
        ] {
            assert_eq!(
                read_f32(&out_dir.join(format!("{name}.npy"))),
                want,
                "{backend}: {name}"
            );
        }
        let error = relative_error(&read_f32(&out_dir.join("q.npy")), &q);
        assert!(error < 1e-7, "{backend}: q off by {error:e}");
    }
    // Sizes from --size, inputs drawn: the same, summarised.
    let out = fuse(&["run", path.to_str().unwrap(), "--backend", "cpu", "--size", "n=0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = common::stdout(&out);
    assert!(
        summary.contains("d  scalar f32  0\n") && summary.contains("t  [0] f32  (empty)"),
        "{summary}"
    );
    assert!(stderr(&out).contains("note: n = 0 (an empty dimension) leaves nothing to fuse"));
    // Plans are made for one element at least: the commands that show or time them say so.
    for command in ["explore", "explain", "bench", "tune"] {
        let out = fuse(&[command, path.to_str().unwrap(), "--size", "n=0"]);
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--size n=0: plans are made for sizes of at least 1"),
            "{command}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_missing_input_is_offered_no_file_of_another_input() {
    let dir = tempfile::tempdir().unwrap();
    write_f32(&dir.path().join("A.npy"), &[5, 4], &numbers(20, 1));
    let run = || {
        let out = fuse(&["run", &script("bicgk.yaml"), "--inputs", dir.path().to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        stderr(&out)
    };
    // `A.npy` is `A`'s own: offered for neither `p` nor `r`, though one letter from each.
    let message = run();
    assert!(
        message.contains("no `p.npy` and `r.npy` for inputs `p` and `r`"),
        "{message}"
    );
    assert!(!message.contains("did you mean"), "{message}");
    // A file that is no input's is still offered.
    write_f32(&dir.path().join("R.npy"), &[5], &numbers(5, 2));
    let message = run();
    assert!(message.contains("did you mean `R.npy` for `r`?"), "{message}");
    assert_eq!(message.matches("did you mean").count(), 1, "{message}");
}

#[test]
fn a_size_given_twice_is_an_error() {
    let bicgk = script("bicgk.yaml");
    for command in ["run", "compile", "explore", "explain", "bench"] {
        let mut args = vec![command, &bicgk];
        args.extend(["--size", "m=5", "--size", "n=4", "--size", "m=7"]);
        if command == "compile" {
            args.extend(["-o", "/nonexistent/never-written"]);
        }
        let out = fuse(&args);
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(
            message.contains("--size m=5 and --size m=7: size `m` is given twice"),
            "{command}: {message}"
        );
    }
}

#[test]
fn a_file_that_is_no_input_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    bicgk_inputs(d, 5, 4);
    write_f32(&d.join("R.npy"), &[5], &numbers(5, 4));
    write_f32(&d.join("notes.npy"), &[1], &[0.0]);
    let out = fuse(&["run", &script("bicgk.yaml"), "--inputs", d.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains("`R.npy` is no input of") && message.contains("bicgk.yaml (did you mean `r.npy`?); not read"),
        "{message}"
    );
    assert!(message.contains("`notes.npy` is no input of"), "{message}");
    assert!(!message.contains("`A.npy` is no input"), "{message}");
}

/// `fuse run bicgk --inputs dir` with the files of `bicgk_inputs` (5 × 3), after `damage`.
fn run_damaged(damage: impl FnOnce(&std::path::Path)) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    bicgk_inputs(dir.path(), 5, 3);
    damage(dir.path());
    let out = fuse(&[
        "run",
        &script("bicgk.yaml"),
        "--backend",
        "cpu",
        "--inputs",
        dir.path().to_str().unwrap(),
    ]);
    (out.status.code(), stderr(&out))
}

#[test]
fn inputs_that_are_not_files_are_named_for_what_they_are() {
    type Damage<'a> = &'a dyn Fn(&std::path::Path);
    let cases: [(&str, Damage, &str); 4] = [
        (
            "dangling link",
            &|d| {
                std::fs::remove_file(d.join("A.npy")).unwrap();
                std::os::unix::fs::symlink("gone.npy", d.join("A.npy")).unwrap();
            },
            "A.npy: is a link to gone.npy, which does not exist",
        ),
        (
            "folder",
            &|d| {
                std::fs::remove_file(d.join("A.npy")).unwrap();
                std::fs::create_dir(d.join("A.npy")).unwrap();
            },
            "A.npy: is a folder, not a regular file",
        ),
        // A FIFO with no writer would block a reader forever.
        (
            "FIFO",
            &|d| {
                std::fs::remove_file(d.join("p.npy")).unwrap();
                common::mkfifo(&d.join("p.npy"));
            },
            "p.npy: is a FIFO (named pipe), not a regular file",
        ),
        (
            "device",
            &|d| {
                std::fs::remove_file(d.join("r.npy")).unwrap();
                std::os::unix::fs::symlink("/dev/zero", d.join("r.npy")).unwrap();
            },
            "r.npy: is a character device, not a regular file",
        ),
    ];
    for (what, damage, message) in cases {
        let (code, stderr) = run_damaged(damage);
        assert_eq!(code, Some(2), "{what}: {stderr}");
        assert!(stderr.contains(message), "{what}: {stderr}");
        assert!(!stderr.contains("did you mean"), "{what}: {stderr}");
    }
}

/// The bytes of a `.npy` file of format `version` whose header text is `header`, padded as
/// numpy pads it, with the header length `claimed` where given, then `data`.
fn npy_bytes(version: u8, header: &str, claimed: Option<u32>, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x93, b'N', b'U', b'M', b'P', b'Y', version, 0];
    let len = claimed.unwrap_or(header.len() as u32);
    match version {
        1 => out.extend((len as u16).to_le_bytes()),
        _ => out.extend(len.to_le_bytes()),
    }
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

#[test]
fn a_header_length_beyond_the_file_or_the_limit_is_refused_before_allocating() {
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n";
    let data = [0u8; 12];
    for (claimed, message) in [
        (
            u32::MAX,
            "its header claims 4294967295 bytes, more than the 1048576 fuse reads",
        ),
        (60_000, "its header claims 60000 bytes, more than the file's"),
    ] {
        let (code, stderr) =
            run_damaged(|d| std::fs::write(d.join("p.npy"), npy_bytes(2, header, Some(claimed), &data)).unwrap());
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(message), "{stderr}");
    }
}

#[test]
fn a_repeated_header_key_counts_as_numpy_counts_it_the_last() {
    // numpy evaluates the header as a dict literal, in which the last of a key wins.
    let header = "{'descr': '<f8', 'fortran_order': False, 'shape': (9,), 'descr': '<f4', 'shape': (3,), }\n";
    let p: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let (code, stderr) = run_damaged(|d| std::fs::write(d.join("p.npy"), npy_bytes(1, header, None, &p)).unwrap());
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_long_header_is_quoted_in_part() {
    let header = format!("{{'descr': '<f4', 'shape': (3,), 'x': '{}' }}\n", "y".repeat(200_000));
    let (code, stderr) = run_damaged(|d| std::fs::write(d.join("p.npy"), npy_bytes(2, &header, None, &[])).unwrap());
    assert_eq!(code, Some(2), "{}", &stderr[..stderr.len().min(500)]);
    assert!(stderr.contains("bytes in all)"), "{}", &stderr[..stderr.len().min(500)]);
    assert!(stderr.len() < 1000, "the message is {} bytes", stderr.len());
}

#[test]
fn bytes_of_a_corrupt_header_are_shown_escaped() {
    let cases = [
        // NULs where numpy pads with spaces: no dict, quoted.
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\0\0\n",
            "}\\x00\\x00",
        ),
        // An escape sequence inside the dtype, which the header's literal decodes.
        (
            "{'descr': '<f4\\x1b[31m', 'fortran_order': False, 'shape': (3,), }\n",
            "its dtype is <f4\\x1b[31m",
        ),
    ];
    for (header, shown) in cases {
        let p = [0u8; 12];
        let (code, stderr) = run_damaged(|d| std::fs::write(d.join("p.npy"), npy_bytes(1, header, None, &p)).unwrap());
        assert_eq!(code, Some(2), "{stderr:?}");
        assert!(stderr.contains(shown), "{stderr:?}");
        assert!(!stderr.contains(['\0', '\x1b']), "{stderr:?}");
        assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    }
}

#[test]
fn a_folder_that_cannot_be_listed_says_so() {
    // Root reads any folder: the run is made as another user, where this test runs as root.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running fuse as a second user needs root (the CI runs as root)");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    bicgk_inputs(&inputs, 5, 3);
    std::fs::set_permissions(&inputs, std::fs::Permissions::from_mode(0o711)).unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args([
            "run",
            &script("bicgk.yaml"),
            "--backend",
            "reference",
            "--inputs",
            inputs.to_str().unwrap(),
        ])
        .env("HOME", dir.path())
        .uid(65534)
        .gid(65534)
        .output();
    let Ok(out) = run else {
        eprintln!("skipped: user 65534 cannot run the fuse binary here: {run:?}");
        return;
    };
    let stderr = stderr(&out);
    if stderr.contains("Permission denied") && stderr.contains("bicgk.yaml") {
        eprintln!("skipped: user 65534 cannot read the checkout: {stderr}");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot list it: Permission denied"), "{stderr}");
}
