//! The cuBLAS calls of a [`Baseline`] run on the host in f64, with cuBLAS's column-major
//! argument conventions read literally (BLAS reference semantics), so the translation's
//! transpose flags, dimensions and leading dimensions are checked without a GPU.

// Index loops read like the BLAS reference implementation they mirror.
#![allow(clippy::needless_range_loop)]

use std::collections::BTreeMap;

use fuse_core::{Bindings, HostArray, Program, Sizes, ValueId};

use super::{Baseline, BlasOp, ScalarArg, Trans};

/// Runs `baseline` on `inputs`; returns the outputs by name (f64).
pub fn run(baseline: &Baseline, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Bindings {
    let mut memory: BTreeMap<ValueId, Vec<f64>> = baseline
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
    for op in &baseline.ops {
        apply(op, &mut memory, program, inputs);
    }
    program
        .outputs
        .iter()
        .map(|&v| {
            let dims = program.values[v].shape.extents(sizes).unwrap_or_default();
            let data = memory[&baseline.storage[&v]].clone();
            (program.values[v].variable.clone(), HostArray::f64(dims, data))
        })
        .collect()
}

fn scalar(s: &ScalarArg, memory: &BTreeMap<ValueId, Vec<f64>>, program: &Program, inputs: &Bindings) -> f64 {
    match *s {
        ScalarArg::Host { factor, input: None } => factor,
        ScalarArg::Host { factor, input: Some(v) } => factor * inputs[&program.values[v].variable].to_f64()[0],
        ScalarArg::Device(v) => memory[&v][0],
    }
}

fn apply(op: &BlasOp, memory: &mut BTreeMap<ValueId, Vec<f64>>, program: &Program, inputs: &Bindings) {
    let s = |s: &ScalarArg, memory: &BTreeMap<ValueId, Vec<f64>>| scalar(s, memory, program, inputs);
    match *op {
        BlasOp::Copy { len, src, dst } => {
            let data = memory[&src][..len].to_vec();
            memory.get_mut(&dst).unwrap()[..len].copy_from_slice(&data);
        }
        BlasOp::Trmv {
            n,
            upper,
            trans,
            unit,
            a,
            x,
        } => {
            // Column-major: element (i, j) at i + j·n; only the stored triangle is read.
            let (mat, xs) = (memory[&a].clone(), memory[&x].clone());
            let stored = |i: usize, j: usize| if upper { i <= j } else { i >= j };
            let element = |i: usize, j: usize| match (i == j && unit, stored(i, j)) {
                (true, _) => 1.0,
                (false, true) => mat[i + j * n],
                (false, false) => 0.0,
            };
            let ys = memory.get_mut(&x).unwrap();
            for (o, y) in ys[..n].iter_mut().enumerate() {
                *y = (0..n)
                    .map(|k| match trans {
                        Trans::N => element(o, k) * xs[k],
                        Trans::T => element(k, o) * xs[k],
                    })
                    .sum();
            }
        }
        BlasOp::Zero { len, dst } => memory.get_mut(&dst).unwrap()[..len].fill(0.0),
        BlasOp::Scal { n, alpha, x } => {
            let a = s(&alpha, memory);
            memory.get_mut(&x).unwrap()[..n].iter_mut().for_each(|e| *e *= a);
        }
        BlasOp::Axpy { n, alpha, x, y } => {
            let a = s(&alpha, memory);
            let xs = memory[&x][..n].to_vec();
            let ys = memory.get_mut(&y).unwrap();
            (0..n).for_each(|i| ys[i] += a * xs[i]);
        }
        BlasOp::Dot { n, x, y, result } => {
            let d = (0..n).map(|i| memory[&x][i] * memory[&y][i]).sum();
            memory.get_mut(&result).unwrap()[0] = d;
        }
        BlasOp::Asum { n, x, result } => {
            let d = memory[&x][..n].iter().map(|e| e.abs()).sum();
            memory.get_mut(&result).unwrap()[0] = d;
        }
        BlasOp::Nrm2 { n, x, result } => {
            let d = memory[&x][..n].iter().map(|e| e * e).sum::<f64>().sqrt();
            memory.get_mut(&result).unwrap()[0] = d;
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
            let (mat, xs) = (memory[&a].clone(), memory[&x].clone());
            let ys = memory.get_mut(&y).unwrap();
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
            let (xs, ys) = (memory[&x].clone(), memory[&y].clone());
            let mat = memory.get_mut(&a).unwrap();
            for j in 0..n {
                for i in 0..m {
                    mat[i + j * lda] += al * xs[i] * ys[j];
                }
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
            let (ma, mb) = (memory[&a].clone(), memory[&b].clone());
            let mc = memory.get_mut(&c).unwrap();
            for j in 0..n {
                for i in 0..m {
                    mc[i + j * ld] = al * ma[i + j * ld] + be * mb[i + j * ld];
                }
            }
        }
    }
}
