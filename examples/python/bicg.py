#!/usr/bin/env python3
"""BiCG from Python: the solver of the Rust `bicg` example (crates/fuse/examples/bicg), on the
same system, with the same arguments and output — through fuseblas's lazy session, or in
numpy (`--backend numpy`) to compare the time per iteration with.

    python3 examples/python/bicg.py [N] [--backend auto|cpu|cuda|emulate|reference|numpy]
                                    [--precision f32|f64] [--iterations K] [--no-stop]

The solver is written once against five operations. Through fuseblas each iteration records
the BiCGK pair q = A·p, q̃ = Aᵀ·p̃ with the vector updates, and reading a scalar (p̃ᵀq, ‖r‖)
runs what is recorded as one fused program that reads A once; numpy reads A twice.
"""
import argparse
import statistics
import time

import numpy as np

SEED = 2024


def uniform(seed, start, count):
    """Numbers `start`… of stream `seed`, uniform in [-1, 1): splitmix64 of seed·2⁴⁰ + k, top
    53 bits — the numbers the Rust example draws (solver.rs `uniform`)."""
    z = np.arange(start, start + count, dtype=np.uint64) + np.uint64((seed << 40) + 0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-52 - 1.0


def system(n, seed=SEED):
    """The Rust example's system: A row by row, then b; each diagonal element the sum of its
    row's other magnitudes plus one (strictly diagonally dominant, so BiCG converges)."""
    a = np.empty((n, n))
    rows = max(1, (1 << 22) // n)  # a few MiB of numbers at a time
    for i in range(0, n, rows):
        k = min(rows, n - i)
        a[i : i + k] = uniform(seed, i * n, k * n).reshape(k, n)
    a[np.diag_indices(n)] = np.abs(a).sum(axis=1) - np.abs(np.diagonal(a)) + 1.0
    return a, uniform(seed, n * n, n)


class Numpy:
    """The five operations in numpy (A·p and Aᵀ·p̃ are two reads of A)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def array(self, v):
        return np.array(v, dtype=self.dtype)

    def scalar(self, v):
        return self.dtype.type(v)

    gemv = staticmethod(lambda a, x: a @ x)
    gemtv = staticmethod(lambda a, x: a.T @ x)
    axpy = staticmethod(lambda a, x, y: a * x + y)
    dot = staticmethod(lambda x, y: x @ y)
    nrm2 = staticmethod(np.linalg.norm)

    def read(self, v):
        return np.asarray(v, dtype=np.float64)


class Fuse:
    """The five operations on a fuseblas session: recorded, run fused when a scalar is read."""

    def __init__(self, dtype, backend):
        import fuseblas

        self.s = fuseblas.Session(backend)
        self.dtype = dtype
        self.gemv, self.gemtv, self.axpy = self.s.gemv, self.s.gemtv, self.s.axpy
        self.dot, self.nrm2 = self.s.dot, self.s.nrm2

    def array(self, v):
        return self.s.array(v, dtype=self.dtype)

    def scalar(self, v):
        # A run-time scalar, not a literal: the recorded program stays the same every iteration.
        return self.s.scalar(v, self.dtype)

    def read(self, v):
        return np.asarray(v, dtype=np.float64)


def bicg(ops, a, b, tol, iterations, on_iteration):
    """BiCG from x = 0, step for step as solver.rs; returns x and the residual history."""
    a, b = ops.array(a), ops.array(b)
    x = ops.array(np.zeros(b.shape[0]))
    r, rt, p, pt = b, b, b, b
    b_norm = float(ops.nrm2(b))
    rho = float(ops.dot(rt, r))
    residuals = []
    for k in range(1, iterations + 1):
        q, qt = ops.gemv(a, p), ops.gemtv(a, pt)
        curvature = float(ops.dot(pt, q))
        if curvature == 0.0 or rho == 0.0:
            break
        alpha = rho / curvature
        x = ops.axpy(ops.scalar(alpha), p, x)
        r = ops.axpy(ops.scalar(-alpha), q, r)
        rt = ops.axpy(ops.scalar(-alpha), qt, rt)
        rho_next = ops.dot(rt, r)  # read below, computed with the residual
        residual = float(ops.nrm2(r)) / b_norm
        residuals.append(residual)
        on_iteration(k, residual)
        if residual < tol or not np.isfinite(residual):
            break
        rho_next = float(rho_next)
        beta = ops.scalar(rho_next / rho)
        rho = rho_next
        p = ops.axpy(beta, p, r)  # p = r + β·p, run with the next iteration's q
        pt = ops.axpy(beta, pt, rt)
    return ops.read(x), residuals


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", nargs="?", type=int, default=500, help="the system size n (A is n×n)")
    parser.add_argument("--backend", default="auto", help="a fuse backend, or numpy [default: auto]")
    parser.add_argument("--precision", choices=["f32", "f64"], default="f64")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--no-stop", action="store_true", help="run every iteration, converged or not")
    args = parser.parse_args()
    dtype = np.dtype(np.float32 if args.precision == "f32" else np.float64)
    tol = 0.0 if args.no_stop else (1e-5 if dtype == np.float32 else 1e-10)
    a, b = system(args.n)
    if args.backend == "numpy":
        ops, where = Numpy(dtype), f"numpy {np.__version__}"
        a, b = a.astype(dtype), b.astype(dtype)
    else:
        ops = Fuse(dtype, args.backend)
        where = f"backend {ops.s.backend}"
    print(f"BiCG, n = {args.n}, {args.precision}, {where}")
    times = []
    last = [time.perf_counter()]

    def on_iteration(k, residual):
        now = time.perf_counter()
        times.append(now - last[0])
        print(f"iteration {k:3}  ‖r‖/‖b‖ = {residual:.3e}  {times[-1] * 1e3:8.3f} ms")
        last[0] = time.perf_counter()

    x, residuals = bicg(ops, a, b, tol, args.iterations, on_iteration)
    true = np.linalg.norm(b - a.astype(np.float64) @ x) / np.linalg.norm(b)
    print(f"{len(residuals)} iterations; true residual ‖b − A·x‖/‖b‖ = {true:.3e}")
    steady = times[3:]
    if steady:
        print(f"time per iteration (median of iterations 4–{len(times)}): {statistics.median(steady) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
