#!/bin/bash
# FUSE=path tile-speedup.sh SCRIPT SIZE REPS TB... -> median in-process speedup (unfused / fused) per TB value,
# interleaved; FUSE a build whose in-cache block size is `TB << 10` bytes from the environment
set -euo pipefail
s=$1; n=$2; reps=$3; shift 3
for i in $(seq $reps); do for t in "$@"; do
  TB=$t "${FUSE:?}" bench "$s" --backend cpu --size m=$n --size n=$n --runs ${RUNS:-30} --json 2>/dev/null | python3 -c "
import sys, json
d = json.loads(sys.stdin.read().strip().splitlines()[-1]); r = d['results'][0]
print('$t', r['speedup'], r['fused_us'], r['baseline_us'])"
done; done | python3 -c "
import sys, statistics as st
rows=[l.split() for l in sys.stdin]
for b in dict.fromkeys(r[0] for r in rows):
    sp=[float(r[1]) for r in rows if r[0]==b]; f=[float(r[2]) for r in rows if r[0]==b]; u=[float(r[3]) for r in rows if r[0]==b]
    print('TB', b, 'speedup med %.3f (%.3f-%.3f)' % (st.median(sp), min(sp), max(sp)), 'fused med %.1f unfused med %.1f' % (st.median(f), st.median(u)))
"
