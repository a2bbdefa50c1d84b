//! The fusion explorer (paper §3.2, §4.2): which calls may share a kernel, how each such
//! fusion can be implemented, how fast each implementation is predicted to run, and which
//! combinations of them — plans — cover the program best.
//!
//! The passes, one module each, all pure functions of (program, sizes, timing table, limits):
//!
//! 1. [`mapping`]: each call's block-to-data mapping (sub-vectors or a 2D grid of tiles);
//! 2. [`rules`]: the named fusibility rules;
//! 3. [`fusion`]: the legal fusions, connected through shared arrays;
//! 4. [`implementation`]: each fusion's implementations (order, variants, block size, serial
//!    iterations, finishing of partial reductions), predicted by [`predict`] from a
//!    [`timing`] table, dominated ones pruned — once per fusion shape (`memo`);
//! 5. [`plan`]: whole plans, best predicted first, lazily;
//! 6. [`explain`]: why two calls that share data are or are not in one kernel, in the words
//!    of the machine ([`vocabulary`]).
//!
//! ```
//! use fuse_core::explore::{explore, Limits, TimingTable};
//! use fuse_core::{script, Library};
//!
//! let library = Library::builtin().unwrap();
//! let text = "
//! sizes: {m: 4096, n: 4096}
//! inputs: {A: [m, n], p: [n], r: [m]}
//! outputs: [q, s]
//! calls:
//!   - q = sgemv(A, p)
//!   - s = sgemtv(A, r)
//! ";
//! let program = script::parse("bicgk.yaml", text, &library).unwrap();
//! let table = TimingTable::builtin().unwrap();
//! let exploration = explore(&program, &program.sizes, &table, &library, Limits::default()).unwrap();
//! let best = exploration.plans().next().unwrap();
//! assert_eq!(best.kernels.len(), 1); // A is read once
//! ```

mod callset;
mod chunked;
mod context;
pub mod environment;
pub mod explain;
pub mod fusion;
pub mod implementation;
pub mod mapping;
mod memo;
pub mod plan;
pub mod predict;
pub mod rules;
pub mod timing;
pub mod vocabulary;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use callset::CallSet;
pub use context::Context;
pub use environment::Environment;
pub use explain::{PairExplanation, Verdict, Why};
pub use fusion::Fusion;
pub use implementation::{
    implementation_with, Block, Dataflow, Finish, Implementation, Implemented, Launch, Reduction, RoutineShare,
};
pub use mapping::{Axis, CallMapping, Role, Space};
pub use plan::{GpuLayout, Kernel, Layout, Plan, PlanCount, Plans};
pub use predict::{KernelTime, Predictor, Work};
pub use rules::{Rule, Violation};
pub use timing::{library_checksum, CpuKey, TimingError, TimingTable, CPU_COMPUTE_CAPABILITY};
pub use vocabulary::Vocabulary;

use crate::library::Library;
use crate::program::Program;
use crate::shape::Sizes;

/// Bounds that keep exploration finite on any script. They are counts, not clocks, so the same
/// input always gives the same output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Calls in one fusion at most.
    pub max_fusion_calls: usize,
    /// Candidate call sets examined at most while enumerating fusions.
    pub max_fusions: usize,
    /// Call orders examined per fusion at most.
    pub max_orders: usize,
    /// Partial plans expanded by the best-first search before it completes plans greedily.
    pub max_search_nodes: usize,
    /// Partial plans expanded times the program's calls, at most: each partial plan holds a
    /// few numbers per call, so a long program gets fewer nodes and bounded memory.
    pub max_search_cells: usize,
    /// Partial plans visited when counting plans before the count becomes a lower bound.
    pub max_count_nodes: usize,
    /// Plans listed at most when all are asked for.
    pub max_plans: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_fusion_calls: 8,
            max_fusions: 4096,
            max_orders: 256,
            max_search_nodes: 20_000,
            max_search_cells: 20_000 * 256,
            max_count_nodes: 100_000,
            max_plans: 10_000,
        }
    }
}

/// Why a program cannot be explored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExploreError {
    /// Not even one call alone fits the device.
    #[error("`{call}` cannot run on {device}: no block size fits its threads and shared-memory limits")]
    Unlaunchable {
        /// The call as written.
        call: String,
        /// The device of the timing table.
        device: String,
    },
}

/// The explored space of a program: its fusions with their implementations. Plans are drawn
/// from it lazily with [`Exploration::plans`].
#[derive(Debug, Clone)]
pub struct Exploration<'p> {
    /// The program and its relations.
    pub context: Context<'p>,
    /// Legal fusions (every single call among them).
    pub fusions: Vec<Fusion>,
    /// The surviving implementations of each fusion, parallel to `fusions`.
    pub implementations: Vec<Implemented>,
    /// The timing table used, described in one line.
    pub timings: String,
    /// The limits explored under.
    pub limits: Limits,
    /// What the limits cut or the table could not provide, for the user.
    pub notes: Vec<String>,
}

/// Explores `program` at `sizes` with timings from `table` (measured on `library`, else its
/// measurements are ignored with a note).
pub fn explore<'p>(
    program: &'p Program,
    sizes: &Sizes,
    table: &TimingTable,
    library: &Library,
    limits: Limits,
) -> Result<Exploration<'p>, ExploreError> {
    let context = Context::new(program, sizes)
        .with_row_barrier(table.device.row_barrier)
        .with_words(Vocabulary::of(&table.device));
    let mut notes = Vec::new();
    let mismatch = table.mismatch(&library_checksum(library));
    notes.extend(mismatch.clone());
    let predictor = Predictor::new(table, mismatch.is_none());
    let found = fusion::enumerate(&context, &limits);
    if found.truncated {
        notes.push(format!(
            "fusion enumeration stopped at its limits ({} candidate sets, {} calls per fusion): larger fusions were not considered",
            limits.max_fusions, limits.max_fusion_calls
        ));
    }
    let mut memo = memo::ImplementationMemo::new(&context);
    let implementations: Vec<Implemented> = found
        .list
        .iter()
        .map(|f| memo.implement(&context, &f.calls, &predictor, &limits))
        .collect();
    let mut single = vec![None; context.calls()];
    for (f, fusion) in found.list.iter().enumerate() {
        if let [c] = fusion.calls[..] {
            single[c] = Some(f);
        }
    }
    if let Some(c) = (0..context.calls()).find(|&c| single[c].is_none_or(|f| implementations[f].list.is_empty())) {
        return Err(ExploreError::Unlaunchable {
            call: context.text(c).to_string(),
            device: table.device.name.clone(),
        });
    }
    Ok(Exploration {
        context,
        fusions: found.list,
        implementations,
        timings: table.describe(),
        limits,
        notes,
    })
}

impl<'p> Exploration<'p> {
    /// All plans, best predicted first, computed as they are taken.
    pub fn plans(&self) -> Plans<'_, 'p> {
        Plans::new(self)
    }

    /// The best predicted plan.
    pub fn best(&self) -> Plan {
        self.plans()
            .next()
            .expect("every call alone is a legal kernel, so a plan exists")
    }

    /// How many plans exist (a lower bound when counting hit its limit).
    pub fn count(&self) -> PlanCount {
        plan::count(self, self.limits.max_count_nodes)
    }

    /// For every pair of calls sharing data, whether `best` fuses them and, if not, why.
    pub fn explain(&self, best: &Plan) -> Vec<PairExplanation> {
        explain::explain(self, best)
    }

    /// The words of the machine explored for (its timing table's).
    pub fn words(&self) -> Vocabulary {
        self.context.words
    }

    /// The program explored.
    pub fn program(&self) -> &'p Program {
        self.context.program
    }
}
