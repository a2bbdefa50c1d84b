//! Finding libnvrtc before cudarc does.
//!
//! cudarc (0.19, `dynamic-loading`) opens libnvrtc lazily with `dlopen` on a fixed list of bare
//! names (`libnvrtc.so`, `libnvrtc.so.13`, `libnvrtc.so.12`, …, see
//! [`cudarc::get_lib_name_candidates`]) and panics if none opens. It never looks at a path of
//! ours, and `LD_LIBRARY_PATH` changed after process start is ignored by the loader.
//!
//! So we open the library we chose by its absolute path first and keep it open for the life of
//! the process. glibc answers a later `dlopen("libnvrtc.so.13")` with an already loaded object
//! whose `DT_SONAME` matches, so cudarc ends up with the very same object. We then check that
//! claim instead of trusting it: cudarc's own `culib()` must resolve `nvrtcVersion` to the same
//! address as our handle. If it does not, another libnvrtc came first on the loader path (a
//! CUDA toolkit's `libnvrtc.so`, say): one of the same NVRTC release is accepted, and [`load`]
//! names the file actually used; any other outcome is [`NvrtcError::Conflict`].
//!
//! libnvrtc in turn dlopens `libnvrtc-builtins.so.13.0` by bare name at compile time (and
//! fails with `NVRTC_ERROR_BUILTIN_OPERATION_FAILURE` when the loader path lacks it), so the
//! builtins beside the chosen library are pinned the same way.

use super::NvrtcError;
use libloading::Library;
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Env var naming the libnvrtc file, or a folder holding it.
pub const LIB_ENV: &str = "FUSE_NVRTC_LIB";

/// File names tried inside a folder, newest CUDA first.
const FILE_NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

/// Symbol whose address identifies which libnvrtc object is loaded.
const PROBE_SYMBOL: &[u8] = b"nvrtcVersion";

/// The library cudarc uses, pinned for the life of the process.
struct Loaded {
    /// Our `dlopen` references (libnvrtc, its builtins), which keep their sonames registered.
    _pinned: Vec<Library>,
    /// Where the object was loaded from, for messages.
    origin: String,
}

static LOADED: OnceLock<Loaded> = OnceLock::new();

/// Makes sure libnvrtc is loaded (once per process) and returns the file it came from.
///
/// Search order: `FUSE_NVRTC_LIB` (a file or a folder; when set it is the only place looked
/// at, so a wrong setting is an error rather than silently ignored), then each folder of
/// `LD_LIBRARY_PATH`, then cudarc's own bare names through the system loader.
pub fn load() -> Result<&'static str, NvrtcError> {
    if let Some(loaded) = LOADED.get() {
        return Ok(&loaded.origin);
    }
    let loaded = probe()?;
    Ok(&LOADED.get_or_init(|| loaded).origin)
}

fn probe() -> Result<Loaded, NvrtcError> {
    let mut searched = Vec::new();
    if let Some(value) = std::env::var_os(LIB_ENV).filter(|v| !v.is_empty()) {
        let library =
            open_first(&candidates(Path::new(&value)), &mut searched).ok_or(NvrtcError::NotFound { searched })?;
        return pin(library);
    }
    let dirs = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
        if let Some(library) = open_first(&candidates(&dir), &mut searched) {
            return pin(library);
        }
    }
    system_loader(searched)
}

/// Files to try for a `FUSE_NVRTC_LIB` value or a search folder.
fn candidates(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        FILE_NAMES.iter().map(|name| path.join(name)).collect()
    } else {
        vec![path.to_path_buf()]
    }
}

/// Opens the first candidate that loads, recording each miss with the reason.
fn open_first(paths: &[PathBuf], searched: &mut Vec<String>) -> Option<(Library, PathBuf)> {
    for path in paths {
        if !path.exists() {
            searched.push(format!("{} (no such file)", path.display()));
            continue;
        }
        // SAFETY: libnvrtc's initialisers have no preconditions; this is what cudarc does too.
        match unsafe { Library::new(path) } {
            Ok(library) => return Some((library, path.clone())),
            // The loader's message starts with the path already.
            Err(err) => searched.push(err.to_string()),
        }
    }
    None
}

/// Keeps `library` and its builtins open and checks what cudarc resolves to (see above).
fn pin((library, path): (Library, PathBuf)) -> Result<Loaded, NvrtcError> {
    let ours = version_of(&library);
    let wanted = describe(&path.display().to_string(), ours);
    let Some(theirs) = cudarc_address() else {
        return Err(NvrtcError::Conflict { wanted, loaded: None });
    };
    let file = mapped_file(theirs).unwrap_or_else(|| "an unknown file".to_owned());
    let origin = if symbol_address(&library) == Some(theirs) {
        path.display().to_string()
    } else if ours.is_some() && ours == cudarc_version() {
        format!("{file} (same release as {}, which it shadows)", path.display())
    } else {
        let loaded = Some(describe(&file, cudarc_version()));
        return Err(NvrtcError::Conflict { wanted, loaded });
    };
    let mut pinned = open_builtins(&path);
    pinned.push(library);
    Ok(Loaded {
        _pinned: pinned,
        origin,
    })
}

/// `file (NVRTC 13.0)`.
fn describe(file: &str, version: Option<(i32, i32)>) -> String {
    match version {
        Some((major, minor)) => format!("{file} (NVRTC {major}.{minor})"),
        None => file.to_owned(),
    }
}

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

fn version_of(library: &Library) -> Option<(i32, i32)> {
    // SAFETY: `nvrtcVersion` has this signature and only writes the two ints.
    unsafe {
        let version = library.get::<VersionFn>(PROBE_SYMBOL).ok()?;
        let (mut major, mut minor) = (0, 0);
        (version(&mut major, &mut minor) == 0).then_some((major, minor))
    }
}

/// Version of the library cudarc loaded; call only after `cudarc_address` found one.
fn cudarc_version() -> Option<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: cudarc's library is loaded (checked by the caller); two valid out-pointers.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (status == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

/// Opens each `libnvrtc-builtins.so.*` in the folder of the (symlink-resolved) libnvrtc.
///
/// One that fails to open is left out: NVRTC then reports it by name in the compile log.
fn open_builtins(library: &Path) -> Vec<Library> {
    let real = std::fs::canonicalize(library).unwrap_or_else(|_| library.to_path_buf());
    let Some(Ok(entries)) = real.parent().map(std::fs::read_dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("libnvrtc-builtins.so")
        })
        // SAFETY: as for libnvrtc itself.
        .filter_map(|path| unsafe { Library::new(path) }.ok())
        .collect()
}

/// No explicit location: use whatever cudarc's bare names find.
fn system_loader(mut searched: Vec<String>) -> Result<Loaded, NvrtcError> {
    let Some(address) = cudarc_address() else {
        let mut names = cudarc::get_lib_name_candidates("nvrtc");
        names.dedup();
        searched.push(format!("system loader: {}", names.join(", ")));
        return Err(NvrtcError::NotFound { searched });
    };
    let origin = mapped_file(address).unwrap_or_else(|| "the system loader".to_owned());
    Ok(Loaded {
        _pinned: Vec::new(),
        origin,
    })
}

/// Address of the probe symbol in the object cudarc loads, or `None` when cudarc would panic.
fn cudarc_address() -> Option<usize> {
    // SAFETY: `is_culib_present` only dlopens candidates; `culib` cannot panic once one opens
    // (the loader state it sees is the one we just checked, and the handle is cached).
    unsafe {
        if !cudarc::nvrtc::sys::is_culib_present() {
            return None;
        }
        let symbol = cudarc::nvrtc::sys::culib()
            .get::<unsafe extern "C" fn()>(PROBE_SYMBOL)
            .ok()?;
        Some(*symbol as usize)
    }
}

fn symbol_address(library: &Library) -> Option<usize> {
    // SAFETY: the symbol is only read as an address, never called through this type.
    let symbol = unsafe { library.get::<unsafe extern "C" fn()>(PROBE_SYMBOL) }.ok()?;
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

    #[test]
    fn folder_expands_to_known_file_names() {
        let dir = std::env::temp_dir();
        let files = candidates(&dir);
        assert_eq!(files.len(), FILE_NAMES.len());
        assert!(files[0].ends_with("libnvrtc.so.13"));
    }

    #[test]
    fn file_is_tried_as_is() {
        let file = Path::new("/nowhere/libnvrtc.so.13");
        assert_eq!(candidates(file), vec![file.to_path_buf()]);
    }

    #[test]
    fn misses_are_recorded_with_reason() {
        let mut searched = Vec::new();
        let found = open_first(&[PathBuf::from("/nowhere/libnvrtc.so")], &mut searched);
        assert!(found.is_none());
        assert_eq!(searched, ["/nowhere/libnvrtc.so (no such file)"]);
    }

    #[test]
    fn maps_lookup_finds_own_code() {
        let address = maps_lookup_finds_own_code as *const () as usize;
        assert!(mapped_file(address).is_some());
    }
}
