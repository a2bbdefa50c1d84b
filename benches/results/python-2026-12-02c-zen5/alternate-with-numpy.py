import numpy as np, fuseblas, time, statistics as st, sys
n=int(sys.argv[1]); prec=sys.argv[2]; rounds=int(sys.argv[3])
dt = np.float32 if prec == 'f32' else np.float64; p = 's' if prec=='f32' else 'd'
g = np.random.default_rng(0)
A = g.uniform(-1, 1, (n, n)).astype(dt); x = g.uniform(-1, 1, n).astype(dt)
prog = fuseblas.compile(f"name: g\nprecision: {prec}\nsizes: {{m: {n}, n: {n}}}\ninputs: {{A: [m, n], x: [n]}}\noutputs: [y]\ncalls:\n  - y = {p}gemv(A, x)\n", backend='cpu')
y = np.empty(n, dt)
fs = {'numpy': lambda: A @ x, 'fuse': lambda: prog(A=A, x=x, out={'y': y})}
if len(sys.argv) > 4: fs.pop(sys.argv[4])
for f in fs.values(): f()
T = {k: [] for k in fs}
for r in range(rounds):
    for k in (list(fs) if r % 2 == 0 else list(fs)[::-1]):
        a = time.perf_counter(); fs[k](); T[k].append(time.perf_counter() - a)
m = {k: st.median(v) * 1e6 for k, v in T.items()}
print(n, prec, {k: round(v) for k, v in m.items()})
