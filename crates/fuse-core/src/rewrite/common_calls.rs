//! Rule `common-calls`: a call that repeats an earlier one — the same function, form and
//! arguments — is computed once. Its readers read the earlier result instead and it goes; where
//! its result is a vector output, it becomes a copy of the earlier result, which reads a vector
//! where the call read its matrix or vectors.
//!
//! Solvers record such programs: the first BiCG iteration multiplies the same vector by A and by
//! Aᵀ, and with A symmetric both products are the same calls. Left in, each repeat is a walk
//! over the matrix for the explorer to place, and the search over twice the walks (21 calls
//! against 16) ran into its limits: 200 ms to plan one iteration at 2048², 13 ms without them.
//!
//! Invariant: every output is the same function of the inputs with the same roundings — a call
//! of the library is a function of its arguments alone, so a repeat computes the same bits.

use std::sync::Arc;

use super::edit::{call, prune, readers, text};
use super::rule::Rewritten;
use crate::library::Library;
use crate::program::{Arg, Call, CallId, Program};

/// The rule's name as printed.
const NAME: &str = "common-calls";

/// The program with the first call that repeats an earlier one computed once.
pub(super) fn apply(program: &Program, library: &Library) -> Option<Rewritten> {
    let calls = &program.calls;
    (0..calls.len()).find_map(|later| {
        let first = (0..later).find(|&c| repeats(&calls[later], &calls[c]))?;
        merge(program, library, first, later)
    })
}

/// Whether `later` computes what `earlier` does. A copy is left alone: a repeated copy that is
/// an output would become a copy again.
fn repeats(later: &Call, earlier: &Call) -> bool {
    later.function != "copy"
        && later.callee == earlier.callee
        && (Arc::ptr_eq(&later.form, &earlier.form) || later.form == earlier.form)
        && later.args == earlier.args
}

/// Call `later` replaced by the result of call `first`, which it repeats; `None` where its result
/// is an output that no call of the library copies (a scalar, a matrix).
fn merge(program: &Program, library: &Library, first: CallId, later: CallId) -> Option<Rewritten> {
    let (kept, repeat) = (program.calls[first].result, program.calls[later].result);
    let mut next = program.clone();
    let mut before = vec![program.calls[first].text.clone(), program.calls[later].text.clone()];
    let mut after = vec![program.calls[first].text.clone()];
    if program.is_output(repeat) {
        let copy = library.get("copy")?;
        let form = copy.form(1).filter(|_| program.values[repeat].shape.rank() == 1)?;
        let location = program.calls[later].location.clone();
        next.calls[later] = call(program, copy, form, vec![Arg::Value(kept)], repeat, location);
        after.push(next.calls[later].text.clone());
    }
    for r in readers(program, repeat) {
        let reader = &mut next.calls[r];
        before.push(reader.text.clone());
        reader.args = (reader.args.iter())
            .map(|a| a.substitute(repeat, &Arg::Value(kept)))
            .collect();
        reader.text = text(program, &reader.callee, &reader.args, reader.result);
        after.push(reader.text.clone());
    }
    prune(&mut next);
    Some(Rewritten::new(next, NAME, before, after))
}
