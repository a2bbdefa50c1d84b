//! Compiled modules on disk, so that a second run of the same plan compiles nothing.
//!
//! An entry is the cubin NVRTC made for a source, keyed by a 128-bit hash of everything the
//! cubin depends on: the source text, the NVRTC command line (which names the target
//! architecture), the NVRTC release and this cache's format. A new NVRTC, another GPU or any change to the generated code gives a new key,
//! so stale entries are never loaded, only left behind. Entries are written to a temporary file
//! and renamed into place, so concurrent runs never read half a file.
//!
//! The folder is `$FUSE_CACHE_DIR/modules`, else `$XDG_CACHE_HOME/fuse/modules`, else
//! `~/.cache/fuse/modules`.

use std::path::{Path, PathBuf};

use fuse_codegen::nvrtc::{self, Arch, CompileOptions};

use crate::error::{io, CudaError};

/// Env var naming the folder of fuse's caches (modules, tuned plans, calibrated tables).
pub const CACHE_ENV: &str = "FUSE_CACHE_DIR";

/// Bumped whenever what an entry holds changes meaning.
const FORMAT: &str = "fuse-module-cache-1";

/// The root folder of fuse's per-user caches (see the module docs).
pub fn cache_root() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var(CACHE_ENV) {
        return dir;
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return dir.join("fuse");
    }
    match var("HOME") {
        Some(home) => home.join(".cache").join("fuse"),
        None => std::env::temp_dir().join("fuse-cache"),
    }
}

/// The options every module is compiled with, for `arch`.
fn options(arch: Arch) -> CompileOptions {
    CompileOptions {
        arch,
        name: "fuse.cu".to_string(),
        ..CompileOptions::default()
    }
}

/// The cache key of `source` compiled for `arch` by NVRTC `nvrtc_version`: 32 hex digits.
pub fn module_key(source: &str, arch: Arch, nvrtc_version: (i32, i32)) -> Result<String, CudaError> {
    let args = options(arch).args()?.join(" ");
    let material = format!(
        "{FORMAT}\0{args}\0nvrtc {}.{}\0{source}",
        nvrtc_version.0, nvrtc_version.1
    );
    Ok(format!("{:032x}", fnv1a128(material.as_bytes())))
}

/// FNV-1a, 128 bits: no dependency, and collisions among a user's few thousand modules are
/// out of reach (the key is not a defence against a forged source — the cache is the user's own).
fn fnv1a128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    bytes.iter().fold(OFFSET, |h, &b| (h ^ b as u128).wrapping_mul(PRIME))
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
        let path = self.dir.as_ref().map(|d| d.join(format!("{key}.cubin")));
        if let Some(cubin) = path.as_deref().and_then(read_entry) {
            return Ok(Module {
                cubin,
                from_cache: true,
                warning: None,
            });
        }
        let cubin = nvrtc::compile(source, &options(arch))?.cubin;
        let warning = path.and_then(|p| store(&p, &cubin).err()).map(|e| e.to_string());
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

/// Writes `cubin` to `path` through a temporary file renamed into place.
fn store(path: &Path, cubin: &[u8]) -> Result<(), CudaError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
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
        assert_eq!(base.len(), 32);
        assert_eq!(base, key("k", Arch::SM_90, (13, 0)));
        assert_ne!(base, key("k ", Arch::SM_90, (13, 0)));
        assert_ne!(base, key("k", Arch::SM_80, (13, 0)));
        assert_ne!(base, key("k", Arch::SM_90, (13, 1)));
    }

    #[test]
    fn fnv128_matches_the_reference_vector() {
        // FNV-1a 128 of "a", from the FNV reference implementation.
        assert_eq!(fnv1a128(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
        assert_eq!(fnv1a128(b""), 0x6c62272e07bb014262b821756295c58d);
    }

    #[test]
    fn entries_round_trip_and_garbage_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("k.cubin");
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
            assert!(cache_root().ends_with("fuse") || cache_root().ends_with("fuse-cache"));
        }
    }
}
