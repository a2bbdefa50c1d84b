"""Shared helpers of the fuseblas tests: the repository's scripts, their numpy meaning
(tests/numpy_check.py, the CLI's cross-check), and the backends present here."""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples" / "python"))

import numpy_check  # noqa: E402  (the numpy meaning of every bundled sequence)

GPU = os.environ.get("FUSE_TEST_CUDA") == "1"


def backends():
    """Every backend present here: the host ones, the emulated GPU where a C++ compiler is,
    the GPU under FUSE_TEST_CUDA=1."""
    present = ["reference", "cpu"]
    if shutil.which("c++") or shutil.which("g++"):
        present.append("emulate")
    if GPU:
        present.append("cuda")
    return present


def run_python(code, **kwargs):
    """Runs `code` in an interpreter of its own (a crash there fails a test, not pytest)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, **kwargs)


def pytest_configure(config):
    # SciPy's solver tests, run by test_scipy_iterative.py, carry pytest-fail-slow's mark.
    config.addinivalue_line("markers", "fail_slow(seconds): pytest-fail-slow's time limit (SciPy's tests)")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """A cache folder of the test session's own (fuse refuses shared ones)."""
    monkeypatch.setenv("FUSE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
