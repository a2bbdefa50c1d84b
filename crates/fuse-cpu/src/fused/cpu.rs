//! This CPU: the key its timing tables are filed under ([`CpuKey`]: what decides speed) and
//! the model name that labels them.

use fuse_core::explore::CpuKey;

use super::error::CpuError;
use super::{cache, SimdLevel, Threads};

/// This CPU's key: the instruction set the kernels use, its caches, and the threads fuse runs
/// (`FUSE_NUM_THREADS`, else one per core this process may use).
pub fn this_cpu() -> Result<CpuKey, CpuError> {
    Ok(CpuKey {
        isa: isa(SimdLevel::shared()?).to_string(),
        l1d_bytes: cache::first_level_bytes() as u64,
        l2_bytes: cache::second_level_bytes() as u64,
        llc_bytes: cache::last_level_bytes() as u64,
        threads: Threads::shared()?.count() as u32,
    })
}

/// The instruction set of a key for the kernels' `level` (`FUSE_SIMD`, else the widest here):
/// a table measured with AVX2 kernels is an AVX2 table, whatever else the CPU has.
fn isa(level: SimdLevel) -> &'static str {
    match level {
        SimdLevel::Avx512 => "avx512",
        SimdLevel::Avx2 => "avx2+fma",
        SimdLevel::Neon => "neon",
        SimdLevel::Scalar => "scalar",
    }
}

/// f32 numbers in a vector of `isa`.
pub(crate) fn f32_lanes(isa: &str) -> u32 {
    match isa {
        "avx512" => 16,
        "avx2+fma" => 8,
        "neon" => 4,
        _ => 1,
    }
}

/// `key` in words.
pub fn describe(key: &CpuKey) -> String {
    format!(
        "{}, L1d {}, L2 {}, LLC {}, {} thread{}",
        key.isa,
        size(key.l1d_bytes),
        size(key.l2_bytes),
        size(key.llc_bytes),
        key.threads,
        if key.threads == 1 { "" } else { "s" }
    )
}

/// `bytes` in KiB or MiB, as caches are named.
fn size(bytes: u64) -> String {
    match bytes % (1 << 20) {
        0 => format!("{} MiB", bytes >> 20),
        _ => format!("{} KiB", bytes >> 10),
    }
}

/// This machine's CPU model, as `/proc/cpuinfo` names it (`unknown CPU` where it cannot be
/// read): a table's label, not its key.
pub fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_in_words_names_its_caches_and_threads() {
        let key = |threads| CpuKey {
            isa: "avx2+fma".to_string(),
            l1d_bytes: 48 << 10,
            l2_bytes: 2 << 20,
            llc_bytes: 480 << 20,
            threads,
        };
        assert_eq!(
            describe(&key(1)),
            "avx2+fma, L1d 48 KiB, L2 2 MiB, LLC 480 MiB, 1 thread"
        );
        assert_eq!(
            describe(&key(2)),
            "avx2+fma, L1d 48 KiB, L2 2 MiB, LLC 480 MiB, 2 threads"
        );
    }
}
