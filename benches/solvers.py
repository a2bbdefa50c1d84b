#!/usr/bin/env python3
"""fuseblas.linalg against scipy.sparse.linalg on the same dense system, on this machine's CPU:
time to solution and per iteration, interleaved rounds (SciPy, then fuseblas with A as a numpy
array — the session's copy of A included — then fuseblas with A already a session matrix),
each the same tolerance from the same start. Prints each round, then the medians and the ratios
(> 1: fuseblas faster).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 benches/solvers.py [--n 8192] [--rounds 3]
        [--methods bicg,cg,bicgstab,gmres] [--dtypes float64,float32] [--general]

The system: A = S + c·I with S symmetric, uniform in [-1, 1], c 1.1 times S's spectral radius
estimate 2·√(n/3) (symmetric positive definite, so every method applies; condition number about
20); b uniform in [-1, 1]; rtol 1e-6, GMRES restart 30. fuseblas multiplies a symmetric A by its
upper triangle only; `--general` adds a skew-symmetric part, so that A is not symmetric and every
product reads all of it (CG, for symmetric systems, is then left out). Needs a release build of fuseblas
(`pip install ./crates/fuse-python`); the numpy BLAS and its threads are printed (threadpoolctl).
"""
import argparse
import os
import statistics
import time

import numpy as np
import scipy
import scipy.sparse.linalg as sla

import fuseblas
import fuseblas.linalg as fla
from spd_system import system

QUIET_S = 0.2  # seconds of quiet before each timing (OpenBLAS's threads wait up to ~0.1 s)


def iterations_of(method, A, b, kwargs):
    """SciPy's iteration count, counted by its products with A (GMRES: its inner iterations
    plus one residual a restart cycle)."""
    count = [0]
    op = sla.LinearOperator(A.shape, matvec=lambda v: (count.__setitem__(0, count[0] + 1), A @ v)[1],
                            rmatvec=lambda v: A.T @ v, dtype=A.dtype)
    _, info = getattr(sla, method)(op, b, **kwargs)
    per = {"cg": 1, "bicg": 1, "bicgstab": 2, "gmres": 1}[method]
    return count[0], per, info


def products(A, session, A_resident, rounds=7):
    """The iterations' one O(n²) part alone: numpy's A@p and A.T@p against fuseblas's gemv and
    gemtv on the resident matrix (read back), medians of interleaved calls, in ms."""
    p = np.ones(A.shape[0], A.dtype)
    pv = session.array(p)
    runs = {"numpy A@p": lambda: A @ p, "numpy A.T@p": lambda: A.T @ p,
            "fuseblas gemv": lambda: np.asarray(session.gemv(A_resident, pv)),
            "fuseblas gemtv": lambda: np.asarray(session.gemtv(A_resident, pv))}
    times = {k: [] for k in runs}
    for f in runs.values():
        f()
    for _ in range(rounds):
        for k, f in runs.items():
            times[k].append(timed(f)[0])
    return ", ".join(f"{k} {1e3 * statistics.median(v):.1f}" for k, v in times.items())


def timed(f):
    time.sleep(QUIET_S)
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default="bicg,cg,bicgstab,gmres")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--rtol", type=float, default=1e-6)
    parser.add_argument("--general", action="store_true",
                        help="a system that is not symmetric (see spd_system.py); CG is left out")
    args = parser.parse_args()
    if args.general:
        args.methods = ",".join(m for m in args.methods.split(",") if m != "cg")
    if fuseblas.build_profile != "release":
        raise SystemExit("fuseblas is a dev build: install a release one (pip install ./crates/fuse-python)")
    try:
        from threadpoolctl import threadpool_info

        blas = "; ".join(f"{i['internal_api']} {i['version']} ({i.get('architecture', '?')}), {i['num_threads']} threads"
                         for i in threadpool_info() if i["user_api"] == "blas")
    except ImportError:
        blas = "unknown (install threadpoolctl)"
    print(f"numpy {np.__version__} BLAS: {blas}; scipy {scipy.__version__}; fuseblas {fuseblas.__version__} "
          f"({fuseblas.build_profile}), FUSE_NUM_THREADS={os.environ.get('FUSE_NUM_THREADS', 'all cores')}, "
          f"{os.cpu_count()} CPUs; n = {args.n}, rtol = {args.rtol}, "
          f"A {'not symmetric' if args.general else 'symmetric positive definite'}")
    print(f"uptime: {os.getloadavg()}")
    for dtype in args.dtypes.split(","):
        A, b = system(args.n, dtype, general=args.general)
        session = fuseblas.Session(backend="cpu")
        A_resident = session.array(A)
        print(f"{dtype} products alone (ms): {products(A, session, A_resident)} (load {os.getloadavg()[0]:.2f})",
              flush=True)
        for method in args.methods.split(","):
            kwargs = {"rtol": args.rtol, **({"restart": 30} if method == "gmres" else {})}
            matvecs, per, info = iterations_of(method, A, b, kwargs)
            # Compile at these sizes first (cached on disk after).
            getattr(fla, method)(A_resident, b, maxiter=2, **kwargs)
            rounds = {"scipy": [], "fuse": [], "fuse-resident": []}
            for r in range(args.rounds):
                t_s, (x_s, i_s) = timed(lambda: getattr(sla, method)(A, b, **kwargs))
                t_f, (x_f, i_f) = timed(lambda: getattr(fla, method)(A, b, backend="cpu", **kwargs))
                t_r, (x_r, i_r) = timed(lambda: getattr(fla, method)(A_resident, b, **kwargs))
                assert i_s == i_f == i_r == 0, (i_s, i_f, i_r)
                for k, v in (("scipy", t_s), ("fuse", t_f), ("fuse-resident", t_r)):
                    rounds[k].append(v)
                print(f"  {method} {dtype} round {r + 1}: scipy {t_s:.3f} s, fuseblas {t_f:.3f} s, "
                      f"resident {t_r:.3f} s (load {os.getloadavg()[0]:.2f})", flush=True)
            its = matvecs // per
            med = {k: statistics.median(v) for k, v in rounds.items()}
            print(f"{method} {dtype}: {its} iterations (SciPy's count); scipy {med['scipy']:.3f} s "
                  f"({1e3 * med['scipy'] / its:.1f} ms/it), fuseblas {med['fuse']:.3f} s "
                  f"({1e3 * med['fuse'] / its:.1f} ms/it), resident {med['fuse-resident']:.3f} s "
                  f"({1e3 * med['fuse-resident'] / its:.1f} ms/it); "
                  f"ratio {med['scipy'] / med['fuse']:.2f}× (numpy A), {med['scipy'] / med['fuse-resident']:.2f}× (resident)",
                  flush=True)
    print(f"uptime: {os.getloadavg()}")


if __name__ == "__main__":
    main()
