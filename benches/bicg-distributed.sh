#!/usr/bin/env bash
# BiCG time per iteration over MPI ranks against one process, on the CPU backend: the `bicg`
# example in one process (FUSE_NUM_THREADS threads), and under `mpirun -n R` with the cores
# shared out (one thread a rank where R equals the cores). Same system, same residual history.
# Build first: cargo build --release -p fuse --features mpi --example bicg
# Usage: benches/bicg-distributed.sh [N] [RANKS] [ROUNDS]   (defaults 8192 2 2)
set -euo pipefail
n=${1:-8192}; ranks=${2:-2}; rounds=${3:-2}
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
echo "# $(mpirun --version | head -1); $cores cores; n = $n; $(date -u +%FT%TZ)"
for round in $(seq "$rounds"); do
  for p in f64 f32; do
    echo "## round $round, $p, 1 process, $cores threads"
    FUSE_NUM_THREADS=$cores target/release/examples/bicg "$n" --backend cpu --precision $p --iterations 25 --no-stop | tail -3
    echo "## round $round, $p, $ranks ranks, $(( cores / ranks > 0 ? cores / ranks : 1 )) thread(s) each"
    FUSE_NUM_THREADS=$(( cores / ranks > 0 ? cores / ranks : 1 )) mpirun --oversubscribe --bind-to none -n "$ranks" \
      target/release/examples/bicg "$n" --backend cpu --precision $p --iterations 25 --no-stop --distributed | tail -3
  done
done
