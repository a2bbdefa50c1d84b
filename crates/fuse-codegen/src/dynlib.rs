//! Finding a CUDA library (libnvrtc, libcuda, libcublas) before cudarc does.
//!
//! cudarc (0.19, `dynamic-loading`) opens each library lazily with `dlopen` on a fixed list of
//! bare names (`libnvrtc.so`, `libnvrtc.so.13`, …, see [`cudarc::get_lib_name_candidates`])
//! and **panics** if none opens. It never looks at a path of ours, and `LD_LIBRARY_PATH`
//! changed after process start is ignored by the loader.
//!
//! So we open the library we chose by its absolute path first and keep it open for the life of
//! the process. glibc answers a later `dlopen("libnvrtc.so.13")` with an already loaded object
//! whose `DT_SONAME` matches, so cudarc ends up with the very same object. We then check that
//! claim instead of trusting it: cudarc's own handle must resolve the probe symbol to the same
//! address as ours. If it does not, another copy came first on the loader path (a CUDA
//! toolkit's `libnvrtc.so`, say): one of the same release is accepted, and
//! [`Pinned::origin`] names the file actually used; any other outcome is
//! [`ProbeError::Conflict`].
//!
//! Libraries that a library opens by bare name itself (libnvrtc's builtins) or needs by soname
//! (libcublas needs libcublasLt) are [`Spec::companions`]: they are opened from the same
//! folder first, so that the loader finds them already loaded.
//!
//! Each user (the NVRTC wrapper here, the CUDA runtime in `fuse-cuda`) describes its library
//! with a [`Spec`] and keeps the [`Pinned`] result in a `OnceLock` of its own.

use std::path::{Path, PathBuf};

use libloading::Library;

/// How to find one library and how to tell which copy cudarc uses.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The library's name in messages, e.g. `libnvrtc`.
    pub label: &'static str,
    /// cudarc's name for it, for [`cudarc::get_lib_name_candidates`] (`nvrtc`, `cuda`, `cublas`).
    pub cudarc_name: &'static str,
    /// Env var naming the library file, or a folder holding it.
    pub env: &'static str,
    /// File names tried inside a folder, preferred first.
    pub files: &'static [&'static str],
    /// A symbol whose address identifies which copy is loaded.
    pub symbol: &'static [u8],
    /// File-name prefixes of libraries opened from the same folder before the library itself.
    pub companions: &'static [&'static str],
    /// Where a pip wheel puts the library inside `site-packages` (`nvidia/cu13/lib`), searched
    /// in the site-packages folders of `python3` when nothing else finds it.
    pub wheel: Option<&'static str>,
    /// Whether one of cudarc's bare names loads (cudarc's `sys::is_culib_present`).
    pub cudarc_present: unsafe fn() -> bool,
    /// The address of a symbol in cudarc's copy; call only after `cudarc_present` said yes.
    pub cudarc_symbol: unsafe fn(&[u8]) -> Option<usize>,
    /// The release of our copy, as `(major, minor)`, where the library can say.
    pub version: unsafe fn(&Library) -> Option<(i32, i32)>,
    /// The release of cudarc's copy; call only after `cudarc_present` said yes.
    pub cudarc_version: unsafe fn() -> Option<(i32, i32)>,
}

/// A library loaded and kept loaded for the life of the process.
#[derive(Debug)]
pub struct Pinned {
    /// Our `dlopen` references (companions, then the library), which keep their sonames
    /// registered; empty when the system loader found the library by itself.
    _libraries: Vec<Library>,
    /// Where the object cudarc uses was loaded from, for messages.
    pub origin: String,
    /// Its release, where the library can say.
    pub version: Option<(i32, i32)>,
}

/// Why a library cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// No copy could be loaded.
    #[error("not found (searched: {})", searched.join("; "))]
    NotFound {
        /// Each path or name tried, with the loader's reason where known.
        searched: Vec<String>,
    },
    /// The copy we found is not the one cudarc would use, nor of the same release.
    #[error("{wanted} loads, but cudarc resolves it to {}", loaded.as_deref().unwrap_or("nothing"))]
    Conflict {
        /// The copy chosen by the env var or `LD_LIBRARY_PATH`, with its release.
        wanted: String,
        /// The file cudarc loaded instead, with its release, if it loaded one.
        loaded: Option<String>,
    },
}

/// Loads the library of `spec` and checks that cudarc will use the same copy.
///
/// Search order: `spec.env` (a file or a folder; when set it is the only place looked at, so a
/// wrong setting is an error rather than silently ignored), then each folder of
/// `LD_LIBRARY_PATH`, then cudarc's own bare names through the system loader, then the pip
/// wheel's folder in Python's site-packages.
pub fn probe(spec: &Spec) -> Result<Pinned, ProbeError> {
    let mut searched = Vec::new();
    if let Some(value) = std::env::var_os(spec.env).filter(|v| !v.is_empty()) {
        let found = open_first(spec, &candidates(spec, Path::new(&value)), &mut searched);
        return pin(spec, found.ok_or(ProbeError::NotFound { searched })?);
    }
    let dirs = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
        if let Some(found) = open_first(spec, &candidates(spec, &dir), &mut searched) {
            return pin(spec, found);
        }
    }
    system_loader(spec, searched)
}

/// Files to try for an env var value or a search folder.
fn candidates(spec: &Spec, path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        spec.files.iter().map(|name| path.join(name)).collect()
    } else {
        vec![path.to_path_buf()]
    }
}

/// A library opened by path, with the companions opened before it.
struct Opened {
    libraries: Vec<Library>,
    path: PathBuf,
}

/// Opens the first candidate that loads, recording each miss with the reason.
fn open_first(spec: &Spec, paths: &[PathBuf], searched: &mut Vec<String>) -> Option<Opened> {
    for path in paths {
        if !path.exists() {
            searched.push(format!("{} (no such file)", path.display()));
            continue;
        }
        let mut libraries = open_companions(spec, path);
        // SAFETY: CUDA libraries' initialisers have no preconditions; this is what cudarc does.
        match unsafe { Library::new(path) } {
            Ok(library) => {
                libraries.push(library);
                return Some(Opened {
                    libraries,
                    path: path.clone(),
                });
            }
            // The loader's message starts with the path already.
            Err(err) => searched.push(err.to_string()),
        }
    }
    None
}

/// Opens every file of the (symlink-resolved) library's folder whose name starts with one of
/// `spec.companions`. One that fails to open is left out: the library then reports it by name.
fn open_companions(spec: &Spec, library: &Path) -> Vec<Library> {
    if spec.companions.is_empty() {
        return Vec::new();
    }
    let real = std::fs::canonicalize(library).unwrap_or_else(|_| library.to_path_buf());
    let Some(Ok(entries)) = real.parent().map(std::fs::read_dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            spec.companions.iter().any(|prefix| name.starts_with(prefix))
        })
        .collect();
    paths.sort();
    // SAFETY: as for the library itself.
    paths
        .into_iter()
        .filter_map(|path| unsafe { Library::new(path) }.ok())
        .collect()
}

/// Keeps the opened library and checks what cudarc resolves to (see the module docs).
fn pin(spec: &Spec, opened: Opened) -> Result<Pinned, ProbeError> {
    let Opened { libraries, path } = opened;
    let library = libraries.last().expect("the library itself is opened last");
    // SAFETY: the spec's functions match the library they describe.
    let ours = unsafe { (spec.version)(library) };
    let wanted = describe(spec, &path.display().to_string(), ours);
    let Some(theirs) = cudarc_address(spec) else {
        return Err(ProbeError::Conflict { wanted, loaded: None });
    };
    // SAFETY: cudarc's copy loads (checked by `cudarc_address`).
    let theirs_version = unsafe { (spec.cudarc_version)() };
    let file = mapped_file(theirs).unwrap_or_else(|| "an unknown file".to_owned());
    let origin = if symbol_address(library, spec.symbol) == Some(theirs) {
        path.display().to_string()
    } else if ours.is_some() && ours == theirs_version {
        format!("{file} (same release as {}, which it shadows)", path.display())
    } else {
        let loaded = Some(describe(spec, &file, theirs_version));
        return Err(ProbeError::Conflict { wanted, loaded });
    };
    Ok(Pinned {
        _libraries: libraries,
        origin,
        version: ours,
    })
}

/// `file (libnvrtc 13.0)`.
fn describe(spec: &Spec, file: &str, version: Option<(i32, i32)>) -> String {
    match version {
        Some((major, minor)) => format!("{file} ({} {major}.{minor})", spec.label),
        None => file.to_owned(),
    }
}

/// No explicit location: use whatever cudarc's bare names find, else the pip wheel.
fn system_loader(spec: &Spec, mut searched: Vec<String>) -> Result<Pinned, ProbeError> {
    let Some(address) = cudarc_address(spec) else {
        let mut names = cudarc::get_lib_name_candidates(spec.cudarc_name);
        names.dedup();
        searched.push(format!("system loader: {}", names.join(", ")));
        // Only now: a library the system has comes first, so that cudarc, which asks the
        // system loader by bare names, finds the same one.
        for dir in spec.wheel.map(wheel_dirs).unwrap_or_default() {
            if let Some(found) = open_first(spec, &candidates(spec, &dir), &mut searched) {
                return pin(spec, found);
            }
        }
        return Err(ProbeError::NotFound { searched });
    };
    Ok(Pinned {
        _libraries: Vec::new(),
        origin: mapped_file(address).unwrap_or_else(|| "the system loader".to_owned()),
        // SAFETY: cudarc's copy loads (checked by `cudarc_address`).
        version: unsafe { (spec.cudarc_version)() },
    })
}

/// `<site-packages>/<wheel>` for each site-packages folder of the Python that pip installs into
/// (`$PYTHON`, else `python3`), where it exists. None where there is no Python.
pub(crate) fn wheel_dirs(wheel: &str) -> Vec<PathBuf> {
    const SITE_PACKAGES: &str = "import site; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))";
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let Ok(out) = std::process::Command::new(python)
        .args(["-c", SITE_PACKAGES])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| Path::new(line.trim()).join(wheel))
        // Found, not named by the user: used only where no other user could have put it there.
        .filter(|dir| dir.is_dir() && fuse_core::cache::trusted(dir).is_ok())
        .collect()
}

/// Address of the probe symbol in the copy cudarc loads, or `None` when cudarc would panic.
fn cudarc_address(spec: &Spec) -> Option<usize> {
    // SAFETY: `cudarc_present` only dlopens candidates; `cudarc_symbol` cannot panic once one
    // opens (the loader state it sees is the one just checked, and cudarc caches the handle).
    unsafe {
        if !(spec.cudarc_present)() {
            return None;
        }
        (spec.cudarc_symbol)(spec.symbol)
    }
}

/// The address of `symbol` in `library`.
pub fn symbol_address(library: &Library, symbol: &[u8]) -> Option<usize> {
    // SAFETY: the symbol is only read as an address, never called through this type.
    let symbol = unsafe { library.get::<unsafe extern "C" fn()>(symbol) }.ok()?;
    Some(*symbol as usize)
}

/// The file mapped at `address`, from `/proc/self/maps` (Linux); `None` elsewhere.
fn mapped_file(address: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        let path = fields.nth(4)?;
        (start..end).contains(&address).then(|| path.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe fn absent() -> bool {
        false
    }
    unsafe fn no_symbol(_: &[u8]) -> Option<usize> {
        None
    }
    unsafe fn no_version(_: &Library) -> Option<(i32, i32)> {
        None
    }
    unsafe fn no_cudarc_version() -> Option<(i32, i32)> {
        None
    }

    const SPEC: Spec = Spec {
        label: "libnothing",
        cudarc_name: "nothing-at-all",
        env: "FUSE_TEST_DYNLIB_NOTHING",
        files: &["libnothing.so.1", "libnothing.so"],
        symbol: b"nothing",
        companions: &[],
        wheel: None,
        cudarc_present: absent,
        cudarc_symbol: no_symbol,
        version: no_version,
        cudarc_version: no_cudarc_version,
    };

    #[test]
    fn folder_expands_to_known_file_names() {
        let files = candidates(&SPEC, &std::env::temp_dir());
        assert_eq!(files.len(), SPEC.files.len());
        assert!(files[0].ends_with("libnothing.so.1"));
    }

    #[test]
    fn file_is_tried_as_is() {
        let file = Path::new("/nowhere/libnothing.so.1");
        assert_eq!(candidates(&SPEC, file), vec![file.to_path_buf()]);
    }

    #[test]
    fn misses_are_recorded_with_reason() {
        let mut searched = Vec::new();
        let found = open_first(&SPEC, &[PathBuf::from("/nowhere/libnothing.so")], &mut searched);
        assert!(found.is_none());
        assert_eq!(searched, ["/nowhere/libnothing.so (no such file)"]);
    }

    #[test]
    fn a_missing_library_is_an_error_listing_the_system_names() {
        let Err(ProbeError::NotFound { searched }) = probe(&SPEC) else {
            panic!("libnothing was found");
        };
        let last = searched.last().unwrap();
        assert!(last.starts_with("system loader: libnothing-at-all.so"), "{last}");
    }

    #[test]
    fn maps_lookup_finds_own_code() {
        let address = maps_lookup_finds_own_code as *const () as usize;
        assert!(mapped_file(address).is_some());
    }
}
