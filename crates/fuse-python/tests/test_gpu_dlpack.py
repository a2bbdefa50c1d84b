"""GPU arrays through DLPack (FUSE_TEST_CUDA=1 on a machine with an NVIDIA GPU and PyTorch):
read in place by a program compiled for the GPU, outputs handed back without a copy,
every bundled BLAS-2 sequence against numpy at awkward sizes, and no growth over a thousand
calls."""

import gc

import numpy as np
import pytest

import fuseblas
from conftest import GPU, SCRIPTS, numpy_check
from test_program import TOLERANCE, random_inputs, relative_error, twin

pytestmark = pytest.mark.skipif(not GPU, reason="set FUSE_TEST_CUDA=1 on a machine with an NVIDIA GPU")

torch = pytest.importorskip("torch") if GPU else None


def cuda(array):
    return torch.from_numpy(np.ascontiguousarray(array)).cuda()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["bicgk", "atax", "gesummv", "sgemvt", "gemver", "waxpby"])
def test_gpu_arrays_are_read_in_place_and_outputs_come_back_through_dlpack(name, dtype):
    text = twin(name, dtype)
    program = fuseblas.compile(text, backend="cuda")
    arrays = random_inputs(text, dtype, np.random.default_rng(11))
    out = program(**{k: cuda(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()})
    want = numpy_check.expected(name, {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()})
    for key, value in want.items():
        got = out[key]
        if isinstance(got, fuseblas.DeviceArray):
            tensor = torch.from_dlpack(got)
            assert tensor.data_ptr() == got.data_ptr, "handed over without a copy"
            got = tensor.cpu().numpy()
        assert relative_error(got, value) < TOLERANCE[dtype], f"{name} {dtype}: `{key}`"


def test_a_thousand_calls_leave_no_device_memory_behind():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cuda")
    A, p, r = cuda(np.ones((256, 256), np.float32)), cuda(np.ones(256, np.float32)), cuda(np.ones(256, np.float32))
    for _ in range(20):
        program(A=A, p=p, r=r)
    torch.cuda.synchronize()
    gc.collect()
    before = torch.cuda.mem_get_info()[0]
    for _ in range(1000):
        out = program(A=A, p=p, r=r)
        torch.from_dlpack(out["q"])
    gc.collect()
    after = torch.cuda.mem_get_info()[0]
    assert before - after < 16 << 20, f"{(before - after) >> 20} MiB more device memory in use"


def test_arrays_on_the_gpu_that_do_not_fit_are_refused():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cuda")
    A = cuda(np.ones((8, 6), np.float64))
    with pytest.raises(fuseblas.InputError, match="dtype"):
        program(A=A, p=np.ones(6, np.float32), r=np.ones(8, np.float32))
    strided = cuda(np.ones((8, 12), np.float32))[:, ::2]
    with pytest.raises(fuseblas.InputError, match="not C-contiguous"):
        program(A=strided, p=np.ones(6, np.float32), r=np.ones(8, np.float32))


def test_a_session_on_the_gpu_takes_and_gives_gpu_arrays():
    s = fuseblas.Session(backend="cuda")
    rng = np.random.default_rng(3)
    A, x = rng.standard_normal((257, 131)), rng.standard_normal(131)
    a_gpu = cuda(A)
    value = s.array(a_gpu)
    a_gpu.fill_(0.0)  # the session's value is a copy: the caller's array may change
    q = s.gemv(value, s.array(cuda(x)))
    q_out = torch.from_dlpack(s.to_device(q)).cpu().numpy()
    assert relative_error(q_out, A @ x) < TOLERANCE["float64"]
    before = s.stats()
    assert relative_error(np.asarray(s.gemv(value, s.array(cuda(x)))), A @ x) < TOLERANCE["float64"]
    step = {k: s.stats()[k] - before[k] for k in ("to_device", "from_device")}
    assert step == {"to_device": 0, "from_device": 257 * 8}, "A stays on the GPU; only q comes back"
