//! fuse's caches hold code it loads and runs: a cache folder someone else could write is
//! refused, and a damaged entry is rebuilt rather than reported forever.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn run_emulated(cache: &Path) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/sscal.yaml");
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .arg("run")
        .arg(script)
        .args(["--backend", "emulate", "--size", "n=5"])
        .env("FUSE_CACHE_DIR", cache)
        .output()
        .expect("the fuse binary runs")
}

#[test]
fn a_planted_module_in_a_shared_folder_is_never_loaded() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("emulate");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Whatever name the run would ask for, the folder itself is refused.
    std::fs::write(shared.join("planted.so"), b"\x7fELF not really").unwrap();
    let out = run_emulated(root.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is writable by others (mode 777): refusing to use it"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&shared).unwrap().count(),
        1,
        "nothing built or changed there"
    );
}

#[test]
fn a_damaged_cached_module_is_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let first = run_emulated(root.path());
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let dir = root.path().join("emulate");
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "so") {
            std::fs::write(&path, b"\x7fELF").unwrap(); // truncated
        }
    }
    let again = run_emulated(root.path());
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(again.stdout, first.stdout);
}

#[test]
fn a_cache_below_a_folder_others_may_write_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Anyone could rename `fuse` away and put their own in its place.
    let out = run_emulated(&shared.join("fuse"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}, a folder on its way, is writable by others",
            shared.display()
        )),
        "{stderr}"
    );
    assert!(!shared.join("fuse").exists(), "nothing made below it");
}

#[test]
fn an_interrupted_build_leaves_no_compiler_and_no_files() {
    let root = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gemver.yaml");
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let cache = root.path().join(format!("cache{signal}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_fuse"))
            .arg("run")
            .arg(&script)
            .args(["--backend", "emulate", "--size", "m=7", "--size", "n=5"])
            .env("FUSE_CACHE_DIR", &cache)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The compile of a fresh cache takes seconds: wait until the compiler runs.
        let emulate = cache.join("emulate");
        let started = std::time::Instant::now();
        while !compilers_running_in(&cache) {
            assert!(started.elapsed().as_secs() < 60, "no build started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "signal {signal}");
        assert!(
            scratch_folders(&emulate).is_empty(),
            "signal {signal}: a build folder is left"
        );
        // Killed, they take a moment to go.
        let killed = std::time::Instant::now();
        while compilers_running_in(&cache) {
            assert!(
                killed.elapsed().as_secs() < 5,
                "signal {signal}: a compiler still runs in the cache"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

fn scratch_folders(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".scratch-"))
        .collect()
}

/// Whether a process works in a folder below `dir` (a removed one included).
fn compilers_running_in(dir: &Path) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|process| std::fs::read_link(process.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
}

#[test]
fn a_slow_first_compile_is_announced_and_a_cached_one_is_not() {
    // A compiler that takes two seconds, as a first emulated compile takes on a busy machine.
    let dir = tempfile::tempdir().unwrap();
    let compiler = dir.path().join("slow-c++");
    std::fs::write(&compiler, "#!/bin/sh\nsleep 2\nexec c++ \"$@\"\n").unwrap();
    std::fs::set_permissions(&compiler, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = dir.path().join("cache");
    let run = || {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/sscal.yaml");
        let out = Command::new(env!("CARGO_BIN_EXE_fuse"))
            .arg("run")
            .arg(script)
            .args(["--backend", "emulate", "--size", "n=5"])
            .env("FUSE_CACHE_DIR", &cache)
            .env("CXX", &compiler)
            .output()
            .expect("the fuse binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let note = "note: compiling the kernels of sscal for emulation with the host C++ compiler (seconds, once: later runs take the module from the cache)\n";
    let first = run();
    assert_eq!(first.matches(note).count(), 1, "{first}");
    let second = run();
    assert!(!second.contains("note: compiling"), "{second}");
}
