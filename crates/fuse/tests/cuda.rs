//! `Backend::Cuda`: named like the CLI's backend; without a GPU, compiling for it is an
//! `Error::Cuda` saying so (never a panic); on a GPU, behind `FUSE_TEST_CUDA=1`, the script API
//! and a lazy session on it match the reference.

mod gpu;

use fuse::{Backend, Error, Inputs, Script, Session};
use gpu::gpu_tests_on;

const BICGK: &str = "
precision: f64
sizes: {m: 67, n: 45}
inputs: {A: [m, n], p: [n], r: [m]}
outputs: [q, s]
calls:
  - q = dgemv(A, p)
  - s = dgemtv(A, r)
";

#[test]
fn cuda_backends_are_named_by_device() {
    assert_eq!("cuda".parse::<Backend>().unwrap(), Backend::Cuda { device: 0 });
    assert_eq!("cuda:3".parse::<Backend>().unwrap(), Backend::Cuda { device: 3 });
    assert!("cuda:x".parse::<Backend>().is_err());
    assert_eq!(Backend::Cuda { device: 0 }.to_string(), "cuda");
    assert_eq!(Backend::Cuda { device: 2 }.to_string(), "cuda:2");
    assert_eq!(Backend::Cuda { device: 2 }.name(), "cuda");
    assert!(matches!(Backend::detect(), Backend::Cpu | Backend::Cuda { device: 0 }));
}

fn inputs() -> Inputs {
    let a: Vec<f64> = (0..67 * 45).map(|k| ((k * 7919) % 201) as f64 / 100.0 - 1.0).collect();
    let p: Vec<f64> = (0..45).map(|k| k as f64 / 45.0).collect();
    let r: Vec<f64> = (0..67).map(|k| 1.0 - k as f64 / 67.0).collect();
    Inputs::new()
        .matrix("A", 67, 45, a)
        .and_then(|i| i.vector("p", p))
        .and_then(|i| i.vector("r", r))
        .unwrap()
}

#[test]
fn without_a_gpu_compiling_for_cuda_says_so() {
    if fuse_cuda::DeviceInfo::query(0).is_ok() {
        eprintln!("without_a_gpu_compiling_for_cuda_says_so: skipped — this machine has a GPU");
        return;
    }
    let script = Script::from_str("bicgk.yaml", BICGK).unwrap();
    let err = script.compile(&Backend::Cuda { device: 0 }, &[]).unwrap_err();
    let Error::Cuda(cuda) = &err else { panic!("{err:?}") };
    assert!(cuda.is_unavailable(), "{err}");
    assert!(err.to_string().starts_with("no NVIDIA GPU driver here"), "{err}");
}

#[test]
fn on_a_gpu_scripts_and_sessions_match_the_reference() {
    if !gpu_tests_on("on_a_gpu_scripts_and_sessions_match_the_reference") {
        return;
    }
    let script = Script::from_str("bicgk.yaml", BICGK).unwrap();
    let want = script
        .compile(&Backend::Reference, &[])
        .unwrap()
        .run(&inputs())
        .unwrap();
    let got = script
        .compile(&Backend::Cuda { device: 0 }, &[])
        .unwrap()
        .run(&inputs())
        .unwrap();
    for name in ["q", "s"] {
        let (w, g) = (want.get::<f64>(name).unwrap(), got.get::<f64>(name).unwrap());
        let error = w.iter().zip(g.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(error < 1e-12, "{name}: {error}");
    }
    let s = Session::<f64>::new(Backend::Cuda { device: 0 }).unwrap();
    let a = s.matrix(2, 2, vec![4.0, 1.0, 2.0, 3.0]).unwrap();
    let p = s.vector(vec![1.0, 1.0]).unwrap();
    let q = s.dgemv(&a, &p).unwrap();
    assert_eq!(s.read(&q).unwrap(), [5.0, 5.0]);
}

/// A program's runs go round the same pool buffers, so from the third on a set a plan of
/// several steps (BiCGK: two zero fills and a launch) may replay a CUDA graph; a session's
/// flushes meet new buffers and run step by step. Every run, on new inputs, matches the
/// reference either way.
#[test]
fn on_a_gpu_repeated_runs_stay_right_whichever_way_they_go() {
    if !gpu_tests_on("on_a_gpu_repeated_runs_stay_right_whichever_way_they_go") {
        return;
    }
    let script = Script::from_str("bicgk.yaml", BICGK).unwrap();
    let reference = script.compile(&Backend::Reference, &[]).unwrap();
    let cuda = script.compile(&Backend::Cuda { device: 0 }, &[]).unwrap();
    let s = Session::<f64>::new(Backend::Cuda { device: 0 }).unwrap();
    let a = s.matrix(2, 3, vec![4.0, 1.0, 2.0, 3.0, -1.0, 0.5]).unwrap();
    for run in 0..8 {
        let scale = 1.0 + run as f64;
        let p: Vec<f64> = (0..45).map(|k| scale * k as f64 / 45.0).collect();
        let r: Vec<f64> = (0..67).map(|k| scale - k as f64 / 67.0).collect();
        let inputs = inputs().vector("p", p).and_then(|i| i.vector("r", r)).unwrap();
        let (want, got) = (reference.run(&inputs).unwrap(), cuda.run(&inputs).unwrap());
        for name in ["q", "s"] {
            let (w, g) = (want.get::<f64>(name).unwrap(), got.get::<f64>(name).unwrap());
            let error = w.iter().zip(g.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(error < 1e-12 * scale, "run {run}, {name}: {error}");
        }
        let x = s.vector(vec![scale, 1.0, -scale]).unwrap();
        let y = s.vector(vec![1.0, scale]).unwrap();
        let (ax, aty) = (s.dgemv(&a, &x).unwrap(), s.dgemtv(&a, &y).unwrap());
        assert_eq!(
            s.read(&ax).unwrap(),
            [2.0 * scale + 1.0, 2.5 * scale - 1.0],
            "run {run}"
        );
        assert_eq!(
            s.read(&aty).unwrap(),
            [4.0 + 3.0 * scale, 1.0 - scale, 2.0 + 0.5 * scale],
            "run {run}"
        );
    }
}

#[test]
fn exchanging_gpu_memory_needs_a_session_on_the_gpu() {
    let s = Session::<f32>::new(Backend::Cpu).unwrap();
    let x = s.vector(vec![1.0, 2.0]).unwrap();
    let err = s.to_device(&x).unwrap_err();
    assert!(matches!(err, Error::NotOnGpu { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "to_device needs a session on the CUDA backend; this one runs on cpu"
    );
}

/// cudarc memory in, cudarc memory out: a matrix made on the GPU by the caller is used without
/// a copy, the result comes back as device memory, and nothing but the result's read crosses.
#[test]
fn on_a_gpu_device_memory_goes_in_and_out_without_the_host() {
    if !gpu_tests_on("on_a_gpu_device_memory_goes_in_and_out_without_the_host") {
        return;
    }
    let (m, n) = (67, 45);
    let a = awkward_matrix(m, n);
    let p: Vec<f32> = (0..n).map(|k| k as f32 / n as f32).collect();
    let stream = cudarc::driver::CudaContext::new(0).unwrap().new_stream().unwrap();
    let (a_dev, p_dev) = (stream.clone_htod(&a).unwrap(), stream.clone_htod(&p).unwrap());
    let s = Session::<f32>::new(Backend::Cuda { device: 0 }).unwrap();
    let err = s
        .matrix_from_device(m, n + 1, stream.clone_htod(&a).unwrap())
        .unwrap_err();
    assert!(matches!(err, Error::DataLength { .. }), "{err}");
    let a_handle = s.matrix_from_device(m, n, a_dev).unwrap();
    let p_handle = s.vector_from_device(p_dev).unwrap();
    let q = s.sgemv(&a_handle, &p_handle).unwrap();
    let q_dev = s.to_device(&q).unwrap();
    assert_eq!(s.stats().to_device + s.stats().from_device, 0, "{:?}", s.stats());
    let got = stream.clone_dtoh(&q_dev).unwrap();
    for i in 0..m {
        let want: f64 = (0..n).map(|j| a[i * n + j] as f64 * p[j] as f64).sum();
        assert!(
            (got[i] as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "q[{i}]: {} vs {want}",
            got[i]
        );
    }
}

/// A distributed session of one rank on the GPU: its collectives go through NCCL where libnccl
/// loads (else through the host, saying why), and after the first flush only the new vector
/// goes up and only the values read come down — the matrix stays on the GPU.
#[test]
fn on_a_gpu_a_distributed_session_keeps_its_rows_there_and_sums_through_nccl() {
    if !gpu_tests_on("on_a_gpu_a_distributed_session_keeps_its_rows_there_and_sums_through_nccl") {
        return;
    }
    let (m, n) = (67, 45);
    let a = awkward_matrix(m, n);
    let vector =
        |len: usize, seed: usize| -> Vec<f32> { (0..len).map(|k| ((k * seed) % 17) as f32 / 8.0 - 1.0).collect() };
    let outcome = fuse::distributed::LocalRanks::new(1).run(|comm| -> fuse::Result<_> {
        let s = Session::<f32>::distributed(comm, Backend::Cuda { device: 0 })?;
        let a_rows = s.matrix_rows(m, n, a.clone())?;
        let mut sums = Vec::new();
        let mut moved = Vec::new();
        for seed in [3, 5] {
            let before = s.stats();
            let r = s.vector_rows(m, vector(m, seed))?;
            let t = s.sgemtv(&a_rows, &r)?;
            sums.push(s.read(&t)?);
            let step = s.stats().since(&before);
            moved.push((step.to_device, step.from_device));
        }
        Ok((sums, moved, s.collectives()))
    });
    let (sums, moved, collectives) = outcome.into_iter().next().unwrap().unwrap();
    let collectives = collectives.expect("a flush ran on the GPU");
    eprintln!("collectives: {collectives}");
    for (sum, seed) in sums.iter().zip([3, 5]) {
        let r = vector(m, seed);
        for j in 0..n {
            let want: f64 = (0..m).map(|i| a[i * n + j] as f64 * r[i] as f64).sum();
            assert!(
                (sum[j] as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                "t[{j}]: {} vs {want}",
                sum[j]
            );
        }
    }
    let (r_bytes, t_bytes) = ((m * 4) as u64, (n * 4) as u64);
    if collectives == "NCCL between GPUs" {
        assert_eq!(moved[1], (r_bytes, t_bytes), "only r up and t down");
    } else {
        assert!(collectives.starts_with("through the host"), "{collectives}");
        assert_eq!(
            moved[1],
            (r_bytes + t_bytes, 2 * t_bytes),
            "r and the summed t up, the partial t and t down"
        );
    }
}

/// An `m × n` f32 matrix of awkward values in [-1, 1], row by row.
fn awkward_matrix(m: usize, n: usize) -> Vec<f32> {
    (0..m * n).map(|k| ((k * 7919) % 201) as f32 / 100.0 - 1.0).collect()
}
