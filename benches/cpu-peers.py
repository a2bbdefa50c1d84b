#!/usr/bin/env python3
"""fuse's CPU backend against numpy + OpenBLAS on the same sequences, in one interleaved run.

Each round visits every (sequence, size) once: numpy's version of the sequence is timed in
this process (median of RUNS, both back to back and the way `fuse bench` times fuse: each run
right after an untimed one, a copy of the problem's bytes between), then
`fuse bench --backend cpu --json` times fuse's chosen plan and its unfused plan. A busy minute
of the shared machine so touches one measurement of a point, not all of them. Prints one JSON
line per point and round, then a Markdown table: the medians of the times over the rounds, and
of each round's own ratio numpy / fuse (> 1: fuse faster) with the rounds' range.
`--table RAW...` tabulates earlier runs' output, pooled, without timing anything.

The first line says which machine ran it (`{"machine": ...}`): the CPU's model name, its
instruction set as fuse's kernels use it (and `FUSE_SIMD` where set), its caches, the threads
fuse and numpy run, and numpy's BLAS with the kernels it chose (threadpoolctl's `architecture`,
where threadpoolctl is installed: `pip install threadpoolctl`). Each point's line repeats the
instruction set `fuse bench` reported running in.

Where PyTorch is installed, its CPU build is timed the same way on the same arrays (shared with
numpy through `torch.from_numpy`, no copy), at its default thread count.

Run it with OpenBLAS's own kernel choice, as a user's numpy runs:
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 benches/cpu-peers.py > raw.txt
As an AVX2-only CPU runs, on one with AVX-512: both sides held to AVX2 (the first line then
names OpenBLAS's `Haswell` kernels):
    env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=Haswell FUSE_SIMD=avx2 python3 benches/cpu-peers.py

f64 runs the same scripts with `precision: f64` and the d-prefixed functions (written to a
temporary folder), against numpy in float64. The BLAS-1 sequences (vadd, waxpby, axpydot,
sscal, normalize) at size N run on vectors of N² elements, as many as the matrices of the others.
"""
import argparse
import json
import os
import statistics
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    import torch
except ImportError:  # the table then has numpy alone
    torch = None

try:
    from threadpoolctl import threadpool_info
except ImportError:  # the summary then names numpy's BLAS from its build configuration
    threadpool_info = None

# The sequences of scripts/, written as numpy users write them.
SEQUENCES = {
    "sgemv": (lambda d: d["alpha"] * (d["A"] @ d["x"]) + d["beta"] * d["y"]),
    "bicgk": (lambda d: (d["A"] @ d["p"], d["A"].T @ d["r"])),
    "atax": (lambda d: d["A"].T @ (d["A"] @ d["x"])),
    "gesummv": (lambda d: d["alpha"] * (d["A"] @ d["x"]) + d["beta"] * (d["B"] @ d["x"])),
    "sgemvt": (lambda d: sgemvt(d)),
    "gemver": (lambda d: gemver(d)),
    "sgemtv": (lambda d: d["beta"] * (d["A"].T @ d["y"]) + d["z"]),
    "madd": (lambda d: d["A"] + d["B"]),
    "vadd": (lambda d: d["w"] + d["y"] + d["z"]),
    "waxpby": (lambda d: d["alpha"] * d["x"] + d["beta"] * d["y"]),
    "axpydot": (lambda d: axpydot(d, lambda z, u: z @ u)),
    "sscal": (lambda d: d["alpha"] * d["x"]),
    "bicgstab": (lambda d: bicgstab(d)),
    "normalize": (lambda d: d["x"] / np.linalg.norm(d["x"])),
}
# The BLAS-1 sequences: at "size" N they run on vectors of N² elements, as many as a matrix.
BLAS1 = ("vadd", "waxpby", "axpydot", "sscal", "normalize")
BLAS1_VECTORS = "uvwxyz"
# The same in PyTorch, as its users write them (`addmv`/`addr` where they fit).
TORCH_SEQUENCES = {
    "sgemv": (lambda d: torch.addmv(d["y"], d["A"], d["x"], beta=d["beta"], alpha=d["alpha"])),
    "bicgk": (lambda d: (torch.mv(d["A"], d["p"]), torch.mv(d["A"].T, d["r"]))),
    "atax": (lambda d: torch.mv(d["A"].T, torch.mv(d["A"], d["x"]))),
    "gesummv": (lambda d: torch.addmv(torch.mv(d["B"], d["x"]), d["A"], d["x"], beta=d["beta"], alpha=d["alpha"])),
    "sgemvt": (lambda d: torch_sgemvt(d)),
    "gemver": (lambda d: torch_gemver(d)),
    "sgemtv": (lambda d: torch.addmv(d["z"], d["A"].T, d["y"], alpha=d["beta"])),
    "madd": (lambda d: d["A"] + d["B"]),
    "vadd": (lambda d: d["w"] + d["y"] + d["z"]),
    "waxpby": (lambda d: torch.add(d["alpha"] * d["x"], d["y"], alpha=d["beta"])),
    "axpydot": (lambda d: axpydot(d, torch.dot)),
    "sscal": (lambda d: d["alpha"] * d["x"]),
    "bicgstab": (lambda d: bicgstab(d)),
    "normalize": (lambda d: d["x"] / torch.linalg.vector_norm(d["x"])),
}
# Sequences of one square matrix, sized by `n` alone.
SQUARE = ("bicgstab",)
# Sequences timed here that scripts/ does not ship: a single `Aᵀ·y` (SGEMV's twin).
EXTRA_SCRIPTS = {
    "sgemtv": """name: sgemtv
precision: f32
sizes: {m: 4096, n: 4096}
inputs: {A: [m, n], y: [m], z: [n], beta: scalar}
outputs: [x]
calls:
  - x = sgemtv(beta, A, y, 1.0, z)
""",
}
# Seconds of quiet before fuse is timed, so that numpy's BLAS threads have gone to sleep.
QUIET_S = 0.3
VECTORS = {"x": "n", "y": "m", "p": "n", "r": "m", "z": "n", "u1": "m", "v1": "n", "u2": "m", "v2": "n"}


def sgemvt(d):
    """SGEMVT as scripts/sgemvt.yaml chains it: `w` from the `x` just computed."""
    x = d["beta"] * (d["A"].T @ d["y"]) + d["z"]
    return x, d["alpha"] * (d["A"] @ x)


def torch_sgemvt(d):
    x = torch.addmv(d["z"], d["A"].T, d["y"], alpha=d["beta"])
    return x, torch.mv(d["A"], x) * d["alpha"]


def gemver(d):
    b = d["A"] + np.outer(d["u1"], d["v1"]) + np.outer(d["u2"], d["v2"])
    x = d["beta"] * (b.T @ d["y"]) + d["z"]
    return b, x, d["alpha"] * (b @ x)


def bicgstab(d):
    """One BiCGSTAB iteration as the textbook (and scripts/bicgstab.yaml) writes it; the
    scalars are the library's 0-d results (numpy scalars, torch tensors), never read to Python."""
    A, p, r, rhat, rho = d["A"], d["p"], d["r"], d["rhat"], d["rho"]
    v = A @ p
    alpha = rho / (rhat @ v)
    s = r - alpha * v
    t = A @ s
    omega = (t @ s) / (t @ t)
    x = d["x"] + alpha * p + omega * s
    r1 = s - omega * t
    rho1 = rhat @ r1
    beta = (rho1 / rho) * (alpha / omega)
    return x, r1, r1 + beta * (p - omega * v), rho1


def axpydot(d, dot):
    z = d["w"] - d["alpha"] * d["v"]
    return z, dot(z, d["u"])


def torch_gemver(d):
    b = torch.addr(torch.addr(d["A"], d["u1"], d["v1"]), d["u2"], d["v2"])
    x = torch.addmv(d["z"], b.T, d["y"], alpha=d["beta"])
    return b, x, torch.mv(b, x) * d["alpha"]


def inputs(name, size, precision, rng):
    t = np.float32 if precision == "f32" else np.float64
    data = {"alpha": t(1.5), "beta": t(0.5)}
    if name in BLAS1:
        return data | {v: rng.uniform(-1, 1, size * size).astype(t) for v in BLAS1_VECTORS}
    data["A"] = rng.uniform(-1, 1, (size, size)).astype(t)
    if name in ("gesummv", "madd"):
        data["B"] = rng.uniform(-1, 1, (size, size)).astype(t)
    for v in VECTORS:
        data[v] = rng.uniform(-1, 1, size).astype(t)
    if name == "bicgstab":
        data["rhat"] = rng.uniform(-1, 1, size).astype(t)
        data["rho"] = t(data["rhat"] @ data["r"])
    return data


def time_peer(name, size, precision, runs, peer="numpy"):
    """A peer's time (median µs) in a loop, and as `fuse bench` times fuse: each run timed right
    after an untimed run of itself, with a copy of as many bytes as the problem between runs —
    which, in cache, leaves a run slower than in a loop (fuse bench's other runs, the unfused
    plan's and its copy probe, sit there)."""
    data = inputs(name, size, precision, np.random.default_rng(0))
    run = SEQUENCES[name]
    if peer == "torch":
        run = TORCH_SEQUENCES[name]
        data = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else float(v) for k, v in data.items()}
    nbytes = sum(v.numel() * v.element_size() if peer == "torch" else v.nbytes
                 for v in data.values() if not isinstance(v, float) and np.ndim(v))
    src, dst = np.ones(nbytes // 8), np.zeros(nbytes // 8)
    run(data)
    loop, between = [], []
    for _ in range(runs):
        start = time.perf_counter()
        run(data)
        loop.append((time.perf_counter() - start) * 1e6)
    for _ in range(runs):
        np.copyto(dst, src)
        run(data)
        start = time.perf_counter()
        run(data)
        between.append((time.perf_counter() - start) * 1e6)
    return statistics.median(loop), statistics.median(between)


def script(name, precision, folder):
    """scripts/NAME.yaml (or EXTRA_SCRIPTS' text), or its f64 twin, written to `folder`."""
    path = f"scripts/{name}.yaml"
    if name in EXTRA_SCRIPTS:
        path = os.path.join(folder, f"{name}-f32.yaml")
        with open(path, "w") as f:
            f.write(EXTRA_SCRIPTS[name])
    if precision == "f32":
        return path
    with open(path) as f:
        text = f.read().replace("precision: f32", "precision: f64")
    twin = os.path.join(folder, f"{name}.yaml")
    with open(twin, "w") as f:
        f.write(re.sub(r"= s([a-z0-9]+)\(", r"= d\1(", text))
    return twin


def time_fuse(fuse, name, path, size, runs):
    sizes = ["--size", f"n={size * size}"] if name in BLAS1 else ["--size", f"m={size}", "--size", f"n={size}"]
    if name in SQUARE:
        sizes = ["--size", f"n={size}"]
    out = subprocess.run(
        [fuse, "bench", path, "--backend", "cpu", *sizes, "--runs", str(runs), "--json"],
        capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    result = report["results"][0]
    return result["fused_us"], result["baseline_us"], report.get("simd")


def blas_pools():
    """numpy's BLAS libraries as threadpoolctl sees them (after a call, so that they are loaded);
    without threadpoolctl, what numpy's build configuration names."""
    np.ones((2, 2)) @ np.ones(2)
    if threadpool_info is None:
        config = getattr(np, "show_config", None)
        info = config(mode="dicts") if config else {}
        blas = info.get("Build Dependencies", {}).get("blas", {})
        return [{"internal_api": blas.get("name", "unknown"), "version": blas.get("version", "?"),
                 "architecture": "unknown (pip install threadpoolctl)", "num_threads": None}]
    return [{k: p.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "filepath")}
            for p in threadpool_info() if p.get("user_api") == "blas"]


def blas():
    return "; ".join(
        f"numpy {np.__version__}, {p['internal_api']} {p['version']} ({p['architecture']} kernels, "
        f"{p['num_threads']} threads)" for p in blas_pools())


def cpu_caches():
    """cpu0's caches from sysfs: level, type, size and the CPUs sharing each."""
    caches = []
    root = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if not index.startswith("index"):
            continue
        read = lambda f: open(os.path.join(root, index, f)).read().strip()
        try:
            caches.append({"level": int(read("level")), "type": read("type"), "size": read("size"),
                           "shared_cpu_list": read("shared_cpu_list")})
        except OSError:
            continue
    return caches


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def fuse_simd(fuse):
    """The instruction set fuse's kernels run in, as `fuse explain` names it ("avx512 (the
    widest this CPU has)"), or why it could not say."""
    out = subprocess.run([fuse, "explain", "scripts/sscal.yaml", "--backend", "cpu", "--size", "n=64"],
                         capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("backend: cpu, "):
            return line.removeprefix("backend: cpu, ")
    return f"unknown ({out.stderr.strip() or 'no backend line'})"


def machine(fuse):
    """Which CPU this run is on, and how fuse and numpy use it."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "fuse_simd": fuse_simd(fuse),
        "FUSE_SIMD": os.environ.get("FUSE_SIMD"),
        "caches": cpu_caches(),
        "cpus": os.cpu_count(),
        "cpus_available": affinity,
        "fuse_threads": int(os.environ.get("FUSE_NUM_THREADS") or affinity),
        "numpy": np.__version__,
        "blas": blas_pools(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "torch": torch and f"{torch.__version__} ({torch.get_num_threads()} threads)",
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fuse", default="target/release/fuse")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", default="2048,4096,8192")
    parser.add_argument("--sequences", default=",".join(SEQUENCES))
    parser.add_argument("--precisions", default="f32", help="f32, f64 or f32,f64")
    parser.add_argument("--table", nargs="+", metavar="RAW",
                        help="time nothing: tabulate the JSON lines of earlier runs' output, pooled")
    args = parser.parse_args()
    if args.table:
        table(pooled(args.table))
        return
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    sizes = [int(s) for s in args.sizes.split(",")]
    names = args.sequences.split(",")
    precisions = args.precisions.split(",")
    points = {}
    where = machine(args.fuse)
    print(json.dumps({"machine": where}), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(1, args.rounds + 1):
            for precision in precisions:
                for name in names:
                    for size in sizes:
                        numpy_loop_us, numpy_us = time_peer(name, size, precision, args.runs)
                        torch_us = time_peer(name, size, precision, args.runs, "torch")[1] if torch else None
                        path = script(name, precision, folder)
                        # OpenBLAS's threads spin on both cores for up to ~0.1 s after numpy's
                        # last call: timed inside that, fuse's runs at 1024² took twice as long.
                        time.sleep(QUIET_S)
                        fused_us, unfused_us, simd = time_fuse(args.fuse, name, path, size, args.runs)
                        line = {"round": round_, "sequence": name, "precision": precision, "size": size,
                                "numpy_us": numpy_us, "numpy_loop_us": numpy_loop_us, "fuse_us": fused_us,
                                "fuse_unfused_us": unfused_us, "torch_us": torch_us, "fuse_simd": simd}
                        print(json.dumps(line), flush=True)
                        points.setdefault((name, precision, size), []).append(line)
    torch_note = f"; torch {torch.__version__} CPU ({torch.get_num_threads()} threads)" if torch else ""
    print(f"\n{where['cpu']}, fuse in {where['fuse_simd']} on {where['fuse_threads']} threads; "
          f"{blas()}{torch_note}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}; "
          f"{args.rounds} rounds of {args.runs} runs, medians\n")
    table(points)


def pooled(paths):
    """The points of earlier runs' raw output (their JSON lines), pooled round by round."""
    points = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                point = json.loads(line) if line.startswith("{") else {}
                if "sequence" in point:
                    key = (point["sequence"], point["precision"], point["size"])
                    points.setdefault(key, []).append(point)
    return points


def table(points):
    """Medians over the rounds: times, and each round's own ratios (numpy and fuse timed a
    minute apart at most, so a slow spell of the shared machine shifts both)."""
    has_torch = all(l.get("torch_us") for lines in points.values() for l in lines)
    print("numpy µs: timed as fuse bench times fuse (after an untimed run and a copy); "
          "numpy loop µs: back to back; ratios: medians of the rounds' own ratios, with their range\n")
    print("| sequence | precision | size | rounds | numpy µs | numpy loop µs | fuse µs | fuse unfused µs "
          "| numpy / fuse | unfused / fused |" + (" torch µs | torch / fuse |" if has_torch else ""))
    print("|---" * (10 + (2 if has_torch else 0)) + "|")
    keys = ("numpy_us", "numpy_loop_us", "fuse_us", "fuse_unfused_us") + (("torch_us",) if has_torch else ())

    def ratio(lines, over, under):
        r = sorted(l[over] / l[under] for l in lines)
        return f"{statistics.median(r):.2f}× ({r[0]:.2f}–{r[-1]:.2f})"

    for (name, precision, size), lines in points.items():
        med = {k: statistics.median(l[k] for l in lines) for k in keys}
        print(f"| {name} | {precision} | {size}² | {len(lines)} | {med['numpy_us']:.0f} | {med['numpy_loop_us']:.0f} | "
              f"{med['fuse_us']:.0f} | {med['fuse_unfused_us']:.0f} | {ratio(lines, 'numpy_us', 'fuse_us')} | "
              f"{ratio(lines, 'fuse_unfused_us', 'fuse_us')} |"
              + (f" {med['torch_us']:.0f} | {ratio(lines, 'torch_us', 'fuse_us')} |" if has_torch else ""))

if __name__ == "__main__":
    sys.exit(main())
