#!/usr/bin/env python3
"""BiCG as PyTorch and CuPy users write it, timed per iteration on the GPU: the peers of
`examples/bicg` (the same algorithm, the same scalar reads per iteration — p̃ᵀq, ‖r‖, r̃ᵀr —
each of which waits for the GPU, unfused: A is read twice per iteration).

usage: bicg_peers.py --size N[:f32|f64]... [--iterations K] [--json FILE]

Prints one line per framework and size (median ms per iteration after the first three) and,
with --json, writes them as {"results": [{"framework", "n", "precision", "ms_per_iteration",
"iterations"}]}. A framework that is not installed is skipped with a note.
"""

import argparse
import json
import statistics
import sys
import time


def system(xp, n, dtype, seed):
    """A random nonsymmetric, strictly diagonally dominant n×n system on the GPU."""
    if xp.__name__ == "torch":
        g = xp.Generator(device="cuda").manual_seed(seed)
        a = xp.rand((n, n), generator=g, device="cuda", dtype=xp.float64) * 2 - 1
        b = xp.rand((n,), generator=g, device="cuda", dtype=xp.float64) * 2 - 1
        diag = a.abs().sum(dim=1) - a.diagonal().abs() + 1
        idx = xp.arange(n, device="cuda")
        a[idx, idx] = diag
        return a.to(getattr(xp, dtype)), b.to(getattr(xp, dtype))
    rs = xp.random.RandomState(seed)
    a = rs.uniform(-1, 1, (n, n))
    b = rs.uniform(-1, 1, n)
    diag = xp.abs(a).sum(axis=1) - xp.abs(xp.diagonal(a)) + 1
    a[xp.arange(n), xp.arange(n)] = diag
    return a.astype(dtype), b.astype(dtype)


def bicg(xp, a, b, iterations, sync):
    """BiCG from x = 0; the wall time of each iteration, ms."""
    dot = (lambda u, v: float(xp.dot(u, v))) if xp.__name__ != "torch" else (lambda u, v: xp.dot(u, v).item())
    nrm = (lambda u: float(xp.linalg.norm(u))) if xp.__name__ != "torch" else (lambda u: xp.linalg.vector_norm(u).item())
    x = xp.zeros_like(b)
    r = rt = p = pt = b
    rho = dot(rt, r)
    times = []
    sync()
    for _ in range(iterations):
        start = time.perf_counter()
        q = a @ p
        qt = a.T @ pt
        denom = dot(pt, q)
        if denom == 0 or rho == 0:
            break
        alpha = rho / denom
        x = x + alpha * p
        r = r - alpha * q
        rt = rt - alpha * qt
        rho_next = dot(rt, r)
        nrm(r)
        beta = rho_next / rho if rho else 0.0
        rho = rho_next
        p = r + beta * p
        pt = rt + beta * pt
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def frameworks():
    found = []
    try:
        import torch

        if torch.cuda.is_available():
            found.append(("torch", torch, torch.cuda.synchronize))
    except ImportError:
        print("torch: not installed, skipped", file=sys.stderr)
    try:
        import cupy

        found.append(("cupy", cupy, cupy.cuda.Device().synchronize))
    except ImportError:
        print("cupy: not installed, skipped", file=sys.stderr)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", action="append", required=True, help="N or N:f32 / N:f64 (default f64)")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--json")
    args = parser.parse_args()
    results = []
    for name, xp, sync in frameworks():
        for spec in args.size:
            n, _, precision = spec.partition(":")
            n, precision = int(n), precision or "f64"
            dtype = {"f32": "float32", "f64": "float64"}[precision]
            a, b = system(xp, n, dtype, 2024)
            times = bicg(xp, a, b, args.iterations, sync)
            steady = times[3:] or times
            ms = statistics.median(steady)
            print(f"{name:5} n={n} {precision}: median {ms:.3f} ms/iteration over {len(steady)} iterations "
                  f"(first {times[0]:.1f} ms)")
            results.append({"framework": name, "n": n, "precision": precision,
                            "ms_per_iteration": ms, "iterations": len(times)})
            del a, b
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results}, f, indent=1)


if __name__ == "__main__":
    main()
