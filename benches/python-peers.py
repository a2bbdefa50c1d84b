#!/usr/bin/env python3
"""fuseblas against the same sequences written in numpy (and PyTorch on the CPU, where it is
installed), from Python, on this machine's CPU: interleaved rounds, each a median of RUNS
back-to-back calls; prints each round, then the medians of the times and of each round's own
ratios, with their range (> 1: fuseblas faster).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 benches/python-peers.py [--sizes 2048,8192] [--rounds 3] [--runs 10]

With `--device cuda` (a GPU, PyTorch with CUDA): fuseblas on the GPU called with PyTorch CUDA
tensors (read in place through DLPack, outputs left on the GPU) against PyTorch eager,
`torch.compile` and, where installed, `jax.jit` and CuPy; every call waits for its GPU work.

Needs fuseblas installed (release: `pip install ./crates/fuse-python`). The numbers are what a
Python user calling each library sees, call overhead included; inputs are the same arrays for all.
"""
import argparse
import pathlib
import statistics
import time

import numpy as np

import fuseblas

try:
    import torch
except ImportError:
    torch = None

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    jax = jnp = None

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Seconds of quiet before each library is timed (OpenBLAS's threads wait up to ~0.1 s).
QUIET_S = 0.3


# BiCGK and ATAX as their users write them in numpy, PyTorch and JAX alike (`@` and `.T`).
def bicgk(d):
    return d["A"] @ d["p"], d["A"].T @ d["r"]


def atax(d):
    return d["A"].T @ (d["A"] @ d["x"])


def gemver_with(outer):
    """GEMVER in numpy or JAX, whose outer product is `outer`."""
    def gemver(d):
        b = d["A"] + outer(d["u1"], d["v1"]) + outer(d["u2"], d["v2"])
        x = d["beta"] * (b.T @ d["y"]) + d["z"]
        return b, x, d["alpha"] * (b @ x)
    return gemver


def torch_gemver(d):
    b = torch.addr(torch.addr(d["A"], d["u1"], d["v1"]), d["u2"], d["v2"])
    x = torch.addmv(d["z"], b.T, d["y"], alpha=float(d["beta"]))
    return b, x, torch.mv(b, x) * float(d["alpha"])


JAX = {"bicgk": bicgk, "atax": atax, "gemver": gemver_with(jnp.outer) if jnp is not None else None}

SEQUENCES = {
    "bicgk": (bicgk, bicgk, ["A", "p", "r"]),
    "atax": (atax, atax, ["A", "x"]),
    "gemver": (gemver_with(np.outer), torch_gemver, ["A", "u1", "v1", "u2", "v2", "y", "z", "alpha", "beta"]),
}


def arrays(names, n, rng):
    out = {}
    for name in names:
        if name == "A":
            out[name] = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        elif name in ("alpha", "beta"):
            out[name] = np.float32(1.5 if name == "alpha" else 0.5)
        else:
            out[name] = rng.uniform(-1, 1, n).astype(np.float32)
    return out


def gpu_calls(program, name, data):
    """The GPU contenders of one point, each call returning once its GPU work is done."""
    torch_fn, jax_fn = SEQUENCES[name][1], JAX[name]
    cuda = {k: torch.from_numpy(np.atleast_1d(v)).cuda() if np.ndim(v) else float(v) for k, v in data.items()}
    sync = torch.cuda.synchronize

    def timed(fn, args):
        return lambda: (fn(args), sync())

    calls = {"fuseblas": lambda: program(**cuda), "torch": timed(torch_fn, cuda),
             "torch.compile": timed(torch.compile(torch_fn), cuda)}
    if jnp is not None:
        jarrays = {k: jax.device_put(v) for k, v in data.items()}
        jitted = jax.jit(jax_fn)
        calls["jax.jit"] = lambda: jax.block_until_ready(jitted(jarrays))
    return calls


def median_us(call, runs):
    call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2048,8192")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    if fuseblas.build_profile != "release":
        raise SystemExit(f"fuseblas here is a {fuseblas.build_profile} build (the test suite's, unoptimised): "
                         "time a release one (pip install ./crates/fuse-python)")
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    if args.device == "cuda":
        peers = f"torch {torch.__version__} eager and torch.compile" + (f", jax {jax.__version__} jit" if jnp is not None else "")
        print(f"fuseblas {fuseblas.__version__} (cuda backend, PyTorch CUDA tensors in and out); peers: {peers}; f32")
    else:
        peers = "numpy" + (f", torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch else "")
        print(f"fuseblas {fuseblas.__version__} (cpu backend), numpy {np.__version__}; peers: {peers}; f32")
    points = {}
    for n in sizes:
        for name, (np_fn, torch_fn, names) in SEQUENCES.items():
            data = arrays(names, n, rng)
            program = fuseblas.compile(ROOT / "scripts" / f"{name}.yaml", backend=args.device, sizes={"m": n, "n": n})
            if args.device == "cuda":
                points[(name, n)] = (calls := gpu_calls(program, name, data), {k: [] for k in calls})
                continue
            tensors = {k: (torch.from_numpy(np.atleast_1d(v)) if np.ndim(v) else v) for k, v in data.items()} if torch else None
            # Bound now: a closure over the loop's variables would see the last point's.
            calls = {"fuseblas": lambda p=program, d=data: p(**d), "numpy": lambda f=np_fn, d=data: f(d)}
            if torch:
                calls["torch"] = lambda f=torch_fn, t=tensors: f(t)
            points[(name, n)] = (calls, {k: [] for k in calls})
    for round_ in range(args.rounds):
        for (name, n), (calls, times) in points.items():
            for who, call in calls.items():
                # OpenBLAS's threads spin for a while after numpy's last call, taking the cores
                # the next library's threads need: let them go to sleep first.
                time.sleep(QUIET_S)
                times[who].append(median_us(call, args.runs))
            line = ", ".join(f"{who} {t[-1]:.0f} µs" for who, t in times.items())
            print(f"round {round_ + 1}: {name} {n}²: {line}")
    who_all = list(next(iter(points.values()))[1])
    peers = [who for who in who_all if who != "fuseblas"]
    print("\n| sequence | size | " + " | ".join(f"{who} µs" for who in who_all) + " | " + " | ".join(f"{p} / fuseblas" for p in peers) + " |")
    print("|---" * (2 + len(who_all) + len(peers)) + "|")
    for (name, n), (_, times) in points.items():
        med = {who: statistics.median(t) for who, t in times.items()}
        ratios = " | ".join(ratio(times, p) for p in peers)
        print(f"| {name} | {n}² | " + " | ".join(f"{v:.0f}" for v in med.values()) + f" | {ratios} |")


def ratio(times, peer):
    """The median of the rounds' own ratios peer / fuseblas, with their range: the libraries of
    one round are timed seconds apart, so a slow spell of the shared machine shifts both."""
    r = sorted(p / f for p, f in zip(times[peer], times["fuseblas"]))
    return f"{statistics.median(r):.2f}× ({r[0]:.2f}–{r[-1]:.2f})"


if __name__ == "__main__":
    main()
