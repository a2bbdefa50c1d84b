//! The offline speed checks of the BLAS-2 kernels: for the best plan of every BLAS-2 sequence
//! (ranked by the shipped analytic H100 table), A is read as few times as the dependencies
//! allow, and each matrix kernel moves its rows with 128-bit loads, does few atomics per matrix
//! element, spills nothing, keeps its loads in flight and gives the SMs work.
//! Real NVRTC compiles: these fail (never skip) without libnvrtc.

use fuse_codegen::generate::generate_plan;
use fuse_codegen::nvrtc::{self, Arch, CompileOptions};
use fuse_codegen::profile::{profile, KernelProfile};
use fuse_codegen::sass::HotLoop;
use fuse_core::{explore, script, Library, Limits, TimingTable};

const BLAS2: [&str; 7] = ["atax", "bicgk", "gemver", "gesummv", "madd", "sgemv", "sgemvt"];

fn best_plan_profile(name: &str, precision_f64: bool) -> Vec<KernelProfile> {
    profile_at(name, precision_f64, 8192, false)
}

/// The profile of the best plan of script `name` at `side`², its hot loops read from the SASS
/// where `sass` (nvdisasm must then be at hand: the test fails, never skips, without it).
fn profile_at(name: &str, precision_f64: bool, side: usize, sass: bool) -> Vec<KernelProfile> {
    let library = Library::builtin().unwrap();
    let path = format!("../../scripts/{name}.yaml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    if precision_f64 {
        text = text.replace("precision: f32", "precision: f64").replace("= s", "= d");
    }
    let program = script::parse(&path, &text, &library).unwrap();
    let sizes = program
        .bind_sizes(&[("m".to_string(), side), ("n".to_string(), side)])
        .unwrap();
    let table = TimingTable::builtin().unwrap();
    let exploration = explore(&program, &sizes, &table, &library, Limits::default()).unwrap();
    let generated = generate_plan(&program, &exploration.best()).unwrap();
    let options = CompileOptions {
        arch: Arch::SM_90,
        ..CompileOptions::default()
    };
    let compiled = nvrtc::compile(&generated.source, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let functions = match sass {
        true => fuse_codegen::sass::parse(&fuse_codegen::sass::disassemble(&compiled.cubin).unwrap()),
        false => Vec::new(),
    };
    profile(
        &generated,
        &compiled.ptx,
        &compiled.resources,
        &functions,
        &sizes,
        &table.device,
    )
}

/// The steady-state loop of every matrix kernel of the best BLAS-2 plans, read from the sm_90
/// SASS at 2048², 4096² and 8192², f32 and f64: as lean as the hand-written probes that reached
/// 93–96 % of the H100's copy bandwidth (10–14 instructions per 128-bit load), at most one
/// barrier per row, no spills; enough loads in flight on every SM with a block to cover DRAM
/// latency (the probes kept 32–64 KiB); and no grid that ends in a thin wave.
#[test]
fn best_blas2_hot_loops_are_as_lean_as_the_probes() {
    let sms = TimingTable::builtin().unwrap().device.sms as f64;
    let mut failures = Vec::new();
    for name in ["bicgk", "atax", "sgemv", "gesummv", "sgemvt", "gemver"] {
        for f64 in [false, true] {
            for side in [2048, 4096, 8192] {
                for k in profile_at(name, f64, side, true) {
                    if k.atomics_per_1k.is_none() {
                        continue; // not a matrix kernel
                    }
                    let at = format!("{name} {side}² (f64: {f64}) {}", k.kernel);
                    let Some(hot) = k.hot_loop else {
                        failures.push(format!("{at}: no loop of 128-bit loads"));
                        continue;
                    };
                    let at = format!("{at}: {hot:?}");
                    if hot.per_wide_load() > 20.0 {
                        failures.push(format!(
                            "{at}: {:.1} instructions per 128-bit load",
                            hot.per_wide_load()
                        ));
                    }
                    if k.fallback_per_wide.unwrap() > 0.0 {
                        failures.push(format!("{at}: a scalar fallback in the hot loop"));
                    }
                    if k.barriers_per_row.unwrap() > 1.0 {
                        failures.push(format!("{at}: {:.2} barriers per row", k.barriers_per_row.unwrap()));
                    }
                    if k.spill_bytes > 0 {
                        failures.push(format!("{at}: spills {} bytes", k.spill_bytes));
                    }
                    // On the SMs holding the most blocks at once, which set the kernel's time.
                    let in_flight = k.in_flight_per_sm.unwrap();
                    if in_flight < 32.0 * 1024.0 {
                        failures.push(format!("{at}: {:.1} KiB in flight per SM", in_flight / 1024.0));
                    }
                    // Blocks spread evenly: the average SM does ¾ of the busiest one's at least.
                    let balance = k.blocks as f64 / sms / (k.blocks as f64 / sms).ceil();
                    if balance < 0.75 {
                        failures.push(format!("{at}: {} blocks for {sms} SMs", k.blocks));
                    }
                    // One wave, all blocks resident at once, or a last wave ¾ full at least.
                    if k.waves > 1.0 && k.last_wave < 0.75 {
                        failures.push(format!("{at}: {:.2} waves, the last {:.2} full", k.waves, k.last_wave));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn best_blas2_kernels_load_16_bytes_with_few_atomics_and_no_spills() {
    for f64 in [false, true] {
        for name in BLAS2 {
            let kernels = best_plan_profile(name, f64);
            let strips: Vec<&KernelProfile> = kernels.iter().filter(|k| k.atomics_per_1k.is_some()).collect();
            // A is read once wherever the dependencies allow (ATAX and GESUMMV too: a block of
            // whole rows finishes each row's dot while the row is on chip); SGEMVT and GEMVER
            // have a global barrier between their two products. In f64 a row of 8192 columns
            // is 64 KiB: it, x and y (192 KiB) exceed the 128 KiB of registers a block gets.
            let floor = match name {
                "sgemvt" | "gemver" => 2,
                _ => 1,
            };
            if !f64 {
                assert_eq!(strips.len(), floor, "{name}: matrix kernels {kernels:?}");
            }
            for k in strips {
                let at = format!("{name} (f64: {f64}) {k:?}");
                assert_eq!(k.load_bits, 128, "{at}");
                assert!(k.per_thread >= 4, "{at}");
                assert_eq!(k.spill_bytes, 0, "{at}");
                // Rows go to blocks in tiles of 32, so a grid may leave a few SMs idle.
                assert!(k.blocks as f64 >= 0.95 * 132.0, "the H100's SMs get a block: {at}");
                // One warp sum and one atomic per row of a strip at least 512 columns wide, one
                // float4 atomic per 4 columns per block: a few per 1024 elements (the paper's
                // 32×32 tiles: 33).
                assert!(k.atomics_per_1k.unwrap() <= 4.0, "{at}");
                assert!(k.shuffles_per_1k.unwrap() <= 10.0, "{at}");
            }
        }
    }
}

/// The PTX of kernel `name`: from its `.entry` to the next one.
fn kernel_ptx<'p>(ptx: &'p str, name: &str) -> &'p str {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no kernel {name}"));
    let rest = &ptx[start + 1..];
    &ptx[start..start + 1 + rest.find(".entry").unwrap_or(rest.len())]
}

/// The atomic instructions of a kernel's PTX, and how many of them lie inside a loop (between a
/// label and a later branch back to it).
fn atomics(ptx: &str) -> (usize, usize) {
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let is_atomic =
        |l: &&str| l.starts_with("atom.") || l.starts_with("red.") || l.contains(" atom.") || l.contains(" red.");
    let label_at = |label: &str| lines.iter().position(|l| l.strip_suffix(':') == Some(label));
    let loops: Vec<(usize, usize)> = lines
        .iter()
        .enumerate()
        .filter_map(|(at, l)| {
            let target = l
                .split("bra")
                .nth(1)?
                .trim_start_matches(".uni")
                .trim()
                .trim_end_matches(';');
            label_at(target).filter(|&from| from < at).map(|from| (from, at))
        })
        .collect();
    let all: Vec<usize> = (0..lines.len()).filter(|&k| is_atomic(&lines[k])).collect();
    let in_loops = all
        .iter()
        .filter(|&&k| loops.iter().any(|&(a, b)| a < k && k < b))
        .count();
    (all.len(), in_loops)
}

/// `snrm2`/`dnrm2` stay one read of x with nothing per element but arithmetic: the partial
/// norm of a block goes to memory as its three scaled sums, three atomics after the loop.
#[test]
fn norm_kernels_add_three_sums_per_block_and_nothing_per_element() {
    use fuse_codegen::generate::{generate, KernelGroup, Serial, Walk};
    use fuse_core::testing::norm_program;
    use fuse_core::Precision;
    for precision in [Precision::F32, Precision::F64] {
        for fused in [false, true] {
            let program = norm_program(precision, fused);
            let kernel = KernelGroup {
                calls: (0..program.calls.len()).collect(),
                block: 256,
                width: 1,
                whole_rows: false,
                serial_iterations: Serial::Iterations(8),
                walk: Walk::Rows,
            };
            let generated = generate(&program, &[kernel]).unwrap();
            let norms = program.calls.iter().filter(|c| c.text.contains("nrm2")).count();
            assert_eq!(generated.scratch.len(), norms, "a scratch per norm");
            let options = CompileOptions {
                arch: Arch::SM_90,
                ..CompileOptions::default()
            };
            let compiled = nvrtc::compile(&generated.source, &options).unwrap();
            let name = format!("fuse_{}_k0", program.name);
            let (total, in_loops) = atomics(kernel_ptx(&compiled.ptx, &name));
            assert_eq!((total, in_loops), (3 * norms, 0), "{precision} fused {fused}: atomics");
        }
    }
}

/// The hot loop, spilled bytes and barriers per row of each matrix kernel of `plan` for
/// `program` at `side`², from the SASS.
fn hot_loops(program: &fuse_core::Program, plan: &fuse_core::Plan, side: usize) -> Vec<(String, HotLoop, u64, f64)> {
    let sides: Vec<(String, usize)> = (program.sizes.iter()).map(|(s, _)| (s.to_string(), side)).collect();
    let sizes = program.bind_sizes(&sides).unwrap();
    let generated = generate_plan(program, plan).unwrap();
    let options = CompileOptions {
        arch: Arch::SM_90,
        ..CompileOptions::default()
    };
    let compiled = nvrtc::compile(&generated.source, &options).unwrap();
    let functions = fuse_codegen::sass::parse(&fuse_codegen::sass::disassemble(&compiled.cubin).unwrap());
    let table = TimingTable::builtin().unwrap();
    let profiles = profile(
        &generated,
        &compiled.ptx,
        &compiled.resources,
        &functions,
        &sizes,
        &table.device,
    );
    (profiles.into_iter())
        .filter_map(|k| Some((k.kernel.clone(), k.hot_loop?, k.spill_bytes, k.barriers_per_row?)))
        .collect()
}

/// A triangular product's strip kernels test each element's diagonal only in the rows (or
/// strips) that cross it: the best plan of each triangular sequence, run on the triangle and on
/// the full products (gemv/gemtv), has hot loops of the same 128-bit loads, no spills, and at
/// most a third more instructions (the loop bounds of the split walks; measured 2–30 %, the
/// most tri-bicgk f32 at 4096², 163 against 125: 20.4 per 128-bit load). Whole-row blocks
/// (ATAX's one pass on a GPU) cross the diagonal in every row: the next test holds them.
#[test]
fn triangular_strip_kernels_test_no_diagonal_in_their_hot_loops() {
    let library = Library::builtin().unwrap();
    let table = TimingTable::builtin().unwrap();
    let mut failures = Vec::new();
    for name in ["tri-bicgk", "tri-atax", "trmv", "trmtv"] {
        for f64 in [false, true] {
            for side in [2048, 4096, 8192] {
                let path = format!("../../benches/scripts/triangular/{name}.yaml");
                let text = std::fs::read_to_string(&path).unwrap();
                let text = match f64 {
                    true => text,
                    false => text.replace("precision: f64", "precision: f32").replace("= d", "= s"),
                };
                let full = text.replace("trmtv_upper", "gemtv").replace("trmv_upper", "gemv");
                let triangle = script::parse(&path, &text, &library).unwrap();
                let twin = script::parse(&path, &full, &library).unwrap();
                let sizes = triangle.bind_sizes(&[("n".to_string(), side)]).unwrap();
                let plan = explore(&triangle, &sizes, &table, &library, Limits::default())
                    .unwrap()
                    .best();
                let got = hot_loops(&triangle, &plan, side);
                let want = hot_loops(&twin, &plan, side);
                for ((kernel, hot, spills, barriers), (_, twin_hot, ..)) in got.iter().zip(&want) {
                    let at = format!("{name} {side}² (f64: {f64}) {kernel}: {hot:?} against {twin_hot:?}");
                    if *barriers > 0.0 {
                        continue; // a whole-row block
                    }
                    if hot.instructions as f64 > 1.35 * twin_hot.instructions as f64
                        || hot.wide_loads != twin_hot.wide_loads
                    {
                        failures.push(format!("{at}: a hot loop a third longer than the full product's"));
                    }
                    if *spills > 0 {
                        failures.push(format!("{at}: spills {spills} bytes"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A script of `calls` (`{p}` standing for the precision's prefix) on an n×n matrix A and a
/// vector x, giving the results no call reads.
fn triangle_script(calls: &[&str], f64: bool) -> String {
    let (precision, p) = if f64 { ("f64", "d") } else { ("f32", "s") };
    let result = |call: &str| call.split('=').next().unwrap().trim().to_string();
    let reads = |call: &str, value: &str| {
        let args = call.split('(').nth(1).unwrap().trim_end_matches(')');
        args.split(',').any(|a| a.trim() == value)
    };
    let outputs: Vec<String> = (calls.iter().map(|c| result(c)))
        .filter(|r| !calls.iter().any(|c| reads(c, r)))
        .collect();
    let calls: String = calls.iter().map(|c| format!("  - {}\n", c.replace("{p}", p))).collect();
    format!(
        "name: tri\nprecision: {precision}\nsizes: {{n: 64}}\ninputs: {{A: [n, n], x: [n]}}\noutputs: [{}]\ncalls:\n{calls}",
        outputs.join(", ")
    )
}

/// Instructions per 128-bit load a whole-row triangular hot loop stays under: the ≤ 20 of the
/// full products' (issue 42). As generated on 2026-11-28, each element summed under a per-row
/// bit mask, they took 19.6–28.9 for a product alone and 45.9–50.8 fused (ATAX), where gemv's
/// and gemtv's took 4.4–18.2. In tiles — a bit per vector for all of a tile's rows, the loads
/// alone predicated, the ragged columns beside the diagonal one element a thread — they take
/// 7.6–13.0 alone, 12.5–17.0 for ATAX and 14.4–18.8 for BiCGK, against 4.3–16.2 for the full
/// products (whose loads lost their address arithmetic too); with an infinite x or row value
/// kept out of the sums outside its band, once a tile (2026-12-02), 7.8–12.6, 12.6–17.3 and
/// 14.9–18.8.
const WHOLE_ROW_TRIANGLE_LIMIT: f64 = 20.0;

/// Whole-row blocks on a triangle — each triangular product alone, and triangular ATAX and
/// BiCGK fused into one kernel (ATAX: a row's sum finished while the row is in registers, then
/// its column terms added) — walk their rows in tiles: the vectors inside the triangle for all
/// of a tile's rows loaded under one bit each and summed as on a full matrix, the ragged columns
/// beside the diagonal one element a thread. No element's diagonal is tested in the vectors,
/// the loops issue the full product's 128-bit loads (each predicated off outside the
/// triangle), no spills, and at most [`WHOLE_ROW_TRIANGLE_LIMIT`] instructions per load.
#[test]
fn triangular_whole_row_kernels_load_only_each_rows_stored_range() {
    let library = Library::builtin().unwrap();
    let table = TimingTable::builtin().unwrap();
    let mut cases: Vec<Vec<String>> = Vec::new();
    for product in ["trmv", "trmtv"] {
        for form in ["upper", "lower", "upper_unit", "lower_unit"] {
            cases.push(vec![format!("y = {{p}}{product}_{form}(A, x)")]);
        }
    }
    for form in ["upper", "lower", "upper_unit"] {
        cases.push(vec![
            format!("t = {{p}}trmv_{form}(A, x)"),
            format!("y = {{p}}trmtv_{form}(A, t)"),
        ]);
    }
    for form in ["upper", "lower"] {
        cases.push(vec![
            format!("q = {{p}}trmv_{form}(A, x)"),
            format!("y = {{p}}trmtv_{form}(A, x)"),
        ]);
    }
    let full = |call: &str| {
        let product = call.split('=').nth(1).unwrap().trim().split('_').next().unwrap();
        format!(
            "{} = {}({}",
            call.split('=').next().unwrap().trim(),
            product.replace("tr", "ge"),
            call.split('(').nth(1).unwrap()
        )
    };
    let mut failures = Vec::new();
    let mut measured = 0;
    for calls in &cases {
        for f64 in [false, true] {
            for side in [2048, 8192] {
                let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
                let text = triangle_script(&calls, f64);
                let twin_calls: Vec<String> = calls.iter().map(|c| full(c)).collect();
                let twin_calls: Vec<&str> = twin_calls.iter().map(String::as_str).collect();
                let triangle = script::parse("tri.yaml", &text, &library).unwrap();
                let twin = script::parse("full.yaml", &triangle_script(&twin_calls, f64), &library).unwrap();
                let sizes = triangle.bind_sizes(&[("n".to_string(), side)]).unwrap();
                let exploration = explore(&triangle, &sizes, &table, &library, Limits::default()).unwrap();
                let at = format!("{calls:?} {side}² (f64: {f64})");
                let plan = exploration
                    .plans()
                    .take(10_000)
                    .find(|p| p.kernels.len() == 1 && p.kernels[0].launch.block.whole_rows);
                // The explorer offers whole rows where a thread's part of a row fits its registers.
                let Some(plan) = plan else { continue };
                measured += 1;
                let source = generate_plan(&triangle, &plan).unwrap().source;
                if source.contains("+ e - row") {
                    failures.push(format!("{at}: an element's diagonal tested"));
                }
                let got = hot_loops(&triangle, &plan, side);
                let want = hot_loops(&twin, &plan, side);
                assert_eq!(got.len(), 1, "{at}: {got:?}");
                let ((_, hot, spills, _), (_, twin_hot, ..)) = (&got[0], &want[0]);
                let at = format!(
                    "{at}: {hot:?} ({:.1} a load) against {twin_hot:?} ({:.1})",
                    hot.per_wide_load(),
                    twin_hot.per_wide_load()
                );
                if hot.per_wide_load() > WHOLE_ROW_TRIANGLE_LIMIT {
                    failures.push(format!(
                        "{at}: over {WHOLE_ROW_TRIANGLE_LIMIT} instructions per 128-bit load"
                    ));
                }
                if hot.wide_loads != twin_hot.wide_loads {
                    failures.push(format!("{at}: not the full product's 128-bit loads"));
                }
                if *spills > 0 {
                    failures.push(format!("{at}: spills {spills} bytes"));
                }
            }
        }
    }
    assert!(measured >= cases.len(), "{measured} whole-row kernels measured");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
