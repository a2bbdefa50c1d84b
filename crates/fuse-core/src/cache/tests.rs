use super::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn mode(path: &Path) -> u32 {
    std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(path).unwrap()) & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A temporary folder for tests that walk from it: private, as a home folder would be.
fn base() -> tempfile::TempDir {
    let base = tempfile::tempdir().unwrap();
    chmod(base.path(), 0o700);
    base
}

#[test]
fn a_private_folder_is_made_and_a_shared_one_refused_not_repaired() {
    let base = base();
    let root = base.path().join("a").join("fuse");
    let cache = CacheDir::open_in(&root, "emulate").unwrap();
    assert_eq!(cache.path(), root.join("emulate"));
    for made in [base.path().join("a"), root.clone(), root.join("emulate")] {
        assert_eq!(mode(&made), 0o700, "{}", made.display());
    }
    chmod(&root.join("emulate"), 0o777);
    let err = CacheDir::open_in(&root, "emulate").unwrap_err().to_string();
    assert!(
        err.contains("writable by others (mode 777)") && err.contains(CACHE_ENV),
        "{err}"
    );
    assert_eq!(mode(&root.join("emulate")), 0o777);
    // The root itself must be private too, and read-only use refuses what writing refuses.
    chmod(&root.join("emulate"), 0o700);
    chmod(&root, 0o770);
    assert!(matches!(
        CacheDir::open_existing_in(&root, "emulate"),
        Err(CacheError::NotPrivate { dir, .. }) if dir == root
    ));
}

#[test]
fn read_only_use_creates_nothing() {
    let base = base();
    let root = base.path().join("fuse");
    assert!(CacheDir::open_existing_in(&root, "tune").unwrap().is_none());
    assert!(!root.exists());
}

#[test]
fn a_folder_above_the_root_that_others_may_write_is_refused_unless_sticky() {
    let base = base();
    let shared = base.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o777);
    let root = shared.join("mine").join("fuse");
    assert_refused(
        CacheDir::open_in(&root, "modules"),
        &shared,
        "writable by others (mode 777)",
    );
    assert!(!shared.join("mine").exists(), "nothing is made below a refused folder");
    // Like /tmp: others may write it, but not rename what is ours in it.
    chmod(&shared, 0o1777);
    CacheDir::open_in(&root, "modules").unwrap();
}

#[test]
fn links_on_the_way_are_resolved_and_checked_where_they_lead() {
    let base = base();
    let real = base.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, base.path().join("link")).unwrap();
    let cache = CacheDir::open_in(&base.path().join("link").join("fuse"), "emulate").unwrap();
    cache.write("x", b"1").unwrap();
    assert_eq!(std::fs::read(real.join("fuse/emulate/x")).unwrap(), b"1");
    // Below the root, a link is never followed: only folders fuse made are used.
    std::os::unix::fs::symlink(&real, real.join("fuse").join("tune")).unwrap();
    assert!(CacheDir::open_in(&real.join("fuse"), "tune").is_err());
}

#[test]
fn a_folder_swapped_after_it_was_opened_changes_nothing() {
    let base = base();
    let root = base.path().join("fuse");
    let cache = CacheDir::open_in(&root, "emulate").unwrap();
    cache.store("m.so", b"ours").unwrap();
    // Another folder with its own entry of the same name takes the path.
    std::fs::rename(root.join("emulate"), root.join("moved")).unwrap();
    let planted = CacheDir::open_in(&root, "emulate").unwrap();
    planted.store("m.so", b"planted").unwrap();
    assert_eq!(cache.load("m.so").unwrap().unwrap(), b"ours");
    cache.store("n.so", b"new").unwrap();
    assert!(root.join("moved").join("n.so").exists());
    assert!(!root.join("emulate").join("n.so").exists());
}

#[test]
fn a_rename_racing_the_reads_changes_nothing() {
    let base = base();
    let root = base.path().join("fuse");
    let cache = CacheDir::open_in(&root, "emulate").unwrap();
    cache.store("m.so", b"ours").unwrap();
    CacheDir::open_in(&root, "planted")
        .unwrap()
        .store("m.so", b"planted")
        .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Swap the two folders' names, over and over, while the entry is read.
            let (a, b, t) = (root.join("emulate"), root.join("planted"), root.join("swap"));
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::rename(&a, &t).unwrap();
                std::fs::rename(&b, &a).unwrap();
                std::fs::rename(&t, &b).unwrap();
            }
        });
        for _ in 0..2000 {
            assert_eq!(cache.load("m.so").unwrap().unwrap(), b"ours");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

#[test]
fn sealed_entries_load_only_when_intact() {
    let base = base();
    let cache = CacheDir::open_in(&base.path().join("fuse"), "").unwrap();
    let module = b"\x7fELF and the rest of a module".repeat(100);
    cache.store("m", &module).unwrap();
    assert_eq!(cache.load("m").unwrap().unwrap(), module);
    assert!(cache.load("missing").unwrap().is_none());
    let file = base.path().join("fuse").join("m");
    let sealed = std::fs::read(&file).unwrap();
    for damaged in [sealed[..sealed.len() - 1].to_vec(), sealed[..10].to_vec(), {
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        flipped
    }] {
        std::fs::write(&file, damaged).unwrap();
        assert!(cache.load("m").unwrap().is_none());
        assert!(!file.exists(), "a damaged entry is removed, to be rebuilt");
    }
}

#[test]
fn the_root_never_falls_back_to_a_shared_folder() {
    let vars =
        |set: &'static [(&str, &str)]| move |name: &str| set.iter().find(|(n, _)| *n == name).map(|(_, v)| v.into());
    let root = |set, home: Option<&str>| root_from(vars(set), || home.map(PathBuf::from));
    assert_eq!(root(&[(CACHE_ENV, "/c")], Some("/h")).unwrap(), Path::new("/c"));
    assert_eq!(
        root(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")], None).unwrap(),
        Path::new("/x/fuse")
    );
    // A relative XDG_CACHE_HOME is ignored, as the XDG specification says.
    assert_eq!(
        root(&[("XDG_CACHE_HOME", "x"), ("HOME", "/h")], None).unwrap(),
        Path::new("/h/.cache/fuse")
    );
    // HOME unset (cron, services, env -i): the home in the password database.
    assert_eq!(root(&[], Some("/pw")).unwrap(), Path::new("/pw/.cache/fuse"));
    assert_eq!(
        root(&[("XDG_RUNTIME_DIR", "/run/user/7")], None).unwrap(),
        Path::new("/run/user/7/fuse")
    );
    let err = root(&[], None).unwrap_err().to_string();
    assert!(err.contains(CACHE_ENV), "{err}");
    // This user's real home is found without HOME.
    assert!(home_of_user().is_some_and(|h| h.is_absolute()));
}

/// Asserts that `opened` was refused because of folder `at`, for a reason containing `why`.
fn assert_refused(opened: Result<CacheDir, CacheError>, at: &Path, why: &str) {
    match opened {
        Err(CacheError::NotPrivate { dir, why: reason, .. }) => {
            assert_eq!(dir, at);
            assert!(reason.contains(why), "{reason}");
        }
        other => panic!("used a cache it should refuse ({why}): {other:?}"),
    }
}

/// Runs `command` as user `nobody` (65534): only root can, so `None` where this is not root.
fn as_another_user(program: &str, args: &[&Path]) -> Option<()> {
    if current_user() != 0 {
        eprintln!("skipped: planting a folder as a second user needs root (the CI runs as root)");
        return None;
    }
    let status = Command::new(program).args(args).uid(65534).gid(65534).status().unwrap();
    assert!(status.success(), "{program} as user 65534");
    Some(())
}

use std::os::unix::process::CommandExt;

#[test]
fn a_folder_planted_by_another_user_is_refused() {
    let base = base();
    chmod(base.path(), 0o1777);
    let root = base.path().join("fuse");
    // Another user makes the cache root first, open to all, with a module of their own.
    let Some(()) = as_another_user("mkdir", &[&root, &root.join("emulate")]) else {
        return;
    };
    as_another_user("chmod", &[Path::new("777"), &root, &root.join("emulate")]).unwrap();
    assert_refused(CacheDir::open_in(&root, "emulate"), &root, "belongs to user 65534");
}

#[test]
fn a_cache_below_a_folder_of_another_user_is_refused() {
    let base = base();
    chmod(base.path(), 0o1777);
    let theirs = base.path().join("theirs");
    // A folder of another user that only they can write, with ours inside: they could still
    // rename ours away and put theirs in its place.
    let Some(()) = as_another_user("mkdir", &[&theirs]) else {
        return;
    };
    std::fs::create_dir(theirs.join("mine")).unwrap();
    assert_refused(
        CacheDir::open_in(&theirs.join("mine"), ""),
        &theirs,
        "belongs to user 65534",
    );
}

#[test]
fn scratch_folders_go_when_dropped_and_when_abandoned_not_while_held() {
    let base = base();
    let cache = CacheDir::open_in(&base.path().join("fuse"), "emulate").unwrap();
    let folder = cache.path().to_owned();
    let held = cache.scratch().unwrap();
    held.dir().write("kernel.cu", "int x;").unwrap();
    assert_eq!(std::fs::read(held.handle_path("kernel.cu")).unwrap(), b"int x;");
    // A killed run's folder holds no lock.
    let abandoned = folder.join(format!("{SCRATCH_PREFIX}0000000000000000"));
    std::fs::create_dir(&abandoned).unwrap();
    cache.remove_abandoned(std::time::Duration::from_secs(3600));
    assert!(
        abandoned.exists(),
        "a folder may be young because its maker is about to lock it"
    );
    cache.remove_abandoned(std::time::Duration::ZERO);
    assert!(!abandoned.exists());
    assert!(folder.join(&held.name).exists(), "a held scratch folder stays");
    let name = held.name.clone();
    drop(held);
    assert!(!folder.join(name).exists());
}

#[test]
fn a_folder_others_may_write_is_not_trusted_to_load_code_from() {
    let base = base();
    let lib = base.path().join("site-packages").join("nvidia");
    std::fs::create_dir_all(&lib).unwrap();
    trusted(&lib).unwrap();
    chmod(&base.path().join("site-packages"), 0o777);
    match trusted(&lib) {
        Err(CacheError::NotPrivate { dir, .. }) => assert_eq!(dir, base.path().join("site-packages")),
        other => panic!("trusted a folder below one anyone may write: {other:?}"),
    }
    chmod(&base.path().join("site-packages"), 0o755);
    // Readable by all is fine where only you can write: installed software is.
    chmod(&lib, 0o755);
    trusted(&lib).unwrap();
}
