#!/bin/bash
# The CPU sweep of benches/results/cpu-sweep-*.md: fused against unfused (`fuse bench --backend
# cpu --json`) for BiCGK at m = n = 256 … 8192 and VADD at n = 10^4 … 10^8, in ROUNDS interleaved
# rounds (every point once per round), so that a busy minute of the shared machine touches one
# measurement of a point, not all. One JSON line per point and round, after a `# round …` line.
#   usage: benches/cpu-sweep.sh [FUSE] [ROUNDS] [RUNS]  > raw.jsonl
FUSE=${1:-target/release/fuse}
ROUNDS=${2:-3}
RUNS=${3:-20}
cd "$(dirname "$0")/.."
for round in $(seq 1 "$ROUNDS"); do
  for s in 256 512 1024 2048 4096 8192; do
    echo "# round $round bicgk m=n=$s"
    "$FUSE" bench scripts/bicgk.yaml --backend cpu --size m=$s --size n=$s --runs "$RUNS" --json 2>/dev/null
  done
  for n in 10000 100000 1000000 10000000 100000000; do
    echo "# round $round vadd n=$n"
    "$FUSE" bench scripts/vadd.yaml --backend cpu --size n=$n --runs "$RUNS" --json 2>/dev/null
  done
done
