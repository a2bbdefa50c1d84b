//! Compiled modules on disk, so that a second run of the same plan compiles nothing.
//!
//! An entry is the cubin NVRTC made for a source, named by the SHA-256 of everything the cubin
//! depends on: the source text, the NVRTC command line (which names the target architecture),
//! the NVRTC release, this cache's format and fuse's version. A new NVRTC, another GPU or any
//! change to the generated code gives a new name, so stale entries are never loaded, only left
//! behind. Entries are written to a temporary file and renamed into place, so concurrent runs
//! never read half a file; one that is not a cubin is a miss, and rebuilt.
//!
//! The folder is `modules` under fuse's cache root (`fuse_core::cache`), and is used only when
//! no one else can write it.

use std::path::{Path, PathBuf};

use fuse_codegen::nvrtc::{self, Arch, CompileOptions};
pub use fuse_core::cache::{cache_root, CACHE_ENV};
use fuse_core::cache::{entry_name, private_dir};

use crate::error::{io, CudaError};

/// Bumped whenever what an entry holds changes meaning.
const FORMAT: &str = "fuse-module-cache-2";

/// The options every module is compiled with, for `arch`.
fn options(arch: Arch) -> CompileOptions {
    CompileOptions {
        arch,
        name: "fuse.cu".to_string(),
        ..CompileOptions::default()
    }
}

/// The cache key of `source` compiled for `arch` by NVRTC `nvrtc_version`: the SHA-256 of
/// all of it, in hex.
pub fn module_key(source: &str, arch: Arch, nvrtc_version: (i32, i32)) -> Result<String, CudaError> {
    let args = options(arch).args()?.join(" ");
    let nvrtc = format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1);
    Ok(entry_name(&[
        FORMAT.as_bytes(),
        args.as_bytes(),
        nvrtc.as_bytes(),
        source.as_bytes(),
    ]))
}

/// A cubin, and where it came from.
#[derive(Debug, Clone)]
pub struct Module {
    /// The cubin image.
    pub cubin: Vec<u8>,
    /// Whether it was read from the cache (no compile).
    pub from_cache: bool,
    /// Why the cache could not be written, if it could not (the module is still good).
    pub warning: Option<String>,
}

/// The on-disk module cache.
#[derive(Debug, Clone)]
pub struct ModuleCache {
    dir: Option<PathBuf>,
}

impl ModuleCache {
    /// The cache in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> ModuleCache {
        ModuleCache { dir: Some(dir.into()) }
    }

    /// The user's cache folder (see the module docs).
    pub fn default_location() -> ModuleCache {
        ModuleCache::at(cache_root().join("modules"))
    }

    /// No cache: every module is compiled.
    pub fn disabled() -> ModuleCache {
        ModuleCache { dir: None }
    }

    /// The folder, if caching is on.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The cubin of `source` for `arch`: from the cache, or compiled with NVRTC and stored.
    pub fn get_or_compile(&self, source: &str, arch: Arch) -> Result<Module, CudaError> {
        let key = module_key(source, arch, nvrtc::version()?)?;
        // A folder someone else could write is not used: the module is compiled, not cached.
        let (dir, refused) = match self.dir.as_deref().map(private_dir).transpose() {
            Ok(dir) => (dir, None),
            Err(e) => (None, Some(e.to_string())),
        };
        let path = dir.map(|d| d.join(format!("{key}.cubin")));
        if let Some(cubin) = path.as_deref().and_then(read_entry) {
            return Ok(Module {
                cubin,
                from_cache: true,
                warning: None,
            });
        }
        let cubin = nvrtc::compile(source, &options(arch))?.cubin;
        let warning = refused.or_else(|| path.and_then(|p| store(&p, &cubin).err()).map(|e| e.to_string()));
        Ok(Module {
            cubin,
            from_cache: false,
            warning,
        })
    }
}

/// An entry's bytes; a missing, unreadable or empty file is a miss.
fn read_entry(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok().filter(|bytes| bytes.starts_with(b"\x7fELF"))
}

/// Writes `cubin` to `path` (in a folder checked private) through a temporary file renamed
/// into place.
fn store(path: &Path, cubin: &[u8]) -> Result<(), CudaError> {
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&temporary, cubin).map_err(io(&temporary))?;
    std::fs::rename(&temporary, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_with_source_arch_and_nvrtc() {
        let key = |source: &str, arch, version| module_key(source, arch, version).unwrap();
        let base = key("k", Arch::SM_90, (13, 0));
        assert_eq!(base.len(), 64);
        assert_eq!(base, key("k", Arch::SM_90, (13, 0)));
        assert_ne!(base, key("k ", Arch::SM_90, (13, 0)));
        assert_ne!(base, key("k", Arch::SM_80, (13, 0)));
        assert_ne!(base, key("k", Arch::SM_90, (13, 1)));
    }

    #[test]
    fn entries_round_trip_and_garbage_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.cubin");
        store(&path, b"\x7fELF rest").unwrap();
        assert_eq!(read_entry(&path).unwrap(), b"\x7fELF rest");
        std::fs::write(&path, b"truncated").unwrap();
        assert!(read_entry(&path).is_none());
        assert!(read_entry(&dir.path().join("none")).is_none());
    }

    #[test]
    fn the_cache_root_follows_the_environment() {
        // Only the explicit override is checked: the others depend on the user's environment.
        if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
            assert_eq!(cache_root(), PathBuf::from(dir));
        } else {
            let root = cache_root();
            let last = root.file_name().unwrap().to_string_lossy();
            assert!(last == "fuse" || last.starts_with("fuse-cache-"), "{}", root.display());
        }
    }
}
