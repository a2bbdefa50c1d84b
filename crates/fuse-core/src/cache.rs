//! Where fuse keeps what it builds and measures — compiled modules, emulated modules, tuned
//! plans, calibrated tables — and the rules every such folder follows, since fuse loads and
//! runs code from it:
//!
//! - every folder from `/` down to the cache root is owned by you or by root and writable by no
//!   one else (a sticky folder such as `/tmp` aside: there no one else can rename what is yours);
//! - the root and every folder below it are owned by you and writable by no one else;
//! - a folder is opened once, without following a link, checked through that handle, and
//!   everything below it is reached relative to the handle ([`CacheDir`]), so renaming or
//!   replacing a folder after the check changes nothing that fuse reads;
//! - a folder that breaks a rule is refused, never used and never "repaired";
//! - a module is stored sealed with its length and SHA-256 ([`CacheDir::store`]) and loaded only
//!   when they match ([`CacheDir::load`]), so a truncated or damaged entry is rebuilt, not run.
//!
//! The root is `$FUSE_CACHE_DIR`, else `$XDG_CACHE_HOME/fuse`, else `~/.cache/fuse` (the home
//! from `$HOME`, else from the password database), else `$XDG_RUNTIME_DIR/fuse`. There is no
//! shared fallback such as `/tmp/fuse-cache-<uid>`, whose name another user could take first:
//! with none of these, the cache is refused with advice.

use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Write};
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, MetadataExt};
use sha2::{Digest, Sha256};

/// Env var naming the folder of fuse's caches.
pub const CACHE_ENV: &str = "FUSE_CACHE_DIR";

/// Why a cache folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Someone other than this user (or root, above the cache) owns a folder on the way, or
    /// may write into it.
    #[error("{}", not_private(cache, dir, why))]
    NotPrivate {
        /// The cache folder asked for.
        cache: PathBuf,
        /// The folder on its way that breaks the rules (it or one of its parents).
        dir: PathBuf,
        /// Who else owns or may write it.
        why: String,
    },
    /// No folder can be named for the cache.
    #[error(
        "no folder for fuse's cache: {CACHE_ENV}, XDG_CACHE_HOME, HOME and XDG_RUNTIME_DIR are unset and user {uid} has no home folder; set {CACHE_ENV} to a folder only you can write"
    )]
    NoRoot {
        /// This user.
        uid: u32,
    },
    /// It cannot be created, opened or written.
    #[error("cache folder {}: {what}: {source}", dir.display())]
    Io {
        /// The folder.
        dir: PathBuf,
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn not_private(cache: &Path, dir: &Path, why: &str) -> String {
    let place = match dir == cache {
        true => format!("cache folder {}", cache.display()),
        false => format!(
            "cache folder {}: {}, a folder on its way,",
            cache.display(),
            dir.display()
        ),
    };
    format!(
        "{place} {why}: refusing to use it, since fuse loads code from its cache (set {CACHE_ENV} to a folder only you can write)"
    )
}

/// The root folder of fuse's per-user caches (see the module docs).
pub fn cache_root() -> Result<PathBuf, CacheError> {
    root_from(|name| std::env::var_os(name), home_of_user)
}

/// [`cache_root`] from the environment `var` and the home folder `home` of the password
/// database.
fn root_from(
    var: impl Fn(&str) -> Option<OsString>,
    home: impl FnOnce() -> Option<PathBuf>,
) -> Result<PathBuf, CacheError> {
    let var = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    // The XDG variables count only when absolute, as the specification says.
    let absolute = |name: &str| var(name).filter(|p| p.is_absolute());
    if let Some(dir) = var(CACHE_ENV) {
        return Ok(dir);
    }
    if let Some(dir) = absolute("XDG_CACHE_HOME") {
        return Ok(dir.join("fuse"));
    }
    if let Some(home) = var("HOME").or_else(home) {
        return Ok(home.join(".cache").join("fuse"));
    }
    match absolute("XDG_RUNTIME_DIR") {
        Some(dir) => Ok(dir.join("fuse")),
        None => Err(CacheError::NoRoot { uid: current_user() }),
    }
}

/// A cache folder, opened once and checked (see the module docs); what it holds is read and
/// written through the handle, never by a path that could lead elsewhere.
#[derive(Debug)]
pub struct CacheDir {
    dir: Dir,
    path: PathBuf,
}

impl CacheDir {
    /// Folder `sub` (a relative path; empty for the root itself) of fuse's cache root,
    /// created where missing.
    pub fn open(sub: &str) -> Result<CacheDir, CacheError> {
        CacheDir::open_in(&cache_root()?, sub)
    }

    /// Folder `sub` of the cache root `root`, created where missing.
    pub fn open_in(root: &Path, sub: &str) -> Result<CacheDir, CacheError> {
        Ok(CacheDir::walk(root, sub, true)?.expect("created where missing"))
    }

    /// Folder `sub` of the cache root `root` if it exists: `None` where it (or the root) does
    /// not, and nothing is created.
    pub fn open_existing_in(root: &Path, sub: &str) -> Result<Option<CacheDir>, CacheError> {
        CacheDir::walk(root, sub, false)
    }

    /// The folder's path when it was opened, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of file `name`; `None` where there is none.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, CacheError> {
        match self.dir.read(name) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(self.error(format!("reading {name}"), source)),
        }
    }

    /// Writes `bytes` as file `name`, all or nothing: into an unnamed file first, which is
    /// then linked into place, so that no reader sees half of it and a killed writer leaves
    /// nothing behind.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), CacheError> {
        let context = || format!("writing {name}");
        let mut file = cap_tempfile::TempFile::new(&self.dir).map_err(|e| self.error(context(), e))?;
        file.write_all(bytes).map_err(|e| self.error(context(), e))?;
        file.replace(name).map_err(|e| self.error(context(), e))
    }

    /// Stores `bytes` as entry `name`, sealed with their length and SHA-256 for [`load`].
    ///
    /// [`load`]: CacheDir::load
    pub fn store(&self, name: &str, bytes: &[u8]) -> Result<(), CacheError> {
        self.write(name, &seal(bytes))
    }

    /// The bytes of entry `name` if its seal matches them; `None` where there is none or it
    /// is damaged (a damaged entry is removed, to be stored again).
    pub fn load(&self, name: &str) -> Result<Option<Vec<u8>>, CacheError> {
        let Some(sealed) = self.read(name)? else {
            return Ok(None);
        };
        let unsealed = unseal(sealed);
        if unsealed.is_none() {
            let _ = self.dir.remove_file(name);
        }
        Ok(unsealed)
    }

    fn error(&self, what: String, source: std::io::Error) -> CacheError {
        CacheError::Io {
            dir: self.path.clone(),
            what,
            source,
        }
    }

    /// Opens `root`/`sub` one folder at a time from `/`, checking each through its handle:
    /// the folders above `root` by [`ancestor_problem`], `root` and below by
    /// [`private_problem`]. Missing folders are made (mode 700) when `create`, else `None`.
    fn walk(root: &Path, sub: &str, create: bool) -> Result<Option<CacheDir>, CacheError> {
        CacheDir::walk_with(root, sub, create, Rules::Cache)
    }

    fn walk_with(root: &Path, sub: &str, create: bool, rules: Rules) -> Result<Option<CacheDir>, CacheError> {
        let cache = root.join(sub);
        let io = |what: &str, source| CacheError::Io {
            dir: cache.clone(),
            what: what.to_owned(),
            source,
        };
        let root = resolve(root).map_err(|e| io("resolving its path", e))?;
        let ancestors = root.components().count().saturating_sub(1);
        let names = root.components().chain(Path::new(sub).components());
        let mut path = PathBuf::new();
        let mut dir: Option<Dir> = None;
        for (depth, component) in names.enumerate() {
            let name = match component {
                Component::RootDir => None,
                Component::Normal(name) => Some(name),
                Component::CurDir => continue,
                other => {
                    let what = format!("`{}` in its path", other.as_os_str().to_string_lossy());
                    return Err(io(&what, ErrorKind::InvalidInput.into()));
                }
            };
            path.push(component);
            let next = match (&dir, name) {
                (None, None) => Dir::open_ambient_dir("/", cap_std::ambient_authority()),
                (Some(parent), Some(name)) => open_child(parent, name, create),
                _ => Err(ErrorKind::InvalidInput.into()),
            };
            let next = match next {
                Ok(next) => next,
                Err(e) if e.kind() == ErrorKind::NotFound && !create => return Ok(None),
                Err(e) => return Err(io(&format!("opening {}", path.display()), e)),
            };
            let meta = next
                .dir_metadata()
                .map_err(|e| io(&format!("reading {}", path.display()), e))?;
            let problem = if depth < ancestors || rules == Rules::Trusted {
                ancestor_problem(meta.uid(), meta.mode())
            } else {
                private_problem(meta.uid(), meta.mode())
            };
            if let Some(why) = problem {
                return Err(CacheError::NotPrivate {
                    cache: cache.clone(),
                    dir: path,
                    why,
                });
            }
            dir = Some(next);
        }
        Ok(dir.map(|dir| CacheDir { dir, path: cache }))
    }
}

/// One file of a cache folder, named before the folder is opened (a tune cache, a calibrated
/// timing table): read and written under the rules of a cache folder.
#[derive(Debug, Clone)]
pub struct CacheFile {
    /// The cache root; `None` for the user's.
    root: Option<PathBuf>,
    folder: String,
    name: String,
}

impl CacheFile {
    /// File `name` of folder `folder` under the user's cache root.
    pub fn new(folder: &str, name: &str) -> CacheFile {
        CacheFile {
            root: None,
            folder: folder.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The file at `path`, whose folder is then a cache root.
    pub fn at(path: &Path) -> CacheFile {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        CacheFile {
            root: Some(parent.unwrap_or(Path::new(".")).to_owned()),
            folder: String::new(),
            name: path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        }
    }

    /// Where the file is, for messages.
    pub fn path(&self) -> Result<PathBuf, CacheError> {
        Ok(self.root()?.join(&self.folder).join(&self.name))
    }

    /// Its bytes; `None` where the file or its folder does not exist.
    pub fn read(&self) -> Result<Option<Vec<u8>>, CacheError> {
        match CacheDir::open_existing_in(&self.root()?, &self.folder)? {
            Some(dir) => dir.read(&self.name),
            None => Ok(None),
        }
    }

    /// Writes it all or nothing, making its folder where missing.
    pub fn write(&self, bytes: &[u8]) -> Result<(), CacheError> {
        CacheDir::open_in(&self.root()?, &self.folder)?.write(&self.name, bytes)
    }

    fn root(&self) -> Result<PathBuf, CacheError> {
        self.root.clone().map_or_else(cache_root, Ok)
    }
}

/// How long an unlocked scratch folder may stand before [`CacheDir::scratch`] takes it for one a
/// killed process left (its creator locks it at once and writes into it).
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// What every scratch folder's name starts with.
const SCRATCH_PREFIX: &str = ".scratch-";

impl CacheDir {
    /// A fresh scratch folder in this one, for one job's temporary files; scratch folders
    /// that killed processes left here are removed first.
    pub fn scratch(&self) -> Result<Scratch, CacheError> {
        self.remove_abandoned(ABANDONED_AFTER);
        let what = || "making a scratch folder".to_owned();
        let parent = self.dir.try_clone().map_err(|e| self.error(what(), e))?;
        loop {
            let name = format!("{SCRATCH_PREFIX}{:016x}", rand::random::<u64>());
            match open_child_new(&parent, &name) {
                Ok(dir) => {
                    let lock = crate::file::lock(&dir, false).map_err(|e| self.error(what(), e))?;
                    return Ok(Scratch {
                        dir,
                        parent,
                        name,
                        _lock: lock,
                    });
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(self.error(what(), e)),
            }
        }
    }

    /// Removes the scratch folders older than `age` that no live job holds locked.
    fn remove_abandoned(&self, age: std::time::Duration) {
        let Ok(entries) = self.dir.entries() else {
            return;
        };
        let now = std::time::SystemTime::now();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| n.starts_with(SCRATCH_PREFIX)) else {
                continue;
            };
            let Ok(dir) = self.dir.open_dir_nofollow(name) else {
                continue;
            };
            let old = dir.dir_metadata().is_ok_and(|m| {
                let modified = std::time::UNIX_EPOCH + std::time::Duration::from_secs(m.mtime().max(0) as u64);
                now.duration_since(modified).is_ok_and(|standing| standing >= age)
            });
            if old && crate::file::lock(&dir, false).is_ok() {
                let _ = self.dir.remove_dir_all(name);
            }
        }
    }
}

/// A private folder for one job's temporary files in a cache folder (a build's sources and
/// output, a module's loaded copies): locked while in use, removed when dropped, and removed
/// by a later [`CacheDir::scratch`] when a killed process left it.
#[derive(Debug)]
pub struct Scratch {
    dir: Dir,
    parent: Dir,
    name: String,
    _lock: std::os::fd::OwnedFd,
}

impl Scratch {
    /// The open folder.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The path by which this process reaches `name` in the folder through its handle
    /// (`/proc/self/fd/N/name`), for what needs a path, such as `dlopen`.
    pub fn handle_path(&self, name: &str) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd())).join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.parent.remove_dir_all(&self.name);
    }
}

/// A new folder `name` (mode 700) in `parent`, opened; an error if it exists.
fn open_child_new(parent: &Dir, name: &str) -> std::io::Result<Dir> {
    parent.create_dir_with(name, DirBuilder::new().mode(0o700))?;
    parent.open_dir_nofollow(name)
}

/// Which rules a walk checks: a cache's (private from its root down) or those of a folder fuse
/// loads code from that it did not make, such as an installed library's (see [`trusted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    Cache,
    Trusted,
}

/// Checks that no other user (root aside) could have put what is in folder `dir`: every folder
/// from `/` to it is owned by you or root and writable by no one else unless sticky — the rule
/// for the folders above a cache. For folders fuse finds and loads code from on its own, such
/// as a pip wheel's libraries.
pub fn trusted(dir: &Path) -> Result<(), CacheError> {
    CacheDir::walk_with(dir, "", false, Rules::Trusted).map(drop)
}

/// `name` in `parent`, never through a link; made (mode 700) first when missing and `create`.
fn open_child(parent: &Dir, name: &OsStr, create: bool) -> std::io::Result<Dir> {
    match parent.open_dir_nofollow(name) {
        Err(e) if e.kind() == ErrorKind::NotFound && create => {
            match parent.create_dir_with(name, DirBuilder::new().mode(0o700)) {
                Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
            parent.open_dir_nofollow(name)
        }
        opened => opened,
    }
}

/// `path` made absolute with the links of its longest existing part resolved, so that the walk
/// checks the folders the path really leads through (a `~/.cache` linked elsewhere included).
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(found) => return Ok(rest.iter().rev().fold(found, |p, name| p.join(name))),
            Err(e) if e.kind() == ErrorKind::NotFound => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_owned());
                    existing = parent;
                }
                _ => return Err(e),
            },
            Err(e) => return Err(e),
        }
    }
}

/// Why a folder above the cache root is unsafe: another user (not root) owns it, or others may
/// write it and it is not sticky.
fn ancestor_problem(uid: u32, mode: u32) -> Option<String> {
    const STICKY: u32 = 0o1000;
    if uid != current_user() && uid != 0 {
        Some(owner_problem(uid))
    } else if mode & 0o022 != 0 && mode & STICKY == 0 {
        Some(format!("is writable by others (mode {:o})", mode & 0o7777))
    } else {
        None
    }
}

/// Why the cache root or a folder below it is not private: not yours, or writable by others.
fn private_problem(uid: u32, mode: u32) -> Option<String> {
    if uid != current_user() {
        Some(owner_problem(uid))
    } else if mode & 0o022 != 0 {
        Some(format!("is writable by others (mode {:o})", mode & 0o7777))
    } else {
        None
    }
}

fn owner_problem(uid: u32) -> String {
    format!("belongs to user {uid}, not to you ({})", current_user())
}

/// What starts every sealed entry, then its length (8 bytes, little-endian), its SHA-256 and
/// the bytes.
const SEAL: &[u8] = b"fuse-sealed-entry-1\n";

fn seal(bytes: &[u8]) -> Vec<u8> {
    let mut sealed = Vec::with_capacity(SEAL.len() + 40 + bytes.len());
    sealed.extend_from_slice(SEAL);
    sealed.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    sealed.extend_from_slice(&Sha256::digest(bytes));
    sealed.extend_from_slice(bytes);
    sealed
}

fn unseal(mut sealed: Vec<u8>) -> Option<Vec<u8>> {
    let rest = sealed.strip_prefix(SEAL)?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let (digest, bytes) = rest.split_first_chunk::<32>()?;
    let intact =
        u64::try_from(bytes.len()).ok()? == u64::from_le_bytes(*len) && Sha256::digest(bytes)[..] == digest[..];
    intact.then(|| sealed.split_off(SEAL.len() + 40))
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

/// This user's home folder in the password database, for when `HOME` is unset (cron,
/// services, `env -i`).
fn home_of_user() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid out-parameter for getpwuid_r.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and the buffer's length is given; on success
    // `found` points at `entry`, whose strings live in `buffer`.
    let status = unsafe {
        libc::getpwuid_r(
            current_user(),
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if status != 0 || found.is_null() || entry.pw_dir.is_null() {
        return None;
    }
    // SAFETY: pw_dir is a NUL-terminated string in `buffer`, alive here.
    let home = unsafe { std::ffi::CStr::from_ptr(entry.pw_dir) };
    let home = PathBuf::from(OsStr::from_bytes(home.to_bytes()));
    home.is_absolute().then_some(home)
}

#[cfg(test)]
mod tests;
