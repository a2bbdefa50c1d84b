"""SciPy's own tests of its iterative solvers (scipy/sparse/linalg/_isolve/tests/
test_iterative.py of the installed SciPy) run against fuseblas.linalg.

A private copy of SciPy's test module is loaded with ``scipy.sparse.linalg._isolve``'s
``cg``, ``bicg``, ``bicgstab`` and ``gmres`` replaced by shims that call fuseblas's, so every
name the tests call through (their ``_SOLVERS``, ``case.solver``, ``gmres`` in TestGMRES) is
fuseblas's. The shim densifies SciPy's sparse test matrices (``.toarray()``) and skips, with
the reason, what fuseblas.linalg does not do: complex systems, preconditioners other than
Jacobi (a matrix or a LinearOperator M, a LinearOperator A) and GMRES callbacks other than
``callback_type='x'``. Where such a call comes part-way through a test (test_atol's M=None
combinations run first, then a matrix M), the part before it has passed. SciPy's other solvers
(cgs, minres, qmr, …) are not collected here.
"""

import functools
import importlib.util
import pathlib

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg._isolve as isolve
from scipy.sparse.linalg import LinearOperator

import fuseblas.linalg as fuse_linalg

NAMES = ("bicg", "bicgstab", "cg", "gmres")


def shim(name):
    """fuseblas's ``name`` behind SciPy's ``name`` (its ``__name__`` too, which SciPy's test
    ids and skips read)."""
    fuse = getattr(fuse_linalg, name)

    @functools.wraps(getattr(isolve, name))
    def solver(A, b, *args, **kwargs):
        if isinstance(A, LinearOperator):
            pytest.skip(f"A is a LinearOperator: fuseblas.linalg.{name} takes a dense matrix")
        if scipy.sparse.issparse(A):
            A = A.toarray()
        if np.iscomplexobj(A) or np.iscomplexobj(b):
            pytest.skip("a complex system: fuseblas solves real systems only")
        M = kwargs.get("M")
        if M is not None and np.ndim(M) != 1:
            pytest.skip(f"M is {type(M).__name__}: fuseblas.linalg takes only Jacobi (a 1-D inverse diagonal)")
        if name == "gmres" and kwargs.get("callback") is not None and kwargs.get("callback_type") != "x":
            kind = kwargs.get("callback_type", "legacy, SciPy's deprecated default")
            pytest.skip(f"gmres callback_type={kind}: fuseblas calls callback(xk) per restart cycle only ('x')")
        return getattr(fuse_linalg, name)(A, b, *args, **kwargs)

    return solver


def load_scipy_tests():
    """A private copy of SciPy's test module, its solvers fuseblas's."""
    path = pathlib.Path(isolve.__file__).parent / "tests" / "test_iterative.py"
    spec = importlib.util.spec_from_file_location("scipy_test_iterative_on_fuseblas", path)
    module = importlib.util.module_from_spec(spec)
    originals = {name: getattr(isolve, name) for name in NAMES}
    try:
        for name in NAMES:
            setattr(isolve, name, shim(name))
        spec.loader.exec_module(module)
    finally:
        for name, original in originals.items():
            setattr(isolve, name, original)
    shims = {getattr(module, name) for name in NAMES}
    module._SOLVERS = [s for s in module._SOLVERS if s in shims]
    return module, shims


scipy_tests, SHIMS = load_scipy_tests()
SOLVERS = scipy_tests._SOLVERS
CASES = [c for c in scipy_tests.cases if c.solver in SHIMS]


@pytest.fixture(params=SOLVERS, ids=[s.__name__ for s in SOLVERS])
def solver(request):
    return request.param


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def case(request):
    return request.param


test_maxiter = scipy_tests.test_maxiter
test_convergence = scipy_tests.test_convergence
test_precond_dummy = scipy_tests.test_precond_dummy
test_precond_inverse = scipy_tests.test_precond_inverse
test_atol = scipy_tests.test_atol
test_zero_rhs = scipy_tests.test_zero_rhs
test_x0_working = scipy_tests.test_x0_working
test_x0_equals_Mb = scipy_tests.test_x0_equals_Mb
test_positional_error = scipy_tests.test_positional_error
test_invalid_atol = scipy_tests.test_invalid_atol
TestGMRES = scipy_tests.TestGMRES


@pytest.mark.parametrize("solver", SOLVERS, ids=[s.__name__ for s in SOLVERS])
def test_x0_solves_problem_exactly(solver):
    scipy_tests.test_x0_solves_problem_exactly(solver)


def test_the_shim_calls_fuseblas(monkeypatch):
    """Each shim reaches fuseblas.linalg (not SciPy's solver), and SciPy's module is left as
    it was."""
    called = []
    for name in NAMES:
        monkeypatch.setattr(fuse_linalg, name, lambda *a, name=name, **k: called.append(name) or (None, 0))
    for s in SOLVERS:
        s(np.eye(2), np.ones(2))
    assert sorted(called) == sorted(NAMES)
    assert all(getattr(isolve, name).__module__.startswith("scipy.") for name in NAMES)
