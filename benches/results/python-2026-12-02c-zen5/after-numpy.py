import numpy as np, fuseblas, time, statistics as st, sys
n=2048; dt=np.float64
g = np.random.default_rng(0)
A = g.uniform(-1, 1, (n, n)); C = g.uniform(-1, 1, (256, 256)); x = g.uniform(-1, 1, n); xc = x[:256].copy()
prog = fuseblas.compile(f"name: g\nprecision: f64\nsizes: {{m: {n}, n: {n}}}\ninputs: {{A: [m, n], x: [n]}}\noutputs: [y]\ncalls:\n  - y = dgemv(A, x)\n", backend='cpu')
y = np.empty(n)
def run(other, rounds=200):
    ts=[]
    for r in range(rounds):
        other(); a=time.perf_counter(); prog(A=A, x=x, out={'y': y}); ts.append(time.perf_counter()-a)
    return round(st.median(ts)*1e6)
for i in range(2):
  print('after nothing', run(lambda: None), '| after small numpy gemv (256², OpenBLAS threads)', run(lambda: C @ xc), '| after numpy elementwise', run(lambda: x * 2.0), '| after numpy A@x', run(lambda: A @ x))
