//! What a rule of the rewrite stage returns.

use crate::program::{Program, Rewrite};

/// A rule's result: the program after one step, and the step.
pub(super) struct Rewritten {
    /// The program after the step.
    pub program: Program,
    /// What the step changed.
    pub step: Rewrite,
}
