//! Rule `inline-scalars`: every call that reads the result of a scalar call (`kind: scalar`,
//! `alpha = sdiv(rho, sigma)`) gets that call as its argument instead (`saxpy(sdiv(rho, sigma),
//! p, x)`), so the kernel that needs the scalar computes it where it starts, from scalars
//! already finished, and no kernel runs to store it. The scalar call stays only where its value
//! must be stored: where it is an output.
//!
//! Invariant: every output is the same function of the inputs, computed with the same
//! roundings (an inlined call's result is rounded to the script's precision as a call's is,
//! and a product by an inlined scalar that is zero is +0 as by any scalar).

use std::sync::Arc;

use super::edit::{prune, readers, text};
use super::rule::Rewritten;
use crate::library::{HigherOrderKind, Library};
use crate::program::{Arg, Program, ScalarArg};

/// The program with the first scalar call that a call reads inlined into every reader.
pub(super) fn apply(program: &Program, _library: &Library) -> Option<Rewritten> {
    let scalar = program
        .calls
        .iter()
        .find(|c| c.kind == HigherOrderKind::Scalar && !readers(program, c.result).is_empty())?;
    let inlined = Arg::Scalar(Arc::new(ScalarArg {
        callee: scalar.callee.clone(),
        form: Arc::clone(&scalar.form),
        args: scalar.args.clone(),
    }));
    let mut next = program.clone();
    let mut before = vec![scalar.text.clone()];
    let mut after = Vec::new();
    for r in readers(program, scalar.result) {
        let call = &mut next.calls[r];
        before.push(call.text.clone());
        call.args = call
            .args
            .iter()
            .map(|a| a.substitute(scalar.result, &inlined))
            .collect();
        call.text = text(program, &call.callee, &call.args, call.result);
        after.push(call.text.clone());
    }
    if program.is_output(scalar.result) {
        after.insert(0, scalar.text.clone());
    }
    prune(&mut next);
    Some(Rewritten::new(next, "inline-scalars", before, after))
}

#[cfg(test)]
mod tests {
    use crate::library::HigherOrderKind;
    use crate::{script, Arg, Library};

    #[test]
    fn a_scalar_call_is_inlined_into_every_reader_and_kept_only_as_an_output() {
        let text = "sizes: {n: 8}\ninputs: {rho: scalar, sigma: scalar, x: [n], y: [n]}\noutputs: [z, w, beta]\ncalls:\n  - alpha = sdiv(rho, sigma)\n  - beta = sneg(alpha)\n  - z = saxpy(alpha, x, y)\n  - w = sscal(beta, x)\n";
        let program = script::parse("t.yaml", text, &Library::builtin().unwrap()).unwrap();
        let calls: Vec<&str> = program.calls.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            calls,
            [
                "beta = sneg(sdiv(rho, sigma))",
                "z = saxpy(sdiv(rho, sigma), x, y)",
                "w = sscal(sneg(sdiv(rho, sigma)), x)"
            ]
        );
        assert_eq!(program.calls[0].kind, HigherOrderKind::Scalar);
        // Reads see through the inlined calls: the explorer's dependencies are unchanged.
        let rho = program.value("rho").unwrap();
        assert!(program.calls[2].reads().contains(&rho));
        assert!(matches!(program.calls[2].args[0], Arg::Scalar(_)));
        assert_eq!(program.values.len(), 7, "alpha is gone");
        let rules: Vec<&str> = program.rewrites.iter().map(|r| r.rule).collect();
        assert_eq!(rules, ["inline-scalars", "inline-scalars"]);
    }
}
