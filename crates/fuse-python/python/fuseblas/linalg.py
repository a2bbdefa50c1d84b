"""SciPy's iterative solvers on fuse: :func:`cg`, :func:`bicg`, :func:`bicgstab` and
:func:`gmres` with the signature and results of :mod:`scipy.sparse.linalg`, for dense real
systems. A SciPy user switches with one import::

    from fuseblas.linalg import bicg          # was: from scipy.sparse.linalg import bicg
    x, info = bicg(A, b, rtol=1e-8)           # A a dense numpy array

Each iteration is recorded as BLAS calls on a :class:`fuseblas.Session` and run as one fused
program (BiCG's ``A·p`` and ``Aᵀ·p̃`` in one pass over A), its scalars computed on the device;
the only number read back an iteration is the residual norm SciPy's stopping test reads (none
between reads with ``check_every=k``). Where A is exactly symmetric on the host (checked once a
solve, each element against its mirror's bits, in one pass) and larger than the CPU's
last-level cache, every product reads its upper triangle only: half the bytes; the results
differ from the full products' by rounding alone.

**What A may be.** A numpy array (or anything :func:`numpy.asarray` reads) of shape (n, n); a
matrix value of a session already resident (:meth:`fuseblas.Session.array`: the solve runs in
that session and ``x`` comes back as a session :class:`~fuseblas.Value`); or a GPU array (CuPy,
PyTorch, JAX; C-contiguous float32 or float64, through DLPack): the solve runs on that GPU and
``x`` comes back as a :class:`~fuseblas.DeviceArray`. Sparse matrices and ``LinearOperator`` s
are a ``TypeError`` (densify with ``A.toarray()``), complex systems too.

**Precision**, as SciPy: float32 where A and b are both float32, else float64 (integers are
converted to float64). ``x`` comes back in it, of shape (n,), whatever b's shape ((n,) or (n, 1)).

**Return codes** (``info``), as SciPy: 0 converged; > 0 the iterations (GMRES: restart cycles)
run without converging; < 0 a breakdown: -10 ρ vanished, -11 ω or a denominator vanished, -12 the
residual is not finite (SciPy does not check this one). A breakdown returns the last iterate
before it, never a NaN solution.

**Beyond SciPy's arguments** (keyword-only): ``backend`` (``"auto"``, ``"cpu"``, ``"cuda"``,
``"cuda:1"``, ``"emulate"``, ``"reference"``; see :func:`fuseblas.compile`), ``check_every=k``
(read the residual every k iterations: up to k − 1 iterations past convergence, nothing read in
between) and ``return_history=True``, which adds a third return: ‖r‖ at each residual read as a
float64 numpy array (cg, bicg, bicgstab: at the start of each iteration, as SciPy's loop tests
it, the recursively updated residual; gmres: ‖r₀‖ then the residual each inner iteration's
rotations estimate).
"""

from __future__ import annotations

import numbers
from typing import Tuple

import numpy as np

from . import _core, _converted, _dlpack_device, _host_array, _kind
from ._errors import InputError

__all__ = ["cg", "bicg", "bicgstab", "gmres"]

_M_SUPPORTED = (
    "M must be None or a 1-D array holding the inverse of A's diagonal (Jacobi preconditioning, "
    "applied on the device: M=1/numpy.diag(A)); fuseblas.linalg takes no other preconditioner "
    "(a matrix, a LinearOperator, a callable): use scipy.sparse.linalg for those"
)


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None, backend=None,
       check_every=1, return_history=False):
    """Solves ``A·x = b`` by conjugate gradients (A symmetric positive definite), as
    :func:`scipy.sparse.linalg.cg`. An iteration reads A once.

    Parameters are SciPy's: ``x0`` the starting guess (zeros where None; ``"Mb"`` for ``M·b``),
    converged where ``‖b − A·x‖ ≤ max(rtol·‖b‖, atol)``, at most ``maxiter`` iterations (10·n
    where None), ``M`` the Jacobi preconditioner (see the module), ``callback(xk)`` called
    after each iteration with the iterate as a numpy array — a copy from the session each call
    (on a GPU a transfer), so a callback costs a read of x an iteration; it must not use the
    session being solved in (a value of it: that waits for the solve). Ctrl-C ends the solve
    at the next residual read with ``KeyboardInterrupt``. ``backend``, ``check_every`` and
    ``return_history``: see the module.

    Returns ``(x, info)`` (``(x, info, history)`` with ``return_history=True``).
    """
    return _solve("cg", A, b, x0, rtol, atol, maxiter, M, callback, backend, check_every, None, return_history)


def bicg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None, backend=None,
         check_every=1, return_history=False):
    """Solves ``A·x = b`` by biconjugate gradients, as :func:`scipy.sparse.linalg.bicg`. An
    iteration's products ``A·p`` and ``Aᵀ·p̃`` run fused: A is read once an iteration, where
    SciPy reads it twice. Breaks down (info -10) where the shadow residual becomes orthogonal to
    the residual, -11 where ``p̃ᵀA·p`` = 0. Parameters and returns: see :func:`cg`.
    """
    return _solve("bicg", A, b, x0, rtol, atol, maxiter, M, callback, backend, check_every, None, return_history)


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None, backend=None,
             check_every=1, return_history=False):
    """Solves ``A·x = b`` by BiCGSTAB, as :func:`scipy.sparse.linalg.bicgstab`: two products
    with A an iteration, and two norms read (the half-step residual may end the solve, as in
    SciPy). Breaks down with -10 (ρ) or -11 (ω, or ``r̃ᵀA·p`` = 0). Parameters and returns: see
    :func:`cg`.
    """
    return _solve("bicgstab", A, b, x0, rtol, atol, maxiter, M, callback, backend, check_every, None,
                  return_history)


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None, callback=None,
          callback_type="x", backend=None, return_history=False):
    """Solves ``A·x = b`` by restarted GMRES, as :func:`scipy.sparse.linalg.gmres`: ``restart``
    iterations between restarts (``min(20, n)`` where None), ``maxiter`` restart cycles (10·n
    where None), SciPy's adaptive inner tolerance. The Gram–Schmidt step is classical, done
    twice, as products with the Krylov basis (each pass reads the basis once); the small
    least-squares problem is solved on the host, as SciPy does, reading a column of H an
    iteration.

    ``callback(xk)`` is called after each restart cycle with the iterate: SciPy's
    ``callback_type="x"``, the only one supported (SciPy's default, ``"legacy"``, and
    ``"pr_norm"`` call with the preconditioned residual every inner iteration, and ``"legacy"``
    counts ``maxiter`` in inner iterations: a ``ValueError`` here). Other parameters and the
    returns: see :func:`cg`.
    """
    if callback_type not in ("x", None):
        raise ValueError(
            f"gmres: callback_type={callback_type!r} is not supported: fuseblas.linalg.gmres calls "
            "callback(xk) after each restart cycle (callback_type='x')"
        )
    if restart is not None:
        restart = _count("gmres: restart", restart, 1)
    return _solve("gmres", A, b, x0, rtol, atol, maxiter, M, callback, backend, 1, restart, return_history)


def _solve(method, A, b, x0, rtol, atol, maxiter, M, callback, backend, check_every, restart, return_history):
    """The solve behind each solver: arguments checked and moved into a session (A's own, a new
    one on A's GPU, or a new one on ``backend``), the native solve, x handed back as A came."""
    rtol, atol = _tolerances(method, rtol, atol)
    maxiter = None if maxiter is None else _count(f"{method}: maxiter", maxiter, 0)
    check_every = _count(f"{method}: check_every", check_every, 1)
    if callback is not None and not callable(callback):
        raise TypeError(f"{method}: callback must be callable or None, not {_kind(callback)}")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"{method}: backend must be a str (\"auto\", \"cpu\", \"cuda\", …) or None, not {_kind(backend)}")
    if isinstance(A, _core.Value):
        system = _in_session(method, A, b, x0, M)
    elif (_dlpack_device(A) or (1, 0))[0] == 2:
        system = _on_gpu(method, A, b, x0, M, backend)
    else:
        system = _on_host(method, A, b, x0, M, backend)
    session, a, bv, x0v, jacobi, hand_back = system
    x, info, _iterations, history, _reason = _core.solve(
        method, a, bv, x0v, jacobi, rtol, atol, maxiter, check_every, restart, callback
    )
    x = hand_back(session, x)
    if return_history:
        return x, int(info), np.asarray(history, dtype=np.float64)
    return x, int(info)


def _tolerances(method: str, rtol: object, atol: object) -> Tuple[float, float]:
    """rtol and atol as floats ≥ 0 (inf allowed); SciPy's ``ValueError`` for anything else
    (``atol=None`` and ``"legacy"`` included)."""
    values = []
    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
            raise ValueError(f"{method}: invalid `{name}`={value!r}; it must be a real, non-negative number")
        values.append(float(value))
    return values[0], values[1]


def _count(what: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, not {_kind(value)}")
    if value < least:
        raise ValueError(f"{what} = {value}: it must be at least {least}")
    return int(value)


def _refuse_operator(method: str, what: str, value: object) -> None:
    """A ``TypeError`` for a sparse matrix or a linear operator where a dense array belongs."""
    if hasattr(value, "matvec") or hasattr(value, "tocsr"):
        raise TypeError(
            f"{method}: {what} is {_kind(value)}: fuseblas.linalg solves dense systems; pass a numpy "
            "array (a sparse matrix's A.toarray()), a session matrix or a GPU array"
        )


def _real_dtype(method: str, what: str, array: np.ndarray) -> np.dtype:
    """The float dtype SciPy would read ``array`` in (ints as float64); complex and other
    non-numbers are a ``TypeError``."""
    if array.dtype.kind == "c":
        raise TypeError(f"{method}: {what} is complex ({array.dtype}): fuseblas.linalg solves real systems")
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{method}: {what} must hold real numbers, not {array.dtype} values")
    return np.dtype(np.float32 if array.dtype == np.float32 else np.float64)


def _vector(method: str, what: str, value: object, n: int, dtype: np.dtype) -> np.ndarray:
    """``value`` as a vector of ``dtype`` and length n (shape (n,) or (n, 1), as SciPy)."""
    array = _host_array(f"{method}: {what}", value)
    _real_dtype(method, what, array)
    if array.shape not in ((n,), (n, 1)):
        raise ValueError(f"{method}: {what} has shape {array.shape}, A is {n}×{n}: it must be ({n},) or ({n}, 1)")
    return _converted(what, array.reshape(n), dtype)


def _jacobi(method: str, M: object) -> object:
    """M as the Jacobi vector to upload (a 1-D array or a session value), or a ``TypeError``."""
    if M is None or isinstance(M, _core.Value):
        if isinstance(M, _core.Value) and len(M.shape) != 1:
            raise TypeError(f"{method}: {_M_SUPPORTED}; got a session value of shape {tuple(M.shape)}")
        return M
    if callable(M) or hasattr(M, "matvec") or hasattr(M, "tocsr"):
        raise TypeError(f"{method}: {_M_SUPPORTED}; got {_kind(M)}")
    array = _host_array(f"{method}: M", M)
    if array.ndim != 1:
        raise TypeError(f"{method}: {_M_SUPPORTED}; got {_kind(array)}")
    return array


def _on_host(method, A, b, x0, M, backend):
    """The system of a host A: a new session on ``backend`` holding copies in SciPy's dtype."""
    _refuse_operator(method, "A", A)
    A = _host_array(f"{method}: A", A, ("n", "n"))
    b_array = _host_array(f"{method}: b", b)
    a_dtype, b_dtype = _real_dtype(method, "A", A), _real_dtype(method, "b", b_array)
    dtype = np.dtype(np.float32 if a_dtype == b_dtype == np.float32 else np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{method}: A must be a square matrix, not of shape {A.shape}")
    n = A.shape[0]
    session = _host_session(backend)
    upload = lambda what, v: session.array(_vector(method, what, v, n, dtype))  # noqa: E731
    # Read in place, as SciPy reads it: no copy of a large A, no fresh pages to fault in.
    a = session.array(_converted("A", A, dtype), copy=False)
    bv = upload("b", b_array)
    jacobi = _jacobi(method, M)
    if jacobi is not None:
        jacobi = upload("M", jacobi)
    x0v = _start(method, x0, bv, jacobi, upload, session)
    return session, a, bv, x0v, jacobi, lambda _, x: x.read()


# One session per backend name for the solves of host arrays, so that a solve after the first
# of its kind finds its programs compiled (a new session compiles each anew: about 10 ms a
# solve at n = 2048, as long as the solve itself there).
_HOST_SESSIONS = {}


def _host_session(backend):
    """The session host systems on ``backend`` are solved in."""
    name = backend or "auto"
    if name not in _HOST_SESSIONS:
        _HOST_SESSIONS[name] = _core.Session(backend=name, threads=None)
    return _HOST_SESSIONS[name]


def _on_gpu(method, A, b, x0, M, backend):
    """The system of a GPU A: a session on A's GPU, A copied there on the GPU, b, x0 and M
    taken from that GPU or uploaded; x handed back as a DeviceArray."""
    index = _dlpack_device(A)[1]
    session = _core.Session(backend=backend or f"cuda:{index}", threads=None)
    a = session.array_from_gpu(A)
    if len(a.shape) != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{method}: A must be a square matrix, not of shape {tuple(a.shape)}")
    n, dtype = a.shape[0], np.dtype(a.dtype)

    def upload(what, v):
        if (_dlpack_device(v) or (1, 0))[0] == 2:
            value = session.array_from_gpu(v)
            if tuple(value.shape) not in ((n,), (n, 1)) or value.dtype != dtype.name:
                raise InputError(f"{method}: {what} on the GPU must be a {dtype} vector of length {n}")
            return value
        return session.array(_vector(method, what, v, n, dtype))

    return _resident(method, session, a, b, x0, M, upload, lambda s, x: s.to_device(x))


def _in_session(method, A, b, x0, M):
    """The system of a session matrix: b, x0 and M values of its session, or arrays uploaded to
    it; x handed back as a value of the session."""
    if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{method}: A must be a square matrix, not a value of shape {tuple(A.shape)}")
    session, n, dtype = A.session, A.shape[0], np.dtype(A.dtype)

    def upload(what, v):
        if isinstance(v, _core.Value):
            return v
        return session.array(_vector(method, what, v, n, dtype))

    return _resident(method, session, A, b, x0, M, upload, lambda _, x: x)


def _resident(method, session, a, b, x0, M, upload, hand_back):
    """The rest of a system whose A is in ``session`` already."""
    _refuse_operator(method, "b", b)
    bv = upload("b", b)
    jacobi = _jacobi(method, M)
    if jacobi is not None:
        jacobi = upload("M", jacobi)
    x0v = _start(method, x0, bv, jacobi, upload, session)
    return session, a, bv, x0v, jacobi, hand_back


def _start(method, x0, bv, jacobi, upload, session):
    """x0 in the session: None for zeros, an uploaded copy (x0 is never written), or for
    ``"Mb"`` M·b (b itself without M), as SciPy."""
    if x0 is None:
        return None
    if isinstance(x0, str):
        if x0 != "Mb":
            raise ValueError(f"{method}: x0 = {x0!r}: the only string x0 is 'Mb' (M·b)")
        return bv if jacobi is None else session.call("hadamard", [jacobi, bv])
    return upload("x0", x0)

