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
/// the extents of each value the calls read but do not compute (the script's inputs).
pub(super) fn script(
    calls: &[PendingCall],
    outputs: &[u64],
    precision: Precision,
    dims: impl Fn(u64) -> Vec<usize>,
) -> Canonical {
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut inputs: Vec<(u64, String)> = Vec::new();
    let mut call_lines = String::new();
    for call in calls {
        let mut args = Vec::new();
        for arg in &call.args {
            args.push(match *arg {
                PendingArg::Literal(v) => format!("{v:?}"),
                PendingArg::Value(id) => name_of(id, &mut names, Some(&mut inputs)),
            });
        }
        let result = name_of(call.result, &mut names, None);
        let callee = format!("{}{}", precision.prefix(), call.function);
        let _ = writeln!(call_lines, "  - {result} = {callee}({})", args.join(", "));
    }
    let outputs: Vec<(u64, String)> = outputs
        .iter()
        .filter_map(|&id| names.get(&id).map(|n| (id, n.clone())))
        .collect();
    let text = render(precision, &inputs, &outputs, &call_lines, dims);
    Canonical { text, inputs, outputs }
}

/// The name of value `id`, numbering it `v0, v1, …` on first sight; a value first seen as an
/// argument is an input of the batch.
fn name_of(id: u64, names: &mut HashMap<u64, String>, inputs: Option<&mut Vec<(u64, String)>>) -> String {
    if let Some(name) = names.get(&id) {
        return name.clone();
    }
    let name = format!("v{}", names.len());
    names.insert(id, name.clone());
    if let Some(inputs) = inputs {
        inputs.push((id, name.clone()));
    }
    name
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
        let symbols: Vec<String> = dims(*id).into_iter().map(|e| symbol(e, &mut extents)).collect();
        let shape = if symbols.is_empty() {
            "scalar".to_string()
        } else {
            format!("[{}]", symbols.join(", "))
        };
        let _ = writeln!(input_lines, "  {name}: {shape}");
    }
    let sizes: Vec<String> = extents.iter().enumerate().map(|(k, e)| format!("n{k}: {e}")).collect();
    let outputs: Vec<&str> = outputs.iter().map(|(_, n)| n.as_str()).collect();
    format!(
        "name: session\nprecision: {precision}\nsizes: {{{}}}\ninputs:\n{input_lines}outputs: [{}]\ncalls:\n{calls}",
        sizes.join(", "),
        outputs.join(", ")
    )
}

/// The size symbol of `extent`, adding it on first sight.
fn symbol(extent: usize, extents: &mut Vec<usize>) -> String {
    let k = extents.iter().position(|&e| e == extent).unwrap_or_else(|| {
        extents.push(extent);
        extents.len() - 1
    });
    format!("n{k}")
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
