//! Record-time shape checking: a call's arguments unified with its library signature, so a
//! mismatch is reported when the call is made, naming the function, the argument and shapes.

use fuse_core::Form;

use crate::error::{Error, Result};

/// A dimension symbol of the signature bound to an extent by an argument.
struct Binding<'a> {
    symbol: &'a str,
    extent: usize,
    param: &'a str,
    dims: &'a [usize],
}

/// The extents of the result of `callee` (of `form`) applied to arguments of extents `args`
/// (a literal is a scalar, `[]`), or the first argument that does not fit.
pub(super) fn result_dims(callee: &str, form: &Form, args: &[&[usize]]) -> Result<Vec<usize>> {
    let mut bound: Vec<Binding> = Vec::new();
    for (param, &got) in form.signature.params.iter().zip(args) {
        let symbols = param.shape.dims();
        let mismatch = |bound: &[Binding], why: String| Error::Shape {
            function: callee.to_string(),
            argument: param.name.clone(),
            got: shape_text(got),
            expected: format!("{}{why}", expected_text(&symbols, bound)),
        };
        if symbols.len() != got.len() {
            return Err(mismatch(&bound, format!(" (a {})", param.shape.kind_name())));
        }
        for (&symbol, &extent) in symbols.iter().zip(got) {
            match bound.iter().find(|b| b.symbol == symbol) {
                Some(b) if b.extent != extent => {
                    let why = format!(" ({symbol} = {} from `{}` {})", b.extent, b.param, shape_text(b.dims));
                    return Err(mismatch(&bound, why));
                }
                Some(_) => {}
                None => bound.push(Binding {
                    symbol,
                    extent,
                    param: &param.name,
                    dims: got,
                }),
            }
        }
    }
    // A loaded library only names result dimensions its parameters bind.
    let result = form.signature.result.dims();
    Ok(result
        .iter()
        .map(|&s| bound.iter().find(|b| b.symbol == s).map_or(1, |b| b.extent))
        .collect())
}

/// `[2, 3]`, `[5]` or `scalar`.
pub(super) fn shape_text(dims: &[usize]) -> String {
    if dims.is_empty() {
        return "scalar".to_string();
    }
    let parts: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// The shape a parameter needs, with the extents known so far: `[3]`, `[m, 3]` or `scalar`.
fn expected_text(symbols: &[&str], bound: &[Binding]) -> String {
    if symbols.is_empty() {
        return "scalar".to_string();
    }
    let parts: Vec<String> = symbols
        .iter()
        .map(|&s| match bound.iter().find(|b| b.symbol == s) {
            Some(b) => b.extent.to_string(),
            None => s.to_string(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}
