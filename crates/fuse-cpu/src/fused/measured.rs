//! Where the timing table measured on this CPU is (named by [`ENV`], else installed in the
//! cache for the CPU's key, where [`CALIBRATE_ENV`] allows), and what the kernels themselves
//! take from it: whether walks out of cache prefetch in software ([`prefetch`]). A leaf
//! below both the kernels and the table selection ([`super::timings`]), which calibrates.

use std::path::Path;
use std::sync::OnceLock;

use fuse_core::cache::{CacheError, CacheFile};
use fuse_core::explore::{CpuKey, TimingTable};

use super::cpu::this_cpu;
use super::error::CpuError;

/// Environment variable naming a CPU timing table to use instead of the shipped ones.
pub const ENV: &str = "FUSE_CPU_TIMINGS";

/// Environment variable that, set to `0`, keeps fuse from measuring this CPU or using a table
/// measured on it unless named (`1`, or unset: it may).
pub const CALIBRATE_ENV: &str = "FUSE_CPU_CALIBRATE";

/// Whether self-calibration (and the tables it and `fuse calibrate` install) may be used.
pub(crate) fn calibration_on() -> Result<bool, CpuError> {
    match std::env::var(CALIBRATE_ENV).as_deref() {
        Err(_) | Ok("") | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(other) => Err(CpuError::Setting(format!(
            "{CALIBRATE_ENV}={other:?}: expected 0 (never measure this CPU) or 1"
        ))),
    }
}

/// Where the table calibrated for a CPU of `key` is installed.
pub(crate) fn installed(key: &CpuKey) -> CacheFile {
    CacheFile::new("timings", &format!("{}.yaml", file_stem(key)))
}

/// The file name (without `.yaml`) of the table installed for `key`.
pub(crate) fn file_stem(key: &CpuKey) -> String {
    format!(
        "cpu-{}-l1d-{}k-l2-{}k-llc-{}k-{}t",
        key.isa.replace('+', "-"),
        key.l1d_bytes >> 10,
        key.l2_bytes >> 10,
        key.llc_bytes >> 10,
        key.threads
    )
}

/// Whether walks through a matrix beyond the cache a run counts on prefetch each step's next
/// rows in software: where part of a kernel's data may still be in a larger cache the CPU shows
/// ([`Caches::partly_cached`](super::cache::Caches::partly_cached)), and where it is out of
/// every cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefetch {
    pub(crate) near: bool,
    pub(crate) far: bool,
}

impl Prefetch {
    /// The same choice for both.
    pub(crate) const fn both(ahead: bool) -> Prefetch {
        Prefetch {
            near: ahead,
            far: ahead,
        }
    }
}

/// Whether walks out of cache prefetch each step's next rows in software on this CPU: as the
/// table measured here says, read once a process; yes where none says otherwise (the shipped
/// tables and the estimate say nothing, and the kernels were tuned with it on), and near as
/// far where the table measured only far (where the CPU shows no larger cache, or an older
/// table).
pub(crate) fn prefetch() -> Prefetch {
    static PREFETCH: OnceLock<Prefetch> = OnceLock::new();
    *PREFETCH.get_or_init(|| {
        let model = measured_here().map(|t| t.model);
        let far = model.as_ref().and_then(|m| m.prefetch_ahead).unwrap_or(true);
        let near = model.as_ref().and_then(|m| m.prefetch_near).unwrap_or(far);
        Prefetch { near, far }
    })
}

/// The table named by [`ENV`], else the one installed for this CPU, if either reads.
fn measured_here() -> Option<TimingTable> {
    if let Some(path) = std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        return TimingTable::load(Path::new(&path)).ok();
    }
    calibration_on().ok()?.then_some(())?;
    read_table(&installed(&this_cpu().ok()?)).ok()?
}

/// The table in `file`, where there is one that parses.
pub(crate) fn read_table(file: &CacheFile) -> Result<Option<TimingTable>, CacheError> {
    let Some(bytes) = file.read()? else {
        return Ok(None);
    };
    let path = file.path()?.display().to_string();
    Ok(String::from_utf8(bytes)
        .ok()
        .and_then(|text| TimingTable::parse(&path, &text).ok()))
}
