#!/usr/bin/env bash
# Per-hit cost of wprobe's ptrace transport against the minimal one-stop
# ptrace loop (baseline.c), on the same loop target, in one run.
#   usage: benches/ptrace/hit_cost.sh [CALLS] [REPEATS]
# Prints ns per hit for each tracer (traced time minus untraced time,
# divided by the calls; median of REPEATS runs) and the ratio.
set -euo pipefail
cd "$(dirname "$0")"
N=${1:-100000}
R=${2:-5}
OUT=${TMPDIR:-/tmp}/wprobe-hitcost
mkdir -p "$OUT"
gcc -O0 -g -fno-pie -no-pie -fcf-protection=none -fno-omit-frame-pointer -o "$OUT/loop_target" loop_target.c
gcc -O2 -o "$OUT/baseline" baseline.c
W=${WPROBE:-../../target/release/wprobe}
[ -x "$W" ] || (cd ../.. && cargo build --release --locked -p runtime --bin wprobe >&2)
ADDR=$(nm "$OUT/loop_target" | awk '$3 == "hit" { print "0x" $1 }')
cd "$OUT"
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
t() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( e - s )); }
untraced=$(for i in $(seq "$R"); do t ./loop_target "$N"; done | median)
baseline=$(for i in $(seq "$R"); do t ./baseline "$ADDR" ./loop_target "$N"; done | median)
wprobe=$(for i in $(seq "$R"); do t "$W" run "$OLDPWD/trivial.rpn" -- ./loop_target "$N"; done | median)
# The single-step path: every hit steps the original instruction with all other threads stopped.
single=$(for i in $(seq "$R"); do WPROBE_STEP_POLICY=single-step t "$W" run "$OLDPWD/trivial.rpn" -- ./loop_target "$N"; done | median)
per() { echo $(( ($1 - untraced) / N )); }
b=$(per "$baseline"); w=$(per "$wprobe"); s=$(per "$single")
echo "calls=$N repeats=$R kernel=$(uname -r) cpus=$(nproc)"
echo "untraced total: $((untraced / 1000000)) ms"
printf "%-28s %10s %8s\n" tracer ns/hit ratio
printf "%-28s %10d %8s\n" "baseline (minimal ptrace)" "$b" "1.00"
printf "%-28s %10d %8s\n" "wprobe run (ptrace)" "$w" "$(awk -v a="$w" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
printf "%-28s %10d %8s\n" "wprobe single-step path" "$s" "$(awk -v a="$s" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
