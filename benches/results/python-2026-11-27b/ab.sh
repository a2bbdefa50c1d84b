#!/usr/bin/env bash
# Alternates the BiCG example from Python on two fuseblas wheels (before and after a change)
# with the numpy loop: N=2048 P=f32 R=6 bash ab.sh. BEFORE and AFTER are Pythons with the two
# release wheels installed (python3 -m venv --system-site-packages DIR; DIR/bin/pip install
# --no-deps WHEEL); numpy runs on AFTER's, with OpenBLAS's own choice of kernels.
cd "$(dirname "$0")/../../.."
BEFORE=${BEFORE:-/tmp/pyold/bin/python}
AFTER=${AFTER:-/tmp/pyv/bin/python}
run() { # n precision rounds
  for round in $(seq 1 "$3"); do
    for who in before after numpy; do
      case $who in
        before) py=$BEFORE; backend=cpu ;;
        after) py=$AFTER; backend=cpu ;;
        numpy) py=$AFTER; backend=numpy ;;
      esac
      echo "## n=$1 $2 $who (round $round)"
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$py" examples/python/bicg.py "$1" --backend $backend \
        --precision "$2" --iterations 40 --no-stop | tail -2
    done
  done
}
run "${N:-2048}" "${P:-f32}" "${R:-6}"
