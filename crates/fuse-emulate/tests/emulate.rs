//! Kernels of tests/kernels.cu run by the emulator and compared with values computed here.

use fuse_emulate::{EmulateError, EmulateOptions, EmulatedModule, KernelArg, CUDA_PRELUDE};
use std::sync::OnceLock;

const KERNELS: &str = include_str!("kernels.cu");
const SIZES: [usize; 5] = [1, 31, 33, 1000, 4097];

fn source() -> String {
    format!("{CUDA_PRELUDE}{KERNELS}")
}

fn module() -> &'static EmulatedModule {
    static MODULE: OnceLock<EmulatedModule> = OnceLock::new();
    MODULE.get_or_init(|| EmulatedModule::compile(&source()).unwrap_or_else(|e| panic!("{e}")))
}

/// The same kernels on the portable ucontext fibers, one worker.
fn ucontext_module() -> &'static EmulatedModule {
    static MODULE: OnceLock<EmulatedModule> = OnceLock::new();
    MODULE.get_or_init(|| {
        let options = EmulateOptions {
            defines: vec![("FUSE_EMU_UCONTEXT".into(), "1".into())],
            workers: 1,
        };
        EmulatedModule::compile_with(&source(), &options).unwrap_or_else(|e| panic!("{e}"))
    })
}

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 + seed * 11) % 101) as f32 / 50.0 - 1.0)
        .collect()
}

fn blocks(n: usize, per_block: usize) -> u32 {
    n.div_ceil(per_block) as u32
}

fn assert_close(got: f64, want: f64, tolerance: f64, what: &str) {
    assert!(
        (got - want).abs() <= tolerance * want.abs().max(1.0),
        "{what}: got {got}, want {want}"
    );
}

fn execution_error(result: Result<(), EmulateError>) -> String {
    match result {
        Err(EmulateError::Execution(message)) => message,
        other => panic!("expected an execution error, got {other:?}"),
    }
}

#[test]
fn vector_add_with_tail() {
    for n in SIZES {
        let (x, y) = (data(n, 1), data(n, 2));
        let mut z = vec![0.0f32; n];
        let mut args = [(&x[..]).into(), (&y[..]).into(), (&mut z[..]).into(), (n as i32).into()];
        module()
            .launch("vadd", (blocks(n, 256), 1, 1), (256, 1, 1), 0, &mut args)
            .unwrap();
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        assert_eq!(z, want, "n = {n}");
    }
}

#[test]
fn block_reduction_f32_and_f64() {
    for n in SIZES {
        let x = data(n, 3);
        let mut sum = [0.0f32];
        let mut args = [(&x[..]).into(), (&mut sum[..]).into(), (n as i32).into()];
        module()
            .launch("sum_f32", (blocks(n, 256), 1, 1), (256, 1, 1), 0, &mut args)
            .unwrap();
        let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
        assert_close(f64::from(sum[0]), want, 1e-5, &format!("f32 sum, n = {n}"));

        let x: Vec<f64> = x.iter().map(|&v| f64::from(v) / 3.0).collect();
        let mut sum = [0.0f64];
        let mut args = [(&x[..]).into(), (&mut sum[..]).into(), (n as i32).into()];
        module()
            .launch("sum_f64", (blocks(n, 256), 1, 1), (256, 1, 1), 0, &mut args)
            .unwrap();
        assert_close(sum[0], x.iter().sum(), 1e-12, &format!("f64 sum, n = {n}"));
    }
}

#[test]
fn warp_shuffle_dot_product() {
    for n in SIZES {
        let (x, y) = (data(n, 4), data(n, 5));
        let mut dot = [0.0f32];
        let mut args = [
            (&x[..]).into(),
            (&y[..]).into(),
            (&mut dot[..]).into(),
            (n as i32).into(),
        ];
        module()
            .launch("dot_warp", (blocks(n, 128), 1, 1), (128, 1, 1), 0, &mut args)
            .unwrap();
        let want: f64 = x.iter().zip(&y).map(|(a, b)| f64::from(a * b)).sum();
        assert_close(f64::from(dot[0]), want, 1e-5, &format!("dot, n = {n}"));
    }
}

#[test]
fn matvec_with_2d_grid_and_shared_tiles() {
    for (m, n) in [(1, 1), (8, 256), (33, 31), (100, 1000), (31, 4097)] {
        let a = data(m * n, 6);
        let x = data(n, 7);
        let mut y = vec![0.0f32; m];
        let mut args = [
            (&a[..]).into(),
            (&x[..]).into(),
            (&mut y[..]).into(),
            (m as i32).into(),
            (n as i32).into(),
        ];
        let grid = (blocks(n, 256), blocks(m, 8), 1);
        module().launch("matvec", grid, (32, 8, 1), 0, &mut args).unwrap();
        for (r, &got) in y.iter().enumerate() {
            let row = &a[r * n..(r + 1) * n];
            let want: f64 = row.iter().zip(&x).map(|(p, q)| f64::from(p * q)).sum();
            assert_close(f64::from(got), want, 1e-5, &format!("y[{r}], {m}×{n}"));
        }
    }
}

#[test]
fn dynamic_shared_memory() {
    const BLOCK: usize = 64;
    for n in SIZES {
        let x = data(n, 8);
        let mut y = vec![0.0f32; n];
        let mut args = [(&x[..]).into(), (&mut y[..]).into(), (n as i32).into()];
        let grid = (blocks(n, BLOCK), 1, 1);
        module()
            .launch("reverse_chunks", grid, (BLOCK as u32, 1, 1), BLOCK * 4, &mut args)
            .unwrap();
        let want: Vec<f32> = (0..n)
            .map(|i| {
                let from = i / BLOCK * BLOCK + BLOCK - 1 - i % BLOCK;
                x.get(from).copied().unwrap_or(-1.0)
            })
            .collect();
        assert_eq!(y, want, "n = {n}");
    }
}

#[test]
fn unwritten_shared_memory_reads_nan_in_every_block() {
    let mut out = vec![0.0f32; 3 * 32];
    let mut args = [(&mut out[..]).into()];
    module()
        .launch("read_unwritten_shared", (3, 1, 1), (32, 1, 1), 0, &mut args)
        .unwrap();
    for (i, v) in out.iter().enumerate() {
        let (block, thread) = (i / 32, i % 32);
        if thread == block {
            assert_eq!(*v, 1.0, "block {block} wrote its own element");
        } else {
            assert!(v.is_nan(), "block {block}, thread {thread}: {v}");
        }
    }
}

#[test]
fn early_return_after_the_last_barrier_is_fine() {
    for n in SIZES {
        let x0 = data(n, 9);
        let mut x = x0.clone();
        let mut args = [(&mut x[..]).into(), 3.0f32.into(), (n as i32).into()];
        module()
            .launch("scale_after_barrier", (blocks(n, 256), 1, 1), (256, 1, 1), 0, &mut args)
            .unwrap();
        let want: Vec<f32> = x0.iter().map(|v| v * 3.0).collect();
        assert_eq!(x, want, "n = {n}");
    }
}

#[test]
fn return_before_barrier_is_an_error() {
    let mut x = vec![0.0f32; 100];
    let mut args = [(&mut x[..]).into(), 100i32.into()];
    let message = execution_error(module().launch("return_before_barrier", (2, 1, 1), (64, 1, 1), 0, &mut args));
    assert!(
        message.starts_with("kernel `return_before_barrier`, block (1,0,0): "),
        "{message}"
    );
    assert!(message.contains("__syncthreads() on line"), "{message}");
    assert!(message.contains("has returned"), "{message}");
    assert_eq!(x, vec![0.0; 100], "outputs are not copied back after an error");
}

#[test]
fn different_barriers_are_an_error() {
    let mut x = vec![0.0f32; 64];
    let mut args = [(&mut x[..]).into()];
    let message = execution_error(module().launch("split_barriers", (1, 1, 1), (64, 1, 1), 0, &mut args));
    assert!(message.contains("different __syncthreads()"), "{message}");
    let lines = barrier_lines("split_barriers");
    for line in lines {
        assert!(message.contains(&format!("line {line}")), "{message}");
    }
}

/// Source lines (in the prelude + kernels text) of the barriers inside `kernel`.
fn barrier_lines(kernel: &str) -> Vec<usize> {
    let source = source();
    let start = source.find(&format!("void {kernel}(")).unwrap();
    let end = start + source[start..].find("FUSE_EMU_EXPORT").unwrap();
    source
        .lines()
        .enumerate()
        .filter(|(_, text)| text.contains("__syncthreads()"))
        .map(|(i, _)| i + 1)
        .filter(|&line| {
            let offset: usize = source.lines().take(line - 1).map(|l| l.len() + 1).sum();
            (start..end).contains(&offset)
        })
        .collect()
}

#[test]
fn shuffle_against_barrier_deadlock_is_reported() {
    let mut x = [0.0f32; 32];
    let mut args = [(&mut x[..]).into()];
    let message = execution_error(module().launch("shuffle_deadlock", (1, 1, 1), (32, 1, 1), 0, &mut args));
    assert!(message.contains("no thread can make progress"), "{message}");
    assert!(message.contains("__shfl_xor_sync"), "{message}");
    assert!(message.contains("__syncthreads()"), "{message}");
}

#[test]
fn write_past_the_end_is_caught() {
    let mut x = vec![0.0f32; 100];
    let mut args = [(&mut x[..]).into()];
    let err = module()
        .launch("write_past_end", (1, 1, 1), (101, 1, 1), 0, &mut args)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel `write_past_end` wrote 4 bytes past the end of argument 0 (f32*, 100 elements)"
    );
}

#[test]
fn warp_shuffles_votes_and_integer_atomics() {
    let input: Vec<i32> = (0..32).map(|i| i * 10 + 1).collect();
    let mut out = vec![0i32; 32 * 4];
    let mut dout = vec![0.0f64; 32];
    let mut votes = vec![0u32; 5];
    let mut args = [
        (&input[..]).into(),
        (&mut out[..]).into(),
        (&mut dout[..]).into(),
        (&mut votes[..]).into(),
    ];
    module()
        .launch("warp_ops", (1, 1, 1), (32, 1, 1), 0, &mut args)
        .unwrap();
    for lane in 0..32usize {
        let group16 = lane / 16 * 16;
        let idx = input[group16 + 3];
        let up = if lane % 16 >= 2 { input[lane - 2] } else { input[lane] };
        let xor = input[lane ^ 5];
        let down = if lane % 8 == 0 { input[lane + 7] } else { input[lane] };
        assert_eq!(out[lane * 4..lane * 4 + 4], [idx, up, xor, down], "lane {lane}");
        assert_eq!(dout[lane], f64::from(input[31 - lane]) * 0.5);
    }
    let ballot = (0..32).filter(|&l| input[l] % 3 == 0).fold(0u32, |b, l| b | 1 << l);
    assert_eq!(votes, [ballot, 1, 0, 7, 1]);
}

#[test]
fn ucontext_fibers_give_the_same_results() {
    let module = ucontext_module();
    let n = 4097;
    let x = data(n, 10);
    let mut sum = [0.0f32];
    let mut args = [(&x[..]).into(), (&mut sum[..]).into(), (n as i32).into()];
    module
        .launch("sum_f32", (blocks(n, 256), 1, 1), (256, 1, 1), 0, &mut args)
        .unwrap();
    let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
    assert_close(f64::from(sum[0]), want, 1e-5, "ucontext sum");

    let mut y = vec![0.0f32; 100];
    let mut args = [(&mut y[..]).into(), 100i32.into()];
    let message = execution_error(module.launch("return_before_barrier", (2, 1, 1), (64, 1, 1), 0, &mut args));
    assert!(message.contains("block (1,0,0)"), "{message}");
}

#[test]
fn one_and_several_workers_agree() {
    let n = 4097;
    let x: Vec<f64> = data(n, 11).iter().map(|&v| f64::from(v)).collect();
    let mut sums = Vec::new();
    for workers in [1, 3] {
        let options = EmulateOptions {
            workers,
            ..EmulateOptions::default()
        };
        let module = EmulatedModule::compile_with(&source(), &options).unwrap();
        let mut sum = [0.0f64];
        let mut args = [(&x[..]).into(), (&mut sum[..]).into(), (n as i32).into()];
        module
            .launch("sum_f64", (blocks(n, 16), 1, 1), (16, 1, 1), 0, &mut args)
            .unwrap();
        sums.push(sum[0]);
    }
    assert_close(sums[0], sums[1], 1e-12, "1 vs 3 workers");
}

#[test]
fn unknown_kernel_lists_the_exported_ones() {
    let err = module().launch("nope", (1, 1, 1), (1, 1, 1), 0, &mut []).unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("no kernel `nope` in the module"), "{message}");
    assert!(message.contains("vadd, sum_f32, sum_f64"), "{message}");
}

#[test]
fn argument_types_are_checked() {
    let x = [0.0f32; 4];
    let y = [0.0f32; 4];
    let z = [0.0f32; 4];
    // A read-only slice for the output parameter.
    let mut args = [(&x[..]).into(), (&y[..]).into(), (&z[..]).into(), 4i32.into()];
    let err = module().launch("vadd", (1, 1, 1), (4, 1, 1), 0, &mut args).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel `vadd` takes (const f32*,const f32*,f32*,i32) but was given \
         (const f32*,const f32*,const f32*,i32)"
    );
    let mut args: [KernelArg; 1] = [4u32.into()];
    let err = module().launch("vadd", (1, 1, 1), (4, 1, 1), 0, &mut args).unwrap_err();
    assert!(matches!(err, EmulateError::Arguments { .. }), "{err}");
}

#[test]
fn launch_limits_are_checked() {
    let mut out = [0.0f32; 32];
    let mut args = [(&mut out[..]).into()];
    let err = module()
        .launch("read_unwritten_shared", (1, 1, 1), (1025, 1, 1), 0, &mut args)
        .unwrap_err();
    assert!(matches!(err, EmulateError::InvalidLaunch { .. }), "{err}");
    let err = module()
        .launch("read_unwritten_shared", (1, 1, 1), (32, 1, 1), 1 << 20, &mut args)
        .unwrap_err();
    assert!(err.to_string().contains("dynamic shared memory"), "{err}");
}

#[test]
fn compile_error_carries_the_compiler_message() {
    let source = "extern \"C\" __global__ void broken(float* x) {\n  x[0] = undefined_name;\n}\n";
    match EmulatedModule::compile(source) {
        Err(EmulateError::Compile { message, .. }) => {
            assert!(message.contains("undefined_name"), "{message}");
            assert!(message.contains(":2:"), "line of the error: {message}");
        }
        Err(other) => panic!("expected a compile error, got {other}"),
        Ok(_) => panic!("expected a compile error"),
    }
}
