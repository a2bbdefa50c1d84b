//! Rule `split-accumulation`: a walk that accumulates onto another walk's result no longer
//! waits for it.
//!
//! `y1 = gemtv(-1, Y, t, 1, y); y2 = gemtv(-1, U, z, 1, y1)` makes the walk over U wait for
//! the global barrier that finishes `y1`, so it cannot share a pass over U with another walk
//! of U, nor the pass over Y. Written `p = gemtv(-1, U, z); y2 = add(p, y1)`, the two
//! accumulations are independent: both walks may run in one kernel, and the sum of their
//! results is a map after it.
//!
//! Applies where the walk's accumulated vector `y1` is another walk's result that nothing else
//! reads, where that lets the walk fuse (another walk reads its matrix, or the other walk runs
//! over a matrix of the same shape in the same direction), and where the library has a form of
//! the walk's function with its sum alone and a map form for what it adds.
//!
//! Invariant: `y2` is the same up to rounding (the product is rounded before it is added);
//! the sums themselves are unchanged.

use crate::library::{HigherOrderKind, Library};
use crate::program::Rewrite;
use crate::program::{Arg, CallId, Program, ValueId};
use crate::rewrite::edit;
use crate::rewrite::linear::{self, Coefficient, Part, Term};
use crate::rewrite::rule::Rewritten;

/// The rule's name as printed.
const NAME: &str = "split-accumulation";

/// The program with the first accumulation onto a walk's result split.
pub(super) fn apply(program: &Program, library: &Library) -> Option<Rewritten> {
    (0..program.calls.len()).find_map(|c| split(program, library, c))
}

/// Walk `c` split into its product and a map adding what it accumulated onto, where it can be.
fn split(program: &Program, library: &Library, c: CallId) -> Option<Rewritten> {
    let call = &program.calls[c];
    if call.kind != HigherOrderKind::NestedReduce {
        return None;
    }
    let terms = linear::terms(call)?;
    let y1 = accumulated_walk(program, &terms, c)?;
    if !worth_splitting(program, c, y1) {
        return None;
    }
    let (sum, rest): (Vec<Term>, Vec<Term>) = terms.into_iter().partition(|t| t.part == Part::Sum);
    let function = library.get(&call.function)?;
    let arithmetic = linear::Arithmetic::of(library, program.precision);
    let (product_form, product_args) = (function.forms.iter())
        .find_map(|form| linear::bind(form, &sum, Some(call), arithmetic.as_ref()).map(|args| (form, args)))?;
    let mut next = program.clone();
    let hint = format!("{}_product", program.values[call.result].variable);
    let shape = program.values[call.result].shape.clone();
    let p = edit::insert(&mut next, c, &hint, shape, |program, p| {
        edit::call(program, function, product_form, product_args, p, call.location.clone())
    });
    let one = Coefficient {
        number: 1.0,
        scalars: Vec::new(),
    };
    let mut added = vec![Term {
        coefficient: one,
        part: Part::Vector(p),
    }];
    added.extend(rest);
    let (map, form, args) = map_form(library, &added, arithmetic.as_ref())?;
    next.calls[c + 1] = edit::call(&next, map, form, args, call.result, call.location.clone());
    let step = Rewrite {
        rule: NAME,
        before: vec![
            program.calls[program.values[y1].producer?].text.clone(),
            call.text.clone(),
        ],
        after: vec![next.calls[c].text.clone(), next.calls[c + 1].text.clone()],
    };
    Some(Rewritten { program: next, step })
}

/// The vector the walk accumulates onto, where it is another walk's result read only here,
/// and not row sums accumulated row by row (those are finished in the rows that read them, so
/// the two walks fuse as written).
fn accumulated_walk(program: &Program, terms: &[Term], c: CallId) -> Option<ValueId> {
    terms.iter().find_map(|t| match t.part {
        Part::Vector(v) => {
            let producer = program.values[v].producer?;
            let walk = program.calls[producer].kind == HigherOrderKind::NestedReduce;
            let rows_onto_rows = linear::walks_rows(&program.calls[producer]) && linear::walks_rows(&program.calls[c]);
            (walk && !rows_onto_rows && !edit::needed_elsewhere(program, v, c)).then_some(v)
        }
        Part::Sum => None,
    })
}

/// Whether the walk `c` could fuse once it no longer waits for `y1`: another walk reads its
/// matrix, or `y1`'s walk runs the same way over a matrix of the same shape.
fn worth_splitting(program: &Program, c: CallId, y1: ValueId) -> bool {
    let matrix = |c: CallId| edit::matrices(program, c).first().copied();
    let Some(ours) = matrix(c) else { return false };
    let shared = (0..program.calls.len())
        .filter(|&o| o != c && program.calls[o].kind.nesting_level() == 2)
        .any(|o| matrix(o) == Some(ours));
    let other = program.values[y1].producer.filter(|&w| {
        program.calls[w].function == program.calls[c].function
            && matrix(w).is_some_and(|m| program.values[m].shape == program.values[ours].shape)
    });
    shared || other.is_some()
}

/// A map function of the library and its form computing the sum of `terms`, with the fewest
/// parameters (the first by name among equals).
fn map_form<'l>(
    library: &'l Library,
    terms: &[Term],
    arithmetic: Option<&linear::Arithmetic>,
) -> Option<(
    &'l crate::library::ElementaryFunction,
    &'l std::sync::Arc<crate::library::Form>,
    Vec<Arg>,
)> {
    library
        .functions()
        .filter(|f| f.kind == HigherOrderKind::Map)
        .flat_map(|f| f.forms.iter().map(move |form| (f, form)))
        .filter_map(|(f, form)| linear::bind(form, terms, None, arithmetic).map(|args| (f, form, args)))
        .min_by_key(|(_, form, _)| form.signature.params.len())
}
