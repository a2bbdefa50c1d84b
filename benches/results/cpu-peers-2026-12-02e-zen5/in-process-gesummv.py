# GESUMMV and SGEMV against numpy in one process: each call after SLEEP s and an untimed call, interleaved.
#   python3 in-process-gesummv.py N ROUNDS SLEEP   (from the repository root)
import numpy as np, time, sys, fuseblas
n = int(sys.argv[1]); rounds = int(sys.argv[2]); dt = np.float32
rng = np.random.default_rng(0)
A = rng.standard_normal((n, n)).astype(dt); B = rng.standard_normal((n, n)).astype(dt)
x = rng.standard_normal(n).astype(dt); al, be = dt(1.5), dt(-0.5)
g = fuseblas.compile('scripts/sgemv.yaml', backend='cpu', sizes={'m': n, 'n': n})
gs = fuseblas.compile('scripts/gesummv.yaml', backend='cpu', sizes={'m': n, 'n': n})
print(g.explain() if hasattr(g, 'explain') else '')
fs = {'np A@x': lambda: A @ x, 'fuse sgemv': lambda: g(A=A, x=x, y=x, alpha=al, beta=be), 'np gesummv': lambda: al * (A @ x) + be * (B @ x),
      'fuse gesummv': lambda: gs(A=A, B=B, x=x, alpha=al, beta=be)}
res = {k: [] for k in fs}
for rd in range(rounds):
    for k, f in fs.items():
        time.sleep(float(sys.argv[3])); f(); t = time.perf_counter(); f(); res[k].append(time.perf_counter() - t)
med = lambda v: sorted(v)[len(v) // 2]
for k, v in res.items(): print("%-14s %.0f us  %.1f GB/s" % (k, med(v) * 1e6, (2 if 'gesummv' in k else 1) * n * n * 4 / med(v) / 1e9))
rs = sorted(a / b for a, b in zip(res['np gesummv'], res['fuse gesummv']))
print('np/fuse gesummv %.3f (%.3f-%.3f)' % (med(rs), rs[len(rs) // 4], rs[3 * len(rs) // 4]))
