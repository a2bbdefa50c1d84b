//! Random scripts for property tests: random DAGs of library calls whose shapes check, for
//! this crate's tests and (with the `testing` feature) other crates'.
//!
//! A script draws from matrices `A`, `B` (m×n), vectors `x`, `u` (n) and `y`, `v` (m), scalars
//! `alpha`, `beta`, and the results of earlier calls (scalars from reductions included, so
//! global barriers occur). Every result nobody reads is an output.

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::library::{Form, Library};
use crate::program::Program;
use crate::script;
use crate::shape::{Precision, Shape};

/// The YAML text of a random f32 script of `calls` calls, determined by `seed`.
pub fn random_script(library: &Library, seed: u64, calls: usize) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let m = rng.random_range(1..=5000);
    let n = rng.random_range(1..=5000);
    let mut pool: Vec<(String, Shape)> = vec![
        ("A".into(), matrix()),
        ("B".into(), matrix()),
        ("x".into(), vector("n")),
        ("u".into(), vector("n")),
        ("y".into(), vector("m")),
        ("v".into(), vector("m")),
        ("alpha".into(), Shape::Scalar),
        ("beta".into(), Shape::Scalar),
    ];
    let forms: Vec<(&str, &Form)> = library
        .functions()
        .filter(|f| f.precisions.contains(&Precision::F32))
        .flat_map(|f| f.forms.iter().map(move |form| (f.name.as_str(), &**form)))
        .collect();
    let mut lines = Vec::new();
    let mut read = vec![false; pool.len()];
    for k in 0..calls {
        let Some(&(name, form)) = forms.choose(&mut rng) else {
            break;
        };
        let flip = rng.random_bool(0.5);
        let args: Vec<String> = form
            .signature
            .params
            .iter()
            .map(|p| pick(&mut rng, &pool, &mut read, &script_shape(&p.shape, flip)))
            .collect();
        let result = format!("t{k}");
        lines.push(format!("  - {result} = s{name}({})", args.join(", ")));
        pool.push((result, script_shape(&form.signature.result, flip)));
        read.push(false);
    }
    let outputs: Vec<&str> = (8..pool.len())
        .filter(|&i| !read[i])
        .map(|i| pool[i].0.as_str())
        .collect();
    format!(
        "name: random{seed}\nsizes: {{m: {m}, n: {n}}}\ninputs: {{A: [m, n], B: [m, n], x: [n], u: [n], y: [m], v: [m], alpha: scalar, beta: scalar}}\noutputs: [{}]\ncalls:\n{}\n",
        outputs.join(", "),
        lines.join("\n")
    )
}

/// A random script of `calls` calls, parsed and checked against `library`.
pub fn random_program(library: &Library, seed: u64, calls: usize) -> crate::Result<Program> {
    script::parse(
        &format!("random{seed}.yaml"),
        &random_script(library, seed, calls),
        library,
    )
}

/// A proptest strategy of random programs of 1 to `max_calls` calls over the built-in library.
pub fn programs(max_calls: usize) -> impl proptest::strategy::Strategy<Value = Program> {
    use proptest::strategy::Strategy;
    (proptest::prelude::any::<u64>(), 1..=max_calls.max(1)).prop_filter_map("random script", |(seed, calls)| {
        let library = Library::builtin().ok()?;
        random_program(&library, seed, calls).ok()
    })
}

fn matrix() -> Shape {
    Shape::Matrix("m".into(), "n".into())
}

fn vector(d: &str) -> Shape {
    Shape::Vector(d.into())
}

/// A function's shape in script symbols: matrices are m×n, so its `m`/`n` follow; a BLAS-1
/// function's single length is `n`, or `m` when `flip`.
fn script_shape(shape: &Shape, flip: bool) -> Shape {
    match shape {
        Shape::Scalar => Shape::Scalar,
        Shape::Matrix(..) => matrix(),
        Shape::Vector(d) if d == "m" || d == "n" => vector(d),
        Shape::Vector(_) => vector(if flip { "m" } else { "n" }),
    }
}

/// A value of `shape` from the pool (later values more likely, to make chains), or a literal
/// for a scalar now and then.
fn pick(rng: &mut ChaCha8Rng, pool: &[(String, Shape)], read: &mut [bool], shape: &Shape) -> String {
    if *shape == Shape::Scalar && rng.random_bool(0.3) {
        return "2.0".into();
    }
    let fits: Vec<usize> = (0..pool.len()).filter(|&i| pool[i].1 == *shape).collect();
    let late = fits.len().saturating_sub(3);
    let from = if rng.random_bool(0.6) { late } else { 0 };
    let i = fits[rng.random_range(from..fits.len())];
    read[i] = true;
    pool[i].0.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_scripts_parse_and_are_reproducible() {
        let library = Library::builtin().unwrap();
        for seed in 0..50 {
            let p = random_program(&library, seed, 1 + seed as usize % 9).unwrap();
            assert_eq!(p.calls.len(), 1 + seed as usize % 9);
            assert_eq!(random_script(&library, seed, 5), random_script(&library, seed, 5));
        }
    }
}

/// The 11 sequences of the paper, as named in `scripts/`.
pub const SEQUENCES: [&str; 11] = [
    "axpydot", "atax", "bicgk", "sgemv", "sgemvt", "sscal", "gemver", "gesummv", "madd", "vadd", "waxpby",
];

/// The shipped script `scripts/<name>.yaml` in `precision`: its f64 twin has `precision: f64`
/// and every call `d`-prefixed.
pub fn sequence(name: &str, precision: Precision) -> Program {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(format!("{name}.yaml"));
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if precision == Precision::F64 {
        text = text.replace("precision: f32", "precision: f64").replace("= s", "= d");
    }
    let library = Library::builtin().expect("the built-in library loads");
    script::parse(&format!("{name}.yaml"), &text, &library).unwrap_or_else(|e| panic!("{e}"))
}

/// `program`'s sizes with `m` set to `m` and every other symbol to `n` (vector-only scripts
/// have only `n`).
pub fn sizes_mn(program: &Program, m: usize, n: usize) -> crate::Sizes {
    let overrides: Vec<(String, usize)> = program
        .sizes
        .iter()
        .map(|(s, _)| (s.to_string(), if s == "m" { m } else { n }))
        .collect();
    program.bind_sizes(&overrides).expect("test sizes are sane")
}
