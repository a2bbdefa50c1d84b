#!/bin/bash
# Two fuse builds' `fuse bench --backend cpu` on one script, alternating (which goes first in
# turn), and the per-pair ratios this / before of the fused and the unfused plan.
#   OLD=/path/to/old/fuse NEW=target/release/fuse ab.sh SCRIPT SIZE PAIRS
set -euo pipefail
for i in $(seq "$3"); do
  if [ $((i % 2)) = 0 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    if [ "$b" = old ]; then F=$OLD; else F=$NEW; fi
    "$F" bench "$1" --backend cpu --size m="$2" --size n="$2" --runs 10 --json 2>/dev/null | python3 -c "
import sys, json
d = json.loads(sys.stdin.read().strip().splitlines()[-1]); r = d['results'][0]
print('$b', round(r['fused_us']), round(r['baseline_us']), round(d['copy_gbps'], 1))"
  done
done | python3 -c "
import sys
rows = [l.split() for l in sys.stdin]
old = [r for r in rows if r[0] == 'old']; new = [r for r in rows if r[0] == 'new']
for o, n in zip(old, new): print(' '.join(o), ' | ', ' '.join(n))
for k, what in ((1, 'fused'), (2, 'unfused')):
    ratios = sorted(float(n[k]) / float(o[k]) for o, n in zip(old, new))
    print(what, 'this/before per pair', [round(x, 3) for x in ratios], 'median', round(ratios[len(ratios) // 2], 3))
"
