#!/bin/bash
# OLD=.. NEW=.. RUNS=100 ab.sh SCRIPT SIZE PAIRS  -> median ratio new/old of fused
set -euo pipefail
for i in $(seq "$3"); do
  if [ $((i % 2)) = 0 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    if [ "$b" = old ]; then F=$OLD; else F=$NEW; fi
    "$F" bench "$1" --backend cpu ${SIZES:---size m=$2 --size n=$2} --runs ${RUNS:-100} --json 2>/dev/null | python3 -c "
import sys, json
d = json.loads(sys.stdin.read().strip().splitlines()[-1]); r = d['results'][0]
print('$b', round(r['fused_us'],1), round(r['baseline_us'],1))"
  done
done | python3 -c "
import sys
rows = [l.split() for l in sys.stdin]
old = [r for r in rows if r[0] == 'old']; new = [r for r in rows if r[0] == 'new']
for k, what in ((1, 'fused'), (2, 'unfused')):
    ratios = sorted(float(n[k]) / float(o[k]) for o, n in zip(old, new))
    print(what, 'old', sorted(float(o[k]) for o in old)[len(old)//2], 'new', sorted(float(n[k]) for n in new)[len(new)//2], 'new/old', [round(x, 3) for x in ratios], 'median', round(ratios[len(ratios) // 2], 3))
"
