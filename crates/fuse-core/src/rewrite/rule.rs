//! What a rule of the rewrite stage returns.

use crate::program::{Program, Rewrite};

/// A rule's result: the program after one step, and the step.
pub(super) struct Rewritten {
    /// The program after the step.
    pub program: Program,
    /// What the step changed.
    pub step: Rewrite,
}

impl Rewritten {
    /// The program `program` after a step of `rule` that replaced the calls `before` by `after`.
    pub(super) fn new(program: Program, rule: &'static str, before: Vec<String>, after: Vec<String>) -> Self {
        Rewritten {
            program,
            step: Rewrite { rule, before, after },
        }
    }
}
