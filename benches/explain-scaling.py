#!/usr/bin/env python3
"""`fuse explain` against `fuse explore` as scripts grow: wall time of each, interleaved.

Three shapes of script, from 125 to 2000 calls: a chain of sscal (each call fusible with its
neighbours, so about one pair per call is predicted slower fused and searched), a chain of
saxpy that all read `x` (the square of the calls in pairs), and rounds of saxpy/sgemv/sdot/saxpy
(a solver's inner loop). `explain` must grow as `explore` does, less the pairs it prints.

    benches/explain-scaling.py [--fuse target/release/fuse] [--backend cpu] [--rounds 3]
"""
import argparse
import os
import subprocess
import tempfile
import time


def sscal(n):
    calls = ["y1 = sscal(2.0, x)"] + [f"y{k} = sscal(2.0, y{k - 1})" for k in range(2, n + 1)]
    return "sizes: {n: 64}\ninputs: {x: [n]}\n", f"y{n}", calls


def reads_x(n):
    calls = ["y1 = saxpy(2.0, x, x)"] + [f"y{k} = saxpy(2.0, y{k - 1}, x)" for k in range(2, n + 1)]
    return "sizes: {n: 4096}\ninputs: {x: [n]}\n", f"y{n}", calls


def rounds(n):
    calls, previous = [], "x"
    for k in range(n // 4 + 1):
        calls += [f"p{k} = saxpy(2.0, {previous}, x)", f"q{k} = sgemv(A, p{k})",
                  f"d{k} = sdot(q{k}, x)", f"r{k} = saxpy(d{k}, q{k}, p{k})"]
        previous = f"r{k}"
    calls = calls[:n]
    return "sizes: {n: 4096}\ninputs: {A: [n, n], x: [n]}\n", calls[-1].split(" = ")[0], calls


def script(shape, n):
    head, output, calls = shape(n)
    return head + f"outputs: [{output}]\ncalls:\n" + "".join(f"  - {c}\n" for c in calls)


def seconds(command):
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fuse", default="target/release/fuse")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'script':<16} {'calls':>6} {'explore s':>10} {'explain s':>10} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder:
        for shape in (sscal, reads_x, rounds):
            for n in (125, 250, 500, 1000, 2000):
                path = os.path.join(folder, f"{shape.__name__}{n}.yaml")
                with open(path, "w") as f:
                    f.write(script(shape, n))
                best = {"explore": float("inf"), "explain": float("inf")}
                for _ in range(args.rounds):
                    for command in best:
                        t = seconds([args.fuse, command, "--backend", args.backend, path])
                        best[command] = min(best[command], t)
                ratio = best["explain"] / best["explore"]
                print(f"{shape.__name__:<16} {n:>6} {best['explore']:>10.3f} {best['explain']:>10.3f} {ratio:>6.1f}")


if __name__ == "__main__":
    main()
