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
    assert!(!out.status.success(), "{stderr}");
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
