import numpy as np, time, sys, fuseblas
n=int(sys.argv[1]); dt=np.float32
rng=np.random.default_rng(0)
A=rng.standard_normal((n,n)).astype(dt); p=rng.standard_normal(n).astype(dt); r=rng.standard_normal(n).astype(dt)
g=fuseblas.compile('g.yaml',backend='cpu',sizes={'m':n,'n':n})
gt=fuseblas.compile('gt.yaml',backend='cpu',sizes={'m':n,'n':n})
b=fuseblas.compile('scripts/bicgk.yaml',backend='cpu',sizes={'m':n,'n':n})
fs={'np Ap':lambda: A@p,'fuse Ap':lambda: g(A=A,p=p),'np ATr':lambda: A.T@r,'fuse ATr':lambda: gt(A=A,r=r),'np both':lambda:(A@p,A.T@r),'fuse bicgk':lambda: b(A=A,p=p,r=r)}
res={k:[] for k in fs}
for rd in range(int(sys.argv[2])):
    for k,f in fs.items():
        time.sleep(0.2); f(); t=time.perf_counter(); f(); res[k].append(time.perf_counter()-t)
med=lambda v: sorted(v)[len(v)//2]
for k,v in res.items(): print("%-12s %.0f us"%(k,med(v)*1e6))
for a,b_ in [('np Ap','fuse Ap'),('np ATr','fuse ATr'),('np both','fuse bicgk')]:
    rs=[x/y for x,y in zip(res[a],res[b_])]; rs.sort(); print(a,'/',b_, "%.3f (%.3f-%.3f)"%(med(rs),rs[len(rs)//4],rs[3*len(rs)//4]))
