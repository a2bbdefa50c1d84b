#!/usr/bin/env bash
# BiCG time per iteration: the `bicg` example on the CPU backend against the same solver in numpy
# (examples/python/bicg.py --backend numpy), f32 and f64, at the sizes given (default 1024 2048 8192).
# Run from the repository root after `cargo build --release -p fuse --example bicg`.
for n in ${@:-1024 2048 8192}; do
  for p in f32 f64; do
    echo "n = $n, $p"
    target/release/examples/bicg $n --backend cpu --precision $p --iterations 25 --no-stop | tail -1
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 examples/python/bicg.py $n --backend numpy --precision $p --iterations 25 --no-stop | tail -1
  done
done
