# The cost of a scalar input from Python: `_prepare` of one scalar, a whole SGEMV call at 64² f32
# with alpha and beta given as each kind of number, and the native half alone on prepared inputs.
#   FUSE_SIMD=avx2 python3 scalar-inputs.py   (from the repository root)
import numpy as np, timeit, fuseblas
n=64; dt=np.float32
A=np.ones((n,n),dt); x=np.ones(n,dt); y=np.ones(n,dt)
g = fuseblas.compile('scripts/sgemv.yaml', backend='cpu', sizes={'m': n, 'n': n})
for lab, al in [('np.float32', dt(1.5)), ('float', 1.5), ('np.float64', np.float64(1.5))]:
    print(lab, 'prepare %.2f us' % (min(timeit.repeat(lambda: g._prepare('alpha', al), number=20000, repeat=5))/20000*1e6),
          'call %.2f us' % (min(timeit.repeat(lambda: g(A=A, x=x, y=y, alpha=al, beta=al), number=20000, repeat=5))/20000*1e6))
pre = {k: g._prepare(k, v) for k, v in dict(A=A, x=x, y=y, alpha=dt(1.5), beta=dt(1.5)).items()}
print('native run %.2f us' % (min(timeit.repeat(lambda: g._native.run(pre), number=20000, repeat=5))/20000*1e6))
print('prepare array %.2f us' % (min(timeit.repeat(lambda: g._prepare('A', A), number=20000, repeat=5))/20000*1e6))
