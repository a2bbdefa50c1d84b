//! The canonical script of a batch of recorded calls. Parsing it with `fuse_core::script::parse`
//! reuses every check of the front end and builds exactly the data graph a hand-written script
//! would; and since names and size symbols are numbered by first appearance, two batches of the
//! same shape give the same text — and the same compact key, by which the plan cache finds it.

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
pub(super) struct Canonical<'c> {
    /// What the plan cache knows the batch by: the calls with their values numbered, the
    /// literals' bits, the inputs' extents and the outputs — equal for two batches exactly when
    /// their texts are (every argument tagged, every list counted, so no two batches' bytes
    /// run together alike). Built without formatting anything, as a session does on every
    /// flush; the text is rendered when a plan is compiled.
    pub key: Vec<u8>,
    /// Inputs: session value and script name, in declaration order.
    pub inputs: Vec<(u64, String)>,
    /// Outputs: session value and script name.
    pub outputs: Vec<(u64, String)>,
    calls: &'c [PendingCall],
    /// The extents of each input, in declaration order.
    pub dims: Vec<Vec<usize>>,
    pub precision: Precision,
}

/// The batch running `calls` (in order) that returns the values `outputs`; `dims` gives the
/// extents of each value the calls read but do not compute (the script's inputs).
pub(super) fn script<'c>(
    calls: &'c [PendingCall],
    outputs: &[u64],
    precision: Precision,
    dims: impl Fn(u64) -> Vec<usize>,
) -> Canonical<'c> {
    let mut names = Names::default();
    let mut key = vec![precision.prefix() as u8];
    for call in calls {
        key.extend_from_slice(call.function.as_bytes());
        key.push(b'(');
        for arg in &call.args {
            match *arg {
                PendingArg::Literal(v) => {
                    key.push(b'=');
                    key.extend_from_slice(&v.to_bits().to_le_bytes());
                }
                PendingArg::Value(id) => {
                    key.push(b'v');
                    push_number(&mut key, names.number(id, true));
                }
            }
        }
        key.push(b')');
        push_number(&mut key, names.number(call.result, false));
    }
    let dims: Vec<Vec<usize>> = names.inputs.iter().map(|&(id, _)| dims(id)).collect();
    for extents in &dims {
        push_number(&mut key, extents.len());
        extents.iter().for_each(|&e| push_number(&mut key, e));
    }
    let numbered: Vec<(u64, usize)> = outputs
        .iter()
        .filter_map(|&id| names.numbers.get(&id).map(|&k| (id, k)))
        .collect();
    push_number(&mut key, numbered.len());
    numbered.iter().for_each(|&(_, k)| push_number(&mut key, k));
    let name = |&(id, k): &(u64, usize)| (id, format!("v{k}"));
    Canonical {
        key,
        inputs: names.inputs.iter().map(name).collect(),
        outputs: numbered.iter().map(name).collect(),
        calls,
        dims,
        precision,
    }
}

fn push_number(key: &mut Vec<u8>, n: usize) {
    key.extend_from_slice(&(n as u64).to_le_bytes());
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

impl Canonical<'_> {
    /// The script's YAML text: value names `v0, v1, …` and one size symbol `n0, n1, …` per
    /// distinct extent, each by first appearance.
    pub(super) fn text(&self) -> String {
        let mut call_lines = String::new();
        for call in self.call_lines() {
            let _ = writeln!(call_lines, "  - {call}");
        }
        let mut extents: Vec<usize> = Vec::new();
        let mut input_lines = String::new();
        for ((_, name), dims) in self.inputs.iter().zip(&self.dims) {
            let symbols: Vec<String> = (dims.iter())
                .map(|&e| format!("n{}", symbol(e, &mut extents)))
                .collect();
            let _ = match symbols.is_empty() {
                true => writeln!(input_lines, "  {name}: scalar"),
                false => writeln!(input_lines, "  {name}: [{}]", symbols.join(", ")),
            };
        }
        let sizes: Vec<String> = extents.iter().enumerate().map(|(k, e)| format!("n{k}: {e}")).collect();
        let outputs: Vec<&str> = self.outputs.iter().map(|(_, n)| n.as_str()).collect();
        format!(
            "name: session\nprecision: {}\nsizes: {{{}}}\ninputs:\n{input_lines}outputs: [{}]\ncalls:\n{call_lines}",
            self.precision,
            sizes.join(", "),
            outputs.join(", ")
        )
    }

    /// Its calls as the script writes them: `v2 = dgemv(v0, v1)`.
    pub(super) fn call_lines(&self) -> Vec<String> {
        let mut names = Names::default();
        let prefix = self.precision.prefix();
        (self.calls.iter())
            .map(|call| {
                let args: Vec<String> = (call.args.iter())
                    .map(|arg| match *arg {
                        PendingArg::Literal(v) => format!("{v:?}"),
                        PendingArg::Value(id) => format!("v{}", names.number(id, true)),
                    })
                    .collect();
                let result = names.number(call.result, false);
                format!("v{result} = {prefix}{}({})", call.function, args.join(", "))
            })
            .collect()
    }
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
        let text = c.text();
        let want = "name: session\nprecision: f64\nsizes: {n0: 5, n1: 3}\ninputs:\n  v0: [n0, n1]\n  v1: [n1]\n  \
                    v3: [n0]\noutputs: [v4]\ncalls:\n  - v2 = dgemv(v0, v1)\n  - v4 = daxpy(-1.0, v2, v3)\n";
        assert_eq!(text, want);
        assert_eq!(c.inputs, [(7, "v0".into()), (3, "v1".into()), (4, "v3".into())]);
        assert_eq!(c.outputs, [(10, "v4".into())]);
    }

    /// Keys are equal exactly when texts are: for the same calls on other values, and not for
    /// another literal, other extents or another output.
    #[test]
    fn keys_match_where_texts_match() {
        let batch = |ids: [u64; 3], literal: f64| {
            [
                PendingCall {
                    function: "axpy".into(),
                    args: vec![
                        PendingArg::Literal(literal),
                        PendingArg::Value(ids[0]),
                        PendingArg::Value(ids[1]),
                    ],
                    result: ids[2],
                },
                PendingCall {
                    function: "dot".into(),
                    args: vec![PendingArg::Value(ids[2]), PendingArg::Value(ids[0])],
                    result: ids[2] + 1,
                },
            ]
        };
        let (a, b, zero) = (batch([1, 2, 3], 0.5), batch([20, 10, 30], 0.5), batch([1, 2, 3], -0.0));
        let key = |calls: &[PendingCall], out: u64, n: usize| {
            let c = script(calls, &[out], Precision::F32, |_| vec![n]);
            (c.key.clone(), c.text())
        };
        let base = key(&a, 4, 7);
        let others = [key(&b, 31, 7), key(&zero, 4, 7), key(&a, 4, 8), key(&a, 3, 7)];
        assert_eq!(others[0], base, "the same calls on other values");
        for (k, (other_key, other_text)) in others[1..].iter().enumerate() {
            assert_ne!(*other_key, base.0, "case {k}");
            assert_ne!(*other_text, base.1, "case {k}");
        }
    }
}
