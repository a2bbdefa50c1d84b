"""The dense test system of the solver benchmarks (benches/solvers.py, benches/gpu-solvers.py):
A = S + c·I with S symmetric, uniform in [-1, 1], and c 1.1 times S's spectral radius estimate
2·√(n/3) (symmetric positive definite, so every method applies; condition number about 20);
b uniform in [-1, 1]."""

import numpy as np


def system(n, dtype, seed=1, general=False):
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (n, n))
    A = (A + A.T) / 2
    A[np.diag_indices(n)] += 1.1 * 2 * np.sqrt(n / 3) / np.sqrt(2)
    if general:
        R = rng.uniform(-1, 1, (n, n))
        A += (R - R.T) / 2
    return A.astype(dtype), rng.uniform(-1, 1, n).astype(dtype)
