//! The cuBLAS calls of a [`Baseline`] run on the host in f64, with cuBLAS's column-major
//! argument conventions read literally (BLAS reference semantics), so the translation's
//! transpose flags, dimensions and leading dimensions are checked without a GPU.

// Index loops read like the BLAS reference implementation they mirror.
#![allow(clippy::needless_range_loop)]

use std::collections::BTreeMap;

use fuse_core::{Bindings, HostArray, Program, Sizes, ValueId};

use super::{evaluate_host_scalar, Baseline, BlasOp, ScalarArg, Trans};

/// The device's memory: each buffer by its owning value, and the computed scalars' slots.
struct Memory {
    buffers: BTreeMap<ValueId, Vec<f64>>,
    computed: Vec<f64>,
}

/// Runs `baseline` on `inputs`; returns the outputs by name (f64).
pub fn run(baseline: &Baseline, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Bindings {
    let buffers: BTreeMap<ValueId, Vec<f64>> = baseline
        .buffers
        .iter()
        .map(|(&v, &len)| {
            let value = &program.values[v];
            let data = match value.producer {
                None => inputs[&value.variable].to_f64(),
                Some(_) => vec![f64::NAN; len],
            };
            (v, data)
        })
        .collect();
    let mut memory = Memory {
        buffers,
        computed: vec![f64::NAN; baseline.computed],
    };
    for op in &baseline.ops {
        apply(op, &mut memory, baseline, program, inputs);
    }
    program
        .outputs
        .iter()
        .map(|&v| {
            let dims = program.values[v].shape.extents(sizes).unwrap_or_default();
            let data = memory.buffers[&baseline.storage[&v]].clone();
            (program.values[v].variable.clone(), HostArray::f64(dims, data))
        })
        .collect()
}

fn scalar(s: &ScalarArg, memory: &Memory, program: &Program, inputs: &Bindings) -> f64 {
    match *s {
        ScalarArg::Host { factor, input: None } => factor,
        ScalarArg::Host { factor, input: Some(v) } => factor * inputs[&program.values[v].variable].to_f64()[0],
        ScalarArg::Device(v) => memory.buffers[&v][0],
        ScalarArg::Computed(k) => memory.computed[k],
    }
}

/// `into ← value`, the scalars it reads taken from the inputs and the device's memory.
fn host_scalar(
    value: &fuse_core::Arg,
    into: ScalarArg,
    memory: &mut Memory,
    baseline: &Baseline,
    program: &Program,
    inputs: &Bindings,
) {
    let read = |v: ValueId| match program.values[v].producer {
        None => Ok::<f64, ()>(inputs[&program.values[v].variable].to_f64()[0]),
        Some(_) => Ok(memory.buffers[&baseline.storage[&v]][0]),
    };
    let x = evaluate_host_scalar(value, program.precision, read).expect("host reads do not fail");
    match into {
        ScalarArg::Device(v) => memory.buffers.get_mut(&v).unwrap()[0] = x,
        ScalarArg::Computed(k) => memory.computed[k] = x,
        ScalarArg::Host { .. } => unreachable!("the translation puts host scalars into device memory"),
    }
}

fn apply(op: &BlasOp, memory: &mut Memory, baseline: &Baseline, program: &Program, inputs: &Bindings) {
    let s = |s: &ScalarArg, memory: &Memory| scalar(s, memory, program, inputs);
    match *op {
        BlasOp::Copy { len, src, dst } => {
            let data = memory.buffers[&src][..len].to_vec();
            memory.buffers.get_mut(&dst).unwrap()[..len].copy_from_slice(&data);
        }
        BlasOp::HostScalar { ref value, into } => host_scalar(value, into, memory, baseline, program, inputs),
        BlasOp::Trmv {
            n,
            upper,
            trans,
            unit,
            a,
            x,
        } => {
            // Column-major: element (i, j) at i + j·n; only the stored triangle is read.
            let (mat, xs) = (memory.buffers[&a].clone(), memory.buffers[&x].clone());
            let stored = |i: usize, j: usize| if upper { i <= j } else { i >= j };
            let element = |i: usize, j: usize| match (i == j && unit, stored(i, j)) {
                (true, _) => 1.0,
                (false, true) => mat[i + j * n],
                (false, false) => 0.0,
            };
            let ys = memory.buffers.get_mut(&x).unwrap();
            for (o, y) in ys[..n].iter_mut().enumerate() {
                *y = (0..n)
                    .map(|k| match trans {
                        Trans::N => element(o, k) * xs[k],
                        Trans::T => element(k, o) * xs[k],
                    })
                    .sum();
            }
        }
        BlasOp::Zero { len, dst } => memory.buffers.get_mut(&dst).unwrap()[..len].fill(0.0),
        BlasOp::Scal { n, alpha, x } => {
            let a = s(&alpha, memory);
            memory.buffers.get_mut(&x).unwrap()[..n]
                .iter_mut()
                .for_each(|e| *e *= a);
        }
        BlasOp::Axpy { n, alpha, x, y } => {
            let a = s(&alpha, memory);
            let xs = memory.buffers[&x][..n].to_vec();
            let ys = memory.buffers.get_mut(&y).unwrap();
            (0..n).for_each(|i| ys[i] += a * xs[i]);
        }
        BlasOp::Dot { n, x, y, result } => {
            let d = (0..n).map(|i| memory.buffers[&x][i] * memory.buffers[&y][i]).sum();
            memory.buffers.get_mut(&result).unwrap()[0] = d;
        }
        BlasOp::Asum { n, x, result } => {
            let d = memory.buffers[&x][..n].iter().map(|e| e.abs()).sum();
            memory.buffers.get_mut(&result).unwrap()[0] = d;
        }
        BlasOp::Nrm2 { n, x, result } => {
            let d = memory.buffers[&x][..n].iter().map(|e| e * e).sum::<f64>().sqrt();
            memory.buffers.get_mut(&result).unwrap()[0] = d;
        }
        BlasOp::Gemv {
            trans,
            m,
            n,
            lda,
            alpha,
            a,
            x,
            beta,
            y,
        } => {
            let (al, be) = (s(&alpha, memory), s(&beta, memory));
            let (mat, xs) = (memory.buffers[&a].clone(), memory.buffers[&x].clone());
            let ys = memory.buffers.get_mut(&y).unwrap();
            let (outer, inner) = if trans == Trans::N { (m, n) } else { (n, m) };
            for o in 0..outer {
                let dot: f64 = (0..inner)
                    .map(|k| {
                        let (i, j) = if trans == Trans::N { (o, k) } else { (k, o) };
                        mat[i + j * lda] * xs[k]
                    })
                    .sum();
                // BLAS: y is not read when beta is zero (it may hold NaN).
                ys[o] = al * dot + if be == 0.0 { 0.0 } else { be * ys[o] };
            }
        }
        BlasOp::Ger {
            m,
            n,
            lda,
            alpha,
            x,
            y,
            a,
        } => {
            let al = s(&alpha, memory);
            let (xs, ys) = (memory.buffers[&x].clone(), memory.buffers[&y].clone());
            let mat = memory.buffers.get_mut(&a).unwrap();
            for j in 0..n {
                for i in 0..m {
                    mat[i + j * lda] += al * xs[i] * ys[j];
                }
            }
        }
        BlasOp::Dgmm { n, x, y, c } => {
            let (xs, ys) = (memory.buffers[&x].clone(), memory.buffers[&y].clone());
            let out = memory.buffers.get_mut(&c).unwrap();
            for i in 0..n {
                out[i] = xs[i] * ys[i];
            }
        }
        BlasOp::Geam {
            m,
            n,
            ld,
            alpha,
            a,
            beta,
            b,
            c,
        } => {
            let (al, be) = (s(&alpha, memory), s(&beta, memory));
            let (ma, mb) = (memory.buffers[&a].clone(), memory.buffers[&b].clone());
            let mc = memory.buffers.get_mut(&c).unwrap();
            for j in 0..n {
                for i in 0..m {
                    mc[i + j * ld] = al * ma[i + j * ld] + be * mb[i + j * ld];
                }
            }
        }
    }
}
