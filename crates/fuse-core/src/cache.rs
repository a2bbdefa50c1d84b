//! Where fuse keeps what it builds and measures — compiled modules, emulated modules, tuned
//! plans, calibrated tables — and the rule every such folder follows: only its user can write
//! it. A cache holds code that fuse loads and runs, so a folder that someone else owns or may
//! write into is refused, never used and never "repaired".
//!
//! The root is `$FUSE_CACHE_DIR`, else `$XDG_CACHE_HOME/fuse`, else `~/.cache/fuse`.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Env var naming the folder of fuse's caches.
pub const CACHE_ENV: &str = "FUSE_CACHE_DIR";

/// Why a cache folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Someone other than this user owns it or may write into it.
    #[error(
        "cache folder {} {why}: refusing to use it, since fuse loads code from it (remove it, or set {CACHE_ENV} to a folder only you can write)",
        dir.display()
    )]
    NotPrivate {
        /// The folder.
        dir: PathBuf,
        /// Who else owns or may write it.
        why: String,
    },
    /// It cannot be created or read.
    #[error("cache folder {}: {source}", dir.display())]
    Io {
        /// The folder.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

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
        None => std::env::temp_dir().join(format!("fuse-cache-{}", current_user())),
    }
}

/// `dir`, created (with its missing parents) readable and writable by this user only, and
/// checked: owned by this user, not writable by group or others.
pub fn private_dir(dir: &Path) -> Result<PathBuf, CacheError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CacheError::Io {
            dir: dir.to_path_buf(),
            source,
        })?;
    existing_private_dir(dir).map(|found| found.unwrap_or_else(|| dir.to_path_buf()))
}

/// `dir` checked like [`private_dir`] but never created, for reading what a cache holds:
/// `None` when it does not exist.
pub fn existing_private_dir(dir: &Path) -> Result<Option<PathBuf>, CacheError> {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CacheError::Io {
                dir: dir.to_path_buf(),
                source,
            })
        }
    };
    let why = if meta.uid() != current_user() {
        Some(format!(
            "belongs to user {}, not to you ({})",
            meta.uid(),
            current_user()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!("is writable by others (mode {:o})", meta.mode() & 0o777))
    } else {
        None
    };
    match why {
        Some(why) => Err(CacheError::NotPrivate {
            dir: dir.to_path_buf(),
            why,
        }),
        None => Ok(Some(dir.to_path_buf())),
    }
}

/// The name of a cache entry made from `parts`: the SHA-256 of all of them (and of this
/// version of fuse) in hex, so that nothing else that determines the entry can collide.
pub fn entry_name(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
    for part in parts {
        // Length-prefixed, so that moving bytes between parts changes the name.
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn current_user() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_folder_is_made_and_a_shared_one_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a").join("b");
        assert_eq!(private_dir(&dir).unwrap(), dir);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&dir).unwrap_err().to_string();
        assert!(
            err.contains("writable by others (mode 777)") && err.contains(CACHE_ENV),
            "{err}"
        );
        // Refused, not repaired.
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o777);
        // Read-only use refuses it too, and creates nothing where there is nothing.
        assert!(matches!(existing_private_dir(&dir), Err(CacheError::NotPrivate { .. })));
        let missing = root.path().join("missing");
        assert!(existing_private_dir(&missing).unwrap().is_none());
        assert!(!missing.exists());
    }

    #[test]
    fn entry_names_are_sha256_of_every_part() {
        let name = entry_name(&[b"source", b"flags"]);
        assert_eq!(name.len(), 64);
        assert_eq!(name, entry_name(&[b"source", b"flags"]));
        assert_ne!(name, entry_name(&[b"sourcef", b"lags"]));
        assert_ne!(name, entry_name(&[b"source", b"flags", b""]));
    }
}
