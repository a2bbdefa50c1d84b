#!/usr/bin/env python3
"""BiCG in numpy: the solver of the `bicg` example (main.rs, solver.rs) as a numpy user writes
it, with the same arguments and the same output, to compare the time per iteration with.

    python3 crates/fuse/examples/bicg/bicg_numpy.py [N] [--precision f32|f64] [--iterations K] [--no-stop]

The system is of the same kind — random, nonsymmetric, strictly diagonally dominant — drawn
by numpy's generator, so its numbers (and residuals) differ from the Rust example's; the work
per iteration is the same: A·p and Aᵀ·p̃ (two reads of A: numpy does not fuse them), five
axpys, three dots and a norm, and the same three scalars read back.
"""
import argparse
import statistics
import time

import numpy as np


def system(n, dtype, seed=2024):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, (n, n))
    a[np.diag_indices(n)] = np.abs(a).sum(axis=1) - np.abs(np.diagonal(a)) + 1.0
    b = rng.uniform(-1.0, 1.0, n)
    return a.astype(dtype), b.astype(dtype)


def bicg(a, b, tol, iterations, on_iteration):
    """BiCG from x = 0, step for step as solver.rs; returns x and the residual history."""
    x = np.zeros_like(b)
    r, rt, p, pt = b.copy(), b.copy(), b.copy(), b.copy()
    b_norm = float(np.linalg.norm(b))
    rho = float(rt @ r)
    residuals = []
    for k in range(1, iterations + 1):
        q, qt = a @ p, a.T @ pt
        curvature = float(pt @ q)
        if curvature == 0.0 or rho == 0.0:
            break
        alpha = a.dtype.type(rho / curvature)
        x += alpha * p
        r -= alpha * q
        rt -= alpha * qt
        residual = float(np.linalg.norm(r)) / b_norm
        residuals.append(residual)
        on_iteration(k, residual)
        if residual < tol or not np.isfinite(residual):
            break
        rho_next = float(rt @ r)
        beta = a.dtype.type(rho_next / rho)
        rho = rho_next
        p = r + beta * p
        pt = rt + beta * pt
    return x, residuals


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", nargs="?", type=int, default=500, help="the system size n (A is n×n)")
    parser.add_argument("--precision", choices=["f32", "f64"], default="f64")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--no-stop", action="store_true", help="run every iteration, converged or not")
    args = parser.parse_args()
    dtype = np.float32 if args.precision == "f32" else np.float64
    tol = 0.0 if args.no_stop else (1e-5 if dtype == np.float32 else 1e-10)
    a, b = system(args.n, dtype)
    print(f"BiCG, n = {args.n}, {args.precision}, numpy {np.__version__}")
    times = []
    last = [time.perf_counter()]

    def on_iteration(k, residual):
        now = time.perf_counter()
        times.append(now - last[0])
        print(f"iteration {k:3}  ‖r‖/‖b‖ = {residual:.3e}  {times[-1] * 1e3:8.3f} ms")
        last[0] = time.perf_counter()

    x, residuals = bicg(a, b, tol, args.iterations, on_iteration)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    true = np.linalg.norm(b64 - a64 @ x.astype(np.float64)) / np.linalg.norm(b64)
    print(f"{len(residuals)} iterations; true residual ‖b − A·x‖/‖b‖ = {true:.3e}")
    steady = times[3:]
    if steady:
        print(f"time per iteration (median of iterations 4–{len(times)}): {statistics.median(steady) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
