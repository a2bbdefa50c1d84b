#!/usr/bin/env python3
"""fuseblas.linalg's solvers on a GPU against the peers a GPU user has: cupyx.scipy.sparse.linalg
(cg, gmres) and the same loops written in PyTorch (cg, bicg), on one dense system resident on
the device. Per iteration: the wall time (a solve of a fixed number of iterations, rtol too
small to stop it, over the iterations run) and, for fuseblas, the bytes that crossed from the
device to the host (the session's counters); the peers' crossings are what their loops read by
construction (named in the output), since neither counts them.

usage: gpu-solvers.py [--sizes 2048,8192] [--dtypes float64] [--iterations 40] [--rounds 3]
                      [--backend cuda] [--json FILE]

One JSON line per (method, framework, size, dtype, round) and a table of medians. A framework
that is not installed is skipped with a note. `--backend emulate` runs fuseblas's half on the
emulated device (a check of this script where there is no GPU; nothing it times means much).
The system: A = S + c·I, S symmetric uniform in [-1, 1] and c 1.1 times its spectral radius
estimate (SPD, condition number about 20), b uniform in [-1, 1]: every method applies.
"""

import argparse
import inspect
import json
import statistics
import sys
import time

import numpy as np

import fuseblas
import fuseblas.linalg as fla
from spd_system import system

TINY_RTOL = 1e-30  # never met: every solve runs its iterations, so per-iteration times compare
GMRES_RESTART = 30


def fuse_solve(backend, method, a, b, iterations):
    """ms per iteration and bytes from the device per iteration of fuseblas.linalg on a session
    of `backend` holding A and b (uploaded before the clock starts)."""
    s = fuseblas.Session(backend)
    av, bv = s.array(a), s.array(b)
    s.flush()
    kwargs = {"rtol": TINY_RTOL, "maxiter": iterations}
    if method == "gmres":
        kwargs.update(restart=GMRES_RESTART, maxiter=max(1, iterations // GMRES_RESTART))
    getattr(fla, method)(av, bv, **{**kwargs, "maxiter": 1})  # compiled before the clock starts
    before = s.stats()
    start = time.perf_counter()
    x, info, history = getattr(fla, method)(av, bv, return_history=True, **kwargs)
    seconds = time.perf_counter() - start
    # ‖r‖ is read at the start of each iteration; GMRES's history starts with ‖r₀‖.
    done = max(1, len(history) - (method == "gmres"))
    crossed = s.stats()["from_device"] - before["from_device"]
    return seconds * 1e3 / done, crossed / done, done


def cupy_solve(method, a, b, iterations):
    import cupy
    import cupyx.scipy.sparse.linalg as csla

    ad, bd = cupy.asarray(a), cupy.asarray(b)
    count = [0]

    def callback(_):
        count[0] += 1

    solver = getattr(csla, method)
    # CuPy names SciPy's old `tol` until it follows SciPy's `rtol`.
    tol = "rtol" if "rtol" in inspect.signature(solver).parameters else "tol"
    kwargs = {tol: TINY_RTOL, "maxiter": iterations, "callback": callback}
    if method == "gmres":
        cycles = max(1, iterations // GMRES_RESTART)
        kwargs.update(restart=GMRES_RESTART, maxiter=cycles, callback_type="pr_norm")
    solver(ad, bd, **{**kwargs, "maxiter": 1})
    cupy.cuda.Device().synchronize()
    count[0] = 0
    start = time.perf_counter()
    solver(ad, bd, **kwargs)
    cupy.cuda.Device().synchronize()
    # GMRES's pr_norm callback comes once a cycle in CuPy: its iterations are the cycles' inner ones.
    done = count[0] * GMRES_RESTART if method == "gmres" else count[0]
    return (time.perf_counter() - start) * 1e3 / max(1, done), done


def torch_cg(torch, a, b, iterations):
    """CG as a PyTorch user writes it: the stopping test reads ‖r‖ every iteration."""
    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rho = torch.dot(r, r)
    stop = TINY_RTOL * torch.linalg.norm(b).item()
    done = 0
    for _ in range(iterations):
        if torch.linalg.norm(r).item() <= stop:
            break
        q = a @ p
        alpha = rho / torch.dot(p, q)
        x += alpha * p
        r -= alpha * q
        rho_next = torch.dot(r, r)
        p = r + (rho_next / rho) * p
        rho = rho_next
        done += 1
    return done


def torch_bicg(torch, a, b, iterations):
    """BiCG as a PyTorch user writes it: A·p and Aᵀ·p̃ as two products (two reads of A)."""
    x = torch.zeros_like(b)
    r, rt = b.clone(), b.clone()
    p, pt = r.clone(), rt.clone()
    rho = torch.dot(rt, r)
    stop = TINY_RTOL * torch.linalg.norm(b).item()
    done = 0
    for _ in range(iterations):
        if torch.linalg.norm(r).item() <= stop:
            break
        q, qt = a @ p, a.T @ pt
        alpha = rho / torch.dot(pt, q)
        x += alpha * p
        r -= alpha * q
        rt -= alpha * qt
        rho_next = torch.dot(rt, r)
        beta = rho_next / rho
        p, pt = r + beta * p, rt + beta * pt
        rho = rho_next
        done += 1
    return done


def torch_solve(method, a, b, iterations):
    import torch

    ad, bd = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    loop = {"cg": torch_cg, "bicg": torch_bicg}[method]
    loop(torch, ad, bd, 2)
    torch.cuda.synchronize()
    start = time.perf_counter()
    done = loop(torch, ad, bd, iterations)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / max(1, done), done


# What each peer's loop reads back an iteration, by construction (neither counts its transfers).
PEER_CROSSING = {
    ("cupyx", "cg"): "‖r‖ (8 B): its stopping test",
    ("cupyx", "gmres"): "the Hessenberg column and rotations (about restart+2 numbers)",
    ("torch", "cg"): "‖r‖ (8 B): the stopping test's .item()",
    ("torch", "bicg"): "‖r‖ (8 B): the stopping test's .item()",
}
PEERS = {"cupyx": (cupy_solve, ("cg", "gmres")), "torch": (torch_solve, ("cg", "bicg"))}


def available(name):
    try:
        __import__({"cupyx": "cupyx.scipy.sparse.linalg", "torch": "torch"}[name])
        if name == "torch":
            import torch

            return torch.cuda.is_available()
        return True
    except Exception as e:  # noqa: BLE001 — any failure to import is "not here"
        print(f"note: {name} skipped: {e}", file=sys.stderr)
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2048,8192")
    parser.add_argument("--dtypes", default="float64")
    parser.add_argument("--methods", default="cg,bicg,bicgstab,gmres")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--json")
    args = parser.parse_args()
    peers = {name: run for name, run in PEERS.items() if args.backend == "cuda" and available(name)}
    results = []
    for n in map(int, args.sizes.split(",")):
        for dtype in args.dtypes.split(","):
            a, b = system(n, dtype)
            for rnd in range(1, args.rounds + 1):
                for method in args.methods.split(","):
                    ms, crossed, done = fuse_solve(args.backend, method, a, b, args.iterations)
                    results.append(dict(round=rnd, method=method, framework="fuseblas", n=n, dtype=dtype,
                                        ms_per_iteration=ms, iterations=done, bytes_to_host_per_iteration=crossed))
                    print(json.dumps(results[-1]), flush=True)
                    for name, (run, methods) in peers.items():
                        if method not in methods:
                            continue
                        ms, done = run(method, a, b, args.iterations)
                        results.append(dict(round=rnd, method=method, framework=name, n=n, dtype=dtype,
                                            ms_per_iteration=ms, iterations=done,
                                            to_host_per_iteration=PEER_CROSSING[(name, method)]))
                        print(json.dumps(results[-1]), flush=True)
    table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "fuseblas": fuseblas.__version__, "results": results}, f, indent=1)


def table(results):
    """Medians over the rounds, and each peer's time over fuseblas's (> 1: fuseblas faster)."""
    keys = sorted({(r["method"], r["n"], r["dtype"]) for r in results})
    print("\n| method | n | dtype | framework | ms / iteration | peer / fuseblas | device → host an iteration |")
    print("|---|---|---|---|---|---|---|")
    for method, n, dtype in keys:
        rows = [r for r in results if (r["method"], r["n"], r["dtype"]) == (method, n, dtype)]
        ms = {f: statistics.median(r["ms_per_iteration"] for r in rows if r["framework"] == f)
              for f in dict.fromkeys(r["framework"] for r in rows)}
        for framework, t in ms.items():
            sample = next(r for r in rows if r["framework"] == framework)
            crossing = (f"{sample['bytes_to_host_per_iteration']:.0f} B (measured)" if framework == "fuseblas"
                        else sample["to_host_per_iteration"])
            ratio = "" if framework == "fuseblas" else f"{t / ms['fuseblas']:.2f}×"
            print(f"| {method} | {n} | {dtype} | {framework} | {t:.3f} | {ratio} | {crossing} |")


if __name__ == "__main__":
    main()
