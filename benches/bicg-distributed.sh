#!/usr/bin/env bash
# BiCG time per iteration over MPI ranks against one process, on the CPU backend: the `bicg`
# example in one process (FUSE_NUM_THREADS threads), and under `mpirun -n R` for each R given,
# the cores shared out (one thread a rank once R reaches the cores; oversubscribed beyond).
# Interleaved: each round runs every configuration once. Same system, same residual history;
# the distributed runs print the collectives of an iteration and the bytes each rank put in.
# Build first: cargo build --release -p fuse --features mpi --example bicg
# Usage: benches/bicg-distributed.sh [N] [ROUNDS] [RANKS...]   (defaults 8192 3 1 2 4)
set -euo pipefail
n=${1:-8192}; rounds=${2:-3}; shift $(( $# > 2 ? 2 : $# ))
ranks_list=("${@:-}")
[ -n "${ranks_list[0]}" ] || ranks_list=(1 2 4)
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
echo "# $(mpirun --version | head -1); $cores cores; n = $n; $(date -u +%FT%TZ); commit $(git rev-parse --short HEAD)"
for round in $(seq "$rounds"); do
  for p in f64 f32; do
    echo "## round $round, $p, 1 process, $cores threads"
    FUSE_NUM_THREADS=$cores target/release/examples/bicg "$n" --backend cpu --precision $p --iterations 25 --no-stop | tail -3
    for ranks in "${ranks_list[@]}"; do
      threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
      echo "## round $round, $p, $ranks ranks, $threads thread(s) each"
      FUSE_NUM_THREADS=$threads mpirun --oversubscribe --bind-to none -n "$ranks" \
        target/release/examples/bicg "$n" --backend cpu --precision $p --iterations 25 --no-stop --distributed | tail -3
    done
  done
done
