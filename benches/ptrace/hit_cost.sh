#!/usr/bin/env bash
# Per-hit cost of wprobe's ptrace transport against the minimal one-stop
# ptrace loop (baseline.c), on the same loop target, in one run.
#   usage: benches/ptrace/hit_cost.sh [CALLS] [REPEATS]
# Prints ns per hit for each tracer (traced time minus untraced time,
# divided by the calls; median of REPEATS runs) and the ratio, for a
# handler that only counts (trivial.rpn) and one that logs (logs.rpn).
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
# One measurement: "wall_ns cpu_ns" (cpu = user + system time of the tracer and its children).
m() {
  local f; f=$(mktemp)
  /usr/bin/time -f "%e %U %S" -o "$f" "$@" >/dev/null 2>&1 || true
  awk '{ printf "%.0f %.0f\n", $1 * 1e9, ($2 + $3) * 1e9 }' "$f"; rm -f "$f"
}
series() { for i in $(seq "$R"); do m "$@"; done; }
col() { awk -v c="$1" '{ print $c }' | median; }
U=$(series ./loop_target "$N"); B=$(series ./baseline "$ADDR" ./loop_target "$N")
W1=$(series "$W" run "$OLDPWD/trivial.rpn" -- ./loop_target "$N")
L1=$(series "$W" run "$OLDPWD/logs.rpn" -o /dev/null -- ./loop_target "$N")
S1=$(WPROBE_STEP_POLICY=single-step series "$W" run "$OLDPWD/trivial.rpn" -- ./loop_target "$N")
uw=$(echo "$U" | col 1); uc=$(echo "$U" | col 2)
per() { echo $(( ($1 - $2) / N )); }
row() {
  local name=$1 data=$2 w c
  w=$(per "$(echo "$data" | col 1)" "$uw"); c=$(per "$(echo "$data" | col 2)" "$uc")
  printf "%-28s %12d %12d %10s %10s\n" "$name" "$w" "$c" \
    "$(awk -v a="$w" -v b="$bw" 'BEGIN { printf "%.2f", a / b }')" "$(awk -v a="$c" -v b="$bc" 'BEGIN { printf "%.2f", a / b }')"
}
bw=$(per "$(echo "$B" | col 1)" "$uw"); bc=$(per "$(echo "$B" | col 2)" "$uc")
echo "calls=$N repeats=$R (medians) kernel=$(uname -r) cpus=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg)"
printf "%-28s %12s %12s %10s %10s\n" tracer "wall ns/hit" "cpu ns/hit" "wall ×" "cpu ×"
row "baseline (minimal ptrace)" "$B"
row "wprobe run (ptrace)" "$W1"
row "wprobe run, logging handler" "$L1"
row "wprobe single-step path" "$S1"
