//! The canonical script of a batch of recorded calls. Parsing it with `fuse_core::script::parse`
//! reuses every check of the front end and builds exactly the data graph a hand-written script
//! would; and since names and size symbols are numbered by first appearance, two batches of the
//! same shape give the same text, which is the key of the plan cache.

use std::collections::HashMap;
use std::fmt::Write;

use fuse_core::Precision;

/// A recorded argument: a value of the session, or a literal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum PendingArg {
    /// The value with this id.
    Value(u64),
    /// A finite constant.
    Literal(f64),
}

/// A recorded call not yet run.
#[derive(Debug, Clone)]
pub(super) struct PendingCall {
    /// The library function, without prefix (`gemv`).
    pub function: String,
    /// Arguments in signature order.
    pub args: Vec<PendingArg>,
    /// The value it defines.
    pub result: u64,
}

/// A batch as a script, and how its names map to session values.
#[derive(Debug)]
pub(super) struct Canonical {
    /// The script text, sizes included.
    pub text: String,
    /// Inputs: session value and script name, in declaration order.
    pub inputs: Vec<(u64, String)>,
    /// Outputs: session value and script name.
    pub outputs: Vec<(u64, String)>,
}

/// Builds the script running `calls` (in order) that returns the values `outputs`; `dims` gives
/// the extents of each value the calls read but do not compute (the script's inputs). Written
/// straight into the text (a session renders one on every flush, to look its plan up).
pub(super) fn script(
    calls: &[PendingCall],
    outputs: &[u64],
    precision: Precision,
    dims: impl Fn(u64) -> Vec<usize>,
) -> Canonical {
    let mut names = Names::default();
    let mut call_lines = String::new();
    for call in calls {
        // Arguments are numbered before the result they define.
        let args: Vec<Arg> = call
            .args
            .iter()
            .map(|arg| match *arg {
                PendingArg::Literal(v) => Arg::Literal(v),
                PendingArg::Value(id) => Arg::Name(names.number(id, true)),
            })
            .collect();
        let result = names.number(call.result, false);
        let _ = write!(call_lines, "  - v{result} = {}{}(", precision.prefix(), call.function);
        for (k, arg) in args.iter().enumerate() {
            let comma = if k == 0 { "" } else { ", " };
            let _ = match arg {
                Arg::Literal(v) => write!(call_lines, "{comma}{v:?}"),
                Arg::Name(n) => write!(call_lines, "{comma}v{n}"),
            };
        }
        call_lines.push_str(")\n");
    }
    let name = |k: usize| format!("v{k}");
    let inputs: Vec<(u64, String)> = names.inputs.iter().map(|&(id, k)| (id, name(k))).collect();
    let outputs: Vec<(u64, String)> = outputs
        .iter()
        .filter_map(|&id| names.numbers.get(&id).map(|&k| (id, name(k))))
        .collect();
    let text = render(precision, &inputs, &outputs, &call_lines, dims);
    Canonical { text, inputs, outputs }
}

/// A call's argument in the text.
enum Arg {
    Literal(f64),
    Name(usize),
}

/// Values numbered `v0, v1, …` by first sight; a value first seen as an argument is an input of
/// the batch.
#[derive(Default)]
struct Names {
    numbers: HashMap<u64, usize>,
    /// Inputs: value and number, in order of first sight.
    inputs: Vec<(u64, usize)>,
}

impl Names {
    fn number(&mut self, id: u64, argument: bool) -> usize {
        let next = self.numbers.len();
        let k = *self.numbers.entry(id).or_insert(next);
        if k == next && argument {
            self.inputs.push((id, k));
        }
        k
    }
}

/// The YAML text; one size symbol `n0, n1, …` per distinct extent, by first appearance.
fn render(
    precision: Precision,
    inputs: &[(u64, String)],
    outputs: &[(u64, String)],
    calls: &str,
    dims: impl Fn(u64) -> Vec<usize>,
) -> String {
    let mut extents: Vec<usize> = Vec::new();
    let mut input_lines = String::new();
    for (id, name) in inputs {
        let dims = dims(*id);
        if dims.is_empty() {
            let _ = writeln!(input_lines, "  {name}: scalar");
            continue;
        }
        let _ = write!(input_lines, "  {name}: [");
        for (k, extent) in dims.into_iter().enumerate() {
            let comma = if k == 0 { "" } else { ", " };
            let _ = write!(input_lines, "{comma}n{}", symbol(extent, &mut extents));
        }
        input_lines.push_str("]\n");
    }
    let mut text = format!("name: session\nprecision: {precision}\nsizes: {{");
    for (k, e) in extents.iter().enumerate() {
        let comma = if k == 0 { "" } else { ", " };
        let _ = write!(text, "{comma}n{k}: {e}");
    }
    let _ = write!(text, "}}\ninputs:\n{input_lines}outputs: [");
    for (k, (_, name)) in outputs.iter().enumerate() {
        let comma = if k == 0 { "" } else { ", " };
        let _ = write!(text, "{comma}{name}");
    }
    let _ = write!(text, "]\ncalls:\n{calls}");
    text
}

/// The number of the size symbol of `extent`, adding it on first sight.
fn symbol(extent: usize, extents: &mut Vec<usize>) -> usize {
    extents.iter().position(|&e| e == extent).unwrap_or_else(|| {
        extents.push(extent);
        extents.len() - 1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bicgk_batch_is_numbered_by_first_appearance() {
        let calls = [
            PendingCall {
                function: "gemv".into(),
                args: vec![PendingArg::Value(7), PendingArg::Value(3)],
                result: 9,
            },
            PendingCall {
                function: "axpy".into(),
                args: vec![PendingArg::Literal(-1.0), PendingArg::Value(9), PendingArg::Value(4)],
                result: 10,
            },
        ];
        let dims = |id| match id {
            7 => vec![5, 3],
            3 => vec![3],
            _ => vec![5],
        };
        let c = script(&calls, &[10], Precision::F64, dims);
        let want = "name: session\nprecision: f64\nsizes: {n0: 5, n1: 3}\ninputs:\n  v0: [n0, n1]\n  v1: [n1]\n  \
                    v3: [n0]\noutputs: [v4]\ncalls:\n  - v2 = dgemv(v0, v1)\n  - v4 = daxpy(-1.0, v2, v3)\n";
        assert_eq!(c.text, want);
        assert_eq!(c.inputs, [(7, "v0".into()), (3, "v1".into()), (4, "v3".into())]);
        assert_eq!(c.outputs, [(10, "v4".into())]);
    }
}
