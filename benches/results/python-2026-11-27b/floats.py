"""The BiCG of examples/python/bicg.py with its step lengths passed as Python floats (literals)."""
import sys, time, statistics, numpy as np
sys.path.insert(0, "examples/python")  # run from the repository root
import bicg
n = int(sys.argv[1]); dtype = np.dtype(np.float32)
a, b = bicg.system(n)
ops = bicg.Fuse(dtype, "cpu")
ops.scalar = float  # a Python float: a literal of each call
times, last = [], [time.perf_counter()]
def on_iteration(k, r):
    now = time.perf_counter(); times.append(now - last[0]); last[0] = now
bicg.bicg(ops, a, b, 0.0, 40, on_iteration)
st = ops.s.stats()
print(f"n={n} floats: {statistics.median(times[3:]) * 1e3:.3f} ms an iteration, {st['compilations']} compilations in {st['flushes']} flushes")
