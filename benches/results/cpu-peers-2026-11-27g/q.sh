#!/bin/bash
# q.sh SCRIPT "SIZES" PAIRS BIN... : fused µs of each binary, alternating, 1 thread; medians
S=$1; Z=$2; P=$3; shift 3
for i in $(seq $P); do for b in "$@"; do
  echo "$b $(FUSE_NUM_THREADS=${T:-1} $b bench $S --backend cpu $Z --runs ${RUNS:-50} --json 2>/dev/null | python3 -c 'import sys,json; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["results"][0]["fused_us"])')"
done; done | python3 -c "
import sys,statistics
d={}
for l in sys.stdin:
    b,v=l.split(); d.setdefault(b,[]).append(float(v))
for b,v in d.items(): print(b, round(statistics.median(v),1), sorted(round(x,1) for x in v))"
