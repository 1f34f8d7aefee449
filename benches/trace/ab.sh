#!/usr/bin/env bash
# benches/trace/ab.sh - two wprobe binaries, A and B, per traced call of
# `wprobe trace` (its entry and its return), in one run: the check that a
# change to the trace's path made a call no slower (or how much faster).
#
# On benches/trace/calls.c (main calls f(i) N times), for each transport
# and each output (a line per call with -o FILE, and --report):
#   per call = (T(N2) - T(N1)) / (N2 - N1) - the untraced loop's cost per call
# the slope between two call counts, so start-up, arming every function and
# writing the output cancel. T is the median of REPEATS runs; the runs of A
# and B at N1 and N2 are interleaved (A N1, B N1, A N2, B N2, repeated), so
# a change of the machine's load falls on both. Times: wall (the traced
# command's elapsed time) and cpu (user + system of wprobe and the target,
# wait4's rusage: benches/rusage.c). Every run's output is checked for
# exactly N calls of f.
#
# usage: benches/trace/ab.sh A_WPROBE B_WPROBE [REPEATS]
# env:   TRANSPORTS ("ptrace perf"), OUTPUTS ("lines report"),
#        PTRACE_N1 (2000) PTRACE_N2 (12000), PERF_N1 (20000) PERF_N2 (120000),
#        INPROC_N1 (200000) INPROC_N2 (1200000)
# perf needs root (uprobes).
set -euo pipefail
if [ $# -lt 2 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
A=$(realpath "$1"); B=$(realpath "$2"); R=${3:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-trace-ab.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export LC_ALL=C
gcc -O1 -fpatchable-function-entry=5 -o "$WORK/calls" "$ROOT/benches/trace/calls.c"
gcc -O2 -o "$WORK/rusage" "$ROOT/benches/rusage.c"
cd "$WORK"
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# One run: prints "WALL_NS CPU_NS"; checks the calls of f a traced run shows.
m() { # BIN|- TRANSPORT OUTPUT N
  if [ "$1" = - ]; then
    ./rusage ./calls "$4" 3>&1 >/dev/null 2>&1
    return
  fi
  local extra=() n
  if [ "$3" = report ]; then extra=(--report); fi
  ./rusage "$1" trace --transport "$2" "${extra[@]}" -o trace.out -- ./calls "$4" \
    3>&1 >/dev/null 2>err.txt || true
  if [ "$3" = report ]; then
    n=$(awk '$NF == "f" { print $(NF - 1); exit }' trace.out)
  else
    n=$(grep -c '|   f();$' trace.out || true)
  fi
  [ "$n" = "$4" ] || {
    echo "ab: $1 --transport $2 ($3) on $4 calls showed ${n:-no} calls of f" >&2
    cat err.txt >&2
    exit 1
  }
}
slope() { # FILE_N1 FILE_N2 N1 N2 COL
  local t1 t2
  t1=$(awk -v c="$5" '{ print $c }' "$1" | median); t2=$(awk -v c="$5" '{ print $c }' "$2" | median)
  echo $(( (t2 - t1) / ($4 - $3) ))
}
echo "A=$A"
echo "B=$B"
echo "repeats=$R kernel=$(uname -r) cpus=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%Y-%m-%dT%H:%MZ)"
printf "%-8s %-7s %8s %8s %12s %12s %12s %12s %8s %8s\n" transport output N1 N2 \
  "A wall/call" "B wall/call" "A cpu/call" "B cpu/call" "B/A wall" "B/A cpu"
for tr in ${TRANSPORTS:-ptrace perf}; do
  case $tr in
    ptrace) N1=${PTRACE_N1:-2000}; N2=${PTRACE_N2:-12000} ;;
    perf) N1=${PERF_N1:-20000}; N2=${PERF_N2:-120000} ;;
    *) N1=${INPROC_N1:-200000}; N2=${INPROC_N2:-1200000} ;;
  esac
  for out in ${OUTPUTS:-lines report}; do
    : > u1; : > u2; : > a1; : > a2; : > b1; : > b2
    for _ in $(seq "$R"); do
      m - - - "$N1" >> u1; m - - - "$N2" >> u2
      m "$A" "$tr" "$out" "$N1" >> a1; m "$B" "$tr" "$out" "$N1" >> b1
      m "$A" "$tr" "$out" "$N2" >> a2; m "$B" "$tr" "$out" "$N2" >> b2
    done
    uw=$(slope u1 u2 "$N1" "$N2" 1); uc=$(slope u1 u2 "$N1" "$N2" 2)
    aw=$(( $(slope a1 a2 "$N1" "$N2" 1) - uw )); ac=$(( $(slope a1 a2 "$N1" "$N2" 2) - uc ))
    bw=$(( $(slope b1 b2 "$N1" "$N2" 1) - uw )); bc=$(( $(slope b1 b2 "$N1" "$N2" 2) - uc ))
    printf "%-8s %-7s %8d %8d %12d %12d %12d %12d %8s %8s\n" "$tr" "$out" "$N1" "$N2" \
      "$aw" "$bw" "$ac" "$bc" \
      "$(awk -v a="$aw" -v b="$bw" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')" \
      "$(awk -v a="$ac" -v b="$bc" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')"
  done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
