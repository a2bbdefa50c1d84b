//! Program edits for the rules: a call of a library form, a new temporary, and dropping what
//! nothing reads — with value and call numbers kept consistent ([`Program`]'s invariants: values
//! are inputs or results of exactly one call, calls in dependency order).

use std::sync::Arc;

use crate::error::Location;
use crate::library::{ElementaryFunction, Form};
use crate::program::{Arg, Call, CallId, Program, Value, ValueId};
use crate::shape::Shape;

/// A call of `form` of `function` with `args` defining `result`, written at `location`.
pub(super) fn call(
    program: &Program,
    function: &ElementaryFunction,
    form: &Arc<Form>,
    args: Vec<Arg>,
    result: ValueId,
    location: Location,
) -> Call {
    let callee = format!("{}{}", program.precision.prefix(), function.name);
    let text = text(program, &callee, &args, result);
    Call {
        function: function.name.clone(),
        callee,
        kind: function.kind,
        form: Arc::clone(form),
        args,
        result,
        location,
        text,
    }
}

/// A call as a script writes it: `u = dgemv(a, A, x, 1, c)`.
pub(super) fn text(program: &Program, callee: &str, args: &[Arg], result: ValueId) -> String {
    let args: Vec<String> = args.iter().map(|a| a.text(program)).collect();
    format!("{} = {callee}({})", program.values[result].variable, args.join(", "))
}

/// Adds a temporary of `shape` named after `hint`, computed by the call `make` builds for it,
/// right before call `at`; returns the temporary.
pub(super) fn insert(
    program: &mut Program,
    at: CallId,
    hint: &str,
    shape: Shape,
    make: impl FnOnce(&Program, ValueId) -> Call,
) -> ValueId {
    let name = unique_name(program, hint);
    for value in &mut program.values {
        if let Some(c) = value.producer.as_mut().filter(|c| **c >= at) {
            *c += 1;
        }
    }
    let v = program.values.len();
    program.values.push(Value {
        name: name.clone(),
        variable: name,
        shape,
        producer: Some(at),
    });
    let call = make(program, v);
    program.calls.insert(at, call);
    v
}

/// `hint`, or `hint_2`, `hint_3`… where that is taken: names stay unique.
fn unique_name(program: &Program, hint: &str) -> String {
    let taken = |n: &str| program.values.iter().any(|v| v.name == n || v.variable == n);
    (1..)
        .map(|k| match k {
            1 => hint.to_string(),
            _ => format!("{hint}_{k}"),
        })
        .find(|n| !taken(n))
        .unwrap_or_default()
}

/// Drops every call whose result is neither an output nor read by a call that stays, and the
/// values they defined, renumbering the rest.
pub(super) fn prune(program: &mut Program) {
    let mut keep = vec![true; program.calls.len()];
    loop {
        let read: Vec<ValueId> = (program.calls.iter().zip(&keep))
            .filter(|(_, &k)| k)
            .flat_map(|(c, _)| c.reads())
            .collect();
        let mut changed = false;
        for (c, call) in program.calls.iter().enumerate() {
            if keep[c] && !program.is_output(call.result) && !read.contains(&call.result) {
                keep[c] = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    retain(program, &keep);
}

/// Keeps the calls `keep` marks, and the inputs and their values.
fn retain(program: &mut Program, keep: &[bool]) {
    let call_ids = renumbering(keep);
    let kept_value: Vec<bool> = (program.values.iter())
        .map(|v| v.producer.is_none_or(|c| keep[c]))
        .collect();
    let value_ids = renumbering(&kept_value);
    let new_value = |v: ValueId| value_ids[v].expect("a kept call reads only kept values");
    let values = std::mem::take(&mut program.values);
    program.values = (values.into_iter().zip(&kept_value))
        .filter(|(_, &k)| k)
        .map(|(mut v, _)| {
            v.producer = v.producer.and_then(|c| call_ids[c]);
            v
        })
        .collect();
    let calls = std::mem::take(&mut program.calls);
    program.calls = (calls.into_iter().zip(keep))
        .filter(|(_, &k)| k)
        .map(|(mut call, _)| {
            call.args = call.args.iter().map(|a| a.map_values(&new_value)).collect();
            call.result = new_value(call.result);
            call
        })
        .collect();
    program.inputs = program.inputs.iter().map(|&v| new_value(v)).collect();
    program.outputs = program.outputs.iter().map(|&v| new_value(v)).collect();
}

/// For each kept position its new index, `None` for the dropped.
fn renumbering(keep: &[bool]) -> Vec<Option<usize>> {
    let mut next = 0;
    keep.iter()
        .map(|&k| {
            k.then(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}

/// The calls that read value `v`.
pub(super) fn readers(program: &Program, v: ValueId) -> Vec<CallId> {
    (0..program.calls.len())
        .filter(|&c| program.calls[c].reads().contains(&v))
        .collect()
}

/// The matrices call `c` reads, in argument order.
pub(super) fn matrices(program: &Program, c: CallId) -> Vec<ValueId> {
    (program.calls[c].reads().into_iter())
        .filter(|&v| program.values[v].shape.rank() == 2)
        .collect()
}

/// Whether `v` must stay: an output, or read by a call other than `except`.
pub(super) fn needed_elsewhere(program: &Program, v: ValueId, except: CallId) -> bool {
    program.is_output(v) || readers(program, v).into_iter().any(|c| c != except)
}
