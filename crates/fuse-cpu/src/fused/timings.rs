//! The timing table the CPU backend explores with.
//!
//! CPU tables have the format of every fuse timing table ([`TimingTable`]): the device is the
//! CPU (its model name from `/proc/cpuinfo`, compute capability `0.0` — no CUDA — and one "SM"
//! per core), the model holds the measured copy bandwidth, arithmetic peaks and the cost of a
//! parallel section, and `routines` the measured compute time of each library function.
//! `fuse calibrate --backend cpu` writes one.
//!
//! The backend takes, in order: the table named by the caller or by `FUSE_CPU_TIMINGS`; the
//! table shipped in `library/timings/cpu-*.yaml` for this CPU model; else the shipped analytic
//! CPU estimate, with a note saying so. A table calibrated with another function library is
//! stale: named explicitly it is refused, shipped it is passed over with a note — either way
//! the message says to re-run `fuse calibrate --backend cpu`.

use std::path::Path;

use include_dir::{include_dir, Dir};

use fuse_core::explore::{library_checksum, TimingTable, Vocabulary};
use fuse_core::Library;

use super::error::CpuError;

/// Environment variable naming a CPU timing table to use instead of the shipped ones.
pub const ENV: &str = "FUSE_CPU_TIMINGS";

pub use fuse_core::explore::CPU_COMPUTE_CAPABILITY;

/// The shipped tables: `cpu-*.yaml` are CPU tables.
static SHIPPED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../library/timings");

/// The analytic CPU estimate among the shipped tables.
const ESTIMATE: &str = "cpu-analytic.yaml";

/// A table chosen for the CPU backend, and what the user should know about the choice.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The table.
    pub table: TimingTable,
    /// Why it is an estimate, or why a table was passed over.
    pub note: Option<String>,
}

/// Chooses the CPU timing table for `library`: `explicit`, else `$FUSE_CPU_TIMINGS`, else the
/// shipped table of this CPU, else the analytic estimate.
pub fn select(library: &Library, explicit: Option<&Path>) -> Result<Selected, CpuError> {
    let checksum = library_checksum(library);
    let from_env = std::env::var_os(ENV).filter(|v| !v.is_empty());
    if let Some(path) = explicit.or(from_env.as_deref().map(Path::new)) {
        let table = TimingTable::load(path)?.of_kind(Vocabulary::Cpu)?;
        check_fresh(&table, &checksum)?;
        return Ok(Selected { table, note: None });
    }
    let model = cpu_model();
    let mut passed_over = None;
    for table in shipped_naming(&model)? {
        if table.device.name != model {
            continue;
        }
        match check_fresh(&table, &checksum) {
            Ok(()) => return Ok(Selected { table, note: None }),
            Err(_) => {
                passed_over = Some(format!(
                    "{} was calibrated with another function library: not used; re-run `fuse calibrate --backend cpu -o FILE` and set {ENV}=FILE",
                    table.origin
                ))
            }
        }
    }
    let table = estimate()?;
    let why = passed_over.unwrap_or_else(|| {
        format!("no CPU timing table for `{model}` ships with fuse; run `fuse calibrate --backend cpu -o FILE` and set {ENV}=FILE")
    });
    Ok(Selected {
        note: Some(format!("{why} — plans are ranked by {}", table.describe())),
        table,
    })
}

/// Refuses a table measured on another library.
pub fn check_fresh(table: &TimingTable, checksum: &str) -> Result<(), CpuError> {
    match &table.library_checksum {
        Some(sum) if sum != checksum => Err(CpuError::StaleTimings {
            file: table.origin.clone(),
            table: sum.clone(),
            library: checksum.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The measured CPU tables shipped with fuse.
pub fn shipped() -> Result<Vec<TimingTable>, CpuError> {
    shipped_naming("")
}

/// The measured CPU tables shipped with fuse whose text names `model`: only they can be its
/// table (tables name their CPU as a plain scalar, as calibration writes it), and parsing
/// the others cost every run of the backend half a millisecond.
fn shipped_naming(model: &str) -> Result<Vec<TimingTable>, CpuError> {
    cpu_files()
        .filter(|(name, text)| *name != ESTIMATE && text.contains(model))
        .map(|(name, text)| Ok(TimingTable::parse(&format!("built-in library/timings/{name}"), text)?))
        .collect()
}

/// The shipped analytic CPU estimate.
pub fn estimate() -> Result<TimingTable, CpuError> {
    let text = cpu_files()
        .find(|(name, _)| *name == ESTIMATE)
        .map(|(_, text)| text)
        .unwrap_or_default();
    Ok(TimingTable::parse(
        &format!("built-in library/timings/{ESTIMATE}"),
        text,
    )?)
}

fn cpu_files() -> impl Iterator<Item = (&'static str, &'static str)> {
    SHIPPED.files().filter_map(|f| {
        let name = f.path().file_name()?.to_str()?;
        let cpu = name.starts_with("cpu-") && name.ends_with(".yaml");
        cpu.then_some((name, f.contents_utf8()?))
    })
}

/// This machine's CPU model, as `/proc/cpuinfo` names it (`unknown CPU` where it cannot be read).
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
    fn the_estimate_is_labelled_and_every_shipped_cpu_table_parses() {
        let estimate = estimate().unwrap();
        assert!(
            estimate.describe().contains("analytic estimate"),
            "{}",
            estimate.describe()
        );
        assert_eq!(estimate.device.compute_capability, CPU_COMPUTE_CAPABILITY);
        for table in shipped().unwrap() {
            assert_eq!(
                table.device.compute_capability, CPU_COMPUTE_CAPABILITY,
                "{}",
                table.origin
            );
            // Selection reads only the tables whose text names the CPU.
            let naming = shipped_naming(&table.device.name).unwrap();
            assert!(naming.iter().any(|t| t.origin == table.origin), "{}", table.origin);
        }
    }

    #[test]
    fn every_shipped_cpu_table_was_measured_on_the_shipped_library() {
        // A stale shipped table is passed over on every run, with a note each time.
        let library = fuse_core::Library::builtin().unwrap();
        let checksum = fuse_core::explore::library_checksum(&library);
        for table in shipped().unwrap() {
            check_fresh(&table, &checksum).unwrap_or_else(|e| panic!("re-calibrate {}: {e}", table.origin));
        }
    }

    #[test]
    fn a_table_from_another_library_is_stale() {
        let mut table = estimate().unwrap();
        table.library_checksum = Some("fnv1a64:0000000000000001".into());
        let err = check_fresh(&table, "fnv1a64:0000000000000002").unwrap_err().to_string();
        assert!(err.contains("re-run `fuse calibrate --backend cpu"), "{err}");
        assert!(check_fresh(&table, "fnv1a64:0000000000000001").is_ok());
    }
}
