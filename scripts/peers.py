#!/usr/bin/env python3
"""Time the 11 BLAS sequences of fuse in the tools a user would pick instead of fuse.

Frameworks: PyTorch eager (cuBLAS and PyTorch's own kernels, one per operation), torch.compile
(Inductor: fuses elementwise work into Triton kernels, matrix products stay cuBLAS calls) and
JAX jit (XLA fusions). Each sequence is written once, against an array namespace (`xp`: torch,
jax.numpy or numpy), exactly as scripts/<name>.yaml computes it, row-major, float32.

Method (as for `fuse bench --backend cuda`): inputs uniform in [-1, 1); each framework's outputs
checked against a float64 evaluation of the same inputs (normwise relative error below 1e-4)
before timing; warm-up runs (torch.compile and jax.jit compile there), then the median of
--runs runs. PyTorch is timed with CUDA events around each call, the L2 cache flushed before
each run by reading a buffer twice its size. JAX runs on its own streams, out of reach of torch's
events: each JAX sample is --jax-batch calls dispatched back to back and waited for once,
divided by the batch (asynchronous dispatch keeps the GPU busy, so host overhead hides as it
does behind events). JAX's float32 matrix products use full float32 precision ("highest"), not
its default TF32.

Prints a table like fuse bench (µs, GB/s of compulsory bytes — inputs read once, outputs
written once — and % of the measured device-to-device copy bandwidth) and, with --json FILE,
writes {"copy_gbps", "results": [{"script", "sizes", "framework", "us", "gbps", "pct_of_copy",
"kernels", "max_error"}]}.

`--check-definitions` needs only numpy: it evaluates every definition with numpy and compares
with tests/numpy_check.py's expected outputs (themselves checked against fuse), so the
definitions are tested on machines without a GPU.
"""

import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent

# name -> (inputs, outputs), each as (name, shape in size symbols: "" scalar, "n" vector, "mn" matrix)
SEQUENCES = {
    "axpydot": ([("w", "n"), ("v", "n"), ("u", "n"), ("alpha", "")], [("z", "n"), ("r", "")]),
    "atax": ([("A", "mn"), ("x", "n")], [("y", "n")]),
    "bicgk": ([("A", "mn"), ("p", "n"), ("r", "m")], [("q", "m"), ("s", "n")]),
    "sgemv": ([("A", "mn"), ("x", "n"), ("y", "m"), ("alpha", ""), ("beta", "")], [("z", "m")]),
    "sgemvt": ([("A", "mn"), ("y", "m"), ("z", "n"), ("alpha", ""), ("beta", "")], [("x", "n"), ("w", "m")]),
    "sscal": ([("x", "n"), ("alpha", "")], [("x", "n")]),
    "gemver": (
        [("A", "mn"), ("u1", "m"), ("v1", "n"), ("u2", "m"), ("v2", "n"), ("y", "m"), ("z", "n"),
         ("alpha", ""), ("beta", "")],
        [("B", "mn"), ("x", "n"), ("w", "m")],
    ),
    "gesummv": ([("A", "mn"), ("B", "mn"), ("x", "n"), ("alpha", ""), ("beta", "")], [("y", "m")]),
    "madd": ([("A", "mn"), ("B", "mn")], [("C", "mn")]),
    "vadd": ([("w", "n"), ("y", "n"), ("z", "n")], [("x", "n")]),
    "waxpby": ([("x", "n"), ("y", "n"), ("alpha", ""), ("beta", "")], [("w", "n")]),
}
BLAS1 = {"axpydot", "sscal", "vadd", "waxpby"}


def compute(name, xp, d):
    """Sequence `name` on inputs `d` (a dict of arrays of namespace `xp`); outputs in order."""
    A, B = d.get("A"), d.get("B")
    if name == "axpydot":
        z = d["w"] - d["alpha"] * d["v"]
        return z, xp.dot(z, d["u"])
    if name == "atax":
        return (A.T @ (A @ d["x"]),)
    if name == "bicgk":
        return A @ d["p"], A.T @ d["r"]
    if name == "sgemv":
        return (d["alpha"] * (A @ d["x"]) + d["beta"] * d["y"],)
    if name == "sgemvt":
        x = d["beta"] * (A.T @ d["y"]) + d["z"]
        return x, d["alpha"] * (A @ x)
    if name == "sscal":
        return (d["alpha"] * d["x"],)
    if name == "gemver":
        Bm = A + xp.outer(d["u1"], d["v1"]) + xp.outer(d["u2"], d["v2"])
        x = d["beta"] * (Bm.T @ d["y"]) + d["z"]
        return Bm, x, d["alpha"] * (Bm @ x)
    if name == "gesummv":
        return (d["alpha"] * (A @ d["x"]) + d["beta"] * (B @ d["x"]),)
    if name == "madd":
        return (A + B,)
    if name == "vadd":
        return (d["w"] + d["y"] + d["z"],)
    if name == "waxpby":
        return (d["alpha"] * d["x"] + d["beta"] * d["y"],)
    raise KeyError(name)


def shape(symbols, sizes):
    return tuple(sizes[s] for s in symbols)


def compulsory_bytes(name, sizes, itemsize=4):
    """Inputs read once, outputs written once — what `fuse bench` counts."""
    inputs, outputs = SEQUENCES[name]
    return itemsize * sum(math.prod(shape(s, sizes)) for _, s in inputs + outputs)


def random_inputs(name, sizes, seed):
    """float64 numpy inputs, uniform in [-1, 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-1.0, 1.0, size=shape(s, sizes)) for n, s in SEQUENCES[name][0]}


def relative_error(got, want):
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    norm = np.linalg.norm(want)
    diff = np.linalg.norm(got - want)
    error = diff / norm if norm > 0 else diff
    return float("inf") if math.isnan(error) else float(error)


def check_definitions():
    """numpy evaluation of every definition against tests/numpy_check.py (no GPU needed)."""
    sys.path.insert(0, str(REPO / "tests"))
    import numpy as np
    import numpy_check

    failures = 0
    for name in SEQUENCES:
        sizes = {"m": 67, "n": 45} if name not in BLAS1 else {"n": 1001}
        d = random_inputs(name, sizes, seed=1)
        got = compute(name, np, d)
        want = numpy_check.expected(name, d)
        for (output, _), value in zip(SEQUENCES[name][1], got):
            error = relative_error(value, want[output])
            ok = error < 1e-12
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} {name} {output}: {error:.1e}")
    return failures


class Torch:
    """PyTorch eager or torch.compile, timed with CUDA events."""

    def __init__(self, compiled, flush_bytes):
        import torch

        self.torch = torch
        self.compiled = compiled
        self.flush = torch.empty(flush_bytes // 4, dtype=torch.float32, device="cuda")
        self.flush.uniform_()
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    @property
    def label(self):
        return "torch.compile" if self.compiled else "torch eager"

    def prepare(self, name, inputs):
        torch = self.torch
        args = {k: torch.tensor(v, dtype=torch.float32, device="cuda") for k, v in inputs.items()}

        def fn(d):
            return compute(name, torch, d)

        if self.compiled:
            fn = torch.compile(fn, dynamic=False)
        return lambda: fn(args)

    def outputs(self, call):
        return [o.double().cpu().numpy() for o in call()]

    def time(self, call, warmup, runs):
        torch = self.torch
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            self.flush.sum()  # reads 2×L2: the run starts cold, as fuse bench's do
            self.start.record()
            call()
            self.end.record()
            self.end.synchronize()
            times.append(self.start.elapsed_time(self.end) * 1e3)
        return statistics.median(times)

    def kernels(self, call):
        """CUDA kernels and memory operations one call launches (torch profiler)."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        return len(device_events)


class Jax:
    """JAX jit, timed by batches of asynchronous calls (see the module docs)."""

    label = "jax.jit"

    def __init__(self, batch):
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
        self.jax = jax
        self.batch = batch

    def prepare(self, name, inputs):
        import jax.numpy as jnp

        args = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in inputs.items()}
        fn = self.jax.jit(lambda d: compute(name, jnp, d))
        self.last = (fn, args)
        return lambda: fn(args)

    def outputs(self, call):
        import numpy as np

        return [np.asarray(o, dtype=np.float64) for o in call()]

    def time(self, call, warmup, runs):
        jax = self.jax
        for _ in range(warmup):
            jax.block_until_ready(call())
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            for _ in range(self.batch):
                out = call()
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - start) * 1e6 / self.batch)
        return statistics.median(samples)

    def kernels(self, call):
        """Kernels of the compiled entry computation (fusions, library calls, copies): from
        XLA's optimized HLO, an approximation of what runs."""
        fn, args = self.last
        text = fn.lower(args).compile().as_text()
        entry = text[text.find("ENTRY"):]
        body = entry[: entry.find("\n}") if "\n}" in entry else len(entry)]
        skip = ("parameter(", "tuple(", "get-tuple-element(", "constant(", "bitcast(")
        count = 0
        for line in body.splitlines()[1:]:
            if "=" in line and not any(op in line for op in skip):
                count += 1
        return count


def copy_bandwidth(bytes_=512 << 20, runs=20):
    """Device-to-device copy bandwidth through torch, GB/s (bytes read + written)."""
    import torch

    src = torch.empty(bytes_ // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(runs):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * bytes_ / statistics.median(times) / 1e9


def configurations(args):
    """(script, sizes) pairs: BLAS-2 sequences at every --matrix size, BLAS-1 at --vector."""
    out = []
    for name in args.scripts:
        if name in BLAS1:
            out.append((name, {"n": args.vector}))
        else:
            out.extend((name, {"m": s, "n": s}) for s in args.matrix)
    return out


def run(args):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import torch

    if not torch.cuda.is_available():
        print("peers.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 3
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    frameworks = []
    for f in args.frameworks:
        try:
            frameworks.append(
                {"eager": lambda: Torch(False, 2 * l2), "compile": lambda: Torch(True, 2 * l2),
                 "jax": lambda: Jax(args.jax_batch)}[f]()
            )
        except Exception as e:  # a framework missing on this machine is reported, not fatal
            print(f"peers.py: {f} unavailable: {e}", file=sys.stderr)
    copy = copy_bandwidth()
    print(f"device: {props.name}; torch {torch.__version__}", end="")
    try:
        import jax

        print(f"; jax {jax.__version__}", end="")
    except ImportError:
        pass
    print(f"\ncopy bandwidth: {copy:.1f} GB/s (bytes read + written by a device-to-device copy of 512 MiB)")
    print(f"times: median of {args.runs} runs after {args.warmup} warm-up; GB/s: compulsory bytes over the time")
    print(f"{'script':<10} {'sizes':<18} {'framework':<14} {'µs':>10} {'GB/s':>8} {'% copy':>8} {'kernels':>8} {'error':>9}")
    results = []
    for name, sizes in configurations(args):
        inputs = random_inputs(name, sizes, seed=args.seed)
        import numpy as np

        want = compute(name, np, inputs)
        for fw in frameworks:
            row = measure(fw, name, sizes, inputs, want, args, copy)
            results.append(row)
            print(
                f"{name:<10} {' '.join(f'{k}={v}' for k, v in sizes.items()):<18} {row['framework']:<14} "
                f"{row['us']:>10.1f} {row['gbps']:>8.1f} {row['pct_of_copy']:>7.1f}% {row['kernels']:>8} "
                f"{row['max_error']:>9.1e}{'' if row['ok'] else '  WRONG'}",
                flush=True,
            )
        del inputs, want
        torch.cuda.empty_cache()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"copy_gbps": copy, "results": results}, indent=1))
    wrong = [r for r in results if not r["ok"]]
    for r in wrong:
        print(f"peers.py: {r['framework']} {r['script']} is off the float64 result by {r['max_error']:.1e}", file=sys.stderr)
    return 1 if wrong else 0


def measure(fw, name, sizes, inputs, want, args, copy):
    """Checks, then times one framework on one configuration."""
    call = fw.prepare(name, inputs)
    got = fw.outputs(call)  # the first call compiles (torch.compile, jit)
    error = max(relative_error(g, w) for g, w in zip(got, want))
    us = fw.time(call, args.warmup, args.runs)
    try:
        kernels = fw.kernels(call)
    except Exception:  # the count is informative only
        kernels = -1
    gbps = compulsory_bytes(name, sizes) / (us * 1e3)
    return {
        "script": f"scripts/{name}.yaml", "sizes": sizes, "framework": fw.label, "us": us,
        "gbps": gbps, "pct_of_copy": 100 * gbps / copy, "kernels": kernels, "max_error": error,
        "ok": error < 1e-4,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog="Examples:\n  python3 scripts/peers.py --json peers.json\n"
        "  python3 scripts/peers.py --scripts bicgk gemver --matrix 8192 --frameworks eager jax\n"
        "  python3 scripts/peers.py --check-definitions   # numpy only, no GPU",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--scripts", nargs="+", default=list(SEQUENCES), choices=list(SEQUENCES),
                        metavar="NAME", help="sequences to time (default: all 11)")
    parser.add_argument("--matrix", nargs="+", type=int, default=[8192, 16384], metavar="N",
                        help="m = n of the BLAS-2 sequences (default: 8192 16384)")
    parser.add_argument("--vector", type=int, default=1 << 26, metavar="N",
                        help="n of the BLAS-1 sequences (default: 2^26)")
    parser.add_argument("--frameworks", nargs="+", default=["eager", "compile", "jax"],
                        choices=["eager", "compile", "jax"], help="what to time (default: all three)")
    parser.add_argument("--runs", type=int, default=25, help="timed runs; the median is reported (default 25)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    parser.add_argument("--jax-batch", type=int, default=5, help="JAX calls per timed sample (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--check-definitions", action="store_true",
                        help="check the sequence definitions with numpy against tests/numpy_check.py and exit")
    args = parser.parse_args(argv)
    if args.runs < 20:
        print("peers.py: note: fewer than 20 runs is below the method's minimum", file=sys.stderr)
    if args.check_definitions:
        return 1 if check_definitions() else 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
