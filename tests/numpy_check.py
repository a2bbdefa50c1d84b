#!/usr/bin/env python3
"""Checks `fuse run --backend reference` against numpy on all 13 shipped sequences.

Each script is turned into its f64 twin (precision f64, d-prefixed calls), inputs are made by
numpy and passed as .npy files, and every output must match numpy's result to a normwise
relative error below 1e-10.

usage: numpy_check.py FUSE_BINARY [SCRIPTS_DIR]
"""
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

TOLERANCE = 1e-10
MATRIX_SIZES = {"m": 67, "n": 45}  # awkward: not multiples of 32
VECTOR_SIZES = {"n": 1001}


def expected(name, d):
    """The outputs of sequence `name` computed by numpy from inputs `d`."""
    A, B = d.get("A"), d.get("B")
    if name == "axpydot":
        z = d["w"] - d["alpha"] * d["v"]
        return {"z": z, "r": z @ d["u"]}
    if name == "atax":
        return {"y": A.T @ (A @ d["x"])}
    if name == "bicgk":
        return {"q": A @ d["p"], "s": A.T @ d["r"]}
    if name == "sgemv":
        return {"z": d["alpha"] * (A @ d["x"]) + d["beta"] * d["y"]}
    if name == "sgemvt":
        x = d["beta"] * (A.T @ d["y"]) + d["z"]
        return {"x": x, "w": d["alpha"] * (A @ x)}
    if name == "sscal":
        return {"x": d["alpha"] * d["x"]}
    if name == "gemver":
        Bm = A + np.outer(d["u1"], d["v1"]) + np.outer(d["u2"], d["v2"])
        x = d["beta"] * (Bm.T @ d["y"]) + d["z"]
        return {"B": Bm, "x": x, "w": d["alpha"] * (Bm @ x)}
    if name == "gesummv":
        return {"y": d["alpha"] * (A @ d["x"]) + d["beta"] * (B @ d["x"])}
    if name == "madd":
        return {"C": A + B}
    if name == "vadd":
        return {"x": d["w"] + d["y"] + d["z"]}
    if name == "waxpby":
        return {"w": d["alpha"] * d["x"] + d["beta"] * d["y"]}
    if name == "bicgstab":
        return bicgstab(A, d["x"], d["r"], d["rhat"], d["p"], d["rho"])
    if name == "normalize":
        return {"y": d["x"] / np.linalg.norm(d["x"])}
    raise KeyError(name)


def bicgstab(A, x, r, rhat, p, rho):
    """One BiCGSTAB iteration (van der Vorst), as textbooks and scripts/bicgstab.yaml write it."""
    v = A @ p
    alpha = rho / (rhat @ v)
    s = r - alpha * v
    t = A @ s
    omega = (t @ s) / (t @ t)
    x2 = x + alpha * p + omega * s
    r1 = s - omega * t
    rho1 = rhat @ r1
    beta = (rho1 / rho) * (alpha / omega)
    return {"x2": x2, "r1": r1, "p1": r1 + beta * (p - omega * v), "rho1": rho1}


def f64_twin(text):
    """The script with f64 precision and d-prefixed calls."""
    text = text.replace("precision: f32", "precision: f64")
    return re.sub(r"= s([a-z0-9]+)\(", r"= d\1(", text)


def inputs_of(text):
    """Input names and shapes (as size symbols, or None for scalars) from a shipped script."""
    block = re.search(r"^inputs:\n((?:  .*\n)+)", text, re.M).group(1)
    shapes = {}
    for line in block.splitlines():
        name, shape = (s.strip() for s in line.split(":", 1))
        shapes[name] = None if shape == "scalar" else [s.strip() for s in shape.strip("[]").split(",")]
    return shapes


def check(fuse, script, work, rng):
    name = script.stem
    text = f64_twin(script.read_text())
    twin = work / f"{name}.yaml"
    twin.write_text(text)
    inputs, outputs = work / f"{name}-in", work / f"{name}-out"
    inputs.mkdir()
    sizes = MATRIX_SIZES if re.search(r"\[m, n\]", text) else VECTOR_SIZES
    data = {}
    for input_name, shape in inputs_of(text).items():
        dims = [] if shape is None else [sizes[s] for s in shape]
        value = rng.standard_normal(dims) if dims else np.float64(rng.standard_normal())
        np.save(inputs / f"{input_name}.npy", np.asarray(value, dtype=np.float64))
        data[input_name] = value
    size_args = [arg for k, v in sizes.items() for arg in ("--size", f"{k}={v}")]
    cmd = [fuse, "run", str(twin), "--backend", "reference", "--inputs", str(inputs), "--outputs", str(outputs), *size_args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    failures = []
    for out_name, want in expected(name, data).items():
        got = np.load(outputs / f"{out_name}.npy")
        want = np.asarray(want)
        if got.dtype != np.float64 or got.shape != want.shape:
            failures.append(f"{name}.{out_name}: got {got.dtype}{got.shape}, want float64{want.shape}")
            continue
        error = np.linalg.norm(got - want) / np.linalg.norm(want)
        status = "ok" if error < TOLERANCE else "FAIL"
        print(f"{status:4} {name}.{out_name}: relative error {error:.2e}")
        if error >= TOLERANCE:
            failures.append(f"{name}.{out_name}: relative error {error:.2e} >= {TOLERANCE}")
    return failures


def main():
    fuse = sys.argv[1]
    scripts_dir = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else pathlib.Path(__file__).parent.parent / "scripts")
    scripts = sorted(scripts_dir.glob("*.yaml"))
    rng = np.random.default_rng(2026)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for script in scripts:
            failures += check(fuse, script, pathlib.Path(tmp), rng)
    if len(scripts) != 13:
        failures.append(f"expected the 13 sequences in {scripts_dir}, found {len(scripts)}")
    for f in failures:
        print(f"error: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
