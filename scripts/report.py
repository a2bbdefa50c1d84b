#!/usr/bin/env python3
"""Assemble the GPU results file from the raw output of scripts/gpu-check.sh.

usage: report.py RAW_DIR > benches/results/<gpu>-<date>.md

RAW_DIR holds what the stages wrote: env.log, selftest.log, sanitize.log, calibrate.log,
bench-*.json (fuse bench --json), tune.jsonl (one fuse tune --json per line), peers.json
(scripts/peers.py --json), solver-*.log (examples/bicg) and solver-peers.json
(scripts/bicg_peers.py --json), ncu.log. Missing files are reported as not run. The summary checks
the issue's targets — speedup over cuBLAS (≥ 1 everywhere; BiCGK ≥ 1.8, GEMVER ≥ 2.5, AXPYDOT,
WAXPBY, VADD ≥ 1.8), ≥ 85 % of the copy bandwidth, ahead of torch.compile and JAX, first
predicted plan ≥ 95 % of the fastest — and lists every miss with its size; the reasons belong
below the summary, from the ncu profile in the raw output.
"""

import json
import pathlib
import re
import statistics
import sys

SPEEDUP_TARGETS = {"bicgk": 1.8, "gemver": 2.5, "axpydot": 1.8, "waxpby": 1.8, "vadd": 1.8}
COPY_TARGET = 85.0
FIRST_PLAN_TARGET = 95.0
STAGES = ["env", "selftest", "sanitize", "calibrate", "bench", "tune", "peers", "solver", "ncu", "python"]
# Time per BiCG iteration at most this many times its kernels' time (data resident on the GPU).
SOLVER_OVERHEAD_TARGET = 1.3


def name_of(script):
    return pathlib.Path(script).stem


def sizes_text(sizes):
    if isinstance(sizes, str):
        return sizes
    return " ".join(f"{k}={v}" for k, v in sorted(sizes.items()))


def load_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def bench_rows(raw):
    rows = {}
    copy = None
    for path in sorted(raw.glob("bench-*.json")):
        data = load_json(path)
        if not data:
            continue
        copy = data.get("copy_gbps", copy)
        for r in data["results"]:
            rows[(name_of(r["script"]), sizes_text(r["sizes"]))] = r
    return rows, copy


def tune_rows(raw):
    rows = {}
    path = raw / "tune.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            rows[(name_of(r["script"]), sizes_text(r["sizes"]))] = r
    return rows


def peer_rows(raw):
    data = load_json(raw / "peers.json") or {"results": []}
    rows = {}
    for r in data["results"]:
        rows.setdefault((name_of(r["script"]), sizes_text(r["sizes"])), {})[r["framework"]] = r
    return rows, data.get("copy_gbps")


def fmt(x, spec=".1f"):
    return "—" if x is None else format(x, spec)


def summary(raw):
    bench, copy = bench_rows(raw)
    tune = tune_rows(raw)
    peers, peer_copy = peer_rows(raw)
    keys = sorted(set(bench) | set(tune) | set(peers))
    lines = [
        "| sequence | sizes | fused µs | steps µs | graph µs | cuBLAS µs | speedup | % copy | torch eager µs "
        "| torch.compile µs | JAX µs | tuned µs | first plan % of fastest | rank of fastest |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    misses = []
    for key in keys:
        name, sizes = key
        b, t, p = bench.get(key), tune.get(key), peers.get(key, {})
        speedup = b and b["speedup"]
        pct = b and b["pct_of_copy"]
        peer = {fw: p.get(fw, {}).get("us") for fw in ("torch eager", "torch.compile", "jax.jit")}
        kernels = {fw: p.get(fw, {}).get("kernels") for fw in peer}
        tuned = t and min(c["measured_us"] for c in t["candidates"])
        first = t and t["first_pct_of_fastest"]
        lines.append(
            f"| {name} | {sizes} | {fmt(b and b['fused_us'])} | {fmt(b and b.get('steps_us'))} | "
            f"{fmt(b and b.get('graph_us'))} | {fmt(b and b['baseline_us'])} | "
            f"{fmt(speedup, '.2f')}{'×' if speedup else ''} | {fmt(pct)} | "
            + " | ".join(f"{fmt(peer[fw])}{'' if kernels[fw] in (None, -1) else f' ({kernels[fw]} k)'}" for fw in peer)
            + f" | {fmt(tuned)} | {fmt(first)} | {t['fastest_rank'] if t else '—'} |"
        )
        misses.extend(check_targets(name, sizes, b, t, peer))
    text = ["## Summary", ""]
    if copy:
        text.append(f"Copy bandwidth measured by fuse bench: {copy:.1f} GB/s"
                    + (f"; by peers.py (torch): {peer_copy:.1f} GB/s." if peer_copy else "."))
    text += [
        "",
        "`fused` is the plan `fuse run` picks untuned (best predicted), the faster of its two ways: "
        "`steps` queued one by one, `graph` replayed as a CUDA graph (plans of several steps); "
        "`tuned` the fastest of the "
        "10 best predicted (`fuse tune`); `(n k)` the kernels and memory operations a peer launches "
        "per call (torch profiler; for JAX counted in XLA's optimized HLO).",
        "",
        *lines,
        "",
        "### Targets missed",
        "",
    ]
    text += [f"- {m}" for m in misses] or ["- none"]
    text += ["", "Each miss above needs its reason from the ncu profile (raw output, `ncu`), not a guess.", ""]
    return "\n".join(text)


def check_targets(name, sizes, b, t, peer):
    out = []
    if b:
        need = SPEEDUP_TARGETS.get(name, 1.0)
        if b["speedup"] < need:
            out.append(f"{name} {sizes}: {b['speedup']:.2f}× cuBLAS, target {need}× (short by "
                       f"{100 * (1 - b['speedup'] / need):.0f}%)")
        if b["pct_of_copy"] < COPY_TARGET:
            out.append(f"{name} {sizes}: {b['pct_of_copy']:.1f}% of the copy bandwidth, target {COPY_TARGET:.0f}%")
        for fw in ("torch.compile", "jax.jit"):
            if peer.get(fw) is not None and peer[fw] < b["fused_us"]:
                out.append(f"{name} {sizes}: {fw} {peer[fw]:.1f} µs beats fuse's {b['fused_us']:.1f} µs "
                           f"by {100 * (b['fused_us'] / peer[fw] - 1):.0f}%")
    if t and t["first_pct_of_fastest"] < FIRST_PLAN_TARGET:
        out.append(f"{name} {sizes}: first predicted plan at {t['first_pct_of_fastest']:.1f}% of the fastest "
                   f"(rank {t['fastest_rank']} was fastest), target {FIRST_PLAN_TARGET:.0f}%")
    return out


SOLVER_LINE = re.compile(r"time per iteration \(median[^)]*\): ([0-9.]+) ms, of which compute ([0-9.]+) ms")
SOLVER_HEADER = re.compile(r"BiCG, n = (\d+), (f32|f64), backend (\S+)")


def solver_section(raw):
    """The BiCG example against its kernels' time and against PyTorch and CuPy."""
    peers = {}
    for r in (load_json(raw / "solver-peers.json") or {"results": []})["results"]:
        peers[(r["n"], r["precision"], r["framework"])] = r["ms_per_iteration"]
    lines = [
        "## BiCG solver, data resident on the GPU",
        "",
        "`examples/bicg`: median time per iteration (iterations 4 on) and the kernels' time in it "
        "(CUDA events), beside the same solver in PyTorch and CuPy (`scripts/bicg_peers.py`). "
        f"Targets: at most {SOLVER_OVERHEAD_TARGET}× the kernels' time, and below PyTorch.",
        "",
        "| n | precision | fuse ms/iteration | kernels ms | ratio | torch ms | cupy ms |",
        "|---|---|---|---|---|---|---|",
    ]
    misses = []
    for path in sorted(raw.glob("solver-*.log")):
        text = path.read_text(errors="replace")
        header, timing = SOLVER_HEADER.search(text), SOLVER_LINE.search(text)
        if not header or not timing:
            misses.append(f"{path.name}: no time per iteration (the run failed; see the raw output)")
            continue
        n, precision = int(header.group(1)), header.group(2)
        wall, compute = float(timing.group(1)), float(timing.group(2))
        ratio = wall / compute if compute else float("inf")
        torch, cupy = peers.get((n, precision, "torch")), peers.get((n, precision, "cupy"))
        if "nccl" in path.name:
            lines.append(f"| {n} | {precision}, one rank (NCCL) | {wall:.3f} | {compute:.3f} | {ratio:.2f}× | | |")
            misses += nccl_misses(text, n, precision)
            continue
        lines.append(f"| {n} | {precision} | {wall:.3f} | {compute:.3f} | {ratio:.2f}× | {fmt(torch, '.3f')} | {fmt(cupy, '.3f')} |")
        if ratio > SOLVER_OVERHEAD_TARGET:
            misses.append(f"BiCG n={n} {precision}: {ratio:.2f}× its kernels' time, target {SOLVER_OVERHEAD_TARGET}×")
        if torch is not None and wall >= torch:
            misses.append(f"BiCG n={n} {precision}: {wall:.3f} ms per iteration, PyTorch {torch:.3f} ms")
    lines += ["", "Targets missed:", ""] + ([f"- {m}" for m in misses] or ["- none"]) + [""]
    return "\n".join(lines)


def linalg_section(raw):
    """fuseblas.linalg's solvers against cupyx.scipy.sparse.linalg and PyTorch loops."""
    results = (load_json(raw / "python-gpu-solvers.json") or {"results": []})["results"]
    if not results:
        return "## fuseblas.linalg on the GPU\n\nnot run\n"
    lines = [
        "## fuseblas.linalg on the GPU",
        "",
        "`benches/gpu-solvers.py`: median ms per iteration over the rounds, each peer's time over "
        "fuseblas's (> 1: fuseblas faster), and what crosses to the host an iteration (fuseblas: "
        "its session's counters; the peers: what their loops read).",
        "",
        "| method | n | dtype | framework | ms / iteration | peer / fuseblas | to the host an iteration |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in sorted({(r["method"], r["n"], r["dtype"]) for r in results}):
        rows = [r for r in results if (r["method"], r["n"], r["dtype"]) == key]
        ms = {}
        for r in rows:
            ms.setdefault(r["framework"], []).append(r["ms_per_iteration"])
        ours = statistics.median(ms.get("fuseblas", [float("nan")]))
        for framework, times in ms.items():
            t = statistics.median(times)
            sample = next(r for r in rows if r["framework"] == framework)
            crossing = sample.get("to_host_per_iteration") or f"{sample.get('bytes_to_host_per_iteration', 0):.0f} B"
            ratio = "" if framework == "fuseblas" else f"{t / ours:.2f}×"
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {framework} | {t:.3f} | {ratio} | {crossing} |")
    return "\n".join(lines + [""])


MOVED = re.compile(r"(\d+) B to / (\d+) B from the device")
# Bytes an iteration of a distributed session on a GPU may move between host and device with
# NCCL: the scalars it reads, nothing else.
NCCL_MOVED_TARGET = 256


def nccl_misses(text, n, precision):
    """What the one-rank distributed BiCG run misses: NCCL not used, or vectors crossing."""
    misses = []
    if "collectives: NCCL between GPUs" not in text:
        said = next((line for line in text.splitlines() if line.startswith("collectives:")), "no collectives line")
        misses.append(f"BiCG n={n} {precision} over one rank: not through NCCL ({said})")
    moved = [int(a) + int(b) for a, b in MOVED.findall(text)[3:]]
    if moved and max(moved) > NCCL_MOVED_TARGET:
        misses.append(f"BiCG n={n} {precision} over one rank: {max(moved)} B an iteration between host and "
                      f"device, target {NCCL_MOVED_TARGET} B (scalars only)")
    return misses


def raw_sections(raw):
    text = ["## Raw output", ""]
    for stage in STAGES:
        files = sorted(raw.glob(f"{stage}*.log")) + sorted(raw.glob(f"{stage}*.json*"))
        text += [f"### {stage}", ""]
        if not files:
            text += ["not run", ""]
        for path in files:
            text += [f"`{path.name}`", "", "```text", path.read_text(errors="replace").rstrip(), "```", ""]
    return "\n".join(text)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    raw = pathlib.Path(argv[1])
    title = raw.name
    print(f"# fuse on the GPU: {title}\n")
    print("Measured by `bash scripts/gpu-check.sh` with the prebuilt `target/release/fuse`; the raw "
          "output of every stage follows the summary.\n")
    print(summary(raw))
    print(solver_section(raw))
    print(linalg_section(raw))
    print(raw_sections(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
