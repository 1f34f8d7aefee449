#!/usr/bin/env bash
# benches/trace/percall.sh - what one traced call costs (its entry and its
# return recorded), `wprobe trace --transport inproc --report` against
# `uftrace record -P .`, on two shapes and two builds, in one run:
#
#   fib   benches/trace/fib.c, double recursion (fib 25 and fib 29)
#   loop  benches/trace/calls.c, main calling f N times (1,000,000 and
#         6,000,000)
#
# each built with gcc -O0 and -O2 (and -fpatchable-function-entry=5, the
# nops uftrace's dynamic patching needs). Per call = (T(N2) - T(N1)) /
# (C(N2) - C(N1)) - the untraced program's cost per call: the slope between
# two call counts C (the calls of fib or f in uftrace's report of a run
# of each count: fib's are 2 fib(N+1) - 1 at -O0, fewer at -O2), so the fixed costs (start-up,
# arming, the report) cancel. T is the median of REPEATS runs of wall time
# (and of user + system CPU time of the tool and the target: wait4's
# rusage, benches/rusage.c); every tool's N1 and N2 runs are interleaved
# with the others' in each round, so a change of load hits them alike.
#
# usage: benches/trace/percall.sh [REPEATS]
# env:   REPEATS (7); WPROBE (target/release/wprobe; several binaries
#        separated by spaces are each measured, interleaved, for an A/B);
#        SHAPES (default "fib0 fib2 loop0 loop2"); NO_REPORT=1 (a line
#        per call, the default view, written to a file, instead of
#        --report: wprobe's counts are then not checked); WPROBE_ARGS
#        (more arguments of wprobe trace)
# Needs gcc and uftrace (scripts/setup.sh installs them).
set -euo pipefail

if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
R=${1:-${REPEATS:-7}}
read -r -a WS <<< "${WPROBE:-${CARGO_TARGET_DIR:-$ROOT/target}/release/wprobe}"
read -r -a SH <<< "${SHAPES:-fib0 fib2 loop0 loop2}"
REPORT=--report
[ -n "${NO_REPORT:-}" ] && REPORT=
read -r -a XARGS <<< "${WPROBE_ARGS:-}"
export LC_ALL=C
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-percall.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'echo "percall: interrupted" >&2; exit 130' INT
for w in "${WS[@]}"; do
  [ -x "$w" ] || { echo "percall: $w: no such binary (cargo build --release -p runtime)" >&2; exit 1; }
done
for o in 0 2; do
  gcc -O$o -fpatchable-function-entry=5 -o "$WORK/fib$o" "$ROOT/benches/trace/fib.c"
  gcc -O$o -fpatchable-function-entry=5 -o "$WORK/loop$o" "$ROOT/benches/trace/calls.c"
done
gcc -O2 -o "$WORK/rusage" "$ROOT/benches/rusage.c"
cd "$WORK"

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# m FILE CMD...: appends "wall_ns cpu_ns" of CMD to FILE.
m() { local f=$1; shift; "$WORK/rusage" "$@" 3>>"$f" >/dev/null 2>&1 || true; }
args() { case $1 in fib*) echo "25 29" ;; loop*) echo "1000000 6000000" ;; esac; }
fname() { case $1 in fib*) echo fib ;; loop*) echo f ;; esac; }
# Calls of the shape's function (fib, f) in uftrace's report of the last run.
ucalls() { uftrace report -d "$WORK/ud" -f call 2>/dev/null | awk -v f="$1" '$2 == f { print $1 }'; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "percall: ${SH[*]}, REPEATS=$R (a few minutes)..." >&2
for s in "${SH[@]}"; do
  read -r a b <<< "$(args "$s")"
  T=$WORK/$s
  # The calls of each count, from uftrace (checked against wprobe below).
  for n in "$a" "$b"; do
    uftrace record -d "$WORK/ud" -P . "$T" "$n" >/dev/null 2>&1 || true
    ucalls "$(fname "$s")" > "$WORK/$s.calls.$n"
  done
  for ((i = 0; i < R; i++)); do
    for n in "$a" "$b"; do
      m "$WORK/$s.un.$n" "$T" "$n"
      m "$WORK/$s.uf.$n" uftrace record -d "$WORK/ud" -P . "$T" "$n"
      for k in "${!WS[@]}"; do
        m "$WORK/$s.w$k.$n" "${WS[$k]}" trace --transport inproc $REPORT "${XARGS[@]}" -o "$WORK/w$k.out" -- "$T" "$n"
      done
    done
  done
  # The last run of each binary (N2) counted the calls uftrace counted.
  for k in "${!WS[@]}"; do
    if [ -n "$REPORT" ] && ! grep -Eq " $(cat "$WORK/$s.calls.$b")  $(fname "$s")\$" "$WORK/w$k.out"; then
      echo "! $s: wprobe (w$k) did not report $(cat "$WORK/$s.calls.$b") calls of $(fname "$s")" >> "$WORK/warn"
    fi
  done
done

echo "machine: $(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores; kernel $(uname -r); load $LOAD0 (start) $(cut -d' ' -f1-3 /proc/loadavg) (end)"
echo "REPEATS=$R, medians, ${REPORT:-a line per call} ${XARGS[*]}; $(date -u +%Y-%m-%dT%H:%MZ)"
for k in "${!WS[@]}"; do echo "w$k = ${WS[$k]} ($("${WS[$k]}" --version 2>/dev/null | head -1))"; done
printf "%-6s %-22s %10s %10s %12s %12s %9s %9s\n" shape tool calls1 calls2 "wall ns/call" "cpu ns/call" "wall ×uf" "cpu ×uf"
for s in "${SH[@]}"; do
  read -r a b <<< "$(args "$s")"
  c1=$(cat "$WORK/$s.calls.$a") c2=$(cat "$WORK/$s.calls.$b")
  slope() {
    awk -v w1="$(awk '{ print $1 }' "$WORK/$s.$1.$a" | median)" -v w2="$(awk '{ print $1 }' "$WORK/$s.$1.$b" | median)" \
        -v c1="$(awk '{ print $2 }' "$WORK/$s.$1.$a" | median)" -v c2="$(awk '{ print $2 }' "$WORK/$s.$1.$b" | median)" \
        -v d=$((c2 - c1)) 'BEGIN { printf "%.1f %.1f\n", (w2 - w1) / d, (c2 - c1) / d }'
  }
  read -r uw uc <<< "$(slope un)"
  read -r fw fc <<< "$(slope uf)"
  fw=$(awk -v a="$fw" -v b="$uw" 'BEGIN { printf "%.1f", a - b }'); fc=$(awk -v a="$fc" -v b="$uc" 'BEGIN { printf "%.1f", a - b }')
  printf "%-6s %-22s %10s %10s %12s %12s %9s %9s\n" "$s" "untraced" "$c1" "$c2" "$uw" "$uc" - -
  printf "%-6s %-22s %10s %10s %12s %12s %9s %9s\n" "$s" "uftrace record -P ." "$c1" "$c2" "$fw" "$fc" 1.00 1.00
  for k in "${!WS[@]}"; do
    read -r ww wc <<< "$(slope "w$k")"
    ww=$(awk -v a="$ww" -v b="$uw" 'BEGIN { printf "%.1f", a - b }'); wc=$(awk -v a="$wc" -v b="$uc" 'BEGIN { printf "%.1f", a - b }')
    printf "%-6s %-22s %10s %10s %12s %12s %9s %9s\n" "$s" "wprobe trace (w$k)" "$c1" "$c2" "$ww" "$wc" \
      "$(awk -v a="$ww" -v b="$fw" 'BEGIN { printf "%.2f", a / b }')" "$(awk -v a="$wc" -v b="$fc" 'BEGIN { printf "%.2f", a / b }')"
  done
done
[ -f "$WORK/warn" ] && cat "$WORK/warn"
exit 0
