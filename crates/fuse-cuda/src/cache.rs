//! Compiled modules on disk, so that a second run of the same plan compiles nothing.
//!
//! An entry is the cubin NVRTC made for a source, named by the SHA-256 of everything the cubin
//! depends on: the source text, the NVRTC command line (which names the target architecture),
//! the NVRTC release, this cache's format and fuse's version. A new NVRTC, another GPU or any
//! change to the generated code gives a new name, so stale entries are never loaded, only left
//! behind. Entries are stored sealed with their length and SHA-256 and written all or nothing,
//! so concurrent runs never read half a file; one whose seal does not match is a miss, and
//! rebuilt.
//!
//! The folder is `modules` under fuse's cache root, used only under the rules of
//! `fuse_core::cache` (no one else can write it or a folder above it; reached through one
//! handle).

use std::path::PathBuf;

use fuse_codegen::nvrtc::{self, Arch, CompileOptions};
pub use fuse_core::cache::{cache_root, CACHE_ENV};
use fuse_core::cache::{entry_name, CacheDir, CacheError};

use crate::error::CudaError;

/// Bumped whenever what an entry holds changes meaning.
const FORMAT: &str = "fuse-module-cache-3";

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
    /// The cache root holding the entries; `None` for the user's `modules` folder.
    root: Option<PathBuf>,
    enabled: bool,
}

impl ModuleCache {
    /// The cache in `dir`, which must follow the rules of a cache root.
    pub fn at(dir: impl Into<PathBuf>) -> ModuleCache {
        ModuleCache {
            root: Some(dir.into()),
            enabled: true,
        }
    }

    /// The user's cache folder (see the module docs).
    pub fn default_location() -> ModuleCache {
        ModuleCache {
            root: None,
            enabled: true,
        }
    }

    /// No cache: every module is compiled.
    pub fn disabled() -> ModuleCache {
        ModuleCache {
            root: None,
            enabled: false,
        }
    }

    /// The cache folder, opened and checked; `None` when caching is off.
    fn open(&self) -> Option<Result<CacheDir, CacheError>> {
        self.enabled.then(|| match &self.root {
            Some(root) => CacheDir::open_in(root, ""),
            None => CacheDir::open("modules"),
        })
    }

    /// The cubin of `source` for `arch`: from the cache, or compiled with NVRTC and stored.
    pub fn get_or_compile(&self, source: &str, arch: Arch) -> Result<Module, CudaError> {
        let name = format!("{}.cubin", module_key(source, arch, nvrtc::version()?)?);
        // A folder someone else could write is not used: the module is compiled, not cached.
        let (cache, refused) = match self.open().transpose() {
            Ok(cache) => (cache, None),
            Err(e) => (None, Some(e.to_string())),
        };
        let cached = cache.as_ref().map(|c| c.load(&name)).transpose();
        let (cached, unreadable) = match cached {
            Ok(cached) => (cached.flatten(), None),
            Err(e) => (None, Some(e.to_string())),
        };
        if let Some(cubin) = cached {
            return Ok(Module {
                cubin,
                from_cache: true,
                warning: None,
            });
        }
        let cubin = nvrtc::compile(source, &options(arch))?.cubin;
        let stored = || {
            cache
                .as_ref()
                .and_then(|c| c.store(&name, &cubin).err())
                .map(|e| e.to_string())
        };
        let warning = refused.or(unreadable).or_else(stored);
        Ok(Module {
            cubin,
            from_cache: false,
            warning,
        })
    }
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
    fn the_cache_root_follows_the_environment() {
        // Only the explicit override is checked: the others depend on the user's environment.
        if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
            assert_eq!(cache_root().unwrap(), PathBuf::from(dir));
        } else {
            let root = cache_root().unwrap();
            let last = root.file_name().unwrap().to_string_lossy();
            assert_eq!(last, "fuse", "{}", root.display());
        }
    }
}
