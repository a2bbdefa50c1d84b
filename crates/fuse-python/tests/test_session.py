"""The lazy BLAS API: every call against numpy in both precisions, values and their reading,
errors, and the Python BiCG example against the Rust one."""

import os
import subprocess

import numpy as np
import pytest

import bicg
import fuseblas
from conftest import ROOT, backends

TOLERANCE = {np.float32: 2e-5, np.float64: 1e-12}


def close(got, want, dtype):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return np.linalg.norm(got - want) <= TOLERANCE[dtype] * max(np.linalg.norm(want), 1e-300)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_blas_call_matches_numpy(backend, dtype):
    rng = np.random.default_rng(11)
    m, n = 67, 45
    A, B = (rng.uniform(-1, 1, (m, n)).astype(dtype) for _ in range(2))
    x, y = (rng.uniform(-1, 1, n).astype(dtype) for _ in range(2))
    u, w = (rng.uniform(-1, 1, m).astype(dtype) for _ in range(2))
    s = fuseblas.Session(backend)
    vA, vB, vx, vy, vu, vw = (s.array(a) for a in (A, B, x, y, u, w))
    a64 = {k: v.astype(np.float64) for k, v in dict(A=A, B=B, x=x, y=y, u=u, w=w).items()}
    half = s.scalar(0.5, dtype)
    cases = [
        (s.scal(2.0, vx), 2 * a64["x"]),
        (s.axpy(half, vx, vy), 0.5 * a64["x"] + a64["y"]),
        (s.axpby(2.0, vx, -1.0, vy), 2 * a64["x"] - a64["y"]),
        (s.add(vx, vy), a64["x"] + a64["y"]),
        (s.copy(vx), a64["x"]),
        (s.dot(vx, vy), a64["x"] @ a64["y"]),
        (s.asum(vx), np.abs(a64["x"]).sum()),
        (s.nrm2(vx), np.linalg.norm(a64["x"])),
        (s.gemv(vA, vx), a64["A"] @ a64["x"]),
        (s.gemv(vA, vx, alpha=2.0), 2 * a64["A"] @ a64["x"]),
        (s.gemv(vA, vx, alpha=2.0, beta=3.0, y=vu), 2 * a64["A"] @ a64["x"] + 3 * a64["u"]),
        (s.gemtv(vA, vu), a64["A"].T @ a64["u"]),
        (s.gemtv(vA, vu, alpha=half, y=vy), 0.5 * a64["A"].T @ a64["u"] + a64["y"]),
        (s.ger(vu, vx, vA), a64["A"] + np.outer(a64["u"], a64["x"])),
        (s.ger(vu, vx, vA, alpha=-2.0), a64["A"] - 2 * np.outer(a64["u"], a64["x"])),
        (s.madd(vA, vB), a64["A"] + a64["B"]),
    ]
    assert s.stats()["flushes"] == 0  # all recorded, nothing run
    for value, want in cases:
        got = np.asarray(value)
        assert got.dtype == dtype and got.shape == np.shape(want)
        assert close(got, want, dtype)
    assert s.stats()["flushes"] == 1  # one fused program computed them all
    assert isinstance(float(s.dot(vx, vy)), float) and isinstance(s.read(s.nrm2(vx)), float)
    assert np.asarray(vx, dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("backend", backends())
def test_matrices_from_vectors_and_triangular_products_match_numpy(backend):
    rng = np.random.default_rng(12)
    m, n = 37, 53
    x, y, A = rng.uniform(-1, 1, m), rng.uniform(-1, 1, n), rng.uniform(-1, 1, (m, n))
    s = fuseblas.Session(backend)
    vx, vy, vA = s.array(x), s.array(y), s.array(A)
    assert close(s.outer(vx, vy), np.outer(x, y), np.float64)
    assert close(s.outer(vx, vy, alpha=-2.5), -2.5 * np.outer(x, y), np.float64)
    assert close(s.mscal(0.75, vA), 0.75 * A, np.float64)
    T = rng.uniform(-1, 1, (n, n))
    for lower in (False, True):
        for trans in (False, True):
            for unitdiag in (False, True):
                kept = np.tril(T) if lower else np.triu(T)
                if unitdiag:
                    kept = kept - np.diag(np.diag(kept)) + np.eye(n)
                # What the product must not read is NaN.
                poisoned = np.where(np.tril(np.ones((n, n))) if lower else np.triu(np.ones((n, n))), T, np.nan)
                if unitdiag:
                    np.fill_diagonal(poisoned, np.nan)
                want = (kept.T if trans else kept) @ y
                got = s.trmv(s.array(poisoned), vy, lower=lower, trans=trans, unitdiag=unitdiag)
                assert close(got, want, np.float64), (lower, trans, unitdiag)
    with pytest.raises(TypeError, match="Session.trmv: lower is a bool, not str"):
        s.trmv(vA, vy, lower="L")
    with pytest.raises(fuseblas.InputError):
        s.trmv(vA, vy)  # A is not square


def test_a_session_copies_what_it_is_given():
    s = fuseblas.Session("cpu")
    x = np.ones(5)
    v = s.array(x)
    y = s.scal(2.0, v)
    x[:] = 7.0  # the value was taken when the handle was made
    assert np.array_equal(np.asarray(y), np.full(5, 2.0))
    assert s.array([1, 2, 3]).dtype == "float64"
    assert s.array(np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2]).shape == [2, 2]
    # Copied in logical (row-major) order whatever the layout: C order as one slice, Fortran
    # order and strided views element by element.
    A = np.arange(35, dtype=np.float64).reshape(5, 7)
    ones = s.array(np.ones(7))
    for layout in (A, np.asfortranarray(A), np.arange(70.0).reshape(10, 7)[::2]):
        assert np.array_equal(np.asarray(s.gemv(s.array(layout), ones)), layout.sum(axis=1))


@pytest.mark.parametrize("backend", backends())
def test_a_matrix_given_with_copy_false_is_read_in_place(backend):
    rng = np.random.default_rng(5)
    A, x = rng.uniform(-1, 1, (37, 53)), rng.uniform(-1, 1, 53)
    s = fuseblas.Session(backend)
    vA, vx = s.array(A, copy=False), s.array(x)
    assert close(s.gemv(vA, vx), A @ x, np.float64)
    assert np.array_equal(np.asarray(vA), A), "read back as a copy"
    if backend in ("reference", "cpu"):
        # Read in place on the host: a later computation sees a change (which a caller must not
        # make); a device backend's upload is its copy.
        A[0, :] = 2.0
        assert close(s.gemv(vA, vx), A @ x, np.float64)
    # Another dtype, or a strided view, is read from the one copy that converts it.
    strided = rng.uniform(-1, 1, (37, 106))[:, ::2]
    vs = s.array(strided, dtype=np.float32, copy=False)
    assert close(s.gemv(vs, s.array(x, dtype=np.float32)), strided @ x, np.float32)
    with pytest.raises(fuseblas.InputError, match="copy=False reads a matrix in place"):
        s.array(x, copy=False)


def test_session_errors_say_what_is_wrong():
    s, other = fuseblas.Session("cpu"), fuseblas.Session("cpu")
    A, x = s.array(np.zeros((3, 2))), s.array(np.zeros(3))
    with pytest.raises(ValueError, match=r"dgemv: argument `x` has shape \[3\] but needs \[2\]"):
        s.gemv(A, x)
    with pytest.raises(fuseblas.InputError, match="argument 2 is float32, the others float64"):
        s.add(x, s.array(np.zeros(3, np.float32)))
    with pytest.raises(fuseblas.InputError, match="belongs to session"):
        s.add(x, other.array(np.zeros(3)))
    with pytest.raises(fuseblas.InputError, match="at least one argument must be a value"):
        s.call("scal", 1.0, 2.0)
    with pytest.raises(fuseblas.InputError, match="a session computes in float32 or float64, not int32"):
        s.array(np.zeros(3), dtype=np.int32)
    with pytest.raises(TypeError, match="the array must hold real numbers, not <U1 values"):
        s.array(np.array(["a"]))
    with pytest.raises(fuseblas.InputError, match="sessions hold scalars, vectors and matrices"):
        s.array(np.zeros((2, 2, 2)))
    with pytest.raises(fuseblas.ScriptError, match="no `dgemv` taking 1 arguments"):
        s.call("gemv", x)
    with pytest.raises(fuseblas.InputError, match="not a finite number"):
        s.scal(float("inf"), x)
    with pytest.raises(TypeError, match="only a scalar value converts to float"):
        float(x)


def test_dropped_results_are_temporaries_and_programs_are_cached():
    s = fuseblas.Session("cpu")
    x = s.array(np.arange(4.0))
    for _ in range(3):
        t = s.scal(2.0, x)
        y = s.add(t, x)
        del t  # a temporary: never written back
        assert np.array_equal(np.asarray(y), 3 * np.arange(4.0))
    stats = s.stats()
    assert (stats["flushes"], stats["compilations"], stats["cache_hits"]) == (3, 1, 2)
    assert s.pending_scripts() == []


def test_the_python_bicg_follows_the_rust_examples_residual_history():
    rust = ROOT / "target" / "debug" / "examples" / "bicg"
    if not rust.exists():
        pytest.skip("build the Rust example first (cargo test builds it)")
    printed = subprocess.run([str(rust), "300", "--backend", "cpu", "--precision", "f64"], capture_output=True, text=True, check=True).stdout
    want = [float(line.split("= ")[1].split()[0]) for line in printed.splitlines() if line.startswith("iteration")]
    a, b = bicg.system(300)
    x, got = bicg.bicg(bicg.Fuse(np.dtype(np.float64), "cpu"), a, b, 1e-10, 200, lambda k, r: None)
    assert len(got) == len(want) >= 5
    # Printed with 4 digits; the two runs differ only in rounding.
    assert np.allclose(got, want, rtol=2e-3, atol=0)
    assert np.linalg.norm(b - a @ x) / np.linalg.norm(b) < 1e-9


def workers():
    """The TIDs of this process's threads that fuseblas runs flushes on."""
    tasks = "/proc/self/task"
    return {t for t in os.listdir(tasks) if open(f"{tasks}/{t}/comm").read().strip() == "fuseblas-work"}


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_compiling_flushes_run_on_one_kept_worker_and_quick_ones_on_the_caller(caplog):
    # Every flush handed to a worker logs its note at once (what it is); one run here does not.
    fuseblas._core._set_note_after_ms(0)
    try:
        with caplog.at_level("INFO", logger="fuseblas"):
            s = fuseblas.Session("cpu")
            x = s.array(np.arange(1.0, 9.0, dtype=np.float32))
            assert float(s.dot(x, x)) == 204.0
            kept = workers()
            for k in range(200):
                y = s.axpy(s.scalar(k, np.float32), x, x)  # a literal k would compile anew
                assert float(s.dot(y, x)) == (k + 1) * 204.0
            y = s.axpy(1.0, s.array(np.ones(9, np.float32)), s.array(np.ones(9, np.float32)))
            assert float(s.dot(y, y)) == 36.0
    finally:
        fuseblas._core._set_note_after_ms(1000)
    notes = [r.getMessage() for r in caplog.records if r.message.startswith("a session flush")]
    # Three programs compiled, each on a worker; the 199 flushes that ran a compiled program
    # did so on the calling thread.
    assert len(notes) == 3, notes
    assert len(kept) >= 1, "the first flush's worker waits for the next"
    # The compiling flushes found the same worker idle: no thread started per flush.
    assert workers() == kept


def test_a_flush_whose_program_ran_long_runs_on_a_worker_again(caplog):
    # The reference backend takes about 0.1 s for this flush here, far past the 20 ms below
    # which a flush runs on the calling thread; Ctrl-C must still answer while it runs.
    fuseblas._core._set_note_after_ms(0)
    try:
        with caplog.at_level("INFO", logger="fuseblas"):
            s = fuseblas.Session("reference")
            A, x = s.array(np.ones((4000, 4000), np.float32)), s.array(np.ones(4000, np.float32))
            for _ in range(2):
                assert float(s.dot(s.gemv(A, x), x)) == 4000.0**2
    finally:
        fuseblas._core._set_note_after_ms(1000)
    notes = [r.getMessage() for r in caplog.records if r.message.startswith("a session flush")]
    assert len(notes) == 2, notes
    assert s.stats()["cache_hits"] == 1


@pytest.mark.parametrize("backend", backends())
def test_a_float_that_changes_every_iteration_compiles_twice(backend):
    s = fuseblas.Session(backend)
    x = s.array(np.arange(5.0, dtype=np.float32))
    for k in range(8):
        y = s.axpy(k + 0.5, x, x)  # a Python float: a constant until it changes
        assert np.array_equal(np.asarray(y), (k + 1.5) * np.arange(5.0, dtype=np.float32))
    stats = s.stats()
    assert (stats["flushes"], stats["compilations"], stats["cache_hits"]) == (8, 2, 6)
