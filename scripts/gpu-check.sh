#!/usr/bin/env bash
# gpu-check.sh — everything the CUDA backend has to show, measured on a machine with an NVIDIA GPU
# (H100/H200, CUDA 13 driver), with the prebuilt target/release/fuse: no Rust toolchain needed.
#
# usage: bash scripts/gpu-check.sh [STAGE...]
#
# Stages, in order, with the seconds each is budgeted (about twice what each took on the H100 run
# of 2026-11-22, bench grown by its new sizes and profiles; selftest and calibrate by what they
# took on the H200 run of 2026-12-04, where calibrate had not finished after 269 s):
#   env        15  GPU, driver, libraries and tools found                       (nvidia-smi, fuse devices)
#   selftest   50  the emulation test matrix on the GPU: 11 sequences, top-5 plans (+ unfused in
#                  f64), sizes 67×45 1×300 300×1 257×513, outputs poisoned, f32 and f64
#   bench     150  fuse bench --backend cuda: BLAS-2 at 2048², 4096², 8192² and 16384², BLAS-1 at 2²⁶
#                  (JSON), and the profile of each BLAS-2 plan at 8192² (`fuse compile`: load
#                  widths, atomics and shuffles per 1024 elements, registers, waves); plans ranked
#                  by the shipped table of this GPU where there is one, else the analytic estimate
#   ncu       120  Nsight Compute on the same plans at 8192² / 2²⁶ (the profile that explains misses)
#   peers     200  scripts/peers.py: PyTorch eager, torch.compile, JAX jit at the same sizes
#   sanitize   60  compute-sanitizer memcheck and racecheck on the plan chosen for 8192² / 2²⁶,
#                  run at small odd sizes
#   solver    120  the BiCG example (target/release/examples/bicg, data resident on the GPU) at
#                  n = 8192 f64 and 16384 f32: time per iteration against its kernels' time (CUDA
#                  events), beside the same solver in PyTorch and CuPy (scripts/bicg_peers.py); and
#                  at 8192 f64 as a distributed session of one rank, its collectives through NCCL
#                  (bytes crossing to and from the device per iteration: scalars only)
#   python    120  fuseblas on the GPU: the wheel carried in target/wheels (pip wheel
#                  ./crates/fuse-python -w target/wheels, a release build: tests/run leaves
#                  its dev build there, which is tested but not timed) installed beside this
#                  Python's PyTorch (on PYTHONPATH), its DLPack tests (PyTorch CUDA tensors read in place,
#                  outputs taken back without a copy) under FUSE_TEST_CUDA=1, and
#                  benches/python-peers.py --device cuda (fuseblas from Python against PyTorch
#                  eager, torch.compile and jax.jit at 2048² and 8192²), the BiCG example
#                  from Python at 8192² f64, and benches/gpu-solvers.py: fuseblas.linalg's cg,
#                  bicg, bicgstab and gmres against cupyx.scipy.sparse.linalg (cg, gmres) and
#                  PyTorch loops (cg, bicg) at 2048² and 8192² f64, ms and bytes to the host
#                  an iteration
#   tune      120  fuse tune --top 10 at every bench size: prediction accuracy (paper Table 4) of
#                  the table the plans are ranked by (shipped, calibrated earlier, or analytic)
#   calibrate 400  fuse calibrate: the timing table of this GPU (installed for later runs and
#                  copied to library/timings/<gpu>.yaml, to be committed as the shipped table)
# and, after every stage, the report: benches/results/<gpu>-<date>.md (scripts/report.py).
#
# Without arguments it runs every stage not done yet, in this order — the numbers the open
# issues ask for first, the slow calibration last — skipping any whose budget no longer fits in the call's time
# (GPU_CHECK_BUDGET seconds, default 540: one 10-minute call of the device tool, inside a lease of
# 15 minutes), so the same command run again continues with what is left. `--plan` prints which
# stages each call runs where every stage takes its whole budget (they usually take half):
#
#   call 1: env selftest bench ncu peers      call 2: sanitize solver python tune      call 3: calibrate
#
# (on the H200 the first call's stages took half their budgets and left time for the second's)
#
# Raw output goes to benches/results/<gpu>-<date>/ (one log or JSON per stage; the fuse caches
# live there too, so a later call finds the calibrated table and tuned plans), and under $OUT, when
# set, as gpu-check.tar.gz (everything but compiled modules) plus the .md: unpack the tar in the
# repository root before the next call (`tar xzf gpu-check.tar.gz`) so that it carries the earlier
# stages. Once every stage has run, the caches and progress markers are removed and the tar holds
# exactly what to commit: the .md, the raw folder and library/timings/<gpu>.yaml.
set -uo pipefail
cd "$(dirname "$0")/.."

FUSE=${FUSE:-target/release/fuse}
BICG=${BICG:-target/release/examples/bicg}
PYTHON=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET:-540}
START=$SECONDS
ALL_STAGES=(env selftest bench ncu peers sanitize solver python tune calibrate)
declare -A COST=([env]=15 [selftest]=50 [bench]=150 [ncu]=120 [peers]=200 [calibrate]=400 [tune]=120 [sanitize]=60 [solver]=120 [python]=120)
# BiCG solver sizes and precisions (the resident-data stage).
SOLVER_SIZES=(8192:f64 16384:f32)
BLAS2=(atax bicgk sgemv sgemvt gemver gesummv madd)
BLAS1=(axpydot sscal vadd waxpby)
MATRIX_SIZES=(8192 16384)
# Sizes whose matrices fit in the L2 cache (or nearly): launches, grid shape and atomics decide.
SMALL_SIZES=(2048 4096)
VECTOR_SIZE=67108864

log() { echo "gpu-check: $*" >&2; }

# --- where things are ---------------------------------------------------------------------------

# The first folder of "$@" (after the library name) holding library $1.
find_lib() {
    local name=$1 dir
    shift
    for dir in "$@"; do
        if [ -e "$dir/$name" ]; then
            echo "$dir"
            return 0
        fi
    done
    # Last resort, bounded: anywhere under /usr and /opt.
    timeout 30 find /usr /opt -name "$name" -print -quit 2>/dev/null | xargs -r dirname
}

# Library folders of the NVIDIA wheels of this Python (PyTorch's CUDA 13 runtime ships them).
python_lib_dirs() {
    "$PYTHON" - <<'PY' 2>/dev/null
import importlib, os
for module in ("nvidia.cu13", "nvidia.cuda_nvrtc", "nvidia.cublas", "nvidia.nccl"):
    try:
        for path in importlib.import_module(module).__path__:
            print(os.path.join(path, "lib"))
    except Exception:
        pass
PY
}

setup_environment() {
    export PATH="/usr/local/cuda/bin:$PATH"
    local ncu_dir
    ncu_dir=$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)
    [ -n "$ncu_dir" ] && export PATH="$PATH:$ncu_dir"
    local candidates
    # The toolkit first: it also has the unversioned names (libcublas.so) that cudarc tries first,
    # so cudarc and fuse's probe land on the same files.
    candidates="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(python_lib_dirs)"
    # shellcheck disable=SC2086
    NVRTC_DIR=$(find_lib libnvrtc.so.13 $candidates)
    # shellcheck disable=SC2086
    CUBLAS_DIR=$(find_lib libcublas.so.13 $candidates)
    DRIVER_DIR=$(find_lib libcuda.so.1 /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64)
    local dir
    for dir in "$DRIVER_DIR" "$CUBLAS_DIR" "$NVRTC_DIR"; do
        [ -n "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
    [ -n "$NVRTC_DIR" ] && export FUSE_NVRTC_LIB="$NVRTC_DIR"
    [ -n "$CUBLAS_DIR" ] && export FUSE_CUBLAS_LIB="$CUBLAS_DIR"
    # cudarc opens NCCL only as libnccl.so; NCCL's wheel has libnccl.so.2 alone: link it.
    # shellcheck disable=SC2086
    NCCL_DIR=$(find_lib libnccl.so $candidates /usr/lib/x86_64-linux-gnu)
    if [ -z "$NCCL_DIR" ]; then
        local nccl2
        # shellcheck disable=SC2086
        nccl2=$(find_lib libnccl.so.2 $candidates /usr/lib/x86_64-linux-gnu)
        if [ -n "$nccl2" ]; then
            # A folder of our own (mktemp: not one another user could have made), gone at exit.
            NCCL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fuse-nccl.XXXXXX")
            trap 'rm -rf "$NCCL_DIR"' EXIT
            ln -s "$nccl2/libnccl.so.2" "$NCCL_DIR/libnccl.so"
        fi
    fi
    if [ -n "$NCCL_DIR" ]; then
        export LD_LIBRARY_PATH="$NCCL_DIR:$LD_LIBRARY_PATH"
        export FUSE_NCCL_LIB="$NCCL_DIR"
    fi
    export PYTHONUNBUFFERED=1
}

# benches/results/<gpu>-<date>: an unfinished one of this GPU is continued, else a new one.
results_dir() {
    local gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
        tr '[:upper:]' '[:lower:]' | sed -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
    gpu=${gpu:-unknown-gpu}
    local existing
    existing=$(ls -d benches/results/"$gpu"-*/ 2>/dev/null | while read -r d; do
        [ -e "$d/.in-progress" ] && echo "${d%/}"
    done | tail -1)
    if [ -n "$existing" ]; then
        echo "$existing"
        return
    fi
    # A finished run of the same day is kept: the new one gets a suffix.
    local dir="benches/results/$gpu-$(date -u +%Y-%m-%d)" k=2
    local candidate=$dir
    while [ -e "$candidate" ] || [ -e "$candidate.md" ]; do
        candidate="$dir-$k"
        k=$((k + 1))
    done
    echo "$candidate"
}

scripts_of() {
    local name
    for name in "$@"; do echo "scripts/$name.yaml"; done
}

# --- stages -------------------------------------------------------------------------------------

stage_env() {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    nvidia-smi
    echo
    "$FUSE" --version
    "$FUSE" devices
    echo
    echo "FUSE_NVRTC_LIB=${FUSE_NVRTC_LIB:-unset} FUSE_CUBLAS_LIB=${FUSE_CUBLAS_LIB:-unset} FUSE_NCCL_LIB=${FUSE_NCCL_LIB:-unset}"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    "$PYTHON" -c 'import jax; print("jax", jax.__version__, jax.devices())' 2>&1 | tail -1
    compute-sanitizer --version 2>&1 | tail -1
    ncu --version 2>&1 | tail -1
}

stage_selftest() {
    # shellcheck disable=SC2046
    "$FUSE" selftest $(scripts_of "${BLAS2[@]}" "${BLAS1[@]}") --backend cuda --top 5
}

stage_calibrate() {
    "$FUSE" calibrate --backend cuda -o "$RAW/timings.yaml" || return
    local key
    key=$(ls "$FUSE_CACHE_DIR/timings/" | head -1)
    cp "$RAW/timings.yaml" "library/timings/$key"
    echo "library/timings/$key" >"$RAW/shipped-table.txt"
    echo "shipped table: library/timings/$key"
    head -6 "$RAW/timings.yaml"
}

stage_bench() {
    local n code status=0
    for n in "${SMALL_SIZES[@]}" "${MATRIX_SIZES[@]}"; do
        # shellcheck disable=SC2046
        "$FUSE" bench $(scripts_of "${BLAS2[@]}") --backend cuda --size m="$n" --size n="$n" --runs 30 --json \
            >"$RAW/bench-m$n.json"
        code=$?
        echo "bench m=n=$n: exit $code"
        [ $code -eq 0 ] || status=1
    done
    # shellcheck disable=SC2046
    "$FUSE" bench $(scripts_of "${BLAS1[@]}") --backend cuda --size n="$VECTOR_SIZE" --runs 30 --json \
        >"$RAW/bench-blas1.json"
    code=$?
    echo "bench n=$VECTOR_SIZE: exit $code"
    [ $code -eq 0 ] || status=1
    local name
    for name in "${BLAS2[@]}"; do
        echo "==== profile of $name at 8192²"
        "$FUSE" compile "scripts/$name.yaml" --size m=8192 --size n=8192 -o "$RAW/kernels/$name" | grep -v '^wrote ' || status=1
    done
    return $status
}

# Runs the plan chosen for the bench sizes at small odd sizes under each tool.
stage_sanitize() {
    local tool name status=0
    for tool in memcheck racecheck; do
        for name in "${BLAS2[@]}"; do
            sanitize "$tool" "$name" --size m=300 --size n=257 --plan-size m=8192 --plan-size n=8192 || status=1
        done
        for name in "${BLAS1[@]}"; do
            sanitize "$tool" "$name" --size n=100003 --plan-size n="$VECTOR_SIZE" || status=1
        done
    done
    return $status
}

sanitize() {
    local tool=$1 name=$2
    shift 2
    local out
    out=$(compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
        "$FUSE" run "scripts/$name.yaml" --backend cuda "$@" 2>&1)
    local status=$?
    echo "$out" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid|error" | head -20
    if [ $status -eq 0 ]; then
        echo "ok    $tool $name"
    else
        echo "FAIL  $tool $name (exit $status)"
        echo "$out" | tail -40
    fi
    return $status
}

stage_ncu() {
    local name
    for name in "${BLAS2[@]}"; do
        profile "$name" --size m=8192 --size n=8192
    done
    for name in "${BLAS1[@]}"; do
        profile "$name" --size n="$VECTOR_SIZE"
    done
}

profile() {
    local name=$1
    shift
    echo "==== $name $*"
    ncu --clock-control none --kernel-name regex:'^fuse_' \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        "$FUSE" run "scripts/$name.yaml" --backend cuda "$@" 2>&1 | grep -v '^[a-zA-Z_0-9]* *\[' | tail -120
}

stage_tune() {
    local n name
    : >"$RAW/tune.jsonl"
    for n in "${MATRIX_SIZES[@]}"; do
        for name in "${BLAS2[@]}"; do
            "$FUSE" tune "scripts/$name.yaml" --top 10 --size m="$n" --size n="$n" --json >>"$RAW/tune.jsonl"
            echo "tune $name m=n=$n: exit $?"
        done
    done
    for name in "${BLAS1[@]}"; do
        "$FUSE" tune "scripts/$name.yaml" --top 10 --size n="$VECTOR_SIZE" --json >>"$RAW/tune.jsonl"
        echo "tune $name n=$VECTOR_SIZE: exit $?"
    done
}

stage_peers() {
    "$PYTHON" scripts/peers.py --matrix "${MATRIX_SIZES[@]}" --vector "$VECTOR_SIZE" --runs 25 --json "$RAW/peers.json"
}

stage_solver() {
    local spec status=0
    [ -x "$BICG" ] || { echo "$BICG not found: build it (cargo build --release -p fuse --example bicg) and carry it"; return 2; }
    for spec in "${SOLVER_SIZES[@]}"; do
        # --no-stop: f32 at 16384 converges in 3 iterations, before the kernels are all compiled.
        "$BICG" "${spec%%:*}" --precision "${spec##*:}" --backend cuda --iterations 30 --no-stop \
            >"$RAW/solver-${spec/:/-}.log" 2>&1
        echo "bicg $spec: exit $?"
        tail -2 "$RAW/solver-${spec/:/-}.log"
    done
    # One rank of a distributed session: A stays on the GPU, the collectives go through NCCL.
    "$BICG" 8192 --precision f64 --backend cuda --local-ranks 1 --iterations 30 --no-stop \
        >"$RAW/solver-nccl-8192-f64.log" 2>&1
    echo "bicg 8192:f64 --local-ranks 1: exit $?"
    tail -3 "$RAW/solver-nccl-8192-f64.log"
    # shellcheck disable=SC2046
    "$PYTHON" scripts/bicg_peers.py $(printf -- '--size %s ' "${SOLVER_SIZES[@]}") --iterations 30 --json "$RAW/solver-peers.json" || status=1
    return $status
}

stage_python() {
    local wheel site=${TMPDIR:-/tmp}/fuseblas-site
    wheel=$(ls target/wheels/fuseblas-*.whl 2>/dev/null | tail -1)
    [ -n "$wheel" ] || { echo "no wheel in target/wheels: build one (pip wheel ./crates/fuse-python -w target/wheels) and carry it"; return 2; }
    # A folder on PYTHONPATH, not a venv: a venv's --system-site-packages sees the base
    # interpreter's packages, not those of the (venv) Python that holds PyTorch.
    "$PYTHON" -m pip install --quiet --no-deps --target "$site" "$wheel" || return 1
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    "$PYTHON" -c "import pytest, torch" || { echo "pytest and PyTorch are needed beside the wheel"; return 1; }
    local status=0 profile
    profile=$("$PYTHON" -c "import fuseblas; print(fuseblas.build_profile)") || return 1
    FUSE_TEST_CUDA=1 "$PYTHON" -m pytest -q -p no:cacheprovider crates/fuse-python/tests/test_gpu_dlpack.py || status=1
    if [ "$profile" != release ]; then
        echo "target/wheels holds a $profile build of fuseblas (tests/run leaves its unoptimised wheel there):"
        echo "its DLPack tests ran, nothing was timed; carry a release wheel (pip wheel ./crates/fuse-python -w target/wheels, after tests/run)"
        return 1
    fi
    "$PYTHON" benches/python-peers.py --device cuda --sizes 2048,8192 --rounds 3 --runs 20 \
        >"$RAW/python-peers-cuda.log" 2>&1 || status=1
    tail -8 "$RAW/python-peers-cuda.log"
    # The BiCG example from Python on the GPU (its Rust twin and PyTorch/CuPy: the solver stage).
    "$PYTHON" examples/python/bicg.py 8192 --backend cuda --iterations 30 --no-stop \
        >"$RAW/python-bicg-8192-f64.log" 2>&1 || status=1
    tail -2 "$RAW/python-bicg-8192-f64.log"
    # fuseblas.linalg against cupyx.scipy.sparse.linalg and PyTorch loops, resident f64 systems.
    "$PYTHON" benches/gpu-solvers.py --sizes 2048,8192 --iterations 30 --rounds 2 \
        --json "$RAW/python-gpu-solvers.json" >"$RAW/python-gpu-solvers.log" 2>&1 || status=1
    tail -12 "$RAW/python-gpu-solvers.log"
    return $status
}

# --- driver -------------------------------------------------------------------------------------

run_stage() {
    local stage=$1 left=$((BUDGET - (SECONDS - START)))
    log "$stage (budget ${COST[$stage]} s, ${left} s left)"
    local began=$SECONDS
    {
        echo "# stage $stage — $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
        timeout --kill-after=10 "$left" bash -c "$(declare -f); $(declare -p RAW FUSE BICG PYTHON BLAS1 BLAS2 \
            MATRIX_SIZES SMALL_SIZES VECTOR_SIZE SOLVER_SIZES); stage_$stage"
        local status=$?
        [ $status -eq 124 ] && echo "# stage $stage TIMED OUT after $left s (partial output above)"
        echo "# stage $stage: exit $status, $((SECONDS - began)) s"
    } >"$RAW/$stage.log" 2>&1
    tail -3 "$RAW/$stage.log" >&2
    # Exit status 3 is "no usable GPU": an environment problem, and 124 a stage cut off at the
    # call's limit: either way the stage stays to be run.
    grep -qE "^# stage $stage: exit (3|124)," "$RAW/$stage.log" || touch "$RAW/.done-$stage"
}

# Rebuilds the .md and the tar under $OUT; with "final", says what is left to run.
report() {
    "$PYTHON" scripts/report.py "$RAW" >"$RAW.md" || log "report.py failed"
    if [ -n "${OUT:-}" ]; then
        local shipped=()
        [ -e "$RAW/shipped-table.txt" ] && mapfile -t shipped <"$RAW/shipped-table.txt"
        tar czf "$OUT/gpu-check.tar.gz" --exclude="$RAW/cache/modules" "$RAW" "$RAW.md" "${shipped[@]}"
        cp "$RAW.md" "$OUT/"
    fi
    [ "${1:-}" = final ] || return 0
    local pending=()
    local stage
    for stage in "${ALL_STAGES[@]}"; do
        [ -e "$RAW/.done-$stage" ] || pending+=("$stage")
    done
    if [ ${#pending[@]} -eq 0 ]; then
        # Done: what is left is what to commit (the caches' contents are in timings.yaml and
        # tune.jsonl; compiled modules are rebuilt anywhere).
        rm -rf "$RAW/cache" "$RAW"/.done-* "$RAW/.in-progress"
        report
        log "all stages done: commit $RAW.md, $RAW/ and $(cat "$RAW/shipped-table.txt" 2>/dev/null || echo 'no table')"
    else
        log "not run yet: ${pending[*]} — run the same command again (after unpacking \$OUT/gpu-check.tar.gz here)"
    fi
}

# The stages each call runs when every stage takes its whole budget, one line per call.
plan_calls() {
    local pending=("${ALL_STAGES[@]}") call=1
    while [ ${#pending[@]} -gt 0 ]; do
        local used=0 ran=() left=() stage
        for stage in "${pending[@]}"; do
            if [ $((used + COST[$stage])) -le "$BUDGET" ]; then
                used=$((used + COST[$stage]))
                ran+=("$stage")
            else
                left+=("$stage")
            fi
        done
        [ ${#ran[@]} -gt 0 ] || { echo "a stage's budget exceeds GPU_CHECK_BUDGET=$BUDGET: ${left[*]}"; return 1; }
        echo "call $call (${used} s of $BUDGET): ${ran[*]}"
        pending=("${left[@]}")
        call=$((call + 1))
    done
}

main() {
    if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
        sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        return 0
    fi
    if [ "${1:-}" = --plan ]; then
        plan_calls
        return
    fi
    [ -x "$FUSE" ] || { log "$FUSE not found: build it first (cargo build --release) and carry it"; return 2; }
    setup_environment
    if ! "$FUSE" devices >/dev/null; then
        log "no usable GPU for fuse (see the error above): nothing run"
        return 3
    fi
    RAW=$(results_dir)
    mkdir -p "$RAW/cache"
    touch "$RAW/.in-progress"
    export FUSE_CACHE_DIR="$PWD/$RAW/cache"
    log "results: $RAW (budget $BUDGET s)"
    local stages=("$@")
    [ ${#stages[@]} -eq 0 ] && stages=("${ALL_STAGES[@]}")
    local explicit=$#
    local stage
    for stage in "${stages[@]}"; do
        [ -n "${COST[$stage]:-}" ] || { log "unknown stage $stage (stages: ${ALL_STAGES[*]})"; return 2; }
        if [ "$explicit" -eq 0 ] && [ -e "$RAW/.done-$stage" ]; then
            continue
        fi
        if [ $((SECONDS - START + COST[$stage])) -gt "$BUDGET" ]; then
            log "$stage (budget ${COST[$stage]} s) does not fit in the $((BUDGET - (SECONDS - START))) s left of this call: left for the next"
            continue
        fi
        run_stage "$stage"
        report
    done
    report final
}

main "$@"
