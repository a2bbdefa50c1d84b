"""fuseblas.linalg against scipy.sparse.linalg on the same dense systems: the residual history
(SciPy's own, read off its norm calls) within rounding in f64 and f32 at odd sizes, callbacks,
Jacobi preconditioning, breakdowns, every backend here (the emulated GPU included), session
matrices, GPU arrays (FUSE_TEST_CUDA=1), and what is refused."""

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg as sla
from scipy.sparse.linalg import LinearOperator

import fuseblas
import fuseblas.linalg as fla
from conftest import GPU, backends

# Relative agreement of a residual history with SciPy's: rounding alone in f64; f32 rounds
# each step to 6e-8 and the differences grow over the iterations.
HISTORY = {"float64": 1e-7, "float32": 5e-3}


def system(n, dtype, symmetric, seed=7):
    """A diagonally dominant n×n system (symmetric positive definite where `symmetric`)."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (n, n))
    if symmetric:
        A = A + A.T
    A += np.diag(np.full(n, 1.2 * n ** 0.5 * 2))
    return A.astype(dtype), rng.uniform(-1, 1, n).astype(dtype)


def scipy_history(method, A, b, **kwargs):
    """SciPy's (x, info) and its residual history: ‖r‖ at the top of each iteration, read off
    its calls of numpy.linalg.norm (the first is ‖b‖; BiCGSTAB's half-step ‖s‖ alternate with
    ‖r‖)."""
    norms, norm = [], np.linalg.norm

    def recording(v, *args, **kw):
        value = norm(v, *args, **kw)
        norms.append(float(value))
        return value

    np.linalg.norm = recording
    try:
        x, info = getattr(sla, method)(A, b, **kwargs)
    finally:
        np.linalg.norm = norm
    history = norms[1:]
    if method == "bicgstab":
        history = history[::2]
    return x, info, np.array(history)


def assert_history(got, want, dtype, what):
    slack = 1 if dtype == "float32" else 0
    assert abs(len(got) - len(want)) <= slack, f"{what}: {len(got)} reads, SciPy {len(want)}"
    k = min(len(got), len(want))
    error = np.abs(got[:k] - want[:k]) / np.maximum(want[:k], 1e-300)
    assert error.max() <= HISTORY[dtype], f"{what}: residuals {got[:k]} against SciPy's {want[:k]}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n", [1, 37, 53])
@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab"])
def test_the_residual_history_is_scipys(method, n, dtype):
    A, b = system(n, dtype, symmetric=method == "cg")
    rtol = 1e-10 if dtype == "float64" else 1e-5
    want_x, want_info, want = scipy_history(method, A, b, rtol=rtol)
    x, info, history = fla.__dict__[method](A, b, rtol=rtol, return_history=True, backend="cpu")
    what = f"{method} n={n} {dtype}"
    assert (info, x.dtype, x.shape) == (want_info, np.dtype(dtype), (n,)), what
    assert_history(history, want, dtype, what)
    assert np.linalg.norm(b - A.astype(np.float64) @ x) <= 2 * rtol * np.linalg.norm(b), what


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab", "gmres"])
def test_each_solver_on_each_backend_solves_as_scipy(method, backend):
    A, b = system(29, "float64", symmetric=method == "cg", seed=3)
    want, want_info = getattr(sla, method)(A, b, rtol=1e-10)
    x, info = getattr(fla, method)(A, b, rtol=1e-10, backend=backend)
    assert info == want_info == 0
    assert np.abs(x - want).max() <= 1e-9 * np.abs(want).max(), f"{method} on {backend}"


@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab"])
def test_the_callback_sees_scipys_iterates(method):
    A, b = system(31, "float64", symmetric=method == "cg", seed=5)
    theirs, ours = [], []
    getattr(sla, method)(A, b, rtol=1e-10, callback=lambda x: theirs.append(x.copy()))
    x, info = getattr(fla, method)(A, b, rtol=1e-10, callback=lambda x: ours.append(x.copy()))
    assert info == 0 and len(ours) == len(theirs) > 3
    assert all(type(v) is np.ndarray and v.dtype == np.float64 for v in ours)
    assert np.abs(np.array(ours) - np.array(theirs)).max() <= 1e-9 * np.abs(theirs[-1]).max()


def test_gmres_calls_back_each_restart_cycle_with_the_iterate():
    A, b = system(40, "float64", symmetric=False, seed=9)
    theirs, ours = [], []
    # SciPy hands over its x itself, updated in place afterwards: copied.
    sla.gmres(A, b, rtol=1e-12, restart=3, callback=lambda v: theirs.append(v.copy()), callback_type="x")
    x, info = fla.gmres(A, b, rtol=1e-12, restart=3, callback=ours.append)
    assert info == 0 and len(ours) == len(theirs) > 1
    assert np.abs(np.array(ours) - np.array(theirs)).max() <= 1e-8 * np.abs(x).max()
    with pytest.raises(ValueError, match="callback_type='x'"):
        fla.gmres(A, b, callback=print, callback_type="legacy")


def test_an_exception_in_the_callback_ends_the_solve_and_is_raised():
    A, b = system(20, "float64", symmetric=True)

    def stop(x):
        raise KeyError("enough")

    with pytest.raises(KeyError, match="enough"):
        fla.cg(A, b, callback=stop)


@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab", "gmres"])
def test_jacobi_is_scipys_diagonal_preconditioner(method):
    A, b = system(33, "float64", symmetric=method == "cg", seed=4)
    A *= np.linspace(1, 50, 33)[:, None] * np.linspace(1, 50, 33)[None, :] if method == "cg" else np.linspace(1, 50, 33)[:, None]
    d = 1 / np.diag(A)
    want, want_info = getattr(sla, method)(A, b, rtol=1e-10, M=np.diag(d))
    x, info, history = getattr(fla, method)(A, b, rtol=1e-10, M=d, return_history=True)
    assert info == want_info == 0
    assert np.abs(x - want).max() <= 1e-8 * np.abs(want).max()
    if method != "gmres":
        assert_history(history, scipy_history(method, A, b, rtol=1e-10, M=np.diag(d))[2], "float64", method)


@pytest.mark.parametrize("method", ["bicg", "bicgstab"])
def test_a_system_that_breaks_down_says_so_as_scipy_with_a_finite_x(method):
    # r̃ᵀA·p = 0 at the first iteration: A swaps the two components of p = b.
    A, b = np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0])
    with np.errstate(all="ignore"):
        _, want_info = getattr(sla, method)(A, b)
    x, info = getattr(fla, method)(A, b)
    assert info == want_info == -11
    assert np.isfinite(x).all()


def test_a_non_finite_residual_is_a_breakdown_scipy_misses():
    # CG on an indefinite system whose pᵀA·p vanishes: SciPy divides by zero and goes on with NaN.
    A, b = np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0])
    with np.errstate(all="ignore"):
        want, _ = sla.cg(A, b)
    x, info = fla.cg(A, b)
    assert np.isnan(want).any()
    assert info < 0 and np.isfinite(x).all()


def test_check_every_reads_less_and_still_converges():
    A, b = system(45, "float64", symmetric=False)
    x1, info1, h1 = fla.bicg(A, b, rtol=1e-9, return_history=True)
    x3, info3, h3 = fla.bicg(A, b, rtol=1e-9, check_every=3, return_history=True)
    assert info1 == info3 == 0
    assert len(h3) == -(-len(h1) // 3) or len(h3) == len(h1) // 3 + 1
    assert np.linalg.norm(b - A @ x3) <= 1e-9 * np.linalg.norm(b)


def test_dtypes_shapes_and_inputs_follow_scipy():
    A, b = system(12, "float32", symmetric=True)
    assert fla.cg(A, b)[0].dtype == np.float32
    assert fla.cg(A, b.astype(np.float64))[0].dtype == np.float64
    x, info = fla.cg(np.round(A * 10).astype(np.int64), np.arange(12))
    assert x.dtype == np.float64 and info == 0
    x0 = np.ones((12, 1), np.float32)
    x, info = fla.cg(A, b.reshape(12, 1), x0=x0)
    assert x.shape == (12,) and info == 0 and (x0 == 1).all()
    assert fla.cg(A, np.zeros(12))[0].tolist() == [0.0] * 12


def test_a_session_matrix_stays_resident_and_x_comes_back_as_a_value():
    A, b = system(25, "float64", symmetric=False)
    s = fuseblas.Session(backend="cpu")
    Av = s.array(A)
    x, info = fla.bicg(Av, b, rtol=1e-10)
    assert isinstance(x, fuseblas.Value) and info == 0
    x2, _ = fla.bicg(Av, s.array(b), x0=np.zeros(25), rtol=1e-10, M=np.ones(25))
    want = np.linalg.solve(A, b)
    assert np.abs(np.asarray(x) - want).max() <= 1e-8 and np.abs(np.asarray(x2) - want).max() <= 1e-8
    with pytest.raises(fuseblas.InputError, match="another session"):
        fla.bicg(Av, fuseblas.Session(backend="cpu").array(b))


def test_a_numpy_a_is_read_in_place_and_a_second_solve_compiles_nothing():
    A, b = system(41, "float64", symmetric=True)
    want = np.linalg.solve(A, b)
    x, info = fla.cg(A, b, rtol=1e-12, backend="cpu")
    assert info == 0 and np.abs(x - want).max() <= 1e-9
    compiled = fla._host_session("cpu").stats()["compilations"]
    # A Fortran-ordered A is read from its one C-ordered copy; the programs are the same.
    x, info = fla.cg(np.asfortranarray(A), b, rtol=1e-12, backend="cpu")
    assert info == 0 and np.abs(x - want).max() <= 1e-9
    assert fla._host_session("cpu").stats()["compilations"] == compiled
    assert np.array_equal(A, system(41, "float64", symmetric=True)[0]), "A is not written"


def test_what_is_not_supported_is_a_clear_error():
    A, b = system(6, "float64", symmetric=True)
    for M in (np.eye(6), LinearOperator((6, 6), matvec=lambda v: v), lambda v: v, scipy.sparse.eye(6)):
        with pytest.raises(TypeError, match="inverse of A's diagonal"):
            fla.cg(A, b, M=M)
    with pytest.raises(TypeError, match="dense systems"):
        fla.cg(scipy.sparse.csr_array(A), b)
    with pytest.raises(TypeError, match="dense systems"):
        fla.cg(LinearOperator((6, 6), matvec=lambda v: v), b)
    with pytest.raises(TypeError, match="complex"):
        fla.bicg(A + 1j, b)
    with pytest.raises(ValueError, match="shape"):
        fla.cg(A, b[:5])
    with pytest.raises(ValueError, match="square"):
        fla.cg(A[:5], b)
    for atol in (None, "legacy", -1.0):
        with pytest.raises(ValueError, match="atol"):
            fla.bicgstab(A, b, atol=atol)
    with pytest.raises(TypeError):
        fla.cg(A, b, None, 1e-5)
    with pytest.raises(ValueError, match="check_every"):
        fla.cg(A, b, check_every=0)


@pytest.mark.skipif(not GPU, reason="set FUSE_TEST_CUDA=1 on a machine with an NVIDIA GPU")
@pytest.mark.parametrize("method", ["cg", "bicg", "bicgstab", "gmres"])
def test_a_gpu_array_is_solved_on_its_gpu_and_x_stays_there(method):
    torch = pytest.importorskip("torch")
    A, b = system(300, "float64", symmetric=method == "cg")
    x, info = getattr(fla, method)(torch.from_numpy(A).cuda(), torch.from_numpy(b).cuda(), rtol=1e-10)
    assert isinstance(x, fuseblas.DeviceArray) and info == 0
    got = torch.from_dlpack(x).cpu().numpy()
    assert np.abs(got - np.linalg.solve(A, b)).max() <= 1e-8
