//! Random scripts for property tests: random DAGs of library calls whose shapes check, for
//! this crate's tests and (with the `testing` feature) other crates'.
//!
//! A script draws from matrices `A`, `B` (m×n), `S` (n×n, for functions of a square matrix),
//! vectors `x`, `u` (n) and `y`, `v` (m), scalars `alpha`, `beta`, and the results of earlier calls (scalars from reductions included, so
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
        ("S".into(), square()),
    ];
    let inputs = pool.len();
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
    let outputs: Vec<&str> = (inputs..pool.len())
        .filter(|&i| !read[i])
        .map(|i| pool[i].0.as_str())
        .collect();
    format!(
        "name: random{seed}\nsizes: {{m: {m}, n: {n}}}\ninputs: {{A: [m, n], B: [m, n], x: [n], u: [n], y: [m], v: [m], alpha: scalar, beta: scalar, S: [n, n]}}\noutputs: [{}]\ncalls:\n{}\n",
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

fn square() -> Shape {
    Shape::Matrix("n".into(), "n".into())
}

fn vector(d: &str) -> Shape {
    Shape::Vector(d.into())
}

/// A function's shape in script symbols: matrices are m×n (n×n where square), so its `m`/`n`
/// follow; a BLAS-1 function's single length is `n`, or `m` when `flip`.
fn script_shape(shape: &Shape, flip: bool) -> Shape {
    match shape {
        Shape::Scalar => Shape::Scalar,
        Shape::Matrix(r, c) if r == c => square(),
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

/// The YAML text of a random f64 script made to hit the rewrite rules ([`crate::rewrite`]):
/// walks, maps of their results, accumulations onto them, scalars and literals as
/// coefficients; m = 37, n = 53.
pub fn rewritable_script(seed: u64, calls: usize) -> String {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut m_vectors = vec!["c".to_string(), "t".into(), "z".into()];
    let mut n_vectors = vec!["x".to_string(), "v".into(), "y".into()];
    let scalars = ["a", "b", "2", "-0.5", "1"];
    let mut lines = Vec::new();
    for k in 0..calls {
        let r = format!("r{k}");
        let mut s = || scalars[rng.random_range(0..scalars.len())].to_string();
        let (s1, s2) = (s(), s());
        let row = rng.random_bool(0.5);
        let (same, other) = if row {
            (&mut m_vectors, &n_vectors)
        } else {
            (&mut n_vectors, &m_vectors)
        };
        let late = |v: &Vec<String>, rng: &mut rand_chacha::ChaCha8Rng| {
            v[rng.random_range(v.len().saturating_sub(2)..v.len())].clone()
        };
        let matrix = ["A", "B", "U"][rng.random_range(0..3)];
        let walk = if row { "dgemv" } else { "dgemtv" };
        let (prev, arg) = (late(same, &mut rng), late(other, &mut rng));
        let line = match rng.random_range(0..5) {
            0 => format!("{r} = {walk}({matrix}, {arg})"),
            1 => format!("{r} = {walk}({s1}, {matrix}, {arg}, {s2}, {prev})"),
            2 => format!("{r} = daxpy({s1}, {prev}, {})", same[rng.random_range(0..same.len())]),
            3 => format!("{r} = dscal({s1}, {prev})"),
            _ => format!("{r} = daxpby({s1}, {prev}, {s2}, {})", same[0]),
        };
        lines.push(format!("  - {line}\n"));
        same.push(r);
    }
    let outputs: Vec<String> = (0..calls)
        .filter(|_| rng.random_bool(0.4))
        .map(|k| format!("r{k}"))
        .collect();
    let outputs = if outputs.is_empty() {
        format!("r{}", calls - 1)
    } else {
        outputs.join(", ")
    };
    format!(
        "precision: f64\nsizes: {{m: 37, n: 53}}\n\
         inputs: {{A: [m, n], B: [m, n], U: [m, n], x: [n], v: [n], y: [n], c: [m], t: [m], z: [m], a: scalar, b: scalar}}\n\
         outputs: [{outputs}]\ncalls:\n{}",
        lines.concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_scripts_parse_and_are_reproducible() {
        let library = Library::builtin().unwrap();
        for seed in 0..50 {
            let calls = 1 + seed as usize % 9;
            random_program(&library, seed, calls).unwrap();
            assert_eq!(random_script(&library, seed, calls).matches("\n  - ").count(), calls);
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

/// A vector whose Euclidean norm a plain `sqrt(Σ x²)` in its precision gets wrong: squares that
/// overflow or underflow although the norm is representable.
#[derive(Debug, Clone)]
pub struct HostileNorm {
    /// What it holds, for messages.
    pub what: String,
    /// The elements, each representable in the precision asked for.
    pub x: Vec<f64>,
}

/// The lengths of the [`hostile_norms`]: a lone element, a short tail, and around whole blocks.
pub const NORM_LENGTHS: [usize; 4] = [1, 3, 1023, 4097];

/// Vectors at the edges of `precision`'s range for norms: the two f32 examples; small
/// integers (±1 … ±13) times the power of two nearest 1e±20 and 1e±30 (and 1e±300 in f64), so
/// that the sums of the scaled squares are exact, at each of [`NORM_LENGTHS`]; big, medium and
/// small magnitudes mixed; magnitudes just either side of where squares underflow
/// (`sqrt(MIN_POSITIVE)`) and overflow (`sqrt(MAX)`); the largest numbers, subnormal ones,
/// zeros, an infinity and a NaN.
pub fn hostile_norms(precision: Precision) -> Vec<HostileNorm> {
    let case = |what: String, x: Vec<f64>| HostileNorm { what, x };
    let (max, min_positive, decades) = match precision {
        Precision::F32 => (f32::MAX as f64, f32::MIN_POSITIVE as f64, vec![20, 30]),
        Precision::F64 => (f64::MAX, f64::MIN_POSITIVE, vec![20, 30, 300]),
    };
    let round = |v: f64| match precision {
        Precision::F32 => v as f32 as f64,
        Precision::F64 => v,
    };
    let integers = |n: usize| (0..n).map(|k| (1 + (k * 7) % 13) as f64 * if k % 2 == 0 { 1.0 } else { -1.0 });
    let near = |v: f64| 2f64.powi(v.log2().round() as i32);
    let mut cases = vec![
        case(
            "[1e20, 1e20, 3e-30, -1e20]".into(),
            [1e20, 1e20, 3e-30, -1e20].map(round).to_vec(),
        ),
        case("[1e-25; 4]".into(), vec![round(1e-25); 4]),
    ];
    for d in decades {
        for scale in [near(10f64.powi(d)), near(10f64.powi(-d))] {
            for n in NORM_LENGTHS {
                cases.push(case(
                    format!("{scale:e}·[±1..13; {n}]"),
                    integers(n).map(|m| m * scale).collect(),
                ));
            }
        }
    }
    let (low, high) = (near(min_positive.sqrt()), near(max.sqrt()));
    let mixed = |what: &str, magnitudes: [f64; 3]| {
        let x = integers(4097).enumerate().map(|(k, m)| m * magnitudes[k % 3]).collect();
        case(format!("{what} mixed, 4097"), x)
    };
    cases.extend([
        mixed("big, medium and small", [high * 64.0, 1.0, low / 64.0]),
        mixed("just under and over the underflow edge", [low / 16.0, low * 16.0, low]),
        mixed(
            "just under and over the overflow edge",
            [high / 16.0, high * 16.0, high],
        ),
        case("[MAX/2, MAX/4]".into(), vec![max / 2.0, max / 4.0]),
        case("[MIN_POSITIVE/8; 4] (subnormal)".into(), vec![min_positive / 8.0; 4]),
        case("[0; 5]".into(), vec![0.0; 5]),
        case("[1, inf, 1e-30]".into(), vec![1.0, f64::INFINITY, round(1e-30)]),
        case("[1e30, NaN, 1e-30]".into(), vec![round(1e30), f64::NAN, round(1e-30)]),
    ]);
    cases
}

/// Whether `got` is within `ulps` units in the last place of `want`, both rounded to
/// `precision`; NaN agrees with NaN and an infinity with itself.
pub fn within_ulps(got: f64, want: f64, precision: Precision, ulps: u64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    // Finite numbers of one sign are ordered as their bit patterns.
    let bits = |v: f64| match precision {
        Precision::F32 => (v as f32).abs().to_bits() as u64,
        Precision::F64 => v.abs().to_bits(),
    };
    got.signum() == want.signum() && bits(got).abs_diff(bits(want)) <= ulps
}

/// The script of `r = nrm2(x)` in `precision`, or with `fused`, two norms and a map in one
/// kernel: `z = scal(0.5, x); r = nrm2(z); t = nrm2(x)`. Bind `n` to the vector's length.
pub fn norm_program(precision: Precision, fused: bool) -> Program {
    let p = precision.prefix();
    let calls = match fused {
        false => format!("  - r = {p}nrm2(x)\n"),
        true => format!("  - z = {p}scal(0.5, x)\n  - r = {p}nrm2(z)\n  - t = {p}nrm2(x)\n"),
    };
    let outputs = if fused { "[r, t]" } else { "[r]" };
    let text = format!(
        "name: norm\nprecision: {precision}\nsizes: {{n: 1}}\ninputs: {{x: [n]}}\noutputs: {outputs}\ncalls:\n{calls}"
    );
    let library = Library::builtin().expect("the built-in library loads");
    script::parse("norm.yaml", &text, &library).unwrap_or_else(|e| panic!("{e}"))
}

/// Units in the last place a backend's norm may be from the reference's on the
/// [`hostile_norms`]: a few roundings (the last scaled squares, the root, the combination of
/// two sums), since the sums of the scaled squares of small integers are exact.
pub const NORM_ULPS: u64 = 2;

/// Runs [`norm_program`] through `run` (a backend: program, sizes, inputs → outputs) on every
/// hostile vector, and on random vectors of every length of [`NORM_LENGTHS`], and checks each
/// output against the reference: within [`NORM_ULPS`] on hostile vectors, a relative error below
/// 1e-6 (f32) or 1e-14 (f64) on random ones. Panics with the case on a difference.
pub fn check_norms<E: std::fmt::Display>(
    precision: Precision,
    fused: bool,
    mut run: impl FnMut(&Program, &crate::Sizes, &crate::Bindings) -> Result<crate::Bindings, E>,
) {
    let program = norm_program(precision, fused);
    let sized = |n: usize| program.bind_sizes(&[("n".to_string(), n)]).expect("a positive length");
    let mut check = |what: &str, inputs: crate::Bindings, hostile: bool| {
        let sizes = sized(inputs["x"].dims[0]);
        let want = crate::reference::evaluate(&program, &sizes, &inputs).expect("inputs fit");
        let got = run(&program, &sizes, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
        for (name, w) in &want {
            let (g, w) = (got[name].to_f64()[0], w.to_f64()[0]);
            let ok = match hostile {
                true => within_ulps(g, w, precision, NORM_ULPS),
                false => ((g - w) / w).abs() < if precision == Precision::F32 { 1e-6 } else { 1e-14 },
            };
            assert!(ok, "{precision} {what}: {name} = {g:e}, reference {w:e}");
        }
    };
    for case in hostile_norms(precision) {
        let x = crate::HostArray::f64(vec![case.x.len()], case.x).to_precision(precision);
        check(&case.what, crate::Bindings::from([("x".to_string(), x)]), true);
    }
    for (seed, n) in NORM_LENGTHS.into_iter().enumerate() {
        let mut inputs = crate::Bindings::new();
        crate::data::fill_random_inputs(&program, &sized(n), seed as u64, &mut inputs);
        check(&format!("random, {n}"), inputs, false);
    }
}
