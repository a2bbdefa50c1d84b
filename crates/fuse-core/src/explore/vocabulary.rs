//! The words plans are described in. The explorer's data is the same for every target, but a
//! GPU runs a kernel as a grid of blocks with shared memory, and the CPU backend runs it as a
//! pass of threads over cache-sized tiles: `fuse explore` and `fuse explain` speak of what the
//! backend that runs the plan does.

use serde::{Deserialize, Serialize};

use crate::explore::timing::Hardware;

/// Whose words: a GPU's (kernels, blocks, shared memory) or the CPU backend's (passes,
/// threads, tiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vocabulary {
    /// Kernels launched as blocks of threads, values kept on chip.
    Gpu,
    /// Passes of threads over tiles, values kept in cache.
    Cpu,
}

impl Vocabulary {
    /// The words for the machine a timing table was measured on.
    pub fn of(hardware: &Hardware) -> Vocabulary {
        match hardware.is_cpu() {
            true => Vocabulary::Cpu,
            false => Vocabulary::Gpu,
        }
    }

    /// What one unit of a plan is: `kernel` or `pass`.
    pub fn kernel(self) -> &'static str {
        match self {
            Vocabulary::Gpu => "kernel",
            Vocabulary::Cpu => "pass",
        }
    }

    /// `n kernels` / `n passes`.
    pub fn kernels(self, n: usize) -> String {
        match (self, n) {
            (_, 1) => format!("1 {}", self.kernel()),
            (Vocabulary::Gpu, _) => format!("{n} kernels"),
            (Vocabulary::Cpu, _) => format!("{n} passes"),
        }
    }

    /// What every unit pays to start: a kernel launch, or a parallel section (waking the
    /// threads and joining them).
    pub fn launch(self) -> &'static str {
        match self {
            Vocabulary::Gpu => "launch",
            Vocabulary::Cpu => "start",
        }
    }

    /// Where a value passed between fused calls stays instead of memory.
    pub fn on_chip(self) -> &'static str {
        match self {
            Vocabulary::Gpu => "on chip",
            Vocabulary::Cpu => "in cache",
        }
    }

    /// Why a reduction's result cannot be read by the unit that computes it.
    pub fn barrier(self) -> &'static str {
        match self {
            Vocabulary::Gpu => "after a global barrier",
            Vocabulary::Cpu => "when every thread has finished its share (the end of a pass)",
        }
    }

    /// Who holds a part of the data: `blocks` or `threads`.
    pub fn workers(self) -> &'static str {
        match self {
            Vocabulary::Gpu => "blocks",
            Vocabulary::Cpu => "threads",
        }
    }
}
