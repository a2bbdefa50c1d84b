#!/usr/bin/env python3
"""numpy's SGEMV (alpha·A·x + beta·y, f32) at N×N in a loop of 300 runs after 3 warm-ups:
prints the median and minimum µs. Usage: numpy-sgemv.py N"""
import sys
import time

import numpy as np

n = int(sys.argv[1])
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
x = rng.uniform(-1, 1, n).astype(np.float32)
y = x.copy()
alpha = np.float32(1.5)
for _ in range(3):
    alpha * (a @ x) + alpha * y
times = []
for _ in range(300):
    start = time.perf_counter()
    alpha * (a @ x) + alpha * y
    times.append(time.perf_counter() - start)
times.sort()
print("numpy", n, round(times[len(times) // 2] * 1e6), "min", round(times[0] * 1e6))
