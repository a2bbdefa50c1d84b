use fuse_core::data::fill_random_inputs;
use fuse_core::{script, Bindings, Library};
use fuse_cpu::fused::{unfused_plan, FusedPlan, XP, XQ, XR};
use std::sync::atomic::Ordering;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (n, prec, rounds): (usize, &str, usize) = (args[1].parse().unwrap(), &args[2], args[3].parse().unwrap());
    let variants: Vec<(usize, usize, usize)> = args[4..].iter().map(|a| { let v: Vec<usize> = a.split(',').map(|x| x.parse().unwrap()).collect(); (v[0], v[1], v[2]) }).collect();
    let p = if prec == "f32" { "s" } else { "d" };
    let text = format!("name: a\nprecision: {prec}\nsizes: {{m: {n}, n: {n}}}\ninputs: {{A: [m, n], x: [n]}}\noutputs: [y]\ncalls:\n  - t = {p}gemv(A, x)\n  - y = {p}gemtv(A, t)\n");
    let library = Library::builtin().unwrap();
    let program = script::parse("a.yaml", &text, &library).unwrap();
    let sizes = program.sizes.clone();
    let unf = unfused_plan(&program, &sizes);
    let mut plan = unf.clone();
    let calls = plan.kernels.iter().flat_map(|k| k.calls.clone()).collect();
    plan.kernels.truncate(1);
    plan.kernels[0].calls = calls;
    let fused = FusedPlan::new(program.clone(), &sizes, &plan).unwrap().with_prefetch_ahead(false);
    let unfused = FusedPlan::new(program.clone(), &sizes, &unf).unwrap().with_prefetch_ahead(false);
    let mut inputs = Bindings::new();
    fill_random_inputs(&program, &sizes, 1, &mut inputs);
    let mut ws = fused.workspace().unwrap();
    let mut wu = unfused.workspace().unwrap();
    let nv = variants.len();
    let mut ratios = vec![Vec::new(); nv];
    let mut tu = Vec::new();
    for k in 0..rounds {
        let mut tt = vec![0.0; nv + 1];
        for q in 0..=nv {
            let v = (q + k) % (nv + 1);
            let start = Instant::now();
            if v == nv {
                unfused.run_in(&inputs, &mut wu).unwrap();
            } else {
                XQ.store(variants[v].0, Ordering::Relaxed);
                XR.store(variants[v].1, Ordering::Relaxed);
                XP.store(variants[v].2, Ordering::Relaxed);
                fused.run_in(&inputs, &mut ws).unwrap();
            }
            tt[v] = start.elapsed().as_secs_f64();
        }
        if k > 0 {
            tu.push(tt[nv]);
            for v in 0..nv {
                ratios[v].push(tt[nv] / tt[v]);
            }
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() / 4], v[3 * v.len() / 4])
    };
    println!("unfused ms {:.2}", med(&mut tu).0 * 1e3);
    for v in 0..nv {
        let (m, a, b) = med(&mut ratios[v]);
        println!("q,run,parts={:?} ratio median {:.3} ({:.3}-{:.3})", variants[v], m, a, b);
    }
}
