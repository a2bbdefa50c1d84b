//! Rule `map-joins-walk`: a map (BLAS-1) of a walk's result joins the walk.
//!
//! `t = gemv(A, x); u = axpy(a, t, c)` becomes `u = gemv(a, A, x, 1, c)`: each element of `u`
//! is complete in the row that finishes `t`'s, so `u` is one more accumulation of the row walk
//! and no kernel of its own. Scaling folds the same way (`scal(a, gemv(α, A, x))` →
//! `gemv(a·α, A, x)`), and an `axpy` onto a product becomes the product's `b·y`.
//!
//! Applies where the map is linear in the walk's result `t`, reads it once, and its other
//! vectors are complete before the walk (not themselves results of walks: waiting for them is
//! what [`super::split_accumulation`] undoes); and where some form of the walk's function
//! computes the combination. Where `t` is needed elsewhere too, the walk is kept and the map
//! becomes a second walk over the same matrix — only where `t`'s walk runs along rows and a
//! walk of that matrix reads the map's result row by row (GEMVER's `w = Aᵀ·(b·A·y + z)`), so
//! all three share the pass that was needed anyway. A walk that needs the whole map result
//! before its first row (`A·(r − α·A·p)`, BiCGSTAB's `t = A·s`) would not share it: there the
//! map stays a map.
//!
//! Invariant: the map's result is the same up to rounding (`t` is no longer rounded on its
//! own); the walk's sum and what a zero scalar drops are unchanged.

use crate::library::{HigherOrderKind, Library};
use crate::program::{Call, CallId, Program, ValueId};
use crate::rewrite::edit;
use crate::rewrite::linear::{self, Part, Term};
use crate::rewrite::rule::Rewritten;

/// The rule's name as printed.
const NAME: &str = "map-joins-walk";

/// The program with the first map that can join a walk joined.
pub(super) fn apply(program: &Program, library: &Library) -> Option<Rewritten> {
    (0..program.calls.len()).find_map(|m| join(program, library, m))
}

/// Map call `m` joined to the walk it reads, where it can be.
fn join(program: &Program, library: &Library, m: CallId) -> Option<Rewritten> {
    let map = &program.calls[m];
    if map.kind != HigherOrderKind::Map {
        return None;
    }
    let terms = linear::terms(map)?;
    let (walk, t) = the_walk(program, &terms)?;
    let keep_walk = edit::needed_elsewhere(program, t, m);
    if keep_walk && !(linear::walks_rows(&program.calls[walk]) && fuses_with_a_walk_reading(program, m, walk)) {
        return None;
    }
    let wanted = combined(&terms, t, &program.calls[walk])?;
    let source = &program.calls[walk];
    let function = library.get(&source.function)?;
    let arithmetic = linear::Arithmetic::of(library, program.precision);
    let (form, args) = function
        .forms
        .iter()
        .find_map(|form| linear::bind(form, &wanted, Some(source), arithmetic.as_ref()).map(|args| (form, args)))?;
    let mut next = program.clone();
    next.calls[m] = edit::call(program, function, form, args, map.result, map.location.clone());
    let mut after = vec![next.calls[m].text.clone()];
    if keep_walk {
        after.insert(0, source.text.clone());
    }
    let before = vec![source.text.clone(), map.text.clone()];
    edit::prune(&mut next);
    Some(Rewritten::new(next, NAME, before, after))
}

/// The one walk (nested reduce) whose result the map reads, with that result, where the
/// map's other vectors are not results of walks.
fn the_walk(program: &Program, terms: &[Term]) -> Option<(CallId, ValueId)> {
    let walks: Vec<(CallId, ValueId)> = (terms.iter())
        .filter_map(|t| match t.part {
            Part::Vector(v) => program.values[v].producer.map(|c| (c, v)),
            Part::Sum => None,
        })
        .filter(|&(c, _)| program.calls[c].kind == HigherOrderKind::NestedReduce)
        .collect();
    match walks[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// The map's terms with `t` replaced by the walk's terms.
fn combined(terms: &[Term], t: ValueId, walk: &Call) -> Option<Vec<Term>> {
    let mut out = Vec::new();
    for term in terms {
        match term.part {
            Part::Vector(v) if v == t => {
                for w in linear::terms(walk)? {
                    out.push(Term {
                        coefficient: term.coefficient.times(&w.coefficient),
                        part: w.part,
                    });
                }
            }
            _ => out.push(term.clone()),
        }
    }
    let vectors: Vec<&Part> = out.iter().map(|t| &t.part).filter(|p| **p != Part::Sum).collect();
    let distinct = (1..vectors.len()).all(|k| !vectors[..k].contains(&vectors[k]));
    distinct.then_some(out)
}

/// Whether a walk over a matrix of `walk` reads the result of map `m` row by row.
fn fuses_with_a_walk_reading(program: &Program, m: CallId, walk: CallId) -> bool {
    let matrices = |c: CallId| edit::matrices(program, c);
    let ours = matrices(walk);
    edit::readers(program, program.calls[m].result).into_iter().any(|r| {
        let reader = &program.calls[r];
        reader.kind.nesting_level() == 2
            && matrices(r).iter().any(|v| ours.contains(v))
            && linear::reads_per_row(reader, program.calls[m].result)
    })
}
