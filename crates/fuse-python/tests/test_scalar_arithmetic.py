"""Scalar arithmetic on session values: the operators and Session.sqrt/recip/max/min record
scalar calls (computed on the device, read back only when read), against numpy's f64 math."""

import math

import numpy as np
import pytest

import fuseblas
from conftest import backends

# Relative to the largest magnitude involved: f32 rounds each of a few operations on dots of
# 200 terms (≈ 1e-6 each); f64 the same at 1e-15.
TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_operators_and_functions_match_numpy(backend, dtype):
    rng = np.random.default_rng(5)
    n = 200
    x, y = (rng.uniform(-1, 1, n).astype(dtype) for _ in range(2))
    s = fuseblas.Session(backend)
    vx, vy = s.array(x), s.array(y)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    a, b, c = s.dot(vx, vy), s.nrm2(vx), s.scalar(-1.75, dtype)
    a64, b64, c64 = x64 @ y64, np.linalg.norm(x64), -1.75
    cases = [
        (a / b, a64 / b64),
        (a * b, a64 * b64),
        (a - b, a64 - b64),
        (a + c, a64 + c64),
        (-a, -a64),
        (abs(c), 1.75),
        (2.0 * a, 2 * a64),
        (a / 3, a64 / 3),
        (3 - b, 3 - b64),
        (1 / b, 1 / b64),
        (b + 1, b64 + 1),
        (np.float32(2) * b, 2 * b64),
        (b * np.int64(-3), -3 * b64),
        (np.array(0.5) + b, 0.5 + b64),
        (s.sqrt(b), math.sqrt(b64)),
        (s.recip(c), 1 / c64),
        (s.max(a, c), max(a64, c64)),
        (s.min(-0.5, b), min(-0.5, b64)),
        ((a / b) * (c / (b + 1.0)) - abs(-a), (a64 / b64) * (c64 / (b64 + 1)) - abs(a64)),
    ]
    axpy = s.axpy(a / b, vx, vy)  # an expression as a BLAS call's scalar argument
    assert s.stats()["flushes"] == 0  # all recorded, nothing run
    for value, want in cases:
        assert value.shape == [] and value.dtype == np.dtype(dtype).name
        got = value.read()
        assert isinstance(got, float)
        assert abs(got - want) <= TOLERANCE[dtype] * max(abs(a64), b64, 2.0), (got, want)
    got = np.asarray(axpy, dtype=np.float64)
    assert np.linalg.norm(got - (a64 / b64 * x64 + y64)) <= TOLERANCE[dtype] * np.linalg.norm(y64) * 10
    assert s.stats()["flushes"] == 1  # one fused program computed them all


@pytest.mark.parametrize("backend", backends())
def test_division_by_zero_is_ieee(backend):
    s = fuseblas.Session(backend)
    one, zero = s.scalar(1.0, np.float32), s.scalar(0.0, np.float32)
    assert (one / zero).read() == math.inf
    assert (-one / zero).read() == -math.inf
    assert math.isnan((zero / zero).read())
    assert s.recip(s.scalar(-0.0, np.float32)).read() == -math.inf
    # A product by a zero scalar is +0 as in BLAS (README, "α = 0"): -0 is no negative zero.
    assert s.recip(-zero).read() == math.inf


@pytest.mark.parametrize("backend", backends())
def test_a_bicgstab_beta_reads_nothing_back_until_read(backend):
    # β = (ρ₁/ρ)·(α/ω) from four dots, then p = r + β·p: recorded, all on the device.
    rng = np.random.default_rng(9)
    r, r0, p, v = (rng.uniform(-1, 1, 300) for _ in range(4))
    s = fuseblas.Session(backend)
    vr, vr0, vp, vv = (s.array(a) for a in (r, r0, p, v))
    rho1, rho, alpha, omega = s.dot(vr, vr0), s.dot(vp, vr0), s.dot(vv, vr0), s.nrm2(vv)
    beta = (rho1 / rho) * (alpha / omega)
    p_next = s.axpy(beta, vp, vr)
    stats = s.stats()
    assert (stats["flushes"], stats["from_device"]) == (0, 0)
    # The quotients and their product are calls of the pending script, not host arithmetic.
    (script,) = s.pending_scripts()
    assert script.count("ddiv(") == 2 and script.count("dmul(") == 1, script
    want_beta = (r @ r0 / (p @ r0)) * (v @ r0 / np.linalg.norm(v))
    got = np.asarray(p_next)
    assert np.linalg.norm(got - (want_beta * p + r)) <= 1e-12 * np.linalg.norm(want_beta * p + r)
    assert abs(beta.read() - want_beta) <= 1e-12 * abs(want_beta)
    stats = s.stats()
    # One flush computed β and p together; reading β then ran nothing more.
    assert (stats["flushes"], stats["compilations"]) == (1, 1)


def test_wrong_operands_are_type_errors_that_say_what_is_wrong():
    s, other = fuseblas.Session("cpu"), fuseblas.Session("cpu")
    x = s.array(np.ones(3))
    a = s.dot(x, x)
    cases = [
        (lambda: a / x, r"`/`: the right operand is a vector of shape \[3\], not a scalar"),
        (lambda: x * 2.0, r"`\*`: the left operand is a vector of shape \[3\], not a scalar"),
        (lambda: -x, r"`-`: the operand is a vector"),
        (lambda: a + s.array(np.ones((2, 2))), r"`\+`: the right operand is a matrix of shape \[2, 2\]"),
        (lambda: a - "1", r"`-`: the right operand is a <class 'str'>; scalar arithmetic takes"),
        (lambda: "1" * a, r"`\*`: the left operand is a <class 'str'>"),
        (lambda: a + True, r"the right operand is a <class 'bool'>"),
        (lambda: a * 1j, r"the right operand is a <class 'complex'>"),
        (lambda: a * np.ones(3), r"the right operand is a <class 'numpy.ndarray'>"),
        (lambda: a * np.array(True), r"the right operand is a <class 'numpy.ndarray'>"),
        (lambda: a / other.scalar(1.0), r"`/`: the right operand is a value of another session"),
        (lambda: a + s.scalar(1.0, np.float32), r"`\+`: the right operand is float32, the others float64; one scalar call computes in one precision"),
        (lambda: s.sqrt(x), r"sqrt: argument 1 is a vector of shape \[3\], not a scalar"),
        (lambda: s.max(a, None), r"max: argument 2 is a <class 'NoneType'>"),
        (lambda: s.min(a, other.scalar(1.0)), r"min: argument 2 is a value of another session"),
        (lambda: s.recip("2"), r"recip: argument 1 is a <class 'str'>"),
    ]
    for make, message in cases:
        with pytest.raises(TypeError, match=message):
            make()
    with pytest.raises(fuseblas.InputError, match=r"`\*`: the right operand: 1e300 does not fit float32"):
        s.scalar(1.0, np.float32) * 1e300
    with pytest.raises(fuseblas.InputError, match="at least one argument must be a value"):
        s.max(1.0, 2.0)
    assert s.stats()["flushes"] == 0  # nothing was read to find out
