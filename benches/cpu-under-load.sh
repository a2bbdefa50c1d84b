#!/bin/sh
# SGEMV at 2048² and 8192², numpy + OpenBLAS (its own kernel choice) against fuse's CPU backend,
# on a quiet machine and with another process busy on one core (`yes > /dev/null`).
# Run from the repository root after `cargo build --release`.
run() {
  for n in 2048 8192; do
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 benches/numpy-sgemv.py $n
    target/release/fuse bench scripts/sgemv.yaml --backend cpu --size m=$n --size n=$n --runs 20 --json |
      python3 -c "import json, sys; r = json.load(sys.stdin)['results'][0]; print('fuse', $n, round(r['fused_us']))"
  done
}
echo "quiet:"; run
yes > /dev/null & hog=$!
echo "one core busy (yes > /dev/null):"; run
kill $hog
