#!/usr/bin/env bash
# benches/trace/python.sh - a real interpreter traced whole: Debian's
# /usr/bin/python3.11 running a short CPU-bound script, untraced, under
# `uftrace record -P .` and under `wprobe trace --transport inproc --report`.
# Wall time of the whole command, median of REPEATS runs, the tools' runs
# interleaved; the calls each recorded (uftrace's from `uftrace report`,
# wprobe's from its summary line), the overhead per recorded call ((traced
# - untraced) / calls) and its ratio to uftrace's; wprobe's ptrace stops at
# trap sites (WPROBE_DEBUG's count, from one more run) and whether the
# script's output is the untraced one.
#
# usage: benches/trace/python.sh [REPEATS] [N]   (the script sums i*i for i < N)
# env:   WPROBE (default target/release/wprobe; several binaries separated
#        by spaces are each measured, their runs interleaved with the
#        others'), PYTHON (/usr/bin/python3.11)
set -euo pipefail
R=${1:-3}
N=${2:-300000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
read -r -a WS <<< "${WPROBE:-$ROOT/target/release/wprobe}"
P=${PYTHON:-/usr/bin/python3.11}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-python.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
S="print(sum(i*i for i in range($N)))"
t() { local s e; s=$(date +%s%N); "$@" >"$WORK/out" 2>"$WORK/err" || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
: > "$WORK/u"; : > "$WORK/f"
for k in "${!WS[@]}"; do : > "$WORK/w$k"; echo yes > "$WORK/same$k"; done
want=$("$P" -c "$S")
for _ in $(seq "$R"); do
  t "$P" -c "$S" >> "$WORK/u"
  (cd "$WORK" && t uftrace record -P . -d "$WORK/uftrace.data" "$P" -c "$S") >> "$WORK/f"
  for k in "${!WS[@]}"; do
    t "${WS[$k]}" trace --transport inproc --report -o "$WORK/report" -- "$P" -c "$S" >> "$WORK/w$k"
    [ "$(cat "$WORK/out")" = "$want" ] || echo no > "$WORK/same$k"
    sed -n 's/.*trace: \([0-9]*\) calls.*/\1/p' "$WORK/err" > "$WORK/calls$k"
  done
done
fcalls=$(uftrace report -d "$WORK/uftrace.data" 2>/dev/null | awk 'NR > 2 { gsub(/,/, "", $5); n += $5 } END { print n }')
u=$(median < "$WORK/u"); f=$(median < "$WORK/f")
echo "python: $P -c '$S', REPEATS=$R, medians; wprobe $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-34s %8s %10s %12s %9s\n" "" "wall ms" "calls" "ns per call" "×uftrace"
printf "%-34s %8s %10s %12s %9s\n" "untraced" "$u" "-" "-" "-"
fpc=$(awk -v a="$f" -v u="$u" -v n="$fcalls" 'BEGIN { printf "%.0f", (a - u) * 1e6 / n }')
printf "%-34s %8s %10s %12s %9s\n" "uftrace record -P ." "$f" "$fcalls" "$fpc" "1.0"
for k in "${!WS[@]}"; do
  W=${WS[$k]}
  w=$(median < "$WORK/w$k"); wcalls=$(cat "$WORK/calls$k")
  wpc=$(awk -v a="$w" -v u="$u" -v n="$wcalls" 'BEGIN { printf "%.0f", (a - u) * 1e6 / n }')
  [ "${#WS[@]}" -gt 1 ] && echo "$W"
  printf "%-34s %8s %10s %12s %9s\n" "wprobe trace --transport inproc" "$w" "$wcalls" "$wpc" \
    "$(awk -v a="$wpc" -v b="$fpc" 'BEGIN { printf "%.2f", a / b }')"
  WPROBE_DEBUG=1 "$W" trace --transport inproc --report -o "$WORK/report" -- "$P" -c "$S" >/dev/null 2>"$WORK/dbg" || true
  stops=$(sed -n 's/.*debug: process [0-9]*: \([0-9]*\) ptrace stops at trap sites.*/\1/p' "$WORK/dbg")
  echo "wprobe: ${stops:-0} ptrace stops at trap sites (one more run, WPROBE_DEBUG=1); output as untraced: $(cat "$WORK/same$k")"
done
