//! Opening the files a user names — scripts, library entries, timing tables, arrays — through
//! one door: what is not a regular file once links are followed is refused on the open handle
//! before anything is read, so a FIFO or a device cannot hang fuse; a dangling link is called
//! one; and text is read up to a limit, so an endless file cannot exhaust memory.

use std::fs::{File, FileType, OpenOptions};
use std::io::{Error, ErrorKind, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most bytes read of a script (a 20,000-call chain takes about 1 MB).
pub const SCRIPT_LIMIT: u64 = 16 << 20;
/// The most bytes read of a library entry or a timing table.
pub const ENTRY_LIMIT: u64 = 1 << 20;

/// `path`, opened for reading if it is a regular file (links followed). Opened without
/// waiting, so that a FIFO with no writer is refused rather than waited on, and checked on
/// the handle, so that what is read is what was checked.
pub fn open_regular(path: &Path) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| explain_open(path, e))?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("is {}, not a regular file", describe(kind)),
        ));
    }
    Ok(file)
}

/// The text of the regular file `path`, refused when it is longer than `limit` bytes or not
/// UTF-8.
pub fn read_text(path: &Path, limit: u64) -> Result<String, Error> {
    let mut bytes = Vec::new();
    open_regular(path)?.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("is longer than {limit} bytes, more than fuse reads of such a file"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        Error::new(ErrorKind::InvalidData, format!("is not UTF-8 text (byte {at})"))
    })
}

/// What a file that is not a regular one is, in words.
fn describe(kind: FileType) -> &'static str {
    if kind.is_dir() {
        "a folder"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

/// `error` from opening `path`, saying so when the path is a link that leads nowhere.
fn explain_open(path: &Path, error: Error) -> Error {
    if error.kind() != ErrorKind::NotFound {
        return error;
    }
    match std::fs::read_link(path) {
        Ok(target) => Error::new(
            ErrorKind::NotFound,
            format!("is a link to {}, which does not exist", target.display()),
        ),
        Err(_) => error,
    }
}

/// Takes the exclusive lock of the folder `dir` (waiting for it when `wait`, else failing at
/// once), held until the returned descriptor is closed. Locked through a descriptor of its own,
/// since `dir` may be a path-only handle, which cannot be locked.
pub fn lock(dir: &impl AsFd, wait: bool) -> Result<OwnedFd, Error> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: openat of "." relative to an open descriptor; a non-negative result is a new
    // descriptor that nothing else owns.
    let fd = unsafe { libc::openat(dir.as_fd().as_raw_fd(), c".".as_ptr(), flags) };
    if fd < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let operation = if wait {
        libc::LOCK_EX
    } else {
        libc::LOCK_EX | libc::LOCK_NB
    };
    loop {
        // SAFETY: flock on an open descriptor has no other preconditions.
        if unsafe { libc::flock(fd.as_raw_fd(), operation) } == 0 {
            return Ok(fd);
        }
        let error = Error::last_os_error();
        if error.kind() != ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Whether something is at `path`, a dangling link included (where [`Path::exists`] says no).
pub fn is_there(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("script.yaml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        for (path, kind) in [
            (fifo.as_path(), "a FIFO (named pipe)"),
            (link.as_path(), "a FIFO (named pipe)"),
            (dir.path(), "a folder"),
            (Path::new("/dev/zero"), "a character device"),
        ] {
            let err = read_text(path, SCRIPT_LIMIT).unwrap_err().to_string();
            assert_eq!(err, format!("is {kind}, not a regular file"), "{}", path.display());
        }
    }

    #[test]
    fn a_dangling_link_is_called_one_and_long_files_are_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("A.npy");
        std::os::unix::fs::symlink("gone.npy", &link).unwrap();
        assert!(is_there(&link) && !link.exists());
        let err = open_regular(&link).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(err.to_string(), "is a link to gone.npy, which does not exist");
        let long = dir.path().join("long.yaml");
        std::fs::write(&long, "x".repeat(101)).unwrap();
        assert_eq!(read_text(&long, 101).unwrap().len(), 101);
        let err = read_text(&long, 100).unwrap_err().to_string();
        assert!(err.contains("longer than 100 bytes"), "{err}");
        std::fs::write(&long, b"ok\xff").unwrap();
        assert_eq!(
            read_text(&long, 100).unwrap_err().to_string(),
            "is not UTF-8 text (byte 2)"
        );
    }
}
