"""Hostile input from Python: data larger than memory, arrays resized by another thread, wrong
types, scalars that do not fit the precision. Each case that could crash the interpreter runs
in one of its own; the rest must end in a TypeError or an InputError that names the argument."""

import array
import math
import re
import textwrap

import numpy as np
import pytest

import fuseblas
from conftest import SCRIPTS, run_python

SCAL = """
name: scal
precision: {precision}
sizes: {{n: 4}}
inputs: {{a: scalar, x: [n]}}
outputs: [y, d]
calls:
  - y = {p}scal(a, x)
  - d = {p}dot(x, x)
"""


def scal(dtype, backend="cpu"):
    """y = a·x and d = x·x in `dtype`'s precision."""
    precision, prefix = ("f32", "s") if dtype == np.float32 else ("f64", "d")
    return fuseblas.compile(SCAL.format(precision=precision, p=prefix), backend=backend)


def out_of_memory(code, setup=""):
    """Runs `code` in an interpreter of its own (after `setup`, with `limit(extra)` capping the
    address space at what it uses now plus `extra` bytes); the printed outcome and stderr."""
    result = run_python(
        f"""
import resource, numpy as np, fuseblas
def limit(extra):
    pages = int(open("/proc/self/statm").read().split()[0])
    cap = pages * resource.getpagesize() + extra
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
{textwrap.dedent(setup)}
try:
{textwrap.indent(textwrap.dedent(code), "    ")}
    print("no error")
except MemoryError as e:
    print(type(e).__name__, e)
""",
        timeout=300,
    )
    return result.stdout.strip(), result.stderr


BIG = [
    "fuseblas.Session('cpu').array(np.broadcast_to(1.0, (100000, 100000)))",  # 80 GB
    "fuseblas.Session('cpu').array(np.broadcast_to(np.float32(1), 2**36))",  # 256 GiB
    "fuseblas.Session('cpu').array(np.broadcast_to(1, (100000, 100000)))",  # ints, converted
    "fuseblas.Session('cpu').array(np.broadcast_to(1.0, (100000, 100000)), dtype=np.float32)",
    f"fuseblas.compile({str(SCRIPTS / 'bicgk.yaml')!r}, backend='cpu')("
    "A=np.broadcast_to(np.float32(1), (100000, 100000)), p=np.ones(100000, np.float32), r=np.ones(100000, np.float32))",
]


@pytest.mark.parametrize("code", BIG)
def test_data_larger_than_memory_is_an_out_of_memory_error_not_an_abort(code):
    # Broadcast arrays take no memory; a copy of them takes more than the machine has.
    printed, stderr = out_of_memory(code)
    assert printed.startswith("OutOfMemoryError not enough host memory for "), (printed, stderr)
    assert "bytes" in printed and "available" in printed


def test_a_value_read_back_without_the_memory_is_an_out_of_memory_error():
    # 400 MB in the session; the address space then has room for less than its copy.
    printed, stderr = out_of_memory(
        "v.read()",
        setup="""
        s = fuseblas.Session('cpu')
        v = s.array(np.zeros(50_000_000))
        limit(200 << 20)
        """,
    )
    assert printed.startswith("OutOfMemoryError not enough host memory for a copy of a value of 50000000 elements")


def test_inputs_a_slow_backend_copies_without_the_memory_are_an_out_of_memory_error():
    # The reference backend runs on copies of the inputs (so that Ctrl-C abandons nothing
    # borrowed): 400 MB of them, where the address space has room for 200.
    printed, stderr = out_of_memory(
        "prog(a=2.0, x=x)",
        setup=f"""
        prog = fuseblas.compile({SCAL.format(precision="f64", p="d")!r}, backend='reference')
        x = np.zeros(50_000_000)
        limit(200 << 20)
        """,
    )
    assert printed.startswith("OutOfMemoryError not enough host memory for a copy of input `x` for the reference backend")


def test_a_slow_backend_run_larger_than_memory_is_refused_before_it_copies_anything(tmp_path):
    # A sparse file mapped as the input takes no memory; its copy would take half the memory
    # available, and the reference interpreter's f64 values twice that again. (The address
    # space is capped, so that a copy made anyway fails rather than fill the machine.)
    printed, stderr = out_of_memory(
        "prog(a=2.0, x=x)",
        setup=f"""
        available = int(next(l for l in open("/proc/meminfo") if l.startswith("MemAvailable")).split()[1]) * 1024
        x = np.memmap({str(tmp_path / "x")!r}, np.float32, "w+", shape=(available // 8 + 1,))
        prog = fuseblas.compile({SCAL.format(precision="f32", p="s")!r}, backend="reference")
        limit(1 << 30)
        """,
    )
    assert printed.startswith("OutOfMemoryError not enough host memory for a run of scal at n="), (printed, stderr)
    assert "on reference (the inputs copied, the outputs and temporaries)" in printed


def test_an_input_resized_by_another_thread_during_a_call_is_refused_not_an_abort():
    # numpy lets a thread resize an array in place (`refcheck=False`) while fuse reads it with
    # the GIL released; fuse pins what it reads, so the resize is what fails.
    result = run_python(
        """
        import threading, time, numpy as np, fuseblas
        prog = fuseblas.compile("name: s\\nprecision: f64\\nsizes: {n: 4}\\ninputs: {x: [n]}\\noutputs: [y]\\n"
                                "calls:\\n  - y = dscal(2.0, x)\\n", backend="cpu", threads=1)
        n = 1 << 23
        x = np.ones(n)
        done, refused, resized = False, 0, 0
        def resize():
            global refused, resized
            while not done:
                try:
                    x.resize(n + 1 if x.size == n else n, refcheck=False)
                    resized += 1
                except ValueError:
                    refused += 1
                time.sleep(0.0005)
        thread = threading.Thread(target=resize)
        thread.start()
        for _ in range(60):
            y = prog(x=x)["y"]
            assert y.size in (n, n + 1) and y[0] == 2.0 and y[n - 1] == 2.0, y
        done = True
        thread.join()
        print("refused", refused, "resized", resized)
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    refused, resized = map(int, re.fullmatch(r"refused (\d+) resized (\d+)\n", result.stdout).groups())
    assert refused > 0 and resized > 0, result.stdout  # both sides of the race were met


def test_what_is_not_an_array_where_an_array_belongs_is_a_type_error_naming_it():
    prog = scal(np.float64)
    x = np.ones(4)
    for bad in [None, 3, 2.5, "abc", memoryview(x), array.array("d", [1, 2, 3, 4]), {"x": 1}, np.float64(1)]:
        with pytest.raises(TypeError, match=r"input `x` must be an array \[n\] \(a numpy array, a list, or an array"):
            prog(a=1.0, x=bad)
    with pytest.raises(TypeError, match=r"input `x` must hold real numbers, not complex128 values"):
        prog(a=1.0, x=[1j, 2, 3, 4])
    with pytest.raises(TypeError, match=r"input `x` must hold real numbers, not <U1 values"):
        prog(a=1.0, x=["a", "b", "c", "d"])
    with pytest.raises(fuseblas.InputError, match=r"input `x` is not an array of numbers: .*inhomogeneous"):
        prog(a=1.0, x=[[1.0, 2.0], [3.0]])
    s = fuseblas.Session("cpu")
    for bad in [None, "abc", memoryview(x), object()]:
        with pytest.raises(TypeError, match=r"the array must be an array \(a numpy array"):
            s.array(bad)
    with pytest.raises(TypeError, match=r"the array must hold real numbers, not complex128 values"):
        s.array(np.ones(3, np.complex128))
    with pytest.raises(TypeError, match=r"Session.read takes a value of the session, not a float64 array"):
        s.read(x)
    with pytest.raises(TypeError, match=r"scal: argument 2 must be a value of the session or a real number, not a float64 array"):
        s.scal(2.0, x)
    with pytest.raises(TypeError, match=r"Session.to_device takes a value of the session, not int"):
        s.to_device(3)
    with pytest.raises(TypeError, match=r"dtype 'foo' is not a numpy dtype"):
        s.scalar(1.0, "foo")
    for make in (fuseblas.Session, lambda backend: fuseblas.compile(SCRIPTS / "bicgk.yaml", backend=backend)):
        with pytest.raises(TypeError, match=r"backend must be a str .*, not NoneType"):
            make(None)


def test_out_must_be_a_dict_of_arrays_and_a_scalar_output_takes_its_own_dtype():
    prog, x = scal(np.float32), np.arange(4, dtype=np.float32)
    with pytest.raises(TypeError, match=r"out must be a dict of output names to arrays .*, not a float64 array of shape \(64,\)"):
        prog(a=1.0, x=x, out=np.zeros(64))
    with pytest.raises(fuseblas.InputError, match=r"out: there is no output `q` \(the outputs are y, d\)"):
        prog(a=1.0, x=x, out={"q": np.zeros(4, np.float32)})
    for dtype in (np.float32, np.float64):  # the script's dtype, or a Python float's
        d = np.zeros((), dtype)
        assert prog(a=1.0, x=x, out={"d": d})["d"] is d and d == 14.0
    with pytest.raises(fuseblas.InputError, match=r"out: output `d` needs an array of float32 or float64 \(\), the one given is an int64"):
        prog(a=1.0, x=x, out={"d": np.zeros((), np.int64)})
    with pytest.raises(fuseblas.InputError, match=r"out: output `y` needs an array of float32 \(4,\), the one given is a float64"):
        prog(a=1.0, x=x, out={"y": np.zeros(4)})
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(fuseblas.InputError, match=r"out: the array given for output `y` is read-only"):
        prog(a=1.0, x=x, out={"y": frozen})


def test_an_unknown_size_symbol_is_refused_where_it_is_given():
    text = SCAL.format(precision="f32", p="s")
    with pytest.raises(fuseblas.InputError, match=r"^sizes: `mm` is not a size of scal \(its sizes: n\)$") as caught:
        fuseblas.compile(text, backend="cpu", sizes={"mm": 4})
    assert "--" not in str(caught.value)  # no command-line flag from Python
    with pytest.raises(fuseblas.InputError, match=r"^describe: `m` is not a size of scal \(its sizes: n\)$"):
        scal(np.float32).describe(m=3)
    with pytest.raises(TypeError, match=r"sizes must be a dict of size symbols to positive integers"):
        fuseblas.compile(text, backend="cpu", sizes=[("n", 4)])
    for threads in (0, -1, "4", 2.0):
        with pytest.raises(fuseblas.InputError, match=r"threads = .*: a positive integer"):
            fuseblas.compile(text, backend="cpu", threads=threads)


def test_scalars_are_real_numbers_that_fit_the_precision():
    prog, x = scal(np.float32), np.ones(4, np.float32)
    for number in (1 + 2j, np.complex64(1), True, None, "2.0"):
        with pytest.raises(TypeError, match=r"input `a` must be a real number, not "):
            prog(a=number, x=x)
    for number in (1e300, -np.float64(1e39), np.array(3.5e38)):
        with pytest.raises(fuseblas.InputError, match=r"input `a`: .* does not fit float32 \(at most 3.4028235e\+38 in magnitude\)"):
            prog(a=number, x=x)
    with pytest.raises(fuseblas.InputError, match=r"input `a`: 1000.* does not fit float64"):
        scal(np.float64)(a=10**400, x=np.ones(4))
    # numpy's float64 scalar and its 0-d array are the same number: both rounded as a literal is.
    for number in (0.1, np.float64(0.1), np.array(0.1)):
        assert np.array_equal(prog(a=number, x=x)["y"], np.full(4, np.float32(0.1)))
    with pytest.raises(fuseblas.InputError, match=r"input `x`\[2\]: 1e\+300 does not fit float32"):
        prog(a=1.0, x=[1.0, 2.0, 1e300, 3.0])
    s = fuseblas.Session("cpu")
    with pytest.raises(fuseblas.InputError, match=r"^Session.scalar: 1e300 does not fit float32 \(at most 3.4028235e38 in magnitude\)$"):
        s.scalar(1e300, np.float32)
    with pytest.raises(TypeError, match=r"Session.scalar: value must be a real number, not complex"):
        s.scalar(1j)
    with pytest.raises(TypeError, match=r"Session.scalar: value must be a real number, not str"):
        s.scalar("2.5")
    v = s.array(x)
    with pytest.raises(fuseblas.InputError, match=r"^scal: argument 1: 1e300 does not fit float32"):
        s.scal(1e300, v)
    with pytest.raises(TypeError, match=r"scal: argument 1 must be a value of the session or a real number, not numpy.complex128"):
        s.scal(np.complex128(2 + 1j), v)
    with pytest.raises(fuseblas.InputError, match=r"^the array\[1\]: 1e\+300 does not fit float32"):
        s.array([1.0, 1e300], dtype=np.float32)


# Scalars a caller might pass: ordinary, at and past the edges of float32 and float64, not
# finite, of every numeric type, and not numbers at all.
HOSTILE_SCALARS = [
    0.1, -2, 3, 1e300, -1e300, 3.5e38, 3.4e38, -3.4028235e38, 1e-300, 1e-50, math.nan, math.inf, -math.inf,
    10**400, 2**64, np.float64(1e39), np.float32(2.5), np.float16(1.5), np.int64(7), np.uint64(2**63),
    np.array(0.1), np.array(1e300), np.array(7, np.int32), np.longdouble("1e400"), 1 + 2j, np.complex128(1),
    True, np.bool_(False), None, "1.5", b"1", [1.0], np.array([1.0]), object(),
]


def expected(value, dtype, literal):
    """What passing `value` as a scalar of `dtype` must give: the number it becomes, or the
    exceptions allowed (a literal must also be finite)."""
    if isinstance(value, (list, np.ndarray)) and np.ndim(value) > 0:
        return (TypeError, fuseblas.InputError)  # an array: not a number, or the wrong shape
    item = value[()] if isinstance(value, np.ndarray) else value
    if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, float, np.integer, np.floating)):
        return (TypeError,)
    try:
        number = float(item)
    except OverflowError:
        return (fuseblas.InputError,)  # an int past float64
    if math.isinf(number) and not np.isinf(item):
        return (fuseblas.InputError,)  # a long double past float64
    with np.errstate(over="ignore"):
        rounded = dtype(number)
    if math.isfinite(number) and not np.isfinite(rounded) or literal and not math.isfinite(number):
        return (fuseblas.InputError,)
    return rounded


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_hostile_scalar_on_every_path_is_its_number_or_refused(dtype):
    prog, ones = scal(dtype), np.ones(4, dtype)
    s = fuseblas.Session("cpu")
    paths = {
        "a program's scalar input": (lambda v: prog(a=v, x=ones)["y"][0], False),
        "Session.scalar": (lambda v: float(s.scal(s.scalar(v, dtype), s.array(ones)).read()[0]), False),
        "a session call's literal": (lambda v: float(s.scal(v, s.array(ones)).read()[0]), True),
    }
    for path, (run, literal) in paths.items():
        for value in HOSTILE_SCALARS:
            want = expected(value, dtype, literal)
            case = f"{value!r} ({type(value).__name__}) as {path} in {np.dtype(dtype)}"
            if isinstance(want, tuple):
                with pytest.raises(want):
                    run(value)
                    pytest.fail(f"{case} was accepted")
            else:
                got = run(value)
                assert got == want or math.isnan(got) and math.isnan(want), (case, got, want)


def test_the_module_docstring_example_runs():
    blocks = re.findall(r"::\n\n((?: {6}.*\n|\n)+)", fuseblas.__doc__)
    assert len(blocks) == 2
    namespace = {}
    exec(compile("".join(textwrap.dedent(b) for b in blocks), "fuseblas.__doc__", "exec"), namespace)
    A = np.asarray(namespace["A"], dtype=np.float64)  # the session's copy of the script's A
    p = np.asarray(namespace["p"], dtype=np.float64)
    out = namespace["out"]
    q, t = A @ p, A.T @ (A @ p)
    assert np.linalg.norm(out["q"] - q) <= 1e-5 * np.linalg.norm(q)
    assert np.linalg.norm(out["s"] - A.T @ np.ones(A.shape[0])) <= 1e-5 * np.linalg.norm(A.T @ np.ones(A.shape[0]))
    assert np.linalg.norm(np.asarray(namespace["t"]) - t) <= 1e-5 * np.linalg.norm(t)
