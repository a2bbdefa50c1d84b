"""The script API: every bundled sequence against numpy, sizes from shapes, out=, the
no-copy rule, and every error class."""

import gc
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fuseblas
from conftest import GPU, ROOT, SCRIPTS, backends, numpy_check, run_python

# Normwise relative error allowed against numpy's f64 result: f32 sums of up to 1001 terms.
TOLERANCE = {"float32": 2e-5, "float64": 1e-11}
MATRIX = {"m": 67, "n": 45}  # awkward: not multiples of a vector or a warp
VECTOR = {"n": 1001}


def twin(name, dtype):
    text = (SCRIPTS / f"{name}.yaml").read_text()
    return numpy_check.f64_twin(text) if dtype == "float64" else text


def random_inputs(text, dtype, rng):
    sizes = MATRIX if "[m, n]" in text else VECTOR
    arrays = {}
    for name, shape in numpy_check.inputs_of(text).items():
        if shape is None:
            arrays[name] = float(rng.uniform(-2, 2))
        else:
            arrays[name] = rng.uniform(-1, 1, [sizes[s] for s in shape]).astype(dtype)
    return arrays


def relative_error(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)


SEQUENCES = sorted(p.stem for p in SCRIPTS.glob("*.yaml"))
# The emulated GPU compiles each program with the host C++ compiler: three sequences cover
# its strip, whole-row and map kernels.
EMULATED = {"bicgk", "atax", "waxpby"}


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", SEQUENCES)
def test_every_sequence_matches_numpy(name, dtype, backend):
    if backend == "emulate" and name not in EMULATED:
        pytest.skip("the emulated backend runs a sample of the sequences")
    text = twin(name, dtype)
    program = fuseblas.compile(text, backend=backend)
    arrays = random_inputs(text, dtype, np.random.default_rng(7))
    out = program(**arrays)
    want = numpy_check.expected(name, {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()})
    assert list(out) == list(program.outputs)
    for key, value in want.items():
        assert np.asarray(out[key]).dtype == dtype or isinstance(out[key], float)
        assert relative_error(out[key], value) < TOLERANCE[dtype], key


def test_sizes_come_from_the_arrays_and_are_checked_against_the_given_ones():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu")
    rng = np.random.default_rng(1)
    for m, n in [(1, 300), (300, 1), (257, 513)]:
        A = rng.standard_normal((m, n), dtype=np.float32)
        p, r = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(m, dtype=np.float32)
        out = program(A=A, p=p, r=r)
        assert relative_error(out["q"], A.astype(np.float64) @ p) < 1e-5
    fixed = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu", sizes={"m": 4})
    with pytest.raises(fuseblas.InputError, match=r"size `m` disagrees: sizes=\{'m': 4\} gives m = 4, but argument `A`"):
        fixed(A=np.zeros((3, 2), np.float32), p=np.zeros(2, np.float32), r=np.zeros(3, np.float32))
    for _ in range(2):  # a call's shapes are remembered only where they bound
        with pytest.raises(fuseblas.InputError, match=r"size `n` disagrees.*argument `A`.*argument `p`"):
            program(A=np.zeros((3, 2), np.float32), p=np.zeros(5, np.float32), r=np.zeros(3, np.float32))
    # The shapes of the call before: its program again; new shapes: theirs.
    for m, n in [(257, 513), (257, 513), (5, 7)]:
        A = rng.standard_normal((m, n), dtype=np.float32)
        p, r = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(m, dtype=np.float32)
        out = program(A=A, p=p, r=r)
        assert relative_error(out["s"], A.astype(np.float64).T @ r) < 1e-5


def test_out_arrays_receive_the_outputs():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu")
    A = np.arange(12, dtype=np.float32).reshape(3, 4)
    p, r = np.ones(4, np.float32), np.ones(3, np.float32)
    q = np.full(3, np.nan, np.float32)
    out = program(A=A, p=p, r=r, out={"q": q})
    assert out["q"] is q and np.array_equal(q, A.sum(axis=1))
    with pytest.raises(fuseblas.InputError, match=r"output `q` needs an array of float32 \(3,\), the one given is a float64 array of shape \(3,\)"):
        program(A=A, p=p, r=r, out={"q": np.zeros(3)})
    with pytest.raises(fuseblas.InputError, match="no output `z`"):
        program(A=A, p=p, r=r, out={"z": q})


def test_arrays_of_the_scripts_dtype_are_read_in_place_and_outputs_handed_over():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu")
    A = np.random.default_rng(2).standard_normal((33, 17)).astype(np.float32)
    # What the package hands to the native run is the caller's array itself …
    assert program._prepare("A", A) is A
    # … and the native side reads the memory where numpy keeps it.
    assert fuseblas._core.view_address(A) == A.ctypes.data
    out = program(A=A, p=np.ones(17, np.float32), r=np.ones(33, np.float32))
    # Outputs own fuse's buffer: numpy did not allocate (or copy into) their memory.
    assert not out["q"].flags.owndata and type(out["q"].base).__name__ == "PySliceContainer"
    assert out["q"].flags.c_contiguous and out["q"].flags.writeable


class HostTensor:
    """Another library's array in host memory that speaks DLPack and nothing else (no
    ``__array__``): what a PyTorch CPU tensor or a JAX CPU array offers."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class DeviceTensor(HostTensor):
    """The same, on the second CUDA device (DLPack device type 2)."""

    def __dlpack_device__(self):
        return (2, 1)


def test_arrays_that_speak_dlpack_from_host_memory_are_read_in_place():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu")
    rng = np.random.default_rng(5)
    A = rng.standard_normal((67, 45)).astype(np.float32)
    p, r = rng.standard_normal(45).astype(np.float32), rng.standard_normal(67).astype(np.float32)
    prepared = program._prepare("A", HostTensor(A))
    assert fuseblas._core.view_address(prepared) == A.ctypes.data  # A's own memory: no copy
    out = program(A=HostTensor(A), p=HostTensor(p), r=r)
    A64 = A.astype(np.float64)
    for got, want in [(out["q"], A64 @ p), (out["s"], A64.T @ r)]:
        assert np.linalg.norm(got - want) <= TOLERANCE["float32"] * np.linalg.norm(want)
    session = fuseblas.Session(backend="cpu")
    q = np.asarray(session.gemv(session.array(HostTensor(A)), session.array(p)))
    assert np.linalg.norm(q - A64 @ p) <= TOLERANCE["float32"] * np.linalg.norm(A64 @ p)


def test_gpu_arrays_given_to_a_program_elsewhere_are_refused_with_both_devices_named():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu")
    A = np.ones((4, 3), np.float32)
    with pytest.raises(fuseblas.InputError, match=r'input `A` is in the memory of cuda:1, but this program runs on cpu: .*backend="cuda:1"'):
        program(A=DeviceTensor(A), p=np.ones(3, np.float32), r=np.ones(4, np.float32))
    with pytest.raises(fuseblas.InputError, match=r'the array is in the memory of cuda:1, but this session runs on cpu: .*backend="cuda:1"'):
        fuseblas.Session(backend="cpu").array(DeviceTensor(A))
    with pytest.raises(fuseblas.InputError, match=r"the array is on cuda:1, which fuseblas does not read: pass a host copy"):
        fuseblas.Session(backend="cpu").array(DeviceTensor(A), dtype=np.float64)


def test_other_arrays_are_converted_once_by_a_documented_rule_or_refused():
    f64 = fuseblas.compile(numpy_check.f64_twin((SCRIPTS / "bicgk.yaml").read_text()), backend="cpu")
    f32 = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu")
    A = np.arange(24, dtype=np.float64).reshape(4, 6)
    strided = A[:, ::2]  # not contiguous: one copy
    converted = f64._prepare("A", strided)
    assert converted is not strided and converted.flags.c_contiguous and np.array_equal(converted, strided)
    assert not np.shares_memory(converted, strided)
    assert f64._prepare("A", np.asfortranarray(A)).flags.c_contiguous
    assert f64._prepare("A", A.astype(np.int32)).dtype == np.float64  # lossless
    assert f64._prepare("p", [1, 2, 3]).dtype == np.float64
    with pytest.raises(fuseblas.InputError, match=r"input `A` is float64 but bicgk computes in float32"):
        f32(A=A, p=np.ones(6, np.float32), r=np.ones(4, np.float32))
    out = f64(A=strided, p=[1.0, 1.0, 1.0], r=np.ones(4))
    assert np.allclose(out["q"], strided.sum(axis=1))


def test_a_malformed_script_is_a_script_error_with_its_position():
    with pytest.raises(fuseblas.ScriptError) as caught:
        fuseblas.compile("sizes: {n: 4}\ninputs: {x: [n]}\noutputs: [y]\ncalls:\n  - y = sfoo(x)\n", backend="cpu")
    err = caught.value
    assert isinstance(err, ValueError)
    assert (err.file, err.line, err.column) == ("<script>", 5, 9)
    assert str(err) == "<script>:5:9: unknown function `sfoo`: did you mean `sdot`?"
    with pytest.raises(fuseblas.ScriptError, match="no-such.yaml"):
        fuseblas.compile("no-such.yaml")


def test_wrong_arrays_and_names_are_value_errors_that_say_what_is_wrong():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu", sizes={"m": 3, "n": 2})
    A, p, r = np.zeros((3, 2), np.float32), np.zeros(2, np.float32), np.zeros(3, np.float32)
    cases = [
        (dict(A=A, p=p), "input `r` has no value"),
        (dict(A=A, p=p, r=r, x=r), "`x` is not an input of bicgk"),
        (dict(A=A, p=np.zeros(3, np.float32), r=r), r"size `n` disagrees"),
        (dict(A=A, p=p, r=np.zeros((3, 1), np.float32)), r"input `r` has shape \[3, 1\]"),
    ]
    for arrays, message in cases:
        with pytest.raises(ValueError, match=message):
            program(**arrays)
    with pytest.raises(fuseblas.InputError, match="unknown backend `gpu`"):
        fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="gpu")
    with pytest.raises(fuseblas.InputError, match="sizes are positive integers"):
        fuseblas.compile(SCRIPTS / "bicgk.yaml", sizes={"m": 0})


@pytest.mark.skipif(GPU, reason="this machine has a GPU")
def test_asking_for_the_gpu_without_one_is_a_clear_error():
    with pytest.raises(fuseblas.NoDeviceError):
        fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cuda")
    backend, why = fuseblas.default_backend()
    assert backend == "cpu" and why


def test_a_run_larger_than_memory_is_a_memory_error():
    # Under a 1 GiB address-space limit, the outputs of a 12000² GEMVER (B alone 576 MB,
    # beside A) cannot be had.
    result = run_python(
        """
        import resource, numpy as np, fuseblas, sys
        sys.path.insert(0, %r)
        A = np.zeros((12000, 12000), np.float32)
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        v = np.zeros(12000, np.float32)
        prog = fuseblas.compile(%r, backend="cpu")
        try:
            prog(A=A, u1=v, v1=v, u2=v, v2=v, y=v, z=v, alpha=1.0, beta=1.0)
        except MemoryError as e:
            print("MemoryError:", type(e).__name__, e)
        """
        % (str(ROOT), str(SCRIPTS / "gemver.yaml")),
        timeout=120,
    )
    assert "MemoryError: OutOfMemoryError not enough host memory" in result.stdout, result.stderr


def test_the_gil_is_released_while_a_run_computes():
    # The reference interpreter on a 2000² GEMVER takes a good fraction of a second; a Python
    # thread that wakes every millisecond must keep waking meanwhile.
    program = fuseblas.compile(SCRIPTS / "gemver.yaml", backend="reference")
    rng = np.random.default_rng(3)
    n = 2000
    arrays = {k: rng.standard_normal(n).astype(np.float32) for k in ["u1", "v1", "u2", "v2", "y", "z"]}
    arrays.update(A=rng.standard_normal((n, n)).astype(np.float32), alpha=1.5, beta=0.5)
    program(**arrays)  # compiled
    gaps, running = [], threading.Event()

    def ticker():
        last = time.perf_counter()
        while running.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    running.set()
    thread = threading.Thread(target=ticker)
    thread.start()
    started = time.perf_counter()
    program(**arrays)
    took = time.perf_counter() - started
    running.clear()
    thread.join()
    assert took > 0.05, "the run is too short to tell"
    assert max(gaps) < took / 2, (max(gaps), took)


def test_two_threads_run_two_programs_at_once():
    program = fuseblas.compile(SCRIPTS / "atax.yaml", backend="cpu", threads=1)
    rng = np.random.default_rng(4)
    inputs = [dict(A=rng.standard_normal((301, 203)).astype(np.float32), x=rng.standard_normal(203).astype(np.float32)) for _ in range(2)]
    results = [None, None]

    def work(i):
        for _ in range(50):
            results[i] = program(**inputs[i])["y"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(2):
        A, x = (inputs[i][k].astype(np.float64) for k in "Ax")
        assert relative_error(results[i], A.T @ (A @ x)) < 1e-5


def interruptible_python(code):
    """A Python child running `code` that takes Ctrl-C as a terminal's user would send it.

    A shell starts background jobs with SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler, so the child gets SIGINT's default back before it starts."""
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_interrupts_a_long_compile():
    # The emulated backend compiles GEMVER's kernels with the host C++ compiler: seconds.
    if "emulate" not in backends():
        pytest.skip("no C++ compiler for the emulated backend")
    child = interruptible_python(
        f"import fuseblas; print('start', flush=True); fuseblas.compile({str(SCRIPTS / 'gemver.yaml')!r}, backend='emulate', sizes={{'m': 100, 'n': 100}})"
    )
    assert child.stdout.readline().strip() == "start"
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    started = time.perf_counter()
    _, stderr = child.communicate(timeout=60)
    assert "KeyboardInterrupt" in stderr
    assert time.perf_counter() - started < 2.0


def test_ctrl_c_interrupts_a_long_run_of_the_reference_backend():
    # The child times one whole run, then starts another and is interrupted 0.2 s into it.
    code = f"""
import time, numpy as np, fuseblas
program = fuseblas.compile({str(SCRIPTS / 'gemver.yaml')!r}, backend='reference')
rng = np.random.default_rng(0)
n = 6000
inputs = dict(A=rng.random((n, n), dtype=np.float32), alpha=1.5, beta=0.5,
              **{{k: rng.random(n, dtype=np.float32) for k in ('u1', 'v1', 'u2', 'v2', 'y', 'z')}})
started = time.perf_counter()
program(**inputs)
print(time.perf_counter() - started, flush=True)
program(**inputs)
print('finished', flush=True)
"""
    child = interruptible_python(code)
    whole = float(child.stdout.readline())
    time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    interrupted = time.perf_counter()
    out, stderr = child.communicate(timeout=120)
    latency = time.perf_counter() - interrupted
    if whole < 1.0:
        pytest.skip(f"a run takes {whole:.2f} s here: too short to tell an interrupted run from a whole one")
    assert "KeyboardInterrupt" in stderr and "finished" not in out, stderr
    assert latency < min(0.5, whole / 2), (latency, whole)


def test_a_thousand_calls_leak_neither_references_nor_memory():
    program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu")
    A = np.random.default_rng(5).standard_normal((256, 256)).astype(np.float32)
    p, r = np.ones(256, np.float32), np.ones(256, np.float32)
    program(A=A, p=p, r=r)

    def resident():
        return int(pathlib.Path("/proc/self/statm").read_text().split()[1]) * 4096

    counts = [sys.getrefcount(x) for x in (A, p, r)]
    gc.collect()
    objects, before = len(gc.get_objects()), resident()
    for _ in range(1000):
        out = program(A=A, p=p, r=r)
    del out
    gc.collect()
    assert [sys.getrefcount(x) for x in (A, p, r)] == counts
    assert len(gc.get_objects()) - objects < 50
    # Each call returns 2 KiB of outputs: a leak of them or of the inputs' views would show.
    assert resident() - before < 4 << 20


def test_work_that_takes_long_says_what_it_is_on_the_fuseblas_logger(caplog):
    fuseblas._core._set_note_after_ms(0)  # every note at once, instead of after a second
    try:
        with caplog.at_level("INFO", logger="fuseblas"):
            program = fuseblas.compile(SCRIPTS / "bicgk.yaml", backend="cpu", sizes={"m": 33, "n": 17})
            s = fuseblas.Session(backend="cpu")
            np.asarray(s.gemv(s.array(np.ones((3, 2))), s.array(np.ones(2))))
    finally:
        fuseblas._core._set_note_after_ms(1000)
    notes = [r.getMessage() for r in caplog.records if r.name == "fuseblas"]
    assert any(n.startswith("compiling bicgk for cpu at m=33 n=17") for n in notes), notes
    assert any(n.startswith("a session flush on cpu is compiling or running") for n in notes), notes
    assert program.name == "bicgk"


@pytest.mark.parametrize("bench", ["python-peers.py", "python-overhead.py"])
def test_the_benchmarks_refuse_to_time_a_dev_build(bench):
    if fuseblas.build_profile != "dev":
        pytest.skip(f"fuseblas is a {fuseblas.build_profile} build here: the benchmarks would run")
    done = subprocess.run([sys.executable, str(ROOT / "benches" / bench)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "fuseblas here is a dev build" in done.stderr, done.stderr


def test_exiting_after_a_caught_ctrl_c_leaves_no_emulated_work_behind(tmp_path):
    # The interrupted run goes on on a worker, inside the emulated module, while the child ends
    # normally: exit must stop it first (it crashed with SIGSEGV), and no scratch folder of the
    # module may be left in the cache.
    if "emulate" not in backends():
        pytest.skip("no C++ compiler for the emulated backend")
    code = f"""
import time, numpy as np, fuseblas
program = fuseblas.compile({str(SCRIPTS / 'gemver.yaml')!r}, backend='emulate')
rng = np.random.default_rng(0)
n = 2000
inputs = dict(A=rng.random((n, n), dtype=np.float32), alpha=1.5, beta=0.5,
              **{{k: rng.random(n, dtype=np.float32) for k in ('u1', 'v1', 'u2', 'v2', 'y', 'z')}})
program(**inputs)
print('start', flush=True)
try:
    program(**inputs)
    print('finished', flush=True)
except KeyboardInterrupt:
    print('caught', flush=True)
"""
    cache = tmp_path / "cache"
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FUSE_CACHE_DIR": str(cache)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout.readline().strip() == "start", child.stderr.read()
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    out, stderr = child.communicate(timeout=120)
    if "finished" in out:
        pytest.skip("the run ended before the interrupt: too short to tell")
    assert "caught" in out and child.returncode == 0, (child.returncode, stderr)
    left = [p for p in cache.rglob(".scratch-*")]
    assert not left, left

