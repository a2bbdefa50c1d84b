#!/usr/bin/env bash
# Long scripts: chains of N small sscal calls (y1 = sscal(2.0, x), y2 = sscal(2.0, y1), …,
# n = 64), timed end to end with /usr/bin/time — `fuse explore`, and `fuse run` on the cpu
# backend and on the reference interpreter. Prints a markdown table: median wall time of RUNS
# runs and the largest peak RSS.
#
#   cargo build --release -p fuse-cli && bash benches/scripts/chains.sh [RUNS] [N...]
set -euo pipefail
fuse=${FUSE:-target/release/fuse}
runs=${1:-5}
shift || true
sizes=("${@:-200 2000 20000}")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

chain() {
    local n=$1 out=$2
    {
        printf 'name: chain%s\nsizes: {n: 64}\ninputs: {x: [n]}\noutputs: [y%s]\ncalls:\n' "$n" "$n"
        printf '  - y1 = sscal(2.0, x)\n'
        for ((k = 2; k <= n; k++)); do printf '  - y%d = sscal(2.0, y%d)\n' "$k" $((k - 1)); done
    } >"$out"
}

# Median seconds and max KB of `runs` runs of the command.
measure() {
    local times=() peak=0
    for ((r = 0; r < runs; r++)); do
        /usr/bin/time -o "$dir/t" -f '%e %M' "$@" >/dev/null 2>&1
        read -r s kb <"$dir/t"
        times+=("$s")
        ((kb > peak)) && peak=$kb
    done
    local median
    median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '%s | %s' "$median" $((peak / 1024))
}

echo '| calls | explore s | explore MB | run cpu s | run cpu MB | run reference s | run reference MB |'
echo '|---:|---:|---:|---:|---:|---:|---:|'
for n in ${sizes[*]}; do
    chain "$n" "$dir/chain$n.yaml"
    printf '| %s | %s | %s | %s |\n' "$n" \
        "$(measure "$fuse" explore "$dir/chain$n.yaml")" \
        "$(measure "$fuse" run --backend cpu "$dir/chain$n.yaml")" \
        "$(measure "$fuse" run --backend reference "$dir/chain$n.yaml")"
done
