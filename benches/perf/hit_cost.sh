#!/usr/bin/env bash
# Per-hit cost of wprobe's perf transport against its peers on this
# machine, in one run, on the same targets:
#   breakpoints (benches/ptrace/loop_target.c, probe on hit()):
#     - wprobe run --transport perf (trivial.rpn: count in a variable, no record)
#     - perf stat -e <the same uprobe> (count only; defined with perf probe)
#     - perf record -e <the same uprobe> (a sample per hit, written to a file)
#     - bpftrace 'uprobe:...:hit { @c = count(); }'
#     (wprobe's ptrace transport on the same target: benches/ptrace/hit_cost.sh)
#   watchpoints (wloop.c, write watchpoint on `watched`):
#     - perf stat -e mem:ADDR:w (the raw perf breakpoint counter)
#     - wprobe run --transport perf (watch.rpn)
#     - wprobe run --transport ptrace (watch.rpn)
# Per hit = (T(N2) - T(N1)) / (N2 - N1): the slope between two call counts
# removes every fixed cost (tool start-up, bpftrace's compilation, arming),
# leaving what each additional hit costs. Wall time of the traced command
# (the target's slowdown) and CPU time (user + system of the tool and its
# children, i.e. including wprobe's handler thread) are both reported;
# medians of REPEATS runs.
# Watchpoint traps cost ten times more than uprobes here, so they use
# WN1/WN2 hits; uprobes use N1/N2 (large enough that the start-up jitter of
# bpftrace, about 1 s, stays small against the difference).
#   usage: benches/perf/hit_cost.sh [N1] [N2] [REPEATS] [WN1] [WN2]
set -euo pipefail
cd "$(dirname "$0")"
HERE=$PWD
N1=${1:-100000}
N2=${2:-600000}
R=${3:-5}
WN1=${4:-20000}
WN2=${5:-120000}
OUT=${TMPDIR:-/tmp}/wprobe-perfcost
mkdir -p "$OUT"
gcc -O0 -g -fno-pie -no-pie -fcf-protection=none -fno-omit-frame-pointer -o "$OUT/loop_target" ../ptrace/loop_target.c
gcc -O0 -g -fno-pie -no-pie -o "$OUT/wloop" wloop.c
W=${WPROBE:-../../target/release/wprobe}
[ -x "$W" ] || (cd ../.. && cargo build --release --locked -p runtime --bin wprobe >&2)
W=$(cd "$(dirname "$W")" && pwd)/$(basename "$W")
command -v bpftrace >/dev/null || apt-get install -y bpftrace >/dev/null 2>&1 || true
command -v perf >/dev/null || apt-get install -y linux-perf >/dev/null 2>&1 || true
cd "$OUT"
WADDR=$(nm wloop | awk '$3 == "watched" { print "0x" $1 }')
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# One measurement: "wall_ns cpu_ns".
m() {
  local f; f=$(mktemp)
  /usr/bin/time -f "%e %U %S" -o "$f" "$@" >/dev/null 2>&1 || true
  awk '{ printf "%.0f %.0f\n", $1 * 1e9, ($2 + $3) * 1e9 }' "$f"; rm -f "$f"
}
# slope TOOL...: "wall_ns/hit cpu_ns/hit"; the tool's arguments end with the
# target; N is appended.
slope() {
  local a b
  a=$(for i in $(seq "$R"); do m "$@" "$N1"; done)
  b=$(for i in $(seq "$R"); do m "$@" "$N2"; done)
  awk -v w1="$(echo "$a" | awk '{print $1}' | median)" -v c1="$(echo "$a" | awk '{print $2}' | median)" \
      -v w2="$(echo "$b" | awk '{print $1}' | median)" -v c2="$(echo "$b" | awk '{print $2}' | median)" \
      -v d=$((N2 - N1)) 'BEGIN { printf "%d %d\n", (w2 - w1) / d, (c2 - c1) / d }'
}
row() { # name "w c" ref_w ref_c
  local w c; read -r w c <<<"$2"
  printf "%-34s %12d %12d %9s %9s\n" "$1" "$w" "$c" \
    "$(awk -v a="$w" -v b="$3" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
    "$(awk -v a="$c" -v b="$4" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')"
}
echo "N1=$N1 N2=$N2 repeats=$R (medians) kernel=$(uname -r) cpus=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg)"
UN=$(slope ./loop_target)
WP=$(slope "$W" run "$HERE/../ptrace/trivial.rpn" --transport perf -- ./loop_target)
PS="" PR="" BT=""
if command -v perf >/dev/null && perf probe -q -x ./loop_target hit 2>/dev/null; then
  EV=$(perf probe -l 2>/dev/null | awk '/loop_target/ && /hit/ { print $1; exit }')
  PS=$(slope perf stat -e "$EV" -- ./loop_target)
  PR=$(slope perf record -q -o "$OUT/perf.data" -e "$EV" -- ./loop_target)
  rm -f "$OUT"/perf.data*
  perf probe -q -d "$EV" >/dev/null 2>&1 || true
fi
if command -v bpftrace >/dev/null; then
  BT=$(slope sh -c 'exec bpftrace -e "uprobe:$1:hit { @c = count(); }" -c "$1 $2"' sh "$OUT/loop_target")
fi
read -r bw bc <<<"${BT:-0 0}"
echo "breakpoints (probe on hit(); untraced loop: $(echo "$UN" | cut -d' ' -f1) ns/call)"
printf "%-34s %12s %12s %9s %9s\n" tracer "wall ns/hit" "cpu ns/hit" "wall ×bt" "cpu ×bt"
[ -n "$BT" ] && row "bpftrace uprobe count()" "$BT" "$bw" "$bc"
[ -n "$PS" ] && row "perf stat -e uprobe (count only)" "$PS" "$bw" "$bc"
[ -n "$PR" ] && row "perf record -e uprobe (samples)" "$PR" "$bw" "$bc"
row "wprobe --transport perf" "$WP" "$bw" "$bc"
N1=$WN1 N2=$WN2
WR=$(slope perf stat -e "mem:$WADDR:w" -- ./wloop)
WW=$(slope "$W" run "$HERE/watch.rpn" --transport perf -- ./wloop)
WX=$(slope "$W" run "$HERE/watch.rpn" -- ./wloop)
read -r rw rc <<<"$WR"
echo "watchpoints (write watchpoint on \`watched\`; N1=$WN1 N2=$WN2)"
printf "%-34s %12s %12s %9s %9s\n" tracer "wall ns/hit" "cpu ns/hit" "wall ×raw" "cpu ×raw"
row "perf stat -e mem:ADDR:w (raw)" "$WR" "$rw" "$rc"
row "wprobe --transport perf" "$WW" "$rw" "$rc"
row "wprobe --transport ptrace" "$WX" "$rw" "$rc"
