//! The size of the CPU's last-level cache: whether a matrix can still be in cache when a kernel
//! walks it again decides whether the walks pull in the next row block ahead of them.

use std::path::Path;
use std::sync::OnceLock;

/// Assumed where the system does not say: a common last-level cache of one core complex.
const UNKNOWN_BYTES: usize = 32 << 20;

/// Bytes of the largest data cache of the CPU, read once (Linux: cpu0's caches in sysfs).
pub(crate) fn last_level_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| largest_cache(Path::new("/sys/devices/system/cpu/cpu0/cache")).unwrap_or(UNKNOWN_BYTES))
}

/// The largest data or unified cache listed in `dir` (`index*/type`, `index*/size`).
fn largest_cache(dir: &Path) -> Option<usize> {
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let kind = read(&path.join("type"))?;
            (kind.trim() != "Instruction").then_some(())?;
            bytes(&read(&path.join("size"))?)
        })
        .max()
}

/// `32768K`, `1M` or `512` as bytes.
fn bytes(text: &str) -> Option<usize> {
    let text = text.trim();
    let (number, scale) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    number.parse::<usize>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_sysfs_writes_them() {
        assert_eq!(bytes("32768K\n"), Some(32 << 20));
        assert_eq!(bytes("1M"), Some(1 << 20));
        assert_eq!(bytes("512"), Some(512));
        assert_eq!(bytes("K"), None);
        assert_eq!(bytes("lots"), None);
        assert_eq!(bytes("99999999999999999999G"), None);
    }

    #[test]
    fn the_largest_data_cache_of_a_listing() {
        let dir = std::env::temp_dir().join(format!("fuse-cache-{}", std::process::id()));
        for (index, kind, size) in [
            (0, "Data", "32K"),
            (1, "Instruction", "64M"),
            (2, "Unified", "1024K"),
            (3, "Unified", "32768K"),
        ] {
            let entry = dir.join(format!("index{index}"));
            std::fs::create_dir_all(&entry).unwrap();
            std::fs::write(entry.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(entry.join("size"), format!("{size}\n")).unwrap();
        }
        std::fs::create_dir_all(dir.join("uevent-like")).unwrap();
        assert_eq!(largest_cache(&dir), Some(32 << 20));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(largest_cache(&dir), None);
    }
}
