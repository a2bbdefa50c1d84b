//! Literals that change become run-time scalars. A literal argument (`s.saxpy(-1.0, …)`, a
//! Python float) is compiled in as a constant, which is right for a number that stays. A number
//! that changes from flush to flush (a solver's step length passed as a float) would compile
//! every flush anew, so once a flush of the same calls meets another value at a literal's
//! place, that literal is passed as a scalar value from then on: one more compile, then none
//! (as `torch.compile` marks a changed number dynamic).
//!
//! Invariant: the same calls with the same literals are rewritten the same way by
//! [`Literals::varying`] whether or not they run, so the forecast and the pending script
//! describe exactly the flush that follows.

use std::collections::HashMap;

use fuse_core::Precision;

use super::canonical::{self, PendingArg, PendingCall};

/// Literals are learned for this many distinct call sequences, then forgotten all at once.
const CAPACITY: usize = 256;

/// For each sequence of calls (by its canonical key with the literals left out), the value of
/// each of its literals while it has not changed (`None` once it has).
#[derive(Default)]
pub(super) struct Literals {
    seen: HashMap<Vec<u8>, Vec<Option<u64>>>,
}

/// The literals of one batch: the key of its calls without them, and their values' bits in
/// the order the calls pass them.
pub(super) struct Shape {
    key: Vec<u8>,
    values: Vec<u64>,
}

impl Literals {
    /// Which literals of a batch of `shape` run as scalar values: those that changed before,
    /// and those that differ now from the value last seen.
    pub(super) fn varying(&self, shape: &Shape) -> Vec<bool> {
        match self.seen.get(&shape.key) {
            None => vec![false; shape.values.len()],
            Some(seen) => (seen.iter().zip(&shape.values))
                .map(|(seen, &v)| *seen != Some(v))
                .collect(),
        }
    }

    /// Notes the literals of a batch of `shape` that ran with `varying` of them as values.
    pub(super) fn learn(&mut self, shape: Shape, varying: &[bool]) {
        if self.seen.len() >= CAPACITY && !self.seen.contains_key(&shape.key) {
            self.seen.clear();
        }
        let seen = (shape.values.iter().zip(varying))
            .map(|(&v, &varies)| (!varies).then_some(v))
            .collect();
        self.seen.insert(shape.key, seen);
    }
}

/// The literals of `calls`, or `None` if they pass none; `dims` gives the extents of the
/// values they read.
pub(super) fn shape(
    calls: &[PendingCall],
    outputs: &[u64],
    precision: Precision,
    dims: impl Fn(u64) -> Vec<usize>,
) -> Option<Shape> {
    let values: Vec<u64> = (calls.iter().flat_map(|c| &c.args))
        .filter_map(|a| match a {
            PendingArg::Literal(v) => Some(v.to_bits()),
            PendingArg::Value(_) => None,
        })
        .collect();
    if values.is_empty() {
        return None;
    }
    let masked: Vec<PendingCall> = calls
        .iter()
        .map(|c| map_literals(c, |_| PendingArg::Literal(0.0)))
        .collect();
    let key = canonical::script(&masked, outputs, precision, dims).key;
    Some(Shape { key, values })
}

/// `calls` with each `varying` literal passed as the value `scalar(literal)` returns the id of.
pub(super) fn as_values(
    calls: Vec<PendingCall>,
    varying: &[bool],
    mut scalar: impl FnMut(f64) -> u64,
) -> Vec<PendingCall> {
    if !varying.contains(&true) {
        return calls;
    }
    let mut varying = varying.iter();
    (calls.iter())
        .map(|c| {
            map_literals(c, |v| match varying.next() {
                Some(true) => PendingArg::Value(scalar(v)),
                _ => PendingArg::Literal(v),
            })
        })
        .collect()
}

/// `call` with each literal replaced by `literal(value)`.
fn map_literals(call: &PendingCall, mut literal: impl FnMut(f64) -> PendingArg) -> PendingCall {
    let args = (call.args.iter())
        .map(|a| match *a {
            PendingArg::Literal(v) => literal(v),
            PendingArg::Value(id) => PendingArg::Value(id),
        })
        .collect();
    PendingCall {
        function: call.function.clone(),
        args,
        result: call.result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axpy(a: f64) -> Vec<PendingCall> {
        let args = vec![PendingArg::Literal(a), PendingArg::Value(1), PendingArg::Value(2)];
        vec![PendingCall {
            function: "axpy".into(),
            args,
            result: 3,
        }]
    }

    fn shape_of(calls: &[PendingCall]) -> Shape {
        shape(calls, &[3], Precision::F64, |_| vec![5]).expect("a literal")
    }

    #[test]
    fn a_literal_varies_from_its_first_change_on() {
        let mut literals = Literals::default();
        for (a, varies) in [(2.0, false), (2.0, false), (3.0, true), (2.0, true), (4.0, true)] {
            let shape = shape_of(&axpy(a));
            let varying = literals.varying(&shape);
            assert_eq!(varying, [varies], "a = {a}");
            literals.learn(shape, &varying);
        }
    }

    #[test]
    fn calls_without_literals_have_no_shape_and_other_extents_another() {
        let mut calls = axpy(1.0);
        calls[0].args[0] = PendingArg::Value(0);
        assert!(shape(&calls, &[3], Precision::F64, |_| vec![5]).is_none());
        let mut literals = Literals::default();
        let five = shape_of(&axpy(1.0));
        literals.learn(five, &[false]);
        let seven = shape(&axpy(9.0), &[3], Precision::F64, |_| vec![7]).unwrap();
        assert_eq!(literals.varying(&seven), [false], "a first flush at other sizes");
    }

    #[test]
    fn varying_literals_become_values_in_order() {
        let calls = vec![axpy(2.0).remove(0), axpy(5.0).remove(0)];
        let mut made = Vec::new();
        let rewritten = as_values(calls, &[false, true], |v| {
            made.push(v);
            100
        });
        assert_eq!(made, [5.0]);
        assert!(matches!(rewritten[0].args[0], PendingArg::Literal(2.0)));
        assert!(matches!(rewritten[1].args[0], PendingArg::Value(100)));
        assert!(matches!(rewritten[1].args[1], PendingArg::Value(1)));
    }
}
