#!/usr/bin/env python3
"""The cost of calling fuse from Python: one call of a compiled BiCGK at 256², f32, on the CPU
backend, through fuseblas, against the same call from Rust (`cargo bench -p fuse --bench call`,
run by this script first), interleaved rounds, medians.

    python3 benches/python-overhead.py [--rounds 5] [--calls 20000]

Needs fuseblas installed (release: `pip install ./crates/fuse-python`).
"""
import argparse
import pathlib
import re
import statistics
import subprocess
import time

import numpy as np

import fuseblas

ROOT = pathlib.Path(__file__).resolve().parents[1]


def python_call_us(program, arrays, calls):
    started = time.perf_counter()
    for _ in range(calls):
        program(**arrays)
    return (time.perf_counter() - started) / calls * 1e6


def rust_call_us():
    out = subprocess.run(
        ["cargo", "bench", "-q", "-p", "fuse", "--bench", "call", "--", "--noplot", "--warm-up-time", "1", "--measurement-time", "3"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    low, mid, high = re.search(r"time:\s+\[(\S+ \S+) (\S+ \S+) (\S+ \S+)\]", out).groups()
    value, unit = mid.split()
    return float(value) * {"ns": 1e-3, "µs": 1.0, "us": 1.0, "ms": 1e3}[unit]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    if fuseblas.build_profile != "release":
        raise SystemExit(f"fuseblas here is a {fuseblas.build_profile} build (the test suite's, unoptimised): "
                         "time a release one (pip install ./crates/fuse-python)")
    n = 256
    rng = np.random.default_rng(0)
    arrays = dict(A=rng.standard_normal((n, n), dtype=np.float32), p=rng.standard_normal(n, dtype=np.float32), r=rng.standard_normal(n, dtype=np.float32))
    program = fuseblas.compile(ROOT / "scripts" / "bicgk.yaml", backend="cpu", sizes={"m": n, "n": n})
    program(**arrays)
    print(f"fuseblas {fuseblas.__version__}, numpy {np.__version__}; BiCGK {n}² f32, cpu backend")
    python, rust = [], []
    for k in range(args.rounds):
        rust.append(rust_call_us())
        python.append(python_call_us(program, arrays, args.calls))
        print(f"round {k + 1}: Rust {rust[-1]:.2f} µs, Python {python[-1]:.2f} µs, overhead {python[-1] - rust[-1]:.2f} µs")
    r, p = statistics.median(rust), statistics.median(python)
    print(f"median: Rust {r:.2f} µs, Python {p:.2f} µs, overhead {p - r:.2f} µs per call")


if __name__ == "__main__":
    main()
