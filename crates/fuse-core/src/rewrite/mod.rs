//! The rewrite stage: between the checked program and the explorer, the same math rephrased so
//! that the explorer's rules can fuse it as well as the best way of writing it.
//!
//! The explorer fuses calls as written: a BLAS-1 call between two BLAS-2 calls is a kernel of
//! its own, and an accumulation onto another walk's result waits for that walk's global
//! barrier. So `t = A·x; u = a·t + c; y = Aᵀ·u` would read A twice where `u = a·A·x + c;
//! y = Aᵀ·u` reads it once. Each rule here (one a file) finds one such pattern and replaces it
//! by calls of the library that compute the same values; [`rewrite`] applies them until none
//! matches, and records each step in [`Program::rewrites`] (`fuse rewrite` prints them).
//!
//! Invariants every rule keeps, which the property tests check on random programs:
//! - inputs and outputs are the same values (names, shapes, order); a temporary may go or come;
//! - every output is the same function of the inputs, up to rounding: a rule may drop the
//!   rounding of an intermediate result (`a·(A·x)` is no longer rounded at `A·x`), never
//!   reassociate a sum or change what a zero scalar drops ([`crate::formula`]);
//! - calls stay in dependency order and each is a form of a library function, so every backend
//!   runs a rewritten program unchanged;
//! - a rule applies only where it reads less memory or lets the explorer do so.

mod common_calls;
mod edit;
mod inline_scalars;
mod linear;
mod map_joins_walk;
mod rule;
mod split_accumulation;

use crate::library::Library;
use crate::program::Program;
use rule::Rewritten;

pub use crate::program::Rewrite;

/// A rule: the program after its first match, or `None` where nothing matches.
type Rule = fn(&Program, &Library) -> Option<Rewritten>;

/// The rules, tried in this order after every step: repeated calls are merged first, so that
/// the others see each computation once; scalar calls are inlined last, where no other rule
/// matches (those see a scalar call's result as a value like any other).
const RULES: [Rule; 4] = [
    common_calls::apply,
    map_joins_walk::apply,
    split_accumulation::apply,
    inline_scalars::apply,
];

/// More steps than any script needs: each step removes a call or a dependency on a walk's
/// result, so a program of `n` calls takes at most about `2n`.
const MAX_STEPS: usize = 1000;

/// `program` with every rule applied until none matches.
pub fn rewrite(mut program: Program, library: &Library) -> Program {
    'steps: for _ in 0..MAX_STEPS {
        for rule in RULES {
            if let Some(Rewritten { program: next, step }) = rule(&program, library) {
                program = next;
                program.rewrites.push(step);
                continue 'steps;
            }
        }
        break;
    }
    program
}

#[cfg(test)]
mod tests;
