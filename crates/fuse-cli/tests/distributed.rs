//! `mpirun -n R fuse run --distributed`: every bundled script over 1–3 ranks gives the outputs
//! of a single-process run; inputs are read by rows from `.npy` files; a rank that fails makes
//! every rank exit 2, its message said once, and nothing is written; ranks that disagree on
//! what they run are told who has what before any data moves. `fuse solve --distributed` solves
//! as one process does, and stops every rank alike.

#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{bicgk_in_f64, bicgk_inputs, fuse, read_f32, relative_error, repo, script, stderr};

/// `mpirun -n ranks fuse args…` (as root too, where CI runs; more ranks than cores allowed).
fn mpirun(ranks: usize, args: &[&str]) -> Output {
    mpmd(&[(ranks, args)])
}

/// `mpirun -n R₀ fuse args₀… : -n R₁ fuse args₁… : …`: ranks started with other arguments
/// (the first group are ranks 0 to R₀ − 1, and so on).
fn mpmd(groups: &[(usize, &[&str])]) -> Output {
    let mut command = Command::new("mpirun");
    command.arg("--oversubscribe");
    for (k, (ranks, args)) in groups.iter().enumerate() {
        if k > 0 {
            command.arg(":");
        }
        command
            .args(["-n", &ranks.to_string(), env!("CARGO_BIN_EXE_fuse")])
            .args(*args);
    }
    command
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env_remove("FUSE_CPU_TIMINGS")
        .output()
        .expect("mpirun runs (install Open MPI: apt-get install openmpi-bin libopenmpi-dev)")
}

/// The one `error: …` line of a failed run (every rank fails; rank 0 alone says it).
fn the_error(out: &Output) -> String {
    let err = stderr(out);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "said once:\n{err}");
    errors[0].to_string()
}

fn outputs_of(dir: &Path, names: &[&str]) -> Vec<Vec<f32>> {
    names.iter().map(|n| read_f32(&dir.join(format!("{n}.npy")))).collect()
}

/// `script` (outputs `names`) over 1–3 ranks gives the single-process reference run's outputs.
fn matches_the_reference_over_ranks(script: &str, names: &[&str], sizes: &[&str], dir: &Path) {
    let want_dir = dir.join("want");
    let mut args = vec![
        "run",
        script,
        "--backend",
        "reference",
        "--seed",
        "5",
        "--force",
        "--outputs",
    ];
    args.push(want_dir.to_str().unwrap());
    args.extend(sizes);
    let out = fuse(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let want = outputs_of(&want_dir, names);
    for ranks in [1, 2, 3] {
        let got_dir = dir.join(format!("got{ranks}"));
        let mut args = vec!["run", script, "--distributed", "--seed", "5", "--force", "--outputs"];
        args.push(got_dir.to_str().unwrap());
        args.extend(sizes);
        let out = mpirun(ranks, &args);
        assert!(out.status.success(), "{script} over {ranks}: {}", stderr(&out));
        for ((name, got), want) in names.iter().zip(outputs_of(&got_dir, names)).zip(&want) {
            let want: Vec<f64> = want.iter().map(|&x| x as f64).collect();
            let error = relative_error(&got, &want);
            assert!(error < 2e-5, "{script} over {ranks} ranks: `{name}` off by {error:e}");
        }
    }
}

#[test]
fn every_bundled_script_over_ranks_matches_the_reference_run() {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(repo().join("scripts")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let outputs_line = text.lines().find(|l| l.starts_with("outputs:")).unwrap();
        let names: Vec<&str> = outputs_line["outputs:".len()..]
            .trim()
            .trim_matches(['[', ']'])
            .split(',')
            .map(str::trim)
            .collect();
        let sizes: &[&str] = match text.contains("m:") {
            true => &["--size", "m=37", "--size", "n=23"],
            false => &["--size", "n=1001"],
        };
        matches_the_reference_over_ranks(path.to_str().unwrap(), &names, sizes, dir.path());
    }
}

/// A solver step whose values change distribution every way: a partial sum reduce-scattered
/// into row blocks and all-reduced, row blocks all-gathered, norms combined, a term added once.
const EVERY_COLLECTIVE: &str = "
name: step
precision: f32
sizes: {n: 41}
inputs: {A: [n, n], p: [n], r: [n], alpha: scalar}
outputs: [t, w, nr, x, y]
calls:
  - q = sgemv(A, p)
  - s = sgemtv(A, r)
  - t = sadd(s, q)
  - w = sgemv(A, t)
  - nr = snrm2(w)
  - x = sgemtv(alpha, A, q, nr, p)
  - u = sgemtv(A, t)
  - y = sgemv(A, u)
";

#[test]
fn every_collective_over_mpi_matches_the_reference_run() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("step.yaml");
    std::fs::write(&script, EVERY_COLLECTIVE).unwrap();
    let script = script.to_str().unwrap();
    let explained = fuse(&["explain", script, "--ranks", "3", "--backend", "cpu"]);
    let plan = String::from_utf8_lossy(&explained.stdout);
    for collective in [
        "reduce-scatter",
        "all-gather",
        "all-reduce",
        "all-gather of norms",
        "gather to rank 0",
    ] {
        assert!(plan.contains(collective), "no {collective} in\n{plan}");
    }
    matches_the_reference_over_ranks(script, &["t", "w", "nr", "x", "y"], &[], dir.path());
}

/// BiCGK over `ranks` ranks from the files in `inputs`, outputs to `outputs`.
fn bicgk(ranks: usize, inputs: &Path, outputs: &Path) -> Output {
    let (inputs, outputs) = (inputs.to_str().unwrap(), outputs.to_str().unwrap());
    mpirun(
        ranks,
        &[
            "run",
            &script("bicgk.yaml"),
            "--distributed",
            "--inputs",
            inputs,
            "--outputs",
            outputs,
        ],
    )
}

#[test]
fn each_rank_reads_its_rows_of_the_input_files() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (101, 29);
    let inputs = dir.path().join("in");
    let (a, p, r) = bicgk_inputs(&inputs, rows, cols);
    let (q, s) = bicgk_in_f64(&a, &p, &r);
    for ranks in [2, 3] {
        let out_dir = dir.path().join(format!("out{ranks}"));
        let out = bicgk(ranks, &inputs, &out_dir);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(relative_error(&read_f32(&out_dir.join("q.npy")), &q) < 1e-6);
        assert!(relative_error(&read_f32(&out_dir.join("s.npy")), &s) < 1e-6);
    }
}

/// BiCGK under `mpirun -n 1 … : -n 3 …`, rank 0 given `first` and ranks 1–3 `rest` as extra
/// arguments, outputs to `outputs`.
fn bicgk_mpmd(first: &[&str], rest: &[&str], outputs: &Path) -> Output {
    let script = script("bicgk.yaml");
    let base = ["run", &script, "--distributed", "--outputs", outputs.to_str().unwrap()];
    let args = |extra: &[&str]| -> Vec<String> { base.iter().chain(extra).map(|s| s.to_string()).collect() };
    let (first, rest) = (args(first), args(rest));
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    mpmd(&[(1, &first), (3, &rest)])
}

/// Ranks that read inputs of other sizes (rank 0 more rows than the others, or fewer: once a
/// wrong `q` of 120 rows, once an abort in MPI) stop before any data moves, with one message
/// naming who has what, exit status 2 and nothing written.
#[test]
fn ranks_reading_inputs_of_other_sizes_are_told_who_has_what() {
    let dir = tempfile::tempdir().unwrap();
    let (big, small) = (dir.path().join("in120"), dir.path().join("in100"));
    bicgk_inputs(&big, 120, 30);
    bicgk_inputs(&small, 100, 30);
    let (big, small) = (big.to_str().unwrap(), small.to_str().unwrap());
    for (first, rest, m0, m) in [(big, small, 120, 100), (small, big, 100, 120)] {
        let out_dir = dir.path().join(format!("out{m0}"));
        let out = bicgk_mpmd(&["--inputs", first], &["--inputs", rest], &out_dir);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let error = the_error(&out);
        let want = format!(
            "error: the ranks disagree: rank 0 has m = {m0}, ranks 1–3 have m = {m}; \
             rank 0 has {first}/A.npy of float32 ({m0}, 30), ranks 1–3 have {rest}/A.npy of float32 ({m}, 30); \
             rank 0 has {first}/r.npy of float32 ({m0},), ranks 1–3 have {rest}/r.npy of float32 ({m},)"
        );
        assert_eq!(error, want);
        assert!(!out_dir.exists(), "nothing is written");
    }
}

/// Ranks that run other scripts, give other sizes or draw inputs with other seeds are told
/// which; copies of one script in two folders, or a size given to every rank, agree.
#[test]
fn ranks_with_other_scripts_sizes_or_seeds_are_told_which() {
    let dir = tempfile::tempdir().unwrap();
    let scaled = dir.path().join("bicgk.yaml");
    let text = std::fs::read_to_string(script("bicgk.yaml")).unwrap();
    std::fs::write(&scaled, text.replace("sgemtv(A, r)", "sgemtv(2.0, A, r)")).unwrap();
    let out_dir = dir.path().join("out");
    let small = ["--size", "n=20"];
    let case = |first: &[&str], rest: &[&str]| {
        let (first, rest) = ([&small[..], first].concat(), [&small[..], rest].concat());
        bicgk_mpmd(&first, &rest, &out_dir)
    };
    let double = dir.path().join("bicgk-f64.yaml");
    std::fs::write(&double, text.replace("f32", "f64").replace("= sgem", "= dgem")).unwrap();
    for (other, also) in [
        (&scaled, ""),
        (&double, "; ranks 0–2 have precision f32, rank 3 has precision f64"),
    ] {
        let other = other.to_str().unwrap();
        let out = mpmd(&[
            (
                3,
                &["run", &common::script("bicgk.yaml"), "--distributed", "--size", "m=40"],
            ),
            (1, &["run", other, "--distributed", "--size", "m=40"]),
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let error = the_error(&out);
        let script = common::script("bicgk.yaml");
        assert!(
            error.starts_with(&format!(
                "error: the ranks disagree: ranks 0–2 have the script {script} ("
            )) && error.contains(&format!("), rank 3 has the script {other} ("))
                && error.ends_with(&format!("){also}")),
            "{error}"
        );
    }
    for (first, rest, want) in [
        (
            &["--size", "m=40", "--seed", "1"][..],
            &["--size", "m=40", "--seed", "2"][..],
            "rank 0 has --seed 1, ranks 1–3 have --seed 2",
        ),
        (
            &["--size", "m=41"],
            &["--size", "m=40"],
            "rank 0 has m = 41, ranks 1–3 have m = 40",
        ),
        (
            &["--size", "m=40", "--backend", "reference"],
            &["--size", "m=40"],
            "rank 0 has backend reference, ranks 1–3 have backend cpu",
        ),
    ] {
        let out = case(first, rest);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(the_error(&out), format!("error: the ranks disagree: {want}"));
    }
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::write(copy.join("bicgk.yaml"), &text).unwrap();
    let out = mpmd(&[
        (
            1,
            &["run", &common::script("bicgk.yaml"), "--distributed", "--size", "m=40"],
        ),
        (
            1,
            &[
                "run",
                copy.join("bicgk.yaml").to_str().unwrap(),
                "--distributed",
                "--size",
                "m=40",
            ],
        ),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let same = ["--size", "m=40", "--seed", "1"];
    assert!(case(&same, &same).status.success());
}

/// `fuse explain --ranks R` shows the local scripts at a rank's sizes, not the whole problem's.
#[test]
fn explain_shows_the_local_scripts_at_rank_0s_sizes() {
    let out = fuse(&[
        "explain",
        &script("bicgk.yaml"),
        "--ranks",
        "4",
        "--size",
        "m=1001",
        "--backend",
        "cpu",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("local scripts at rank 0's sizes (`m_local` = 251 of `m`)"),
        "{text}"
    );
    assert!(text.contains("     sizes: {m_local: 251, n: 4096}\n"), "{text}");
}

#[test]
fn a_short_file_on_one_rank_stops_every_rank_with_its_message_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    bicgk_inputs(&inputs, 90, 30);
    // The last rank's rows are cut off.
    let a = inputs.join("A.npy");
    let bytes = std::fs::read(&a).unwrap();
    std::fs::write(&a, &bytes[..bytes.len() - 4 * 30 * 10]).unwrap();
    let out_dir = dir.path().join("out");
    let out = bicgk(3, &inputs, &out_dir);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // Rank 2's error, said once, with the 600 elements of its 900 that are there.
    let error = the_error(&out);
    assert_eq!(
        error,
        format!(
            "error: rank 2 of 3: {}: ends after 600 of its 900 elements",
            a.display().to_string() + " (rows 60..90)"
        )
    );
    assert!(!out_dir.exists(), "nothing is written");
}

#[test]
fn more_ranks_than_rows_is_refused_by_every_rank() {
    let out = mpirun(3, &["run", &script("bicgk.yaml"), "--distributed", "--size", "m=2"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot split 2 rows (`m`) over 3 ranks"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn calibrated_links_time_the_collectives_of_explain() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("links.yaml");
    let out = mpirun(2, &["calibrate", "--distributed", "-o", table.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = fuse(&[
        "explain",
        &script("bicgk.yaml"),
        "--ranks",
        "2",
        "--links",
        table.to_str().unwrap(),
        "--backend",
        "cpu",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 ranks on "), "{text}");
    let notes = dir.path().join("notes.yaml");
    std::fs::write(&notes, "my: notes\n").unwrap();
    let refused = mpirun(2, &["calibrate", "--distributed", "-o", notes.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        the_error(&refused).contains("not a links table"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my: notes\n");
    let alone = mpirun(1, &["calibrate", "--distributed"]);
    assert_eq!(alone.status.code(), Some(2), "{}", stderr(&alone));
    assert!(
        stderr(&alone).contains("one rank has no links to measure"),
        "{}",
        stderr(&alone)
    );
}

/// Without a GPU, asking every rank for one stops them all with exit status 3, as `fuse run` does.
#[test]
fn the_cuda_backend_without_a_gpu_stops_every_rank_with_status_3() {
    if std::env::var_os("FUSE_TEST_CUDA").is_some_and(|v| v == "1") {
        return; // a GPU is here
    }
    let out = mpirun(
        2,
        &[
            "run",
            &script("bicgk.yaml"),
            "--distributed",
            "--backend",
            "cuda",
            "--size",
            "m=8",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("rank 0 of 2: no NVIDIA GPU"), "{}", stderr(&out));
}

#[test]
fn timing_says_where_rank_0_spent_its_run() {
    let out = mpirun(
        2,
        &[
            "run",
            &script("bicgk.yaml"),
            "--distributed",
            "--timing",
            "--size",
            "m=300",
            "--size",
            "n=200",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.starts_with("timing on rank 0 of 2: "))
        .unwrap_or_else(|| panic!("{err}"));
    for part in ["read ", "compute ", "collectives "] {
        assert!(line.contains(part) && line.contains(" ms"), "{line}");
    }
}

/// A well-conditioned system of order `n` in f64 (A symmetric positive definite: CG's), with
/// a starting guess, written to `dir` as A.npy, b.npy and x0.npy.
fn f64_system(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let random = common::numbers(n * n + 2 * n, 11);
    let mut a = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..n {
            a[i * n + j] = f64::from(random[i.min(j) * n + i.max(j)]);
        }
        a[i * n + i] += 2.0 * n as f64;
    }
    let write = |name: &str, shape: &[usize], data: &[f64]| {
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        common::write_npy(&dir.join(format!("{name}.npy")), "<f8", shape, &bytes);
    };
    let vector = |k: usize| -> Vec<f64> { random[n * n + k * n..][..n].iter().map(|&v| f64::from(v)).collect() };
    write("A", &[n, n], &a);
    write("b", &[n], &vector(0));
    write("x0", &[n], &vector(1));
}

/// The numbers of a float64 `.npy` file.
fn read_f64(path: &Path) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap();
    let start = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    bytes[start..]
        .chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `mpirun -n R fuse solve --distributed` over 1–3 ranks writes the x of the one-process
/// `fuse solve` (CG with Jacobi from zeros, GMRES from x0.npy) to 1e-10, and says how it ended
/// once, as that solve does.
#[test]
fn solve_over_ranks_writes_the_one_process_solution() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    f64_system(&inputs, 37);
    let cg_inputs = dir.path().join("cg-in");
    std::fs::create_dir_all(&cg_inputs).unwrap();
    for name in ["A", "b"] {
        std::fs::copy(
            inputs.join(format!("{name}.npy")),
            cg_inputs.join(format!("{name}.npy")),
        )
        .unwrap();
    }
    for (method, inputs, extra) in [("cg", &cg_inputs, "--jacobi"), ("gmres", &inputs, "--restart=7")] {
        let solve = |outputs: &Path| {
            let (inputs, outputs) = (inputs.to_str().unwrap(), outputs.to_str().unwrap());
            vec![
                "solve",
                method,
                extra,
                "--rtol",
                "1e-10",
                "--inputs",
                inputs,
                "--outputs",
                outputs,
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
        };
        let want_dir = dir.path().join(format!("{method}-want"));
        let args = [solve(&want_dir), vec!["--backend".into(), "cpu".into()]].concat();
        let one = fuse(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(one.status.success(), "{}", stderr(&one));
        let said = |out: &Output| -> Vec<String> {
            (stderr(out).lines())
                .filter(|l| l.starts_with(&format!("{method}: ")))
                .map(|l| l.split(';').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(said(&one).len(), 1, "{}", stderr(&one));
        let want = read_f64(&want_dir.join("x.npy"));
        for ranks in [1, 2, 3] {
            let got_dir = dir.path().join(format!("{method}-got{ranks}"));
            let args = [solve(&got_dir), vec!["--distributed".into()]].concat();
            let out = mpirun(ranks, &args.iter().map(String::as_str).collect::<Vec<_>>());
            assert!(out.status.success(), "{method} over {ranks}: {}", stderr(&out));
            assert_eq!(
                said(&out),
                said(&one),
                "{method} over {ranks}: said once, as one process"
            );
            let got = read_f64(&got_dir.join("x.npy"));
            let diff: f64 = got.iter().zip(&want).map(|(g, w)| (g - w).powi(2)).sum();
            let norm: f64 = want.iter().map(|w| w * w).sum();
            let error = (diff / norm).sqrt();
            assert!(error <= 1e-10, "{method} over {ranks} ranks: x off by {error:e}");
        }
    }
}

/// A b of the wrong length stops every rank with exit status 2 and one message naming the
/// file; a solve out of iterations exits 1 on every rank, said once, x still written.
#[test]
fn solve_over_ranks_refuses_a_wrong_b_and_says_not_converged_once() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    f64_system(&inputs, 37);
    let out_dir = dir.path().join("out");
    let (i, o) = (inputs.to_str().unwrap(), out_dir.to_str().unwrap());
    let out = mpirun(
        2,
        &[
            "solve",
            "cg",
            "--distributed",
            "--maxiter",
            "2",
            "--inputs",
            i,
            "--outputs",
            o,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(the_error(&out), "error: cg: not converged");
    assert_eq!(read_f64(&out_dir.join("x.npy")).len(), 37);
    let b = inputs.join("b.npy");
    common::write_npy(&b, "<f8", &[38], &[0u8; 38 * 8]);
    let out_dir = dir.path().join("out-bad");
    let o = out_dir.to_str().unwrap();
    let out = mpirun(3, &["solve", "gmres", "--distributed", "--inputs", i, "--outputs", o]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        the_error(&out),
        format!("error: rank 0 of 3: {}: b has length 38, A is 37×37", b.display())
    );
    assert!(!out_dir.exists(), "nothing is written");
}
