//! Comparing a backend's outputs with the f64 reference, the way every test of fuse does:
//! normwise relative error per output, below 1e-4 in f32 and 1e-12 in f64. NaN never passes,
//! so an element a kernel forgot to write (the buffers are poisoned with NaN) is caught.

use fuse_core::data::relative_error;
use fuse_core::{Bindings, Precision, Program, Sizes};

/// The largest normwise relative error accepted in `precision`.
pub fn tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::F32 => 1e-4,
        Precision::F64 => 1e-12,
    }
}

/// An output off the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The output.
    pub output: String,
    /// Its normwise relative error (infinite when it is missing or has the wrong length).
    pub error: f64,
    /// The tolerance it exceeds.
    pub tolerance: f64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "output `{}` is off the reference by {:e} (tolerance {:e})",
            self.output, self.error, self.tolerance
        )
    }
}

/// The worst output of `got` beyond tolerance against `want`, if any.
pub fn compare(program: &Program, got: &Bindings, want: &Bindings) -> Option<Mismatch> {
    let tolerance = tolerance(program.precision);
    want.iter()
        .map(|(name, w)| {
            let error = match got.get(name) {
                Some(g) if g.len() == w.len() => relative_error(&g.to_f64(), &w.to_f64()),
                _ => f64::INFINITY,
            };
            Mismatch {
                output: name.clone(),
                error: if error.is_nan() { f64::INFINITY } else { error },
                tolerance,
            }
        })
        // NaN compares as nothing: only a number below the tolerance passes.
        .filter(|m| m.error.partial_cmp(&m.tolerance) != Some(std::cmp::Ordering::Less))
        .max_by(|a, b| a.error.total_cmp(&b.error))
}

/// `sizes` with every extent capped at `cap`: small enough for the reference, odd-sized
/// remainders kept where the cap is odd.
pub fn capped(program: &Program, sizes: &Sizes, cap: usize) -> Sizes {
    let capped: Vec<(String, usize)> = sizes.iter().map(|(k, v)| (k.to_string(), v.min(cap))).collect();
    program.bind_sizes(&capped).unwrap_or_else(|_| sizes.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_core::{HostArray, Library};

    fn program() -> Program {
        let library = Library::builtin().unwrap();
        let text = "sizes: {n: 2}\ninputs: {x: [n]}\noutputs: [y]\ncalls:\n  - y = sscal(2.0, x)\n";
        fuse_core::script::parse("t.yaml", text, &library).unwrap()
    }

    fn one(name: &str, data: Vec<f32>) -> Bindings {
        [(name.to_string(), HostArray::f32(vec![data.len()], data))].into()
    }

    #[test]
    fn nan_and_missing_outputs_never_pass() {
        let p = program();
        let want = one("y", vec![1.0, 2.0]);
        assert!(compare(&p, &one("y", vec![1.0, 2.0]), &want).is_none());
        assert!(compare(&p, &one("y", vec![1.0, f32::NAN]), &want).is_some());
        let missing = compare(&p, &Bindings::new(), &want).unwrap();
        assert_eq!(missing.error, f64::INFINITY);
        assert!(missing.to_string().contains("output `y`"));
    }

    #[test]
    fn sizes_are_capped_for_the_reference() {
        let p = program();
        let sizes = p.bind_sizes(&[("n".into(), 100_000)]).unwrap();
        assert_eq!(capped(&p, &sizes, 513).get("n"), Some(513));
    }
}
