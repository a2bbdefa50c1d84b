//! The timing table plans are ranked by on a GPU.
//!
//! Taken, in order: the table named by the caller or by `FUSE_CUDA_TIMINGS`; the table
//! `fuse calibrate` wrote for this GPU (`<cache>/timings/<gpu>.yaml`, keyed by the GPU's name
//! and compute capability); a measured table shipped in `library/timings/` for a GPU of this
//! name and compute capability; else the shipped analytic H100 estimate, with a note saying so.
//!
//! Calibrated tables live in a cache folder and go through its checks
//! (`fuse_core::cache`): a `timings` folder that another user owns or others may write is
//! refused with [`CudaError::Cache`], never read — a table decides which code runs.
//!
//! A table calibrated with another function library is stale. Named explicitly or calibrated
//! on this machine it is refused with [`CudaError::StaleTimings`], which says to re-run
//! `fuse calibrate`; shipped, it is passed over with a note.

use std::path::{Path, PathBuf};

use include_dir::{include_dir, Dir};

use fuse_core::explore::timing::Source;
use fuse_core::explore::{library_checksum, TimingTable, Vocabulary};
use fuse_core::Library;

use fuse_core::cache::CacheFile;

use crate::device::DeviceInfo;
use crate::error::CudaError;

/// Env var naming a GPU timing table to use instead of the calibrated or shipped ones.
pub const ENV: &str = "FUSE_CUDA_TIMINGS";

/// The shipped tables.
static SHIPPED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../library/timings");

/// A table chosen for a GPU, and what the user should know about the choice.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The table.
    pub table: TimingTable,
    /// Why it is an estimate, or why a table was passed over.
    pub note: Option<String>,
}

/// Where `fuse calibrate` writes the table of `gpu` by default, and where it is looked up.
fn calibrated(gpu: &DeviceInfo) -> CacheFile {
    CacheFile::new("timings", &format!("{}.yaml", gpu.key()))
}

/// Where `fuse calibrate` writes the table of `gpu` by default, for messages.
pub fn calibrated_path(gpu: &DeviceInfo) -> Result<PathBuf, CudaError> {
    Ok(calibrated(gpu).path()?)
}

/// Chooses the timing table for `gpu` and `library` (see the module docs).
pub fn select(gpu: &DeviceInfo, library: &Library, explicit: Option<&Path>) -> Result<Selected, CudaError> {
    select_with(&calibrated(gpu), gpu, library, explicit)
}

/// [`select`], with the calibrated table looked up in `calibrated`.
fn select_with(
    calibrated: &CacheFile,
    gpu: &DeviceInfo,
    library: &Library,
    explicit: Option<&Path>,
) -> Result<Selected, CudaError> {
    let checksum = library_checksum(library);
    let from_env = std::env::var_os(ENV).filter(|v| !v.is_empty());
    if let Some(path) = explicit.or(from_env.as_deref().map(Path::new)) {
        let table = TimingTable::load(path)?.of_kind(Vocabulary::Gpu)?;
        check_fresh(&table, &checksum)?;
        let note = other_gpu(&table, gpu);
        return Ok(Selected { table, note });
    }
    if let Some(table) = calibrated_table(calibrated)? {
        check_fresh(&table, &checksum)?;
        return Ok(Selected { table, note: None });
    }
    let mut passed_over = None;
    for table in shipped()?.into_iter().filter(|t| for_gpu(t, gpu)) {
        match check_fresh(&table, &checksum) {
            Ok(()) => return Ok(Selected { table, note: None }),
            Err(_) => {
                passed_over = Some(format!(
                    "{} was calibrated with another function library: not used; run `fuse calibrate`",
                    table.origin
                ))
            }
        }
    }
    let table = TimingTable::builtin()?;
    let why = passed_over.unwrap_or_else(|| {
        format!(
            "no timing table for {} ships with fuse or was calibrated here; run `fuse calibrate`",
            gpu.name
        )
    });
    Ok(Selected {
        note: Some(format!("{why} — plans are ranked by {}", table.describe())),
        table,
    })
}

/// The calibrated table in `file`, if there is one, read only from a private folder.
fn calibrated_table(file: &CacheFile) -> Result<Option<TimingTable>, CudaError> {
    let Some(bytes) = file.read()? else {
        return Ok(None);
    };
    let path = file.path()?.display().to_string();
    let text = String::from_utf8(bytes).map_err(|_| CudaError::Io {
        path: path.clone(),
        message: "not UTF-8 text".to_string(),
    })?;
    Ok(Some(TimingTable::parse(&path, &text)?))
}

/// Installs `yaml`, the table `fuse calibrate` measured on `gpu`, where [`select`] finds it:
/// in the private `timings` cache folder, all or nothing.
pub fn install(gpu: &DeviceInfo, yaml: &str) -> Result<PathBuf, CudaError> {
    let file = calibrated(gpu);
    file.write(yaml.as_bytes())?;
    Ok(file.path()?)
}

/// Refuses a table measured on another library.
pub fn check_fresh(table: &TimingTable, checksum: &str) -> Result<(), CudaError> {
    match &table.library_checksum {
        Some(sum) if sum != checksum && !table.routines.is_empty() => Err(CudaError::StaleTimings {
            file: table.origin.clone(),
            table: sum.clone(),
            library: checksum.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Whether `table` was measured on a GPU like `gpu` (same name and compute capability).
pub fn for_gpu(table: &TimingTable, gpu: &DeviceInfo) -> bool {
    table.source == Source::Measured
        && table.device.name == gpu.name
        && table.device.compute_capability == gpu.compute_capability_text()
}

/// A note when a table named explicitly was measured on another GPU.
fn other_gpu(table: &TimingTable, gpu: &DeviceInfo) -> Option<String> {
    (table.source == Source::Measured && !for_gpu(table, gpu)).then(|| {
        format!(
            "{} was measured on {} (sm_{}), not on this {}",
            table.origin,
            table.device.name,
            table.device.compute_capability.replace('.', ""),
            gpu.name
        )
    })
}

/// The measured GPU tables shipped with fuse: every `library/timings/*.yaml` but the CPU ones
/// (compute capability 0.0) and the analytic estimates.
pub fn shipped() -> Result<Vec<TimingTable>, CudaError> {
    let mut out = Vec::new();
    for file in SHIPPED.files() {
        let Some(name) = file.path().file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(text) = file.contents_utf8().filter(|_| name.ends_with(".yaml")) else {
            continue;
        };
        let table = TimingTable::parse(&format!("built-in library/timings/{name}"), text)?;
        if table.source == Source::Measured && table.device.compute_capability != "0.0" {
            out.push(table);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> DeviceInfo {
        crate::device::tests::info("NVIDIA H100 80GB HBM3")
    }

    fn measured(library_sum: &str, name: &str) -> String {
        TimingTable::builtin()
            .map(|t| {
                let mut t = t;
                t.source = Source::Measured;
                t.device.name = name.to_string();
                t.library_checksum = Some(library_sum.to_string());
                t.routines.push(fuse_core::explore::timing::Measurement {
                    function: "copy".into(),
                    variant: "default".into(),
                    routine: "load.x".into(),
                    precision: "f32".into(),
                    threads: 256,
                    instances: 1,
                    serial_iterations: 1,
                    shared_bytes: 0,
                    ns_per_call: 1.0,
                });
                serde_yaml::to_string(&t).unwrap()
            })
            .unwrap()
    }

    #[test]
    fn a_stale_table_named_explicitly_is_refused_with_the_fix() {
        let library = Library::builtin().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.yaml");
        std::fs::write(&path, measured("fnv1a64:0000000000000001", "NVIDIA H100 80GB HBM3")).unwrap();
        let err = select(&h100(), &library, Some(&path)).unwrap_err().to_string();
        assert!(err.contains("re-run `fuse calibrate`"), "{err}");
    }

    #[test]
    fn a_fresh_table_of_another_gpu_is_used_with_a_note() {
        let library = Library::builtin().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.yaml");
        std::fs::write(&path, measured(&library_checksum(&library), "NVIDIA A100-SXM4-80GB")).unwrap();
        let selected = select(&h100(), &library, Some(&path)).unwrap();
        let note = selected.note.unwrap();
        assert!(note.contains("measured on NVIDIA A100"), "{note}");
    }

    #[test]
    fn shipped_gpu_tables_parse_and_are_measured() {
        for table in shipped().unwrap() {
            assert_eq!(table.source, Source::Measured, "{}", table.origin);
            assert_ne!(table.device.compute_capability, "0.0");
        }
    }

    #[test]
    fn a_calibrated_table_is_read_only_from_a_private_folder() {
        use std::os::unix::fs::PermissionsExt;
        let library = Library::builtin().unwrap();
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("timings");
        let path = dir.join("t.yaml");
        let file = CacheFile::at(&path);
        // No folder yet: the shipped or analytic table, and nothing created.
        let fallback = select_with(&file, &h100(), &library, None).unwrap();
        assert_ne!(fallback.table.origin, path.display().to_string());
        assert!(!dir.exists());
        fuse_core::cache::CacheDir::open_in(&dir, "").unwrap();
        std::fs::write(&path, measured(&library_checksum(&library), "NVIDIA H100 80GB HBM3")).unwrap();
        let mine = select_with(&file, &h100(), &library, None).unwrap();
        assert_eq!(mine.table.origin, path.display().to_string());
        for mode in [0o777, 0o770, 0o702] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = select_with(&file, &h100(), &library, None).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, CudaError::Cache(_)), "{text}");
            assert!(
                text.contains(&dir.display().to_string()) && text.contains("writable by others"),
                "{text}"
            );
        }
    }

    #[test]
    fn calibrated_tables_live_under_the_cache_by_gpu() {
        let path = calibrated_path(&h100()).unwrap();
        assert!(
            path.ends_with("timings/nvidia-h100-80gb-hbm3-sm90.yaml"),
            "{}",
            path.display()
        );
    }
}
