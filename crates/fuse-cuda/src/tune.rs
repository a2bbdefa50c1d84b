//! `fuse tune`: time the best predicted plans on the GPU, keep the fastest.
//!
//! Each of the K best predicted plans is generated, checked against the f64 reference at small
//! sizes (a wrong plan never wins), then timed at the program's sizes with CUDA events, the way
//! repeated runs go (step by step, or replayed as a CUDA graph where that is faster). The
//! outcome also measures the predictor (paper Table 4): the rank, in predicted order, of the
//! plan that measured fastest, and the first predicted plan's speed as a share of the fastest.
//!
//! The fastest plan is remembered in a per-GPU tune cache (`<cache>/tune/<gpu>.json`), keyed by
//! the program (its calls, shapes and precision, not its file name), the sizes and the library
//! checksum; `fuse run --backend cuda` uses it when the key matches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use fuse_codegen::generate::generate_plan;
use fuse_core::cache::CacheFile;
use fuse_core::data::fill_random_inputs;
use fuse_core::explore::library_checksum;
use fuse_core::{explore, Bindings, Library, Limits, Plan, Program, Sizes, TimingTable};

use crate::cache::ModuleCache;
use crate::check::{capped, compare};
use crate::device::{Device, DeviceInfo};
use crate::error::CudaError;
use crate::plan::CudaPlan;
use crate::timer::{Timer, Timing, TimingOptions};

/// How to tune.
#[derive(Debug, Clone, Copy)]
pub struct TuneOptions {
    /// Plans timed: the best `top` predicted.
    pub top: usize,
    /// How each plan is timed.
    pub timing: TimingOptions,
    /// Largest extent of the correctness check before timing.
    pub check_extent: usize,
    /// Seed of the random inputs.
    pub seed: u64,
}

impl Default for TuneOptions {
    /// The 10 best predicted plans, timed by [`TimingOptions::default`], checked at ≤ 257.
    fn default() -> Self {
        TuneOptions {
            top: 10,
            timing: TimingOptions::default(),
            check_extent: 257,
            seed: 0,
        }
    }
}

/// One plan's measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// The plan (its `rank` is the predicted rank, 1 = best).
    pub plan: Plan,
    /// Its measured time.
    pub measured: Timing,
}

/// What tuning found.
#[derive(Debug, Clone, Serialize)]
pub struct Tuned {
    /// The plans timed, in predicted order.
    pub candidates: Vec<Candidate>,
    /// Index in `candidates` of the fastest measured.
    pub fastest: usize,
}

impl Tuned {
    /// The plan that measured fastest.
    pub fn best(&self) -> &Candidate {
        &self.candidates[self.fastest]
    }

    /// The predicted rank of the plan that measured fastest (1: the predictor was right).
    pub fn rank_of_fastest(&self) -> usize {
        self.best().plan.rank
    }

    /// The first predicted plan's speed as a percentage of the fastest (100: it is the fastest).
    pub fn first_pct_of_fastest(&self) -> f64 {
        100.0 * self.best().measured.median_us / self.candidates[0].measured.median_us
    }
}

/// Progress of a tuning, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// Plans done.
    pub done: usize,
    /// Plans in all.
    pub total: usize,
    /// Predicted rank of the plan now timed.
    pub rank: usize,
}

/// Times the `options.top` best plans of `program` at `sizes` predicted by `table`.
pub fn tune(
    device: &Device,
    program: &Program,
    sizes: &Sizes,
    library: &Library,
    table: &TimingTable,
    options: &TuneOptions,
    progress: &mut dyn FnMut(Step),
) -> Result<Tuned, CudaError> {
    let exploration = explore(program, sizes, table, library, Limits::default())?;
    let plans: Vec<Plan> = exploration.plans().take(options.top.max(1)).collect();
    let cache = ModuleCache::default_location();
    let timer = Timer::new(device, options.timing.flush_l2)?;
    let mut inputs = Bindings::new();
    fill_random_inputs(program, sizes, options.seed, &mut inputs);
    let mut candidates = Vec::new();
    for (k, plan) in plans.into_iter().enumerate() {
        progress(Step {
            done: k,
            total: options.top.max(1),
            rank: plan.rank,
        });
        let cuda = CudaPlan::compile_with(generate_plan(program, &plan)?, device, &cache)?;
        check_plan(&cuda, program, sizes, options)?;
        let mut workspace = cuda.prepare(program, sizes, &inputs)?;
        let measured = cuda.time(&mut workspace, &timer, &options.timing)?;
        candidates.push(Candidate { plan, measured });
    }
    let fastest = (0..candidates.len())
        .min_by(|&a, &b| {
            let t = |k: usize| candidates[k].measured.median_us;
            t(a).total_cmp(&t(b))
        })
        .unwrap_or(0);
    Ok(Tuned { candidates, fastest })
}

/// Runs `plan` at capped sizes against the reference; a mismatch is an error naming the plan.
pub fn check_plan(plan: &CudaPlan, program: &Program, sizes: &Sizes, options: &TuneOptions) -> Result<(), CudaError> {
    let small = capped(program, sizes, options.check_extent);
    let mut inputs = Bindings::new();
    fill_random_inputs(program, &small, options.seed ^ 0x5eed, &mut inputs);
    let got = plan.run(program, &small, &inputs)?;
    let want = fuse_core::reference::evaluate(program, &small, &inputs)
        .map_err(|e| CudaError::Unsupported(format!("reference: {e}")))?;
    match compare(program, &got, &want) {
        None => Ok(()),
        Some(m) => Err(CudaError::Unsupported(format!(
            "{}: a generated plan is wrong on this GPU at {small}: {m} (a fuse bug, please report)",
            program.file
        ))),
    }
}

/// The identity of a program for the tune cache: its precision, inputs, outputs and calls (not
/// its file name or comments), with the sizes.
pub fn program_key(program: &Program, sizes: &Sizes) -> String {
    let names = |ids: &[usize]| -> Vec<String> {
        ids.iter()
            .map(|&v| format!("{}:{}", program.values[v].variable, program.values[v].shape))
            .collect()
    };
    let calls: Vec<&str> = program.calls.iter().map(|c| c.text.as_str()).collect();
    format!(
        "{} | {} | in {} | out {} | {}",
        program.precision,
        sizes,
        names(&program.inputs).join(" "),
        names(&program.outputs).join(" "),
        calls.join("; ")
    )
}

/// One remembered plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Checksum of the library the plan was tuned with.
    pub library: String,
    /// The fastest plan.
    pub plan: Plan,
    /// Its measured time, µs.
    pub measured_us: f64,
    /// Plans timed.
    pub timed: usize,
}

/// The tuned plans of one GPU, on disk.
#[derive(Debug, Clone)]
pub struct TuneCache {
    file: CacheFile,
}

impl TuneCache {
    /// The cache of `gpu` under the user's cache folder.
    pub fn for_gpu(gpu: &DeviceInfo) -> TuneCache {
        TuneCache {
            file: CacheFile::new("tune", &format!("{}.json", gpu.key())),
        }
    }

    /// The cache in file `path`, whose folder follows the rules of a cache root.
    pub fn at(path: &Path) -> TuneCache {
        TuneCache {
            file: CacheFile::at(path),
        }
    }

    /// The file.
    pub fn path(&self) -> Result<PathBuf, CudaError> {
        Ok(self.file.path()?)
    }

    /// The plan remembered for `program` at `sizes` with `library`, if any.
    pub fn get(&self, program: &Program, sizes: &Sizes, library: &Library) -> Option<Entry> {
        let entries = self.read().ok()?;
        let entry = entries.get(&program_key(program, sizes))?;
        let fits = entry.library == library_checksum(library) && covers(&entry.plan, program);
        fits.then(|| entry.clone())
    }

    /// Remembers `entry` for `program` at `sizes`.
    pub fn put(&self, program: &Program, sizes: &Sizes, entry: Entry) -> Result<(), CudaError> {
        let mut entries = self.read().unwrap_or_default();
        entries.insert(program_key(program, sizes), entry);
        let text = serde_json::to_string_pretty(&entries).map_err(|e| self.error(e.to_string()))?;
        Ok(self.file.write(text.as_bytes())?)
    }

    fn read(&self) -> Result<BTreeMap<String, Entry>, CudaError> {
        match self.file.read()? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| self.error(format!("not a tune cache: {e}"))),
            None => Ok(BTreeMap::new()),
        }
    }

    fn error(&self, message: String) -> CudaError {
        CudaError::Io {
            path: self
                .file
                .path()
                .map_or_else(|e| e.to_string(), |p| p.display().to_string()),
            message,
        }
    }
}

/// Whether `plan` covers every call of `program` exactly once (a remembered plan of an older
/// program with the same key could not, but check rather than trust).
fn covers(plan: &Plan, program: &Program) -> bool {
    let mut seen = vec![0; program.calls.len()];
    for &c in plan.kernels.iter().flat_map(|k| &k.calls) {
        match seen.get_mut(c) {
            Some(n) => *n += 1,
            None => return false,
        }
    }
    seen.iter().all(|&n| n == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_core::testing::{sequence, SEQUENCES};
    use fuse_core::Precision;

    fn timing(us: f64) -> Timing {
        Timing {
            median_us: us,
            min_us: us,
            max_us: us,
            runs: 1,
        }
    }

    fn top_plans(name: &str, k: usize) -> (Program, Vec<Plan>) {
        let program = sequence(name, Precision::F32);
        let library = Library::builtin().unwrap();
        let table = TimingTable::builtin().unwrap();
        let e = explore(&program, &program.sizes, &table, &library, Limits::default()).unwrap();
        let plans = e.plans().take(k).collect();
        (program, plans)
    }

    #[test]
    fn prediction_accuracy_is_the_rank_of_the_fastest_and_the_first_as_a_share() {
        let (_, plans) = top_plans("gemver", 3);
        let candidates: Vec<Candidate> = plans
            .into_iter()
            .zip([120.0, 100.0, 150.0])
            .map(|(plan, us)| Candidate {
                plan,
                measured: timing(us),
            })
            .collect();
        let tuned = Tuned { candidates, fastest: 1 };
        assert_eq!(tuned.rank_of_fastest(), 2);
        assert!((tuned.first_pct_of_fastest() - 100.0 * 100.0 / 120.0).abs() < 1e-9);
    }

    #[test]
    fn keys_ignore_file_names_but_not_sizes_or_precision() {
        let a = sequence("bicgk", Precision::F32);
        let mut b = a.clone();
        b.file = "elsewhere/bicgk.yaml".into();
        assert_eq!(program_key(&a, &a.sizes), program_key(&b, &b.sizes));
        let other = a.bind_sizes(&[("m".into(), 100)]).unwrap();
        assert_ne!(program_key(&a, &a.sizes), program_key(&a, &other));
        let d = sequence("bicgk", Precision::F64);
        assert_ne!(program_key(&a, &a.sizes), program_key(&d, &d.sizes));
        let keys: std::collections::BTreeSet<String> = SEQUENCES
            .iter()
            .map(|n| {
                let p = sequence(n, Precision::F32);
                program_key(&p, &p.sizes)
            })
            .collect();
        assert_eq!(keys.len(), SEQUENCES.len());
    }

    #[test]
    fn the_cache_remembers_per_program_and_library() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TuneCache::at(&dir.path().join("tune").join("gpu.json"));
        let library = Library::builtin().unwrap();
        let (program, plans) = top_plans("atax", 2);
        assert!(cache.get(&program, &program.sizes, &library).is_none());
        let entry = Entry {
            library: library_checksum(&library),
            plan: plans[1].clone(),
            measured_us: 42.0,
            timed: 2,
        };
        cache.put(&program, &program.sizes, entry.clone()).unwrap();
        assert_eq!(cache.get(&program, &program.sizes, &library), Some(entry.clone()));
        let (other, _) = top_plans("bicgk", 1);
        assert!(cache.get(&other, &other.sizes, &library).is_none());
        let stale = Entry {
            library: "fnv1a64:0000000000000001".into(),
            ..entry
        };
        cache.put(&program, &program.sizes, stale).unwrap();
        assert!(cache.get(&program, &program.sizes, &library).is_none());
    }

    #[test]
    fn a_plan_of_another_program_does_not_cover_it() {
        let (atax, plans) = top_plans("atax", 1);
        assert!(covers(&plans[0], &atax));
        let (gemver, _) = top_plans("gemver", 1);
        assert!(!covers(&plans[0], &gemver));
    }
}
