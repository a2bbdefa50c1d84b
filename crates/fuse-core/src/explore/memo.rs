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
use crate::explore::mapping::CallMapping;
use crate::explore::predict::Predictor;
use crate::explore::Limits;
use crate::program::{Arg, CallId, ValueId};
use crate::shape::Shape;

/// The implementations of the fusion shapes met so far, for one context, predictor and limits.
#[derive(Default)]
pub struct ImplementationMemo<'c> {
    known: HashMap<FusionShape<'c>, Known>,
}

/// The implementations of the first fusion of a shape, in its own ids.
struct Known {
    calls: Vec<CallId>,
    values: Vec<ValueId>,
    implemented: Implemented,
}

#[derive(PartialEq, Eq, Hash)]
struct FusionShape<'c> {
    calls: Vec<CallShape<'c>>,
    values: Vec<ValueShape<'c>>,
}

#[derive(PartialEq, Eq, Hash)]
struct CallShape<'c> {
    callee: &'c str,
    /// Each argument's value rank, `None` for a literal (whose number no implementation reads).
    args: Vec<Option<usize>>,
    result: usize,
    mapping: &'c CallMapping,
}

#[derive(PartialEq, Eq, Hash)]
struct ValueShape<'c> {
    shape: &'c Shape,
    /// The rank of its producer in the fusion, `Some(None)` for a call outside, `None` for an
    /// input.
    producer: Option<Option<usize>>,
    output: bool,
    read_outside: bool,
}

impl<'c> ImplementationMemo<'c> {
    /// The implementations of the fusion of `calls` (increasing), as [`implement`] gives them.
    pub fn implement(
        &mut self,
        ctx: &'c Context,
        calls: &[CallId],
        predictor: &Predictor,
        limits: &Limits,
    ) -> Implemented {
        let values = touched_values(ctx, calls);
        let shape = FusionShape::of(ctx, calls, &values);
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
}

/// The values the calls read or produce, in increasing order.
fn touched_values(ctx: &Context, calls: &[CallId]) -> Vec<ValueId> {
    let program = ctx.program;
    let mut values: Vec<ValueId> = calls
        .iter()
        .flat_map(|&c| {
            let call = &program.calls[c];
            let reads = call.args.iter().filter_map(|a| match a {
                Arg::Value(v) => Some(*v),
                Arg::Literal(_) => None,
            });
            reads.chain(std::iter::once(call.result))
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

impl<'c> FusionShape<'c> {
    fn of(ctx: &'c Context, calls: &[CallId], values: &[ValueId]) -> Self {
        let program = ctx.program;
        let members = CallSet::of(calls);
        let call_shape = |c: CallId| {
            let call = &program.calls[c];
            let arg = |a: &Arg| match a {
                Arg::Value(v) => Some(rank(values, *v)),
                Arg::Literal(_) => None,
            };
            CallShape {
                callee: &call.callee,
                args: call.args.iter().map(arg).collect(),
                result: rank(values, call.result),
                mapping: &ctx.mappings[c],
            }
        };
        let value_shape = |v: ValueId| {
            let value = &program.values[v];
            let producer = value.producer.map(|p| members.contains(p).then(|| rank(calls, p)));
            ValueShape {
                shape: &value.shape,
                producer,
                output: program.is_output(v),
                read_outside: ctx.readers[v].iter().any(|&r| !members.contains(r)),
            }
        };
        FusionShape {
            calls: calls.iter().map(|&c| call_shape(c)).collect(),
            values: values.iter().map(|&v| value_shape(v)).collect(),
        }
    }
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
