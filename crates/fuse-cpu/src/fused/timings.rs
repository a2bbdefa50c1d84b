//! The timing table the CPU backend explores with.
//!
//! CPU tables have the format of every fuse timing table ([`TimingTable`]): the device is the
//! CPU (its model name from `/proc/cpuinfo` as a label, compute capability `0.0` — no CUDA —
//! and one "SM" per thread), the model holds the measured copy bandwidth, arithmetic peaks and
//! the cost of a parallel section, and `routines` the measured compute time of each library
//! function. Each table carries the key of the CPU it was measured on ([`CpuKey`]): the
//! instruction set the kernels use, the L1d, L2 and last-level cache sizes and the threads fuse
//! runs — what decides speed, where a model name does not (a hypervisor shows one name for
//! different cores).
//!
//! The backend takes, in order:
//! 1. the table named by the caller or by `FUSE_CPU_TIMINGS`;
//! 2. the table installed for this CPU's key in the user's cache (`<cache>/timings/cpu-….yaml`),
//!    written by `fuse calibrate --backend cpu` or by step 4;
//! 3. a table shipped in `library/timings/cpu-*.yaml` whose key matches this CPU's
//!    ([`matches()`]: the same instruction set and threads, every cache within 25 %);
//! 4. a short calibration of this CPU (at most
//!    [`QUICK_SECONDS`](super::calibrate::QUICK_SECONDS) seconds), installed as in step 2, with
//!    a progress line on a terminal and a one-line note;
//! 5. the analytic estimate for this CPU's threads, L2 and vector width, with a note.
//!
//! `FUSE_CPU_CALIBRATE=0` leaves out steps 2 and 4 — no table measured on this machine is used
//! unless named — so that runs and tests are reproducible and never measure.
//!
//! A table calibrated with another function library is stale: named explicitly it is refused,
//! shipped it is passed over with a note, installed it is measured again — the messages say to
//! re-run `fuse calibrate --backend cpu`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use include_dir::{include_dir, Dir};

use fuse_core::cache::{CacheError, CacheFile};
use fuse_core::explore::timing::Peaks;
use fuse_core::explore::{library_checksum, CpuKey, TimingTable, Vocabulary};
use fuse_core::Library;

use super::calibrate::{calibrate, to_yaml, Budget, Step};
use super::cpu::f32_lanes;
pub use super::cpu::{cpu_model, describe, this_cpu};
use super::error::CpuError;

#[cfg(test)]
use super::measured::file_stem;
use super::measured::{calibration_on, installed, read_table};
pub use super::measured::{CALIBRATE_ENV, ENV};

pub use fuse_core::explore::CPU_COMPUTE_CAPABILITY;

/// How far apart a cache of a shipped table's CPU and this CPU's may be (as a ratio of sizes)
/// for the table to be this CPU's.
pub const CACHE_TOLERANCE: f64 = 1.25;

/// The shipped tables: `cpu-*.yaml` are CPU tables.
static SHIPPED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../library/timings");

/// The analytic CPU estimate among the shipped tables.
const ESTIMATE: &str = "cpu-analytic.yaml";

/// The estimate's arithmetic peak per f32 lane of a thread: one multiply-add a nanosecond.
const GFLOPS_PER_LANE: f64 = 2.0;

/// A table chosen for the CPU backend, and what the user should know about the choice.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The table.
    pub table: TimingTable,
    /// Why it is an estimate, why a table was passed over, or that this CPU was measured.
    pub note: Option<String>,
}

/// Chooses the CPU timing table for `library` (see the module docs).
pub fn select(library: &Library, explicit: Option<&Path>) -> Result<Selected, CpuError> {
    let checksum = library_checksum(library);
    let from_env = std::env::var_os(ENV).filter(|v| !v.is_empty());
    if let Some(path) = explicit.or(from_env.as_deref().map(Path::new)) {
        let table = TimingTable::load(path)?.of_kind(Vocabulary::Cpu)?;
        check_fresh(&table, &checksum)?;
        return Ok(Selected { table, note: None });
    }
    let key = this_cpu()?;
    let installed = calibration_on()?.then(|| installed(&key));
    select_for(&key, installed.as_ref(), library)
}

/// [`select`] without a named table, for a CPU of `key`, with `installed` the table calibrated
/// for it (`None` when calibration is off).
fn select_for(key: &CpuKey, installed: Option<&CacheFile>, library: &Library) -> Result<Selected, CpuError> {
    let checksum = library_checksum(library);
    // A cache folder that breaks its rules is neither read nor written: this CPU is not measured.
    let (installed, refused) = match installed.map(|file| installed_table(file, key, &checksum)) {
        Some(Ok(Some(table))) => return Ok(Selected { table, note: None }),
        Some(Err(e)) => (None, Some(format!("{e}; this CPU is not measured"))),
        _ => (installed, None),
    };
    let mut passed_over = None;
    let ours = |t: &TimingTable| t.device.cpu.as_ref().is_some_and(|k| matches(k, key));
    for table in shipped_naming(&format!("isa: {}\n", key.isa))?.into_iter().filter(ours) {
        match check_fresh(&table, &checksum) {
            Ok(()) => return Ok(Selected { table, note: None }),
            Err(_) => {
                passed_over = Some(format!(
                    "{} was calibrated with another function library: not used; run `fuse calibrate --backend cpu`",
                    table.origin
                ))
            }
        }
    }
    if let Some(file) = installed {
        return self_calibrate(file, key, library);
    }
    let why = refused.or(passed_over).unwrap_or_else(|| {
        format!(
            "no CPU timing table ships with fuse for this CPU ({}) and {CALIBRATE_ENV}=0 keeps fuse from measuring it; \
             name one with {ENV}=FILE (`fuse calibrate --backend cpu -o FILE`)",
            describe(key)
        )
    });
    estimated(key, why)
}

/// The estimate for `key`, with a note saying `why`.
fn estimated(key: &CpuKey, why: String) -> Result<Selected, CpuError> {
    let table = estimate_for(key)?;
    Ok(Selected {
        note: Some(format!("{why} — plans are ranked by {}", table.describe())),
        table,
    })
}

/// Installs `yaml`, a table measured on this CPU, where [`select`] finds it; its path.
pub fn install(yaml: &str) -> Result<PathBuf, CpuError> {
    let file = installed(&this_cpu()?);
    let cache = |e: CacheError| CpuError::Setting(e.to_string());
    file.write(yaml.as_bytes()).map_err(cache)?;
    file.path().map_err(cache)
}

/// The table installed in `file` if it is a fresh table of `key` (one that does not parse, of
/// another key or library, is measured again); an error where the cache folder is refused.
fn installed_table(file: &CacheFile, key: &CpuKey, checksum: &str) -> Result<Option<TimingTable>, CacheError> {
    let ours =
        |t: &TimingTable| t.device.is_cpu() && t.device.cpu.as_ref() == Some(key) && check_fresh(t, checksum).is_ok();
    Ok(read_table(file)?.filter(ours))
}

/// Measures this CPU within [`Budget::QUICK`] and installs the table in `file`; where it cannot
/// be measured, the estimate. One thread of a process measures at a time.
fn self_calibrate(file: &CacheFile, key: &CpuKey, library: &Library) -> Result<Selected, CpuError> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Another thread may have measured while this one waited.
    if let Ok(Some(table)) = installed_table(file, key, &library_checksum(library)) {
        return Ok(Selected { table, note: None });
    }
    let start = Instant::now();
    let mut progress = Progress::new();
    let measured = calibrate(library, Budget::QUICK, &mut |step| progress.show(&step));
    progress.clear();
    let calibration = match measured {
        Ok(calibration) => calibration,
        Err(e) => return estimated(key, format!("this CPU could not be measured ({e})")),
    };
    let mut measured = calibration.table;
    measured.device.cpu = Some(key.clone());
    let yaml = to_yaml(&measured, Budget::QUICK);
    let seconds = start.elapsed().as_secs_f64();
    let path = file.path().map_or_else(|e| e.to_string(), |p| p.display().to_string());
    let kept = match file.write(yaml.as_bytes()) {
        Ok(()) => format!("kept in {path} for later runs"),
        Err(e) => format!("not kept ({e})"),
    };
    let mut table = TimingTable::parse(&path, &yaml)?;
    table.origin = path;
    Ok(Selected {
        note: Some(format!(
            "measured this CPU ({}) in {seconds:.1} s, {} of {} functions' times: {kept} \
             (`fuse calibrate --backend cpu` measures longer; {CALIBRATE_ENV}=0 never measures)",
            describe(key),
            table.routines.len(),
            table.routines.len() + calibration.notes.len(),
        )),
        table,
    })
}

/// The self-calibration's progress line, on a terminal only.
struct Progress {
    terminal: bool,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, step: &Step) {
        if self.terminal {
            let line = format!(
                "fuse: measuring this CPU once: {}/{} {}",
                step.done, step.total, step.what
            );
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        }
    }

    fn clear(&mut self) {
        if self.terminal {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Whether a table measured on a CPU of key `table` is one for a CPU of key `cpu`: the same
/// instruction set and threads, and each cache within [`CACHE_TOLERANCE`] of its size.
pub fn matches(table: &CpuKey, cpu: &CpuKey) -> bool {
    let near = |a: u64, b: u64| (a.max(b) as f64) <= (a.min(b) as f64) * CACHE_TOLERANCE;
    table.isa == cpu.isa
        && table.threads == cpu.threads
        && near(table.l1d_bytes, cpu.l1d_bytes)
        && near(table.l2_bytes, cpu.l2_bytes)
        && near(table.llc_bytes, cpu.llc_bytes)
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

/// The measured CPU tables shipped with fuse whose text holds `text` (their key's `isa:` line):
/// only they can be this CPU's, and parsing the others would cost every compile its time.
fn shipped_naming(text: &str) -> Result<Vec<TimingTable>, CpuError> {
    cpu_files()
        .filter(|(name, body)| *name != ESTIMATE && body.contains(text))
        .map(|(name, text)| Ok(TimingTable::parse(&format!("built-in library/timings/{name}"), text)?))
        .collect()
}

/// The shipped analytic CPU estimate, for this CPU.
pub fn estimate() -> Result<TimingTable, CpuError> {
    estimate_for(&this_cpu()?)
}

/// The shipped analytic CPU estimate for a CPU of `key`: its threads, its L2 as a tile's room,
/// and peaks from its vector width.
fn estimate_for(key: &CpuKey) -> Result<TimingTable, CpuError> {
    let text = cpu_files()
        .find(|(name, _)| *name == ESTIMATE)
        .map(|(_, text)| text)
        .unwrap_or_default();
    let mut table = TimingTable::parse(&format!("built-in library/timings/{ESTIMATE}"), text)?;
    let f32_peak = (key.threads * f32_lanes(&key.isa)) as f64 * GFLOPS_PER_LANE;
    table.device.sms = key.threads;
    table.device.max_shared_per_block = key.l2_bytes;
    table.device.shared_per_sm = key.l2_bytes;
    table.device.cpu = Some(key.clone());
    table.model.peak_gflop_s = Peaks {
        f32: f32_peak,
        f64: f32_peak / 2.0,
    };
    Ok(table)
}

fn cpu_files() -> impl Iterator<Item = (&'static str, &'static str)> {
    SHIPPED.files().filter_map(|f| {
        let name = f.path().file_name()?.to_str()?;
        let cpu = name.starts_with("cpu-") && name.ends_with(".yaml");
        cpu.then_some((name, f.contents_utf8()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of the shipped AVX-512 EPYC table.
    fn epyc() -> CpuKey {
        CpuKey {
            isa: "avx512".into(),
            l1d_bytes: 32 << 10,
            l2_bytes: 1 << 20,
            llc_bytes: 32 << 20,
            threads: 2,
        }
    }

    #[test]
    fn the_estimate_is_labelled_and_every_shipped_cpu_table_parses_with_its_key() {
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
            let key = table
                .device
                .cpu
                .clone()
                .unwrap_or_else(|| panic!("{} has no `cpu` key", table.origin));
            assert_eq!(key.threads, table.device.sms, "{}", table.origin);
            // Selection reads only the tables whose text names the CPU's instruction set.
            let naming = shipped_naming(&format!("isa: {}\n", key.isa)).unwrap();
            assert!(naming.iter().any(|t| t.origin == table.origin), "{}", table.origin);
        }
    }

    #[test]
    fn a_shipped_table_is_chosen_only_for_a_cpu_of_its_key() {
        let library = fuse_core::Library::builtin().unwrap();
        let chosen = |key: &CpuKey| select_for(key, None, &library).unwrap();
        let epyc_table = chosen(&epyc());
        assert!(
            epyc_table.table.origin.ends_with("cpu-amd-epyc.yaml"),
            "{}",
            epyc_table.table.origin
        );
        assert!(epyc_table.note.is_none());
        // Caches within 25 % match (a Zen 4 listing its L3 as 30 MiB).
        let near = CpuKey {
            llc_bytes: 30 << 20,
            ..epyc()
        };
        assert!(chosen(&near).table.origin.ends_with("cpu-amd-epyc.yaml"));
        // Another instruction set, thread count or cache size: never the EPYC's table, even
        // where the model name is the same.
        let others = [
            CpuKey {
                isa: "avx2+fma".into(),
                llc_bytes: 8 << 20,
                ..epyc()
            },
            CpuKey {
                isa: "avx2+fma".into(),
                ..epyc()
            },
            CpuKey { threads: 4, ..epyc() },
            CpuKey {
                l1d_bytes: 48 << 10,
                l2_bytes: 2 << 20,
                llc_bytes: 480 << 20,
                ..epyc()
            },
            CpuKey {
                isa: "made-up".into(),
                threads: 7,
                ..epyc()
            },
        ];
        for key in others {
            let picked = chosen(&key);
            assert!(
                picked.table.origin.ends_with(ESTIMATE),
                "{key:?}: {}",
                picked.table.origin
            );
            let note = picked.note.unwrap();
            assert!(note.contains(&describe(&key)) && note.contains(CALIBRATE_ENV), "{note}");
        }
    }

    #[test]
    fn the_estimate_takes_threads_caches_and_vector_width_from_the_cpu() {
        let wide = CpuKey {
            threads: 3,
            l2_bytes: 2 << 20,
            ..epyc()
        };
        let narrow = CpuKey {
            isa: "avx2+fma".into(),
            ..wide.clone()
        };
        let (w, n) = (estimate_for(&wide).unwrap(), estimate_for(&narrow).unwrap());
        assert_eq!(
            (w.device.sms, w.device.shared_per_sm, w.device.max_shared_per_block),
            (3, 2 << 20, 2 << 20)
        );
        assert_eq!(w.model.peak_gflop_s.f32, 2.0 * n.model.peak_gflop_s.f32);
        assert_eq!(w.model.peak_gflop_s.f32, 2.0 * w.model.peak_gflop_s.f64);
        assert_eq!(w.device.cpu.as_ref(), Some(&wide));
        // This CPU's key is what its estimate is for.
        let here = this_cpu().unwrap();
        assert_eq!(estimate().unwrap().device.cpu, Some(here.clone()));
        assert!(
            ["avx512", "avx2+fma", "neon", "scalar"].contains(&here.isa.as_str()),
            "{here:?}"
        );
        assert!(
            here.l1d_bytes > 0 && here.l2_bytes >= here.l1d_bytes && here.llc_bytes >= here.l2_bytes,
            "{here:?}"
        );
    }

    #[test]
    fn keys_match_within_the_cache_tolerance_only() {
        assert!(matches(&epyc(), &epyc()));
        assert!(matches(
            &epyc(),
            &CpuKey {
                l2_bytes: 1280 << 10,
                ..epyc()
            }
        ));
        assert!(!matches(
            &epyc(),
            &CpuKey {
                l2_bytes: 1281 << 10,
                ..epyc()
            }
        ));
        assert!(!matches(
            &epyc(),
            &CpuKey {
                l1d_bytes: 48 << 10,
                ..epyc()
            }
        ));
        assert!(!matches(&epyc(), &CpuKey { threads: 1, ..epyc() }));
        let avx2 = CpuKey {
            isa: "avx2+fma".into(),
            ..epyc()
        };
        assert_eq!(file_stem(&avx2), "cpu-avx2-fma-l1d-32k-l2-1024k-llc-32768k-2t");
        assert_eq!(describe(&epyc()), "avx512, L1d 32 KiB, L2 1 MiB, LLC 32 MiB, 2 threads");
    }

    #[test]
    fn a_fresh_cpu_calibrates_itself_once_within_the_budget() {
        let library = fuse_core::Library::builtin().unwrap();
        let root = tempfile::tempdir().unwrap();
        // A CPU no shipped table matches (no real CPU has this instruction set).
        let key = CpuKey {
            isa: "test-isa".into(),
            ..this_cpu().unwrap()
        };
        let file = CacheFile::at(&root.path().join("timings").join(format!("{}.yaml", file_stem(&key))));
        let start = Instant::now();
        let first = select_for(&key, Some(&file), &library).unwrap();
        let seconds = start.elapsed().as_secs_f64();
        // The budget bounds the measuring; setting up the last function's plan may run past it,
        // and tests running beside this one stretch both (a whole calibration takes far longer).
        assert!(seconds < super::super::calibrate::QUICK_SECONDS + 7.0, "{seconds} s");
        let note = first.note.unwrap();
        assert!(note.contains("measured this CPU") && note.contains("kept in"), "{note}");
        assert_eq!(first.table.source, fuse_core::explore::timing::Source::Measured);
        assert_eq!(first.table.device.cpu.as_ref().map(|k| k.threads), Some(key.threads));
        assert!(first.table.model.bandwidth_gb_s > 0.0 && !first.table.routines.is_empty());
        let second = select_for(&key, Some(&file), &library).unwrap();
        assert!(second.note.is_none(), "{:?}", second.note);
        assert_eq!(second.table.origin, file.path().unwrap().display().to_string());
        assert_eq!(second.table.model, first.table.model);
        // A table there of another key is not taken: this CPU is measured again.
        let other = CpuKey {
            threads: key.threads + 1,
            ..key.clone()
        };
        let third = select_for(&other, Some(&file), &library).unwrap();
        assert!(third.note.unwrap().contains("measured this CPU"));
    }

    #[test]
    fn a_cache_folder_others_may_write_is_neither_read_nor_measured_into() {
        use std::os::unix::fs::PermissionsExt;
        let library = fuse_core::Library::builtin().unwrap();
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("timings");
        fuse_core::cache::CacheDir::open_in(&dir, "").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let key = CpuKey {
            isa: "test-isa".into(),
            ..epyc()
        };
        let file = CacheFile::at(&dir.join("t.yaml"));
        let picked = select_for(&key, Some(&file), &library).unwrap();
        assert!(picked.table.origin.ends_with(ESTIMATE), "{}", picked.table.origin);
        let note = picked.note.unwrap();
        assert!(
            note.contains("writable by others") && note.contains("not measured"),
            "{note}"
        );
        assert!(!dir.join("t.yaml").exists());
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
