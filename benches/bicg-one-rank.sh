#!/usr/bin/env bash
# The overhead of a distributed run: the `bicg` example solved in one process and as one MPI
# rank (`mpirun -n 1 … --distributed`), both with FUSE_NUM_THREADS=2, paired and alternating
# their order each round; prints each pair's median time per iteration and their ratio.
# Build first: cargo build --release -p fuse --features mpi --example bicg
# Usage: benches/bicg-one-rank.sh [N] [ROUNDS]   (defaults 8192 8)
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
n=${1:-8192}; rounds=${2:-8}
per_iteration() { grep "time per iteration" | sed 's/.*: \([0-9.]*\) ms.*/\1/'; }
process() { FUSE_NUM_THREADS=2 target/release/examples/bicg "$n" --backend cpu --precision "$1" --iterations 25 --no-stop | per_iteration; }
rank() {
  FUSE_NUM_THREADS=2 mpirun --oversubscribe --bind-to none -n 1 \
    target/release/examples/bicg "$n" --backend cpu --precision "$1" --iterations 25 --no-stop --distributed | per_iteration
}
echo "# round, precision, one process ms/iteration, one rank ms/iteration, ratio; n = $n; commit $(git rev-parse --short HEAD)"
for round in $(seq "$rounds"); do
  for p in f64 f32; do
    if (( round % 2 )); then a=$(process $p); b=$(rank $p); else b=$(rank $p); a=$(process $p); fi
    echo "$round $p process $a rank1 $b ratio $(awk "BEGIN { printf \"%.3f\", $b / $a }")"
  done
done
