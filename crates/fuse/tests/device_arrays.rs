//! The script API on arrays in device memory: a program compiled for the emulated device runs
//! on arrays uploaded once, leaves its outputs there, gives its inputs back untouched, and
//! refuses arrays that do not fit with the error naming them; on a GPU (`FUSE_TEST_CUDA=1`) it
//! also runs on memory borrowed from another library, which stays that library's.

mod gpu;

use std::collections::BTreeMap;

use fuse::stages::fuse_core::reference::evaluate;
use fuse::stages::fuse_core::{ArrayView, DataView};
use fuse::{Backend, Compiled, DeviceArray, Error, HostArray, Script};
use gpu::gpu_tests_on;

/// The bundled BiCGK (f32) at 67 × 45 on `backend`.
fn bicgk(backend: &Backend) -> Compiled {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/bicgk.yaml");
    let script = Script::from_file(path).unwrap();
    script.compile(backend, &[("m", 67), ("n", 45)]).unwrap()
}

fn values(len: usize, seed: u64) -> Vec<f32> {
    (0..len as u64)
        .map(|k| ((k * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0)
        .collect()
}

fn view<'a>(dims: &[usize], data: &'a [f32]) -> ArrayView<'a> {
    ArrayView {
        dims: dims.to_vec(),
        data: DataView::F32(data),
    }
}

/// `A·p` and `Aᵀ·r` as the f64 reference evaluator computes them.
fn reference(compiled: &Compiled, a: &[f32], p: &[f32], r: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (m, n) = (r.len(), p.len());
    let inputs: BTreeMap<String, HostArray> = [("A", vec![m, n], a), ("p", vec![n], p), ("r", vec![m], r)]
        .into_iter()
        .map(|(name, dims, data)| (name.to_string(), view(&dims, data).to_owned()))
        .collect();
    let out = evaluate(compiled.program(), compiled.sizes(), &inputs).unwrap();
    (out["q"].to_f64(), out["s"].to_f64())
}

/// Within f32 rounding of sums of 67 terms.
fn assert_close(got: &HostArray, want: &[f64], what: &str) {
    assert_eq!(got.dims, [want.len()], "{what}");
    for (i, (g, w)) in got.to_f64().iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
fn a_program_on_the_emulated_device_runs_on_arrays_left_there() {
    let (m, n) = (67, 45);
    let compiled = bicgk(&Backend::Emulate);
    let (a, p, r) = (values(m * n, 1), values(n, 2), values(m, 3));
    let (q_want, s_want) = reference(&compiled, &a, &p, &r);
    let mut inputs = BTreeMap::new();
    for (name, dims, data) in [("A", vec![m, n], &a), ("p", vec![n], &p), ("r", vec![m], &r)] {
        inputs.insert(name.to_string(), compiled.upload(view(&dims, data)).unwrap());
    }
    for _ in 0..2 {
        let (outputs, _) = compiled.run_on_device(&mut inputs).unwrap();
        assert_eq!(inputs.len(), 3, "the inputs come back");
        assert_close(&outputs["q"].to_host().unwrap(), &q_want, "q");
        assert_close(&outputs["s"].to_host().unwrap(), &s_want, "s");
    }
    let back: HostArray = inputs["p"].to_host().unwrap();
    assert_eq!(
        back.to_f64(),
        p.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        "an input is read, never written"
    );
}

#[test]
fn arrays_that_do_not_fit_are_refused_by_name() {
    let (m, n) = (67, 45);
    let compiled = bicgk(&Backend::Emulate);
    let upload = |dims: Vec<usize>| compiled.upload(view(&dims, &values(dims.iter().product(), 4))).unwrap();
    let mut inputs: BTreeMap<String, DeviceArray> = [("A", upload(vec![m, n])), ("p", upload(vec![n]))]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let err = compiled.run_on_device(&mut inputs).unwrap_err().to_string();
    assert!(err.contains("input `r` has no value"), "{err}");
    inputs.insert("r".into(), upload(vec![m + 1]));
    let err = compiled.run_on_device(&mut inputs).unwrap_err().to_string();
    assert!(
        err.contains("input `r` has shape [68]") && err.contains("[67]"),
        "{err}"
    );
    assert_eq!(inputs.len(), 3, "a refused run gives every input back");
    inputs.insert("pp".into(), upload(vec![n]));
    let err = compiled.run_on_device(&mut inputs).unwrap_err().to_string();
    assert!(err.contains("`pp` is not an input of bicgk"), "{err}");
    inputs.remove("pp");
    let on_cpu = bicgk(&Backend::Cpu);
    let err = on_cpu.run_on_device(&mut inputs).unwrap_err();
    assert!(matches!(err, Error::NotOnGpu { .. }), "{err}");
    assert!(format!("{:?}", inputs["A"]).contains("f32 [67, 45] on the emulated device"));
}

/// Memory another library allocated on the GPU (cudarc here; PyTorch's or CuPy's through
/// DLPack in fuseblas) is read in place by the script API and stays its owner's: after fuse
/// has dropped its arrays, the owner's buffers are intact and still allocated.
#[test]
fn on_a_gpu_a_script_runs_on_borrowed_device_memory() {
    if !gpu_tests_on("on_a_gpu_a_script_runs_on_borrowed_device_memory") {
        return;
    }
    use fuse::cudarc::driver::DevicePtr;
    let (m, n) = (67, 45);
    let (a, p, r) = (values(m * n, 1), values(n, 2), values(m, 3));
    let stream = fuse::cudarc::driver::CudaContext::new(0).unwrap().new_stream().unwrap();
    let owned = [
        stream.clone_htod(&a).unwrap(),
        stream.clone_htod(&p).unwrap(),
        stream.clone_htod(&r).unwrap(),
    ];
    stream.synchronize().unwrap();
    let compiled = bicgk(&Backend::Cuda { device: 0 });
    let mut inputs = BTreeMap::new();
    for ((name, dims), slice) in [("A", vec![m, n]), ("p", vec![n]), ("r", vec![m])]
        .into_iter()
        .zip(&owned)
    {
        let (pointer, _record) = slice.device_ptr(&stream);
        // SAFETY: `owned` outlives `inputs` and nothing writes it meanwhile; synchronised above.
        let array = unsafe { DeviceArray::borrow_cuda(0, pointer, dims, fuse::Precision::F32) }.unwrap();
        inputs.insert(name.to_string(), array);
    }
    let (outputs, _) = compiled.run_on_device(&mut inputs).unwrap();
    let (q_want, s_want) = reference(&compiled, &a, &p, &r);
    assert_close(&outputs["q"].to_host().unwrap(), &q_want, "q");
    assert_close(&outputs["s"].to_host().unwrap(), &s_want, "s");
    drop((inputs, outputs));
    assert_eq!(stream.clone_dtoh(&owned[0]).unwrap(), a, "the owner's matrix is intact");
}

/// A session on a device takes a device array by a copy made there (values never change) and
/// gives a value back as one, without a trip through the host; an array of another precision
/// or shape, or a session on the host, is refused.
#[test]
fn a_session_on_a_device_takes_and_gives_device_arrays() {
    let s = fuse::Session::<f64>::new(Backend::Emulate).unwrap();
    let (m, n) = (5, 3);
    let a: Vec<f64> = (0..m * n).map(|k| k as f64 - 4.5).collect();
    let a_value = s.matrix(m, n, a.clone()).unwrap();
    let on_device = s.to_device_array(&a_value).unwrap();
    assert_eq!(on_device.dims(), [m, n]);
    let before = s.stats();
    let again = match s.array_from_device(&on_device).unwrap() {
        fuse::AnyHandle::Matrix(matrix) => matrix,
        other => panic!("a {m}×{n} array gave {other:?}"),
    };
    let q = s.dgemv(&again, &s.vector(vec![1.0; n]).unwrap()).unwrap();
    let got = s.read(&q).unwrap();
    let step = s.stats().since(&before);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, a[i * n..(i + 1) * n].iter().sum::<f64>(), "q[{i}]");
    }
    assert_eq!(step.to_device, (n * 8) as u64, "only the vector went up");
    let err = fuse::Session::<f32>::new(Backend::Emulate)
        .unwrap()
        .array_from_device(&on_device)
        .unwrap_err();
    assert!(err.to_string().contains("holds f64 values, not f32"), "{err}");
    let err = fuse::Session::<f64>::new(Backend::Cpu)
        .unwrap()
        .array_from_device(&on_device)
        .unwrap_err();
    assert!(matches!(err, Error::NotOnGpu { .. }), "{err}");
}
