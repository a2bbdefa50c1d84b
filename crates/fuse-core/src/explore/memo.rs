//! Implementations computed once per fusion *shape*. Fusions that are equal up to renaming
//! their calls and values — every run of k `sscal` calls in a chain — have the same
//! implementations, and on long programs implementing every candidate fusion afresh was most
//! of the explorer's time.
//!
//! A shape renames the fusion's calls and the values they touch to their ranks (both in
//! increasing id order, so every comparison of ids [`implement`] makes comes out the same) and
//! keeps everything about them that [`implement`] reads: each call's callee, arguments, result
//! and mapping, and each value's shape, where it comes from, and whether it is an output or
//! read outside the fusion. A hit renames the stored implementations back.

use std::collections::HashMap;

use crate::explore::callset::CallSet;
use crate::explore::context::Context;
use crate::explore::implementation::{implement, Implemented};
use crate::explore::predict::Predictor;
use crate::explore::Limits;
use crate::program::{Arg, CallId, ValueId};

/// The implementations of the fusion shapes met so far, for one context, predictor and limits.
pub struct ImplementationMemo {
    /// Each call's class: calls of one class have the same callee and mapping.
    call_class: Vec<u32>,
    /// Each value's class: values of one class have the same shape.
    value_class: Vec<u32>,
    known: HashMap<Vec<u32>, Known>,
}

/// The implementations of the first fusion of a shape, in its own ids.
struct Known {
    calls: Vec<CallId>,
    values: Vec<ValueId>,
    implemented: Implemented,
}

/// Marks a literal argument in a shape (whose number no implementation reads).
const LITERAL: u32 = u32::MAX;
/// Marks an inlined scalar call in a shape, before its arity and its arguments.
const INLINED: u32 = u32::MAX - 1;

impl ImplementationMemo {
    /// An empty memo for the fusions of `ctx`.
    pub fn new(ctx: &Context) -> Self {
        let program = ctx.program;
        let call_class = classes((0..ctx.calls()).map(|c| (program.calls[c].callee.as_str(), &ctx.mappings[c])));
        let value_class = classes(program.values.iter().map(|v| &v.shape));
        ImplementationMemo {
            call_class,
            value_class,
            known: HashMap::new(),
        }
    }

    /// The implementations of the fusion of `calls` (increasing), as [`implement`] gives them.
    pub fn implement(
        &mut self,
        ctx: &Context,
        calls: &[CallId],
        predictor: &Predictor,
        limits: &Limits,
    ) -> Implemented {
        let values = touched_values(ctx, calls);
        let shape = self.shape(ctx, calls, &values);
        match self.known.get(&shape) {
            Some(known) => known.renamed(calls, &values),
            None => {
                let implemented = implement(ctx, calls, predictor, limits);
                let known = Known {
                    calls: calls.to_vec(),
                    values,
                    implemented: implemented.clone(),
                };
                self.known.insert(shape, known);
                implemented
            }
        }
    }

    /// The fusion's shape, flat: its number of calls; for each call its class, its arguments' value ranks and its
    /// result's; for each value its class, its producer's rank (or whether it is an input),
    /// whether it is an output and whether a call outside the fusion reads it.
    fn shape(&self, ctx: &Context, calls: &[CallId], values: &[ValueId]) -> Vec<u32> {
        let program = ctx.program;
        let members = CallSet::of(calls);
        let mut shape = Vec::with_capacity(1 + 5 * calls.len() + 4 * values.len());
        shape.push(calls.len() as u32);
        for &c in calls {
            let call = &program.calls[c];
            shape.extend([self.call_class[c], call.args.len() as u32]);
            for a in &call.args {
                arg_shape(a, values, &mut shape);
            }
            shape.push(rank(values, call.result) as u32);
        }
        for &v in values {
            let producer = match program.values[v].producer {
                None => 0,
                Some(p) if members.contains(p) => 2 + rank(calls, p) as u32,
                Some(_) => 1,
            };
            let output = program.is_output(v) as u32;
            let read_outside = ctx.readers[v].iter().any(|&r| !members.contains(r)) as u32;
            shape.extend([self.value_class[v], producer, output, read_outside]);
        }
        shape
    }
}

/// An argument's part of a fusion's shape: a value's rank, a literal, or an inlined scalar
/// call's arity and its arguments'.
fn arg_shape(arg: &Arg, values: &[ValueId], shape: &mut Vec<u32>) {
    match arg {
        Arg::Value(v) => shape.push(rank(values, *v) as u32),
        Arg::Literal(_) => shape.push(LITERAL),
        Arg::Scalar(s) => {
            shape.extend([INLINED, s.args.len() as u32]);
            s.args.iter().for_each(|a| arg_shape(a, values, shape));
        }
    }
}

/// Numbers the distinct items in order of first appearance, and gives each item its number.
fn classes<T: Eq + std::hash::Hash>(items: impl Iterator<Item = T>) -> Vec<u32> {
    let mut seen: HashMap<T, u32> = HashMap::new();
    items
        .map(|item| {
            let next = seen.len() as u32;
            *seen.entry(item).or_insert(next)
        })
        .collect()
}

/// The values the calls read or produce, in increasing order.
fn touched_values(ctx: &Context, calls: &[CallId]) -> Vec<ValueId> {
    let program = ctx.program;
    let mut values: Vec<ValueId> = calls
        .iter()
        .flat_map(|&c| {
            let call = &program.calls[c];
            call.reads().into_iter().chain(std::iter::once(call.result))
        })
        .collect();
    values.sort_unstable();
    values.dedup();
    values
}

/// The rank of `id` in the increasing list `ids`, which holds it.
fn rank(ids: &[usize], id: usize) -> usize {
    ids.binary_search(&id).expect("a fusion's ids are among its own")
}

impl Known {
    /// The stored implementations for the fusion of `calls` touching `values`, of the same
    /// shape: each id replaced by the one of the same rank.
    fn renamed(&self, calls: &[CallId], values: &[ValueId]) -> Implemented {
        let call = |c: &mut CallId| *c = calls[rank(&self.calls, *c)];
        let mut implemented = self.implemented.clone();
        for imp in &mut implemented.list {
            imp.order.iter_mut().for_each(call);
            for reduction in &mut imp.launch.reductions {
                call(&mut reduction.call);
                reduction.value = values[rank(&self.values, reduction.value)];
            }
        }
        implemented
    }
}
