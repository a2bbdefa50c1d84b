//! Generated CUDA, run under emulation, against the f64 reference: the explorer's five best
//! plans of every sequence, hand-made unfused plans (both walks, fixed and whole), and random
//! scripts, at awkward sizes, f32 and f64, outputs poisoned with NaN beforehand.

use fuse_codegen::generate::{generate, KernelGroup, Serial, Walk};
use fuse_core::data::{fill_random_inputs, relative_error};
use fuse_core::reference::evaluate;
use fuse_core::testing::{sequence as load, sizes_mn, SEQUENCES as ALL};
use fuse_core::{explore, Bindings, HostArray, Library, Limits, Precision, Program, TimingTable};
use fuse_emulate::EmulatedPlan;

const SIZES: [(usize, usize); 4] = [(67, 45), (1, 300), (300, 1), (257, 513)];

/// The `count` best predicted plans at the script's default sizes.
fn top_plans(program: &Program, count: usize) -> Vec<Vec<KernelGroup>> {
    let sizes = program.bind_sizes(&[]).unwrap();
    let library = Library::builtin().unwrap();
    let table = TimingTable::builtin().unwrap();
    let exploration = explore(program, &sizes, &table, &library, Limits::default()).unwrap();
    let plans: Vec<Vec<KernelGroup>> = exploration
        .plans()
        .take(count)
        .map(|p| p.kernels.iter().map(KernelGroup::from).collect())
        .collect();
    assert!(!plans.is_empty());
    plans
}

/// One kernel per call, with the given walk, serial iterations and strip width (BLAS-2).
fn unfused(p: &Program, walk: Walk, serial: Serial, width: u32) -> Vec<KernelGroup> {
    (0..p.calls.len())
        .map(|c| KernelGroup {
            calls: vec![c],
            block: 128,
            width: if p.calls[c].kind.nesting_level() == 2 { width } else { 1 },
            whole_rows: false,
            serial_iterations: serial,
            walk,
        })
        .collect()
}

/// Hand-made plans covering what the explorer may not pick at the default sizes: both walks,
/// fixed iterations (atomics) and whole walks (reductions stored directly), one-tile strips
/// (scalar loads) and strips of 4, 8 and 16 tiles (vector loads, several per lane); the explorer's
/// best plans bring 32-tile strips.
fn hand_plans(p: &Program) -> Vec<Vec<KernelGroup>> {
    vec![
        unfused(p, Walk::Columns, Serial::Iterations(2), 4),
        unfused(p, Walk::Columns, Serial::Whole, 1),
        unfused(p, Walk::Rows, Serial::Whole, 8),
        unfused(p, Walk::Rows, Serial::Iterations(2), 16),
    ]
}

/// Runs every plan at every `(m, n)` (vector-only scripts use `n`) and compares each output
/// with the reference: normwise relative error below 1e-4 in f32, 1e-12 in f64.
fn check(program: &Program, plans: &[Vec<KernelGroup>], sizes: &[(usize, usize)]) {
    let (name, precision) = (&program.name, program.precision);
    let tolerance = match precision {
        Precision::F32 => 1e-4,
        Precision::F64 => 1e-12,
    };
    for kernels in plans {
        let generated = generate(program, kernels).unwrap_or_else(|e| panic!("{name}: {e}"));
        let plan = EmulatedPlan::compile(generated).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (seed, &(m, n)) in sizes.iter().enumerate() {
            let sizes = sizes_mn(program, m, n);
            let mut inputs = Bindings::new();
            fill_random_inputs(program, &sizes, seed as u64, &mut inputs);
            let want = evaluate(program, &sizes, &inputs).unwrap();
            let got = plan
                .run(program, &sizes, &inputs)
                .unwrap_or_else(|e| panic!("{name} {m}x{n}: {e}"));
            for (output, w) in &want {
                let error = relative_error(&got[output].to_f64(), &w.to_f64());
                assert!(
                    error < tolerance,
                    "{name} {precision} {m}x{n} {output}: error {error:e} ({} kernels)",
                    kernels.len()
                );
            }
        }
    }
}

#[test]
fn best_five_plans_match_the_reference_f32() {
    for name in ALL {
        let program = load(name, Precision::F32);
        let mut plans = top_plans(&program, 5);
        plans.extend(hand_plans(&program));
        check(&program, &plans, &SIZES);
    }
}

#[test]
fn best_five_plans_and_unfused_match_the_reference_f64() {
    for name in ALL {
        let program = load(name, Precision::F64);
        let mut plans = top_plans(&program, 5);
        plans.extend(hand_plans(&program));
        check(&program, &plans, &SIZES);
    }
}

/// Every strip layout — one-tile strips (scalar loads), 8 and 32 tiles across (vector loads),
/// 2 and 8 warps, both walks, fixed and whole — at column counts around the strip and vector
/// widths (odd counts leave rows unaligned for 16-byte loads: the scalar path).
#[test]
fn strip_layouts_match_the_reference_at_odd_column_counts() {
    // Odd counts take every strip's edge body; 2048 and 4100 (a multiple of the vector) the
    // interior body of whole strips, 4100 the edge body of its last; 40 rows are enough for
    // trips of several rows and a remainder.
    let sizes = [(5, 1), (3, 3), (7, 1023), (4, 1025), (3, 4097), (40, 2048), (5, 4100)];
    for (name, precision) in [
        ("bicgk", Precision::F32),
        ("gemver", Precision::F32),
        ("bicgk", Precision::F64),
    ] {
        let program = load(name, precision);
        let mut plans = Vec::new();
        for (width, block) in [(1, 64), (8, 256), (32, 64)] {
            for (walk, serial) in [
                (Walk::Rows, Serial::Iterations(2)),
                (Walk::Rows, Serial::Whole),
                (Walk::Columns, Serial::Iterations(2)),
                (Walk::Columns, Serial::Whole),
            ] {
                let mut plan = unfused(&program, walk, serial, width);
                plan.iter_mut().for_each(|k| k.block = block);
                plans.push(plan);
            }
        }
        check(&program, &plans, &sizes);
    }
}

/// Strips over calls on one triangle whose bands differ — a diagonal one call reads and the
/// other (a unit diagonal's) must not sum — in one kernel, both walks, fixed and whole: the
/// rows (or strips) that skip the diagonal tests are those inside every call's band, not their
/// union's. At n = 128k + 1 the last strip of 128 columns holds one column, whose diagonal row
/// was taken as inside, and `strmtv_upper_unit` summed it (found by random scripts).
#[test]
fn strips_over_calls_of_different_bands_test_each_calls_diagonals() {
    let library = Library::builtin().unwrap();
    let pairs = [
        ("t = {p}trmtv_upper(A, x)", "y = {p}trmtv_upper_unit(A, u)"),
        ("t = {p}trmv_upper(A, x)", "y = {p}trmv_upper_unit(A, u)"),
        ("t = {p}trmtv_lower(A, x)", "y = {p}trmtv_lower_unit(A, u)"),
        ("t = {p}trmv_lower_unit(A, x)", "y = {p}trmv_lower(A, u)"),
    ];
    for (precision, p) in [(Precision::F32, "s"), (Precision::F64, "d")] {
        for (first, second) in pairs {
            let text = format!(
                "name: pair\nprecision: {precision}\nsizes: {{n: 64}}\ninputs: {{A: [n, n], x: [n], u: [n]}}\noutputs: [t, y]\ncalls:\n  - {}\n  - {}\n",
                first.replace("{p}", p),
                second.replace("{p}", p)
            );
            let program = fuse_core::script::parse("pair.yaml", &text, &library).unwrap();
            let mut plans = Vec::new();
            for walk in [Walk::Rows, Walk::Columns] {
                for serial in [Serial::Whole, Serial::Iterations(2)] {
                    plans.push(vec![KernelGroup {
                        calls: vec![0, 1],
                        block: 256,
                        width: 4,
                        whole_rows: false,
                        serial_iterations: serial,
                        walk,
                    }]);
                }
            }
            check(
                &program,
                &plans,
                &[(1, 1), (33, 33), (129, 129), (257, 257), (130, 130)],
            );
        }
    }
}

/// Whole-row blocks (each row spread over the block, the next row loading while this one is
/// summed): ATAX and BiCGK as one kernel — ATAX's `Aᵀ·t` reads each row sum while its row is
/// still in registers — and GEMVER call by call, one block down, several, or blocks of a few
/// rows, at odd column counts; and a clear error, not a wrong answer, where a row is wider
/// than the block holds.
#[test]
fn whole_row_blocks_match_the_reference() {
    // A row of exactly the block's 8192 columns takes the interior body; the rest the edge one.
    let sizes = [(5, 1), (3, 3), (7, 1023), (40, 1025), (3, 4097), (3, 8192)];
    for (name, precision, threads) in [
        ("atax", Precision::F32, 256),
        ("bicgk", Precision::F32, 256),
        ("gemver", Precision::F32, 256),
        ("gesummv", Precision::F32, 256),
        ("atax", Precision::F64, 512),
    ] {
        let program = load(name, precision);
        // GESUMMV's two row sums go through one exchange: its second call reads the first's
        // sum only in the formula that finishes its own.
        let fused = name != "gemver";
        // 8 vector accesses of 16 bytes per thread: 8192 columns.
        let width = threads * 8 * (16 / precision.bytes() as u32) / 32;
        let mut plans = Vec::new();
        // A tile of rows per block, a block per 4 or 5 rows (the last block's rows, and the two-row
        // trips of the row loop, odd), and one block for all.
        for serial in [Serial::Iterations(1), Serial::Rows(4), Serial::Rows(5), Serial::Whole] {
            let group = |calls: Vec<usize>| KernelGroup {
                calls,
                block: threads,
                width,
                whole_rows: true,
                serial_iterations: serial,
                walk: Walk::Rows,
            };
            plans.push(match fused {
                true => vec![group((0..program.calls.len()).collect())],
                false => (0..program.calls.len()).map(|c| group(vec![c])).collect(),
            });
        }
        check(&program, &plans, &sizes);
        let plan = EmulatedPlan::compile(generate(&program, &plans[0]).unwrap()).unwrap();
        let sizes = sizes_mn(&program, 2, 8193);
        let mut inputs = Bindings::new();
        fill_random_inputs(&program, &sizes, 1, &mut inputs);
        let err = plan.run(&program, &sizes, &inputs).unwrap_err().to_string();
        assert!(err.contains("whole rows of at most 8192 columns"), "{err}");
    }
}

/// Random scripts of eight calls, at an odd size and at 300 × 257, one column past two strips
/// of 128 (where `strips_over_calls_of_different_bands_test_each_calls_diagonals` was found).
#[test]
fn random_scripts_match_the_reference() {
    let library = Library::builtin().unwrap();
    for seed in 0..12 {
        let program = fuse_core::testing::random_program(&library, seed, 8).unwrap();
        check(&program, &top_plans(&program, 2), &[(45, 67), (300, 257)]);
    }
}

#[test]
fn same_plan_same_source() {
    let program = load("gemver", Precision::F32);
    let plan = &top_plans(&program, 1)[0];
    let a = generate(&program, plan).unwrap();
    let b = generate(&program, plan).unwrap();
    assert_eq!(a.source, b.source);
    assert!(a.source.contains("//   B = sger(u2, v2, B1)"));
}

#[test]
fn generated_kernels_compile_with_nvrtc_without_spills() {
    use fuse_codegen::nvrtc::{compile, Arch, CompileOptions};
    let mut spills = Vec::new();
    for name in ALL {
        for precision in [Precision::F32, Precision::F64] {
            let program = load(name, precision);
            let mut plans = top_plans(&program, 5);
            plans.extend(hand_plans(&program));
            for kernels in plans {
                let generated = generate(&program, &kernels).unwrap();
                for arch in [Arch::new(8, 0).unwrap(), Arch::new(9, 0).unwrap()] {
                    let options = CompileOptions {
                        arch,
                        ..CompileOptions::default()
                    };
                    let compiled = compile(&generated.source, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert!(!compiled.resources.is_empty(), "{name}: no resource report");
                    spills.extend(
                        compiled
                            .resources
                            .iter()
                            .filter(|r| r.spill_stores_bytes + r.spill_loads_bytes > 0)
                            .map(|r| format!("{name} {precision} {arch}: {r:?}\n  plan {kernels:?}")),
                    );
                }
            }
        }
    }
    assert!(spills.is_empty(), "kernels that spill:\n{}", spills.join("\n"));
}

/// `snrm2`/`dnrm2` neither overflow nor underflow where the norm is representable (issue 14):
/// alone and fused with a map and a second norm; the explorer's best plans and the hand-made
/// ones, so both the partial sums added to scratch memory (three atomics per block, a finishing
/// kernel) and one block walking the whole vector (the norm stored directly) run.
#[test]
fn norms_at_the_edges_of_the_range_match_the_reference() {
    use fuse_core::testing::{check_norms, norm_program};
    for precision in [Precision::F32, Precision::F64] {
        for fused in [false, true] {
            let program = norm_program(precision, fused);
            let mut plans = top_plans(&program, 3);
            plans.extend(hand_plans(&program));
            for kernels in plans {
                let plan = EmulatedPlan::compile(generate(&program, &kernels).unwrap()).unwrap();
                check_norms(precision, fused, |program, sizes, inputs| {
                    plan.run(program, sizes, inputs)
                });
            }
        }
    }
}

/// Functions on bands the library has no example of: both sides bounded (`tbmv`, `tbmtv`: one
/// diagonal below the main one to two above), and an upper triangle whose term is not zero
/// where the matrix element is (`trdist`).
const BANDS: [(&str, &str); 3] = [
    ("tbmv", "out[i] = sum(j in i-1..i+3, A[i,j] * x[j])"),
    ("tbmtv", "out[j] = sum(i in j-1..j+3, A[i,j] * x[i])"),
    ("trdist", "out[i] = sum(j in i..n, abs(A[i,j] - x[j]))"),
];

/// The built-in library with [`BANDS`].
fn library_with_bands() -> Library {
    let mut files: Vec<(String, String)> = (std::fs::read_dir("../../library").unwrap())
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| (path.display().to_string(), std::fs::read_to_string(&path).unwrap()))
        .collect();
    files.extend(BANDS.iter().map(|(name, formula)| {
        let text = format!(
            "name: {name}\ndescription: a test band\nkind: nested_reduce\nforms:\n  - signature: (A[n,n], x[n]) -> [n]\n    formula: {formula}\n"
        );
        (format!("{name}.yaml"), text)
    }));
    Library::from_sources(files, "library and test bands").unwrap()
}

/// Whole-row blocks on a band of diagonals — each triangular product alone; ATAX on a triangle,
/// with its two calls on the same diagonal or one unit; BiCGK on a triangle; a band bounded on
/// both sides; a term that is not zero where A is — one kernel walking its rows in tiles: the
/// vectors inside every call's band loaded and summed as on a full matrix, the ragged columns
/// beside the band's edges one element at a time. A holds NaN wherever no call's band reaches,
/// so one element read outside it spoils an output. Sizes put the diagonal and the rows' end
/// at every position of a vector and a tile; rows of a multiple of the vector take the interior
/// body (n = 2048 in f64 fills the block's row), the others the edge body; blocks of one tile of
/// 32 rows, of 96 rows in three tiles, of 5 rows (odd, the last row of a trip alone) and one
/// block for all rows (column sums stored directly) — in f64 the first and the last.
#[test]
fn whole_row_blocks_on_a_triangle_read_only_the_triangle() {
    whole_row_blocks_on_a_triangle(false);
}

/// The same kernels with x — the column values of the row sums, the row values of the column
/// sums, and through `t` the row values of the fused column sums — holding +inf and NaN at two
/// columns, inside some rows' bands and outside others': a value outside an element's band
/// never reaches its sum (a zero of a vector outside the band times inf is NaN), so every
/// output is NaN or infinite exactly where the reference's is, and close elsewhere.
#[test]
fn whole_row_blocks_on_a_triangle_sum_no_infinite_value_outside_the_band() {
    whole_row_blocks_on_a_triangle(true);
}

/// `got` against `want`: NaN, +inf and −inf in the same elements, the rest within `tolerance`
/// (normwise relative error).
fn same_non_finite_and_close(got: &[f64], want: &[f64], tolerance: f64) -> Result<(), String> {
    let class = |v: f64| {
        if v.is_nan() {
            "NaN"
        } else if v.is_infinite() {
            if v > 0.0 {
                "+inf"
            } else {
                "-inf"
            }
        } else {
            "finite"
        }
    };
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if class(g) != class(w) {
            return Err(format!("element {i}: {g} against {w}"));
        }
    }
    let finite = |v: &[f64]| {
        v.iter()
            .map(|&v| if v.is_finite() { v } else { 0.0 })
            .collect::<Vec<_>>()
    };
    let error = relative_error(&finite(got), &finite(want));
    match error < tolerance {
        true => Ok(()),
        false => Err(format!("error {error:e}")),
    }
}

/// [`whole_row_blocks_on_a_triangle_read_only_the_triangle`], with x poisoned too where
/// `poison_x` ([`whole_row_blocks_on_a_triangle_sum_no_infinite_value_outside_the_band`]).
fn whole_row_blocks_on_a_triangle(poison_x: bool) {
    use fuse_core::explore::mapping::call_diagonals;
    let library = library_with_bands();
    let mut scripts: Vec<(Vec<String>, &str)> = Vec::new();
    for product in ["trmv", "trmtv"] {
        for form in ["upper", "lower", "upper_unit", "lower_unit"] {
            scripts.push((vec![format!("y = {{p}}{product}_{form}(A, x)")], "[y]"));
        }
    }
    for (first, second) in [("upper", "upper"), ("lower", "lower"), ("upper_unit", "upper")] {
        let calls = vec![
            format!("t = {{p}}trmv_{first}(A, x)"),
            format!("y = {{p}}trmtv_{second}(A, t)"),
        ];
        scripts.push((calls, "[y]"));
    }
    let bicgk = ["q = {p}trmv_lower(A, x)", "y = {p}trmtv_lower(A, x)"];
    scripts.push((bicgk.map(String::from).to_vec(), "[q, y]"));
    scripts.push((vec!["t = {p}tbmv(A, x)".into(), "y = {p}tbmtv(A, t)".into()], "[y]"));
    scripts.push((
        vec!["t = {p}trdist(A, x)".into(), "y = {p}trmtv_upper(A, t)".into()],
        "[t, y]",
    ));
    let mut failures = Vec::new();
    let layouts = [
        (128, Serial::Iterations(1)),
        (64, Serial::Iterations(3)),
        (128, Serial::Rows(5)),
        (64, Serial::Whole),
    ];
    for (precision, p, sizes, layouts) in [
        (Precision::F32, "s", &[1, 2, 5, 36, 37, 128, 130][..], &layouts[..]),
        (
            Precision::F64,
            "d",
            &[1, 3, 96, 97, 2048][..],
            &[layouts[0], layouts[3]][..],
        ),
    ] {
        for (calls, outputs) in &scripts {
            let calls: String = calls.iter().map(|c| format!("  - {}\n", c.replace("{p}", p))).collect();
            let text = format!("name: tri\nprecision: {precision}\nsizes: {{n: 64}}\ninputs: {{A: [n, n], x: [n]}}\noutputs: {outputs}\ncalls:\n{calls}");
            let program = fuse_core::script::parse("tri.yaml", &text, &library).unwrap();
            let band = (program.calls.iter())
                .map(call_diagonals)
                .reduce(|a, b| a.union(b))
                .unwrap();
            for &(threads, serial) in layouts {
                // 8 vectors of 16 bytes per thread: rows of up to 8·16·threads bytes.
                let per_vector = 16 / precision.bytes() as usize;
                let kernel = KernelGroup {
                    calls: (0..program.calls.len()).collect(),
                    block: threads,
                    width: threads * 8 * per_vector as u32 / 32,
                    whole_rows: true,
                    serial_iterations: serial,
                    walk: Walk::Rows,
                };
                let plan = EmulatedPlan::compile(generate(&program, &[kernel]).unwrap()).unwrap();
                for &n in sizes.iter().filter(|&&n| n <= threads as usize * 8 * per_vector) {
                    let sizes = program.bind_sizes(&[("n".to_string(), n)]).unwrap();
                    let mut inputs = Bindings::new();
                    fill_random_inputs(&program, &sizes, n as u64, &mut inputs);
                    let mut a = inputs["A"].to_f64();
                    for (k, v) in a.iter_mut().enumerate() {
                        if !band.columns(k / n, 0..n).contains(&(k % n)) {
                            *v = f64::NAN;
                        }
                    }
                    let a = match precision {
                        Precision::F32 => HostArray::f32(vec![n, n], a.iter().map(|&v| v as f32).collect()),
                        Precision::F64 => HostArray::f64(vec![n, n], a),
                    };
                    inputs.insert("A".into(), a);
                    if poison_x {
                        // Two fifths and three fifths in: both sides of every band see each.
                        let mut x = inputs["x"].to_f64();
                        x[2 * n / 5] = f64::INFINITY;
                        x[3 * n / 5] = f64::NAN;
                        let x = match precision {
                            Precision::F32 => HostArray::f32(vec![n], x.iter().map(|&v| v as f32).collect()),
                            Precision::F64 => HostArray::f64(vec![n], x),
                        };
                        inputs.insert("x".into(), x);
                    }
                    let want = evaluate(&program, &sizes, &inputs).unwrap();
                    let got = plan.run(&program, &sizes, &inputs).unwrap();
                    for output in &program.outputs {
                        let name = &program.values[*output].name;
                        let tolerance = if precision == Precision::F32 { 1e-4 } else { 1e-12 };
                        if let Err(e) = same_non_finite_and_close(&got[name].to_f64(), &want[name].to_f64(), tolerance)
                        {
                            failures.push(format!(
                                "{calls} {precision} at {n}, {threads} threads, {serial:?}: {name} {e}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
