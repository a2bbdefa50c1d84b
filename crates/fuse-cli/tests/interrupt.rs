//! Ctrl-C (SIGINT) keeps fuse's promises: outputs all or nothing, finished measurements kept,
//! and the conventional exit status 130 — never a panic (101) or an abort (134).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name)
        .display()
        .to_string()
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .env_remove("FUSE_CPU_TIMINGS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fuse binary runs")
}

fn interrupt(child: &Child) {
    signal(child, libc::SIGINT);
}

/// Every entry of `dir` with its contents (a folder's as empty).
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut entries: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap_or_default())
        })
        .collect();
    entries.sort();
    entries
}

/// Whether `child` has a file open in `dir`: the moment outputs are being written (they are
/// unnamed files there until all are written, so the folder itself shows nothing). The earlier
/// output `x.npy`, whose first bytes the run reads before it computes (a check that it may
/// replace it), does not count: a signal then ends the run with nothing to undo or report.
fn writing(child: &Child, dir: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", child.id())) else {
        return false;
    };
    let checked = dir.join("x.npy");
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| target.starts_with(dir) && target != dir && target != checked)
    })
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) with the id of a child this test spawned and has not yet waited for.
    let status = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(status, 0, "kill -{signal} {}", child.id());
}

#[test]
fn a_signal_while_outputs_are_written_leaves_the_folder_as_it_was() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGKILL] {
        signal_while_writing(sig);
    }
}

fn signal_while_writing(sig: libc::c_int) {
    let dir = tempfile::tempdir().unwrap();
    // A folder the run makes, two deep: every folder it made goes when it stops.
    let out_dir: PathBuf = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    // An earlier run's output (a .npy array, which the run would replace) and a user's file.
    std::fs::write(out_dir.join("x.npy"), b"\x93NUMPY an earlier x").unwrap();
    std::fs::write(out_dir.join("notes.txt"), "mine").unwrap();
    let before = snapshot(&out_dir);
    let nested = dir.path().join("new").join("deeper");
    for target in [&out_dir, &nested] {
        // x: 2^26 f32 numbers, 256 MiB: long enough to write that the signal lands while it is.
        let args = [
            "run",
            &script("sscal.yaml"),
            "--backend",
            "cpu",
            "--size",
            "n=67108864",
            "--outputs",
            target.to_str().unwrap(),
        ];
        let check = || {
            if target == &out_dir {
                assert_eq!(snapshot(&out_dir), before, "signal {sig}: the folder is as it was");
            } else if sig != libc::SIGKILL {
                // (A killed run cannot remove them: it leaves empty folders, and no file.)
                assert!(
                    !dir.path().join("new").exists(),
                    "signal {sig}: every folder made is removed"
                );
            }
        };
        let reset = || {
            let _ = std::fs::remove_dir_all(dir.path().join("new"));
            std::fs::write(out_dir.join("x.npy"), b"\x93NUMPY an earlier x").unwrap();
        };
        assert!(
            caught_writing(&args, target, sig, check, reset),
            "signal {sig}: the run was never caught while writing its outputs"
        );
    }
}

/// Runs `args` until `sig` lands while outputs are written to `target` (it may finish first on
/// a fast disk: tried a few times, `reset` between), then checks the exit and runs `check`.
fn caught_writing(args: &[&str], target: &Path, sig: libc::c_int, check: impl Fn(), reset: impl Fn()) -> bool {
    for attempt in 1..=3 {
        let mut child = spawn(args);
        let start = Instant::now();
        while !writing(&child, target) && child.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(120), "no output was ever written");
            std::thread::sleep(Duration::from_micros(200));
        }
        let caught = child.try_wait().unwrap().is_none();
        if caught {
            signal(&child, sig);
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stopped = match sig {
            libc::SIGKILL => out.status.code().is_none(),
            _ => out.status.code() == Some(130),
        };
        if caught && stopped {
            if sig != libc::SIGKILL {
                assert!(stderr.contains("interrupted: nothing written to"), "{stderr}");
            }
            check();
            return true;
        }
        // Too late: every output was written.
        assert!(
            out.status.success(),
            "attempt {attempt}, signal {sig}: {:?}: {stderr}",
            out.status
        );
        reset();
    }
    false
}

#[test]
fn ctrl_c_during_bench_keeps_every_finished_measurement() {
    // A dot product of 1000 numbers is measured in a moment; BiCGK at 8192×4096 takes seconds
    // (random inputs of 128 MiB, then 20 timed runs), in which the Ctrl-C lands.
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.yaml");
    let text = "name: small\nsizes: {k: 1000}\ninputs: {x: [k]}\noutputs: [d]\ncalls:\n  - d = sdot(x, x)\n";
    std::fs::write(&small, text).unwrap();
    let args = [
        "bench",
        small.to_str().unwrap(),
        &script("bicgk.yaml"),
        "--backend",
        "cpu",
        "--size",
        "m=8192",
        "--size",
        "n=4096",
        "--runs",
        "20",
    ];
    let mut child = spawn(&args);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("measured small") {
        let mut line = String::new();
        assert_ne!(stderr.read_line(&mut line).unwrap(), 0, "bench ended early: {seen}");
        seen += &line;
    }
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(out.status.code(), Some(130), "{seen}{rest}");
    assert!(rest.contains("interrupted: 1 of 2 scripts measured"), "{rest}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("small ")).collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert!(rows[0].contains("k=1000"), "{stdout}");
    assert!(!stdout.contains("bicgk"), "{stdout}");
}
