//! `Backend::Cuda`: named like the CLI's backend; without a GPU, compiling for it is an
//! `Error::Cuda` saying so (never a panic); on a GPU, behind `FUSE_TEST_CUDA=1`, the script API
//! and a lazy session on it match the reference.

use fuse::{Backend, Error, Inputs, Script, Session};

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
    if std::env::var("FUSE_TEST_CUDA").map_or(true, |v| v != "1") {
        eprintln!("on_a_gpu_scripts_and_sessions_match_the_reference: skipped — set FUSE_TEST_CUDA=1 on a machine with an NVIDIA GPU");
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
