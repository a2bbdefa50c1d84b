//! Rule `inline-scalars`: every call that reads the result of a scalar call (`kind: scalar`,
//! `alpha = sdiv(rho, sigma)`) gets that call as its argument instead (`saxpy(sdiv(rho, sigma),
//! p, x)`), so the kernel that needs the scalar computes it where it starts, from scalars
//! already finished, and no kernel runs to store it. The scalar call stays only where its value
//! must be stored: where it is an output.
//!
//! Invariant: every output is the same function of the inputs, computed with the same
//! roundings (an inlined call's result is rounded to the script's precision as a call's is).

use std::sync::Arc;

use crate::library::HigherOrderKind;
use crate::program::{Arg, CallId, Program, ScalarArg, ValueId};

/// `program` with every scalar call inlined into its readers.
pub fn inline_scalars(mut program: Program) -> Program {
    while let Some(c) = first_inlinable(&program) {
        program = inline(&program, c);
    }
    program
}

/// The first scalar call that a call reads.
fn first_inlinable(program: &Program) -> Option<CallId> {
    (0..program.calls.len()).find(|&c| {
        let call = &program.calls[c];
        call.kind == HigherOrderKind::Scalar && !readers(program, call.result).is_empty()
    })
}

/// `program` with scalar call `c` inlined into every reader, and dropped unless an output.
fn inline(program: &Program, c: CallId) -> Program {
    let scalar = &program.calls[c];
    let inlined = Arg::Scalar(Arc::new(ScalarArg {
        callee: scalar.callee.clone(),
        form: Arc::clone(&scalar.form),
        args: scalar.args.clone(),
    }));
    let mut next = program.clone();
    for r in readers(program, scalar.result) {
        let call = &mut next.calls[r];
        call.args = call
            .args
            .iter()
            .map(|a| a.substitute(scalar.result, &inlined))
            .collect();
        let args: Vec<String> = call.args.iter().map(|a| a.text(program)).collect();
        call.text = format!(
            "{} = {}({})",
            program.values[call.result].variable,
            call.callee,
            args.join(", ")
        );
    }
    if !program.is_output(scalar.result) {
        remove_call(&mut next, c);
    }
    next
}

/// The calls that read value `v`.
fn readers(program: &Program, v: ValueId) -> Vec<CallId> {
    (0..program.calls.len())
        .filter(|&c| program.calls[c].reads().contains(&v))
        .collect()
}

/// Removes call `c`, which nothing reads, and its result, renumbering later calls and values.
fn remove_call(program: &mut Program, c: CallId) {
    let gone = program.calls.remove(c).result;
    program.values.remove(gone);
    let value = |v: ValueId| if v > gone { v - 1 } else { v };
    for v in &mut program.values {
        v.producer = v.producer.map(|p| if p > c { p - 1 } else { p });
    }
    for call in &mut program.calls {
        call.result = value(call.result);
        call.args = call.args.iter().map(|a| a.map_values(&value)).collect();
    }
    program.inputs.iter_mut().for_each(|v| *v = value(*v));
    program.outputs.iter_mut().for_each(|v| *v = value(*v));
}
